#!/usr/bin/env bash
# Same-machine A/B of two checkouts' kernels (GPU machine): runs benchmarks/bench.py from each in its own process,
# alternating OLD/NEW/OLD/NEW, then prints per-case kernel-time ratios and per-suite geomeans (ab_compare.py).
# Usage: bash benchmarks/ab.sh OLD_DIR NEW_DIR OUT_DIR [bench.py args, e.g. --num-tests 10 --skip-host]
# AB_TIMEOUT (s, default 900) bounds each bench run.
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2") out=$(realpath "$3")
shift 3
# NOTES: this checkout's script sets up either side (it works on the current directory), so an OLD commit from
# before tools/use_checkout.sh existed (it was tools/h200_env.sh) runs the same way.
use_checkout=$(realpath "$(dirname "$0")/../tools/use_checkout.sh")
mkdir -p "$out"
for round in 1 2; do
    for side in old new; do
        dir=$old; [ "$side" = new ] && dir=$new
        (cd "$dir" && source "$use_checkout" && DG_JIT_CACHE_DIR=/tmp/dg_cache_$side \
            timeout "${AB_TIMEOUT:-900}" python benchmarks/bench.py "$@" --json "$out/ab_${side}_$round.json" > "$out/ab_${side}_$round.log" 2>&1)
        echo "$side round $round: rc=$?"
    done
done
python "$new/benchmarks/ab_compare.py" "$out"/ab_old_*.json -- "$out"/ab_new_*.json
