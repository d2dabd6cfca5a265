"""Kernel family of include/deep_gemm/sm100/fp8_gemm_1d2d.cuh (Blackwell sm_100a: dense, MoE contiguous and masked
GEMMs), in its two scale paths:

- ``scales="fp32"`` (path (a)): the FP32 scales as given, promoted per 128-wide K block exactly as the Hopper kernels
  do; results match sm_90 within the usual calc_diff. The variants dense, contiguous and masked (the May-2025 names,
  and DeepGEMM's v2 names with disable_ue8m0_cast=True) take this path on an sm_100 device.
- ``scales="ue8m0"`` (path (b)): each scale is ROUNDED UP TO A POWER OF TWO (UE8M0) and the block-scaled MMA
  (tcgen05.mma kind::mxf8f6f4) applies it in hardware, as DeepGEMM does on SM100: faster, but the result is the
  product with the rounded scales, not with the given ones. The variants dense_ue8m0, contiguous_ue8m0 and
  masked_ue8m0 (DeepGEMM's v2 names by default on sm_100), which also take packed UE8M0 int32 scales.

The arguments are checked as on sm_90 (fp8_gemm_1d2d_args.py). Every kernel (kind x scale path) runs a self-test on
small ragged problems the first time a process launches it on a device (deep_gemm/selftest.py, DG_SM100_SELFTEST):
these kernels were compile-verified only, never run on hardware when written.
"""
import functools
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import torch

from .. import jit, log, selftest
from ..envs import read_env
from ..heuristics import GemmProblem, KernelType
from ..heuristics.common import ceil_div, get_forced_config, walks_groups
from ..heuristics.sm100 import (SCALES_FP32, SCALES_UE8M0, Sm100Config, check_scales, forced,
                                get_sm100_config, sm100_kernel_variants)
from ..jit.leader import is_compile_leader
from ..jit.runtime import ensure_context
from ..scale_layout import ceil_to_ue8m0, get_tma_aligned_size
from . import checks
from .fp8_gemm_1d2d_args import (CONTIGUOUS, DENSE, GEMM_TYPES, MASKED, GemmLayout, normalise_contiguous,
                                 normalise_dense, normalise_masked)
from .plan import POINTER, TENSOR_MAP, U32, ParamBuffer, launch, make_plan
from .variant import Family, Variant

HEADER = "deep_gemm/sm100/fp8_gemm_1d2d.cuh"
FUNCTION = "deep_gemm::sm100::fp8_gemm_1d2d_impl"
KINDS = (KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED)
# The kernel's parameters, in its signature's order.
PARAMS = (("tensor_map_a", TENSOR_MAP), ("tensor_map_b", TENSOR_MAP), ("tensor_map_sfa", TENSOR_MAP),
          ("tensor_map_sfb", TENSOR_MAP), ("sa", POINTER), ("sa_stride", U32), ("sb", POINTER), ("shape_m", U32),
          ("grouped_layout", POINTER), ("num_groups", U32), ("d", POINTER), ("d_row_stride", U32))
_NAMES = {KernelType.NORMAL: "sm100_fp8_gemm_1d2d", KernelType.M_GROUPED_CONTIGUOUS: "sm100_fp8_gemm_1d2d_contiguous",
          KernelType.M_GROUPED_MASKED: "sm100_fp8_gemm_1d2d_masked"}


def variant_name(kind: KernelType, scales: str) -> str:
    """The variant that runs kernel `kind` with `scales` ("dense", "dense_ue8m0", ...)."""
    return kind.value + ("_ue8m0" if scales == SCALES_UE8M0 else "")


def _check_kind(kind: KernelType) -> None:
    if kind not in KINDS:
        raise NotImplementedError(f"no sm100 kernel for {kind.value} GEMMs (dense, contiguous and masked only)")


