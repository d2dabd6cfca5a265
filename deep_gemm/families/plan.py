"""Building `deep_gemm._C` plans: a kernel's parameter buffer with its constants, and the patches (TMA descriptors,
raw pointers) that `_C` fills in from each call's tensor addresses (see csrc/launch.cpp).

Tensors are referred to by their index in the call's tensor list (the order `_C` reads them: each (tensor, scales)
pair, then the other tensor arguments, as in the public signature)."""
import functools
import struct
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import torch

from .._c_loader import load_c
from ..jit.runtime import current_context
from . import checks

_C = load_c()

# NOTES: the families launch through this name, so that this module and the runtime are the only importers of the
# extension module.
launch = _C.launch

_MAP_BYTES = 128   # sizeof(CUtensorMap)
_MAP_ALIGN = 128   # alignof(CUtensorMap) (cuda.h 13)


# The kinds of kernel parameters, as a family declares them (`PARAMS`: (name, kind) in the `__global__` signature's
# order; tests/families/test_params.py checks each declaration against its kernel header): a CUtensorMap, a pointer,
# 32- and 64-bit integers, a by-value struct.
TENSOR_MAP, POINTER, U32, U64, STRUCT = "tensor_map", "pointer", "u32", "u64", "struct"
_SIZES = {TENSOR_MAP: (_MAP_BYTES, _MAP_ALIGN), POINTER: (8, 8), U32: (4, 4), U64: (8, 8)}


class ParamBuffer:
    """One launch's kernel parameters, filled by name in the order of the kernel's declaration `params` (a tuple of
    (name, kind)); a name out of order, of another kind or missing at `launch` is a bug of the family."""

    def __init__(self, params: Sequence[Tuple[str, str]]):
        self._params = tuple(params)
        self._data = bytearray()
        self.offsets: List[int] = []
        self.maps: List[tuple] = []
        self.ptrs: List[tuple] = []
        self.workspace_patch = (-1, 0)  # (offset, bytes): see `workspace`

    def _append(self, name: str, kind: str, size: int = 0, align: int = 0) -> int:
        index = len(self.offsets)
        if index >= len(self._params) or self._params[index] != (name, kind):
            expected = self._params[index] if index < len(self._params) else "nothing"
            raise AssertionError(f"kernel parameter {index}: got {(name, kind)}, the declaration has {expected}")
        if kind != STRUCT:
            size, align = _SIZES[kind]
        offset = (len(self._data) + align - 1) // align * align
        self._data.extend(b"\0" * (offset + size - len(self._data)))
        self.offsets.append(offset)
        return offset

    def tensor_map(self, name: str, tensor: int, element_size: int, dims: Sequence[int], strides: Sequence[int],
                   box: Sequence[int], swizzle_bytes: int, l2_promotion: bool = True, ptr_offset: int = 0,
                   tf32: bool = False) -> None:
        """A CUtensorMap parameter over tensor `tensor` (+ `ptr_offset` bytes): dims innermost first, strides of the
        outer dimensions in elements. `tf32`: FP32 elements that TMA rounds to TF32 (to nearest) as it loads them,
        as a TF32 matmul rounds its inputs (the tensor cores alone would drop the low bits)."""
        offset = self._append(name, TENSOR_MAP)
        self.maps.append(map_patch(offset, tensor, ptr_offset, "tf32" if tf32 else element_size, dims, strides, box,
                                   swizzle_bytes, l2_promotion))

    def unused_tensor_map(self, name: str) -> None:
        """A CUtensorMap parameter the kernel does not read on this path (left zero)."""
        self._append(name, TENSOR_MAP)

    def pointer(self, name: str, tensor: Optional[int], ptr_offset: int = 0) -> None:
        """A pointer parameter: tensor `tensor`'s address (+ `ptr_offset` bytes), or null for None."""
        offset = self._append(name, POINTER)
        if tensor is not None:
            self.ptrs.append((offset, tensor, ptr_offset))

    def workspace(self, name: str, nbytes: int) -> None:
        """A pointer parameter that `_C` fills with the launch stream's workspace of at least `nbytes` bytes: owned
        by the library (deep_gemm.runtime.stream_workspace), zero when first handed out, reused by every launch on
        that stream (a kernel using it must leave any counters in it back at zero). One per launch."""
        assert nbytes > 0 and self.workspace_patch[0] < 0, "one workspace of a positive size per launch"
        self.workspace_patch = (self._append(name, POINTER), nbytes)

    def u32(self, name: str, value: int) -> None:
        struct.pack_into("<I", self._data, self._append(name, U32), value)

    def u64(self, name: str, value: int) -> None:
        struct.pack_into("<Q", self._data, self._append(name, U64), value)

    def struct(self, name: str, size: int) -> int:
        """A by-value struct parameter of `size` bytes (filled through `write_u32` / `add_map_at`); its offset."""
        return self._append(name, STRUCT, size, _MAP_ALIGN)

    def write_u32(self, offset: int, value: int) -> None:
        struct.pack_into("<I", self._data, offset, value)

    def add_map_at(self, offset: int, tensor: int, element_size: int, dims, strides, box, swizzle_bytes: int,
                   l2_promotion: bool = True, ptr_offset: int = 0) -> None:
        """A CUtensorMap inside a struct parameter, at byte `offset` of the buffer (128-byte aligned)."""
        assert offset % _MAP_ALIGN == 0
        self.maps.append(map_patch(offset, tensor, ptr_offset, element_size, dims, strides, box, swizzle_bytes,
                                   l2_promotion))

    def launch(self, grid: int, block: int, smem: int, cluster: int) -> tuple:
        """The launch tuple `_C.make_plan` takes."""
        missing = self._params[len(self.offsets):]
        assert not missing, f"kernel parameters never filled: {missing}"
        return (grid, block, smem, cluster, len(self._data), tuple(self.offsets), bytes(self._data),
                tuple(self.maps), tuple(self.ptrs), self.workspace_patch)


