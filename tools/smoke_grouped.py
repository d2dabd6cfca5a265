"""Small grouped-GEMM calls for compute-sanitizer: contiguous with padding, empty experts and out-of-range indices;
masked with partial, empty, full and over-full groups (clamped). Prints one calc_diff line per call."""
import torch

import deep_gemm
from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token


def weights(g, n, k):
    b8 = torch.empty((g, n, k), device="cuda", dtype=torch.float8_e4m3fn)
    sb = torch.empty((g, (n + 127) // 128, (k + 127) // 128), device="cuda")
    for i in range(g):
        b8[i], sb[i] = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda"))
    return b8, sb


n, k = 384, 640
b8, sb = weights(3, n, k)
idx = torch.full((640,), -1, dtype=torch.int32)
idx[0:200] = 0
idx[256:257] = 2
idx[384:600] = 1
idx[600:610] = 7  # out of range: zeros
m_indices = idx.cuda()
a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((640, k), device="cuda"))
out = torch.empty((640, n), device="cuda", dtype=torch.bfloat16)
deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a8, sa), (b8, sb), out, m_indices)
ref = dequant_per_token(a8[:200], sa[:200]) @ dequant_per_block(b8[0], sb[0]).t()
torch.cuda.synchronize()
print(f"contiguous calc_diff {calc_diff(out[:200], ref):.2e} zeros_ok {bool((out[600:610] == 0).all())}")

g, m_max = 4, 200
a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((g * m_max, k), device="cuda"))
masked_m = torch.tensor([0, 200, 77, 5000], dtype=torch.int32, device="cuda")
out = torch.zeros((g, m_max, n), device="cuda", dtype=torch.bfloat16)
deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a8.view(g, m_max, k), sa.view(g, m_max, -1)), (b8.repeat(2, 1, 1)[:g],
                                                sb.repeat(2, 1, 1)[:g].contiguous()), out, masked_m, 64)
ref = dequant_per_token(a8[2 * m_max:2 * m_max + 77], sa[2 * m_max:2 * m_max + 77]) @ \
    dequant_per_block(b8[2], sb[2]).t()
torch.cuda.synchronize()
print(f"masked calc_diff {calc_diff(out[2, :77], ref):.2e} untouched_ok {bool((out[2, 77:] == 0).all())}")
