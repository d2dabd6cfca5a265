"""Print the published performance tables (Markdown) of a bench.py result and write its plot next to it.

Usage: python -m benchmarks.readme_table RESULT.json [--cases] [--no-plot]
Without --cases: the README's summary, one line per suite (cases, TFLOPS range, geomean and range of the ratio to
cuBLAS in the same run). With --cases: docs/performance.md's per-case tables (kernel time,
TFLOPS, cuBLAS in the same run and DeepGEMM's figure, with the geomean ratios under each table).
The plot goes to RESULT.png (ours vs cuBLAS, and DeepGEMM where the rows carry its figure); it needs matplotlib
(the `bench` extra). tests/test_docs.py checks that README.md and docs/performance.md hold exactly this output.
"""
import argparse
import json
import math
import os
import sys

from benchmarks.bench import SECTIONS, case_label, plot


def _num(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _geomean(ratios) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def provenance_line(result: dict) -> str:
    """One sentence naming the device, software, commit and date of a result (a bench.py JSON)."""
    prov = result.get("provenance", {})
    versions = prov.get("versions", {})
    head = [f"{result.get('device') or 'unknown device'}", f"torch {result.get('torch')}"]
    if prov.get("commit"):
        head.append(f"commit {prov['commit']}{' (dirty)' if prov.get('dirty') else ''}")
    if prov.get("driver"):
        head.append(f"driver {prov['driver']}")
    if versions.get("nvrtc"):
        head.append(f"NVRTC {versions['nvrtc']}")
    if prov.get("date"):
        head.append(prov["date"][:10])
    return f"Measured on {', '.join(head)} (`benchmarks/bench.py`, kineto kernel time, mean of the run's calls)."


def markdown(result: dict) -> str:
    """The per-case tables of one result (a bench.py JSON), with a provenance line."""
    lines = [provenance_line(result)]
    for key, title in SECTIONS:
        rows = result.get(key) or []
        if not rows:
            continue
        has_dg = any(r.get("dg_tflops") for r in rows)
        cols = ["case", "us", "TFLOPS", "cuBLAS TFLOPS", "x cuBLAS"] + (["DeepGEMM TFLOPS", "x DeepGEMM"]
                                                                          if has_dg else [])
        lines += ["", f"**{title}**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        vs_cublas, vs_dg = [], []
        for r in rows:
            cb, dg = r.get("cublas_tflops"), r.get("dg_tflops")
            x_cb = r["tflops"] / cb if cb else None
            x_dg = r["tflops"] / dg if dg else None
            vs_cublas += [x_cb] if x_cb else []
            vs_dg += [x_dg] if x_dg else []
            cells = [case_label(r, "dense" if key == "rows" else key), _num(r["us"], ".1f"), _num(r["tflops"], ".0f"),
                     _num(cb, ".0f"), _num(x_cb, ".2f")]
            if has_dg:
                cells += [_num(dg, ".0f"), _num(x_dg, ".2f")]
            lines.append("| " + " | ".join(cells) + " |")
        summary = []
        if vs_cublas:
            summary.append(f"geomean {_geomean(vs_cublas):.3f}x cuBLAS over {len(vs_cublas)} cases")
        if vs_dg:
            summary.append(f"{_geomean(vs_dg):.3f}x DeepGEMM's figure over {len(vs_dg)} cases")
        if summary:
            lines += ["", "; ".join(summary) + "."]
    return "\n".join(lines)


# The summary's suites: (result key, row kind, title, compared with cuBLAS?). The grouped suites have no cuBLAS
# equivalent: their cuBLAS column is a dense GEMM of the same valid rows, a drift anchor rather than a competitor.
SUMMARY_SUITES = (("rows", "dense", "dense", True), ("grouped", "contiguous", "MoE contiguous", False),
                  ("grouped", "masked", "MoE masked", False), ("wgrad", "wgrad", "weight gradient", True),
                  ("wgrad", "k_grouped", "k-grouped weight gradient", True))


def _ratio_cell(ratios) -> str:
    if not ratios:
        return "n/a"
    return f"{_geomean(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)})"


def summary(result: dict) -> str:
    """The README's short table: one line per suite present in `result` (a bench.py JSON), with a provenance line.
    The ratio cell is "geomean (min-max, number of cases)" of our TFLOPS over cuBLAS's in the same run. DeepGEMM's
    figures in the rows are left to the per-case tables: they were not measured in the run."""
    lines = [provenance_line(result), "", "| suite | cases | TFLOPS | x cuBLAS (same run) |", "|---|---|---|---|"]
    for key, kind, title, with_cublas in SUMMARY_SUITES:
        rows = [r for r in result.get(key) or [] if r.get("kind", "dense") == kind]
        if not rows:
            continue
        tflops = [r["tflops"] for r in rows]
        vs_cublas = [r["tflops"] / r["cublas_tflops"] for r in rows if with_cublas and r.get("cublas_tflops")]
        lines.append(f"| {title} | {len(rows)} | {min(tflops):.0f}-{max(tflops):.0f} | {_ratio_cell(vs_cublas)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", help="a bench.py result JSON, e.g. benchmarks/results/<date>_<commit>_h200.json")
    parser.add_argument("--cases", action="store_true", help="per-case tables (docs/performance.md) instead of the "
                                                                 "README's one-line-per-suite summary")
    parser.add_argument("--no-plot", action="store_true", help="print the tables only")
    args = parser.parse_args()
    try:
        with open(args.result) as f:
            result = json.load(f)
    except (OSError, ValueError) as e:
        parser.error(f"result: cannot read a JSON result from {args.result}: {e}")
    if not any(result.get(key) for key, _ in SECTIONS):
        parser.error(f"result: {args.result} has no measured rows (expected 'rows', 'grouped' or 'wgrad')")
    print(markdown(result) if args.cases else summary(result))
    if not args.no_plot:
        image = os.path.splitext(args.result)[0] + ".png"
        try:
            plot(result, image)
        except ImportError as e:
            sys.exit(f"readme_table: {e}")
        print(f"\n![TFLOPS per case]({os.path.relpath(image)})")


if __name__ == "__main__":
    main()
