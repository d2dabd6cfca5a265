"""The attention indexer's logits on the SM90 cases of DeepGEMM v2.6.1's test_attention: `fp8_fp4_mqa_logits`
(prefill) and `fp8_fp4_paged_mqa_logits` (decode), ours and optionally a second package with DeepGEMM's API (`--peer
MODULE`, e.g. DeepGEMM built under another name), on the same inputs in one process. Each call is timed by kineto as
the sum of every kernel it launches (DeepGEMM's separate clean kernel included; the paged metadata is made once,
outside), after an 8 GB L2 flush, averaged over --num-tests calls; its result is checked (calc_diff over the defined
columns) against an FP32 reference of the FP8 values. Ratios are time ratios: > 1 means ours is faster. The cases are
enumerated in test_attention's order and `--cases N` samples them with its seeds, so N = DG_MQA_NUM_CASES picks the
cases that test prints. The SM clock is read after each suite.

Usage (GPU machine): python -m benchmarks.attention [--suites prefill paged] [--cases N] [--peer MODULE]
                     [--num-tests 10] [--json OUT]
"""
import random
import sys

import torch

from benchmarks.bf16 import gpu_runner, run_suites, suite_parser

SUITES = ("prefill", "paged")
# test_attention's sampling seeds per part (its DG_MQA_NUM_CASES).
SEEDS = {"prefill": 0, "paged": 100000}


def prefill_cases():
    """(logits dtype, compressed, clean, S, Skv, H, D, context-parallel ranges) in test_attention's SM90 order."""
    return [(dtype, compressed, clean, s, skv, h, d, cp)
            for dtype in (torch.bfloat16, torch.float32)
            for compressed, clean in ((False, True), (True, False))
            for s in (2048, 8192) for skv in (8192, 65536) for h in (32, 64) for d in (32, 64, 128)
            for cp in (True, False)]


def paged_cases():
    """(logits dtype, B, next_n, H, mean context) in test_attention's SM90 order (B x mean <= 32M tokens)."""
    return [(dtype, b, next_n, h, avg)
            for dtype in (torch.bfloat16, torch.float32) for b in (256, 4096) for next_n in (1, 2)
            for h in (32, 64) for avg in (8192, 65536) if b * avg <= 32 * 1024 * 1024]


def sample(suite, cases, count):
    return cases if count is None else random.Random(SEEDS[suite]).sample(cases, min(count, len(cases)))


def key_ranges(s, skv, cp):
    """test_attention's ranges: causal ends (ke = i + Skv - S), or one context-parallel rank's two chunks."""
    if not cp:
        return (torch.zeros(s, dtype=torch.int32, device="cuda"),
                (torch.arange(s, device="cuda") + (skv - s)).int())
    chunk, cp_size = s // 2, skv // s
    rank = cp_size // 3
    i = torch.arange(chunk, device="cuda")
    ke = torch.cat([rank * chunk + i, (cp_size * 2 - 1 - rank) * chunk + i]).int()
    return torch.zeros(s, dtype=torch.int32, device="cuda"), ke


def prefill_reference(q, kv, kv_sf, weights, ks, ke, chunk=4096):
    """FP32 logits of the FP8 values over the keys in chunks, and the in-range mask."""
    s, skv = q.shape[0], kv.shape[0]
    logits = torch.empty((s, skv), device="cuda")
    qf = q.float()
    for k0 in range(0, skv, chunk):
        score = torch.einsum("shd,nd->shn", qf, kv[k0:k0 + chunk].float()).relu_()
        logits[:, k0:k0 + chunk] = torch.einsum("shn,sh->sn", score, weights) * kv_sf[None, k0:k0 + chunk]
    cols = torch.arange(skv, device="cuda")
    return logits, (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])


def suite_prefill(runner, libs, count):
    for dtype, compressed, clean, s, skv, h, d, cp in sample("prefill", prefill_cases(), count):
        q = torch.randn((s, h, d), device="cuda").to(torch.float8_e4m3fn)
        kv_bf16 = torch.randn((skv, d), device="cuda")
        kv_sf = kv_bf16.abs().amax(1).clamp(min=1e-4) / 448.0
        kv = (kv_bf16 / kv_sf[:, None]).to(torch.float8_e4m3fn)
        weights = torch.randn((s, h), device="cuda")
        ks, ke = key_ranges(s, skv, cp)
        ref, inside = prefill_reference(q, kv, kv_sf, weights, ks, ke)
        width = int((ke - ks).max()) if compressed else 0
        outs = {}

        def call(lib, mod):
            outs[lib] = mod.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), weights, ks, ke, clean_logits=clean,
                                               max_seqlen_k=width, logits_dtype=dtype)

        def check(lib):
            got = outs[lib].float()
            if compressed:  # column c of row i is key ks[i] + c
                cols = torch.arange(width, device="cuda")
                full = torch.zeros_like(ref)
                valid = cols[None, :] < (ke - ks)[:, None]
                rows, c = valid.nonzero(as_tuple=True)
                full[rows, ks[rows] + c] = got[rows, c]
                got = full
            return runner.calc_diff(got.masked_fill(~inside, 0), ref.masked_fill(~inside, 0))
        flops = 2 * int(inside.sum()) * h * d
        label = (f"{'BF16' if dtype == torch.bfloat16 else 'FP32'} cmp={int(compressed)} S={s} Skv={skv} H={h} D={d} "
                 f"cp={int(cp)}")
        calls = {lib: (lambda lib=lib, mod=mod: call(lib, mod)) for lib, mod in libs.items()}
        runner.case("prefill", label, flops, calls, check)
        del ref, inside, outs


