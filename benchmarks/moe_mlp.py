"""A DeepSeek-V3 expert MLP (hidden 7168, intermediate 2048, 256 experts, top-8) as gate/up -> SiLU(gate) * up and
1 x 128 quantisation -> down, three ways in one process on the same inputs:
  "ours"    the fused path: `m_grouped_fp8_gemm_nt_{contiguous,masked}_swiglu` (the activation and quantisation in
            the GEMM's epilogue) then the down GEMM taking its (D, SFD) as `a`;
  "unfused" ours with a BF16 gate/up output, then the activation in PyTorch (F.silu(gate) * up, BF16) and our cast
            kernel (`per_token_cast_to_fp8`), then the same down GEMM;
  "peer"    (--peer MODULE, a package with DeepGEMM's API) the peer's BF16 gate/up GEMM, the same activation and
            cast, the peer's down GEMM.
Prefill: tokens x 8 rows spread evenly over the 256 experts, contiguous layout. Decode: the masked layout with
masked_m drawn around expected_m (0.7-1.3x, as DeepGEMM's tests), the same counts for every path. The input's own cast
is not timed (every path needs it). Each path is timed by kineto as the sum of every kernel it launches, after an
8 GB L2 flush, over --num-tests calls; its BF16 output is checked against the unfused path's (calc_diff). Ratios
are time ratios: > 1 means the fused path is faster.

Usage (GPU machine): python -m benchmarks.moe_mlp [--suites prefill decode] [--peer MODULE] [--num-tests 10]
                     [--json OUT]
"""
import random
import sys

import torch

from benchmarks.bf16 import gpu_runner, run_suites, suite_parser

SUITES = ("prefill", "decode")
HIDDEN, INTER, EXPERTS, TOPK = 7168, 2048, 256, 8
PREFILL_TOKENS = (4096, 8192, 16384, 32768)
DECODE_EXPECTED_M = (1, 4, 8, 16, 32)


