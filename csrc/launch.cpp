// deep_gemm._C: the one launch path of every public GEMM.
//
// Every kernel launch of the library goes through `Plan`s built here: a plan is what a layout (dtypes, shapes,
// strides, device, SM cap, host-int arguments) needs to launch - the CUfunction, the launch configuration, a
// parameter buffer with its constants filled in, and "patches": the TMA descriptors and raw pointers that depend on
// the tensors' addresses. Python (deep_gemm/runtime.py and the launchers) validates a layout and builds its plan
// once; a call then only reads the tensors, finds the plan, re-checks what depends on the pointers (alignment,
// aliasing, current context), re-encodes the descriptors whose address changed and launches.
//
// `call(op, *args)` is the entry of every public GEMM. Anything unusual - an unseen layout, a tensor subclass, a
// misaligned pointer, aliasing, tensors off the current device - goes to the Python slow path, which validates
// (raising the errors users see), launches through `launch(plan, pointers)` and may hand the plan back to be
// cached here for that layout. `call` never raises its own error for bad input: it defers to Python.
//
// Built by pip at install time; libcuda is opened at run time. Two builds of this one file, reported by
// `deep_gemm.get_launch_path()`: by default tensors are read through the CPython API only (no torch or CUDA headers),
// so it builds in pip's isolated environment with any C++17 compiler (~0.2-0.3 us of torch attribute calls per
// tensor); when torch is importable at build time (`pip install --no-build-isolation`, `setup.py build_ext`),
// setup.py defines DG_WITH_TORCH and tensors are read from the at::Tensor directly (~20 ns each), which ties the
// module to that torch version. The GIL is held throughout, which serialises access to the plan table.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#ifdef DG_WITH_TORCH
#include <torch/csrc/autograd/python_variable.h>
#define DG_TENSOR_READER "torch headers"
#else
#define DG_TENSOR_READER "CPython API"
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cuda_abi.h"

