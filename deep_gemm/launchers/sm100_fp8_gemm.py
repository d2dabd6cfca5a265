"""Kernel family of include/deep_gemm/sm100/fp8_gemm_1d2d.cuh (Blackwell sm_100a: dense, MoE contiguous and masked
GEMMs), in its two scale paths:

- ``scales="fp32"`` (default, path (a)): the FP32 scales as given, promoted per 128-wide K block exactly as the Hopper
  kernels do; results match sm_90 within the usual calc_diff. The public ops (`deep_gemm.gemm_fp8_fp8_bf16_nt`, the
  contiguous and masked grouped GEMMs) take this path on an sm_100 device (see `build_plan`).
- ``scales="ue8m0"`` (path (b)): each scale is ROUNDED UP TO A POWER OF TWO (UE8M0) and the block-scaled MMA
  (tcgen05.mma kind::mxf8f6f4) applies it in hardware, as DeepGEMM does on SM100: faster, but the result is the
  product with the rounded scales, not with the given ones. Only through the functions of this module
  (`fp8_gemm_nt`, `m_grouped_fp8_gemm_nt_contiguous`, `m_grouped_fp8_gemm_nt_masked`).

Every family (kind x scale path) runs a self-test on small ragged problems the first time a process launches it on a
device (deep_gemm/selftest.py, DG_SM100_SELFTEST): these kernels were compile-verified only, never run on hardware
when written.
"""
import functools
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import torch

from .. import jit, log, selftest
from ..envs import read_env
from ..heuristics import GemmProblem, KernelType
from ..heuristics.common import ceil_div, get_forced_config, walks_groups
from ..heuristics.sm100 import (SCALES_FP32, SCALES_UE8M0, Sm100Config, check_scales, forced, get_sm100_config,
                                sm100_kernel_variants)
from ..jit.runtime import ensure_context
from ..ops import checks
from ..utils import get_tma_aligned_size
from ..utils.math import ceil_to_ue8m0, per_block_cast_to_fp8, per_token_cast_to_fp8
from .plan import ParamBuffer, make_plan

HEADER = "deep_gemm/sm100/fp8_gemm_1d2d.cuh"
FUNCTION = "deep_gemm::sm100::fp8_gemm_1d2d_impl"
KINDS = (KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED)
_GEMM_TYPES = {
    KernelType.NORMAL: jit.CppName("deep_gemm::GemmType::Normal"),
    KernelType.M_GROUPED_CONTIGUOUS: jit.CppName("deep_gemm::GemmType::MGroupedContiguous"),
    KernelType.M_GROUPED_MASKED: jit.CppName("deep_gemm::GemmType::MGroupedMasked"),
}
_NAMES = {KernelType.NORMAL: "sm100_fp8_gemm_1d2d", KernelType.M_GROUPED_CONTIGUOUS: "sm100_fp8_gemm_1d2d_contiguous",
          KernelType.M_GROUPED_MASKED: "sm100_fp8_gemm_1d2d_masked"}


def _check_kind(kind: KernelType) -> None:
    if kind not in KINDS:
        raise NotImplementedError(f"no sm100 kernel for {kind.value} GEMMs (dense, contiguous and masked only)")


