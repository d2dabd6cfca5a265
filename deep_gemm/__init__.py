"""deep_gemm: JIT-compiled FP8 GEMM kernels for NVIDIA Hopper, with DeepGEMM's API: its May-2025 names
(`gemm_fp8_fp8_bf16_nt`, ...) and its v2 names (`fp8_gemm_nt`, `m_grouped_fp8_gemm_nt_contiguous`, ...), both served
by the same ops."""
from . import jit, sm100_selftest, testing, utils  # sm100_selftest: registers the self-test's problems
from . import ops as _ops
from .ops import *  # noqa: F401,F403  (every public op, the May-2025 and the v2 names: deep_gemm.ops.__all__)
from .runtime import get_compile_mode, get_launch_path, set_compile_mode
from .testing import bench, bench_kineto, calc_diff
from .utils import *  # noqa: F401,F403  (as DeepGEMM: the layout and cast helpers at the top level too)
from .utils import (ceil_div, get_col_major_tma_aligned_tensor, get_mk_alignment_for_contiguous_layout, get_num_sms,
                    get_tma_aligned_size, per_block_cast_to_fp8, per_token_cast_to_fp8, reset_num_sms, set_num_sms,
                    transform_sf_into_required_layout)
from .warmup import warmup  # the function shadows the module: use `from deep_gemm.warmup import ...` for the rest

from ._version import __version__, build_info

# The public ops (deep_gemm.ops.__all__: May-2025 names first, then v2's, so that a new op is exported by
# deep_gemm/ops/__init__.py alone) and the helpers users call.
_HELPERS = ["get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout",
            "set_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
            "get_col_major_tma_aligned_tensor", "get_mn_major_tma_aligned_tensor", "transform_sf_into_required_layout",
            "set_num_sms", "get_num_sms", "reset_num_sms", "ceil_div", "align", "get_tma_aligned_size",
            "get_launch_path", "set_compile_mode", "get_compile_mode", "warmup", "per_token_cast_to_fp8",
            "per_block_cast_to_fp8", "calc_diff", "bench", "bench_kineto", "build_info", "jit", "testing", "utils"]
__all__ = [name for name in _ops.__all__ if name not in _HELPERS] + _HELPERS
