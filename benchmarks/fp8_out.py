"""FP8-output GEMMs (`fp8_gemm_nt_fp8_out` and its contiguous / masked forms) against the two-pass path they replace:
the same GEMM with a BF16 d, then `per_token_cast_to_fp8(mn_major_sf=True)` ("unfused": ours twice), and, with
`--peer MODULE` (a package with DeepGEMM's API, e.g. DeepGEMM built under another name), the peer's BF16 GEMM then
our cast ("peer"). One process, the same inputs; each path is timed by kineto as the sum of every kernel it launches,
after an 8 GB L2 flush, over --num-tests calls, and checked once (calc_diff of the dequantised e4m3 output against
the path's own FP32 reference: the BF16-output GEMM's product). Ratios are time ratios: > 1 means the fused call is
faster. The SM clock is read after each suite.

Usage (GPU machine): python -m benchmarks.fp8_out [--suites dense contiguous masked] [--peer MODULE]
                     [--num-tests 10] [--json OUT]
"""
import sys

import torch

from benchmarks.bf16 import gpu_runner, run_suites, suite_parser

SUITES = ("dense", "contiguous", "masked")
# DeepSeek-V3's expert and dense shapes: gate/up (n = 2 x 2048) and down (k = 2048) of a 7168-wide model, and two of
# its dense projections.
DENSE = [(m, n, k) for m in (128, 4096, 16384) for n, k in ((4096, 7168), (7168, 2048), (2048, 7168), (24576, 1536))]
CONTIGUOUS = [(groups, rows, n, k) for groups, rows in ((8, 512), (32, 1024)) for n, k in ((4096, 7168), (7168, 2048))]
MASKED = [(groups, m_max, n, k) for groups, m_max in ((8, 32), (32, 8), (256, 16)) for n, k in ((4096, 7168),
                                                                                                (7168, 2048))]


def dense_cases():
    return list(DENSE)


def grouped_cases(suite):
    return list(CONTIGUOUS if suite == "contiguous" else MASKED)


def _dequant(d, sfd):
    n = d.shape[-1]
    return d.float() * sfd.repeat_interleave(128, dim=-1)[..., :n]


def _scales(lead, rows, n):
    groups, rows_pad = (n + 127) // 128, (rows + 3) // 4 * 4
    return torch.empty((*lead, groups, rows_pad), device="cuda").transpose(-1, -2)[..., :rows, :]


def _paths(runner, libs, suite, label, flops, fused, bf16_of):
    """Time the fused call and, for every library, its BF16 GEMM then our cast. fused() -> (D, SFD) it wrote;
    bf16_of(mod) -> (fn writing a BF16 output, that output)."""
    import deep_gemm
    outs = {}
    ours_bf16, ref = bf16_of(deep_gemm)
    ours_bf16()
    torch.cuda.synchronize()
    reference = ref.float()
    calls = {"ours": lambda: outs.__setitem__("ours", fused())}
    for lib, mod in [("unfused", deep_gemm)] + [(lib, mod) for lib, mod in libs.items() if lib != "ours"]:
        fn, out = bf16_of(mod)

        def two_pass(lib=lib, fn=fn, out=out):
            fn()
            outs[lib] = deep_gemm.per_token_cast_to_fp8(out.view(-1, out.shape[-1]), mn_major_sf=True)
        calls[lib] = two_pass

    def check(lib):
        d, sfd = outs[lib]
        return runner.calc_diff(_dequant(d, sfd).view(reference.shape), reference)
    runner.case(suite, label, flops, calls, check)
    row = runner.rows[-1]
    if row.get("ours_us") and row.get("unfused_us"):
        row["ours_over_unfused"] = row["unfused_us"] / row["ours_us"]
        print(f"  fused vs ours unfused: {row['ours_over_unfused']:.3f}", flush=True)


def suite_dense(runner, libs):
    import deep_gemm
    for m, n, k in dense_cases():
        a = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16),
                                            mn_major_sf=True)
        b = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
        d, sfd = torch.empty((m, n), dtype=torch.float8_e4m3fn, device="cuda"), _scales((), m, n)

        def fused():
            deep_gemm.fp8_gemm_nt_fp8_out(a, b, (d, sfd))
            return d, sfd

        def bf16_of(mod):
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            return (lambda: mod.fp8_gemm_nt(a, b, out)), out
        _paths(runner, libs, "dense", f"{m}x{n}x{k}", 2 * m * n * k, fused, bf16_of)


def suite_grouped(runner, libs, suite):
    import deep_gemm
    for groups, rows, n, k in grouped_cases(suite):
        b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((groups * n, k), device="cuda", dtype=torch.bfloat16))
        b = (b8.view(groups, n, k), sb.view(groups, (n + 127) // 128, (k + 127) // 128))
        if suite == "contiguous":
            m = groups * rows
            a = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16),
                                                mn_major_sf=True)
            index = torch.arange(m, device="cuda", dtype=torch.int32) // rows
            d, sfd = torch.empty((m, n), dtype=torch.float8_e4m3fn, device="cuda"), _scales((), m, n)

            def fused():
                deep_gemm.m_grouped_fp8_gemm_nt_contiguous_fp8_out(a, b, (d, sfd), index)
                return d, sfd

            def bf16_of(mod):
                out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
                return (lambda: mod.m_grouped_fp8_gemm_nt_contiguous(a, b, out, index)), out
            flops = 2 * m * n * k
        else:
            m = groups * rows
            a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16))
            # Per-group MN-major scales, the layout both libraries' masked GEMMs take without a conversion.
            a = (a8.view(groups, rows, k),
                 deep_gemm.get_mn_major_tma_aligned_tensor(sa.contiguous().view(groups, rows, -1)))
            masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
            d = torch.empty((groups, rows, n), dtype=torch.float8_e4m3fn, device="cuda")
            sfd = _scales((groups,), rows, n)

            def fused():
                deep_gemm.m_grouped_fp8_gemm_nt_masked_fp8_out(a, b, (d, sfd), masked_m, rows)
                return d, sfd

            def bf16_of(mod):
                out = torch.empty((groups, rows, n), dtype=torch.bfloat16, device="cuda")
                return (lambda: mod.m_grouped_fp8_gemm_nt_masked(a, b, out, masked_m, rows)), out
            flops = 2 * m * n * k
        _paths(runner, libs, suite, f"{groups}x{rows} n{n} k{k}", flops, fused, bf16_of)


def parse_args(argv=None):
    return suite_parser(__doc__, SUITES, "a second package with DeepGEMM's API: its BF16 GEMM, then our cast") \
        .parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    ready = gpu_runner(args, "fp8_out")
    if ready is None:
        return 2
    libs, runner = ready
    return run_suites(args, runner, lambda suite: suite_dense(runner, libs) if suite == "dense"
                      else suite_grouped(runner, libs, suite))


if __name__ == "__main__":
    sys.exit(main())
