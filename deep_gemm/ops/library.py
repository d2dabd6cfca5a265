"""The public GEMMs as torch custom operators (``torch.ops.deep_gemm.*``), so that torch.compile sees each call as one
opaque node that writes its ``out`` argument, and traces models calling them with ``fullgraph=True``.

Eager calls do not go through the dispatcher (it costs microseconds per call): each public function checks
``torch.compiler.is_compiling()`` (~0.1 us) and only while Dynamo traces does it call the operator below. The
operators take the flat tensors (the public API's (tensor, scales) pairs unpacked). Their fake implementations
produce nothing (the result is the in-place write to ``out``), so tracing needs no device and runs no check that
reads data; the real implementation runs the full validation when the compiled graph executes.
"""
from typing import List

import torch

from . import bmm, gemm, grouped, wgrad

Tensor = torch.Tensor
NAMESPACE = "deep_gemm"


@torch.library.custom_op(f"{NAMESPACE}::gemm_fp8_fp8_bf16_nt", mutates_args=("out",))
def gemm_fp8_fp8_bf16_nt(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, out: Tensor) -> None:
    gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)


@torch.library.custom_op(f"{NAMESPACE}::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", mutates_args=("out",))
def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, out: Tensor,
                                              m_indices: Tensor) -> None:
    grouped.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sa), (b, sb), out, m_indices)


@torch.library.custom_op(f"{NAMESPACE}::m_grouped_gemm_fp8_fp8_bf16_nt_masked", mutates_args=("out",))
def m_grouped_gemm_fp8_fp8_bf16_nt_masked(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, out: Tensor,
                                          masked_m: Tensor, expected_m: int) -> None:
    grouped.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sa), (b, sb), out, masked_m, expected_m)


@torch.library.custom_op(f"{NAMESPACE}::wgrad_gemm_fp8_fp8_fp32_nt", mutates_args=("out",))
def wgrad_gemm_fp8_fp8_fp32_nt(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, out: Tensor) -> None:
    wgrad.wgrad_gemm_fp8_fp8_fp32_nt((a, sa), (b, sb), out)


@torch.library.custom_op(f"{NAMESPACE}::k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", mutates_args=("out",))
def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, out: Tensor,
                                         batch_sizes: List[int]) -> None:
    wgrad.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a, sa), (b, sb), out, batch_sizes)


@torch.library.custom_op(f"{NAMESPACE}::bmm_fp8_fp8_bf16_nt", mutates_args=("out",))
def bmm_fp8_fp8_bf16_nt(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, out: Tensor) -> None:
    bmm.bmm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)


OPS = (gemm_fp8_fp8_bf16_nt, m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, m_grouped_gemm_fp8_fp8_bf16_nt_masked,
       wgrad_gemm_fp8_fp8_fp32_nt, k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, bmm_fp8_fp8_bf16_nt)


def _no_result(*args, **kwargs) -> None:
    return None


for _op in OPS:
    _op.register_fake(_no_result)
