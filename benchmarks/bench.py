"""Benchmark the GEMMs against cuBLAS blockwise (torch._scaled_mm) on the same inputs, in the same run.

Suites (--suite, default all; one per GEMM variant of the registry on sm_90a, deep_gemm.runtime.variants_on): dense
(gemm_fp8_fp8_bf16_nt, plus host overhead and compile time), contiguous, masked and psum (the MoE grouped GEMMs; psum:
the contiguous GEMM with DeepGEMM's psum layout), bmm (the batched GEMM at MLA's shapes), wgrad and k_grouped (weight
gradients, FP32 accumulate); any other GEMM variant runs the problems of its tests/gemm_cases.py SPECS entry (its
`small` one and three drawn by its sampler), kernel time only (no cuBLAS column; TFLOPS where the problem has m, n, k).
Method (DeepGEMM's own benchmark method): randn inputs quantised 1x128 (LHS) / 128x128 (RHS); kernel time from the
torch profiler, every call preceded by an 8 GB memset (L2 flush + cool-down); mean of --num-tests calls.
TFLOPS = 2mnk / t; GB/s = (mk + nk + 2mn) / t. cuBLAS blockwise is skipped (n/a) when k % 128 != 0, where it
returns wrong results on the test stack.
Grouped: TFLOPS count valid rows only (m = rows of all experts without padding / the sum of masked_m); GB/s count
every expert's weights once (G·n·k) plus valid rows of A and out. There is no grouped cuBLAS: the cuBLAS column is
a dense _scaled_mm with the same m (valid rows), n and k, run on the same GPU in the same run, as a drift anchor;
the DG column is DeepGEMM's best figure recorded when the suite was set up (not measured here).
Weight gradients: 1x128 scales on both operands (passed in the transposed, TMA-ready form), out FP32 randn and
accumulated; GB/s = (mk + nk + 8mn) / t (out read and written in FP32). cuBLAS: _scaled_mm with 1x128 x 1x128 scales
and no accumulate input, same run. k-grouped: k_i = base + U(-spread, spread) in steps of 16; TFLOPS = 2mn·sum(k_i)/t;
also the wall time per call (CUDA events over 20 back-to-back calls, host launch included) of the one-launch call and
of a Python loop of one dense call per group (DeepGEMM's k-grouped implementation).

Every run writes one JSON (default benchmarks/results/<date>_<commit>_<device>[_<tag>].json), rewritten after each
case so that an interrupted run keeps what it measured, with the run's provenance: the measured deep_gemm's version,
commit and dirty flag as recorded when it was built (deep_gemm.build_info(), wherever it is installed), device,
driver, SM clock / power / temperature at the start and after each case (nvidia-smi), the versions of python,
torch, CUDA, cuda-bindings, NVRTC and deep_gemm, and every DG_* variable in effect.

Usage: python benchmarks/bench.py [--suite dense ...] [--shapes MxNxK ...] [--json PATH | --tag TAG] [--plot PNG]
       (or python -m benchmarks.bench ...); --help works without a GPU. `--plot` needs matplotlib (the `bench`
       extra); `python -m benchmarks.readme_table RESULT.json` prints the README table of a result.
"""
import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from typing import Optional

import torch

import deep_gemm
from deep_gemm.runtime import VARIANTS, families_of, variants_on
from deep_gemm.testing import bench_kineto, calc_diff, dequant_per_block, dequant_per_token

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


def skewed_sizes(groups: int, expected_m: int, rng: random.Random):
    """Per-expert row counts far from expected_m (MoE routing under load imbalance): a fifth of the experts get no
    tokens, a tenth get 4x the mean, the rest expected_m * U(0.3, 1.5)."""
    sizes = []
    for _ in range(groups):
        u = rng.random()
        sizes.append(0 if u < 0.2 else 4 * expected_m if u >= 0.9 else int(expected_m * rng.uniform(0.3, 1.5)))
    return sizes


def dense_shapes():
    shapes = [(m, n, k) for m in (64, 128, 4096) for n, k in DENSE_NK]
    shapes.append((8192, 8192, 8192))
    shapes += [(m, 7168, 576) for m in (64, 128, 4096)]
    return shapes


def cublas_fn(a, sa, b, sb, k):
    if k % 128 != 0 or not hasattr(torch, "_scaled_mm"):
        return None
    sa_cm = sa.t().contiguous().t()
    sb_t = sb.t()

    def fn():
        return torch._scaled_mm(a, b.t(), scale_a=sa_cm, scale_b=sb_t, out_dtype=torch.bfloat16)
    try:
        fn()
        torch.cuda.synchronize()
    except Exception as e:  # blockwise scaling unsupported on this torch/cuBLAS
        print(f"  cuBLAS blockwise unavailable: {e}", file=sys.stderr)
        return None
    return fn


def bench_shape(m, n, k, num_tests):
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, k), device="cuda", dtype=torch.bfloat16)
    a8, sa = deep_gemm.per_token_cast_to_fp8(a)
    b8, sb = deep_gemm.per_block_cast_to_fp8(b)
    sa_tma = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)

    def ours():
        deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa_tma), (b8, sb), out)
    ours()
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
    diff = calc_diff(out, ref)
    del ref
    t = bench_kineto(ours, "fp8_gemm_1d2d", num_tests=num_tests)
    row = dict(m=m, n=n, k=k, us=t * 1e6, tflops=2 * m * n * k / t / 1e12,
               gbps=(m * k + n * k + 2 * m * n) / t / 1e9, diff=diff, cublas_tflops=None, ratio=None)
    fn = cublas_fn(a8, sa, b8, sb, k)
    if fn is not None:
        tc = bench_kineto(fn, None, num_tests=num_tests)
        row["cublas_tflops"] = 2 * m * n * k / tc / 1e12
        row["ratio"] = tc / t
    return row


