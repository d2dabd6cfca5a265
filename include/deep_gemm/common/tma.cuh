#pragma once

// TMA (cp.async.bulk.tensor) wrappers for 2-D tensor maps, sm_90+.

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm {

// A CUtensorMap as the kernel receives it (by value, `const __grid_constant__`): 128 opaque bytes, 64-byte aligned.
// NOTES: 64-byte alignment, as the NVRTC builds on CuTe always had (and ran on the H200); CUDA 13's cuda.h declares
// CUtensorMap alignas(128), so the nvcc builds on CuTe placed the kernel parameters 64 bytes further (same SASS
// otherwise). The host passes parameters by pointer (kernelParams), so either layout launches the same way.
struct alignas(64) TmaDescriptor {
    uint8_t bytes[128];
};

// NOTES: the 64-bit L2 cache-policy operand of `.L2::cache_hint` for "evict normal"; the same constant CuTe passes
// (CacheHintSm90::EVICT_NORMAL), kept so the generated code is unchanged.
constexpr uint64_t kTmaCacheHintEvictNormal = 0x1000000000000000ull;

// Bring a tensor map into the descriptor cache before its first use.
__device__ __forceinline__ void prefetch_tma_descriptor(const TmaDescriptor* desc) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

// Load the box at (crd0 = inner, crd1 = outer) into this CTA's shared memory; the bytes complete on `bar`.
__device__ __forceinline__ void tma_load_2d(const TmaDescriptor* desc, const void* bar, void* smem, int32_t crd0,
                                            int32_t crd1, uint64_t cache_hint) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        :: "r"(smem_u32(smem)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_u32(bar)), "r"(crd0), "r"(crd1),
           "l"(cache_hint)
        : "memory");
}

// The same load, written at the same shared-memory offsets (data and barrier) of every cluster CTA whose bit is set
// in `cta_mask`.
__device__ __forceinline__ void tma_load_2d_multicast(const TmaDescriptor* desc, const void* bar, uint16_t cta_mask,
                                                      void* smem, int32_t crd0, int32_t crd1, uint64_t cache_hint) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        ".L2::cache_hint [%0], [%1, {%4, %5}], [%2], %3, %6;"
        :: "r"(smem_u32(smem)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_u32(bar)), "h"(cta_mask),
           "r"(crd0), "r"(crd1), "l"(cache_hint)
        : "memory");
}

// Store a shared-memory box to (crd0 = inner, crd1 = outer); tracked by the bulk async-group of the issuing thread.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* desc, const void* smem, int32_t crd0,
                                             int32_t crd1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_u32(smem)), "r"(crd0), "r"(crd1)
                 : "memory");
}

// Store a shared-memory box to (crd0 = inner, crd1, crd2 = outer); tracked like tma_store_2d.
__device__ __forceinline__ void tma_store_3d(const TmaDescriptor* desc, const void* smem, int32_t crd0,
                                             int32_t crd1, int32_t crd2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
                 :: "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_u32(smem)), "r"(crd0), "r"(crd1), "r"(crd2)
                 : "memory");
}

// Add a shared-memory box element-wise into global memory at (crd0 = inner, crd1, crd2 = outer): a read-modify-write
// done in L2 (the element type is the tensor map's), tracked like a store. Out-of-bounds elements are skipped.
__device__ __forceinline__ void tma_reduce_add_3d(const TmaDescriptor* desc, const void* smem, int32_t crd0,
                                                  int32_t crd1, int32_t crd2) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
                 :: "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_u32(smem)), "r"(crd0), "r"(crd1), "r"(crd2)
                 : "memory");
}

// Make this thread's shared-memory writes visible to the async proxy (TMA) before a TMA store reads them; also
// makes mbarrier inits visible to the TMA units that complete transactions on them.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;");
}

// Close the issuing thread's pending TMA stores into one bulk async-group.
__device__ __forceinline__ void tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;");
}

// Wait until at most kNumPending of this thread's committed store groups still read shared memory.
template <uint32_t kNumPending>
__device__ __forceinline__ void tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(kNumPending) : "memory");
}

}  // namespace deep_gemm
