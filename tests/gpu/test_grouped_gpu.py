"""GPU correctness of the MoE grouped GEMMs (contiguous and masked layouts) on Hopper; skipped without sm_90."""
import random

import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from gemm_cases import contiguous_inputs, masked_inputs

pytestmark = pytest.mark.gpu

POISON = -1  # int16 0xFFFF = a BF16 NaN
ALIGN = 128


class Guarded:
    """A [lead, rows, n] BF16 output (groups stacked uniformly) inside a poisoned int16 buffer with guard rows
    above and below and guard columns on both sides."""

    def __init__(self, rows: int, n: int, lead: int = 1, guard: int = 8):
        self.stride = (n + 2 * guard + 7) // 8 * 8
        self.buf = torch.full((lead * rows + 2, self.stride), POISON, dtype=torch.int16, device="cuda")
        self.rows, self.n, self.guard, self.lead = rows, n, guard, lead
        self.out3 = self.buf.view(torch.bfloat16)[1:lead * rows + 1, guard:guard + n].view(lead, rows, n)

    def written(self) -> torch.Tensor:
        return self.out3.view(torch.int16) != POISON

    def check_guards(self) -> None:
        inner = torch.zeros_like(self.buf, dtype=torch.bool)
        inner[1:self.lead * self.rows + 1, self.guard:self.guard + self.n] = True
        assert bool((self.buf[~inner] == POISON).all()), "kernel wrote outside the output (guard band changed)"


# ---------------------------------------------------------------- contiguous

def make_contiguous(sizes, n: int, k: int, seed: int, align: int = ALIGN):
    """Experts' rows stacked, each segment padded to `align` with -1: lhs, rhs, m_indices and the FP32 and BF16
    references (padding rows 0)."""
    return contiguous_inputs(sizes, n, k, torch.Generator(device="cuda").manual_seed(seed), "cuda", align)


def call_contiguous_checked(lhs, rhs, m_indices, ref, what):
    """One contiguous GEMM into a poisoned guarded output, checked: guard bands intact, every row written, padding
    rows zeros, calc_diff against the dequantised FP32 reference `ref` < 1e-5. Returns the output."""
    g = Guarded(*ref.shape)
    out = g.out3[0]
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    torch.cuda.synchronize()
    g.check_guards()
    assert bool(g.written().all()), "every row (padding included) must be written"
    assert bool((out[m_indices < 0].float() == 0).all()), "padding rows must be zeros"
    diff = calc_diff(out, ref)
    assert diff < 1e-5, f"{what}: calc_diff vs dequantised FP32 = {diff:.3g}"
    return out


def run_contiguous(sizes, n, k, seed, check_bf16=True):
    torch.backends.cuda.matmul.allow_tf32 = False
    lhs, rhs, m_indices, ref, ref_bf16 = make_contiguous(sizes, n, k, seed)
    out = call_contiguous_checked(lhs, rhs, m_indices, ref, f"sizes={sizes} n={n} k={k}")
    if check_bf16 and ref_bf16.abs().sum() > 0:
        diff_bf16 = calc_diff(out, ref_bf16)
        assert diff_bf16 < 1e-3, f"sizes={sizes} n={n} k={k}: calc_diff vs BF16 = {diff_bf16:.3g}"
    first = out.clone()
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), out.view(torch.int16)), "rerun is not bitwise identical"
    return lhs, rhs, m_indices, out, ref


