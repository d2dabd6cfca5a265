# Full GPU check on the H200 (device tool): both compilers, the AOT cache from a CPU machine, the benchmark.
# Usage (from the repo root, with .carry/aot_cache/ optionally holding a cache filled on a CPU machine):
#   source tools/h200_env.sh; bash tools/h200_full_check.sh $OUT
set -o pipefail
OUTDIR=${1:-/tmp/dg_out}
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"

if [ -d .carry/aot_cache ]; then
    echo "== AOT cache built on a CPU-only machine: first call must load it without compiling"
    cp -r .carry/aot_cache /tmp/aot_cache
    DG_JIT_CACHE_DIR=/tmp/aot_cache DG_JIT_DEBUG=1 timeout 60 python tools/smoke.py 4096x7168x2048 64x2112x7168 2>&1 \
        | grep -E "cache hit|compiling|diff=" | sed 's/: -std.*//'
fi

python tools/test_shapes.py > /tmp/shapes.txt
for compiler in nvrtc nvcc; do
    use_nvcc=0; [ $compiler = nvcc ] && use_nvcc=1
    export DG_JIT_USE_NVCC=$use_nvcc DG_JIT_CACHE_DIR=/tmp/dg_cache_$compiler
    echo "== GPU tests with $compiler"
    timeout 200 python -m deep_gemm compile --shapes /tmp/shapes.txt --shapes tools/bench_shapes.txt --jobs 16 \
        > "$OUTDIR/aot_$compiler.log" 2>&1
    tail -1 "$OUTDIR/aot_$compiler.log"
    timeout 240 python -m pytest tests/gpu -q 2>&1 | tee "$OUTDIR/pytest_$compiler.log" | tail -2
done
export DG_JIT_USE_NVCC=0 DG_JIT_CACHE_DIR=/tmp/dg_cache_nvrtc
echo "== benchmark"
timeout 300 python benchmarks/bench.py --json "$OUTDIR/bench.json" 2>&1 | grep -v -i warn | tee "$OUTDIR/bench.log"

echo "== compute-sanitizer (memcheck, synccheck) on a multicast config and a ragged one"
for tool in memcheck synccheck; do
    for cfg in "1024 4096 1024 256 128 2A" "130 2104 576 128 192 1" "65 2104 208 64 112 1"; do
        # NOTES: host API errors are not reported: cuda-bindings probes driver entry points that driver 580
        # lacks (cuGetProcAddress returns CUDA_ERROR_INVALID_VALUE, harmlessly).
        timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
            python tools/run_config.py $cfg --calls 1 > "$OUTDIR/sanitizer_${tool}.log" 2>&1
        echo "$tool [$cfg]: exit $? $(grep -E "ERROR SUMMARY" "$OUTDIR/sanitizer_${tool}.log" | tail -1)"
    done
done
