// deep_gemm._C: the steady-state call path of the dense FP8 GEMM, in C++.
//
// A warmed call from Python costs ~20 us when every step is Python (tensor attribute reads, the layout key,
// descriptor look-ups, cuda-bindings argument packing). Here one call reads the five tensors through the CPython
// API, looks the layout up in a hash map, re-checks what depends on the pointers (alignment, aliasing, current
// context), encodes the TMA descriptors whose address changed, and launches with cuLaunchKernelEx.
// Anything unusual - an unseen layout, a tensor subclass, a misaligned pointer, aliasing, another device - goes
// to the Python implementation (`slow_path`), which validates (raising the errors users see), launches, and may
// hand back a plan that is then cached here for that layout.
//
// Two builds of this one file:
// - `deep_gemm._C` (setup.py, at install time): tensors are read through the CPython API only (no torch or CUDA
//   headers), so it builds in pip's isolated environment with any C++17 compiler. ~0.5 us of torch attribute
//   calls per tensor.
// - `deep_gemm_torch_launch` (DG_WITH_TORCH, built at run time against the installed torch by
//   deep_gemm/jit/torch_ext.py): tensors are read from the at::Tensor directly (~20 ns each).
// libcuda is opened at run time in both. The GIL is held throughout, which serialises access to the plan table.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#ifdef DG_WITH_TORCH
#include <torch/csrc/autograd/python_variable.h>
#define DG_MODULE_NAME "deep_gemm_torch_launch"
#define DG_MODULE_INIT PyInit_deep_gemm_torch_launch
#else
#define DG_MODULE_NAME "deep_gemm._C"
#define DG_MODULE_INIT PyInit__C
#endif

#include <array>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "cuda_abi.h"