# DeepGEMM's best TFLOPS (its May-2025 release or v2, measured by the project), keyed by (groups, m per group, n, k).
DG_CONTIGUOUS = {(4, 8192, 4096, 7168): 1397, (4, 8192, 7168, 2048): 1277, (8, 4096, 4096, 7168): 1351,
                 (8, 4096, 7168, 2048): 1331, (32, 256, 4096, 7168): 991, (32, 256, 7168, 2048): 921}
# DeepGEMM v2.6.1 (the reference for masked).
DG_MASKED = {(1, 1024, 4096, 7168): 1156, (2, 512, 4096, 7168): 1142, (4, 256, 4096, 7168): 963,
             (1, 1024, 7168, 2048): 986, (2, 512, 7168, 2048): 942, (4, 256, 7168, 2048): 844}
MASKED_SIZES = [(1, 1024), (2, 512), (4, 256)]
DECODE_SIZES = [(16, 32), (32, 32), (32, 64), (8, 128), (256, 8)]
GROUPED_NK = [(4096, 7168), (7168, 2048)]


def _grouped_weights(num_groups, n, k):
    b = torch.randn((num_groups, n, k), device="cuda", dtype=torch.bfloat16)
    b8 = torch.empty((num_groups, n, k), device="cuda", dtype=torch.float8_e4m3fn)
    sb = torch.empty((num_groups, (n + 127) // 128, (k + 127) // 128), device="cuda")
    for g in range(num_groups):
        b8[g], sb[g] = deep_gemm.per_block_cast_to_fp8(b[g])
    return b8, sb


def _dense_anchor(m, n, k, num_tests):
    """cuBLAS blockwise TFLOPS of a dense m x n x k GEMM (same run): the drift anchor of the grouped rows.
    NOTES: cuBLAS blockwise refuses m that is not a multiple of 128 here; m is rounded up (TFLOPS use it)."""
    m = (m + 127) // 128 * 128
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
    fn = cublas_fn(a8, sa, b8, sb, k)
    return None if fn is None else 2 * m * n * k / bench_kineto(fn, None, num_tests=num_tests) / 1e12


def _grouped_row(fn, kind, num_groups, m, n, k, valid, diff, num_tests, dg_table, **extra):
    """Time `fn` and report it on valid rows, with the dense cuBLAS anchor and DeepGEMM's figure."""
    t = bench_kineto(fn, "fp8_gemm_1d2d", num_tests=num_tests)
    return dict(kind=kind, groups=num_groups, m=m, n=n, k=k, rows=valid, us=t * 1e6,
                tflops=2 * valid * n * k / t / 1e12, gbps=(valid * k + num_groups * n * k + 2 * valid * n) / t / 1e9,
                diff=diff, cublas_tflops=_dense_anchor(valid, n, k, num_tests),
                dg_tflops=dg_table.get((num_groups, m, n, k)), **extra)


def contiguous_m_indices(sizes):
    """m_indices [sum of padded sizes] int32 on the GPU: expert g's sizes[g] rows, padded with -1 to the alignment."""
    align = deep_gemm.get_m_alignment_for_contiguous_layout()
    parts = []
    for g, rows in enumerate(sizes):
        parts += [torch.full((rows,), g, dtype=torch.int32), torch.full(((-rows) % align,), -1, dtype=torch.int32)]
    return torch.cat(parts).cuda()


def bench_contiguous(num_groups, m, n, k, num_tests, seed=0):
    rng = random.Random(seed + num_groups * m + n + k)
    sizes = [int(m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]
    m_indices = contiguous_m_indices(sizes)
    m_sum, valid = m_indices.numel(), sum(sizes)
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m_sum, k), device="cuda", dtype=torch.bfloat16))
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    b8, sb = _grouped_weights(num_groups, n, k)
    out = torch.empty((m_sum, n), device="cuda", dtype=torch.bfloat16)

    def ours():
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a8, sa), (b8, sb), out, m_indices)
    ours()
    # Spot check against the dequantised reference on the first expert's rows.
    rows = slice(0, sizes[0])
    ref = dequant_per_token(a8[rows], sa[rows]) @ dequant_per_block(b8[0], sb[0]).t()
    diff = calc_diff(out[rows], ref)
    return _grouped_row(ours, "contiguous", num_groups, m, n, k, valid, diff, num_tests, DG_CONTIGUOUS,
                        padded_rows=m_sum)


def bench_masked(num_groups, m, n, k, num_tests, m_max, seed=0):
    rng = random.Random(seed + num_groups * m + n + k)
    counts = [min(m_max, int(m * rng.uniform(0.7, 1.3))) for _ in range(num_groups)]
    valid = sum(counts)
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    a8, sa = deep_gemm.per_token_cast_to_fp8(
        torch.randn((num_groups * m_max, k), device="cuda", dtype=torch.bfloat16))
    a8 = a8.view(num_groups, m_max, k)
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa.view(num_groups, m_max, -1))
    b8, sb = _grouped_weights(num_groups, n, k)
    out = torch.empty((num_groups, m_max, n), device="cuda", dtype=torch.bfloat16)

    def ours():
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a8, sa), (b8, sb), out, masked_m, m)
    ours()
    rows = slice(0, counts[0])
    ref = dequant_per_token(a8[0, rows], sa[0, rows]) @ dequant_per_block(b8[0], sb[0]).t()
    diff = calc_diff(out[0, rows], ref)
    return _grouped_row(ours, "masked", num_groups, m, n, k, valid, diff, num_tests, DG_MASKED, m_max=m_max)


