"""Dense FP8 GEMM (DeepGEMM-compatible): out = dequant(A) @ dequant(B)^T in BF16."""
import sys
import threading
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from ..heuristics.common import align, ceil_div
from ..launchers import sm90_fp8_gemm_1d2d
from ..envs import read_env
from ..jit import torch_ext
from ..jit.runtime import CUDADriverError
from ..utils import get_device_arch, get_num_sms, is_col_major_tma_aligned, on_num_sms_change, tma_ready_scales
from . import checks


@dataclass(frozen=True)
class _Layout:
    """What the full checks concluded for one combination of dtypes, shapes, strides, devices and SM cap."""
    action: str                 # "none" (m or n is 0), "zero" (k is 0) or "launch"
    m: int
    n: int
    k: int
    device: torch.device
    arch: str
    num_sms: int
    ragged_n: bool              # n % 8 != 0: go through an aligned temporary
    sa_ready: bool              # SA already MN-major with a TMA-aligned M stride (pointer still checked per call)
    sb_contiguous: bool
    extents: Tuple[int, ...]    # bytes spanned by (A, SA, B, SB, out), for the per-call overlap check


# NOTES: the full checks read every tensor attribute several times (~20 us from Python); in steady state a call
# only builds this key, checks the pointers (alignment, overlap) and launches.
_layouts: Dict[tuple, _Layout] = {}
_MAX_LAYOUTS = 4096


def _layout_key(lhs, rhs, out) -> Optional[tuple]:
    try:
        a, sa = lhs
        b, sb = rhs
        return (a.dtype, a.shape, a.stride(), a.device, sa.dtype, sa.shape, sa.stride(), sa.device,
                b.dtype, b.shape, b.stride(), b.device, sb.dtype, sb.shape, sb.stride(), sb.device,
                out.dtype, out.shape, out.stride(), out.device, get_num_sms(a.device.index)
                if a.device.type == "cuda" else None)
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None  # not even tensors: the full checks will say what is wrong


_INPUT_NAMES = ("lhs[0] (A)", "lhs[1] (SA)", "rhs[0] (B)", "rhs[1] (SB)")


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
    if torch.compiler.is_compiling():
        return checks.traced_call("gemm_fp8_fp8_bf16_nt", lhs, rhs, out)
    if _fast is not None:
        _fast.gemm(lhs, rhs, out)
    else:
        _python_path(lhs, rhs, out)


def _python_path(lhs, rhs, out, want_plan: bool = False) -> Optional[tuple]:
    """The whole call in Python: validate (cached per layout), then launch. With `want_plan`, returns a plan for
    the C++ fast path when later calls with this layout can skip Python, else None."""
    key = _layout_key(lhs, rhs, out)
    layout = _layouts.get(key) if key is not None else None
    if layout is None:
        layout = _check_layout(lhs, rhs, out)
        if key is not None:
            if len(_layouts) >= _MAX_LAYOUTS:
                _layouts.clear()
            _layouts[key] = layout
    if layout.action == "none":
        return None
    a, sa = lhs
    b, sb = rhs
    tensors = (a, sa, b, sb, out)
    ptrs = tuple(t.data_ptr() for t in tensors)
    # Per-call checks: what depends on the pointers, not on the layout.
    if layout.action == "launch" and (ptrs[0] | ptrs[2] | (0 if layout.ragged_n else ptrs[4])) & 15:
        for name, t in (("lhs[0] (A)", a), ("rhs[0] (B)", b)) + ((("out", out),) if not layout.ragged_n else ()):
            checks.check_tma_matrix(t, name)
    checks.check_no_overlap_ptrs("out", ptrs[4], layout.extents[4],
                                 [(name, ptrs[i], layout.extents[i]) for i, name in enumerate(_INPUT_NAMES)])
    if layout.action == "zero":
        out.zero_()
        return None
    # NOTES: the C++ path handles only the common case: SA already TMA-ready, SB contiguous, n % 8 == 0 and the
    # tensors on the current device; everything else stays here.
    direct = layout.sa_ready and ptrs[1] % 16 == 0 and layout.sb_contiguous and not layout.ragged_n
    sa, sb = tma_ready_scales(sa, sb, layout.sa_ready, layout.sb_contiguous)
    # NOTES: switching devices costs microseconds; only do it for tensors off the current device.
    if layout.device.index != torch.cuda.current_device():
        with torch.cuda.device(layout.device):
            _launch(a, sa, b, sb, out, layout)
        return None
    launched = _launch(a, sa, b, sb, out, layout)
    if not (want_plan and direct):
        return None
    plan, specs = launched
    if fast_path_name() != "torch_ext":
        _start_torch_ext_build()
    return sm90_fp8_gemm_1d2d.fast_plan(plan, specs, layout.m, layout.device.index, layout.extents)