def _sizes(num_groups: int, m: int, rng: random.Random):
    return [int(m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]


# The bench shapes of the issue (rows per group ~ m * U(0.7, 1.3)).
@pytest.mark.parametrize("num_groups,m,n,k", [(4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168),
                                              (8, 4096, 7168, 2048), (32, 256, 4096, 7168), (32, 256, 7168, 2048)])
def test_contiguous_bench_shapes(num_groups, m, n, k):
    run_contiguous(_sizes(num_groups, m, random.Random(num_groups * m + n)), n, k, seed=n + k)


def _random_contiguous_cases(count, seed):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        num_groups = rng.choice([1, 2, 3, 5, 8, 16, 33, 64, 128, 256])
        per = max(1, 4096 // num_groups)
        sizes = [rng.choice([0, rng.randint(1, per), rng.randint(1, 3 * per)]) for _ in range(num_groups)]
        n = rng.choice([8, 72, 256, 520, 1024, 2112, 4096])
        k = rng.choice([16, 112, 128, 208, 512, 1008, 2048])  # contiguous A/B rows: k % 16 == 0
        cases.append((sizes, n, k))
    return cases


@pytest.mark.parametrize("case", range(24))
def test_contiguous_random(case):
    sizes, n, k = _random_contiguous_cases(24, 1234)[case]
    run_contiguous(sizes, n, k, seed=case)


def test_contiguous_fresh_seed():
    seed = random.SystemRandom().randrange(1 << 30)
    sizes, n, k = _random_contiguous_cases(1, seed)[0]
    run_contiguous(sizes, n, k, seed=seed)


@pytest.mark.parametrize("sizes", [[0, 0, 0], [0, 300, 0], [1], [128], [129, 0, 1, 255]])
def test_contiguous_empty_experts_and_edges(sizes):
    run_contiguous(sizes, 512, 256, seed=len(sizes))


@pytest.mark.parametrize("n", [1, 7, 100, 4100])
def test_contiguous_ragged_n(n):
    run_contiguous([200, 50, 300], n, 384, seed=n)


def test_contiguous_all_padding_and_bad_indices():
    """All -1; indices >= G or < -1; an index that breaks the block layout: those rows are zeros, nothing outside
    out is written, valid rows still exact."""
    lhs, rhs, m_indices, ref, _ = make_contiguous([300, 100], 256, 512, seed=7)
    m = m_indices.numel()
    bad = m_indices.clone()
    bad[:] = -1
    g = Guarded(m, 256)
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, g.out3[0], bad)
    torch.cuda.synchronize()
    g.check_guards()
    assert bool((g.out3[0].float() == 0).all()), "all-padding input must give all zeros"

    # Expert 0 owns rows 0-299 (padding to 384), expert 1 rows 384-483 (padding to 512). A block (64 or 128
    # rows) takes its expert from its first row, so the corruptions below either cover whole 128-row segments
    # or sit inside a block.
    bad = m_indices.clone()
    bad[128:256] = 2          # == G: out of range, a whole segment
    bad[270:274] = 1 << 30    # far out of range, inside a block
    bad[400] = -5             # negative but not -1, inside a block
    bad[10] = 1               # expert 1 inside expert 0's block (broken layout)
    g = Guarded(m, 256)
    out = g.out3[0]
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, bad)
    torch.cuda.synchronize()
    g.check_guards()
    zero_rows = torch.zeros(m, dtype=torch.bool, device="cuda")
    zero_rows[128:256] = True
    zero_rows[270:274] = True
    zero_rows[400] = True
    zero_rows[10] = True
    zero_rows |= bad == -1
    assert bool((out[zero_rows].float() == 0).all())
    keep = ~zero_rows
    assert calc_diff(out[keep], ref[keep]) < 1e-5


def test_contiguous_cuda_graph():
    lhs, rhs, m_indices, ref, _ = make_contiguous([256, 130, 0, 500], 1024, 1024, seed=3)
    m = m_indices.numel()
    out = torch.empty((m, 1024), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)  # warm up (compile)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    out.fill_(float("nan"))
    with torch.cuda.graph(graph):
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert calc_diff(out, ref) < 1e-5
    # New expert assignment, same addresses: swap experts 0 and 1's weights by relabelling.
    a8, sa = lhs
    new_idx = m_indices.clone()
    new_idx[m_indices == 0] = 1
    new_idx[m_indices == 1] = 0
    m_indices.copy_(new_idx)
    graph.replay()
    eager = torch.empty_like(out)
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, eager, m_indices)
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), eager.view(torch.int16))


# ---------------------------------------------------------------- masked

def make_masked(num_groups: int, m_max: int, n: int, k: int, seed: int):
    return masked_inputs(num_groups, m_max, n, k, torch.Generator(device="cuda").manual_seed(seed), "cuda")


