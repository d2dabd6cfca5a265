"""Time kernel configurations the heuristic may not pick, for one GEMM family (tuning aid; GPU machine).

Usage: python -m tools.tune --family FAMILY CASE ... [options]
  FAMILY  every GEMM variant the registry serves on sm_90a (deep_gemm.runtime.variants_on): dense, contiguous,
          masked, psum, bmm, wgrad, k_grouped
  CASE   any other GEMM variant: its tests/gemm_cases.py SPECS problem as a JSON object with the fields of the
         spec's small problem, e.g. '{"m": 4096, "n": 7168, "k": 2048}' (the dense 1D2D grid where it has m, n, k);
         dense, wgrad, bf16 (nt, BF16 d): MxNxK;  contiguous, masked, psum, bf16_contiguous, bf16_masked: G:m:n:k (rows per group m x U(0.7, 1.3) with the
         seeds of benchmarks/bench.py; --skew draws skewed expert loads around m instead: a fifth of the experts
         empty, a tenth at 4m);  k_grouped: MxNxK:G (G groups of K each, one launch);  bmm: BxMxNxK (B batches)
  --bm / --bn        block sizes of the candidate grid (defaults per family); every legal pair, with and without
                     2-CTA multicast where the family and shape allow it (dense, contiguous, masked, psum)
  --max-stages S ... dense / contiguous / masked / psum: also try pipelines at most S deep
  --full-a-box       bf16: BLOCK_M rows of A per stage where m is smaller (the baseline of the heuristic's m-row boxes)
  --configs BMxBN[:STAGES][:mcA|mcB|:ksS] ...   time exactly these (STAGES: the depth for wgrad families, the
                     maximum for the others; ksS: dense / bf16 K cut over a cluster of S CTAs) instead of the grid
  dense's grid at m < BLOCK_M: each config also with m-row A boxes (a_rows_per_stage; shown as aR)
  bf16's grid: every legal tile with every cluster K split whose clusters fit one wave, past m = 128 also with
                     2-CTA multicast (--bm / --bn narrow it)
  einsum (its JSON problem: form bhr / bhd / bmk, batches, m, n, k, out): per-head tiles with and without A shared
                     by 2-CTA pairs (mcA); bmk: K splits into partial sums (BMxBN) or, for an FP32 d, summed in
                     clusters of S CTAs (BMxBN:ksS)
Every candidate is compiled in parallel first, checked against the dequantised reference (dense, wgrad,
k_grouped), then timed with the bench method (kineto kernel time, L2 flush per call); '*' marks the heuristic's pick.
"""
import argparse
import json
import random
from dataclasses import dataclass
from typing import Callable, List, Optional

from deep_gemm.runtime import VARIANTS, families_of, variants_on
from tests.gemm_cases import SPEC_BY_NAME

# The variants this tool tunes: the registry's GEMMs on sm_90a (tests/tools/test_variant_lists.py checks that every
# one has a CASE form and a problem maker below).
FAMILIES = variants_on("sm_90a", gemm=True)
# Per variant: the CASE form, the kineto repetitions, whether it runs the 1D1D (weight-gradient) kernel. A variant
# without a problem maker of its own takes its tests/gemm_cases.py SPECS problem (`_spec_problem`), so a new variant
# is tunable without an edit here.
_OWN_FORMS = dict(dense="MxNxK", contiguous="G:m:n:k", masked="G:m:n:k", psum="G:m:n:k", bmm="BxMxNxK",
                  wgrad="MxNxK", k_grouped="MxNxK:G", bf16="MxNxK", bf16_contiguous="G:m:n:k", bf16_masked="G:m:n:k")
SPEC_FORM = "JSON"
CASE_FORMS = {name: _OWN_FORMS.get(name, SPEC_FORM) for name in FAMILIES}
DEFAULT_TESTS = {name: dict(dense=15, bmm=15).get(name, 10) for name in FAMILIES}
WGRAD_KERNEL = ("wgrad", "k_grouped")


def _spec_of(family: str):
    public_name = next(v.public_name for v in VARIANTS if v.name == family)
    return SPEC_BY_NAME[public_name]


@dataclass
class Problem:
    """One case of a family, ready to run: `fn` launches it with whatever config is forced."""
    label: str
    fn: Callable[[], None]
    kernel: str                                   # the kernel's name (kineto filter, ncu -k)
    flops: int
    picked: object                                # the heuristic's GemmConfig
    make_config: Callable[..., object]            # (block_m, block_n, multicast, on_a, stages) -> GemmConfig
    source: Optional[Callable[[object], object]]  # GemmConfig -> jit.KernelSource (None: built on first call)
    grid: Callable[[List[int], List[int], List[int]], list]   # (bms, bns, stages) -> GemmConfigs
    check: Optional[Callable[[], float]] = None   # one call, then calc_diff against the reference


