#pragma once

// Blackwell (sm_100a) FP8 GEMM, D[m, n] (BF16) = dequant(A[m, k]) * dequant(B[n, k])^T, with 1x128 LHS scales and
// 128x128 RHS scales. One kernel family for the dense GEMM and the MoE grouped contiguous / masked layouts (GemmType,
// common/scheduler.cuh), in two scale paths chosen at compile time (kScaleUE8M0):
//  (a) FP32 scales, exact: the MMA warp computes each 128-wide K block into one of two TMEM partial accumulators
//      (kind::f8f6f4); the epilogue warps read it (tcgen05.ld), multiply by SA(row, k block) * SB(n block, k block)
//      and add it into FP32 registers (the Hopper kernel's promotion; the same numerics), while the MMA warp already
//      fills the other partial buffer. After the tile's last K block they write the BF16 rows.
//  (b) UE8M0 scales, hardware-applied: power-of-two scale factors (packed 4 K blocks per int32, MN-major) are loaded
//      by TMA, copied into TMEM (tcgen05.cp) and applied by kind::mxf8f6f4.block_scale MMAs that accumulate the
//      whole K of a tile in TMEM; two tile accumulators, so the epilogue of tile i overlaps the MMAs of tile i + 1.
//
// CTA: warp 0 TMA producer, warp 1 MMA issuer (one thread issues; the warp allocates TMEM), warps 2-3 idle, warps 4-11
// the epilogue (epilogue.cuh). BLOCK_M = 128: one CTA per tile (cta_group::1), optionally a 2-CTA cluster sharing A or
// B by TMA multicast. BLOCK_M = 256 (path (a) only): a CTA pair per tile, cta_group::2 MMAs issued by the even CTA,
// each CTA holding 128 rows of A, half of B's rows and 128 rows of the accumulator.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/epilogue.cuh>
#include <deep_gemm/sm100/mma.cuh>
#include <deep_gemm/sm100/pipeline.cuh>
#include <deep_gemm/sm100/scheduler.cuh>

#if defined(__CUDA_ARCH__) and not (defined(__CUDA_ARCH_FEAT_SM100_ALL) or defined(__CUDA_ARCH_FAMILY_SPECIFIC__))
#error "deep_gemm: the sm100 kernels need the arch-specific target sm_100a (or sm_100f): plain sm_100 has no tcgen05"
#endif