def kernel_source(n: int, k: int, config: Sm100Config, kind: KernelType = KernelType.NORMAL) -> jit.KernelSource:
    """The template instantiation for (kind, n, k, config); m (and the groups) stay run-time arguments."""
    _check_kind(kind)
    named = dict(kGemmType=GEMM_TYPES[kind], SHAPE_N=n, SHAPE_K=k, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                 kNumStages=config.num_stages, kNumMulticast=config.num_multicast,
                 kMulticastOnA=config.multicast_on_a, kScaleUE8M0=config.ue8m0, kSmemSize=config.smem_size,
                 kNumTmemCols=config.tmem_cols)
    name = _NAMES[kind] + ("_ue8m0" if config.ue8m0 else "")
    return jit.KernelSource(name=name, header=HEADER, function=FUNCTION, config=named)


def kernel_config(m: int, n: int, k: int, num_sms: int, arch: str, kind: KernelType, num_groups: int,
                  scales: str = SCALES_FP32) -> Sm100Config:
    """The configuration a call loads; m: rows (dense, contiguous) or expected rows per group (masked)."""
    return forced(get_forced_config()) or get_sm100_config(GemmProblem(m, n, k, num_sms, arch, kind, num_groups),
                                                           scales)


def runtime_kernels(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL,
                    ms: Optional[Iterable[int]] = None, num_groups: int = 1,
                    scales: str = SCALES_FP32) -> List[jit.KernelSource]:
    """The distinct kernels calls of (kind, n, k) load, for heuristic m in `ms`; `ms=None`: every kernel any m can
    pick (dense and contiguous only: a masked kernel depends on expected_m and the group count)."""
    _check_kind(kind)
    if ms is None:
        if walks_groups(kind):
            raise ValueError(f"the {kind.value} kernels depend on expected_m: give the expected m values")
        configs = sm100_kernel_variants(n, k, num_sms, kind, scales)
    else:
        configs = [kernel_config(m, n, k, num_sms, arch, kind, num_groups, scales) for m in ms]
    sources = {}
    for config in configs:
        source = kernel_source(n, k, config, kind)
        sources.setdefault(source.instantiation(), source)
    return list(sources.values())


@dataclass
class _Kernel:
    config: Sm100Config
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}
_seen_nk: set = set()


def clear_kernels() -> None:
    _kernels.clear()


def precompile_variants(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL,
                        scales: str = SCALES_FP32) -> int:
    """Compile (into the disk cache) every kernel the heuristic can pick for (n, k) at any m, in parallel processes
    (the node's compile leader only), as the sm90 family does on the first sight of an (n, k); returns how many were
    missing."""
    if not is_compile_leader():
        return 0
    return jit.build_many(runtime_kernels(n, k, num_sms, arch, kind, scales=scales), arch)


def _kernel(m: int, n: int, k: int, num_sms: int, device_index: int, arch: str, kind: KernelType, num_groups: int,
            scales: str) -> _Kernel:
    forced_config = get_forced_config()
    key = (m, n, k, num_sms, device_index, arch, forced_config, kind, num_groups, scales)
    kernel = _kernels.get(key)
    if kernel is None:
        config = kernel_config(m, n, k, num_sms, arch, kind, num_groups, scales)
        env = read_env()
        log.apply_env(env)
        log.configs.debug("sm100 %s m=%d n=%d k=%d groups=%d: %s", kind.value, m, n, k, num_groups, config)
        seen = (n, k, num_sms, arch, kind, scales)
        if env.jit_precompile and forced_config is None and not walks_groups(kind) and seen not in _seen_nk:
            _seen_nk.add(seen)
            precompile_variants(n, k, num_sms, arch, kind, scales)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, k, config, kind), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


def call_kernel(kind: KernelType, a, b, num_sms: int, arch: str, expected_m: int,
                scales: str = SCALES_FP32) -> _Kernel:
    """The kernel of a call with A and B (compile mode loads it without launching)."""
    _check_kind(kind)
    num_groups, n = (1, b.shape[0]) if kind == KernelType.NORMAL else b.shape[:2]
    m = expected_m if walks_groups(kind) else a.shape[0]
    return _kernel(m, n, a.shape[-1], num_sms, a.device.index, arch, kind, num_groups, check_scales(scales))


