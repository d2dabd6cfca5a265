"""DeepGEMM v2's FP8 GEMM names and keyword arguments (`fp8_gemm_nt`, `m_grouped_fp8_gemm_nt_contiguous`, ...), as
thin adapters over this package's ops: every call ends in the same `runtime.call` as the May-2025 names.

SM90 rules, as DeepGEMM applies them:
  - Operands are FP8 e4m3 and K-major (`a[0].stride(-1) == 1`); FP4 operands and packed UE8M0 (int32) scales are
    SM100 formats and are refused, naming the argument.
  - Scales are float32. `recipe=(gran_m, gran_n, gran_k)` or `recipe_a=(gran_m, gran_k)` + `recipe_b=(gran_n,
    gran_k)`; the default is (1, 128, 128): 1 x 128 scales for A (per token) and 128 x 128 for B (per block),
    BF16 output, no accumulation (the 1D2D kernels). `recipe=(1, 1, 128)` (1 x 128 scales on both, the weight
    gradient) needs an FP32 `d` and `c`: d = c + A B^T (the 1D1D kernels; `c` may be `d` itself, else it is copied
    into `d` first, one copy kernel).
  - A's scales may be row-major [m, k/128] (as the casts return them) or MN-major; a row-major tensor is converted
    to the MN-major TMA-aligned layout on every call (one transpose kernel, as DeepGEMM does). Pass
    `get_mn_major_tma_aligned_tensor(sf)` once to avoid it.
  - `compiled_dims` is accepted and checked ("m", "n", "k" letters) but has no effect: these kernels always compile
    n and k in and keep m a run-time value. `disable_ue8m0_cast` has no effect on SM90 (float32 scales are used as
    given, never rounded to powers of two).

On an sm_100 device (Blackwell; compile-verified, guarded by the first-use self-test, see docs/blackwell.md) the
dense GEMM and the contiguous (m_indices) and masked M-grouped GEMMs with the default recipe follow DeepGEMM's SM100
default: scales are ROUNDED UP TO POWERS OF TWO (UE8M0) and applied by the block-scaled MMA, unless
`disable_ue8m0_cast=True`, which keeps the exact float32 scales (the Hopper numerics). Packed UE8M0 int32 scales
are accepted there too. The May-2025 names always use the exact float32 scales.
"""
import numbers
import struct
from typing import List, Optional, Sequence, Tuple

import torch

from ..runtime import VARIANTS, Op, call, families_of, get_compile_mode
from ..device import get_device_arch
from ..heuristics.common import NO_CLAMP_BITS
from ..utils.layout import get_mk_alignment_for_contiguous_layout, get_mn_major_tma_aligned_tensor
from .gemm import gemm_fp8_fp8_bf16_nt
from .grouped import m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, m_grouped_gemm_fp8_fp8_bf16_nt_masked
from .wgrad import k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, wgrad_gemm_fp8_fp8_fp32_nt

__all__ = ["fp8_fp4_gemm_nt", "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt", "fp8_gemm_nt_fp8_out",
           "m_grouped_fp8_gemm_nt_contiguous_fp8_out", "m_grouped_fp8_gemm_nt_masked_fp8_out",
           "m_grouped_fp8_gemm_nt_contiguous_swiglu", "m_grouped_fp8_gemm_nt_masked_swiglu",
           "fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt",
           "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous",
           "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous",
           "m_grouped_fp8_fp4_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked",
           "k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
           "cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt"]

_PSUM = int(Op.PSUM)
_DENSE_FP8_OUT, _CONTIGUOUS_FP8_OUT, _MASKED_FP8_OUT = (int(Op.DENSE_FP8_OUT), int(Op.CONTIGUOUS_FP8_OUT),
                                                       int(Op.MASKED_FP8_OUT))
_CONTIGUOUS_SWIGLU, _MASKED_SWIGLU = int(Op.CONTIGUOUS_SWIGLU), int(Op.MASKED_SWIGLU)
# The variant of a v2 call on sm_100, by scale path (`scale_path`): the exact FP32 scales run the May-2025 names'
# variants, UE8M0 its own.
_DENSE = {"fp32": int(Op.DENSE), "ue8m0": int(Op.DENSE_UE8M0)}
_CONTIGUOUS = {"fp32": int(Op.CONTIGUOUS), "ue8m0": int(Op.CONTIGUOUS_UE8M0)}
_MASKED = {"fp32": int(Op.MASKED), "ue8m0": int(Op.MASKED_UE8M0)}
_TOKEN, _BLOCK = (1, 128), (128, 128)