def psum_ends(sizes, align):
    """The psum layout's running row counts: expert g's rows are [align(ends[g - 1]), ends[g])."""
    ends, start = [], 0
    for rows in sizes:
        ends.append(start + rows)
        start = (start + rows + align - 1) // align * align
    return ends


def bench_psum(num_groups, m, n, k, num_tests, seed=0):
    """The contiguous suite's problem (same sizes) in DeepGEMM's psum layout (no padding rows are computed)."""
    rng = random.Random(seed + num_groups * m + n + k)
    sizes = [int(m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]
    ends = psum_ends(sizes, deep_gemm.get_mk_alignment_for_contiguous_layout())
    layout = torch.tensor(ends, dtype=torch.int32, device="cuda")
    m_sum, valid = ends[-1], sum(sizes)
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m_sum, k), device="cuda", dtype=torch.bfloat16))
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    b8, sb = _grouped_weights(num_groups, n, k)
    out = torch.empty((m_sum, n), device="cuda", dtype=torch.bfloat16)

    def ours():
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a8, sa), (b8, sb), out, layout, use_psum_layout=True,
                                                   expected_m_for_psum_layout=m)
    ours()
    rows = slice(0, sizes[0])
    ref = dequant_per_token(a8[rows], sa[rows]) @ dequant_per_block(b8[0], sb[0]).t()
    diff = calc_diff(out[rows], ref)
    return _grouped_row(ours, "psum", num_groups, m, n, k, valid, diff, num_tests, {}, padded_rows=m_sum)


def run_grouped_suites(suites, num_tests, results):
    print(f"{'kind':>10} {'G x m':>9} {'n':>5} {'k':>5} | {'us':>8} {'TFLOPS':>7} {'GB/s':>6} | {'cuBLAS':>7} "
          f"{'ratio':>6} | {'DG':>5} {'xDG':>5} | diff")
    cases = []
    if "contiguous" in suites:
        cases += [("contiguous", g, m, n, k) for g, m in [(4, 8192), (8, 4096), (32, 256)] for n, k in GROUPED_NK]
    if "masked" in suites:
        cases += [("masked", g, m, n, k) for g, m in MASKED_SIZES + DECODE_SIZES for n, k in GROUPED_NK]
    if "psum" in suites:
        cases += [("psum", g, m, n, k) for g, m in [(4, 8192), (8, 4096), (32, 256)] for n, k in GROUPED_NK]
    for kind, g, m, n, k in cases:
        if kind == "contiguous":
            r = bench_contiguous(g, m, n, k, num_tests)
        elif kind == "psum":
            r = bench_psum(g, m, n, k, num_tests)
        else:
            r = bench_masked(g, m, n, k, num_tests, m_max=4096 if g <= 32 else 1024)
        results.add("grouped", r)
        cb = f"{r['cublas_tflops']:7.0f} {r['tflops'] / r['cublas_tflops']:5.2f}x" if r["cublas_tflops"] else \
            f"{'n/a':>7} {'n/a':>6}"
        dg = f"{r['dg_tflops']:5.0f} {r['tflops'] / r['dg_tflops']:4.2f}x" if r["dg_tflops"] else f"{'-':>5} {'-':>5}"
        print(f"{kind:>10} {f'{g}x{m}':>9} {n:>5} {k:>5} | {r['us']:8.1f} {r['tflops']:7.0f} {r['gbps']:6.0f} | "
              f"{cb} | {dg} | {r['diff']:.1e}", flush=True)


# ---------------------------------------------------------------- batched GEMM (benchmarks/bmm.py: the full study)

BMM_CASES = [(128, m, n, k) for m in (64, 4096) for n, k in [(512, 128), (128, 512)]] + [(8, 4096, 4096, 4096)]


def bench_bmm(batches, m, n, k, num_tests):
    """bmm_fp8_fp8_bf16_nt: x [B, m, k] with row-major per-token scales (read as they are), y [B, n, k]."""
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((batches * m, k), device="cuda", dtype=torch.bfloat16))
    a8, sa = a8.view(batches, m, k), sa.view(batches, m, -1)
    b8, sb = _grouped_weights(batches, n, k)
    out = torch.empty((batches, m, n), device="cuda", dtype=torch.bfloat16)

    def ours():
        deep_gemm.bmm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)
    ours()
    diff = calc_diff(out[0], dequant_per_token(a8[0], sa[0]) @ dequant_per_block(b8[0], sb[0]).t())
    t = bench_kineto(ours, "fp8_gemm_1d2d", num_tests=num_tests)
    return dict(kind="bmm", batches=batches, m=m, n=n, k=k, us=t * 1e6, tflops=2 * batches * m * n * k / t / 1e12,
                gbps=batches * (m * k + n * k + 2 * m * n) / t / 1e9, diff=diff, cublas_tflops=None)


def run_bmm_suite(num_tests, results):
    print(f"{'bmm B x m':>10} {'n':>5} {'k':>5} | {'us':>8} {'TFLOPS':>7} {'GB/s':>6} | diff")
    for batches, m, n, k in BMM_CASES:
        r = bench_bmm(batches, m, n, k, num_tests)
        results.add("bmm", r)
        print(f"{f'{batches}x{m}':>10} {n:>5} {k:>5} | {r['us']:8.1f} {r['tflops']:7.0f} {r['gbps']:6.0f} | "
              f"{r['diff']:.1e}", flush=True)


# ---------------------------------------------------------------- weight gradients (FP32 accumulate)

