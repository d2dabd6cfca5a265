"""Kernel family of include/deep_gemm/sm90/fp8_gemm_1d2d.cuh (dense, MoE contiguous and masked GEMMs): validation
of each op's arguments into a layout, the kernel configuration, and the `_C` plan that launches it."""
import numbers
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import torch

from .. import _C, jit, log
from ..envs import read_env
from ..heuristics import GemmConfig, GemmProblem, KernelType, get_config
from ..heuristics.common import ceil_div, get_forced_config, has_group_row_ends
from ..heuristics.sm90 import sm90_kernel_variants
from ..jit.runtime import ensure_context
from ..ops import checks
from ..utils import get_device_arch, get_num_sms, get_tma_aligned_size
from .plan import ParamBuffer, make_plan, noop_plan

HEADER = "deep_gemm/sm90/fp8_gemm_1d2d.cuh"
FUNCTION = "deep_gemm::sm90::fp8_gemm_1d2d_impl"
# deep_gemm::GemmType (include/deep_gemm/common/scheduler.cuh)
_GEMM_TYPES = {
    KernelType.NORMAL: jit.CppName("deep_gemm::GemmType::Normal"),
    KernelType.M_GROUPED_CONTIGUOUS: jit.CppName("deep_gemm::GemmType::MGroupedContiguous"),
    KernelType.M_GROUPED_MASKED: jit.CppName("deep_gemm::GemmType::MGroupedMasked"),
    KernelType.M_GROUPED_PSUM: jit.CppName("deep_gemm::GemmType::MGroupedPsum"),
    KernelType.BATCHED: jit.CppName("deep_gemm::GemmType::Batched"),
}
_NAMES = {KernelType.NORMAL: "sm90_fp8_gemm_1d2d", KernelType.M_GROUPED_CONTIGUOUS: "sm90_fp8_gemm_1d2d_contiguous",
          KernelType.M_GROUPED_MASKED: "sm90_fp8_gemm_1d2d_masked",
          KernelType.M_GROUPED_PSUM: "sm90_fp8_gemm_1d2d_psum",
          KernelType.BATCHED: "sm90_fp8_gemm_1d2d_batched"}


def kernel_source(n: int, k: int, config: GemmConfig, kind: KernelType = KernelType.NORMAL,
                  psum_alignment: int = 0) -> jit.KernelSource:
    """The template instantiation for (kind, n, k, config); m (and the groups) stay run-time arguments.
    `psum_alignment`: the psum layout's row alignment of the experts' starts (that kind only). The batched GEMM
    gathers its scales per stage (kGatherScales: SA at the caller's strides, SB's values of the K block); the other
    kinds load SA MN-major by TMA and SB per tile."""
    if (kind == KernelType.M_GROUPED_PSUM) != (psum_alignment > 0):
        raise ValueError(f"psum_alignment must be > 0 exactly for the psum layout, got {psum_alignment} for {kind}")
    named = dict(kGemmType=_GEMM_TYPES[kind], SHAPE_N=n, SHAPE_K=k, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                 kNumStages=config.num_stages, kNumMulticast=config.num_multicast,
                 kMulticastOnA=config.multicast_on_a, kSwizzleDBytes=config.swizzle_d_bytes,
                 kSmemSize=config.smem_size, kPsumAlignment=psum_alignment,
                 kGatherScales=kind == KernelType.BATCHED, kLoadRowsA=config.a_box_rows or config.block_m,
                 kOneMBlock=config.a_box_rows > 0)
    return jit.KernelSource(name=_NAMES[kind], header=HEADER, function=FUNCTION, config=named)


@dataclass
class _Kernel:
    config: GemmConfig
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}
_seen_nk: set = set()


def clear_kernels() -> None:
    _kernels.clear()


def kernel_config(m: int, n: int, k: int, num_sms: int, arch: str, kind: KernelType, num_groups: int) -> GemmConfig:
    """The configuration a call loads; m: rows (dense, contiguous), expected rows per group (masked, psum) or rows
    per batch (batched)."""
    return get_forced_config() or get_config(GemmProblem(m, n, k, num_sms, arch, kind, num_groups))


