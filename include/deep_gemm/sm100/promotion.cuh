#pragma once

// Scale policies of the sm100 kernel shell (the shell's `Promotion`), one per scale path of fp8_gemm_1d2d.cuh: what a
// stage carries besides A and B, how the MMA warp issues a K block, and what the epilogue warps do with the
// accumulators before the epilogue writes them.
//
// A policy provides:
//   kSmemSFABytes, kSmemSFBBytes  shared memory per stage for its scale factors (TMA destinations: multiples of 128);
//   kTmemSFCols                   tensor-memory columns after the two accumulator buffers (scale factors);
//   kLoadsScaleFactors            whether the producer loads scale factors by TMA (their tensor maps are prefetched);
//   kHandOffPerKBlock             whether every K block's MMAs go to a fresh accumulator buffer that the epilogue
//                                 warps promote (FP32 scales: the same numerics as the sm90 kernels), or a tile's
//                                 whole K accumulates in one (hardware-applied scales; a BF16 policy would too);
// a Producer (stage_tx_bytes(k_block), load(tile, k_block, stage, barrier)), an Mma (prepare(stage, k_block) on the
// whole MMA warp once the stage is full, issue(stage, k_block, tmem_d, a_stage, b_stage) on the issuing thread) and a
// Math side (consume(...): the epilogue warps' use of a tile's accumulators, ending in its row stores). Each is
// constructed from the same arguments in every policy (the scale tensors of both paths), of which it keeps what it
// uses.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/mma.cuh>
#include <deep_gemm/sm100/pipeline.cuh>

namespace deep_gemm::sm100 {

// The requirements above (instantiated by the shell).
template <typename Promotion>
struct CheckPromotion {
    DG_STATIC_ASSERT(Promotion::kSmemSFABytes % 128 == 0 and Promotion::kSmemSFBBytes % 128 == 0,
                     "scale-factor stages are TMA destinations (128-byte aligned)");
    DG_STATIC_ASSERT(Promotion::kLoadsScaleFactors or
                     (Promotion::kSmemSFABytes == 0 and Promotion::kSmemSFBBytes == 0 and Promotion::kTmemSFCols == 0),
                     "a policy that loads no scale factors keeps none");
    static constexpr bool kOk = true;
};

// ---- (a) FP32 scales, exact: 1x128 SA and 128x128 SB read from global memory by the epilogue warps ----
// Config: kGemmType, SHAPE_N, SHAPE_K, BLOCK_M, BLOCK_N.
template <typename Config>
struct FP32ScalePromotion {
    static constexpr GemmType kGemmType = Config::kGemmType;
    static constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    static constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    static constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    static constexpr uint32_t kNumKBlocks = ceil_div(Config::SHAPE_K, kBlockK);
    static constexpr uint32_t kNumSBBlocks = ceil_div(SHAPE_N, 128u);
    static constexpr bool kGrouped = kGemmType != GemmType::Normal;
    static constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;
    static constexpr uint32_t kCtaGroup = BLOCK_M == 2 * kCtaRows ? 2 : 1;

    // The shell's requirements (see the top of this file).
    static constexpr uint32_t kSmemSFABytes = 0;
    static constexpr uint32_t kSmemSFBBytes = 0;
    static constexpr uint32_t kTmemSFCols = 0;
    static constexpr bool kLoadsScaleFactors = false;
    static constexpr bool kHandOffPerKBlock = true;

    struct Producer {
        __device__ __forceinline__ Producer(const TmaDescriptor*, const TmaDescriptor*, uint8_t*, uint8_t*) {}
        __device__ __forceinline__ static constexpr uint32_t stage_tx_bytes(uint32_t) { return 0; }
        __device__ __forceinline__ void load(const Tile&, uint32_t, uint32_t, const Barrier*) const {}
    };