namespace {

namespace cu = deep_gemm::cu;

constexpr int kMaxTensors = 8;
constexpr int kMaxRank = 3;
constexpr int kNumDtypes = 4;      // float8_e4m3fn, float32, bfloat16, int32 -> codes 1..4
constexpr size_t kMaxPlans = 4096;
constexpr size_t kBufferAlign = 128;  // CUtensorMap's alignment (cuda.h 13)

// How a public GEMM's arguments are read (registered per op by `init`).
enum ArgKind : int { kArgPair = 0, kArgTensor = 1, kArgInt = 2, kArgIntList = 3 };

struct Tensor {
    int64_t ptr, dtype, device, rank;
    int64_t size[kMaxRank], stride[kMaxRank];
};

struct MapPatch {
    size_t offset;        // in the parameter buffer
    int tensor;           // whose pointer (plus `ptr_offset` bytes) the descriptor addresses
    int64_t ptr_offset;
    int data_type;        // CUtensorMapDataType
    unsigned int rank;
    uint64_t dims[kMaxRank];
    uint64_t strides[kMaxRank - 1];  // bytes
    unsigned int box[kMaxRank];
    int swizzle;          // CUtensorMapSwizzle
    int l2_promotion;     // CUtensorMapL2promotion
    int64_t encoded_ptr;  // the address the buffer's descriptor was last encoded for (-1: none)
};

struct PtrPatch {
    size_t offset;
    int tensor;
    int64_t ptr_offset;
};

struct Launch {
    cu::LaunchAttribute cluster;
    cu::LaunchConfig config;
    std::unique_ptr<uint8_t, decltype(&std::free)> buffer{nullptr, &std::free};
    std::vector<void*> params;  // kernelParams: pointers into `buffer`
    std::vector<MapPatch> maps;
    std::vector<PtrPatch> ptrs;
    int64_t workspace_offset = -1;  // a pointer parameter filled with the stream's workspace (-1: none)
    int64_t workspace_bytes = 0;    // ... of at least this many bytes
};

struct Plan {
    cu::Function function;
    cu::Context context;
    int device;
    int num_tensors;
    int64_t align_mask[kMaxTensors];  // a pointer must have these bits clear (e.g. 15: 16-byte aligned)
    int64_t extents[kMaxTensors];     // bytes spanned by each tensor, for the aliasing check
    uint32_t outputs;                 // bit i: tensor i is written (must not overlap any other tensor)
    std::vector<Launch> launches;     // usually one; none for a call with nothing to compute
};

using Key = std::vector<int64_t>;

struct KeyHash {
    size_t operator()(const Key& key) const {
        uint64_t h = 1469598103934665603ull;
        for (int64_t v : key)
            h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
        return static_cast<size_t>(h ^ (h >> 29));
    }
};

struct Globals {
    // Set by `init` from Python.
    PyObject* slow_path = nullptr;     // slow_path(op, args, key or None) -> plan capsule or None
    PyObject* raw_stream = nullptr;    // torch._C._cuda_getCurrentRawStream(device) -> int; None: never launch
    PyObject* error_type = nullptr;    // exception type for driver errors
    PyTypeObject* tensor_type = nullptr;
    PyTypeObject* parameter_type = nullptr;
    PyObject* dtypes[kNumDtypes] = {};
    std::vector<std::vector<int>> signatures;  // per op: ArgKind of each argument
    int64_t num_sms_cap = 0;           // set_num_sms (0: none); part of every key
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
    // Layout key -> plan capsule (a strong reference). `key` is reused by every call (no allocation per call).
    std::unordered_map<Key, PyObject*, KeyHash> plans;
    Key key;
    // Counters (read by tests): fast launches, slow-path calls, plans registered.
    uint64_t num_fast = 0, num_slow = 0, num_registered = 0;
    // Workspaces of launches that need one (Launch::workspace_bytes): workspace_provider(device, bytes) -> (address,
    // bytes) makes or returns the current stream's (deep_gemm.runtime.stream_workspace); the answers for streams
    // that are not capturing are remembered here per (device, stream). A capturing stream asks every time (the
    // provider gives each capture its own).
    PyObject* workspace_provider = nullptr;
    cu::StreamIsCapturingFn stream_is_capturing = nullptr;
    std::unordered_map<Key, std::pair<int64_t, int64_t>, KeyHash> workspaces;
};

Globals g;

const char* kPlanCapsule = "deep_gemm._C.Plan";

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
    auto capturing = reinterpret_cast<cu::StreamIsCapturingFn>(dlsym(lib, "cuStreamIsCapturing"));
    if (encode == nullptr or launch == nullptr or ctx == nullptr or err == nullptr or capturing == nullptr)
        return false;
    g.stream_is_capturing = capturing;
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

// ---- Reading a call's arguments ----

#ifdef DG_WITH_TORCH
// Reads a plain torch.Tensor of a known dtype and rank 1-3 (device -1 = not CUDA); false for anything else.
// NOTES: exact types only (Tensor, Parameter): subclasses (fake tensors, tensor subclasses) belong to the Python path.
bool read_tensor(PyObject* obj, Tensor& t) {
    if (not THPVariable_CheckExact(obj))
        return false;
    const at::Tensor& x = THPVariable_Unpack(obj);
    if (not x.defined())
        return false;
    t.rank = x.dim();
    if (t.rank < 1 or t.rank > kMaxRank)
        return false;
    switch (x.scalar_type()) {
        case at::kFloat8_e4m3fn: t.dtype = 1; break;
        case at::kFloat: t.dtype = 2; break;
        case at::kBFloat16: t.dtype = 3; break;
        case at::kInt: t.dtype = 4; break;
        default: return false;
    }
    const auto sizes = x.sizes();
    const auto strides = x.strides();
    for (int64_t d = 0; d < t.rank; ++d)
        t.size[d] = sizes[d], t.stride[d] = strides[d];
    const bool cuda = x.is_cuda();
    t.device = cuda ? x.device().index() : -1;
    t.ptr = cuda ? reinterpret_cast<int64_t>(x.data_ptr()) : 0;
    return true;
}
#else
PyObject* call_method(PyObject* obj, PyObject* name) {
    PyObject* args[] = {obj};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
}

bool read_ints(PyObject* tuple, int64_t rank, int64_t* out) {
    if (not PyTuple_Check(tuple) or PyTuple_GET_SIZE(tuple) != rank)
        return false;
    for (int64_t i = 0; i < rank; ++i) {
        out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (out[i] == -1 and PyErr_Occurred())
            return false;
    }
    return true;
}

// Reads a plain torch.Tensor of a known dtype and rank 1-3 (device -1 = not CUDA); false (no error set) for
// anything else. NOTES: exact types only (Tensor, Parameter): subclasses may override attribute access or
// __torch_function__ (fake tensors, tensor subclasses), and those belong to the Python path.
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
    for (int i = 0; i < kNumDtypes; ++i)
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
    if (ptr != nullptr and PyTuple_Check(shape)) {
        t.rank = PyTuple_GET_SIZE(shape);
        if (t.rank >= 1 and t.rank <= kMaxRank and read_ints(shape, t.rank, t.size)
            and read_ints(stride, t.rank, t.stride)) {
            t.device = PyLong_AsLongLong(device);
            t.ptr = PyLong_AsLongLong(ptr);
            ok = not PyErr_Occurred();
        }
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

bool read_exact_int(PyObject* obj, int64_t& out) {
    if (not PyLong_CheckExact(obj))  // bool and int subclasses belong to the Python path
        return false;
    out = PyLong_AsLongLong(obj);
    if (out == -1 and PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return true;
}

void push_tensor_key(const Tensor& t) {
    g.key.push_back(t.dtype);
    g.key.push_back(t.device);
    g.key.push_back(t.rank);
    for (int64_t d = 0; d < t.rank; ++d) {
        g.key.push_back(t.size[d]);
        g.key.push_back(t.stride[d]);
    }
}

// Reads op `op`'s arguments into `t` and builds the layout key in g.key; false for anything the Python path must
// handle (no error set).
bool read_call(int op, PyObject* const* args, Py_ssize_t nargs, Tensor (&t)[kMaxTensors], int& num_tensors) {
    const std::vector<int>& sig = g.signatures[op];
    if (static_cast<size_t>(nargs) != sig.size())
        return false;
    g.key.clear();
    g.key.push_back(op);
    g.key.push_back(g.num_sms_cap);
    num_tensors = 0;
    for (size_t i = 0; i < sig.size(); ++i) {
        PyObject* arg = args[i];
        switch (sig[i]) {
            case kArgPair: {
                if (not PyTuple_CheckExact(arg) or PyTuple_GET_SIZE(arg) != 2 or num_tensors + 2 > kMaxTensors)
                    return false;
                for (int j = 0; j < 2; ++j) {
                    if (not read_tensor(PyTuple_GET_ITEM(arg, j), t[num_tensors]))
                        return false;
                    push_tensor_key(t[num_tensors++]);
                }
                break;
            }
            case kArgTensor:
                if (num_tensors + 1 > kMaxTensors or not read_tensor(arg, t[num_tensors]))
                    return false;
                push_tensor_key(t[num_tensors++]);
                break;
            case kArgInt: {
                int64_t v;
                if (not read_exact_int(arg, v))
                    return false;
                g.key.push_back(v);
                break;
            }
            case kArgIntList: {
                const bool is_list = PyList_CheckExact(arg);
                if (not is_list and not PyTuple_CheckExact(arg))
                    return false;
                const Py_ssize_t n = is_list ? PyList_GET_SIZE(arg) : PyTuple_GET_SIZE(arg);
                g.key.push_back(n);
                for (Py_ssize_t j = 0; j < n; ++j) {
                    int64_t v;
                    if (not read_exact_int(is_list ? PyList_GET_ITEM(arg, j) : PyTuple_GET_ITEM(arg, j), v))
                        return false;
                    g.key.push_back(v);
                }
                break;
            }
            default:
                return false;
        }
    }
    return true;
}

// ---- Plans ----

void destroy_plan(PyObject* capsule) {
    delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
}

bool as_i64(PyObject* obj, int64_t& out) {
    out = PyLong_AsLongLong(obj);
    return not (out == -1 and PyErr_Occurred());
}

// A tuple of `n` ints (n < 0: any length, returned in `n`).
bool int_tuple(PyObject* obj, Py_ssize_t& n, int64_t* out, Py_ssize_t capacity, const char* what) {
    if (not PyTuple_Check(obj) or (n >= 0 and PyTuple_GET_SIZE(obj) != n) or PyTuple_GET_SIZE(obj) > capacity) {
        PyErr_Format(PyExc_ValueError, "deep_gemm._C: plan field %s has the wrong arity", what);
        return false;
    }
    n = PyTuple_GET_SIZE(obj);
    for (Py_ssize_t i = 0; i < n; ++i)
        if (not as_i64(PyTuple_GET_ITEM(obj, i), out[i]))
            return false;
    return true;
}

bool bad_plan(const char* what) {
    PyErr_Format(PyExc_ValueError, "deep_gemm._C: invalid plan: %s", what);
    return false;
}

// launch = (grid, block, smem, cluster, buffer_size, arg_offsets, init_bytes, maps, ptrs, (workspace offset,
// workspace bytes)); see make_plan.
bool parse_launch(PyObject* obj, int num_tensors, Launch& launch) {
    if (not PyTuple_Check(obj) or PyTuple_GET_SIZE(obj) != 10)
        return bad_plan("a launch must be a 10-tuple");
    int64_t v[5];
    for (int i = 0; i < 5; ++i)
        if (not as_i64(PyTuple_GET_ITEM(obj, i), v[i]))
            return false;
    const int64_t buffer_size = v[4];
    if (buffer_size <= 0 or buffer_size > (1 << 16))
        return bad_plan("parameter buffer size out of range");
    std::memset(&launch.cluster, 0, sizeof(launch.cluster));
    std::memset(&launch.config, 0, sizeof(launch.config));
    launch.cluster.id = cu::kLaunchAttributeClusterDimension;
    launch.cluster.value.cluster_dim.x = static_cast<unsigned int>(v[3]);
    launch.cluster.value.cluster_dim.y = launch.cluster.value.cluster_dim.z = 1;
    launch.config.grid_dim_x = static_cast<unsigned int>(v[0]);
    launch.config.grid_dim_y = launch.config.grid_dim_z = 1;
    launch.config.block_dim_x = static_cast<unsigned int>(v[1]);
    launch.config.block_dim_y = launch.config.block_dim_z = 1;
    launch.config.shared_mem_bytes = static_cast<unsigned int>(v[2]);
    launch.config.num_attrs = 1;  // attrs points into the launch; set once the plan is complete

    const size_t size = (static_cast<size_t>(buffer_size) + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    launch.buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, size)));
    if (not launch.buffer) {
        PyErr_NoMemory();
        return false;
    }
    std::memset(launch.buffer.get(), 0, size);
    PyObject* init = PyTuple_GET_ITEM(obj, 6);
    if (not PyBytes_Check(init) or PyBytes_GET_SIZE(init) != buffer_size)
        return bad_plan("init_bytes must be bytes of buffer_size");
    std::memcpy(launch.buffer.get(), PyBytes_AS_STRING(init), static_cast<size_t>(buffer_size));

    PyObject* offsets = PyTuple_GET_ITEM(obj, 5);
    if (not PyTuple_Check(offsets) or PyTuple_GET_SIZE(offsets) == 0)
        return bad_plan("arg_offsets must be a non-empty tuple");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(offsets); ++i) {
        int64_t off;
        if (not as_i64(PyTuple_GET_ITEM(offsets, i), off))
            return false;
        if (off < 0 or off >= buffer_size)
            return bad_plan("argument offset outside the buffer");
        launch.params.push_back(launch.buffer.get() + off);
    }