def check_masked(g: Guarded, masked_m: torch.Tensor, ref, ref_bf16=None, what=""):
    out = g.out3
    num_groups, m_max, _ = out.shape
    g.check_guards()
    rows = torch.arange(m_max, device="cuda").view(1, m_max)
    valid = rows < masked_m.clamp(min=0, max=m_max).view(num_groups, 1).to(rows.dtype)
    written = g.written().all(dim=2)
    untouched = (~g.written()).all(dim=2)
    assert bool(written[valid].all()), f"{what}: rows < masked_m not fully written"
    assert bool(untouched[~valid].all()), f"{what}: rows >= masked_m were written"
    if bool(valid.any()):
        diff = calc_diff(out[valid], ref[valid])
        assert diff < 1e-5, f"{what}: calc_diff vs dequantised FP32 = {diff:.3g}"
        if ref_bf16 is not None:
            diff_bf16 = calc_diff(out[valid], ref_bf16[valid])
            assert diff_bf16 < 1e-3, f"{what}: calc_diff vs BF16 = {diff_bf16:.3g}"


def run_masked(num_groups, m_max, n, k, masked, expected_m, seed):
    torch.backends.cuda.matmul.allow_tf32 = False
    lhs, rhs, ref, ref_bf16 = make_masked(num_groups, m_max, n, k, seed)
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    g = Guarded(m_max, n, lead=num_groups)
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, g.out3, masked_m, expected_m)
    torch.cuda.synchronize()
    check_masked(g, masked_m, ref, ref_bf16, f"G={num_groups} m_max={m_max} n={n} k={k} masked={masked[:8]}")
    first = g.out3.clone()
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, g.out3, masked_m, expected_m)
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), g.out3.view(torch.int16)), "rerun is not bitwise identical"


@pytest.mark.parametrize("n,k", [(4096, 7168), (7168, 2048)])
@pytest.mark.parametrize("num_groups,m", [(1, 1024), (2, 512), (4, 256), (32, 32), (32, 64), (8, 128), (256, 8)])
def test_masked_bench_shapes(num_groups, m, n, k):
    rng = random.Random(num_groups * m + n)
    m_max = 4096 if m >= 256 else max(128, 2 * m)
    masked = [min(m_max, int(m * rng.uniform(0.7, 1.3))) for _ in range(num_groups)]
    run_masked(num_groups, m_max, n, k, masked, m, seed=n + k + m)


