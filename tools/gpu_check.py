"""The GPU check of a checkout (GPU machine, from the repo root after `source tools/use_checkout.sh`): the GPU tests
with each compiler (after an ahead-of-time compile of the benchmark's shapes), compute-sanitizer over every kernel
family, and the benchmark. Logs go to OUTDIR; one summary line per step is printed; exit status 1 if any failed.

Usage: python -m tools.gpu_check OUTDIR [--stages tests sanitizer bench] [--compilers nvrtc nvcc]
                                 [--families NAME ...] [--sanitizer-tools memcheck racecheck synccheck]
                                 [--bench-args "--suite dense --skip-host"]
       python -m tools.gpu_check --driver [--families NAME ...]
  --driver: the process compute-sanitizer runs: every variant the registry serves on sm_90a
  (deep_gemm.runtime.variants_on: the GEMMs, psum and bmm included, the scale-layout transforms, the FP8 casts) at
  representative and edge shapes, each call checked (guard bands and values) and run twice (cold and warm launch
  paths), plus hostile inputs whose values are undefined but must stay memory-safe (broken contiguous indices,
  out-of-range masked_m). The sanitizer step also runs three forced dense configs (multicast, straddling, ragged k)
  through tools/profile_case.py under memcheck and synccheck. Host API errors are not reported: cuda-bindings probes
  driver entry points that older drivers lack (harmless CUDA_ERROR_INVALID_VALUE).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

from deep_gemm.runtime import VARIANTS, variants_on
from tests.gemm_cases import (SPEC_BY_NAME, build_cast, build_mqa_logits, build_pack, build_pack_k_grouped,
                              build_paged_mqa_logits, build_psum)

STAGES = ("tests", "sanitizer", "bench")
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")
# The variants the driver runs (tests/tools/test_variant_lists.py checks that each has problems and a builder).
FAMILIES = variants_on("sm_90a")
# Problems per variant; a GEMM with a tests/gemm_cases.py SPECS entry and none listed here runs its spec's small one.
_LISTED = {
    "dense": [dict(m=1024, n=2112, k=7168), dict(m=1, n=7, k=16), dict(m=129, n=4100, k=200),
                             dict(m=300, n=576, k=1000)],
    "contiguous": [dict(sizes=[700, 0, 300, 1], n=2112, k=576), dict(sizes=[1], n=7, k=16),
                   dict(sizes=[0, 0], n=256, k=128)],
    "masked": [
        dict(groups=4, m_max=192, n=256, k=576, masked=[0, 192, 57, 300], expected_m=96),
        dict(groups=2, m_max=1, n=8, k=16, masked=[1, 0], expected_m=0),
        dict(groups=8, m_max=256, n=2112, k=2048, masked=[256] * 8, expected_m=256)],
    "psum": [dict(sizes=[100, 0, 300, 128, 1], n=2112, k=576, expected_m=0),
             dict(sizes=[3], n=8, k=16, expected_m=64), dict(sizes=[0, 0, 77], n=256, k=128, expected_m=4096)],
    "bmm": [dict(batches=5, m=17, n=1000, k=576, sa_form="sliced"),
            dict(batches=128, m=1, n=512, k=128, sa_form="rows"),
            dict(batches=2, m=300, n=8, k=16, sa_form="mn_major")],
    "wgrad": [dict(m=2048, n=2112, k=2048, sa_form="rows", sb_form="rows"),
              dict(m=1, n=1, k=16, sa_form="transposed", sb_form="col_major"),
              dict(m=300, n=100, k=1000, sa_form="rows", sb_form="transposed")],
    "k_grouped": [dict(m=512, n=768, ks=[1024, 0, 512, 2048]), dict(m=129, n=100, ks=[256, 0, 1040, 16]),
                  dict(m=7, n=9, ks=[16 * (i % 5) for i in range(100)])],
    "pack_ue8m0": [dict(shape=(4097, 57), transposed=False), dict(shape=(2, 129, 7), transposed=True),
                   dict(shape=(3, 1), transposed=False)],
    "pack_ue8m0_k_grouped": [dict(ks=[512, 1024, 0, 128], gran_k=128, mn=4100), dict(ks=[64, 96], gran_k=32, mn=7)],
    "mqa_logits": [dict(seq_len=67, seq_len_kv=300, heads=64, head_dim=128),
                   dict(seq_len=1, seq_len_kv=1, heads=32, head_dim=32)],
    "paged_mqa_logits": [dict(batch=9, next_n=2, heads=64, max_blocks=7), dict(batch=3, next_n=1, heads=32,
                                                                             max_blocks=1)],
    # The casts: ragged and unaligned columns (narrow vectors), one row, MN-major scales.
    "fp8_cast_per_token": [dict(kind="per_token", rows=4097, cols=7168, dtype="bf16", ue8m0=False, mn_major=True),
                           dict(kind="per_token", rows=3, cols=200, dtype="fp32", ue8m0=True),
                           dict(kind="per_token", rows=1, cols=129, dtype="bf16", ue8m0=False)],
    "fp8_cast_per_block": [dict(kind="per_block", rows=300, cols=7168, dtype="bf16", ue8m0=True),
                           dict(kind="per_block", rows=129, cols=202, dtype="fp32", ue8m0=False)],
    "fp8_cast_per_channel": [dict(kind="per_channel", rows=512, cols=2112, dtype="bf16", ue8m0=False),
                             dict(kind="per_channel", rows=128, cols=133, dtype="fp32", ue8m0=True)],
}
PROBLEMS = dict({v.name: [SPEC_BY_NAME[v.public_name].small] for v in VARIANTS
                 if v.name in FAMILIES and v.public_name in SPEC_BY_NAME}, **_LISTED)
# How a problem of each variant becomes a case: the GEMMs with a torch custom op through tests/gemm_cases.py SPECS
# (by public name), the others through their own builders.
BUILDERS = dict({v.name: SPEC_BY_NAME[v.public_name].build for v in VARIANTS if v.public_name in SPEC_BY_NAME},
                psum=build_psum, pack_ue8m0=build_pack, pack_ue8m0_k_grouped=build_pack_k_grouped,
                mqa_logits=build_mqa_logits, paged_mqa_logits=build_paged_mqa_logits, fp8_cast_per_token=build_cast,
                fp8_cast_per_block=build_cast, fp8_cast_per_channel=build_cast)
# Forced dense configs for the sanitizer: 2-CTA multicast, a tile straddling two RHS scale blocks, ragged k.
FORCED = [("1024x4096x1024", "256x128:mcA"), ("130x2104x576", "128x192"), ("65x2104x208", "64x112")]


def _hostile(name: str, case) -> None:
    """Inputs with undefined values but defined memory behaviour: run, then check only the guard bands."""
    import torch
    if name == "contiguous":
        idx, groups = case.args[3], case.args[1][0].shape[0]
        idx.copy_(torch.randint(-5, groups + 5, idx.shape, device=idx.device, dtype=torch.int32))
    elif name == "masked":
        mm = case.args[3]
        mm.copy_(torch.tensor([-7, 1 << 30] * (mm.numel() // 2) + [5] * (mm.numel() % 2), dtype=torch.int32))
    else:
        return
    case.guarded.reset()
    case.run()
    torch.cuda.synchronize()
    case.guarded.check_guards()
    print("  hostile inputs: guards ok", flush=True)


def driver(families) -> None:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in families:
        for i, problem in enumerate(PROBLEMS[name]):
            case = BUILDERS[name](problem, torch.device("cuda"), i)
            for _attempt in ("cold", "warm"):
                case.reset()
                case.run()
                case.check()
            print(f"{name}: {case.desc}: ok", flush=True)
            _hostile(name, case)
    print("all families done", flush=True)


def _step(title: str, cmd, log: str, timeout: int, env=None) -> int:
    """Run one step with its output in `log`; print a summary line with the log's last line."""
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                                env=dict(os.environ, **(env or {}))).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    with open(log) as f:
        lines = [ln.rstrip() for ln in f if ln.strip() and "warn" not in ln.lower()]
    print(f"{title}: exit {rc}{' (timed out)' if rc == 124 else ''} | {lines[-1] if lines else ''}", flush=True)
    return rc