def runtime_kernels(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL,
                    ms: Optional[Iterable[int]] = None, num_groups: int = 1,
                    psum_alignment: int = 0) -> List[jit.KernelSource]:
    """The distinct kernels calls of (kind, n, k) load, for heuristic m in `ms` (as `kernel_config`); `ms=None`:
    every kernel any m can pick, which is also what the first-sight precompile builds (dense and contiguous only:
    a masked, psum or batched kernel depends on the rows per group and the group count)."""
    if ms is None:
        if has_group_row_ends(kind):
            raise ValueError(f"the {kind.value} kernels depend on expected_m: give the expected m values")
        configs = sm90_kernel_variants(n, k, num_sms, kind)
    else:
        configs = [kernel_config(m, n, k, num_sms, arch, kind, num_groups) for m in ms]
    sources = {}
    for config in configs:
        source = kernel_source(n, k, config, kind, psum_alignment)
        sources.setdefault(source.instantiation(), source)
    return list(sources.values())


def precompile_variants(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL) -> int:
    """Compile (into the disk cache) every kernel the heuristic can pick for (n, k) at any m, in parallel
    processes; returns how many were missing. Called on the first sight of (n, k) unless DG_JIT_PRECOMPILE=0,
    so that a later new m never waits for a compile (dense and contiguous grouped GEMMs). Only the node's compile
    leader (deep_gemm.warmup.is_compile_leader) spawns workers: other ranks build what they use, waiting on the
    cache's per-kernel locks for the leader's compiles."""
    from ..warmup import is_compile_leader
    if not is_compile_leader():
        return 0
    # NOTES: a group marker, once the warm-up or an earlier first call completed it, skips enumerating the variants
    # (~50 ms of heuristics for a new (n, k)) and generating and hashing their sources.
    return jit.build_group(variants_group(n, k, num_sms, arch, kind),
                           lambda: runtime_kernels(n, k, num_sms, arch, kind), arch)


def variants_group(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL) -> tuple:
    """What names the group of every kernel the heuristic can pick for (n, k) (`jit.build_group`)."""
    return ("sm90_fp8_gemm_1d2d", kind.value, n, k, num_sms)


def _kernel(m: int, n: int, k: int, num_sms: int, device_index: int, arch: str, kind: KernelType,
            num_groups: int, psum_alignment: int = 0) -> _Kernel:
    """The configured, loaded kernel; m: rows (dense, contiguous) or expected rows per group (masked, psum)."""
    forced = get_forced_config()
    key = (m, n, k, num_sms, device_index, arch, forced, kind, num_groups, psum_alignment)
    kernel = _kernels.get(key)
    if kernel is None:
        config = kernel_config(m, n, k, num_sms, arch, kind, num_groups)
        env = read_env()
        log.apply_env(env)
        log.configs.debug("%s m=%d n=%d k=%d groups=%d: %s", kind.value, m, n, k, num_groups, config)
        if env.jit_precompile and forced is None and not has_group_row_ends(kind) \
                and (n, k, num_sms, arch, kind) not in _seen_nk:
            _seen_nk.add((n, k, num_sms, arch, kind))
            precompile_variants(n, k, num_sms, arch, kind)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, k, config, kind, psum_alignment), arch, config.num_threads,
                          config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


def _call_kernel(kind: KernelType, a, b, num_sms: int, arch: str, expected_m: int, psum_alignment: int) -> _Kernel:
    """The kernel of a call with A and B (as in `build_plan`): the heuristic sees A's rows, expected_m for the
    kernels that walk groups, or the rows of one batch."""
    if arch in ("sm_100a", "sm_100f"):  # Blackwell: the sm100 family (see `build_plan`)
        from . import sm100_fp8_gemm
        return sm100_fp8_gemm.call_kernel(kind, a, b, num_sms, arch, expected_m)
    num_groups, n = (1, b.shape[0]) if kind == KernelType.NORMAL else b.shape[:2]
    m = expected_m if has_group_row_ends(kind) else a.shape[0]
    return _kernel(m, n, a.shape[-1], num_sms, a.device.index, arch, kind, num_groups, psum_alignment)


