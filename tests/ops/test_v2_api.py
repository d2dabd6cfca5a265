"""DeepGEMM v2's names (deep_gemm/ops/v2.py, deep_gemm/utils, deep_gemm/testing) on the CPU: one implementation
behind both API generations, the refusals of what SM90 cannot do (each naming the argument), the casts and the
test helpers. GPU correctness: tests/gpu/test_v2_gpu.py."""
import os

import pytest
import torch

import deep_gemm
from deep_gemm import testing
from deep_gemm.ops import v2
from deep_gemm.utils import math as dg_math

FP8 = torch.float8_e4m3fn


def test_aliases_are_one_implementation():
    assert deep_gemm.fp8_gemm_nt is deep_gemm.fp8_fp4_gemm_nt is v2.fp8_fp4_gemm_nt
    assert deep_gemm.m_grouped_fp8_gemm_nt_contiguous is deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous
    assert deep_gemm.m_grouped_fp8_gemm_nt_masked is deep_gemm.fp8_m_grouped_gemm_nt_masked
    assert deep_gemm.get_mn_major_tma_aligned_tensor is deep_gemm.get_col_major_tma_aligned_tensor
    from deep_gemm.jit_kernels.utils import get_m_alignment_for_contiguous_layout
    assert get_m_alignment_for_contiguous_layout() == deep_gemm.get_mk_alignment_for_contiguous_layout() == 128
    assert deep_gemm.utils.get_k_alignment_for_contiguous_layout() == 128


def _pair(m, k, scales=None, dtype=FP8):
    return torch.zeros((m, k), dtype=torch.float32).to(dtype), (scales if scales is not None
                                                               else torch.ones((m, (k + 127) // 128)))


@pytest.mark.parametrize("call,match", [
    (lambda: v2.fp8_gemm_nt(_pair(4, 128, dtype=torch.int8), _pair(8, 128), torch.empty(4, 8)), r"a\[0\].*SM100"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), (torch.zeros(8, 128).to(FP8), torch.ones(1, 1, dtype=torch.int32)),
                            torch.empty(4, 8)), r"b\[1\].*UE8M0"),
    (lambda: v2.fp8_gemm_nt((torch.zeros(128, 4).to(FP8).T, torch.ones(4, 1)), _pair(8, 128), torch.empty(4, 8)),
     "K-major"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8), c=torch.empty(4, 8)), "c:"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8), recipe=(1, 1, 128)), "c is required"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8, dtype=torch.bfloat16), recipe=(1, 1, 128)),
     "float32"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8), recipe=(1, 128, 128),
                            recipe_a=(1, 128), recipe_b=(128, 128)), "not both"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8), recipe_a=(1, 128)), "together"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8), recipe=(1, 128, 32)), "granularity"),
    (lambda: v2.fp8_gemm_nt(_pair(4, 128), _pair(8, 128), torch.empty(4, 8), compiled_dims="xy"), "compiled_dims"),
    (lambda: v2.m_grouped_fp8_gemm_nt_contiguous(_pair(4, 128), _pair(8, 128), torch.empty(4, 8),
                                                 torch.zeros(4, dtype=torch.int32), recipe=(1, 1, 128)), "recipe"),
    (lambda: v2.m_grouped_fp8_gemm_nt_contiguous(_pair(4, 128), _pair(8, 128), torch.empty(4, 8),
                                                 torch.zeros(4, dtype=torch.int32), expected_m_for_psum_layout=3),
     "expected_m_for_psum_layout"),
    (lambda: v2.k_grouped_fp8_gemm_tn_contiguous(None, None, None, [128], None), "SM100"),
    (lambda: v2.k_grouped_fp8_gemm_nt_contiguous(_pair(4, 128), _pair(8, 128), torch.empty(1, 4, 8), [128],
                                                 torch.tensor([128], dtype=torch.int32)), "c is required"),
    (lambda: v2.k_grouped_fp8_gemm_nt_contiguous(_pair(4, 128), _pair(8, 128), torch.empty(1, 4, 8), [],
                                                 torch.tensor([], dtype=torch.int32)), "ks_cpu"),
    (lambda: v2.k_grouped_fp8_gemm_nt_contiguous(_pair(4, 128), _pair(8, 128), torch.empty(1, 4, 8), [128],
                                                 torch.tensor([128], dtype=torch.int32), use_psum_layout=True), "SM100"),
    (lambda: deep_gemm.set_mk_alignment_for_contiguous_layout(64), "multiple of 128"),
    (lambda: deep_gemm.transform_sf_into_required_layout(torch.ones(4, 1, dtype=torch.int32), 4, 128, (1, 128)),
     "SM100"),
    (lambda: deep_gemm.transform_sf_into_required_layout(torch.ones(4, 1), 4, 128, (1, 128, 128)), "is_sfa"),
])
def test_refusals_name_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_mk_alignment_setter_and_theoretical_value():
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(20) == 128
    try:
        deep_gemm.set_mk_alignment_for_contiguous_layout(256)
        assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 256
        assert deep_gemm.get_m_alignment_for_contiguous_layout() == 256
    finally:
        deep_gemm.set_mk_alignment_for_contiguous_layout(128)


