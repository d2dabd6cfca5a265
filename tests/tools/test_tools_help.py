"""Every Python script in tools/ documents itself: a module docstring with its usage, and --help works without a GPU
(run as the contributors run it, `python -m tools.<name>` from the repo root)."""
import ast
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "tools")) if f.endswith(".py") and f != "__init__.py")


def test_the_expected_scripts_remain():
    assert SCRIPTS == ["dist_check", "gen_wgmma", "gpu_check", "profile_case", "sass", "tune"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_docstring_has_usage(name):
    with open(os.path.join(REPO, "tools", f"{name}.py")) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    assert doc and "Usage" in doc, f"tools/{name}.py: no usage in its docstring"


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_without_gpu(name):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", f"tools.{name}", "--help"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:"), proc.stdout[:200]


def test_no_sys_path_edits():
    for folder in ("tools", "benchmarks"):
        for f in os.listdir(os.path.join(REPO, folder)):
            if f.endswith(".py"):
                with open(os.path.join(REPO, folder, f)) as src:
                    assert "sys.path" not in src.read(), f"{folder}/{f} edits sys.path"


@pytest.mark.parametrize("argv,message", [
    (["tune", "--family", "masked", "4x256"], "expected G:m:n:k for --family masked"),
    (["tune", "--family", "dense", "1x2x3", "--configs", "128"], "expected BMxBN[:STAGES][:mcA|mcB|:ksS]"),
    (["profile_case", "--family", "k_grouped", "1x2x3"], "expected MxNxK:G"),
    (["gpu_check"], "OUTDIR: required"),
])
def test_bad_arguments_exit_with_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", f"tools.{argv[0]}", *argv[1:]], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr.splitlines()[-1], proc.stderr


def test_config_specs():
    from tools.tune import parse_case, parse_config_spec
    assert parse_config_spec("128x160") == (128, 160, 1, True, 0, 1)
    assert parse_config_spec("256x128:6:mcB") == (256, 128, 2, False, 6, 1)
    assert parse_config_spec("64x96:ks4") == (64, 96, 1, True, 0, 4)
    assert parse_case("bf16", "1x2112x7168") == [1, 2112, 7168]
    for bad in ("64x96:ks4:mcA", "64x96:ksx", "64x96:6:7"):
        with pytest.raises(ValueError, match="expected BMxBN"):
            parse_config_spec(bad)
    assert parse_case("k_grouped", "7168x4096x512:8") == [7168, 4096, 512, 8]
    assert parse_case("contiguous", "4:8192:4096:7168") == [4, 8192, 4096, 7168]
    assert parse_case("psum", "4:8192:4096:7168") == [4, 8192, 4096, 7168]
    with pytest.raises(ValueError, match="expected MxNxK for --family dense"):
        parse_case("dense", "1x2x3:4")


def test_einsum_configs():
    """The tuner's einsum grids (no GPU): per-head tiles with A-shared pairs, and the sum over batches as K splits or,
    for an FP32 d, in clusters; every config fits, the heuristic's pick is the runtime's."""
    from deep_gemm.heuristics.sm90 import SMEM_BUDGET
    from tools.tune import einsum_configs
    heads = dict(form="bhd", batches=8, m=4096, n=4096, k=1024, out="bf16")
    picked, make_config, grid, _ = einsum_configs(heads, 132, 1)
    assert (picked.block_m, picked.block_n) == (128, 256)
    cfgs = grid(None, None, None)
    assert cfgs and all(c.smem_size <= SMEM_BUDGET for c in cfgs)
    assert any(c.num_multicast == 2 for c in cfgs) and all(c.block_n % 64 == 0 for c in cfgs)  # MN-major B
    with pytest.raises(ValueError, match="cluster K splits"):
        make_config(128, 128, 1, True, 0, 4)
    bmk = dict(form="bmk", batches=129, m=128, n=384, k=128, out="fp32")
    picked, make_config, grid, source = einsum_configs(bmk, 132, 44)
    assert picked.cluster_k_splits == 16  # a short walk sums in clusters (6 tiles: 16-CTA clusters all fit)
    cfgs = grid(None, None, None)
    assert {c.cluster_k_splits for c in cfgs} == {1, 2, 4, 8, 16}
    assert source(make_config(64, 64, 1, True, 0, 8)).function.endswith("bmn_bnk_mn_gemm_impl")
    with pytest.raises(ValueError, match="for a bf16 d"):
        einsum_configs(dict(bmk, out="bf16"), 132, 44)[1](64, 64, 1, True, 0, 8)