    struct Mma {
        __device__ __forceinline__ Mma(uint8_t*, uint8_t*, uint32_t, uint32_t) {}
        __device__ __forceinline__ void prepare(uint32_t, uint32_t) const {}
        // One stage's MMAs into the accumulator at `tmem_d`: 4 x K = 32, the first overwriting it.
        __device__ __forceinline__ void issue(uint32_t, uint32_t, uint32_t tmem_d, uint32_t a_stage,
                                              uint32_t b_stage) const {
            constexpr uint32_t kIdesc = f8f6f4_instr_desc<BLOCK_M, BLOCK_N>();
            #pragma unroll
            for (uint32_t k = 0; k < kBlockK / kMmaK; ++k) {
                const uint64_t a = kmajor_sw128_desc(a_stage + k * kMmaK / 16);
                const uint64_t b = kmajor_sw128_desc(b_stage + k * kMmaK / 16);
                mma_f8f6f4<kCtaGroup>(tmem_d, a, b, kIdesc, k > 0);
            }
        }
    };

    // The epilogue warps: SA [ceil(k/128), m'] fp32 MN-major with `sa_stride` elements between K blocks (masked: the
    // experts' [ceil(k/128), m_max'] blocks stacked), SB [G, ceil(n/128), ceil(k/128)] fp32.
    struct Math {
        const float* sa;
        uint32_t sa_stride;
        const float* sb;
        uint32_t shape_m;

        __device__ __forceinline__ Math(const float* sa, uint32_t sa_stride, const float* sb, uint32_t shape_m)
            : sa(sa), sa_stride(sa_stride), sb(sb), shape_m(shape_m) {}

        // Promotion: final += partial(k block) * SA(row, k block) * SB(scale block of the column, k block), then the
        // tile's rows through `out` (RowOutput). A chunk's 8 columns never straddle a 128-column scale block (BLOCK_N
        // and the half are multiples of 16); a tile touches at most 3 of them.
        template <typename RowEpi, typename AccumRingT, typename Output>
        __device__ __forceinline__ void consume(const Tile& tile, uint32_t tile_row, uint32_t d_row, uint32_t n_first,
                                                const RowEpi& epi, AccumRingT& accum, uint32_t lane_idx,
                                                const Output& out) const {
            const uint32_t sb_first = n_first / 128;
            const float* group_sb = sb + (kGrouped ? tile.group * kNumSBBlocks * kNumKBlocks : 0u);
            // SA: MN-major; masked stacks the groups' [k blocks, m_max'] blocks.
            const uint32_t sa_col = kMasked ? tile.m_block * BLOCK_M + tile_row : d_row;
            const float* row_sa = sa + (kMasked ? tile.group * kNumKBlocks : 0u) * sa_stride + sa_col;
            const bool load_sa = kMasked ? tile_row < tile.valid_rows : d_row < shape_m;
            float final_accum[RowEpi::kHalfN];
            #pragma unroll
            for (uint32_t i = 0; i < RowEpi::kHalfN; ++i)
                final_accum[i] = 0.0f;
            #pragma unroll 1
            for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                // NOTES: the scales are fetched before the wait, so their latency hides behind the MMAs.
                const float row_scale = load_sa ? __ldg(row_sa + k_block * sa_stride) : 0.0f;
                float scale[3];
                #pragma unroll
                for (uint32_t j = 0; j < 3; ++j)
                    scale[j] = row_scale * __ldg(group_sb + min(sb_first + j, kNumSBBlocks - 1) * kNumKBlocks +
                                                 k_block);
                accum.wait_full();
                epi.for_each_chunk(accum.buffer() * BLOCK_N, [&](uint32_t chunk, const float* v) {
                    const uint32_t j = (n_first + epi.col + chunk * 8) / 128 - sb_first;
                    const float s = j == 0 ? scale[0] : j == 1 ? scale[1] : scale[2];
                    #pragma unroll
                    for (uint32_t i = 0; i < 8; ++i)
                        final_accum[chunk * 8 + i] += s * v[i];
                });
                accum.release(lane_idx);
            }
            #pragma unroll
            for (uint32_t c = 0; c < RowEpi::kNumChunks; ++c)
                out.store(c, final_accum + c * 8);
        }
    };
};

