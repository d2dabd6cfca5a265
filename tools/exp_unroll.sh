# Experiment: unroll the non-overlapped K loop by 4 (timing + correctness of the variant)
python tools/sweep.py 4096x4096x7168 4096x7168x2048 --bm 256 128 --bn 128 192 --num-tests 8 2>&1 | grep -v -i warn
python - <<'PY'
p = "include/deep_gemm/sm90/fp8_gemm_1d2d.cuh"
lines = open(p).read().split("\n")
i = 353
assert "for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block)" in lines[i], lines[i]
indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
lines.insert(i, indent + "#pragma unroll 4")
open(p, "w").write("\n".join(lines))
PY
grep -n -B1 "for (uint32_t k_block = 0; k_block < kNumKBlocks" include/deep_gemm/sm90/fp8_gemm_1d2d.cuh
python tools/sweep.py 4096x4096x7168 4096x7168x2048 --bm 256 128 --bn 128 192 --num-tests 8 2>&1 | grep -v -i warn