def build_plan(kind: KernelType, tensors, num_sms: int, arch: str, expected_m: int = 0, psum_alignment: int = 0):
    """The `_C` plan of one layout, from kernel-ready tensors (A, SA, B, SB, out[, index]) with m, n, k > 0:
    SA MN-major and TMA-aligned, SB contiguous, A / B / out TMA operands, out n % 8 == 0.

    Dense: A [m, k], SA [m, kb], B [n, k], SB [ceil(n/128), kb], out [m, n].
    Contiguous: A [M, k], SA [M, kb], B [G, n, k], SB [G, ceil(n/128), kb], out [M, n], index m_indices [M].
    Masked: A [G, m_max, k], SA [G, m_max, kb], B / SB as above, out [G, m_max, n], index masked_m [G].
    Psum: as contiguous, index = the running row counts [G]; expected_m = expected rows per group.
    Batched: A [B, m, k], SA [B, m, kb] at any strides (gathered by the kernel), B / SB as grouped, out [B, m, n];
    expected_m = m."""
    if arch in ("sm_100a", "sm_100f"):  # Blackwell: the sm100 family, FP32-scale path (launchers/sm100_fp8_gemm.py)
        from . import sm100_fp8_gemm
        return sm100_fp8_gemm.build_plan(kind, tensors, num_sms, arch, expected_m, psum_alignment)
    a, sa, b, sb, out = tensors[:5]
    k = a.shape[-1]
    kb = ceil_div(k, 128)
    num_groups, n = (1, b.shape[0]) if kind == KernelType.NORMAL else b.shape[:2]
    if kind == KernelType.BATCHED:
        shape_m = a.shape[1]
        rows = num_groups * shape_m
        a2, out2 = checks.rows_view(a, "lhs[0] (A)"), checks.rows_view(out, "out")
    elif kind == KernelType.M_GROUPED_MASKED:
        m_max = a.shape[1]
        rows = num_groups * m_max
        a2, out2 = a.view(rows, k), out.view(rows, n)
        sa_inner, sa_outer, sa_stride = m_max, num_groups * kb, sa.stride(2) if kb > 1 else \
            get_tma_aligned_size(m_max, 4)
        shape_m = m_max
    else:
        rows = a.shape[0]
        a2, out2 = a, out
        sa_inner, sa_outer, sa_stride = rows, kb, sa.stride(1) if kb > 1 else get_tma_aligned_size(rows, 4)
        shape_m = rows
    b2 = b.view(num_groups * n, k)
    device_index = a.device.index
    kernel = _call_kernel(kind, a, b, num_sms, arch, expected_m, psum_alignment)
    cfg = kernel.config
    out_row_stride = checks.tma_row_stride(out2)
    params = ParamBuffer()
    a_map = ((k, rows), (checks.tma_row_stride(a2),), (128, cfg.a_box_rows or cfg.block_m), 128)
    params.tensor_map(0, 1, *a_map)
    params.tensor_map(2, 1, (k, num_groups * n), (checks.tma_row_stride(b2),), (128, cfg.block_n), 128)
    if kind == KernelType.BATCHED:  # SA is gathered through its pointer: this map is never read, A's stands in
        params.tensor_map(0, 1, *a_map)
    else:
        params.tensor_map(1, 4, (sa_inner, sa_outer), (sa_stride,), (cfg.block_m, 1), 0, l2_promotion=False)
    # NOTES: each math warpgroup stores its own 64-row stripes of the tile, hence a 64-row box.
    d_box = cfg.block_n if cfg.swizzle_d_bytes == 0 else cfg.swizzle_d_bytes // 2
    params.tensor_map(4, 2, (n, rows), (out_row_stride,), (d_box, 64), cfg.swizzle_d_bytes)
    params.pointer(3)
    params.u32(shape_m)
    if kind == KernelType.NORMAL:  # grouped_layout, num_groups, d, d_row_stride: unused by the dense GEMM
        params.null_pointer(), params.u32(0), params.null_pointer(), params.u32(0)
    else:
        params.pointer(5) if len(tensors) > 5 else params.null_pointer()
        params.u32(num_groups), params.pointer(4), params.u32(out_row_stride)
    if kind == KernelType.BATCHED:  # sa, its group / row / k strides (elements; 0 along a dimension of size 1)
        params.pointer(1)
        for size, stride in zip(sa.shape, sa.stride()):
            params.u32(stride if size > 1 else 0)
    else:
        params.null_pointer(), params.u32(0), params.u32(0), params.u32(0)
    launch = params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, cfg.num_multicast)
    # TMA operands need 16-byte aligned addresses; SB, the index tensor and a gathered SA are read as plain arrays.
    align_masks = (15, 3 if kind == KernelType.BATCHED else 15, 15, 3, 15, 3)[:len(tensors)]
    return make_plan(kernel.function, device_index, align_masks, [checks.extent_bytes(t) for t in tensors], (4,),
                     (launch,))


