"""Kernel family of include/deep_gemm/common/sf_layout.cuh: float32 scales -> packed UE8M0 (four exponents per
int32, MN-major), for a batch of [mn, k'] scale matrices (`Op.PACK_UE8M0`) or the K-grouped weight-gradient layout
(`Op.PACK_UE8M0_K_GROUPED`). Validation into a layout, and the `_C` plan that launches the kernel."""
import numbers
from dataclasses import dataclass, field
from typing import Optional

import torch

from .. import jit
from ..device import get_device_arch
from ..heuristics.common import ceil_div
from ..jit.runtime import ensure_context
from . import checks
from .plan import POINTER, U32, U64, ParamBuffer, launch, make_plan, noop_plan
from .variant import ANY_ARCH, INT, INT_LIST, TENSOR, Family, Variant

HEADER = "deep_gemm/common/sf_layout.cuh"
FUNCTION = "deep_gemm::pack_fp32_into_ue8m0_impl"
NUM_THREADS = 256
# The kernel's parameters, in its signature's order.
PARAMS = (("sf", POINTER), ("out", POINTER), ("ks", POINTER), ("num_groups", U32), ("mn", U32), ("sf_k", U32),
          ("gran_k", U32), ("sf_rows", U32), ("in_group_stride", U64), ("in_stride_k", U64), ("in_stride_mn", U64),
          ("out_row_stride", U32))

_functions = {}


def kernel_source() -> jit.KernelSource:
    return jit.KernelSource(name="pack_fp32_into_ue8m0", header=HEADER, function=FUNCTION,
                            config=dict(kNumThreads=NUM_THREADS))


def _function(device_index: int, arch: str):
    key = (device_index, arch)
    if key not in _functions:
        ensure_context(device_index)
        _functions[key] = jit.load(kernel_source(), arch, NUM_THREADS, 0).function(device_index)
    return _functions[key]


def clear_kernels() -> None:
    _functions.clear()


def build_plan(layout: "PackLayout"):
    """The `_C` plan of one validated layout (`PackLayout`)."""
    params = ParamBuffer(PARAMS)
    params.pointer("sf", 0)
    params.pointer("out", 1)
    params.pointer("ks", 2 if layout.k_grouped else None)
    for name in ("num_groups", "mn", "sf_k", "gran_k", "sf_rows"):
        params.u32(name, getattr(layout, name))
    for name in ("in_group_stride", "in_stride_k", "in_stride_mn"):
        params.u64(name, getattr(layout, name))
    params.u32("out_row_stride", layout.out_row_stride)
    launch = params.launch(layout.out_rows, NUM_THREADS, 0, 1)
    function = _function(layout.device.index, layout.arch)
    return make_plan(function, layout.device.index, (3,) * len(layout.extents), layout.extents, (1,), (launch,))


@dataclass
class PackLayout:
    """One validated geometry: the kernel's scalar arguments (uniform batch or k-grouped) and the output rows."""
    device: torch.device
    k_grouped: bool
    num_groups: int
    mn: int
    sf_k: int             # uniform: scale rows (the k' of [mn, k']) per group
    gran_k: int           # k-grouped: K elements per scale row
    sf_rows: int          # scale rows the kernel may read: per group (uniform) or in all (k-grouped)
    in_group_stride: int
    in_stride_k: int
    in_stride_mn: int
    out_rows: int
    out_row_stride: int
    extents: tuple
    arch: str
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime

    @property
    def needs_kernel(self) -> bool:
        return True

    def run(self, sf, out, grouped_layout=None, *host_args):
        tensors = (sf, out) if grouped_layout is None else (sf, out, grouped_layout)
        ptrs = [t.data_ptr() for t in tensors]
        checks.check_no_overlap_ptrs("out", ptrs[1], self.extents[1],
                                     [(n, p, e) for n, p, e in zip(("sf", "out", "grouped_layout"), ptrs,
                                                                   self.extents) if n != "out"])
        if self.out_rows == 0 or self.mn == 0:
            return noop_plan(self.device.index, len(tensors), self.extents, (1,))
        plan = self.plans.get(None)
        if plan is None:
            plan = self.plans[None] = self.family.build_plan(self)
        launch(plan, tuple(ptrs))
        return plan