def _weights(groups):
    import deep_gemm
    w1 = torch.empty((groups, 2 * INTER, HIDDEN), dtype=torch.float8_e4m3fn, device="cuda")
    s1 = torch.empty((groups, 2 * INTER // 128, HIDDEN // 128), device="cuda")
    w2 = torch.empty((groups, HIDDEN, INTER), dtype=torch.float8_e4m3fn, device="cuda")
    s2 = torch.empty((groups, HIDDEN // 128, INTER // 128), device="cuda")
    for g in range(groups):  # one expert at a time: the BF16 copies of all 256 would be 22 GB
        w1[g], s1[g] = deep_gemm.per_block_cast_to_fp8(torch.randn((2 * INTER, HIDDEN), device="cuda",
                                                                   dtype=torch.bfloat16))
        w2[g], s2[g] = deep_gemm.per_block_cast_to_fp8(torch.randn((HIDDEN, INTER), device="cuda",
                                                                   dtype=torch.bfloat16))
    return (w1, s1), (w2, s2)


def _activation(gate_up):
    gate, up = gate_up[..., :INTER], gate_up[..., INTER:]
    return torch.nn.functional.silu(gate) * up


def suite_prefill(runner, libs, w1, w1_swiglu, w2):
    import deep_gemm
    for tokens in PREFILL_TOKENS:
        rows = tokens * TOPK
        m_indices = torch.arange(rows, device="cuda", dtype=torch.int32) // (rows // EXPERTS)
        x = deep_gemm.per_token_cast_to_fp8(torch.randn((rows, HIDDEN), device="cuda", dtype=torch.bfloat16),
                                            mn_major_sf=True)
        h = (torch.empty((rows, INTER), dtype=torch.float8_e4m3fn, device="cuda"),
             torch.empty((INTER // 128, rows), device="cuda").t())
        gate_up = torch.empty((rows, 2 * INTER), dtype=torch.bfloat16, device="cuda")
        outs = {lib: torch.empty((rows, HIDDEN), dtype=torch.bfloat16, device="cuda")
                for lib in ("ours", "unfused", *libs)}

        def fused():
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous_swiglu(x, w1_swiglu, h, m_indices)
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous(h, w2, outs["ours"], m_indices)

        def unfused_of(lib, mod):
            def run():
                mod.m_grouped_fp8_gemm_nt_contiguous(x, w1, gate_up, m_indices)
                act = deep_gemm.per_token_cast_to_fp8(_activation(gate_up), mn_major_sf=True)
                mod.m_grouped_fp8_gemm_nt_contiguous(act, w2, outs[lib], m_indices)
            return run
        _case(runner, libs, "prefill", f"{tokens} tokens ({rows // EXPERTS} rows x {EXPERTS} experts)",
              2 * rows * HIDDEN * 3 * INTER, fused, unfused_of, outs)


def suite_decode(runner, libs, w1, w1_swiglu, w2):
    import deep_gemm
    rng = random.Random(0)
    for expected_m in DECODE_EXPECTED_M:
        m_max = max(8, 2 * expected_m)
        counts = [min(m_max, max(0, round(expected_m * rng.uniform(0.7, 1.3)))) for _ in range(EXPERTS)]
        masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
        x8, sx = deep_gemm.per_token_cast_to_fp8(torch.randn((EXPERTS * m_max, HIDDEN), device="cuda",
                                                             dtype=torch.bfloat16))
        x = (x8.view(EXPERTS, m_max, HIDDEN), sx.view(EXPERTS, m_max, -1))
        h = (torch.empty((EXPERTS, m_max, INTER), dtype=torch.float8_e4m3fn, device="cuda"),
             deep_gemm.get_mn_major_tma_aligned_tensor(torch.empty((EXPERTS, m_max, INTER // 128), device="cuda")))
        gate_up = torch.empty((EXPERTS, m_max, 2 * INTER), dtype=torch.bfloat16, device="cuda")
        outs = {lib: torch.zeros((EXPERTS, m_max, HIDDEN), dtype=torch.bfloat16, device="cuda")
                for lib in ("ours", "unfused", *libs)}

        def fused():
            deep_gemm.m_grouped_fp8_gemm_nt_masked_swiglu(x, w1_swiglu, h, masked_m, expected_m)
            deep_gemm.m_grouped_fp8_gemm_nt_masked(h, w2, outs["ours"], masked_m, expected_m)

        def unfused_of(lib, mod):
            def run():
                mod.m_grouped_fp8_gemm_nt_masked(x, w1, gate_up, masked_m, expected_m)
                a8, sa = deep_gemm.per_token_cast_to_fp8(_activation(gate_up).view(-1, INTER))
                mod.m_grouped_fp8_gemm_nt_masked((a8.view(EXPERTS, m_max, INTER), sa.view(EXPERTS, m_max, -1)), w2,
                                                 outs[lib], masked_m, expected_m)
            return run
        rows = sum(counts)
        _case(runner, libs, "decode", f"expected_m {expected_m} ({rows} rows, m_max {m_max})",
              2 * rows * HIDDEN * 3 * INTER, fused, unfused_of, outs, counts)


def _case(runner, libs, suite, label, flops, fused, unfused_of, outs, counts=None):
    import deep_gemm
    unfused = unfused_of("unfused", deep_gemm)
    unfused()
    torch.cuda.synchronize()
    reference = outs["unfused"].float().clone()
    calls = {"ours": fused, "unfused": unfused}
    for lib, mod in libs.items():
        if lib not in ("ours", "unfused"):
            calls[lib] = unfused_of(lib, mod)

    def check(lib):
        if counts is None:
            return runner.calc_diff(outs[lib].float(), reference)
        counted = torch.tensor(counts, device="cuda").view(-1, 1)
        rows = torch.arange(outs[lib].shape[1], device="cuda").view(1, -1) < counted
        return runner.calc_diff(outs[lib][rows].float(), reference[rows])
    runner.case(suite, label, flops, calls, check)
    row = runner.rows[-1]
    if row.get("ours_us") and row.get("unfused_us"):
        row["ours_over_unfused"] = row["unfused_us"] / row["ours_us"]
        print(f"  fused vs ours unfused: {row['ours_over_unfused']:.3f}", flush=True)


def parse_args(argv=None):
    return suite_parser(__doc__, SUITES, "a second package with DeepGEMM's API: its BF16 GEMMs, our activation and "
                        "cast").parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    ready = gpu_runner(args, "moe_mlp")
    if ready is None:
        return 2
    libs, runner = ready
    import deep_gemm
    w1, w2 = _weights(EXPERTS)
    w1_swiglu = deep_gemm.utils.interleave_swiglu_weights(w1)
    return run_suites(args, runner, lambda suite: (suite_prefill if suite == "prefill" else suite_decode)(
        runner, libs, w1, w1_swiglu, w2))


if __name__ == "__main__":
    sys.exit(main())
