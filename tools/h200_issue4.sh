# GPU check for the MoE grouped GEMMs (device tool): SASS sanity, GPU tests, sanitizer, benchmark.
# Usage: source tools/h200_env.sh; bash tools/h200_issue4.sh $OUT [--skip-tests] [--skip-bench] [--sanitizer]
#        [--dense-tests] [--suite "contiguous masked dense"]
set -o pipefail
OUTDIR=${1:-/tmp/dg_out}
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"

echo "== SASS of grouped kernels: QGMMA count, local memory (LDL/STL) count"
python - "$OUTDIR" <<'PY'
import subprocess, sys
from deep_gemm import jit
from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.launchers.sm90_fp8_gemm_1d2d import kernel_source
C, M = KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED
for kind, g, m, n, k in ((C, 8, 32768, 4096, 7168), (M, 4, 256, 4096, 7168), (M, 32, 32, 7168, 2048)):
    cfg = get_config(GemmProblem(m, n, k, 132, kernel_type=kind, num_groups=g))
    cubin, cached, secs = jit.build(kernel_source(n, k, cfg, kind), "sm_90a")
    path = f"{sys.argv[1]}/k_{kind.value}_{m}_{n}_{k}.cubin"
    open(path, "wb").write(cubin)
    sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    print(f"{kind.value} G={g} m={m} {n}x{k} {cfg.block_m}x{cfg.block_n} mc={cfg.num_multicast} compile={secs:.2f}s "
          f"QGMMA={sass.count('QGMMA')} LDL={sass.count('LDL')} STL={sass.count('STL')}")
PY

if [[ " $* " != *" --skip-tests "* ]]; then
    echo "== GPU tests: grouped"
    timeout 300 python -m pytest tests/gpu/test_grouped_gpu.py -q -x 2>&1 | tee "$OUTDIR/pytest_grouped.log" | tail -4
fi
if [[ " $* " == *" --dense-tests "* ]]; then
    echo "== GPU tests: dense + fast paths"
    timeout 330 python -m pytest tests/gpu/test_gemm_gpu.py tests/gpu/test_fast_path_gpu.py -q -x 2>&1 \
        | tee "$OUTDIR/pytest_dense.log" | tail -4
fi
if [[ " $* " == *" --sanitizer "* ]]; then
    echo "== compute-sanitizer on grouped calls"
    for tool in memcheck racecheck synccheck; do
        timeout 120 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
            python tools/smoke_grouped.py > "$OUTDIR/sanitizer_grouped_${tool}.log" 2>&1
        echo "$tool: exit $? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUTDIR/sanitizer_grouped_${tool}.log" | tail -1)"
        grep -E "calc_diff" "$OUTDIR/sanitizer_grouped_${tool}.log"
    done
fi
if [[ " $* " != *" --skip-bench "* ]]; then
    SUITE="contiguous masked"
    [[ " $* " == *" --with-dense "* ]] && SUITE="dense contiguous masked"
    echo "== benchmark ($SUITE)"
    timeout 400 python benchmarks/bench.py --suite $SUITE --skip-host --json "$OUTDIR/bench.json" 2>&1 \
        | grep -v -i warn | tee "$OUTDIR/bench.log"
fi