    PyObject* maps = PyTuple_GET_ITEM(obj, 7);
    if (not PyTuple_Check(maps))
        return bad_plan("maps must be a tuple");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(maps); ++i) {
        // (offset, tensor, ptr_offset, data_type, dims, strides_bytes, box, swizzle, l2_promotion)
        PyObject* spec = PyTuple_GET_ITEM(maps, i);
        if (not PyTuple_Check(spec) or PyTuple_GET_SIZE(spec) != 9)
            return bad_plan("a map must be a 9-tuple");
        MapPatch m{};
        int64_t s[4], dims[kMaxRank], strides[kMaxRank], box[kMaxRank], swizzle, l2;
        for (int j = 0; j < 4; ++j)
            if (not as_i64(PyTuple_GET_ITEM(spec, j), s[j]))
                return false;
        Py_ssize_t rank = -1, num_strides = -1, box_rank = -1;
        if (not int_tuple(PyTuple_GET_ITEM(spec, 4), rank, dims, kMaxRank, "map dims"))
            return false;
        num_strides = rank - 1, box_rank = rank;
        if (rank < 1 or not int_tuple(PyTuple_GET_ITEM(spec, 5), num_strides, strides, kMaxRank, "map strides")
            or not int_tuple(PyTuple_GET_ITEM(spec, 6), box_rank, box, kMaxRank, "map box")
            or not as_i64(PyTuple_GET_ITEM(spec, 7), swizzle) or not as_i64(PyTuple_GET_ITEM(spec, 8), l2))
            return PyErr_Occurred() ? false : bad_plan("map rank");
        if (s[0] < 0 or s[0] % static_cast<int64_t>(kBufferAlign) != 0
            or s[0] + 128 > buffer_size)
            return bad_plan("a tensor map must lie 128-byte aligned inside the buffer");
        if (s[1] < 0 or s[1] >= num_tensors)
            return bad_plan("map tensor index out of range");
        m.offset = static_cast<size_t>(s[0]);
        m.tensor = static_cast<int>(s[1]);
        m.ptr_offset = s[2];
        m.data_type = static_cast<int>(s[3]);
        m.rank = static_cast<unsigned int>(rank);
        for (Py_ssize_t d = 0; d < rank; ++d) {
            m.dims[d] = static_cast<uint64_t>(dims[d]);
            m.box[d] = static_cast<unsigned int>(box[d]);
            if (d + 1 < rank)
                m.strides[d] = static_cast<uint64_t>(strides[d]);
        }
        m.swizzle = static_cast<int>(swizzle);
        m.l2_promotion = static_cast<int>(l2);
        m.encoded_ptr = -1;
        launch.maps.push_back(m);
    }

    PyObject* ptrs = PyTuple_GET_ITEM(obj, 8);
    if (not PyTuple_Check(ptrs))
        return bad_plan("ptrs must be a tuple");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ptrs); ++i) {
        Py_ssize_t three = 3;
        int64_t p[3];
        if (not int_tuple(PyTuple_GET_ITEM(ptrs, i), three, p, 3, "ptr patch"))
            return false;
        if (p[0] < 0 or p[0] + 8 > buffer_size or p[0] % 8 != 0)
            return bad_plan("a pointer must lie 8-byte aligned inside the buffer");
        if (p[1] < 0 or p[1] >= num_tensors)
            return bad_plan("pointer tensor index out of range");
        launch.ptrs.push_back(PtrPatch{static_cast<size_t>(p[0]), static_cast<int>(p[1]), p[2]});
    }

    Py_ssize_t two = 2;
    int64_t w[2];
    if (not int_tuple(PyTuple_GET_ITEM(obj, 9), two, w, 2, "workspace"))
        return false;
    if (w[0] >= 0 and (w[0] + 8 > buffer_size or w[0] % 8 != 0 or w[1] <= 0))
        return bad_plan("a workspace pointer must lie 8-byte aligned inside the buffer, of a positive size");
    launch.workspace_offset = w[0] < 0 ? -1 : w[0];
    launch.workspace_bytes = w[0] < 0 ? 0 : w[1];
    return true;
}

