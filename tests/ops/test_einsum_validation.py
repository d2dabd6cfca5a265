"""Input validation of `einsum` and `fp8_einsum` (deep_gemm/ops/einsum.py, the BF16 family's batched variants): the
checks that run before a CUDA device is needed, on CPU tensors. Each error names the argument."""
import pytest
import torch

import deep_gemm

BF16 = torch.bfloat16


def _z(*shape, dtype=BF16):
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("expr,a,b,d,c,exc,match", [
    ("bmk,bnk->nm", _z(2, 64, 64), _z(2, 64, 64), _z(64, 64), None, ValueError, "expr must be one of"),
    ("bmk,bnk->mn", _z(2, 64, 64, dtype=torch.float16), _z(2, 64, 64), _z(64, 64), None, TypeError,
     "a must have dtype torch.bfloat16"),
    ("bmk,bnk->mn", _z(2, 64, 64), _z(64, 64), _z(64, 64), None, ValueError, "b must be 3-D"),
    ("bmk,bnk->mn", _z(2, 64, 64), _z(2, 64, 64), _z(64, 64, dtype=torch.int32), None, TypeError,
     "d must have dtype torch.float32 or torch.bfloat16"),
    ("bmk,bnk->mn", _z(2, 64, 64), _z(2, 32, 64), _z(64, 64), None, ValueError, r"d must have shape \(64, 32\)"),
    ("bmk,bnk->mn", _z(2, 64, 64), _z(2, 64, 64), _z(64, 64, dtype=torch.float32), _z(64, 64), ValueError,
     "c must be None or a tensor of d's dtype"),
    ("bmk,bnk->mn", _z(2, 64, 64), _z(2, 64, 64), _z(64, 64), None, ValueError, "a must be a CUDA tensor"),
    ("bhr,hdr->bhd", _z(4, 2, 64), _z(2, 64, 64), _z(4, 2, 64), _z(4, 2, 64), ValueError,
     "takes no accumulator"),
    ("bhr,hdr->bhd", _z(4, 2, 64), _z(2, 64, 64), _z(4, 2, 64), None, ValueError, "a must be a CUDA tensor"),
    ("bhr,hdr->bhd", _z(4, 2, 64), _z(3, 64, 64), _z(4, 2, 64), None, ValueError, r"b must have shape \(2, n, 64\)"),
    ("bhd,hdr->bhr", _z(4, 2, 64), _z(2, 64, 32), _z(4, 2, 64), None, ValueError, r"d must have shape \(4, 2, 32\)"),
])
def test_einsum_bad_arguments(expr, a, b, d, c, exc, match):
    with pytest.raises(exc, match=match):
        deep_gemm.einsum(expr, a, b, d, c=c)


def test_einsum_argument_types():
    a, b, d = _z(4, 2, 64), _z(2, 64, 64), _z(4, 2, 64)
    with pytest.raises(TypeError, match="expr must be a str"):
        deep_gemm.einsum(1, a, b, d)
    with pytest.raises(TypeError, match="use_cublaslt must be a bool"):
        deep_gemm.einsum("bhr,hdr->bhd", a, b, d, use_cublaslt=1)


def test_fp8_einsum_refuses_what_sm90_cannot_do():
    fp8 = torch.float8_e4m3fn
    x = (_z(4, 2, 128, dtype=fp8), _z(4, 2, 1, dtype=torch.float32))
    y = (_z(2, 128, 128, dtype=fp8), _z(2, 1, 1, dtype=torch.float32))
    d = _z(4, 2, 128)
    with pytest.raises(ValueError, match="takes only 'bhr,hdr->bhd'"):
        deep_gemm.fp8_einsum("bhd,hdr->bhr", x, y, d)
    with pytest.raises(ValueError, match="no accumulator"):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", x, y, d, c=d)
    with pytest.raises(ValueError, match="recipe"):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", x, y, d, recipe=(1, 1, 128))
    with pytest.raises(TypeError, match="a must be a \\(tensor, scales\\) pair"):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", x[0], y, d)


@pytest.mark.parametrize("which,value,exc,match", [
    ("y", _z(2, 128, 128), TypeError, r"b\[0\] must have dtype torch.float8_e4m3fn"),
    ("y", _z(3, 128, 128, dtype=torch.float8_e4m3fn), ValueError, r"b\[0\] must have shape \(2, d, 128\)"),
    ("sy", _z(2, 1, 1), TypeError, r"b\[1\] must have dtype torch.float32"),
    ("sx", _z(4, 2, 2, dtype=torch.float32), ValueError, r"a\[1\] must have shape \(4, 2, 1\)"),
    ("d", _z(4, 2, 64), ValueError, r"d must have shape \(4, 2, 128\)"),
    (None, None, ValueError, r"a\[0\] must be a CUDA tensor"),
])
def test_fp8_einsum_names_its_own_arguments(which, value, exc, match):
    """Errors use fp8_einsum's names and shapes (not those of the BMM it runs on transposed views)."""
    fp8 = torch.float8_e4m3fn
    args = dict(x=_z(4, 2, 128, dtype=fp8), sx=_z(4, 2, 1, dtype=torch.float32), y=_z(2, 128, 128, dtype=fp8),
                sy=_z(2, 1, 1, dtype=torch.float32), d=_z(4, 2, 128))
    if which is not None:
        args[which] = value
    with pytest.raises(exc, match=match):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", (args["x"], args["sx"]), (args["y"], args["sy"]), args["d"])
