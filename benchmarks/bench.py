"""Benchmark gemm_fp8_fp8_bf16_nt against cuBLAS blockwise (torch._scaled_mm) on the same inputs.

Method (../shared/ANCHORS.md): randn inputs quantised 1x128 (LHS) / 128x128 (RHS); kernel time from the torch
profiler, every call preceded by an 8 GB memset (L2 flush + cool-down); mean of --num-tests calls.
TFLOPS = 2mnk / t; GB/s = (mk + nk + 2mn) / t. cuBLAS blockwise is skipped (n/a) when k % 128 != 0, where it
returns wrong results on the test stack.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

import deep_gemm
from deep_gemm.testing import bench_kineto, calc_diff, dequant_per_block, dequant_per_token

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


def dense_shapes():
    shapes = [(m, n, k) for m in (64, 128, 4096) for n, k in DENSE_NK]
    shapes.append((8192, 8192, 8192))
    shapes += [(m, 7168, 576) for m in (64, 128, 4096)]
    return shapes


def cublas_fn(a, sa, b, sb, k):
    if k % 128 != 0 or not hasattr(torch, "_scaled_mm"):
        return None
    sa_cm = sa.t().contiguous().t()
    sb_t = sb.t()

    def fn():
        return torch._scaled_mm(a, b.t(), scale_a=sa_cm, scale_b=sb_t, out_dtype=torch.bfloat16)
    try:
        fn()
        torch.cuda.synchronize()
    except Exception as e:  # blockwise scaling unsupported on this torch/cuBLAS
        print(f"  cuBLAS blockwise unavailable: {e}", file=sys.stderr)
        return None
    return fn


def bench_shape(m, n, k, num_tests):
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, k), device="cuda", dtype=torch.bfloat16)
    a8, sa = deep_gemm.per_token_cast_to_fp8(a)
    b8, sb = deep_gemm.per_block_cast_to_fp8(b)
    sa_tma = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)

    def ours():
        deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa_tma), (b8, sb), out)
    ours()
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
    diff = calc_diff(out, ref)
    del ref
    t = bench_kineto(ours, "fp8_gemm_1d2d", num_tests=num_tests)
    row = dict(m=m, n=n, k=k, us=t * 1e6, tflops=2 * m * n * k / t / 1e12,
               gbps=(m * k + n * k + 2 * m * n) / t / 1e9, diff=diff, cublas_tflops=None, ratio=None)
    fn = cublas_fn(a8, sa, b8, sb, k)
    if fn is not None:
        tc = bench_kineto(fn, None, num_tests=num_tests)
        row["cublas_tflops"] = 2 * m * n * k / tc / 1e12
        row["ratio"] = tc / t
    return row


def select_path(name: str) -> bool:
    """Route calls through one launch path (see deep_gemm.ops.gemm); False when it is not available."""
    from deep_gemm.ops import gemm as gemm_mod
    gemm_mod._torch_ext_state["started"] = True  # no background build while measuring
    if name == "python":
        gemm_mod._fast = None
        return True
    try:
        if name == "cpython_api":
            from deep_gemm import _C as module
        else:
            from deep_gemm.jit import torch_ext
            module = torch_ext.build()
    except Exception as e:
        print(f"  launch path {name} unavailable: {e}", file=sys.stderr)
        return False
    gemm_mod._fast = gemm_mod._init_fast_module(module)
    return True


def _host_time(fn, batches=50, per_batch=200):
    """Host seconds per call: batches short enough that the launch queue never fills (so the GPU never sets the
    pace), with a sync between batches that is not timed."""
    for _ in range(per_batch):
        fn()
    total = 0.0
    for _ in range(batches):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        total += time.perf_counter() - start
    torch.cuda.synchronize()
    return total / (batches * per_batch)


def host_overhead_us():
    """Host microseconds per warmed call on a tiny problem, for each launch path, and for torch._scaled_mm."""
    m = n = k = 128
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda"))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda"))
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    result = {}
    for name in ("python", "cpython_api", "torch_ext"):
        if select_path(name):
            result[name] = _host_time(lambda: deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)) * 1e6
    if hasattr(torch, "_scaled_mm"):
        sb_t = sb.t()
        result["torch._scaled_mm"] = _host_time(
            lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb_t, out_dtype=torch.bfloat16)) * 1e6
    return result


_COMPILE_SNIPPET = """
import sys, time
from deep_gemm import jit
from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.launchers import sm90_fp8_gemm_1d2d
cfg = get_config(GemmProblem(4096, 7168, 7168, 132))
src = sm90_fp8_gemm_1d2d.kernel_source(7168, 7168, cfg)
t = time.perf_counter(); _, cached, secs = jit.build(src, "sm_90a"); total = time.perf_counter() - t
print(cached, secs, total)
"""


def compile_times():
    """(cold compile s, warm disk-cache hit in a fresh process s) for one kernel, NVRTC."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DG_JIT_CACHE_DIR=tmp, DG_JIT_USE_NVCC="0")
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", _COMPILE_SNIPPET], env=env, capture_output=True, text=True,
                                 check=True).stdout.split()
            runs.append((out[0] == "True", float(out[1]), float(out[2])))
    (c0, secs0, _), (c1, _, total1) = runs
    assert not c0 and c1, "expected a cold compile then a cache hit"
    return secs0, total1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="save the rows to this path")
    parser.add_argument("--num-tests", type=int, default=30)
    parser.add_argument("--shapes", nargs="*", help="MxNxK shapes instead of the default dense suite")
    parser.add_argument("--skip-host", action="store_true", help="skip host-overhead and compile-time rows")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else dense_shapes()
    print(f"deep_gemm {deep_gemm.__version__} | torch {torch.__version__} | {torch.cuda.get_device_name()} | "
          f"kineto, 8 GB flush, mean of {args.num_tests}")
    print(f"{'m':>6} {'n':>6} {'k':>6} | {'us':>8} {'TFLOPS':>7} {'GB/s':>6} | {'cuBLAS':>7} {'ratio':>6} | diff")
    rows = []
    for m, n, k in shapes:
        r = bench_shape(m, n, k, args.num_tests)
        rows.append(r)
        cb = f"{r['cublas_tflops']:7.0f} {r['ratio']:5.2f}x" if r["ratio"] else f"{'n/a':>7} {'n/a':>6}"
        print(f"{m:>6} {n:>6} {k:>6} | {r['us']:8.1f} {r['tflops']:7.0f} {r['gbps']:6.0f} | {cb} | {r['diff']:.1e}",
              flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    summary = {}
    if ratios:
        geo = float(torch.tensor(ratios).log().mean().exp())
        summary["geomean_ratio_vs_cublas"] = geo
        print(f"geomean speedup over cuBLAS blockwise ({len(ratios)} shapes with k % 128 == 0): {geo:.3f}x")
    if not args.skip_host:
        start = time.perf_counter()
        select_path("torch_ext")
        print(f"torch launch extension ready in {time.perf_counter() - start:.1f} s (a build when not cached)")
        host = host_overhead_us()
        summary.update(host_us_per_call=host)
        print("host time per warmed call (128^3, batches of 200 calls, sync between batches not timed): "
              + ", ".join(f"{name} {us:.2f} us" for name, us in host.items()))
        cold, hit = compile_times()
        summary.update(cold_compile_s=cold, disk_cache_hit_s=hit)
        print(f"NVRTC cold compile of one kernel: {cold:.2f} s; disk-cache hit in a fresh process: {hit * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows, summary=summary, device=torch.cuda.get_device_name(),
                           torch=torch.__version__), f, indent=1)


if __name__ == "__main__":
    main()
