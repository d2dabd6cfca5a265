"""Run one GEMM with a forced configuration a few times (for ncu / compute-sanitizer).

python tools/run_config.py M N K BLOCK_M BLOCK_N MULTICAST(1|2A|2B) [--calls N]
"""
import argparse

import torch

import deep_gemm
from deep_gemm.heuristics.sm90 import build_sm90_config
from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token, forced_config

p = argparse.ArgumentParser()
p.add_argument("m", type=int)
p.add_argument("n", type=int)
p.add_argument("k", type=int)
p.add_argument("bm", type=int)
p.add_argument("bn", type=int)
p.add_argument("mc", default="1")
p.add_argument("--calls", type=int, default=2)
a = p.parse_args()
sms = deep_gemm.get_num_sms()
cfg = build_sm90_config(a.m, a.n, a.k, a.bm, a.bn, sms, int(a.mc[0]), a.mc != "2B")
a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((a.m, a.k), device="cuda"))
b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((a.n, a.k), device="cuda"))
sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
out = torch.empty((a.m, a.n), device="cuda", dtype=torch.bfloat16)
with forced_config(cfg):
    for _ in range(a.calls):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)
    torch.cuda.synchronize()
ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
print(cfg, "diff", calc_diff(out, ref))
