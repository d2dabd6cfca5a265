"""Scale-factor layouts with DeepGEMM v2's names (`deep_gemm.utils.layout`, also exported by `deep_gemm.utils`), and
the row / K alignment of the contiguous grouped layouts.

SM90 kernels read float32 scales: 1 x 128 scales MN-major with the MN stride padded to 16 bytes (what
`get_mn_major_tma_aligned_tensor` returns) and 128 x 128 scales as they are. The packed UE8M0 forms (four power-of-two
exponents per int32) are what SM100 block-scaled MMAs read; they are provided for callers that prepare SM100 inputs
(the packing kernels run on any GPU), and our SM90 GEMMs refuse them.
"""
import numbers
from typing import List, Optional, Tuple, Union

import torch

from ..heuristics.common import M_ALIGNMENT_CONTIGUOUS, ceil_div
from ..runtime import Op, call
from ..scale_layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size

__all__ = ["get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_col_major_tma_aligned_tensor",
           "get_mn_major_tma_aligned_packed_ue8m0_tensor", "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
           "transform_sf_into_required_layout", "get_mk_alignment_for_contiguous_layout",
           "set_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
           "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout",
           "interleave_swiglu_weights", "SWIGLU_INTERLEAVE_ROWS"]

# The run length of gate and up rows in a SwiGLU GEMM's weights (interleave_swiglu_weights): a 128-wide tile holds one
# run of each, so each thread holds a gate value and its up value (SwiGLUFP8Epilogue).
SWIGLU_INTERLEAVE_ROWS = 64

_mk_alignment = M_ALIGNMENT_CONTIGUOUS


# DeepGEMM v2's name.
get_mn_major_tma_aligned_tensor = get_col_major_tma_aligned_tensor


def _check_sf(sf, dims: Tuple[int, ...]) -> None:
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"sf must be a torch.Tensor, got {type(sf).__name__}")
    if sf.dtype != torch.float32:
        raise TypeError(f"sf must be float32 scales, got {sf.dtype}")
    if sf.dim() not in dims:
        raise ValueError(f"sf must be {' or '.join(f'{d}-D' for d in dims)}, got shape {tuple(sf.shape)}")


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, psum_layout: Optional[torch.Tensor] = None
                                                 ) -> torch.Tensor:
    """float32 scales [mn, k'] / [g, mn, k'] -> int32 [.., mn, ceil(k'/4)], MN-major with the MN stride padded to 16
    bytes: byte t of element [c, j] is the exponent of sf[c, 4j + t] (0 past k'). Exact for power-of-two scales
    (UE8M0); other values are truncated to their exponent. One kernel (`pack_fp32_into_ue8m0`)."""
    _check_sf(sf, (2, 3))
    if psum_layout is not None:
        raise ValueError("psum_layout: packing with the psum layout is an SM100 path, not implemented here")
    mn, k4 = sf.shape[-2], ceil_div(sf.shape[-1], 4)
    aligned_mn = get_tma_aligned_size(mn, 4)
    batch = sf.shape[:-2]
    out = torch.empty((*batch, k4, aligned_mn), dtype=torch.int32, device=sf.device).transpose(-1, -2)[..., :mn, :]
    call(int(Op.PACK_UE8M0), sf, out)
    return out


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, grouped_layout: torch.Tensor,
                                                           ks_cpu: Optional[List[int]], gran_k: int, k_alignment: int,
                                                           use_psum_layout: bool = False) -> torch.Tensor:
    """K-grouped scales sf [sum_g ceil(k_g/gran_k), mn] float32 (the groups' rows back to back; grouped_layout [G]
    int32 and ks_cpu hold k_g) -> int32 [sum_g ceil(k_g/(4 gran_k)), mn] (MN stride padded to 16 bytes): each group
    packed separately, four scale rows per int32 row. One kernel (`pack_fp32_into_ue8m0`)."""
    _check_sf(sf, (2,))
    if use_psum_layout:
        raise ValueError("use_psum_layout: the psum K-grouped layout is an SM100 path, not implemented here")
    if isinstance(gran_k, bool) or gran_k not in (32, 128):
        raise ValueError(f"gran_k must be 32 or 128, got {gran_k!r}")
    if isinstance(ks_cpu, (str, bytes)) or not isinstance(ks_cpu, (list, tuple)) or \
            not all(isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 0 for k in ks_cpu):
        raise TypeError(f"ks_cpu must be a list of non-negative ints (the group sizes), got {ks_cpu!r}")
    if isinstance(k_alignment, bool) or not isinstance(k_alignment, numbers.Integral) or k_alignment <= 0:
        raise ValueError(f"k_alignment must be a positive int, got {k_alignment!r}")
    ks = [int(k) for k in ks_cpu]
    if any(k % k_alignment for k in ks):
        raise ValueError(f"ks_cpu: every group size must be a multiple of k_alignment={k_alignment}, got {ks}")
    rows = sum(ceil_div(k, 4 * gran_k) for k in ks)
    mn = sf.shape[1]
    out = torch.empty((rows, get_tma_aligned_size(mn, 4)), dtype=torch.int32, device=sf.device)[:, :mn]
    call(int(Op.PACK_UE8M0_K_GROUPED), sf, out, grouped_layout, ks, gran_k)
    return out


