"""benchmarks/moe_mlp.py without a GPU: its DeepSeek-V3 expert-MLP grids (whole 128-row expert blocks at prefill,
the intermediate size a multiple of 128 as the SwiGLU GEMM needs) and a clean refusal on a machine without a GPU."""
import os
import subprocess
import sys

from benchmarks import moe_mlp

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_case_grids():
    assert moe_mlp.INTER % 128 == 0 and moe_mlp.HIDDEN % 128 == 0
    assert all(t * moe_mlp.TOPK % (128 * moe_mlp.EXPERTS) == 0 for t in moe_mlp.PREFILL_TOKENS)
    assert min(moe_mlp.PREFILL_TOKENS) == 4096 and max(moe_mlp.PREFILL_TOKENS) == 32768
    assert min(moe_mlp.DECODE_EXPECTED_M) == 1 and max(moe_mlp.DECODE_EXPECTED_M) == 32


def test_command_line_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-m", "benchmarks.moe_mlp", "--suites", "decode"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "needs a CUDA GPU" in run.stderr
