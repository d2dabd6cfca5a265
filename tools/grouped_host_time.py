"""Host microseconds per warmed grouped call (tiny problems, so the GPU never sets the pace)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import deep_gemm  # noqa: E402
from bench import _grouped_weights, _host_time  # noqa: E402

g, n, k = 8, 256, 128
b8, sb = _grouped_weights(g, n, k)
a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((g * 128, k), device="cuda"))
sa_t = deep_gemm.get_col_major_tma_aligned_tensor(sa)
m_indices = torch.arange(g, device="cuda", dtype=torch.int32).repeat_interleave(128)
out = torch.empty((g * 128, n), device="cuda", dtype=torch.bfloat16)
t = _host_time(lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a8, sa_t), (b8, sb), out, m_indices))
print(f"contiguous host time per call: {t * 1e6:.1f} us")
masked_m = torch.full((g,), 100, device="cuda", dtype=torch.int32)
a3, sa3 = a8.view(g, 128, k), deep_gemm.get_col_major_tma_aligned_tensor(sa.view(g, 128, -1))
out3 = out.view(g, 128, n)
t = _host_time(lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a3, sa3), (b8, sb), out3, masked_m, 100))
print(f"masked host time per call: {t * 1e6:.1f} us")