def map_patch(offset: int, tensor: int, ptr_offset: int, element_size, dims: Sequence[int],
              strides: Sequence[int], box: Sequence[int], swizzle_bytes: int, l2_promotion: bool) -> tuple:
    """A tensor-map patch as `_C` reads it: driver enum values, strides in bytes. Out-of-bounds elements of a box
    read as zero and are not written by stores. `element_size` 1, 2, 4 or "tf32" (4-byte FP32 rounded to TF32)."""
    e = _enums()
    size = 4 if element_size == "tf32" else element_size
    return (offset, tensor, ptr_offset, e["dtype"][element_size], tuple(dims),
            tuple(s * size for s in strides), tuple(box), e["swizzle"][swizzle_bytes], e["promo"][l2_promotion])


def make_plan(function, device_index: int, align_masks: Sequence[int], extents: Sequence[int], outputs: Sequence[int],
              launches: Sequence[tuple]):
    """A `_C` plan for the current context (the device's, made current by the caller)."""
    return _C.make_plan(int(function), int(current_context()), device_index, tuple(align_masks), tuple(extents),
                        tuple(outputs), tuple(launches))


def noop_plan(device_index: int, num_tensors: int, extents: Sequence[int], outputs: Sequence[int]):
    """A plan that launches nothing (m = 0 or n = 0): cached like any other, so such calls stay cheap."""
    return _C.make_plan(0, 0, device_index, (0,) * num_tensors, tuple(extents), tuple(outputs), ())


@functools.lru_cache(maxsize=None)
def _enums() -> dict:
    from cuda.bindings import driver as cu
    dtype = {1: "CU_TENSOR_MAP_DATA_TYPE_UINT8", 2: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
             4: "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "tf32": "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32"}
    swizzle = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
               128: "CU_TENSOR_MAP_SWIZZLE_128B"}
    return dict(
        dtype={size: int(getattr(cu.CUtensorMapDataType, name)) for size, name in dtype.items()},
        swizzle={size: int(getattr(cu.CUtensorMapSwizzle, name)) for size, name in swizzle.items()},
        promo={True: int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B),
               False: int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE)})


@dataclass
class OneOutputLayout:
    """The layout of a call whose tensors are `names` with the last one its only output (the MQA logits families):
    per call, each pointer's alignment (`aligns`, bytes) and the output against the inputs, then the plan of this
    geometry (made once by `family.build_plan(ops, extents, device index, num_sms, arch)`) is launched. Arguments
    after the tensors (host ints) are part of `ops` already."""
    nothing_to_do: bool  # the output is empty
    device: torch.device
    ops: object
    names: Tuple[str, ...]
    aligns: Tuple[int, ...]
    extents: Tuple[int, ...]
    num_sms: int
    arch: str
    plans: dict = field(default_factory=dict)
    family: Optional[object] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return not self.nothing_to_do

    def run(self, *args):
        tensors = args[:len(self.names)]
        out = len(tensors) - 1
        if self.nothing_to_do:
            return noop_plan(self.device.index, len(tensors), self.extents, (out,))
        ptrs = [t.data_ptr() for t in tensors]
        for name, ptr, align in zip(self.names, ptrs, self.aligns):
            if ptr % align:
                raise ValueError(f"{name}'s data pointer must be {align}-byte aligned, got offset {ptr % align}")
        checks.check_no_overlap_ptrs(self.names[out], ptrs[out], self.extents[out],
                                     [(self.names[i], ptrs[i], self.extents[i]) for i in range(out)])
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = self.family.build_plan(self.ops, self.extents, self.device.index,
                                                                 self.num_sms, self.arch)
        launch(plan, tuple(ptrs))
        return plan
