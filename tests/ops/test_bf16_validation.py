"""Input validation of the dense BF16 GEMMs (deep_gemm/ops/bf16.py, deep_gemm/families/sm90_bf16_gemm.py): every
check that runs before a CUDA device is needed, on CPU tensors. Each error names the argument."""
import pytest
import torch

import deep_gemm
from deep_gemm.families.sm90_bf16_gemm import operand_layout

BF16 = torch.bfloat16


def args(m=64, n=64, k=128, out=BF16):
    return torch.zeros((m, k), dtype=BF16), torch.zeros((n, k), dtype=BF16), torch.zeros((m, n), dtype=out)


@pytest.mark.parametrize("change,exc,match", [
    (dict(a=torch.zeros((64, 128), dtype=torch.float16)), TypeError, "a must have dtype torch.bfloat16"),
    (dict(b=torch.zeros((64, 128))), TypeError, "b must have dtype torch.bfloat16"),
    (dict(d=torch.zeros((64, 64), dtype=torch.float16)), TypeError, "d must have dtype"),
    (dict(b=torch.zeros((64, 64), dtype=BF16)), ValueError, r"b must have shape \(n, 128\)"),
    (dict(d=torch.zeros((64, 32), dtype=BF16)), ValueError, r"d must have shape \(64, 64\)"),
    (dict(a=torch.zeros((64,), dtype=BF16)), ValueError, "a must be 2-D"),
    (dict(), ValueError, "a must be a CUDA tensor"),
])
def test_bad_arguments_name_the_argument(change, exc, match):
    a, b, d = args()
    call = {**dict(a=a, b=b, d=d), **change}
    with pytest.raises(exc, match=match):
        deep_gemm.bf16_gemm_nt(call["a"], call["b"], call["d"])


def test_c_must_match_d():
    a, b, d = args()
    with pytest.raises(ValueError, match="c must have d's dtype and shape"):
        deep_gemm.bf16_gemm_nt(a, b, d, torch.zeros((64, 64)))
    with pytest.raises(TypeError, match="compiled_dims must be a str"):
        deep_gemm.bf16_gemm_nt(a, b, d, None, 3)
    with pytest.raises(ValueError, match="a must be 2-D"):
        deep_gemm.bf16_gemm_tn(torch.zeros((4,), dtype=BF16), b, d)


def test_operand_layouts_from_strides():
    x = torch.zeros((64, 128), dtype=BF16)
    assert operand_layout(x, "a", "m") == (False, 128)          # K-major [m, k]
    assert operand_layout(x.t().contiguous().t(), "a", "m") == (True, 64)  # MN-major: a transposed [k, m]
    assert operand_layout(torch.zeros((1, 100), dtype=BF16)[:, :36], "a", "m") == (False, 40)  # one row: any stride
    with pytest.raises(ValueError, match="unit stride along k"):
        operand_layout(torch.zeros((64, 256), dtype=BF16)[:, ::2], "a", "m")
    with pytest.raises(ValueError, match="a's row stride is 100 elements"):
        operand_layout(torch.zeros((64, 100), dtype=BF16), "a", "m")
    with pytest.raises(ValueError, match="b's k stride is 60 elements"):
        operand_layout(torch.zeros((128, 60), dtype=BF16).t(), "b", "n")


def test_k_grouped_arguments():
    a, b = torch.zeros((256, 64), dtype=BF16), torch.zeros((256, 32), dtype=BF16)
    d, layout = torch.zeros((2, 64, 32)), torch.zeros((2,), dtype=torch.int32)
    call = deep_gemm.k_grouped_bf16_gemm_tn_contiguous
    with pytest.raises(ValueError, match="psum k-grouped layout needs SM100"):
        call(a, b, d, [128, 128], layout, use_psum_layout=True)
    with pytest.raises(ValueError, match="one entry per group"):
        call(a, b, d, [256], layout)
    with pytest.raises(ValueError, match=r"ks_cpu\[1\] must be an int >= 0"):
        call(a, b, d, [128, -1], layout)
    with pytest.raises(ValueError, match=r"shapes \(384, 64\)"):
        call(a, b, d, [128, 256], layout)
    with pytest.raises(ValueError, match="grouped_layout must be an int32"):
        call(a, b, d, [128, 128], layout.long())
    with pytest.raises(ValueError, match="c must have d's dtype"):
        call(a, b, d, [128, 128], layout, torch.zeros((2, 64, 32), dtype=BF16))
    with pytest.raises(TypeError, match="a must have dtype torch.bfloat16"):  # checked even when every group is empty
        call(a.half(), b, d, [256, 0], layout)
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):  # reaches the dense GEMM's checks per group
        call(a, b, d, [128, 128], layout)