def parse_case(family: str, case: str):
    """The integers of a CASE (see the usage); ValueError naming the expected form."""
    try:
        if CASE_FORMS[family] == SPEC_FORM:
            values = json.loads(case)
            if not isinstance(values, dict) or set(values) != set(_spec_of(family).small):
                raise ValueError
            return values
        if CASE_FORMS[family] == "G:m:n:k":
            values = [int(v) for v in case.split(":")]
        else:
            shape, _, groups = case.partition(":")
            values = [int(v) for v in shape.split("x")] + ([int(groups)] if family == "k_grouped" else [])
            if family != "k_grouped" and groups:
                raise ValueError
        if len(values) != 4 - (family in ("dense", "wgrad", "bf16")):
            raise ValueError
    except ValueError:
        form = CASE_FORMS[family]
        if form == SPEC_FORM:
            form = "a JSON object with the fields " + ", ".join(_spec_of(family).small)
        raise ValueError(f"CASE {case!r}: expected {form} for --family {family}") from None
    return values


def parse_config_spec(spec: str):
    """'BMxBN[:STAGES][:mcA|mcB|:ksS]' -> (block_m, block_n, multicast, on_a, stages or 0, cluster K splits)."""
    try:
        parts = spec.split(":")
        bm, bn = (int(v) for v in parts[0].split("x"))
        stages = [int(p) for p in parts[1:] if p.isdigit()]
        mc = [p for p in parts[1:] if p in ("mcA", "mcB")]
        ks = [int(p[2:]) for p in parts[1:] if p.startswith("ks")]
        if len(stages) > 1 or len(mc) + len(ks) > 1 or len(stages) + len(mc) + len(ks) != len(parts) - 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"config {spec!r}: expected BMxBN[:STAGES][:mcA|mcB|:ksS], e.g. 128x160:mcA or "
                         f"64x64:ks4") from None
    return bm, bn, 2 if mc else 1, mc != ["mcB"], stages[0] if stages else 0, ks[0] if ks else 1


def _no_splits(splits: int) -> None:
    if splits != 1:
        raise ValueError("cluster K splits are a dense (FP8 or BF16) configuration")


def describe(cfg) -> str:
    mc = "1" if cfg.num_multicast == 1 else f"{cfg.num_multicast}{'A' if cfg.multicast_on_a else 'B'}"
    ks = f" ks{cfg.cluster_k_splits}" if cfg.cluster_k_splits > 1 else ""
    a_rows = f" a{cfg.a_box_rows}" if cfg.a_box_rows else ""
    return f"{cfg.block_m:>3}x{cfg.block_n:<3} mc{mc}{ks}{a_rows} st{cfg.num_stages:<2} grid{cfg.num_sms:>3}"