@pytest.mark.parametrize("case", range(16))
def test_masked_random(case):
    rng = random.Random(555 + case)
    num_groups = rng.choice([1, 2, 4, 7, 16, 32, 64])
    m_max = rng.choice([1, 8, 64, 100, 128, 256, 600])
    n = rng.choice([8, 64, 136, 512, 2048, 4096])
    k = rng.choice([16, 128, 208, 640, 2048])
    masked = [rng.choice([0, m_max, rng.randint(0, m_max)]) for _ in range(num_groups)]
    run_masked(num_groups, m_max, n, k, masked, rng.choice([0, 1, m_max // 2 + 1, 10 * m_max]), seed=case)


@pytest.mark.parametrize("n,k,masked,expected_m", [
    (2080, 1024, [130, 1, 0, 300, 5], 130),               # odd tile count: the last tile's partner is a phantom
    (3000, 1024, [128, 129, 0, 0, 1, 383, 256], 150),      # pairs across groups and N blocks (19 of them), odd count
    (4096, 7168, [0, 17, 40, 33, 1, 64, 0, 48, 20, 3, 39, 40, 41, 25, 0, 64], 40),  # decode-sized, 64-row tiles
])
def test_masked_b_multicast_pairs_and_phantom(n, k, masked, expected_m):
    """B multicast for masked GEMMs: the pair's two tiles share B only inside one group and N block; an odd tile
    count gives the last CTA of a cluster a phantom tile that stores nothing."""
    from deep_gemm.heuristics import GemmProblem, KernelType, get_config
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = get_config(GemmProblem(expected_m, n, k, sms, "sm_90a", KernelType.M_GROUPED_MASKED, len(masked)))
    assert config.num_multicast == 2 and not config.multicast_on_a, config
    m_max = max(128, (max(masked) + 127) // 128 * 128)
    run_masked(len(masked), m_max, n, k, masked, expected_m, seed=n + k)


def test_masked_zero_full_and_out_of_range_counts():
    """masked_m 0, m_max, > m_max (clamped) and negative (treated as 0)."""
    run_masked(5, 200, 256, 384, [0, 200, 1000, -3, 77], 100, seed=11)


def test_masked_cuda_graph_replay_with_new_masked_m():
    num_groups, m_max, n, k = 6, 256, 1024, 1024
    lhs, rhs, ref, _ = make_masked(num_groups, m_max, n, k, seed=21)
    masked_m = torch.tensor([256, 0, 17, 128, 200, 1], dtype=torch.int32, device="cuda")
    g = Guarded(m_max, n, lead=num_groups)
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, g.out3, masked_m, 100)  # warm up (compile)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, g.out3, masked_m, 100)
    for values in ([256, 0, 17, 128, 200, 1], [0, 256, 255, 1, 64, 129], [0] * 6, [256] * 6):
        masked_m.copy_(torch.tensor(values, dtype=torch.int32))
        g.buf.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        check_masked(g, masked_m, ref, what=f"graph replay masked_m={values}")


def test_masked_expected_m_does_not_change_results():
    lhs, rhs, ref, _ = make_masked(4, 512, 2048, 1024, seed=5)
    masked_m = torch.tensor([500, 3, 0, 260], dtype=torch.int32, device="cuda")
    results = []
    for expected in (0, 1, 64, 300, 512, 100000):
        g = Guarded(512, 2048, lead=4)
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, g.out3, masked_m, expected)
        torch.cuda.synchronize()
        check_masked(g, masked_m, ref, what=f"expected_m={expected}")
        results.append(g.out3.clone())
    valid = torch.arange(512, device="cuda").view(1, 512) < masked_m.view(4, 1)
    for r in results[1:]:
        assert calc_diff(r[valid], results[0][valid]) < 1e-6


def test_masked_k_zero():
    g = Guarded(64, 128, lead=3)
    a = torch.empty((3, 64, 0), device="cuda", dtype=torch.float8_e4m3fn)
    sa = torch.empty((3, 64, 0), device="cuda")
    b = torch.empty((3, 128, 0), device="cuda", dtype=torch.float8_e4m3fn)
    sb = torch.empty((3, 1, 0), device="cuda")
    masked_m = torch.tensor([0, 10, 64], dtype=torch.int32, device="cuda")
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sa), (b, sb), g.out3, masked_m, 10)
    torch.cuda.synchronize()
    ref = torch.zeros((3, 64, 128), device="cuda")
    check_masked(g, masked_m, ref, what="k=0")


def test_device_validation_errors():
    """Errors that need device tensors to be reached (the CPU validation tests cover the rest)."""
    lhs, rhs, _, _ = make_masked(2, 64, 100, 128, seed=1)  # n = 100: not a multiple of 8
    out = torch.empty((2, 64, 100), device="cuda", dtype=torch.bfloat16)
    masked_m = torch.tensor([1, 2], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="n % 8"):
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked_m, 2)
    lhs, rhs, m_indices, _, _ = make_contiguous([10, 20], 256, 256, seed=2)
    out = torch.empty((m_indices.numel(), 256), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="m_indices"):
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices.cpu())
    with pytest.raises(TypeError, match="m_indices"):
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices.long())
    alias = rhs[0].view(torch.bfloat16).reshape(256, 256)  # B's bytes, out's shape
    with pytest.raises(ValueError, match="overlaps"):
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, alias, m_indices)
    # The context is healthy afterwards.
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    torch.cuda.synchronize()


