// The few CUDA driver API types and entry points the launch fast path uses, declared here so that the extension
// builds with a plain C++ compiler and no CUDA headers (libcuda is opened at run time).
// NOTES: these mirror the public, ABI-stable layouts of cuda.h (CUDA 12.x and 13.x); tests/csrc/test_cuda_abi.py
// static_asserts every size, offset and enum value below against the real cuda.h.
#pragma once

#include <cstdint>

namespace deep_gemm::cu {

using Result = int;       // CUresult; 0 = CUDA_SUCCESS
using Stream = void*;     // CUstream
using Function = void*;   // CUfunction
using Context = void*;    // CUcontext

// CUtensorMap: 128 opaque bytes, 128-byte aligned (cuda.h 13; 64 was enough before).
struct alignas(128) TensorMap {
    uint64_t opaque[16];
};

// CUlaunchAttribute: a 4-byte id, padding to 8, then a 64-byte value union.
struct LaunchAttribute {
    int id;
    char pad[4];
    union {
        char bytes[64];
        struct {
            unsigned int x, y, z;
        } cluster_dim;
    } value;
};

// CUlaunchConfig.
struct LaunchConfig {
    unsigned int grid_dim_x, grid_dim_y, grid_dim_z;
    unsigned int block_dim_x, block_dim_y, block_dim_z;
    unsigned int shared_mem_bytes;
    Stream stream;
    LaunchAttribute* attrs;
    unsigned int num_attrs;
};

constexpr int kLaunchAttributeClusterDimension = 4;  // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
constexpr int kTensorMapInterleaveNone = 0;          // CU_TENSOR_MAP_INTERLEAVE_NONE
constexpr int kTensorMapFloatOOBFillNone = 0;        // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE

using TensorMapEncodeTiledFn = Result (*)(TensorMap*, int data_type, unsigned int rank, void* global_address,
                                          const uint64_t* global_dim, const uint64_t* global_strides,
                                          const unsigned int* box_dim, const unsigned int* element_strides,
                                          int interleave, int swizzle, int l2_promotion, int oob_fill);
using LaunchKernelExFn = Result (*)(const LaunchConfig*, Function, void** kernel_params, void** extra);
using CtxGetCurrentFn = Result (*)(Context*);
using GetErrorStringFn = Result (*)(Result, const char**);
using StreamIsCapturingFn = Result (*)(Stream, int* capture_status);  // CUstreamCaptureStatus

}  // namespace deep_gemm::cu
