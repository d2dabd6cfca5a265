"""Batched FP8 BMM (issue 17): deep_gemm.bmm_fp8_fp8_bf16_nt against FlagGems' Hopper Gluon `w8a8_block_fp8_bmm`
(the seed) and BF16 torch.bmm on the dequantised operands, on the same inputs in the same run.

Inputs per shape: x [B, M, K], y [B, N, K] randn, cast to e4m3 with 1x128 per-token scales xs [B, M, ceil(K/128)]
(row-major, as the cast produces them) and 128x128 block scales ys [B, ceil(N/128), ceil(K/128)]; out [B, M, N]
bf16. Reference: float32 bmm of the dequantised operands (no TF32); calc_diff of each library's output against it
(ours must stay below 1e-5; its output is filled with NaN before the checked call). torch.bmm runs on BF16 copies
of the dequantised operands, made outside the timed region (torch has no batched blockwise FP8 product).
Times: kineto, an 8 GB memset before every call (L2 flush), mean of --num-tests calls; a library's time is the sum
of every kernel its call launches (names recorded), memsets excepted: they cannot be told from the flush (cuBLAS
launches a small one at large shapes, so torch.bmm's figure is, if anything, flattered). TB/s = bytes of x + xs +
y + ys + out per second (the FP8 problem's traffic, same figure for every library); ratios > 1 mean ours is faster.

The seed is third-party code (FlagGems' BMM kernel), never committed: it lives in a git-ignored folder (--seed-dir,
one module named SEED_MODULE); its Triton kernels compile on first use, or come from a carried cache: point
TRITON_CACHE_DIR at it (default here: <seed-dir>/triton_cache when it exists and the variable is unset). Without
an importable seed, ours and torch.bmm are measured alone.

Usage: python benchmarks/bmm.py [--seed-dir DIR] [--shapes BxMxNxK ...] [--smoke] [--json PATH | --tag TAG]
       [--num-tests N] [--no-host]      (or python -m benchmarks.bmm; --help works without a GPU)
Where deep_gemm is installed outside the checkout (e.g. the peer harness's /tmp/peer/ours), keep the checkout's own
source tree from shadowing it: PYTHONSAFEPATH=1 PYTHONPATH=<install dir>:$PWD python -m benchmarks.bmm ...
"""
import argparse
import hashlib
import importlib.util
import json
import math
import os
import sys

import torch

import deep_gemm
from benchmarks.bench import Results, _host_times, default_result_path, gpu_state, host_overhead_us, provenance
from deep_gemm.testing import _silenced, bench_kineto, calc_diff, count_bytes

MLA_NK = [(512, 128), (128, 512)]  # DeepSeek-V3 MLA's absorbed products (B = heads)
MLA_M = [1, 4, 16, 64, 128, 512, 2048, 4096]
LARGE = [(8, 4096, 4096, 4096), (4, 2048, 7168, 2048)]
SMOKE = [(16, 1, 512, 128), (128, 16, 128, 512), (16, 2048, 512, 128), (4, 2048, 7168, 2048)]
HOST_SHAPE = (16, 1, 512, 128)
SEED_MODULE = "w8a8_block_fp8_bmm_seed"  # the module's name is part of Triton's cache key: import it by this name
SEED_KERNEL = "w8a8_block_fp8_bmm_kernel"
OURS_KERNEL = "fp8_gemm"
MAX_DIFF = 1e-5
# markdown column -> (row field, format)
COLUMNS = {"ours us": ("ours_us", ".1f"), "seed us": ("seed_us", ".1f"), "torch.bmm us": ("torch_us", ".1f"),
           "ours TB/s": ("ours_tbps", ".2f"), "ours TFLOPS": ("ours_tflops", ".0f"), "x seed": ("vs_seed", ".2f"),
           "x torch": ("vs_torch", ".2f"), "diff ours": ("ours_diff", ".1e"), "diff seed": ("seed_diff", ".1e"),
           "diff torch": ("torch_diff", ".1e")}


def issue_shapes():
    """(B, M, N, K): B in {16, 128} x (N, K) in MLA_NK x M in MLA_M, then the two large batches (34 shapes)."""
    return [(b, m, n, k) for b in (16, 128) for n, k in MLA_NK for m in MLA_M] + LARGE


