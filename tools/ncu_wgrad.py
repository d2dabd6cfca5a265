"""Driver for Nsight Compute on one weight-gradient kernel: python tools/ncu_wgrad.py M N K [BMxBN]."""
import contextlib
import sys

import torch

import deep_gemm
from deep_gemm.heuristics import sm90_wgrad
from deep_gemm.testing import forced_config

m, n, k = map(int, sys.argv[1:4])
if len(sys.argv) > 4:
    bm, bn = map(int, sys.argv[4].split("x"))
    forced = forced_config(sm90_wgrad.build_wgrad_config(m, n, 1, bm, bn, 132))
else:
    forced = contextlib.nullcontext()  # the heuristic's pick
a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda"))
b8, sb = deep_gemm.per_token_cast_to_fp8(torch.randn((n, k), device="cuda"))
sa, sb = sa.t().contiguous(), sb.t().contiguous()
out = torch.zeros((m, n), device="cuda")
with forced:
    for _ in range(3):
        deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a8, sa), (b8, sb), out)
    torch.cuda.synchronize()
