"""Building `deep_gemm._C` plans: a kernel's parameter buffer with its constants, and the patches (TMA descriptors,
raw pointers) that `_C` fills in from each call's tensor addresses (see csrc/launch.cpp).

Tensors are referred to by their index in the call's tensor list (the order `_C` reads them: each (tensor, scales)
pair, then the other tensor arguments, as in the public signature)."""
import functools
import struct
from typing import List, Sequence

from ..jit.runtime import current_context

_MAP_BYTES = 128   # sizeof(CUtensorMap)
_MAP_ALIGN = 128   # alignof(CUtensorMap) (cuda.h 13)


class ParamBuffer:
    """One launch's kernel parameters, appended in the kernel's parameter order."""

    def __init__(self):
        self._data = bytearray()
        self.offsets: List[int] = []
        self.maps: List[tuple] = []
        self.ptrs: List[tuple] = []

    def _append(self, size: int, align: int) -> int:
        offset = (len(self._data) + align - 1) // align * align
        self._data.extend(b"\0" * (offset + size - len(self._data)))
        self.offsets.append(offset)
        return offset

    def tensor_map(self, tensor: int, element_size: int, dims: Sequence[int], strides: Sequence[int],
                   box: Sequence[int], swizzle_bytes: int, l2_promotion: bool = True, ptr_offset: int = 0) -> None:
        """A CUtensorMap parameter over tensor `tensor` (+ `ptr_offset` bytes): dims innermost first, strides of the
        outer dimensions in elements."""
        offset = self._append(_MAP_BYTES, _MAP_ALIGN)
        self.maps.append(map_patch(offset, tensor, ptr_offset, element_size, dims, strides, box, swizzle_bytes,
                                   l2_promotion))

    def pointer(self, tensor: int, ptr_offset: int = 0) -> None:
        """A pointer parameter: tensor `tensor`'s address (+ `ptr_offset` bytes)."""
        self.ptrs.append((self._append(8, 8), tensor, ptr_offset))

    def null_pointer(self) -> None:
        self._append(8, 8)

    def u32(self, value: int) -> None:
        offset = self._append(4, 4)
        struct.pack_into("<I", self._data, offset, value)

    def u64(self, value: int) -> None:
        offset = self._append(8, 8)
        struct.pack_into("<Q", self._data, offset, value)

    def blob(self, size: int) -> int:
        """A by-value struct parameter of `size` bytes (filled through `write_u32` / `add_map_at`); its offset."""
        return self._append(size, _MAP_ALIGN)

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
        return (grid, block, smem, cluster, len(self._data), tuple(self.offsets), bytes(self._data),
                tuple(self.maps), tuple(self.ptrs))


def map_patch(offset: int, tensor: int, ptr_offset: int, element_size: int, dims: Sequence[int],
              strides: Sequence[int], box: Sequence[int], swizzle_bytes: int, l2_promotion: bool) -> tuple:
    """A tensor-map patch as `_C` reads it: driver enum values, strides in bytes. Out-of-bounds elements of a box
    read as zero and are not written by stores."""
    e = _enums()
    return (offset, tensor, ptr_offset, e["dtype"][element_size], tuple(dims),
            tuple(s * element_size for s in strides), tuple(box), e["swizzle"][swizzle_bytes],
            e["promo"][l2_promotion])


def make_plan(function, device_index: int, align_masks: Sequence[int], extents: Sequence[int], outputs: Sequence[int],
              launches: Sequence[tuple]):
    """A `_C` plan for the current context (the device's, made current by the caller)."""
    from .. import _C
    return _C.make_plan(int(function), int(current_context()), device_index, tuple(align_masks), tuple(extents),
                        tuple(outputs), tuple(launches))


def noop_plan(device_index: int, num_tensors: int, extents: Sequence[int], outputs: Sequence[int]):
    """A plan that launches nothing (m = 0 or n = 0): cached like any other, so such calls stay cheap."""
    from .. import _C
    return _C.make_plan(0, 0, device_index, (0,) * num_tensors, tuple(extents), tuple(outputs), ())


@functools.lru_cache(maxsize=None)
def _enums() -> dict:
    from cuda.bindings import driver as cu
    dtype = {1: "CU_TENSOR_MAP_DATA_TYPE_UINT8", 2: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
             4: "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}
    swizzle = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
               128: "CU_TENSOR_MAP_SWIZZLE_128B"}
    return dict(
        dtype={size: int(getattr(cu.CUtensorMapDataType, name)) for size, name in dtype.items()},
        swizzle={size: int(getattr(cu.CUtensorMapSwizzle, name)) for size, name in swizzle.items()},
        promo={True: int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B),
               False: int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE)})
