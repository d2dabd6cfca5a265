"""DeepGEMM's attention-indexer ops (DeepSeek-V3.2's sparse attention), on Hopper.

`fp8_gemm_nt_skip_head_mid` is the dense FP8 GEMM (per-token 1 x 128 scales for A, 128 x 128 for B, BF16 d) whose
output columns are split per head: every head's left + right GEMM columns are stored as left | mid columns left
untouched | right, so d is [m, n + n / (left + right) * mid]. It runs the dense FP8 kernel with the column map in
its epilogue (no copy, no second kernel).

`fp8_fp4_mqa_logits` / `fp8_mqa_logits` are the indexer's prefill logits: for query i and key j in [ks[i], ke[i]),
logits[i, j] = sum_h weights[i, h] * ReLU(q[i, h] . kv[j]) * kv_sf[j], one kernel (its own family) that also writes
-inf outside the ranges when asked to. `fp8_fp4_paged_mqa_logits` / `fp8_paged_mqa_logits` are the decode form over a
paged FP8 KV cache, scheduled by `get_paged_mqa_logits_metadata`.
"""
from typing import Optional, Tuple

import torch

from ..heuristics.sm90_mqa import PAGED_BLOCK_TOKENS, mqa_logits_padding
from ..runtime import Op, call, paged_mqa_logits_schedule
from ..utils.math import align
from .v2 import _TOKEN, _BLOCK, _check_compiled_dims, _check_flag, _granularities, _pair

__all__ = ["fp8_gemm_nt_skip_head_mid", "fp8_fp4_mqa_logits", "fp8_mqa_logits", "get_paged_mqa_logits_metadata",
           "fp8_fp4_paged_mqa_logits", "fp8_paged_mqa_logits"]

_SKIP_HEAD_MID = int(Op.SKIP_HEAD_MID)
_MQA_LOGITS = int(Op.MQA_LOGITS)
_PAGED_MQA_LOGITS = int(Op.PAGED_MQA_LOGITS)
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


def _fp8_query(q):
    """q of the MQA logits ops: the tensor, or DeepGEMM's (tensor, scales) pair whose scales must be None on SM90."""
    if isinstance(q, (tuple, list)):
        if len(q) != 2:
            raise TypeError(f"q must be a tensor or a (tensor, None) pair, got a sequence of {len(q)}")
        q, q_sf = q
        if q_sf is not None:
            raise ValueError("q: FP4 queries with scales are SM100-only in DeepGEMM; SM90 takes (q_fp8, None)")
    return q


def _check_logits_options(weights, logits_dtype) -> None:
    """What both MQA logits ops refuse on SM90 before allocating: BF16 weights, logits other than FP32 / BF16."""
    if isinstance(weights, torch.Tensor) and weights.dtype == torch.bfloat16:
        raise ValueError("weights: BF16 weights are SM100-only in DeepGEMM; SM90 takes float32")
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype}")