def kernel_source(n: int, k: int, config: Sm100Config, kind: KernelType = KernelType.NORMAL) -> jit.KernelSource:
    """The template instantiation for (kind, n, k, config); m (and the groups) stay run-time arguments."""
    _check_kind(kind)
    named = dict(kGemmType=_GEMM_TYPES[kind], SHAPE_N=n, SHAPE_K=k, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
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
    from ..warmup import is_compile_leader
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
    params = ParamBuffer()
    params.tensor_map(0, 1, (g.k, g.rows), (g.a_row_stride,), (128, 128), 128)
    params.tensor_map(2, 1, (g.k, g.num_groups * g.n), (g.b_row_stride,), (128, load_n), 128)
    if cfg.ue8m0:
        kg = ceil_div(ceil_div(g.k, 128), 4)
        sfa_dims = (g.shape_m, g.num_groups * kg) if masked else (g.rows, kg)
        params.tensor_map(1, 4, sfa_dims, (g.sa_stride,), (128, 1), 0, l2_promotion=False)
        params.tensor_map(3, 4, (g.n, g.num_groups * kg), (g.sfb_stride,), (cfg.block_n, 1), 0, l2_promotion=False)
        params.null_pointer(), params.u32(0), params.null_pointer()
    else:
        params.blob(128), params.blob(128)  # the scale-factor maps: unused on this path
        params.pointer(1), params.u32(g.sa_stride), params.pointer(3)
    params.u32(g.shape_m)
    if kind == KernelType.NORMAL:
        params.null_pointer(), params.u32(0)
    else:
        params.pointer(5), params.u32(g.num_groups)
    params.pointer(4), params.u32(g.out_row_stride)
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
    selftest.ensure(device_index, f"{kind.value}/{scales}", functools.partial(run_selftest, kind, scales, a.device))
    launch = kernel_params(kind, cfg, geometry).launch(cfg.num_sms, cfg.num_threads, cfg.smem_size,
                                                        cfg.num_multicast)
    scale_align = 15 if ue8m0 else 3
    align_masks = (15, scale_align, 15, scale_align, 15, 3)[:len(tensors)]
    return make_plan(kernel.function, device_index, align_masks, [checks.extent_bytes(t) for t in tensors], (4,),
                     (launch,))


_plans: Dict[Tuple, object] = {}


def _launch(kind: KernelType, tensors, num_sms: int, arch: str, expected_m: int, scales: str) -> None:
    from .. import _C
    key = (kind, scales, num_sms, arch, expected_m, get_forced_config(), checks.tensor_geometry(tensors))
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = build_plan(kind, tensors, num_sms, arch, expected_m, 0, scales)
    _C.launch(plan, tuple(t.data_ptr() for t in tensors))


def clear_plans() -> None:
    _plans.clear()


# ---- The scale-path-aware entry points ----

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


def _run(kind: KernelType, normalise, lhs, rhs, out, index, extra, scales: str) -> None:
    """Validate with the sm90 family's normaliser (same checks, same errors), then run on this family."""
    check_scales(scales)
    stand_ins = _fp32_stand_ins(lhs, rhs) if scales == SCALES_UE8M0 else None
    if stand_ins is not None:
        lhs, rhs, (packed_sa, packed_sb) = stand_ins
    layout = normalise(lhs, rhs, out, *(() if index is None else (index,)), *extra)
    if layout.action == "launch" and layout.arch not in ("sm_100a", "sm_100f"):
        raise NotImplementedError(f"the sm100 kernels need an sm_100 device, got {layout.arch}")
    from ..runtime import get_compile_mode
    if get_compile_mode():  # deep_gemm.set_compile_mode: load the kernel, launch nothing, write nothing
        if layout.action == "launch":
            call_kernel(kind, lhs[0], rhs[0], layout.num_sms, layout.arch, layout.expected_m, scales)
        return
    if layout.action != "launch" or scales == SCALES_FP32:
        layout.run(lhs, rhs, out, index)
        return
    a, sa = lhs
    b, sb = rhs
    n = b.shape[-2]
    kb = ceil_div(a.shape[-1], 128)
    if stand_ins is not None:
        sfa = packed_scales_view(packed_sa, "lhs[1] (SA)", tuple(a.shape[:-2]), a.shape[-2], kb)
        sfb = packed_scales_view(packed_sb, "rhs[1] (SB)", tuple(b.shape[:-2]), n, kb)
    else:
        sfa = pack_ue8m0(sa)
        sfb = pack_ue8m0(rows_of_block_scales(sb, n))
    target = out
    if layout.ragged_n:
        target = torch.empty((out.shape[0], n + (-n) % 8), dtype=out.dtype, device=out.device)
    tensors = (a, sfa, b, sfb, target) + (() if index is None else (index,))
    _launch(kind, tensors, layout.num_sms, layout.arch, layout.expected_m, scales)
    if layout.ragged_n:
        out.copy_(target[:, :n])


def fp8_gemm_nt(lhs, rhs, out: torch.Tensor, scales: str = SCALES_FP32) -> None:
    """out = A @ B^T on an sm_100 device: lhs = (A [m, k] e4m3, SA [m, ceil(k/128)] fp32), rhs = (B [n, k] e4m3,
    SB [ceil(n/128), ceil(k/128)] fp32), out [m, n] bf16.

    scales="fp32": exact FP32 scales (the Hopper numerics). scales="ue8m0": every scale is ROUNDED UP TO A POWER OF
    TWO and applied by the hardware's block-scaled MMA: faster, but the result is that of the rounded scales, not of
    the given ones. With "ue8m0" the scales may also come packed: int32 UE8M0 exponents, SA [m, ceil(k/512)] and SB
    per ROW of B [n, ceil(k/512)], MN-major (`deep_gemm.utils.get_mn_major_tma_aligned_packed_ue8m0_tensor` of
    power-of-two scales), used as they are."""
    from .sm90_fp8_gemm_1d2d import normalise_dense
    _run(KernelType.NORMAL, normalise_dense, lhs, rhs, out, None, (), scales)


def m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out: torch.Tensor, m_indices: torch.Tensor,
                                     scales: str = SCALES_FP32) -> None:
    """The contiguous MoE GEMM (as `deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`) on an sm_100 device.
    scales="ue8m0" ROUNDS EVERY SCALE UP TO A POWER OF TWO (see `fp8_gemm_nt`; packed: SA [M, ceil(k/512)], SB
    [G, n, ceil(k/512)])."""
    from .sm90_fp8_gemm_1d2d import normalise_contiguous
    _run(KernelType.M_GROUPED_CONTIGUOUS, normalise_contiguous, lhs, rhs, out, m_indices, (), scales)


