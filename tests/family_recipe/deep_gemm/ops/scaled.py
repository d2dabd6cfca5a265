"""out (BF16) = (A @ B^T) * 0.25 for FP8 operands without scale factors: the tiny family of docs/adding_a_family.md
(deep_gemm/families/sm90_scaled_fp8_gemm.py)."""
import torch

from ..runtime import Op, call

_SCALED = int(Op.SCALED)


def scaled_fp8_gemm_nt(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out[m, n] = (a @ b^T) * 0.25: a [m, k] and b [n, k] float8_e4m3fn (k a multiple of 128), out [m, n] bfloat16
    (n a multiple of 8), all row-major with 16-byte aligned rows."""
    if torch.compiler.is_compiling():
        return torch.ops.deep_gemm.scaled_fp8_gemm_nt(a, b, out)
    call(_SCALED, a, b, out)
