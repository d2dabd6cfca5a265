"""Traffic floors: how fast any kernel can be that only moves a GEMM's bytes, timed by the benchmarks' own method.

For each case the script times, in one process and on the same kind of inputs: our GEMM call, and a streaming
kernel that reads as many bytes as the GEMM's inputs (A, B and scales) and writes as many as its output D, with
nothing else to do (no MMA, no scales, no tiles: one program per 16-32 KB block, the best of three launch shapes).
Both are timed the way bench.py and bmm.py time everything: kineto kernel time, an 8 GB memset
before every call ("write flush": it leaves L2 full of dirty lines, which the next kernel's reads must first
write back to HBM), mean of --num-tests; and again after an 8 GB read instead ("read flush": L2 left clean), to
show how much of a floor is the method's. A target asking for more effective TB/s than the floor kernel reaches
under the same method cannot be met by any GEMM; the ratio ours/floor says how far a kernel is from its bytes.

With `--peer MODULE` (a package with DeepGEMM's API, e.g. DeepGEMM built under another name) the dense, decode,
decode_few_columns and masked_decode cases also time the peer's call (`fp8_gemm_nt`, `m_grouped_fp8_gemm_nt_masked`)
on the same tensors, in the same process, check it against ours on the defined elements, and report peer/floor and
peer/ours.
`--flushes write` skips the read-flush column (half the time).

The cast suites (issue 35) time the FP8 casts' kernel (`per_token_cast_to_fp8` with the GEMMs' MN-major scales,
`per_block_cast_to_fp8`, and a few variants) against the floor of reading x once and writing the e4m3 data and the
scales once, and, after the write flush only, the torch definition they replace (`*_cast_to_fp8_torch`: the sum of
its kernels, its zero fill included; the launch gaps between them are not counted). Each case first checks that the
kernel's result is bitwise the torch definition's ("bitwise_equal" in the JSON).

    python -m benchmarks.floors [--suite bmm|dense|decode|decode_few_columns|masked|masked_decode|cast|
                                         cast_block|cast_channel|cast_variants|all]
                                [--peer MODULE] [--flushes write read] [--json PATH]   (needs Triton, as the BMM
                                seed does)
"""
import argparse
import importlib
import json
import math
import random
import sys

import torch

import deep_gemm
from benchmarks import bmm
from benchmarks.bench import DENSE_NK, dense_shapes, gpu_state, provenance, skewed_sizes
from deep_gemm.testing import calc_diff, count_bytes
from deep_gemm.utils import math as dg_math

try:
    import triton
    import triton.language as tl
except ImportError:  # the floors need a streaming kernel; everything else in benchmarks/ runs without Triton
    triton = None

FLOOR_KERNEL = "traffic_floor_kernel"
# (words per program, warps): the floor is the fastest of these launch shapes for each case.
FLOOR_SHAPES = ((4096, 4), (4096, 8), (8192, 8))

if triton is not None:
    @triton.jit
    def traffic_floor_kernel(src, dst, sink, n_read, n_write, BLOCK: tl.constexpr):
        # Program p reads words [p * BLOCK, (p + 1) * BLOCK) of src and writes the same range of dst, each where it
        # exists; the xor of what it read goes to sink[p] so that no read is dead when nothing is written.
        p = tl.program_id(0)
        offs = p.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        words = tl.load(src + offs, mask=offs < n_read, other=0)
        tl.store(dst + offs, words, mask=offs < n_write)
        tl.store(sink + p, tl.xor_sum(words, 0))


def _bytes_to_words(n):
    return (n + 3) // 4