def _sm90_problem(family, values, bms, bns, skew) -> Problem:
    """dense, contiguous, masked, psum and bmm: the 1D2D kernel."""
    import torch

    import deep_gemm
    from benchmarks.bench import _grouped_weights, contiguous_m_indices, skewed_sizes
    from deep_gemm.heuristics import GemmProblem, KernelType, get_config
    from deep_gemm.heuristics.common import ceil_div, walks_groups
    from deep_gemm.heuristics.common import a_rows_per_stage
    from deep_gemm.heuristics.sm90 import MAX_STAGES, _legal_block, batched_a_box_rows, build_sm90_config
    from deep_gemm.families import sm90_fp8_gemm_1d2d
    from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token
    sms = deep_gemm.get_num_sms()
    check = None
    if family == "dense":
        m, n, k = values
        kind, heur_m, label = KernelType.NORMAL, m, f"{m}x{n}x{k}"
        a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda"))
        b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda"))
        sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
        out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        ref = dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t()
        picked, rows, groups = get_config(GemmProblem(m, n, k, sms)), m, 1

        def fn():
            deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)

        def check():
            fn()
            return calc_diff(out, ref)
        default_bms = [128, 256]
    elif family == "bmm":
        groups, m, n, k = values
        kind, heur_m, label, rows = KernelType.BATCHED, m, f"bmm {groups}x{m}x{n}x{k}", groups * m
        a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((groups * m, k), device="cuda", dtype=torch.bfloat16))
        a8, sa = a8.view(groups, m, k), sa.view(groups, m, -1)
        b8, sb = _grouped_weights(groups, n, k)
        out = torch.empty((groups, m, n), device="cuda", dtype=torch.bfloat16)
        ref = torch.bmm(dequant_per_token(a8.view(-1, k), sa.reshape(groups * m, -1)).view(groups, m, k),
                        torch.stack([dequant_per_block(b8[g], sb[g]) for g in range(groups)]).transpose(1, 2))
        picked = get_config(GemmProblem(m, n, k, sms, kernel_type=kind, num_groups=groups))

        def fn():
            deep_gemm.bmm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)

        def check():
            fn()
            return calc_diff(out, ref)
        default_bms = [64, 128]
    else:
        groups, m, n, k = values
        rng = random.Random(groups * m + n + k)
        sizes = skewed_sizes(groups, m, rng) if skew else [int(m * rng.uniform(0.7, 1.3)) for _ in range(groups)]
        b8, sb = _grouped_weights(groups, n, k)
        if family == "contiguous":
            kind = KernelType.M_GROUPED_CONTIGUOUS
            layout = contiguous_m_indices(sizes)
            heur_m = layout.numel()
            a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((heur_m, k), device="cuda", dtype=torch.bfloat16))
            sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
            out = torch.empty((heur_m, n), device="cuda", dtype=torch.bfloat16)

            def fn():
                deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a8, sa), (b8, sb), out, layout)
            default_bms = [64, 128]
        elif family == "psum":
            kind, heur_m, align = KernelType.M_GROUPED_PSUM, m, deep_gemm.get_mk_alignment_for_contiguous_layout()
            ends, start = [], 0
            for s in sizes:  # expert g's rows: [align(ends[g - 1]), ends[g])
                ends.append(start + s)
                start = ceil_div(start + s, align) * align
            rows_a = max(start, 1)
            layout = torch.tensor(ends, dtype=torch.int32, device="cuda")
            a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((rows_a, k), device="cuda", dtype=torch.bfloat16))
            sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
            out = torch.empty((rows_a, n), device="cuda", dtype=torch.bfloat16)

            def fn():
                deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a8, sa), (b8, sb), out, layout, use_psum_layout=True,
                                                           expected_m_for_psum_layout=m)
            default_bms = [64, 128]
        elif family == "masked":
            kind, heur_m, m_max = KernelType.M_GROUPED_MASKED, m, 4096 if groups <= 32 else 1024
            sizes = [min(s, m_max) for s in sizes]
            layout = torch.tensor(sizes, dtype=torch.int32, device="cuda")
            a8, sa = deep_gemm.per_token_cast_to_fp8(
                torch.randn((groups * m_max, k), device="cuda", dtype=torch.bfloat16))
            a8, sa = a8.view(groups, m_max, k), deep_gemm.get_col_major_tma_aligned_tensor(sa.view(groups, m_max, -1))
            out = torch.empty((groups, m_max, n), device="cuda", dtype=torch.bfloat16)

            def fn():
                deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a8, sa), (b8, sb), out, layout, m)
            default_bms = [64, 128, 256]
        else:
            raise ValueError(f"--family {family}: no problem maker for this variant")
        rows = sum(sizes)
        label = f"{family} {groups}x{m} {n}x{k} rows={rows} (sizes {sizes[:6]}{'...' if groups > 6 else ''})"
        picked = get_config(GemmProblem(heur_m, n, k, sms, kernel_type=kind, num_groups=groups))
    psum_alignment = align if kind == KernelType.M_GROUPED_PSUM else 0

    def make_config(bm, bn, mc, on_a, stages, splits=1, a_box=False):
        if splits > 1 and kind != KernelType.NORMAL:
            raise ValueError("cluster K splits are a dense configuration")
        # A pair shares an M block (multicast of A: the N blocks pair up) or an N block (of B: dense M blocks pair
        # up; contiguous and masked pairs are checked on the device, the batched and psum kernels have no B
        # multicast: their M blocks stop at a group's end).
        if mc == 2 and (ceil_div(n, bn) % 2 if on_a else kind in (KernelType.BATCHED, KernelType.M_GROUPED_PSUM)
                        or (kind == KernelType.NORMAL and ceil_div(heur_m, bm) % 2)):
            raise ValueError(f"multicast {'A' if on_a else 'B'} does not pair up the blocks of {bm}x{bn}")
        if not _legal_block(bm, bn):
            raise ValueError(f"block {bm}x{bn} is not a legal 1D2D tile")
        if kind == KernelType.BATCHED:
            return build_sm90_config(heur_m, n, k, bm, bn, sms, mc, on_a, stages or MAX_STAGES, num_groups=groups,
                                     a_box_rows=batched_a_box_rows(heur_m, bm), gather_scales=True)
        a_box_rows = a_rows_per_stage(heur_m, bm) if a_box and kind == KernelType.NORMAL and mc == 1 else 0
        return build_sm90_config(heur_m, n, k, bm, bn, sms, mc, on_a, stages or MAX_STAGES,
                                 full_grid=walks_groups(kind), cluster_k_splits=splits, a_box_rows=a_box_rows)

    def grid(bms, bns, max_stages):
        # Dense decode sizes (m <= 128) also try cluster K splits: those dividing the K blocks, one wave of clusters.
        from deep_gemm.heuristics.common import max_clusters
        split_counts = [s for s in range(2, 9) if ceil_div(k, 128) % s == 0] if family == "dense" and m <= 128 else []
        out_cfgs = []
        for stages in max_stages or [MAX_STAGES]:
            for bm in bms or default_bms:
                for bn in bns or ([96, 112, 128, 144, 160] if family == "dense" else [64, 96, 128, 160, 192]):
                    tiles = ceil_div(heur_m, bm) * ceil_div(n, bn)
                    variants = [(mc, on_a, 1) for mc, on_a in ((1, True), (2, True), (2, False))] + \
                        [(1, True, s) for s in split_counts if tiles <= max_clusters(sms, s)]
                    for mc, on_a, splits in variants:
                        # Dense calls of fewer rows than the tile also with m-row A boxes (a_rows_per_stage).
                        a_boxes = (False, True) if family == "dense" and mc == 1 and a_rows_per_stage(heur_m, bm) \
                            else (False,)
                        for a_box in a_boxes:
                            try:
                                out_cfgs.append(make_config(bm, bn, mc, on_a, stages, splits, a_box))
                            except ValueError:
                                continue
        return out_cfgs
    return Problem(label, fn, "fp8_gemm_1d2d", 2 * rows * n * k, picked, make_config,
                   lambda cfg: sm90_fp8_gemm_1d2d.kernel_source(n, k, cfg, kind, psum_alignment), grid, check)


