"""Weight-gradient FP8 GEMMs (DeepGEMM-compatible): out (FP32) += dequant(A) @ dequant(B)^T with 1x128 scales on both
operands, dense and k-grouped (MoE experts, one launch for all groups).

Both run include/deep_gemm/sm90/fp8_wgrad_1d1d.cuh: K (the token dimension) is a run-time value, so a new token count
never compiles a kernel; the result is added into `out` by TMA reduce-adds, so `out` is read and written once.
"""
from typing import Sequence, Tuple

import torch

from ..runtime import Op, call
from ..families import checks

__all__ = ["wgrad_gemm_fp8_fp8_fp32_nt", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt"]

_WGRAD, _K_GROUPED = int(Op.WGRAD), int(Op.K_GROUPED)


def wgrad_gemm_fp8_fp8_fp32_nt(lhs: Tuple[torch.Tensor, torch.Tensor], rhs: Tuple[torch.Tensor, torch.Tensor],
                               out: torch.Tensor) -> None:
    """out[m, n] += (A * SA) @ (B * SB)^T, in FP32.

    lhs = (A [m, k] float8_e4m3fn, SA float32 with one scale per 1x128 group of a row of A: [m, ceil(k/128)], or
    the transposed [ceil(k/128), m]); rhs = (B [n, k] float8_e4m3fn, SB [n, ceil(k/128)] or [ceil(k/128), n]);
    out [m, n] float32, accumulated in place (read once, written once). k is typically the token count; any k
    works as long as A's and B's row strides are 16-byte aligned (k % 16 == 0 for contiguous tensors). k = 0
    leaves out unchanged. A square scale tensor (m == ceil(k/128)) with a unit inner stride is read as the
    transposed form, as in DeepGEMM. Runs on the current stream; no host synchronisation.
    """
    if torch.compiler.is_compiling():
        return checks.traced_call("wgrad_gemm_fp8_fp8_fp32_nt", lhs, rhs, out)
    call(_WGRAD, lhs, rhs, out)


def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs: Tuple[torch.Tensor, torch.Tensor],
                                         rhs: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                         batch_sizes: Sequence[int]) -> None:
    """out[g] += (A_g * SA_g) @ (B_g * SB_g)^T for every group g, in FP32, in one kernel launch (up to 96 groups per
    launch; more groups take ceil(G / 96) launches).

    batch_sizes = [k_0, ..., k_{G-1}] (host ints, each a multiple of 16; 0 = an empty group, out[g] untouched).
    lhs = (A: contiguous float8_e4m3fn holding sum(m * k_g) elements, group g's [m, k_g] row-major matrix after the
    previous groups'; SA: float32 [sum(ceil(k_g/128)), m], group g's scales in rows sum_{j<g} ceil(k_j/128) ...);
    rhs = (B with n, SB [sum(ceil(k_g/128)), n]) likewise; out: float32 [G, m, n], accumulated in place.
    Runs on the current stream; no host synchronisation. Under torch.compile pass batch_sizes as a list of ints.
    """
    if torch.compiler.is_compiling():
        if not isinstance(batch_sizes, (list, tuple)):
            raise TypeError("batch_sizes must be a list of ints under torch.compile (the compiled graph bakes the "
                            f"group sizes in), got {type(batch_sizes).__name__}")
        return checks.traced_call("k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", lhs, rhs, out, list(batch_sizes))
    call(_K_GROUPED, lhs, rhs, out, batch_sizes)