WGRAD_MN = [(7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)]
# DeepGEMM's best TFLOPS (its May-2025 release or v2, measured by the project), keyed by (m, n, k).
DG_WGRAD = {(7168, 2112, 4096): 955, (16384, 7168, 4096): 1010, (1536, 24576, 8192): 1066}
# DG-May k-grouped wgrad (one launch per group): 926-1024 TFLOPS over 4-8 groups at these (m, n).
DG_K_GROUPED = (926, 1024)


def _wgrad_operand(rows, k):
    """(e4m3 [rows, k], transposed TMA-ready scales [ceil(k/128), rows], scales [rows, ceil(k/128)])."""
    x8, s = deep_gemm.per_token_cast_to_fp8(torch.randn((rows, k), device="cuda", dtype=torch.bfloat16))
    return x8, s.t().contiguous(), s


def cublas_wgrad_fn(a8, sa, b8, sb):
    """cuBLAS blockwise with 1x128 scales on both operands (no accumulate input), or None where this stack has
    no such recipe; the convention is checked against a dequantised reference before use."""
    if not hasattr(torch, "_scaled_mm"):
        return None
    ref = (dequant_per_token(a8[:256], sa[:256]) @ dequant_per_token(b8[:256], sb[:256]).t())
    sa_cm = sa.t().contiguous().t()
    for scale_b in (sb.t(), sb.t().contiguous(), sb.contiguous().t().contiguous().t()):
        def fn(scale_b=scale_b):
            return torch._scaled_mm(a8, b8.t(), scale_a=sa_cm, scale_b=scale_b, out_dtype=torch.float32)
        try:
            out = fn()
            torch.cuda.synchronize()
        except Exception:
            continue
        if calc_diff(out[:256, :256], ref) < 1e-4:
            return fn
    print("  cuBLAS 1x128 x 1x128 blockwise unavailable on this stack", file=sys.stderr)
    return None


def bench_wgrad(m, n, k, num_tests):
    a8, sa_t, sa = _wgrad_operand(m, k)
    b8, sb_t, sb = _wgrad_operand(n, k)
    out = torch.randn((m, n), device="cuda")
    initial = out.clone()

    def ours():
        deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a8, sa_t), (b8, sb_t), out)
    ours()
    torch.backends.cuda.matmul.allow_tf32 = False
    diff = calc_diff(out - initial, dequant_per_token(a8, sa) @ dequant_per_token(b8, sb).t())
    t = bench_kineto(ours, "fp8_wgrad_gemm", num_tests=num_tests)
    row = dict(kind="wgrad", m=m, n=n, k=k, us=t * 1e6, tflops=2 * m * n * k / t / 1e12,
               gbps=(m * k + n * k + 8 * m * n) / t / 1e9, diff=diff, cublas_tflops=None,
               dg_tflops=DG_WGRAD.get((m, n, k)))
    fn = cublas_wgrad_fn(a8, sa, b8, sb) if k % 128 == 0 else None
    if fn is not None:
        row["cublas_tflops"] = 2 * m * n * k / bench_kineto(fn, None, num_tests=num_tests) / 1e12
    return row


def k_grouped_sizes(num_groups, base, spread, seed):
    rng = random.Random(seed)
    return [base + rng.randint(-spread // 16, spread // 16) * 16 for _ in range(num_groups)]


def bench_k_grouped(num_groups, m, n, base, num_tests, spread=128):
    ks = k_grouped_sizes(num_groups, base, spread, seed=num_groups * base + m + n)
    parts = [(_wgrad_operand(m, k), _wgrad_operand(n, k)) for k in ks]
    a_flat = torch.cat([p[0][0].view(-1) for p in parts])
    b_flat = torch.cat([p[1][0].view(-1) for p in parts])
    sa_t = torch.cat([p[0][1] for p in parts])
    sb_t = torch.cat([p[1][1] for p in parts])
    out = torch.randn((num_groups, m, n), device="cuda")
    initial = out.clone()

    def ours():
        deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a_flat, sa_t), (b_flat, sb_t), out, ks)

    def per_group_loop():  # what DeepGEMM does: one dense launch per group, from Python
        for g, ((a8, sa_g, _), (b8, sb_g, _)) in enumerate(parts):
            deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a8, sa_g), (b8, sb_g), out[g])
    ours()
    torch.backends.cuda.matmul.allow_tf32 = False
    (a8, _, sa), (b8, _, sb) = parts[-1]
    diff = calc_diff(out[-1] - initial[-1], dequant_per_token(a8, sa) @ dequant_per_token(b8, sb).t())
    flops = 2 * m * n * sum(ks)
    t = bench_kineto(ours, "fp8_wgrad_gemm", num_tests=num_tests)
    # End-to-end time per call (host launch included, no flush), one launch vs a Python loop of dense launches.
    wall = {name: _wall_time(fn) for name, fn in (("one_launch", ours), ("per_group_loop", per_group_loop))}
    return dict(kind="k_grouped", groups=num_groups, m=m, n=n, k=base, ks=ks, us=t * 1e6, tflops=flops / t / 1e12,
                gbps=(sum(ks) * (m + n) + 8 * num_groups * m * n) / t / 1e9, diff=diff,
                wall_us_one_launch=wall["one_launch"] * 1e6, wall_us_per_group_loop=wall["per_group_loop"] * 1e6)