def _wgrad_problem(family, values, bms, bns) -> Problem:
    """wgrad (dense API) and k_grouped (G groups of the same K, one launch): the 1D1D weight-gradient kernel."""
    import torch

    import deep_gemm
    from deep_gemm.heuristics import sm90_wgrad
    from deep_gemm.families import sm90_fp8_wgrad_1d1d
    from deep_gemm.testing import calc_diff, dequant_per_token
    m, n, k = values[:3]
    groups = values[3] if family == "k_grouped" else 1
    sms = deep_gemm.get_num_sms()
    torch.backends.cuda.matmul.allow_tf32 = False
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16))
    b8, sb = deep_gemm.per_token_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
    ref = dequant_per_token(a8, sa) @ dequant_per_token(b8, sb).t()
    sa_t, sb_t = sa.t().contiguous(), sb.t().contiguous()
    out = torch.zeros((groups, m, n), device="cuda")
    if family == "wgrad":
        def fn():
            deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a8, sa_t), (b8, sb_t), out[0])
    else:
        a_flat, b_flat = a8.view(-1).repeat(groups), b8.view(-1).repeat(groups)
        sa_k, sb_k = sa_t.repeat(groups, 1), sb_t.repeat(groups, 1)

        def fn():
            deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a_flat, sa_k), (b_flat, sb_k), out, [k] * groups)

    def check():
        out.zero_()
        fn()
        torch.cuda.synchronize()
        return calc_diff(out[-1], ref)

    def make_config(bm, bn, mc, on_a, stages, splits=1):
        _no_splits(splits)
        if not sm90_wgrad.legal_block(bm, bn):
            raise ValueError(f"block {bm}x{bn} is not a legal weight-gradient tile")
        return sm90_wgrad.build_wgrad_config(m, n, groups, bm, bn, sms, mc, on_a, stages)

    def grid(bms, bns, _max_stages):
        cfgs = []
        for bm in bms or [bm for bm in sm90_wgrad.BLOCK_MS if bm == 128 or m <= 1024]:
            for bn in bns or [bn for bn in sm90_wgrad.BLOCK_NS if bn >= 64]:
                try:
                    cfgs.append(make_config(bm, bn, 1, True, 0))
                except ValueError:
                    continue
        return cfgs
    capacity = sm90_wgrad.group_capacity(groups)
    return Problem(f"{family} {m}x{n}x{k}" + (f" groups={groups}" if family == "k_grouped" else ""), fn,
                   "fp8_wgrad_gemm", 2 * m * n * k * groups, sm90_wgrad.get_wgrad_config(m, n, groups, sms),
                   make_config, lambda cfg: sm90_fp8_wgrad_1d1d.kernel_source(n, cfg, capacity), grid, check)


