"""Quantisation helpers with DeepGEMM v2's names and signatures (`deep_gemm.utils.math`): FP8 (e4m3) casts with
per-token (1 x gran_k), per-channel (gran_k x 1) and per-block (gran_k x gran_k) float32 scales, optionally rounded
up to powers of two (UE8M0), and the FP4 (e2m1) casts DeepGEMM's test generators import.

Scales multiply: x ~= x_fp8 * scale. A scale is amax / 448 over its group (amax clamped to >= 1e-4), rounded up to
a power of two when `use_ue8m0`. Rows / columns are zero-padded to a multiple of gran_k for the statistics only.
SM90 kernels take float32 scales; FP4 operands and packed UE8M0 scales are SM100 formats (refused by our GEMMs).

The three FP8 casts are defined by chains of torch ops (`per_token_cast_to_fp8_torch`, `per_block_cast_to_fp8_torch`,
`per_channel_cast_to_fp8_torch`: the reference, and what runs on the CPU and for the options the kernels do not take).
On an sm_90a GPU a BF16 or FP32 x with unit column stride and gran_k = 128 is cast by one kernel instead
(include/deep_gemm/sm90/fp8_cast.cuh), bitwise equal to the torch definition run on the GPU (data and scales).
"""
import numbers
from typing import Sequence, Tuple

import torch

from ..device import get_device_arch
from ..heuristics.common import align, ceil_div
from ..runtime import VARIANTS, Op, call, families_of
from ..scale_layout import ceil_to_ue8m0, get_col_major_tma_aligned_tensor, get_tma_aligned_size

__all__ = ["ceil_div", "align", "ceil_to_ue8m0", "pack_ue8m0_to_int", "unpack_ue8m0_from_int",
           "per_token_cast_to_fp8", "per_channel_cast_to_fp8", "per_block_cast_to_fp8", "per_custom_dims_cast_to_fp8",
           "per_token_cast_to_fp4", "transpose_packed_fp4", "cast_back_from_fp4"]

FP8_MAX = 448.0
FP4_MAX = 6.0
_AMAX_FLOOR = 1e-4


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """Power-of-two float32 scales [..., 4j] -> int32 [..., j]: the 8 exponent bits of four consecutive scales per
    int32, the first in the lowest byte (little-endian), as SM100 kernels read UE8M0 scales."""
    if x.dtype != torch.float32 or x.shape[-1] % 4 != 0:
        raise ValueError(f"x must be float32 with a last dimension divisible by 4, got {x.dtype} {tuple(x.shape)}")
    bits = x.contiguous().view(torch.int32)
    if bool(((bits < 0) | ((bits & 0x7FFFFF) != 0)).any()):
        raise ValueError("x must hold non-negative powers of two (UE8M0 values)")
    return (bits >> 23).to(torch.uint8).view(torch.int32)


