#pragma once

#include <deep_gemm/common/types.cuh>

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

// Call f(Int<0>{}), ..., f(Int<N - 1>{}) in order: a loop whose index is a compile-time constant.
template <uint32_t N, uint32_t I = 0, class F>
__device__ __forceinline__ void static_for(F&& f) {
    if constexpr (I < N) {
        f(Int<I>{});
        static_for<N, I + 1>(f);
    }
}

// The value `x`, which the compiler can no longer treat as a constant (loop bounds it must not unroll by).
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
    uint32_t r;
    asm volatile("mov.u32 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}

// The type `A` when `kCond`, else `B` (std::conditional, which NVRTC's headers may lack).
template <bool kCond, typename A, typename B>
struct Conditional {
    using Type = A;
};
template <typename A, typename B>
struct Conditional<false, A, B> {
    using Type = B;
};

// Synchronise `kNumThreads` threads (whole warps) on hardware named barrier `barrier_id`.
// NOTES: id 0 is `__syncthreads`; callers own ids 1..15 (the sm90 GEMMs use 2 + math warpgroup index for the
// epilogues, the wgrad kernel 4 and 5 to order its warpgroups' WGMMA issue).
template <uint32_t kNumThreads>
__device__ __forceinline__ void named_barrier_sync(uint32_t barrier_id) {
    DG_STATIC_ASSERT(kNumThreads % 32 == 0, "named barriers count whole warps");
    asm volatile("bar.sync %0, %1;" :: "r"(barrier_id), "n"(kNumThreads) : "memory");
}

// Arrive on named barrier `barrier_id` without waiting (the waiters use `named_barrier_sync` with the same count).
template <uint32_t kNumThreads>
__device__ __forceinline__ void named_barrier_arrive(uint32_t barrier_id) {
    DG_STATIC_ASSERT(kNumThreads % 32 == 0, "named barriers count whole warps");
    asm volatile("bar.arrive %0, %1;" :: "r"(barrier_id), "n"(kNumThreads) : "memory");
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// The 14-bit start-address field (address >> 4) of a shared-memory matrix descriptor (sm90 WGMMA, sm100 UMMA).
// NOTES: masked: in a cluster launch a CTA's shared-window address carries its cluster rank in high bits, which
// unmasked spill into the leading byte offset (ignored by K-major descriptors, not by MN-major ones: an H100 read an
// MN-major B's second and later column chunks from the wrong place in cluster rank 1 only).
__device__ __forceinline__ uint32_t desc_start_address(uint32_t smem_addr) {
    return (smem_addr >> 4) & ((1u << 14) - 1);
}

// Loads from a 32-bit shared-state-space address (hot loops compute it once and advance it by offsets).
__device__ __forceinline__ float ld_shared_f32(uint32_t smem_addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr));
    return v;
}

__device__ __forceinline__ uint32_t ld_shared_u16(uint32_t smem_addr) {
    uint16_t v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(smem_addr));
    return v;
}

// A BF16 value's 16 bits (low half of `bits`) as the FP32 value it denotes, exactly.
__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits) {
    return __uint_as_float(bits << 16);
}

__device__ __forceinline__ void ld_shared_v2_f32(uint32_t smem_addr, float& x, float& y) {
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(x), "=f"(y) : "r"(smem_addr));
}

// Two floats from the shared memory of cluster CTA `cta_rank` at this CTA's shared-memory address `smem_addr`.
__device__ __forceinline__ float2 ld_shared_cluster_v2_f32(uint32_t smem_addr, uint32_t cta_rank) {
    float2 v;
    asm volatile(
        "{\n\t"
        ".reg .b32 remote;\n\t"
        "mapa.shared::cluster.u32 remote, %2, %3;\n\t"
        "ld.shared::cluster.v2.f32 {%0, %1}, [remote];\n\t"
        "}"
        : "=f"(v.x), "=f"(v.y) : "r"(smem_addr), "r"(cta_rank) : "memory");
    return v;
}

__device__ __forceinline__ void st_shared_v2(void* ptr, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(smem_u32(ptr)), "f"(x), "f"(y));
}

// Warp-specialised register budgets: the calling warpgroup lowers (dealloc) or raises (alloc) its per-thread
// register limit to kNumRegs. All warps of the warpgroup must execute the same call.
template <uint32_t kNumRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(kNumRegs));
}

template <uint32_t kNumRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(kNumRegs));
}

// stmatrix .m8n8 .b16, not transposed: lanes 8i..8i+7 give the 16-byte row addresses of 8x8 matrix i (i < 4 for
// x4, i < 2 for x2), and every lane's register r_i holds row lane / 4, columns 2 (lane % 4) + {0, 1} of matrix i.
__device__ __forceinline__ void stmatrix_x4(void* smem_row, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(smem_u32(smem_row)), "r"(r0), "r"(r1), "r"(r2), "r"(r3));
}

__device__ __forceinline__ void stmatrix_x2(void* smem_row, uint32_t r0, uint32_t r1) {
    asm volatile("stmatrix.sync.aligned.x2.m8n8.shared.b16 [%0], {%1, %2};\n"
                 :: "r"(smem_u32(smem_row)), "r"(r0), "r"(r1));
}

// Pack two floats into one register of two BF16 values (round to nearest even), low half first.
// 16 bytes from shared memory to global memory through registers (both addresses 16-byte aligned).
__device__ __forceinline__ void copy_16b_shared_to_global(void* dst, const void* src) {
    uint32_t r0, r1, r2, r3;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(src)));
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

// Start an asynchronous 4-byte copy from global to shared memory (non-bulk cp.async; completion is tracked with
// `Barrier::arrive_after_cp_async`). `src` must be 4-byte aligned.
__device__ __forceinline__ void cp_async_4b(uint32_t smem_addr, const void* src) {
    asm volatile("{ cp.async.ca.shared.global [%0], [%1], 4; }" :: "r"(smem_addr), "l"(src));
}

// Global-memory accesses of the workspace K splits (sm90 WorkspaceSplitEpilogue): a float2 store, a relaxed
// GPU-scope float2 load (never a stale L1 line), and an acquire-release GPU-scope add that returns the old value.
__device__ __forceinline__ void st_global_v2_f32(float* ptr, float x, float y) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" :: "l"(ptr), "f"(x), "f"(y) : "memory");
}

__device__ __forceinline__ float2 ld_relaxed_gpu_v2_f32(const float* ptr) {
    float2 v;
    asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(ptr) : "memory");
    return v;
}

__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu_u32(uint32_t* ptr, uint32_t value) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(value) : "memory");
    return old;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

}  // namespace deep_gemm
