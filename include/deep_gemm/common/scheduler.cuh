#pragma once

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm {

// Persistent tile scheduler for one dense output [shape_m, SHAPE_N].
//
// CTA `blockIdx.x` takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... Tiles are rasterised in groups of
// kGroupSize blocks along the "slow" dimension; inside a group the "fast" dimension varies fastest, so the
// CTAs of one wave touch few distinct A and B blocks (L2 reuse).
//
// kFastAlongN = true : tiles t and t + 1 share an M block (needed for TMA multicast of A inside a 2-CTA cluster);
// kFastAlongN = false: tiles t and t + 1 share an N block (multicast of B).
// NOTES: a pair (2i, 2i + 1) never straddles a row of its group as long as kGroupSize is even and the fast
// dimension's block count is even; the host only picks multicast when that holds.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t SHAPE_N, bool kFastAlongN, uint32_t kGroupSize = 16>
struct TileScheduler {
    DG_STATIC_ASSERT(kGroupSize % 2 == 0, "the raster group size must be even so that multicast pairs line up");
    static constexpr uint32_t kNumNBlocks = ceil_div(SHAPE_N, BLOCK_N);

    uint32_t num_m_blocks;
    uint32_t num_tiles;
    uint32_t next_tile;

    __device__ __forceinline__ explicit TileScheduler(const uint32_t shape_m) {
        num_m_blocks = ceil_div(shape_m, BLOCK_M);
        num_tiles = num_m_blocks * kNumNBlocks;
        next_tile = blockIdx.x;
    }

    __device__ __forceinline__ void map_tile(const uint32_t tile, uint32_t& m_block, uint32_t& n_block) const {
        const uint32_t num_fast = kFastAlongN ? kNumNBlocks : num_m_blocks;
        const uint32_t num_slow = kFastAlongN ? num_m_blocks : kNumNBlocks;
        const uint32_t tiles_per_group = kGroupSize * num_slow;
        const uint32_t group = tile / tiles_per_group;
        const uint32_t first_fast = group * kGroupSize;
        const uint32_t width = min(kGroupSize, num_fast - first_fast);
        const uint32_t in_group = tile - group * tiles_per_group;
        const uint32_t fast = first_fast + in_group % width;
        const uint32_t slow = in_group / width;
        m_block = kFastAlongN ? slow : fast;
        n_block = kFastAlongN ? fast : slow;
    }

    // Returns false once this CTA has no tile left.
    __device__ __forceinline__ bool next(uint32_t& m_block, uint32_t& n_block) {
        if (next_tile >= num_tiles)
            return false;
        map_tile(next_tile, m_block, n_block);
        next_tile += gridDim.x;
        return true;
    }
};

}  // namespace deep_gemm
