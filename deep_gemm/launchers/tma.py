"""TMA descriptor construction (cuTensorMapEncodeTiled)."""
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
    from cuda.bindings import driver as cu
    dtype = getattr(cu.CUtensorMapDataType, _DTYPE[element_size])
    swizzle = getattr(cu.CUtensorMapSwizzle, _SWIZZLE[swizzle_bytes])
    promo = (cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B if l2_promotion_256
             else cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE)
    return check(cu.cuTensorMapEncodeTiled(
        dtype, 2, ptr, [cu.cuuint64_t(inner), cu.cuuint64_t(outer)],
        [cu.cuuint64_t(outer_stride_elems * element_size)], [cu.cuuint32_t(box_inner), cu.cuuint32_t(box_outer)],
        [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promo,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))


def tma_row_stride(t: torch.Tensor) -> int:
    """Row stride (elements) to give TMA: the tensor's own, or any legal one when there is a single row."""
    rows, cols = t.shape
    if rows > 1:
        return t.stride(0)
    per16 = 16 // t.element_size()
    return (cols + per16 - 1) // per16 * per16
