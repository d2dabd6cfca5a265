"""One entry per public GEMM, shared by the robustness tests (random sweep, CUDA graphs, determinism, devices,
torch.compile): how to draw a random problem, how to build its inputs with a guarded output, and how to check the
result. A new public GEMM joins every one of those tests by adding a `GemmSpec` line to `SPECS`.

Outputs live inside poisoned buffers (int pattern -1 = NaN in BF16 and FP32) with guard rows and columns on every
side; a check fails when the kernel wrote outside `out`, left a required element unwritten, or wrote an element it
must not touch (masked rows, empty groups). Values are compared with the dequantised FP32 reference
(calc_diff < 1e-5) and with the BF16 product (calc_diff < 1e-3, where the output has at least `BF16_MIN_ELEMENTS`
elements: the BF16 check is a statistic over the FP8 rounding errors and means nothing for a handful of values).

Memory: the suite must fit an 80 GB card next to the largest problems' inputs and outputs (masked G=256 x 4096 x
7168 holds 7 GiB of FP8 B; the sweep's largest outputs have ~2e9 elements). So no helper materialises a full-size
FP32/FP64 copy of a large operand or output: B is drawn, quantised and dequantised one group at a time (the
references are built group by group), and checks walk the output in row blocks (`_row_blocks`, `DiffAccumulator`).
"""
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

import deep_gemm
from deep_gemm.testing import DiffAccumulator, calc_diff, dequant_per_block, dequant_per_token
from deep_gemm.utils import math as dg_math

FP8 = torch.float8_e4m3fn
BF16_MIN_ELEMENTS = 1024
GUARD = 8


