"""benchmarks/fp8_out.py without a GPU: its case grids (DeepSeek-V3's shapes, n a multiple of 16 as the FP8 d needs)
and a clean refusal on a machine without a GPU."""
import os
import subprocess
import sys

from benchmarks import fp8_out

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_case_grids():
    dense = fp8_out.dense_cases()
    assert len(dense) == 12 and all(n % 16 == 0 and k > 0 for _, n, k in dense)
    for suite in ("contiguous", "masked"):
        cases = fp8_out.grouped_cases(suite)
        assert cases and all(n % 16 == 0 for _, _, n, _ in cases)
    assert all(rows % 128 == 0 for _, rows, _, _ in fp8_out.grouped_cases("contiguous"))  # whole M blocks per expert


def test_command_line_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-m", "benchmarks.fp8_out", "--suites", "dense"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "needs a CUDA GPU" in run.stderr
