"""Compiling the sm90 BF16 GEMM (include/deep_gemm/sm90/bf16_gemm.cuh) for sm_90a in every operand layout and
output mode, no GPU needed: the PTX carries the BF16 WGMMA with the layout's transpose flags and the right D store
(TMA, or with cluster K splits the partial tiles' exchange through distributed shared memory and plain stores),
nothing spills, and the K loop stays within its instruction budget (tools/sass.py's measure)."""
import dataclasses
import re

import pytest

from deep_gemm.families.sm90_bf16_gemm import KernelKind, kernel_choice, kernel_source
from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
from deep_gemm.jit import CompileError
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler
from tools import sass

ARCH = "sm_90a"


def _kind(name: str) -> KernelKind:
    """nt / nn / tn / tt (DeepGEMM's names: a's then b's layout, n = K-major for a, t = MN-major for a; for b,
    t = K-major ([n, k]) and n = MN-major ([k, n])), plus the output: bf16, fp32, or +acc (accumulate into d);
    then "heads" (the einsums' per-head batched GEMM), "ksplits" (the K splits of a sum over batches) or
    "clustersum" (that sum in one launch over clusters)."""
    layout, out, form = name.split("-")[:3]
    kind = KernelKind(layout[0] == "t", layout[1] == "n", out.startswith("fp32"), out.endswith("+acc"))
    if form in ("heads", "ksplits"):
        kind = dataclasses.replace(kind, gemm_type=KernelType.BATCHED, batch_splits_k=form == "ksplits")
    if form == "clustersum":  # the sum over batches in one dense launch whose clusters cut the walk
        kind = dataclasses.replace(kind, batch_splits_k=True)
    if form in ("contiguous", "masked"):
        kind = dataclasses.replace(kind, gemm_type=KernelType.M_GROUPED_CONTIGUOUS if form == "contiguous"
                                   else KernelType.M_GROUPED_MASKED)
    return kind


# name -> (m, n, config): heuristic picks of DeepGEMM's test_bf16 shapes, and forced tiles for the kernel's corners.
CONFIGS = {
    "nt-bf16-4096x7168": (4096, 7168, None),
    "nt-bf16+acc-128x2112": (128, 2112, None),
    "nn-bf16-4096x7168": (4096, 7168, None),                # dgrad: B MN-major
    "tn-fp32+acc-7168x2112": (7168, 2112, None),             # wgrad: both MN-major, FP32 accumulate
    "tt-fp32-1x576": (1, 576, None),
    "nt-fp32-256x256-bm256": (256, 256, build_bf16_config(256, 256, 256, 128, 132, 4)),  # two sub-tiles per warpgroup
    "nt-bf16-64x48-bn48": (64, 48, build_bf16_config(64, 48, 64, 48, 132, 2)),            # 32-byte D swizzle
    "nt-bf16-heads-4096x512": (4096, 512, None),   # einsum bhr,hdr->bhd (h = 8, r = 4096, d = 512)
    "nn-bf16-heads-128x512": (128, 512, None),     # einsum bhd,hdr->bhr: each head's B MN-major
    "nt-fp32-ksplits-128x384": (128, 384, None),   # einsum bmk,bnk->mn
    "nt-fp32+acc-clustersum-128x384-ks8": (128, 384, build_bf16_config(128, 384, 128, 128, 132, 4,
                                                                       cluster_k_splits=8)),  # (forced only)
    # Cluster K splits: the heuristic's decode picks, and forced corners (FP32 accumulate, MN-major, 2 M blocks).
    "nt-bf16-1x2112": (1, 2112, None),
    "nt-bf16-4096x2112": (4096, 2112, None),   # B shared over 2-CTA clusters
    "nt-fp32-4096x7168-mcA": (4096, 7168, build_bf16_config(4096, 7168, 256, 128, 132, 4, num_multicast=2)),
    # B shared by contiguous / masked pairs.
    "nt-bf16-contiguous-mcB": (32768, 7168, build_bf16_config(32768, 7168, 128, 192, 132, 2, num_multicast=2,
                                                              multicast_on_a=False,
                                                              kind=KernelType.M_GROUPED_CONTIGUOUS)),
    "nt-bf16-masked-mcB": (192, 4096, build_bf16_config(192, 4096, 128, 256, 132, 2, groups=32, num_multicast=2,
                                                        multicast_on_a=False, kind=KernelType.M_GROUPED_MASKED)),
    "nt-bf16+acc-128x576": (128, 576, None),
    # The einsums' heads with A shared by each head's N block pairs (forced: not picked yet).
    "nt-bf16-heads-4096x512-mcA": (4096, 512, build_bf16_config(4096, 512, 128, 128, 132, 2, groups=8,
                                                                num_multicast=2, kind=KernelType.BATCHED)),
    "nn-bf16-heads-4096x4096-mcA": (4096, 4096, build_bf16_config(4096, 4096, 128, 128, 132, 2, groups=8,
                                                                  num_multicast=2, kind=KernelType.BATCHED)),
    "tt-fp32+acc-7x200-ks5": (7, 200, build_bf16_config(7, 200, 64, 64, 132, 4, cluster_k_splits=5)),
    "nn-bf16-100x576-ks8": (100, 576, build_bf16_config(100, 576, 128, 64, 132, 2, cluster_k_splits=8)),
    # An MN-major B of two column chunks in a cluster (its descriptor's chunk stride must survive the cluster rank).
    "nn-bf16-64x512-ks2-bn128": (64, 512, build_bf16_config(64, 512, 64, 128, 132, 2, cluster_k_splits=2)),
    "tn-fp32+acc-4096x2304-mcA": (4096, 2304, build_bf16_config(4096, 2304, 128, 128, 132, 4, num_multicast=2)),
}
GROUPS = {"nt-bf16-heads-4096x512": 8, "nn-bf16-heads-128x512": 128, "nt-fp32-ksplits-128x384": 44,
          "nt-bf16-heads-4096x512-mcA": 8, "nn-bf16-heads-4096x4096-mcA": 8}
