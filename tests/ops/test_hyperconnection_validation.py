"""Input validation of `tf32_hc_prenorm_gemm` (deep_gemm/families/sm90_tf32_hc_prenorm.py): the checks that run before
a CUDA device is needed, on CPU tensors. Each error names the argument."""
import pytest
import torch

import deep_gemm


def args(m=64, n=24, k=128, splits=None):
    lead = () if splits is None else (splits,)
    return (torch.zeros((m, k), dtype=torch.bfloat16), torch.zeros((n, k)), torch.zeros(lead + (m, n)),
            torch.zeros(lead + (m,)))


@pytest.mark.parametrize("change,splits,exc,match", [
    (dict(a=torch.zeros((64, 128))), None, TypeError, "a must have dtype torch.bfloat16"),
    (dict(b=torch.zeros((24, 128), dtype=torch.bfloat16)), None, TypeError, "b must have dtype torch.float32"),
    (dict(b=torch.zeros((24, 64))), None, ValueError, r"b must have shape \(n, 128\)"),
    (dict(d=torch.zeros((64, 16))), None, ValueError, r"d must have shape \(64, 24\)"),
    (dict(d=torch.zeros((64, 24))), 4, ValueError, "d must be 3-D"),
    (dict(sqr_sum=torch.zeros((63,))), None, ValueError, r"sqr_sum must have shape \(64,\)"),
    (dict(b=torch.zeros((40, 128)), d=torch.zeros((64, 40))), None, ValueError, "b has n = 40 rows"),
    (dict(), None, ValueError, "a must be a CUDA tensor"),
])
def test_bad_arguments_name_the_argument(change, splits, exc, match):
    a, b, d, s = args(splits=splits)
    call = {**dict(a=a, b=b, d=d, sqr_sum=s), **change}
    with pytest.raises(exc, match=match):
        deep_gemm.tf32_hc_prenorm_gemm(call["a"], call["b"], call["d"], call["sqr_sum"], num_splits=splits)


@pytest.mark.parametrize("splits", [0, -1, 2.0, True])
def test_num_splits_must_be_a_positive_int(splits):
    with pytest.raises(ValueError, match="num_splits must be None or an int >= 1"):
        deep_gemm.tf32_hc_prenorm_gemm(*args(), num_splits=splits)
