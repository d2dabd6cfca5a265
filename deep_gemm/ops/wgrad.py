"""Weight-gradient FP8 GEMMs (DeepGEMM-compatible): out (FP32) += dequant(A) @ dequant(B)^T with 1x128 scales on both
operands, dense and k-grouped (MoE experts, one launch for all groups).

Both run include/deep_gemm/sm90/fp8_wgrad_1d1d.cuh: K (the token dimension) is a run-time value, so a new token count
never compiles a kernel; the result is added into `out` by TMA reduce-adds, so `out` is read and written once.
"""
from typing import List, Sequence, Tuple

import torch

from ..heuristics.common import ceil_div
from ..launchers import sm90_fp8_wgrad_1d1d as launcher
from ..launchers.tma import tma_row_stride
from ..utils import (get_col_major_tma_aligned_tensor, get_device_arch, get_num_sms, get_tma_aligned_size,
                     run_on_device)
from . import checks

__all__ = ["wgrad_gemm_fp8_fp8_fp32_nt", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt"]


def _mn_major_scales(s, name: str, rows: int, kb: int, allow_row_form: bool = True) -> Tuple[torch.Tensor, int]:
    """Scales as the kernel reads them: MN-major [kb, rows] with a 16-byte aligned row stride. Returns (tensor whose
    storage is read, row stride in elements).

    Accepted: [kb, rows] with a unit inner stride (the "transposed" form, used as is when aligned) and, with
    `allow_row_form`, [rows, kb] (converted; no copy when it already is the MN-major TMA-aligned layout).
    NOTES: as in DeepGEMM, a square tensor (rows == kb) with a unit inner stride is taken as [kb, rows].
    `s` is a 2-D float32 tensor (checked by the caller)."""
    shape = tuple(s.shape)
    if shape == (kb, rows) and (rows <= 1 or s.stride(1) == 1):
        row_stride = s.stride(0) if kb > 1 else get_tma_aligned_size(rows, 4)
        if row_stride % 4 == 0 and row_stride >= rows and s.data_ptr() % 16 == 0:
            return s, row_stride
        aligned = get_tma_aligned_size(rows, 4)
        copy = torch.empty((kb, aligned), device=s.device, dtype=s.dtype)[:, :rows]
        copy.copy_(s)
        return copy, aligned
    if allow_row_form and shape == (rows, kb):
        t = get_col_major_tma_aligned_tensor(s)  # [rows, kb] with strides (1, aligned rows)
        return t, get_tma_aligned_size(rows, 4)
    forms = f"({kb}, {rows})" + (f" or ({rows}, {kb})" if allow_row_form else "")
    raise ValueError(f"{name} must have shape {forms} (one scale per row and 128-wide K block), got {shape}")


def _check_device_and_aliasing(a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor,
                               out: torch.Tensor) -> torch.device:
    """All five tensors on one CUDA device, and `out` not overlapping any input. Returns the device."""
    inputs = [("lhs[0] (A)", a), ("lhs[1] (SA)", sa), ("rhs[0] (B)", b), ("rhs[1] (SB)", sb)]
    device = checks.check_same_cuda_device(inputs + [("out", out)])
    checks.check_no_overlap(out, "out", inputs)
    return device


def _check_out_matrix(out: torch.Tensor, name: str) -> bool:
    """Whether `out` ([..., m, n] FP32, unit inner stride) can be a TMA reduce target as it is (16-byte aligned row
    and group strides and base, and n % 4 == 0: the TMA reduce writes whole 16-byte chunks, so a row ending inside
    a chunk would also get the chunk's remaining elements rewritten, i.e. memory past the row, the next row's or
    another tensor's); otherwise the caller goes through an aligned temporary."""
    n = out.shape[-1]
    if n > 1 and out.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous inner dimension (stride(-1) == 1), got strides "
                         f"{out.stride()}")
    strides_ok = all(st % 4 == 0 for size, st in zip(out.shape[:-1], out.stride()[:-1]) if size > 1)
    return strides_ok and n % 4 == 0 and out.data_ptr() % 16 == 0


def _run(out: torch.Tensor, out_name: str, build, device: torch.device) -> None:
    """Launch through `build(target) -> Operands`, adding into `out` directly when it is TMA-legal, else into an
    aligned temporary holding a copy of out (then copied back: out is read once and written once either way).
    Tensors off the current device: launched in their device's context, on its current stream."""
    # NOTES: without the switch the kernel ran in the current device's context on the other device's memory:
    # wrong results, then an illegal address (found by tests/gpu/test_robustness_gpu.py::test_second_device).
    run_on_device(device, _run_on_current, out, out_name, build, device)