def is_mla(b, m, n, k):
    return b in (16, 128) and (n, k) in MLA_NK


def load_seed(seed_dir):
    """(module, None) or (None, why not)."""
    path = os.path.join(os.path.abspath(seed_dir), SEED_MODULE + ".py")
    if not os.path.isfile(path):
        return None, f"no {path} (the third-party seed is not in the repository: put it there)"
    try:
        spec = importlib.util.spec_from_file_location(SEED_MODULE, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[SEED_MODULE] = module  # Triton resolves the kernel's globals through its module
        spec.loader.exec_module(module)
        return module, None
    except Exception as e:  # no Triton / Gluon API drift: bench the others
        return None, f"{type(e).__name__}: {e}"


def make_inputs(b, m, n, k, device="cuda"):
    """e4m3 x, xs [B, M, ceil(K/128)], y, ys [B, ceil(N/128), ceil(K/128)] from randn."""
    x8, xs = deep_gemm.per_token_cast_to_fp8(torch.randn((b * m, k), device=device, dtype=torch.bfloat16))
    y = torch.randn((b, n, k), device=device, dtype=torch.bfloat16)
    if n % 128 == 0:  # 128-row blocks never straddle two batches: one cast of the stacked rows
        y8, ys = deep_gemm.per_block_cast_to_fp8(y.view(b * n, k))
    else:
        y8, ys = (torch.stack(t) for t in zip(*(deep_gemm.per_block_cast_to_fp8(y[i]) for i in range(b))))
    return x8.view(b, m, k), xs.view(b, m, -1), y8.view(b, n, k), ys.view(b, -1, ys.shape[-1])


def dequant(x8, xs, y8, ys):
    """float32 x [B, M, K] and y [B, N, K] (scales broadcast over their 1x128 / 128x128 groups)."""
    n, k = y8.shape[1:]
    xd = x8.float() * xs.repeat_interleave(128, dim=2)[..., :k]
    yd = y8.float() * ys.repeat_interleave(128, dim=1)[:, :n].repeat_interleave(128, dim=2)[..., :k]
    return xd, yd


def kernel_names(fn):
    """Names of the GPU kernels one call of `fn` launches (kineto)."""
    with _silenced(True), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages()
                   if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA})


def measure(name, fn, out, ref, num_tests, expect=None):
    """Check `fn` (writing `out`) against `ref` on a NaN-filled output, then time it; a dict of `name`_ fields."""
    out.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    nan = bool(out.isnan().any())
    kernels = kernel_names(fn)
    if expect is not None and not any(expect in n for n in kernels):
        print(f"  warning: {name} launched no kernel named *{expect}*: {kernels}", file=sys.stderr)
    t = bench_kineto(fn, None, num_tests=num_tests, suppress_kineto_output=True)
    return {f"{name}_us": t * 1e6, f"{name}_diff": None if nan else calc_diff(out, ref), f"{name}_nan": nan,
            f"{name}_kernels": kernels}


def bench_case(b, m, n, k, seed, num_tests):
    x8, xs, y8, ys = make_inputs(b, m, n, k)
    xd, yd = dequant(x8, xs, y8, ys)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = torch.bmm(xd, yd.transpose(1, 2))
    xb, yb = xd.bfloat16(), yd.bfloat16()
    del xd, yd
    out = torch.empty((b, m, n), device="cuda", dtype=torch.bfloat16)
    row = dict(b=b, m=m, n=n, k=k, mla=is_mla(b, m, n, k), flops=2 * b * m * n * k,
               bytes=count_bytes(x8, xs, y8, ys, out))
    row.update(measure("ours", lambda: deep_gemm.bmm_fp8_fp8_bf16_nt((x8, xs), (y8, ys), out), out, ref, num_tests,
                       OURS_KERNEL))
    row.update(measure("torch", lambda: torch.bmm(xb, yb.transpose(1, 2), out=out), out, ref, num_tests))
    if seed is not None:
        try:
            row.update(measure("seed", lambda: seed.w8a8_block_fp8_bmm(x8, y8, xs, ys, [128, 128], z=out), out, ref,
                               num_tests, SEED_KERNEL))
            row["seed_config"] = str(getattr(seed.w8a8_block_fp8_bmm_kernel, "best_config", None))
        except Exception as e:  # the seed's own failure is recorded, not fatal
            row["seed_error"] = f"{type(e).__name__}: {e}"[:500]
    t = row["ours_us"] * 1e-6
    row.update(ours_tbps=row["bytes"] / t / 1e12, ours_tflops=row["flops"] / t / 1e12,
               vs_torch=row["torch_us"] / row["ours_us"])
    if "seed_us" in row:
        row.update(seed_tbps=row["bytes"] / row["seed_us"] / 1e6, vs_seed=row["seed_us"] / row["ours_us"])
    return row