namespace {

namespace cu = deep_gemm::cu;

constexpr int kNumTensors = 5;     // A, SA, B, SB, out
constexpr int kNumMaps = 4;        // TMA descriptors of A, B, SA, out
constexpr int kFieldsPerTensor = 6;
constexpr size_t kMaxPlans = 4096;

// What a layout is: dtype code, device, sizes and strides of the five tensors (no pointers).
using Key = std::array<int64_t, kNumTensors * kFieldsPerTensor>;

struct KeyHash {
    size_t operator()(const Key& key) const {
        uint64_t h = 1469598103934665603ull;
        for (int64_t v : key)
            h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
        return static_cast<size_t>(h ^ (h >> 29));
    }
};

struct MapSpec {
    int tensor;            // index into (A, SA, B, SB, out) of the tensor whose pointer the map addresses
    int data_type;         // CUtensorMapDataType
    uint64_t dims[2];      // inner, outer (elements)
    uint64_t stride;       // outer stride in bytes
    unsigned int box[2];   // inner, outer
    int swizzle;           // CUtensorMapSwizzle
    int l2_promotion;      // CUtensorMapL2promotion
};

struct Plan {
    cu::Context context;
    cu::Function function;
    int device;
    cu::LaunchAttribute cluster;
    cu::LaunchConfig config;
    uint32_t m;
    int64_t extents[kNumTensors];   // bytes spanned by each tensor, for the aliasing check
    MapSpec specs[kNumMaps];
    // The last descriptor encoded for each map and the address it was encoded for.
    int64_t encoded_ptr[kNumMaps];
    cu::TensorMap maps[kNumMaps];
};

struct Tensor {
    int64_t ptr;
    int64_t size[2];
    int64_t stride[2];
    int64_t dtype;
    int64_t device;
};

struct Globals {
    // Set by `init` from Python.
    PyObject* slow_path = nullptr;     // slow_path(lhs, rhs, out) -> plan tuple or None
    PyObject* raw_stream = nullptr;    // torch._C._cuda_getCurrentRawStream(device) -> int; None: never launch
    PyObject* error_type = nullptr;    // exception type for driver errors
    PyTypeObject* tensor_type = nullptr;
    PyTypeObject* parameter_type = nullptr;
    PyObject* dtypes[3] = {nullptr, nullptr, nullptr};  // float8_e4m3fn, float32, bfloat16 -> codes 1, 2, 3
    // Interned attribute names.
    PyObject* s_dtype = nullptr;
    PyObject* s_shape = nullptr;
    PyObject* s_stride = nullptr;
    PyObject* s_data_ptr = nullptr;
    PyObject* s_get_device = nullptr;
    // Driver entry points (resolved on first use).
    bool driver_tried = false;
    cu::TensorMapEncodeTiledFn encode = nullptr;
    cu::LaunchKernelExFn launch = nullptr;
    cu::CtxGetCurrentFn ctx_get_current = nullptr;
    cu::GetErrorStringFn get_error_string = nullptr;
    std::unordered_map<Key, Plan, KeyHash> plans;
    // Counters (read by tests): fast launches, slow-path calls, plans registered.
    uint64_t num_fast = 0, num_slow = 0, num_registered = 0;
};

Globals g;

bool load_driver() {
    if (g.driver_tried)
        return g.launch != nullptr;
    g.driver_tried = true;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
        return false;
    auto encode = reinterpret_cast<cu::TensorMapEncodeTiledFn>(dlsym(lib, "cuTensorMapEncodeTiled"));
    auto launch = reinterpret_cast<cu::LaunchKernelExFn>(dlsym(lib, "cuLaunchKernelEx"));
    auto ctx = reinterpret_cast<cu::CtxGetCurrentFn>(dlsym(lib, "cuCtxGetCurrent"));
    auto err = reinterpret_cast<cu::GetErrorStringFn>(dlsym(lib, "cuGetErrorString"));
    if (encode == nullptr or launch == nullptr or ctx == nullptr or err == nullptr)
        return false;
    g.encode = encode, g.ctx_get_current = ctx, g.get_error_string = err;
    g.launch = launch;
    return true;
}

PyObject* driver_error(const char* what, cu::Result result) {
    const char* msg = nullptr;
    if (g.get_error_string == nullptr or g.get_error_string(result, &msg) != 0 or msg == nullptr)
        msg = "unknown error";
    PyErr_Format(g.error_type != nullptr ? g.error_type : PyExc_RuntimeError, "%s failed: CUresult %d (%s)", what,
                 result, msg);
    return nullptr;
}

bool read_pair(PyObject* obj, PyObject*& first, PyObject*& second) {
    if (not PyTuple_CheckExact(obj) or PyTuple_GET_SIZE(obj) != 2)
        return false;
    first = PyTuple_GET_ITEM(obj, 0);
    second = PyTuple_GET_ITEM(obj, 1);
    return true;
}

// Reads a plain 2-D torch.Tensor of a known dtype (device -1 = not CUDA); false (no error set) for anything else.
// NOTES: exact types only (Tensor, Parameter): subclasses may override attribute access or __torch_function__
// (fake tensors, tensor subclasses), and those belong to the Python path.
#ifdef DG_WITH_TORCH
bool read_tensor(PyObject* obj, Tensor& t) {
    if (not THPVariable_CheckExact(obj))
        return false;
    const at::Tensor& x = THPVariable_Unpack(obj);
    if (not x.defined() or x.dim() != 2)
        return false;
    switch (x.scalar_type()) {
        case at::kFloat8_e4m3fn: t.dtype = 1; break;
        case at::kFloat: t.dtype = 2; break;
        case at::kBFloat16: t.dtype = 3; break;
        default: return false;
    }
    const auto sizes = x.sizes();
    const auto strides = x.strides();
    t.size[0] = sizes[0], t.size[1] = sizes[1];
    t.stride[0] = strides[0], t.stride[1] = strides[1];
    const bool cuda = x.is_cuda();
    t.device = cuda ? x.device().index() : -1;
    t.ptr = cuda ? reinterpret_cast<int64_t>(x.data_ptr()) : 0;
    return true;
}
#else
bool read_int_pair(PyObject* tuple, int64_t out[2]) {
    if (not PyTuple_Check(tuple) or PyTuple_GET_SIZE(tuple) != 2)
        return false;
    for (int i = 0; i < 2; ++i) {
        out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (out[i] == -1 and PyErr_Occurred()) {
            PyErr_Clear();
            return false;
        }
    }
    return true;
}

PyObject* call_method(PyObject* obj, PyObject* name) {
    PyObject* args[] = {obj};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
}

bool read_tensor(PyObject* obj, Tensor& t) {
    PyTypeObject* type = Py_TYPE(obj);
    if (type != g.tensor_type and type != g.parameter_type)
        return false;
    PyObject* dtype = PyObject_GetAttr(obj, g.s_dtype);
    if (dtype == nullptr) {
        PyErr_Clear();
        return false;
    }
    t.dtype = 0;
    for (int i = 0; i < 3; ++i)
        if (dtype == g.dtypes[i])
            t.dtype = i + 1;
    Py_DECREF(dtype);
    if (t.dtype == 0)
        return false;
    bool ok = false;
    PyObject* shape = PyObject_GetAttr(obj, g.s_shape);
    PyObject* stride = shape != nullptr ? call_method(obj, g.s_stride) : nullptr;
    PyObject* device = stride != nullptr ? call_method(obj, g.s_get_device) : nullptr;
    PyObject* ptr = device != nullptr ? call_method(obj, g.s_data_ptr) : nullptr;
    if (ptr != nullptr and read_int_pair(shape, t.size) and read_int_pair(stride, t.stride)) {
        t.device = PyLong_AsLongLong(device);
        t.ptr = PyLong_AsLongLong(ptr);
        ok = not PyErr_Occurred();
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(device);
    Py_XDECREF(ptr);
    return ok;
}
#endif

bool read_call(PyObject* const* args, Tensor (&t)[kNumTensors], Key& key) {
    PyObject* objs[kNumTensors];
    if (not read_pair(args[0], objs[0], objs[1]) or not read_pair(args[1], objs[2], objs[3]))
        return false;
    objs[4] = args[2];
    for (int i = 0; i < kNumTensors; ++i) {
        if (not read_tensor(objs[i], t[i]))
            return false;
        int64_t* k = key.data() + i * kFieldsPerTensor;
        k[0] = t[i].dtype, k[1] = t[i].device, k[2] = t[i].size[0], k[3] = t[i].size[1];
        k[4] = t[i].stride[0], k[5] = t[i].stride[1];
    }
    return true;
}

// ---- Plans handed over by Python ----

bool as_i64(PyObject* seq, Py_ssize_t i, int64_t& out) {
    out = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
    return not (out == -1 and PyErr_Occurred());
}

// plan = (function, context, device, grid, block, smem, cluster, m, extents[5], maps[4]) where each map is
// (tensor index, data type, inner, outer, outer stride bytes, box inner, box outer, swizzle, l2 promotion).
bool parse_plan(PyObject* obj, Plan& plan) {
    if (not PyTuple_Check(obj) or PyTuple_GET_SIZE(obj) != 10) {
        PyErr_SetString(PyExc_TypeError, "deep_gemm._C: a plan must be a 10-tuple");
        return false;
    }
    int64_t v[8];
    for (int i = 0; i < 8; ++i)
        if (not as_i64(obj, i, v[i]))
            return false;
    std::memset(&plan, 0, sizeof(plan));
    plan.function = reinterpret_cast<cu::Function>(static_cast<uintptr_t>(v[0]));
    plan.context = reinterpret_cast<cu::Context>(static_cast<uintptr_t>(v[1]));
    plan.device = static_cast<int>(v[2]);
    plan.cluster.id = cu::kLaunchAttributeClusterDimension;
    plan.cluster.value.cluster_dim.x = static_cast<unsigned int>(v[6]);
    plan.cluster.value.cluster_dim.y = plan.cluster.value.cluster_dim.z = 1;
    plan.config.grid_dim_x = static_cast<unsigned int>(v[3]);
    plan.config.grid_dim_y = plan.config.grid_dim_z = 1;
    plan.config.block_dim_x = static_cast<unsigned int>(v[4]);
    plan.config.block_dim_y = plan.config.block_dim_z = 1;
    plan.config.shared_mem_bytes = static_cast<unsigned int>(v[5]);
    plan.config.num_attrs = 1;  // attrs points into the plan; set after the plan has its final address
    plan.m = static_cast<uint32_t>(v[7]);
    PyObject* extents = PyTuple_GET_ITEM(obj, 8);
    PyObject* maps = PyTuple_GET_ITEM(obj, 9);
    if (not PyTuple_Check(extents) or PyTuple_GET_SIZE(extents) != kNumTensors or not PyTuple_Check(maps)
        or PyTuple_GET_SIZE(maps) != kNumMaps) {
        PyErr_SetString(PyExc_TypeError, "deep_gemm._C: plan extents/maps have the wrong arity");
        return false;
    }
    for (int i = 0; i < kNumTensors; ++i)
        if (not as_i64(extents, i, plan.extents[i]))
            return false;
    for (int i = 0; i < kNumMaps; ++i) {
        PyObject* spec = PyTuple_GET_ITEM(maps, i);
        int64_t s[9];
        if (not PyTuple_Check(spec) or PyTuple_GET_SIZE(spec) != 9) {
            PyErr_SetString(PyExc_TypeError, "deep_gemm._C: a map spec must be a 9-tuple");
            return false;
        }
        for (int j = 0; j < 9; ++j)
            if (not as_i64(spec, j, s[j]))
                return false;
        if (s[0] < 0 or s[0] >= kNumTensors) {
            PyErr_SetString(PyExc_ValueError, "deep_gemm._C: map tensor index out of range");
            return false;
        }
        MapSpec& m = plan.specs[i];
        m.tensor = static_cast<int>(s[0]);
        m.data_type = static_cast<int>(s[1]);
        m.dims[0] = static_cast<uint64_t>(s[2]), m.dims[1] = static_cast<uint64_t>(s[3]);
        m.stride = static_cast<uint64_t>(s[4]);
        m.box[0] = static_cast<unsigned int>(s[5]), m.box[1] = static_cast<unsigned int>(s[6]);
        m.swizzle = static_cast<int>(s[7]);
        m.l2_promotion = static_cast<int>(s[8]);
        plan.encoded_ptr[i] = -1;
    }
    return true;
}

PyObject* run_slow_path(PyObject* const* args, const Key* key) {
    ++g.num_slow;
    if (g.slow_path == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "deep_gemm._C.init() was not called");
        return nullptr;
    }
    PyObject* result = PyObject_Vectorcall(g.slow_path, args, 3, nullptr);
    if (result == nullptr)
        return nullptr;
    if (result != Py_None and key != nullptr) {
        Plan plan;
        if (not parse_plan(result, plan)) {
            Py_DECREF(result);
            return nullptr;
        }
        if (g.plans.size() >= kMaxPlans)
            g.plans.clear();
        Plan& stored = g.plans[*key];
        stored = plan;
        stored.config.attrs = &stored.cluster;
        ++g.num_registered;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

bool overlaps(int64_t a, int64_t a_len, int64_t b, int64_t b_len) {
    return a_len > 0 and b_len > 0 and a < b + b_len and b < a + a_len;
}

// gemm(lhs, rhs, out): launch through a cached plan, or take the Python path.
PyObject* gemm(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "gemm_fp8_fp8_bf16_nt() takes 3 arguments (lhs, rhs, out)");
        return nullptr;
    }
    Tensor t[kNumTensors];
    Key key;
    if (not read_call(args, t, key) or t[0].device < 0 or g.raw_stream == Py_None or not load_driver())
        return run_slow_path(args, nullptr);
    auto it = g.plans.find(key);
    if (it == g.plans.end())
        return run_slow_path(args, &key);
    Plan& plan = it->second;
    // Per-call checks (the layout was fully validated when the plan was made): TMA needs 16-byte aligned
    // addresses, the output must not alias an input, and the plan's context must be the current one.
    const int64_t out_ptr = t[4].ptr;
    bool fast = ((t[0].ptr | t[1].ptr | t[2].ptr | out_ptr) & 15) == 0;
    for (int i = 0; fast and i < 4; ++i)
        fast = not overlaps(t[i].ptr, plan.extents[i], out_ptr, plan.extents[4]);
    cu::Context current = nullptr;
    if (fast)
        fast = g.ctx_get_current(&current) == 0 and current == plan.context;
    if (not fast)
        return run_slow_path(args, nullptr);

    for (int i = 0; i < kNumMaps; ++i) {
        const MapSpec& s = plan.specs[i];
        const int64_t ptr = t[s.tensor].ptr;
        if (plan.encoded_ptr[i] == ptr)
            continue;
        static const unsigned int kElementStrides[2] = {1, 1};
        const cu::Result r = g.encode(&plan.maps[i], s.data_type, 2, reinterpret_cast<void*>(ptr), s.dims,
                                      &s.stride, s.box, kElementStrides, cu::kTensorMapInterleaveNone, s.swizzle,
                                      s.l2_promotion, cu::kTensorMapFloatOOBFillNone);
        if (r != 0) {
            plan.encoded_ptr[i] = -1;
            return driver_error("cuTensorMapEncodeTiled", r);
        }
        plan.encoded_ptr[i] = ptr;
    }

    PyObject* device = PyLong_FromLong(plan.device);
    if (device == nullptr)
        return nullptr;
    PyObject* stream_obj = PyObject_Vectorcall(g.raw_stream, &device, 1, nullptr);
    Py_DECREF(device);
    if (stream_obj == nullptr)
        return nullptr;
    void* stream = PyLong_AsVoidPtr(stream_obj);
    Py_DECREF(stream_obj);
    if (stream == nullptr and PyErr_Occurred())
        return nullptr;

    void* sb_ptr = reinterpret_cast<void*>(t[3].ptr);
    uint32_t m = plan.m;
    // The kernel's grouped-GEMM arguments (grouped_layout, num_groups, d, d_row_stride) are unused by the dense
    // GEMM, the only one this path launches.
    void* no_ptr = nullptr;
    uint32_t no_u32 = 0;
    void* params[] = {&plan.maps[0], &plan.maps[1], &plan.maps[2], &plan.maps[3], &sb_ptr, &m,
                      &no_ptr, &no_u32, &no_ptr, &no_u32};
    plan.config.stream = stream;
    const cu::Result r = g.launch(&plan.config, plan.function, params, nullptr);
    if (r != 0)
        return driver_error("cuLaunchKernelEx", r);
    ++g.num_fast;
    Py_RETURN_NONE;
}

PyObject* init(PyObject*, PyObject* args) {
    PyObject *slow_path, *raw_stream, *error_type, *tensor_type, *parameter_type, *fp8, *f32, *bf16;
    if (not PyArg_ParseTuple(args, "OOOO!O!OOO", &slow_path, &raw_stream, &error_type, &PyType_Type, &tensor_type,
                             &PyType_Type, &parameter_type, &fp8, &f32, &bf16))
        return nullptr;
    PyObject* keep[] = {slow_path, raw_stream, error_type, tensor_type, parameter_type, fp8, f32, bf16};
    for (PyObject* o : keep)
        Py_INCREF(o);
    g.slow_path = slow_path;
    g.raw_stream = raw_stream;
    g.error_type = error_type;
    g.tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type);
    g.parameter_type = reinterpret_cast<PyTypeObject*>(parameter_type);
    g.dtypes[0] = fp8, g.dtypes[1] = f32, g.dtypes[2] = bf16;
    g.plans.clear();
    Py_RETURN_NONE;
}

