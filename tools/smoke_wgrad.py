"""Small weight-gradient calls for compute-sanitizer (tools/h200_issue5.sh --sanitizer): ragged m/n/k, empty groups,
two launches of k-grouped groups, multicast, the unaligned-out temporary path."""
import torch

import deep_gemm


def operand(rows, k):
    return deep_gemm.per_token_cast_to_fp8(torch.randn((rows, k), device="cuda"))


def dense(m, n, k):
    (a, sa), (b, sb) = operand(m, k), operand(n, k)
    out = torch.zeros((m, n), device="cuda")
    deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a, sa), (b, sb), out)


def k_grouped(m, n, ks):
    parts = [(operand(m, k), operand(n, k)) for k in ks if k]
    a = torch.cat([p[0][0].view(-1) for p in parts])
    b = torch.cat([p[1][0].view(-1) for p in parts])
    sa = torch.cat([p[0][1].t() for p in parts]).contiguous()
    sb = torch.cat([p[1][1].t() for p in parts]).contiguous()
    out = torch.zeros((len(ks), m, n), device="cuda")
    deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a, sa), (b, sb), out, ks)


dense(1, 1, 128)
dense(65, 100, 208)
dense(300, 7, 4000)
dense(4096, 4096, 512)  # multicast
k_grouped(130, 260, [0, 256, 16, 0, 1008])
k_grouped(64, 96, [128] * 100)  # two launches
torch.cuda.synchronize()
print("ok")
