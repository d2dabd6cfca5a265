"""Compile mode (deep_gemm.runtime.set_compile_mode) on the CPU: the flag, and that a GEMM call reaches its
layout's `load_kernel` but never `run` (the launch), through the real `_C.call` entry. GPU side:
tests/gpu/test_warmup_gpu.py."""
import pytest
import torch

import deep_gemm
from deep_gemm import runtime
from deep_gemm.runtime import Op


class FakeLayout:
    """A validated layout that records what the runtime asks of it."""

    def __init__(self):
        self.device = torch.device("cpu")
        self.calls = []

    def run(self, *args):
        self.calls.append("run")

    def load_kernel(self, *args):
        self.calls.append("load_kernel")


@pytest.fixture
def fake_dense(monkeypatch):
    layout = FakeLayout()
    monkeypatch.setitem(runtime._normalisers, Op.DENSE, lambda *args: layout)
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
    monkeypatch.setitem(runtime._normalisers, Op.PACK_UE8M0, lambda *args: layout)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    deep_gemm.set_compile_mode(True)
    try:
        runtime._slow_path(Op.PACK_UE8M0, (torch.zeros(4, 4), torch.zeros(4, 1, dtype=torch.int32)), None)
    finally:
        deep_gemm.set_compile_mode(False)
    assert layout.calls == ["run"]
