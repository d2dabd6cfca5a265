"""DeepGEMM May-2025 module path `deep_gemm.jit_kernels.utils`: the same helpers as `deep_gemm.utils`."""
from ..utils import (ceil_div, get_col_major_tma_aligned_tensor, get_m_alignment_for_contiguous_layout,  # noqa: F401
                     get_num_sms, get_tma_aligned_size, set_num_sms)
