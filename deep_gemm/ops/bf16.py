"""BF16 GEMMs (DeepGEMM v2 names): dense d = a @ b^T (+ c) with BF16 or FP32 d, the MoE contiguous (per-row or
psum layout) and masked GEMMs with BF16 d, and the k-grouped weight gradient; BF16 operands, FP32 accumulation."""
import numbers
from typing import Optional, Sequence

import torch

from ..runtime import Op, call
from ..utils.layout import get_mk_alignment_for_contiguous_layout

_BF16 = int(Op.BF16)
_CONTIGUOUS = int(Op.BF16_CONTIGUOUS)
_MASKED = int(Op.BF16_MASKED)


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    """d[m, n] = a[m, k] @ b[n, k]^T (+ c), as DeepGEMM's `bf16_gemm_nt`.

    a, b bfloat16; each may be K-major (unit stride along k) or MN-major (unit stride along m / n: a transposed view),
    with its other stride a multiple of 8 elements. d bfloat16 or float32, row-major, n a multiple of 8 (BF16) or 4
    (FP32). c: None (d is overwritten), d itself (d += a @ b^T, added into d in d's type), or another tensor of d's
    dtype and shape (copied into d first, one extra copy). Accumulation is FP32 on the tensor cores; the result is
    rounded once into d (with c: the product is rounded to d's type, then added). m = 0 or n = 0 returns at once;
    k = 0 gives d = c (or zeros). `compiled_dims` is accepted for DeepGEMM compatibility: n is always a compile-time
    constant here and k never is. Runs on the current stream of the tensors' device.
    """
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims must be a str, got {type(compiled_dims).__name__}")
    accumulate = 0
    if c is not None:
        if not isinstance(c, torch.Tensor) or not isinstance(d, torch.Tensor):
            raise TypeError("c and d must be torch.Tensors")
        if c.dtype != d.dtype or c.shape != d.shape:
            raise ValueError(f"c must have d's dtype and shape ({d.dtype}, {tuple(d.shape)}), got {c.dtype}, "
                             f"{tuple(c.shape)}")
        if c.data_ptr() != d.data_ptr() or c.stride() != d.stride():
            d.copy_(c)
        accumulate = 1
    call(_BF16, a, b, d, accumulate)


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    """d = a @ b (+ c) with b given [k, n]: `bf16_gemm_nt` on b's transposed view."""
    bf16_gemm_nt(a, _t(b, "b"), d, c, compiled_dims)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    """d = a^T @ b (+ c) with a given [k, m] and b [k, n]: `bf16_gemm_nt` on both transposed views."""
    bf16_gemm_nt(_t(a, "a"), _t(b, "b"), d, c, compiled_dims)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    """d = a^T @ b^T (+ c) with a given [k, m] and b [n, k]: `bf16_gemm_nt` on a's transposed view."""
    bf16_gemm_nt(_t(a, "a"), b, d, c, compiled_dims)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: Optional[int] = None) -> None:
    """MoE GEMM over experts' rows stacked in a [M, k]: d[M, n] = a @ b[g]^T for each row of group g; b [G, n, k]
    K-major (or MN-major: unit stride along n, as `m_grouped_bf16_gemm_nn_contiguous` passes it, then k % 64 == 0);
    d BF16. grouped_layout int32: per-row group ids [M] (-1 = padding, written as zeros; each group's rows in
    segments aligned to `get_mk_alignment_for_contiguous_layout()` = 128), or with `use_psum_layout` the running row
    count [G] at the end of each group (group g's rows are [align(end[g - 1], 128), end[g]); rows outside every group
    are not written). `expected_m_for_psum_layout` (psum only) guides the tile choice. `ensure_zero_padding` has no
    effect on SM90 (as in DeepGEMM); `compiled_dims` is accepted for compatibility."""
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims must be a str, got {type(compiled_dims).__name__}")
    if not isinstance(use_psum_layout, bool):
        raise TypeError(f"use_psum_layout must be a bool, got {type(use_psum_layout).__name__}")
    if expected_m_for_psum_layout is not None and not use_psum_layout:
        raise ValueError("expected_m_for_psum_layout is only taken with use_psum_layout=True (as DeepGEMM)")
    expected = 0 if expected_m_for_psum_layout is None else expected_m_for_psum_layout
    alignment = get_mk_alignment_for_contiguous_layout() if use_psum_layout else 0
    call(_CONTIGUOUS, a, b, d, grouped_layout, int(use_psum_layout), expected, alignment)