def host_and_graph(seed):
    """Host microseconds per warmed call (median of 10,000 calls) of ours and the seed at HOST_SHAPE, bench.py's
    host table of every public GEMM in the same run (the dense GEMM and torch._scaled_mm there tell how fast this
    host is today), and whether a CUDA graph of ours replays to the eager output bitwise."""
    b, m, n, k = HOST_SHAPE
    x8, xs, y8, ys = make_inputs(b, m, n, k)
    out = torch.empty((b, m, n), device="cuda", dtype=torch.bfloat16)
    calls = dict(ours=lambda: deep_gemm.bmm_fp8_fp8_bf16_nt((x8, xs), (y8, ys), out))
    if seed is not None:
        calls["seed"] = lambda: seed.w8a8_block_fp8_bmm(x8, y8, xs, ys, [128, 128], z=out)
    res = dict(shape=HOST_SHAPE)
    for name, fn in calls.items():
        t = _host_times(fn) * 1e6
        res[name] = dict(median_us=float(t.median()), p99_us=float(t.quantile(0.99)), mean_us=float(t.mean()))
    res["all_gemms"] = host_overhead_us()
    calls["ours"]()
    eager = out.clone()
    out.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls["ours"]()
    graph.replay()
    torch.cuda.synchronize()
    res["ours_graph_bitwise"] = bool(torch.equal(out.view(torch.int16), eager.view(torch.int16)))
    return res


def floors(num_tests):
    """What this method (kineto, flush before every call) gives kernels that do (almost) nothing but move the MLA
    weights' 8 MB: a one-element add, a read of 8 MB (float32 sum) and a copy of 8 MB (read + write), in us and TB/s
    of the bytes moved. The floor for the B = 128 decode shapes."""
    one = torch.zeros(1, device="cuda")
    src = torch.randn(2 << 20, device="cuda")  # 8 MiB
    dst = torch.empty_like(src)
    res = {}
    for name, fn, moved in (("one_element_add", lambda: one.add_(1), 4), ("read_8MiB", lambda: src.sum(), 8 << 20),
                            ("copy_8MiB", lambda: dst.copy_(src), 16 << 20)):
        t = bench_kineto(fn, None, num_tests=num_tests, suppress_kineto_output=True)
        res[name] = dict(us=t * 1e6, tbps=moved / t / 1e12)
    return res


FLUSH_STUDY = [(128, 1, 512, 128), (128, 16, 512, 128), (128, 1, 128, 512), (128, 16, 128, 512), (16, 1, 512, 128)]


