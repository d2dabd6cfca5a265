"""DeepGEMM's `einsum` and `fp8_einsum`: the three BF16 expressions of MLA and its backward pass, and the FP8 form of
the absorbed query product, on the BF16 kernel family's batched forms (and the FP8 BMM for `fp8_einsum`).

- `bhr,hdr->bhd` / `bhd,hdr->bhr`: one GEMM per head h, in one launch, reading each head's columns of the [b, h, *]
  operand in place and writing d[:, h] in place (no transposed copies).
- `bmk,bnk->mn`: d = sum over s of a[s] @ b[s]^T, a long K walk over every (s, K block). Short walks run in one
  launch whose clusters cut the walk and add their parts in rank order into d; long ones are split evenly over the
  SMs, each split writing an FP32 partial sum, and the splits are added in a fixed order. Either way results are
  bitwise reproducible (DeepGEMM adds its splits with atomics, whose order varies from run to run).
"""
from typing import Optional, Tuple

import torch

from ..families import checks
from ..heuristics.common import get_forced_config
from ..utils.math import ceil_div
from ..runtime import Op, call, k_split_count
from .bmm import bmm_fp8_fp8_bf16_nt

__all__ = ["einsum", "fp8_einsum"]

_EINSUM = int(Op.EINSUM)
EXPRESSIONS = ("bmk,bnk->mn", "bhr,hdr->bhd", "bhd,hdr->bhr")
FP8_EXPRESSIONS = ("bhr,hdr->bhd",)


def einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
           use_cublaslt: bool = False) -> None:
    """d = einsum(expr, a, b) (+ c) for DeepGEMM's three expressions, BF16 operands, FP32 accumulation.

    - "bmk,bnk->mn": a [s, m, k], b [s, n, k] (K-major, batches stacked uniformly, e.g. contiguous); d [m, n] FP32
      or BF16. c: None (d is overwritten), d itself (d += the sum, in FP32 for an FP32 d; DeepGEMM's way of calling
      it) or another tensor of d's dtype and shape. Deterministic: the K splits' FP32 partial sums are added in a
      fixed order (DeepGEMM's kernel adds them with atomics, which is not bitwise reproducible).
    - "bhr,hdr->bhd": a [b, h, r] with each row's heads side by side (stride(1) == r, stride(2) == 1), b [h, d, r]
      with unit stride along r (a slice of a wider tensor is fine), d [b, h, d] BF16 with unit stride along d.
    - "bhd,hdr->bhr": a [b, h, d] (heads side by side), b [h, d, r] with unit stride along r, d [b, h, r] BF16.
    The per-head forms need their contracted dimension (r, resp. d) to be a multiple of 64 and take no c.
    `use_cublaslt=True` computes the same with PyTorch's cuBLAS GEMMs instead (a reference path).
    Runs on the current stream without a host synchronisation.
    """
    if not isinstance(expr, str):
        raise TypeError(f"expr must be a str, got {type(expr).__name__}")
    expr = expr.replace(" ", "")
    if expr not in EXPRESSIONS:
        raise ValueError(f"expr must be one of {', '.join(map(repr, EXPRESSIONS))}, got {expr!r}")
    if not isinstance(use_cublaslt, bool):
        raise TypeError(f"use_cublaslt must be a bool, got {type(use_cublaslt).__name__}")
    checks.check_tensor(a, "a", torch.bfloat16, 3)
    checks.check_tensor(b, "b", torch.bfloat16, 3)
    if expr == "bmk,bnk->mn":
        _sum_over_batches(a, b, d, c, use_cublaslt)
        return
    if c is not None:
        raise ValueError(f"c: {expr!r} takes no accumulator (as DeepGEMM)")
    if use_cublaslt:
        checks.check_tensor(d, "d", torch.bfloat16, 3)
        d.copy_(torch.einsum(expr, a, b))
    elif expr == "bhr,hdr->bhd":
        call(_EINSUM, a, b, d, 0)
    else:
        # d[:, h] = a[:, h] @ b[h]: b[h] is [K = d, N = r], i.e. the per-head B [r, d] given MN-major.
        call(_EINSUM, a, b.transpose(1, 2), d, 0)


