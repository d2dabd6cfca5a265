"""Time alternative kernel configurations for given shapes (tuning aid; run on the GPU machine).

python tools/sweep.py 4096x7168x2048 ... [--bm 128 256] [--bn 112 128 144 160]
Every candidate is compiled in parallel first, then timed with the bench method (kineto, L2 flush).
"""
import argparse
from concurrent.futures import ProcessPoolExecutor

import torch

import deep_gemm
from deep_gemm import jit
from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.heuristics.common import ceil_div
from deep_gemm.heuristics.sm90 import MAX_STAGES, build_sm90_config
from deep_gemm.launchers import sm90_fp8_gemm_1d2d
from deep_gemm.testing import bench_kineto, calc_diff, dequant_per_block, dequant_per_token, forced_config


def candidates(m, n, k, bms, bns, sms, max_stages=MAX_STAGES):
    out = []
    for bm in bms:
        for bn in bns:
            if bm == 256 and bn > 128:
                continue
            for mc, on_a in ((1, True), (2, True), (2, False)):
                if mc == 2 and on_a and ceil_div(n, bn) % 2:
                    continue
                if mc == 2 and not on_a and ceil_div(m, bm) % 2:
                    continue
                out.append(build_sm90_config(m, n, k, bm, bn, sms, mc, on_a, max_stages))
    return out


def _build(item):
    n, k, cfg = item
    jit.build(sm90_fp8_gemm_1d2d.kernel_source(n, k, cfg), "sm_90a")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("shapes", nargs="+")
    p.add_argument("--bm", type=int, nargs="*", default=[128, 256])
    p.add_argument("--bn", type=int, nargs="*", default=[96, 112, 128, 144, 160])
    p.add_argument("--num-tests", type=int, default=15)
    p.add_argument("--max-stages", type=int, nargs="*", default=[MAX_STAGES], help="also try shallower pipelines")
    args = p.parse_args()
    sms = deep_gemm.get_num_sms()
    work = []
    for s in args.shapes:
        m, n, k = (int(v) for v in s.split("x"))
        for max_stages in args.max_stages:
            for cfg in candidates(m, n, k, args.bm, args.bn, sms, max_stages):
                work.append((m, n, k, cfg))
    with ProcessPoolExecutor(16) as pool:
        list(pool.map(_build, [(n, k, c) for _, n, k, c in work]))
    current = None
    for m, n, k, cfg in work:
        if (m, n, k) != current:
            current = (m, n, k)
            a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda"))
            b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda"))
            sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
            default = get_config(GemmProblem(m, n, k, sms))
            print(f"== {m}x{n}x{k} default: {default.block_m}x{default.block_n} mc{default.num_multicast}"
                  f"{'A' if default.multicast_on_a else 'B'} stages {default.num_stages}", flush=True)

        def fn():
            deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)
        with forced_config(cfg):
            fn()  # builds the plan of the forced config
            diff = calc_diff(out, ref)
            t = bench_kineto(fn, "fp8_gemm_1d2d", num_tests=args.num_tests)
        mc = f"{cfg.num_multicast}{'A' if cfg.multicast_on_a else 'B'}"
        print(f"  {cfg.block_m}x{cfg.block_n} st{cfg.num_stages} mc{mc} sms{cfg.num_sms}: {t * 1e6:8.1f} us "
              f"{2 * m * n * k / t / 1e12:6.0f} TFLOPS diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
