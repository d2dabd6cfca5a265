#pragma once

// The persistent cluster tile scheduler of the sm100 kernels, built on the shared TileScheduler
// (common/scheduler.cuh).
//  - One CTA per tile (cta_group::1 MMAs): the TileScheduler as is; with TMA multicast inside a 2-CTA cluster,
//    tiles t and t + 1 (the two CTAs of a cluster) share the multicast operand's block.
//  - A CTA pair per tile (cta_group::2 MMAs, BLOCK_M = 256): both CTAs of a cluster walk the same tiles, cluster c
//    taking tiles c, c + gridDim.x / 2, ...; the even CTA computes rows [0, 128) of the tile, the odd one [128, 256).

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm100 {

template <GemmType kType, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t SHAPE_N, bool kPairTiles, bool kFastAlongN>
struct ClusterTileScheduler {
    // NOTES: a pair's tile has no multicast partner, so the raster order is free: along N, as masked launches need.
    using Base = TileScheduler<kType, BLOCK_M, BLOCK_N, SHAPE_N, kPairTiles or kFastAlongN>;
    Base base;

    __device__ __forceinline__ ClusterTileScheduler(uint32_t shape_m, const int32_t* grouped_layout,
                                                    uint32_t num_groups)
        : base(shape_m, grouped_layout, num_groups) {
        if constexpr (kPairTiles)
            base.next_tile = blockIdx.x / 2;
    }

    // Returns false once this CTA (pair) has no tile left.
    __device__ __forceinline__ bool next(Tile& tile) {
        const bool found = base.next(tile);
        // The base steps by the grid; a pair steps by the number of clusters.
        if (kPairTiles and found)
            base.next_tile -= gridDim.x - gridDim.x / 2;
        return found;
    }
};

}  // namespace deep_gemm::sm100