def _sum_over_batches(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor],
                      use_cublaslt: bool) -> None:
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"d must be a torch.Tensor, got {type(d).__name__}")
    if d.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"d must have dtype torch.float32 or torch.bfloat16, got {d.dtype}")
    batches, m, k = a.shape
    n = b.shape[1]
    checks.check_shape(d, "d", (m, n), "m x n")
    if c is not None and (not isinstance(c, torch.Tensor) or c.dtype != d.dtype or c.shape != d.shape):
        raise ValueError(f"c must be None or a tensor of d's dtype and shape ({d.dtype}, {tuple(d.shape)})")
    checks.check_same_cuda_device([("a", a), ("b", b), ("d", d)])
    forced = get_forced_config()
    # The sum in one kernel, its clusters cutting the walk over (s, K block), writes an FP32 row-major d itself
    # (accumulating when c is d); it runs where the heuristic says so (k_split_count 0) or under a forced cluster
    # configuration.
    clusters_fit = d.dtype == torch.float32 and (c is None or (c.data_ptr() == d.data_ptr() and
                                                               c.stride() == d.stride())) and \
        d.stride(-1) == 1 and (m == 1 or d.stride(0) % 4 == 0)
    use_clusters = clusters_fit and (forced is None or forced.cluster_k_splits > 1)
    splits = 1 if use_cublaslt else k_split_count(m, n, batches, k, a.device.index, use_clusters)
    if not use_cublaslt and use_clusters and (splits == 0 or forced is not None):
        call(_EINSUM, a, b, d.unsqueeze(0), 3 if c is not None else 2)
        return
    if use_cublaslt:
        total = torch.einsum("bmk,bnk->mn", a.float(), b.float())
    else:
        partial = torch.empty((splits, m, n), dtype=torch.float32, device=a.device)
        call(_EINSUM, a, b, partial, 1)
        total = partial[0] if splits == 1 else partial.sum(0)
    if c is None:
        d.copy_(total)
    elif c.data_ptr() == d.data_ptr() and c.stride() == d.stride():
        d.add_(total)
    else:
        torch.add(c, total, out=d)


def fp8_einsum(expr: str, a: Tuple[torch.Tensor, torch.Tensor], b: Tuple[torch.Tensor, torch.Tensor],
               d: torch.Tensor, c: Optional[torch.Tensor] = None, recipe: Tuple[int, int, int] = (1, 128, 128)) -> None:
    """d[b, h, :] = (a[b, h] * sa[b, h]) @ (b[h] * sb[h])^T, DeepGEMM's FP8 "bhr,hdr->bhd" on SM90.

    a = (x [b, h, r] float8_e4m3fn, sa [b, h, ceil(r / 128)] float32: per-token 1x128 scales), b = (y [h, d, r]
    float8_e4m3fn, sb [h, ceil(d / 128), ceil(r / 128)] float32: 128x128 block scales), d [b, h, d] BF16. The other
    expressions, c and recipes other than (1, 128, 128) are SM100-only in DeepGEMM and refused here.
    NOTES: runs the FP8 BMM over the heads; x and d are copied to and from head-major order around it.
    """
    if not isinstance(expr, str):
        raise TypeError(f"expr must be a str, got {type(expr).__name__}")
    expr = expr.replace(" ", "")
    if expr not in FP8_EXPRESSIONS:
        raise ValueError(f"expr: fp8_einsum on SM90 takes only {FP8_EXPRESSIONS[0]!r}, got {expr!r}")
    if c is not None:
        raise ValueError("c: fp8_einsum on SM90 takes no accumulator (as DeepGEMM)")
    if tuple(recipe) != (1, 128, 128):
        raise ValueError(f"recipe must be (1, 128, 128) on SM90, got {tuple(recipe)!r}")
    x, sx = checks.unpack_pair(a, "a")
    y, sy = checks.unpack_pair(b, "b")
    checks.check_tensor(x, "a[0]", torch.float8_e4m3fn, 3)
    checks.check_tensor(sx, "a[1]", torch.float32, 3)
    checks.check_tensor(y, "b[0]", torch.float8_e4m3fn, 3)
    checks.check_tensor(sy, "b[1]", torch.float32, 3)
    checks.check_tensor(d, "d", torch.bfloat16, 3)
    # The checks in this call's names and shapes; the BMM below sees transposed views under its own names.
    num_tokens, heads, r = x.shape
    if y.shape[0] != heads or y.shape[2] != r:
        raise ValueError(f"b[0] must have shape ({heads}, d, {r}) to match a[0]'s heads and r, got {tuple(y.shape)}")
    out_cols = y.shape[1]
    checks.check_shape(sx, "a[1]", (num_tokens, heads, ceil_div(r, 128)), "b x h x ceil(r/128)")
    checks.check_shape(sy, "b[1]", (heads, ceil_div(out_cols, 128), ceil_div(r, 128)),
                       "h x ceil(d/128) x ceil(r/128)")
    checks.check_shape(d, "d", (num_tokens, heads, out_cols), "b x h x d")
    checks.check_same_cuda_device([("a[0]", x), ("a[1]", sx), ("b[0]", y), ("b[1]", sy), ("d", d)])
    out = torch.empty((d.shape[1], d.shape[0], d.shape[2]), dtype=torch.bfloat16, device=d.device)
    bmm_fp8_fp8_bf16_nt((x.transpose(0, 1).contiguous(), sx.transpose(0, 1)), (y, sy), out)
    d.copy_(out.transpose(0, 1))