# ---- Validation: one normaliser per op of this family, one layout type, one `run` ----

_NAMES_1D2D = ("lhs[0] (A)", "lhs[1] (SA)", "rhs[0] (B)", "rhs[1] (SB)", "out")


# The ops that the sm100 family (launchers/sm100_fp8_gemm.py) runs on sm_100 devices, through `build_plan`.
_SM100_OPS = ("gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
              "m_grouped_gemm_fp8_fp8_bf16_nt_masked")


def can_implement(device: torch.device, op: str) -> None:
    """Raise NotImplementedError unless this family (or, on sm_100, the sm100 family) has a kernel for the device."""
    arch = get_device_arch(device.index)
    if arch in ("sm_100a", "sm_100f") and op in _SM100_OPS:
        return
    if arch != "sm_90a":
        raise NotImplementedError(f"{op} has no kernel for {arch} yet (device {device})")


@dataclass
class GemmLayout:
    """What the full checks concluded for one layout of a dense / contiguous / masked call (dtypes, shapes,
    strides, devices, SM cap, expected_m); `action` is "none" (nothing to compute), "zero" (zero out),
    "zero_masked" (k = 0, masked) or "launch". Plans are made once per kernel-ready tensor geometry."""
    kind: KernelType
    action: str
    device: torch.device
    ragged_n: bool               # n % 8 != 0: through an aligned temporary (dense, contiguous)
    sa_ready: bool               # SA already MN-major and TMA-aligned (its pointer is still checked per call)
    sb_contiguous: bool
    extents: Tuple[int, ...]     # bytes spanned by (A, SA, B, SB, out[, index]), for the overlap check
    expected_m: int
    num_sms: int
    arch: str
    psum_alignment: int = 0      # psum layout: row alignment of the experts' starts
    plans: dict = field(default_factory=dict)

    def run(self, lhs, rhs, out, index=None, *host_ints):
        """The per-call part: pointer checks, then nothing, zeroing or the launch. Returns the plan when the call
        needed no conversion (so `_C` can launch later calls of this layout by itself), else None."""
        a, sa = lhs
        b, sb = rhs
        tensors = (a, sa, b, sb, out) if index is None else (a, sa, b, sb, out, index)
        if self.action == "none":
            return noop_plan(self.device.index, len(tensors), self.extents, (4,))
        ptrs = [t.data_ptr() for t in tensors]
        base_names = _NAMES_BMM if self.kind == KernelType.BATCHED else _NAMES_1D2D
        if self.action == "launch" and (ptrs[0] | ptrs[2] | (0 if self.ragged_n else ptrs[4])) & 15:
            for i in (0, 2) + (() if self.ragged_n else (4,)):
                checks.check_tma_matrix(checks.rows_view(tensors[i], base_names[i]), base_names[i])
        names = base_names + ((_INDEX_NAMES[self.kind],) if index is not None else ())
        checks.check_no_overlap_ptrs("out", ptrs[4], self.extents[4],
                                     [(names[i], ptrs[i], self.extents[i]) for i in range(len(tensors)) if i != 4])
        if self.action == "zero":
            out.zero_()
            return None
        if self.action == "zero_masked":
            num_groups, m_max, _ = out.shape
            rows = torch.arange(m_max, device=self.device).view(1, m_max, 1)
            zero = torch.zeros((), dtype=out.dtype, device=self.device)
            out.copy_(torch.where(rows < index.view(num_groups, 1, 1), zero, out))
            return None
        if self.kind == KernelType.BATCHED:  # the kernel gathers SA as it is
            sa_k, sb_k = sa, sb if self.sb_contiguous else sb.contiguous()
        else:
            sa_k, sb_k = checks.tma_ready_scales(sa, sb, self.sa_ready, self.sb_contiguous)
        target = out
        if self.ragged_n:
            m, n = out.shape
            target = torch.empty((m, n + (-n) % 8), dtype=out.dtype, device=self.device)
        kernel_tensors = (a, sa_k, b, sb_k, target) + tensors[5:]
        plan = self._launch(kernel_tensors)
        if self.ragged_n:
            out.copy_(target[:, :out.shape[1]])
        return plan if (sa_k is sa and sb_k is sb and target is out) else None

    def load_kernel(self, lhs, rhs, out, index=None, *host_ints) -> None:
        """Compile mode (deep_gemm.set_compile_mode): compile or load this layout's kernel; launch nothing, write
        nothing."""
        if self.action == "launch":
            _call_kernel(self.kind, lhs[0], rhs[0], self.num_sms, self.arch, self.expected_m, self.psum_alignment)

    def _launch(self, tensors):
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = build_plan(self.kind, tensors, self.num_sms, self.arch, self.expected_m,
                                                     self.psum_alignment)
        _C.launch(plan, tuple(t.data_ptr() for t in tensors))
        return plan


