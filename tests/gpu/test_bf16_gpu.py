"""GPU correctness of the dense BF16 GEMMs (`bf16_gemm_{nt,nn,tn,tt}`) on Hopper: every operand layout, BF16 and FP32
d, without c, with c = d and with another c; ragged shapes (m = 1, k not a multiple of 64), DeepGEMM's test_bf16
shapes, guard bands, k = 0 and m = 0, CUDA-graph replay and bitwise determinism; the cluster K splits of decode-sized
calls under forced configurations. Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from gemm_cases import Guarded

pytestmark = pytest.mark.gpu

LAYOUTS = ("nt", "nn", "tn", "tt")


def _operands(layout: str, m: int, n: int, k: int, gen: torch.Generator):
    """(a, b) in the public function's argument shapes for `layout`, and their [m, k] / [n, k] FP32 values."""
    a = torch.randn((m, k), device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn((n, k), device="cuda", generator=gen).to(torch.bfloat16)
    a_arg = a if layout[0] == "n" else a.t().contiguous()   # tn / tt take a as [k, m]
    b_arg = b if layout[1] == "t" else b.t().contiguous()   # nn / tn take b as [k, n]
    return a_arg, b_arg, a.float(), b.float()


def _run(layout: str, m: int, n: int, k: int, out_dtype: torch.dtype, c_mode: str, seed: int = 0):
    """One call; returns (guarded d, FP32 reference)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b, a32, b32 = _operands(layout, m, n, k, gen)
    g = Guarded((m, n), out_dtype, "cuda")
    ref = a32 @ b32.t()
    c = None
    if c_mode != "none":
        init = torch.randn((m, n), device="cuda", generator=gen).to(out_dtype)
        ref = ref + init.float()
        if c_mode == "d":
            g.set_initial(init)
            c = g.out
        else:
            c = init
    getattr(deep_gemm, f"bf16_gemm_{layout}")(a, b, g.out, c)
    torch.cuda.synchronize()
    return g, ref


def _check(g: Guarded, ref: torch.Tensor, what: str) -> None:
    g.check_guards()
    out = g.out.float()
    assert bool(torch.isfinite(out).all()), f"{what}: NaN/Inf (unwritten?)"
    diff = float(calc_diff(out, ref))
    assert diff < 1e-5, f"{what}: calc_diff {diff:.3g}"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("c_mode", ["none", "d", "other"])
@pytest.mark.parametrize("mnk", [(1, 64, 64), (136, 200, 136), (256, 576, 1000), (1000, 2112, 7168)],
                         ids=lambda s: "x".join(map(str, s)))
def test_bf16_layouts(layout, out_dtype, c_mode, mnk):
    m, n, k = mnk
    g, ref = _run(layout, m, n, k, out_dtype, c_mode)
    _check(g, ref, f"{layout} {m}x{n}x{k} {out_dtype} c={c_mode}")


# DeepGEMM v2.6.1 tests/test_bf16.py's dense shapes (m x (n, k)), BF16 d with and without c, and its FP32-d ones.
DG_NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


@pytest.mark.parametrize("m", [1, 128, 4096])
@pytest.mark.parametrize("nk", DG_NK, ids=lambda s: f"{s[0]}x{s[1]}")
def test_deepgemm_dense_shapes(m, nk):
    n, k = nk
    for c_mode in ("none", "d"):
        g, ref = _run("nt", m, n, k, torch.bfloat16, c_mode, seed=m + n)
        _check(g, ref, f"nt {m}x{n}x{k} c={c_mode}")


@pytest.mark.parametrize("m", [1, 128, 4096])
@pytest.mark.parametrize("nk", [(256, 7168), (129280, 7168)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_deepgemm_fp32_out_shapes(m, nk):
    n, k = nk
    g, ref = _run("nt", m, n, k, torch.float32, "none", seed=m)
    _check(g, ref, f"nt {m}x{n}x{k} fp32")


@pytest.mark.parametrize("layout,out_dtype,c_mode", [("nn", torch.bfloat16, "none"),
                                                     ("tn", torch.float32, "d"), ("tn", torch.bfloat16, "none")])
def test_deepgemm_backward_shapes(layout, out_dtype, c_mode):
    """test_bf16's backward passes at m = 4096: dgrad (B MN-major) and wgrad (both MN-major, FP32 accumulated)."""
    for n, k in DG_NK[:4]:
        g, ref = _run(layout, 4096, n, k, out_dtype, c_mode, seed=n)
        _check(g, ref, f"{layout} 4096x{n}x{k} {out_dtype} c={c_mode}")


def test_k_zero_and_m_zero():
    d = torch.full((64, 64), 7.0, device="cuda", dtype=torch.bfloat16)
    a = torch.empty((64, 0), device="cuda", dtype=torch.bfloat16)
    b = torch.empty((64, 0), device="cuda", dtype=torch.bfloat16)
    deep_gemm.bf16_gemm_nt(a, b, d)
    assert bool((d == 0).all())
    c = torch.full((64, 64), 3.0, device="cuda", dtype=torch.bfloat16)
    deep_gemm.bf16_gemm_nt(a, b, d, c)
    assert bool((d == 3).all())
    empty = torch.empty((0, 64), device="cuda", dtype=torch.bfloat16)
    deep_gemm.bf16_gemm_nt(empty, torch.randn((64, 64), device="cuda").bfloat16(), torch.empty((0, 64), device="cuda",
                                                                                             dtype=torch.bfloat16))


def test_graph_replay_and_determinism():
    gen = torch.Generator(device="cuda").manual_seed(3)
    a, b, _, _ = _operands("tn", 1024, 576, 2048, gen)
    d = torch.empty((1024, 576), device="cuda", dtype=torch.float32)
    deep_gemm.bf16_gemm_tn(a, b, d)
    eager = d.clone()
    for _ in range(3):
        deep_gemm.bf16_gemm_tn(a, b, d)
        assert torch.equal(d, eager), "not bitwise reproducible"
    graph = torch.cuda.CUDAGraph()
    d.zero_()
    with torch.cuda.graph(graph):
        deep_gemm.bf16_gemm_tn(a, b, d)
    d.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d, eager), "graph replay differs from eager"