def m_grouped_fp8_gemm_nt_masked(lhs, rhs, out: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                 scales: str = SCALES_FP32) -> None:
    """The masked MoE GEMM (as `deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked`) on an sm_100 device.
    scales="ue8m0" ROUNDS EVERY SCALE UP TO A POWER OF TWO (see `fp8_gemm_nt`; packed: SA [G, m_max, ceil(k/512)],
    SB [G, n, ceil(k/512)])."""
    from .sm90_fp8_gemm_1d2d import normalise_masked
    _run(KernelType.M_GROUPED_MASKED, normalise_masked, lhs, rhs, out, masked_m, (expected_m,), scales)


# ---- Self-test (deep_gemm/selftest.py): small ragged problems against a dequantised FP32 reference ----

# calc_diff bounds: path (a) is the Hopper numerics (a correct kernel lands near 1e-6); path (b) is compared with a
# reference that uses the same rounded scales, and accumulates a whole tile's K in tensor memory (no promotion).
SELFTEST_BOUND = {SCALES_FP32: 1e-5, SCALES_UE8M0: 1e-4}
# (m, n, k) per problem: m ragged against the 128-row blocks, n a multiple of 8 ragged against BLOCK_N, k ragged
# against the 128-wide K blocks (and a multiple of 16, as TMA needs).
_SELFTEST_SHAPES = ((1, 72, 208), (130, 200, 576), (300, 136, 128))
_SELFTEST_GROUPS = 3


