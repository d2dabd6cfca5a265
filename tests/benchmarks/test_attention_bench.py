"""benchmarks/attention.py without a GPU: the case grids are test_attention's SM90 ones (192 prefill, 24 paged),
sampling is deterministic per suite, and the command line refuses cleanly."""
import os
import subprocess
import sys

from benchmarks import attention

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_case_grids():
    prefill, paged = attention.prefill_cases(), attention.paged_cases()
    assert len(prefill) == 192 and len(set(prefill)) == 192
    assert len(paged) == 24 and all(b * avg <= 32 * 1024 * 1024 for _, b, _, _, avg in paged)
    picked = attention.sample("prefill", prefill, 8)
    assert picked == attention.sample("prefill", prefill, 8) and len(picked) == 8
    assert attention.sample("paged", paged, None) == paged


def test_command_line_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-m", "benchmarks.attention", "--suites", "paged"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "needs a CUDA GPU" in run.stderr