# Cluster K splits (bf16_gemm.cuh, ClusterSplitEpilogue): forced split counts over layouts, outputs and c modes;
# shapes with several tiles per cluster (1 x 2112: 44 tiles of 48 columns over 132 / splits clusters), with more
# splits than K blocks (k = 104: 2 blocks), 2 M blocks, and ragged m and k.
SPLIT_CASES = [("nt", torch.bfloat16, "none"), ("nt", torch.bfloat16, "d"), ("tt", torch.float32, "other"),
               ("nn", torch.float32, "d"), ("tn", torch.bfloat16, "other")]


# (splits, (layout, d dtype, c mode), (m, n, k)): every split count, layout, output and c mode at least once.
# (A K-major needs k % 8 == 0, A MN-major (tn, tt) m % 8 == 0: TMA's 16-byte strides.)
SPLIT_TESTS = [(2, SPLIT_CASES[0], (1, 2112, 7168)), (3, SPLIT_CASES[1], (1, 2112, 7168)),
               (8, SPLIT_CASES[2], (8, 2112, 7168)), (5, SPLIT_CASES[3], (7, 200, 104)),
               (8, SPLIT_CASES[0], (7, 200, 104)), (4, SPLIT_CASES[4], (104, 576, 1000)),
               (6, SPLIT_CASES[2], (104, 576, 1000)), (2, SPLIT_CASES[3], (128, 256, 4160)),
               (7, SPLIT_CASES[0], (128, 256, 4160)), (3, SPLIT_CASES[4], (40, 2112, 7168)),
               (3, SPLIT_CASES[1], (33, 2112, 7000))]


@pytest.mark.parametrize("splits,case,mnk", SPLIT_TESTS,
                         ids=[f"ks{s}-{c[0]}-{c[1].itemsize * 8}-{c[2]}-{'x'.join(map(str, x))}"
                              for s, c, x in SPLIT_TESTS])
