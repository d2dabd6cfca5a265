"""MoE grouped FP8 GEMMs (DeepGEMM-compatible): the contiguous and the masked layout.

Both run the dense kernel family (include/deep_gemm/sm90/fp8_gemm_1d2d.cuh) with a grouped tile scheduler: one
launch for all experts, no host synchronisation (the per-row expert indices and per-group row counts are read
on the device), so both are safe to capture in a CUDA graph.
"""
from typing import Tuple

import torch

from ..runtime import Op, call
from ..utils.layout import get_mk_alignment_for_contiguous_layout
from ..families import checks

__all__ = ["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
           "get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout"]

_CONTIGUOUS, _MASKED = int(Op.CONTIGUOUS), int(Op.MASKED)


def get_m_alignment_for_contiguous_layout() -> int:
    """Rows each expert's segment of the contiguous layout is padded to (its start is a multiple of this): 128
    unless changed with `deep_gemm.set_mk_alignment_for_contiguous_layout` (the v2 name of this getter is
    `get_mk_alignment_for_contiguous_layout`)."""
    return get_mk_alignment_for_contiguous_layout()


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs: Tuple[torch.Tensor, torch.Tensor],
                                              rhs: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                              m_indices: torch.Tensor) -> None:
    """Grouped GEMM over experts whose rows are stacked along M: out[i] = A[i] @ B[m_indices[i]]^T (dequantised).

    lhs = (A [M, k] float8_e4m3fn, SA [M, ceil(k/128)] float32, 1x128 scales; row-major or MN-major);
    rhs = (B [G, n, k] float8_e4m3fn, SB [G, ceil(n/128), ceil(k/128)] float32, 128x128 scales);
    out [M, n] bfloat16; m_indices [M] int32 on the device: the expert of each row, -1 for padding.

    Layout contract (DeepGEMM's, as produced by DeepEP/vLLM/SGLang): the rows of each expert form a segment that
    starts at a multiple of 128 rows (`get_m_alignment_for_contiguous_layout()`, a multiple of 128); padding rows (-1) follow the
    expert's rows inside its segment. A block of rows takes its expert from its first row.
    Written to out: every row. Rows whose index is -1 (padding), lies outside [0, G), or differs from the expert
    of its block (a broken layout) are written as zeros; no MMA work is spent on blocks whose first row is
    padding. Nothing is read or written outside the given tensors, whatever the indices.
    Runs on the current stream, without a host synchronisation (CUDA-graph safe). M = 0 or n = 0: nothing to
    do; k = 0 or G = 0: out is zeroed. When n % 8 != 0 the result goes through an aligned temporary.
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", lhs, rhs, out, m_indices)
    call(_CONTIGUOUS, lhs, rhs, out, m_indices)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs: Tuple[torch.Tensor, torch.Tensor],
                                          rhs: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                          masked_m: torch.Tensor, expected_m: int) -> None:
    """Grouped GEMM with a fixed [G, m_max] row layout: out[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g]^T.

    lhs = (A [G, m_max, k] float8_e4m3fn, SA [G, m_max, ceil(k/128)] float32, 1x128 scales);
    rhs = (B [G, n, k] float8_e4m3fn, SB [G, ceil(n/128), ceil(k/128)] float32);
    out [G, m_max, n] bfloat16; masked_m [G] int32 on the device; expected_m: a host int, the typical
    masked_m, used only to pick the kernel configuration (any value is correct).

    Rows >= masked_m[g] of out are not written. masked_m[g] is clamped to [0, m_max] on the device. No host
    synchronisation: capture in a CUDA graph once and replay with new masked_m values (and new data at the same
    addresses). n must be a multiple of 8 (a store of a ragged row would touch the next row).
    k = 0 zeroes rows < masked_m[g] (one masked torch op, still without a sync).
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("m_grouped_gemm_fp8_fp8_bf16_nt_masked", lhs, rhs, out, masked_m, expected_m)
    call(_MASKED, lhs, rhs, out, masked_m, expected_m)
