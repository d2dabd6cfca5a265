"""The dense BF16 GEMMs against cuBLAS (`torch.matmul` on the same BF16 tensors) in one process: DeepGEMM v2.6.1
tests/test_bf16.py's dense shapes (m in {1, 128, 4096} x seven (n, k), BF16 d, each layout given), kernel time by
kineto with an 8 GB L2 flush before each call, TFLOPS, ours / cuBLAS, and the SM clock after the run.

Usage (GPU machine): python -m benchmarks.bf16 [--layouts nt nn tn tt] [--ms 1 128 4096] [--num-tests 20] [--json OUT]
"""
import argparse
import json
import math
import subprocess
import sys

import torch

NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


def _sm_clock() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", nargs="+", default=["nt"], choices=["nt", "nn", "tn", "tt"])
    parser.add_argument("--ms", nargs="+", type=int, default=[1, 128, 4096])
    parser.add_argument("--num-tests", type=int, default=20)
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args(argv)
    if min(args.ms) <= 0 or args.num_tests <= 0:
        parser.error("--ms and --num-tests must be positive")
    import deep_gemm
    from deep_gemm.testing import bench_kineto, calc_diff
    if not torch.cuda.is_available():
        print("bf16: needs a CUDA device", file=sys.stderr)
        return 2
    rows = []
    for layout in args.layouts:
        fn = getattr(deep_gemm, f"bf16_gemm_{layout}")
        for m in args.ms:
            for n, k in NK:
                a = torch.randn((m, k), device="cuda").bfloat16()
                b = torch.randn((n, k), device="cuda").bfloat16()
                a_arg = a if layout[0] == "n" else a.t().contiguous()
                b_arg = b if layout[1] == "t" else b.t().contiguous()
                a_mk = a_arg if layout[0] == "n" else a_arg.t()
                b_nk = b_arg if layout[1] == "t" else b_arg.t()
                d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
                fn(a_arg, b_arg, d)
                diff = float(calc_diff(d.float(), a.float() @ b.float().t()))
                t_ours = bench_kineto(lambda: fn(a_arg, b_arg, d), "bf16_gemm", num_tests=args.num_tests,
                                      suppress_kineto_output=True)
                t_cublas = bench_kineto(lambda: torch.matmul(a_mk, b_nk.t()), None, num_tests=args.num_tests,
                                        suppress_kineto_output=True, with_multiple_kernels=True)
                flops = 2 * m * n * k
                row = dict(layout=layout, m=m, n=n, k=k, ours_us=t_ours * 1e6, cublas_us=t_cublas * 1e6,
                           ours_tflops=flops / t_ours / 1e12, cublas_tflops=flops / t_cublas / 1e12,
                           ours_over_cublas=t_cublas / t_ours, calc_diff=diff)
                rows.append(row)
                print(f"{layout} {m}x{n}x{k}: ours {row['ours_us']:.1f} us {row['ours_tflops']:.0f} TF | cuBLAS "
                      f"{row['cublas_us']:.1f} us {row['cublas_tflops']:.0f} TF | ours/cuBLAS "
                      f"{row['ours_over_cublas']:.3f} | diff {diff:.1e}", flush=True)
    ratios = [r["ours_over_cublas"] for r in rows]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    clock = _sm_clock()
    print(f"{len(rows)} cases: geomean ours/cuBLAS {geomean:.3f}, min {min(ratios):.3f}; SM clock {clock} MHz")
    if args.json:
        props = torch.cuda.get_device_properties(0)
        with open(args.json, "w") as f:
            json.dump(dict(device=props.name, sm_clock_mhz=clock, deep_gemm=deep_gemm.build_info(),
                           geomean_ours_over_cublas=geomean, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
