"""Command line: `python -m deep_gemm compile ...` fills the kernel cache ahead of time (no GPU needed)."""
import argparse
import itertools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import List, Tuple

from .envs import read_env
from .heuristics import GemmProblem, KernelType, get_config
from .heuristics.sm90 import kernel_key, sm90_kernel_variants
from .jit.compiler import SUPPORTED_ARCHS


def _read_shapes(path: str) -> List[Tuple[int, int, int]]:
    shapes = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].replace(",", " ").split()
            if not line:
                continue
            if len(line) != 3:
                raise SystemExit(f"{path}:{lineno}: expected 'm n k', got {' '.join(line)!r}")
            shapes.append(tuple(int(v) for v in line))
    return shapes


def _build_one(item):
    from . import jit
    from .launchers import sm90_fp8_gemm_1d2d
    (m, n, k), config, arch, kind = item
    source = sm90_fp8_gemm_1d2d.kernel_source(n, k, config, kind)
    start = time.perf_counter()
    _, cached, _ = jit.build(source, arch)
    return (m, n, k), config, cached, time.perf_counter() - start


def cmd_compile(args) -> int:
    if args.arch != "sm_90a":
        print(f"no kernels for {args.arch} yet; supported: sm_90a", file=sys.stderr)
        return 2
    shapes = list(itertools.product(args.m or [], args.n or [], args.k or []))
    for path in args.shapes or []:
        shapes += _read_shapes(path)
    if not shapes:
        print("nothing to compile: give --m/--n/--k lists and/or --shapes FILE", file=sys.stderr)
        return 2
    kind = _KINDS[args.kind]
    if kind == KernelType.M_GROUPED_MASKED and args.all_m:
        print("--all-m does not apply to --kind masked: its kernel depends on expected_m (--m) and --groups",
              file=sys.stderr)
        return 2
    if args.groups <= 0:
        print("--groups must be positive", file=sys.stderr)
        return 2
    groups = args.groups if kind == KernelType.M_GROUPED_MASKED else 1
    work, seen = [], set()
    for m, n, k in shapes:
        if min(m, n, k) <= 0:
            print(f"skip m={m} n={n} k={k}: empty problems launch no kernel")
            continue
        configs = [get_config(GemmProblem(m, n, k, args.num_sms, args.arch, kind, groups))]
        if args.all_m:
            configs += sm90_kernel_variants(n, k, args.num_sms, kind)
        for i, config in enumerate(configs):
            key = (n, k, kernel_key(config))
            if key in seen:
                if i == 0:
                    print(f"m={m} n={n} k={k}: shares the kernel of an earlier shape")
                continue
            seen.add(key)
            work.append(((m, n, k), config, args.arch, kind))
    start = time.perf_counter()
    failures = 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(_build_one, w) for w in work]
        for w, fut in zip(work, futures):
            (m, n, k), config = w[0], w[1]
            try:
                _, _, cached, secs = fut.result()
            except Exception as e:  # report and continue with the others
                failures += 1
                print(f"FAILED m={m} n={n} k={k}: {e}", file=sys.stderr)
                continue
            print(f"{'cached ' if cached else 'built  '} m={m} n={n} k={k} block={config.block_m}x{config.block_n} "
                  f"stages={config.num_stages} multicast={config.num_multicast}{'A' if config.multicast_on_a else 'B'} "
                  f"sms={config.num_sms} in {secs:.2f} s")
    print(f"{len(work) - failures} kernels ready, {failures} failed, {time.perf_counter() - start:.1f} s total "
          f"(cache: {read_env().jit_cache_dir})")
    return 1 if failures else 0


_KINDS = {"dense": KernelType.NORMAL, "contiguous": KernelType.M_GROUPED_CONTIGUOUS,
          "masked": KernelType.M_GROUPED_MASKED}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deep_gemm")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="compile kernels into the cache ahead of time (no GPU needed)")
    c.add_argument("--arch", default="sm_90a", choices=SUPPORTED_ARCHS)
    c.add_argument("--num-sms", type=int, default=132, help="SM count of the target GPU (H100/H200 SXM: 132)")
    c.add_argument("--m", type=int, nargs="*", help="m values (combined with every --n and --k)")
    c.add_argument("--n", type=int, nargs="*")
    c.add_argument("--k", type=int, nargs="*")
    c.add_argument("--shapes", action="append", help="file of 'm n k' lines (# comments allowed)")
    c.add_argument("--all-m", action="store_true",
                   help="also every kernel variant any m can pick for each (n, k) (what the first call compiles)")
    c.add_argument("--kind", default="dense", choices=sorted(_KINDS),
                   help="dense GEMM, or a grouped one: contiguous (m = total rows of all experts) or masked "
                        "(m = expected_m per group, with --groups)")
    c.add_argument("--groups", type=int, default=1, help="number of groups (experts) of a masked GEMM")
    c.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiler processes")
    args = parser.parse_args(argv)
    if args.num_sms <= 0:
        parser.error("--num-sms must be positive")
    return cmd_compile(args)


if __name__ == "__main__":
    sys.exit(main())
