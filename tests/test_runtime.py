"""The runtime on the CPU: compile mode (deep_gemm.runtime.set_compile_mode: a GEMM call reaches its layout's
`load_kernel` but never `run`, through the real `_C.call` entry; GPU side: tests/gpu/test_warmup_gpu.py), and the
registry's arch dispatch."""
import dataclasses

import pytest
import torch

import deep_gemm
from deep_gemm import runtime
from deep_gemm.runtime import Op


class FakeLayout:
    """A validated layout that records what the runtime asks of it."""

    def __init__(self, needs_kernel: bool = False, arch: str = "sm_90a"):
        self.device = torch.device("cpu")
        self.needs_kernel = needs_kernel
        self.arch = arch
        self.family = None
        self.calls = []

    def run(self, *args):
        self.calls.append("run")

    def load_kernel(self, *args):
        self.calls.append("load_kernel")


def _fake_normaliser(monkeypatch, op: Op, layout) -> None:
    variants = list(runtime.VARIANTS)
    variants[op] = dataclasses.replace(variants[op], normalise=lambda *args: layout)
    monkeypatch.setattr(runtime, "VARIANTS", tuple(variants))


@pytest.fixture
def fake_dense(monkeypatch):
    layout = FakeLayout()
    _fake_normaliser(monkeypatch, Op.DENSE, layout)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # FakeLayout.device.index is None
    yield layout
    deep_gemm.set_compile_mode(False)


def _dense_args():
    a = torch.zeros((4, 128), dtype=torch.float8_e4m3fn)
    b = torch.zeros((8, 128), dtype=torch.float8_e4m3fn)
    return (a, torch.ones((4, 1))), (b, torch.ones((1, 1))), torch.zeros((4, 8), dtype=torch.bfloat16)


def test_flag_and_its_type_check():
    assert deep_gemm.get_compile_mode() is False
    deep_gemm.set_compile_mode(True)
    try:
        assert deep_gemm.get_compile_mode() is True
    finally:
        deep_gemm.set_compile_mode(False)
    assert deep_gemm.get_compile_mode() is False
    with pytest.raises(TypeError, match="enabled must be a bool"):
        deep_gemm.set_compile_mode(1)


def test_compile_mode_loads_the_kernel_and_never_runs(fake_dense):
    runtime.call(Op.DENSE, *_dense_args())
    assert fake_dense.calls == ["run"]
    deep_gemm.set_compile_mode(True)
    runtime.call(Op.DENSE, *_dense_args())
    assert fake_dense.calls == ["run", "load_kernel"]
    deep_gemm.set_compile_mode(False)
    runtime.call(Op.DENSE, *_dense_args())
    assert fake_dense.calls == ["run", "load_kernel", "run"]


def test_compile_mode_registers_no_plan_and_drops_the_cached_ones(fake_dense, monkeypatch):
    """A plan returned to `_C` would let later calls launch without asking Python."""
    deep_gemm.set_compile_mode(True)
    assert runtime._slow_path(Op.DENSE, _dense_args(), (1, 2, 3)) is None
    assert fake_dense.calls == ["load_kernel"]
    cleared = []
    monkeypatch.setattr(runtime, "_C", type("C", (), {"clear": staticmethod(lambda: cleared.append(1))}))
    deep_gemm.set_compile_mode(True)
    assert cleared == [1]


def test_scale_layout_transforms_still_run(monkeypatch):
    """Only GEMMs are compile-only: the UE8M0 packing runs (its output feeds the GEMMs)."""
    layout = FakeLayout()
    _fake_normaliser(monkeypatch, Op.PACK_UE8M0, layout)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    deep_gemm.set_compile_mode(True)
    try:
        runtime._slow_path(Op.PACK_UE8M0, (torch.zeros(4, 4), torch.zeros(4, 1, dtype=torch.int32)), None)
    finally:
        deep_gemm.set_compile_mode(False)
    assert layout.calls == ["run"]


@pytest.mark.parametrize("arch, family", [("sm_90a", "sm90_fp8_gemm_1d2d"), ("sm_100a", "sm100_fp8_gemm_1d2d")])
def test_a_launching_layout_is_bound_to_its_arch_family(monkeypatch, arch, family):
    layout = FakeLayout(needs_kernel=True, arch=arch)
    _fake_normaliser(monkeypatch, Op.DENSE, layout)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    runtime._slow_path(Op.DENSE, _dense_args(), None)
    assert layout.family.name == family and layout.calls == ["run"]


def test_no_family_on_the_arch_names_the_public_op(monkeypatch):
    _fake_normaliser(monkeypatch, Op.BMM, FakeLayout(needs_kernel=True, arch="sm_100a"))
    with pytest.raises(NotImplementedError, match=r"^bmm_fp8_fp8_bf16_nt has no kernel for sm_100a yet \(device cpu\)"):
        runtime._slow_path(Op.BMM, _dense_args(), None)
    _fake_normaliser(monkeypatch, Op.WGRAD, FakeLayout(needs_kernel=True, arch="sm_80"))
    with pytest.raises(NotImplementedError, match="wgrad_gemm_fp8_fp8_fp32_nt has no kernel for sm_80"):
        runtime._slow_path(Op.WGRAD, _dense_args(), None)


def test_a_layout_that_launches_nothing_needs_no_family(monkeypatch):
    layout = FakeLayout(needs_kernel=False, arch="sm_80")
    _fake_normaliser(monkeypatch, Op.DENSE, layout)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    runtime._slow_path(Op.DENSE, _dense_args(), None)
    assert layout.family is None and layout.calls == ["run"]


def test_ops_signatures_and_dispatch_come_from_the_registry():
    names = [v.name for v in runtime.VARIANTS]
    assert len(set(names)) == len(names)
    assert [op.name.lower() for op in Op] == names and [int(op) for op in Op] == list(range(len(names)))
    for family in runtime.FAMILIES:
        for variant in family.variants:
            for arch in family.archs:
                assert runtime.families_of(variant.name, arch) == (family,)
    assert runtime.families_of("bmm", "sm_100a") == ()
    assert runtime.families_of("pack_ue8m0", "sm_80")[0].name == "sf_layout"