def test_transform_sf_into_required_layout_sm90_rules():
    sfa = torch.rand(301, 56)
    out = deep_gemm.transform_sf_into_required_layout(sfa, 301, 7168, (1, 128, 128), is_sfa=True)
    assert out.stride() == (1, 304) and torch.equal(out, sfa)
    assert deep_gemm.transform_sf_into_required_layout(out, 301, 7168, (1, 128)) is out  # already the layout
    sfb = torch.rand(3, 56)
    assert deep_gemm.transform_sf_into_required_layout(sfb, 301, 7168, (1, 128, 128), is_sfa=False) is sfb
    grouped = torch.rand(2, 301, 56)
    out = deep_gemm.transform_sf_into_required_layout(grouped, 301, 7168, (1, 128), num_groups=2)
    assert out.stride() == (304 * 56, 1, 304) and torch.equal(out, grouped)
    with pytest.raises(ValueError, match="shape"):
        deep_gemm.transform_sf_into_required_layout(sfb, 301, 7168, (1, 128))


def test_casts_match_their_definition():
    x = torch.randn(37, 300) * 3
    x8, s = dg_math.per_token_cast_to_fp8(x, use_ue8m0=False)
    assert x8.shape == (37, 300) and s.shape == (37, 3)
    deq = x8.float() * s.repeat_interleave(128, dim=1)[:, :300]
    assert testing.calc_diff(deq, x) < 1e-3
    x8u, su = dg_math.per_token_cast_to_fp8(x, use_ue8m0=True)
    bits = su.view(torch.int32)
    assert bool(((bits & 0x7FFFFF) == 0).all()) and bool((su >= s).all())  # powers of two, rounded up
    wide = torch.randn(37, 512)
    _, packed = dg_math.per_token_cast_to_fp8(wide, use_ue8m0=True, use_packed_ue8m0=True)
    assert packed.dtype == torch.int32 and packed.shape == (37, 1)
    assert torch.equal(dg_math.unpack_ue8m0_from_int(packed), dg_math.per_token_cast_to_fp8(wide, True)[1])
    w8, ws = dg_math.per_block_cast_to_fp8(x, use_ue8m0=False)
    assert ws.shape == (1, 3)
    c8, cs = dg_math.per_channel_cast_to_fp8(x[:, :256].T.contiguous(), use_ue8m0=False)
    assert cs.shape == (2, 37)
    assert testing.calc_diff(c8.float() * cs.repeat_interleave(128, dim=0), x[:, :256].T) < 1e-3
    f8, fs = dg_math.per_custom_dims_cast_to_fp8(x, (0,), use_ue8m0=False)
    assert fs.shape == (37,)
    assert testing.calc_diff(f8.float() * fs[:, None], x) < 1e-3
    # the May-2025 one-argument call still works
    assert torch.equal(deep_gemm.per_token_cast_to_fp8(x)[1], s)


def test_fp4_casts_and_transpose():
    x = torch.randn(64, 256)
    packed, sf = dg_math.per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32)
    assert packed.shape == (64, 128) and packed.dtype == torch.int8 and sf.shape == (64, 8)
    back = dg_math.cast_back_from_fp4(packed, sf, gran_k=32)
    assert testing.calc_diff(back, x) < 0.02
    codes = dg_math.transpose_packed_fp4(packed)
    assert codes.shape == (256, 32)
    assert torch.equal(dg_math.transpose_packed_fp4(codes), packed)
    ones = torch.ones(sf.shape)
    assert torch.equal(dg_math.cast_back_from_fp4(codes, torch.ones(256, 2), gran_k=32),
                       dg_math.cast_back_from_fp4(packed, ones, gran_k=32).T)


def test_testing_helpers():
    assert testing.count_bytes(torch.empty(4, 2), (torch.empty(3, dtype=torch.int8), None), [None]) == 35
    testing.assert_bitwise_equal(torch.arange(6.0), torch.arange(6.0))
    with pytest.raises(AssertionError, match=r"element \(4,\)"):
        testing.assert_bitwise_equal(torch.arange(6.0), torch.tensor([0., 1, 2, 3, 5, 5]))
    os.environ["DG_TEST_IGNORED"] = "1"
    seen = []
    testing.ignore_env("DG_TEST_IGNORED", lambda: True)(lambda: seen.append(os.environ.get("DG_TEST_IGNORED")))()
    assert seen == [None] and os.environ.pop("DG_TEST_IGNORED") == "1"
    ran = []
    getattr(testing, "test_filter")(lambda: False)(lambda: ran.append(1))()
    getattr(testing, "test_filter")(lambda: True)(lambda: ran.append(2))()
    assert ran == [2]


def test_bench_kineto_under_nvidia_tools(monkeypatch):
    """DeepGEMM's contract: with DG_USE_NVIDIA_TOOLS=1 (sanitizer, Nsight) nothing is profiled, 1 per name."""
    monkeypatch.setenv("DG_USE_NVIDIA_TOOLS", "1")
    assert deep_gemm.bench_kineto(lambda: None, "gemm_") == 1
    assert deep_gemm.bench_kineto(lambda: None, ("a", "b")) == (1, 1)


@pytest.mark.parametrize("arch,disable,expected", [("sm_90a", False, None), ("sm_90a", True, None),
                                                    ("sm_100a", False, "ue8m0"), ("sm_100a", True, "fp32"),
                                                    ("sm_100f", False, "ue8m0"), ("sm_103", False, None)])
def test_v2_scale_path_follows_deepgemm_on_sm100(arch, disable, expected):
    """v2 names on Blackwell: scales cast to UE8M0 unless disable_ue8m0_cast (DeepGEMM's SM100 default); Hopper
    and unsupported arches stay on the sm90 ops (exact FP32 scales, or a clear refusal)."""
    from deep_gemm.ops.v2 import scale_path
    assert scale_path(arch, disable) == expected
