"""Print the GPU tests' (m, n, k) shapes, one per line, for `python -m deep_gemm compile --shapes`."""
import sys

sys.path[:0] = ["tests/gpu", "tests"]  # test_gemm_gpu imports tests/gemm_cases.py
import test_gemm_gpu as t  # noqa: E402

shapes = [(m, n, k) for m in (1, 64, 128, 4096) for n, k in t.DEEPSEEK_NK]
shapes += t._random_shapes(56, seed=2026) + t.RAGGED
for m, n, k in shapes:
    print(m, n, k)
