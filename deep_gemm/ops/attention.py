"""DeepGEMM's attention-indexer ops (DeepSeek-V3.2's sparse attention), on Hopper.

`fp8_gemm_nt_skip_head_mid` is the dense FP8 GEMM (per-token 1 x 128 scales for A, 128 x 128 for B, BF16 d) whose
output columns are split per head: every head's left + right GEMM columns are stored as left | mid columns left
untouched | right, so d is [m, n + n / (left + right) * mid]. It runs the dense FP8 kernel with the column map in
its epilogue (no copy, no second kernel).
"""
from typing import Tuple

import torch

from ..runtime import Op, call
from .v2 import _TOKEN, _BLOCK, _check_compiled_dims, _check_flag, _granularities, _pair

__all__ = ["fp8_gemm_nt_skip_head_mid"]

_SKIP_HEAD_MID = int(Op.SKIP_HEAD_MID)


def fp8_gemm_nt_skip_head_mid(a: Tuple[torch.Tensor, torch.Tensor], b: Tuple[torch.Tensor, torch.Tensor],
                              d: torch.Tensor, head_splits: Tuple[int, int, int], recipe=None,
                              compiled_dims: str = "nk", disable_ue8m0_cast: bool = False) -> None:
    """d = a @ b^T with each head's columns split (DeepGEMM's signature): a = (A [m, k] float8_e4m3fn, SFA [m,
    ceil(k/128)] float32), b = (B [n, k] float8_e4m3fn, SFB [ceil(n/128), ceil(k/128)] float32), both K-major; d
    [m, n + n / (left + right) * mid] bfloat16 with head_splits = (left, mid, right): GEMM columns [h (left + right),
    h (left + right) + left) land at d's [h (left + mid + right), + left), the next right columns after mid columns
    that are not written. n must be whole heads; on SM90 left and right are multiples of 16 and mid of 8.

    Only the default recipe (1, 128, 128) exists here (the 1D2D kernel); `compiled_dims` is checked but has no
    effect, and so has `disable_ue8m0_cast` on SM90 (float32 scales are used as given)."""
    _check_compiled_dims(compiled_dims)
    _check_flag(disable_ue8m0_cast, "disable_ue8m0_cast")
    if (_TOKEN, _BLOCK) != _granularities(recipe, None, None):
        raise ValueError(f"recipe must be (1, 128, 128) for fp8_gemm_nt_skip_head_mid on SM90, got {recipe!r}")
    if not isinstance(head_splits, (tuple, list)) or len(head_splits) != 3:
        raise TypeError(f"head_splits must be a (left, mid, right) tuple of ints, got {head_splits!r}")
    a = _pair(a, "a")
    b = _pair(b, "b")
    if isinstance(d, torch.Tensor) and d.dtype == torch.float32:
        raise TypeError("d must be bfloat16 on SM90 (the 1D2D kernel writes BF16), got torch.float32")
    call(_SKIP_HEAD_MID, a, b, d, *head_splits)
