from .bf16 import (bf16_gemm_nn, bf16_gemm_nt, bf16_gemm_tn, bf16_gemm_tt, bf16_m_grouped_gemm_nt_masked,
                   k_grouped_bf16_gemm_tn_contiguous, m_grouped_bf16_gemm_nn_contiguous,
                   m_grouped_bf16_gemm_nt_contiguous, m_grouped_bf16_gemm_nt_masked)
from .attention import (fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits, fp8_gemm_nt_skip_head_mid, fp8_mqa_logits,
                        fp8_paged_mqa_logits, get_paged_mqa_logits_metadata)
from .bmm import bmm_fp8_fp8_bf16_nt, w8a8_block_fp8_bmm
from .einsum import einsum, fp8_einsum
from .gemm import gemm_fp8_fp8_bf16_nt
from .hyperconnection import tf32_hc_prenorm_gemm
from .grouped import (get_m_alignment_for_contiguous_layout, m_grouped_gemm_fp8_fp8_bf16_nt_contiguous,
                      m_grouped_gemm_fp8_fp8_bf16_nt_masked)
from .wgrad import k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, wgrad_gemm_fp8_fp8_fp32_nt
from . import library
from . import v2
from .v2 import *  # noqa: F401,F403  (DeepGEMM v2 names)

__all__ = ["gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
           "get_m_alignment_for_contiguous_layout", "wgrad_gemm_fp8_fp8_fp32_nt",
           "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", "bmm_fp8_fp8_bf16_nt", "w8a8_block_fp8_bmm"] + v2.__all__
__all__ += ["bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
            "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked",
            "k_grouped_bf16_gemm_tn_contiguous", "einsum", "fp8_einsum", "tf32_hc_prenorm_gemm",
            "fp8_gemm_nt_skip_head_mid", "fp8_fp4_mqa_logits", "fp8_mqa_logits", "get_paged_mqa_logits_metadata",
            "fp8_fp4_paged_mqa_logits", "fp8_paged_mqa_logits"]

# The public GEMMs that are torch custom operators, torch.ops.deep_gemm.<name> (library.py derives each from its
# variant): what torch.compile traces as one node.
OPERATORS = (gemm_fp8_fp8_bf16_nt, m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, m_grouped_gemm_fp8_fp8_bf16_nt_masked,
             wgrad_gemm_fp8_fp8_fp32_nt, k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, bmm_fp8_fp8_bf16_nt)
library.register(OPERATORS)
