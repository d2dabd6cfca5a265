"""The host side of the sm100 family (deep_gemm/families/sm100_fp8_gemm_1d2d.py) that needs no GPU: kernel sources,
the UE8M0 scale conversion and layouts of path (b), the self-test's problems, and the warm-up / CLI kernel lists for
--arch sm_100a."""
import pytest
import torch

import deep_gemm
from deep_gemm import selftest, sm100_selftest
from deep_gemm.families import sm100_fp8_gemm_1d2d as sm100
from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm100 import SCALES_FP32, SCALES_UE8M0, build_sm100_config
from deep_gemm.utils.math import ceil_to_ue8m0, pack_ue8m0_to_int


def test_kernel_source_names_every_config_member():
    config = build_sm100_config(4096, 7168, 256, 224, 148, SCALES_FP32)
    source = sm100.kernel_source(7168, 2048, config, KernelType.M_GROUPED_MASKED)
    assert [n for n, _ in source.config] == ["kGemmType", "SHAPE_N", "SHAPE_K", "BLOCK_M", "BLOCK_N", "kNumStages",
                                             "kNumMulticast", "kMulticastOnA", "kScaleUE8M0", "kSmemSize",
                                             "kNumTmemCols"]
    assert "GemmType::MGroupedMasked" in source.code() and source.header == "deep_gemm/sm100/fp8_gemm_1d2d.cuh"
    ue8m0 = build_sm100_config(4096, 7168, 128, 128, 148, SCALES_UE8M0)
    assert sm100.kernel_source(7168, 2048, ue8m0).name.endswith("_ue8m0")
    with pytest.raises(NotImplementedError, match="psum"):
        sm100.kernel_source(7168, 2048, config, KernelType.M_GROUPED_PSUM)


def test_ue8m0_rounds_scales_up_to_powers_of_two():
    sf = torch.tensor([1.0, 1.5, 0.75, 2.0 ** -20, 3e-3, 448.0])
    rounded = ceil_to_ue8m0(sf)
    assert torch.equal(rounded, torch.tensor([1.0, 2.0, 1.0, 2.0 ** -20, 2.0 ** -8, 512.0]))
    assert torch.equal(sm100.ue8m0_exponents(sf), torch.tensor([127, 128, 127, 107, 119, 136], dtype=torch.int32))


