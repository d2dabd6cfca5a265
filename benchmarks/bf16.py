"""The BF16 GEMMs, einsums and the hyper-connection pre-norm GEMM in one process, on the shapes of DeepGEMM v2.6.1's
tests (test_bf16, test_einsum, test_hyperconnection): ours, optionally a second package with DeepGEMM's API (`--peer
MODULE`, e.g. DeepGEMM itself built and importable under another name), and cuBLAS (`torch.matmul` on the same
tensors) where the operation is a plain GEMM. Every library gets the same inputs; its result is checked (calc_diff
against an FP32 reference) and timed by kineto as the sum of every kernel one call launches (copies, reductions
and memsets included), after an 8 GB L2 flush, averaged over --num-tests calls. Ratios are time ratios: > 1 means
ours is faster. The SM clock is read after each suite.

Usage (GPU machine): python -m benchmarks.bf16 [--suites dense contiguous masked k_grouped einsum hc]
                     [--layouts nt nn tn tt] [--ms 1 128 4096] [--peer MODULE] [--num-tests 20] [--json OUT]
"""
import argparse
import importlib
import json
import math
import random
import subprocess
import sys

import torch

NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
FP32_NK = [(256, 7168), (129280, 7168)]
GROUPED_NK = [(6144, 7168), (7168, 3072), (4096, 4096), (4096, 2048)]
CONTIGUOUS_GM = [(4, 8192), (8, 4096)]
MASKED_GM = [(32, 192), (6, 1024), (32, 20), (6, 20)]
K_GROUPED = [(4, 4096, 7168, 8192), (4, 7168, 2048, 8192), (8, 4096, 7168, 4096), (8, 7168, 2048, 4096),
             (16, 4096, 7168, 2048), (16, 7168, 2048, 2048)]
SUITES = ("dense", "contiguous", "masked", "k_grouped", "einsum", "hc")


def _sm_clock() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


class Runner:
    """Times one case for every library and keeps the rows."""

    def __init__(self, libs, num_tests):
        from deep_gemm.testing import bench_kineto, calc_diff
        self.libs, self.num_tests, self.rows = libs, num_tests, []
        self.bench, self.calc_diff = bench_kineto, calc_diff

    def case(self, suite, label, flops, calls, check, cublas=None):
        """calls: lib name -> fn() making one call; check(lib) -> calc_diff after one call of it; cublas: fn()."""
        row = dict(suite=suite, case=label)
        for lib, fn in calls.items():
            try:
                fn()
                torch.cuda.synchronize()
                row[f"{lib}_diff"] = float(check(lib))
                t = self.bench(fn, None, num_tests=self.num_tests, suppress_kineto_output=True,
                               with_multiple_kernels=True)
                row[f"{lib}_us"], row[f"{lib}_tflops"] = t * 1e6, flops / t / 1e12
            except Exception as e:  # a library refusing a case is a row, not a crash
                row[f"{lib}_error"] = f"{type(e).__name__}: {e}"[:200]
        if cublas is not None:
            t = self.bench(cublas, None, num_tests=self.num_tests, suppress_kineto_output=True,
                           with_multiple_kernels=True)
            row["cublas_us"], row["cublas_tflops"] = t * 1e6, flops / t / 1e12
        for other in ("peer", "cublas"):
            if row.get("ours_us") and row.get(f"{other}_us"):
                row[f"ours_over_{other}"] = row[f"{other}_us"] / row["ours_us"]
        self.rows.append(row)
        parts = [f"{lib} {row[f'{lib}_us']:.1f}us {row[f'{lib}_tflops']:.0f}TF d={row[f'{lib}_diff']:.0e}"
                 if f"{lib}_us" in row else f"{lib} {row.get(f'{lib}_error', '-')}" for lib in calls]
        if "cublas_us" in row:
            parts.append(f"cublas {row['cublas_us']:.1f}us")
        ratios = " ".join(f"o/{o}={row[f'ours_over_{o}']:.3f}" for o in ("peer", "cublas") if f"ours_over_{o}" in row)
        print(f"{suite} {label} | " + " | ".join(parts) + f" | {ratios}", flush=True)


