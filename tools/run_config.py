"""Run one GEMM with a forced configuration a few times (for ncu / compute-sanitizer).

python tools/run_config.py M N K BLOCK_M BLOCK_N MULTICAST(1|2A|2B) [--calls N]
"""
import argparse

import torch

import deep_gemm
from deep_gemm.heuristics import GemmConfig
from deep_gemm.heuristics.common import ceil_div, min_sms_for_waves, num_waves
from deep_gemm.heuristics.sm90 import SMEM_BUDGET, num_math_threads, sm90_smem_size, swizzle_d_bytes
from deep_gemm.launchers import sm90_fp8_gemm_1d2d
from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token

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
stages = max(s for s in range(1, 9) if sm90_smem_size(a.k, a.bm, a.bn, s) <= SMEM_BUDGET)
mc = int(a.mc[0])
tiles = ceil_div(a.m, a.bm) * ceil_div(a.n, a.bn)
cfg = GemmConfig(a.bm, a.bn, 128, stages, mc, a.mc != "2B", swizzle_d_bytes(a.bn),
                 min(sms, min_sms_for_waves(tiles, num_waves(tiles, sms), mc)), sm90_smem_size(a.k, a.bm, a.bn, stages),
                 num_math_threads(a.bm) + 128)
a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((a.m, a.k), device="cuda"))
b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((a.n, a.k), device="cuda"))
sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
out = torch.empty((a.m, a.n), device="cuda", dtype=torch.bfloat16)
for _ in range(a.calls):
    sm90_fp8_gemm_1d2d.launch(a8, sa, b8, sb, out, sms, "sm_90a", cfg)
torch.cuda.synchronize()
ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
print(cfg, "diff", calc_diff(out, ref))
