"""The sm_100a instantiations the sm100 heuristics pick for DeepGEMM's own test shapes (its tests/test_core.py), in
both scale paths: what the CPU tests compile (tests/jit/test_compile_sm100.py) and what the GPU tests run."""
from typing import Dict, Tuple

from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm100 import NUM_SMS_B200, SCALE_PATHS
from deep_gemm.families import sm100_fp8_gemm_1d2d

ARCH = "sm_100a"
# DeepGEMM's test_core.py: dense m x (k, n); contiguous (groups, expected m per group, k, n); masked (groups, expected
# m per group) x (k, n).
DENSE_MS = (64, 128, 4096)
DENSE_KN = ((576, 7168), (7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168))
CONTIGUOUS = ((4, 8192, 7168, 4096), (4, 8192, 2048, 7168), (8, 4096, 7168, 4096), (8, 4096, 2048, 7168),
              (32, 256, 7168, 4096), (32, 256, 2048, 7168))
MASKED_GROUPS = ((1, 1024), (2, 512), (4, 256))
MASKED_KN = ((7168, 4096), (2048, 7168))


def deepgemm_test_instantiations(num_sms: int = NUM_SMS_B200) -> Dict[str, Tuple]:
    """instantiation line -> (KernelSource, config) of every distinct kernel those shapes load."""
    found = {}

    def add(kind, n, k, ms, groups, scales):
        for m in ms:
            config = sm100_fp8_gemm_1d2d.kernel_config(m, n, k, num_sms, ARCH, kind, groups, scales)
            source = sm100_fp8_gemm_1d2d.kernel_source(n, k, config, kind)
            found.setdefault(source.instantiation(), (source, config))

    for scales in SCALE_PATHS:
        for k, n in DENSE_KN:
            add(KernelType.NORMAL, n, k, DENSE_MS, 1, scales)
        for groups, m, k, n in CONTIGUOUS:
            add(KernelType.M_GROUPED_CONTIGUOUS, n, k, (groups * m,), groups, scales)
        for groups, m in MASKED_GROUPS:
            for k, n in MASKED_KN:
                add(KernelType.M_GROUPED_MASKED, n, k, (m,), groups, scales)
    return found
