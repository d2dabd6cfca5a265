"""MoE grouped FP8 GEMMs (DeepGEMM-compatible): the contiguous and the masked layout.

Both run the dense kernel family (include/deep_gemm/sm90/fp8_gemm_1d2d.cuh) with a grouped tile scheduler: one
launch for all experts, no host synchronisation (the per-row expert indices and per-group row counts are read
on the device), so both are safe to capture in a CUDA graph.
"""
import numbers
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from ..heuristics.common import M_ALIGNMENT_CONTIGUOUS, KernelType, ceil_div
from ..launchers import sm90_fp8_gemm_1d2d
from ..utils import (get_device_arch, get_num_sms, is_col_major_tma_aligned, on_num_sms_change, run_on_device,
                     tma_ready_scales)
from . import checks

__all__ = ["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
           "get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout"]


def get_m_alignment_for_contiguous_layout() -> int:
    """Rows each expert's segment of the contiguous layout is padded to (its start is a multiple of this)."""
    return M_ALIGNMENT_CONTIGUOUS


def get_mk_alignment_for_contiguous_layout() -> int:
    """DeepGEMM v2 name of `get_m_alignment_for_contiguous_layout`."""
    return M_ALIGNMENT_CONTIGUOUS


@dataclass(frozen=True)
class _Layout:
    """What the full checks concluded for one combination of dtypes, shapes, strides, devices, SM cap and
    expected_m; `action` is "none" (nothing to compute), "zero" (zero out), "zero_masked" (k = 0, masked) or
    "launch"."""
    kind: KernelType
    action: str
    device: torch.device
    ragged_n: bool               # contiguous with n % 8 != 0: through an aligned temporary
    sa_ready: bool               # SA already MN-major and TMA-aligned (its pointer is still checked per call)
    sb_contiguous: bool
    extents: Tuple[int, ...]     # bytes spanned by (A, SA, B, SB, out, index tensor), for the overlap check
    expected_m: int


_NAMES = ("lhs[0] (A)", "lhs[1] (SA)", "rhs[0] (B)", "rhs[1] (SB)", "out")
# NOTES: the full checks cost tens of microseconds of Python per call (H200 host: 44.7 us contiguous, 55.8 us
# masked before this cache); a warmed call builds the key, re-checks what depends on the pointers and launches.
_layouts: Dict[tuple, _Layout] = {}
_prepared: Dict[tuple, sm90_fp8_gemm_1d2d.GroupedLaunch] = {}
_MAX_LAYOUTS = 4096


def _layout_key(kind, lhs, rhs, out, index, expected_m) -> Optional[tuple]:
    try:
        a, sa = lhs
        b, sb = rhs
        key = [kind, type(expected_m), expected_m]
        for t in (a, sa, b, sb, out, index):
            key += (type(t), t.dtype, t.shape, t.stride(), t.device)
        key.append(get_num_sms(a.device.index) if a.device.type == "cuda" else None)
        return tuple(key)
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None  # not even tensors: the full checks will say what is wrong


def _get_layout(key, check) -> "_Layout":
    layout = _layouts.get(key) if key is not None else None
    if layout is None:
        layout = check()
        if key is not None:
            if len(_layouts) >= _MAX_LAYOUTS:
                _layouts.clear()
                _prepared.clear()
            _layouts[key] = layout
    return layout


def _run(layout: _Layout, key, lhs, rhs, out, index) -> None:
    """The per-call part: pointer checks, then zeroing or the launch."""
    if layout.action == "none":
        return
    a, sa = lhs
    b, sb = rhs
    ptrs = tuple(t.data_ptr() for t in (a, sa, b, sb, out, index))
    if layout.action == "launch" and (ptrs[0] | ptrs[2] | (0 if layout.ragged_n else ptrs[4])) & 15:
        for i, t in ((0, a), (2, b)) + (() if layout.ragged_n else ((4, out),)):
            _check_operands(_NAMES[i], t)
    index_name = "masked_m" if layout.kind == KernelType.M_GROUPED_MASKED else "m_indices"
    inputs = [(_NAMES[i], ptrs[i], layout.extents[i]) for i in range(4)] + [(index_name, ptrs[5], layout.extents[5])]
    checks.check_no_overlap_ptrs("out", ptrs[4], layout.extents[4], inputs)
    if layout.action == "zero":
        out.zero_()
        return
    if layout.action == "zero_masked":
        num_groups, m_max, _ = out.shape
        rows = torch.arange(m_max, device=layout.device).view(1, m_max, 1)
        zero = torch.zeros((), dtype=out.dtype, device=layout.device)
        out.copy_(torch.where(rows < index.view(num_groups, 1, 1), zero, out))
        return
    sa_k, sb_k = tma_ready_scales(sa, sb, layout.sa_ready, layout.sb_contiguous)
    if sa_k is not sa or sb_k is not sb:  # converted copies: their own pointers
        sa, sb = sa_k, sb_k
        ptrs = (ptrs[0], sa.data_ptr(), ptrs[2], sb.data_ptr(), ptrs[4], ptrs[5])
    run_on_device(layout.device, _launch, layout, key, a, sa, b, sb, out, ptrs)


