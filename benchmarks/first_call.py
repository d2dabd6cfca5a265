"""First-call latency after a warm-up: every dense GEMM shape of a model description (one m per shape), called for the
first time in a fresh process whose disk cache was filled by `deep_gemm.warmup` / `python -m deep_gemm compile`.
Reports each first call's wall time (validation, kernel load, plan, launch, synchronised) and checks that nothing was
compiled (`deep_gemm.jit.stats()`).

Usage (GPU machine, after `python -m deep_gemm compile --model deepseek-v3 --tp 8` into the same DG_JIT_CACHE_DIR),
from any directory (it imports only the installed deep_gemm, so run it outside the checkout to measure the install):
    python /path/to/benchmarks/first_call.py --model deepseek-v3 --tp 8 [--m 128] [--json OUT]
The JSON names the device, the deep_gemm build measured (deep_gemm.build_info()) and the cache directory.
"""
import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_call", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="deepseek-v3")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--m", type=int, default=128, help="rows of every call")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--profile", help="also write a cProfile report of the process's first call here (that call "
                        "is then slower; its time is reported as profiled)")
    args = parser.parse_args(argv)
    if args.m <= 0 or args.tp <= 0:
        parser.error("--m and --tp must be positive")

    import torch
    import deep_gemm
    from deep_gemm.warmup import MODELS, model_shapes
    if args.model not in MODELS:
        parser.error(f"--model: unknown model {args.model!r} (known: {', '.join(sorted(MODELS))})")
    if not torch.cuda.is_available():
        print("first_call: needs a CUDA device", file=sys.stderr)
        return 2
    dense = model_shapes(MODELS[args.model], tp=args.tp)["dense"]
    rows = []
    for i, (n, k) in enumerate(dense):
        a = deep_gemm.per_token_cast_to_fp8(torch.randn(args.m, k, device="cuda"))
        b = deep_gemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        out = torch.empty(args.m, n, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        before = deep_gemm.jit.stats()["compiled"]
        profiler = cProfile.Profile() if args.profile and i == 0 else None
        start = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        deep_gemm.gemm_fp8_fp8_bf16_nt(a, b, out)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        if profiler is not None:
            profiler.disable()
            with open(args.profile, "w") as f:
                f.write(f"first call {ms:.2f} ms (profiled)\n")
                pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(50)
        compiled = deep_gemm.jit.stats()["compiled"] - before
        rows.append(dict(m=args.m, n=n, k=k, first_call_ms=round(ms, 3), compiled=compiled,
                         profiled=profiler is not None))
        print(f"m={args.m} n={n} k={k}: first call {ms:.2f} ms, kernels compiled {compiled}")
    times = [r["first_call_ms"] for r in rows if not r["profiled"]]
    summary = dict(shapes=len(rows), max_ms=max(times), median_ms=statistics.median(times),
                   compiled=sum(r["compiled"] for r in rows))
    print(f"{len(rows)} shapes; first call max {summary['max_ms']:.2f} ms, median {summary['median_ms']:.2f} ms; "
          f"compiled {summary['compiled']}")
    if args.json:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        result = dict(model=args.model, tp=args.tp, m=args.m, device=props.name, sms=props.multi_processor_count,
                      deep_gemm=deep_gemm.build_info(), package=os.path.dirname(os.path.abspath(deep_gemm.__file__)),
                      cache_dir=os.environ.get("DG_JIT_CACHE_DIR", os.path.expanduser("~/.deep_gemm")),
                      torch=torch.__version__, python=platform.python_version(), summary=summary, rows=rows)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if any(r["compiled"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
