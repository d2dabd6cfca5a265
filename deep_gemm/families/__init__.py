"""The kernel families: one module per kernel header (registered by one line in deep_gemm/runtime.py `FAMILIES`),
plus what they share (variant.py, plan.py, checks.py, fp8_gemm_1d2d_args.py). Families never import each other or
anything above them; see docs/adding_a_family.md."""
