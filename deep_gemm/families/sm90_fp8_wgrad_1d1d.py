"""Kernel family of include/deep_gemm/sm90/fp8_wgrad_1d1d.cuh (dense and k-grouped weight gradients, FP32
D += A B^T): validation of each op's arguments into a layout, the kernel configuration, and the `_C` plan.

A launch covers up to MAX_GROUPS_PER_LAUNCH groups: their A/B tensor maps and K extents travel as one kernel
parameter (`WgradGroups`), so nothing is copied to the device and a captured CUDA graph replays them by value."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from .. import jit, log
from ..device import get_device_arch, get_num_sms
from ..envs import read_env
from ..heuristics.common import GemmConfig, ceil_div, get_forced_config
from ..heuristics.sm90_wgrad import MAX_GROUPS_PER_LAUNCH, get_wgrad_config, group_capacity
from ..jit.runtime import ensure_context
from ..scale_layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size
from . import checks
from .plan import STRUCT, TENSOR_MAP, U32, ParamBuffer, launch, make_plan, noop_plan
from .variant import INT_LIST, PAIR, TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/fp8_wgrad_1d1d.cuh"
# NOTES: DeepGEMM's tests profile kernels by the substrings "fp8_wgrad_gemm" (May 2025) and "gemm_" (v2).
FUNCTION = "deep_gemm::sm90::fp8_wgrad_gemm_1d1d_impl"
_TMA_BYTES = 128
# The kernel's parameters, in its signature's order (`groups`: the WgradGroups struct of the groups' A/B maps and K).
PARAMS = (("groups", STRUCT), ("tensor_map_sa", TENSOR_MAP), ("tensor_map_sb", TENSOR_MAP),
          ("tensor_map_d", TENSOR_MAP), ("shape_m", U32), ("num_groups", U32))


def kernel_source(n: int, config: GemmConfig, capacity: int) -> jit.KernelSource:
    """The template instantiation for (n, config, group capacity); m, K and the group count are run-time values."""
    named = dict(SHAPE_N=n, BLOCK_M=config.block_m, BLOCK_N=config.block_n, kNumStages=config.num_stages,
                 kNumMulticast=config.num_multicast, kMulticastOnA=config.multicast_on_a,
                 kSwizzleDBytes=config.swizzle_d_bytes, kMaxGroups=capacity, kSmemSize=config.smem_size)
    return jit.KernelSource(name="sm90_fp8_wgrad_1d1d", header=HEADER, function=FUNCTION, config=named)


def groups_param_size(capacity: int) -> int:
    """sizeof(WgradGroups<capacity>): two tensor maps and two uint32 per group, padded to the 64-byte alignment."""
    return (capacity * (2 * _TMA_BYTES + 8) + 63) // 64 * 64


@dataclass
class _Kernel:
    config: GemmConfig
    capacity: int
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def kernel_choice(m: int, n: int, groups: int, num_sms: int) -> Tuple[GemmConfig, int]:
    """(configuration, group capacity) of the kernel a call over `groups` groups of [m, n] outputs loads; its source
    is `kernel_source(n, config, capacity)`."""
    return (get_forced_config() or get_wgrad_config(m, n, min(groups, MAX_GROUPS_PER_LAUNCH), num_sms),
            group_capacity(groups))


def _kernel(m: int, n: int, groups: int, num_sms: int, device_index: int, arch: str) -> _Kernel:
    capacity = group_capacity(groups)
    forced = get_forced_config()
    key = (m, n, capacity, num_sms, device_index, arch, forced)
    kernel = _kernels.get(key)
    if kernel is None:
        config, _ = kernel_choice(m, n, groups, num_sms)
        log.apply_env(read_env())
        log.configs.debug("wgrad m=%d n=%d groups=%d: %s", m, n, groups, config)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, config, capacity), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, capacity, loaded.function(device_index))
    return kernel


@dataclass(frozen=True)
class Operands:
    """Geometry of one call's kernel-ready operands, tensors numbered (A, SA, B, SB, D) as `_C` reads them.

    Group g's A is the row-major [m, k_g] matrix at A's address + `a_offsets[g]` bytes with row stride
    `a_strides[g]` (elements), B likewise with n rows; SA / SB are MN-major [sum_g ceil(k_g/128), m or n] with row
    strides `sa_stride` / `sb_stride`, group g's rows starting at sum_{j<g} ceil(k_j/128); D is [G, m, n] FP32 with
    strides (`d_group_stride`, `d_row_stride`, 1)."""
    m: int
    n: int
    ks: Tuple[int, ...]
    a_offsets: Tuple[int, ...]
    a_strides: Tuple[int, ...]
    b_offsets: Tuple[int, ...]
    b_strides: Tuple[int, ...]
    sa_stride: int
    sb_stride: int
    d_group_stride: int
    d_row_stride: int


def build_plan(ops: Operands, extents, device_index: int, num_sms: int, arch: str):
    """The `_C` plan of D[g] += A_g B_g^T for every group: ceil(G / MAX_GROUPS_PER_LAUNCH) launches (one for
    G <= 96), the groups' A/B descriptors travelling inside the `WgradGroups` parameter."""
    num_groups = len(ops.ks)
    kernel = _kernel(ops.m, ops.n, num_groups, num_sms, device_index, arch)
    cfg, cap = kernel.config, kernel.capacity
    total_kb = sum(ceil_div(k, 128) for k in ops.ks)
    kb_offsets = [0]
    for k in ops.ks:
        kb_offsets.append(kb_offsets[-1] + ceil_div(k, 128))
    launches = []
    for g0 in range(0, num_groups, MAX_GROUPS_PER_LAUNCH):
        g1 = min(num_groups, g0 + MAX_GROUPS_PER_LAUNCH)
        params = ParamBuffer(PARAMS)
        base = params.struct("groups", groups_param_size(cap))
        counts = base + 2 * cap * _TMA_BYTES
        for i, g in enumerate(range(g0, g1)):
            k = ops.ks[g]
            if k:
                params.add_map_at(base + i * _TMA_BYTES, 0, 1, (k, ops.m), (ops.a_strides[g],), (128, cfg.block_m),
                                  128, ptr_offset=ops.a_offsets[g])
                params.add_map_at(base + (cap + i) * _TMA_BYTES, 2, 1, (k, ops.n), (ops.b_strides[g],),
                                  (128, cfg.block_n), 128, ptr_offset=ops.b_offsets[g])
            params.write_u32(counts + 4 * i, ceil_div(k, 128))
            params.write_u32(counts + 4 * (cap + i), kb_offsets[g])
        params.tensor_map("tensor_map_sa", 1, 4, (ops.m, total_kb), (ops.sa_stride,), (cfg.block_m, 1), 0,
                          l2_promotion=False)
        params.tensor_map("tensor_map_sb", 3, 4, (ops.n, total_kb), (ops.sb_stride,), (cfg.block_n, 1), 0,
                          l2_promotion=False)
        params.tensor_map("tensor_map_d", 4, 4, (ops.n, ops.m, g1 - g0), (ops.d_row_stride, ops.d_group_stride),
                          (cfg.swizzle_d_bytes // 4, 64, 1), cfg.swizzle_d_bytes,
                          ptr_offset=g0 * ops.d_group_stride * 4)
        params.u32("shape_m", ops.m)
        params.u32("num_groups", g1 - g0)
        launches.append(params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, cfg.num_multicast))
    return make_plan(kernel.function, device_index, (15,) * 5, extents, (4,), launches)