def floor_us(read_bytes, write_bytes, flushes, flush, num_tests):
    """Microseconds of the fastest FLOOR_SHAPES launch of the traffic kernel moving these bytes."""
    n_read, n_write = _bytes_to_words(read_bytes), _bytes_to_words(write_bytes)
    src = torch.randint(-2 ** 31, 2 ** 31 - 1, (max(n_read, 1),), dtype=torch.int32, device="cuda")
    dst = torch.empty((max(n_write, 1),), dtype=torch.int32, device="cuda")
    best = None
    for block, warps in FLOOR_SHAPES:
        grid = max(1, triton.cdiv(max(n_read, n_write), block))
        sink = torch.empty((grid,), dtype=torch.int32, device="cuda")
        fn = lambda grid=grid, sink=sink, block=block, warps=warps: traffic_floor_kernel[(grid,)](  # noqa: E731
            src, dst, sink, n_read, n_write, BLOCK=block, num_warps=warps)
        t = flushes.time(fn, FLOOR_KERNEL, flush, num_tests) * 1e6
        best = t if best is None else min(best, t)
    return best


# ---- The cases: each builds its inputs and returns (label, target note, our call, read bytes, write bytes) ----

def bmm_case(b, m, n, k):
    x8, xs, y8, ys = bmm.make_inputs(b, m, n, k)
    out = torch.empty((b, m, n), device="cuda", dtype=torch.bfloat16)
    fn = lambda: deep_gemm.bmm_fp8_fp8_bf16_nt((x8, xs), (y8, ys), out)  # noqa: E731
    return f"bmm {b}x{m}x{n}x{k}", fn, count_bytes(x8, xs, y8, ys), count_bytes(out), None


def dense_case(m, n, k):
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    fn = lambda: deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)  # noqa: E731

    def peer_fn(lib):  # the peer's own output tensor; its result is checked against ours before timing
        peer_out = torch.empty_like(out)
        return peer_out, lambda: lib.fp8_gemm_nt((a8, sa), (b8, sb), peer_out)
    # Effective traffic as the issue counts it: A + B + scales + D.
    return f"dense {m}x{n}x{k}", fn, count_bytes(a8, sa, b8, sb), count_bytes(out), (out, peer_fn, None)


def masked_case(groups, m, n, k):
    """Masked decode: every expert with exactly m rows (m_max = m); the bytes that exist are all moved."""
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((groups * m, k), device="cuda", dtype=torch.bfloat16))
    a8 = a8.view(groups, m, k)
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa.view(groups, m, -1))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((groups * n, k), device="cuda", dtype=torch.bfloat16))
    b8, sb = b8.view(groups, n, k), sb.view(groups, -1, sb.shape[-1])
    out = torch.empty((groups, m, n), device="cuda", dtype=torch.bfloat16)
    masked_m = torch.full((groups,), m, dtype=torch.int32, device="cuda")
    fn = lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a8, sa), (b8, sb), out, masked_m, m)  # noqa
    return f"masked {groups}x{m} n{n} k{k}", fn, count_bytes(a8, sa, b8, sb), count_bytes(out), None