// make_plan(function, context, device, align_masks, extents, outputs, launches) -> plan capsule.
PyObject* make_plan(PyObject*, PyObject* args) {
    unsigned long long function, context;
    int device;
    PyObject *align_masks, *extents, *outputs, *launches;
    if (not PyArg_ParseTuple(args, "KKiO!O!O!O!", &function, &context, &device, &PyTuple_Type, &align_masks,
                             &PyTuple_Type, &extents, &PyTuple_Type, &outputs, &PyTuple_Type, &launches))
        return nullptr;
    auto plan = std::make_unique<Plan>();
    plan->function = reinterpret_cast<cu::Function>(static_cast<uintptr_t>(function));
    plan->context = reinterpret_cast<cu::Context>(static_cast<uintptr_t>(context));
    plan->device = device;
    Py_ssize_t n = -1;
    if (not int_tuple(align_masks, n, plan->align_mask, kMaxTensors, "align_masks"))
        return nullptr;
    plan->num_tensors = static_cast<int>(n);
    if (not int_tuple(extents, n, plan->extents, kMaxTensors, "extents"))
        return nullptr;
    plan->outputs = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outputs); ++i) {
        int64_t o;
        if (not as_i64(PyTuple_GET_ITEM(outputs, i), o))
            return nullptr;
        if (o < 0 or o >= plan->num_tensors) {
            bad_plan("output index out of range");
            return nullptr;
        }
        plan->outputs |= 1u << o;
    }
    plan->launches.resize(static_cast<size_t>(PyTuple_GET_SIZE(launches)));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(launches); ++i)
        if (not parse_launch(PyTuple_GET_ITEM(launches, i), plan->num_tensors, plan->launches[i]))
            return nullptr;
    for (Launch& launch : plan->launches)
        launch.config.attrs = &launch.cluster;
    PyObject* capsule = PyCapsule_New(plan.get(), kPlanCapsule, destroy_plan);
    if (capsule != nullptr)
        plan.release();
    return capsule;
}

