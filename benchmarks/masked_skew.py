"""Masked grouped GEMM under skewed per-expert loads, side by side with DeepGEMM (issue 14, target 4): expected_m far
from the actual counts (a fifth of the experts empty, a tenth at 4x the mean, the rest 0.3-1.5x; bench.skewed_sizes).
Both libraries get the same inputs and the same expected_m (DeepGEMM also with its test's 1.2x hint); timing,
checks and the DeepGEMM peer come from a same-run harness that wraps DeepGEMM (third-party glue, never committed:
it lives in the git-ignored .peer/ folder as scripts/sbs.py with `dg_peer` beside it; --sbs names it). Runs on the
device:

    python -m benchmarks.masked_skew --sbs .peer/scripts/sbs.py --json $OUT/masked_skew.json
"""
import argparse
import importlib.util
import json
import random

from .bench import provenance, skewed_sizes

# (groups, expected_m, n, k): DeepSeek-V3's two masked shapes (n x k = 4096 x 7168 and 7168 x 2048) at prefill-,
# mid- and decode-sized loads.
CASES = [(64, 149, 4096, 7168), (64, 149, 7168, 2048), (32, 256, 4096, 7168), (32, 256, 7168, 2048),
         (16, 512, 4096, 7168), (16, 512, 7168, 2048), (64, 32, 4096, 7168), (64, 32, 7168, 2048)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sbs", default=".peer/scripts/sbs.py", help="the shared harness")
    parser.add_argument("--num-tests", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2, help="load draws per case")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("sbs", args.sbs)
    sbs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sbs)
    sbs.import_libs()
    if sbs.dg is None:
        raise SystemExit(f"no DeepGEMM peer (dg_peer): {sbs.DG_ERR}")
    flush = sbs.init_timer()
    num_sms = sbs.torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for idx, (groups, expected_m, n, k) in enumerate(CASES):
        for seed in range(args.seeds):
            counts = skewed_sizes(groups, expected_m, random.Random(1000 * seed + groups * expected_m + n + k))
            m_max = max(128, (max(counts) + 127) // 128 * 128)
            row = sbs.run_case("masked", dict(G=groups, m=expected_m, n=n, k=k, m_max=m_max, counts=counts,
                                              expected_m=expected_m), idx + seed, args.num_tests, num_sms)
            row.update(seed=seed, counts=counts)
            rows.append(row)
            o, d, d12 = row.get("ours", {}), row.get("dg", {}), row.get("dg_x1.2", {})
            print(f"masked-skew G={groups} expected_m={expected_m} n={n} k={k} seed={seed} rows={sum(counts)} "
                  f"(max {max(counts)}, empty {counts.count(0)}) | ours {o.get('us', 0):.1f} us {o.get('config')} "
                  f"ok={o.get('ok')} | dg {d.get('us', 0):.1f} us {d.get('config')} ok={d.get('ok')} | "
                  f"dg x1.2 {d12.get('us', 0):.1f} us | ours/dg {row.get('ours_over_dg', 0):.3f} "
                  f"ours/dg_x1.2 {row.get('ours_over_dg_x1.2', 0):.3f} | {o.get('sm_mhz')} MHz", flush=True)
    ratios = [r["ours_over_dg"] for r in rows if "ours_over_dg" in r]
    ratios12 = [r["ours_over_dg_x1.2"] for r in rows if "ours_over_dg_x1.2" in r]
    summary = dict(geomean=sbs.geomean(ratios), min=min(ratios), geomean_x12=sbs.geomean(ratios12),
                   min_x12=min(ratios12), cases=len(rows))
    print(summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows, summary=summary, flush=flush, gpu=sbs.gpu_state(), provenance=provenance()),
                      f, indent=1, default=str)


if __name__ == "__main__":
    main()
