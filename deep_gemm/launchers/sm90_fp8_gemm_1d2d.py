"""Launcher of include/deep_gemm/sm90/fp8_gemm_1d2d.cuh: problem -> config -> TMA descriptors -> launch."""
import sys
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .. import jit
from ..envs import read_env
from ..heuristics import GemmConfig, GemmProblem, KernelType, get_config
from ..heuristics.sm90 import sm90_kernel_variants
from ..heuristics.common import ceil_div
from ..utils import get_tma_aligned_size
from ..jit.runtime import PTR, U32, LoadedKernel, current_context, ensure_context
from .tma import cached_2d_tma, current_raw_stream, tma_enum_values, tma_row_stride

HEADER = "deep_gemm/sm90/fp8_gemm_1d2d.cuh"
FUNCTION = "deep_gemm::sm90::fp8_gemm_1d2d_impl"
# deep_gemm::GemmType (include/deep_gemm/common/scheduler.cuh)
_GEMM_TYPES = {
    KernelType.NORMAL: jit.CppName("deep_gemm::GemmType::Normal"),
    KernelType.M_GROUPED_CONTIGUOUS: jit.CppName("deep_gemm::GemmType::MGroupedContiguous"),
    KernelType.M_GROUPED_MASKED: jit.CppName("deep_gemm::GemmType::MGroupedMasked"),
}
_NAMES = {KernelType.NORMAL: "sm90_fp8_gemm_1d2d", KernelType.M_GROUPED_CONTIGUOUS: "sm90_fp8_gemm_1d2d_contiguous",
          KernelType.M_GROUPED_MASKED: "sm90_fp8_gemm_1d2d_masked"}


def kernel_source(n: int, k: int, config: GemmConfig, kind: KernelType = KernelType.NORMAL) -> jit.KernelSource:
    """The template instantiation for (kind, n, k, config); m (and the groups) stay run-time arguments."""
    args = (_GEMM_TYPES[kind], n, k, config.block_m, config.block_n, config.num_stages, config.num_multicast,
            config.multicast_on_a, config.swizzle_d_bytes, config.smem_size)
    return jit.KernelSource(name=_NAMES[kind], header=HEADER, function=FUNCTION, template_args=args)


@dataclass
class _Plan:
    config: GemmConfig
    kernel: LoadedKernel
    launch_config: object  # CUlaunchConfig, reused across calls
    function: object       # CUfunction of the device


_plans: Dict[Tuple, _Plan] = {}
_seen_nk: set = set()


def precompile_variants(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL) -> int:
    """Compile (into the disk cache) every kernel the heuristic can pick for (n, k) at any m, in parallel
    processes; returns how many were missing. Called on the first sight of (n, k) unless DG_JIT_PRECOMPILE=0,
    so that a later new m never waits for a compile (dense and contiguous grouped GEMMs)."""
    variants = sm90_kernel_variants(n, k, num_sms, kind)
    return jit.build_many([kernel_source(n, k, c, kind) for c in variants], arch)


def _plan(m: int, n: int, k: int, num_sms: int, device_index: int, arch: str,
          config: Optional[GemmConfig] = None, kind: KernelType = KernelType.NORMAL, num_groups: int = 1) -> _Plan:
    """m: rows (dense, contiguous) or expected rows per group (masked)."""
    key = (m, n, k, num_sms, device_index, arch, config, kind, num_groups)
    plan = _plans.get(key)
    if plan is None:
        if config is None:
            config = get_config(GemmProblem(m, n, k, num_sms, arch, kind, num_groups))
        env = read_env()
        if env.print_configs:
            print(f"[deep_gemm] {kind.value} m={m} n={n} k={k} groups={num_groups}: {config}", file=sys.stderr)
        if env.jit_precompile and kind != KernelType.M_GROUPED_MASKED and (n, k, num_sms, arch, kind) not in _seen_nk:
            _seen_nk.add((n, k, num_sms, arch, kind))
            precompile_variants(n, k, num_sms, arch, kind)
        ensure_context(device_index)
        kernel = jit.load(kernel_source(n, k, config, kind), arch, config.num_threads, config.smem_size)
        launch_config, function = kernel.launch_config(device_index, config.num_sms, config.num_multicast)
        plan = _plans[key] = _Plan(config, kernel, launch_config, function)
    return plan


def map_specs(m: int, n: int, k: int, sa_stride: int, a_row_stride: int, b_row_stride: int, out_row_stride: int,
              cfg: GemmConfig, b_rows: Optional[int] = None, sa_outer: Optional[int] = None,
              sa_inner: Optional[int] = None) -> Tuple[Tuple[int, ...], ...]:
    """The kernel's four TMA descriptors (A, B, SA, out) as `make_2d_tma` arguments minus the address, each led by
    the index of its tensor in (A, SA, B, SB, out). m = rows of A and out; grouped launches pass B's total rows
    (G * n) and SA's extents ([G * ceil(k/128), m_max] for masked)."""
    d_box = cfg.block_n if cfg.swizzle_d_bytes == 0 else cfg.swizzle_d_bytes // 2
    return (
        (0, 1, k, m, a_row_stride, 128, cfg.block_m, 128, True),
        (2, 1, k, n if b_rows is None else b_rows, b_row_stride, 128, cfg.block_n, 128, True),
        (1, 4, m if sa_inner is None else sa_inner, ceil_div(k, 128) if sa_outer is None else sa_outer, sa_stride,
         cfg.block_m, 1, 0, False),
        # NOTES: each math warpgroup stores its own 64-row stripes of the tile, hence a 64-row box.
        (4, 2, n, m, out_row_stride, d_box, 64, cfg.swizzle_d_bytes, True),
    )