# ---- UE8M0 scale factors (path (b)) ----

def ue8m0_exponents(sf: torch.Tensor) -> torch.Tensor:
    """The biased exponent (int32 in [1, 254]) of each FP32 scale rounded UP to a power of two (`ceil_to_ue8m0`)."""
    return ceil_to_ue8m0(sf).view(torch.int32) >> 23


def pack_ue8m0(sf: torch.Tensor) -> torch.Tensor:
    """[..., mn, kb] FP32 scales -> [..., ceil(kb/4), align(mn, 4)] int32 (a view [..., :, :mn]): four K blocks'
    exponents per int32, lowest K block in the lowest byte, MN-major with a 16-byte aligned MN stride."""
    *batch, mn, kb = sf.shape
    kg = ceil_div(kb, 4)
    e = ue8m0_exponents(sf)
    e = torch.nn.functional.pad(e, (0, kg * 4 - kb)).view(*batch, mn, kg, 4)
    packed = e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)
    out = torch.zeros((*batch, kg, get_tma_aligned_size(mn, 4)), dtype=torch.int32, device=sf.device)
    out = out[..., :mn]
    out.copy_(packed.transpose(-1, -2))
    return out


def rows_of_block_scales(sb: torch.Tensor, n: int) -> torch.Tensor:
    """[..., ceil(n/128), kb] 128x128 block scales -> [..., n, kb] per-row scales (each row takes its block's)."""
    return sb.repeat_interleave(128, dim=-2)[..., :n, :]


# ---- Plans ----

@dataclass(frozen=True)
class Geometry:
    """What the kernel parameters of one layout depend on (strides in elements). `scale_stride`: SA's stride between
    K blocks (path (a)) or the packed factors' stride between K groups, SFA / SFB (path (b))."""
    k: int
    n: int
    num_groups: int
    rows: int           # rows of A / D (masked: G * m_max)
    shape_m: int        # m, or m_max (masked)
    a_row_stride: int
    b_row_stride: int
    out_row_stride: int
    sa_stride: int
    sfb_stride: int = 0


def kernel_params(kind: KernelType, cfg: Sm100Config, g: Geometry) -> ParamBuffer:
    """The kernel's parameters, in its signature's order, over the call tensors (A, SA, B, SB, out[, index])."""
    masked = kind == KernelType.M_GROUPED_MASKED
    load_n = cfg.block_n // 2 if cfg.pair else cfg.block_n
    params = ParamBuffer(PARAMS)
    params.tensor_map("tensor_map_a", 0, 1, (g.k, g.rows), (g.a_row_stride,), (128, 128), 128)
    params.tensor_map("tensor_map_b", 2, 1, (g.k, g.num_groups * g.n), (g.b_row_stride,), (128, load_n), 128)
    if cfg.ue8m0:
        kg = ceil_div(ceil_div(g.k, 128), 4)
        sfa_dims = (g.shape_m, g.num_groups * kg) if masked else (g.rows, kg)
        params.tensor_map("tensor_map_sfa", 1, 4, sfa_dims, (g.sa_stride,), (128, 1), 0, l2_promotion=False)
        params.tensor_map("tensor_map_sfb", 3, 4, (g.n, g.num_groups * kg), (g.sfb_stride,), (cfg.block_n, 1), 0,
                          l2_promotion=False)
        params.pointer("sa", None), params.u32("sa_stride", 0), params.pointer("sb", None)
    else:  # the scale-factor maps: unused on this path
        params.unused_tensor_map("tensor_map_sfa"), params.unused_tensor_map("tensor_map_sfb")
        params.pointer("sa", 1), params.u32("sa_stride", g.sa_stride), params.pointer("sb", 3)
    params.u32("shape_m", g.shape_m)
    dense = kind == KernelType.NORMAL
    params.pointer("grouped_layout", None if dense else 5), params.u32("num_groups", 0 if dense else g.num_groups)
    params.pointer("d", 4), params.u32("d_row_stride", g.out_row_stride)
    return params


