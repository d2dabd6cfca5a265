"""DeepGEMM's attention-indexer ops (DeepSeek-V3.2's sparse attention), on Hopper.

`fp8_gemm_nt_skip_head_mid` is the dense FP8 GEMM (per-token 1 x 128 scales for A, 128 x 128 for B, BF16 d) whose
output columns are split per head: every head's left + right GEMM columns are stored as left | mid columns left
untouched | right, so d is [m, n + n / (left + right) * mid]. It runs the dense FP8 kernel with the column map in
its epilogue (no copy, no second kernel).

`fp8_fp4_mqa_logits` / `fp8_mqa_logits` are the indexer's prefill logits: for query i and key j in [ks[i], ke[i]),
logits[i, j] = sum_h weights[i, h] * ReLU(q[i, h] . kv[j]) * kv_sf[j], one kernel (its own family) that also writes
-inf outside the ranges when asked to.
"""
from typing import Tuple

import torch

from ..runtime import Op, call
from ..utils.math import align
from .v2 import _TOKEN, _BLOCK, _check_compiled_dims, _check_flag, _granularities, _pair

__all__ = ["fp8_gemm_nt_skip_head_mid", "fp8_fp4_mqa_logits", "fp8_mqa_logits"]

_SKIP_HEAD_MID = int(Op.SKIP_HEAD_MID)
_MQA_LOGITS = int(Op.MQA_LOGITS)
# Logits rows are allocated this many elements apart at least (DeepGEMM's 256-column alignment).
LOGITS_ROW_ALIGNMENT = 256


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


def fp8_fp4_mqa_logits(q, kv: Tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                       cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True,
                       max_seqlen_k: int = 0, logits_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MQA logits of the DeepSeek-V3.2 indexer (DeepGEMM's signature): for query i and key j in [ks[i], ke[i]),
    logits[i, j] = sum_h weights[i, h] * ReLU(q[i, h] . kv[j]) * kv_sf[j], accumulated in FP32.

    q: (q [S, H, D] float8_e4m3fn contiguous, None) or the tensor alone; kv: (kv [Skv, D] float8_e4m3fn, kv_sf [Skv]
    float32); weights [S, H] float32; cu_seq_len_k_start / _end: ks, ke [S] int32. SM90 takes H in {32, 64} and D in
    {32, 64, 128}; FP4 q (q with scales), BF16 weights and other head counts are SM100-only and refused.
    Returns logits [S, Skv] (float32 or `logits_dtype` bfloat16), a view of rows 256-column aligned: columns outside
    [ks[i], ke[i]) are -inf with `clean_logits`, else not written. With `max_seqlen_k` > 0 the rows are compressed to
    [S, max_seqlen_k], column c holding key ks[i] + c (c < ke[i] - ks[i]; the rest not written; clean_logits must be
    False). Deterministic; no host synchronisation."""
    if isinstance(q, (tuple, list)):
        if len(q) != 2:
            raise TypeError(f"q must be a tensor or a (tensor, None) pair, got a sequence of {len(q)}")
        q, q_sf = q
        if q_sf is not None:
            raise ValueError("q: FP4 queries with scales are SM100-only in DeepGEMM; SM90 takes (q_fp8, None)")
    kv, kv_sf = _pair(kv, "kv")
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise TypeError(f"q must be a 3-D [seq_len, heads, head_dim] tensor, got {getattr(q, 'shape', type(q))}")
    if not isinstance(kv, torch.Tensor) or kv.dim() != 2:
        raise TypeError(f"kv[0] must be a 2-D [seq_len_kv, head_dim] tensor, got {getattr(kv, 'shape', type(kv))}")
    if isinstance(weights, torch.Tensor) and weights.dtype == torch.bfloat16:
        raise ValueError("weights: BF16 weights are SM100-only in DeepGEMM; SM90 takes float32")
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype}")
    _check_flag(clean_logits, "clean_logits")
    if isinstance(max_seqlen_k, bool) or not isinstance(max_seqlen_k, int) or max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_k must be an int >= 0, got {max_seqlen_k!r}")
    width = max_seqlen_k or kv.shape[0]
    logits = torch.empty((q.shape[0], align(max(width, 1), LOGITS_ROW_ALIGNMENT)), dtype=logits_dtype,
                         device=q.device)[:, :width]
    call(_MQA_LOGITS, q, kv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end, logits, int(bool(clean_logits)),
         max_seqlen_k)
    return logits


def fp8_mqa_logits(q, kv: Tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                   cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True,
                   max_seqlen_k: int = 0) -> torch.Tensor:
    """`fp8_fp4_mqa_logits` with FP32 logits (DeepGEMM's older name)."""
    return fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k)
