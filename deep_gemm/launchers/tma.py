"""TMA descriptor construction (cuTensorMapEncodeTiled)."""
import functools
from typing import Tuple

import torch

from ..jit.runtime import check

_SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
            128: "CU_TENSOR_MAP_SWIZZLE_128B"}
_DTYPE = {1: "CU_TENSOR_MAP_DATA_TYPE_UINT8", 2: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
          4: "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}


def make_2d_tma(ptr: int, element_size: int, inner: int, outer: int, outer_stride_elems: int, box_inner: int,
                box_outer: int, swizzle_bytes: int, l2_promotion_256: bool = True):
    """A 2-D tiled tensor map over `outer` rows of `inner` elements (row stride `outer_stride_elems`).

    Out-of-bounds elements of a box read as zero and are not written by stores.
    """
    return _encode(ptr, element_size, (inner, outer), (outer_stride_elems,), (box_inner, box_outer), swizzle_bytes,
                   l2_promotion_256)


def make_3d_tma(ptr: int, element_size: int, dims: Tuple[int, int, int], strides_elems: Tuple[int, int],
                box: Tuple[int, int, int], swizzle_bytes: int, l2_promotion_256: bool = True):
    """A 3-D tiled tensor map: dims innermost first, strides (elements) of the two outer dimensions."""
    return _encode(ptr, element_size, dims, strides_elems, box, swizzle_bytes, l2_promotion_256)


def _encode(ptr: int, element_size: int, dims, strides_elems, box, swizzle_bytes: int, l2_promotion_256: bool):
    e = _enums()
    cu = e["cu"]
    err, tensor_map = cu.cuTensorMapEncodeTiled(
        e["dtype"][element_size], len(dims), ptr, [cu.cuuint64_t(d) for d in dims],
        [cu.cuuint64_t(s * element_size) for s in strides_elems], [cu.cuuint32_t(b) for b in box],
        e["ones"][:len(dims)], e["interleave"], e["swizzle"][swizzle_bytes], e["promo"][l2_promotion_256], e["oob"])
    if err != e["success"]:
        check((err,))
    return tensor_map


# NOTES: a descriptor depends only on its arguments (address, sizes, strides, box, swizzle), so an encoded one is
# reused whenever a call passes the same memory again (weights always, activations often, through torch's caching
# allocator); one encode costs ~2.6 us of host time, a lookup a fraction of that.
_tma_cache: dict = {}
_TMA_CACHE_SIZE = 8192


def cached_2d_tma(ptr: int, element_size: int, inner: int, outer: int, outer_stride_elems: int, box_inner: int,
                  box_outer: int, swizzle_bytes: int, l2_promotion_256: bool = True):
    """`make_2d_tma`, memoised on its arguments."""
    key = (ptr, element_size, inner, outer, outer_stride_elems, box_inner, box_outer, swizzle_bytes,
           l2_promotion_256)
    tensor_map = _tma_cache.get(key)
    if tensor_map is None:
        if len(_tma_cache) >= _TMA_CACHE_SIZE:
            _tma_cache.clear()
        tensor_map = _tma_cache[key] = make_2d_tma(ptr, element_size, inner, outer, outer_stride_elems, box_inner,
                                                   box_outer, swizzle_bytes, l2_promotion_256)
    return tensor_map


def tma_enum_values(element_size: int, inner: int, outer: int, outer_stride_elems: int, box_inner: int,
                    box_outer: int, swizzle_bytes: int, l2_promotion_256: bool = True) -> Tuple[int, ...]:
    """`make_2d_tma`'s arguments as the driver's plain integers (data type, dims, stride in bytes, box, swizzle,
    L2 promotion), for the C++ fast path, which encodes the same descriptor for each new address."""
    e = _enums()
    return (int(e["dtype"][element_size]), inner, outer, outer_stride_elems * element_size, box_inner, box_outer,
            int(e["swizzle"][swizzle_bytes]), int(e["promo"][l2_promotion_256]))


def current_raw_stream(device_index: int) -> int:
    """Handle of the current CUDA stream of a device."""
    # NOTES: torch.cuda.current_stream(...).cuda_stream costs ~7 us from Python; the raw query well under 1 us.
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


@functools.lru_cache(maxsize=None)
def _enums() -> dict:
    from cuda.bindings import driver as cu
    return dict(
        cu=cu, success=cu.CUresult.CUDA_SUCCESS,
        dtype={size: getattr(cu.CUtensorMapDataType, name) for size, name in _DTYPE.items()},
        swizzle={size: getattr(cu.CUtensorMapSwizzle, name) for size, name in _SWIZZLE.items()},
        promo={True: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               False: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE},
        interleave=cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        oob=cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ones=[cu.cuuint32_t(1)] * 3)


def tma_row_stride(t: torch.Tensor) -> int:
    """Row stride (elements) to give TMA: the tensor's own, or any legal one when there is a single row."""
    rows, cols = t.shape
    if rows > 1:
        return t.stride(0)
    per16 = 16 // t.element_size()
    return (cols + per16 - 1) // per16 * per16