def _sanitizer(tool: str, args, log: str, timeout: int) -> bool:
    cmd = ["compute-sanitizer", "--tool", tool, "--report-api-errors", "no", "--error-exitcode", "9",
           sys.executable, "-m", *args]
    rc = _step(f"{tool} {' '.join(args[1:]) or 'driver'}", cmd, log, timeout)
    with open(log) as f:
        text = f.read()
    summary = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln]
    print(f"  {summary[-1] if summary else 'no sanitizer summary'}", flush=True)
    return rc == 0 and ("--driver" not in args or "all families done" in text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir", nargs="?", help="where the logs go (required unless --driver)")
    p.add_argument("--driver", action="store_true", help="run the sanitizer driver in this process")
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    p.add_argument("--compilers", nargs="+", default=["nvrtc", "nvcc"], choices=["nvrtc", "nvcc"],
                   help="the tests stage runs once per compiler")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--sanitizer-tools", nargs="+", default=list(SANITIZER_TOOLS), choices=SANITIZER_TOOLS)
    p.add_argument("--sanitizer-timeout", type=int, default=500, help="seconds per tool (racecheck is slowest)")
    p.add_argument("--tests-timeout", type=int, default=400, help="seconds of the GPU tests per compiler")
    p.add_argument("--bench-args", default="", help="extra benchmarks/bench.py arguments, one string")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    if args.driver:
        driver(args.families)
        return
    if not args.outdir:
        p.error("OUTDIR: required (where the logs go) unless --driver")
    from benchmarks.bench import default_result_path, dense_shapes, provenance
    out = os.path.abspath(args.outdir)
    os.makedirs(out, exist_ok=True)
    prov = provenance()
    with open(os.path.join(out, "provenance.json"), "w") as f:
        json.dump(prov, f, indent=1)
    print(f"{prov['device']} driver {prov['driver']} {prov['gpu_start']} commit {prov['commit']}"
          f"{' (dirty)' if prov['dirty'] else ''} {prov['versions']}", flush=True)
    ok = True
    if "tests" in args.stages:
        shapes = os.path.join(out, "bench_shapes.txt")
        with open(shapes, "w") as f:
            f.write("".join(f"{m} {n} {k}\n" for m, n, k in dense_shapes()))
        for compiler in args.compilers:
            env = dict(DG_JIT_USE_NVCC=str(int(compiler == "nvcc")), DG_JIT_CACHE_DIR=f"/tmp/dg_cache_{compiler}")
            ok &= _step(f"AOT compile of the bench shapes ({compiler})", [sys.executable, "-m", "deep_gemm", "compile",
                        "--shapes", shapes, "--jobs", "16"], os.path.join(out, f"aot_{compiler}.log"), 300, env) == 0
            ok &= _step(f"GPU tests ({compiler})", [sys.executable, "-m", "pytest", "tests/gpu", "-q"],
                        os.path.join(out, f"pytest_{compiler}.log"), args.tests_timeout, env) == 0
    if "sanitizer" in args.stages:
        families = ["tools.gpu_check", "--driver", "--families", *args.families]
        # Compile (and check) everything once without the sanitizer, so the tools time launches, not compiles.
        if _step("driver without the sanitizer", [sys.executable, "-m", *families],
                 os.path.join(out, "driver_plain.log"), 300) != 0:
            ok = False
        else:
            for tool in args.sanitizer_tools:
                ok &= _sanitizer(tool, families, os.path.join(out, f"sanitizer_{tool}.log"), args.sanitizer_timeout)
            for i, (case, config) in enumerate(FORCED):
                for tool in ("memcheck", "synccheck"):
                    forced = ["tools.profile_case", "--family", "dense", case, "--config", config, "--calls", "1"]
                    ok &= _sanitizer(tool, forced, os.path.join(out, f"sanitizer_forced{i}_{tool}.log"), 150)
    if "bench" in args.stages:
        result = os.path.join(out, os.path.basename(default_result_path(prov)))
        ok &= _step(f"benchmark -> {result}", [sys.executable, "benchmarks/bench.py", "--json", result,
                    *shlex.split(args.bench_args)], os.path.join(out, "bench.log"), 600) == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
