"""torch.distributed ranks sharing one fresh kernel cache directory, each running every public GEMM
(tools/dist_check.py): two NCCL ranks on two GPUs, and two gloo ranks on one GPU (the shared-cache half of the
check, which a single-GPU machine can run). The cuda:1 tests of single processes are in test_robustness_gpu.py."""
import os
import re
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_two_ranks(tmp_path, problems: int) -> str:
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(tmp_path / "shared_cache"))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "-m", "tools.dist_check", str(problems)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        print(proc.stdout[-20000:], proc.stderr[-8000:])  # shown in the failure report
    assert proc.returncode == 0, "tools/dist_check.py failed (its output is in the captured stdout)"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("world=2 "))
    fields = dict(re.findall(r"([a-z ()]+)=(\S+)", line))
    fields = {k.strip(): v for k, v in fields.items()}
    assert fields["failures (all ranks)"] == "0" and fields["bitwise equal across ranks"] == "True", line
    assert fields["leftovers"] == "0", line
    # From an empty cache every entry is complete and was compiled exactly once over both ranks (and their
    # precompile workers): a kernel compiled twice would make compiles exceed the entries.
    assert int(fields["cache entries"]) > 0 and fields["cache entries"] == fields["complete"], line
    assert fields["compiles (all ranks)"] == fields["cache entries"], line
    return fields["backend"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_nccl_ranks_share_one_cache(tmp_path):
    assert _run_two_ranks(tmp_path, 10) == "nccl"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_two_ranks_on_one_gpu_share_one_cache(tmp_path):
    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs: the NCCL test covers this with one GPU per rank")
    assert _run_two_ranks(tmp_path, 10) == "gloo"
