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

// The types whose last partial wave may be split along K (stream-K, see TileScheduler): their
// tile count is known on every CTA without reading device memory (masked / psum would need a walk of all groups).
__host__ __device__ constexpr bool supports_stream_k(GemmType type) {
    return type == GemmType::Normal or type == GemmType::MGroupedContiguous;
}

// One output tile, as the producer and the math warpgroups see it.
struct Tile {
    uint32_t m_block;     // block index inside the group (masked) or the whole M range (normal, contiguous)
    uint32_t n_block;
    uint32_t group;       // expert; 0 for Normal
    uint32_t row_base;    // row of A / D of the tile's first row
    uint32_t valid_rows;  // rows of the tile that may be written (masked: masked_m - m_block * BLOCK_M, capped)
    bool skip;            // contiguous: a padding (or out-of-range expert) block, no MMA work
    bool pair_shares_b;   // contiguous with B multicast: the pair's two M blocks belong to one expert
    // The K blocks [k_begin, k_end) this CTA computes of the tile: all of them, except for a stream-K tile, which
    // `sk_parts` CTAs share (this one is part `sk_part`, in K order); its partial sums meet in workspace slot
    // `sk_slot` (one per part) and are counted on counter `sk_tile` (see TileScheduler).
    uint32_t k_begin, k_end;
    uint32_t sk_parts, sk_part, sk_slot, sk_tile;
};

// Persistent tile scheduler.
//
// CTA `blockIdx.x` takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... Tiles are rasterised in groups of
// kGroupSize blocks along the "slow" dimension; inside a group the "fast" dimension varies fastest, so the
// CTAs of one wave touch few distinct A and B blocks (L2 reuse). Masked launches number the tiles of expert 0
// first, then expert 1's, ... and rasterise inside each expert.
//
// kFastAlongN = true : tiles t and t + 1 share an M block (needed for TMA multicast of A inside a 2-CTA cluster);
// kFastAlongN = false: tiles t and t + 1 share an N block (multicast of B; Normal only).
// NOTES: a pair (2i, 2i + 1) never straddles a row of its group as long as kGroupSize is even and the fast
// dimension's block count is even; the host only picks multicast when that holds. Every expert of a masked or
// k-grouped launch then has an even tile count, so pairs never straddle experts either.
//
// Stream-K (Normal and contiguous, `set_k_blocks(kb, true)`): with T tiles on S CTAs, the R = T % S tiles of the last
// partial wave would keep R SMs busy for a whole tile while the others idle. Instead the first T - R tiles go as
// above (whole waves) and the R tail tiles' K blocks, laid end to end (R * kb of them), are cut into S equal
// ranges of L blocks, one per CTA (L at least kMinStreamKBlocks, so with few tail blocks only the first CTAs get
// one). A range may start or end inside a tile: a tile is then computed in parts, by consecutive CTAs, in K order.
// Tile j's parts are CTAs first(j) = j*kb / L ... last(j) = ((j+1)*kb - 1) / L; CTA c's part of tile j writes its
// partial sums to workspace slot j + c (distinct for every (tile, part) pair, as first(j + 1) >= last(j); fewer than
// R + S < 2S slots), and the part that arrives last on tile j's counter adds all parts in part order (so the sum
// does not depend on timing) and stores the tile.
template <GemmType kType, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t SHAPE_N, bool kFastAlongN,
          uint32_t kRowAlignment = 1, uint32_t kGroupSize = 16>
struct TileScheduler {
    DG_STATIC_ASSERT(kGroupSize % 2 == 0, "the raster group size must be even so that multicast pairs line up");
    DG_STATIC_ASSERT(not has_group_row_ends(kType) or kFastAlongN,
                     "masked / psum / batched GEMMs multicast only A: the two CTAs of a pair must share one group");
    DG_STATIC_ASSERT(kType != GemmType::MGroupedPsum or kRowAlignment > 0, "psum layout needs its row alignment");
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
    // Stream-K (see above); dp_tiles = num_tiles while it is off.
    uint32_t num_k_blocks;   // of every tile
    uint32_t dp_tiles;       // tiles before the stream-K tail
    uint32_t sk_blocks;      // L: K blocks per CTA in the tail
    uint32_t sk_cursor;      // this CTA's next tail K block (tail tiles' blocks laid end to end)
    uint32_t sk_end;         // one past its last