def build_plan(kind: KernelType, tensors, num_sms: int, arch: str, expected_m: int = 0, psum_alignment: int = 0,
               scales: str = SCALES_FP32):
    """The `_C` plan of one layout (as sm90_fp8_gemm_1d2d.build_plan: kernel-ready A, SA, B, SB, out[, index]).
    scales="fp32": SA MN-major TMA-aligned FP32, SB contiguous FP32. scales="ue8m0": SA / SB packed UE8M0 int32
    (`pack_ue8m0` of SA and of the per-row SB; masked SA [G, kg, m_max'], SB [G, kg, n'])."""
    _check_kind(kind)
    if psum_alignment:
        raise NotImplementedError("no sm100 kernel for the psum layout")
    ue8m0 = check_scales(scales) == SCALES_UE8M0
    a, sa, b, sb, out = tensors[:5]
    k = a.shape[-1]
    kb = ceil_div(k, 128)
    num_groups, n = (1, b.shape[0]) if kind == KernelType.NORMAL else b.shape[:2]
    if kind == KernelType.M_GROUPED_MASKED:
        shape_m = a.shape[1]
        rows = num_groups * shape_m
        a2, out2 = a.view(rows, k), out.view(rows, n)
    else:
        rows = shape_m = a.shape[0]
        a2, out2 = a, out
    if ue8m0:
        sa_stride, sfb_stride = sa.stride(-2), sb.stride(-2)
    else:  # SA [.., m, kb] MN-major: its stride between K blocks (any value when kb = 1)
        sa_stride, sfb_stride = sa.stride(-1) if kb > 1 else get_tma_aligned_size(shape_m, 4), 0
    geometry = Geometry(k, n, num_groups, rows, shape_m, checks.tma_row_stride(a2),
                        checks.tma_row_stride(b.view(num_groups * n, k)), checks.tma_row_stride(out2), sa_stride,
                        sfb_stride)
    device_index = a.device.index
    kernel = call_kernel(kind, a, b, num_sms, arch, expected_m, scales)
    cfg = kernel.config
    # NOTES: the problems are deep_gemm/sm100_selftest.py's (they call the public ops, above this layer), registered
    # with the gate when deep_gemm is imported.
    selftest.ensure(device_index, variant_name(kind, scales),
                    functools.partial(selftest.run_registered, kind, scales, a.device))
    launch = kernel_params(kind, cfg, geometry).launch(cfg.num_sms, cfg.num_threads, cfg.smem_size,
                                                        cfg.num_multicast)
    scale_align = 15 if ue8m0 else 3
    align_masks = (15, scale_align, 15, scale_align, 15, 3)[:len(tensors)]
    return make_plan(kernel.function, device_index, align_masks, [checks.extent_bytes(t) for t in tensors], (4,),
                     (launch,))


# ---- The UE8M0 variants (path (b)): packed or FP32 scales, checked as the FP32 path checks them ----

def packed_scales_view(sf: torch.Tensor, name: str, lead: Tuple[int, ...], mn: int, kb: int) -> torch.Tensor:
    """A caller's packed UE8M0 scales as the kernel reads them. Expected: int32 [*lead, mn, ceil(kb/4)], MN-major
    with a 16-byte aligned MN stride, 16-byte aligned (what `deep_gemm.utils.get_mn_major_tma_aligned_packed_ue8m0_
    tensor` returns; RHS scales per row of B); returned as the view [*lead, ceil(kb/4), mn]."""
    kg = ceil_div(kb, 4)
    expected = (*lead, mn, kg)
    if not isinstance(sf, torch.Tensor) or sf.dtype != torch.int32 or tuple(sf.shape) != expected:
        got = f"{sf.dtype} {tuple(sf.shape)}" if isinstance(sf, torch.Tensor) else type(sf).__name__
        raise ValueError(f"{name}: packed UE8M0 scales must be int32 of shape {expected}, got {got}")
    k_stride = sf.stride(-1) if kg > 1 else get_tma_aligned_size(mn, 4)
    group_ok = not lead or lead[0] <= 1 or sf.stride(0) == kg * k_stride
    if (mn > 1 and sf.stride(-2) != 1) or k_stride % 4 or k_stride < mn or not group_ok or sf.data_ptr() % 16:
        raise ValueError(f"{name}: packed UE8M0 scales must be MN-major with a 16-byte aligned MN stride and a "
                         f"16-byte aligned address (deep_gemm.utils.get_mn_major_tma_aligned_packed_ue8m0_tensor), "
                         f"got strides {tuple(sf.stride())}")
    return sf.as_strided((*lead, kg, mn), (*((kg * k_stride,) if lead else ()), k_stride, 1), sf.storage_offset())