def scale_path(arch: str, disable_ue8m0_cast: bool) -> Optional[str]:
    """The scale path of a v2 call on a device of `arch` where the registry has UE8M0 variants (sm_100): "ue8m0"
    (DeepGEMM's SM100 default: scales rounded up to powers of two) unless `disable_ue8m0_cast`, then "fp32"; None
    elsewhere (the sm90 rules: exact FP32 scales, or a clear refusal)."""
    if not families_of(VARIANTS[_DENSE["ue8m0"]].name, arch):
        return None
    return "fp32" if disable_ue8m0_cast else "ue8m0"


def _sm100_scales(a, disable_ue8m0_cast: bool) -> Optional[str]:
    """`scale_path` for the device of a call's A (None for anything that is not a CUDA tensor pair)."""
    data = a[0] if isinstance(a, (tuple, list)) and len(a) == 2 else None
    if not isinstance(data, torch.Tensor) or not data.is_cuda:
        return None
    return scale_path(get_device_arch(data.device.index), disable_ue8m0_cast)


def _pair(value, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a (tensor, scales) pair, got {type(value).__name__}")
    data, sf = value
    for what, t in (("", data), (" scales", sf)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}{what} must be a torch.Tensor, got {type(t).__name__}")
    if data.dtype != torch.float8_e4m3fn:
        hint = " (packed FP4 is an SM100 format)" if data.dtype in (torch.int8, torch.uint8) else ""
        raise TypeError(f"{name}[0] must be float8_e4m3fn on SM90, got {data.dtype}{hint}")
    if sf.dtype != torch.float32:
        hint = " (packed UE8M0 scales are an SM100 format)" if sf.dtype == torch.int32 else ""
        raise TypeError(f"{name}[1] (scales) must be float32 on SM90, got {sf.dtype}{hint}")
    if data.dim() >= 2 and data.shape[-1] > 1 and data.stride(-1) != 1:
        raise ValueError(f"{name}[0] must be K-major (stride(-1) == 1) on SM90, got strides {data.stride()}; "
                         f"MN-major FP8 operands need SM100")
    return data, sf


def _check_compiled_dims(compiled_dims) -> None:
    if not isinstance(compiled_dims, str) or not set(compiled_dims) <= set("mnk"):
        raise ValueError(f"compiled_dims must be a string of the letters m, n, k, got {compiled_dims!r}")


def _check_flag(value, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _granularities(recipe, recipe_a, recipe_b) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """((gran_m, gran_k) of A, (gran_n, gran_k) of B) from DeepGEMM's recipe arguments."""
    def ints(r, n, name):
        if not isinstance(r, (tuple, list)) or len(r) != n or \
                not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in r):
            raise TypeError(f"{name} must be a tuple of {n} ints, got {r!r}")
        return tuple(int(x) for x in r)
    if (recipe_a is None) != (recipe_b is None):
        raise ValueError("recipe_a and recipe_b must be given together")
    if recipe is not None and recipe_a is not None:
        raise ValueError("give either recipe or recipe_a + recipe_b, not both")
    if recipe_a is not None:
        return ints(recipe_a, 2, "recipe_a"), ints(recipe_b, 2, "recipe_b")
    gm, gn, gk = ints(recipe, 3, "recipe") if recipe is not None else (1, 128, 128)
    return (gm, gk), (gn, gk)


def _a_scales_mn_major(sf: torch.Tensor) -> torch.Tensor:
    """1 x 128 scales [mn, kb] as the MN-major TMA-aligned tensor the 1D1D kernels read (no copy when they already
    are); the kernels take its transpose [kb, mn] (unit inner stride), which is never ambiguous, even if mn == kb."""
    return get_mn_major_tma_aligned_tensor(sf) if sf.dim() == 2 else sf


def _prepare_accumulator(d: torch.Tensor, c: Optional[torch.Tensor]) -> None:
    """DeepGEMM's d = c + A B^T with kernels that add into d: copy c into d first unless c is d."""
    if not isinstance(d, torch.Tensor) or not isinstance(c, torch.Tensor):
        raise TypeError(f"d and c must be torch.Tensors, got {type(d).__name__} and {type(c).__name__}")
    if c.data_ptr() == d.data_ptr() and c.device == d.device:
        if c.shape != d.shape or c.stride() != d.stride() or c.dtype != d.dtype:
            raise ValueError("c aliases d with another shape, strides or dtype")
        return
    if c.shape != d.shape or c.dtype != d.dtype:
        raise ValueError(f"c must match d: shape {tuple(d.shape)} {d.dtype}, got {tuple(c.shape)} {c.dtype}")
    if not get_compile_mode():  # compile mode writes nothing
        d.copy_(c)


def fp8_fp4_gemm_nt(a, b, d: torch.Tensor, c: Optional[torch.Tensor] = None, recipe=None, recipe_a=None,
                    recipe_b=None, compiled_dims: str = "nk", disable_ue8m0_cast: bool = False) -> None:
    """d = a @ b^T (+ c), DeepGEMM v2's dense FP8 GEMM: a = (A [m, k], SFA), b = (B [n, k], SFB), both K-major.

    Default recipe (1, 128, 128): SFA [m, ceil(k/128)] (row-major or MN-major), SFB [ceil(n/128), ceil(k/128)], d
    BF16, c must be None (SM90 has no BF16 accumulation). recipe (1, 1, 128): SFB [n, ceil(k/128)], d FP32 and c
    required (c = d accumulates in place). See the module docstring for the other arguments.

    A (D, SFD) pair as d (FP8 output, sm_90a, default recipe, no c) is `fp8_gemm_nt_fp8_out(a, b, d)`."""
    _check_compiled_dims(compiled_dims)
    _check_flag(disable_ue8m0_cast, "disable_ue8m0_cast")
    gran_a, gran_b = _granularities(recipe, recipe_a, recipe_b)
    if isinstance(d, (tuple, list)):
        if (gran_a, gran_b) != (_TOKEN, _BLOCK):
            raise ValueError(f"recipe: an FP8 d takes the default recipe (1, 128, 128), got {gran_a} and {gran_b}")
        if c is not None:
            raise ValueError("c: accumulation is not supported with an FP8 d")
        fp8_gemm_nt_fp8_out(a, b, d)
        return
    scales = _sm100_scales(a, disable_ue8m0_cast)
    if scales is not None and (gran_a, gran_b) == (_TOKEN, _BLOCK) and c is None:
        call(_DENSE[scales], tuple(a), tuple(b), d)
        return
    a, sfa = _pair(a, "a")
    b, sfb = _pair(b, "b")
    if gran_a != _TOKEN:
        raise ValueError(f"recipe: A's scale granularity must be (1, 128) on SM90, got {gran_a}")
    if gran_b == _BLOCK:
        if c is not None:
            raise ValueError("c: accumulation is not supported with 128x128 B scales on SM90 (DeepGEMM's 1D2D "
                             "kernel has no C); use recipe=(1, 1, 128) with an FP32 d")
        if isinstance(d, torch.Tensor) and d.dtype != torch.bfloat16:
            raise TypeError(f"d must be bfloat16 with 128x128 B scales on SM90, got {d.dtype}")
        gemm_fp8_fp8_bf16_nt((a, sfa), (b, sfb), d)
    elif gran_b == _TOKEN:
        if isinstance(d, torch.Tensor) and d.dtype != torch.float32:
            raise TypeError(f"d must be float32 with recipe (1, 1, 128) on SM90 (the 1D1D kernel), got {d.dtype}")
        if c is None:
            raise ValueError("c is required with recipe (1, 1, 128) on SM90: d = c + A B^T (pass c=d to accumulate "
                             "in place)")
        _prepare_accumulator(d, c)
        wgrad_gemm_fp8_fp8_fp32_nt((a, _a_scales_mn_major(sfa).mT), (b, _a_scales_mn_major(sfb).mT), d)
    else:
        raise ValueError(f"recipe: B's scale granularity must be (128, 128) or (1, 128) on SM90, got {gran_b}")


def fp8_gemm_nt_fp8_out(a, b, d) -> None:
    """d = a @ b^T quantised to e4m3 in the GEMM's epilogue (sm_90a; not a DeepGEMM v2.6.1 name): a = (A [m, k],
    SFA), b = (B [n, k], SFB) as `fp8_gemm_nt`'s default recipe; d = (D [m, n] float8_e4m3fn with n % 16 == 0, SFD
    [m, ceil(n/128)] float32 MN-major: stride(0) == 1, as `per_token_cast_to_fp8(x, mn_major_sf=True)` returns it);
    k > 0. Each row's 128-column groups are quantised as `per_token_cast_to_fp8` quantises its input: scale =
    max(amax, 1e-4) / 448 (the same float32 operations), each value x * (1 / scale) rounded to e4m3 (within one e4m3
    step of x / scale), +-448 saturate. (D, SFD) is the next FP8 GEMM's `a` as it is: no cast, no layout conversion.
    Asynchronous, CUDA-graph safe; SFD's padding rows (m up to its stride) are not written."""
    call(_DENSE_FP8_OUT, tuple(a) if isinstance(a, list) else a, tuple(b) if isinstance(b, list) else b,
         tuple(d) if isinstance(d, list) else d)


def m_grouped_fp8_gemm_nt_contiguous_fp8_out(a, b, d, m_indices: torch.Tensor) -> None:
    """The contiguous MoE GEMM (as `m_grouped_fp8_gemm_nt_contiguous` with m_indices [M] int32, -1 for padding rows)
    quantising its output in the epilogue as `fp8_gemm_nt_fp8_out` does (sm_90a; not a DeepGEMM v2.6.1 name): d = (D
    [M, n] float8_e4m3fn with n % 16 == 0, SFD [M, ceil(n/128)] float32 MN-major), k > 0; padding rows get zeros and
    the floor scale 1e-4 / 448. (D, SFD) is the next contiguous GEMM's `a` as it is."""
    call(_CONTIGUOUS_FP8_OUT, tuple(a) if isinstance(a, list) else a, tuple(b) if isinstance(b, list) else b,
         tuple(d) if isinstance(d, list) else d, m_indices)


def m_grouped_fp8_gemm_nt_masked_fp8_out(a, b, d, masked_m: torch.Tensor, expected_m: int) -> None:
    """The masked MoE GEMM (as `m_grouped_fp8_gemm_nt_masked`: a = (A [G, m_max, k], SFA), b = (B [G, n, k], SFB),
    masked_m [G] int32 on the device, expected_m a hint) quantising its output in the epilogue as
    `fp8_gemm_nt_fp8_out` does (sm_90a; not a DeepGEMM v2.6.1 name): d = (D [G, m_max, n] float8_e4m3fn with
    n % 16 == 0, SFD [G, m_max, ceil(n/128)] float32 in the layout `get_mn_major_tma_aligned_tensor` returns), k > 0.
    (D, SFD) is the next masked GEMM's `a` as it is (the MoE down projection after the gate/up one). Rows >=
    masked_m[g] of D and SFD stay untouched. Asynchronous, no host synchronisation, CUDA-graph safe."""
    call(_MASKED_FP8_OUT, tuple(a) if isinstance(a, list) else a, tuple(b) if isinstance(b, list) else b,
         tuple(d) if isinstance(d, list) else d, masked_m, expected_m)


def _clamp_bits(activation_clamp) -> int:
    """activation_clamp (None: no clamp) as the float32 bits the SwiGLU kernels are compiled with."""
    if activation_clamp is None:
        return NO_CLAMP_BITS
    if isinstance(activation_clamp, bool) or not isinstance(activation_clamp, numbers.Real):
        raise TypeError(f"activation_clamp must be a float or None, got {type(activation_clamp).__name__}")
    try:  # the kernel's value is the float32 one: checked after the conversion (1e-46 would be 0)
        bits = struct.unpack("<I", struct.pack("<f", float(activation_clamp)))[0]
    except OverflowError:
        raise ValueError(f"activation_clamp must be a float32 value, got {activation_clamp}") from None
    if not struct.unpack("<f", struct.pack("<I", bits))[0] > 0:
        raise ValueError(f"activation_clamp must be > 0 as a float32 (or None), got {activation_clamp}")
    return bits


def m_grouped_fp8_gemm_nt_contiguous_swiglu(a, b, d, m_indices: torch.Tensor,
                                            activation_clamp: Optional[float] = None) -> None:
    """The MoE gate/up projection with SwiGLU and FP8 output in one contiguous GEMM (sm_90a; not a DeepGEMM v2.6.1
    name): b = (B [G, 2I, k], SFB [G, 2I/128, ceil(k/128)]) with B's rows interleaved by
    `deep_gemm.utils.interleave_swiglu_weights` (SFB as it was), I a multiple of 128; a and m_indices as
    `m_grouped_fp8_gemm_nt_contiguous`'s; d = (D [M, I] float8_e4m3fn, SFD [M, I/128] float32 MN-major).
    D = the 1 x 128 quantisation (as `fp8_gemm_nt_fp8_out`'s) of SiLU(gate) * up, computed in FP32 from the GEMM's
    accumulators, gate = min(gate, c) and up clamped to [-c, c] with c = activation_clamp (None: no clamp). (D, SFD)
    is the down projection's `a` as it is. Padding rows get zeros and the floor scale. Asynchronous, CUDA-graph safe."""
    call(_CONTIGUOUS_SWIGLU, tuple(a) if isinstance(a, list) else a, tuple(b) if isinstance(b, list) else b,
         tuple(d) if isinstance(d, list) else d, m_indices, _clamp_bits(activation_clamp))


def m_grouped_fp8_gemm_nt_masked_swiglu(a, b, d, masked_m: torch.Tensor, expected_m: int,
                                        activation_clamp: Optional[float] = None) -> None:
    """The masked MoE gate/up projection with SwiGLU and FP8 output (sm_90a; not a DeepGEMM v2.6.1 name): as
    `m_grouped_fp8_gemm_nt_contiguous_swiglu`, with a, masked_m and expected_m as `m_grouped_fp8_gemm_nt_masked`'s
    and d = (D [G, m_max, I] float8_e4m3fn, SFD [G, m_max, I/128] float32 in the layout
    `get_mn_major_tma_aligned_tensor` returns: the masked down projection's `a` as it is). Rows >= masked_m[g] of D
    and SFD stay untouched. Asynchronous, no host synchronisation, CUDA-graph safe."""
    call(_MASKED_SWIGLU, tuple(a) if isinstance(a, list) else a, tuple(b) if isinstance(b, list) else b,
         tuple(d) if isinstance(d, list) else d, masked_m, expected_m, _clamp_bits(activation_clamp))


def _t(pair) -> tuple:
    """(x, sf) with both transposed: the other-major view of an operand (DeepGEMM's nn / tn / tt aliases)."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"an operand must be a (tensor, scales) pair, got {type(pair).__name__}")
    return tuple(x.transpose(-1, -2) if isinstance(x, torch.Tensor) else x for x in pair)


def fp8_fp4_gemm_nn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                    disable_ue8m0_cast: bool = False) -> None:
    """d = a @ b (+ c) with b given as [k, n]: `fp8_fp4_gemm_nt(a, b^T, ...)` (SM90 needs b^T K-major)."""
    fp8_fp4_gemm_nt(a, _t(b), d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)


def fp8_fp4_gemm_tn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims: str = "mn",
                    disable_ue8m0_cast: bool = False) -> None:
    """d = a^T @ b (+ c) with a [k, m], b [k, n]: `fp8_fp4_gemm_nt(a^T, b^T, ...)`."""
    fp8_fp4_gemm_nt(_t(a), _t(b), d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)


def fp8_fp4_gemm_tt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims: str = "mn",
                    disable_ue8m0_cast: bool = False) -> None:
    """d = a^T @ b^T (+ c) with a [k, m]: `fp8_fp4_gemm_nt(a^T, b, ...)`."""
    fp8_fp4_gemm_nt(_t(a), b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)


def _check_grouped_recipe(recipe, recipe_a, recipe_b) -> None:
    gran_a, gran_b = _granularities(recipe, recipe_a, recipe_b)
    if (gran_a, gran_b) != (_TOKEN, _BLOCK):
        raise ValueError(f"recipe: M-grouped GEMMs on SM90 take (1, 128) A scales and (128, 128) B scales, got "
                         f"A {gran_a}, B {gran_b}")


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d: torch.Tensor, grouped_layout: torch.Tensor, recipe=None,
                                         recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                                         disable_ue8m0_cast: bool = False, use_psum_layout: bool = False,
                                         ensure_zero_padding: bool = True,
                                         expected_m_for_psum_layout: Optional[int] = None) -> None:
    """MoE GEMM over experts' rows stacked along M: a = (A [M, k], SFA [M, ceil(k/128)]), b = (B [G, n, k], SFB
    [G, ceil(n/128), ceil(k/128)]), d [M, n] BF16.

    use_psum_layout=False: grouped_layout = m_indices [M] int32, each row's expert or -1 (padding, written as
    zeros); experts' segments start at multiples of `get_mk_alignment_for_contiguous_layout()`.
    use_psum_layout=True: grouped_layout [G] int32 = the running row count at the end of each expert; expert g's
    rows are [align(grouped_layout[g-1], alignment), grouped_layout[g]); rows outside every expert are not
    written. `expected_m_for_psum_layout` (rows per expert) only guides the configuration.
    `ensure_zero_padding` is accepted for DeepGEMM's signature and has no effect on SM90 (as in DeepGEMM)."""
    _check_compiled_dims(compiled_dims)
    for name, flag in (("disable_ue8m0_cast", disable_ue8m0_cast), ("use_psum_layout", use_psum_layout),
                       ("ensure_zero_padding", ensure_zero_padding)):
        _check_flag(flag, name)
    _check_grouped_recipe(recipe, recipe_a, recipe_b)
    scales = _sm100_scales(a, disable_ue8m0_cast)
    if scales is not None and not use_psum_layout and expected_m_for_psum_layout is None:
        call(_CONTIGUOUS[scales], tuple(a), tuple(b), d, grouped_layout)
        return
    a = _pair(a, "a")
    b = _pair(b, "b")
    if not use_psum_layout:
        if expected_m_for_psum_layout is not None:
            raise ValueError("expected_m_for_psum_layout is only for use_psum_layout=True")
        m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, b, d, grouped_layout)
        return
    expected = 0 if expected_m_for_psum_layout is None else expected_m_for_psum_layout
    call(_PSUM, a, b, d, grouped_layout, expected, get_mk_alignment_for_contiguous_layout())