class Flushes:
    """The two ways of emptying L2 before each timed call: the benchmarks' 8 GB memset ("write", which leaves L2 full
    of dirty lines: a kernel's first reads evict them, i.e. write them back to HBM first), or an 8 GB read ("read",
    L2 left clean)."""

    def __init__(self):
        self._big = torch.zeros((8 << 30) // 4, dtype=torch.int32, device="cuda")
        self._read = lambda: self._big.amax()  # a reduction kernel: not matched by the kernel names timed here

    def time(self, fn, kernel, flush, num_tests):
        """Mean seconds of `kernel` per call of `fn` after the `flush` ("write" or "read") flush."""
        kwargs = dict(flush_l2=True) if flush == "write" else dict(flush_l2=False, barrier=self._read)
        return bench_kineto(fn, kernel, num_tests=num_tests, suppress_kineto_output=True, **kwargs)


def flush_study(num_tests):
    """How much of a decode call's time the flush method itself sets: ours and torch's 8 MiB copy timed after each of
    the two Flushes. Same kernels, same inputs, one process."""
    flushes = Flushes()
    src = torch.randn(2 << 20, device="cuda")
    dst = torch.empty_like(src)
    rows = []
    cases = [("copy_8MiB", lambda: dst.copy_(src), "Memcpy", 16 << 20)]  # a DtoD memcpy
    for b, m, n, k in FLUSH_STUDY:
        x8, xs, y8, ys = make_inputs(b, m, n, k)
        out = torch.empty((b, m, n), device="cuda", dtype=torch.bfloat16)
        fn = lambda x8=x8, xs=xs, y8=y8, ys=ys, out=out: deep_gemm.bmm_fp8_fp8_bf16_nt((x8, xs), (y8, ys), out)  # noqa
        cases.append((f"ours {b}x{m}x{n}x{k}", fn, OURS_KERNEL, count_bytes(x8, xs, y8, ys, out)))
    for name, fn, kernel, moved in cases:
        row = dict(case=name, bytes=moved)
        for flush in ("write", "read"):
            t = flushes.time(fn, kernel, flush, num_tests)
            row[f"{flush}_us"], row[f"{flush}_tbps"] = t * 1e6, moved / t / 1e12
        rows.append(row)
        print(f"| {name} | {row['write_us']:.2f} | {row['write_tbps']:.2f} | {row['read_us']:.2f} | "
              f"{row['read_tbps']:.2f} |", flush=True)
    return rows


def _fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows):
    label = lambda r: f"{r['b']}x{r['m']}x{r['n']}x{r['k']}"  # noqa: E731
    seed_rows = [r for r in rows if "vs_seed" in r]
    low_m = [r for r in rows if r["b"] == 128 and r["m"] <= 16]
    mla = [r for r in rows if r["mla"]]
    s = dict(shapes=len(rows), ours_max_diff=max((r["ours_diff"] for r in rows if not r["ours_nan"]), default=None),
             ours_bad_diff=[label(r) for r in rows if r["ours_nan"] or not r["ours_diff"] < MAX_DIFF])
    if seed_rows:
        worst = min(seed_rows, key=lambda r: r["vs_seed"])
        s.update(geomean_vs_seed=geomean([r["vs_seed"] for r in seed_rows]), min_vs_seed=worst["vs_seed"],
                 min_vs_seed_shape=label(worst), seed_shapes=len(seed_rows))
    if low_m:
        s.update(min_tbps_b128_m16=min(r["ours_tbps"] for r in low_m))
    if mla:
        worst = min(mla, key=lambda r: r["vs_torch"])
        s.update(min_vs_torch_mla=worst["vs_torch"], min_vs_torch_mla_shape=label(worst))
    return s


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bmm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed-dir", default=".peer/seed_bmm", help="folder of the reconstructed seed module")
    parser.add_argument("--shapes", nargs="*", help="BxMxNxK shapes instead of the issue's 34")
    parser.add_argument("--smoke", action="store_true", help=f"only {len(SMOKE)} shapes")
    parser.add_argument("--json", help="result path (default: benchmarks/results/<date>_<commit>_<device>_bmm.json)")
    parser.add_argument("--tag", default="bmm", help="suffix of the default result name")
    parser.add_argument("--num-tests", type=int, default=30)
    parser.add_argument("--no-host", action="store_true", help="skip the host-time and CUDA-graph rows")
    parser.add_argument("--flush-study", action="store_true",
                        help="only: decode shapes and an 8 MiB copy after a write flush vs a read flush (flush_study)")
    args = parser.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else None
        if shapes and any(len(s) != 4 or min(s) <= 0 for s in shapes):
            raise ValueError
    except ValueError:
        parser.error("--shapes: expected BxMxNxK with positive integers, e.g. 128x16x512x128")
    args.shapes = shapes or (SMOKE if args.smoke else issue_shapes())
    return args


