"""Launcher of include/deep_gemm/sm90/fp8_gemm_1d2d.cuh: problem -> config -> TMA descriptors -> launch."""
import sys
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .. import jit
from ..envs import read_env
from ..heuristics import GemmConfig, GemmProblem, get_config
from ..utils import get_tma_aligned_size
from ..jit.runtime import PTR, U32, LoadedKernel, ensure_context
from .tma import cached_2d_tma, current_raw_stream, tma_row_stride

HEADER = "deep_gemm/sm90/fp8_gemm_1d2d.cuh"
FUNCTION = "deep_gemm::sm90::fp8_gemm_1d2d_impl"


def kernel_source(n: int, k: int, config: GemmConfig) -> jit.KernelSource:
    """The template instantiation for (n, k, config); m stays a run-time argument."""
    args = (n, k, config.block_m, config.block_n, config.num_stages, config.num_multicast, config.multicast_on_a,
            config.swizzle_d_bytes, config.smem_size)
    return jit.KernelSource(name="sm90_fp8_gemm_1d2d", header=HEADER, function=FUNCTION, template_args=args)


@dataclass
class _Plan:
    config: GemmConfig
    kernel: LoadedKernel
    launch_config: object  # CUlaunchConfig, reused across calls
    function: object       # CUfunction of the device


_plans: Dict[Tuple, _Plan] = {}


def _plan(m: int, n: int, k: int, num_sms: int, device_index: int, arch: str,
          config: Optional[GemmConfig] = None) -> _Plan:
    key = (m, n, k, num_sms, device_index, arch, config)
    plan = _plans.get(key)
    if plan is None:
        if config is None:
            config = get_config(GemmProblem(m, n, k, num_sms, arch))
        if read_env().print_configs:
            print(f"[deep_gemm] m={m} n={n} k={k}: {config}", file=sys.stderr)
        ensure_context(device_index)
        kernel = jit.load(kernel_source(n, k, config), arch, config.num_threads, config.smem_size)
        launch_config, function = kernel.launch_config(device_index, config.num_sms, config.num_multicast)
        plan = _plans[key] = _Plan(config, kernel, launch_config, function)
    return plan


def launch(a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor, out: torch.Tensor,
           num_sms: int, arch: str, config: Optional[GemmConfig] = None) -> None:
    """All inputs validated by the caller: a [m,k] e4m3, sa MN-major [m, kb] (stride (1, m_aligned)),
    b [n,k] e4m3, sb contiguous [ceil(n/128), kb] fp32, out [m,n] bf16; m, n, k > 0."""
    m, k = a.shape
    n = b.shape[0]
    device_index = a.device.index
    plan = _plan(m, n, k, num_sms, device_index, arch, config)
    cfg = plan.config
    map_a = cached_2d_tma(a.data_ptr(), 1, k, m, tma_row_stride(a), 128, cfg.block_m, 128)
    map_b = cached_2d_tma(b.data_ptr(), 1, k, n, tma_row_stride(b), 128, cfg.block_n, 128)
    sa_stride = sa.stride(1) if sa.shape[1] > 1 else get_tma_aligned_size(m, 4)
    map_sa = cached_2d_tma(sa.data_ptr(), 4, m, sa.shape[1], sa_stride, cfg.block_m, 1, 0, False)
    d_box = cfg.block_n if cfg.swizzle_d_bytes == 0 else cfg.swizzle_d_bytes // 2
    # NOTES: each math warpgroup stores its own 64-row stripes of the tile, hence a 64-row box.
    map_d = cached_2d_tma(out.data_ptr(), 2, n, m, tma_row_stride(out), d_box, 64, cfg.swizzle_d_bytes)
    args = ((map_a, map_b, map_sa, map_d, sb.data_ptr(), m), (None, None, None, None, PTR, U32))
    LoadedKernel.launch(plan.launch_config, plan.function, current_raw_stream(device_index), args)