def m_grouped_fp8_fp4_gemm_nn_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                                         use_psum_layout: bool = False, ensure_zero_padding: bool = True) -> None:
    """As `m_grouped_fp8_fp4_gemm_nt_contiguous` with B given as [G, k, n] (SM90 needs its transpose K-major)."""
    m_grouped_fp8_fp4_gemm_nt_contiguous(a, _t(b), d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims,
                                         disable_ue8m0_cast, use_psum_layout, ensure_zero_padding)


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int, recipe=None,
                                     recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                                     disable_ue8m0_cast: bool = False) -> None:
    """MoE GEMM with a fixed [G, m_max] row layout: d[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g]^T; a = (A [G,
    m_max, k], SFA [G, m_max, ceil(k/128)]), b = (B [G, n, k], SFB [G, ceil(n/128), ceil(k/128)]), d [G, m_max, n]
    BF16; rows past masked_m[g] are not written. expected_m only guides the configuration."""
    _check_compiled_dims(compiled_dims)
    _check_flag(disable_ue8m0_cast, "disable_ue8m0_cast")
    _check_grouped_recipe(recipe, recipe_a, recipe_b)
    scales = _sm100_scales(a, disable_ue8m0_cast)
    if scales is not None:
        call(_MASKED[scales], tuple(a), tuple(b), d, masked_m, expected_m)
        return
    m_grouped_gemm_fp8_fp8_bf16_nt_masked(_pair(a, "a"), _pair(b, "b"), d, masked_m, expected_m)


