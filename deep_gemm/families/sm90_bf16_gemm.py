"""Kernel family of include/deep_gemm/sm90/bf16_gemm.cuh (the dense BF16 GEMM, D = A B^T or D += A B^T, each
operand K-major or MN-major, BF16 or FP32 D): validation of a call's arguments into a layout, the kernel
configuration, and the `_C` plan.

An operand's layout comes from its strides, as in DeepGEMM: A [m, k] with unit stride along k is K-major, with unit
stride along m MN-major (a transposed view: the nn / tn / tt forms only transpose views); likewise B [n, k]."""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch

from .. import jit, log
from ..device import get_device_arch, get_num_sms
from ..envs import read_env
from ..heuristics.common import GemmConfig, ceil_div, get_forced_config
from ..heuristics.sm90_bf16 import BLOCK_K, get_bf16_config
from ..jit.runtime import ensure_context
from . import checks
from .plan import TENSOR_MAP, U32, ParamBuffer, launch, make_plan, noop_plan
from .variant import INT, TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/bf16_gemm.cuh"
# NOTES: DeepGEMM's tests profile kernels by the substring "gemm_"; the name keeps it.
FUNCTION = "deep_gemm::sm90::bf16_gemm_impl"
# The kernel's parameters, in its signature's order.
PARAMS = (("tensor_map_a", TENSOR_MAP), ("tensor_map_b", TENSOR_MAP), ("tensor_map_d", TENSOR_MAP),
          ("shape_m", U32), ("num_k_blocks", U32))


@dataclass(frozen=True)
class KernelKind:
    """What selects an instantiation besides the shape: the operands' layouts and D's type and mode."""
    mn_major_a: bool
    mn_major_b: bool
    out_fp32: bool
    accumulate: bool

    @property
    def out_bytes(self) -> int:
        return 4 if self.out_fp32 else 2


def kernel_source(n: int, config: GemmConfig, kind: KernelKind) -> jit.KernelSource:
    """The template instantiation for (n, config, kind); m and K are run-time values."""
    named = dict(SHAPE_N=n, BLOCK_M=config.block_m, BLOCK_N=config.block_n, kNumStages=config.num_stages,
                 kNumMulticast=config.num_multicast, kMulticastOnA=config.multicast_on_a,
                 kSwizzleDBytes=config.swizzle_d_bytes, kSmemSize=config.smem_size, kMNMajorA=kind.mn_major_a,
                 kMNMajorB=kind.mn_major_b, kOutputFP32=kind.out_fp32, kAccumulate=kind.accumulate)
    return jit.KernelSource(name="sm90_bf16_gemm", header=HEADER, function=FUNCTION, config=named)


def kernel_choice(m: int, n: int, num_sms: int, kind: KernelKind) -> GemmConfig:
    """The configuration a call of m x n outputs loads; its source is `kernel_source(n, config, kind)`."""
    return get_forced_config() or get_bf16_config(m, n, num_sms, kind.mn_major_b, kind.out_bytes)


@dataclass
class _Kernel:
    config: GemmConfig
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def _kernel(m: int, n: int, kind: KernelKind, num_sms: int, device_index: int, arch: str) -> _Kernel:
    forced = get_forced_config()
    key = (m, n, kind, num_sms, device_index, arch, forced)
    kernel = _kernels.get(key)
    if kernel is None:
        config = kernel_choice(m, n, num_sms, kind)
        log.apply_env(read_env())
        log.configs.debug("bf16 m=%d n=%d %s: %s", m, n, kind, config)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, config, kind), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


@dataclass(frozen=True)
class Operands:
    """Geometry of one call's operands, tensors numbered (A, B, D) as `_C` reads them: A's and B's outer stride
    (elements; the row stride of a K-major operand, the K stride of an MN-major one) and D's row stride."""
    m: int
    n: int
    k: int
    kind: KernelKind
    a_stride: int
    b_stride: int
    d_stride: int