# ---- Validation: the normalisers of the two ops of this family, one layout type, one `run` ----

def _is_transposed_form(s, name: str, rows: int, kb: int, allow_row_form: bool = True) -> bool:
    """Which accepted form 2-D float32 scales `s` have: [kb, rows] with a unit inner stride (the "transposed" form,
    True) or, with `allow_row_form`, [rows, kb] (False); anything else raises.
    NOTES: as in DeepGEMM, a square tensor (rows == kb) with a unit inner stride is taken as [kb, rows]."""
    shape = tuple(s.shape)
    if shape == (kb, rows) and (rows <= 1 or s.stride(1) == 1):
        return True
    if allow_row_form and shape == (rows, kb):
        return False
    forms = f"({kb}, {rows})" + (f" or ({rows}, {kb})" if allow_row_form else "")
    raise ValueError(f"{name} must have shape {forms} (one scale per row and 128-wide K block), got {shape}")


def _mn_major_scales(s, name: str, rows: int, kb: int, allow_row_form: bool = True) -> Tuple[torch.Tensor, int]:
    """Scales as the kernel reads them: MN-major [kb, rows] with a 16-byte aligned row stride. Returns (tensor whose
    storage is read, row stride in elements): the transposed form as is when aligned, else a copy; the row form
    through `get_col_major_tma_aligned_tensor` (no copy when it already is the MN-major TMA-aligned layout)."""
    if _is_transposed_form(s, name, rows, kb, allow_row_form):
        row_stride = s.stride(0) if kb > 1 else get_tma_aligned_size(rows, 4)
        if row_stride % 4 == 0 and row_stride >= rows and s.data_ptr() % 16 == 0:
            return s, row_stride
        aligned = get_tma_aligned_size(rows, 4)
        copy = torch.empty((kb, aligned), device=s.device, dtype=s.dtype)[:, :rows]
        copy.copy_(s)
        return copy, aligned
    t = get_col_major_tma_aligned_tensor(s)  # [rows, kb] with strides (1, aligned rows)
    return t, get_tma_aligned_size(rows, 4)


