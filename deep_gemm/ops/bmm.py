"""Batched FP8 GEMM (BMM): out[b] = dequant(x[b]) @ dequant(y[b])^T for every batch b, in one launch.

For MLA attention's absorbed products (DeepSeek-V3: B = heads, (n, k) = (512, 128) or (128, 512)) and any batch of
same-shape GEMMs. It runs the dense kernel family (include/deep_gemm/sm90/fp8_gemm_1d2d.cuh) with the batched tile
walk: a tile's batch is one division, and the per-token scales are read by the kernel at whatever strides the
caller's tensor has, so no conversion kernel runs on the hot path.
"""
from typing import Optional, Sequence, Tuple

import torch

from ..runtime import Op, call
from ..families import checks

__all__ = ["bmm_fp8_fp8_bf16_nt", "w8a8_block_fp8_bmm"]

_BMM = int(Op.BMM)


def bmm_fp8_fp8_bf16_nt(lhs: Tuple[torch.Tensor, torch.Tensor], rhs: Tuple[torch.Tensor, torch.Tensor],
                        out: torch.Tensor) -> None:
    """out[b] = (x[b] * xs[b]) @ (y[b] * ys[b])^T for b in range(B).

    lhs = (x [B, m, k] float8_e4m3fn, xs [B, m, ceil(k/128)] float32: one scale per 1x128 group of a row, at any
    strides, e.g. row-major as per-token quantisation produces it; it is read as it is, never converted);
    rhs = (y [B, n, k] float8_e4m3fn, ys [B, ceil(n/128), ceil(k/128)] float32: one scale per 128x128 block);
    out [B, m, n] bfloat16. x, y and out need unit stride along their last dimension, 16-byte aligned row
    strides and addresses (TMA), and batches stacked uniformly (stride(0) == size(1) * stride(1), as in a
    contiguous tensor); n % 8 == 0.
    Runs on the current stream without a host synchronisation (CUDA-graph safe); results are bitwise
    reproducible. B, m or n = 0 returns at once; k = 0 writes zeros.
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("bmm_fp8_fp8_bf16_nt", lhs, rhs, out)
    call(_BMM, lhs, rhs, out)


def w8a8_block_fp8_bmm(x: torch.Tensor, y: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor,
                       block_size: Sequence[int] = (128, 128), z: Optional[torch.Tensor] = None,
                       output_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """FlagGems' `w8a8_block_fp8_bmm` calling convention over `bmm_fp8_fp8_bf16_nt`: z [B, m, n] = x @ y^T with x
    [B, m, k] (per-token scales xs [B, m, ceil(k/128)]) and y [B, n, k] (block scales ys [B, ceil(n/128),
    ceil(k/128)]). Returns z (allocated when None). Only block_size [128, 128] and a bfloat16 output exist here;
    anything else is refused with ValueError."""
    try:
        supported = list(block_size) == [128, 128]
    except TypeError:
        supported = False
    if not supported:
        raise ValueError(f"block_size must be [128, 128] (1x128 per-token scales of x, 128x128 block scales of y), "
                         f"got {block_size!r}")
    if output_dtype != torch.bfloat16:
        raise ValueError(f"output_dtype must be torch.bfloat16, got {output_dtype}")
    if z is None:
        checks.check_tensor(x, "x", torch.float8_e4m3fn, 3)
        checks.check_tensor(y, "y", torch.float8_e4m3fn, 3)
        z = torch.empty((x.shape[0], x.shape[1], y.shape[1]), dtype=torch.bfloat16, device=x.device)
    bmm_fp8_fp8_bf16_nt((x, xs), (y, ys), z)
    return z
