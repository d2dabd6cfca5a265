"""Launcher of include/deep_gemm/sm90/fp8_wgrad_1d1d.cuh: dense and k-grouped weight gradients, FP32 D += A B^T.

A launch covers up to MAX_GROUPS_PER_LAUNCH groups: their A/B tensor maps and K extents travel as one kernel
parameter (`WgradGroups`), so nothing is copied to the device and a captured CUDA graph replays them by value."""
import ctypes
import sys
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .. import jit
from ..envs import read_env
from ..heuristics.common import GemmConfig, ceil_div
from ..heuristics.sm90_wgrad import MAX_GROUPS_PER_LAUNCH, get_wgrad_config, group_capacity
from ..jit.runtime import U32, LoadedKernel, ensure_context
from .tma import cached_2d_tma, current_raw_stream, make_3d_tma

HEADER = "deep_gemm/sm90/fp8_wgrad_1d1d.cuh"
FUNCTION = "deep_gemm::sm90::fp8_wgrad_1d1d_impl"
_TMA_BYTES = 128


def kernel_source(n: int, config: GemmConfig, capacity: int) -> jit.KernelSource:
    """The template instantiation for (n, config, group capacity); m, K and the group count are run-time values."""
    args = (n, config.block_m, config.block_n, config.num_stages, config.num_multicast, config.multicast_on_a,
            config.swizzle_d_bytes, capacity, config.smem_size)
    return jit.KernelSource(name="sm90_fp8_wgrad_1d1d", header=HEADER, function=FUNCTION, template_args=args)


def groups_param_size(capacity: int) -> int:
    """sizeof(WgradGroups<capacity>): two tensor maps and two uint32 per group, padded to the 64-byte alignment."""
    return (capacity * (2 * _TMA_BYTES + 8) + 63) // 64 * 64


_param_types: Dict[int, type] = {}


def _groups_param(capacity: int) -> ctypes.Structure:
    cls = _param_types.get(capacity)
    if cls is None:
        cls = _param_types[capacity] = type(f"WgradGroups{capacity}", (ctypes.Structure,),
                                            {"_fields_": [("raw", ctypes.c_ubyte * groups_param_size(capacity))]})
    return cls()


@dataclass
class _Plan:
    config: GemmConfig
    capacity: int
    launch_config: object
    function: object


_plans: Dict[Tuple, _Plan] = {}


def _plan(m: int, n: int, groups: int, num_sms: int, device_index: int, arch: str,
          config: Optional[GemmConfig] = None) -> _Plan:
    capacity = group_capacity(groups)
    key = (m, n, capacity, num_sms, device_index, arch, config)
    plan = _plans.get(key)
    if plan is None:
        if arch != "sm_90a":
            raise ValueError(f"no weight-gradient kernel for arch {arch!r} yet (supported: sm_90a)")
        if config is None:
            config = get_wgrad_config(m, n, min(groups, MAX_GROUPS_PER_LAUNCH), num_sms)
        if read_env().print_configs:
            print(f"[deep_gemm] wgrad m={m} n={n} groups={groups}: {config}", file=sys.stderr)
        ensure_context(device_index)
        kernel = jit.load(kernel_source(n, config, capacity), arch, config.num_threads, config.smem_size)
        launch_config, function = kernel.launch_config(device_index, config.num_sms, config.num_multicast)
        plan = _plans[key] = _Plan(config, capacity, launch_config, function)
    return plan


@dataclass(frozen=True)
class Operands:
    """Validated, TMA-ready operands of one call (built by deep_gemm/ops/wgrad.py).

    Group g's A is the row-major [m, k_g] matrix at `a_ptrs[g]` with row stride `a_strides[g]` (elements), B
    likewise with n rows; SA / SB are MN-major [sum_g ceil(k_g/128), m or n] with row strides `sa_stride` /
    `sb_stride`, group g's rows starting at sum_{j<g} ceil(k_j/128); D is [G, m, n] FP32 at `d_ptr` with strides
    (`d_group_stride`, `d_row_stride`, 1)."""
    m: int
    n: int
    ks: Tuple[int, ...]
    a_ptrs: Tuple[int, ...]
    a_strides: Tuple[int, ...]
    b_ptrs: Tuple[int, ...]
    b_strides: Tuple[int, ...]
    sa_ptr: int
    sa_stride: int
    sb_ptr: int
    sb_stride: int
    d_ptr: int
    d_group_stride: int
    d_row_stride: int


def launch(ops: Operands, device_index: int, num_sms: int, arch: str, config: Optional[GemmConfig] = None) -> _Plan:
    """Launch D[g] += A_g B_g^T for every group: ceil(G / MAX_GROUPS_PER_LAUNCH) launches (one for G <= 96)."""
    num_groups = len(ops.ks)
    plan = _plan(ops.m, ops.n, num_groups, num_sms, device_index, arch, config)
    cfg = plan.config
    total_kb = sum(ceil_div(k, 128) for k in ops.ks)
    sa_map = cached_2d_tma(ops.sa_ptr, 4, ops.m, total_kb, ops.sa_stride, cfg.block_m, 1, 0, False)
    sb_map = cached_2d_tma(ops.sb_ptr, 4, ops.n, total_kb, ops.sb_stride, cfg.block_n, 1, 0, False)
    stream = current_raw_stream(device_index)
    kb_offsets = [0]
    for k in ops.ks:
        kb_offsets.append(kb_offsets[-1] + ceil_div(k, 128))
    for g0 in range(0, num_groups, MAX_GROUPS_PER_LAUNCH):
        g1 = min(num_groups, g0 + MAX_GROUPS_PER_LAUNCH)
        param = _groups_param(plan.capacity)
        base = ctypes.addressof(param)
        cap = plan.capacity
        for i, g in enumerate(range(g0, g1)):
            k = ops.ks[g]
            nkb = ceil_div(k, 128)
            if nkb:
                a_map = cached_2d_tma(ops.a_ptrs[g], 1, k, ops.m, ops.a_strides[g], 128, cfg.block_m, 128, True)
                b_map = cached_2d_tma(ops.b_ptrs[g], 1, k, ops.n, ops.b_strides[g], 128, cfg.block_n, 128, True)
                ctypes.memmove(base + i * _TMA_BYTES, a_map.getPtr(), _TMA_BYTES)
                ctypes.memmove(base + (cap + i) * _TMA_BYTES, b_map.getPtr(), _TMA_BYTES)
            U32.from_address(base + 2 * cap * _TMA_BYTES + 4 * i).value = nkb
            U32.from_address(base + 2 * cap * _TMA_BYTES + 4 * (cap + i)).value = kb_offsets[g]
        d_map = make_3d_tma(ops.d_ptr + g0 * ops.d_group_stride * 4, 4, (ops.n, ops.m, g1 - g0),
                            (ops.d_row_stride, ops.d_group_stride), (cfg.swizzle_d_bytes // 4, 64, 1),
                            cfg.swizzle_d_bytes)
        args = ((param, sa_map, sb_map, d_map, ops.m, g1 - g0), (None, None, None, None, U32, U32))
        LoadedKernel.launch(plan.launch_config, plan.function, stream, args)
    return plan