def _out_is_tma_target(out: torch.Tensor, name: str) -> bool:
    """Whether `out` ([..., m, n] FP32, unit inner stride) can be a TMA reduce target as it is (16-byte aligned row
    and group strides, and n % 4 == 0: the TMA reduce writes whole 16-byte chunks, so a row ending inside a chunk
    would also get the chunk's remaining elements rewritten, i.e. memory past the row, the next row's or another
    tensor's); otherwise the call goes through an aligned temporary. The base address is checked per call."""
    n = out.shape[-1]
    if n > 1 and out.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous inner dimension (stride(-1) == 1), got strides "
                         f"{out.stride()}")
    strides_ok = all(st % 4 == 0 for size, st in zip(out.shape[:-1], out.stride()[:-1]) if size > 1)
    return strides_ok and n % 4 == 0


def _d_strides(d: torch.Tensor) -> Tuple[int, int]:
    """(group stride, row stride) of a [G, m, n] FP32 target, any legal values for size-1 dimensions."""
    g, m, n = d.shape
    row = d.stride(1) if m > 1 else get_tma_aligned_size(n, 4)
    group = d.stride(0) if g > 1 else m * row
    return group, row


_NAMES = ("lhs[0] (A)", "lhs[1] (SA)", "rhs[0] (B)", "rhs[1] (SB)")


@dataclass
class WgradLayout:
    """What the full checks concluded for one layout of a wgrad / k-grouped wgrad call; `ks` are the groups' K
    (one group for the dense wgrad), `kb` the rows of SA/SB. Plans are made once per kernel-ready geometry."""
    k_grouped: bool
    nothing_to_do: bool           # m, n or the total K is 0: out is left unchanged
    device: torch.device
    m: int
    n: int
    ks: Tuple[int, ...]
    kb: int
    out_tma_target: bool          # out can take the TMA reduce-adds directly (base address checked per call)
    extents: Tuple[int, ...]      # bytes spanned by (A, SA, B, SB, out)
    num_sms: int
    arch: str
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return not self.nothing_to_do

    def run(self, lhs, rhs, out, batch_sizes=None):
        """The per-call part: pointer checks, layout conversions, the launch. Returns the plan when the call
        needed no conversion (so `_C` can launch later calls of this layout by itself), else None."""
        a, sa = lhs
        b, sb = rhs
        tensors = (a, sa, b, sb, out)
        if self.nothing_to_do:
            return noop_plan(self.device.index, 5, self.extents, (4,))
        ptrs = [t.data_ptr() for t in tensors]
        for i in (0, 2):
            if ptrs[i] % 16:
                raise ValueError(f"{_NAMES[i]}'s data pointer must be 16-byte aligned, got offset {ptrs[i] % 16}")
        checks.check_no_overlap_ptrs("out", ptrs[4], self.extents[4],
                                     [(_NAMES[i], ptrs[i], self.extents[i]) for i in range(4)])
        sa_k, sa_stride = _mn_major_scales(sa, "lhs[1] (SA)", self.m, self.kb, not self.k_grouped)
        sb_k, sb_stride = _mn_major_scales(sb, "rhs[1] (SB)", self.n, self.kb, not self.k_grouped)
        target = out
        if not (self.out_tma_target and ptrs[4] % 16 == 0):
            target = torch.empty((*out.shape[:-1], get_tma_aligned_size(self.n, 4)), device=self.device,
                                 dtype=torch.float32)[..., :self.n]
            target.copy_(out)
        plan = self._launch((a, sa_k, b, sb_k, target), sa_stride, sb_stride)
        if target is not out:
            out.copy_(target)
        return plan if (sa_k is sa and sb_k is sb and target is out) else None

    def load_kernel(self, lhs, rhs, out, batch_sizes=None) -> None:
        """Compile mode (deep_gemm.set_compile_mode): compile or load this layout's kernel; launch nothing, write
        nothing."""
        if not self.nothing_to_do:
            self.family.load(self.m, self.n, len(self.ks), self.num_sms, self.device.index, self.arch)

    def _launch(self, tensors, sa_stride: int, sb_stride: int):
        geometry = (checks.tensor_geometry(tensors), sa_stride, sb_stride)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = self.family.build_plan(self._operands(tensors, sa_stride, sb_stride),
                                                     [checks.extent_bytes(t) for t in tensors], self.device.index,
                                                     self.num_sms, self.arch)
        launch(plan, tuple(t.data_ptr() for t in tensors))
        return plan

    def _operands(self, tensors, sa_stride: int, sb_stride: int) -> Operands:
        a, _, b, _, d = tensors
        m, n = self.m, self.n
        d = d if self.k_grouped else d.unsqueeze(0)
        group_stride, row_stride = _d_strides(d)
        if not self.k_grouped:
            return Operands(m, n, self.ks, (0,), (checks.tma_row_stride(a),), (0,), (checks.tma_row_stride(b),), sa_stride,
                            sb_stride, group_stride, row_stride)
        offsets = [0]
        for k in self.ks[:-1]:
            offsets.append(offsets[-1] + k)
        return Operands(m, n, self.ks, tuple(m * o for o in offsets), self.ks, tuple(n * o for o in offsets),
                        self.ks, sa_stride, sb_stride, group_stride, row_stride)