# Instructions per K block per math warp in the main loop, at most (measured + ~3%).
# At m >= 4096 the tiles share an operand over 2-CTA clusters: the release's remote arrivals add 1-3 instructions.
BUDGETS = {"nt-bf16-4096x7168": 54.0, "nn-bf16-4096x7168": 52.0, "tn-fp32+acc-7168x2112": 52.0,  # measured 52, 51, 50
           "nt-bf16-heads-4096x512": 52.0, "nt-fp32-ksplits-128x384": 55.0,                        # measured 51, 48
           "nt-bf16-1x2112": 50.0}  # measured 48 (cluster K splits)


def _source(name):
    m, n, config = CONFIGS[name]
    kind = _kind(name)
    config = config or kernel_choice(m, n, 132, kind, GROUPS.get(name, 1), k=7168)
    return kernel_source(n, config, kind), config, kind


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def built(request):
    source, config, kind = _source(request.param)
    result = NVRTCCompiler().compile(source.code(), ARCH, want_ptx=True, ptxas_verbose=True)
    return request.param, config, kind, result


def test_bf16_ptx(built):
    name, config, kind, result = built
    # The K splits carry DeepGEMM's kernel name for that einsum (its test profiles by it).
    expected_name = b"bmn_bnk_mn_gemm_impl" if kind.batch_splits_k else b"bf16_gemm_impl"
    assert result.cubin[:4] == b"\x7fELF" and expected_name in result.cubin
    ptx = result.ptx
    flags = f"p, 1, 1, {int(kind.mn_major_a)}, {int(kind.mn_major_b)};"
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.bf16\.bf16 [^;]*;", ptx)
    assert mma and set(mma) == {str(config.block_n)}, name
    assert flags in ptx, f"{name}: transpose flags {flags}"
    split = config.cluster_k_splits > 1
    assert ("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add" in ptx) == (kind.accumulate and not split), name
    assert ("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group" in ptx) == (not kind.accumulate and not split)
    assert ("multicast::cluster" in ptx) == (config.num_multicast > 1), name
    for exchange in ("ld.shared::cluster.v2.f32", "mbarrier.arrive.release.cluster.shared::cluster.b64",
                     "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"):
        assert (exchange in ptx) == split, f"{name}: {exchange}"
    assert "vprintf" not in ptx
    if kind.mn_major_b:  # the descriptor's start address is masked to its 14 bits (mma.cuh, desc_start_address)
        assert re.search(r"and\.b32\s+%r\d+, %r\d+, 16383;", ptx), name


def test_bf16_no_register_spills(built):
    name, _, _, result = built
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), f"{name}\n{result.log}"
    assert not sass.register_moves_problem(result.ptx, result.log, built[1].num_threads), name


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_bf16_main_loop(name):
    tool = sass.find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump/nvdisasm not found (pip install the `test` extra)")
    source, config, _ = _source(name)
    cubin = NVRTCCompiler().compile(source.code(), ARCH).cubin
    instructions = sass.pick_function(sass.disassemble(cubin, tool), "_impl")
    main = sass.main_loop(instructions, sass.mmas_per_k_block(config, 16))
    print(f"\n[{name}] {config}\n{main.format()}")
    assert main.num_mma % main.mmas_per_k_block == 0
    assert main.count("LDL", "STL", "R2UR") == 0, main.format(full=True)
    assert main.per_k_block <= BUDGETS[name], main.format(full=True)


def test_bf16_nvcc_compiles():
    source, _, _ = _source("tn-fp32+acc-7168x2112")
    assert "wgmma.mma_async" in NVCCCompiler().compile(source.code(), ARCH, want_ptx=True).ptx


def test_bf16_smem_mismatch_and_ragged_mn_major_tile_fail_to_compile():
    source, config, kind = _source("nt-bf16-64x48-bn48")
    with pytest.raises(CompileError, match="shared-memory size"):
        NVRTCCompiler().compile(kernel_source(48, dataclasses.replace(config, smem_size=config.smem_size + 16),
                                              kind).code(), ARCH)
    with pytest.raises(CompileError, match="MN-major B"):
        NVRTCCompiler().compile(kernel_source(48, config, dataclasses.replace(kind, mn_major_b=True)).code(), ARCH)