    __device__ __forceinline__ TileScheduler(const uint32_t shape_m_, const int32_t* grouped_layout_ = nullptr,
                                             const uint32_t num_groups_ = 1)
        : shape_m(shape_m_), next_tile(blockIdx.x), grouped_layout(grouped_layout_), num_groups(num_groups_),
          group(0), tile_base(0), group_rows(0), group_start(0), group_end(0), num_k_blocks(0), sk_blocks(0),
          sk_cursor(0), sk_end(0) {
        if constexpr (walks_groups(kType)) {
            if (num_groups > 0)
                enter_group(0);
            num_m_blocks = ceil_div(group_rows, BLOCK_M);
        } else {
            num_m_blocks = ceil_div(shape_m, BLOCK_M);
        }
        num_tiles = num_m_blocks * kNumNBlocks;
        dp_tiles = num_tiles;
    }

    // NOTES: a tail K range shorter than this many blocks costs more in pipeline fill and partial sums than it
    // saves; and unless the tail shrinks to at most 3/4 of a tile, the split is not worth its partial sums.
    static constexpr uint32_t kMinStreamKBlocks = 4;

    // `k_blocks`: K blocks of every tile. With `split_tail`, split the last partial wave along K (see above) where
    // that shortens it; every CTA decides the same from the same numbers. `step` (dividing k_blocks): every part
    // starts and ends at a multiple of it.
    __device__ __forceinline__ void set_k_blocks(const uint32_t k_blocks, const bool split_tail,
                                                 const uint32_t step = 1) {
        num_k_blocks = k_blocks;
        if constexpr (supports_stream_k(kType)) {
            if (not split_tail)
                return;
            const uint32_t tail = num_tiles % gridDim.x;
            if (tail == 0)
                return;
            const uint32_t blocks = ceil_div(max(ceil_div(tail * k_blocks, gridDim.x), kMinStreamKBlocks), step) * step;
            if (4 * blocks > 3 * k_blocks)
                return;
            dp_tiles = num_tiles - tail;
            sk_blocks = blocks;
            sk_cursor = min(blockIdx.x * blocks, tail * k_blocks);
            sk_end = min(sk_cursor + blocks, tail * k_blocks);
        }
    }

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
        tile.k_begin = 0, tile.k_end = num_k_blocks;
        tile.sk_parts = 1, tile.sk_part = 0, tile.sk_slot = 0, tile.sk_tile = 0;
        if constexpr (walks_groups(kType)) {
            // NOTES: next_tile only grows, so the walk over the groups never goes back.
            while (next_tile >= tile_base + num_tiles) {
                if (++group >= num_groups)
                    return false;
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
            uint32_t t = next_tile;
            if (next_tile >= dp_tiles) {
                if (sk_cursor >= sk_end)
                    return false;
                // The next piece of this CTA's tail range: up to the end of its tile or of the range.
                const uint32_t j = sk_cursor / num_k_blocks;
                tile.k_begin = sk_cursor - j * num_k_blocks;
                tile.k_end = min(num_k_blocks, tile.k_begin + (sk_end - sk_cursor));
                sk_cursor += tile.k_end - tile.k_begin;
                const uint32_t first = j * num_k_blocks / sk_blocks;
                tile.sk_parts = ((j + 1) * num_k_blocks - 1) / sk_blocks - first + 1;
                tile.sk_part = blockIdx.x - first;
                tile.sk_slot = j + blockIdx.x;
                tile.sk_tile = j;
                t = dp_tiles + j;
            }
            map_tile(t, tile.m_block, tile.n_block);
            tile.row_base = tile.m_block * BLOCK_M;
            tile.valid_rows = BLOCK_M;
            tile.group = 0;
            tile.skip = false;
            tile.pair_shares_b = true;
            if constexpr (kType == GemmType::MGroupedContiguous) {
                const int32_t expert = __ldg(grouped_layout + tile.row_base);
                tile.skip = expert < 0 or static_cast<uint32_t>(expert) >= num_groups;
                tile.group = tile.skip ? 0u : static_cast<uint32_t>(expert);
                if constexpr (not kFastAlongN) {
                    // The pair is M blocks 2i and 2i + 1 of one N block (the host keeps the M block count even).
                    const int32_t peer = __ldg(grouped_layout + (tile.m_block ^ 1) * BLOCK_M);
                    tile.pair_shares_b = not tile.skip and peer == expert;
                }
            }
            if (t != next_tile)
                return true;  // a tail piece: next_tile stays past the whole waves
        }
        next_tile += gridDim.x;
        return true;
    }
};

}  // namespace deep_gemm