def _wall_time(fn, iters=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def run_wgrad_suites(suites, num_tests, results):
    if "wgrad" in suites:
        print(f"{'wgrad m':>8} {'n':>6} {'k':>5} | {'us':>8} {'TFLOPS':>7} {'GB/s':>6} | {'cuBLAS':>7} {'ratio':>6} | "
              f"{'DG':>5} {'xDG':>5} | diff")
        for m, n in WGRAD_MN:
            for k in (4096, 8192):
                r = bench_wgrad(m, n, k, num_tests)
                results.add("wgrad", r)
                cb = f"{r['cublas_tflops']:7.0f} {r['tflops'] / r['cublas_tflops']:5.2f}x" if r["cublas_tflops"] \
                    else f"{'n/a':>7} {'n/a':>6}"
                dg = f"{r['dg_tflops']:5.0f} {r['tflops'] / r['dg_tflops']:4.2f}x" if r["dg_tflops"] else \
                    f"{'-':>5} {'-':>5}"
                print(f"{m:>8} {n:>6} {k:>5} | {r['us']:8.1f} {r['tflops']:7.0f} {r['gbps']:6.0f} | {cb} | {dg} | "
                      f"{r['diff']:.1e}", flush=True)
    if "k_grouped" in suites:
        print(f"{'k-grouped G':>11} {'m':>5} {'n':>5} {'k_i':>9} | {'us':>8} {'TFLOPS':>7} | x DG-May {DG_K_GROUPED} | "
              f"wall us: one launch / per-group loop | diff")
        cases = [(g, m, n, base, 128) for g in (4, 8) for m, n in [(7168, 4096), (2048, 7168)] for base in (4096, 8192)]
        cases += [(g, m, n, 512, 256) for g in (16, 64) for m, n in [(7168, 4096), (2048, 7168)]]
        for g, m, n, base, spread in cases:
            r = bench_k_grouped(g, m, n, base, num_tests, spread)
            results.add("wgrad", r)
            print(f"{g:>11} {m:>5} {n:>5} {f'{base}+-{spread}':>9} | {r['us']:8.1f} {r['tflops']:7.0f} | "
                  f"{r['tflops'] / DG_K_GROUPED[1]:4.2f}-{r['tflops'] / DG_K_GROUPED[0]:4.2f}x | "
                  f"{r['wall_us_one_launch']:8.1f} / {r['wall_us_per_group_loop']:8.1f} | {r['diff']:.1e}", flush=True)


def _host_times(fn, batches=50, per_batch=200):
    """Host seconds of each of batches x per_batch warmed calls: batches short enough that the launch queue never
    fills (so the GPU never sets the pace), with a sync between batches that is not timed."""
    for _ in range(per_batch):
        fn()
    times = []
    clock = time.perf_counter_ns
    for _ in range(batches):
        torch.cuda.synchronize()
        last = clock()
        for _ in range(per_batch):
            fn()
            now = clock()
            times.append(now - last)
            last = now
    torch.cuda.synchronize()
    return torch.tensor(times, dtype=torch.float64) * 1e-9


def _host_time_calls():
    """One small warmed call of every public GEMM (layouts the launch module runs without Python; the BF16 names
    without the argument-read row, their public arguments not being their op's), and torch._scaled_mm on the dense
    inputs."""
    m = n = k = 128
    a8, sa_rows = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda"))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda"))
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa_rows)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    groups = 4
    bg8, sbg = b8[None].repeat(groups, 1, 1), sb[None].repeat(groups, 1, 1)
    m_indices = torch.arange(groups, device="cuda", dtype=torch.int32).repeat_interleave(m // groups)
    a3 = a8[None].repeat(groups, 1, 1)
    sa3 = deep_gemm.get_col_major_tma_aligned_tensor(sa[None].repeat(groups, 1, 1).contiguous())
    out3 = torch.empty((groups, m, n), device="cuda", dtype=torch.bfloat16)
    masked_m = torch.full((groups,), 64, device="cuda", dtype=torch.int32)
    sa_t, sb_t = sa.t().contiguous(), deep_gemm.per_token_cast_to_fp8(torch.randn((n, k), device="cuda"))[1]
    sb_t = sb_t.t().contiguous()
    wout = torch.zeros((m, n), device="cuda")
    ks = [128] * groups
    a_flat, b_flat = a8.repeat(groups, 1).view(-1), b8.repeat(groups, 1).view(-1)
    sa_k, sb_k = sa_t.repeat(groups, 1), sb_t.repeat(groups, 1)
    kout = torch.zeros((groups, m, n), device="cuda")
    from deep_gemm.runtime import Op
    calls = {
        "dense": (deep_gemm.gemm_fp8_fp8_bf16_nt, ((a8, sa), (b8, sb), out), Op.DENSE),
        "contiguous": (deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, ((a8, sa), (bg8, sbg), out, m_indices),
                       Op.CONTIGUOUS),
        "masked": (deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked, ((a3, sa3), (bg8, sbg), out3, masked_m, 64),
                   Op.MASKED),
        "wgrad": (deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt, ((a8, sa_t), (b8, sb_t), wout), Op.WGRAD),
        "k_grouped (4 groups)": (deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, ((a_flat, sa_k), (b_flat, sb_k), kout,
                                                                                  ks), Op.K_GROUPED),
        # The caller's row-major per-token scales, as they come from the cast (no conversion on this path).
        "bmm (4 batches)": (deep_gemm.bmm_fp8_fp8_bf16_nt, ((a3, sa_rows[None].repeat(groups, 1, 1)), (bg8, sbg), out3),
                            Op.BMM),
    }
    # The BF16 names (issue 32), the same sizes: their launches go through the same `_C` path.
    x, y = torch.randn((m, k), device="cuda").bfloat16(), torch.randn((n, k), device="cuda").bfloat16()
    x3, y3 = x[None].repeat(groups, 1, 1), y[None].repeat(groups, 1, 1)
    heads = torch.randn((32, 16, k), device="cuda").bfloat16(), torch.randn((16, n, k), device="cuda").bfloat16()
    hc_b, hc_d, hc_s = torch.randn((24, k), device="cuda"), torch.empty((4, m, 24), device="cuda"), \
        torch.empty((4, m), device="cuda")
    calls.update({
        "bf16_gemm_nt": (deep_gemm.bf16_gemm_nt, (x, y, out), None),
        "bf16 masked (4 groups)": (deep_gemm.m_grouped_bf16_gemm_nt_masked, (x3, y3, out3, masked_m, 64), None),
        "einsum bhr,hdr->bhd": (deep_gemm.einsum, ("bhr,hdr->bhd", *heads,
                                                   torch.empty((32, 16, n), device="cuda").bfloat16()), None),
        "tf32_hc_prenorm_gemm": (deep_gemm.tf32_hc_prenorm_gemm, (x, hc_b, hc_d, hc_s, 4), None),
    })
    if hasattr(torch, "_scaled_mm"):
        sb_col = sb.t()
        calls["torch._scaled_mm"] = (lambda a, b: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb_col,
                                                                   out_dtype=torch.bfloat16), (a8, b8.t()), None)
    return calls