def normalise_pack(sf, out) -> PackLayout:
    """sf [mn, k'] or [b, mn, k'] float32 (any strides) -> out [.., mn, ceil(k'/4)] int32 whose MN dimension is
    contiguous, rows of the packed K dimension `out.stride(-1)` apart, batches stacked (stride(0) == stride(-1) *
    ceil(k'/4))."""
    checks.check_tensor(sf, "sf", torch.float32, None)
    if sf.dim() not in (2, 3):
        raise ValueError(f"sf must be 2-D [mn, k] or 3-D [g, mn, k], got shape {tuple(sf.shape)}")
    batch = sf.shape[0] if sf.dim() == 3 else 1
    mn, sf_k = sf.shape[-2], sf.shape[-1]
    k4 = ceil_div(sf_k, 4)
    checks.check_tensor(out, "out", torch.int32, sf.dim())
    checks.check_shape(out, "out", sf.shape[:-1] + (k4,))
    if (mn > 1 and out.stride(-2) != 1) or (sf.dim() == 3 and batch > 1 and out.stride(0) != out.stride(-1) * k4):
        raise ValueError(f"out must be MN-major with stacked batches, got strides {out.stride()}")
    device = checks.check_same_cuda_device([("sf", sf), ("out", out)])
    return PackLayout(device, False, batch, mn, sf_k, 0, sf_k, sf.stride(0) if sf.dim() == 3 else 0, sf.stride(-1),
                      sf.stride(-2), batch * k4, out.stride(-1), (checks.extent_bytes(sf), checks.extent_bytes(out)),
                      get_device_arch(device.index))


def normalise_pack_k_grouped(sf, out, grouped_layout, ks, gran_k) -> PackLayout:
    """sf [sum_g ceil(k_g/gran_k), mn] float32 (groups' scale rows back to back), grouped_layout [G] int32 = k_g on
    the device, ks the same k_g as a host list -> out [sum_g ceil(k_g/(4 gran_k)), mn] int32, unit column stride."""
    checks.check_tensor(sf, "sf", torch.float32, 2)
    if isinstance(gran_k, bool) or not isinstance(gran_k, numbers.Integral) or gran_k not in (32, 128):
        raise ValueError(f"gran_k must be 32 or 128, got {gran_k!r}")
    if not all(isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 0 for k in ks):
        raise ValueError(f"ks_cpu must be non-negative ints, got {ks!r}")
    checks.check_index_tensor(grouped_layout, "grouped_layout", (len(ks),), "G")
    sf_rows = sum(ceil_div(k, gran_k) for k in ks)
    mn = sf.shape[1]
    checks.check_shape(sf, "sf", (sf_rows, mn), "sum_g ceil(k_g/gran_k) x mn")
    out_rows = sum(ceil_div(k, 4 * gran_k) for k in ks)
    checks.check_tensor(out, "out", torch.int32, 2)
    checks.check_shape(out, "out", (out_rows, mn))
    if mn > 1 and out.stride(1) != 1:
        raise ValueError(f"out must have a unit column stride, got strides {out.stride()}")
    named = [("sf", sf), ("out", out), ("grouped_layout", grouped_layout)]
    device = checks.check_same_cuda_device(named)
    return PackLayout(device, True, len(ks), mn, 0, gran_k, sf_rows, 0, sf.stride(0), sf.stride(1), out_rows,
                      out.stride(0), tuple(checks.extent_bytes(t) for _, t in named), get_device_arch(device.index))


PACK_UE8M0 = Variant("pack_ue8m0", "get_mn_major_tma_aligned_packed_ue8m0_tensor", (TENSOR, TENSOR), normalise_pack,
                     gemm=False)
PACK_UE8M0_K_GROUPED = Variant("pack_ue8m0_k_grouped", "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
                               (TENSOR, TENSOR, TENSOR, INT_LIST, INT), normalise_pack_k_grouped, gemm=False)
FAMILY = Family("sf_layout", HEADER, FUNCTION, PARAMS, (ANY_ARCH,), (PACK_UE8M0, PACK_UE8M0_K_GROUPED), build_plan,
                clear_kernels)