def masked_decode_case(groups, expected_m, n, k, skewed):
    """Masked decode as issue 33 states it: `groups` experts of `expected_m` rows each, or skewed counts around it
    (bench.skewed_sizes: a fifth empty, a tenth 4x); the bytes of experts with rows, their rows and outputs."""
    sizes = skewed_sizes(groups, expected_m, random.Random(groups * 1000 + expected_m)) if skewed \
        else [expected_m] * groups
    m_max = max(max(sizes), 1)
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((groups * m_max, k), device="cuda", dtype=torch.bfloat16))
    a8 = a8.view(groups, m_max, k)
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa.view(groups, m_max, -1))
    b8 = torch.randn((groups, n, k), device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    sb = torch.rand((groups, (n + 127) // 128, (k + 127) // 128), device="cuda") + 0.5
    out = torch.empty((groups, m_max, n), device="cuda", dtype=torch.bfloat16)
    masked_m = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    fn = lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a8, sa), (b8, sb), out, masked_m,  # noqa: E731
                                                                 expected_m)
    valid = torch.arange(m_max, device="cuda")[None, :, None] < masked_m[:, None, None]

    def peer_fn(lib):
        peer_out = torch.empty_like(out)
        return peer_out, lambda: lib.m_grouped_fp8_gemm_nt_masked((a8, sa), (b8, sb), peer_out, masked_m, expected_m)
    rows, experts = sum(sizes), sum(1 for s in sizes if s)
    read = rows * (k + 4 * ((k + 127) // 128)) + experts * (n * k + 4 * sb[0].numel())
    label = f"masked {groups}x{expected_m}{' skewed' if skewed else ''} n{n} k{k}"
    return label, fn, read, rows * n * 2, (out, peer_fn, valid)


def cast_case(kind, rows, cols, dtype="bf16", ue8m0=False):
    """An FP8 cast of x [rows, cols]: reads x, writes the e4m3 data and the float32 scales (per token in the GEMMs'
    MN-major layout, as a GEMM's A takes them)."""
    x = torch.randn((rows, cols), device="cuda", dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    kwargs = dict(use_ue8m0=ue8m0, **(dict(mn_major_sf=True) if kind == "per_token" else {}))
    fn = lambda: getattr(deep_gemm.utils, f"{kind}_cast_to_fp8")(x, **kwargs)  # noqa: E731
    torch_fn = lambda: getattr(dg_math, f"{kind}_cast_to_fp8_torch")(x, use_ue8m0=ue8m0)  # noqa: E731
    (data, sf), (ref_data, ref_sf) = fn(), torch_fn()
    equal = torch.equal(data.view(torch.uint8), ref_data.view(torch.uint8)) and \
        torch.equal(sf.contiguous().view(torch.int32), ref_sf.view(torch.int32))
    label = f"{kind} {dtype}{' ue8m0' if ue8m0 else ''} {rows}x{cols}"
    return label, fn, count_bytes(x), count_bytes(data, sf), None, dict(kernel=CAST_KERNEL, torch_fn=torch_fn,
                                                                        bitwise_equal=equal)


_torch_path_flush = None


def torch_path_us(fn, num_tests):
    """Microseconds of every kernel of `fn` per call after the write flush, the flush's own fill excluded (an int32
    fill: the casts' torch definitions fill float32 buffers, which count)."""
    global _torch_path_flush
    if _torch_path_flush is None:
        _torch_path_flush = torch.empty((8 << 30) // 4, dtype=torch.int32, device="cuda")
    flush = _torch_path_flush
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(num_tests):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for evt in prof.key_averages():
        if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        key = evt.key.lower()
        if "memset" in key or ("fill" in key and "<int>" in key):
            continue
        total += getattr(evt, "self_device_time_total", 0) or 0
    return total / num_tests


# Issue 17's 32 MLA shapes (bmm.py's, without the two large batches); issue 14's small-m dense shapes (bench.py's
# with m <= 128 and k a multiple of 128: the "small m" suite of the same-run harness) and its masked decode
# (16 experts x 16-48 tokens, n 4096, k 7168; DeepGEMM's own H200 log: 3.74 TB/s); issue 33's dense decode
# (m in DECODE_MS x DeepGEMM's six (n, k) pairs).
DECODE_MS = (1, 2, 4, 8, 16, 32)
CAST_ROWS = (64, 512, 4096, 32768, 65536)
CAST_COLS = (2048, 4096, 7168)
SUITES = {
    "bmm": [(bmm_case, shape) for shape in bmm.issue_shapes() if bmm.is_mla(*shape)],
    "dense": [(dense_case, (m, n, k)) for m, n, k in dense_shapes() if m <= 128 and k % 128 == 0],
    "decode": [(dense_case, (m, n, k)) for n, k in DENSE_NK for m in DECODE_MS],
    # Decode GEMMs of few weight columns (DeepSeek-V3's kv_a_proj 7168 -> 576 and q_a_proj 7168 -> 1536, and
    # 256): the K-block chain bounds them, not bytes (benchmarks/NOTES.md "Dense decode").
    "decode_few_columns": [(dense_case, (m, n, 7168)) for n in (256, 576, 1536) for m in DECODE_MS],
    # Issue 33's masked decode: G experts x expected_m rows, uniform and skewed, two expert shapes.
    "masked_decode": [(masked_decode_case, (g, m, n, k, skewed)) for n, k in ((4096, 7168), (7168, 2048))
                      for g in (8, 32, 64, 256) for m in (1, 4, 8, 16, 32) for skewed in (False, True)],
    "masked": [(masked_case, (16, m, 4096, 7168)) for m in (16, 32, 48)],
    # Issue 35: the activation cast (per token, BF16, MN-major scales) and the weight cast (per block) over
    # 64-65536 rows x 2048-7168 columns; then FP32 inputs, UE8M0 scales and the per-channel cast at one shape.
    "cast": [(cast_case, ("per_token", m, k)) for m in CAST_ROWS for k in CAST_COLS],
    "cast_block": [(cast_case, ("per_block", m, k)) for m in CAST_ROWS for k in CAST_COLS],
    # The per-channel cast (groups of 128 rows: 128 stands for 64) over the same grid.
    "cast_channel": [(cast_case, ("per_channel", max(m, 128), k)) for m in CAST_ROWS for k in CAST_COLS],
    "cast_variants": [(cast_case, args) for args in (("per_token", 4096, 7168, "bf16", True),
                                                     ("per_token", 4096, 7168, "fp32", False),
                                                     ("per_block", 4096, 7168, "fp32", True),
                                                     ("per_channel", 4096, 7168, "bf16", False),
                                                     ("per_channel", 4096, 7168, "fp32", True))],
}
KERNEL = "fp8_gemm"  # ours and DeepGEMM's GEMM kernels both carry it in their names
CAST_KERNEL = "fp8_cast"  # the casts' kernel (fp8_cast_impl)


def run(suites, num_tests, flush_kinds=("write", "read"), peer=None):
    """Rows of every case of `suites`: ours, the floor kernel and (dense cases, with a `peer` module) the peer, each
    timed after every flush of `flush_kinds`."""
    flushes = bmm.Flushes()
    rows = []
    empty_us = {f: floor_us(0, 0, flushes, f, num_tests) for f in flush_kinds}
    print("empty launch of the floor kernel (one program): " +
          ", ".join(f"{us:.2f} us after the {f} flush" for f, us in empty_us.items()))
    cols = ["ours us", "floor us", "ours TB/s", "floor TB/s", "ours/floor"] + \
        (["peer us", "peer/floor", "ours/peer"] if peer else []) + \
        (["torch us", "torch/ours"] if any(s.startswith("cast") for s in suites) else [])
    head = ["case", "MB read", "MB written"] + [f"{f}: {c}" for f in flush_kinds for c in cols]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for suite in suites:
        for make, args in SUITES[suite]:
            label, fn, read_bytes, write_bytes, peer_case, *rest = make(*args)
            extra = rest[0] if rest else {}
            kernel, torch_fn = extra.get("kernel", KERNEL), extra.get("torch_fn")
            moved = read_bytes + write_bytes
            row = dict(suite=suite, case=label, args=list(args), read_bytes=read_bytes, write_bytes=write_bytes)
            if "bitwise_equal" in extra:
                row["bitwise_equal"] = extra["bitwise_equal"]
            peer_fn = None
            if peer is not None and peer_case is not None:
                out, make_peer, valid = peer_case
                peer_out, peer_fn = make_peer(peer)
                fn(), peer_fn()
                if valid is not None:  # only these elements are defined (masked rows past masked_m are not)
                    out, peer_out = out.float().masked_fill(~valid, 0), peer_out.float().masked_fill(~valid, 0)
                row["peer_diff"] = float(calc_diff(out, peer_out))  # both libraries computed the same product
            cells = []
            for flush in flush_kinds:
                ours = flushes.time(fn, kernel, flush, num_tests) * 1e6
                floor = floor_us(read_bytes, write_bytes, flushes, flush, num_tests)
                r = row[flush] = dict(ours_us=ours, floor_us=floor, ours_tbps=moved / ours / 1e6,
                                      floor_tbps=moved / floor / 1e6)
                cells += [f"{ours:.2f}", f"{floor:.2f}", f"{r['ours_tbps']:.2f}", f"{r['floor_tbps']:.2f}",
                          f"{ours / floor:.2f}"]
                if peer_fn is not None:
                    r["peer_us"] = flushes.time(peer_fn, KERNEL, flush, num_tests) * 1e6
                    cells += [f"{r['peer_us']:.2f}", f"{r['peer_us'] / floor:.2f}", f"{r['peer_us'] / ours:.3f}"]
                if torch_fn is not None and flush == "write":  # the read flush's own reduction would be counted
                    r["torch_us"] = torch_path_us(torch_fn, num_tests)
                    cells += [f"{r['torch_us']:.2f}", f"{r['torch_us'] / ours:.2f}"]
                elif torch_fn is not None:
                    cells += ["n/a", "n/a"]
            if row.get("bitwise_equal") is False:
                cells.append("NOT BITWISE EQUAL TO THE TORCH DEFINITION")
            print(f"| {label} | {read_bytes / 1e6:.2f} | {write_bytes / 1e6:.2f} | " + " | ".join(cells) + " |",
                  flush=True)
            rows.append(row)
            del fn, peer_fn, torch_fn, extra
            torch.cuda.empty_cache()
    return dict(empty_us=empty_us, rows=rows, summary=summarise(rows, flush_kinds))


def summarise(rows, flush_kinds):
    """Per suite and flush: geomean and worst of ours/floor, and with a peer of peer/floor and peer/ours (> 1: ours
    faster), and for the casts torch/ours (the torch definition's time over the kernel's)."""
    out = {}
    for suite in dict.fromkeys(r["suite"] for r in rows):
        for flush in flush_kinds:
            rs = [r[flush] for r in rows if r["suite"] == suite]
            entry = dict(cases=len(rs))
            ratios = dict(ours_over_floor=[r["ours_us"] / r["floor_us"] for r in rs])
            if all("peer_us" in r for r in rs):
                ratios.update(peer_over_floor=[r["peer_us"] / r["floor_us"] for r in rs],
                              peer_over_ours=[r["peer_us"] / r["ours_us"] for r in rs])
            if rs and all("torch_us" in r for r in rs):
                ratios.update(torch_over_ours=[r["torch_us"] / r["ours_us"] for r in rs])
            for name, vals in ratios.items():
                entry[name] = dict(geomean=math.exp(sum(map(math.log, vals)) / len(vals)), min=min(vals),
                                   max=max(vals))
            out[f"{suite}/{flush}"] = entry
            print(f"{suite}, {flush} flush: " + "; ".join(
                f"{name} geomean {e['geomean']:.3f} (min {e['min']:.3f}, max {e['max']:.3f})"
                for name, e in entry.items() if name != "cases"))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=["all", *SUITES], default="all")
    parser.add_argument("--num-tests", type=int, default=20)
    parser.add_argument("--flushes", nargs="+", choices=["write", "read"], default=["write", "read"],
                        help="time after these flushes (default both)")
    parser.add_argument("--peer", help="a package with DeepGEMM's API to time on the dense, decode, "
                                       "decode_few_columns and masked_decode cases")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if triton is None or not torch.cuda.is_available():
        print("floors: needs a CUDA GPU and Triton (the streaming kernel is a Triton kernel)", file=sys.stderr)
        return 2
    peer = importlib.import_module(args.peer) if args.peer else None
    result = run(list(SUITES) if args.suite == "all" else [args.suite], args.num_tests, tuple(args.flushes), peer)
    result.update(gpu_end=gpu_state(), provenance=provenance(), num_tests=args.num_tests, peer=args.peer,
                  method="kineto, mean of num_tests; write flush = 8 GB memset, read flush = 8 GB amax")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
