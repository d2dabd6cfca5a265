"""The sm_100a kernel family (include/deep_gemm/sm100/fp8_gemm_1d2d.cuh) compiled on the CPU machine, no GPU needed:
every instantiation the sm100 heuristics pick for DeepGEMM's test shapes (tests/sm100_cases.py), in both scale
paths, compiles with NVRTC and with nvcc, with no local memory (ptxas report); its PTX and SASS hold the tcgen05
instructions of its design (cuobjdump from the nvidia-cuda-cuobjdump wheel). Run with -s to see the numbers."""
import collections
import dataclasses
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm100 import SCALES_FP32, SCALES_UE8M0, build_sm100_config
from deep_gemm.families import sm100_fp8_gemm_1d2d
from deep_gemm.families.plan import POINTER, TENSOR_MAP, U32
from deep_gemm.families.sm100_fp8_gemm_1d2d import kernel_source
from deep_gemm.jit import CompileError
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler, check_ptxas_report
from sm100_cases import ARCH, deepgemm_test_instantiations
from tools import sass
from tools.sass import find_cuobjdump

INSTANTIATIONS = deepgemm_test_instantiations()
MANGLED_KERNEL = b"_ZN9deep_gemm5sm10018fp8_gemm_1d2d_impl"


@pytest.fixture(scope="module")
def nvrtc_builds():
    """instantiation -> (config, CompileResult with PTX and the ptxas report), compiled once per module."""
    compiler = NVRTCCompiler()
    return {name: (config, compiler.compile(source.code(), ARCH, want_ptx=True, ptxas_verbose=True))
            for name, (source, config) in INSTANTIATIONS.items()}


def test_instantiations_cover_every_mode():
    configs = [c for _, c in INSTANTIATIONS.values()]
    assert len(INSTANTIATIONS) >= 20
    assert {c.scales for c in configs} == {SCALES_FP32, SCALES_UE8M0}
    assert any(c.pair for c in configs), "no 2-CTA (cta_group::2) instantiation"
    assert any(not c.pair and c.num_multicast == 2 for c in configs), "no TMA-multicast instantiation"
    assert any(c.num_multicast == 1 for c in configs)
    kinds = {s.config[0][1].name.rsplit("::", 1)[1] for s, _ in INSTANTIATIONS.values()}
    assert kinds == {"Normal", "MGroupedContiguous", "MGroupedMasked"}


def test_nvrtc_compiles_every_instantiation_without_local_memory(nvrtc_builds):
    for name, (_, result) in nvrtc_builds.items():
        assert result.cubin[:4] == b"\x7fELF" and MANGLED_KERNEL in result.cubin, name
        check_ptxas_report(result.log, name)  # raises on a stack frame or spills


def test_ptx_holds_the_tcgen05_design(nvrtc_builds):
    for name, (config, result) in nvrtc_builds.items():
        ptx = result.ptx
        assert ".target sm_100a" in ptx and "vprintf" not in ptx, name
        group = "cta_group::2" if config.pair else "cta_group::1"
        assert f"tcgen05.alloc.{group}" in ptx and f"tcgen05.dealloc.{group}" in ptx, name
        assert f"tcgen05.relinquish_alloc_permit.{group}" in ptx, name
        assert f"tcgen05.commit.{group}.mbarrier::arrive::one" in ptx, name
        assert "tcgen05.ld.sync.aligned.32x32b.x8.b32" in ptx and "tcgen05.wait::ld" in ptx, name
        assert "tcgen05.fence::before_thread_sync" in ptx and "tcgen05.fence::after_thread_sync" in ptx, name
        if config.ue8m0:
            assert "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X" in ptx, name
            assert "tcgen05.cp.cta_group::1.32x128b.warpx4" in ptx, name
        else:
            assert f"tcgen05.mma.{group}.kind::f8f6f4" in ptx and "tcgen05.cp" not in ptx, name
        # 2-CTA MMAs: both CTAs' TMA loads complete on the even CTA's barrier; 1-CTA clusters multicast A or B.
        assert ("cp.async.bulk.tensor.2d.cta_group::2" in ptx) == config.pair, name
        assert (".multicast::cluster" in ptx) == (config.num_multicast > 1), name


def _opcodes(cubin: bytes, tool: str) -> collections.Counter:
    instructions = sass.pick_function(sass.disassemble(cubin, tool), "_impl")
    return collections.Counter(i.opcode for i in instructions)


def test_sass_has_tcgen05_mmas_and_no_local_memory(nvrtc_builds):
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install the `test` extra: nvidia-cuda-cuobjdump)")
    for name, (config, result) in nvrtc_builds.items():
        ops = _opcodes(result.cubin, tool)
        # NOTES: tcgen05.mma of FP8 operands disassembles to UTCQMMA (.2CTA for cta_group::2; the block-scaled kind
        # carries its two scale-factor TMEM operands), tcgen05.ld to LDTM, tcgen05.cp to UTCCP.
        mma = "UTCQMMA.2CTA" if config.pair else "UTCQMMA"
        # Every 128-wide K block issues 4 K = 32 MMAs; the (partly unrolled) K loop holds at least one block.
        assert ops[mma] >= 4 and ops[mma] % 4 == 0, (name, ops)
        assert not any(op.startswith("UTCQMMA") for op in ops if op != mma), (name, ops)
        assert sum(n for op, n in ops.items() if op.startswith("LDTM")) >= 1, (name, ops)
        assert (sum(n for op, n in ops.items() if op.startswith("UTCCP")) > 0) == config.ue8m0, (name, ops)
        assert not any(op.startswith(("LDL", "STL")) for op in ops), (name, ops)


