"""Host-side choices of the sm90 BF16 family that need no GPU: the sum over batches in clusters (einsum
`bmk,bnk->mn` as one launch) for short walks, its kernel the K-split kernel (DeepGEMM's name for it) on the dense
tile walk; long walks take K splits into partial sums."""
import pytest

from deep_gemm.families.sm90_bf16_gemm import FUNCTION_K_SPLITS, KernelKind, kernel_choice, kernel_source
from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm90_bf16 import (CLUSTER_SUM_MAX_K_BLOCKS, CLUSTER_SUM_SPLITS, build_bf16_config,
                                           sums_in_clusters)
from deep_gemm.testing import forced_config

IN_CLUSTERS = KernelKind(False, False, True, True, KernelType.NORMAL, batch_splits_k=True)


def test_sum_in_clusters_config():
    # Unforced: the heuristic's 64-wide tiles in clusters of the largest CLUSTER_SUM_SPLITS that all fit (6 tiles in
    # clusters of 16); a forced config must split K.
    picked = kernel_choice(128, 384, 132, IN_CLUSTERS)
    assert (picked.block_m, picked.block_n, picked.cluster_k_splits) == (128, 64, 16)
    with forced_config(build_bf16_config(128, 384, 128, 128, 132, 4)):
        with pytest.raises(ValueError, match="cluster_k_splits > 1"):
            kernel_choice(128, 384, 132, IN_CLUSTERS)
    config = build_bf16_config(128, 384, 128, 128, 132, 4, cluster_k_splits=8)
    with forced_config(config):
        assert kernel_choice(128, 384, 132, IN_CLUSTERS) == config
    source = kernel_source(384, config, IN_CLUSTERS)
    assert source.function == FUNCTION_K_SPLITS
    named = dict(source.config)
    assert named["kGemmType"].name.endswith("Normal") and named["kBatchSplitsK"]
    assert named["kClusterSplitsK"] == 8 and named["kAccumulate"]


def test_partial_sums_refuse_a_forced_cluster_config():
    # The K splits into partial sums (a batched walk) have no cluster form: refused on the host, not left to the
    # kernel's static assert at compile time.
    partials = KernelKind(False, False, True, False, KernelType.BATCHED, batch_splits_k=True)
    with forced_config(build_bf16_config(128, 384, 128, 128, 132, 4, cluster_k_splits=2)):
        with pytest.raises(ValueError, match="only in clusters"):
            kernel_choice(128, 384, 132, partials)


def test_short_walks_sum_in_clusters():
    # DeepGEMM's test_einsum shapes: s = 129 in clusters (measured faster), s = 4096 and 8192 as K splits.
    for m, n, k in ((128, 384, 128), (256, 256, 256), (384, 128, 384)):
        assert sums_in_clusters(m, n, 129, k, 132)
        assert not sums_in_clusters(m, n, 4096, k, 132) and not sums_in_clusters(m, n, 8192, k, 132)
    assert sums_in_clusters(64, 64, CLUSTER_SUM_MAX_K_BLOCKS, 64, 132)
    assert not sums_in_clusters(64, 64, CLUSTER_SUM_MAX_K_BLOCKS + 1, 64, 132)
    assert not sums_in_clusters(64, 66, 1, 64, 132)  # an FP32 row of 66 is not whole 16-byte chunks
    assert not sums_in_clusters(64, 64, 1, 64, min(CLUSTER_SUM_SPLITS) - 1)  # too few SMs for one cluster