bool overlaps(int64_t a, int64_t a_len, int64_t b, int64_t b_len) {
    return a_len > 0 and b_len > 0 and a < b + b_len and b < a + a_len;
}

// Whether `ptrs` satisfy the plan's per-call conditions: alignment, no output overlapping another tensor.
bool pointers_fit(const Plan& plan, const int64_t* ptrs) {
    for (int i = 0; i < plan.num_tensors; ++i)
        if (ptrs[i] & plan.align_mask[i])
            return false;
    for (int o = 0; o < plan.num_tensors; ++o) {
        if (not (plan.outputs >> o & 1u))
            continue;
        for (int i = 0; i < plan.num_tensors; ++i)
            if (i != o and overlaps(ptrs[i], plan.extents[i], ptrs[o], plan.extents[o]))
                return false;
    }
    return true;
}

// The address of `stream`'s workspace of at least `bytes` bytes (0 with a Python error set).
int64_t stream_workspace(int device, void* stream, int64_t bytes) {
    int status = 1;  // CU_STREAM_CAPTURE_STATUS_ACTIVE; an error asks the provider too
    const bool capturing = g.stream_is_capturing(stream, &status) != 0 or status != 0;
    Key key{device, static_cast<int64_t>(reinterpret_cast<intptr_t>(stream))};
    if (not capturing) {
        auto it = g.workspaces.find(key);
        if (it != g.workspaces.end() and it->second.second >= bytes)
            return it->second.first;
    }
    if (g.workspace_provider == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "deep_gemm._C: no workspace provider (set_workspace_provider)");
        return 0;
    }
    PyObject* result = PyObject_CallFunction(g.workspace_provider, "iL", device, static_cast<long long>(bytes));
    if (result == nullptr)
        return 0;
    int64_t answer[2] = {0, 0};
    Py_ssize_t two = 2;
    const bool ok = PyTuple_Check(result) and int_tuple(result, two, answer, 2, "workspace");
    Py_DECREF(result);
    if (not ok or answer[0] == 0 or answer[1] < bytes) {
        if (not PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "deep_gemm._C: the workspace provider answered no (address, bytes) "
                                                "of the size asked");
        return 0;
    }
    if (not capturing)
        g.workspaces[key] = {answer[0], answer[1]};
    return answer[0];
}

