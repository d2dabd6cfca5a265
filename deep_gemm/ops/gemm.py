"""Dense FP8 GEMM (DeepGEMM-compatible): out = dequant(A) @ dequant(B)^T in BF16."""
from typing import Tuple

import torch

from ..heuristics.common import align, ceil_div
from ..launchers import sm90_fp8_gemm_1d2d
from ..utils import get_col_major_tma_aligned_tensor, get_device_arch, get_num_sms
from . import checks


def gemm_fp8_fp8_bf16_nt(lhs: Tuple[torch.Tensor, torch.Tensor], rhs: Tuple[torch.Tensor, torch.Tensor],
                         out: torch.Tensor) -> None:
    """out[m, n] = (A * SA) @ (B * SB)^T.

    lhs = (A [m, k] float8_e4m3fn, SA [m, ceil(k/128)] float32, one scale per 1x128 group of a row);
    rhs = (B [n, k] float8_e4m3fn, SB [ceil(n/128), ceil(k/128)] float32, one scale per 128x128 block);
    out [m, n] bfloat16. Scales multiply (x ~= x_fp8 * scale). SA may be row-major; it is converted to the
    MN-major TMA-aligned layout (no copy when it already is, see `get_col_major_tma_aligned_tensor`).
    Runs on the current stream of the tensors' device; m = 0 or n = 0 returns at once; k = 0 writes zeros.
    A, B and out need 16-byte aligned row strides (TMA); when n % 8 != 0 the result goes through an aligned
    temporary and one extra copy, because TMA stores write whole 16-byte chunks.
    """
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    checks.check_tensor(b, "rhs[0] (B)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 2)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    m, k = a.shape
    n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"rhs[0] (B) must have shape (n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(out, "out", (m, n), "m x n")
    kb = ceil_div(k, 128)
    checks.check_shape(sa, "lhs[1] (SA)", (m, kb), "m x ceil(k/128)")
    checks.check_shape(sb, "rhs[1] (SB)", (ceil_div(n, 128), kb), "ceil(n/128) x ceil(k/128)")
    device = checks.check_same_cuda_device([("lhs[0] (A)", a), ("lhs[1] (SA)", sa), ("rhs[0] (B)", b),
                                            ("rhs[1] (SB)", sb), ("out", out)])
    if m == 0 or n == 0:
        return
    # NOTES: a TMA store writes whole 16-byte chunks of a row: with n % 8 != 0 the last chunk would spill into
    # whatever follows the row (measured on the H200), so such outputs go through an aligned temporary.
    ragged_n = n % 8 != 0
    if ragged_n:
        if n > 1 and out.stride(1) != 1:
            raise ValueError(f"out must have a contiguous inner dimension (stride(1) == 1), got strides {out.stride()}")
    else:
        checks.check_tma_matrix(out, "out")
    checks.check_no_overlap(out, "out", [("lhs[0] (A)", a), ("lhs[1] (SA)", sa), ("rhs[0] (B)", b),
                                         ("rhs[1] (SB)", sb)])
    if k == 0:
        out.zero_()
        return
    checks.check_tma_matrix(a, "lhs[0] (A)")
    checks.check_tma_matrix(b, "rhs[0] (B)")
    arch = get_device_arch(device.index)
    if arch != "sm_90a":
        raise NotImplementedError(f"gemm_fp8_fp8_bf16_nt has no kernel for {arch} yet (device {device})")
    sa = get_col_major_tma_aligned_tensor(sa)
    if not sb.is_contiguous():
        sb = sb.contiguous()
    # NOTES: switching devices costs microseconds; only do it for tensors off the current device.
    if device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            _launch(a, sa, b, sb, out, m, n, ragged_n, device, arch)
    else:
        _launch(a, sa, b, sb, out, m, n, ragged_n, device, arch)


def _launch(a, sa, b, sb, out, m, n, ragged_n, device, arch) -> None:
    target = torch.empty((m, align(n, 8)), dtype=out.dtype, device=device) if ragged_n else out
    sm90_fp8_gemm_1d2d.launch(a, sa, b, sb, target, get_num_sms(device.index), arch)
    if ragged_n:
        out.copy_(target[:, :n])