def host_overhead_us(per_batch: int = 200):
    """Host microseconds per warmed call of each public GEMM (median, p99 and mean of 10,000 calls in batches of
    `per_batch`), the share of those calls the launch module made without entering Python, and the median cost of
    reading the call's arguments into its layout key (`_C.layout_key`: no lookup, no launch)."""
    from deep_gemm import _C
    result = {}
    for name, (fn, args, op) in _host_time_calls().items():
        before = deep_gemm.testing.launch_stats()
        t = _host_times(lambda: fn(*args), batches=10000 // per_batch, per_batch=per_batch) * 1e6
        after = deep_gemm.testing.launch_stats()
        result[name] = dict(median_us=float(t.median()), p99_us=float(t.quantile(0.99)), mean_us=float(t.mean()),
                            calls=t.numel(), fast_calls=after["fast"] - before["fast"])
        if op is not None:
            read = _host_times(lambda: _C.layout_key(op, *args), batches=10, per_batch=1000) * 1e6
            result[name]["key_read_median_us"] = float(read.median())
    return result


_COMPILE_SNIPPET = """
import sys, time
from deep_gemm import jit
from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.families import sm90_fp8_gemm_1d2d
cfg = get_config(GemmProblem(4096, 7168, 7168, 132))
src = sm90_fp8_gemm_1d2d.kernel_source(7168, 7168, cfg)
t = time.perf_counter(); _, cached, secs = jit.build(src, "sm_90a"); total = time.perf_counter() - t
print(cached, secs, total)
"""


def compile_times():
    """(cold compile s, warm disk-cache hit in a fresh process s) for one kernel, NVRTC."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DG_JIT_CACHE_DIR=tmp, DG_JIT_USE_NVCC="0")
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", _COMPILE_SNIPPET], env=env, capture_output=True, text=True,
                                 check=True).stdout.split()
            runs.append((out[0] == "True", float(out[1]), float(out[2])))
    (c0, secs0, _), (c1, _, total1) = runs
    assert not c0 and c1, "expected a cold compile then a cache hit"
    return secs0, total1


# ---------------------------------------------------------------- provenance, results file, plot

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO, "benchmarks", "results")
GPU_FIELDS = ("clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "temperature.gpu")


def _output(cmd) -> Optional[str]:
    """stdout of `cmd`, or None where the tool is missing or fails (no nvidia-smi)."""
    try:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _smi_id() -> str:
    """nvidia-smi's id of the GPU this process uses (CUDA_VISIBLE_DEVICES may renumber them)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or str(torch.cuda.current_device() if torch.cuda.is_available() else 0)


def gpu_state() -> dict:
    """SM clock, power and temperature of the GPU now ({} without nvidia-smi)."""
    out = _output(["nvidia-smi", f"--id={_smi_id()}", "--query-gpu=" + ",".join(GPU_FIELDS),
                   "--format=csv,noheader,nounits"])
    return dict(zip(GPU_FIELDS, (v.strip() for v in out.split(",")))) if out else {}


def _package_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvrtc_version() -> Optional[str]:
    try:
        from cuda.bindings import nvrtc
        _, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"
    except Exception:  # no cuda-bindings or no libnvrtc: provenance records the absence
        return None


def provenance() -> dict:
    """Where and with what a run measured: the package's build (commit, dirty), device, driver, GPU state at the
    start, versions, DG_* env. The commit is the one the imported deep_gemm was built from (not the git repository
    of the current directory or of this script, which may be another checkout)."""
    has_gpu = torch.cuda.is_available()
    build = deep_gemm.build_info()
    return dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        commit=build["commit"][:10] if build["commit"] else None, dirty=build["dirty"], build=build,
        package=os.path.dirname(os.path.abspath(deep_gemm.__file__)),
        device=torch.cuda.get_device_name() if has_gpu else None,
        sms=torch.cuda.get_device_properties(0).multi_processor_count if has_gpu else None,
        driver=_output(["nvidia-smi", f"--id={_smi_id()}", "--query-gpu=driver_version", "--format=csv,noheader"]),
        gpu_start=gpu_state(),
        versions=dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
                      cuda_bindings=_package_version("cuda-bindings"), nvrtc=_nvrtc_version(),
                      deep_gemm=deep_gemm.__version__),
        env={k: v for k, v in sorted(os.environ.items()) if k.startswith("DG_")},
        argv=sys.argv[1:])


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower().replace("nvidia", "")).strip("-") or "unknown"


