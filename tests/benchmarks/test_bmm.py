"""benchmarks/bmm.py without a GPU: the command line, the issue's shape list, the batched inputs and their
dequantisation, and the summary of fake rows."""
import os
import subprocess
import sys

import pytest
import torch

from benchmarks import bmm
from deep_gemm.testing import calc_diff

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_command_line_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bmm", "--help"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--seed-dir" in proc.stdout and "--no-host" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "benchmarks.bmm", "--shapes", "16x1x512"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--shapes: expected BxMxNxK" in bad.stderr


def test_shapes_are_the_issues_34():
    shapes = bmm.issue_shapes()
    mla = {(b, m, n, k) for b in (16, 128) for n, k in ((512, 128), (128, 512))
           for m in (1, 4, 16, 64, 128, 512, 2048, 4096)}
    assert len(shapes) == len(set(shapes)) == 34
    assert set(shapes) == mla | {(8, 4096, 4096, 4096), (4, 2048, 7168, 2048)}
    assert {s for s in shapes if bmm.is_mla(*s)} == mla
    assert bmm.parse_args([]).shapes == shapes
    assert bmm.parse_args(["--smoke"]).shapes == bmm.SMOKE
    assert bmm.parse_args(["--shapes", "2x3x256x128"]).shapes == [(2, 3, 256, 128)]


@pytest.mark.parametrize("b,m,n,k", [(2, 3, 256, 128), (3, 5, 136, 200)])  # one cast of stacked rows / per batch
def test_inputs_have_the_bmm_layouts_and_dequantise_back(b, m, n, k):
    torch.manual_seed(0)
    x8, xs, y8, ys = bmm.make_inputs(b, m, n, k, device="cpu")
    kb, nb = (k + 127) // 128, (n + 127) // 128
    assert x8.shape == (b, m, k) and y8.shape == (b, n, k) and x8.dtype == y8.dtype == torch.float8_e4m3fn
    assert xs.shape == (b, m, kb) and ys.shape == (b, nb, kb) and xs.is_contiguous() and ys.is_contiguous()
    xd, yd = bmm.dequant(x8, xs, y8, ys)
    assert xd.shape == x8.shape and yd.shape == y8.shape
    # each batch dequantises like the 2-D helpers would
    from deep_gemm.testing import dequant_per_block, dequant_per_token
    for i in range(b):
        assert torch.equal(xd[i], dequant_per_token(x8[i], xs[i]))
        assert torch.equal(yd[i], dequant_per_block(y8[i], ys[i]))
    assert calc_diff(xd, xd.bfloat16().float()) < 1e-4


def test_summary_of_fake_rows():
    def row(b, m, n, k, ours, seed, torch_us, diff=1e-6):
        return dict(b=b, m=m, n=n, k=k, mla=bmm.is_mla(b, m, n, k), ours_us=ours, ours_diff=diff, ours_nan=False,
                    ours_tbps=2.0 + m, vs_seed=seed / ours, vs_torch=torch_us / ours)
    rows = [row(128, 1, 512, 128, 10, 20, 30), row(128, 64, 128, 512, 10, 8, 12, diff=2e-5),
            row(8, 4096, 4096, 4096, 100, 200, 100)]
    s = bmm.summarize(rows)
    assert s["geomean_vs_seed"] == pytest.approx((2.0 * 0.8 * 2.0) ** (1 / 3))
    assert (s["min_vs_seed"], s["min_vs_seed_shape"]) == (0.8, "128x64x128x512")
    assert s["min_tbps_b128_m16"] == 3.0
    assert (s["min_vs_torch_mla"], s["min_vs_torch_mla_shape"]) == (1.2, "128x64x128x512")
    assert s["ours_bad_diff"] == ["128x64x128x512"] and s["ours_max_diff"] == 2e-5