def _layout(k_grouped, nothing_to_do, device, m, n, ks, kb, out, tensors) -> WgradLayout:
    return WgradLayout(k_grouped, nothing_to_do, device, m, n, tuple(ks), kb,
                       _out_is_tma_target(out, "out") if not nothing_to_do else False,
                       tuple(checks.extent_bytes(t) for t in tensors), get_num_sms(device.index),
                       get_device_arch(device.index))


def normalise_wgrad(lhs, rhs, out) -> WgradLayout:
    """Every layout check of `wgrad_gemm_fp8_fp8_fp32_nt`, with errors naming the argument."""
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
    tensors = (a, sa, b, sb, out)
    device = checks.check_same_cuda_device(list(zip(_NAMES + ("out",), tensors)))
    checks.check_no_overlap(out, "out", list(zip(_NAMES, tensors)))
    if m == 0 or n == 0 or k == 0:
        return _layout(False, True, device, m, n, (k,), kb, out, tensors)
    checks.check_tma_matrix(a, "lhs[0] (A)")
    checks.check_tma_matrix(b, "rhs[0] (B)")
    for s, name, rows in ((sa, "lhs[1] (SA)", m), (sb, "rhs[1] (SB)", n)):
        _is_transposed_form(s, name, rows, kb)  # a conversion, if any, is per call
    return _layout(False, False, device, m, n, (k,), kb, out, tensors)


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
    return t


def normalise_k_grouped(lhs, rhs, out, batch_sizes) -> WgradLayout:
    """Every layout check of `k_grouped_wgrad_gemm_fp8_fp8_fp32_nt`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(out, "out", torch.float32, 3)
    num_groups, m, n = out.shape
    ks = _batch_sizes(batch_sizes, num_groups)
    total_k = sum(ks)
    total_kb = sum(ceil_div(k, 128) for k in ks)
    _flat(a, "lhs[0] (A)", m * total_k, f"sum of m * k_g with m = {m}")
    _flat(b, "rhs[0] (B)", n * total_k, f"sum of n * k_g with n = {n}")
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 2)
    checks.check_shape(sa, "lhs[1] (SA)", (total_kb, m), "sum of ceil(k_g / 128) x m")
    checks.check_shape(sb, "rhs[1] (SB)", (total_kb, n), "sum of ceil(k_g / 128) x n")
    tensors = (a, sa, b, sb, out)
    device = checks.check_same_cuda_device(list(zip(_NAMES + ("out",), tensors)))
    checks.check_no_overlap(out, "out", list(zip(_NAMES, tensors)))
    if m == 0 or n == 0 or total_k == 0:
        return _layout(True, True, device, m, n, ks, total_kb, out, tensors)
    for s, name, rows in ((sa, "lhs[1] (SA)", m), (sb, "rhs[1] (SB)", n)):
        _is_transposed_form(s, name, rows, total_kb, allow_row_form=False)
    return _layout(True, False, device, m, n, ks, total_kb, out, tensors)


def warmup_kernels(variant: str, shape: dict, ms, num_sms: int, arch: str,
                   psum_alignment: int) -> List[jit.KernelSource]:
    """The kernels calls of one warm-up shape of `variant` load (deep_gemm.warmup): wgrad (m, n), k_grouped (m, n,
    num_groups); K never changes the kernel."""
    m, n = shape["m"], shape["n"]
    return [kernel_source(n, *kernel_choice(m, n, shape.get("num_groups", 1), num_sms))]


WGRAD = Variant("wgrad", "wgrad_gemm_fp8_fp8_fp32_nt", (PAIR, PAIR, TENSOR), normalise_wgrad, warmup_fields=("m", "n"))
K_GROUPED = Variant("k_grouped", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", (PAIR, PAIR, TENSOR, INT_LIST),
                    normalise_k_grouped, warmup_fields=("m", "n", "num_groups"))
FAMILY = Family("sm90_fp8_wgrad_1d1d", HEADER, FUNCTION, PARAMS, ("sm_90a",), (WGRAD, K_GROUPED), build_plan,
                clear_kernels, _kernel, warmup_kernels)