def _fp32_stand_ins(lhs, rhs):
    """For packed UE8M0 scales: (lhs, rhs) with FP32 scale tensors of the shapes the validation expects in their
    place (never read), and the packed (SA, SB). None when the scales are not packed."""
    if not (isinstance(lhs, tuple) and len(lhs) == 2 and isinstance(rhs, tuple) and len(rhs) == 2
            and isinstance(lhs[1], torch.Tensor) and lhs[1].dtype == torch.int32):
        return None
    (a, sa), (b, sb) = lhs, rhs
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dim() < 2 or b.dim() < 2:
        return None  # the validation reports it
    kb = ceil_div(a.shape[-1], 128)
    n = b.shape[-2]
    empty = functools.partial(torch.empty, dtype=torch.float32, device=a.device)
    fp32_sa = empty((*a.shape[:-1], kb))
    fp32_sb = empty((*b.shape[:-2], ceil_div(n, 128), kb))
    return (a, fp32_sa), (b, fp32_sb), (sa, sb)


@dataclass
class Ue8m0Layout:
    """A validated layout of a UE8M0 variant: the FP32 path's checks (`gemm`, made with FP32 stand-ins when the
    caller's scales are packed) and whether they are. Its calls pack the scales (or check the packed ones' address)
    and launch, never through a plan `_C` keeps: the scales it launches with are not the caller's tensors."""
    gemm: GemmLayout
    packed: bool
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def device(self) -> torch.device:
        return self.gemm.device

    @property
    def arch(self) -> str:
        return self.gemm.arch

    @property
    def needs_kernel(self) -> bool:
        return self.gemm.needs_kernel

    def run(self, lhs, rhs, out, index=None, *host_ints) -> None:
        if not self.needs_kernel:  # nothing to compute, or zeros: the FP32 path's handling, on its stand-ins
            if self.packed:
                lhs, rhs, _ = _fp32_stand_ins(lhs, rhs)
            self.gemm.run(lhs, rhs, out, index)
            return None
        a, sa = lhs
        b, sb = rhs
        n = b.shape[-2]
        kb = ceil_div(a.shape[-1], 128)
        if self.packed:
            sfa = packed_scales_view(sa, "lhs[1] (SA)", tuple(a.shape[:-2]), a.shape[-2], kb)
            sfb = packed_scales_view(sb, "rhs[1] (SB)", tuple(b.shape[:-2]), n, kb)
        else:
            sfa = pack_ue8m0(sa)
            sfb = pack_ue8m0(rows_of_block_scales(sb, n))
        target = out
        if self.gemm.ragged_n:
            target = torch.empty((out.shape[0], n + (-n) % 8), dtype=out.dtype, device=out.device)
        tensors = (a, sfa, b, sfb, target) + (() if index is None else (index,))
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = build_plan(self.gemm.kind, tensors, self.gemm.num_sms, self.arch,
                                                     self.gemm.expected_m, 0, SCALES_UE8M0)
        launch(plan, tuple(t.data_ptr() for t in tensors))
        if self.gemm.ragged_n:
            out.copy_(target[:, :n])
        return None

    def load_kernel(self, lhs, rhs, out, index=None, *host_ints) -> None:
        """Compile mode (deep_gemm.set_compile_mode): compile or load this layout's kernel; launch nothing."""
        if self.needs_kernel:
            call_kernel(self.gemm.kind, lhs[0], rhs[0], self.gemm.num_sms, self.arch, self.gemm.expected_m,
                        SCALES_UE8M0)


