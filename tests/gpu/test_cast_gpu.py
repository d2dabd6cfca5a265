"""GPU correctness of the FP8 cast kernels (include/deep_gemm/sm90/fp8_cast.cuh) behind
`per_token_cast_to_fp8`, `per_block_cast_to_fp8` and `per_channel_cast_to_fp8`: bitwise equal to their torch
definitions run on the same GPU (e4m3 bytes and scale bits) over ragged and aligned shapes, BF16 and FP32 inputs,
both scale roundings, zero rows, huge, infinite and NaN values, strided and misaligned inputs, CUDA-graph replay, and
the GEMM fed with the MN-major scales straight from the cast. Skipped without sm_90."""
import os
import random

import pytest
import torch

import deep_gemm
from deep_gemm import runtime
from deep_gemm.utils import math as dg_math
from gemm_cases import assert_cast_equal, build_cast, cast_input, cast_reference, sample_cast

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# The random sweep (as tests/gpu/test_sweep_gpu.py's: DG_SWEEP fixed-seed problems, a fifth as many fresh ones).
SWEEP_COUNT = int(os.environ.get("DG_SWEEP", "40"))
SWEEP_FRESH_SEED = int(os.environ.get("DG_SWEEP_FRESH_SEED") or random.SystemRandom().randrange(1 << 31))
_fixed, _fresh = random.Random(20261128), random.Random(SWEEP_FRESH_SEED)
SWEEP = [("fixed", i, sample_cast(_fixed)) for i in range(SWEEP_COUNT)] + \
    [(f"fresh{SWEEP_FRESH_SEED}", i, sample_cast(_fresh)) for i in range(max(10, SWEEP_COUNT // 5))]
ROWS = [1, 3, 64, 4097]
COLS = [128, 200, 2048, 7168]


def _launches() -> int:
    stats = runtime.stats()
    return stats["fast"] + stats["slow"]


def _ours(kind: str, x: torch.Tensor, ue8m0: bool, **kwargs):
    """The public cast, checked to have gone through the kernel (the torch definition never reaches `_C`)."""
    before = _launches()
    got = getattr(deep_gemm.utils, f"{kind}_cast_to_fp8")(x, use_ue8m0=ue8m0, **kwargs)
    assert _launches() == before + 1, "the cast did not run the kernel"
    return got


def _check(kind: str, x: torch.Tensor, ue8m0: bool, what: str, **kwargs):
    got = _ours(kind, x, ue8m0, **kwargs)
    torch.cuda.synchronize()
    assert_cast_equal(got, cast_reference(kind, x, ue8m0), what)
    return got


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
@pytest.mark.parametrize("kind", ["per_token", "per_block"])
def test_bitwise_equal_to_torch(kind, rows, cols, dtype, ue8m0):
    x = cast_input(rows, cols, DTYPES[dtype], "cuda", rows * 10007 + cols)
    _check(kind, x, ue8m0, f"{kind} {rows}x{cols} {dtype} ue8m0={ue8m0}")


@pytest.mark.parametrize("rows", [128, 512, 4096])
@pytest.mark.parametrize("cols", [1, 3, 64, 200, 2048, 7168])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
def test_per_channel_bitwise_equal_to_torch(rows, cols, dtype, ue8m0):
    x = cast_input(rows, cols, DTYPES[dtype], "cuda", rows * 10007 + cols)
    _check("per_channel", x, ue8m0, f"per_channel {rows}x{cols} {dtype} ue8m0={ue8m0}")


@pytest.mark.parametrize("origin,index,problem", SWEEP, ids=[f"{o}-{i}-{p['kind']}" for o, i, p in SWEEP])
def test_random_sweep(origin, index, problem):
    case = build_cast(problem, torch.device("cuda"), index)
    case.run()
    case.check()
    first = [t.clone() for t in case.result]
    case.run()  # a rerun is bitwise identical
    case.check()
    # flatten(): an MN-major [rows, 1] scale tensor counts as contiguous with a stride(-1) > 1, which view() refuses
    assert all(torch.equal(a.flatten().contiguous().view(torch.uint8), b.flatten().contiguous().view(torch.uint8))
               for a, b in zip(first, case.result))


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", COLS)
def test_mn_major_scales(rows, cols):
    x = cast_input(rows, cols, torch.bfloat16, "cuda", rows + cols)
    fp8, sf = _check("per_token", x, False, f"mn-major {rows}x{cols}", mn_major_sf=True)
    assert sf.stride() == (1, (rows + 3) // 4 * 4) and sf.data_ptr() % 16 == 0
    assert deep_gemm.get_mn_major_tma_aligned_tensor(sf) is sf  # the layout the GEMMs read, no copy


@pytest.mark.parametrize("kind", ["per_token", "per_block", "per_channel"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
def test_zeros_and_specials(kind, dtype, ue8m0):
    rows, cols = 256, 384
    x = torch.zeros((rows, cols), dtype=DTYPES[dtype], device="cuda")
    x[0, :] = -0.0
    fp8, sf = _check(kind, x, ue8m0, f"{kind} zeros")
    assert bool(torch.isfinite(sf).all()) and bool((sf > 0).all()), "zero groups need finite positive scales"
    assert bool((fp8.view(torch.uint8)[1:] == 0).all()) and bool((fp8.view(torch.uint8)[0] == 0x80).all())
    # Groups of huge, infinite and NaN values, and finite values next to them in the same groups.
    big = torch.finfo(DTYPES[dtype]).max
    for value in (1e30, big, -big, float("inf"), -float("inf"), float("nan"), -float("nan")):
        y = torch.randn((rows, cols), device="cuda").to(DTYPES[dtype])
        y[::3, ::7] = value
        y[5] = value
        _check(kind, y, ue8m0, f"{kind} {value}")


def test_e4m3_rounding_boundaries():
    # With UE8M0 and group maxima in [400, 448] the scale is exactly 1, so the e4m3 conversion sees x itself: every
    # e4m3 value and rounding midpoint (subnormals included) and the float32 values one ulp around each midpoint.
    e4m3 = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (e4m3[1:] + e4m3[:-1]) / 2
    values = torch.cat([mids, torch.nextafter(mids, torch.full_like(mids, 1e9)),
                        torch.nextafter(mids, torch.zeros_like(mids)), e4m3])
    values = torch.cat([values, -values])
    groups = (values.numel() + 126) // 127
    x = torch.zeros((groups, 128), dtype=torch.float32)
    x.view(-1)[:groups * 128][torch.arange(values.numel()) // 127 * 128 + torch.arange(values.numel()) % 127] = values
    x[:, 127] = 400.0
    x = x.cuda()
    fp8, sf = _check("per_token", x, True, "rounding boundaries")
    assert bool((sf == 1).all())


def test_strided_and_misaligned_inputs():
    wide = cast_input(300, 2100, torch.bfloat16, "cuda", 5)
    _check("per_token", wide[:, :2048], False, "row stride 2100")        # rows padded: kernel, 8-byte vectors
    _check("per_token", wide[:, 1:2049], False, "misaligned start")      # 2 bytes off 16: one-element vectors
    _check("per_block", wide[:, 3:203], True, "per-block misaligned")
    _check("per_channel", wide[:256, 4:1004], False, "per-channel column slice")
    _check("per_token", wide[::2, :2048], False, "every other row")
    # No unit column stride: the torch definition (which `_C` never sees), same result.
    t = wide[:256, :256].t()
    before = _launches()
    for kind in ("per_token", "per_block", "per_channel"):
        got = getattr(deep_gemm.utils, f"{kind}_cast_to_fp8")(t)
        assert_cast_equal(got, cast_reference(kind, t, False), f"{kind} transposed")
    assert _launches() == before


def test_cuda_graph_replay():
    x = cast_input(4097, 7168, torch.bfloat16, "cuda", 1, special=False)
    deep_gemm.per_token_cast_to_fp8(x, mn_major_sf=True)  # compiled and planned before the capture
    deep_gemm.per_block_cast_to_fp8(x, use_ue8m0=True)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            token = deep_gemm.per_token_cast_to_fp8(x, mn_major_sf=True)
            block = deep_gemm.per_block_cast_to_fp8(x, use_ue8m0=True)
    x.copy_(cast_input(4097, 7168, torch.bfloat16, "cuda", 2))
    graph.replay()
    torch.cuda.synchronize()
    assert_cast_equal(token, cast_reference("per_token", x, False), "graph per_token")
    assert_cast_equal(block, cast_reference("per_block", x, True), "graph per_block")


@pytest.mark.parametrize("m", [1, 129, 4097])
def test_gemm_takes_the_mn_major_scales_as_they_are(m):
    n, k = 4096, 7168
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, k), device="cuda", dtype=torch.bfloat16)
    b8, sb = deep_gemm.per_block_cast_to_fp8(b)
    a8, sa = deep_gemm.per_token_cast_to_fp8(a)
    a8_mn, sa_mn = deep_gemm.per_token_cast_to_fp8(a, mn_major_sf=True)
    assert torch.equal(a8.view(torch.uint8), a8_mn.view(torch.uint8)) and torch.equal(sa, sa_mn)
    ref = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a8, deep_gemm.get_col_major_tma_aligned_tensor(sa)), (b8, sb), ref)
    out = torch.empty_like(ref)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a8_mn, sa_mn), (b8, sb), out)
    fast = runtime.stats()["fast"]
    deep_gemm.gemm_fp8_fp8_bf16_nt((a8_mn, sa_mn), (b8, sb), out)  # no conversion: `_C` launches it by itself
    assert runtime.stats()["fast"] == fast + 1
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    # And the row-major scales of today's call give the same product (the GEMM converts them first).
    deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)
    torch.cuda.synchronize()
    assert torch.equal(out, ref)


def test_other_devices_dtypes_and_options_take_the_torch_definition():
    x = torch.randn((64, 512), device="cuda")
    before = _launches()
    for got, ref in ((deep_gemm.per_token_cast_to_fp8(x.half()), dg_math.per_token_cast_to_fp8_torch(x.half())),
                     (deep_gemm.per_token_cast_to_fp8(x, gran_k=64), dg_math.per_token_cast_to_fp8_torch(x, gran_k=64)),
                     (deep_gemm.per_token_cast_to_fp8(x, True, use_packed_ue8m0=True),
                      dg_math.per_token_cast_to_fp8_torch(x, True, use_packed_ue8m0=True))):
        assert torch.equal(got[0].view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(got[1], ref[1])
    assert _launches() == before
