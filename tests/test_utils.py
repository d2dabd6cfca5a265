"""Public helpers of deep_gemm/utils.py (CPU only)."""
import pytest
import torch

import deep_gemm
from deep_gemm import device
from deep_gemm.utils import align, ceil_div, get_col_major_tma_aligned_tensor, get_tma_aligned_size


@pytest.mark.parametrize("a,b,expected", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (7168, 128, 56), (1, 1, 1)])
def test_ceil_div(a, b, expected):
    assert ceil_div(a, b) == expected
    assert align(a, b) == expected * b


@pytest.mark.parametrize("x,element_size,expected", [
    (0, 4, 0), (1, 4, 4), (4, 4, 4), (5, 4, 8), (4096, 4, 4096), (4097, 4, 4100),
    (1, 1, 16), (16, 1, 16), (17, 1, 32), (3, 2, 8), (3, 8, 4), (3, 16, 3),
])
def test_get_tma_aligned_size(x, element_size, expected):
    got = get_tma_aligned_size(x, element_size)
    assert got == expected
    assert (got * element_size) % 16 == 0 and got - x < 16 // element_size


@pytest.mark.parametrize("element_size", [0, 3, 6, 32, -4])
def test_get_tma_aligned_size_rejects_bad_element_size(element_size):
    with pytest.raises(ValueError, match="element_size"):
        get_tma_aligned_size(8, element_size)


@pytest.mark.parametrize("m,k", [(5, 3), (8, 3), (1, 7), (129, 56)])
def test_col_major_2d(m, k):
    x = torch.randn(m, k)
    y = get_col_major_tma_aligned_tensor(x)
    aligned_m = get_tma_aligned_size(m, 4)
    assert y.shape == (m, k) and y.dtype == torch.float32
    assert y.stride() == (1, aligned_m)
    assert torch.equal(y, x)
    assert get_col_major_tma_aligned_tensor(y) is y, "a tensor already in layout must not be copied"


@pytest.mark.parametrize("g,m,k", [(2, 5, 3), (3, 8, 2), (1, 6, 4)])
def test_col_major_3d(g, m, k):
    x = torch.randn(g, m, k)
    y = get_col_major_tma_aligned_tensor(x)
    aligned_m = get_tma_aligned_size(m, 4)
    assert y.shape == (g, m, k)
    assert y.stride() == (aligned_m * k, 1, aligned_m)
    assert torch.equal(y, x)
    assert get_col_major_tma_aligned_tensor(y) is y


def test_col_major_hand_built_layout_is_kept():
    x = torch.empty((3, 8)).t()[:5]  # [5, 3] with strides (1, 8)
    x.copy_(torch.randn(5, 3))
    assert get_col_major_tma_aligned_tensor(x) is x


def test_col_major_unaligned_stride_is_copied():
    x = torch.empty((3, 5)).t()  # [5, 3] MN-major but stride 5 floats = 20 bytes
    x.copy_(torch.randn(5, 3))
    y = get_col_major_tma_aligned_tensor(x)
    assert y is not x and y.stride() == (1, 8) and torch.equal(y, x)


def test_col_major_single_column_is_kept():
    """No copy; the result reports the canonical strides (DeepGEMM's layout test checks stride(-1) even when k' = 1)."""
    x = torch.randn(5, 1)
    y = get_col_major_tma_aligned_tensor(x)
    assert y.data_ptr() == x.data_ptr() and y.stride() == (1, 8) and torch.equal(x, y)
    z = torch.randn(8, 1)
    assert get_col_major_tma_aligned_tensor(z.as_strided((8, 1), (1, 8))).data_ptr() == z.data_ptr()


def test_col_major_errors():
    with pytest.raises(TypeError, match="float32"):
        get_col_major_tma_aligned_tensor(torch.randn(4, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        get_col_major_tma_aligned_tensor([[1.0]])
    with pytest.raises(ValueError, match="2-D"):
        get_col_major_tma_aligned_tensor(torch.randn(4))
    with pytest.raises(ValueError, match="2-D"):
        get_col_major_tma_aligned_tensor(torch.randn(1, 2, 4, 4))


@pytest.fixture
def no_sms_cap():
    deep_gemm.reset_num_sms()
    yield
    deep_gemm.reset_num_sms()


@pytest.mark.parametrize("value", [1.5, True, False, "8", None])
def test_set_num_sms_type_errors(no_sms_cap, value):
    with pytest.raises(TypeError, match="num_sms must be an int"):
        deep_gemm.set_num_sms(value)
    assert device.num_sms_cap() is None


@pytest.mark.parametrize("value", [0, -1])
def test_set_num_sms_value_errors(no_sms_cap, value):
    with pytest.raises(ValueError, match="num_sms must be >= 1"):
        deep_gemm.set_num_sms(value)
    assert device.num_sms_cap() is None


def test_set_num_sms_caps_get_num_sms(no_sms_cap):
    deep_gemm.set_num_sms(8)
    assert device.num_sms_cap() == 8
    assert deep_gemm.get_num_sms() == 8


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a device the SM count must come from set_num_sms")
def test_get_num_sms_without_device_needs_a_cap(no_sms_cap):
    with pytest.raises(RuntimeError, match="set_num_sms"):
        deep_gemm.get_num_sms()


def test_interleave_swiglu_weights_runs_of_64_and_scales_untouched():
    inter, k = 256, 3
    w = torch.arange(2 * 2 * inter, dtype=torch.float32).view(2, 2 * inter, 1).expand(2, 2 * inter, k)
    sf = torch.randn(2, 2 * inter // 128, 1)
    out, out_sf = deep_gemm.utils.interleave_swiglu_weights((w, sf))
    assert out_sf is sf and out.shape == w.shape and out.is_contiguous()
    rows = out[1, :, 0].long() - 2 * inter
    runs = torch.arange(2 * inter) // 64
    expected = (runs // 2) * 64 + torch.arange(2 * inter) % 64 + (runs % 2) * inter  # gate run j, then up run j
    assert torch.equal(rows, expected)
    assert torch.equal(deep_gemm.utils.interleave_swiglu_weights(w[0]), out[0])  # 2-D: one expert


@pytest.mark.parametrize("bad,exc", [(torch.zeros(384, 8), ValueError), (torch.zeros(8), TypeError),
                                     ("w", TypeError)])
def test_interleave_swiglu_weights_refuses(bad, exc):
    with pytest.raises(exc, match="w"):
        deep_gemm.utils.interleave_swiglu_weights(bad)