namespace deep_gemm::sm100 {

// Tensor-memory columns one instantiation uses: two accumulator buffers of BLOCK_N columns, plus (path (b)) the
// scale factors: SFA 4 columns (128 rows / 32 lanes), SFB align(BLOCK_N, 128) / 32 columns.
template <uint32_t BLOCK_N, bool kScaleUE8M0>
constexpr uint32_t fp8_gemm_tmem_cols() {
    return 2 * BLOCK_N + (kScaleUE8M0 ? kCtaRows / 32 + align_up<uint32_t>(BLOCK_N, 128) / 32 : 0);
}

// Shared-memory bytes of one instantiation; the host computes the same number (heuristics/sm100.py) and passes it as
// kSmemSize, and the kernel static-asserts that the two agree.
// Layout: [stages x A 128 x 128][stages x B rows x 128][stages x (SFA, SFB) packed UE8M0][full, empty barriers per
// stage][accumulator full x 2, empty x 2][TMEM base address].
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kScaleUE8M0>
constexpr uint32_t fp8_gemm_smem_size() {
    constexpr uint32_t load_n = BLOCK_M == 2 * kCtaRows ? BLOCK_N / 2 : BLOCK_N;
    constexpr uint32_t sf = kScaleUE8M0 ? (kCtaRows + align_up<uint32_t>(BLOCK_N, 128)) * 4 : 0;
    return kNumStages * (kCtaRows * kBlockK + load_n * kBlockK + sf) + (2 * kNumStages + 4) * 8 + 8;
}

template <typename Config>
constexpr uint32_t kernel_num_threads() {
    return kNumThreads;
}

// Config: kGemmType, SHAPE_N, SHAPE_K, BLOCK_M (128 or 256), BLOCK_N, kNumStages, kNumMulticast (cluster size, 1 or 2),
// kMulticastOnA, kScaleUE8M0, kSmemSize, kNumTmemCols (the allocated column count).
// Grouped launches: A / D hold all experts' rows ([m_sum, *], or [G * m_max, *] for masked), B is [G * n, k].
// Path (a): SA [ceil(k/128), m'] fp32 MN-major with `sa_stride` elements between K blocks (masked: the experts'
//   [ceil(k/128), m_max'] blocks stacked), SB [G, ceil(n/128), ceil(k/128)] fp32; the scale maps are unused.
// Path (b): SFA [ceil(k/512), m'] int32 MN-major (masked: [G * ceil(k/512), m_max']), SFB [G * ceil(k/512), n'] int32,
//   each int32 the UE8M0 exponents of 4 consecutive K blocks (lowest byte first); `sa` / `sb` are unused.
// `d` / `d_row_stride` (elements): D, written row by row.
template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
fp8_gemm_1d2d_impl(const __grid_constant__ TmaDescriptor tensor_map_a,    // A [m, k] e4m3, K-major, box 128 x 128
                   const __grid_constant__ TmaDescriptor tensor_map_b,    // B [n, k] e4m3, K-major, box 128 x B rows
                   const __grid_constant__ TmaDescriptor tensor_map_sfa,  // (b) SFA, box 128 x 1
                   const __grid_constant__ TmaDescriptor tensor_map_sfb,  // (b) SFB, box BLOCK_N x 1
                   const float* __restrict__ sa,                         // (a) SA
                   const uint32_t sa_stride,
                   const float* __restrict__ sb,                         // (a) SB
                   const uint32_t shape_m,                               // m (dense, contiguous) or m_max
                   const int32_t* __restrict__ grouped_layout,           // m_indices / masked_m (grouped only)
                   const uint32_t num_groups,
                   uint8_t* __restrict__ d,
                   const uint32_t d_row_stride) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape ----
    constexpr GemmType kGemmType = Config::kGemmType;
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t SHAPE_K = Config::SHAPE_K;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t kNumMulticast = Config::kNumMulticast;
    constexpr bool kScaleUE8M0 = Config::kScaleUE8M0;
    constexpr bool kPairMma = BLOCK_M == 2 * kCtaRows;
    constexpr uint32_t kCtaGroup = kPairMma ? 2 : 1;
    constexpr bool kMulticastA = not kPairMma and kNumMulticast > 1 and Config::kMulticastOnA;
    constexpr bool kMulticastB = not kPairMma and kNumMulticast > 1 and not Config::kMulticastOnA;
    constexpr uint32_t LOAD_N = kPairMma ? BLOCK_N / 2 : BLOCK_N;  // B rows per CTA
    constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    constexpr uint32_t kNumKGroups = ceil_div(kNumKBlocks, 4u);  // packed UE8M0 int32 columns
    constexpr uint32_t kNumSBBlocks = ceil_div(SHAPE_N, 128u);
    constexpr uint32_t SF_BLOCK_N = align_up<uint32_t>(BLOCK_N, 128);
    constexpr bool kGrouped = kGemmType != GemmType::Normal;
    constexpr bool kContiguous = kGemmType == GemmType::MGroupedContiguous;
    constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;

    // ---- Shared memory and tensor memory ----
    constexpr uint32_t kSmemABytes = kCtaRows * kBlockK;  // [128, 128] e4m3, 128B-swizzled
    constexpr uint32_t kSmemBBytes = LOAD_N * kBlockK;    // [LOAD_N, 128] e4m3, 128B-swizzled
    constexpr uint32_t kSmemSFABytes = kScaleUE8M0 ? kCtaRows * 4 : 0;  // [128] int32
    constexpr uint32_t kSmemSFBBytes = kScaleUE8M0 ? SF_BLOCK_N * 4 : 0;  // [SF_BLOCK_N] int32
    constexpr uint32_t kTmemUsedCols = fp8_gemm_tmem_cols<BLOCK_N, kScaleUE8M0>();
    constexpr uint32_t kTmemSFA = 2 * BLOCK_N;  // TMEM columns of the scale factors (path (b))
    constexpr uint32_t kTmemSFB = kTmemSFA + kCtaRows / 32;
    constexpr uint32_t kStageTxBytes = kSmemABytes + kSmemBBytes;
    constexpr uint32_t kScaleTxBytes = (kCtaRows + BLOCK_N) * 4;  // what the SF loads add to a stage (path (b))

