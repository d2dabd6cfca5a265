"""Kernel family of include/deep_gemm/sm90/tf32_hc_prenorm_gemm.cuh (the hyper-connection pre-norm GEMM: D = A B^T on
the TF32 tensor cores with A BF16 and B FP32, and the squared row norms of A, optionally in K splits): validation of
a call's arguments into a layout, the kernel configuration, and the `_C` plan."""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch

from .. import jit, log
from ..device import get_device_arch, get_num_sms
from ..envs import read_env
from ..heuristics.common import GemmConfig, ceil_div, get_forced_config
from ..heuristics.sm90_tf32 import BLOCK_K, MAX_N, get_tf32_hc_config
from ..jit.runtime import ensure_context
from . import checks
from .plan import POINTER, TENSOR_MAP, U32, ParamBuffer, launch, make_plan, noop_plan
from .variant import INT, TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/tf32_hc_prenorm_gemm.cuh"
# NOTES: DeepGEMM's test_hyperconnection profiles the kernel by the substring "tf32_hc_prenorm_gemm".
FUNCTION = "deep_gemm::sm90::tf32_hc_prenorm_gemm_impl"
PARAMS = (("tensor_map_a", TENSOR_MAP), ("tensor_map_b", TENSOR_MAP), ("tensor_map_d", TENSOR_MAP),
          ("sqr_sum", POINTER), ("shape_m", U32), ("num_k_blocks", U32), ("num_splits", U32))
_NAMES = ("a", "b", "d", "sqr_sum")


def kernel_source(n: int, config: GemmConfig) -> jit.KernelSource:
    named = dict(SHAPE_N=n, BLOCK_M=config.block_m, BLOCK_N=config.block_n, kNumStages=config.num_stages,
                 kNumMulticast=1, kMulticastOnA=True, kSwizzleDBytes=config.swizzle_d_bytes,
                 kSmemSize=config.smem_size)
    return jit.KernelSource(name="sm90_tf32_hc_prenorm_gemm", header=HEADER, function=FUNCTION, config=named)


def kernel_choice(m: int, n: int, num_sms: int, num_splits: int) -> GemmConfig:
    return get_forced_config() or get_tf32_hc_config(m, n, num_sms, num_splits)


@dataclass
class _Kernel:
    config: GemmConfig
    function: object


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def _kernel(m: int, n: int, num_splits: int, num_sms: int, device_index: int, arch: str) -> _Kernel:
    forced = get_forced_config()
    key = (m, n, num_splits, num_sms, device_index, arch, forced)
    kernel = _kernels.get(key)
    if kernel is None:
        config = kernel_choice(m, n, num_sms, num_splits)
        log.apply_env(read_env())
        log.configs.debug("tf32 hc prenorm m=%d n=%d splits=%d: %s", m, n, num_splits, config)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, config), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


@dataclass(frozen=True)
class Operands:
    """Geometry of one call: m, n, k, the K splits (1 when d has no split dimension), the row strides of A, B and D
    and D's split stride (elements)."""
    m: int
    n: int
    k: int
    num_splits: int
    a_stride: int
    b_stride: int
    d_stride: int
    d_split_stride: int