_INDEX_NAMES = {KernelType.M_GROUPED_CONTIGUOUS: "m_indices", KernelType.M_GROUPED_MASKED: "masked_m",
                KernelType.M_GROUPED_PSUM: "grouped_layout"}


def _layout(kind, action, device, sa, sb, named, ragged_n=False, expected_m=0, psum_alignment=0) -> GemmLayout:
    return GemmLayout(kind, action, device, ragged_n, checks.is_col_major_tma_aligned(sa), sb.is_contiguous(),
                      tuple(checks.extent_bytes(t) for _, t in named), expected_m, get_num_sms(device.index),
                      get_device_arch(device.index), psum_alignment)


def normalise_dense(lhs, rhs, out) -> GemmLayout:
    """Every layout check of `gemm_fp8_fp8_bf16_nt`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    checks.check_tensor(b, "rhs[0] (B)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 2)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    m, k = a.shape
    n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"rhs[0] (B) must have shape (n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(out, "out", (m, n), "m x n")
    kb = ceil_div(k, 128)
    checks.check_shape(sa, "lhs[1] (SA)", (m, kb), "m x ceil(k/128)")
    checks.check_shape(sb, "rhs[1] (SB)", (ceil_div(n, 128), kb), "ceil(n/128) x ceil(k/128)")
    named = list(zip(_NAMES_1D2D, (a, sa, b, sb, out)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.NORMAL
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named)
    # NOTES: a TMA store writes whole 16-byte chunks of a row: with n % 8 != 0 the last chunk would spill into
    # whatever follows the row (measured on the H200), so such outputs go through an aligned temporary.
    ragged_n = n % 8 != 0
    checks.check_out_rows(out, ragged_n)
    checks.check_no_overlap(out, "out", named[:4])
    if k == 0:
        return _layout(kind, "zero", device, sa, sb, named, ragged_n)
    checks.check_tma_matrix(a, "lhs[0] (A)")
    checks.check_tma_matrix(b, "rhs[0] (B)")
    can_implement(device, "gemm_fp8_fp8_bf16_nt")
    return _layout(kind, "launch", device, sa, sb, named, ragged_n)


def _check_grouped_rhs(rhs, k: int):
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


def _check_operand(t: torch.Tensor, name: str) -> None:
    """A 2-D or stacked 3-D TMA operand (A, B or out): rows of unit stride, 16-byte aligned row stride/pointer."""
    checks.check_tma_matrix(checks.rows_view(t, name), name)


def _check_stacked_rows(lhs, rhs, out):
    """The operands of both contiguous layouts (experts' rows stacked along M): A [M, k], SA [M, ceil(k/128)],
    B / SB grouped, out [M, n] BF16. Returns (a, sa, b, sb, out, M, n, k, G)."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    m, k = a.shape
    b, sb, num_groups, n = _check_grouped_rhs(rhs, k)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    checks.check_shape(out, "out", (m, n), "M x n")
    checks.check_shape(sa, "lhs[1] (SA)", (m, ceil_div(k, 128)), "M x ceil(k/128)")
    return a, sa, b, sb, out, m, n, k, num_groups


def normalise_contiguous(lhs, rhs, out, m_indices) -> GemmLayout:
    """Every layout check of `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`, with errors naming the argument."""
    a, sa, b, sb, out, m, n, k, num_groups = _check_stacked_rows(lhs, rhs, out)
    checks.check_index_tensor(m_indices, "m_indices", (m,), "M")
    named = list(zip(_NAMES_1D2D + ("m_indices",), (a, sa, b, sb, out, m_indices)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_CONTIGUOUS
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named)
    ragged_n = n % 8 != 0
    checks.check_out_rows(out, ragged_n)
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    if k == 0 or num_groups == 0:
        return _layout(kind, "zero", device, sa, sb, named, ragged_n)
    _check_operand(a, "lhs[0] (A)")
    _check_operand(b, "rhs[0] (B)")
    can_implement(device, "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous")
    return _layout(kind, "launch", device, sa, sb, named, ragged_n)


def normalise_masked(lhs, rhs, out, masked_m, expected_m) -> GemmLayout:
    """Every layout check of `m_grouped_gemm_fp8_fp8_bf16_nt_masked`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 3)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 3)
    num_groups_a, m_max, k = a.shape
    b, sb, num_groups, n = _check_grouped_rhs(rhs, k)
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
    named = list(zip(_NAMES_1D2D + ("masked_m",), (a, sa, b, sb, out, masked_m)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_MASKED
    hint = min(max(int(expected_m), 1), max(m_max, 1))
    if num_groups == 0 or m_max == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=hint)
    if n % 8 != 0:
        raise ValueError(f"rhs[0] (B): the masked layout needs n % 8 == 0 (got n={n}); pad B's rows to a multiple "
                         f"of 8 and slice the output")
    _check_operand(out, "out")
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    if k == 0:
        return _layout(kind, "zero_masked", device, sa, sb, named, expected_m=hint)
    _check_operand(a, "lhs[0] (A)")
    _check_operand(b, "rhs[0] (B)")
    can_implement(device, "m_grouped_gemm_fp8_fp8_bf16_nt_masked")
    return _layout(kind, "launch", device, sa, sb, named, expected_m=hint)


_NAMES_BMM = ("lhs[0] (x)", "lhs[1] (x_scales)", "rhs[0] (y)", "rhs[1] (y_scales)", "out")
# The kernel takes SA's strides as 32-bit element counts.
_MAX_SCALE_STRIDE = (1 << 32) - 1


def normalise_bmm(lhs, rhs, out) -> GemmLayout:
    """Every layout check of `bmm_fp8_fp8_bf16_nt`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(a, _NAMES_BMM[0], torch.float8_e4m3fn, 3)
    checks.check_tensor(sa, _NAMES_BMM[1], torch.float32, 3)
    checks.check_tensor(b, _NAMES_BMM[2], torch.float8_e4m3fn, 3)
    checks.check_tensor(sb, _NAMES_BMM[3], torch.float32, 3)
    checks.check_tensor(out, "out", torch.bfloat16, 3)
    batches, m, k = a.shape
    if b.shape[0] != batches or b.shape[2] != k:
        raise ValueError(f"{_NAMES_BMM[2]} must have shape ({batches}, n, {k}) to match x {tuple(a.shape)}, got "
                         f"{tuple(b.shape)}")
    n = b.shape[1]
    kb = ceil_div(k, 128)
    checks.check_shape(sa, _NAMES_BMM[1], (batches, m, kb), "B x m x ceil(k/128)")
    checks.check_shape(sb, _NAMES_BMM[3], (batches, ceil_div(n, 128), kb), "B x ceil(n/128) x ceil(k/128)")
    checks.check_shape(out, "out", (batches, m, n), "B x m x n")
    if max(sa.stride()) > _MAX_SCALE_STRIDE:
        raise ValueError(f"{_NAMES_BMM[1]}: strides above 2^32 - 1 elements are not supported, got {sa.stride()}")
    named = list(zip(_NAMES_BMM, (a, sa, b, sb, out)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.BATCHED
    if batches == 0 or m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=max(m, 1))
    if n % 8 != 0:
        raise ValueError(f"{_NAMES_BMM[2]}: the batched GEMM needs n % 8 == 0 (got n={n}); pad y's rows to a "
                         f"multiple of 8 and slice the output")
    _check_operand(out, "out")
    checks.check_no_overlap(out, "out", named[:4])
    if k == 0:
        return _layout(kind, "zero", device, sa, sb, named, expected_m=m)
    _check_operand(a, _NAMES_BMM[0])
    _check_operand(b, _NAMES_BMM[2])
    can_implement(device, "bmm_fp8_fp8_bf16_nt")
    return _layout(kind, "launch", device, sa, sb, named, expected_m=m)


def normalise_psum(lhs, rhs, out, grouped_layout, expected_m, alignment) -> GemmLayout:
    """Every layout check of the contiguous GEMM with DeepGEMM's psum layout (`m_grouped_fp8_gemm_nt_contiguous(...,
    use_psum_layout=True)`): grouped_layout [G] int32 holds the running row count at the end of each expert; expert
    g's rows are [align(grouped_layout[g - 1], alignment), grouped_layout[g]). expected_m: expected rows per
    expert (0: the average over M), only for the configuration choice."""
    a, sa, b, sb, out, m, n, k, num_groups = _check_stacked_rows(lhs, rhs, out)
    checks.check_index_tensor(grouped_layout, "grouped_layout", (num_groups,), "G (psum layout)")
    for name, value in (("expected_m_for_psum_layout", expected_m), ("the mk alignment", alignment)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if expected_m < 0:
        raise ValueError(f"expected_m_for_psum_layout must be >= 0, got {expected_m}")
    if alignment <= 0:
        raise ValueError(f"the mk alignment for the contiguous layout must be > 0, got {alignment}")
    if num_groups == 0 or k == 0:
        raise ValueError(f"the psum layout needs G > 0 and k > 0 (as DeepGEMM), got G={num_groups}, k={k}")
    named = list(zip(_NAMES_1D2D + ("grouped_layout",), (a, sa, b, sb, out, grouped_layout)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_PSUM
    hint = min(max(int(expected_m) or ceil_div(m, num_groups), 1), max(m, 1))
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=hint, psum_alignment=alignment)
    if n % 8 != 0:
        raise ValueError(f"rhs[0] (B): the psum layout needs n % 8 == 0 (got n={n}); pad B's rows to a multiple "
                         f"of 8 and slice the output")
    _check_operand(out, "out")
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    _check_operand(a, "lhs[0] (A)")
    _check_operand(b, "rhs[0] (B)")
    can_implement(device, "m_grouped_fp8_gemm_nt_contiguous (psum layout)")
    return _layout(kind, "launch", device, sa, sb, named, expected_m=hint, psum_alignment=alignment)