def default_result_path(prov: dict, tag: Optional[str] = None) -> str:
    """benchmarks/results/<date>_<commit>[-dirty]_<device>[_<tag>].json"""
    commit = (prov["commit"] or "nogit") + ("-dirty" if prov["dirty"] else "")
    name = "_".join([prov["date"][:10], commit, _slug(prov["device"] or "cpu")] + ([_slug(tag)] if tag else []))
    return os.path.join(RESULTS_DIR, name + ".json")


class Results:
    """The run's JSON: rows of the dense suite, grouped and wgrad rows, summary, provenance. Rewritten (through a
    temporary file, so a reader never sees half a file) after every case: an interrupted run keeps what it measured."""

    def __init__(self, path: Optional[str], prov: dict):
        self.path = path
        self.data = dict(provenance=prov, device=prov["device"], torch=torch.__version__, rows=[], grouped=[],
                         wgrad=[], summary={})
        self.save()

    def add(self, section: str, row: dict) -> None:
        row["gpu_after"] = gpu_state()  # clock / power right after the case: throttling shows up here
        self.data.setdefault(section, []).append(row)
        self.save()

    def summarize(self, **values) -> None:
        self.data["summary"].update(values)
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)


def case_label(row: dict, section: str) -> str:
    """A short name of one measured case (plot ticks, table rows)."""
    kind = row.get("kind", section)
    if kind == "dense":
        return f"{row['m']}x{row['n']}x{row['k']}"
    if kind in ("contiguous", "masked", "psum"):
        return f"{kind} {row['groups']}x{row['m']} {row['n']}x{row['k']}"
    if kind == "bmm":
        return f"bmm {row['batches']}x{row['m']} {row['n']}x{row['k']}"
    if "problem" in row:
        return f"{kind} " + " ".join(f"{k}={v}" for k, v in row["problem"].items())
    if kind == "k_grouped":
        return f"k-grouped {row['groups']}x {row['m']}x{row['n']} k~{row['k']}"
    return f"wgrad {row['m']}x{row['n']}x{row['k']}"


SECTIONS = (("rows", "dense"), ("grouped", "grouped (contiguous, masked, psum)"), ("bmm", "batched (bmm)"),
            ("wgrad", "weight gradients"), ("spec", "other GEMMs (tests/gemm_cases.py problems)"))


