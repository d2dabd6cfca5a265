#pragma once

// The persistent tile scheduler of the sm90 kernels: the shared TileScheduler (common/scheduler.cuh), rasterised so
// that a 2-CTA cluster's multicast partners share their operand's block.

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm90 {

// NOTES: tiles t and t + 1 (the two CTAs of a cluster) must share the multicast operand's block: the raster runs
// fast along N (consecutive tiles share the M block, hence A) unless B is the multicast operand.
template <GemmType kType, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t SHAPE_N, bool kMulticastB,
          uint32_t kRowAlignment = 1, bool kOneMBlock = false, uint32_t kCtasPerTile = 1>
using ShellScheduler =
    TileScheduler<kType, BLOCK_M, BLOCK_N, SHAPE_N, not kMulticastB, kRowAlignment, kOneMBlock, kCtasPerTile>;

}  // namespace deep_gemm::sm90
