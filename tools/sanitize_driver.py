"""compute-sanitizer driver: every kernel family (every public GEMM in tests/gemm_cases.py) at representative and
edge shapes, each call checked (guards + values) and run twice (cold and warm launch paths); plus hostile inputs
whose values are not checked (broken contiguous indices, out-of-range masked_m) but must stay memory-safe.
Usage: python tools/sanitize_driver.py [--family NAME ...]   (tools/sanitize_all.sh runs it under each tool)"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from gemm_cases import SPEC_BY_NAME  # noqa: E402

PROBLEMS = {
    "gemm_fp8_fp8_bf16_nt": [dict(m=1024, n=2112, k=7168), dict(m=1, n=7, k=16), dict(m=129, n=4100, k=200),
                             dict(m=300, n=576, k=1000)],
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous": [dict(sizes=[700, 0, 300, 1], n=2112, k=576),
                                                  dict(sizes=[1], n=7, k=16), dict(sizes=[0, 0], n=256, k=128)],
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked": [
        dict(groups=4, m_max=192, n=256, k=576, masked=[0, 192, 57, 300], expected_m=96),
        dict(groups=2, m_max=1, n=8, k=16, masked=[1, 0], expected_m=0),
        dict(groups=8, m_max=256, n=2112, k=2048, masked=[256] * 8, expected_m=256)],
    "wgrad_gemm_fp8_fp8_fp32_nt": [dict(m=2048, n=2112, k=2048, sa_form="rows", sb_form="rows"),
                                   dict(m=1, n=1, k=16, sa_form="transposed", sb_form="col_major"),
                                   dict(m=300, n=100, k=1000, sa_form="rows", sb_form="transposed")],
    "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt": [dict(m=512, n=768, ks=[1024, 0, 512, 2048]),
                                             dict(m=129, n=100, ks=[256, 0, 1040, 16]),
                                             dict(m=7, n=9, ks=[16 * (i % 5) for i in range(100)])],
}


def hostile(name: str, case) -> None:
    """Inputs with undefined values but defined memory behaviour: run, then check only the guard bands."""
    if name == "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous":
        idx = case.args[3]
        g = case.args[1][0].shape[0]
        idx.copy_(torch.randint(-5, g + 5, idx.shape, device=idx.device, dtype=torch.int32))
    elif name == "m_grouped_gemm_fp8_fp8_bf16_nt_masked":
        mm = case.args[3]
        mm.copy_(torch.tensor([-7, 1 << 30] * (mm.numel() // 2) + [5] * (mm.numel() % 2), dtype=torch.int32))
    else:
        return
    case.guarded.reset()
    case.run()
    torch.cuda.synchronize()
    case.guarded.check_guards()
    print("  hostile inputs: guards ok", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", nargs="*", default=list(PROBLEMS))
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in args.family:
        spec = SPEC_BY_NAME[name]
        for i, problem in enumerate(PROBLEMS[name]):
            case = spec.build(problem, torch.device("cuda"), i)
            for attempt in ("cold", "warm"):
                case.guarded.reset()
                case.run()
                case.check()
            print(f"{name}: {case.desc}: ok", flush=True)
            hostile(name, case)
    print("all families done", flush=True)


if __name__ == "__main__":
    main()