def _ue8m0_layout(normalise, lhs, rhs, out, *rest) -> Ue8m0Layout:
    stand_ins = _fp32_stand_ins(lhs, rhs)
    if stand_ins is not None:
        lhs, rhs, _ = stand_ins
    return Ue8m0Layout(normalise(lhs, rhs, out, *rest), stand_ins is not None)


def normalise_dense_ue8m0(lhs, rhs, out) -> Ue8m0Layout:
    """Every layout check of `fp8_gemm_nt` with UE8M0 scales (float32, or packed int32 [m, ceil(k/512)] and per ROW
    of B [n, ceil(k/512)])."""
    return _ue8m0_layout(normalise_dense, lhs, rhs, out)


def normalise_contiguous_ue8m0(lhs, rhs, out, m_indices) -> Ue8m0Layout:
    """Every layout check of `m_grouped_fp8_gemm_nt_contiguous` with UE8M0 scales (packed: SA [M, ceil(k/512)], SB
    [G, n, ceil(k/512)])."""
    return _ue8m0_layout(normalise_contiguous, lhs, rhs, out, m_indices)


def normalise_masked_ue8m0(lhs, rhs, out, masked_m, expected_m) -> Ue8m0Layout:
    """Every layout check of `m_grouped_fp8_gemm_nt_masked` with UE8M0 scales (packed: SA [G, m_max, ceil(k/512)],
    SB [G, n, ceil(k/512)])."""
    return _ue8m0_layout(normalise_masked, lhs, rhs, out, masked_m, expected_m)


def load(kind: KernelType, a, b, num_sms: int, arch: str, expected_m: int, psum_alignment: int = 0) -> _Kernel:
    """Compile mode's load of the FP32-path variants' kernel (there is no sm100 psum kernel)."""
    return call_kernel(kind, a, b, num_sms, arch, expected_m, SCALES_FP32)


def warmup_kernels(variant: str, shape: dict, ms: Optional[Iterable[int]], num_sms: int, arch: str,
                   psum_alignment: int) -> List[jit.KernelSource]:
    """The kernels calls of one warm-up shape of `variant` load (deep_gemm.warmup): a UE8M0 variant's are those of
    its scale path."""
    kind, scales = _PATHS[variant]
    return runtime_kernels(shape["n"], shape["k"], num_sms, arch, kind, ms, shape.get("num_groups", 1), scales)


DENSE_UE8M0 = Variant("dense_ue8m0", "fp8_gemm_nt", DENSE.signature, normalise_dense_ue8m0, warmup_as=DENSE.name)
CONTIGUOUS_UE8M0 = Variant("contiguous_ue8m0", "m_grouped_fp8_gemm_nt_contiguous", CONTIGUOUS.signature,
                           normalise_contiguous_ue8m0, warmup_as=CONTIGUOUS.name)
MASKED_UE8M0 = Variant("masked_ue8m0", "m_grouped_fp8_gemm_nt_masked", MASKED.signature, normalise_masked_ue8m0,
                       warmup_as=MASKED.name)
FAMILY = Family("sm100_fp8_gemm_1d2d", HEADER, FUNCTION, PARAMS, ("sm_100a", "sm_100f"),
                (DENSE, CONTIGUOUS, MASKED, DENSE_UE8M0, CONTIGUOUS_UE8M0, MASKED_UE8M0), build_plan, clear_kernels,
                load, warmup_kernels)
# variant name -> (kind, scale path) of its kernels.
_PATHS = {variant_name(kind, scales): (kind, scales) for kind in KINDS for scales in (SCALES_FP32, SCALES_UE8M0)}