def build_plan(ops: Operands, extents, device_index: int, num_sms: int, arch: str):
    kernel = _kernel(ops.m, ops.n, ops.num_splits, num_sms, device_index, arch)
    cfg = kernel.config
    params = ParamBuffer(PARAMS)
    params.tensor_map("tensor_map_a", 0, 2, (ops.k, ops.m), (ops.a_stride,), (BLOCK_K, cfg.block_m), 128)
    # B is rounded to TF32 by TMA (to nearest), as a TF32 matmul (cuBLAS, DeepGEMM) rounds it.
    params.tensor_map("tensor_map_b", 1, 4, (ops.k, ops.n), (ops.b_stride,), (32, cfg.block_n), 128, tf32=True)
    params.tensor_map("tensor_map_d", 2, 4, (ops.n, ops.m, ops.num_splits), (ops.d_stride, ops.d_split_stride),
                      (cfg.swizzle_d_bytes // 4, 64, 1), cfg.swizzle_d_bytes)
    params.pointer("sqr_sum", 3)
    params.u32("shape_m", ops.m)
    params.u32("num_k_blocks", ceil_div(ops.k, BLOCK_K))
    params.u32("num_splits", ops.num_splits)
    launches = [params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, 1)]
    return make_plan(kernel.function, device_index, (15, 15, 15, 3), extents, (2, 3), launches)


@dataclass
class HCPrenormLayout:
    """What the checks concluded for one layout of a `tf32_hc_prenorm_gemm` call; plans are made once per
    geometry."""
    nothing_to_do: bool  # m or n is 0
    zero_k: bool         # k is 0: d and sqr_sum are zeros
    device: torch.device
    m: int
    n: int
    k: int
    num_splits: int
    extents: Tuple[int, ...]
    num_sms: int
    arch: str
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None

    @property
    def needs_kernel(self) -> bool:
        return not (self.nothing_to_do or self.zero_k)

    def run(self, a, b, d, sqr_sum, num_splits):
        tensors = (a, b, d, sqr_sum)
        if self.nothing_to_do:
            return noop_plan(self.device.index, 4, self.extents, (2, 3))
        if self.zero_k:
            d.zero_()
            sqr_sum.zero_()
            return None
        ptrs = [t.data_ptr() for t in tensors]
        for name, ptr, align in zip(_NAMES, ptrs, (16, 16, 16, 4)):
            if ptr % align:
                raise ValueError(f"{name}'s data pointer must be {align}-byte aligned, got offset {ptr % align}")
        for out in (2, 3):
            checks.check_no_overlap_ptrs(_NAMES[out], ptrs[out], self.extents[out],
                                         [(_NAMES[i], ptrs[i], self.extents[i]) for i in range(4) if i != out])
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            d3 = d if d.dim() == 3 else d.unsqueeze(0)
            ops = Operands(self.m, self.n, self.k, self.num_splits, checks.tma_row_stride(a),
                           checks.tma_row_stride(b), d3.stride(1) if self.m > 1 else ceil_div(self.n, 4) * 4,
                           d3.stride(0) if self.num_splits > 1 else self.m * self.n)
            plan = self.plans[geometry] = self.family.build_plan(ops, self.extents, self.device.index, self.num_sms,
                                                                 self.arch)
        launch(plan, tuple(ptrs))
        return plan

    def load_kernel(self, *args) -> None:
        if self.needs_kernel:
            self.family.load(self.m, self.n, self.num_splits, self.num_sms, self.device.index, self.arch)


def normalise(a, b, d, sqr_sum, num_splits) -> HCPrenormLayout:
    """Every check of `tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)`: a [m, k] BF16 and b [n, k] FP32, both
    K-major (unit stride along k, row strides multiples of 16 bytes); n <= 32; num_splits 0 (None: d [m, n],
    sqr_sum [m]) or S >= 1 (d [S, m, n], sqr_sum [S, m]); d FP32 with unit stride along n, sqr_sum FP32 contiguous."""
    checks.check_tensor(a, "a", torch.bfloat16, 2)
    checks.check_tensor(b, "b", torch.float32, 2)
    num_splits = checks.host_int(num_splits, "num_splits")
    split_dims = (num_splits,) if num_splits else ()
    checks.check_tensor(d, "d", torch.float32, 2 + len(split_dims))
    checks.check_tensor(sqr_sum, "sqr_sum", torch.float32, 1 + len(split_dims))
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"b must have shape (n, {k}) to match a's k, got {tuple(b.shape)}")
    if n > MAX_N:
        raise ValueError(f"b has n = {n} rows: the pre-norm GEMM takes n <= {MAX_N} on SM90 (as DeepGEMM)")
    checks.check_shape(d, "d", split_dims + (m, n), ("S x " if split_dims else "") + "m x n")
    checks.check_shape(sqr_sum, "sqr_sum", split_dims + (m,), ("S x " if split_dims else "") + "m")
    named = list(zip(_NAMES, (a, b, d, sqr_sum)))
    device = checks.check_same_cuda_device(named)
    checks.check_no_overlap(d, "d", [named[0], named[1], named[3]])
    checks.check_no_overlap(sqr_sum, "sqr_sum", named[:3])
    nothing = m == 0 or n == 0
    if not nothing and k > 0:
        for t, name, per16 in ((a, "a", 8), (b, "b", 4)):
            if k > 1 and t.stride(1) != 1:
                raise ValueError(f"{name} must be K-major (unit stride along k), got strides {t.stride()}")
            if k % per16:
                raise ValueError(f"k = {k}: TMA reads {name}'s rows in 16-byte units, so k must be a multiple of "
                                 f"{per16}")
            if t.shape[0] > 1 and t.stride(0) % per16:
                raise ValueError(f"{name}'s row stride must be a multiple of {per16} elements, got {t.stride(0)}")
        if n % 4:
            raise ValueError(f"n = {n}: TMA writes d's FP32 rows in 16-byte units, so n must be a multiple of 4")
        if n > 1 and d.stride(-1) != 1:
            raise ValueError(f"d must have unit stride along n, got strides {d.stride()}")
        if (m > 1 and d.stride(-2) % 4) or (num_splits > 1 and d.stride(0) % 4):
            raise ValueError(f"d's strides must be multiples of 4 elements (16 bytes), got {d.stride()}")
        if not sqr_sum.is_contiguous():
            raise ValueError("sqr_sum must be contiguous")
    return HCPrenormLayout(nothing, not nothing and k == 0, device, m, n, k, max(num_splits, 1),
                           tuple(checks.extent_bytes(t) for t in (a, b, d, sqr_sum)), get_num_sms(device.index),
                           get_device_arch(device.index))


def warmup_kernels(variant: str, shape: dict, ms, num_sms: int, arch: str, psum_alignment: int):
    """The kernel one warm-up shape (m, n, num_splits; 1 also stands for None) loads."""
    m, n = shape["m"], shape["n"]
    return [kernel_source(n, kernel_choice(m, n, num_sms, shape["num_splits"]))]


HC_PRENORM = Variant("tf32_hc_prenorm", "tf32_hc_prenorm_gemm", (TENSOR, TENSOR, TENSOR, TENSOR, INT), normalise,
                     warmup_fields=("m", "n", "num_splits"))
FAMILY = Family("sm90_tf32_hc_prenorm", HEADER, FUNCTION, PARAMS, ("sm_90a",), (HC_PRENORM,), build_plan,
                clear_kernels, _kernel, warmup_kernels)
