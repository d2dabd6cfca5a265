"""Time weight-gradient configurations the heuristic did not necessarily pick (H200 tuning aid).

Usage: python tools/sweep_wgrad.py MxNxK[:G] ... [--configs BMxBN[:stages][:mcA|mcB] ...]
Without --configs every BLOCK_M x BLOCK_N of the heuristic's candidate set (1 stage short of the deepest too) is
timed. Kernel time from the torch profiler (kineto) with an L2 flush per call, mean of 10 calls; every config is
checked against the dequantised reference first.
"""
import argparse

import torch

import deep_gemm
from deep_gemm.heuristics import sm90_wgrad
from deep_gemm.testing import bench_kineto, calc_diff, dequant_per_token, forced_config


def _configs(m, n, groups, specs):
    out = []
    for spec in specs:
        parts = spec.split(":")
        bm, bn = map(int, parts[0].split("x"))
        stages = next((int(p) for p in parts[1:] if p.isdigit()), 0)
        mc = next((p for p in parts[1:] if p.startswith("mc")), None)
        try:
            out.append(sm90_wgrad.build_wgrad_config(m, n, groups, bm, bn, 132, 2 if mc else 1, mc != "mcB",
                                                     stages))
        except ValueError as e:
            print(f"  skip {spec}: {e}")
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--configs", nargs="*")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    for case in args.cases:
        shape, _, g = case.partition(":")
        m, n, k = map(int, shape.split("x"))
        groups = int(g or 1)
        a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16))
        b8, sb = deep_gemm.per_token_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
        ref = dequant_per_token(a8, sa) @ dequant_per_token(b8, sb).t()
        a_flat, b_flat = a8.view(-1).repeat(groups), b8.view(-1).repeat(groups)
        sa_t, sb_t = sa.t().contiguous().repeat(groups, 1), sb.t().contiguous().repeat(groups, 1)
        out = torch.zeros((groups, m, n), device="cuda")
        default = sm90_wgrad.get_wgrad_config(m, n, groups, 132)
        specs = args.configs or [f"{bm}x{bn}" for bm in sm90_wgrad.BLOCK_MS for bn in sm90_wgrad.BLOCK_NS
                                 if bn >= 64 and (bm == 128 or m <= 1024)]
        configs = [default] + _configs(m, n, groups, specs)
        print(f"== {m}x{n}x{k} groups={groups}; heuristic: {default.block_m}x{default.block_n} "
              f"stages={default.num_stages} mc={default.num_multicast}{'A' if default.multicast_on_a else 'B'}")

        def fn():
            deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a_flat, sa_t), (b_flat, sb_t), out, [k] * groups)
        for cfg in configs:
            with forced_config(cfg):
                out.zero_()
                fn()  # builds the plan of the forced config
                torch.cuda.synchronize()
                diff = calc_diff(out[-1], ref)
                t = bench_kineto(fn, "fp8_wgrad_gemm", num_tests=10)
            print(f"  {cfg.block_m}x{cfg.block_n} st={cfg.num_stages} mc={cfg.num_multicast}"
                  f"{'A' if cfg.multicast_on_a else 'B'} grid={cfg.num_sms}: {t * 1e6:8.1f} us "
                  f"{2 * m * n * k * groups / t / 1e12:6.0f} TFLOPS diff={diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
