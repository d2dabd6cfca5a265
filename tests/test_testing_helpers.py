"""FP8 casts, dequantisation and calc_diff of deep_gemm/testing.py, on CPU."""
import pytest
import torch

from deep_gemm import calc_diff, per_block_cast_to_fp8, per_token_cast_to_fp8
from deep_gemm.testing import FP8_MAX, dequant_per_block, dequant_per_token

FP8 = torch.float8_e4m3fn
E4M3_REL_ERROR = 2.0 ** -4  # 3 mantissa bits: round-to-nearest is within half an ulp = 2^-4 of the value


def _input(rows: int, cols: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # Groups of very different magnitudes, so that a wrong scale index shows up.
    x = torch.randn((rows, cols), generator=g) * torch.logspace(-3, 3, cols).roll(cols // 3)
    return x.to(dtype)


def _within_fp8_error(deq: torch.Tensor, x: torch.Tensor, scale_per_element: torch.Tensor) -> bool:
    # Normal e4m3 numbers: relative error; subnormals (below 2^-6): absolute error of half the 2^-9 step.
    bound = E4M3_REL_ERROR * x.abs() + scale_per_element * 2.0 ** -10 + 1e-12
    return bool(((deq - x).abs() <= bound).all())


@pytest.mark.parametrize("m,k", [(33, 256), (5, 200), (1, 1), (7, 129)])
def test_per_token_cast(m, k):
    x = _input(m, k, seed=m * 1000 + k)
    fp8, scale = per_token_cast_to_fp8(x)
    kb = (k + 127) // 128
    assert fp8.shape == (m, k) and fp8.dtype == FP8 and fp8.is_contiguous()
    assert scale.shape == (m, kb) and scale.dtype == torch.float32
    deq = dequant_per_token(fp8, scale)
    assert deq.shape == (m, k)
    assert calc_diff(deq, x) < 1e-3
    expanded = scale.repeat_interleave(128, dim=1)[:, :k]
    assert _within_fp8_error(deq, x, expanded)
    # Each group's largest magnitude maps onto the top of the e4m3 range.
    padded = torch.nn.functional.pad(fp8.float().abs(), (0, kb * 128 - k)).view(m, kb, 128)
    assert torch.equal(padded.amax(dim=2), torch.full((m, kb), FP8_MAX))


@pytest.mark.parametrize("n,k", [(256, 256), (300, 200), (1, 1), (129, 576)])
def test_per_block_cast(n, k):
    x = _input(n, k, seed=n * 1000 + k)
    fp8, scale = per_block_cast_to_fp8(x)
    nb, kb = (n + 127) // 128, (k + 127) // 128
    assert fp8.shape == (n, k) and fp8.dtype == FP8 and fp8.is_contiguous()
    assert scale.shape == (nb, kb) and scale.dtype == torch.float32
    deq = dequant_per_block(fp8, scale)
    assert deq.shape == (n, k)
    assert calc_diff(deq, x) < 1e-3
    expanded = scale.repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    assert _within_fp8_error(deq, x, expanded)
    for i in range(nb):
        for j in range(kb):
            block = fp8[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].float().abs()
            assert block.max() == FP8_MAX


def test_per_block_scale_is_shared_by_the_whole_block():
    x = torch.ones((256, 128))
    x[200, 5] = 100.0  # only the second N block sees the outlier
    _, scale = per_block_cast_to_fp8(x)
    assert scale[0, 0] == pytest.approx(1.0 / FP8_MAX)
    assert scale[1, 0] == pytest.approx(100.0 / FP8_MAX)


def test_casts_accept_bf16():
    x = _input(16, 256, seed=3, dtype=torch.bfloat16)
    fp8, scale = per_token_cast_to_fp8(x)
    assert calc_diff(dequant_per_token(fp8, scale), x) < 1e-3
    fp8, scale = per_block_cast_to_fp8(x)
    assert calc_diff(dequant_per_block(fp8, scale), x) < 1e-3


def test_zero_input_has_finite_scales():
    for cast in (per_token_cast_to_fp8, per_block_cast_to_fp8):
        fp8, scale = cast(torch.zeros((3, 130)))
        assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
        assert bool((fp8.float() == 0).all())


def test_casts_saturate_infinities_and_keep_nan():
    # With UE8M0 an infinite group's scale is 2^127 and its infinities stay infinite quotients: they become +-448 (as
    # the cast kernel's cvt.satfinite gives), not NaN as torch's own conversion did before 2.13. NaN stays NaN.
    from deep_gemm.utils.math import per_channel_cast_to_fp8
    x = torch.randn((128, 256))
    x[0, 0], x[1, 1], x[2, 2] = float("inf"), -float("inf"), float("nan")
    for cast in (per_token_cast_to_fp8, per_block_cast_to_fp8, per_channel_cast_to_fp8):
        fp8, scale = cast(x, use_ue8m0=True)
        bits = fp8.view(torch.uint8)
        assert int(bits[0, 0]) == 0x7E and int(bits[1, 1]) == 0xFE and int(bits[2, 2]) & 0x7F == 0x7F, cast.__name__
        assert float(scale.view(-1)[0]) == 2.0 ** 127


@pytest.mark.parametrize("cast", [per_token_cast_to_fp8, per_block_cast_to_fp8])
def test_casts_reject_non_2d(cast):
    with pytest.raises(ValueError, match="2-D"):
        cast(torch.zeros(128))


def test_per_block_cast_empty_n():
    fp8, scale = per_block_cast_to_fp8(torch.zeros((0, 256)))
    assert fp8.shape == (0, 256) and scale.shape == (0, 2)


def test_per_token_cast_empty_m():
    # gemm_fp8_fp8_bf16_nt accepts m = 0 (and per_block_cast_to_fp8 accepts n = 0), so the LHS helper should too.
    fp8, scale = per_token_cast_to_fp8(torch.zeros((0, 256)))
    assert fp8.shape == (0, 256) and scale.shape == (0, 2)


def test_calc_diff():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    assert calc_diff(x, x) == pytest.approx(0.0, abs=1e-12)
    assert calc_diff(x, -x) == pytest.approx(2.0, abs=1e-12)
    assert calc_diff(x, 2 * x) == pytest.approx(1 - 4 / 5, abs=1e-12)
    assert calc_diff(x, torch.zeros_like(x)) == pytest.approx(1.0)
    assert calc_diff(torch.zeros(4), torch.zeros(4)) == 0.0
    assert isinstance(calc_diff(x, x), float)


def test_calc_diff_uses_float64():
    # The true value, (a - 1)^2 / (1 + a^2) ~ 5e-9, is far below float32's resolution of 1 - 2ab/(a^2 + b^2).
    x = torch.ones(1000, dtype=torch.float32)
    y = x * 1.0001
    a = y[0].item()
    expected = (a - 1) ** 2 / (1 + a * a)
    assert calc_diff(x, y) == pytest.approx(expected, rel=1e-6)


def _unchunked_calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """The metric's definition in one float64 pass (what calc_diff computed before it worked in blocks)."""
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


@pytest.mark.parametrize("shape", [(3, 37, 129), (1000,), (257, 3), (2, 5000)])
def test_calc_diff_in_blocks_equals_one_pass(monkeypatch, shape):
    """A problem forced into many blocks (down to one element, and blocks that cut rows' lists unevenly) gives the
    one-pass value to float64 rounding; a non-contiguous view (an output inside a guard band) too."""
    import deep_gemm.testing as testing
    g = torch.Generator().manual_seed(len(shape))
    wide = torch.randn((*shape[:-1], shape[-1] + 8), generator=g)
    x = wide[..., 3:3 + shape[-1]]  # strided, as Guarded outputs are
    y = (x + 1e-3 * torch.randn(shape, generator=g)).to(torch.bfloat16)
    expected = _unchunked_calc_diff(x, y)
    assert expected > 1e-8
    for chunk in (1, 7, 1 << 10, 1 << 30):
        monkeypatch.setattr(testing, "CALC_DIFF_CHUNK_ELEMENTS", chunk)
        assert calc_diff(x, y) == pytest.approx(expected, rel=1e-12, abs=1e-15), chunk
        blocks = len(list(testing._row_blocks(x, y, chunk)))
        rows = x.numel() // (shape[-1] if len(shape) > 1 else 1)
        assert blocks == -(-rows // max(1, chunk // (shape[-1] if len(shape) > 1 else 1))), chunk


def test_diff_accumulator_equals_calc_diff_of_the_concatenation():
    from deep_gemm.testing import DiffAccumulator
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(50, 64, generator=g), torch.randn(50, 64, generator=g)
    acc = DiffAccumulator(chunk_elements=100)
    for a, b in ((x[:7], y[:7]), (x[7:30], y[7:30]), (x[30:0], y[30:0]), (x[30:], y[30:])):
        acc.add(a, b)
    assert acc.value() == pytest.approx(_unchunked_calc_diff(x, y), rel=1e-12)
    assert DiffAccumulator().value() == 0.0


def test_calc_diff_rejects_mismatched_shapes_and_bad_chunks():
    from deep_gemm.testing import DiffAccumulator
    with pytest.raises(ValueError, match="same shape"):
        calc_diff(torch.zeros(4, 3), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="chunk_elements"):
        DiffAccumulator(chunk_elements=0)