def unpack_ue8m0_from_int(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack_ue8m0_to_int`: int32 [..., j] -> float32 [..., 4j]."""
    return (packed.contiguous().view(torch.uint8).to(torch.int32) << 23).view(torch.float32)


def _scales(amax: torch.Tensor, fmax: float, use_ue8m0: bool) -> torch.Tensor:
    scale = amax.clamp(min=_AMAX_FLOOR) / fmax
    return ceil_to_ue8m0(scale) if use_ue8m0 else scale


def _to_e4m3(q: torch.Tensor) -> torch.Tensor:
    """float32 quotients -> e4m3, rounding to nearest even and saturating: +-inf and finite overflow become +-448,
    NaN stays NaN. torch's own conversion saturates from 2.13 on but gives NaN before, hence the clamp (which keeps
    NaN): the casts give the same bytes on every torch version, and the same as the cast kernel's `cvt.satfinite`."""
    return q.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def _token_groups(x: torch.Tensor, gran_k: int, fmax: float, use_ue8m0: bool, use_packed_ue8m0: bool):
    """[m, k] -> (float32 [m, ceil(k/gran_k), gran_k] zero-padded groups, their scales [m, ceil(k/gran_k)])."""
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0 needs use_ue8m0=True")
    m, k = x.shape
    padded = torch.zeros((m, align(k, gran_k)), dtype=torch.float32, device=x.device)
    padded[:, :k] = x
    groups = padded.view(m, padded.shape[1] // gran_k, gran_k)
    return groups, _scales(groups.abs().amax(dim=2), fmax, use_ue8m0)


# ---- The FP8 casts: one kernel on sm_90a, else the torch definitions below them.

_KERNEL_GRAN = 128
_KERNEL_DTYPES = (torch.bfloat16, torch.float32)
_PER_TOKEN, _PER_BLOCK, _PER_CHANNEL = int(Op.FP8_CAST_PER_TOKEN), int(Op.FP8_CAST_PER_BLOCK), \
    int(Op.FP8_CAST_PER_CHANNEL)


def _check_cast_args(x, gran_k, **flags) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    if isinstance(gran_k, bool) or not isinstance(gran_k, numbers.Integral):
        raise TypeError(f"gran_k must be an int, got {type(gran_k).__name__}")
    if gran_k <= 0:
        raise ValueError(f"gran_k must be positive, got {gran_k}")
    for name, value in flags.items():
        if not isinstance(value, (bool, numbers.Integral)):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _kernel_takes(x: torch.Tensor, gran_k: int, op: int) -> bool:
    """Whether the cast kernel serves this call: a plain CUDA tensor of BF16 / FP32 with unit column stride, gran_k
    128, a device whose arch has the kernel, and no torch.compile trace in progress (which traces the torch ops)."""
    return (gran_k == _KERNEL_GRAN and x.is_cuda and x.dtype in _KERNEL_DTYPES and x.numel() > 0
            and (x.shape[1] == 1 or x.stride(1) == 1) and type(x) in (torch.Tensor, torch.nn.Parameter)
            and not torch.compiler.is_compiling()
            and bool(families_of(VARIANTS[op].name, get_device_arch(x.device.index))))


def _empty_scales(rows: int, cols: int, device, mn_major: bool) -> torch.Tensor:
    """float32 [rows, cols]: row-major, or MN-major with the row count padded to 16 bytes (the layout
    `get_mn_major_tma_aligned_tensor` returns)."""
    if mn_major:
        return torch.empty((cols, get_tma_aligned_size(rows, 4)), dtype=torch.float32, device=device).t()[:rows]
    return torch.empty((rows, cols), dtype=torch.float32, device=device)


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128,
                          use_packed_ue8m0: bool = False, *,
                          mn_major_sf: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """[m, k] -> (e4m3 [m, k], scales [m, ceil(k/gran_k)] float32, or int32 [m, ceil(k/gran_k)/4] packed UE8M0 with
    `use_packed_ue8m0`): one scale per 1 x gran_k group of a row.

    `mn_major_sf`: the float32 scales come MN-major with the M stride padded to 16 bytes (strides (1, align(m, 4)),
    what `get_mn_major_tma_aligned_tensor` returns), the layout the FP8 GEMMs read as A's scales: they take it without
    a conversion kernel. Same values either way (not with `use_packed_ue8m0`, an SM100 format).
    One kernel on sm_90a (see the module's docstring); asynchronous, no host synchronisation, CUDA-graph safe."""
    _check_cast_args(x, gran_k, use_ue8m0=use_ue8m0, use_packed_ue8m0=use_packed_ue8m0, mn_major_sf=mn_major_sf)
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0 needs use_ue8m0=True")
    if use_packed_ue8m0 and mn_major_sf:
        raise ValueError("mn_major_sf: packed UE8M0 scales have their own MN-major layout "
                         "(get_mn_major_tma_aligned_packed_ue8m0_tensor)")
    if not use_packed_ue8m0 and _kernel_takes(x, gran_k, _PER_TOKEN):
        m, k = x.shape
        out = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
        sf = _empty_scales(m, ceil_div(k, gran_k), x.device, bool(mn_major_sf))
        call(_PER_TOKEN, x, out, sf, int(bool(use_ue8m0)))
        return out, sf
    fp8, sf = per_token_cast_to_fp8_torch(x, use_ue8m0, gran_k, use_packed_ue8m0)
    return fp8, get_col_major_tma_aligned_tensor(sf) if mn_major_sf else sf


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False,
                            gran_k: int = 128) -> Tuple[torch.Tensor, torch.Tensor]:
    """[k, n] with k % gran_k == 0 -> (e4m3 [k, n], float32 scales [k/gran_k, n]): one scale per gran_k x 1 group of
    a column (the K-grouped weight-gradient operands' form). One kernel on sm_90a (see the module's docstring)."""
    _check_cast_args(x, gran_k, use_ue8m0=use_ue8m0)
    if x.shape[0] % gran_k != 0:
        raise ValueError(f"x must be 2-D with size(0) % {gran_k} == 0, got shape {tuple(x.shape)}")
    if _kernel_takes(x, gran_k, _PER_CHANNEL):
        k, n = x.shape
        out = torch.empty((k, n), dtype=torch.float8_e4m3fn, device=x.device)
        sf = torch.empty((k // gran_k, n), dtype=torch.float32, device=x.device)
        call(_PER_CHANNEL, x, out, sf, int(bool(use_ue8m0)))
        return out, sf
    return per_channel_cast_to_fp8_torch(x, use_ue8m0, gran_k)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False,
                          gran_k: int = 128) -> Tuple[torch.Tensor, torch.Tensor]:
    """[n, k] -> (e4m3 [n, k], float32 scales [ceil(n/gran_k), ceil(k/gran_k)]): one scale per gran_k x gran_k
    block; the scales are in the layout the FP8 GEMMs read as B's. One kernel on sm_90a (see the module's
    docstring)."""
    _check_cast_args(x, gran_k, use_ue8m0=use_ue8m0)
    if _kernel_takes(x, gran_k, _PER_BLOCK):
        n, k = x.shape
        out = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=x.device)
        sf = torch.empty((ceil_div(n, gran_k), ceil_div(k, gran_k)), dtype=torch.float32, device=x.device)
        call(_PER_BLOCK, x, out, sf, int(bool(use_ue8m0)))
        return out, sf
    return per_block_cast_to_fp8_torch(x, use_ue8m0, gran_k)


def per_token_cast_to_fp8_torch(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128,
                                use_packed_ue8m0: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The torch definition of `per_token_cast_to_fp8` (its reference and fallback)."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    groups, scale = _token_groups(x, gran_k, FP8_MAX, use_ue8m0, use_packed_ue8m0)
    m, k = x.shape
    fp8 = _to_e4m3(groups / scale.unsqueeze(2)).view(m, groups.shape[1] * gran_k)[:, :k].contiguous()
    return fp8, pack_ue8m0_to_int(scale) if use_packed_ue8m0 else scale


def per_channel_cast_to_fp8_torch(x: torch.Tensor, use_ue8m0: bool = False,
                                  gran_k: int = 128) -> Tuple[torch.Tensor, torch.Tensor]:
    """The torch definition of `per_channel_cast_to_fp8` (its reference and fallback)."""
    if x.dim() != 2 or x.shape[0] % gran_k != 0:
        raise ValueError(f"x must be 2-D with size(0) % {gran_k} == 0, got shape {tuple(x.shape)}")
    k, n = x.shape
    groups = x.float().view(k // gran_k, gran_k, n)
    scale = _scales(groups.abs().amax(dim=1), FP8_MAX, use_ue8m0)
    return _to_e4m3(groups / scale.unsqueeze(1)).view(k, n), scale


def per_block_cast_to_fp8_torch(x: torch.Tensor, use_ue8m0: bool = False,
                                gran_k: int = 128) -> Tuple[torch.Tensor, torch.Tensor]:
    """The torch definition of `per_block_cast_to_fp8` (its reference and fallback)."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    n, k = x.shape
    pn, pk = align(n, gran_k), align(k, gran_k)
    padded = torch.zeros((pn, pk), dtype=torch.float32, device=x.device)
    padded[:n, :k] = x
    blocks = padded.view(pn // gran_k, gran_k, pk // gran_k, gran_k)
    scale = _scales(blocks.abs().amax(dim=(1, 3), keepdim=True), FP8_MAX, use_ue8m0)
    fp8 = _to_e4m3(blocks / scale).view(pn, pk)[:n, :k].contiguous()
    return fp8, scale.view(pn // gran_k, pk // gran_k)


def per_custom_dims_cast_to_fp8(x: torch.Tensor, dims: Sequence[int],
                                use_ue8m0: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """One scale per index of the dimensions `dims` (the amax runs over all the others): (e4m3 like x, float32
    scales of the kept dimensions' sizes, squeezed)."""
    reduced = tuple(d for d in range(x.dim()) if d not in set(dims))
    scale = _scales(x.abs().float().amax(dim=reduced, keepdim=True), FP8_MAX, use_ue8m0)
    return _to_e4m3(x.float() / scale), scale.squeeze()


# FP4 e2m1: sign bit 3, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} as codes 0..7, two codes per byte (low nibble first).
_FP4_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _fp4_codes(x: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest e2m1 codes (int8, one per element); a value on a midpoint takes the smaller magnitude, -0
    becomes +0."""
    magnitudes = torch.tensor(_FP4_MAGNITUDES, device=x.device)
    midpoints = (magnitudes[1:] + magnitudes[:-1]) / 2
    code = torch.bucketize(x.abs(), midpoints, right=False).to(torch.uint8)
    code = code | (((x < 0) & (code != 0)).to(torch.uint8) << 3)
    return code.view(torch.int8)


def per_token_cast_to_fp4(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """[m, k] (k even) -> (packed e2m1 int8 [m, k/2], scales [m, ceil(k/gran_k)] float32, or packed UE8M0 int32 with
    `use_packed_ue8m0`, padded with 1.0 to a multiple of 4 scales). An SM100 format: our SM90 GEMMs refuse it."""
    if x.dim() != 2 or x.shape[1] % 2 != 0:
        raise ValueError(f"x must be 2-D with an even size(1), got shape {tuple(x.shape)}")
    groups, scale = _token_groups(x, gran_k, FP4_MAX, use_ue8m0, use_packed_ue8m0)
    m, k = x.shape
    codes = _fp4_codes(groups / scale.unsqueeze(2)).view(m, groups.shape[1] * gran_k // 2, 2)
    packed = (codes[..., 0] & 0x0F) | ((codes[..., 1] & 0x0F) << 4)
    packed = packed[:, :k // 2].contiguous()
    if not use_packed_ue8m0:
        return packed, scale
    extra = (-scale.shape[1]) % 4
    if extra:
        scale = torch.nn.functional.pad(scale, (0, extra), value=1.0)
    return packed, pack_ue8m0_to_int(scale)


def _unpack_fp4_codes(packed: torch.Tensor) -> torch.Tensor:
    rows, half = packed.shape
    codes = torch.empty((rows, half * 2), dtype=torch.int8, device=packed.device)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = (packed >> 4) & 0x0F
    return codes


def transpose_packed_fp4(a: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 [m, k/2] (m even) -> packed e2m1 [k, m/2] of the transposed matrix."""
    if a.dtype != torch.int8 or a.dim() != 2 or a.shape[0] % 2 != 0:
        raise ValueError(f"a must be a 2-D int8 tensor with an even size(0), got {a.dtype} {tuple(a.shape)}")
    codes = _unpack_fp4_codes(a).t().contiguous().view(a.shape[1] * 2, -1, 2)
    return ((codes[..., 0] & 0x0F) | ((codes[..., 1] & 0x0F) << 4)).contiguous()


def cast_back_from_fp4(packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128,
                       use_packed_ue8m0: bool = False) -> torch.Tensor:
    """Dequantise packed e2m1 [m, k/2] with per-token scales [m, ceil(k/gran_k)] (float32, or packed UE8M0)."""
    if use_packed_ue8m0:
        sf = unpack_ue8m0_from_int(sf)
    codes = _unpack_fp4_codes(packed)
    magnitudes = torch.tensor(_FP4_MAGNITUDES, device=packed.device)
    values = magnitudes[(codes & 0x07).long()]
    values = torch.where((codes & 0x08) != 0, -values, values)
    group = torch.arange(values.shape[1], device=packed.device) // gran_k
    return values * sf[:, group]