// Encodes what changed and launches every launch of the plan on the device's current stream.
PyObject* run_plan(Plan& plan, const int64_t* ptrs) {
    if (plan.launches.empty())
        Py_RETURN_NONE;
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
    static const unsigned int kElementStrides[kMaxRank] = {1, 1, 1};
    for (Launch& launch : plan.launches) {
        uint8_t* buffer = launch.buffer.get();
        for (MapPatch& m : launch.maps) {
            const int64_t ptr = ptrs[m.tensor] + m.ptr_offset;
            if (m.encoded_ptr == ptr)
                continue;
            auto* map = reinterpret_cast<cu::TensorMap*>(buffer + m.offset);
            const cu::Result r = g.encode(map, m.data_type, m.rank, reinterpret_cast<void*>(ptr), m.dims, m.strides,
                                          m.box, kElementStrides, cu::kTensorMapInterleaveNone, m.swizzle,
                                          m.l2_promotion, cu::kTensorMapFloatOOBFillNone);
            if (r != 0) {
                m.encoded_ptr = -1;
                return driver_error("cuTensorMapEncodeTiled", r);
            }
            m.encoded_ptr = ptr;
        }
        for (const PtrPatch& p : launch.ptrs) {
            const int64_t ptr = ptrs[p.tensor] + p.ptr_offset;
            std::memcpy(buffer + p.offset, &ptr, sizeof(ptr));
        }
        if (launch.workspace_offset >= 0) {
            const int64_t ptr = stream_workspace(plan.device, stream, launch.workspace_bytes);
            if (ptr == 0)
                return nullptr;
            std::memcpy(buffer + launch.workspace_offset, &ptr, sizeof(ptr));
        }
        launch.config.stream = stream;
        const cu::Result r = g.launch(&launch.config, plan.function, launch.params.data(), nullptr);
        if (r != 0)
            return driver_error("cuLaunchKernelEx", r);
    }
    Py_RETURN_NONE;
}

Plan* plan_of(PyObject* capsule) {
    return static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
}

PyObject* run_slow_path(int op, PyObject* const* args, Py_ssize_t nargs, bool with_key) {
    ++g.num_slow;
    PyObject* arg_tuple = PyTuple_New(nargs);
    if (arg_tuple == nullptr)
        return nullptr;
    for (Py_ssize_t i = 0; i < nargs; ++i) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(arg_tuple, i, args[i]);
    }
    PyObject* key_obj = Py_None;
    Py_INCREF(Py_None);
    if (with_key) {
        Py_DECREF(Py_None);
        key_obj = PyTuple_New(static_cast<Py_ssize_t>(g.key.size()));
        if (key_obj == nullptr) {
            Py_DECREF(arg_tuple);
            return nullptr;
        }
        for (size_t i = 0; i < g.key.size(); ++i)
            PyTuple_SET_ITEM(key_obj, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(g.key[i]));
    }
    // The Python side may call back into this module (launch), which does not touch g.key; copy it anyway so
    // that a re-entrant call (e.g. from a tensor subclass) cannot change what is registered.
    Key key = g.key;
    PyObject* op_obj = PyLong_FromLong(op);
    PyObject* call_args[] = {op_obj, arg_tuple, key_obj};
    PyObject* result = op_obj != nullptr ? PyObject_Vectorcall(g.slow_path, call_args, 3, nullptr) : nullptr;
    Py_XDECREF(op_obj);
    Py_DECREF(arg_tuple);
    Py_DECREF(key_obj);
    if (result == nullptr)
        return nullptr;
    if (result != Py_None and with_key) {
        if (plan_of(result) == nullptr) {
            Py_DECREF(result);
            return nullptr;
        }
        if (g.plans.size() >= kMaxPlans) {
            for (auto& entry : g.plans)
                Py_DECREF(entry.second);
            g.plans.clear();
        }
        auto [it, inserted] = g.plans.emplace(std::move(key), result);
        if (not inserted) {
            Py_DECREF(it->second);
            it->second = result;
        }
        ++g.num_registered;
        Py_RETURN_NONE;  // the reference moved into the table
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

// call(op, *args): launch through the layout's cached plan, or take the Python slow path.
PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 1 or not PyLong_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "deep_gemm._C.call(op, *args): op must be an int");
        return nullptr;
    }
    const long op = PyLong_AsLong(args[0]);
    if (op < 0 or static_cast<size_t>(op) >= g.signatures.size() or g.slow_path == nullptr) {
        PyErr_Format(PyExc_ValueError, "deep_gemm._C.call: unknown op %ld (was init() called?)", op);
        return nullptr;
    }
    Tensor t[kMaxTensors];
    int num_tensors = 0;
    if (not read_call(static_cast<int>(op), args + 1, nargs - 1, t, num_tensors))
        return run_slow_path(static_cast<int>(op), args + 1, nargs - 1, false);
    if (t[0].device < 0 or g.raw_stream == Py_None or not load_driver())
        return run_slow_path(static_cast<int>(op), args + 1, nargs - 1, false);
    auto it = g.plans.find(g.key);
    if (it == g.plans.end())
        return run_slow_path(static_cast<int>(op), args + 1, nargs - 1, true);
    Plan& plan = *plan_of(it->second);
    int64_t ptrs[kMaxTensors];
    for (int i = 0; i < num_tensors; ++i)
        ptrs[i] = t[i].ptr;
    cu::Context current = nullptr;
    if (plan.num_tensors != num_tensors or not pointers_fit(plan, ptrs)
        or (not plan.launches.empty() and (g.ctx_get_current(&current) != 0 or current != plan.context)))
        return run_slow_path(static_cast<int>(op), args + 1, nargs - 1, false);
    PyObject* result = run_plan(plan, ptrs);
    if (result != nullptr)
        ++g.num_fast;
    return result;
}

