"""Stream-K before/after, same process: each shape is timed with the last partial wave split along K (DG_STREAM_K=1,
the default) and computed whole (DG_STREAM_K=0), alternating on/off/on/off on the same inputs (kineto kernel time,
8 GB flush before every call, mean of --num-tests; benchmarks/bench.py's method). Prints one line per shape and
writes --json with the SM clock and power after each measurement.

    python -m benchmarks.stream_k --json stream_k.json
"""
import argparse
import json
import os

import torch

import deep_gemm
from deep_gemm import runtime
from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.heuristics.common import ceil_div
from deep_gemm.heuristics.sm90 import stream_k_capable, stream_k_split
from deep_gemm.testing import bench_kineto, calc_diff, dequant_per_block, dequant_per_token

from .bench import contiguous_m_indices, gpu_state

# (kind, groups, rows per group, n, k): DeepGEMM's dense test shapes whose picks leave a partial last wave, two more
# just above a wave boundary, and contiguous grouped ones.
SHAPES = [("dense", 1, 4096, 2112, 7168), ("dense", 1, 4096, 24576, 1536), ("dense", 1, 4200, 2112, 2048),
          ("dense", 1, 4200, 2112, 7168), ("dense", 1, 5000, 2112, 1024),
          ("contiguous", 5, 384, 7168, 2048), ("contiguous", 3, 640, 7168, 2048), ("contiguous", 5, 384, 7168, 7168)]


def split_of(kind, groups, m, n, k):
    kernel_kind = KernelType.NORMAL if kind == "dense" else KernelType.M_GROUPED_CONTIGUOUS
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = m if kind == "dense" else groups * m
    config = get_config(GemmProblem(rows, n, k, sms, "sm_90a", kernel_kind, groups))
    tiles = ceil_div(rows, config.block_m) * ceil_div(n, config.block_n)
    split = stream_k_split(tiles, ceil_div(k, 128), sms, config.num_stages) if stream_k_capable(config, kernel_kind) \
        else None
    return config, tiles, split


def make_call(kind, groups, m, n, k):
    """(call, FP32 reference, out, useful FLOPs)."""
    rows = m if kind == "dense" else groups * m
    a = torch.randn((rows, k), device="cuda", dtype=torch.bfloat16)
    a8, sa = deep_gemm.per_token_cast_to_fp8(a)
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((rows, n), device="cuda", dtype=torch.bfloat16)
    if kind == "dense":
        b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
        ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
        return (lambda: deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)), ref, out, 2 * rows * n * k
    b = torch.randn((groups, n, k), device="cuda", dtype=torch.bfloat16)
    casts = [deep_gemm.per_block_cast_to_fp8(b[g]) for g in range(groups)]
    b8 = torch.stack([c[0] for c in casts])
    sb = torch.stack([c[1] for c in casts])
    m_indices = contiguous_m_indices([m] * groups)
    ref = torch.empty((rows, n), device="cuda")
    a_deq = dequant_per_token(a8, sa)
    for g in range(groups):
        ref[g * m:(g + 1) * m] = a_deq[g * m:(g + 1) * m] @ dequant_per_block(b8[g], sb[g]).t()

    def call():
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a8, sa), (b8, sb), out, m_indices)
    return call, ref, out, 2 * rows * n * k


def timed(call, stream_k: bool, num_tests: int) -> float:
    os.environ["DG_STREAM_K"] = "1" if stream_k else "0"
    runtime.clear_plans()
    call()
    return bench_kineto(call, "fp8_gemm_1d2d", num_tests=num_tests)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-tests", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for kind, groups, m, n, k in SHAPES:
        config, tiles, split = split_of(kind, groups, m, n, k)
        call, ref, out, flops = make_call(kind, groups, m, n, k)
        times = {True: [], False: []}
        diffs = {}
        for stream_k in (True, False, True, False):
            times[stream_k].append(timed(call, stream_k, args.num_tests))
            out.zero_()
            call()
            diffs[stream_k] = calc_diff(out, ref)
        on, off = (sum(times[x]) / len(times[x]) for x in (True, False))
        state = gpu_state()
        row = dict(kind=kind, groups=groups, m=m, n=n, k=k, tile=f"{config.block_m}x{config.block_n}",
                   stages=config.num_stages, multicast=config.num_multicast, tiles=tiles,
                   waves=round(tiles / torch.cuda.get_device_properties(0).multi_processor_count, 2),
                   split=split, us_on=on * 1e6, us_off=off * 1e6, tflops_on=flops / on / 1e12,
                   tflops_off=flops / off / 1e12, speedup=off / on, diff_on=diffs[True], diff_off=diffs[False],
                   times_on=times[True], times_off=times[False], gpu=state)
        rows.append(row)
        print(f"{kind} {groups}x{m}x{n}x{k} {row['tile']} tiles={tiles} ({row['waves']} waves) split={split} | "
              f"on {row['us_on']:.1f} us {row['tflops_on']:.0f} TF | off {row['us_off']:.1f} us "
              f"{row['tflops_off']:.0f} TF | on/off speed {row['speedup']:.3f} | diff {diffs[True]:.1e}/"
              f"{diffs[False]:.1e} | {state}", flush=True)
    os.environ.pop("DG_STREAM_K", None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
