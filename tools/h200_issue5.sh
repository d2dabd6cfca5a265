# GPU check for the weight-gradient GEMMs (device tool): SASS sanity, GPU tests, sanitizer, sweep, benchmark.
# Usage: source tools/h200_env.sh; bash tools/h200_issue5.sh $OUT [--skip-tests] [--skip-bench] [--sanitizer]
#        [--all-tests]; SWEEP="MxNxK[:G] ..." in the environment adds a config sweep (tools/sweep_wgrad.py)
set -o pipefail
OUTDIR=${1:-/tmp/dg_out}
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader

echo "== SASS of wgrad kernels: QGMMA count, local memory (LDL/STL) count"
timeout 120 python - "$OUTDIR" <<'PY'
import subprocess, sys
from deep_gemm import jit
from deep_gemm.heuristics.sm90_wgrad import get_wgrad_config, group_capacity
from deep_gemm.launchers.sm90_fp8_wgrad_1d1d import kernel_source
for m, n, g in ((7168, 4096, 1), (2048, 7168, 8), (1536, 24576, 1)):
    cfg = get_wgrad_config(m, n, g, 132)
    cubin, cached, secs = jit.build(kernel_source(n, cfg, group_capacity(g)), "sm_90a")
    path = f"{sys.argv[1]}/wgrad_{m}_{n}_{g}.cubin"
    open(path, "wb").write(cubin)
    sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    print(f"wgrad {m}x{n} G={g} {cfg.block_m}x{cfg.block_n} st={cfg.num_stages} mc={cfg.num_multicast} "
          f"compile={secs:.2f}s QGMMA={sass.count('QGMMA')} LDL={sass.count('LDL')} STL={sass.count('STL')} "
          f"UTMAREDG={sass.count('UTMAREDG')}")
PY

if [[ " $* " != *" --skip-tests "* ]]; then
    echo "== GPU tests: wgrad"
    timeout 300 python -m pytest tests/gpu/test_wgrad_gpu.py -q -x 2>&1 | tee "$OUTDIR/pytest_wgrad.log" | tail -6
fi
if [[ " $* " == *" --all-tests "* ]]; then
    echo "== GPU tests: all"
    timeout 400 python -m pytest tests/gpu -q 2>&1 | tee "$OUTDIR/pytest_all.log" | tail -4
fi
if [[ " $* " == *" --sanitizer "* ]]; then
    echo "== compute-sanitizer on wgrad calls"
    for tool in memcheck racecheck synccheck; do
        timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
            python tools/smoke_wgrad.py > "$OUTDIR/sanitizer_wgrad_${tool}.log" 2>&1
        echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTDIR/sanitizer_wgrad_${tool}.log" | tail -1)"
    done
fi
if [[ -n "$SWEEP" ]]; then
    echo "== sweep: $SWEEP"
    timeout 400 python tools/sweep_wgrad.py $SWEEP 2>&1 | tee "$OUTDIR/sweep_wgrad.log"
fi
if [[ " $* " != *" --skip-bench "* ]]; then
    echo "== bench: wgrad, k_grouped"
    timeout 400 python benchmarks/bench.py --suite wgrad k_grouped --json "$OUTDIR/bench_wgrad.json" 2>&1 \
        | tee "$OUTDIR/bench_wgrad.log"
fi
