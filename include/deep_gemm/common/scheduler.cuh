#pragma once

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm {

// What one launch computes; the host passes the matching value as a template argument.
//  - Normal            : one dense D [shape_m, SHAPE_N].
//  - MGroupedContiguous: experts' rows stacked in A/D [shape_m, *]; `grouped_layout` = m_indices [shape_m], the
//                        expert of every row (-1 = padding). Every BLOCK_M-row block belongs to the expert of its
//                        first row (the host keeps BLOCK_M <= the 128-row segment alignment).
//  - MGroupedMasked    : A/D [num_groups * shape_m, *] (shape_m = m_max rows per group); `grouped_layout` =
//                        masked_m [num_groups], the rows of each group that are computed.
//  - KGrouped          : num_groups independent [shape_m, SHAPE_N] outputs of the same shape (weight gradients of
//                        MoE experts, each with its own K); tiles are numbered group after group.
//  - MGroupedPsum      : experts' rows stacked in A/D [shape_m, *] as DeepGEMM's "psum layout": `grouped_layout`
//                        = the running row count [num_groups] (end of each expert's rows); expert g's rows start
//                        at align(end of g - 1, kRowAlignment). Walked expert by expert like the masked type.
//  - Batched           : num_groups independent GEMMs of one shape (a BMM): A/D [num_groups * shape_m, *], batch b's
//                        rows from b * shape_m. Every batch has the same tiles, so a tile's batch is one division
//                        (no walk over the groups and no read of device memory).
// B is [num_groups * SHAPE_N, K] for all M-grouped types and the batched one.
enum class GemmType : uint32_t {
    Normal = 0, MGroupedContiguous = 1, MGroupedMasked = 2, KGrouped = 3, MGroupedPsum = 4, Batched = 5
};

// The types whose tiles are found by walking the groups one after another.
__host__ __device__ constexpr bool walks_groups(GemmType type) {
    return type == GemmType::MGroupedMasked or type == GemmType::MGroupedPsum;
}

// The types whose M blocks stop at their group's last row (a block's rows past it belong to the next group or to
// nobody, so the epilogue writes only the block's valid rows).
__host__ __device__ constexpr bool has_group_row_ends(GemmType type) {
    return walks_groups(type) or type == GemmType::Batched;
}

// `num_k_blocks` K blocks cut into `num_splits` contiguous ranges, the first num_k_blocks % num_splits of them one
// block longer (DeepGEMM's cut of the pre-norm GEMM's K): a split's first block and its count (0 when there are more
// splits than blocks). Built once per kernel (the divisions), asked per tile.
struct KSplits {
    uint32_t per_split;
    uint32_t longer;

    __device__ __forceinline__ KSplits(uint32_t num_k_blocks, uint32_t num_splits)
        : per_split(num_k_blocks / num_splits), longer(num_k_blocks % num_splits) {}
    __device__ __forceinline__ uint32_t first(uint32_t split) const { return split * per_split + min(split, longer); }
    __device__ __forceinline__ uint32_t count(uint32_t split) const { return per_split + (split < longer ? 1u : 0u); }
};

// One output tile, as the producer and the math warpgroups see it.
struct Tile {
    uint32_t m_block;     // block index inside the group (masked) or the whole M range (normal, contiguous)
    uint32_t n_block;
    uint32_t group;       // expert; 0 for Normal
    uint32_t row_base;    // row of A / D of the tile's first row
    uint32_t valid_rows;  // rows of the tile that may be written (masked: masked_m - m_block * BLOCK_M, capped)
    bool skip;            // contiguous: a padding (or out-of-range expert) block, no MMA work
    bool pair_shares_b;   // with B multicast: the pair's two tiles need the same B block (one expert, one N block)
};

// Persistent tile scheduler.
//
// CTA `blockIdx.x` takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... Tiles are rasterised in groups of
// kGroupSize blocks along the "slow" dimension; inside a group the "fast" dimension varies fastest, so the
// CTAs of one wave touch few distinct A and B blocks (L2 reuse). Masked launches number the tiles of expert 0
// first, then expert 1's, ... and rasterise inside each expert.
//
// kFastAlongN = true : tiles t and t + 1 share an M block (needed for TMA multicast of A inside a 2-CTA cluster);
// kFastAlongN = false: tiles t and t + 1 share an N block (multicast of B), where they lie in one group (contiguous:
// one expert, checked per pair; masked: the walk's tiles 2i and 2i + 1, compared per pair). A masked launch with an
// odd tile count gives the last tile's partner CTA a phantom tile (valid_rows 0, its own loads, nothing stored), and
// a contiguous one with an odd M block count a phantom M block past shape_m (a skip tile: zeros, clipped by the TMA
// store), so that both CTAs of every cluster walk the same stages.
// NOTES: a pair (2i, 2i + 1) never straddles a row of its group as long as kGroupSize is even and the fast
// dimension's block count is even; the host only picks A multicast (and dense B multicast) when that holds, so every
// expert of such a launch has an even tile count and pairs never straddle experts. Contiguous and masked B multicast
// need no such guarantee: their pairs are checked per tile.
// kOneMBlock: the host guarantees shape_m <= BLOCK_M (batched decode), so the tile walk needs no run-time division.
// kCtasPerTile: that many consecutive CTAs (a cluster cutting the tile's K into splits) take every tile together:
// they walk tiles blockIdx.x / kCtasPerTile, + gridDim.x / kCtasPerTile, ... (the grid is a multiple of it).
// NOTES: those divisions (and the group's row count) sat on the path to the first TMA load of decode-sized GEMMs
// (H200 timeline probe, NOTES issue 17); a run-time test for one M block instead moved the producer's tile loop out
// of the uniform datapath and cost 5-15% (measured), so this is a compile-time choice.
template <GemmType kType, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t SHAPE_N, bool kFastAlongN,
          uint32_t kRowAlignment = 1, bool kOneMBlock = false, uint32_t kCtasPerTile = 1, uint32_t kGroupSize = 16>
struct TileScheduler {
    DG_STATIC_ASSERT(not kOneMBlock or kType == GemmType::Batched, "one M block is the batched decode case");
    DG_STATIC_ASSERT(kGroupSize % 2 == 0, "the raster group size must be even so that multicast pairs line up");
    DG_STATIC_ASSERT(not has_group_row_ends(kType) or kFastAlongN or kType == GemmType::MGroupedMasked,
                     "psum / batched GEMMs multicast only A: the two CTAs of a pair must share one group");
    DG_STATIC_ASSERT(kType != GemmType::MGroupedPsum or kRowAlignment > 0, "psum layout needs its row alignment");
    DG_STATIC_ASSERT(kCtasPerTile == 1 or kType == GemmType::Normal, "only dense tiles are shared by a cluster");
    static constexpr uint32_t kNumNBlocks = ceil_div(SHAPE_N, BLOCK_N);

    uint32_t shape_m;
    uint32_t num_m_blocks;  // masked: of the current group; batched: of one batch
    uint32_t num_tiles;     // masked: of the current group; k-grouped, batched: of one group
    uint32_t next_tile;
    // Grouped launches only.
    const int32_t* grouped_layout;
    uint32_t num_groups;
    uint32_t group;      // masked: current group
    uint32_t tile_base;  // masked: first tile index of the current group
    uint32_t group_rows; // masked, psum: computed rows of the current group
    uint32_t group_start; // psum: first row of the current group
    uint32_t group_end;   // psum: one past its last row
    // Contiguous: m_indices of next_tile's M block and of its pair partner's (B multicast), loaded one call of
    // next() ahead, as lane l's value of row + l (lane 0's is the block's; see load_experts_ahead).
    // NOTES: read where they are used, these loads made every math warp wait out a global-memory round trip per
    // tile before its next K loop (it resolves the next tile before the current K loop); loaded a call early they
    // land during a K loop (SASS; NOTES issue 14, lever 17).
    int32_t ahead_expert;
    int32_t ahead_peer;

    __device__ __forceinline__ TileScheduler(const uint32_t shape_m_, const int32_t* grouped_layout_ = nullptr,
                                             const uint32_t num_groups_ = 1)
        : shape_m(shape_m_), next_tile(blockIdx.x / kCtasPerTile), grouped_layout(grouped_layout_), num_groups(num_groups_),
          group(0), tile_base(0), group_rows(0), group_start(0), group_end(0) {
        if constexpr (walks_groups(kType)) {
            if (num_groups > 0)
                enter_group(0);
            num_m_blocks = ceil_div(group_rows, BLOCK_M);
        } else {
            num_m_blocks = kOneMBlock ? 1u : ceil_div(shape_m, BLOCK_M);
            // Contiguous B multicast pairs M blocks 2i and 2i + 1: an odd count gets a phantom last block (a skip
            // tile past shape_m), so that every pair lies in one N block and both CTAs walk the same stages.
            if constexpr (kType == GemmType::MGroupedContiguous and not kFastAlongN)
                num_m_blocks = align_up<uint32_t>(num_m_blocks, 2);
        }
        num_tiles = num_m_blocks * kNumNBlocks;
        if constexpr (kType == GemmType::MGroupedContiguous)
            load_experts_ahead();
    }

    // Contiguous: issue the m_indices loads of next_tile (its row is shape_m when there is none). NOTES: each lane
    // loads a different row, so that the compiler keeps the values in vector registers: a value it can prove
    // warp-uniform goes to a uniform register (R2UR) right at the load, which waits for the load there. `next`
    // takes lane 0's with a shuffle, a tile later.
    __device__ __forceinline__ void load_experts_ahead() {
        uint32_t m_block = 0, n_block = 0;
        if (next_tile < num_tiles)
            map_tile(next_tile, m_block, n_block);
        const uint32_t row = next_tile < num_tiles ? m_block * BLOCK_M : shape_m;
        const uint32_t lane = threadIdx.x % 32;
        ahead_expert = __ldg(grouped_layout + min(row + lane, shape_m - 1));
        if constexpr (not kFastAlongN)
            ahead_peer = __ldg(grouped_layout + min(((m_block ^ 1) * BLOCK_M) + lane, shape_m - 1));
    }

    __device__ __forceinline__ static uint32_t tile_stride() { return gridDim.x / kCtasPerTile; }

    // grouped_layout[g] clamped to [0, shape_m]: masked_m[g] (masked) or the end row of group g (psum).
    __device__ __forceinline__ uint32_t clamped_layout(uint32_t g) const {
        const int32_t rows = __ldg(grouped_layout + g);
        return rows < 0 ? 0u : min(static_cast<uint32_t>(rows), shape_m);
    }

    // Make g the current group of a group walk: its first row and computed row count. Psum: the group starts at
    // the previous group's end rounded up to kRowAlignment and ends at grouped_layout[g], clamped to
    // [start, shape_m] (a decreasing or overlong sum gives an empty or shorter group, never a read out of A).
    __device__ __forceinline__ void enter_group(uint32_t g) {
        if constexpr (kType == GemmType::MGroupedPsum) {
            group_start = g == 0 ? 0u : min(ceil_div(group_end, kRowAlignment) * kRowAlignment, shape_m);
            group_end = max(clamped_layout(g), group_start);
            group_rows = group_end - group_start;
        } else {
            group_rows = clamped_layout(g);
        }
    }

    __device__ __forceinline__ void map_tile(const uint32_t tile, uint32_t& m_block, uint32_t& n_block) const {
        if constexpr (kOneMBlock) {
            m_block = 0, n_block = tile;
            return;
        }
        const uint32_t num_fast = kFastAlongN ? kNumNBlocks : num_m_blocks;
        const uint32_t num_slow = kFastAlongN ? num_m_blocks : kNumNBlocks;
        const uint32_t tiles_per_group = kGroupSize * num_slow;
        const uint32_t raster = tile / tiles_per_group;
        const uint32_t first_fast = raster * kGroupSize;
        const uint32_t width = min(kGroupSize, num_fast - first_fast);
        const uint32_t in_group = tile - raster * tiles_per_group;
        const uint32_t fast = first_fast + in_group % width;
        const uint32_t slow = in_group / width;
        m_block = kFastAlongN ? slow : fast;
        n_block = kFastAlongN ? fast : slow;
    }

    // Returns false once this CTA has no tile left.
    __device__ __forceinline__ bool next(Tile& tile) {
        if constexpr (walks_groups(kType)) {
            // NOTES: next_tile only grows, so the walk over the groups never goes back.
            while (next_tile >= tile_base + num_tiles) {
                if (group + 1 >= num_groups) {
                    // Past the last tile. With B multicast, the partner of an odd tile count's last tile (an even
                    // index, so this CTA holds next_tile = that + 1) takes a phantom tile: see above.
                    if (not kFastAlongN and next_tile % 2 == 1 and next_tile == tile_base + num_tiles) {
                        tile = Tile{};
                        tile.pair_shares_b = false;
                        next_tile += tile_stride();
                        return true;
                    }
                    return false;
                }
                ++group;
                tile_base += num_tiles;
                enter_group(group);
                num_m_blocks = ceil_div(group_rows, BLOCK_M);
                num_tiles = num_m_blocks * kNumNBlocks;
            }
            map_tile(next_tile - tile_base, tile.m_block, tile.n_block);
            tile.group = group;
            tile.row_base = (kType == GemmType::MGroupedPsum ? group_start : group * shape_m) + tile.m_block * BLOCK_M;
            tile.valid_rows = min(group_rows - tile.m_block * BLOCK_M, BLOCK_M);
            tile.skip = false;
            tile.pair_shares_b = true;
            if constexpr (not kFastAlongN) {
                // The pair's other tile: in this group and in the same N block, or B is loaded per CTA.
                const uint32_t peer = next_tile ^ 1;
                tile.pair_shares_b = false;
                if (peer >= tile_base and peer < tile_base + num_tiles) {
                    uint32_t peer_m, peer_n;
                    map_tile(peer - tile_base, peer_m, peer_n);
                    tile.pair_shares_b = peer_n == tile.n_block;
                }
            }
        } else if constexpr (kType == GemmType::KGrouped or kType == GemmType::Batched) {
            // Tiles numbered group after group, every group with the same tiles.
            if (next_tile >= num_tiles * num_groups)
                return false;
            tile.group = next_tile / num_tiles;
            map_tile(next_tile - tile.group * num_tiles, tile.m_block, tile.n_block);
            if constexpr (kType == GemmType::Batched) {
                tile.row_base = tile.group * shape_m + tile.m_block * BLOCK_M;
                tile.valid_rows = min(shape_m - tile.m_block * BLOCK_M, BLOCK_M);
            } else {
                tile.row_base = tile.m_block * BLOCK_M;
                tile.valid_rows = BLOCK_M;
            }
            tile.skip = false;
        } else {
            if (next_tile >= num_tiles)
                return false;
            map_tile(next_tile, tile.m_block, tile.n_block);
            tile.row_base = tile.m_block * BLOCK_M;
            tile.valid_rows = BLOCK_M;
            tile.group = 0;
            tile.skip = false;
            tile.pair_shares_b = true;
            if constexpr (kType == GemmType::MGroupedContiguous) {
                // Loaded a call ahead; the phantom block (past shape_m) is padding. NOTES: callers are whole
                // converged warps (math warpgroups) or the TMA thread alone, whose own value is lane 0's.
                const uint32_t mask = __activemask();
                const int32_t expert = tile.row_base < shape_m ? __shfl_sync(mask, ahead_expert, 0) : -1;
                tile.skip = expert < 0 or static_cast<uint32_t>(expert) >= num_groups;
                tile.group = tile.skip ? 0u : static_cast<uint32_t>(expert);
                if constexpr (not kFastAlongN) {
                    // The pair is M blocks 2i and 2i + 1 of one N block; the phantom's partner loads its own B.
                    const uint32_t peer_row = (tile.m_block ^ 1) * BLOCK_M;
                    const int32_t peer = peer_row < shape_m ? __shfl_sync(mask, ahead_peer, 0) : -1;
                    tile.pair_shares_b = not tile.skip and peer == expert;
                }
                next_tile += tile_stride();
                load_experts_ahead();
                return true;
            }
        }
        next_tile += tile_stride();
        return true;
    }
};

}  // namespace deep_gemm
