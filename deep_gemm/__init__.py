"""deep_gemm: JIT-compiled FP8 GEMM kernels for NVIDIA Hopper, DeepGEMM-compatible API."""
from . import jit, testing
from .ops import (gemm_fp8_fp8_bf16_nt, get_m_alignment_for_contiguous_layout, get_mk_alignment_for_contiguous_layout,
                  k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, m_grouped_gemm_fp8_fp8_bf16_nt_contiguous,
                  m_grouped_gemm_fp8_fp8_bf16_nt_masked, wgrad_gemm_fp8_fp8_fp32_nt)
from .runtime import get_launch_path
from .testing import bench, bench_kineto, calc_diff, per_block_cast_to_fp8, per_token_cast_to_fp8
from .utils import (ceil_div, get_col_major_tma_aligned_tensor, get_num_sms, get_tma_aligned_size, reset_num_sms,
                    set_num_sms)

__version__ = "0.1.0"

__all__ = ["gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
           "wgrad_gemm_fp8_fp8_fp32_nt", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt",
           "get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout", "get_col_major_tma_aligned_tensor", "set_num_sms", "get_num_sms", "reset_num_sms", "ceil_div",
           "get_tma_aligned_size", "get_launch_path", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "calc_diff", "bench",
           "bench_kineto", "jit", "testing"]
