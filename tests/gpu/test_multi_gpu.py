"""Two NCCL ranks (one process per GPU) sharing one fresh kernel cache directory, each running every public GEMM
(tools/dist_check.py). Needs two CUDA devices; the cuda:1 tests of single processes are in test_robustness_gpu.py."""
import os
import subprocess
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_two_nccl_ranks_share_one_cache(tmp_path):
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(tmp_path / "shared_cache"))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           os.path.join(REPO, "tools", "dist_check.py"), "10"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    assert "failures (all ranks)=0 bitwise equal across ranks=True" in proc.stdout, proc.stdout[-2000:]
    assert "leftovers=0" in proc.stdout