def _run_on_current(out: torch.Tensor, out_name: str, build, device: torch.device) -> None:
    index = device.index
    num_sms, arch = get_num_sms(index), get_device_arch(index)
    if _check_out_matrix(out, out_name):
        launcher.launch(build(out), index, num_sms, arch)
        return
    n = out.shape[-1]
    tmp = torch.empty((*out.shape[:-1], get_tma_aligned_size(n, 4)), device=device, dtype=torch.float32)
    tmp = tmp[..., :n]
    tmp.copy_(out)
    launcher.launch(build(tmp), index, num_sms, arch)
    out.copy_(tmp)


def _d_strides(d: torch.Tensor) -> Tuple[int, int]:
    """(group stride, row stride) of a [G, m, n] FP32 target, any legal values for size-1 dimensions."""
    g, m, n = d.shape
    row = d.stride(1) if m > 1 else get_tma_aligned_size(n, 4)
    group = d.stride(0) if g > 1 else m * row
    return group, row


def wgrad_gemm_fp8_fp8_fp32_nt(lhs: Tuple[torch.Tensor, torch.Tensor], rhs: Tuple[torch.Tensor, torch.Tensor],
                               out: torch.Tensor) -> None:
    """out[m, n] += (A * SA) @ (B * SB)^T, in FP32.

    lhs = (A [m, k] float8_e4m3fn, SA float32 with one scale per 1x128 group of a row of A: [m, ceil(k/128)], or
    the transposed [ceil(k/128), m]); rhs = (B [n, k] float8_e4m3fn, SB [n, ceil(k/128)] or [ceil(k/128), n]);
    out [m, n] float32, accumulated in place (read once, written once). k is typically the token count; any k
    works as long as A's and B's row strides are 16-byte aligned (k % 16 == 0 for contiguous tensors). k = 0
    leaves out unchanged. A square scale tensor (m == ceil(k/128)) with a unit inner stride is read as the
    transposed form, as in DeepGEMM. Runs on the current stream; no host synchronisation.
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("wgrad_gemm_fp8_fp8_fp32_nt", lhs, rhs, out)
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(b, "rhs[0] (B)", torch.float8_e4m3fn, 2)
    checks.check_tensor(out, "out", torch.float32, 2)
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"rhs[0] (B) must have shape (n, {k}) to match A's k, got {tuple(b.shape)}")
    checks.check_shape(out, "out", (m, n), "m x n")
    kb = ceil_div(k, 128)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 2)
    for s, name, rows in ((sa, "lhs[1] (SA)", m), (sb, "rhs[1] (SB)", n)):
        if tuple(s.shape) not in ((rows, kb), (kb, rows)):
            raise ValueError(f"{name} must have shape ({rows}, {kb}) or ({kb}, {rows}), got {tuple(s.shape)}")
    device = _check_device_and_aliasing(a, sa, b, sb, out)
    if m == 0 or n == 0 or k == 0:
        return
    checks.check_tma_matrix(a, "lhs[0] (A)")
    checks.check_tma_matrix(b, "rhs[0] (B)")
    sa_t, sa_stride = _mn_major_scales(sa, "lhs[1] (SA)", m, kb)
    sb_t, sb_stride = _mn_major_scales(sb, "rhs[1] (SB)", n, kb)
    a_stride, b_stride = tma_row_stride(a), tma_row_stride(b)

    def build(target: torch.Tensor) -> launcher.Operands:
        d = target.unsqueeze(0)
        group_stride, row_stride = _d_strides(d)
        return launcher.Operands(m, n, (k,), (a.data_ptr(),), (a_stride,), (b.data_ptr(),), (b_stride,),
                                 sa_t.data_ptr(), sa_stride, sb_t.data_ptr(), sb_stride, d.data_ptr(),
                                 group_stride, row_stride)

    _run(out, "out", build, device)


def _batch_sizes(batch_sizes, num_groups: int) -> List[int]:
    if isinstance(batch_sizes, torch.Tensor):
        if batch_sizes.device.type != "cpu":
            raise TypeError("batch_sizes must be a host list of ints (a CUDA tensor would need a device-to-host sync); "
                            f"got a tensor on {batch_sizes.device}")
        batch_sizes = batch_sizes.tolist()
    if not isinstance(batch_sizes, (list, tuple)):
        raise TypeError(f"batch_sizes must be a list of ints, got {type(batch_sizes).__name__}")
    ks = []
    for i, k in enumerate(batch_sizes):
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"batch_sizes[{i}] must be an int, got {type(k).__name__}")
        if k < 0:
            raise ValueError(f"batch_sizes[{i}] must be >= 0, got {k}")
        if k % 16 != 0:
            raise ValueError(f"batch_sizes[{i}] must be a multiple of 16, got {k} (each group's A and B are row-major "
                             f"[m, k] / [n, k] and TMA needs 16-byte aligned rows)")
        ks.append(k)
    if len(ks) != num_groups:
        raise ValueError(f"batch_sizes must have one entry per group of out ({num_groups}), got {len(ks)}")
    return ks


def _flat(t, name: str, numel: int, what: str) -> torch.Tensor:
    checks.check_tensor(t, name, torch.float8_e4m3fn, dim=None)
    if t.numel() != numel:
        raise ValueError(f"{name} must hold {numel} elements ({what}), got {t.numel()} (shape {tuple(t.shape)})")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the groups' matrices are read back to back)")
    if t.data_ptr() % 16 != 0:
        raise ValueError(f"{name}'s data pointer must be 16-byte aligned, got offset {t.data_ptr() % 16}")
    return t.view(-1)


def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs: Tuple[torch.Tensor, torch.Tensor],
                                         rhs: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                         batch_sizes: Sequence[int]) -> None:
    """out[g] += (A_g * SA_g) @ (B_g * SB_g)^T for every group g, in FP32, in one kernel launch (up to 96 groups per
    launch; more groups take ceil(G / 96) launches).

    batch_sizes = [k_0, ..., k_{G-1}] (host ints, each a multiple of 16; 0 = an empty group, out[g] untouched).
    lhs = (A: contiguous float8_e4m3fn holding sum(m * k_g) elements, group g's [m, k_g] row-major matrix after the
    previous groups'; SA: float32 [sum(ceil(k_g/128)), m], group g's scales in rows sum_{j<g} ceil(k_j/128) ...);
    rhs = (B with n, SB [sum(ceil(k_g/128)), n]) likewise; out: float32 [G, m, n], accumulated in place.
    Runs on the current stream; no host synchronisation. Under torch.compile pass batch_sizes as a list of ints.
    """
    if torch.compiler.is_compiling():
        if not isinstance(batch_sizes, (list, tuple)):
            raise TypeError("batch_sizes must be a list of ints under torch.compile (the compiled graph bakes the "
                            f"group sizes in), got {type(batch_sizes).__name__}")
        return checks.traced_call("k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", lhs, rhs, out, list(batch_sizes))
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(out, "out", torch.float32, 3)
    num_groups, m, n = out.shape
    ks = _batch_sizes(batch_sizes, num_groups)
    total_k = sum(ks)
    total_kb = sum(ceil_div(k, 128) for k in ks)
    a = _flat(a, "lhs[0] (A)", m * total_k, f"sum of m * k_g with m = {m}")
    b = _flat(b, "rhs[0] (B)", n * total_k, f"sum of n * k_g with n = {n}")
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 2)
    checks.check_shape(sa, "lhs[1] (SA)", (total_kb, m), "sum of ceil(k_g / 128) x m")
    checks.check_shape(sb, "rhs[1] (SB)", (total_kb, n), "sum of ceil(k_g / 128) x n")
    device = _check_device_and_aliasing(a, sa, b, sb, out)
    if m == 0 or n == 0 or total_k == 0:
        return
    sa_t, sa_stride = _mn_major_scales(sa, "lhs[1] (SA)", m, total_kb, allow_row_form=False)
    sb_t, sb_stride = _mn_major_scales(sb, "rhs[1] (SB)", n, total_kb, allow_row_form=False)
    offsets = [0]
    for k in ks:
        offsets.append(offsets[-1] + k)
    a_ptrs = tuple(a.data_ptr() + m * o for o in offsets[:-1])
    b_ptrs = tuple(b.data_ptr() + n * o for o in offsets[:-1])

    def build(target: torch.Tensor) -> launcher.Operands:
        group_stride, row_stride = _d_strides(target)
        return launcher.Operands(m, n, tuple(ks), a_ptrs, tuple(ks), b_ptrs, tuple(ks), sa_t.data_ptr(), sa_stride,
                                 sb_t.data_ptr(), sb_stride, target.data_ptr(), group_stride, row_stride)

    _run(out, "out", build, device)