def _primes(limit: int) -> List[int]:
    sieve = bytearray([1]) * (limit + 1)
    sieve[0:2] = b"\0\0"
    for i in range(2, int(limit ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(sieve[i * i::i]))
    return [i for i, v in enumerate(sieve) if v]


PRIMES = _primes(16384)


def draw_rows(rng: random.Random, hi: int) -> int:
    """A row count in [1, hi]: primes, tiny counts, powers of two +-1 and log-uniform values."""
    kind = rng.random()
    if kind < 0.25:
        return rng.choice([p for p in PRIMES if p <= hi] or [1])
    if kind < 0.35:
        return rng.randint(1, min(hi, 16))
    if kind < 0.5:
        p = 1 << rng.randint(0, max(0, hi.bit_length() - 1))
        return max(1, min(hi, p + rng.choice([-1, 0, 1])))
    return max(1, min(hi, int(round(2 ** rng.uniform(0, hi.bit_length())))))


# ---------------------------------------------------------------- guarded outputs

class Guarded:
    """`out` of `shape` ([rows, n] or [lead, rows, n]) inside a poisoned buffer with guard rows and columns."""

    def __init__(self, shape: Tuple[int, ...], dtype: torch.dtype, device, guard: int = GUARD):
        lead, rows, n = (1, *shape) if len(shape) == 2 else shape
        int_dtype = {1: torch.int8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
        per16 = 16 // dtype.itemsize
        stride = (n + 2 * guard + per16 - 1) // per16 * per16
        self.buf = torch.full((lead * rows + 2, stride), -1, dtype=int_dtype, device=device)
        self.inner = torch.zeros(self.buf.shape, dtype=torch.bool, device=device)
        self.inner[1:lead * rows + 1, guard:guard + n] = True
        view = self.buf.view(dtype)[1:lead * rows + 1, guard:guard + n]
        self.out = view if len(shape) == 2 else view.view(lead, rows, n)
        self.initial: Optional[torch.Tensor] = None

    def set_initial(self, values: torch.Tensor) -> None:
        self.out.copy_(values)
        self.initial = values.clone()

    def reset(self) -> None:
        """Back to the state before the first call: poison, or the accumulation input."""
        if self.initial is None:
            self.out.view(self.buf.dtype).fill_(-1)
        else:
            self.out.copy_(self.initial)

    def untouched(self) -> torch.Tensor:
        """Elementwise: still holding the poison pattern."""
        return self.out.view(self.buf.dtype) == -1

    def check_guards(self) -> None:
        assert bool((self.buf[~self.inner] == -1).all()), "kernel wrote outside `out` (guard band changed)"

    def bits(self) -> torch.Tensor:
        return self.out.view(self.buf.dtype).clone()


# Elements per block when a check walks an output: a few FP32 temporaries of this size (256 MiB each).
CHECK_BLOCK_ELEMENTS = 1 << 26


def _row_blocks(*tensors: Optional[torch.Tensor]) -> Iterator[Tuple[Optional[torch.Tensor], ...]]:
    """Aligned blocks of whole rows (the last dimension is a row) of same-shaped tensors, about
    `CHECK_BLOCK_ELEMENTS` elements each (None stays None); views wherever the leading dimensions merge."""
    first = tensors[0]
    if first.numel() == 0:
        return
    cols = first.shape[-1] if first.dim() >= 2 else 1
    flat = [None if t is None else t.reshape(-1, cols) for t in tensors]
    step = max(1, CHECK_BLOCK_ELEMENTS // cols)
    for start in range(0, flat[0].shape[0], step):
        yield tuple(None if f is None else f[start:start + step] for f in flat)


def _assert_close(pieces: Iterable[Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]],
                  what: str) -> Tuple[float, float]:
    """Check the result against its references, given as aligned (out, ref, ref_bf16 or None) pieces whose
    concatenation is the whole comparison (one calc_diff over all of them, so a masked selection is checked without
    copying it). Returns (max |out - ref|, max |ref|) for elementwise checks."""
    exact, bf16 = DiffAccumulator(), DiffAccumulator()
    elements, ref_nonzero, out_nonzero, has_bf16 = 0, False, False, False
    max_err, max_ref = 0.0, 0.0
    for piece in pieces:
        for out, ref, ref_bf16 in _row_blocks(*piece):
            out = out.float()
            assert bool(torch.isfinite(out).all()), f"{what}: NaN/Inf in the result (unwritten or overflowed)"
            elements += out.numel()
            ref_nonzero = ref_nonzero or bool((ref != 0).any())
            out_nonzero = out_nonzero or bool((out != 0).any())
            max_err = max(max_err, float((out - ref).abs().max()))
            max_ref = max(max_ref, float(ref.abs().max()))
            exact.add(out, ref)
            if ref_bf16 is not None:
                has_bf16 = True
                bf16.add(out, ref_bf16)
    if elements == 0:
        return max_err, max_ref
    if not ref_nonzero:
        assert not out_nonzero, f"{what}: reference is all zeros but the result is not"
        return max_err, max_ref
    diff = exact.value()
    assert diff < 1e-5, f"{what}: calc_diff vs dequantised FP32 = {diff:.3g}"
    if has_bf16 and elements >= BF16_MIN_ELEMENTS:
        diff = bf16.value()
        assert diff < 1e-3, f"{what}: calc_diff vs BF16 = {diff:.3g}"
    return max_err, max_ref


# ---------------------------------------------------------------- cases

@dataclass
class Case:
    """One ready-to-run call of a public GEMM: `args` (out included), the guarded output and the checker."""
    fn_name: str
    desc: str
    args: tuple
    guarded: Guarded
    checker: Callable[["Case"], None]
    # "ref": the FP32 reference (masked: "counts", rows per group); "inputs": the indices of the operand arguments
    # when they are not args[0] and args[1].
    extra: Dict = field(default_factory=dict)

    @property
    def fn(self):
        return getattr(deep_gemm, self.fn_name)

    @property
    def out(self) -> torch.Tensor:
        return self.guarded.out

    def run(self) -> None:
        self.fn(*self.args)

    def reset(self) -> None:
        """Back to the output's state before the first call."""
        self.guarded.reset()

    def check(self) -> None:
        """Synchronise, then check guards and values (after exactly one call since `reset`)."""
        torch.cuda.synchronize(self.out.device)
        self.guarded.check_guards()
        self.checker(self)


def _gen(device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def padded_rows(x: torch.Tensor, row_align_bytes: int = 16) -> torch.Tensor:
    """`x` [r, c] copied into storage whose row stride is a multiple of 16 bytes (a view; TMA needs it)."""
    r, c = x.shape
    per = row_align_bytes // x.element_size()
    stride = (c + per - 1) // per * per
    if stride == c:
        return x
    store = torch.zeros((r, stride), dtype=x.dtype, device=x.device)
    store[:, :c] = x
    return store[:, :c]


def quant_rows(rows: int, k: int, gen, device):
    """(e4m3 [rows, k], 1x128 scales, dequantised FP32, BF16 original)."""
    x = torch.randn((rows, k), device=device, generator=gen).to(torch.bfloat16)
    x8, s = deep_gemm.per_token_cast_to_fp8(x)
    return x8, s, dequant_per_token(x8, s), x


def quant_blocks_each(groups: int, n: int, k: int, gen, device,
                      each: Callable[[int, torch.Tensor, torch.Tensor], None]):
    """B [G, n, k] e4m3 with 128x128 scales [G, ceil(n/128), ceil(k/128)], drawn and quantised one group at a time;
    `each(g, dequantised FP32 [n, k], BF16 original [n, k])` sees every group's reference operands, which are never
    held for all groups at once (at G=256, n=4096, k=7168 they would be 28 GiB each)."""
    b8 = torch.empty((groups, n, k), device=device, dtype=FP8)
    sb = torch.empty((groups, (n + 127) // 128, (k + 127) // 128), device=device)
    for g in range(groups):
        b = torch.randn((n, k), device=device, generator=gen).to(torch.bfloat16)
        b8[g], sb[g] = deep_gemm.per_block_cast_to_fp8(b)
        each(g, dequant_per_block(b8[g], sb[g]), b)
    return b8, sb


def quant_blocks(groups: int, n: int, k: int, gen, device):
    """B [G, n, k] e4m3 with 128x128 scales, dequantised FP32 [G, n, k], BF16 original (same draws as
    `quant_blocks_each`; for small problems: it holds every group's FP32 copy)."""
    deq = torch.empty((groups, n, k), device=device)
    b = torch.empty((groups, n, k), device=device, dtype=torch.bfloat16)

    def keep(g: int, deq_g: torch.Tensor, b_g: torch.Tensor) -> None:
        deq[g], b[g] = deq_g, b_g

    b8, sb = quant_blocks_each(groups, n, k, gen, device, keep)
    return b8, sb, deq, b


# ---- gemm_fp8_fp8_bf16_nt

DENSE_N = [1, 7, 24, 129, 576, 2112, 4100, 7168]
DENSE_K = [16, 100, 200, 576, 2048, 7168]
MAX_MACS = 1 << 35    # per problem: keeps the sweep's references quick
MAX_ELEMENTS = 1 << 28  # rows x k of an operand: keeps its FP32 dequantised copy around 1 GB


def _cap_rows(rows: int, per_row: int, k: int) -> int:
    return max(1, min(rows, MAX_MACS // max(1, per_row), MAX_ELEMENTS // max(1, k)))


def sample_dense(rng: random.Random) -> dict:
    n, k = rng.choice(DENSE_N), rng.choice(DENSE_K)
    return dict(m=_cap_rows(draw_rows(rng, 16384), n * k, k), n=n, k=k)


def dense_operands(m: int, n: int, k: int, device, seed: int):
    """A (per-token) and B (per-block) of a dense FP8 GEMM: ((A, SA), (B, SB)) with 16-byte row strides, the
    dequantised FP32 reference and the BF16 one."""
    gen = _gen(device, seed)
    a8, sa, a_deq, a = quant_rows(m, k, gen, device)
    b = torch.randn((n, k), device=device, generator=gen).to(torch.bfloat16)
    b8, sb = deep_gemm.per_block_cast_to_fp8(b)
    ref = a_deq @ dequant_per_block(b8, sb).t()
    return (padded_rows(a8), sa), (padded_rows(b8), sb), ref, a.float() @ b.float().t()


def build_dense(p: dict, device, seed: int) -> Case:
    m, n, k = p["m"], p["n"], p["k"]
    lhs, rhs, ref, ref_bf16 = dense_operands(m, n, k, device, seed)
    g = Guarded((m, n), torch.bfloat16, device)

    def checker(case: Case) -> None:
        _assert_close([(case.out, ref, ref_bf16)], case.desc)

    return Case("gemm_fp8_fp8_bf16_nt", f"dense m={m} n={n} k={k}", (lhs, rhs, g.out), g, checker, dict(ref=ref))


# ---- m_grouped_gemm_fp8_fp8_bf16_nt_contiguous

GROUPED_N = [7, 24, 256, 2112, 4096, 7168]
GROUPED_K = [16, 128, 576, 2048, 7168]


def sample_contiguous(rng: random.Random) -> dict:
    n, k = rng.choice(GROUPED_N), rng.choice(GROUPED_K)
    groups = rng.choice([1, 2, 3, 4, 8, 16, 32, 64]) if rng.random() < 0.9 else rng.randint(1, 128)
    budget = max(1, min(16384, MAX_MACS // (n * k), MAX_ELEMENTS // k))
    sizes = [0 if rng.random() < 0.1 else draw_rows(rng, max(1, 2 * budget // groups)) for _ in range(groups)]
    return dict(sizes=sizes, n=n, k=k)


def contiguous_inputs(sizes, n: int, k: int, gen, device, align: Optional[int] = None):
    """Experts' rows stacked, each segment padded to `align` (default: the library's) with index -1. Returns
    (lhs, rhs, m_indices, FP32 reference, BF16 reference), padding rows 0 in both."""
    align = align or deep_gemm.get_m_alignment_for_contiguous_layout()
    groups = len(sizes)
    padded = [(s + align - 1) // align * align for s in sizes]
    m = sum(padded)
    idx = torch.full((m,), -1, dtype=torch.int32)
    start = 0
    for e, (s, pad) in enumerate(zip(sizes, padded)):
        idx[start:start + s] = e
        start += pad
    m_indices = idx.to(device)
    a8, sa, a_deq, a = quant_rows(m, k, gen, device)
    ref = torch.zeros((m, n), device=device)
    ref_bf16 = torch.zeros((m, n), device=device)
    starts = [sum(padded[:e]) for e in range(groups)]

    def expert(e: int, b_deq: torch.Tensor, b: torch.Tensor) -> None:
        rows = slice(starts[e], starts[e] + sizes[e])  # the expert's rows are one run, then its padding
        if sizes[e]:
            ref[rows] = a_deq[rows] @ b_deq.t()
            ref_bf16[rows] = a[rows].float() @ b.float().t()

    b8, sb = quant_blocks_each(groups, n, k, gen, device, expert)
    return (a8, sa), (b8, sb), m_indices, ref, ref_bf16


def build_contiguous(p: dict, device, seed: int) -> Case:
    sizes, n, k = p["sizes"], p["n"], p["k"]
    lhs, rhs, m_indices, ref, ref_bf16 = contiguous_inputs(sizes, n, k, _gen(device, seed), device)
    m = m_indices.numel()
    valid_rows = m_indices >= 0
    g = Guarded((m, n), torch.bfloat16, device)

    def checker(case: Case) -> None:
        assert not bool(case.guarded.untouched().any()), f"{case.desc}: rows left unwritten"
        assert bool((case.out[~valid_rows] == 0).all()), f"{case.desc}: padding rows not zero"
        _assert_close([(case.out, ref, ref_bf16)], case.desc)

    return Case("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", f"contiguous sizes={sizes} n={n} k={k}",
                (lhs, rhs, g.out, m_indices), g, checker, dict(ref=ref))


# ---- m_grouped_gemm_fp8_fp8_bf16_nt_masked

MASKED_N = [8, 24, 256, 2112, 4096, 7168]


def sample_masked(rng: random.Random) -> dict:
    n, k = rng.choice(MASKED_N), rng.choice(GROUPED_K)
    groups = rng.choice([1, 2, 4, 8, 16, 32]) if rng.random() < 0.9 else rng.randint(1, 64)
    budget = max(1, min(8192, MAX_MACS // (n * k * groups), MAX_ELEMENTS // (k * groups)))
    m_max = draw_rows(rng, budget)
    masked = []
    for _ in range(groups):
        r = rng.random()
        masked.append(0 if r < 0.1 else m_max if r < 0.25 else m_max + rng.randint(1, 100) if r < 0.3
                      else rng.randint(0, m_max))
    expected_m = max(0, int(sum(min(v, m_max) for v in masked) / groups * rng.uniform(0.5, 2.0)))
    return dict(groups=groups, m_max=m_max, n=n, k=k, masked=masked, expected_m=expected_m)


class BatchedRefs:
    """FP32 and BF16 references [G, rows, n] of a batched A [G, rows, k] times each group's B^T, filled group by
    group from `quant_blocks_each` (so the groups' FP32 B never coexist)."""

    def __init__(self, a_deq: torch.Tensor, a_bf16: torch.Tensor, n: int):
        groups, rows, _ = a_deq.shape
        self.a_deq, self.a_bf16 = a_deq, a_bf16
        self.ref = torch.empty((groups, rows, n), device=a_deq.device)
        self.ref_bf16 = torch.empty((groups, rows, n), device=a_deq.device)

    def fill(self, g: int, b_deq: torch.Tensor, b: torch.Tensor) -> None:
        torch.matmul(self.a_deq[g], b_deq.t(), out=self.ref[g])
        torch.matmul(self.a_bf16[g].float(), b.float().t(), out=self.ref_bf16[g])


def masked_inputs(groups: int, m_max: int, n: int, k: int, gen, device):
    """(lhs [G, m_max, k], rhs, FP32 reference [G, m_max, n], BF16 reference) for every row (masking is the
    caller's)."""
    a8, sa, a_deq, a = quant_rows(groups * m_max, k, gen, device)
    refs = BatchedRefs(a_deq.view(groups, m_max, k), a.view(groups, m_max, k), n)
    b8, sb = quant_blocks_each(groups, n, k, gen, device, refs.fill)
    lhs = (a8.view(groups, m_max, k), sa.view(groups, m_max, -1))
    return lhs, (b8, sb), refs.ref, refs.ref_bf16


def build_masked(p: dict, device, seed: int) -> Case:
    groups, m_max, n, k = p["groups"], p["m_max"], p["n"], p["k"]
    lhs, rhs, ref, ref_bf16 = masked_inputs(groups, m_max, n, k, _gen(device, seed), device)
    masked_m = torch.tensor(p["masked"], dtype=torch.int32, device=device)
    counts = [min(max(c, 0), m_max) for c in p["masked"]]
    g = Guarded((groups, m_max, n), torch.bfloat16, device)

    def checker(case: Case) -> None:
        # Group by group: a [G, m_max, n] mask of the output would be as large as the output.
        untouched = case.guarded.untouched()
        for e, c in enumerate(counts):
            assert not bool(untouched[e, :c].any()), f"{case.desc}: rows < masked_m left unwritten"
            assert bool(untouched[e, c:].all()), f"{case.desc}: rows >= masked_m were written"
        _assert_close(((case.out[e, :c], ref[e, :c], ref_bf16[e, :c]) for e, c in enumerate(counts) if c),
                      case.desc)

    return Case("m_grouped_gemm_fp8_fp8_bf16_nt_masked",
                f"masked G={groups} m_max={m_max} n={n} k={k} masked_m={p['masked'][:8]} expected_m={p['expected_m']}",
                (lhs, rhs, g.out, masked_m, p["expected_m"]), g, checker, dict(ref=ref, counts=counts))


# ---- m_grouped_fp8_gemm_nt_contiguous(..., use_psum_layout=True): not a SPECS entry (a v2 name with keyword
# arguments, not a torch custom op), built for tools/gpu_check.py's sanitizer driver

def build_psum(p: dict, device, seed: int) -> Case:
    """Experts' rows in the psum layout: expert g's rows are [align(ends[g - 1]), ends[g]); rows outside every
    expert must stay untouched. p: sizes, n (a multiple of 8), k, expected_m (0: none given)."""
    sizes, n, k = p["sizes"], p["n"], p["k"]
    align = deep_gemm.get_mk_alignment_for_contiguous_layout()
    ends, start = [], 0
    for s in sizes:
        ends.append(start + s)
        start = (start + s + align - 1) // align * align
    m = max(start, 1)
    gen = _gen(device, seed)
    a8, sa, a_deq, a = quant_rows(m, k, gen, device)
    b8, sb, b_deq, b = quant_blocks(len(sizes), n, k, gen, device)
    valid = torch.zeros(m, dtype=torch.bool, device=device)
    ref = torch.zeros((m, n), device=device)
    ref_bf16 = torch.zeros((m, n), device=device)
    for g, end in enumerate(ends):
        first = 0 if g == 0 else (ends[g - 1] + align - 1) // align * align
        valid[first:end] = True
        ref[first:end] = a_deq[first:end] @ b_deq[g].t()
        ref_bf16[first:end] = a[first:end].float() @ b[g].float().t()
    layout = torch.tensor(ends, dtype=torch.int32, device=device)
    g = Guarded((m, n), torch.bfloat16, device)

    def checker(case: Case) -> None:
        untouched = case.guarded.untouched()
        assert not bool(untouched[valid].any()), f"{case.desc}: experts' rows left unwritten"
        assert bool(untouched[~valid].all()), f"{case.desc}: rows outside every expert were written"
        if bool(valid.any()):
            _assert_close(case.out[valid], ref[valid], ref_bf16[valid], case.desc)

    expected = p.get("expected_m") or None
    # Positional: (a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
    # use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout).
    args = ((a8, sa), (b8, sb), g.out, layout, None, None, None, "nk", False, True, True, expected)
    return Case("m_grouped_fp8_gemm_nt_contiguous", f"psum sizes={sizes} n={n} k={k} expected_m={expected}", args, g,
                checker)


# ---- wgrad_gemm_fp8_fp8_fp32_nt

WGRAD_N = [1, 7, 100, 512, 2112, 4100, 7168]
SCALE_FORMS = ("rows", "transposed", "col_major")


def _scale_form(s: torch.Tensor, form: str) -> torch.Tensor:
    if form == "transposed":
        return s.t().contiguous()
    if form == "col_major":
        return deep_gemm.get_col_major_tma_aligned_tensor(s)
    return s


def sample_wgrad(rng: random.Random) -> dict:
    n = rng.choice(WGRAD_N)
    k = rng.randint(1, 512) * 16 if rng.random() < 0.85 else rng.randint(1, 4000)
    return dict(m=_cap_rows(draw_rows(rng, 16384), n * k, k), n=n, k=k, sa_form=rng.choice(SCALE_FORMS),
                sb_form=rng.choice(SCALE_FORMS))


# NOTES: the rounding an FP32-accumulating kernel adds scales with sum_i |a_i b_i|, not with the result, which can be
# far smaller when the sum cancels: an H100 sweep measured 3.8e-6 of it (wgrad 1 x 1 x 5872: 1.5e-2 off a result of
# -4.98 whose terms summed to 3860 in magnitude, the FP32 reference within 1e-5). 2^-16 leaves 4x; a missing or doubled
# tile is still off by a whole element of the product.
ACCUMULATION_EPS = 2.0 ** -16


def sum_bound(a_deq: torch.Tensor, b_deq: torch.Tensor) -> float:
    """An upper bound of sum_i |a_i b_i| over every element of a_deq @ b_deq^T (Cauchy-Schwarz: the largest row norms'
    product)."""
    if not a_deq.numel() or not b_deq.numel():
        return 0.0
    return float(a_deq.norm(dim=1).max()) * float(b_deq.norm(dim=1).max())


def _check_accumulated(case: Case, ref: torch.Tensor, ref_bf16: torch.Tensor, skip: Optional[List[bool]] = None,
                       bound: float = 0.0):
    """An FP32 accumulating GEMM: out - initial against the references, block by block (out, initial and the
    references of the largest problems are each billions of elements). `skip[g]`: group g must be untouched; `bound`:
    `sum_bound` of the operands (the largest over groups)."""
    out, initial = case.out, case.guarded.initial
    if skip is not None:
        for e, untouched in enumerate(skip):
            if untouched:
                assert torch.equal(out[e], initial[e]), f"{case.desc}: an empty group was written"

    def added() -> Iterator[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for o, i, r, rb in _row_blocks(out, initial, ref, ref_bf16):
            assert bool(torch.isfinite(o).all()), f"{case.desc}: NaN/Inf in the result"
            yield o - i, r, rb

    max_err, max_ref = _assert_close(added(), case.desc)
    # Every element got exactly one contribution (a missing or doubled tile fails here even when calc_diff is small).
    tol = 1e-3 * max_ref + ACCUMULATION_EPS * bound + 1e-6
    assert max_err <= tol, f"{case.desc}: elementwise error above {tol:.3g}"


def build_wgrad(p: dict, device, seed: int) -> Case:
    m, n, k = p["m"], p["n"], p["k"]
    gen = _gen(device, seed)
    a8, sa, a_deq, a = quant_rows(m, k, gen, device)
    b8, sb, b_deq, b = quant_rows(n, k, gen, device)
    ref = a_deq @ b_deq.t()
    ref_bf16 = a.float() @ b.float().t()
    g = Guarded((m, n), torch.float32, device)
    g.set_initial(torch.randn((m, n), device=device, generator=gen))

    bound = sum_bound(a_deq, b_deq)

    def checker(case: Case) -> None:
        _check_accumulated(case, ref, ref_bf16, bound=bound)

    lhs = (padded_rows(a8), _scale_form(sa, p["sa_form"]))
    rhs = (padded_rows(b8), _scale_form(sb, p["sb_form"]))
    return Case("wgrad_gemm_fp8_fp8_fp32_nt", f"wgrad m={m} n={n} k={k} SA {p['sa_form']} SB {p['sb_form']}",
                (lhs, rhs, g.out), g, checker, dict(ref=ref))


# ---- k_grouped_wgrad_gemm_fp8_fp8_fp32_nt

def sample_k_grouped(rng: random.Random) -> dict:
    n = rng.choice(WGRAD_N)
    groups = rng.choice([1, 2, 4, 8, 16]) if rng.random() < 0.9 else rng.randint(1, 130)
    ks = [0 if rng.random() < 0.1 else rng.randint(1, 256) * 16 for _ in range(groups)]
    rows = draw_rows(rng, 4096)
    return dict(m=_cap_rows(rows, n * max(1, sum(ks)), max(1, sum(ks))), n=n, ks=ks)


def k_grouped_inputs(m: int, n: int, ks, gen, device, bounds: Optional[List[float]] = None):
    """Flat A / B, stacked transposed scales, the FP32 reference [G, m, n] and the BF16 one (zeros for k_g = 0);
    `bounds` (a list) receives each non-empty group's `sum_bound`."""
    a_parts, b_parts, sa_parts, sb_parts = [], [], [], []
    # Written in place: stacking a list of per-group references would hold them twice.
    refs = torch.zeros((len(ks), m, n), device=device)
    refs_bf16 = torch.zeros((len(ks), m, n), device=device)
    for e, k in enumerate(ks):
        if k == 0:
            continue
        a8, sa, a_deq, a = quant_rows(m, k, gen, device)
        b8, sb, b_deq, b = quant_rows(n, k, gen, device)
        a_parts.append(a8.view(-1))
        b_parts.append(b8.view(-1))
        sa_parts.append(sa.t())
        sb_parts.append(sb.t())
        torch.matmul(a_deq, b_deq.t(), out=refs[e])
        if bounds is not None:
            bounds.append(sum_bound(a_deq, b_deq))
        torch.matmul(a.float(), b.float().t(), out=refs_bf16[e])
    empty8 = torch.empty(0, device=device, dtype=FP8)
    a_flat = torch.cat(a_parts) if a_parts else empty8
    b_flat = torch.cat(b_parts) if b_parts else empty8
    sa_t = torch.cat(sa_parts).contiguous() if sa_parts else torch.empty((0, m), device=device)
    sb_t = torch.cat(sb_parts).contiguous() if sb_parts else torch.empty((0, n), device=device)
    return (a_flat, sa_t), (b_flat, sb_t), refs, refs_bf16


def build_k_grouped(p: dict, device, seed: int) -> Case:
    m, n, ks = p["m"], p["n"], p["ks"]
    gen = _gen(device, seed)
    bounds = []
    lhs, rhs, ref, ref_bf16 = k_grouped_inputs(m, n, ks, gen, device, bounds)
    empty = [k == 0 for k in ks]
    g = Guarded((len(ks), m, n), torch.float32, device)
    g.set_initial(torch.randn((len(ks), m, n), device=device, generator=gen))

    def checker(case: Case) -> None:
        _check_accumulated(case, ref, ref_bf16, skip=empty, bound=max(bounds, default=0.0))

    return Case("k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", f"k_grouped m={m} n={n} ks={ks}",
                (lhs, rhs, g.out, list(ks)), g, checker, dict(ref=ref))


# ---- bmm_fp8_fp8_bf16_nt

BMM_N = [8, 128, 512, 1000, 4096]
# How the per-token scales reach the kernel (it reads any strides): as produced (row-major [B, m, kb]), MN-major
# storage ([B, kb, m] transposed), or a slice of a wider tensor.
BMM_SCALE_FORMS = ("rows", "mn_major", "sliced")


def sample_bmm(rng: random.Random) -> dict:
    n, k = rng.choice(BMM_N), rng.choice(GROUPED_K + [512])
    batches = rng.choice([1, 2, 16, 128]) if rng.random() < 0.8 else rng.randint(1, 200)
    budget = max(1, min(4096, MAX_MACS // (n * k * batches), MAX_ELEMENTS // (k * batches)))
    return dict(batches=batches, m=draw_rows(rng, budget), n=n, k=k, sa_form=rng.choice(BMM_SCALE_FORMS))


def bmm_scales(sa: torch.Tensor, form: str) -> torch.Tensor:
    """[B, m, kb] scales with the same values in the storage `form` names (BMM_SCALE_FORMS)."""
    if form == "mn_major":
        return sa.transpose(1, 2).contiguous().transpose(1, 2)
    if form == "sliced":
        wide = torch.zeros((*sa.shape[:2], sa.shape[2] + 3), dtype=sa.dtype, device=sa.device)
        wide[:, :, :sa.shape[2]] = sa
        return wide[:, :, :sa.shape[2]]
    return sa


def bmm_inputs(batches: int, m: int, n: int, k: int, gen, device, sa_form: str = "rows"):
    """(lhs (x [B, m, k], xs [B, m, kb] in `sa_form`), rhs (y [B, n, k], ys), FP32 reference [B, m, n], BF16
    reference)."""
    a8, sa, a_deq, a = quant_rows(batches * m, k, gen, device)
    refs = BatchedRefs(a_deq.view(batches, m, k), a.view(batches, m, k), n)
    b8, sb = quant_blocks_each(batches, n, k, gen, device, refs.fill)
    lhs = (a8.view(batches, m, k), bmm_scales(sa.view(batches, m, -1), sa_form))
    return lhs, (b8, sb), refs.ref, refs.ref_bf16


def build_bmm(p: dict, device, seed: int) -> Case:
    batches, m, n, k = p["batches"], p["m"], p["n"], p["k"]
    lhs, rhs, ref, ref_bf16 = bmm_inputs(batches, m, n, k, _gen(device, seed), device, p.get("sa_form", "rows"))
    g = Guarded((batches, m, n), torch.bfloat16, device)

    def checker(case: Case) -> None:
        assert not bool(case.guarded.untouched().any()), f"{case.desc}: elements left unwritten"
        for b in range(batches):  # every batch on its own: a batch mapped to another's rows must not hide
            _assert_close([(case.out[b], ref[b], ref_bf16[b])], f"{case.desc} batch {b}")

    return Case("bmm_fp8_fp8_bf16_nt", f"bmm B={batches} m={m} n={n} k={k} xs={p.get('sa_form', 'rows')}",
                (lhs, rhs, g.out), g, checker, dict(ref=ref))


# ---- the scale-layout transforms (UE8M0 packing): not GEMMs, built for tools/gpu_check.py's sanitizer driver

def packed_ue8m0_reference(sf: torch.Tensor) -> torch.Tensor:
    """Independent reference of the UE8M0 packing: [.., mn, k'] float32 -> [.., mn, ceil(k'/4)] int32 values."""
    exponents = ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.int64)
    pad = (-sf.shape[-1]) % 4
    exponents = torch.nn.functional.pad(exponents, (0, pad))
    e = exponents.view(*exponents.shape[:-1], -1, 4)
    word = e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)
    return torch.where(word >= 1 << 31, word - (1 << 32), word).to(torch.int32)


@dataclass
class PackCase:
    """One call of a packing transform (it allocates its output): `run` packs, `check` compares with the reference."""
    desc: str
    call: Callable[[], torch.Tensor]
    expected: torch.Tensor
    result: Optional[torch.Tensor] = None

    def reset(self) -> None:
        self.result = None

    def run(self) -> None:
        self.result = self.call()

    def check(self) -> None:
        torch.cuda.synchronize(self.expected.device)
        assert self.result is not None and torch.equal(self.result, self.expected), f"{self.desc}: wrong packing"


def build_pack(p: dict, device, seed: int) -> PackCase:
    """get_mn_major_tma_aligned_packed_ue8m0_tensor of power-of-two scales; p: shape, transposed."""
    shape = tuple(p["shape"])
    sf = deep_gemm.utils.ceil_to_ue8m0(torch.rand(shape, device=device, generator=_gen(device, seed)) + 1e-3)
    if p["transposed"]:
        sf = sf.mT.contiguous().mT
    return PackCase(f"pack sf {shape} transposed={p['transposed']}",
                    lambda: deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf), packed_ue8m0_reference(sf))


def build_pack_k_grouped(p: dict, device, seed: int) -> PackCase:
    """get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor; p: ks, gran_k, mn."""
    ks, gran_k, mn = p["ks"], p["gran_k"], p["mn"]
    rows = sum((k + gran_k - 1) // gran_k for k in ks)
    sf = deep_gemm.utils.ceil_to_ue8m0(torch.rand((rows, mn), device=device, generator=_gen(device, seed)) + 1e-3)
    layout = torch.tensor(ks, dtype=torch.int32, device=device)
    parts, start = [], 0
    for k in ks:
        kb = (k + gran_k - 1) // gran_k
        parts.append(packed_ue8m0_reference(sf[start:start + kb].T).T)
        start += kb
    return PackCase(f"pack k-grouped ks={ks[:8]} gran_k={gran_k} mn={mn}",
                    lambda: deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, ks, gran_k,
                                                                                            32),
                    torch.cat(parts))


# ---- the FP8 casts (deep_gemm.utils.per_*_cast_to_fp8): not GEMMs; one kernel each on sm_90a, bitwise equal to
# their torch definitions run on the same GPU. Built for tools/gpu_check.py's sanitizer driver and
# tests/gpu/test_cast_gpu.py.

CAST_KINDS = ("per_token", "per_block", "per_channel")


def cast_input(rows: int, cols: int, dtype: torch.dtype, device, seed: int, special: bool = True) -> torch.Tensor:
    """x [rows, cols] whose values span 2^-60..2^60 (random scales per row and per column, so that small values meet
    large scales), with, when `special`, a zero row, a zero column, a row of subnormals, a huge value (1e30), and
    inf / -inf / NaN / -NaN in a few places."""
    gen = _gen(device, seed)
    x = torch.randn((rows, cols), device=device, generator=gen)
    row_exp = torch.randint(-40, 40, (rows, 1), device=device, generator=gen).float()
    col_exp = torch.randint(-20, 20, (1, cols), device=device, generator=gen).float()
    x = (x * torch.exp2(row_exp + col_exp)).to(dtype)
    if special and rows > 2 and cols > 2:
        x[1] = 0
        x[:, 1] = 0
        x[2] = (torch.randn((cols,), device=device, generator=gen) * 2.0 ** -130).to(dtype)
        x[rows // 2, cols // 2] = 1e30
        x[rows - 1, cols - 1] = float("inf")
        x[rows - 1, 0] = float("-inf")
        x[0, cols - 1] = float("nan")
        x[rows // 3, cols // 3] = -float("nan")
    return x


def cast_reference(kind: str, x: torch.Tensor, ue8m0: bool):
    """(e4m3 data, float32 scales) of the torch definition of the cast, on x's device."""
    return getattr(dg_math, f"{kind}_cast_to_fp8_torch")(x, use_ue8m0=ue8m0)


def assert_cast_equal(got, expected, what: str) -> None:
    """Bitwise equal e4m3 data and scales (scales compared as bits; two NaNs count as equal whatever their
    payloads, which the GPU's arithmetic does not keep)."""
    (data, sf), (ref_data, ref_sf) = got, expected
    assert data.dtype == FP8 and data.shape == ref_data.shape and sf.shape == ref_sf.shape, what
    bad = data.view(torch.uint8) != ref_data.view(torch.uint8)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} e4m3 values differ, first at {bad.nonzero()[0].tolist()}"
    sf, ref_sf = sf.float(), ref_sf.float()
    same = (sf.view(torch.int32) == ref_sf.view(torch.int32)) | (torch.isnan(sf) & torch.isnan(ref_sf))
    assert bool(same.all()), f"{what}: {int((~same).sum())} scales differ, first at {(~same).nonzero()[0].tolist()}"


@dataclass
class CastCase:
    """One cast call (it allocates its outputs): `run` casts, `check` compares bitwise with the torch definition."""
    desc: str
    call: Callable[[], tuple]
    expected: tuple
    result: Optional[tuple] = None

    def reset(self) -> None:
        self.result = None

    def run(self) -> None:
        self.result = self.call()

    def check(self) -> None:
        torch.cuda.synchronize(self.expected[0].device)
        assert self.result is not None, self.desc
        assert_cast_equal(self.result, self.expected, self.desc)


def sample_cast(rng: random.Random) -> dict:
    """A random cast: kind, rows (per channel a multiple of 128), ragged or odd columns, dtype, scale rounding, and x
    a view with a padded row stride (`pad`) and a start `offset` elements into its storage (narrow vectors)."""
    kind = rng.choice(CAST_KINDS)
    rows = 128 * rng.randint(1, 64) if kind == "per_channel" else draw_rows(rng, 16384)
    cols = rng.choice([rng.randint(1, 300), 128 * rng.randint(1, 64), rng.randint(1, 8192)])
    return dict(kind=kind, rows=rows, cols=cols, dtype=rng.choice(["bf16", "fp32"]), ue8m0=rng.random() < 0.5,
                mn_major=kind == "per_token" and rng.random() < 0.5, pad=rng.choice([0, 0, 8, 3]),
                offset=rng.choice([0, 0, 0, 1, 4]))


def build_cast(p: dict, device, seed: int) -> CastCase:
    """p: kind (CAST_KINDS), rows, cols, dtype ("bf16" / "fp32"), ue8m0, and optionally mn_major (per token: the
    GEMMs' scale layout), pad and offset (x a view into larger storage, see `sample_cast`)."""
    kind, rows, cols, ue8m0 = p["kind"], p["rows"], p["cols"], p["ue8m0"]
    pad, offset = p.get("pad", 0), p.get("offset", 0)
    store = cast_input(rows, offset + cols + pad, torch.bfloat16 if p["dtype"] == "bf16" else torch.float32, device,
                       seed)
    x = store[:, offset:offset + cols]
    fn = getattr(deep_gemm.utils, f"{kind}_cast_to_fp8")
    kwargs = dict(mn_major_sf=True) if p.get("mn_major") else {}
    return CastCase(f"{kind} cast {p}", lambda: fn(x, use_ue8m0=ue8m0, **kwargs), cast_reference(kind, x, ue8m0))


# ---- fp8_fp4_mqa_logits (the indexer's prefill logits; it allocates its output)

def mqa_inputs(seq_len: int, seq_len_kv: int, heads: int, head_dim: int, device, seed: int):
    """(q, kv, kv_sf, weights, ks, ke) with ranges that include empty rows, one key, keys across the 128-key block
    edges, the whole sequence and random ones."""
    gen = _gen(device, seed)
    q = torch.randn((seq_len, heads, head_dim), device=device, generator=gen).to(torch.float8_e4m3fn)
    kv = torch.randn((seq_len_kv, head_dim), device=device, generator=gen).to(torch.float8_e4m3fn)
    kv_sf = torch.rand((seq_len_kv,), device=device, generator=gen) + 0.5
    weights = torch.randn((seq_len, heads), device=device, generator=gen)
    ks = torch.randint(0, max(seq_len_kv, 1), (seq_len,), device=device, generator=gen, dtype=torch.int32)
    lengths = torch.randint(0, max(seq_len_kv, 1), (seq_len,), device=device, generator=gen, dtype=torch.int32)
    ke = torch.clamp(ks + lengths, max=seq_len_kv).int()
    special = [(0, 0), (5, 5), (7, 8), (127, 129), (128, 256), (0, seq_len_kv), (seq_len_kv - 1, seq_len_kv)]
    for i, (s, e) in enumerate(special[:seq_len]):
        ks[i], ke[i] = max(0, min(s, seq_len_kv)), min(e, seq_len_kv)
    return q, kv, kv_sf, weights, ks, ke


def mqa_reference(q, kv, kv_sf, weights, ks, ke):
    """(FP32 logits of the FP8 values with -inf outside each query's range, the in-range mask)."""
    score = torch.einsum("shd,nd->shn", q.float(), kv.float()).relu()
    logits = torch.einsum("shn,sh->sn", score, weights) * kv_sf[None, :]
    cols = torch.arange(kv.shape[0], device=kv.device)
    inside = (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
    return logits.masked_fill(~inside, float("-inf")), inside


@dataclass
class LogitsCase(PackCase):
    """One MQA logits call: the `inside` columns against the FP32 reference, and with `clean` -inf exactly outside."""
    inside: Optional[torch.Tensor] = None
    clean: bool = True

    def check(self) -> None:
        torch.cuda.synchronize(self.expected.device)
        got, inside = self.result, self.inside
        assert got is not None and got.shape == self.expected.shape, f"{self.desc}: shape"
        if self.clean:
            assert torch.equal(got == float("-inf"), ~inside), f"{self.desc}: -inf not exactly outside the ranges"
        diff = calc_diff(got.float().masked_fill(~inside, 0), self.expected.masked_fill(~inside, 0))
        assert diff < 1e-6, f"{self.desc}: calc_diff {diff}"


def build_mqa_logits(p: dict, device, seed: int) -> LogitsCase:
    """p: seq_len, seq_len_kv, heads, head_dim."""
    inputs = mqa_inputs(p["seq_len"], p["seq_len_kv"], p["heads"], p["head_dim"], device, seed)
    q, kv, kv_sf, weights, ks, ke = inputs
    expected, inside = mqa_reference(*inputs)
    return LogitsCase(f"mqa logits {p}", lambda: deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), weights, ks, ke),
                      expected, inside=inside)


# ---- fp8_fp4_paged_mqa_logits (decode over a paged FP8 KV cache; it allocates its output)

def paged_mqa_inputs(batch: int, next_n: int, heads: int, max_blocks: int, device, seed: int):
    """(q, kv_cache, weights, context_lens, block_table) with contexts 0, 1, 63, 64, 65, a full table and random
    ones; cache blocks shuffled; table entries past a context left -1 (never read)."""
    gen = _gen(device, seed)
    q = torch.randn((batch, next_n, heads, 128), device=device, generator=gen).to(torch.float8_e4m3fn)
    num_blocks = batch * max_blocks
    values = torch.randn((num_blocks, 64, 128), device=device, generator=gen).to(torch.float8_e4m3fn)
    scales = torch.rand((num_blocks, 64), device=device, generator=gen) + 0.5
    kv_cache = torch.cat([values.view(num_blocks, -1).view(torch.uint8), scales.view(torch.uint8)], dim=1)
    kv_cache = kv_cache.view(num_blocks, 64, 1, 132)
    weights = torch.randn((batch * next_n, heads), device=device, generator=gen)
    last = torch.randint(0, max_blocks * 64 + 1, (batch,), device=device, generator=gen, dtype=torch.int32)
    for i, n in enumerate([0, 1, 63, 64, 65, max_blocks * 64][:batch]):
        last[i] = n
    context_lens = torch.stack([torch.clamp(last - (next_n - 1 - j), min=0) for j in range(next_n)], dim=1).int()
    table = torch.randperm(num_blocks, device=device, generator=gen).int().view(batch, max_blocks)
    blocks_used = (last.long() + 63) // 64
    table[torch.arange(max_blocks, device=device)[None, :] >= blocks_used[:, None]] = -1
    return q, kv_cache, weights, context_lens, table


def paged_mqa_reference(q, kv_cache, weights, context_lens, block_table):
    """(FP32 logits [B x next_n, max_blocks x 64] of the FP8 values, the mask of written columns)."""
    batch, next_n, heads, _ = q.shape
    blocks = kv_cache.view(kv_cache.shape[0], -1)
    values = blocks[:, :64 * 128].contiguous().view(torch.float8_e4m3fn).view(-1, 64, 128).float()
    scales = blocks[:, 64 * 128:].contiguous().view(torch.float32).view(-1, 64)
    table = block_table.clamp(min=0).long()
    kv = values[table].view(batch, -1, 128)                    # [B, tokens, 128]
    sf = scales[table].view(batch, -1)
    score = torch.einsum("bjhd,btd->bjht", q.float(), kv).relu()
    logits = torch.einsum("bjht,bjh->bjt", score, weights.view(batch, next_n, heads)) * sf[:, None, :]
    tokens = torch.arange(kv.shape[1], device=q.device)
    written = tokens[None, None, :] < context_lens[:, :, None]
    return logits.reshape(batch * next_n, -1), written.reshape(batch * next_n, -1)


def build_paged_mqa_logits(p: dict, device, seed: int) -> LogitsCase:
    """p: batch, next_n, heads, max_blocks; the columns past each query's context are not compared."""
    q, kv_cache, weights, context_lens, table = paged_mqa_inputs(p["batch"], p["next_n"], p["heads"], p["max_blocks"],
                                                                 device, seed)
    expected, written = paged_mqa_reference(q, kv_cache, weights, context_lens, table)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, 8)
    return LogitsCase(f"paged mqa logits {p}",
                      lambda: deep_gemm.fp8_fp4_paged_mqa_logits((q, None), kv_cache, weights, context_lens, table,
                                                                 meta, p["max_blocks"] * 64),
                      expected, inside=written, clean=False)


# ---- bf16_gemm_nt in the four operand layouts (nt / nn / tn / tt)

def sample_bf16(rng: random.Random) -> dict:
    layout = rng.choice(["nt", "nn", "tn", "tt"])
    n, k = 8 * rng.randint(1, 1024), 8 * rng.randint(1, 1024)
    m = _cap_rows(draw_rows(rng, 8192), n * k, k)
    return dict(layout=layout, out=rng.choice(["bf16", "fp32"]), c=rng.choice(["none", "d", "other"]), m=m, n=n, k=k)


def build_bf16(p: dict, device, seed: int) -> Case:
    m, n, k, layout = p["m"], p["n"], p["k"], p["layout"]
    out_dtype = torch.bfloat16 if p["out"] == "bf16" else torch.float32
    gen = _gen(device, seed)
    a = torch.randn((m, k), device=device, generator=gen).to(torch.bfloat16)
    b = torch.randn((n, k), device=device, generator=gen).to(torch.bfloat16)
    ref = a.float() @ b.float().t()
    a_arg = a if layout[0] == "n" else padded_rows(a.t().contiguous())  # tn / tt take a as [k, m], any m
    b_arg = b if layout[1] == "t" else b.t().contiguous()  # nn / tn take b as [k, n]
    g = Guarded((m, n), out_dtype, device)
    # Through bf16_gemm_nt itself, on the transposed views the alias would make (tests/gpu/test_bf16_gpu.py calls the
    # aliases): one public name for the table of malformed calls.
    args = (a_arg if layout[0] == "n" else a_arg.t(), b_arg if layout[1] == "t" else b_arg.t(), g.out)
    if p["c"] != "none":
        c = torch.randn((m, n), device=device, generator=gen).to(out_dtype)
        ref += c.float()
        if p["c"] == "d":
            g.set_initial(c)
            args += (g.out,)
        else:
            args += (c,)

    def checker(case: Case) -> None:
        _assert_close([(case.out, ref, None)], case.desc)

    return Case("bf16_gemm_nt", f"bf16 {layout} m={m} n={n} k={k} d {p['out']} c {p['c']}", args, g, checker,
                dict(ref=ref, result=ref))


def _bf16_a_strided(d: dict) -> None:
    a = d["a"]
    d["a"] = torch.zeros((a.shape[0], 2 * a.shape[1]), dtype=a.dtype, device=a.device)[:, ::2]


# ---- m_grouped_bf16_gemm_nt_contiguous (per-row and psum layouts, K- or MN-major B) and _masked

def sample_bf16_contiguous(rng: random.Random) -> dict:
    groups = rng.choice([1, 2, 4, 8])
    sizes = [0 if rng.random() < 0.1 else rng.randint(1, 600) for _ in range(groups)]
    return dict(sizes=sizes, n=8 * rng.randint(1, 512), k=64 * rng.randint(1, 64), layout=rng.choice(["nt", "nn"]),
                psum=rng.random() < 0.5)


def build_bf16_contiguous(p: dict, device, seed: int) -> Case:
    sizes, n, k = p["sizes"], p["n"], p["k"]
    gen = _gen(device, seed)
    starts, row = [], 0
    for size in sizes:  # every group starts at a multiple of 128 (both layouts)
        starts.append(row)
        row = (row + size + 127) // 128 * 128
    m = max(row, 1)
    a = torch.randn((m, k), device=device, generator=gen).to(torch.bfloat16)
    b = torch.randn((len(sizes), n, k), device=device, generator=gen).to(torch.bfloat16)
    b_arg = b if p["layout"] == "nt" else b.transpose(1, 2).contiguous().transpose(1, 2)  # nn: [G, k, n] storage
    ref = torch.zeros((m, n), device=device)
    written = torch.zeros((m,), dtype=torch.bool, device=device)
    layout = torch.full((m,), -1, dtype=torch.int32, device=device)
    for g, (start, size) in enumerate(zip(starts, sizes)):
        ref[start:start + size] = a[start:start + size].float() @ b[g].float().t()
        written[start:start + size] = True
        layout[start:start + size] = g
    g_out = Guarded((m, n), torch.bfloat16, device)
    if p["psum"]:
        ends = torch.tensor([start + size for start, size in zip(starts, sizes)], dtype=torch.int32, device=device)
        args = (a, b_arg, g_out.out, ends, "nk", True)
    else:
        written[:] = True  # per-row layout: padding rows are written as zeros
        args = (a, b_arg, g_out.out, layout)

    def checker(case: Case) -> None:
        _assert_close([(case.out[written], ref[written], None)], case.desc)
        assert bool(case.guarded.untouched()[~written].all()), f"{case.desc}: rows outside every group were written"

    return Case("m_grouped_bf16_gemm_nt_contiguous",
                f"bf16 contiguous {p['layout']} {'psum' if p['psum'] else 'm_indices'} sizes={sizes} n={n} k={k}",
                args, g_out, checker, dict(ref=ref, result=ref, written=written))


def sample_bf16_masked(rng: random.Random) -> dict:
    groups, m_max = rng.choice([1, 4, 8, 32]), rng.choice([64, 128, 192, 512])
    masked = [rng.randint(0, m_max) for _ in range(groups)]
    return dict(masked=masked, m_max=m_max, n=8 * rng.randint(1, 512), k=8 * rng.randint(1, 512),
                expected_m=max(1, sum(masked) // groups))


def build_bf16_masked(p: dict, device, seed: int) -> Case:
    masked, m_max, n, k = p["masked"], p["m_max"], p["n"], p["k"]
    groups = len(masked)
    gen = _gen(device, seed)
    a = torch.randn((groups, m_max, k), device=device, generator=gen).to(torch.bfloat16)
    b = torch.randn((groups, n, k), device=device, generator=gen).to(torch.bfloat16)
    ref = torch.einsum("gmk,gnk->gmn", a.float(), b.float())
    rows = torch.arange(m_max, device=device).view(1, -1)
    written = rows < torch.tensor(masked, device=device).view(-1, 1)
    g_out = Guarded((groups, m_max, n), torch.bfloat16, device)
    masked_m = torch.tensor(masked, dtype=torch.int32, device=device)

    def checker(case: Case) -> None:
        _assert_close([(case.out[written], ref[written], None)], case.desc)
        assert bool(case.guarded.untouched()[~written].all()), f"{case.desc}: rows >= masked_m were written"

    result = torch.where(written.unsqueeze(-1), ref, torch.zeros((), device=device))
    return Case("m_grouped_bf16_gemm_nt_masked", f"bf16 masked G={groups} m_max={m_max} masked={masked} n={n} k={k}",
                (a, b, g_out.out, masked_m, p["expected_m"]), g_out, checker,
                dict(ref=ref, result=result, written=written))


# ---- einsum (bmk,bnk->mn / bhr,hdr->bhd / bhd,hdr->bhr) and tf32_hc_prenorm_gemm

EINSUM_EXPRS = {"bmk": "bmk,bnk->mn", "bhr": "bhr,hdr->bhd", "bhd": "bhd,hdr->bhr"}


def sample_einsum(rng: random.Random) -> dict:
    form = rng.choice(sorted(EINSUM_EXPRS))
    if form == "bmk":
        m, n, k = 8 * rng.randint(1, 48), 8 * rng.randint(1, 48), 8 * rng.randint(1, 64)
        return dict(form=form, batches=rng.choice([1, 2, 3, 17, 129, 1000]), m=m, n=n, k=k,
                    out=rng.choice(["bf16", "fp32"]))
    n, k = 8 * rng.randint(1, 160), 64 * rng.randint(1, 32)
    heads = rng.choice([1, 2, 3, 8, 16, 128])
    return dict(form=form, batches=heads, m=_cap_rows(draw_rows(rng, 8192), heads * n * k, heads * k), n=n, k=k,
                out="bf16")


def build_einsum(p: dict, device, seed: int) -> Case:
    """p: form (bmk: d[m, n] = sum_s a[s] b[s]^T over `batches`; bhr / bhd: one GEMM per head of `batches` heads,
    m rows, n output columns, k contracted), m, n, k, out (bmk: bf16, or fp32 accumulated into d)."""
    form, batches, m, n, k = p["form"], p["batches"], p["m"], p["n"], p["k"]
    gen = _gen(device, seed)
    expr = EINSUM_EXPRS[form]
    if form == "bmk":
        a = torch.randn((batches, m, k), device=device, generator=gen).to(torch.bfloat16)
        b = torch.randn((batches, n, k), device=device, generator=gen).to(torch.bfloat16)
        ref = torch.zeros((m, n), device=device)
        for s in range(0, batches, 256):
            ref += torch.bmm(a[s:s + 256].float(), b[s:s + 256].float().mT).sum(0)
        out_dtype = torch.float32 if p["out"] == "fp32" else torch.bfloat16
        g = Guarded((m, n), out_dtype, device)
        args = (expr, a, b, g.out, None)
        if out_dtype == torch.float32:
            init = torch.randn((m, n), device=device, generator=gen)
            g.set_initial(init)
            ref += init
            args = args[:4] + (g.out,)
    else:
        x = torch.randn((m, batches, k), device=device, generator=gen).to(torch.bfloat16)
        if form == "bhr":   # y [h, n, k]: a slice of wider rows, as DeepGEMM's test
            y = torch.randn((batches, n, k + 64), device=device, generator=gen).to(torch.bfloat16)[:, :, :k]
        else:               # y [h, k, n]
            y = torch.randn((batches, k, n + 64), device=device, generator=gen).to(torch.bfloat16)[:, :, :n]
        ref = torch.einsum(expr, x.float(), y.float())
        g = Guarded((m, batches, n), torch.bfloat16, device)
        args = (expr, x, y, g.out, None)

    def checker(case: Case) -> None:
        _assert_close([(case.out, ref, None)], case.desc)

    return Case("einsum", f"einsum {expr} batches={batches} m={m} n={n} k={k} d {p['out']}", args, g, checker,
                dict(ref=ref, result=ref, inputs=(1, 2)))


def sample_hc_prenorm(rng: random.Random) -> dict:
    return dict(m=draw_rows(rng, 8192), n=rng.choice([4, 8, 16, 24, 28, 32]), k=8 * rng.randint(1, 4096),
                splits=rng.choice([0, 0, 1, 3, 16]))


def build_hc_prenorm(p: dict, device, seed: int) -> Case:
    """p: m, n, k, splits (0: num_splits=None)."""
    m, n, k, splits = p["m"], p["n"], p["k"], p["splits"]
    gen = _gen(device, seed)
    a = torch.randn((m, k), device=device, generator=gen).to(torch.bfloat16)
    b = torch.randn((n, k), device=device, generator=gen)
    # The FP32 product: B's rounding to TF32 moves calc_diff by ~1e-7, well inside the check's 1e-5 (the TF32
    # reference itself is tests/gpu/test_hyperconnection_gpu.py's, at DeepGEMM's 1e-8).
    ref = a.float() @ b.T
    ref_sqr = a.float().square().sum(-1)
    lead = (splits,) if splits else ()
    g = Guarded(lead + (m, n), torch.float32, device)
    sqr_sum = torch.full(lead + (m,), float("nan"), device=device)

    def checker(case: Case) -> None:
        d, sq = (case.out, sqr_sum) if not splits else (case.out.sum(0), sqr_sum.sum(0))
        _assert_close([(d, ref, None)], case.desc)
        _assert_close([(sq, ref_sqr, None)], case.desc + " (sqr_sum)")

    def simulate() -> None:  # what a right kernel writes: the whole result in the first split, zeros in the others
        first = (g.out, sqr_sum) if not splits else (g.out[0], sqr_sum[0])
        if splits:
            g.out.zero_(), sqr_sum.zero_()
        first[0].copy_(ref), first[1].copy_(ref_sqr)

    return Case("tf32_hc_prenorm_gemm", f"tf32 hc prenorm m={m} n={n} k={k} splits={splits}",
                (a, b, g.out, sqr_sum, splits or None), g, checker, dict(ref=ref, simulate=simulate))


# ---- fp8_gemm_nt_skip_head_mid (the dense FP8 GEMM with each head's columns split around a skipped middle)

def sample_skip_head_mid(rng: random.Random) -> dict:
    left, right = 16 * rng.randint(1, 8), 16 * rng.randint(1, 8)
    mid = rng.choice([0, 8, 64, 8 * rng.randint(1, 32)])
    heads = rng.choice([1, 3, 16, 64, 128])
    k = rng.choice(DENSE_K)
    n = heads * (left + right)
    return dict(m=_cap_rows(draw_rows(rng, 8192), n * k, k), heads=heads, left=left, mid=mid, right=right, k=k)


def head_split_columns(heads: int, left: int, mid: int, right: int, device):
    """(out columns that receive GEMM columns 0..n-1 in order, out columns of the skipped middles) of
    fp8_gemm_nt_skip_head_mid."""
    width = left + mid + right
    starts = torch.arange(heads, device=device) * width
    parts = torch.cat([torch.arange(left, device=device), left + mid + torch.arange(right, device=device)])
    written = (starts[:, None] + parts[None, :]).reshape(-1)
    skipped = (starts[:, None] + left + torch.arange(mid, device=device)[None, :]).reshape(-1)
    return written, skipped


def build_skip_head_mid(p: dict, device, seed: int) -> Case:
    """p: m, heads, left, mid, right, k; B [heads * (left + right), k]; the middles must stay poisoned."""
    m, heads, left, mid, right, k = p["m"], p["heads"], p["left"], p["mid"], p["right"], p["k"]
    n = heads * (left + right)
    lhs, rhs, ref, ref_bf16 = dense_operands(m, n, k, device, seed)
    g = Guarded((m, n + heads * mid), torch.bfloat16, device)
    written, skipped = head_split_columns(heads, left, mid, right, device)

    def checker(case: Case) -> None:
        assert bool(case.guarded.untouched()[:, skipped].all()), f"{case.desc}: a skipped middle column was written"
        _assert_close([(case.out[:, written], ref, ref_bf16)], case.desc)

    def simulate() -> None:
        g.out[:, written] = ref.to(torch.bfloat16)

    return Case("fp8_gemm_nt_skip_head_mid", f"skip_head_mid m={m} heads={heads} ({left}, {mid}, {right}) k={k}",
                (lhs, rhs, g.out, (left, mid, right)), g, checker,
                dict(ref=ref, simulate=simulate))


# ---- fp8_gemm_nt with an FP8 d: D e4m3 with per-row 1 x 128 scales computed in the epilogue

def sample_fp8_out(rng: random.Random) -> dict:
    n = rng.choice([16, 144, 2112, 4096, 7168, 16 * rng.randint(1, 512)])
    k = rng.choice(DENSE_K)
    return dict(m=_cap_rows(draw_rows(rng, 16384), n * k, k), n=n, k=k)


def check_fp8_out(out: torch.Tensor, sfd: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """D [rows, n] e4m3 and SFD [rows, ceil(n/128)] against per_token_cast_to_fp8 of the dequantised FP32 product
    `ref`. The kernel quantises its own FP32 accumulators, which differ from that product by the FP8 GEMM's rounding
    (partial sums within a K block keep fewer bits: calc_diff ~1e-6), so: each scale within 2e-3 of the cast's, each
    dequantised value within one e4m3 step of the product plus 0.5% of its group's amax, calc_diff < 1.5e-3."""
    n = out.shape[-1]
    _, ref_sf = deep_gemm.utils.math.per_token_cast_to_fp8_torch(ref)
    assert bool(torch.isfinite(sfd).all()), f"{what}: a scale was not written"
    assert bool(torch.allclose(sfd, ref_sf, rtol=2e-3, atol=0)), \
        f"{what}: scales differ from the cast's: max rel {float(((sfd - ref_sf) / ref_sf).abs().max()):.3g}"
    scale = ref_sf.repeat_interleave(128, dim=1)[:, :n]
    ours = out.float() * sfd.repeat_interleave(128, dim=1)[:, :n]
    assert bool(torch.isfinite(ours).all()), f"{what}: NaN in D (unwritten or not finite)"
    q = (ref.abs() / scale).clamp(min=2.0 ** -6)
    step = torch.exp2(torch.floor(torch.log2(q)) - 3) * scale   # subnormals: 2^-9 of the scale
    bad = (ours - ref).abs() > step + 0.005 * 448 * scale
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} values off the product by more than one e4m3 step, " \
                                f"first at {bad.nonzero()[0].tolist()}"
    assert calc_diff(ours, ref) < 1.5e-3, f"{what}: calc_diff {float(calc_diff(ours, ref)):.3g}"


def _write_cast(ref: torch.Tensor, d: torch.Tensor, sfd: torch.Tensor) -> None:
    """What a correct FP8-d GEMM writes for the FP32 product `ref`: its per_token_cast_to_fp8 (a case's `simulate`,
    which checks the checker)."""
    ref_d, ref_sf = deep_gemm.utils.math.per_token_cast_to_fp8_torch(ref)
    d.copy_(ref_d)
    sfd.copy_(ref_sf)


def check_fp8_d_twice(case: Case) -> None:
    """Run and check an FP8-d case (its d = (D, SFD) is args[2]) twice from the same poisoned state: D's bits and
    SFD equal (bitwise reproducible)."""
    case.run()
    case.check()
    first = (case.guarded.bits(), case.args[2][1].clone())
    case.reset()
    case.run()
    case.check()
    assert torch.equal(first[0], case.guarded.bits()) and torch.equal(first[1], case.args[2][1]), \
        f"{case.desc}: not bitwise reproducible"


def fp8_out_scales(lead: Tuple[int, ...], rows: int, n: int, device):
    """(SFD [*lead, rows, ceil(n/128)] MN-major with its M stride padded to 16 bytes, the NaN-filled storage)."""
    groups, rows_pad = (n + 127) // 128, (rows + 3) // 4 * 4
    store = torch.full((*lead, groups, rows_pad), float("nan"), device=device)
    return store.transpose(-1, -2)[..., :rows, :], store


def build_fp8_out(p: dict, device, seed: int) -> Case:
    """p: m, n (a multiple of 16), k. d = (D [m, n] e4m3 in a guarded buffer, SFD MN-major with its padding rows
    poisoned), checked by `check_fp8_out`; SFD's padding rows untouched."""
    m, n, k = p["m"], p["n"], p["k"]
    lhs, rhs, ref, _ = dense_operands(m, n, k, device, seed)
    g = Guarded((m, n), FP8, device, guard=16)   # 16-byte guard columns: D's rows start 16-byte aligned (TMA)
    sfd, sfd_store = fp8_out_scales((), m, n, device)

    def checker(case: Case) -> None:
        check_fp8_out(case.out, sfd, ref, case.desc)
        assert bool(torch.isnan(sfd_store[:, m:]).all()), f"{case.desc}: SFD's padding rows were written"

    def simulate() -> None:
        _write_cast(ref, g.out, sfd)

    return Case("fp8_gemm_nt_fp8_out", f"fp8 out m={m} n={n} k={k}", (lhs, rhs, (g.out, sfd)), g, checker,
                dict(ref=ref, simulate=simulate))


def sample_contiguous_fp8_out(rng: random.Random) -> dict:
    p = sample_contiguous(rng)
    p["n"] = rng.choice([16, 2048, 4096, 7168, 16 * rng.randint(1, 300)])
    return p


def build_contiguous_fp8_out(p: dict, device, seed: int) -> Case:
    """The contiguous GEMM with d = (D [M, n] e4m3, SFD [M, ceil(n/128)] MN-major): every row checked by
    `check_fp8_out` against the cast of the FP32 product (padding rows: zeros, the floor scale)."""
    return _contiguous_fp8_d_case(p, device, seed, swiglu=False)


def _contiguous_fp8_d_case(p: dict, device, seed: int, swiglu: bool) -> Case:
    sizes, n, k, clamp = p["sizes"], p["n"], p["k"], p.get("clamp")
    lhs, rhs, m_indices, ref, _ = contiguous_inputs(sizes, n, k, _gen(device, seed), device)
    if swiglu:
        ref, rhs = swiglu_reference(ref, clamp), deep_gemm.utils.interleave_swiglu_weights(rhs)
    m, n_d = m_indices.numel(), ref.shape[-1]
    g = Guarded((m, n_d), FP8, device, guard=16)
    sfd, sfd_store = fp8_out_scales((), m, n_d, device)

    def checker(case: Case) -> None:
        assert not bool(case.guarded.untouched().any()), f"{case.desc}: rows left unwritten"
        check_fp8_out(case.out, sfd, ref, case.desc)
        assert bool(torch.isnan(sfd_store[:, m:]).all()), f"{case.desc}: SFD's padding rows were written"

    def simulate() -> None:
        _write_cast(ref, g.out, sfd)

    what = f"swiglu sizes={sizes} n={n} k={k} clamp={clamp}" if swiglu else f"fp8 out sizes={sizes} n={n} k={k}"
    return Case(f"m_grouped_fp8_gemm_nt_contiguous_{'swiglu' if swiglu else 'fp8_out'}", f"contiguous {what}",
                (lhs, rhs, (g.out, sfd), m_indices) + ((clamp,) if swiglu else ()), g, checker,
                dict(ref=ref, simulate=simulate))


def sample_masked_fp8_out(rng: random.Random) -> dict:
    p = sample_masked(rng)
    p["n"] = rng.choice([16, 2048, 4096, 7168, 16 * rng.randint(1, 300)])
    return p


def build_masked_fp8_out(p: dict, device, seed: int) -> Case:
    """The masked GEMM with d = (D [G, m_max, n] e4m3, SFD [G, m_max, ceil(n/128)] TMA-aligned MN-major): rows <
    masked_m checked by `check_fp8_out`, rows >= masked_m of D and SFD untouched."""
    return _masked_fp8_d_case(p, device, seed, swiglu=False)


def _masked_fp8_d_case(p: dict, device, seed: int, swiglu: bool) -> Case:
    groups, m_max, n, k, clamp = p["groups"], p["m_max"], p["n"], p["k"], p.get("clamp")
    lhs, rhs, ref, _ = masked_inputs(groups, m_max, n, k, _gen(device, seed), device)
    if swiglu:
        ref, rhs = swiglu_reference(ref, clamp), deep_gemm.utils.interleave_swiglu_weights(rhs)
    n_d = ref.shape[-1]
    masked_m = torch.tensor(p["masked"], dtype=torch.int32, device=device)
    counts = [min(max(c, 0), m_max) for c in p["masked"]]
    g = Guarded((groups, m_max, n_d), FP8, device, guard=16)
    sfd, sfd_store = fp8_out_scales((groups,), m_max, n_d, device)

    def checker(case: Case) -> None:
        untouched = case.guarded.untouched()
        for e, c in enumerate(counts):
            assert not bool(untouched[e, :c].any()), f"{case.desc}: rows < masked_m left unwritten"
            assert bool(untouched[e, c:].all()), f"{case.desc}: rows >= masked_m were written"
            assert bool(torch.isnan(sfd_store[e, :, c:]).all()), f"{case.desc}: scales of rows >= masked_m written"
            if c:
                check_fp8_out(case.out[e, :c], sfd[e, :c], ref[e, :c], f"{case.desc} group {e}")

    def simulate() -> None:
        for e, c in enumerate(counts):
            if c:
                _write_cast(ref[e, :c], g.out[e, :c], sfd[e, :c])

    what = "swiglu" if swiglu else "fp8 out"
    return Case(f"m_grouped_fp8_gemm_nt_masked_{'swiglu' if swiglu else 'fp8_out'}",
                f"masked {what} G={groups} m_max={m_max} n={n} k={k} masked_m={p['masked'][:8]}" +
                (f" clamp={clamp}" if swiglu else ""),
                (lhs, rhs, (g.out, sfd), masked_m, p["expected_m"]) + ((clamp,) if swiglu else ()), g, checker,
                dict(ref=ref, counts=counts, simulate=simulate))


# ---- m_grouped_fp8_gemm_nt_{contiguous,masked}_swiglu: the MoE gate/up GEMM with SwiGLU and FP8 output

def swiglu_reference(ref: torch.Tensor, clamp: Optional[float]) -> torch.Tensor:
    """SiLU(min(gate, c)) * clamp(up, -c, c) in FP32 from the FP32 product [..., 2I] of the gate | up weights (as
    they are before interleave_swiglu_weights)."""
    inter = ref.shape[-1] // 2
    gate, up = ref[..., :inter], ref[..., inter:]
    if clamp is not None:
        gate, up = gate.clamp(max=clamp), up.clamp(-clamp, clamp)
    return gate / (1 + torch.exp(-gate)) * up


def masked_expert_mlp(gate_up_cols: int, fused_gate_up: Callable, activation: Callable):
    """A decode MoE layer of 8 experts (m_max 32 rows each, hidden 2048, intermediate 1024, masked_m drawn once),
    run twice: `fused_gate_up(a, w1, (h, sh), masked_m, expected_m)` writes the FP8 (h, sh) that the masked down
    GEMM takes as its a; the reference runs the masked gate/up GEMM with a BF16 output of `gate_up_cols` columns,
    then per expert `activation(rows)` -> per_token_cast_to_fp8 -> the dense down GEMM. Returns (y, y_ref, the rows
    below masked_m)."""
    groups, m_max, hidden, inter, expected_m = 8, 32, 2048, 1024, 12
    masked_m = torch.tensor([32, 0, 5, 17, 1, 32, 9, 0], dtype=torch.int32, device="cuda")
    x = torch.randn((groups * m_max, hidden), device="cuda", dtype=torch.bfloat16)
    x8, sx = deep_gemm.per_token_cast_to_fp8(x)
    a = (x8.view(groups, m_max, hidden), sx.view(groups, m_max, -1))
    w1 = deep_gemm.per_block_cast_to_fp8(torch.randn((groups * gate_up_cols, hidden), device="cuda",
                                                     dtype=torch.bfloat16))
    w2 = deep_gemm.per_block_cast_to_fp8(torch.randn((groups * hidden, inter), device="cuda", dtype=torch.bfloat16))
    w1 = (w1[0].view(groups, gate_up_cols, hidden), w1[1].view(groups, gate_up_cols // 128, hidden // 128))
    w2 = (w2[0].view(groups, hidden, inter), w2[1].view(groups, hidden // 128, inter // 128))
    h = torch.empty((groups, m_max, inter), dtype=torch.float8_e4m3fn, device="cuda")
    sh = deep_gemm.get_mn_major_tma_aligned_tensor(torch.empty((groups, m_max, inter // 128), device="cuda"))
    fused_gate_up(a, w1, (h, sh), masked_m, expected_m)
    y = torch.zeros((groups, m_max, hidden), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((h, sh), w2, y, masked_m, expected_m)
    gate_up = torch.empty((groups, m_max, gate_up_cols), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_masked(a, w1, gate_up, masked_m, expected_m)
    y_ref = torch.zeros_like(y)
    for e in range(groups):
        c = int(masked_m[e])
        if c:
            h8, s8 = deep_gemm.per_token_cast_to_fp8(activation(gate_up[e, :c]))
            out = torch.empty((c, hidden), device="cuda", dtype=torch.bfloat16)
            deep_gemm.fp8_gemm_nt((h8, s8), (w2[0][e], w2[1][e]), out)
            y_ref[e, :c] = out
    torch.cuda.synchronize()
    return y, y_ref, torch.arange(m_max, device="cuda").view(1, -1) < masked_m.view(-1, 1)


def _swiglu_problem(p: dict, rng: random.Random) -> dict:
    p["n"] = 256 * rng.choice([1, 2, 3, 8, 16])   # 2 x the intermediate size, a multiple of 128
    p["clamp"] = rng.choice([None, None, 10.0, 0.5])
    return p


def sample_contiguous_swiglu(rng: random.Random) -> dict:
    return _swiglu_problem(sample_contiguous(rng), rng)


def build_contiguous_swiglu(p: dict, device, seed: int) -> Case:
    """The contiguous SwiGLU GEMM (p: as the contiguous GEMM's, n = 2 x the intermediate size, clamp): B interleaved
    by interleave_swiglu_weights, d = (D [M, n / 2] e4m3, SFD [M, n / 256] MN-major), every row checked by
    `check_fp8_out` against the cast of SiLU(gate) * up from the FP32 product (padding rows: zeros, the floor
    scale)."""
    return _contiguous_fp8_d_case(p, device, seed, swiglu=True)


def sample_masked_swiglu(rng: random.Random) -> dict:
    return _swiglu_problem(sample_masked(rng), rng)


def build_masked_swiglu(p: dict, device, seed: int) -> Case:
    """The masked SwiGLU GEMM: d = (D [G, m_max, n / 2] e4m3, SFD [G, m_max, n / 256] TMA-aligned MN-major): rows <
    masked_m checked by `check_fp8_out` against the cast of the activation, rows >= masked_m of D and SFD
    untouched."""
    return _masked_fp8_d_case(p, device, seed, swiglu=True)


# ---------------------------------------------------------------- registry

@dataclass(frozen=True)
class GemmSpec:
    name: str                                      # the public function, deep_gemm.<name>
    sample: Callable[[random.Random], dict]        # a random problem
    build: Callable[[dict, object, int], Case]     # (problem, device, seed) -> Case
    small: dict                                    # a quick, ragged problem for graph/device/determinism tests
    share: int                                     # weight in the random sweep
    # The public parameters' names and malformed calls of a GEMM whose table rows are not in
    # tests/test_malformed_calls.py (a new one keeps them here): (id, change of the named arguments, exception type,
    # the argument its message names, whether CPU tensors reach that check).
    arg_names: Tuple[str, ...] = ()
    malformed: Tuple[Tuple[str, Callable[[dict], None], type, str, bool], ...] = ()
    # Whether the public function is a torch custom operator (deep_gemm.ops.OPERATORS; tests/gpu/test_compile_gpu.py).
    # NOTES: the BF16 GEMMs are not yet: their DeepGEMM signature (a, b, d, c=None, compiled_dims) has no `out` and
    # more parameters than the variant reads, which deep_gemm/ops/library.py's schema derivation does not cover.
    operator: bool = True


SPECS: List[GemmSpec] = [
    GemmSpec("gemm_fp8_fp8_bf16_nt", sample_dense, build_dense, dict(m=129, n=4100, k=200), 5),
    GemmSpec("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", sample_contiguous, build_contiguous,
             dict(sizes=[100, 0, 300, 1], n=2112, k=576), 4),
    GemmSpec("m_grouped_gemm_fp8_fp8_bf16_nt_masked", sample_masked, build_masked,
             dict(groups=4, m_max=192, n=256, k=576, masked=[0, 192, 57, 300], expected_m=96), 4),
    GemmSpec("wgrad_gemm_fp8_fp8_fp32_nt", sample_wgrad, build_wgrad,
             dict(m=300, n=100, k=1000, sa_form="rows", sb_form="transposed"), 4),
    GemmSpec("k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", sample_k_grouped, build_k_grouped,
             dict(m=129, n=100, ks=[256, 0, 1040, 16]), 3),
    GemmSpec("bmm_fp8_fp8_bf16_nt", sample_bmm, build_bmm, dict(batches=5, m=17, n=1000, k=576, sa_form="sliced"), 3),
    GemmSpec("bf16_gemm_nt", sample_bf16, build_bf16, dict(layout="tn", out="fp32", c="d", m=136, n=200, k=200), 3,
             arg_names=("a", "b", "out", "c"),
             malformed=(("bf16-a-fp16", lambda d: d.__setitem__("a", d["a"].half()), TypeError, "a", True),
                        ("bf16-b-k-mismatch", lambda d: d.__setitem__("b", d["b"][:, :-8]), ValueError, "b", True),
                        ("bf16-c-dtype", lambda d: d.__setitem__("c", d["c"].double()), ValueError, "c", True),
                        ("bf16-a-no-unit-stride", _bf16_a_strided, ValueError, "a", False)),
             operator=False),
    GemmSpec("m_grouped_bf16_gemm_nt_contiguous", sample_bf16_contiguous, build_bf16_contiguous,
             dict(sizes=[100, 0, 300, 1], n=2112, k=576, layout="nt", psum=False), 3,
             arg_names=("a", "b", "out", "grouped_layout"),
             malformed=(("bf16-contiguous-layout-dtype", lambda d: d.__setitem__("grouped_layout",
                                                                                   d["grouped_layout"].long()),
                         TypeError, "grouped_layout", True),
                        ("bf16-contiguous-b-k", lambda d: d.__setitem__("b", d["b"][:, :, :-64]), ValueError, "b",
                         True)),
             operator=False),
    GemmSpec("m_grouped_bf16_gemm_nt_masked", sample_bf16_masked, build_bf16_masked,
             dict(masked=[0, 192, 57, 100], m_max=192, n=256, k=576, expected_m=96), 3,
             arg_names=("a", "b", "out", "masked_m", "expected_m"),
             malformed=(("bf16-masked-count-shape", lambda d: d.__setitem__("masked_m", d["masked_m"][:-1]),
                         ValueError, "masked_m", True),
                        ("bf16-masked-expected-m", lambda d: d.__setitem__("expected_m", 1.5), TypeError,
                         "expected_m", True)),
             operator=False),
]
SPECS += [
    GemmSpec("einsum", sample_einsum, build_einsum, dict(form="bhd", batches=3, m=17, n=200, k=128, out="bf16"), 2,
             arg_names=("expr", "a", "b", "out", "c"),
             malformed=(("einsum-expr", lambda d: d.__setitem__("expr", "bhr,hdr->bdh"), ValueError, "expr", True),
                        ("einsum-a-fp16", lambda d: d.__setitem__("a", d["a"].half()), TypeError, "a", True),
                        ("einsum-b-heads", lambda d: d.__setitem__("b", d["b"][:-1]), ValueError, "b", True),
                        ("einsum-c-per-head", lambda d: d.__setitem__("c", d["out"]), ValueError, "c", True)),
             operator=False),
    GemmSpec("fp8_gemm_nt_skip_head_mid", sample_skip_head_mid, build_skip_head_mid,
             dict(m=129, heads=3, left=128, mid=64, right=48, k=200), 2,
             arg_names=("lhs", "rhs", "out", "head_splits"),
             malformed=(("skip-head-d-width", lambda d: d.__setitem__("out", d["out"][:, 8:]), ValueError, "d", True),
                        ("skip-head-splits-ragged", lambda d: d.__setitem__("head_splits", (120, 64, 56)),
                         ValueError, "head_splits", True),
                        ("skip-head-not-whole-heads", lambda d: d.__setitem__("head_splits", (16, 64, 16)),
                         ValueError, "b[0] (B)", True),
                        ("skip-head-splits-type", lambda d: d.__setitem__("head_splits", (128, 64.0, 48)),
                         TypeError, "head_splits[1]", True),
                        ("skip-head-d-fp32", lambda d: d.__setitem__("out", d["out"].float()), TypeError, "d", True),
                        ("skip-head-b-k", lambda d: d["rhs"].__setitem__(0, d["rhs"][0][:, :128]), ValueError,
                         "b[0] (B)", True)),
             operator=False),
    GemmSpec("fp8_gemm_nt_fp8_out", sample_fp8_out, build_fp8_out, dict(m=131, n=400, k=200), 2,
             arg_names=("lhs", "rhs", "out"),
             malformed=(("fp8-out-n-ragged", lambda d: d.__setitem__("out", (d["out"][0][:, :392], d["out"][1])),
                         ValueError, "d[0] (D)", True),
                        ("fp8-out-sfd-row-major", lambda d: d.__setitem__("out", (d["out"][0],
                                                                                  d["out"][1].contiguous())),
                         ValueError, "d[1] (SFD)", False),
                        ("fp8-out-sfd-shape", lambda d: d.__setitem__("out", (d["out"][0], d["out"][1][:, :1])),
                         ValueError, "d[1] (SFD)", True),
                        ("fp8-out-d-bf16", lambda d: d.__setitem__("out", (d["out"][0].view(torch.int8).to(
                            torch.bfloat16), d["out"][1])), TypeError, "d[0] (D)", True),
                        ("fp8-out-not-a-pair", lambda d: d.__setitem__("out", d["out"][:1]), TypeError, "d", True)),
             operator=False),
    GemmSpec("m_grouped_fp8_gemm_nt_contiguous_fp8_out", sample_contiguous_fp8_out, build_contiguous_fp8_out,
             dict(sizes=[100, 0, 300, 1], n=400, k=576), 2,
             arg_names=("lhs", "rhs", "out", "m_indices"),
             malformed=(("contiguous-fp8-out-sfd-row-major", lambda d: d.__setitem__("out", (
                 d["out"][0], d["out"][1].contiguous())), ValueError, "d[1] (SFD)", False),
                        ("contiguous-fp8-out-index-rows", lambda d: d.__setitem__("m_indices", d["m_indices"][:-1]),
                         ValueError, "m_indices", True)),
             operator=False),
    GemmSpec("m_grouped_fp8_gemm_nt_masked_fp8_out", sample_masked_fp8_out, build_masked_fp8_out,
             dict(groups=3, m_max=70, n=272, k=144, masked=[70, 0, 33], expected_m=40), 2,
             arg_names=("lhs", "rhs", "out", "masked_m", "expected_m"),
             malformed=(("masked-fp8-out-sfd-row-major", lambda d: d.__setitem__("out", (d["out"][0],
                                                                                        d["out"][1].contiguous())),
                         ValueError, "d[1] (SFD)", False),
                        ("masked-fp8-out-d-groups", lambda d: d.__setitem__("out", (d["out"][0][:2],
                                                                                   d["out"][1])),
                         ValueError, "d[0] (D)", True),
                        ("masked-fp8-out-masked-m-int64", lambda d: d.__setitem__("masked_m", d["masked_m"].long()),
                         TypeError, "masked_m", True)),
             operator=False),
    GemmSpec("m_grouped_fp8_gemm_nt_contiguous_swiglu", sample_contiguous_swiglu, build_contiguous_swiglu,
             dict(sizes=[100, 0, 300, 1], n=512, k=576, clamp=None), 2,
             arg_names=("lhs", "rhs", "out", "m_indices", "activation_clamp"),
             malformed=(("contiguous-swiglu-n", lambda d: d.__setitem__("rhs", (d["rhs"][0][:, :384],
                                                                                d["rhs"][1][:, :3])),
                         ValueError, "b[0] (B)", True),
                        ("contiguous-swiglu-d-width", lambda d: d.__setitem__("out", (d["out"][0][:, :128],
                                                                                      d["out"][1])),
                         ValueError, "d[0] (D)", True),
                        ("contiguous-swiglu-clamp", lambda d: d.__setitem__("activation_clamp", -1.0),
                         ValueError, "activation_clamp", True),
                        ("contiguous-swiglu-clamp-type", lambda d: d.__setitem__("activation_clamp", "10"),
                         TypeError, "activation_clamp", True),
                        ("contiguous-swiglu-clamp-nan", lambda d: d.__setitem__("activation_clamp", float("nan")),
                         ValueError, "activation_clamp", True),
                        ("contiguous-swiglu-clamp-float32-zero", lambda d: d.__setitem__("activation_clamp", 1e-46),
                         ValueError, "activation_clamp", True),
                        ("contiguous-swiglu-clamp-overflow", lambda d: d.__setitem__("activation_clamp", 1e39),
                         ValueError, "activation_clamp", True)),
             operator=False),
    GemmSpec("m_grouped_fp8_gemm_nt_masked_swiglu", sample_masked_swiglu, build_masked_swiglu,
             dict(groups=3, m_max=70, n=768, k=144, masked=[70, 0, 33], expected_m=40, clamp=7.0), 2,
             arg_names=("lhs", "rhs", "out", "masked_m", "expected_m", "activation_clamp"),
             malformed=(("masked-swiglu-sfd-shape", lambda d: d.__setitem__("out", (d["out"][0],
                                                                                   d["out"][1][:, :, :1])),
                         ValueError, "d[1] (SFD)", True),
                        ("masked-swiglu-masked-m-int64", lambda d: d.__setitem__("masked_m", d["masked_m"].long()),
                         TypeError, "masked_m", True)),
             operator=False),
    GemmSpec("tf32_hc_prenorm_gemm", sample_hc_prenorm, build_hc_prenorm, dict(m=137, n=24, k=1000, splits=3), 2,
             arg_names=("a", "b", "out", "sqr_sum", "num_splits"),
             malformed=(("hc-b-bf16", lambda d: d.__setitem__("b", d["b"].bfloat16()), TypeError, "b", True),
                        ("hc-n-too-wide", lambda d: d.update(b=d["b"].repeat(2, 1)), ValueError, "b", True),
                        ("hc-sqr-shape", lambda d: d.__setitem__("sqr_sum", d["sqr_sum"][:, :-1]), ValueError,
                         "sqr_sum", True),
                        ("hc-splits", lambda d: d.__setitem__("num_splits", 0), ValueError, "num_splits", True)),
             operator=False),
]
SPEC_BY_NAME = {s.name: s for s in SPECS}


def sweep_problems(count: int, seed: int) -> List[Tuple[str, dict, int]]:
    """`count` (spec name, problem, input seed) triples drawn from `seed`, the specs weighted by `share`."""
    rng = random.Random(seed)
    names = [s.name for s in SPECS for _ in range(s.share)]
    out = []
    for i in range(count):
        spec = SPEC_BY_NAME[names[i % len(names)]]
        out.append((spec.name, spec.sample(rng), rng.randrange(1 << 30)))
    return out
