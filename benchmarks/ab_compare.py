"""Compare bench.py JSONs of two checkouts (benchmarks/ab.sh): kernel time old/new per case (> 1: new is faster),
the mean over each side's runs, and the geomean per suite."""
import json
import math
import sys
from collections import defaultdict


def load(paths):
    runs = [json.load(open(p)) for p in paths]
    times = defaultdict(list)
    for run in runs:
        for suite, rows in (("dense", run["rows"]), ("grouped", run["grouped"]), ("wgrad", run["wgrad"])):
            for r in rows:
                name = f"{r.get('kind', suite)} " + "x".join(str(r.get(f)) for f in ("groups", "m", "n", "k")
                                                            if r.get(f) is not None)
                times[(r.get("kind", suite), name)].append(r["us"])
    return {key: sum(v) / len(v) for key, v in times.items()}


def main():
    if "--" not in sys.argv[1:] or {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__ + "\nUsage: python benchmarks/ab_compare.py OLD.json ... -- NEW.json ...")
        sys.exit(0 if {"-h", "--help"} & set(sys.argv[1:]) else 2)
    split = sys.argv.index("--")
    old, new = load(sys.argv[1:split]), load(sys.argv[split + 1:])
    ratios = defaultdict(list)
    for key in old:
        if key in new:
            ratio = old[key] / new[key]
            ratios[key[0]].append(ratio)
            print(f"{key[1]:>40}: old {old[key]:9.1f} us  new {new[key]:9.1f} us  old/new {ratio:.3f}")
    for kind, rs in ratios.items():
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
        print(f"geomean old/new {kind:>12}: {geo:.4f} over {len(rs)} cases (min {min(rs):.3f}, max {max(rs):.3f})")


if __name__ == "__main__":
    main()