// ---- (b) UE8M0 scales, hardware-applied by kind::mxf8f6f4.block_scale MMAs ----
// Power-of-two scale factors, packed 4 K blocks per int32, MN-major: SFA [ceil(k/512), m'] (masked:
// [G * ceil(k/512), m_max']), SFB [G * ceil(k/512), n']. Loaded by TMA with every fourth stage, rearranged and copied
// into tensor memory (tcgen05.cp) by the MMA warp; the MMAs accumulate a tile's whole K in one buffer.
// Config: kGemmType, SHAPE_K, BLOCK_M (128: one CTA per tile), BLOCK_N.
template <typename Config>
struct UE8M0BlockScaling {
    static constexpr GemmType kGemmType = Config::kGemmType;
    static constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    static constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    static constexpr uint32_t kNumKBlocks = ceil_div(Config::SHAPE_K, kBlockK);
    static constexpr uint32_t kNumKGroups = ceil_div(kNumKBlocks, 4u);  // packed UE8M0 int32 columns
    static constexpr uint32_t SF_BLOCK_N = align_up<uint32_t>(BLOCK_N, 128);
    static constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;

    // The shell's requirements (see the top of this file).
    static constexpr uint32_t kSmemSFABytes = kCtaRows * 4;  // [128] int32
    static constexpr uint32_t kSmemSFBBytes = SF_BLOCK_N * 4;  // [SF_BLOCK_N] int32
    // SFA 4 columns (128 rows / 32 lanes), SFB SF_BLOCK_N / 32 columns.
    static constexpr uint32_t kTmemSFCols = kCtaRows / 32 + SF_BLOCK_N / 32;
    static constexpr bool kLoadsScaleFactors = true;
    static constexpr bool kHandOffPerKBlock = false;
    static constexpr uint32_t kScaleTxBytes = (kCtaRows + BLOCK_N) * 4;  // what the SF loads add to a stage

    DG_STATIC_ASSERT(BLOCK_M == kCtaRows, "the UE8M0 path runs one CTA per tile (its scale-factor copies are per CTA)");

    struct Producer {
        const TmaDescriptor* tensor_map_sfa;  // box 128 x 1
        const TmaDescriptor* tensor_map_sfb;  // box BLOCK_N x 1
        uint8_t* smem_sfa;                    // [stages][128] int32
        uint8_t* smem_sfb;                    // [stages][SF_BLOCK_N] int32

        __device__ __forceinline__ Producer(const TmaDescriptor* tensor_map_sfa, const TmaDescriptor* tensor_map_sfb,
                                            uint8_t* smem_sfa, uint8_t* smem_sfb)
            : tensor_map_sfa(tensor_map_sfa), tensor_map_sfb(tensor_map_sfb), smem_sfa(smem_sfa), smem_sfb(smem_sfb) {}

        __device__ __forceinline__ static constexpr uint32_t stage_tx_bytes(uint32_t k_block) {
            return k_block % 4 == 0 ? kScaleTxBytes : 0;
        }
        // The scale factors of K blocks k_block .. k_block + 3 (one packed int32 per row), with every fourth stage.
        __device__ __forceinline__ void load(const Tile& tile, uint32_t k_block, uint32_t stage,
                                             const Barrier* bar) const {
            if (k_block % 4 == 0) {
                const uint32_t k_group = (kMasked ? tile.group * kNumKGroups : 0) + k_block / 4;
                const uint32_t sfa_col = kMasked ? tile.m_block * BLOCK_M : tile.row_base;
                tma_load_2d(tensor_map_sfa, bar, smem_sfa + stage * kSmemSFABytes, static_cast<int32_t>(sfa_col),
                            static_cast<int32_t>(k_group), kTmaCacheHintEvictNormal);
                tma_load_2d(tensor_map_sfb, bar, smem_sfb + stage * kSmemSFBBytes,
                            static_cast<int32_t>(tile.n_block * BLOCK_N),
                            static_cast<int32_t>(tile.group * kNumKGroups + k_block / 4), kTmaCacheHintEvictNormal);
            }
        }
    };

    struct Mma {
        uint8_t* smem_sfa;
        uint8_t* smem_sfb;
        uint32_t tmem_sfa;  // TMEM addresses of the scale factors, after the two accumulator buffers
        uint32_t tmem_sfb;
        uint32_t lane_idx;

