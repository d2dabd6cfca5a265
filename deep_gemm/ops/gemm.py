"""Dense FP8 GEMM (DeepGEMM-compatible): out = dequant(A) @ dequant(B)^T in BF16."""
from typing import Tuple

import torch

from ..runtime import Op, call
from ..families import checks

_DENSE = int(Op.DENSE)


def gemm_fp8_fp8_bf16_nt(lhs: Tuple[torch.Tensor, torch.Tensor], rhs: Tuple[torch.Tensor, torch.Tensor],
                         out: torch.Tensor) -> None:
    """out[m, n] = (A * SA) @ (B * SB)^T.

    lhs = (A [m, k] float8_e4m3fn, SA [m, ceil(k/128)] float32, one scale per 1x128 group of a row);
    rhs = (B [n, k] float8_e4m3fn, SB [ceil(n/128), ceil(k/128)] float32, one scale per 128x128 block);
    out [m, n] bfloat16. Scales multiply (x ~= x_fp8 * scale). SA may be row-major; it is converted to the
    MN-major TMA-aligned layout (no copy when it already is, see `get_col_major_tma_aligned_tensor`).
    Runs on the current stream of the tensors' device; m = 0 or n = 0 returns at once; k = 0 writes zeros.
    A, B and out need 16-byte aligned row strides (TMA); when n % 8 != 0 the result goes through an aligned
    temporary and one extra copy, because TMA stores write whole 16-byte chunks.
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("gemm_fp8_fp8_bf16_nt", lhs, rhs, out)
    call(_DENSE, lhs, rhs, out)
