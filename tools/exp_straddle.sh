# Experiment: cost of the straddling RHS-scale selection (timing only; results of the patched run are WRONG).
set -x
python tools/sweep.py 4096x4096x7168 4096x2112x7168 --bm 128 --bn 112 128 144 160 192 --num-tests 10 2>&1 | grep -v -i warn
sed -i 's|return 128 % BLOCK_N != 0;|return false;|' include/deep_gemm/sm90/fp8_gemm_1d2d.cuh
sed -i 's|    return 128 % block_n != 0|    return False|' deep_gemm/heuristics/sm90.py
grep -n "return False\|return false;" include/deep_gemm/sm90/fp8_gemm_1d2d.cuh deep_gemm/heuristics/sm90.py
python tools/sweep.py 4096x4096x7168 4096x2112x7168 --bm 128 --bn 112 144 160 192 --num-tests 10 2>&1 | grep -v -i warn
git checkout include deep_gemm
