"""The FP8 cast family's host logic without a GPU: the variant's checks name the argument (CPU tensors reach all but
the device check), the vector widths and launch shapes, the public functions' CPU path (the torch definition, with
the GEMMs' MN-major scale layout on request), the header's constants, and a replay of the kernel's division (the
fused-multiply-add sequence of `div_rn_by`, include/deep_gemm/sm90/fp8_cast.cuh) against IEEE division."""
import os
import re

import numpy as np
import pytest
import torch

import deep_gemm
from deep_gemm.families import sm90_fp8_cast as family
from deep_gemm.heuristics.sm90_cast import GRAN, get_cast_config, groups_per_round, vector_width
from deep_gemm.jit.paths import project_include_dir
from deep_gemm.utils import math as dg_math

FP8 = torch.float8_e4m3fn


def _args(kind="per_token", rows=256, cols=200, dtype=torch.bfloat16):
    x = torch.zeros((rows, cols), dtype=dtype)
    sf_shape = family._sf_shape(kind, rows, cols)
    return dict(x=x, out=torch.empty((rows, cols), dtype=FP8), sf=torch.empty(sf_shape), use_ue8m0=0)


@pytest.mark.parametrize("kind,change,exc,name", [
    ("per_token", dict(x=torch.zeros((4, 256), dtype=torch.float16)), TypeError, "x"),
    ("per_token", dict(x=[[1.0]]), TypeError, "x"),
    ("per_token", dict(x=torch.zeros((2, 4, 256))), ValueError, "x"),
    ("per_token", dict(out=torch.empty((256, 200), dtype=torch.bfloat16)), TypeError, "out"),
    ("per_token", dict(out=torch.empty((256, 201), dtype=FP8)), ValueError, "out"),
    ("per_token", dict(sf=torch.empty((256, 1))), ValueError, "sf"),
    ("per_token", dict(sf=torch.empty((256, 2), dtype=torch.int32)), TypeError, "sf"),
    ("per_token", dict(sf=torch.empty((256, 4))[:, ::2]), ValueError, "sf"),       # neither row- nor MN-major
    ("per_token", dict(sf=torch.empty((1, 2)).expand(256, 2)), ValueError, "sf"),  # 256 rows on one address
    ("per_token", dict(use_ue8m0=2), ValueError, "use_ue8m0"),
    ("per_token", dict(use_ue8m0=True), ValueError, "use_ue8m0"),
    ("per_token", dict(x=torch.zeros((200, 256), dtype=torch.bfloat16).t()), ValueError, "x"),
    ("per_token", dict(out=torch.empty((200, 256), dtype=FP8).t()), ValueError, "out"),
    ("per_token", dict(out=torch.empty((1, 200), dtype=FP8).expand(256, 200)), ValueError, "out"),
    ("per_token", {}, ValueError, "x must be a CUDA tensor"),
    ("per_block", dict(sf=torch.empty((256, 2))), ValueError, "sf"),
    ("per_channel", dict(x=torch.zeros((200, 200), dtype=torch.bfloat16)), ValueError, "x"),
    ("per_channel", dict(sf=torch.empty((2, 201))), ValueError, "sf"),
])
def test_refusals_name_the_argument(kind, change, exc, name):
    args = _args(kind)
    args.update(change)
    with pytest.raises(exc, match=name):
        family._normalise(kind, *args.values())


def test_strided_scales_with_distinct_addresses_are_taken_up_to_the_device_check():
    # A column slice of wider row-major scales and the MN-major layout are both fine (the device check answers).
    for sf in (torch.empty((256, 4))[:, :2], torch.empty((2, 256)).t(), torch.empty((2, 260)).t()[:256]):
        with pytest.raises(ValueError, match="x must be a CUDA tensor"):
            family._normalise("per_token", *dict(_args(), sf=sf).values())


def test_vector_widths():
    assert vector_width(2, 7168, 7168, 7168) == 8 and vector_width(4, 7168, 7168, 7168) == 4
    assert vector_width(2, 200, 200, 200) == 8       # ragged k, still 16-byte loads (200 = 25 x 8)
    assert vector_width(2, 204, 204, 204) == 4 and vector_width(2, 129, 129, 129) == 1
    assert vector_width(2, 256, 1000, 256) == 8 and vector_width(2, 256, 1002, 256) == 2  # x's row stride
    assert vector_width(4, 6, 6, 6) == 2


