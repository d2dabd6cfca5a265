# Experiment: unroll 8 instead of 4 on the non-overlapped K loop (timing of the variant)
sed -i 's|#pragma unroll 4$|#pragma unroll 8|' include/deep_gemm/sm90/fp8_gemm_1d2d.cuh
grep -c "pragma unroll 8" include/deep_gemm/sm90/fp8_gemm_1d2d.cuh
python tools/sweep.py 4096x4096x7168 4096x7168x16384 4096x7168x2048 --bm 256 --bn 128 --num-tests 8 2>&1 | grep -v -i warn
sed -i 's|#pragma unroll 8$|#pragma unroll 4|' include/deep_gemm/sm90/fp8_gemm_1d2d.cuh