def _launch(layout: _Layout, key, a, sa, b, sb, out, ptrs) -> None:
    """ptrs: the pointers of (A, SA, B, SB, out, index) as launched (SA/SB after any conversion)."""
    target = out
    if layout.ragged_n:
        m, n = out.shape
        target = torch.empty((m, n + (-n) % 8), dtype=out.dtype, device=layout.device)
    prepared = _prepared.get(key) if key is not None else None
    if prepared is None:
        prepared = sm90_fp8_gemm_1d2d.prepare_grouped(layout.kind, a, sa, b, target, get_num_sms(layout.device.index),
                                                      get_device_arch(layout.device.index), layout.expected_m)
        if key is not None:
            _prepared[key] = prepared
    out_ptr = target.data_ptr() if layout.ragged_n else ptrs[4]
    sm90_fp8_gemm_1d2d.launch_prepared(prepared, (*ptrs[:4], out_ptr), ptrs[5])
    if layout.ragged_n:
        out.copy_(target[:, :out.shape[1]])


def _check_rhs(rhs, k: int):
    """B [G, n, k] e4m3 (viewable as [G * n, k]) and SB [G, ceil(n/128), ceil(k/128)] fp32."""
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(b, "rhs[0] (B)", torch.float8_e4m3fn, 3)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 3)
    num_groups, n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"rhs[0] (B) must have shape (G, n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(sb, "rhs[1] (SB)", (num_groups, ceil_div(n, 128), ceil_div(k, 128)),
                       "G x ceil(n/128) x ceil(k/128)")
    return b, sb, num_groups, n


def _check_operands(name: str, t: torch.Tensor) -> None:
    """A 2-D or stacked 3-D TMA operand (A, B or out): rows of unit stride, 16-byte aligned row stride/pointer."""
    checks.check_tma_matrix(checks.rows_view(t, name), name)