def _quantised(rows: int, k: int, gen, device, per_block: bool):
    x = torch.randn((rows, k), generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    return per_block_cast_to_fp8(x) if per_block else per_token_cast_to_fp8(x)


def run_selftest(kind: KernelType, scales: str, device: torch.device) -> List[selftest.CaseResult]:
    """Run this family's self-test problems on `device` through the family's own entry points; one result per
    problem: calc_diff against the dequantised FP32 reference (with the rounded scales on path (b)), and whether
    every required element was written and nothing else."""
    from ..testing import dequant_per_block, dequant_per_token
    gen = torch.Generator(device=device).manual_seed(19)
    applied = ceil_to_ue8m0 if scales == SCALES_UE8M0 else (lambda s: s)
    results = []
    for m, n, k in _SELFTEST_SHAPES:
        groups = 1 if kind == KernelType.NORMAL else _SELFTEST_GROUPS
        bs = [_quantised(n, k, gen, device, True) for _ in range(groups)]
        deq_b = [dequant_per_block(x, applied(s)) for x, s in bs]
        problem = f"{kind.value} m={m} n={n} k={k}"
        if kind == KernelType.M_GROUPED_MASKED:
            As = [_quantised(m, k, gen, device, False) for _ in range(groups)]
            a, sa = torch.stack([x for x, _ in As]), torch.stack([s for _, s in As])
            b, sb = torch.stack([x for x, _ in bs]), torch.stack([s for _, s in bs])
            masked_m = torch.tensor([m, max(m // 2, 1), 0][:groups], dtype=torch.int32, device=device)
            out = torch.full((groups, m, n), float("nan"), dtype=torch.bfloat16, device=device)
            m_grouped_fp8_gemm_nt_masked((a, sa), (b, sb), out, masked_m, m, scales)
            valid = torch.arange(m, device=device).view(1, m, 1) < masked_m.view(groups, 1, 1)
            ref = torch.stack([dequant_per_token(x, applied(s)) @ deq_b[g].t() for g, (x, s) in enumerate(As)])
            got = torch.where(valid, out.float(), ref)
            untouched = (torch.isnan(out.float()) | valid).all()  # rows >= masked_m still hold the NaN poison
        else:
            rows = m if kind == KernelType.NORMAL else 128 * ceil_div(m, 128) * groups
            a, sa = _quantised(rows, k, gen, device, False)
            out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=device)
            deq_a = dequant_per_token(a, applied(sa))
            if kind == KernelType.NORMAL:
                fp8_gemm_nt((a, sa), bs[0], out, scales)
                ref = deq_a @ deq_b[0].t()
            else:
                b, sb = torch.stack([x for x, _ in bs]), torch.stack([s for _, s in bs])
                segment = rows // groups
                m_indices = torch.full((rows,), -1, dtype=torch.int32, device=device)
                ref = torch.zeros((rows, n), dtype=torch.float32, device=device)
                for g in range(groups):
                    used = slice(g * segment, g * segment + max(m - 17 * g, 1))
                    m_indices[used] = g
                    ref[used] = deq_a[used] @ deq_b[g].t()
                m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), out, m_indices, scales)
            got = out.float()
            untouched = None
        # NOTES: nothing above waits for the device (a hung kernel must not block this loop before the timeout).
        finished = torch.cuda.Event()
        finished.record()
        if not selftest.wait_for(finished.query):
            # NOTES: a hung kernel keeps the device busy; report it instead of blocking in a synchronize forever.
            results.append(selftest.CaseResult(problem, float("inf"), SELFTEST_BOUND[scales],
                                               f"did not finish within {selftest.TIMEOUT_S:g} s (hung)"))
            break
        if not bool(torch.isfinite(got).all()):
            results.append(selftest.CaseResult(problem, float("inf"), SELFTEST_BOUND[scales],
                                               "NaN/Inf or unwritten elements in the output"))
            continue
        results.append(selftest.CaseResult(problem, selftest.calc_diff(got, ref), SELFTEST_BOUND[scales],
                                           None if untouched is None or bool(untouched) else
                                           "wrote rows beyond masked_m"))
    return results