def transform_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int,
                                      recipe: Union[Tuple[int, int, int], Tuple[int, int]],
                                      num_groups: Optional[int] = None, is_sfa: Optional[bool] = None,
                                      disable_ue8m0_cast: bool = False,
                                      psum_layout: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DeepGEMM v2's scale transform, SM90 rules: float32 scales with granularity (1, 128) become MN-major and
    TMA-aligned (`get_mn_major_tma_aligned_tensor`; no copy when they already are); (128, 128) scales are checked and
    returned as they are. `recipe` is (gran_m, gran_n, gran_k) with `is_sfa` choosing gran_m or gran_n, or
    (gran_mn, gran_k). Anything else (packed UE8M0 int32 scales, other granularities) is an SM100 layout: refused."""
    gran_mn, gran_k = recipe_granularity(recipe, is_sfa)
    expect_dim = 2 if num_groups is None else 3
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"sf must be a torch.Tensor, got {type(sf).__name__}")
    if sf.dtype != torch.float32:
        raise ValueError(f"sf: {sf.dtype} scales (packed UE8M0) are an SM100 format; SM90 kernels take float32 "
                         f"scales")
    expected = ((num_groups,) if num_groups is not None else ()) + (ceil_div(mn, gran_mn), ceil_div(k, gran_k))
    if sf.dim() != expect_dim or tuple(sf.shape) != expected:
        raise ValueError(f"sf must have shape {expected} for mn={mn}, k={k}, recipe={tuple(recipe)}, got "
                         f"{tuple(sf.shape)}")
    if psum_layout is not None:
        raise ValueError("psum_layout: a scale transform with the psum layout is an SM100 path")
    if (gran_mn, gran_k) == (1, 128):
        return get_mn_major_tma_aligned_tensor(sf)
    if (gran_mn, gran_k) == (128, 128):
        inner_ok = sf.stride(-1) == 1 and (sf.shape[-2] <= 1 or sf.stride(-2) == sf.shape[-1])
        transposed_ok = sf.stride(-2) == 1 and (sf.shape[-1] <= 1 or sf.stride(-1) == sf.shape[-2])
        if not (inner_ok or transposed_ok):
            raise ValueError(f"sf: 128x128 scales must be contiguous (or transposed-contiguous), got strides "
                             f"{sf.stride()}")
        return sf
    raise ValueError(f"recipe {tuple(recipe)}: scale granularity ({gran_mn}, {gran_k}) has no SM90 layout; SM90 "
                     f"takes (1, 128) and (128, 128) float32 scales")


def recipe_granularity(recipe, is_sfa: Optional[bool]) -> Tuple[int, int]:
    """(gran_mn, gran_k) of one operand from a v2 recipe: (gran_m, gran_n, gran_k) with `is_sfa`, or (gran_mn, gran_k)."""
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3) or \
            not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in recipe):
        raise TypeError(f"recipe must be a tuple of 2 or 3 ints, got {recipe!r}")
    if len(recipe) == 3:
        if is_sfa is None:
            raise ValueError("is_sfa must be given with a 3-element recipe (gran_m, gran_n, gran_k)")
        return (int(recipe[0]) if is_sfa else int(recipe[1])), int(recipe[2])
    if is_sfa is not None:
        raise ValueError("is_sfa must be None with a 2-element recipe (gran_mn, gran_k)")
    return int(recipe[0]), int(recipe[1])


def get_mk_alignment_for_contiguous_layout() -> int:
    """Rows (M-grouped) or K elements (K-grouped) each group's segment of a contiguous layout starts at a multiple
    of: 128 unless changed with `set_mk_alignment_for_contiguous_layout`."""
    return _mk_alignment


def set_mk_alignment_for_contiguous_layout(alignment: int) -> None:
    """Change the segment alignment the contiguous layouts use (DeepGEMM v2). On SM90 every tile of the m_indices
    layout must lie in one segment, so the value must be a positive multiple of 128 (DeepGEMM's SM90 value is 128)."""
    global _mk_alignment
    if isinstance(alignment, bool) or not isinstance(alignment, numbers.Integral):
        raise TypeError(f"alignment must be an int, got {type(alignment).__name__}")
    if alignment <= 0 or alignment % M_ALIGNMENT_CONTIGUOUS != 0:
        raise ValueError(f"alignment must be a positive multiple of {M_ALIGNMENT_CONTIGUOUS} on SM90, got {alignment}")
    _mk_alignment = int(alignment)


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: Optional[int] = None) -> int:
    """The alignment that suits the kernels best: 128 on SM90 whatever `expected_m` (as DeepGEMM)."""
    if expected_m is not None and (isinstance(expected_m, bool) or not isinstance(expected_m, numbers.Integral)):
        raise TypeError(f"expected_m must be an int or None, got {type(expected_m).__name__}")
    return M_ALIGNMENT_CONTIGUOUS


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def interleave_swiglu_weights(w):
    """The MoE gate/up weights as the SwiGLU GEMMs (`m_grouped_fp8_gemm_nt_{contiguous,masked}_swiglu`) take them,
    once at load time: `w` = (B [G, 2I, k] e4m3 or [2I, k], SFB [G, 2I/128, ceil(k/128)] or 2-D) with gate rows
    [0, I) and up rows [I, 2I), I a multiple of 128, or a plain tensor [G, 2I, k] / [2I, k] of any dtype. Returns B
    with its rows interleaved in runs of SWIGLU_INTERLEAVE_ROWS (gate 0-63, up 0-63, gate 64-127, up 64-127, ...),
    a new tensor, and SFB as it is (the pair): its 128-row blocks stay in gate | up order, and the kernel takes the
    gate and up blocks of each run from there, so the weights' values and scales are exactly the original ones."""
    pair = isinstance(w, (tuple, list))
    b = w[0] if pair else w
    if not isinstance(b, torch.Tensor) or b.dim() not in (2, 3):
        raise TypeError(f"w must be a tensor [G, 2I, k] / [2I, k] or a (tensor, scales) pair, got "
                        f"{type(b).__name__ if not isinstance(b, torch.Tensor) else tuple(b.shape)}")
    rows = b.shape[-2]
    if rows % 256:
        raise ValueError(f"w: the gate/up rows (2 x the intermediate size) must be a multiple of 256, got {rows}")
    runs = rows // 2 // SWIGLU_INTERLEAVE_ROWS
    lead, k = b.shape[:-2], b.shape[-1]
    halves = b.reshape(*lead, 2, runs, SWIGLU_INTERLEAVE_ROWS, k)
    out = halves.transpose(-4, -3).contiguous().reshape(*lead, rows, k)
    return (out, w[1]) if pair else out
