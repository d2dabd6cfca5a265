#pragma once

#include <cute/numeric/int.hpp>  // fixed-width integers under both NVRTC and nvcc
#include <cute/numeric/integral_constant.hpp>
#include <cute/util/type_traits.hpp>

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

// Call f(cute::Int<0>{}), ..., f(cute::Int<N - 1>{}) in order: a loop whose index is a compile-time constant.
template <class F, size_t... I>
__device__ __forceinline__ void static_for_impl(F&& f, cute::index_sequence<I...>) {
    (f(cute::Int<I>{}), ...);
}

template <uint32_t N, class F>
__device__ __forceinline__ void static_for(F&& f) {
    static_for_impl(f, cute::make_index_sequence<N>{});
}

// Synchronise `kNumThreads` threads (whole warps) on hardware named barrier `barrier_id`.
// NOTES: id 0 is `__syncthreads`; callers own ids 1..15 (the sm90 GEMM uses 2 + math warpgroup index).
template <uint32_t kNumThreads>
__device__ __forceinline__ void named_barrier_sync(uint32_t barrier_id) {
    DG_STATIC_ASSERT(kNumThreads % 32 == 0, "named barriers count whole warps");
    asm volatile("bar.sync %0, %1;" :: "r"(barrier_id), "n"(kNumThreads) : "memory");
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