PyObject* clear(PyObject*, PyObject*) {
    g.plans.clear();
    Py_RETURN_NONE;
}

PyObject* stats(PyObject*, PyObject*) {
    return Py_BuildValue("{s:K,s:K,s:K,s:n}", "fast", static_cast<unsigned long long>(g.num_fast), "slow",
                         static_cast<unsigned long long>(g.num_slow), "registered",
                         static_cast<unsigned long long>(g.num_registered), "plans",
                         static_cast<Py_ssize_t>(g.plans.size()));
}

// layout_key(lhs, rhs, out): the key the fast path would use, or None (tests check what reaches the fast path).
PyObject* layout_key(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "layout_key() takes 3 arguments");
        return nullptr;
    }
    Tensor t[kNumTensors];
    Key key;
    if (not read_call(args, t, key))
        Py_RETURN_NONE;
    PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(key.size()));
    if (tuple == nullptr)
        return nullptr;
    for (size_t i = 0; i < key.size(); ++i)
        PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(key[i]));
    return tuple;
}

PyMethodDef methods[] = {
    {"gemm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(gemm)), METH_FASTCALL,
     "gemm(lhs, rhs, out): dense FP8 GEMM through a cached plan, else through the Python path."},
    {"init", init, METH_VARARGS,
     "init(slow_path, raw_stream, error_type, Tensor, Parameter, float8_e4m3fn, float32, bfloat16)"},
    {"clear", clear, METH_NOARGS, "Forget every cached plan (e.g. after set_num_sms)."},
    {"stats", stats, METH_NOARGS, "Counters: fast launches, slow-path calls, plans registered, plans held."},
    {"layout_key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(layout_key)), METH_FASTCALL,
     "The fast path's layout key of a call, or None when the call is not fast-path material."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, DG_MODULE_NAME, "C++ launch fast path of deep_gemm.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC DG_MODULE_INIT() {
    g.s_dtype = PyUnicode_InternFromString("dtype");
    g.s_shape = PyUnicode_InternFromString("shape");
    g.s_stride = PyUnicode_InternFromString("stride");
    g.s_data_ptr = PyUnicode_InternFromString("data_ptr");
    g.s_get_device = PyUnicode_InternFromString("get_device");
    if (g.s_dtype == nullptr or g.s_shape == nullptr or g.s_stride == nullptr or g.s_data_ptr == nullptr
        or g.s_get_device == nullptr)
        return nullptr;
    return PyModule_Create(&module);
}