def paged_inputs(b, next_n, h, avg):
    ctx = torch.randint(int(0.7 * avg), int(1.3 * avg), (b,), device="cuda", dtype=torch.int32)
    blocks_per = (ctx + 63) // 64
    max_blocks, total = int(blocks_per.max()), int(blocks_per.sum())
    table = torch.zeros((b, max_blocks), dtype=torch.int32, device="cuda")
    pool = torch.randperm(total, device="cuda", dtype=torch.int32)
    starts = torch.cumsum(blocks_per, 0) - blocks_per
    cols = torch.arange(max_blocks, device="cuda")
    used = cols[None, :] < blocks_per[:, None]
    table[used] = pool[(starts[:, None] + cols[None, :])[used].long()]
    values = torch.randn((total, 64 * 128), device="cuda")
    sf = values.view(total, 64, 128).abs().amax(2).clamp(min=1e-4) / 448.0
    fp8 = (values.view(total, 64, 128) / sf[:, :, None]).to(torch.float8_e4m3fn).view(total, -1)
    kv_cache = torch.cat([fp8.view(torch.uint8), sf.view(torch.uint8)], 1).view(total, 64, 1, 132)
    q = torch.randn((b, next_n, h, 128), device="cuda").to(torch.float8_e4m3fn)
    weights = torch.randn((b * next_n, h), device="cuda")
    ctx_n = ((ctx[:, None] + 1) * torch.rand((b, next_n), device="cuda")).int()
    ctx_n[:, -1] = ctx
    return q, kv_cache, weights, ctx_n.contiguous(), table, max_blocks * 64


def suite_paged(runner, libs, count):
    from deep_gemm.families.sm90_fp8_paged_mqa_logits import reference
    for dtype, b, next_n, h, avg in sample("paged", paged_cases(), count):
        q, kv_cache, weights, ctx, table, width = paged_inputs(b, next_n, h, avg)
        metas = {lib: mod.get_paged_mqa_logits_metadata(ctx, 64, mod.get_num_sms()) for lib, mod in libs.items()}
        outs = {}

        def call(lib, mod):
            outs[lib] = mod.fp8_fp4_paged_mqa_logits((q, None), kv_cache, weights, ctx, table, metas[lib], width,
                                                     clean_logits=False, logits_dtype=dtype)

        def check(lib, step=64):  # the reference in batch chunks (the whole one would not fit)
            x = y = xy = 0.0
            for b0 in range(0, b, step):
                ref, written = reference(q[b0:b0 + step], kv_cache, weights[b0 * next_n:(b0 + step) * next_n],
                                         ctx[b0:b0 + step], table[b0:b0 + step])
                got = outs[lib][b0 * next_n:(b0 + step) * next_n, :ref.shape[1]].float().masked_fill(~written, 0)
                ref = ref.masked_fill(~written, 0).double()
                got = got.double()
                x, y, xy = x + float((got * got).sum()), y + float((ref * ref).sum()), xy + float((got * ref).sum())
            return 1 - 2 * xy / max(x + y, 1e-30)
        tokens = int(ctx.sum())
        flops = 2 * tokens * h * 128
        label = f"{'BF16' if dtype == torch.bfloat16 else 'FP32'} B={b} next_n={next_n} H={h} avg={avg}"
        calls = {lib: (lambda lib=lib, mod=mod: call(lib, mod)) for lib, mod in libs.items()}
        runner.case("paged", label, flops, calls, check)
        row = runner.rows[-1]
        moved = int(ctx[:, -1].sum()) * 132 + q.numel() + weights.numel() * 4 + tokens * dtype.itemsize
        for lib in libs:
            if f"{lib}_us" in row:
                row[f"{lib}_gbps"] = moved / row[f"{lib}_us"] / 1e3
        del outs


def parse_args(argv=None):
    parser = suite_parser(__doc__, SUITES, "a second package with DeepGEMM's API to time on the same inputs")
    parser.add_argument("--cases", type=int, help="sample this many cases per suite (test_attention's seeds)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    ready = gpu_runner(args, "attention")
    if ready is None:
        return 2
    libs, runner = ready
    return run_suites(args, runner, lambda suite: {"prefill": suite_prefill, "paged": suite_paged}[suite](
        runner, libs, args.cases), others=("peer",))


if __name__ == "__main__":
    sys.exit(main())
