"""The launch module deep_gemm._C on the CPU: it is built, reads every public GEMM's arguments into the layout key
that plans are cached under, hands everything else to the Python path, and checks the plans it is given."""
import os
import shutil
import subprocess

import pytest
import torch

import deep_gemm
from deep_gemm import _C
from deep_gemm.families.plan import POINTER, STRUCT, TENSOR_MAP, U32, ParamBuffer, noop_plan
from deep_gemm.runtime import Op

FP8, F32, BF16, I32 = 1, 2, 3, 4  # _C's dtype codes


def _dense(m=128, n=64, k=256):
    a = torch.zeros((m, k), dtype=torch.float8_e4m3fn)
    sa = torch.zeros(((k + 127) // 128, m)).t()
    b = torch.zeros((n, k), dtype=torch.float8_e4m3fn)
    sb = torch.zeros(((n + 127) // 128, (k + 127) // 128))
    out = torch.zeros((m, n), dtype=torch.bfloat16)
    return (a, sa), (b, sb), out


def test_the_one_launch_path_is_the_built_module():
    assert deep_gemm.get_launch_path() in ("deep_gemm._C (CPython API)", "deep_gemm._C (torch headers)")
    assert _C.__file__.endswith(".so")
    assert not hasattr(deep_gemm.jit, "torch_ext")  # nothing is compiled with a host compiler at run time


def test_dense_key_reads_op_cap_dtype_device_sizes_strides():
    lhs, rhs, out = _dense()
    key = _C.layout_key(Op.DENSE, lhs, rhs, out)
    assert key == (0, 0,                                   # op, set_num_sms cap (none)
                   FP8, -1, 2, 128, 256, 256, 1,          # A: e4m3, CPU, rank 2, (size, stride) per dimension
                   F32, -1, 2, 128, 1, 2, 128,            # SA: MN-major
                   FP8, -1, 2, 64, 256, 256, 1,           # B
                   F32, -1, 2, 1, 2, 2, 1,                # SB
                   BF16, -1, 2, 128, 64, 64, 1)           # out
    wide = torch.zeros((128, 512), dtype=torch.float8_e4m3fn)[:, :256]
    assert _C.layout_key(Op.DENSE, (wide, lhs[1]), rhs, out)[6] == 512  # a new row stride is a new layout


def test_num_sms_cap_is_part_of_every_key():
    lhs, rhs, out = _dense()
    try:
        deep_gemm.set_num_sms(66)
        k66 = _C.layout_key(Op.DENSE, lhs, rhs, out)
        deep_gemm.set_num_sms(132)
        k132 = _C.layout_key(Op.DENSE, lhs, rhs, out)
    finally:
        deep_gemm.reset_num_sms()
    assert k66[1] == 66 and k132[1] == 132 and k66[2:] == k132[2:]
    assert _C.layout_key(Op.DENSE, lhs, rhs, out)[1] == 0


def test_grouped_and_wgrad_keys_carry_their_extra_arguments():
    (a, sa), (b, sb), out = _dense()
    b3, sb3 = b[None], sb[None]
    idx = torch.zeros(128, dtype=torch.int32)
    key = _C.layout_key(Op.CONTIGUOUS, (a, sa), (b3, sb3), out, idx)
    assert key[-5:] == (I32, -1, 1, 128, 1)  # the index tensor: int32, CPU, rank 1, size 128, stride 1
    masked = _C.layout_key(Op.MASKED, (a[None], sa[None]), (b3, sb3), out[None], idx[:1], 48)
    assert masked[-1] == 48
    assert _C.layout_key(Op.MASKED, (a[None], sa[None]), (b3, sb3), out[None], idx[:1], True) is None
    flat = torch.zeros(128 * 256, dtype=torch.float8_e4m3fn)
    kg = _C.layout_key(Op.K_GROUPED, (flat, sa.t()), (flat[:64 * 256], sb), out.float()[None], [128, 128])
    assert kg[-3:] == (2, 128, 128)
    assert _C.layout_key(Op.K_GROUPED, (flat, sa.t()), (flat, sb), out.float()[None], (256,))[-2:] == (1, 256)
    for bad in ([128, 128.0], [128, True], torch.tensor([128, 128])):
        assert _C.layout_key(Op.K_GROUPED, (flat, sa.t()), (flat, sb), out.float()[None], bad) is None


@pytest.mark.parametrize("case", ["list_pair", "subclass", "wrong_dtype", "four_d", "not_tensor", "short_pair",
                                  "extra_arg"])
def test_layout_key_refuses_what_python_must_handle(case):
    (a, sa), (b, sb), out = _dense()
    lhs, rhs, args = (a, sa), (b, sb), ()
    if case == "list_pair":
        lhs = [a, sa]
    elif case == "subclass":
        class Sub(torch.Tensor):
            pass
        out = out.as_subclass(Sub)
    elif case == "wrong_dtype":
        out = out.half()
    elif case == "four_d":
        out = out[None, None]
    elif case == "not_tensor":
        rhs = (b, 1.0)
    elif case == "short_pair":
        lhs = (a,)
    elif case == "extra_arg":
        args = (1,)
    assert _C.layout_key(Op.DENSE, lhs, rhs, out, *args) is None


def test_errors_come_through_the_launch_module():
    """Bad calls get the Python path's typed errors; nothing is launched or registered."""
    lhs, rhs, out = _dense()
    before = _C.stats()
    with pytest.raises(ValueError, match="CUDA tensor"):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    with pytest.raises(TypeError, match="lhs"):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs[0], rhs, out)
    with pytest.raises(TypeError):
        _C.call(Op.DENSE, lhs, rhs)  # a wrong argument count reaches Python, which raises the TypeError
    after = _C.stats()
    assert after["slow"] >= before["slow"] + 2
    assert after["fast"] == before["fast"] and after["registered"] == before["registered"]


def test_unknown_op_is_refused():
    with pytest.raises(ValueError, match="unknown op"):
        _C.call(99)
    with pytest.raises(TypeError):
        _C.call("dense")


def _launch_tuple(buffer_size=64, offsets=(0,), maps=(), ptrs=(), workspace=(-1, 0)):
    return (1, 128, 0, 1, buffer_size, offsets, b"\0" * buffer_size, maps, ptrs, workspace)


def test_make_plan_checks_what_it_is_given():
    good = _launch_tuple(256, (0, 128), ptrs=((128, 1, 0),))
    plan = _C.make_plan(0, 0, 0, (15, 3), (64, 64), (1,), (good,))
    assert type(plan).__name__ == "PyCapsule"
    with_workspace = _launch_tuple(256, (0, 8), workspace=(8, 4096))
    assert type(_C.make_plan(0, 0, 0, (15, 3), (64, 64), (1,), (with_workspace,))).__name__ == "PyCapsule"
    bad_cases = [
        _launch_tuple(256, (300,)),                                   # argument outside the buffer
        _launch_tuple(256, (0,), ptrs=((4, 0, 0),)),                  # pointer not 8-byte aligned
        _launch_tuple(256, (0,), ptrs=((0, 5, 0),)),                  # tensor index out of range
        _launch_tuple(256, (0,), maps=((64, 0, 0, 0, (16, 16), (16,), (16, 16), 0, 0),)),  # map not 128-aligned
        _launch_tuple(256, (0,), maps=((0, 0, 0, 0, (16, 16), (), (16, 16), 0, 0),)),      # strides of rank 2
        (1, 128, 0, 1, 64, (0,), b"\0" * 8, (), (), (-1, 0)),          # init bytes shorter than the buffer
        _launch_tuple(256, (0,))[:9],                                 # no workspace entry
        _launch_tuple(256, (0,), workspace=(252, 64)),                # workspace pointer outside the buffer
        _launch_tuple(256, (0,), workspace=(12, 64)),                 # ... not 8-byte aligned
        _launch_tuple(256, (0,), workspace=(8, 0)),                   # ... of no size
    ]
    for launch in bad_cases:
        with pytest.raises(ValueError, match="plan"):
            _C.make_plan(0, 0, 0, (15, 3), (64, 64), (1,), (launch,))
    with pytest.raises(ValueError, match="output"):
        _C.make_plan(0, 0, 0, (15, 3), (64, 64), (2,), (good,))


def test_launch_guards_pointers_and_noop_plans_launch_nothing():
    plan = _C.make_plan(0, 0, 0, (15, 15), (64, 64), (1,), (_launch_tuple(),))
    with pytest.raises(RuntimeError, match="misaligned or overlapping"):
        _C.launch(plan, (8, 4096))
    with pytest.raises(RuntimeError, match="misaligned or overlapping"):
        _C.launch(plan, (4096, 4096 + 32))  # the output overlaps tensor 0
    assert _C.launch(noop_plan(0, 2, (0, 0), (1,)), (0, 0)) is None


def test_param_buffer_follows_the_kernel_abi():
    """The dense/grouped kernel's parameters: four CUtensorMaps (128-byte aligned), then sb, shape_m,
    grouped_layout, num_groups, d, d_row_stride, filled by name in the declared order."""
    declared = [(f"map_{i}", TENSOR_MAP) for i in range(4)] + [("sb", POINTER), ("shape_m", U32), ("grouped", POINTER),
                                                              ("groups", U32), ("d", POINTER), ("d_stride", U32)]
    p = ParamBuffer(declared)
    for i, tensor in enumerate((0, 2, 1, 4)):
        p.tensor_map(f"map_{i}", tensor, 1, (256, 128), (256,), (128, 64), 128)
    p.pointer("sb", 3), p.u32("shape_m", 7), p.pointer("grouped", 5), p.u32("groups", 2), p.pointer("d", 4)
    p.u32("d_stride", 4096)
    grid, block, smem, cluster, size, offsets, init, maps, ptrs, workspace = p.launch(132, 384, 1000, 2)
    assert workspace == (-1, 0)
    assert offsets == (0, 128, 256, 384, 512, 520, 528, 536, 544, 552) and size == 556
    assert init[520:524] == (7).to_bytes(4, "little") and init[552:556] == (4096).to_bytes(4, "little")
    assert [m[:3] for m in maps] == [(0, 0, 0), (128, 2, 0), (256, 1, 0), (384, 4, 0)]
    assert ptrs == ((512, 3, 0), (528, 5, 0), (544, 4, 0))
    blob = ParamBuffer([("groups", STRUCT)])
    base = blob.struct("groups", 600)
    blob.add_map_at(base + 128, 0, 1, (16, 16), (16,), (16, 16), 0, ptr_offset=4096)
    assert blob.launch(1, 1, 0, 1)[7][0][:3] == (128, 0, 4096)


def test_param_buffer_refuses_what_the_declaration_does_not_say():
    p = ParamBuffer([("a", POINTER), ("n", U32)])
    with pytest.raises(AssertionError, match="got \\('n', 'u32'\\), the declaration has \\('a', 'pointer'\\)"):
        p.u32("n", 1)  # out of order
    with pytest.raises(AssertionError, match="the declaration has \\('a', 'pointer'\\)"):
        p.u32("a", 1)  # wrong kind
    p.pointer("a", 0)
    with pytest.raises(AssertionError, match="never filled"):
        p.launch(1, 1, 0, 1)
    p.u32("n", 3)
    with pytest.raises(AssertionError, match="declaration has nothing"):
        p.u32("extra", 1)
    w = ParamBuffer([("n", U32), ("workspace", POINTER)])
    w.u32("n", 1)
    w.workspace("workspace", 4096)  # filled by _C per launch with the stream's workspace
    assert w.launch(1, 1, 0, 1)[9] == (8, 4096) and w.ptrs == []


def test_cuda_abi_matches_cuda_h(tmp_path):
    """csrc/cuda_abi.h re-declares a few driver types: check them against the real cuda.h."""
    cxx = shutil.which("g++") or shutil.which("c++")
    cuda_h = [d for d in ("/usr/local/cuda/include", os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"),
                                                                   "include")) if os.path.isfile(f"{d}/cuda.h")]
    csrc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "csrc")
    if cxx is None or not cuda_h or not os.path.isdir(csrc):
        pytest.skip("needs a C++ compiler, cuda.h and the source checkout")
    src = tmp_path / "abi.cpp"
    src.write_text("""
#include <cstddef>
#include <cuda.h>
#include "cuda_abi.h"
namespace dg = deep_gemm::cu;
static_assert(sizeof(dg::TensorMap) == sizeof(CUtensorMap) && alignof(dg::TensorMap) == alignof(CUtensorMap));
static_assert(sizeof(dg::LaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(dg::LaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(offsetof(dg::LaunchAttribute, value.cluster_dim.z) == offsetof(CUlaunchAttribute, value.clusterDim.z));
static_assert(sizeof(dg::LaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(dg::LaunchConfig, shared_mem_bytes) == offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(dg::LaunchConfig, stream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(dg::LaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(dg::LaunchConfig, num_attrs) == offsetof(CUlaunchConfig, numAttrs));
static_assert(dg::kLaunchAttributeClusterDimension == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
static_assert(dg::kTensorMapInterleaveNone == CU_TENSOR_MAP_INTERLEAVE_NONE);
static_assert(dg::kTensorMapFloatOOBFillNone == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
static_assert(sizeof(CUresult) == sizeof(dg::Result));
// The function-pointer types must accept the real entry points.
static dg::TensorMapEncodeTiledFn encode = reinterpret_cast<dg::TensorMapEncodeTiledFn>(&cuTensorMapEncodeTiled);
static_assert(sizeof(CUtensorMapDataType) == sizeof(int) && sizeof(CUtensorMapSwizzle) == sizeof(int));
int main() { return encode == nullptr; }
""")
    proc = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", f"-I{cuda_h[0]}", f"-I{csrc}", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
