"""Dense BF16 GEMMs (DeepGEMM v2 names): d = a @ b^T (+ c), BF16 operands, BF16 or FP32 d, FP32 accumulation."""
from typing import Optional

import torch

from ..runtime import Op, call

_BF16 = int(Op.BF16)


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    """d[m, n] = a[m, k] @ b[n, k]^T (+ c), as DeepGEMM's `bf16_gemm_nt`.

    a, b bfloat16; each may be K-major (unit stride along k) or MN-major (unit stride along m / n: a transposed view),
    with its other stride a multiple of 8 elements. d bfloat16 or float32, row-major, n a multiple of 8 (BF16) or 4
    (FP32). c: None (d is overwritten), d itself (d += a @ b^T, added into d in d's type), or another tensor of d's
    dtype and shape (copied into d first, one extra copy). Accumulation is FP32 on the tensor cores; the result is
    rounded once into d (with c: the product is rounded to d's type, then added). m = 0 or n = 0 returns at once;
    k = 0 gives d = c (or zeros). `compiled_dims` is accepted for DeepGEMM compatibility: n is always a compile-time
    constant here and k never is. Runs on the current stream of the tensors' device.
    """
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims must be a str, got {type(compiled_dims).__name__}")
    accumulate = 0
    if c is not None:
        if not isinstance(c, torch.Tensor) or not isinstance(d, torch.Tensor):
            raise TypeError("c and d must be torch.Tensors")
        if c.dtype != d.dtype or c.shape != d.shape:
            raise ValueError(f"c must have d's dtype and shape ({d.dtype}, {tuple(d.shape)}), got {c.dtype}, "
                             f"{tuple(c.shape)}")
        if c.data_ptr() != d.data_ptr() or c.stride() != d.stride():
            d.copy_(c)
        accumulate = 1
    call(_BF16, a, b, d, accumulate)


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    """d = a @ b (+ c) with b given [k, n]: `bf16_gemm_nt` on b's transposed view."""
    bf16_gemm_nt(a, _t(b, "b"), d, c, compiled_dims)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    """d = a^T @ b (+ c) with a given [k, m] and b [k, n]: `bf16_gemm_nt` on both transposed views."""
    bf16_gemm_nt(_t(a, "a"), _t(b, "b"), d, c, compiled_dims)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    """d = a^T @ b^T (+ c) with a given [k, m] and b [n, k]: `bf16_gemm_nt` on a's transposed view."""
    bf16_gemm_nt(_t(a, "a"), b, d, c, compiled_dims)


def _t(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    return t.t()