def test_nvcc_compiles_every_instantiation_without_local_memory():
    compiler = NVCCCompiler()
    items = list(INSTANTIATIONS.items())

    def build(item):
        name, (source, _) = item
        return name, compiler.compile(source.code(), ARCH, ptxas_verbose=True)

    # NOTES: nvcc runs in subprocesses, so threads compile in parallel (about 0.6 s per kernel on 2 cores).
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, result in pool.map(build, items):
            assert result.cubin[:4] == b"\x7fELF" and MANGLED_KERNEL in result.cubin, name
            check_ptxas_report(result.log, name)


@pytest.mark.parametrize("arch", ["sm_100f"])
def test_family_specific_target_compiles(arch):
    source, _ = next(iter(INSTANTIATIONS.values()))
    assert NVRTCCompiler().compile(source.code(), arch).cubin[:4] == b"\x7fELF"


def _config(**changes):
    base = build_sm100_config(4096, 7168, 128, 128, 148, SCALES_FP32)
    return dataclasses.replace(base, **changes) if changes else base


def _raw(config, **changes):
    """A config object whose fields skip Sm100Config's own checks (what a buggy host would send)."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    fields.update(changes)
    raw = object.__new__(type(config))
    for key, value in fields.items():
        object.__setattr__(raw, key, value)
    return raw


@pytest.mark.parametrize("changes, message", [
    (dict(smem_size=None), "shared-memory size"),
    (dict(tmem_cols=512), "tensor-memory allocation"),
])
def test_host_device_budget_mismatch_fails_to_compile(changes, message):
    config = _config()
    if changes.get("smem_size", 0) is None:
        changes["smem_size"] = config.smem_size + 1024
    with pytest.raises(CompileError, match=message):
        NVRTCCompiler().compile(kernel_source(7168, 2048, _raw(config, **changes)).code(), ARCH)


def test_device_rejects_what_the_host_never_picks():
    # 256-row tiles of the contiguous layout would span two experts' 128-row segments.
    pair = build_sm100_config(4096, 7168, 256, 128, 148, SCALES_FP32)
    with pytest.raises(CompileError, match="expert segments"):
        NVRTCCompiler().compile(kernel_source(7168, 2048, pair, KernelType.M_GROUPED_CONTIGUOUS).code(), ARCH)
    # The UE8M0 path runs one CTA per tile.
    with pytest.raises(CompileError, match="one CTA per tile"):
        NVRTCCompiler().compile(kernel_source(7168, 2048, _raw(pair, scales=SCALES_UE8M0,
                                                               tmem_cols=512)).code(), ARCH)


def _kernel_param_sizes(cubin: bytes, tool: str, tmp_path) -> list:
    """The kernel's parameter sizes by ordinal, from the cubin's EIATTR_KPARAM_INFO records (cuobjdump -elf)."""
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([tool, "-elf", str(path)], capture_output=True, text=True, check=True).stdout
    record = r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x[0-9a-f]+\s+Size\s*:\s*0x([0-9a-f]+)"
    found = {int(o, 16): int(s, 16) for o, s in re.findall(record, text)}
    return [found[i] for i in range(len(found))]


@pytest.mark.parametrize("kind", [KernelType.NORMAL, KernelType.M_GROUPED_MASKED], ids=lambda k: k.value)
@pytest.mark.parametrize("scales", [SCALES_FP32, SCALES_UE8M0])
def test_host_parameters_match_the_kernel_signature(kind, scales, tmp_path):
    """`kernel_params` (what `_C` passes, by pointer per parameter) has the kernel's parameter count and sizes."""
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install the `test` extra: nvidia-cuda-cuobjdump)")
    config = build_sm100_config(4096, 7168, 128, 128, 148, scales)
    cubin = NVRTCCompiler().compile(kernel_source(7168, 2048, config, kind).code(), ARCH).cubin
    geometry = sm100_fp8_gemm_1d2d.Geometry(k=2048, n=7168, num_groups=4, rows=4 * 256, shape_m=256, a_row_stride=2048,
                                       b_row_stride=2048, out_row_stride=7168, sa_stride=256, sfb_stride=7168)
    params = sm100_fp8_gemm_1d2d.kernel_params(kind, config, geometry)
    params.launch(1, 1, 0, 1)  # every declared parameter was filled
    sizes = [{TENSOR_MAP: 128, POINTER: 8, U32: 4}[kind] for _, kind in sm100_fp8_gemm_1d2d.PARAMS]
    assert sizes == _kernel_param_sizes(cubin, tool, tmp_path)