def suite_parser(doc: str, suites, peer_help: str) -> argparse.ArgumentParser:
    """The command line the same-process suite benchmarks share (fp8_out, moe_mlp, attention): --suites, --peer,
    --num-tests, --json; a benchmark adds its own options."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--suites", nargs="+", choices=suites, default=list(suites))
    parser.add_argument("--peer", help=peer_help)
    parser.add_argument("--num-tests", type=int, default=10)
    parser.add_argument("--json", help="write the rows and the summary here")
    return parser


def gpu_runner(args, name: str):
    """(libs, Runner) for a suite benchmark's arguments: ours, and the peer package `--peer` names; None (said on
    stderr) without a GPU."""
    if not torch.cuda.is_available():
        print(f"benchmarks.{name}: needs a CUDA GPU", file=sys.stderr)
        return None
    import deep_gemm
    libs = {"ours": deep_gemm}
    if args.peer:
        libs["peer"] = importlib.import_module(args.peer)
    return libs, Runner(libs, args.num_tests)


def summarise_suite(runner, suite, others=("unfused", "peer")) -> dict:
    """One suite's summary (case count, SM clock, geomean and min of ours_over_<other>), printed; for the
    benchmarks that time a fused path against others (fp8_out, moe_mlp)."""
    rows = [r for r in runner.rows if r["suite"] == suite]
    summary = dict(cases=len(rows), sm_clock=_sm_clock())
    for other in others:
        ratios = [r[f"ours_over_{other}"] for r in rows if f"ours_over_{other}" in r]
        if ratios:
            summary[f"geomean_ours_over_{other}"] = _geomean(ratios)
            summary[f"min_ours_over_{other}"] = min(ratios)
    print(f"{suite}: {summary}", flush=True)
    return summary


def write_json(path, peer, summary, rows) -> None:
    with open(path, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), peer=peer, summary=summary, rows=rows), f, indent=1)


def run_suites(args, runner, run_suite, others=("unfused", "peer")) -> int:
    """The suite benchmarks' main loop (fp8_out, moe_mlp, attention): `run_suite(suite)` adds each suite's rows,
    summarise_suite prints its summary against `others`, and --json gets every summary and row."""
    summary = {}
    for suite in args.suites:
        run_suite(suite)
        summary[suite] = summarise_suite(runner, suite, others)
    if args.json:
        write_json(args.json, args.peer, summary, runner.rows)
    return 0


def _diff_of(runner, outs, ref):
    return lambda lib: runner.calc_diff(outs[lib].float(), ref)


def _fresh_diff(runner, outs, calls, ref):
    """For calls that accumulate into their output: one call into zeros, then calc_diff."""
    def check(lib):
        outs[lib].zero_()
        calls[lib]()
        torch.cuda.synchronize()
        return runner.calc_diff(outs[lib], ref)
    return check


def suite_dense(runner, libs, layouts, ms):
    cases = [(layout, m, n, k, torch.bfloat16) for layout in layouts for m in ms for n, k in NK]
    cases += [(layout, m, n, k, torch.float32) for layout in layouts for m in ms for n, k in FP32_NK]
    for layout, m, n, k, out_dtype in cases:
        a = torch.randn((m, k), device="cuda").bfloat16()
        b = torch.randn((n, k), device="cuda").bfloat16()
        a_arg = a if layout[0] == "n" else a.t().contiguous()
        b_arg = b if layout[1] == "t" else b.t().contiguous()
        a_mk = a_arg if layout[0] == "n" else a_arg.t()
        b_nk = b_arg if layout[1] == "t" else b_arg.t()
        outs = {lib: torch.empty((m, n), device="cuda", dtype=out_dtype) for lib in libs}
        calls = {lib: (lambda mod=mod, d=outs[lib]: getattr(mod, f"bf16_gemm_{layout}")(a_arg, b_arg, d))
                 for lib, mod in libs.items()}
        runner.case("dense", f"{layout} {m}x{n}x{k} {'fp32' if out_dtype == torch.float32 else 'bf16'}",
                    2 * m * n * k, calls, _diff_of(runner, outs, a.float() @ b.float().t()),
                    cublas=lambda: torch.matmul(a_mk, b_nk.t()))


def suite_contiguous(runner, libs):
    for g, m_per in CONTIGUOUS_GM:
        for n, k in GROUPED_NK:
            sizes = [max(1, int(m_per * random.uniform(0.7, 1.3))) for _ in range(g)]
            aligned = [(s + 127) // 128 * 128 for s in sizes]
            m = sum(aligned)
            a = torch.randn((m, k), device="cuda").bfloat16()
            b = torch.randn((g, n, k), device="cuda").bfloat16()
            layout = torch.full((m,), -1, dtype=torch.int32, device="cuda")
            ref = torch.zeros((m, n), device="cuda")
            start = 0
            for i, (s, al) in enumerate(zip(sizes, aligned)):
                layout[start:start + s] = i
                ref[start:start + s] = a[start:start + s].float() @ b[i].float().t()
                start += al
            valid = layout >= 0
            outs = {lib: torch.empty((m, n), device="cuda", dtype=torch.bfloat16) for lib in libs}
            calls = {lib: (lambda mod=mod, d=outs[lib]: mod.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout))
                     for lib, mod in libs.items()}
            runner.case("contiguous", f"G={g} m={m} n={n} k={k}", 2 * sum(sizes) * n * k, calls,
                        lambda lib: runner.calc_diff(outs[lib][valid].float(), ref[valid]))


def suite_masked(runner, libs):
    m_max = 4096
    for g, expected in MASKED_GM:
        for n, k in GROUPED_NK:
            masked = torch.tensor([max(1, int(expected * random.uniform(0.7, 1.3))) for _ in range(g)],
                                  dtype=torch.int32, device="cuda")
            a = torch.randn((g, m_max, k), device="cuda").bfloat16()
            b = torch.randn((g, n, k), device="cuda").bfloat16()
            counts = masked.tolist()
            outs = {lib: torch.empty((g, m_max, n), device="cuda", dtype=torch.bfloat16) for lib in libs}

            def check(lib):
                diffs = [runner.calc_diff(outs[lib][i, :c].float(), a[i, :c].float() @ b[i].float().t())
                         for i, c in enumerate(counts)]
                return max(diffs)

            calls = {lib: (lambda mod=mod, d=outs[lib]: mod.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected))
                     for lib, mod in libs.items()}
            runner.case("masked", f"G={g} expected_m={expected} n={n} k={k}", 2 * sum(counts) * n * k, calls, check)


def suite_k_grouped(runner, libs):
    for g, m, n, k_per in K_GROUPED:
        ks = [(max(1, int(k_per * random.uniform(0.7, 1.3))) + 127) // 128 * 128 for _ in range(g)]
        total = sum(ks)
        a = torch.randn((total, m), device="cuda").bfloat16()
        b = torch.randn((total, n), device="cuda").bfloat16()
        layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
        ref = torch.empty((g, m, n), device="cuda")
        start = 0
        for i, k in enumerate(ks):
            ref[i] = a[start:start + k].float().t() @ b[start:start + k].float()
            start += k
        outs = {lib: torch.zeros((g, m, n), device="cuda") for lib in libs}
        calls = {lib: (lambda mod=mod, d=outs[lib]: mod.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, layout, d))
                 for lib, mod in libs.items()}
        runner.case("k_grouped", f"G={g} m={m} n={n} k={total}", 2 * m * n * total, calls,
                    _fresh_diff(runner, outs, calls, ref))


def suite_einsum(runner, libs):
    for s in (129, 4096, 8192):
        for m, n, k in [(128, 384, 128), (256, 256, 256), (384, 128, 384)]:
            a = torch.randn((s, m, k), device="cuda").bfloat16()
            b = torch.randn((s, n, k), device="cuda").bfloat16()
            ref = torch.zeros((m, n), device="cuda")
            for i in range(0, s, 1024):
                ref += torch.bmm(a[i:i + 1024].float(), b[i:i + 1024].float().mT).sum(0)
            outs = {lib: torch.zeros((m, n), device="cuda") for lib in libs}
            calls = {lib: (lambda mod=mod, d=outs[lib]: mod.einsum("bmk,bnk->mn", a, b, d, c=d))
                     for lib, mod in libs.items()}
            runner.case("einsum", f"bmk s={s} m={m} n={n} k={k} fp32+=", 2 * s * m * n * k, calls,
                        _fresh_diff(runner, outs, calls, ref))
    for expr in ("bhr,hdr->bhd", "bhd,hdr->bhr"):
        for h, r, d in [(128, 512, 128), (8, 4096, 1024)]:
            for bsz in (4, 32, 128, 4096, 8192):
                x = torch.randn((bsz, h, r if expr == "bhr,hdr->bhd" else d), device="cuda").bfloat16()
                y = torch.randn((h, d, r + 128), device="cuda").bfloat16()[:, :, :r]
                cols = d if expr == "bhr,hdr->bhd" else r
                outs = {lib: torch.empty((bsz, h, cols), device="cuda", dtype=torch.bfloat16) for lib in libs}
                calls = {lib: (lambda mod=mod, z=outs[lib]: mod.einsum(expr, x, y, z)) for lib, mod in libs.items()}
                runner.case("einsum", f"{expr} b={bsz} h={h} r={r} d={d}", 2 * bsz * h * r * d, calls,
                            _diff_of(runner, outs, torch.einsum(expr, x.float(), y.float())),
                            cublas=lambda: torch.einsum(expr, x, y))


def suite_hc(runner, libs):
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        for m in (13, 137, 4096, 8192):
            for n, k in [(24, 28672), (24, 7680), (24, 7168)]:
                for splits in (None, 16):
                    a = torch.randn((m, k), device="cuda").bfloat16()
                    b = torch.randn((n, k), device="cuda")
                    lead = () if splits is None else (splits,)
                    outs = {lib: (torch.empty(lead + (m, n), device="cuda"), torch.empty(lead + (m,), device="cuda"))
                            for lib in libs}
                    ref_d, ref_s = a.float() @ b.T, a.float().square().sum(-1)

                    def check(lib, splits=splits):
                        d, s = outs[lib]
                        d, s = (d, s) if splits is None else (d.sum(0), s.sum(0))
                        return max(runner.calc_diff(d, ref_d), runner.calc_diff(s, ref_s))

                    calls = {lib: (lambda mod=mod, o=outs[lib], splits=splits:
                                   mod.tf32_hc_prenorm_gemm(a, b, o[0], o[1], num_splits=splits))
                             for lib, mod in libs.items()}
                    runner.case("hc", f"m={m} n={n} k={k} splits={splits or 0}", 2 * m * n * k, calls, check)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", nargs="+", default=["dense"], choices=SUITES)
    parser.add_argument("--layouts", nargs="+", default=["nt"], choices=["nt", "nn", "tn", "tt"])
    parser.add_argument("--ms", nargs="+", type=int, default=[1, 128, 4096])
    parser.add_argument("--peer", help="a second package with DeepGEMM's API to time on the same inputs")
    parser.add_argument("--num-tests", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args(argv)
    if min(args.ms) <= 0 or args.num_tests <= 0:
        parser.error("--ms and --num-tests must be positive")
    import deep_gemm
    if not torch.cuda.is_available():
        print("bf16: needs a CUDA device", file=sys.stderr)
        return 2
    libs = {"ours": deep_gemm}
    if args.peer:
        libs["peer"] = importlib.import_module(args.peer)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    runner = Runner(libs, args.num_tests)
    clocks = {}
    for suite in args.suites:
        if suite == "dense":
            suite_dense(runner, libs, args.layouts, args.ms)
        else:
            globals()[f"suite_{suite}"](runner, libs)
        clocks[suite] = _sm_clock()
    summary = {}
    for suite in args.suites:
        rows = [r for r in runner.rows if r["suite"] == suite]
        entry = {}
        for other in ("peer", "cublas"):
            ratios = [r[f"ours_over_{other}"] for r in rows if f"ours_over_{other}" in r]
            if ratios:
                entry[f"geomean_ours_over_{other}"], entry[f"min_ours_over_{other}"] = _geomean(ratios), min(ratios)
        entry["wrong"] = {lib: sum(1 for r in rows if not r.get(f"{lib}_diff", 0) < 1e-5) for lib in libs}
        summary[suite] = entry
        text = ", ".join(f"{key} {value:.3f}" for key, value in entry.items() if isinstance(value, float))
        print(f"{suite}: {len(rows)} cases; {text}; not < 1e-5 or failed: {entry['wrong']}; SM clock {clocks[suite]}")
    if args.json:
        props = torch.cuda.get_device_properties(0)
        with open(args.json, "w") as f:
            json.dump(dict(device=props.name, sm_clock_mhz=clocks, deep_gemm=deep_gemm.build_info(),
                           peer=args.peer, summary=summary, rows=runner.rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