// launch(plan, pointers): launch a plan with explicit tensor addresses (the Python slow path's launch, after its
// own checks; the same conditions are re-checked here as a guard).
PyObject* launch(PyObject*, PyObject* args) {
    PyObject *capsule, *ptr_tuple;
    if (not PyArg_ParseTuple(args, "OO!", &capsule, &PyTuple_Type, &ptr_tuple))
        return nullptr;
    Plan* plan = plan_of(capsule);
    if (plan == nullptr)
        return nullptr;
    int64_t ptrs[kMaxTensors];
    Py_ssize_t n = plan->num_tensors;
    if (not int_tuple(ptr_tuple, n, ptrs, kMaxTensors, "pointers"))
        return nullptr;
    if (not pointers_fit(*plan, ptrs)) {
        PyErr_SetString(PyExc_RuntimeError, "deep_gemm._C.launch: misaligned or overlapping pointers (not checked "
                                            "by the caller: a bug)");
        return nullptr;
    }
    if (plan->launches.empty())
        Py_RETURN_NONE;
    if (g.raw_stream == Py_None or not load_driver()) {
        PyErr_SetString(PyExc_RuntimeError, "deep_gemm._C.launch: no CUDA driver or torch without CUDA");
        return nullptr;
    }
    cu::Context current = nullptr;
    const cu::Result r = g.ctx_get_current(&current);
    if (r != 0)
        return driver_error("cuCtxGetCurrent", r);
    if (current != plan->context) {
        PyErr_SetString(PyExc_RuntimeError, "deep_gemm._C.launch: the plan's CUDA context is not current");
        return nullptr;
    }
    return run_plan(*plan, ptrs);
}

void clear_plans() {
    for (auto& entry : g.plans)
        Py_DECREF(entry.second);
    g.plans.clear();
}

// init(slow_path, raw_stream, error_type, Tensor, Parameter, dtypes, signatures)
PyObject* init(PyObject*, PyObject* args) {
    PyObject *slow_path, *raw_stream, *error_type, *tensor_type, *parameter_type, *dtypes, *signatures;
    if (not PyArg_ParseTuple(args, "OOOO!O!O!O!", &slow_path, &raw_stream, &error_type, &PyType_Type, &tensor_type,
                             &PyType_Type, &parameter_type, &PyTuple_Type, &dtypes, &PyTuple_Type, &signatures))
        return nullptr;
    if (PyTuple_GET_SIZE(dtypes) != kNumDtypes) {
        PyErr_SetString(PyExc_ValueError, "deep_gemm._C.init: dtypes must be (float8_e4m3fn, float32, bfloat16, "
                                          "int32)");
        return nullptr;
    }
    std::vector<std::vector<int>> sigs;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(signatures); ++i) {
        PyObject* sig = PyTuple_GET_ITEM(signatures, i);
        if (not PyTuple_Check(sig)) {
            PyErr_SetString(PyExc_TypeError, "deep_gemm._C.init: a signature must be a tuple of arg kinds");
            return nullptr;
        }
        std::vector<int> kinds;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(sig); ++j) {
            const long kind = PyLong_AsLong(PyTuple_GET_ITEM(sig, j));
            if (kind < kArgPair or kind > kArgIntList) {
                if (not PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "deep_gemm._C.init: unknown argument kind");
                return nullptr;
            }
            kinds.push_back(static_cast<int>(kind));
        }
        sigs.push_back(std::move(kinds));
    }
    PyObject* keep[] = {slow_path, raw_stream, error_type, tensor_type, parameter_type};
    for (PyObject* o : keep)
        Py_INCREF(o);
    for (Py_ssize_t i = 0; i < kNumDtypes; ++i) {
        Py_INCREF(PyTuple_GET_ITEM(dtypes, i));
        g.dtypes[i] = PyTuple_GET_ITEM(dtypes, i);
    }
    g.slow_path = slow_path;
    g.raw_stream = raw_stream;
    g.error_type = error_type;
    g.tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type);
    g.parameter_type = reinterpret_cast<PyTypeObject*>(parameter_type);
    g.signatures = std::move(sigs);
    clear_plans();
    Py_RETURN_NONE;
}