def main(argv=None):
    args = parse_args(argv)
    if not hasattr(deep_gemm, "bmm_fp8_fp8_bf16_nt"):
        sys.exit("bmm.py: this deep_gemm has no bmm_fp8_fp8_bf16_nt: nothing to benchmark")
    if not torch.cuda.is_available():
        sys.exit("bmm.py: needs a CUDA device")
    if args.flush_study:
        print(f"{torch.cuda.get_device_name()} | GPU {gpu_state()} | kineto, mean of {args.num_tests}\n"
              "| case | write-flush us | TB/s | read-flush us | TB/s |\n|---|---|---|---|---|")
        rows = flush_study(args.num_tests)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(flush_study=rows, gpu_end=gpu_state(), provenance=provenance()), f, indent=1)
        return
    cache = os.path.join(os.path.abspath(args.seed_dir), "triton_cache")
    if "TRITON_CACHE_DIR" not in os.environ and os.path.isdir(cache):
        os.environ["TRITON_CACHE_DIR"] = cache
    seed, why = load_seed(args.seed_dir)
    prov = provenance()
    prov["seed"] = dict(dir=os.path.abspath(args.seed_dir), error=why, triton_cache=os.environ.get("TRITON_CACHE_DIR"))
    if seed is not None:
        prov["seed"].update(triton=seed.triton.__version__,
                            sha256=hashlib.sha256(open(seed.__file__, "rb").read()).hexdigest())
    else:
        print(f"seed not benchmarked ({why}): ours and torch.bmm only")
    results = Results(args.json or default_result_path(prov, args.tag), prov)
    results.data["bmm"] = []
    print(f"deep_gemm {deep_gemm.__version__} | torch {torch.__version__} | {prov['device']} | commit "
          f"{prov['commit']}{' (dirty)' if prov['dirty'] else ''} | kineto, 8 GB flush, mean of {args.num_tests} | "
          f"-> {results.path}\n")
    print("| B | M | N | K | " + " | ".join(COLUMNS) + " |\n|" + "---|" * (4 + len(COLUMNS)))
    for b, m, n, k in args.shapes:
        r = bench_case(b, m, n, k, seed, args.num_tests)
        results.add("bmm", r)
        bad = " FAIL" if r["ours_nan"] or not r["ours_diff"] < MAX_DIFF else ""
        cells = [b, m, n, k] + [_fmt(r.get(key), spec) for key, spec in COLUMNS.values()]
        cells[-3] += bad
        print("| " + " | ".join(map(str, cells)) + " |" + (f" seed: {r['seed_error']}" if "seed_error" in r else ""),
              flush=True)
    s = summarize(results.data["bmm"])
    results.summarize(**s)
    print(f"\n{s['shapes']} shapes; ours max diff {_fmt(s['ours_max_diff'], '.1e')}"
          + (f", above {MAX_DIFF:g} at {s['ours_bad_diff']}" if s["ours_bad_diff"] else ""))
    if "geomean_vs_seed" in s:
        print(f"ours vs seed over {s['seed_shapes']} shapes: geomean {s['geomean_vs_seed']:.3f}x (target >= 1.3), "
              f"min {s['min_vs_seed']:.3f}x at {s['min_vs_seed_shape']} (target >= 1.0)")
    if "min_tbps_b128_m16" in s:
        print(f"B = 128, M <= 16: min {s['min_tbps_b128_m16']:.2f} TB/s (target >= 2.5)")
    if "min_vs_torch_mla" in s:
        print(f"ours vs BF16 torch.bmm over MLA shapes: min {s['min_vs_torch_mla']:.3f}x at "
              f"{s['min_vs_torch_mla_shape']} (target >= 1.3)")
    floor = floors(args.num_tests)
    results.summarize(floors=floor)
    print("floors (same method): " + ", ".join(f"{name} {v['us']:.2f} us ({v['tbps']:.2f} TB/s)"
                                               for name, v in floor.items()))
    if not args.no_host:
        host = host_and_graph(seed)
        results.summarize(host=host)
        print(f"host time per warmed call at B x M x N x K = {'x'.join(map(str, HOST_SHAPE))}: "
              + ", ".join(f"{name} median {host[name]['median_us']:.2f} us (p99 {host[name]['p99_us']:.2f})"
                          for name in ("ours", "seed") if name in host)
              + f" (target <= 6 us); CUDA graph of ours replays bitwise: {host['ours_graph_bitwise']}")
        print("host table (benchmarks/bench.py, 128^3 calls, same run): "
              + ", ".join(f"{name} {v['median_us']:.2f} us" for name, v in host["all_gemms"].items()))
    results.summarize(gpu_end=gpu_state())
    print(f"GPU at start {prov['gpu_start']}, at end {results.data['summary']['gpu_end']}")


if __name__ == "__main__":
    main()