def _arch(device: torch.device, fn: str) -> str:
    arch = get_device_arch(device.index)
    if arch != "sm_90a":
        raise NotImplementedError(f"{fn} has no kernel for {arch} yet (device {device})")
    return arch


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs: Tuple[torch.Tensor, torch.Tensor],
                                              rhs: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                              m_indices: torch.Tensor) -> None:
    """Grouped GEMM over experts whose rows are stacked along M: out[i] = A[i] @ B[m_indices[i]]^T (dequantised).

    lhs = (A [M, k] float8_e4m3fn, SA [M, ceil(k/128)] float32, 1x128 scales; row-major or MN-major);
    rhs = (B [G, n, k] float8_e4m3fn, SB [G, ceil(n/128), ceil(k/128)] float32, 128x128 scales);
    out [M, n] bfloat16; m_indices [M] int32 on the device: the expert of each row, -1 for padding.

    Layout contract (DeepGEMM's, as produced by DeepEP/vLLM/SGLang): the rows of each expert form a segment that
    starts at a multiple of `get_m_alignment_for_contiguous_layout()` (128) rows; padding rows (-1) follow the
    expert's rows inside its segment. A block of rows takes its expert from its first row.
    Written to out: every row. Rows whose index is -1 (padding), lies outside [0, G), or differs from the expert
    of its block (a broken layout) are written as zeros; no MMA work is spent on blocks whose first row is
    padding. Nothing is read or written outside the given tensors, whatever the indices.
    Runs on the current stream, without a host synchronisation (CUDA-graph safe). M = 0 or n = 0: nothing to
    do; k = 0 or G = 0: out is zeroed. When n % 8 != 0 the result goes through an aligned temporary.
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", lhs, rhs, out, m_indices)
    key = _layout_key(KernelType.M_GROUPED_CONTIGUOUS, lhs, rhs, out, m_indices, None)
    layout = _get_layout(key, lambda: _check_contiguous(lhs, rhs, out, m_indices))
    _run(layout, key, lhs, rhs, out, m_indices)


def _check_contiguous(lhs, rhs, out, m_indices) -> _Layout:
    """Every layout check of the contiguous GEMM, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    m, k = a.shape
    b, sb, num_groups, n = _check_rhs(rhs, k)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    checks.check_shape(out, "out", (m, n), "M x n")
    checks.check_shape(sa, "lhs[1] (SA)", (m, ceil_div(k, 128)), "M x ceil(k/128)")
    checks.check_index_tensor(m_indices, "m_indices", (m,), "M")
    named = [("lhs[0] (A)", a), ("lhs[1] (SA)", sa), ("rhs[0] (B)", b), ("rhs[1] (SB)", sb), ("out", out),
             ("m_indices", m_indices)]
    device = checks.check_same_cuda_device(named)
    extents = tuple(checks.extent_bytes(t) for _, t in named)
    kind = KernelType.M_GROUPED_CONTIGUOUS

    def layout(action, ragged_n=False):
        return _Layout(kind, action, device, ragged_n, is_col_major_tma_aligned(sa), sb.is_contiguous(), extents, 0)
    if m == 0 or n == 0:
        return layout("none")
    ragged_n = n % 8 != 0
    checks.check_out_rows(out, ragged_n)
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    if k == 0 or num_groups == 0:
        return layout("zero", ragged_n)
    _check_operands("lhs[0] (A)", a)
    _check_operands("rhs[0] (B)", b)
    _arch(device, "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous")
    return layout("launch", ragged_n)


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
    key = _layout_key(KernelType.M_GROUPED_MASKED, lhs, rhs, out, masked_m, expected_m)
    layout = _get_layout(key, lambda: _check_masked(lhs, rhs, out, masked_m, expected_m))
    _run(layout, key, lhs, rhs, out, masked_m)


def _check_masked(lhs, rhs, out, masked_m, expected_m) -> _Layout:
    """Every layout check of the masked GEMM, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 3)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 3)
    num_groups_a, m_max, k = a.shape
    b, sb, num_groups, n = _check_rhs(rhs, k)
    if num_groups_a != num_groups:
        raise ValueError(f"lhs[0] (A) has {num_groups_a} groups but rhs[0] (B) has {num_groups}")
    checks.check_tensor(out, "out", torch.bfloat16, 3)
    checks.check_shape(out, "out", (num_groups, m_max, n), "G x m_max x n")
    checks.check_shape(sa, "lhs[1] (SA)", (num_groups, m_max, ceil_div(k, 128)), "G x m_max x ceil(k/128)")
    checks.check_index_tensor(masked_m, "masked_m", (num_groups,), "G")
    if isinstance(expected_m, bool) or not isinstance(expected_m, numbers.Integral):
        raise TypeError(f"expected_m must be an int, got {type(expected_m).__name__}")
    if expected_m < 0:
        raise ValueError(f"expected_m must be >= 0, got {expected_m}")
    named = [("lhs[0] (A)", a), ("lhs[1] (SA)", sa), ("rhs[0] (B)", b), ("rhs[1] (SB)", sb), ("out", out),
             ("masked_m", masked_m)]
    device = checks.check_same_cuda_device(named)
    extents = tuple(checks.extent_bytes(t) for _, t in named)

    def layout(action):
        return _Layout(KernelType.M_GROUPED_MASKED, action, device, False, is_col_major_tma_aligned(sa), sb.is_contiguous(),
                       extents, min(max(int(expected_m), 1), max(m_max, 1)))
    if num_groups == 0 or m_max == 0 or n == 0:
        return layout("none")
    if n % 8 != 0:
        raise ValueError(f"rhs[0] (B): the masked layout needs n % 8 == 0 (got n={n}); pad B's rows to a multiple "
                         f"of 8 and slice the output")
    _check_operands("out", out)
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    if k == 0:
        return layout("zero_masked")
    _check_operands("lhs[0] (A)", a)
    _check_operands("rhs[0] (B)", b)
    _arch(device, "m_grouped_gemm_fp8_fp8_bf16_nt_masked")
    return layout("launch")


def _clear() -> None:
    _layouts.clear()
    _prepared.clear()


on_num_sms_change(_clear)