def launch(a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor, out: torch.Tensor,
           num_sms: int, arch: str, config: Optional[GemmConfig] = None) -> Optional[tuple]:
    """All inputs validated by the caller: a [m,k] e4m3, sa MN-major [m, kb] (stride (1, m_aligned)),
    b [n,k] e4m3, sb contiguous [ceil(n/128), kb] fp32, out [m,n] bf16; m, n, k > 0.

    Returns the launch as a plan for the C++ fast path (see `fast_plan`)."""
    m, k = a.shape
    n = b.shape[0]
    device_index = a.device.index
    plan = _plan(m, n, k, num_sms, device_index, arch, config)
    sa_stride = sa.stride(1) if sa.shape[1] > 1 else get_tma_aligned_size(m, 4)
    specs = map_specs(m, n, k, sa_stride, tma_row_stride(a), tma_row_stride(b), tma_row_stride(out), plan.config)
    tensors = (a, sa, b, sb, out)
    maps = [cached_2d_tma(tensors[s[0]].data_ptr(), *s[1:]) for s in specs]
    args = ((*maps, sb.data_ptr(), m, 0, 0, 0, 0), _ARG_TYPES)
    LoadedKernel.launch(plan.launch_config, plan.function, current_raw_stream(device_index), args)
    return plan, specs


# Kernel parameters after the four tensor maps: sb, shape_m, grouped_layout, num_groups, d, d_row_stride.
_ARG_TYPES = (None, None, None, None, PTR, U32, PTR, U32, PTR, U32)


@dataclass
class GroupedLaunch:
    """Everything a grouped launch needs except the pointers (cached per layout by deep_gemm/ops/grouped.py)."""
    plan: _Plan
    specs: Tuple[Tuple[int, ...], ...]  # TMA descriptors, see map_specs
    shape_m: int                        # M (contiguous) or m_max (masked)
    num_groups: int
    d_row_stride: int                   # out's row stride in elements
    device_index: int


def prepare_grouped(kind: KernelType, a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                    num_sms: int, arch: str, expected_m: int = 0,
                    config: Optional[GemmConfig] = None) -> GroupedLaunch:
    """Plan a grouped launch from the layouts; inputs validated by the caller (deep_gemm/ops/grouped.py), all
    extents > 0.

    Contiguous: a [M, k], sa MN-major [M, kb], out [M, n] (grouped_layout = m_indices [M]).
    Masked: a [G, m_max, k], sa MN-major [G, m_max, kb] (stride (kb * m_al, 1, m_al)), out [G, m_max, n]
    (grouped_layout = masked_m [G]). Both: b [G, n, k] viewable as [G * n, k], sb contiguous [G, ceil(n/128), kb].
    """
    num_groups, n, k = b.shape
    kb = ceil_div(k, 128)
    if kind == KernelType.M_GROUPED_MASKED:
        m_max = a.shape[1]
        rows = num_groups * m_max
        a2, out2 = a.view(rows, k), out.view(rows, n)
        sa_stride = sa.stride(2) if kb > 1 else get_tma_aligned_size(m_max, 4)
        heuristic_m, shape_m = expected_m, m_max
        sa_extents = dict(sa_inner=m_max, sa_outer=num_groups * kb)
    else:
        rows = a.shape[0]
        a2, out2 = a, out
        sa_stride = sa.stride(1) if kb > 1 else get_tma_aligned_size(rows, 4)
        heuristic_m, shape_m = rows, rows
        sa_extents = {}
    device_index = a.device.index
    plan = _plan(heuristic_m, n, k, num_sms, device_index, arch, config, kind, num_groups)
    b2 = b.view(num_groups * n, k)
    specs = map_specs(rows, n, k, sa_stride, tma_row_stride(a2), tma_row_stride(b2), tma_row_stride(out2),
                      plan.config, b_rows=num_groups * n, **sa_extents)
    return GroupedLaunch(plan, specs, shape_m, num_groups, tma_row_stride(out2), device_index)


def launch_prepared(prepared: GroupedLaunch, ptrs: Tuple[int, ...], layout_ptr: int) -> None:
    """Launch a prepared grouped GEMM; ptrs = data pointers of (A, SA, B, SB, out)."""
    maps = [cached_2d_tma(ptrs[s[0]], *s[1:]) for s in prepared.specs]
    args = ((*maps, ptrs[3], prepared.shape_m, layout_ptr, prepared.num_groups, ptrs[4], prepared.d_row_stride),
            _ARG_TYPES)
    plan = prepared.plan
    LoadedKernel.launch(plan.launch_config, plan.function, current_raw_stream(prepared.device_index), args)


def launch_grouped(kind: KernelType, a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor,
                   out: torch.Tensor, grouped_layout: torch.Tensor, num_sms: int, arch: str, expected_m: int = 0,
                   config: Optional[GemmConfig] = None) -> _Plan:
    """`prepare_grouped` + `launch_prepared` in one call (tools, tests)."""
    prepared = prepare_grouped(kind, a, sa, b, out, num_sms, arch, expected_m, config)
    launch_prepared(prepared, tuple(t.data_ptr() for t in (a, sa, b, sb, out)), grouped_layout.data_ptr())
    return prepared.plan


def fast_plan(plan: _Plan, specs, m: int, device_index: int, extents: Tuple[int, ...]) -> tuple:
    """The tuple `deep_gemm._C` caches for a layout: everything a launch needs except the five pointers."""
    cfg = plan.config
    return (int(plan.function), int(current_context()), device_index, cfg.num_sms, cfg.num_threads, cfg.smem_size,
            cfg.num_multicast, m, tuple(extents), tuple((s[0], *tma_enum_values(*s[1:])) for s in specs))