def _check_nonnegative(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def fp8_fp4_mqa_logits(q, kv: Tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                       cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True,
                       max_seqlen_k: int = 0, logits_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MQA logits of the DeepSeek-V3.2 indexer (DeepGEMM's signature): for query i and key j in [ks[i], ke[i]),
    logits[i, j] = sum_h weights[i, h] * ReLU(q[i, h] . kv[j]) * kv_sf[j], accumulated in FP32.

    q: (q [S, H, D] float8_e4m3fn contiguous, None) or the tensor alone; kv: (kv [Skv, D] float8_e4m3fn, kv_sf [Skv]
    float32); weights [S, H] float32; cu_seq_len_k_start / _end: ks, ke [S] int32. SM90 takes H in {32, 64} and D in
    {32, 64, 128}; FP4 q (q with scales), BF16 weights and other head counts are SM100-only and refused.
    Returns logits [S, Skv] (float32 or `logits_dtype` bfloat16), a view of padded rows: columns outside
    [ks[i], ke[i]) are -inf with `clean_logits`, else unspecified (as DeepGEMM's). With `max_seqlen_k` > 0 the rows
    are compressed to [S, max_seqlen_k], column c holding key ks[i] + c (c < ke[i] - ks[i]; the rest not written;
    clean_logits must be False). Deterministic; no host synchronisation."""
    q = _fp8_query(q)
    kv, kv_sf = _pair(kv, "kv")
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise TypeError(f"q must be a 3-D [seq_len, heads, head_dim] tensor, got {getattr(q, 'shape', type(q))}")
    if not isinstance(kv, torch.Tensor) or kv.dim() != 2:
        raise TypeError(f"kv[0] must be a 2-D [seq_len_kv, head_dim] tensor, got {getattr(kv, 'shape', type(kv))}")
    _check_logits_options(weights, logits_dtype)
    _check_flag(clean_logits, "clean_logits")
    _check_nonnegative(max_seqlen_k, "max_seqlen_k")
    width = max_seqlen_k or kv.shape[0]
    # Full rows get room for the kernel to write without range checks: rows up to a multiple of every query block,
    # a key block past the last key.
    padded = not max_seqlen_k and q.shape[0] > 0
    row_multiple, pad = mqa_logits_padding() if padded else (1, 0)
    rows = align(q.shape[0], row_multiple)
    logits = torch.empty((rows, align(max(width, 1) + pad, LOGITS_ROW_ALIGNMENT)), dtype=logits_dtype,
                         device=q.device)[:q.shape[0], :width]
    call(_MQA_LOGITS, q, kv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end, logits, int(bool(clean_logits)),
         max_seqlen_k, int(padded))
    return logits


def fp8_mqa_logits(q, kv: Tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                   cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True,
                   max_seqlen_k: int = 0) -> torch.Tensor:
    """`fp8_fp4_mqa_logits` with FP32 logits (DeepGEMM's older name)."""
    return fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k)


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                                  indices: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The schedule of `fp8_fp4_paged_mqa_logits` (DeepGEMM's signature): int32 [num_sms + 1, 2] on context_lens'
    device, row s = (batch, item) where CTA s starts, an item being 256 tokens of one batch (its longest next-n
    context, context_lens[:, -1]); the work is split evenly over the num_sms CTAs, the last row the end (B, 0).
    Computed on the device by a few PyTorch kernels (no host synchronisation; capturable in a CUDA graph).
    SM90: context_lens int32 [B, next_n], block_kv 64; `indices` (varlen) is SM100-only."""
    if indices is not None:
        raise ValueError("indices: varlen paged MQA logits are SM100-only in DeepGEMM")
    if block_kv != PAGED_BLOCK_TOKENS:
        raise ValueError(f"block_kv must be {PAGED_BLOCK_TOKENS} on SM90, got {block_kv!r}")
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1:
        raise ValueError(f"num_sms must be an int >= 1, got {num_sms!r}")
    if not isinstance(context_lens, torch.Tensor) or context_lens.dtype != torch.int32 or context_lens.dim() != 2:
        raise ValueError(f"context_lens must be an int32 [B, next_n] tensor, got "
                         f"{getattr(context_lens, 'dtype', type(context_lens).__name__)} "
                         f"{tuple(getattr(context_lens, 'shape', ()))}")
    return paged_mqa_logits_schedule(context_lens, num_sms)


def fp8_fp4_paged_mqa_logits(q, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                             block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                             clean_logits: bool = False, logits_dtype: torch.dtype = torch.float32,
                             indices: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Paged MQA logits of the DeepSeek-V3.2 indexer at decode (DeepGEMM's signature): for batch b, next-n query j
    and cached token t < context_lens[b, j], logits[b * next_n + j, t] = sum_h weights[b * next_n + j, h] *
    ReLU(q[b, j, h] . kv[t]) * scale[t], token t being row t % 64 of cache block block_table[b, t // 64].

    q: (q [B, next_n, H, 128] float8_e4m3fn, None) or the tensor alone (next_n 1 or 2, H 32 or 64); kv_cache [blocks,
    64, 1, 132] uint8, each block 64 x 128 FP8 values then their 64 FP32 scales; weights [B x next_n, H] float32;
    context_lens [B, next_n] int32; block_table [B, max_blocks] int32; schedule_meta from
    get_paged_mqa_logits_metadata. Returns logits [B x next_n, max_context_len] (float32, or bfloat16 with
    `logits_dtype`), a view of 256-column-aligned rows; columns at or past a query's context are not written. SM90
    here: `clean_logits` (writing -inf there), FP4 inputs and `indices` (varlen) are refused."""
    q = _fp8_query(q)
    if indices is not None:
        raise ValueError("indices: varlen paged MQA logits are SM100-only in DeepGEMM")
    _check_flag(clean_logits, "clean_logits")
    if clean_logits:
        raise ValueError("clean_logits=True is not implemented for the paged form on SM90 here (DeepGEMM's SM90 test "
                         "runs it with False); mask columns at or past context_lens instead")
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise TypeError(f"q must be a 4-D [B, next_n, heads, head_dim] tensor, got {getattr(q, 'shape', type(q))}")
    _check_logits_options(weights, logits_dtype)
    _check_nonnegative(max_context_len, "max_context_len")
    rows = q.shape[0] * q.shape[1]
    logits = torch.empty((rows, align(max(max_context_len, 1), LOGITS_ROW_ALIGNMENT)), dtype=logits_dtype,
                         device=q.device)[:, :max_context_len]
    call(_PAGED_MQA_LOGITS, q, kv_cache, weights, context_lens, block_table, schedule_meta, logits)
    return logits


def fp8_paged_mqa_logits(q, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                         block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                         clean_logits: bool = False) -> torch.Tensor:
    """`fp8_fp4_paged_mqa_logits` with FP32 logits (DeepGEMM's older name)."""
    return fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                                    clean_logits)
