"""Quick GPU smoke check: a few shapes, prints calc_diff and whether the guard bands held (no asserts)."""
import sys
import time

import torch

sys.path[:0] = ["tests/gpu", "tests"]  # test_gemm_gpu imports tests/gemm_cases.py
from test_gemm_gpu import GuardedOut, make_inputs  # noqa: E402

import deep_gemm  # noqa: E402
from deep_gemm.testing import calc_diff  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]] or [
    (128, 256, 256), (64, 2112, 7168), (4096, 7168, 2048), (1, 7168, 576), (4096, 2112, 7168), (300, 4095, 1000)]
for m, n, k in shapes:
    lhs, rhs, ref, ref_bf16 = make_inputs(m, n, k, seed=1)
    g = GuardedOut(m, n)
    t = time.perf_counter()
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, g.out)
    torch.cuda.synchronize()
    t = time.perf_counter() - t
    try:
        g.check()
        guard = "ok"
    except AssertionError as e:
        guard = str(e)
    print(f"{m}x{n}x{k}: diff={calc_diff(g.out, ref):.3g} diff_bf16={calc_diff(g.out, ref_bf16):.3g} "
          f"guard={guard} first-call={t:.2f}s", flush=True)
