#pragma once

#include <cute/numeric/int.hpp>  // fixed-width integers under both NVRTC and nvcc

// NOTES: every message names the violated contract, so a bad host-side configuration fails at compile time
// with a sentence instead of a template backtrace.
#define DG_STATIC_ASSERT(cond, ...) static_assert(cond, "deep_gemm: " __VA_ARGS__)

namespace deep_gemm {

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
    return (a + b - 1) / b;
}

template <typename T>
__host__ __device__ constexpr T align_up(T a, T b) {
    return ceil_div(a, b) * b;
}

template <typename T>
__host__ __device__ constexpr T const_gcd(T a, T b) {
    return b == 0 ? a : const_gcd(b, a % b);
}

// Synchronise `kNumThreads` threads (whole warps) on hardware named barrier `kBarrierId`.
// NOTES: id 0 is `__syncthreads`; callers own ids 1..15.
template <uint32_t kNumThreads, uint32_t kBarrierId>
__device__ __forceinline__ void named_barrier_sync() {
    DG_STATIC_ASSERT(kNumThreads % 32 == 0, "named barriers count whole warps");
    DG_STATIC_ASSERT(kBarrierId >= 1 and kBarrierId < 16, "named barrier id must be in [1, 16)");
    asm volatile("bar.sync %0, %1;" :: "n"(kBarrierId), "n"(kNumThreads) : "memory");
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ float ld_shared(const float* ptr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_u32(ptr)));
    return v;
}

// Pack two floats into one register of two BF16 values (round to nearest even), low half first.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

}  // namespace deep_gemm
