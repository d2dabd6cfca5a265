"""Kernel family of include/deep_gemm/sm90/scaled_fp8_gemm.cuh, the tiny family of docs/adding_a_family.md:
out (BF16) = (A @ B^T) * OUTPUT_SCALE for FP8 E4M3 A [m, k] and B [n, k] without scale factors, OUTPUT_SCALE a
compile-time constant of the kernel. One variant, `scaled`, on sm_90a."""
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from .. import jit
from ..device import get_device_arch, get_num_sms
from ..heuristics.common import GemmConfig, ceil_div, get_forced_config
from ..jit.runtime import ensure_context
from . import checks
from .plan import TENSOR_MAP, U32, ParamBuffer, launch, make_plan, noop_plan
from .variant import TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/scaled_fp8_gemm.cuh"
FUNCTION = "deep_gemm::sm90::scaled_fp8_gemm_impl"
PARAMS = (("tensor_map_a", TENSOR_MAP), ("tensor_map_b", TENSOR_MAP), ("tensor_map_d", TENSOR_MAP),
          ("shape_m", U32))
OUTPUT_SCALE = 0.25
_SCALE_BITS = struct.unpack("<I", struct.pack("<f", OUTPUT_SCALE))[0]
_STAGE_K = 128  # FP8 elements per pipeline stage (one 128-byte swizzle row)
_NAMES = ("a", "b", "out")


def smem_size(block_m: int, block_n: int, stages: int) -> int:
    """The shell's shared memory (kernel_shell.cuh): the BF16 D tile (1024-byte aligned), the A and B stages, two
    8-byte barriers per stage; no scales."""
    d = ceil_div(block_m * block_n * 2, 1024) * 1024
    return d + stages * (block_m + block_n) * _STAGE_K + stages * 2 * 8


def get_config(m: int, n: int, num_sms: int) -> GemmConfig:
    """128 x 128 tiles, 4 stages, one CTA per SM (or the forced config's tile, depth and grid: tools/tune.py)."""
    forced = get_forced_config()
    block_m, block_n, stages = (forced.block_m, forced.block_n, forced.num_stages) if forced else (128, 128, 4)
    num_sms = forced.num_sms if forced else min(num_sms, ceil_div(m, block_m) * ceil_div(n, block_n))
    return GemmConfig(block_m, block_n, _STAGE_K, stages, 1, True, 128, num_sms, smem_size(block_m, block_n, stages),
                      128 + (128 if block_m == 64 else 256))


def kernel_source(n: int, k: int, config: GemmConfig) -> jit.KernelSource:
    named = dict(SHAPE_N=n, SHAPE_K=k, BLOCK_M=config.block_m, BLOCK_N=config.block_n, kNumStages=config.num_stages,
                 kNumMulticast=1, kMulticastOnA=True, kSmemSize=config.smem_size, kScaleBits=_SCALE_BITS)
    return jit.KernelSource(name="sm90_scaled_fp8_gemm", header=HEADER, function=FUNCTION, config=named)


@dataclass
class _Kernel:
    config: GemmConfig
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def load(m: int, n: int, k: int, num_sms: int, device_index: int, arch: str) -> _Kernel:
    key = (m, n, k, num_sms, device_index, arch, get_forced_config())
    kernel = _kernels.get(key)
    if kernel is None:
        config = get_config(m, n, num_sms)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, k, config), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


def build_plan(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, num_sms: int, arch: str):
    """The `_C` plan of out = (A @ B^T) * OUTPUT_SCALE over TMA-ready A [m, k], B [n, k], out [m, n]."""
    (m, k), n = a.shape, b.shape[0]
    kernel = load(m, n, k, num_sms, a.device.index, arch)
    cfg = kernel.config
    params = ParamBuffer(PARAMS)
    params.tensor_map("tensor_map_a", 0, 1, (k, m), (checks.tma_row_stride(a),), (_STAGE_K, cfg.block_m), 128)
    params.tensor_map("tensor_map_b", 1, 1, (k, n), (checks.tma_row_stride(b),), (_STAGE_K, cfg.block_n), 128)
    # Each math warpgroup stores its own 64-row stripes of the tile (BF16Epilogue::store_rows), 128B-swizzled.
    params.tensor_map("tensor_map_d", 2, 2, (n, m), (checks.tma_row_stride(out),), (64, 64), 128)
    params.u32("shape_m", m)
    tensors = (a, b, out)
    return make_plan(kernel.function, a.device.index, (15, 15, 15), [checks.extent_bytes(t) for t in tensors], (2,),
                     (params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, 1),))


@dataclass
class ScaledLayout:
    device: torch.device
    arch: str
    m: int
    n: int
    k: int
    extents: Tuple[int, ...]
    num_sms: int
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return self.m > 0 and self.n > 0

    def run(self, a, b, out):
        if not self.needs_kernel:
            return noop_plan(self.device.index, 3, self.extents, (2,))
        for name, t in zip(_NAMES, (a, b, out)):
            if t.data_ptr() % 16:
                raise ValueError(f"{name}'s data pointer must be 16-byte aligned, got offset {t.data_ptr() % 16}")
        geometry = checks.tensor_geometry((a, b, out))
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = self.family.build_plan(a, b, out, self.num_sms, self.arch)
        launch(plan, (a.data_ptr(), b.data_ptr(), out.data_ptr()))
        return plan

    def load_kernel(self, a, b, out) -> None:
        if self.needs_kernel:
            self.family.load(self.m, self.n, self.k, self.num_sms, self.device.index, self.arch)


def normalise(a, b, out) -> ScaledLayout:
    """Every check of `scaled_fp8_gemm_nt`, with errors naming the argument."""
    checks.check_tensor(a, "a", torch.float8_e4m3fn, 2)
    checks.check_tensor(b, "b", torch.float8_e4m3fn, 2)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"b must have shape (n, {k}) to match a's k, got {tuple(b.shape)}")
    checks.check_shape(out, "out", (m, n), "m x n")
    if k == 0 or k % _STAGE_K:
        raise ValueError(f"a must have a positive multiple of {_STAGE_K} columns (k; the kernel has no K tail), got "
                         f"shape {tuple(a.shape)}")
    if n % 8:
        raise ValueError(f"out must have a multiple of 8 columns (n; its rows are stored in 16-byte chunks), got "
                         f"shape {tuple(out.shape)}")
    tensors = (a, b, out)
    device = checks.check_same_cuda_device(list(zip(_NAMES, tensors)))
    checks.check_no_overlap(out, "out", [("a", a), ("b", b)])
    for name, t in zip(_NAMES, tensors):
        checks.check_tma_matrix(t, name)
    return ScaledLayout(device, get_device_arch(device.index), m, n, k,
                        tuple(checks.extent_bytes(t) for t in tensors), get_num_sms(device.index))


def warmup_kernels(variant: str, shape: dict, ms, num_sms: int, arch: str, psum_alignment: int) -> List:
    """The kernels a warm-up shape (m, n, k) loads: one."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return [kernel_source(n, k, get_config(m, n, num_sms))]


SCALED = Variant("scaled", "scaled_fp8_gemm_nt", (TENSOR, TENSOR, TENSOR), normalise, warmup_fields=("m", "n", "k"))
FAMILY = Family("sm90_scaled_fp8_gemm", HEADER, FUNCTION, PARAMS, ("sm_90a",), (SCALED,), build_plan, clear_kernels,
                load, warmup_kernels)
