"""GPU correctness of the attention-indexer ops on Hopper: `fp8_gemm_nt_skip_head_mid` at DeepGEMM test_attention's
shapes and ragged head splits, the skipped middles left untouched (tests/gemm_cases.py's builder and checker: the
dequantised FP32 and BF16 references, poisoned output and guard bands), bitwise reruns. Skipped without sm_90."""
import pytest
import torch

from gemm_cases import build_skip_head_mid

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m", [1, 128, 4096])
@pytest.mark.parametrize("n,k", [(32768, 512), (8192, 512)])
def test_deepgemm_skip_head_mid_shapes(m, n, k):
    left, mid, right = 128, 64, 128   # DeepGEMM's test_attention
    case = build_skip_head_mid(dict(m=m, heads=n // (left + right), left=left, mid=mid, right=right, k=k),
                               torch.device("cuda"), m)
    case.run()
    case.check()
    first = case.guarded.bits()
    case.reset()
    case.run()
    case.check()
    assert torch.equal(first, case.guarded.bits()), "not bitwise reproducible"


@pytest.mark.parametrize("heads,left,mid,right,m,k", [(3, 48, 8, 16, 77, 1000), (5, 16, 0, 112, 300, 128),
                                                      (2, 64, 200, 64, 1, 7168), (17, 32, 24, 96, 129, 200)])
def test_ragged_head_splits(heads, left, mid, right, m, k):
    case = build_skip_head_mid(dict(m=m, heads=heads, left=left, mid=mid, right=right, k=k), torch.device("cuda"), 3)
    case.run()
    case.check()
