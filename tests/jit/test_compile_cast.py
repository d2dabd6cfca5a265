"""Compiling the FP8 casts (include/deep_gemm/sm90/fp8_cast.cuh) for sm_90a, no GPU needed: every kind, input type,
scale rounding and vector width builds with NVRTC without spills or local memory, converts with cvt.e4m3x2, moves
full vectors as 16-byte loads, issues every load of a thread before its first reduction (the loads in flight that a
memory-bound kernel lives on), and stays within its instruction budget (SASS through the cuobjdump wheel); and nvcc
builds it too."""
import re
from collections import Counter

import pytest

from deep_gemm.families.sm90_fp8_cast import kernel_source
from deep_gemm.heuristics.sm90_cast import GRAN, get_cast_config
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler
from tools import sass

ARCH = "sm_90a"
KINDS = ("per_token", "per_block", "per_channel")
# (kind, bf16, ue8m0, vec): full vectors of both input types with both scale roundings, and the narrowest vectors
# (ragged or unaligned rows).
CASES = [(kind, bf16, ue8m0, 8 if bf16 else 4) for kind in KINDS for bf16 in (True, False) for ue8m0 in (False, True)]
CASES += [(kind, bf16, False, 1) for kind in KINDS for bf16 in (True, False)] + [("per_token", True, True, 2)]
# And the launches of small problems: per token 512-thread CTAs, one round; per channel 8 lanes across a row.
CASES += [("per_token_small", True, False, 8), ("per_channel_small", True, False, 8)]
# SASS instructions of the whole kernel (set-up, fast path and the rolled loop of non-finite groups), measured + ~5%.
BUDGET = {("per_token", True, False): 960, ("per_token", True, True): 710, ("per_token", False, False): 800,
          ("per_token", False, True): 640, ("per_block", True, False): 890, ("per_block", True, True): 630,
          ("per_block", False, False): 1180, ("per_block", False, True): 940, ("per_channel", True, False): 1650,
          ("per_channel", True, True): 1250, ("per_channel", False, False): 1210, ("per_channel", False, True): 1020}


def _config(kind, bf16, vec):
    if kind == "per_token_small":
        return get_cast_config("per_token", 64, 7168, vec, 2 if bf16 else 4, 132)
    if kind == "per_channel_small":
        return get_cast_config("per_channel", 128, 2048, vec, 2 if bf16 else 4, 132)
    return get_cast_config(kind, 4096, 7168, vec, 2 if bf16 else 4, 132)  # per token: 4 rounds of groups per warp


def _loads_per_thread(kind, vec, config):
    if kind == "per_token":
        lanes = min(32, GRAN // vec)
        return config.rounds * GRAN // (lanes * vec)
    if kind == "per_block":
        return GRAN * GRAN // (config.num_threads * vec)
    return GRAN // (config.num_threads // config.lanes_per_row)  # per channel: a thread's rows


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{'bf16' if c[1] else 'fp32'}-"
                f"{'ue8m0' if c[2] else 'fp32sf'}-v{c[3]}")
def built(request):
    kind, bf16, ue8m0, vec = request.param
    config = _config(kind, bf16, vec)
    kind = kind.replace("_small", "")
    result = NVRTCCompiler().compile(kernel_source(kind, bf16, ue8m0, config).code(), ARCH, want_ptx=True,
                                     ptxas_verbose=True)
    return (kind, bf16, ue8m0, vec), config, result


def test_cast_ptx(built):
    (kind, bf16, ue8m0, vec), _, result = built
    assert result.cubin[:4] == b"\x7fELF" and b"fp8_cast_impl" in result.cubin
    assert "cvt.rn.satfinite.e4m3x2.f32" in result.ptx
    assert "ld.local" not in result.ptx and "st.local" not in result.ptx
    assert "vprintf" not in result.ptx
    if vec * (2 if bf16 else 4) == 16:
        assert "ld.global.nc.L1::no_allocate.v4.u32" in result.ptx


def test_cast_no_spills(built):
    _, _, result = built
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log


def test_cast_sass_loads_first_and_budget(built):
    tool = sass.find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump/nvdisasm not found (pip install the `test` extra)")
    (kind, bf16, ue8m0, vec), config, result = built
    instructions = sass.pick_function(sass.disassemble(result.cubin, tool), "fp8_cast_impl")
    opcodes = [i.opcode for i in instructions]
    counts = Counter(i.base for i in instructions)
    assert counts["LDL"] == counts["STL"] == 0
    # Every load of the fast path comes before the first reduction (the rare path's loads, one element at a time in
    # a loop, come after it).
    first_reduction = next(n for n, op in enumerate(opcodes) if op.startswith(("SHFL", "REDUX", "BAR", "STS")))
    loads = [n for n, op in enumerate(opcodes[:first_reduction]) if op.startswith("LDG")]
    assert len(loads) == _loads_per_thread(kind, vec, config), opcodes
    if vec * (2 if bf16 else 4) == 16:
        assert all(".128" in opcodes[n] for n in loads)
    if vec * (2 if bf16 else 4) == 16:
        budget = BUDGET[(kind, bf16, ue8m0)]
        print(f"\n{kind} bf16={bf16} ue8m0={ue8m0}: {len(instructions)} instructions (budget {budget})")
        assert len(instructions) <= budget


def test_cast_nvcc_compiles():
    source = kernel_source("per_token", True, False, _config("per_token", True, 8))
    assert "cvt.rn.satfinite.e4m3x2.f32" in NVCCCompiler().compile(source.code(), ARCH, want_ptx=True).ptx