def m_grouped_bf16_gemm_nn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True) -> None:
    """`m_grouped_bf16_gemm_nt_contiguous` with b given as [G, k, n] (its transposed view is passed)."""
    if not isinstance(b, torch.Tensor) or b.dim() != 3:
        raise ValueError(f"b must be a 3-D torch.Tensor [G, k, n], got {getattr(b, 'shape', type(b).__name__)}")
    m_grouped_bf16_gemm_nt_contiguous(a, b.transpose(1, 2), d, grouped_layout, compiled_dims, use_psum_layout,
                                      ensure_zero_padding)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, compiled_dims: str = "nk") -> None:
    """Masked MoE GEMM: d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g]^T for a [G, m_max, k], b [G, n, k] (K-major),
    d [G, m_max, n] BF16; rows >= masked_m[g] are left untouched. `expected_m` (a typical masked_m) guides the tile
    choice only; no host sync."""
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims must be a str, got {type(compiled_dims).__name__}")
    call(_MASKED, a, b, d, masked_m, expected_m)


bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked  # DeepGEMM's alias


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks_cpu: Sequence[int],
                                      grouped_layout: torch.Tensor, c: Optional[torch.Tensor] = None,
                                      compiled_dims: str = "mn", use_psum_layout: bool = False) -> None:
    """MoE weight gradients: d[g] = a_g^T @ b_g (+ c[g]) for groups stacked along k, a [sum k_g, m] and b [sum k_g, n]
    contiguous BF16, d [G, m, n] FP32 (or BF16), group g's rows of a and b at offset sum_{j<g} k_j (`ks_cpu`, a host
    list: no device sync). c: None, d itself, or another tensor of d's dtype and shape (copied first); an empty group
    gives d[g] = c[g] (or zeros). `grouped_layout` (the ks on the device, [G] int32) is checked but not read; the psum
    k layout is refused on SM90 (as DeepGEMM). m and n must be multiples of 8 (the groups' K strides).
    NOTES: one `bf16_gemm_tn` launch per non-empty group (the dense kernel with both operands MN-major and d
    accumulated), so each distinct k_g is validated and planned once; one launch for all groups is not written yet."""
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims must be a str, got {type(compiled_dims).__name__}")
    if use_psum_layout:
        raise ValueError("use_psum_layout: the psum k-grouped layout needs SM100 (as DeepGEMM); pass ks_cpu")
    for name, t, dim in (("a", a, 2), ("b", b, 2), ("d", d, 3)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != dim:
            raise ValueError(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    for name, t, dtypes in (("a", a, (torch.bfloat16,)), ("b", b, (torch.bfloat16,)),
                            ("d", d, (torch.float32, torch.bfloat16))):
        if t.dtype not in dtypes:
            raise TypeError(f"{name} must have dtype {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if not isinstance(ks_cpu, (list, tuple)) or not ks_cpu:
        raise TypeError(f"ks_cpu must be a non-empty host list of ints, got {ks_cpu!r}"[:200])
    for i, k in enumerate(ks_cpu):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise ValueError(f"ks_cpu[{i}] must be an int >= 0, got {k!r}")
    num_groups, m, n = d.shape
    if len(ks_cpu) != num_groups:
        raise ValueError(f"ks_cpu must have one entry per group of d ({num_groups}), got {len(ks_cpu)}")
    total = sum(int(k) for k in ks_cpu)
    if tuple(a.shape) != (total, m) or tuple(b.shape) != (total, n):
        raise ValueError(f"a and b must have shapes ({total}, {m}) and ({total}, {n}) (sum of ks_cpu x m / n), got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if not (a.is_contiguous() and b.is_contiguous()):
        raise ValueError("a and b must be contiguous (the groups' rows are read back to back)")
    if not isinstance(grouped_layout, torch.Tensor) or grouped_layout.dtype != torch.int32 or \
            tuple(grouped_layout.shape) != (num_groups,):
        raise ValueError(f"grouped_layout must be an int32 tensor of shape ({num_groups},)")
    if c is not None and (not isinstance(c, torch.Tensor) or c.dtype != d.dtype or c.shape != d.shape):
        raise ValueError(f"c must have d's dtype and shape ({d.dtype}, {tuple(d.shape)})")
    start = 0
    for g, k in enumerate(int(k) for k in ks_cpu):
        c_g = None if c is None else c[g]
        if k == 0:
            if c_g is None:
                d[g].zero_()
            elif c_g.data_ptr() != d[g].data_ptr():
                d[g].copy_(c_g)
        else:
            bf16_gemm_tn(a[start:start + k], b[start:start + k], d[g], c_g, compiled_dims)
        start += k


def _t(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    return t.t()
