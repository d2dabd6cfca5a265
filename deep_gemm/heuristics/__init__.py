"""Kernel-configuration heuristics: pure Python, no GPU needed, memoised."""
from .common import GemmProblem, GemmConfig, KernelType, SwiGLU
from .sm90 import get_sm90_config, sm90_smem_size

__all__ = ["GemmProblem", "GemmConfig", "KernelType", "SwiGLU", "get_config", "get_sm90_config", "sm90_smem_size"]


def get_config(problem: GemmProblem) -> GemmConfig:
    """Pick the kernel configuration for `problem` on its architecture."""
    if problem.arch == "sm_90a":
        return get_sm90_config(problem)
    raise ValueError(f"no kernel for arch {problem.arch!r} yet (supported: sm_90a)")