// set_workspace_provider(provider): see Globals::workspace_provider. Forgets the remembered workspaces.
PyObject* set_workspace_provider(PyObject*, PyObject* provider) {
    if (not PyCallable_Check(provider)) {
        PyErr_SetString(PyExc_TypeError, "deep_gemm._C.set_workspace_provider: the provider must be callable");
        return nullptr;
    }
    Py_INCREF(provider);
    Py_XDECREF(g.workspace_provider);
    g.workspace_provider = provider;
    g.workspaces.clear();
    Py_RETURN_NONE;
}

PyObject* set_num_sms_cap(PyObject*, PyObject* arg) {
    int64_t cap;
    if (not as_i64(arg, cap))
        return nullptr;
    g.num_sms_cap = cap;
    Py_RETURN_NONE;
}

PyObject* clear(PyObject*, PyObject*) {
    clear_plans();
    Py_RETURN_NONE;
}

PyObject* stats(PyObject*, PyObject*) {
    return Py_BuildValue("{s:K,s:K,s:K,s:n}", "fast", static_cast<unsigned long long>(g.num_fast), "slow",
                         static_cast<unsigned long long>(g.num_slow), "registered",
                         static_cast<unsigned long long>(g.num_registered), "plans",
                         static_cast<Py_ssize_t>(g.plans.size()));
}

// layout_key(op, *args): the key `call` would use, or None when the call is not fast-path material.
PyObject* layout_key(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 1 or not PyLong_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "layout_key(op, *args): op must be an int");
        return nullptr;
    }
    const long op = PyLong_AsLong(args[0]);
    if (op < 0 or static_cast<size_t>(op) >= g.signatures.size()) {
        PyErr_Format(PyExc_ValueError, "layout_key: unknown op %ld", op);
        return nullptr;
    }
    Tensor t[kMaxTensors];
    int num_tensors = 0;
    if (not read_call(static_cast<int>(op), args + 1, nargs - 1, t, num_tensors))
        Py_RETURN_NONE;
    PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(g.key.size()));
    if (tuple == nullptr)
        return nullptr;
    for (size_t i = 0; i < g.key.size(); ++i)
        PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(g.key[i]));
    return tuple;
}

PyMethodDef methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL,
     "call(op, *args): run public GEMM `op` through its layout's cached plan, else through the Python slow path."},
    {"launch", launch, METH_VARARGS, "launch(plan, pointers): launch a plan with these tensor addresses."},
    {"make_plan", make_plan, METH_VARARGS,
     "make_plan(function, context, device, align_masks, extents, outputs, launches) -> plan"},
    {"init", init, METH_VARARGS,
     "init(slow_path, raw_stream, error_type, Tensor, Parameter, dtypes, signatures)"},
    {"set_workspace_provider", set_workspace_provider, METH_O,
     "set_workspace_provider(provider): provider(device, bytes) -> (address, bytes) of the current stream's "
     "workspace, for launches that need one."},
    {"set_num_sms_cap", set_num_sms_cap, METH_O, "The set_num_sms cap (0: none), part of every layout key."},
    {"clear", clear, METH_NOARGS, "Forget every cached plan."},
    {"stats", stats, METH_NOARGS, "Counters: fast launches, slow-path calls, plans registered, plans held."},
    {"tensor_reader", [](PyObject*, PyObject*) -> PyObject* { return PyUnicode_FromString(DG_TENSOR_READER); },
     METH_NOARGS, "How this build reads tensors: \"CPython API\" or \"torch headers\"."},
    {"layout_key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(layout_key)), METH_FASTCALL,
     "The layout key `call` would use for these arguments, or None when the call is not fast-path material."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "deep_gemm._C", "The launch path of deep_gemm.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C() {
    g.s_dtype = PyUnicode_InternFromString("dtype");
    g.s_shape = PyUnicode_InternFromString("shape");
    g.s_stride = PyUnicode_InternFromString("stride");
    g.s_data_ptr = PyUnicode_InternFromString("data_ptr");
    g.s_get_device = PyUnicode_InternFromString("get_device");
    if (g.s_dtype == nullptr or g.s_shape == nullptr or g.s_stride == nullptr or g.s_data_ptr == nullptr
        or g.s_get_device == nullptr)
        return nullptr;
    g.key.reserve(64);
    return PyModule_Create(&module);
}