def _case_check(case):
    """The check of a tests/gemm_cases.py case: one fresh call, then its checker, which raises on a wrong value or a
    written guard band."""
    def check():
        case.reset()
        case.run()
        case.check()
        return None
    return check


def _spec_problem(family, values, bms, bns) -> Problem:
    """A variant without a problem maker of its own: its SPECS case (inputs and reference check from
    tests/gemm_cases.py), timed by its family's kernel name, over the dense 1D2D config grid (the family reads
    `get_forced_config()`); the problem needs m, n and k fields."""
    import torch

    import deep_gemm
    from deep_gemm.heuristics import GemmProblem, get_config
    from deep_gemm.heuristics.sm90 import MAX_STAGES, _legal_block, build_sm90_config
    if not {"m", "n", "k"} <= set(values):
        raise ValueError(f"--family {family}: its problem has no m, n, k fields, so no config grid to tune")
    if families_of(family, "sm_90a")[0].name != "sm90_fp8_gemm_1d2d":
        raise ValueError(f"--family {family}: the dense 1D2D config grid does not fit its kernel family "
                         f"({families_of(family, 'sm_90a')[0].name}); give it a problem maker of its own")
    spec = _spec_of(family)
    case = spec.build(values, torch.device("cuda"), 0)
    kernel = families_of(family, "sm_90a")[0].function.rsplit("::", 1)[-1]
    sms = deep_gemm.get_num_sms()
    mnk = (values["m"], values["n"], values["k"])
    picked = get_config(GemmProblem(*mnk, sms))

    check = _case_check(case)

    def make_config(bm, bn, mc, on_a, stages, splits=1):
        _no_splits(splits)
        if not _legal_block(bm, bn):
            raise ValueError(f"block {bm}x{bn} is not a legal 1D2D tile")
        return build_sm90_config(*mnk, bm, bn, sms, mc, on_a, stages or MAX_STAGES)

    def grid(bms, bns, max_stages):
        cfgs = []
        for stages in max_stages or [MAX_STAGES]:
            for bm in bms or [64, 128, 256]:
                for bn in bns or [64, 96, 128, 160, 192]:
                    try:
                        cfgs.append(make_config(bm, bn, 1, True, stages))
                    except ValueError:
                        continue
        return cfgs
    return Problem(f"{family} {json.dumps(values)}", case.run, kernel, 2 * mnk[0] * mnk[1] * mnk[2], picked,
                   make_config, None, grid, check)


def _bf16_problem(values, bms, bns, full_a_box: bool = False) -> Problem:
    """bf16: the dense nt BF16 GEMM (BF16 d), with cluster K splits where the split tiles fit one wave; A boxes of the
    heuristic's rows where m < BLOCK_M (a_rows_per_stage), unless `full_a_box`."""
    import torch

    import deep_gemm
    from deep_gemm.families import sm90_bf16_gemm
    from deep_gemm.heuristics.common import ceil_div
    from deep_gemm.heuristics.common import a_rows_per_stage
    from deep_gemm.heuristics.sm90_bf16 import (BLOCK_NS, MAX_CLUSTER_K_SPLITS, build_bf16_config, get_bf16_config,
                                                legal_block, max_clusters)
    from deep_gemm.testing import calc_diff
    m, n, k = values
    sms = deep_gemm.get_num_sms()
    kind = sm90_bf16_gemm.KernelKind(False, False, False, False)
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, k), device="cuda", dtype=torch.bfloat16)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float().t()

    def fn():
        deep_gemm.bf16_gemm_nt(a, b, out)

    def check():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        return calc_diff(out, ref)

    def make_config(bm, bn, mc, on_a, stages, splits=1):
        if not legal_block(bm, bn, False):
            raise ValueError(f"{bm}x{bn} is not a legal bf16 tile")
        a_box_rows = a_rows_per_stage(m, bm) if mc == 1 and not full_a_box else 0
        return build_bf16_config(m, n, bm, bn, sms, 2, stages, cluster_k_splits=splits, num_multicast=mc,
                                 multicast_on_a=on_a, a_box_rows=a_box_rows)

    def grid(bms, bns, _max_stages):
        cfgs = []
        for bm in bms or [bm for bm in (64, 128) if bm == 64 or m > 64]:
            for bn in bns or BLOCK_NS:
                tiles = ceil_div(m, bm) * ceil_div(n, bn)
                for splits in range(1, MAX_CLUSTER_K_SPLITS + 1):
                    if splits > 1 and tiles > max_clusters(sms, splits):  # one wave of co-resident clusters
                        continue
                    for mc, on_a in ((1, True), (2, True), (2, False)) if splits == 1 and m > 128 else ((1, True),):
                        try:
                            cfgs.append(make_config(bm, bn, mc, on_a, 0, splits))
                        except ValueError:
                            continue
        return cfgs
    return Problem(f"bf16 {m}x{n}x{k}", fn, "bf16_gemm", 2 * m * n * k, get_bf16_config(m, n, sms, False, 2, k=k),
                   make_config, lambda cfg: sm90_bf16_gemm.kernel_source(n, cfg, kind), grid, check)


