# GPU check for the host/compile work (device tool): launch module, SASS sanity, GPU tests, benchmark.
# Usage: source tools/h200_env.sh; bash tools/h200_issue3.sh $OUT [--skip-tests] [--skip-bench] [--nvcc] [--sanitizer]
#        [--bench-shapes "MxNxK ..."]
set -o pipefail
OUTDIR=${1:-/tmp/dg_out}
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"
python -c "import deep_gemm._C; print('pip-built launch module:', deep_gemm._C.__file__)"

echo "== SASS of the 4096x7168x16384 and 64x2112x7168 kernels: QGMMA count, local memory (LDL/STL) count"
python - "$OUTDIR" <<'PY'
import subprocess, sys, time
from deep_gemm import jit
from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.launchers.sm90_fp8_gemm_1d2d import kernel_source
for m, n, k in ((4096, 7168, 16384), (64, 2112, 7168), (4096, 2112, 7168)):
    cfg = get_config(GemmProblem(m, n, k, 132))
    t = time.perf_counter(); cubin, cached, secs = jit.build(kernel_source(n, k, cfg), "sm_90a")
    path = f"{sys.argv[1]}/k_{m}_{n}_{k}.cubin"
    open(path, "wb").write(cubin)
    sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    print(f"{m}x{n}x{k} {cfg.block_m}x{cfg.block_n} cached={cached} compile={secs:.2f}s QGMMA={sass.count('QGMMA')} "
          f"LDL={sass.count('LDL')} STL={sass.count('STL')}")
PY

if [[ " $* " != *" --skip-tests "* ]]; then
    echo "== GPU tests (NVRTC)"
    timeout 330 python -m pytest tests/gpu -q -x 2>&1 | tee "$OUTDIR/pytest_nvrtc.log" | tail -4
fi
if [[ " $* " != *" --skip-bench "* ]]; then
    echo "== benchmark"
    timeout 240 python benchmarks/bench.py --json "$OUTDIR/bench.json" 2>&1 | grep -v -i warn | tee "$OUTDIR/bench.log"
fi
if [[ " $* " == *" --nvcc "* ]]; then
    echo "== GPU tests (nvcc)"
    DG_JIT_USE_NVCC=1 DG_JIT_CACHE_DIR=/tmp/dg_cache_nvcc timeout 300 python -m pytest tests/gpu -q -x 2>&1 \
        | tee "$OUTDIR/pytest_nvcc.log" | tail -2
fi
if [[ " $* " == *" --sanitizer "* ]]; then
    echo "== compute-sanitizer through the public API: each call cold (Python path), then warm (deep_gemm._C plan)"
    for tool in memcheck synccheck; do
        # NOTES: host API errors are not reported: cuda-bindings probes driver entry points that driver 580 lacks.
        timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
            python tools/sanitize_driver.py --family gemm_fp8_fp8_bf16_nt > "$OUTDIR/sanitizer_${tool}.log" 2>&1
        echo "$tool: exit $? $(grep -E "ERROR SUMMARY" "$OUTDIR/sanitizer_${tool}.log" | tail -1)"
        grep -E ": ok$|all families done" "$OUTDIR/sanitizer_${tool}.log"
    done
fi