@pytest.mark.parametrize("shape", [(5, 1), (130, 7), (3, 33, 9)])
def test_pack_matches_deepgemms_packed_layout(shape):
    torch.manual_seed(0)
    sf = torch.rand(shape) * 10 + 1e-3
    packed = sm100.pack_ue8m0(sf)
    *batch, mn, kb = shape
    kg = -(-kb // 4)
    assert packed.shape == (*batch, kg, mn) and packed.dtype == torch.int32
    assert packed.stride(-1) == 1 and (kg == 1 or packed.stride(-2) == -(-mn // 4) * 4)
    # The same bytes as the utils' packing of the rounded scales (padded with 2^-127 scales, byte 0).
    padded = torch.nn.functional.pad(ceil_to_ue8m0(sf), (0, kg * 4 - kb), value=2.0 ** -127)
    padded = torch.where(padded == 2.0 ** -127, torch.zeros(()), padded)
    expected = pack_ue8m0_to_int(padded)  # [..., mn, kg]
    assert torch.equal(packed.transpose(-1, -2), expected)


def test_rows_of_block_scales():
    sb = torch.arange(6, dtype=torch.float32).view(1, 3, 2)  # [G, ceil(n/128), kb]
    rows = sm100.rows_of_block_scales(sb, 300)
    assert rows.shape == (1, 300, 2)
    assert torch.equal(rows[0, 0], sb[0, 0]) and torch.equal(rows[0, 255], sb[0, 1]) and torch.equal(rows[0, 299],
                                                                                                   sb[0, 2])


def test_runtime_kernels_cover_both_paths_and_need_expected_m_for_masked():
    dense = sm100.runtime_kernels(7168, 2048, 148, "sm_100a")
    assert dense and all("kScaleUE8M0=false" in s.instantiation() for s in dense)
    ue8m0 = sm100.runtime_kernels(7168, 2048, 148, "sm_100a", scales=SCALES_UE8M0)
    assert ue8m0 and all("kScaleUE8M0=true" in s.instantiation() for s in ue8m0)
    with pytest.raises(ValueError, match="expected_m"):
        sm100.runtime_kernels(7168, 2048, 148, "sm_100a", KernelType.M_GROUPED_MASKED)
    masked = sm100.runtime_kernels(7168, 2048, 148, "sm_100a", KernelType.M_GROUPED_MASKED, ms=[256, 512],
                                   num_groups=4)
    assert masked


def test_selftest_problems_are_ragged():
    for m, n, k in sm100_selftest._SELFTEST_SHAPES:
        assert n % 8 == 0 and k % 16 == 0  # TMA-legal operands
    assert any(m % 128 for m, _, _ in sm100_selftest._SELFTEST_SHAPES)
    assert any(k % 128 for _, _, k in sm100_selftest._SELFTEST_SHAPES)
    assert sm100_selftest.SELFTEST_BOUND == {SCALES_FP32: 1e-5, SCALES_UE8M0: 1e-4}


def test_selftest_problems_are_registered_and_cover_every_kernel():
    """The gate (deep_gemm/selftest.py) runs the problems deep_gemm registered; each (kind, scale path) of this family
    runs as one of its variants."""
    assert selftest._problems is sm100_selftest.run_selftest
    served = {v.name for v in sm100.FAMILY.variants}
    assert {deep_gemm.runtime.VARIANTS[op].name for op in sm100_selftest._OPS.values()} == served
    assert set(sm100_selftest._OPS) == {(kind, scales) for kind in sm100.KINDS for scales in (SCALES_FP32,
                                                                                               SCALES_UE8M0)}


def _cached_kernels(root) -> dict:
    import json
    import os
    found = {}
    for entry in os.listdir(os.path.join(str(root), "cache")):
        with open(os.path.join(str(root), "cache", entry, "meta.json")) as f:
            meta = json.load(f)
        found[meta["kernel"]] = (meta, os.path.join(str(root), "cache", entry))
    return found


def test_cli_compile_sm100a_writes_cubins(tmp_path, monkeypatch, capsys):
    """`python -m deep_gemm compile --arch sm_100a` (no GPU): the sm100 kernels of both scale paths, as cubins."""
    import os

    from deep_gemm.__main__ import main
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache_root"))
    args = ["compile", "--arch", "sm_100a", "--m", "64", "4096", "--n", "7168", "--k", "2048", "--only-m", "--quiet",
            "--jobs", "1"]
    assert main(args) == 0
    assert "sm count 148" in capsys.readouterr().out
    expected = {s.instantiation() for scales in (SCALES_FP32, SCALES_UE8M0)
                for s in sm100.runtime_kernels(7168, 2048, 148, "sm_100a", ms=[64, 4096], scales=scales)}
    cached = _cached_kernels(tmp_path / "cache_root")
    assert set(cached) == expected
    for meta, entry in cached.values():
        assert meta["arch"] == "sm_100a"
        cubins = [f for f in os.listdir(entry) if f.endswith(".cubin")]
        assert cubins, entry
        with open(os.path.join(entry, cubins[0]), "rb") as f:
            assert f.read(4) == b"\x7fELF"
    # Families without an sm100 kernel are refused with a one-line error naming them.
    assert main(["compile", "--arch", "sm_100a", "--family", "wgrad", "--m", "128", "--n", "256", "--k", "128"]) == 2
    assert "no sm_100a kernel for the wgrad family" in capsys.readouterr().err


@pytest.mark.parametrize("lead, mn, kb", [((), 300, 9), ((3,), 130, 5), ((), 1, 1), ((2,), 64, 4)])
def test_packed_scales_are_taken_as_they_are(lead, mn, kb):
    sf = torch.rand((*lead, mn, kb)) + 0.5
    kernel_layout = sm100.pack_ue8m0(sf)                      # [*lead, kg, mn'][..., :mn]: what the kernel reads
    caller_layout = kernel_layout.transpose(-1, -2)          # [*lead, mn, kg], MN-major: the utils' packed layout
    view = sm100.packed_scales_view(caller_layout, "lhs[1] (SA)", lead, mn, kb)
    assert view.shape == kernel_layout.shape and torch.equal(view, kernel_layout)
    assert view.stride() == kernel_layout.stride() or mn == 1 or -(-kb // 4) == 1


def test_packed_scales_are_checked():
    sf = torch.rand((300, 9)) + 0.5
    good = sm100.pack_ue8m0(sf).transpose(-1, -2)
    with pytest.raises(ValueError, match=r"int32 of shape \(300, 3\)"):
        sm100.packed_scales_view(good.float(), "lhs[1] (SA)", (), 300, 9)
    with pytest.raises(ValueError, match=r"rhs\[1\] \(SB\).*shape \(300, 2\)"):
        sm100.packed_scales_view(good, "rhs[1] (SB)", (), 300, 8)
    with pytest.raises(ValueError, match="MN-major"):
        sm100.packed_scales_view(good.contiguous(), "lhs[1] (SA)", (), 300, 9)  # K-major


class _FakeGemmLayout:
    """What a UE8M0 layout reads of the FP32 path's validated layout (fp8_gemm_1d2d_args.GemmLayout)."""

    def __init__(self, action="launch", ragged_n=False):
        self.action, self.ragged_n, self.num_sms, self.expected_m = action, ragged_n, 148, 0
        self.kind, self.arch, self.device = KernelType.NORMAL, "sm_100a", torch.device("cpu")
        self.ran = False

    @property
    def needs_kernel(self):
        return self.action == "launch"

    def run(self, *args):
        self.ran = True


@pytest.mark.parametrize("packed", [False, True])
def test_ue8m0_plumbing_hands_the_kernel_packed_scales(monkeypatch, packed):
    """Path (b) on CPU tensors with the validation and the launch faked: the validation sees FP32 scales of the
    documented shapes, and the kernel gets SFA [kg, m'] and SFB [kg, n'] (per row of B) packed from the FP32 scales,
    or the caller's packed scales as they are."""
    m, n, k = 130, 200, 576
    kb = -(-k // 128)
    a, b = torch.zeros((m, k), dtype=torch.float8_e4m3fn), torch.zeros((n, k), dtype=torch.float8_e4m3fn)
    sa, sb = torch.rand((m, kb)) + 0.1, torch.rand((-(-n // 128), kb)) + 0.1
    built, launched = {}, []
    monkeypatch.setattr(sm100, "build_plan", lambda kind, tensors, *rest: built.update(kind=kind, tensors=tensors,
                                                                                       scales=rest[-1]) or "plan")
    monkeypatch.setattr(sm100, "launch", lambda *args: launched.append(args))
    seen = {}

    def normalise(lhs, rhs, out):
        seen.update(sa=lhs[1], sb=rhs[1])
        return _FakeGemmLayout()

    lhs, rhs = (a, sa), (b, sb)
    if packed:
        lhs = (a, sm100.pack_ue8m0(sa).transpose(-1, -2))
        rhs = (b, sm100.pack_ue8m0(sm100.rows_of_block_scales(sb, n)).transpose(-1, -2))
    out = torch.empty((m, n), dtype=torch.bfloat16)
    layout = sm100._ue8m0_layout(normalise, lhs, rhs, out)
    assert layout.packed == packed
    assert seen["sa"].dtype == torch.float32 and seen["sa"].shape == (m, kb)
    assert seen["sb"].shape == (2, kb)
    assert layout.run(lhs, rhs, out) is None  # never a plan for `_C`: the scales launched are not the caller's
    _, sfa, _, sfb, target = built["tensors"]
    assert target is out and built["kind"] == KernelType.NORMAL and built["scales"] == SCALES_UE8M0
    assert torch.equal(sfa, sm100.pack_ue8m0(sa)) and sfa.stride() == (132, 1)
    assert torch.equal(sfb, sm100.pack_ue8m0(sm100.rows_of_block_scales(sb, n))) and sfb.stride() == (200, 1)
    assert launched == [("plan", tuple(t.data_ptr() for t in built["tensors"]))]
    layout.run(lhs, rhs, out)
    assert len(launched) == 2 and built["tensors"][0] is a  # the plan is kept per geometry: built once
    assert list(layout.plans) == [sm100.checks.tensor_geometry(built["tensors"])]


@pytest.mark.parametrize("action", ["none", "zero"])
def test_ue8m0_layouts_without_a_launch_run_the_validated_layout(monkeypatch, action):
    monkeypatch.setattr(sm100, "build_plan", lambda *args: pytest.fail("path (b) built a plan"))
    gemm = _FakeGemmLayout(action=action)
    layout = sm100.Ue8m0Layout(gemm, packed=False)
    assert not layout.needs_kernel
    layout.run((None, None), (None, None), None)
    assert gemm.ran


def test_ue8m0_variants_run_on_sm100_only():
    for name in ("dense_ue8m0", "contiguous_ue8m0", "masked_ue8m0"):
        assert deep_gemm.runtime.families_of(name, "sm_100a") == (sm100.FAMILY,)
        assert deep_gemm.runtime.families_of(name, "sm_90a") == ()


def test_compile_mode_loads_without_launching(monkeypatch):
    loaded = []
    monkeypatch.setattr(sm100, "build_plan", lambda *args: pytest.fail("built a plan in compile mode"))
    monkeypatch.setattr(sm100, "call_kernel", lambda kind, a, b, *rest: loaded.append((kind, rest[-1])))
    sm100.FAMILY.load(KernelType.NORMAL, None, None, 148, "sm_100a", 0, 0)  # the FP32 path's variants
    sm100.Ue8m0Layout(_FakeGemmLayout(), packed=False).load_kernel((None, None), (None, None), None)
    assert loaded == [(KernelType.NORMAL, SCALES_FP32), (KernelType.NORMAL, SCALES_UE8M0)]