        // `tmem_sf`: the TMEM address of the first scale-factor column.
        __device__ __forceinline__ Mma(uint8_t* smem_sfa, uint8_t* smem_sfb, uint32_t tmem_sf, uint32_t lane_idx)
            : smem_sfa(smem_sfa), smem_sfb(smem_sfb), tmem_sfa(tmem_sf), tmem_sfb(tmem_sf + kCtaRows / 32),
              lane_idx(lane_idx) {}

        // The 4 K blocks' scale factors of a stage, rearranged in place for tcgen05.cp 32x128b: 16-byte row r = the
        // factors of rows r, r + 32, r + 64, r + 96 (the TMEM layout of scale_vec::1X factors: row i's in lane i % 32
        // of every lane quarter, column i / 32). The whole warp, once the stage is full.
        __device__ __forceinline__ void prepare(uint32_t stage, uint32_t k_block) const {
            if (k_block % 4 != 0)
                return;
            transpose(smem_sfa + stage * kSmemSFABytes);
            #pragma unroll
            for (uint32_t i = 0; i < SF_BLOCK_N / 128; ++i)
                transpose(smem_sfb + stage * kSmemSFBBytes + i * 512);
            // The rearranged factors are read by tcgen05.cp, in the async proxy.
            fence_proxy_async_shared();
            __syncwarp();
        }
        __device__ __forceinline__ void transpose(uint8_t* base) const {
            const uint32_t addr = smem_u32(base);
            uint32_t v[4];
            #pragma unroll
            for (uint32_t i = 0; i < 4; ++i)
                asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v[i]) : "r"(addr + (i * 32 + lane_idx) * 4));
            __syncwarp();
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};"
                         :: "r"(addr + lane_idx * 16), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]));
        }

        // One stage's MMAs into the accumulator at `tmem_d`: 4 x K = 32, after copying the stage's scale factors
        // into TMEM on the stages that carry them.
        __device__ __forceinline__ void issue(uint32_t stage, uint32_t k_block, uint32_t tmem_d, uint32_t a_stage,
                                              uint32_t b_stage) const {
            if (k_block % 4 == 0) {
                const uint32_t sfa = smem_u32(smem_sfa + stage * kSmemSFABytes);
                const uint32_t sfb = smem_u32(smem_sfb + stage * kSmemSFBBytes);
                tmem_copy_scales(tmem_sfa, scale_copy_desc(sfa));
                #pragma unroll
                for (uint32_t i = 0; i < SF_BLOCK_N / 128; ++i)
                    tmem_copy_scales(tmem_sfb + i * 4, scale_copy_desc(sfb + i * 512));
            }
            // This K block's scale factors are byte k_block % 4 of each packed TMEM cell.
            const uint32_t idesc = with_sf_ids(mxf8f6f4_instr_desc<kCtaRows, BLOCK_N>(), k_block % 4, k_block % 4);
            #pragma unroll
            for (uint32_t k = 0; k < kBlockK / kMmaK; ++k) {
                const uint64_t a = kmajor_sw128_desc(a_stage + k * kMmaK / 16);
                const uint64_t b = kmajor_sw128_desc(b_stage + k * kMmaK / 16);
                mma_mxf8f6f4(tmem_d, a, b, idesc, tmem_sfa, tmem_sfb, k_block > 0 or k > 0);
            }
        }
    };

    // The epilogue warps: the tile's scaled sums, once, straight to its rows.
    struct Math {
        __device__ __forceinline__ Math(const float*, uint32_t, const float*, uint32_t) {}
        template <typename RowEpi, typename AccumRingT, typename Output>
        __device__ __forceinline__ void consume(const Tile&, uint32_t, uint32_t, uint32_t, const RowEpi& epi,
                                                AccumRingT& accum, uint32_t lane_idx, const Output& out) const {
            accum.wait_full();
            epi.for_each_chunk(accum.buffer() * BLOCK_N, [&](uint32_t chunk, const float* v) { out.store(chunk, v); });
            accum.release(lane_idx);
        }
    };
};

// The policy of a Config's scale path (Config::kScaleUE8M0).
template <bool kScaleUE8M0>
struct ScalePath {
    template <typename Config>
    using Policy = FP32ScalePromotion<Config>;
};
template <>
struct ScalePath<true> {
    template <typename Config>
    using Policy = UE8M0BlockScaling<Config>;
};

}  // namespace deep_gemm::sm100
