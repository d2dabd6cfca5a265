"""The device headers (include/deep_gemm/): self-contained, and the generated WGMMA wrappers are current and valid."""
import importlib.util
import os
import re

import pytest

from deep_gemm.jit.compiler import NVRTCCompiler
from deep_gemm.jit.paths import project_headers, project_include_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WGMMA_WIDTHS = range(8, 257, 8)


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_wgmma", os.path.join(REPO, "tools", "gen_wgmma.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["wgmma_e4m3.cuh", "wgmma_bf16.cuh"])
def test_wgmma_header_matches_its_generator(name):
    gen = _load_generator()
    with open(os.path.join(project_include_dir(), "deep_gemm", "sm90", name)) as f:
        committed = f.read()
    assert committed == gen.render()[name], f"include/deep_gemm/sm90/{name} is stale: run tools/gen_wgmma.py"
    assert list(gen.WIDTHS) == list(WGMMA_WIDTHS)


def test_headers_include_only_project_headers():
    # NOTES: one CuTe/CCCL include costs seconds of NVRTC front-end time per kernel; the kernels need none.
    for rel in project_headers():
        with open(os.path.join(project_include_dir(), rel)) as f:
            includes = re.findall(r"^\s*#\s*include\s*([<\"][^>\"]+[>\"])", f.read(), re.M)
        for inc in includes:
            assert inc.startswith("<deep_gemm/"), f"{rel} includes {inc}: the kernels include only project headers"


@pytest.mark.parametrize("rel", sorted(project_headers()))
def test_every_header_compiles_on_its_own(rel):
    # A shell piece is included by kernels in any order: each header includes what it uses.
    arch = "sm_100a" if "/sm100/" in rel else "sm_90a"
    assert NVRTCCompiler().compile(f"#include <{rel}>\n__global__ void k() {{}}\n", arch).cubin[:4] == b"\x7fELF"


def test_both_arch_folders_name_the_shell_pieces_alike():
    # docs/kernel_shell.md: the two shells diff piece by piece.
    pieces = {"kernel_shell.cuh", "pipeline.cuh", "mainloop.cuh", "promotion.cuh", "mma.cuh", "epilogue.cuh",
              "scheduler.cuh"}
    for arch in ("sm90", "sm100"):
        files = set(os.listdir(os.path.join(project_include_dir(), "deep_gemm", arch)))
        assert pieces <= files, f"{arch} lacks {sorted(pieces - files)}"


ALL_WIDTHS_KERNEL = """
#include <deep_gemm/sm90/mma.cuh>

using namespace deep_gemm;

template <uint32_t N>
__device__ __forceinline__ void one_width(uint64_t desc_a, uint64_t desc_b, float* out) {
    float d[N / 2];
    #pragma unroll
    for (uint32_t i = 0; i < N / 2; ++i)
        d[i] = out[i];
    sm90::wgmma_fence();
    sm90::FP8WGMMA<N>::mma(desc_a, desc_b, d, true);
    sm90::wgmma_commit_group();
    sm90::wgmma_wait_group<0>();
    #pragma unroll
    for (uint32_t i = 0; i < N / 2; ++i)
        out[i] = d[i];
}

__global__ void all_widths(uint64_t desc_a, uint64_t desc_b, float* out) {
    static_for<32>([&](auto i) { one_width<(decltype(i)::value + 1) * 8>(desc_a, desc_b, out); });
}
"""


@pytest.fixture(scope="module")
def all_widths_ptx():
    return NVRTCCompiler().compile(ALL_WIDTHS_KERNEL, "sm_90a", want_ptx=True).ptx


@pytest.mark.parametrize("n", WGMMA_WIDTHS)
def test_every_wgmma_width_assembles(all_widths_ptx, n):
    # ptxas accepted the cubin; each width appears once, with N / 2 accumulator registers.
    found = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k32\.f32\.e4m3\.e4m3\s*\{{([^}}]*)\}}",
                       all_widths_ptx)
    assert len(found) == 1
    assert len(found[0].split(",")) == n // 2