def _launch(a, sa, b, sb, out, layout: _Layout):
    target = out
    if layout.ragged_n:
        target = torch.empty((layout.m, align(layout.n, 8)), dtype=out.dtype, device=layout.device)
    launched = sm90_fp8_gemm_1d2d.launch(a, sa, b, sb, target, layout.num_sms, layout.arch)
    if layout.ragged_n:
        out.copy_(target[:, :layout.n])
    return launched


def _python_path_with_plan(lhs, rhs, out) -> Optional[tuple]:
    """What the C++ module calls for a call it cannot launch itself."""
    return _python_path(lhs, rhs, out, want_plan=True)


def _init_fast_module(module):
    module.init(_python_path_with_plan, getattr(torch._C, "_cuda_getCurrentRawStream", None), CUDADriverError,
                torch.Tensor, torch.nn.Parameter, torch.float8_e4m3fn, torch.float32, torch.bfloat16)
    on_num_sms_change(module.clear)
    return module


def _load_fast_path():
    """The C++ launch path, initialised: the torch build if the JIT cache holds it, else `deep_gemm._C` (built by
    pip), else None (not built, or DG_CPP_LAUNCH=0). With a CPU-only torch the module is initialised (its
    layout parsing is tested) but never launches."""
    if not read_env().cpp_launch:
        return None
    if hasattr(torch._C, "_cuda_getCurrentRawStream"):
        try:
            module = torch_ext.load_cached()
            if module is not None:
                return _init_fast_module(module)
        except Exception:  # a stale or broken cache entry: the background build replaces it
            pass
    try:
        from .. import _C
    except ImportError:
        return None
    return _init_fast_module(_C)


_torch_ext_state = {"started": False, "error": None}


def _start_torch_ext_build() -> None:
    """Build the torch launch extension in a background thread once per process, then switch calls to it."""
    if _torch_ext_state["started"] or not read_env().cpp_launch:
        return
    _torch_ext_state["started"] = True

    def work():
        global _fast
        try:
            module = torch_ext.build()
        except Exception as e:  # no compiler, no torch headers...: keep the current path
            _torch_ext_state["error"] = e
            if read_env().jit_debug:
                print(f"[deep_gemm] torch launch extension not built: {e}", file=sys.stderr)
            return
        _fast = _init_fast_module(module)

    threading.Thread(target=work, name="deep_gemm-torch-ext", daemon=True).start()


def use_torch_launch_extension() -> None:
    """Build (or load) the torch launch extension now and route calls through it; raises CompileError if it
    cannot be built. Without this, the first launch builds it in the background."""
    global _fast
    _torch_ext_state["started"] = True
    _fast = _init_fast_module(torch_ext.build())


def fast_path_name() -> str:
    """Which path warmed calls take: the torch extension, the pip-built module, or Python."""
    if _fast is None:
        return "python"
    return "torch_ext" if _fast.__name__ == torch_ext.MODULE else "cpython_api"


_fast = _load_fast_path()


def _check_layout(lhs, rhs, out) -> _Layout:
    """Every layout check, with errors naming the argument; returns what a launch needs to know."""
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
    extents = tuple(checks.extent_bytes(t) for t in (a, sa, b, sb, out))
    num_sms = get_num_sms(device.index)
    if m == 0 or n == 0:
        return _Layout("none", m, n, k, device, "", num_sms, False, False, False, extents)
    # NOTES: a TMA store writes whole 16-byte chunks of a row: with n % 8 != 0 the last chunk would spill into
    # whatever follows the row (measured on the H200), so such outputs go through an aligned temporary.
    ragged_n = n % 8 != 0
    checks.check_out_rows(out, ragged_n)
    checks.check_no_overlap(out, "out", list(zip(_INPUT_NAMES, (a, sa, b, sb))))
    if k == 0:
        return _Layout("zero", m, n, k, device, "", num_sms, ragged_n, False, False, extents)
    checks.check_tma_matrix(a, "lhs[0] (A)")
    checks.check_tma_matrix(b, "rhs[0] (B)")
    arch = get_device_arch(device.index)
    if arch != "sm_90a":
        raise NotImplementedError(f"gemm_fp8_fp8_bf16_nt has no kernel for {arch} yet (device {device})")
    return _Layout("launch", m, n, k, device, arch, num_sms, ragged_n, is_col_major_tma_aligned(sa),
                   sb.is_contiguous(), extents)