def k_grouped_fp8_gemm_nt_contiguous(a, b, d: torch.Tensor, ks_cpu: Optional[Sequence[int]],
                                     grouped_layout: torch.Tensor, c: Optional[torch.Tensor] = None,
                                     recipe=(1, 1, 128), compiled_dims: str = "mn",
                                     use_psum_layout: bool = False) -> None:
    """d[g] = c[g] + A_g @ B_g^T for the K-grouped weight gradient (DeepGEMM's SM90 layout): a = (A holding group
    g's [m, k_g] row-major matrices back to back, SFA [m, sum_g k_g/128]), b likewise with n, d and c [G, m, n]
    FP32 contiguous (c may be d), ks_cpu the k_g as host ints (grouped_layout: the same on the device). One
    launch for up to 96 groups."""
    _check_compiled_dims(compiled_dims)
    _check_flag(use_psum_layout, "use_psum_layout")
    if tuple(recipe) != (1, 1, 128):
        raise ValueError(f"recipe must be (1, 1, 128) for the K-grouped GEMM, got {recipe!r}")
    if use_psum_layout:
        raise ValueError("use_psum_layout: the psum K-grouped layout needs SM100 (as in DeepGEMM)")
    if ks_cpu is None or isinstance(ks_cpu, (str, bytes)) or not hasattr(ks_cpu, "__len__") or len(ks_cpu) == 0:
        raise ValueError(f"ks_cpu must be a non-empty list of the group sizes on SM90, got {ks_cpu!r}")
    if not isinstance(grouped_layout, torch.Tensor) or grouped_layout.dtype != torch.int32 or \
            tuple(grouped_layout.shape) != (len(ks_cpu),):
        raise ValueError(f"grouped_layout must be an int32 tensor of shape ({len(ks_cpu)},) (the group sizes)")
    if c is None:
        raise ValueError("c is required: d = c + A B^T (pass c=d to accumulate in place)")
    a_data, sfa = _pair(a, "a")
    b_data, sfb = _pair(b, "b")
    if sfa.dim() != 2 or sfb.dim() != 2:
        raise ValueError(f"a and b scales must be 2-D [mn, sum_g k_g/128], got {tuple(sfa.shape)}, "
                         f"{tuple(sfb.shape)}")
    if not isinstance(d, torch.Tensor) or d.dim() != 3:
        raise ValueError(f"d must be a 3-D tensor [G, m, n], got {getattr(d, 'shape', type(d).__name__)}")
    _prepare_accumulator(d, c)
    k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a_data, _a_scales_mn_major(sfa).mT), (b_data, _a_scales_mn_major(sfb).mT),
                                         d, list(ks_cpu))