def build_plan(ops: Operands, extents, device_index: int, num_sms: int, arch: str):
    """The `_C` plan of D (+)= A B^T: one launch."""
    kernel = _kernel(ops.m, ops.n, ops.kind, num_sms, device_index, arch)
    cfg, kind = kernel.config, ops.kind
    params = ParamBuffer(PARAMS)
    for name, index, rows, block, mn_major, stride in (("tensor_map_a", 0, ops.m, cfg.block_m, kind.mn_major_a,
                                                        ops.a_stride),
                                                       ("tensor_map_b", 1, ops.n, cfg.block_n, kind.mn_major_b,
                                                        ops.b_stride)):
        if mn_major:  # [k, rows], unit stride along rows: 64 x 64 boxes, block / 64 per stage
            params.tensor_map(name, index, 2, (rows, ops.k), (stride,), (64, BLOCK_K), 128)
        else:         # [rows, k]
            params.tensor_map(name, index, 2, (ops.k, rows), (stride,), (BLOCK_K, block), 128)
    out_bytes = kind.out_bytes
    params.tensor_map("tensor_map_d", 2, out_bytes, (ops.n, ops.m, 1), (ops.d_stride, ops.m * ops.d_stride),
                      (cfg.swizzle_d_bytes // out_bytes, 64, 1), cfg.swizzle_d_bytes)
    params.u32("shape_m", ops.m)
    params.u32("num_k_blocks", ceil_div(ops.k, BLOCK_K))
    launches = [params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, cfg.num_multicast)]
    return make_plan(kernel.function, device_index, (15,) * 3, extents, (2,), launches)


# ---- Validation ----

_NAMES = ("a", "b", "d")


def operand_layout(t: torch.Tensor, name: str, rows_name: str) -> Tuple[bool, int]:
    """(MN-major, outer stride in elements) of a 2-D BF16 operand [rows, k]: K-major when its stride along k is 1
    (the outer stride is then the row stride), else MN-major when its stride along the rows is 1 (the outer stride is
    the K stride). TMA needs the outer stride to be a multiple of 16 bytes."""
    rows, k = t.shape
    if k <= 1 or t.stride(1) == 1:
        mn_major, stride, extent = False, (t.stride(0) if rows > 1 else ceil_div(max(k, 1), 8) * 8), k
    elif rows <= 1 or t.stride(0) == 1:
        mn_major, stride, extent = True, (t.stride(1) if k > 1 else ceil_div(max(rows, 1), 8) * 8), rows
    else:
        raise ValueError(f"{name} must have unit stride along k (K-major) or along {rows_name} (MN-major), got "
                         f"shape {tuple(t.shape)} and strides {t.stride()}")
    if stride % 8 != 0 or stride < extent:
        what = "row" if not mn_major else "k"
        raise ValueError(f"{name}'s {what} stride is {stride} elements = {stride * 2} bytes; TMA needs a multiple of "
                         f"16 bytes at least as long as the {extent}-element {'row' if not mn_major else 'column'} "
                         f"(e.g. allocate it padded to 8 elements and pass a view)")
    return mn_major, stride


@dataclass
class BF16Layout:
    """What the checks concluded for one layout of a `bf16_gemm_nt` call; plans are made once per geometry."""
    nothing_to_do: bool  # m or n is 0
    zero_k: bool         # k is 0: D = 0 (or D unchanged when accumulating)
    device: torch.device
    m: int
    n: int
    k: int
    kind: KernelKind
    extents: Tuple[int, ...]
    num_sms: int
    arch: str
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return not (self.nothing_to_do or self.zero_k)

    def run(self, a, b, d, accumulate):
        """The per-call part: pointer checks, the launch. Returns the plan (every call of a checked layout launches
        as it is), or None for k = 0, whose zero fill `_C` cannot replay."""
        tensors = (a, b, d)
        if self.nothing_to_do:
            return noop_plan(self.device.index, 3, self.extents, (2,))
        if self.zero_k:
            if not self.kind.accumulate:
                d.zero_()
            return None
        ptrs = [t.data_ptr() for t in tensors]
        for name, ptr in zip(_NAMES, ptrs):
            if ptr % 16:
                raise ValueError(f"{name}'s data pointer must be 16-byte aligned, got offset {ptr % 16}")
        checks.check_no_overlap_ptrs("d", ptrs[2], self.extents[2],
                                     [(_NAMES[i], ptrs[i], self.extents[i]) for i in range(2)])
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = self.family.build_plan(self._operands(a, b, d), self.extents,
                                                                 self.device.index, self.num_sms, self.arch)
        launch(plan, tuple(ptrs))
        return plan

    def load_kernel(self, a, b, d, accumulate) -> None:
        """Compile mode (deep_gemm.set_compile_mode): compile or load this layout's kernel; launch nothing."""
        if self.needs_kernel:
            self.family.load(self.m, self.n, self.kind, self.num_sms, self.device.index, self.arch)

    def _operands(self, a, b, d) -> Operands:
        _, a_stride = operand_layout(a, "a", "m")
        _, b_stride = operand_layout(b, "b", "n")
        d_stride = d.stride(0) if self.m > 1 else ceil_div(self.n, 8) * 8
        return Operands(self.m, self.n, self.k, self.kind, a_stride, b_stride, d_stride)


def normalise(a, b, d, accumulate) -> BF16Layout:
    """Every layout check of `bf16_gemm_nt` (D = A B^T, or D += A B^T with `accumulate`), errors naming the
    argument. The public wrapper (deep_gemm/ops/bf16.py) turns DeepGEMM's `c` into `accumulate`."""
    checks.check_tensor(a, "a", torch.bfloat16, 2)
    checks.check_tensor(b, "b", torch.bfloat16, 2)
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"d must be a torch.Tensor, got {type(d).__name__}")
    if d.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"d must have dtype torch.bfloat16 or torch.float32, got {d.dtype}")
    if d.dim() != 2:
        raise ValueError(f"d must be 2-D, got shape {tuple(d.shape)}")
    if accumulate not in (0, 1):
        raise ValueError(f"accumulate must be 0 or 1, got {accumulate}")
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"b must have shape (n, {k}) to match a's k, got {tuple(b.shape)}")
    checks.check_shape(d, "d", (m, n), "m x n")
    tensors = (a, b, d)
    device = checks.check_same_cuda_device(list(zip(_NAMES, tensors)))
    checks.check_no_overlap(d, "d", list(zip(_NAMES[:2], tensors[:2])))
    out_fp32 = d.dtype == torch.float32
    nothing = m == 0 or n == 0
    mn_major_a = mn_major_b = False
    if not nothing and k > 0:
        mn_major_a, _ = operand_layout(a, "a", "m")
        mn_major_b, _ = operand_layout(b, "b", "n")
        if n > 1 and d.stride(1) != 1:
            raise ValueError(f"d must be row-major (stride(1) == 1), got strides {d.stride()}")
        per_chunk = 16 // d.element_size()
        if n % per_chunk != 0:
            raise ValueError(f"n = {n}: a {d.dtype} d needs n to be a multiple of {per_chunk} (TMA writes whole "
                             f"16-byte chunks of a row)")
        if m > 1 and d.stride(0) % per_chunk != 0:
            raise ValueError(f"d's row stride is {d.stride(0)} elements; TMA needs a multiple of 16 bytes")
    kind = KernelKind(mn_major_a, mn_major_b, out_fp32, bool(accumulate))
    return BF16Layout(nothing, not nothing and k == 0, device, m, n, k, kind,
                      tuple(checks.extent_bytes(t) for t in tensors), get_num_sms(device.index),
                      get_device_arch(device.index))


def warmup_kernels(variant: str, shape: dict, ms, num_sms: int, arch: str, psum_alignment: int):
    """The kernels calls of one warm-up shape (m, n; K-major operands, BF16 D, no accumulation) load."""
    kind = KernelKind(False, False, False, False)
    m, n = shape["m"], shape["n"]
    return [kernel_source(n, kernel_choice(m, n, num_sms, kind), kind)]


BF16 = Variant("bf16", "bf16_gemm_nt", (TENSOR, TENSOR, TENSOR, INT), normalise, warmup_fields=("m", "n"))
FAMILY = Family("sm90_bf16_gemm", HEADER, FUNCTION, PARAMS, ("sm_90a",), (BF16,), build_plan, clear_kernels,
                _kernel, warmup_kernels)
