"""Time grouped-GEMM configurations the heuristic may not pick (H200 tuning aid; see benchmarks/NOTES.md).

python tools/sweep_grouped.py [--tests N] [--bn 64 128 ...] CASE ...
    CASE = contiguous:G:m:n:k | masked:G:m:n:k | maskedskew:G:m:n:k
Inputs as in benchmarks/bench.py (rows per group ~ m * U(0.7, 1.3), same seeds); `maskedskew` draws skewed expert
loads around expected_m = m instead (skewed_sizes: a fifth of the experts empty, a tenth at 4 m). Prints us and
TFLOPS per config, the heuristic's pick marked with '*'.
"""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import deep_gemm  # noqa: E402
from deep_gemm import jit  # noqa: E402
from deep_gemm.heuristics import GemmProblem, KernelType, get_config  # noqa: E402
from deep_gemm.heuristics.sm90 import _legal_block, build_sm90_config, kernel_key  # noqa: E402
from deep_gemm.launchers import sm90_fp8_gemm_1d2d as L  # noqa: E402
from deep_gemm.testing import bench_kineto, forced_config  # noqa: E402
from bench import _grouped_weights, contiguous_m_indices, skewed_sizes  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("cases", nargs="+")
p.add_argument("--tests", type=int, default=10)
p.add_argument("--bn", type=int, nargs="*", default=[64, 96, 128, 160, 192])
args = p.parse_args()
sms = deep_gemm.get_num_sms()
for case in args.cases:
    kind_name, g, m, n, k = case.split(":")
    g, m, n, k = int(g), int(m), int(n), int(k)
    kind = KernelType.M_GROUPED_CONTIGUOUS if kind_name == "contiguous" else KernelType.M_GROUPED_MASKED
    rng = random.Random(g * m + n + k)
    if kind_name == "maskedskew":
        sizes = skewed_sizes(g, m, rng)
    else:
        sizes = [int(m * rng.uniform(0.7, 1.3)) for _ in range(g)]
    b8, sb = _grouped_weights(g, n, k)
    if kind == KernelType.M_GROUPED_CONTIGUOUS:
        layout = contiguous_m_indices(sizes)
        m_sum = layout.numel()
        a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m_sum, k), device="cuda", dtype=torch.bfloat16))
        sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
        out = torch.empty((m_sum, n), device="cuda", dtype=torch.bfloat16)
        heur_m, block_ms = m_sum, (64, 128)
    else:
        m_max = 4096 if g <= 32 else 1024
        sizes = [min(s, m_max) for s in sizes]
        layout = torch.tensor(sizes, dtype=torch.int32, device="cuda")
        a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((g * m_max, k), device="cuda", dtype=torch.bfloat16))
        a8, sa = a8.view(g, m_max, k), deep_gemm.get_col_major_tma_aligned_tensor(sa.view(g, m_max, -1))
        out = torch.empty((g, m_max, n), device="cuda", dtype=torch.bfloat16)
        heur_m, block_ms = m, (64, 128, 256)
    picked = get_config(GemmProblem(heur_m, n, k, sms, kernel_type=kind, num_groups=g))
    configs = []
    for bm in block_ms:
        for bn in args.bn:
            if not _legal_block(bm, bn):
                continue
            for mc, on_a in ((1, True), (2, True), (2, False)):
                # A pair shares an M block (A) or, contiguous only, an N block (B): the other dimension pairs up.
                if mc == 2 and (-(-n // bn) % 2 if on_a else kind != KernelType.M_GROUPED_CONTIGUOUS or
                                -(-heur_m // bm) % 2):
                    continue
                configs.append(build_sm90_config(heur_m, n, k, bm, bn, sms, mc, on_a,
                                                 full_grid=kind == KernelType.M_GROUPED_MASKED))
    if kernel_key(picked) not in {kernel_key(c) for c in configs}:
        configs.append(picked)
    jit.build_many([L.kernel_source(n, k, c, kind) for c in configs], "sm_90a")
    flops = 2 * sum(sizes) * n * k
    print(f"== {case} rows={sum(sizes)} (sizes {sizes[:6]}{'...' if g > 6 else ''})", flush=True)
    if kind == KernelType.M_GROUPED_CONTIGUOUS:
        def fn():
            deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a8, sa), (b8, sb), out, layout)
    else:
        def fn():
            deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a8, sa), (b8, sb), out, layout, m)
    for c in configs:
        with forced_config(c):
            t = bench_kineto(fn, "fp8_gemm_1d2d", num_tests=args.tests)  # its warm-up call builds the plan
        mark = "*" if kernel_key(c) == kernel_key(picked) and c.num_sms == picked.num_sms else " "
        mc = "1" if c.num_multicast == 1 else f"{c.num_multicast}{'A' if c.multicast_on_a else 'B'}"
        print(f"{mark} {c.block_m:>3}x{c.block_n:<3} mc{mc} st{c.num_stages} grid{c.num_sms:>3} "
              f"{t * 1e6:8.1f} us {flops / t / 1e12:6.0f} TFLOPS", flush=True)
