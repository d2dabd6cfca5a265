import sys
import torch
sys.path.insert(0, "tests/gpu")
from test_gemm_gpu import GuardedOut, make_inputs, POISON
import deep_gemm
from deep_gemm.heuristics import GemmProblem, get_config
for m, n, k in [(300, 4095, 1000), (300, 4095, 128), (64, 4095, 128), (64, 4093, 128), (64, 4088, 128), (64, 17, 128), (64, 24, 128)]:
    lhs, rhs, ref, _ = make_inputs(m, n, k, 1)
    g = GuardedOut(m, n)
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, g.out)
    torch.cuda.synchronize()
    inner = torch.zeros_like(g.buf, dtype=torch.bool)
    inner[1:m + 1, g.guard:g.guard + n] = True
    bad = ((g.buf != POISON) & ~inner).nonzero()
    print(m, n, k, get_config(GemmProblem(m, n, k, 132)), "bad:", bad.shape[0], bad[:6].tolist(), flush=True)
