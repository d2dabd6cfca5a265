"""DeepGEMM's `tf32_hc_prenorm_gemm`: the GEMM in front of the hyper-connections' RMS pre-norm of the newest DeepSeek
models, which mixes the residual streams with a few (n <= 32) FP32 weight rows and needs each row's squared norm."""
from typing import Optional

import torch

from ..runtime import Op, call

__all__ = ["tf32_hc_prenorm_gemm"]

_HC_PRENORM = int(Op.TF32_HC_PRENORM)


def tf32_hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                         num_splits: Optional[int] = None) -> None:
    """d = a @ b^T on the TF32 tensor cores and sqr_sum = (a * a).sum(-1), as DeepGEMM's `tf32_hc_prenorm_gemm`.

    a [m, k] bfloat16 (exact in TF32), b [n, k] float32 (the tensor cores read its top 19 bits, as in a TF32 matmul),
    both K-major with 16-byte-aligned rows; n <= 32 and a multiple of 4; k a multiple of 8 (DeepGEMM: 64). With
    `num_splits` None: d [m, n] and sqr_sum [m] float32. With num_splits = S: d [S, m, n] and sqr_sum [S, m] hold S
    partial results over contiguous ranges of whole 64-wide K blocks (the first ones a block longer when they do not
    divide evenly; a split with no block gets zeros), for the caller to sum over dim 0 - which lets a few rows use
    every SM. No normalisation happens here. Deterministic; no host synchronisation.
    """
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits must be None or an int >= 1, got {num_splits!r}")
    call(_HC_PRENORM, a, b, d, sqr_sum, 0 if num_splits is None else num_splits)