def test_layout_vector_per_call_pointers():
    layout = family.CastLayout("per_token", torch.device("cuda", 0), 4, 256, True, False, 256, 256, (2, 1), 8,
                               (0, 0, 0), 132, "sm_90a")
    assert layout.vec_for(0x1000, 0x2000) == 8
    assert layout.vec_for(0x1008, 0x2000) == 4   # x 8-byte aligned: 4 BF16
    assert layout.vec_for(0x1002, 0x2000) == 1
    assert layout.vec_for(0x1000, 0x2002) == 2   # out 2-byte aligned


def test_launch_shapes():
    # Per token: groups per warp round from the vector width; more rounds (loads in flight) only where enough warps
    # remain for the SMs; small problems in few 512-thread CTAs, one round.
    assert [groups_per_round(v) for v in (8, 4, 2, 1)] == [2, 1, 1, 1]
    big = get_cast_config("per_token", 4096, 7168, 8, 2, 132)
    assert (big.rounds, big.num_threads, big.grid) == (4, 128, 4096 * 7 // 4)
    mid = get_cast_config("per_token", 512, 7168, 8, 2, 132)   # 14336 units: 4 rounds leave 3584 warps, 27 per SM
    assert (mid.rounds, mid.num_threads, mid.grid) == (4, 128, 512 * 7 // 4)
    small = get_cast_config("per_token", 64, 7168, 8, 2, 132)
    assert (small.rounds, small.num_threads, small.min_blocks, small.grid) == (1, 512, 2, 64 * 28 // 16)
    edge = get_cast_config("per_token", 512, 4096, 8, 2, 132)  # exactly SMALL_TOKEN_UNITS
    assert (edge.rounds, edge.num_threads, edge.grid) == (1, 512, 512)
    fp32 = get_cast_config("per_token", 512, 4096, 4, 4, 132)  # one group per round: 16384 units
    assert fp32.num_threads == 128
    ragged = get_cast_config("per_token", 3, 200, 8, 2, 132)
    assert ragged.rounds == 1 and ragged.grid == 1   # 3 rows x 1 unit of 2 groups
    block = get_cast_config("per_block", 4097, 200, 8, 2, 132)
    assert (block.num_threads, block.min_blocks, block.grid) == (512, 2, 33 * 2)
    assert get_cast_config("per_block", 4097, 200, 2, 2, 132).min_blocks == 1   # narrow vectors: more registers
    # Per channel: 16 lanes across a row where that gives at least 6 CTAs per SM, else 8.
    wide = get_cast_config("per_channel", 4096, 4096, 8, 2, 132)
    assert (wide.lanes_per_row, wide.grid) == (16, 32 * 32)
    narrow = get_cast_config("per_channel", 4096, 2048, 8, 2, 132)
    assert (narrow.lanes_per_row, narrow.grid) == (8, 32 * 32)
    channel = get_cast_config("per_channel", 512, 2112, 8, 2, 132)
    assert (channel.lanes_per_row, channel.grid) == (8, 4 * 33)
    assert big.lanes_per_row == block.lanes_per_row == 32
    with pytest.raises(ValueError, match="kind"):
        get_cast_config("per_tensor", 1, 1, 1, 2, 1)


def test_header_constants_are_torchs():
    with open(os.path.join(project_include_dir(), family.HEADER)) as f:
        text = f.read()
    floor = int(re.search(r"kAmaxFloorBits = (0x[0-9a-f]+)u", text).group(1), 16)
    assert floor == int(np.float32(1e-4).view(np.uint32))
    inv = float.fromhex(re.search(r"kInvFp8Max = (0x[0-9a-fp.+-]+)f", text).group(1))
    assert np.float32(inv) == np.float32(1.0) / np.float32(448.0) == np.float32(1.0 / 448.0)


@pytest.mark.parametrize("fn", ["per_token", "per_block", "per_channel"])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_cpu_path_is_the_torch_definition(fn, ue8m0):
    x = torch.randn((256, 200)) * 100
    x[3, 5] = float("inf")
    got = getattr(deep_gemm.utils, f"{fn}_cast_to_fp8")(x, use_ue8m0=ue8m0)
    ref = getattr(dg_math, f"{fn}_cast_to_fp8_torch")(x, use_ue8m0=ue8m0)
    assert torch.equal(got[0].view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(got[1], ref[1])


def test_mn_major_scales_on_the_cpu_path():
    x = torch.randn((5, 300))
    fp8, sf = deep_gemm.per_token_cast_to_fp8(x, mn_major_sf=True)
    ref_fp8, ref_sf = dg_math.per_token_cast_to_fp8_torch(x)
    assert sf.stride() == (1, 8) and torch.equal(sf, ref_sf) and torch.equal(fp8.view(torch.uint8),
                                                                              ref_fp8.view(torch.uint8))
    assert deep_gemm.get_mn_major_tma_aligned_tensor(sf) is sf  # what the GEMMs take without a copy


def test_other_dtypes_and_grans_take_the_torch_definition():
    x = torch.randn((4, 512), dtype=torch.float16)
    assert torch.equal(deep_gemm.per_token_cast_to_fp8(x, gran_k=64)[1],
                       dg_math.per_token_cast_to_fp8_torch(x, gran_k=64)[1])
    packed = deep_gemm.per_token_cast_to_fp8(x.float(), use_ue8m0=True, use_packed_ue8m0=True)[1]
    assert packed.dtype == torch.int32 and packed.shape == (4, 1)


# ---- A replay of the kernel's division, x / b for b = max(amax, 1e-4) * RN(1/448), in exact float32 arithmetic.

def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """RN32(a * b + c) exactly: the product is exact in double, the sum is rounded to odd there (TwoSum's error
    term decides), and rounding that to float32 is then the single rounding (53 >= 24 + 2 bits)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    bv = s - p
    e = (p - (s - bv)) + (c64 - bv)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((e != 0) & even, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def _div_rn_by(x, b, y):
    """div_rn_by of fp8_cast.cuh, step by step."""
    q0 = x * y
    q1 = _fma32(_fma32(-b, q0, x), y, q0)
    q2 = _fma32(_fma32(-b, q1, x), y, q1)
    return ((q2.view(np.uint32) & np.uint32(0x7fffffff)) | (x.view(np.uint32) & np.uint32(0x80000000))).view(
        np.float32)


def _e4m3(v: np.ndarray) -> np.ndarray:
    return torch.from_numpy(v).to(FP8).view(torch.uint8).numpy()


def test_kernel_division_is_ieee_division():
    rng = np.random.default_rng(2024)
    n = 1 << 20
    amax = (10.0 ** rng.uniform(-4, 38.5, n)).astype(np.float32)
    amax[: n // 16] = (rng.random(n // 16) * 1e-4).astype(np.float32)   # below the clamp
    b = np.maximum(amax, np.float32(1e-4)) * (np.float32(1) / np.float32(448))
    y = np.float32(1) / b
    which = rng.integers(0, 4, n)
    uniform = amax * rng.uniform(-1, 1, n)
    tiny = amax * 2.0 ** -rng.uniform(0, 160, n) * rng.choice([-1.0, 1.0], n)   # down to subnormals
    # Quotients next to a float32 rounding midpoint (the hard cases of correct rounding).
    q = rng.uniform(-448, 448, n) * 2.0 ** -rng.integers(0, 40, n)
    q = q.astype(np.float32).astype(np.float64)
    near_midpoint = (q + np.spacing(np.abs(q).astype(np.float32)) / 2 * rng.choice([-1, 1], n)) * b
    # ... and next to an e4m3 rounding midpoint, where an ulp of error changes the byte.
    e4m3 = torch.arange(0, 127, dtype=torch.uint8).view(FP8).float().numpy().astype(np.float64)
    mid = ((e4m3[1:] + e4m3[:-1]) / 2)[rng.integers(0, 126, n)] * rng.choice([-1.0, 1.0], n)
    near_e4m3 = (mid * b).astype(np.float32)
    near_e4m3 = near_e4m3 + rng.integers(-2, 3, n) * np.spacing(np.abs(near_e4m3))
    x = np.select([which == 0, which == 1, which == 2], [uniform, tiny, near_midpoint], near_e4m3).astype(np.float32)
    x = np.clip(x, -amax, amax).astype(np.float32)
    x[:64], x[64:128] = 0.0, -0.0
    with np.errstate(all="ignore"):
        ieee = (x / b).astype(np.float32)
        ours = _div_rn_by(x, b, y)
    # Bitwise equal wherever the quotient can matter (e4m3 rounds everything below 2^-10 to zero) ...
    big = np.abs(ieee) >= 2.0 ** -11
    assert np.array_equal(ieee[big].view(np.uint32), ours[big].view(np.uint32))
    # ... and the same e4m3 byte everywhere, zeros' signs included.
    assert np.array_equal(_e4m3(ieee), _e4m3(ours))
    # The replay can tell: without the corrections quotients are off by an ulp, and bytes next to a midpoint change.
    assert not np.array_equal(_e4m3(ieee), _e4m3((x * y).astype(np.float32)))