def test_cluster_k_splits(splits, case, mnk):
    from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
    from deep_gemm.testing import forced_config
    (layout, out_dtype, c_mode), (m, n, k) = case, mnk
    block_m = 64 if m <= 64 else 128
    # An MN-major B tile is whole 64-wide chunks: two of them, so the chunk stride is exercised in every cluster rank.
    block_n = 128 if layout[1] == "n" else 48
    # Odd split counts also load only m rows of A per stage (as the heuristic's decode picks do, A K-major).
    a_box_rows = -(-m // 8) * 8 if splits % 2 and layout[0] == "n" and m < block_m else 0  # any multiple of 8
    config = build_bf16_config(m, n, block_m, block_n, deep_gemm.get_num_sms(), out_dtype.itemsize,
                               cluster_k_splits=splits, a_box_rows=a_box_rows)
    with forced_config(config):
        g, ref = _run(layout, m, n, k, out_dtype, c_mode, seed=splits)
        _check(g, ref, f"{layout} {m}x{n}x{k} {out_dtype} c={c_mode} splits={splits}")
        if c_mode == "none":  # bitwise reruns (the splits are added in a fixed order)
            first = g.out.clone()
            g2, _ = _run(layout, m, n, k, out_dtype, c_mode, seed=splits)
            assert torch.equal(g2.out, first), "cluster K splits: not bitwise reproducible"


def test_cluster_k_splits_graph_replay():
    from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
    from deep_gemm.testing import forced_config
    gen = torch.Generator(device="cuda").manual_seed(5)
    a, b, a32, b32 = _operands("nt", 3, 2112, 7168, gen)
    d = torch.empty((3, 2112), device="cuda", dtype=torch.bfloat16)
    with forced_config(build_bf16_config(3, 2112, 64, 64, deep_gemm.get_num_sms(), 2, cluster_k_splits=4)):
        deep_gemm.bf16_gemm_nt(a, b, d)
        eager = d.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            deep_gemm.bf16_gemm_nt(a, b, d)
        for _ in range(3):
            d.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(d, eager), "graph replay differs from eager"
    assert float(calc_diff(eager.float(), a32 @ b32.t())) < 1e-5


def test_misaligned_operand_is_refused():
    a = torch.randn((64, 100), device="cuda").bfloat16()  # row stride 100 elements = 200 bytes
    b = torch.randn((64, 100), device="cuda").bfloat16()
    d = torch.empty((64, 64), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a's row stride"):
        deep_gemm.bf16_gemm_nt(a, b, d)


# ---- MoE: DeepGEMM v2.6.1 tests/test_bf16.py's grouped shapes, through tests/gemm_cases.py's builders and checks

from gemm_cases import build_bf16_contiguous, build_bf16_masked  # noqa: E402

GROUPED_NK = [(6144, 7168), (7168, 3072), (4096, 4096), (4096, 2048)]


@pytest.mark.parametrize("groups,m_per_group", [(4, 8192), (8, 4096)])
@pytest.mark.parametrize("nk", GROUPED_NK, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("psum", [False, True], ids=["m_indices", "psum"])
def test_deepgemm_contiguous_shapes(groups, m_per_group, nk, layout, psum):
    n, k = nk
    gen = torch.Generator().manual_seed(groups * n + k)
    # Ragged groups around the mean, as DeepGEMM's generator draws them.
    sizes = [int(m_per_group * (0.7 + 0.6 * float(torch.rand((), generator=gen)))) for _ in range(groups)]
    case = build_bf16_contiguous(dict(sizes=sizes, n=n, k=k, layout=layout, psum=psum), torch.device("cuda"), 1)
    case.run()
    case.check()


@pytest.mark.parametrize("groups,expected_m", [(32, 192), (6, 1024), (32, 20), (6, 20)])
@pytest.mark.parametrize("nk", [(4096, 7168), (7168, 2048)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_deepgemm_masked_shapes(groups, expected_m, nk):
    n, k = nk
    gen = torch.Generator().manual_seed(groups + expected_m)
    masked = [min(4096, int(expected_m * (0.7 + 0.6 * float(torch.rand((), generator=gen))))) for _ in range(groups)]
    case = build_bf16_masked(dict(masked=masked, m_max=4096, n=n, k=k, expected_m=expected_m), torch.device("cuda"), 2)
    case.run()
    case.check()


def test_grouped_k_zero_and_empty():
    """k = 0: masked rows < masked_m become zeros, the others stay; per-row padding and groups become zeros."""
    a = torch.empty((2, 64, 0), device="cuda", dtype=torch.bfloat16)
    b = torch.empty((2, 64, 0), device="cuda", dtype=torch.bfloat16)
    d = torch.full((2, 64, 64), 5.0, device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor([3, 0], dtype=torch.int32, device="cuda"), 2)
    assert bool((d[0, :3] == 0).all()) and bool((d[0, 3:] == 5).all()) and bool((d[1] == 5).all())


@pytest.mark.parametrize("groups,m,n,k_mean", [(4, 4096, 7168, 8192), (8, 7168, 2048, 4096), (16, 4096, 7168, 2048)])
def test_deepgemm_k_grouped_shapes(groups, m, n, k_mean):
    """test_bf16's k-grouped shapes, one group empty: d[g] = c[g] + a_g^T b_g, FP32, c = d."""
    gen = torch.Generator(device="cuda").manual_seed(groups)
    ks = [k_mean // 128 * 128 for _ in range(groups)]
    ks[1] = 0
    a = torch.randn((sum(ks), m), device="cuda", generator=gen).bfloat16()
    b = torch.randn((sum(ks), n), device="cuda", generator=gen).bfloat16()
    d = torch.randn((groups, m, n), device="cuda", generator=gen)
    ref = d.clone()
    start = 0
    for g, k in enumerate(ks):
        ref[g] += a[start:start + k].float().t() @ b[start:start + k].float()
        start += k
    layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, layout, d)
    torch.cuda.synchronize()
    diff = float(calc_diff(d, ref))
    assert diff < 1e-5, f"k-grouped {groups}x{m}x{n} ks={ks}: calc_diff {diff:.3g}"


# B shared over 2-CTA clusters by contiguous and masked pairs (forced configurations): pairs of two experts, a
# padding block, an odd M block count (the phantom block), empty groups and an odd tile count (the masked phantom
# tile). The result is the unshared kernel's, bitwise (the same sums in the same order), and the reference's.
GROUPED_MULTICAST = [
    ("contiguous", dict(sizes=[300, 0, 129, 513, 64], n=384, k=520, layout="nt", psum=False)),
    ("contiguous", dict(sizes=[128, 256, 1], n=200, k=4096, layout="nt", psum=False)),
    ("masked", dict(masked=[64, 0, 200, 129, 1], m_max=256, n=384, k=520, expected_m=100)),
    ("masked", dict(masked=[256, 255, 3], m_max=256, n=136, k=4096, expected_m=200)),
]


@pytest.mark.parametrize("form,params", GROUPED_MULTICAST, ids=[f"{f}{i}" for i, (f, _) in enumerate(GROUPED_MULTICAST)])
def test_grouped_b_multicast(form, params):
    from deep_gemm.heuristics import KernelType
    from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
    from deep_gemm.testing import forced_config
    kind = KernelType.M_GROUPED_CONTIGUOUS if form == "contiguous" else KernelType.M_GROUPED_MASKED
    build = build_bf16_contiguous if form == "contiguous" else build_bf16_masked
    rows, groups = (sum(params["sizes"]), 1) if form == "contiguous" else (params["expected_m"], len(params["masked"]))
    outs = []
    for multicast in (1, 2):
        config = build_bf16_config(rows, params["n"], 128, 64, deep_gemm.get_num_sms(), 2, groups=groups,
                                   num_multicast=multicast, multicast_on_a=multicast == 1, kind=kind)
        with forced_config(config):
            case = build(params, torch.device("cuda"), 3)
            case.run()
            torch.cuda.synchronize()
            case.check()
            outs.append(case.out.clone())
    assert torch.equal(outs[0].nan_to_num(7.0), outs[1].nan_to_num(7.0)), "B multicast changed the result"


# TMA multicast with MN-major operands, every layout and shared operand, 2-4 column chunks per tile: the cluster's
# second CTA once read an MN-major B's second and later chunks from the wrong place (a descriptor whose start
# address kept the cluster rank; mma.cuh, desc_start_address). The result is the unshared kernel's, bitwise.
MN_MAJOR_MULTICAST = [(layout, bm, bn, on_a) for layout in ("nn", "tn", "tt")
                      for bm, bn, on_a in ((128, 128, True), (128, 192, False), (256, 128, False), (128, 256, False))]


@pytest.mark.parametrize("layout,block_m,block_n,on_a", MN_MAJOR_MULTICAST,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}-mc{'A' if c[3] else 'B'}" for c in MN_MAJOR_MULTICAST])
def test_mn_major_multicast(layout, block_m, block_n, on_a):
    from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
    from deep_gemm.testing import forced_config
    m, n, k = 1024, 768, 1000
    outs = []
    for multicast in (1, 2):
        config = build_bf16_config(m, n, block_m, block_n, deep_gemm.get_num_sms(), 2, num_multicast=multicast,
                                   multicast_on_a=on_a)
        with forced_config(config):
            g, ref = _run(layout, m, n, k, torch.bfloat16, "none", seed=11)
            _check(g, ref, f"{layout} {m}x{n}x{k} {block_m}x{block_n} multicast {multicast}")
            outs.append(g.out.clone())
    assert torch.equal(outs[0], outs[1]), "multicast changed the result"