def k_grouped_fp8_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128),
                                     compiled_dims: str = "mn", use_psum_layout: bool = False) -> None:
    """DeepGEMM's MN-major K-grouped GEMM: an SM100 kernel (SM90 FP8 operands must be K-major). Refused here; use
    `k_grouped_fp8_gemm_nt_contiguous` with K-major groups on SM90."""
    raise ValueError("k_grouped_fp8_gemm_tn_contiguous needs SM100 (MN-major FP8 operands); on SM90 use "
                     "k_grouped_fp8_gemm_nt_contiguous")


def cublaslt_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None) -> None:
    """d = a @ b^T (+ c) by cuBLASLt without scales (DeepGEMM's comparison baseline): FP8 operands through
    `torch._scaled_mm` with unit scales, BF16 ones through `torch.matmul`; d BF16 or FP32. Not a fast path: the
    result is computed into a temporary and copied (one extra kernel, two with c)."""
    for name, t in (("a", a), ("b", b), ("d", d)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise TypeError(f"{name} must be a 2-D torch.Tensor")
    if a.shape[1] != b.shape[1] or tuple(d.shape) != (a.shape[0], b.shape[0]):
        raise ValueError(f"shapes must be a [m, k], b [n, k], d [m, n], got {tuple(a.shape)}, {tuple(b.shape)}, "
                         f"{tuple(d.shape)}")
    if a.shape[0] == 0 or b.shape[0] == 0:
        return
    if a.dtype == torch.float8_e4m3fn:
        one = torch.ones((), dtype=torch.float32, device=a.device)
        result = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=d.dtype)
    elif d.dtype == torch.float32:
        # FP32 accumulation written as FP32 (a BF16 result converted to FP32 would carry BF16's rounding).
        result = torch.mm(a, b.t(), out_dtype=torch.float32)
    else:
        result = torch.matmul(a, b.t()).to(d.dtype)
    if c is not None:
        result = result + c
    d.copy_(result)


def cublaslt_gemm_nn(a, b, d, c=None) -> None:
    """d = a @ b (+ c), b given [k, n]: `cublaslt_gemm_nt` on b's transposed view."""
    cublaslt_gemm_nt(a, b.t(), d, c)


def cublaslt_gemm_tn(a, b, d, c=None) -> None:
    """d = a^T @ b (+ c), a given [k, m] and b [k, n]: `cublaslt_gemm_nt` on both transposed views."""
    cublaslt_gemm_nt(a.t(), b.t(), d, c)


def cublaslt_gemm_tt(a, b, d, c=None) -> None:
    """d = a^T @ b^T (+ c), a given [k, m] and b [n, k]: `cublaslt_gemm_nt` on a's transposed view."""
    cublaslt_gemm_nt(a.t(), b, d, c)


# DeepGEMM v2 aliases.
fp8_gemm_nt, fp8_gemm_nn, fp8_gemm_tn, fp8_gemm_tt = fp8_fp4_gemm_nt, fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_gemm_nn_contiguous = m_grouped_fp8_fp4_gemm_nn_contiguous
m_grouped_fp8_gemm_nt_masked = fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