def _bf16_grouped_problem(family, values, bms, bns, skew) -> Problem:
    """bf16_contiguous / bf16_masked (nt): G groups of about m rows (drawn as for the FP8 grouped families), through
    the test case builders (their checker: the FP32 reference and guard bands); with and without B shared by 2-CTA
    pairs."""
    import torch

    import deep_gemm
    from benchmarks.bench import skewed_sizes
    from deep_gemm.families import sm90_bf16_gemm
    from deep_gemm.heuristics import KernelType
    from deep_gemm.heuristics.sm90_bf16 import COMPUTE_BLOCK_NS, build_bf16_config, get_bf16_config, legal_block
    from tests.gemm_cases import build_bf16_contiguous, build_bf16_masked
    groups, m, n, k = values
    rng = random.Random(groups * m + n + k)
    sizes = skewed_sizes(groups, m, rng) if skew else [int(m * rng.uniform(0.7, 1.3)) for _ in range(groups)]
    sms = deep_gemm.get_num_sms()
    if family == "bf16_contiguous":
        kind, heur_m, heur_groups = KernelType.M_GROUPED_CONTIGUOUS, sum(-(-s // 128) * 128 for s in sizes), 1
        case = build_bf16_contiguous(dict(sizes=sizes, n=n, k=k, layout="nt", psum=False), torch.device("cuda"), 0)
    else:
        kind, heur_m, heur_groups = KernelType.M_GROUPED_MASKED, m, groups
        m_max = max(sizes + [1])
        case = build_bf16_masked(dict(masked=sizes, m_max=m_max, n=n, k=k, expected_m=m), torch.device("cuda"), 0)

    check = _case_check(case)

    def make_config(bm, bn, mc, on_a, stages, splits=1):
        _no_splits(splits)
        if bm > 128 or not legal_block(bm, bn, False) or (mc == 2 and on_a):
            raise ValueError(f"{bm}x{bn} (multicast {mc}{'A' if on_a else 'B'}) is not a grouped bf16 config")
        return build_bf16_config(heur_m, n, bm, bn, sms, 2, stages, groups=heur_groups, num_multicast=mc,
                                 multicast_on_a=on_a, kind=kind)

    def grid(bms, bns, _max_stages):
        cfgs = []
        for bm in bms or [64, 128]:
            for bn in bns or COMPUTE_BLOCK_NS:
                for mc, on_a in ((1, True), (2, False)):
                    try:
                        cfgs.append(make_config(bm, bn, mc, on_a, 0))
                    except ValueError:
                        continue
        return cfgs
    picked = get_bf16_config(heur_m, n, sms, False, 2, kind, heur_groups)
    kernel_kind = sm90_bf16_gemm.KernelKind(False, False, False, False, kind)
    return Problem(f"{family} {groups}x{m} {n}x{k} rows={sum(sizes)}", case.run, "bf16_gemm", 2 * sum(sizes) * n * k,
                   picked, make_config, lambda cfg: sm90_bf16_gemm.kernel_source(n, cfg, kernel_kind), grid, check)


def einsum_configs(values: dict, sms: int, splits: int):
    """(picked, make_config, grid, kernel_source) of an einsum problem (see `_einsum_problem`; no GPU needed):
    per-head tiles with and without A shared by a head's N block pairs; bmk as `splits` K splits into partial sums
    (BMxBN) or, for an FP32 d, summed in clusters of S CTAs (BMxBN:ksS)."""
    from deep_gemm.families import sm90_bf16_gemm
    from deep_gemm.heuristics import KernelType
    from deep_gemm.heuristics.sm90_bf16 import (BLOCK_NS, COMPUTE_BLOCK_NS, build_bf16_config,
                                                get_bf16_cluster_sum_config, get_bf16_config, get_bf16_ksplit_config,
                                                legal_block, sums_in_clusters)
    form, batches, m, n, k = (values[f] for f in ("form", "batches", "m", "n", "k"))
    Kind = sm90_bf16_gemm.KernelKind
    if form != "bmk":
        kind = Kind(False, form == "bhd", False, False, KernelType.BATCHED)

        def make_config(bm, bn, mc, on_a, stages, splits_in_cluster=1):
            _no_splits(splits_in_cluster)
            if not legal_block(bm, bn, kind.mn_major_b) or (mc == 2 and not on_a):
                raise ValueError(f"{bm}x{bn} (multicast {mc}{'A' if on_a else 'B'}) is not a per-head einsum tile")
            return build_bf16_config(m, n, bm, bn, sms, 2, stages, groups=batches, num_multicast=mc,
                                     multicast_on_a=True, kind=KernelType.BATCHED)

        def grid(bms, bns, _max_stages):
            cfgs = []
            for bm in bms or [64, 128, 256]:
                for bn in bns or (BLOCK_NS if m <= 128 else COMPUTE_BLOCK_NS):
                    for mc in (1, 2):
                        try:
                            cfgs.append(make_config(bm, bn, mc, True, 0))
                        except ValueError:
                            continue
            return cfgs
        return (get_bf16_config(m, n, sms, kind.mn_major_b, 2, KernelType.BATCHED, batches), make_config, grid,
                lambda cfg: sm90_bf16_gemm.kernel_source(n, cfg, kind))

    fp32 = values["out"] == "fp32"  # the spec accumulates an FP32 d in place (c = d): the cluster sum's form
    partials = Kind(False, False, True, False, KernelType.BATCHED, batch_splits_k=True)
    clusters = Kind(False, False, True, True, KernelType.NORMAL, batch_splits_k=True)
    in_clusters = fp32 and sums_in_clusters(m, n, batches, k, sms)

    def make_config(bm, bn, mc, on_a, stages, cluster_splits=1):
        if mc != 1 or not legal_block(bm, bn, False) or (cluster_splits > 1 and not fp32):
            raise ValueError(f"{bm}x{bn} (multicast {mc}, {cluster_splits} cluster splits) is not a bmk,bnk->mn "
                             f"configuration for a {values['out']} d")
        if cluster_splits > 1:
            return build_bf16_config(m, n, bm, bn, sms, 4, stages, cluster_k_splits=cluster_splits)
        return build_bf16_config(m, n, bm, bn, sms, 4, stages, groups=splits)

    def grid(bms, bns, _max_stages):
        cfgs = []
        for bm in bms or [64, 128, 256]:
            for bn in bns or [bn for bn in BLOCK_NS if bn % 32 == 0]:  # every other width: half the grid
                for cluster_splits in (1, 2, 4, 8, 16) if fp32 else (1,):
                    try:
                        cfgs.append(make_config(bm, bn, 1, True, 0, cluster_splits))
                    except ValueError:
                        continue
        return cfgs
    picked = get_bf16_cluster_sum_config(m, n, sms) if in_clusters else get_bf16_ksplit_config(m, n, sms, splits)
    return (picked, make_config, grid,
            lambda cfg: sm90_bf16_gemm.kernel_source(n, cfg, clusters if cfg.cluster_k_splits > 1 else partials))


def _einsum_problem(values, bms, bns) -> Problem:
    """einsum: its SPECS case (form bhr / bhd: one GEMM per head of `batches` heads, BF16 d; bmk: d = the sum over
    `batches` products) over `einsum_configs`' tiles, timed by the kernel's name: the K splits' fixed-order PyTorch
    sum is not counted (DeepGEMM's test_einsum times the same way)."""
    import torch

    import deep_gemm
    from deep_gemm.runtime import k_split_count
    case = _spec_of("einsum").build(values, torch.device("cuda"), 0)
    splits = k_split_count(values["m"], values["n"], values["batches"], values["k"], torch.cuda.current_device())
    picked, make_config, grid, source = einsum_configs(values, deep_gemm.get_num_sms(), splits)
    flops = 2 * values["batches"] * values["m"] * values["n"] * values["k"]
    kernel = "bmn_bnk_mn_gemm" if values["form"] == "bmk" else "bf16_gemm"
    return Problem(f"einsum {json.dumps(values)}", case.run, kernel, flops, picked, make_config, source, grid,
                   _case_check(case))


def make_problem(family: str, case: str, bms=None, bns=None, skew: bool = False,
                 full_a_box: bool = False) -> Problem:
    """The inputs, call and config builders of one CASE of `family` (on the current CUDA device)."""
    values = parse_case(family, case)
    if family == "bf16":
        return _bf16_problem(values, bms, bns, full_a_box)
    if family in ("bf16_contiguous", "bf16_masked"):
        return _bf16_grouped_problem(family, values, bms, bns, skew)
    if family == "einsum":
        return _einsum_problem(values, bms, bns)
    if CASE_FORMS[family] == SPEC_FORM:
        return _spec_problem(family, values, bms, bns)
    if family in WGRAD_KERNEL:
        return _wgrad_problem(family, values, bms, bns)
    return _sm90_problem(family, values, bms, bns, skew)


def candidates(problem: Problem, args) -> list:
    """--configs, or the grid; the heuristic's pick is always among them."""
    from deep_gemm.heuristics.sm90 import kernel_key
    if args.configs:
        cfgs = []
        for spec in args.configs:
            try:
                cfgs.append(problem.make_config(*parse_config_spec(spec)))
            except ValueError as e:
                print(f"  skip {spec}: {e}")
    else:
        cfgs = problem.grid(args.bm, args.bn, args.max_stages)
    keys = {(kernel_key(c), c.num_sms) for c in cfgs}
    return cfgs if (kernel_key(problem.picked), problem.picked.num_sms) in keys else [problem.picked] + cfgs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="+", metavar="CASE")
    p.add_argument("--family", required=True, choices=FAMILIES)
    p.add_argument("--bm", type=int, nargs="*", help="BLOCK_M values of the grid (default: per family)")
    p.add_argument("--bn", type=int, nargs="*", help="BLOCK_N values of the grid (default: per family)")
    p.add_argument("--max-stages", type=int, nargs="*", help="dense/contiguous/masked/psum: also these pipeline depths")
    p.add_argument("--configs", nargs="*", help="BMxBN[:STAGES][:mcA|mcB|:ksS] to time instead of the grid")
    p.add_argument("--skew", action="store_true",
                   help="contiguous/masked/psum: skewed expert loads (bench.skewed_sizes)")
    p.add_argument("--full-a-box", action="store_true",
                   help="bf16: load BLOCK_M rows of A per stage even where m is smaller (the A/B baseline)")
    p.add_argument("--num-tests", type=int, help="timed calls per config (default: 15 dense, 10 otherwise)")
    return p


def main() -> None:
    args = parser().parse_args()
    for case in args.cases:  # every CASE is checked before the GPU work starts
        try:
            parse_case(args.family, case)
        except ValueError as e:
            parser().error(str(e))
    for spec in args.configs or []:
        try:
            parse_config_spec(spec)
        except ValueError as e:
            parser().error(str(e))
    from deep_gemm import jit
    from deep_gemm.heuristics.sm90 import kernel_key
    from deep_gemm.testing import bench_kineto, forced_config
    num_tests = args.num_tests or DEFAULT_TESTS[args.family]
    for case in args.cases:
        problem = make_problem(args.family, case, args.bm, args.bn, args.skew, args.full_a_box)
        cfgs = candidates(problem, args)
        if problem.source is not None:
            jit.build_many([problem.source(c) for c in cfgs], "sm_90a")
        print(f"== {problem.label}; heuristic: {describe(problem.picked)}", flush=True)
        for cfg in cfgs:
            with forced_config(cfg):
                diff = problem.check() if problem.check else None  # also builds the forced config's plan
                t = bench_kineto(problem.fn, problem.kernel, num_tests=num_tests)
            mark = "*" if (kernel_key(cfg), cfg.num_sms) == (kernel_key(problem.picked), problem.picked.num_sms) \
                else " "
            print(f"{mark} {describe(cfg)} {t * 1e6:9.1f} us {problem.flops / t / 1e12:6.0f} TFLOPS"
                  + (f" diff {diff:.1e}" if diff is not None else ""), flush=True)


if __name__ == "__main__":
    main()