    DG_STATIC_ASSERT(BLOCK_M == kCtaRows or BLOCK_M == 2 * kCtaRows, "BLOCK_M must be 128 (one CTA) or 256 (pair)");
    DG_STATIC_ASSERT(BLOCK_N % 16 == 0 and BLOCK_N >= 16 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 16 in [16, 256] (tcgen05.mma N at M = 128 / 256)");
    DG_STATIC_ASSERT(LOAD_N % 8 == 0, "B stage tiles must keep 1024-byte alignment for the 128B swizzle");
    DG_STATIC_ASSERT(kNumStages >= 1 and kNumStages <= 32, "1 to 32 pipeline stages");
    DG_STATIC_ASSERT(kNumMulticast == 1 or kNumMulticast == 2, "clusters are of 1 or 2 CTAs");
    DG_STATIC_ASSERT(not kPairMma or kNumMulticast == 2, "a cta_group::2 MMA needs its CTA pair as the cluster");
    DG_STATIC_ASSERT(not kPairMma or not kContiguous,
                     "contiguous grouped tiles must not span two 128-row expert segments (no 256-row tiles)");
    DG_STATIC_ASSERT(not kPairMma or not kScaleUE8M0,
                     "the UE8M0 path runs one CTA per tile (its scale-factor copies are per CTA)");
    DG_STATIC_ASSERT(not kMulticastB or kGemmType == GemmType::Normal,
                     "grouped GEMMs may multicast only A (the pair then shares the M block, hence the expert)");
    DG_STATIC_ASSERT(kGemmType == GemmType::Normal or kContiguous or kMasked,
                     "the sm100 kernel implements the dense, contiguous and masked layouts");
    DG_STATIC_ASSERT(SHAPE_N > 0 and SHAPE_K > 0, "empty problems are handled on the host");
    DG_STATIC_ASSERT(kTmemUsedCols <= kNumTmemCols, "accumulators and scale factors exceed the 512 TMEM columns");
    DG_STATIC_ASSERT(Config::kNumTmemCols == tmem_alloc_cols(kTmemUsedCols),
                     "host and device disagree on the tensor-memory allocation");
    DG_STATIC_ASSERT(Config::kSmemSize == (fp8_gemm_smem_size<BLOCK_M, BLOCK_N, kNumStages, kScaleUE8M0>()),
                     "host and device disagree on the shared-memory size");
    DG_STATIC_ASSERT(Config::kSmemSize <= kSmemBudget, "configuration exceeds the 232448-byte shared-memory budget");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_a = smem;                                      // [stages][128, 128]
    uint8_t* smem_b = smem_a + kNumStages * kSmemABytes;         // [stages][LOAD_N, 128]
    uint8_t* smem_sfa = smem_b + kNumStages * kSmemBBytes;       // [stages][128] int32 (path (b))
    uint8_t* smem_sfb = smem_sfa + kNumStages * kSmemSFABytes;   // [stages][SF_BLOCK_N] int32 (path (b))
    Barrier* full = reinterpret_cast<Barrier*>(smem_sfb + kNumStages * kSmemSFBBytes);  // [stages]
    Barrier* empty = full + kNumStages;                                                 // [stages]
    Barrier* accum_full = empty + kNumStages;                                           // [2]
    Barrier* accum_empty = accum_full + 2;                                              // [2]
    uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(accum_empty + 2);

    const uint32_t warp_idx = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t cta_rank = kNumMulticast > 1 ? block_rank_in_cluster() : 0;
    const bool is_leader = cta_rank == 0;

    // ---- Barriers and tensor memory ----
    // full: the producer's arrival + the stage's bytes (pair: both CTAs' bytes on the even CTA's barrier).
    // empty: one commit of the MMA warp per cluster CTA that read the stage (multicast: both CTAs' MMAs read it).
    // accum_full: one commit per accumulator hand-off; accum_empty: every epilogue warp of the CTA (pair: of both).
    // NOTES: before a tcgen05.alloc.cta_group::2 "the issuing warp must make sure that peer CTA is launched" (PTX ISA,
    // tcgen05.alloc): a cluster barrier first, as CUTLASS's and DeepGEMM's 2-CTA kernels have before theirs.
    if constexpr (kPairMma)
        cluster_sync();
    if (warp_idx == 0 and lane_idx == 0) {
        prefetch_tma_descriptor(&tensor_map_a);
        prefetch_tma_descriptor(&tensor_map_b);
        if constexpr (kScaleUE8M0) {
            prefetch_tma_descriptor(&tensor_map_sfa);
            prefetch_tma_descriptor(&tensor_map_sfb);
        }
    } else if (warp_idx == 1) {
        if (lane_idx == 0) {
            #pragma unroll
            for (uint32_t i = 0; i < kNumStages; ++i) {
                full[i].init(1);
                empty[i].init(kPairMma ? 1 : kNumMulticast);
            }
            #pragma unroll
            for (uint32_t i = 0; i < 2; ++i) {
                accum_full[i].init(1);
                accum_empty[i].init(kNumEpilogueWarps * (kPairMma ? 2 : 1));
            }
            fence_proxy_async_shared();
            fence_barrier_init();
        }
        __syncwarp();
        tmem_alloc<kCtaGroup>(tmem_slot, Config::kNumTmemCols);
        tmem_relinquish_alloc_permit<kCtaGroup>();
    }
    tcgen05_before_thread_sync();
    if constexpr (kNumMulticast > 1)
        cluster_sync();
    else
        __syncthreads();
    tcgen05_after_thread_sync();
    const uint32_t tmem_base = *reinterpret_cast<volatile uint32_t*>(tmem_slot);

    using Scheduler = ClusterTileScheduler<kGemmType, BLOCK_M, BLOCK_N, SHAPE_N, kPairMma, not kMulticastB>;
    auto make_scheduler = [&] { return Scheduler(shape_m, grouped_layout, num_groups); };
    // Contiguous padding blocks (expert -1) take no stage and no accumulator: every role skips them alike.
    auto skips = [](const Tile& tile) { return kContiguous and tile.skip; };

    // NOTES: the epilogue warps hold BLOCK_N / 2 FP32 accumulators per thread (path (a)); the other warpgroup hands
    // them its registers (setmaxnreg: each role in one branch of this if/else, every warp of a warpgroup alike).
    if (warp_idx < kNumNonEpilogueThreads / 32) {
        warpgroup_reg_dealloc<kNumNonEpilogueRegs>();
        if (warp_idx == 0) {
            // ================= TMA producer (one thread) =================
            if (lane_idx == 0) {
                auto scheduler = make_scheduler();
                Tile tile;
                StageIterator<kNumStages> it;
                // Pair: both CTAs' loads complete on the even CTA's full barriers.
                const uint32_t leader_full = kPairMma ? cluster_barrier_addr(full, 0) : 0;
                while (scheduler.next(tile)) {
                    if (skips(tile))
                        continue;
                    const auto m_idx = static_cast<int32_t>(tile.row_base + cta_rank * (kPairMma ? kCtaRows : 0));
                    const auto n_idx = static_cast<int32_t>(tile.group * SHAPE_N + tile.n_block * BLOCK_N +
                                                            cta_rank * (kPairMma ? LOAD_N : 0));
                    for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                        empty[it.stage].wait(it.phase ^ 1);
                        const auto k_idx = static_cast<int32_t>(k_block * kBlockK);
                        uint8_t* dst_a = smem_a + it.stage * kSmemABytes;
                        uint8_t* dst_b = smem_b + it.stage * kSmemBBytes;
                        if constexpr (kPairMma) {
                            const uint32_t bar = leader_full + it.stage * static_cast<uint32_t>(sizeof(Barrier));
                            if (is_leader)
                                full[it.stage].arrive_and_expect_tx(2 * kStageTxBytes);
                            tma_load_2d_pair(&tensor_map_a, bar, dst_a, k_idx, m_idx, kTmaCacheHintEvictNormal);
                            tma_load_2d_pair(&tensor_map_b, bar, dst_b, k_idx, n_idx, kTmaCacheHintEvictNormal);
                        } else {
                            const bool scale_stage = kScaleUE8M0 and k_block % 4 == 0;
                            const Barrier* bar = &full[it.stage];
                            full[it.stage].arrive_and_expect_tx(kStageTxBytes + (scale_stage ? kScaleTxBytes : 0));
                            if (not kMulticastA or is_leader) {
                                if constexpr (kMulticastA)
                                    tma_load_2d_multicast(&tensor_map_a, bar, 0b11, dst_a, k_idx, m_idx,
                                                          kTmaCacheHintEvictNormal);
                                else
                                    tma_load_2d(&tensor_map_a, bar, dst_a, k_idx, m_idx, kTmaCacheHintEvictNormal);
                            }
                            if (not kMulticastB or is_leader) {
                                if constexpr (kMulticastB)
                                    tma_load_2d_multicast(&tensor_map_b, bar, 0b11, dst_b, k_idx, n_idx,
                                                          kTmaCacheHintEvictNormal);
                                else
                                    tma_load_2d(&tensor_map_b, bar, dst_b, k_idx, n_idx, kTmaCacheHintEvictNormal);
                            }
                            if (scale_stage) {
                                // The scale factors of K blocks k_block .. k_block + 3 (one packed int32 per row).
                                const uint32_t k_group = (kMasked ? tile.group * kNumKGroups : 0) + k_block / 4;
                                const uint32_t sfa_col = kMasked ? tile.m_block * BLOCK_M : tile.row_base;
                                tma_load_2d(&tensor_map_sfa, bar, smem_sfa + it.stage * kSmemSFABytes,
                                            static_cast<int32_t>(sfa_col), static_cast<int32_t>(k_group),
                                            kTmaCacheHintEvictNormal);
                                tma_load_2d(&tensor_map_sfb, bar, smem_sfb + it.stage * kSmemSFBBytes,
                                            static_cast<int32_t>(tile.n_block * BLOCK_N),
                                            static_cast<int32_t>(tile.group * kNumKGroups + k_block / 4),
                                            kTmaCacheHintEvictNormal);
                            }
                        }
                        it.advance();
                    }
                }
                // NOTES: the MMA commits that release this CTA's stages may come from the peer (multicast), and arrive
                // asynchronously: wait for the last of them, so that no arrival lands after this CTA exits.
                if constexpr (kNumMulticast > 1) {
                    for (uint32_t i = 0; i < kNumStages; ++i) {
                        empty[it.stage].wait(it.phase ^ 1);
                        it.advance();
                    }
                }
            }
        } else if (warp_idx == 1) {
            // ================= MMA issuer (the even CTA of a pair; one elected thread issues) =================
            if (not kPairMma or is_leader) {
                auto scheduler = make_scheduler();
                Tile tile;
                StageIterator<kNumStages> it;
                uint32_t accum_iter = 0;  // accumulator hand-offs so far: buffer accum_iter % 2
                const uint32_t a_lo = __shfl_sync(0xffffffff, kmajor_sw128_desc_lo(smem_u32(smem_a)), 0);
                const uint32_t b_lo = __shfl_sync(0xffffffff, kmajor_sw128_desc_lo(smem_u32(smem_b)), 0);
                // Commit to a barrier of this CTA, or of every cluster CTA that shares it.
                auto commit = [&](const Barrier* bar, bool to_cluster) {
                    if (kNumMulticast > 1 and to_cluster)
                        mma_commit_multicast<kCtaGroup>(bar, 0b11);
                    else
                        mma_commit<kCtaGroup>(bar);
                };
                auto wait_accum_empty = [&] {
                    accum_empty[accum_iter % 2].wait(((accum_iter / 2) & 1) ^ 1);
                    tcgen05_after_thread_sync();
                };
                // One stage's MMAs into the accumulator at `tmem_d`: 4 x K = 32 (path (b): after copying the stage's
                // scale factors into TMEM on the stages that carry them).
                auto issue_mmas = [&](uint32_t stage, uint32_t k_block, uint32_t tmem_d) {
                    const uint32_t a_stage = a_lo + stage * (kSmemABytes / 16);
                    const uint32_t b_stage = b_lo + stage * (kSmemBBytes / 16);
                    if constexpr (kScaleUE8M0) {
                        if (k_block % 4 == 0) {
                            const uint32_t sfa = smem_u32(smem_sfa + stage * kSmemSFABytes);
                            const uint32_t sfb = smem_u32(smem_sfb + stage * kSmemSFBBytes);
                            tmem_copy_scales(tmem_base + kTmemSFA, scale_copy_desc(sfa));
                            #pragma unroll
                            for (uint32_t i = 0; i < SF_BLOCK_N / 128; ++i)
                                tmem_copy_scales(tmem_base + kTmemSFB + i * 4, scale_copy_desc(sfb + i * 512));
                        }
                        // This K block's scale factors are byte k_block % 4 of each packed TMEM cell.
                        const uint32_t idesc =
                            with_sf_ids(mxf8f6f4_instr_desc<kCtaRows, BLOCK_N>(), k_block % 4, k_block % 4);
                        #pragma unroll
                        for (uint32_t k = 0; k < kBlockK / kMmaK; ++k) {
                            const uint64_t a = kmajor_sw128_desc(a_stage + k * kMmaK / 16);
                            const uint64_t b = kmajor_sw128_desc(b_stage + k * kMmaK / 16);
                            mma_mxf8f6f4(tmem_d, a, b, idesc, tmem_base + kTmemSFA, tmem_base + kTmemSFB,
                                         k_block > 0 or k > 0);
                        }
                    } else {
                        constexpr uint32_t kIdesc = f8f6f4_instr_desc<BLOCK_M, BLOCK_N>();
                        #pragma unroll
                        for (uint32_t k = 0; k < kBlockK / kMmaK; ++k) {
                            const uint64_t a = kmajor_sw128_desc(a_stage + k * kMmaK / 16);
                            const uint64_t b = kmajor_sw128_desc(b_stage + k * kMmaK / 16);
                            mma_f8f6f4<kCtaGroup>(tmem_d, a, b, kIdesc, k > 0);
                        }
                    }
                };
                // Path (b): the 4 K blocks' scale factors of a stage, rearranged in place for tcgen05.cp 32x128b:
                // 16-byte row r = the factors of rows r, r + 32, r + 64, r + 96 (the TMEM layout of scale_vec::1X
                // factors: row i's in lane i % 32 of every lane quarter, column i / 32).
                auto transpose_scales = [&](uint32_t stage) {
                    auto transpose = [&](uint8_t* base) {
                        const uint32_t addr = smem_u32(base);
                        uint32_t v[4];
                        #pragma unroll
                        for (uint32_t i = 0; i < 4; ++i)
                            asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v[i]) : "r"(addr + (i * 32 + lane_idx) * 4));
                        __syncwarp();
                        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};"
                                     :: "r"(addr + lane_idx * 16), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]));
                    };
                    transpose(smem_sfa + stage * kSmemSFABytes);
                    #pragma unroll
                    for (uint32_t i = 0; i < SF_BLOCK_N / 128; ++i)
                        transpose(smem_sfb + stage * kSmemSFBBytes + i * 512);
                    // The rearranged factors are read by tcgen05.cp, in the async proxy.
                    fence_proxy_async_shared();
                    __syncwarp();
                };

                while (scheduler.next(tile)) {
                    if (skips(tile))
                        continue;
                    if constexpr (kScaleUE8M0)
                        wait_accum_empty();
                    for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                        if constexpr (not kScaleUE8M0)
                            wait_accum_empty();
                        full[it.stage].wait(it.phase);
                        tcgen05_after_thread_sync();
                        if (kScaleUE8M0 and k_block % 4 == 0)
                            transpose_scales(it.stage);
                        if (lane_idx == 0) {
                            issue_mmas(it.stage, k_block, tmem_base + (accum_iter % 2) * BLOCK_N);
                            // The stage is free once these MMAs completed (in both CTAs when both read it).
                            commit(&empty[it.stage], kPairMma or kNumMulticast > 1);
                            // Path (a) hands every K block's partial sums over, path (b) the tile's sums.
                            if (not kScaleUE8M0 or k_block + 1 == kNumKBlocks)
                                commit(&accum_full[accum_iter % 2], kPairMma);
                        }
                        __syncwarp();
                        if constexpr (not kScaleUE8M0)
                            ++accum_iter;
                        it.advance();
                    }
                    if constexpr (kScaleUE8M0)
                        ++accum_iter;
                }
            }
        }
    } else {
        // ================= Epilogue warps =================
        warpgroup_reg_alloc<kNumEpilogueRegs>();
        using Epilogue = RowEpilogue<BLOCK_N>;
        const Epilogue epi(tmem_base, warp_idx, lane_idx);
        auto scheduler = make_scheduler();
        Tile tile;
        uint32_t accum_iter = 0;
        // An accumulator buffer has been read (tcgen05.ld waited): hand it back to the MMA warp.
        auto release_accum = [&] {
            tcgen05_before_thread_sync();
            __syncwarp();
            if (lane_idx == 0) {
                if constexpr (kPairMma)
                    accum_empty[accum_iter % 2].arrive_cluster(0);
                else
                    accum_empty[accum_iter % 2].arrive();
            }
            ++accum_iter;
        };
        auto wait_accum_full = [&] {
            accum_full[accum_iter % 2].wait((accum_iter / 2) & 1);
            tcgen05_after_thread_sync();
        };

        while (scheduler.next(tile)) {
            // This thread's row: of the tile (pair: the odd CTA holds rows 128-255), and of D.
            const uint32_t tile_row = cta_rank * (kPairMma ? kCtaRows : 0) + epi.row;
            const uint32_t d_row = tile.row_base + tile_row;
            const uint32_t n_first = tile.n_block * BLOCK_N;
            // Which rows are written: dense / contiguous up to m (contiguous rows of another expert or padding as
            // zeros), masked up to masked_m of the group (the rest of the group's rows stay untouched).
            bool write_row, keep_row = true;
            if constexpr (kMasked) {
                write_row = tile_row < tile.valid_rows;
            } else {
                write_row = d_row < shape_m;
                if constexpr (kContiguous)
                    keep_row = write_row and not tile.skip and __ldg(grouped_layout + d_row) ==
                                                                static_cast<int32_t>(tile.group);
            }
            uint8_t* d_row_ptr = d + (static_cast<uint64_t>(d_row) * d_row_stride + n_first + epi.col) * 2;
            auto store = [&](uint32_t chunk, const float* v) {
                if (write_row and n_first + epi.col + chunk * 8 < SHAPE_N) {
                    float out[8];
                    #pragma unroll
                    for (uint32_t j = 0; j < 8; ++j)
                        out[j] = keep_row ? v[j] : 0.0f;
                    Epilogue::store_chunk(d_row_ptr + chunk * 16, out);
                }
            };

            if (skips(tile)) {
                const float zeros[8] = {};
                #pragma unroll
                for (uint32_t c = 0; c < Epilogue::kNumChunks; ++c)
                    store(c, zeros);
                continue;
            }

            if constexpr (kScaleUE8M0) {
                wait_accum_full();
                epi.for_each_chunk((accum_iter % 2) * BLOCK_N, store);
                release_accum();
            } else {
                // Promotion: final += partial(k block) * SA(row, k block) * SB(scale block of the column, k block).
                // A chunk's 8 columns never straddle a 128-column scale block (BLOCK_N and the half are multiples
                // of 16); a tile touches at most 3 of them.
                const uint32_t sb_first = n_first / 128;
                const float* group_sb = sb + (kGrouped ? tile.group * kNumSBBlocks * kNumKBlocks : 0u);
                // SA: MN-major; masked stacks the groups' [k blocks, m_max'] blocks.
                const uint32_t sa_col = kMasked ? tile.m_block * BLOCK_M + tile_row : d_row;
                const float* row_sa = sa + (kMasked ? tile.group * kNumKBlocks : 0u) * sa_stride + sa_col;
                const bool load_sa = kMasked ? tile_row < tile.valid_rows : d_row < shape_m;
                float final_accum[Epilogue::kHalfN];
                #pragma unroll
                for (uint32_t i = 0; i < Epilogue::kHalfN; ++i)
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
                    wait_accum_full();
                    epi.for_each_chunk((accum_iter % 2) * BLOCK_N, [&](uint32_t chunk, const float* v) {
                        const uint32_t j = (n_first + epi.col + chunk * 8) / 128 - sb_first;
                        const float s = j == 0 ? scale[0] : j == 1 ? scale[1] : scale[2];
                        #pragma unroll
                        for (uint32_t i = 0; i < 8; ++i)
                            final_accum[chunk * 8 + i] += s * v[i];
                    });
                    release_accum();
                }
                #pragma unroll
                for (uint32_t c = 0; c < Epilogue::kNumChunks; ++c)
                    store(c, final_accum + c * 8);
            }
        }
    }

    // ---- Teardown: every tensor-memory read and remote arrival is done before the allocating warp frees TMEM ----
    __syncwarp();
    tcgen05_before_thread_sync();
    if constexpr (kNumMulticast > 1)
        cluster_sync();
    else
        __syncthreads();
    if (warp_idx == 1) {
        tcgen05_after_thread_sync();
        tmem_dealloc<kCtaGroup>(tmem_base, Config::kNumTmemCols);
    }
#endif
}

}  // namespace deep_gemm::sm100