def test_cached_layouts_recheck_pointers():
    """A warmed layout skips the full checks; what depends on the pointers is still checked on every call."""
    lhs, rhs, m_indices, ref, _ = make_contiguous([10, 20], 256, 256, seed=9)
    m = m_indices.numel()
    (a8, sa), (b8, sb) = lhs, rhs
    fn = deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous
    for _ in range(3):  # new output tensors (new pointers) with the warmed layout
        out = torch.full((m, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
        fn(lhs, rhs, out, m_indices)
        torch.cuda.synchronize()
        assert calc_diff(out, ref) < 1e-5
    # The same layout at a misaligned address.
    store = torch.empty(m * 256 + 16, device="cuda", dtype=torch.float8_e4m3fn)
    a_bad = store[1:1 + m * 256].view(m, 256)
    a_bad.copy_(a8)
    with pytest.raises(ValueError, match=r"lhs\[0\] \(A\)'s data pointer must be 16-byte aligned"):
        fn((a_bad, sa), rhs, out, m_indices)
    # The same layout with out aliasing B.
    buf = torch.empty((m, 256), device="cuda", dtype=torch.bfloat16)
    b_alias = buf.view(torch.float8_e4m3fn).view(2, 256, 256)
    b_alias.copy_(b8)
    with pytest.raises(ValueError, match="out overlaps the memory of rhs\\[0\\] \\(B\\)"):
        fn(lhs, (b_alias, sb), buf, m_indices)
    # Masked: new pointers on a warmed layout.
    lhs, rhs, ref, _ = make_masked(3, 64, 256, 256, seed=4)
    masked_m = torch.tensor([64, 0, 33], dtype=torch.int32, device="cuda")
    for _ in range(3):
        g = Guarded(64, 256, lead=3)
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, g.out3, masked_m, 40)
        torch.cuda.synchronize()
        check_masked(g, masked_m, ref, what="warmed masked layout")


def run_forced_contiguous(config, lhs, rhs, m_indices, ref):
    """Two calls of the contiguous GEMM with `config` forced, into poisoned guarded outputs: guard bands intact,
    every row written, padding rows zeros, calc_diff against `ref`, the second call bitwise equal to the first."""
    first = None
    with deep_gemm.testing.forced_config(config):
        for _ in range(2):
            out = call_contiguous_checked(lhs, rhs, m_indices, ref, f"forced {config}")
            if first is not None:
                assert torch.equal(first.view(torch.int16), out.view(torch.int16)), "rerun is not bitwise identical"
            first = out.clone()


@pytest.mark.parametrize("n,k", [(512, 1024), (384, 7168)])
def test_contiguous_b_multicast_pairs_across_experts(n, k):
    """B multicast over pairs of M blocks, forced: pairs inside one expert share B, pairs across two experts or
    with a padding block load B per CTA, padding blocks run the pipeline and are written as zeros."""
    from deep_gemm.heuristics.sm90 import build_sm90_config
    torch.backends.cuda.matmul.allow_tf32 = False
    # Blocks: expert 0 rows 0-299 (3 blocks), expert 2 rows 384-483 (1 block), expert 3 (2 blocks); block 1 all -1.
    (a, sa), (b, sb), m_indices, ref, _ = make_contiguous([300, 0, 100, 200], n, k, seed=n + k)
    m_indices = m_indices.clone()
    m_indices[128:256] = -1
    ref = ref.clone()
    ref[128:256] = 0
    m = m_indices.numel()
    assert m % 256 == 0, "the pairs must tile M"
    sms = deep_gemm.get_num_sms()
    config = build_sm90_config(m, n, k, 128, 128, sms, 2, False)
    assert config.num_multicast == 2 and not config.multicast_on_a
    run_forced_contiguous(config, (a, deep_gemm.get_col_major_tma_aligned_tensor(sa)), (b, sb), m_indices, ref)


@pytest.mark.parametrize("n,k", [(512, 1024), (384, 7168)])
@pytest.mark.parametrize("rows", [640, 600])
def test_contiguous_b_multicast_odd_m_blocks(n, k, rows):
    """B multicast with an odd M block count (the heuristic's choice, as DeepGEMM's): the last block's partner CTA
    runs a phantom block past the last row (a skip tile: zeros, clipped by the TMA store), so nothing is written
    outside `out`. rows = 600: the last real block is partial too."""
    from deep_gemm.heuristics.sm90 import build_sm90_config
    torch.backends.cuda.matmul.allow_tf32 = False
    # Blocks: expert 0 rows 0-299 (3 blocks), expert 1 rows 384-483, expert 2 rows 512-581: 5 blocks of 128.
    (a, sa), (b, sb), m_indices, ref, _ = make_contiguous([300, 100, 70], n, k, seed=n + k + rows)
    a, sa, m_indices, ref = a[:rows], sa[:rows], m_indices[:rows].clone(), ref[:rows]
    assert -(-rows // 128) % 2 == 1, "the M block count must be odd"
    sms = deep_gemm.get_num_sms()
    config = build_sm90_config(rows, n, k, 128, 128, sms, 2, False)
    assert config.num_multicast == 2 and not config.multicast_on_a
    run_forced_contiguous(config, (a, deep_gemm.get_col_major_tma_aligned_tensor(sa.contiguous())), (b, sb),
                          m_indices, ref)