def plot(result: dict, path: str) -> None:
    """Bar chart of TFLOPS per case, ours vs cuBLAS (and DeepGEMM where rows carry `dg_tflops`), one panel per
    suite present in `result` (a bench.py JSON). Raises ImportError naming the `bench` extra without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display on the GPU machine
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'deepgemm-sm90[bench]' (or matplotlib)") from e
    panels = [(key, title, result[key]) for key, title in SECTIONS if result.get(key)]
    if not panels:
        raise ValueError("result: no measured rows to plot (expected 'rows', 'grouped' or 'wgrad')")
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 4.2 * len(panels)), squeeze=False)
    for ax, (key, title, rows) in zip(axes[:, 0], panels):
        series = [("ours", "tflops"), ("cuBLAS", "cublas_tflops")]
        if any(r.get("dg_tflops") for r in rows):
            series.append(("DeepGEMM", "dg_tflops"))
        width = 0.8 / len(series)
        for i, (name, field) in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
            ax.bar(xs, [r.get(field) or math.nan for r in rows], width, label=name)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([case_label(r, "dense" if key == "rows" else key) for r in rows], rotation=60,
                           ha="right", fontsize=7)
        ax.set_ylabel("TFLOPS")
        ax.set_title(title)
        ax.legend(fontsize=8)
    prov = result.get("provenance", {})
    fig.suptitle(f"{result.get('device') or 'unknown device'}, torch {result.get('torch')}"
                 + (f", commit {prov['commit']}" if prov.get("commit") else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# One suite per GEMM variant the registry serves on sm_90a, and the section of the result its rows go to (which also
# picks its runner): the variants with a suite of their own above, and "spec" (run_spec_suites) for every other one,
# so that a new variant is benchmarked without an edit here (tests/tools/test_variant_lists.py checks that each
# "spec" suite has a SPECS entry).
SUITES = variants_on("sm_90a", gemm=True)
_OWN_SECTION = dict(dense="rows", contiguous="grouped", masked="grouped", psum="grouped", bmm="bmm", wgrad="wgrad",
                    k_grouped="wgrad")
SUITE_SECTION = {name: _OWN_SECTION.get(name, "spec") for name in SUITES}
SPEC_SAMPLES = 3  # problems drawn by a "spec" suite's sampler, after its small one


def spec_problems(suite: str):
    """(GemmSpec, problems) of a "spec" suite: its tests/gemm_cases.py entry (by the variant's public name), its
    small problem and SPEC_SAMPLES drawn with fixed seeds. The module is loaded from its file, since this script
    also runs as `python benchmarks/bench.py`, where the repo root is not importable."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "gemm_cases.py")
    loader = importlib.util.spec_from_file_location("gemm_cases", path)
    gemm_cases = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(gemm_cases)
    SPEC_BY_NAME = gemm_cases.SPEC_BY_NAME
    public_name = next(v.public_name for v in VARIANTS if v.name == suite)
    spec = SPEC_BY_NAME[public_name]
    return spec, [spec.small] + [spec.sample(random.Random(seed)) for seed in range(SPEC_SAMPLES)]


def run_spec_suites(suites, num_tests, results):
    """The "spec" suites: each problem checked once against its reference, then timed (the kernel of the family
    the registry dispatches the variant to on sm_90a, selected by its function's name)."""
    for suite in (s for s in suites if SUITE_SECTION[s] == "spec"):
        spec, problems = spec_problems(suite)
        kernel = families_of(suite, "sm_90a")[0].function.rsplit("::", 1)[-1]
        for i, problem in enumerate(problems):
            case = spec.build(problem, torch.device("cuda"), i)
            case.reset()
            case.run()
            case.check()
            t = bench_kineto(case.run, kernel, num_tests=num_tests)
            flops = 2 * problem["m"] * problem["n"] * problem["k"] if {"m", "n", "k"} <= set(problem) else None
            r = dict(kind=suite, problem=problem, us=t * 1e6, tflops=flops / t / 1e12 if flops and t else None,
                     cublas_tflops=None)
            results.add("spec", r)
            print(f"{case_label(r, 'spec')} | {r['us']:8.1f} us"
                  + (f" {r['tflops']:7.0f} TFLOPS" if r["tflops"] else ""), flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="result path (default: benchmarks/results/<date>_<commit>_<device>[_TAG].json)")
    parser.add_argument("--tag", help="suffix of the default result name, e.g. 'dense'")
    parser.add_argument("--plot", metavar="PNG", help="also draw TFLOPS per case (ours, cuBLAS, DeepGEMM) here")
    parser.add_argument("--num-tests", type=int, default=30)
    parser.add_argument("--shapes", nargs="*", help="MxNxK shapes instead of the default dense suite")
    parser.add_argument("--list-shapes", action="store_true",
                        help="print the dense suite's 'm n k' lines (for deep_gemm compile --shapes) and exit")
    parser.add_argument("--skip-host", action="store_true", help="skip host-overhead and compile-time rows")
    parser.add_argument("--host-batch", type=int, default=200, help="calls per timed batch of the host-time rows")
    parser.add_argument("--suite", nargs="*", default=list(SUITES), choices=SUITES,
                        help="which suites to run (default: all)")
    args = parser.parse_args(argv)
    try:
        args.shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else dense_shapes()
        if any(len(s) != 3 for s in args.shapes):
            raise ValueError
    except ValueError:
        parser.error("--shapes: expected MxNxK with integers, e.g. 4096x7168x2048")
    if args.json and args.tag:
        parser.error("--tag names the default result file: give --json or --tag, not both")
    return args


def main():
    args = parse_args()
    if args.list_shapes:
        print("\n".join(f"{m} {n} {k}" for m, n, k in args.shapes))
        return
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (fail before measuring, not after)
        except ImportError:
            sys.exit("bench.py: --plot needs matplotlib: pip install 'deepgemm-sm90[bench]'")
    prov = provenance()
    results = Results(args.json or default_result_path(prov, args.tag), prov)
    print(f"deep_gemm {deep_gemm.__version__} | torch {torch.__version__} | {prov['device']} | commit "
          f"{prov['commit']}{' (dirty)' if prov['dirty'] else ''} | kineto, 8 GB flush, mean of {args.num_tests}"
          f" | -> {results.path}")
    if "dense" in args.suite:
        print(f"{'m':>6} {'n':>6} {'k':>6} | {'us':>8} {'TFLOPS':>7} {'GB/s':>6} | {'cuBLAS':>7} {'ratio':>6} | diff")
        for m, n, k in args.shapes:
            r = bench_shape(m, n, k, args.num_tests)
            results.add("rows", r)
            cb = f"{r['cublas_tflops']:7.0f} {r['ratio']:5.2f}x" if r["ratio"] else f"{'n/a':>7} {'n/a':>6}"
            print(f"{m:>6} {n:>6} {k:>6} | {r['us']:8.1f} {r['tflops']:7.0f} {r['gbps']:6.0f} | {cb} | "
                  f"{r['diff']:.1e}", flush=True)
        ratios = [r["ratio"] for r in results.data["rows"] if r["ratio"]]
        if ratios:
            geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            results.summarize(geomean_ratio_vs_cublas=geo)
            print(f"geomean speedup over cuBLAS blockwise ({len(ratios)} shapes with k % 128 == 0): {geo:.3f}x")
    sections = {SUITE_SECTION[s] for s in args.suite}
    if "grouped" in sections:
        run_grouped_suites(args.suite, args.num_tests, results)
    if "bmm" in sections:
        run_bmm_suite(args.num_tests, results)
    if "wgrad" in sections:
        run_wgrad_suites(args.suite, args.num_tests, results)
    if "spec" in sections:
        run_spec_suites(args.suite, args.num_tests, results)
    if "dense" in args.suite and not args.skip_host:
        host = host_overhead_us(args.host_batch)
        results.summarize(host_us_per_call=host, launch_path=deep_gemm.get_launch_path(), host_batch=args.host_batch)
        print(f"host time per warmed call (launch path {deep_gemm.get_launch_path()}; 10,000 calls in batches of "
              f"{args.host_batch}, sync between batches not timed):")
        for name, h in host.items():
            print(f"  {name:>22}: median {h['median_us']:.2f} us, p99 {h['p99_us']:.2f} us, mean {h['mean_us']:.2f} us"
                  + (f" ({h['fast_calls']} of {h['calls'] + args.host_batch} calls without Python; reading the "
                     f"arguments {h['key_read_median_us']:.2f} us)" if "key_read_median_us" in h else ""))
        cold, hit = compile_times()
        results.summarize(cold_compile_s=cold, disk_cache_hit_s=hit)
        print(f"NVRTC cold compile of one kernel: {cold:.2f} s; disk-cache hit in a fresh process: {hit * 1e3:.1f} ms")
    if args.plot:
        plot(results.data, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
