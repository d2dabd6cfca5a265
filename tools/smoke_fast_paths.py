"""Run a multicast, a straddling and a ragged-k problem through each launch path (Python, pip-built C++ module,
torch-built C++ module), with fresh tensors every call; prints calc_diff per path. Used under compute-sanitizer."""
import torch

import deep_gemm
from deep_gemm.ops import gemm as gemm_mod
from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token


def run(m, n, k):
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda"))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda"))
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8, sb), out)
    return calc_diff(out, dequant_per_token(a8, sa) @ dequant_per_block(b8, sb).t())


def main():
    from deep_gemm import _C
    from deep_gemm.jit import torch_ext
    gemm_mod._torch_ext_state["started"] = True
    for name, module in (("python", None), ("cpython_api", _C), ("torch_ext", torch_ext.build())):
        gemm_mod._fast = gemm_mod._init_fast_module(module) if module is not None else None
        diffs = [run(m, n, k) for m, n, k in ((4096, 4096, 4096), (4096, 4096, 4096), (130, 2104, 576),
                                              (130, 2104, 576), (65, 2112, 208), (65, 2112, 208))]
        fast = module.stats()["fast"] if module is not None else 0
        print(f"path {name}: max calc_diff {max(diffs):.2e}, fast launches {fast}")
        assert max(diffs) < 1e-5


if __name__ == "__main__":
    main()
