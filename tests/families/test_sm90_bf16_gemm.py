"""Host-side choices of the sm90 BF16 family that need no GPU: the sum over batches in clusters (einsum
`bmk,bnk->mn` as one launch) runs only under a forced configuration of cluster K splits, and its kernel is the K-split
kernel (DeepGEMM's name for it) on the dense tile walk."""
import pytest

from deep_gemm.families.sm90_bf16_gemm import FUNCTION_K_SPLITS, KernelKind, kernel_choice, kernel_source
from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
from deep_gemm.testing import forced_config

IN_CLUSTERS = KernelKind(False, False, True, True, KernelType.NORMAL, batch_splits_k=True)


def test_sum_in_clusters_needs_a_forced_cluster_config():
    with pytest.raises(ValueError, match="forced configuration"):
        kernel_choice(128, 384, 132, IN_CLUSTERS)
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
