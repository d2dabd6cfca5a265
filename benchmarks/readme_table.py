"""Print the README's performance tables (Markdown) from a bench.py result and write its plot next to it.

Usage: python -m benchmarks.readme_table RESULT.json [--no-plot]
The plot goes to RESULT.png (ours vs cuBLAS, and DeepGEMM where the rows carry its figure); it needs matplotlib
(the `bench` extra). One table per suite present: kernel time, TFLOPS, cuBLAS in the same run and DeepGEMM's
figure, with the geomean ratios under each table.
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


def markdown(result: dict) -> str:
    """The tables of one result (a bench.py JSON), with a provenance line."""
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
    lines = [f"Measured on {', '.join(head)} (`benchmarks/bench.py`, kineto kernel time, mean of the run's calls)."]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", help="a bench.py result JSON, e.g. benchmarks/results/<date>_<commit>_h200.json")
    parser.add_argument("--no-plot", action="store_true", help="print the tables only")
    args = parser.parse_args()
    try:
        with open(args.result) as f:
            result = json.load(f)
    except (OSError, ValueError) as e:
        parser.error(f"result: cannot read a JSON result from {args.result}: {e}")
    if not any(result.get(key) for key, _ in SECTIONS):
        parser.error(f"result: {args.result} has no measured rows (expected 'rows', 'grouped' or 'wgrad')")
    print(markdown(result))
    if not args.no_plot:
        image = os.path.splitext(args.result)[0] + ".png"
        try:
            plot(result, image)
        except ImportError as e:
            sys.exit(f"readme_table: {e}")
        print(f"\n![TFLOPS per case]({os.path.relpath(image)})")


if __name__ == "__main__":
    main()
