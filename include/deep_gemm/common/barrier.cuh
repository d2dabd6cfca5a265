#pragma once

// Shared-memory mbarriers and cluster-wide synchronisation (sm_90+).
// NOTES: the asm below keeps the shape of the CUTLASS wrappers it replaced (same instructions, same `{ }` scopes, no
// "memory" clobbers), and the kernel's SASS came out byte-identical. The shape is load-bearing: NVVM's unroll cost of
// an inline asm depends on its text; without the braces around arrive.expect_tx the producer's K loop unrolled 4x
// instead of 8x and its stage index no longer folded to constants (measured, 64x2112x7168).
// No "memory" clobber is safe here because what these barriers guard is only touched through volatile asm (TMA,
// WGMMA, ld.shared, stmatrix), which the compiler keeps in program order; plain C++ shared-memory accesses are
// ordered by `named_barrier_sync` / `__syncthreads`, which do clobber memory.

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm {

// One 8-byte mbarrier object in shared memory: an arrival count for the current phase plus (for TMA) a pending
// transaction byte count; the phase completes when both reach zero, and its parity then flips.
struct Barrier {
    uint64_t state;

    __device__ __forceinline__ void init(uint32_t arrive_count) {
        asm volatile("{ mbarrier.init.shared::cta.b64 [%1], %0; }" :: "r"(arrive_count), "r"(smem_u32(this)));
    }

    // Block until the phase with parity `phase` has completed.
    // NOTES: try_wait suspends the thread for up to the hint (in ns, 10 ms here, as in CUTLASS) instead of spinning;
    // it may still return early without the phase being complete, hence the loop.
    __device__ __forceinline__ void wait(uint32_t phase) {
        constexpr uint32_t kSuspendTimeHint = 10000000;
        asm volatile(
            "{\n\t"
            ".reg .pred done;\n\t"
            "WAIT_LOOP:\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n\t"
            "@done bra WAIT_DONE;\n\t"
            "bra WAIT_LOOP;\n\t"
            "WAIT_DONE:\n\t"
            "}"
            :: "r"(smem_u32(this)), "r"(phase), "r"(kSuspendTimeHint));
    }

    __device__ __forceinline__ void arrive() {
        asm volatile("{ mbarrier.arrive.shared::cta.b64 _, [%0]; }" :: "r"(smem_u32(this)));
    }

    // Arrive on the barrier at this barrier's shared-memory offset in cluster CTA `cta_rank` (possibly this CTA).
    __device__ __forceinline__ void arrive_cluster(uint32_t cta_rank) {
        asm volatile(
            "{\n\t"
            ".reg .b32 remote;\n\t"
            "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
            "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t"
            "}"
            :: "r"(smem_u32(this)), "r"(cta_rank));
    }

    // Cluster hand-offs through shared memory (a CTA reads what its peers wrote into theirs): a release arrival on the
    // barrier of cluster CTA `cta_rank` covering the executing thread's earlier accesses (and, cumulatively, those
    // of threads ordered before it, e.g. by __syncwarp), and a wait that acquires what those arrivals released.
    __device__ __forceinline__ void arrive_cluster_release(uint32_t cta_rank) {
        asm volatile(
            "{\n\t"
            ".reg .b32 remote;\n\t"
            "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
            "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n\t"
            "}"
            :: "r"(smem_u32(this)), "r"(cta_rank) : "memory");
    }

    __device__ __forceinline__ void wait_cluster_acquire(uint32_t phase) {
        constexpr uint32_t kSuspendTimeHint = 10000000;
        asm volatile(
            "{\n\t"
            ".reg .pred done;\n\t"
            "WAIT_LOOP:\n\t"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1, %2;\n\t"
            "@done bra WAIT_DONE;\n\t"
            "bra WAIT_LOOP;\n\t"
            "WAIT_DONE:\n\t"
            "}"
            :: "r"(smem_u32(this)), "r"(phase), "r"(kSuspendTimeHint) : "memory");
    }

    // Arrive once the executing thread's earlier cp.async copies have landed in shared memory. The arrival is one
    // of those the barrier was initialised with (.noinc), so every thread that may use it must be counted at init.
    __device__ __forceinline__ void arrive_after_cp_async() {
        asm volatile("{ cp.async.mbarrier.arrive.noinc.shared.b64 [%0]; }" :: "r"(smem_u32(this)));
    }

    // Arrive and announce `num_bytes` more bytes that asynchronous copies will complete on this barrier.
    __device__ __forceinline__ void arrive_and_expect_tx(uint32_t num_bytes) {
        asm volatile("{ mbarrier.arrive.expect_tx.shared::cta.b64 _, [%1], %0; }" :: "r"(num_bytes),
                     "r"(smem_u32(this)));
    }
};

// Make this thread's mbarrier.init visible to the whole cluster (before a cluster or CTA barrier publishes them).
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("{ fence.mbarrier_init.release.cluster; }");
}

// All threads of all CTAs of the cluster (aligned: every thread of each warp executes it).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;");
    asm volatile("barrier.cluster.wait.aligned;");
}

__device__ __forceinline__ uint32_t block_rank_in_cluster() {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

}  // namespace deep_gemm
