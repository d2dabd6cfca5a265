from .gemm import gemm_fp8_fp8_bf16_nt

__all__ = ["gemm_fp8_fp8_bf16_nt"]
