#pragma once

// Hopper (sm_90a) hyper-connection pre-norm GEMM (DeepGEMM's tf32_hc_prenorm_gemm): D[m, n] = A[m, k] * B[n, k]^T
// on the TF32 tensor cores with A BF16 (converted to FP32 exactly) and B FP32 (the tensor cores read its top 19
// bits), and the row norms' squares sqr_sum[m] = sum_k A[m, k]^2 (FP32, from the same A fragments), for the narrow
// n (<= 32) of the hyper-connection mixing weights. With S splits, K is cut into S contiguous ranges of whole 64-wide
// blocks (the first num_k_blocks % S ranges one block longer) and split s writes D[s] and sqr_sum[s]; the caller
// adds the splits up.
// Composed in the sm90 kernel shell (kernel_shell.cuh): TF32RegAOperands (mma.cuh: BF16 A tiles and FP32 B tiles by
// TMA, A converted in registers), no promotion, the per-warpgroup FP32 output tile stored by TMA (epilogue.cuh), and
// the batched tile walk with one batch per split. Its K loop is its own: the WGMMA reads A from registers, loaded and
// squared here.

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>
#include <deep_gemm/sm90/mma.cuh>
#include <deep_gemm/sm90/promotion.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

// Shared-memory bytes of one instantiation; mirrored by the host (heuristics/sm90_tf32.py), asserted below.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages>
constexpr uint32_t tf32_hc_prenorm_smem_size() {
    return 64 * BLOCK_N * 4 + kNumStages * (BLOCK_M * 128 + BLOCK_N * TF32RegAOperands::kRowBytesB) +
           kNumStages * 2 * 8;
}

// Config (see kernel_shell.cuh): SHAPE_N (n), BLOCK_M (64: one math warpgroup), BLOCK_N (n rounded up to 8),
// kNumStages, kNumMulticast (1), kMulticastOnA, kSwizzleDBytes, kSmemSize.
template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
tf32_hc_prenorm_gemm_impl(const __grid_constant__ TmaDescriptor tensor_map_a,  // A [m, k] bf16
                          const __grid_constant__ TmaDescriptor tensor_map_b,  // B [n, k] fp32
                          const __grid_constant__ TmaDescriptor tensor_map_d,  // D [splits, m, n] fp32
                          float* __restrict__ sqr_sum,                          // [splits, m] fp32
                          const uint32_t shape_m,
                          const uint32_t num_k_blocks,
                          const uint32_t num_splits) {
#if defined(__CUDA_ARCH__)
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    using Operands = TF32RegAOperands;
    using Epilogue = WarpgroupTileEpilogue<BLOCK_N, Config::kSwizzleDBytes, true, false>;
    using Shell = KernelShell<Config, Operands, NoPromotion, Epilogue>;
    using MMA = typename Shell::WGMMA;
    constexpr uint32_t kBlockK = Operands::kBlockK;
    constexpr uint32_t kNumAccum = Shell::kNumAccum;
    DG_STATIC_ASSERT(BLOCK_M == 64 and Config::kNumMulticast == 1, "one 64-row math warpgroup, no multicast");
    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N <= 32 and Config::SHAPE_N <= BLOCK_N, "n <= 32 in one tile");
    DG_STATIC_ASSERT(Config::kSmemSize == (tf32_hc_prenorm_smem_size<BLOCK_M, BLOCK_N, Config::kNumStages>()),
                     "host and device disagree on the shared-memory size");

    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_d);
    using Scheduler = typename Shell::template Scheduler<GemmType::Batched, Config::SHAPE_N>;
    auto make_scheduler = [&] { return Scheduler(shape_m, nullptr, num_splits); };
    const KSplits splits(num_k_blocks, num_splits);

    if (Shell::is_producer()) {
        auto operands = [&](const Tile& tile) {
            TileOperands ops;
            ops.map_a = &tensor_map_a;
            ops.map_b = &tensor_map_b;
            ops.m_idx = static_cast<int32_t>(tile.m_block * BLOCK_M);
            ops.n_idx = 0;
            ops.first_k_block = splits.first(tile.group);
            ops.num_k_blocks = splits.count(tile.group);
            ops.scale_row = 0;
            ops.skip = ops.num_k_blocks == 0;
            ops.peer_shares_b = true;
            return ops;
        };
        shell.template produce<Shell::stage_tx_bytes(BLOCK_M)>(make_scheduler, operands, NoPromotion::Producer{});
    } else {
        const auto wg = shell.math_warpgroup();
        const uint32_t row = wg.warp_row + wg.lane_row;  // this thread's rows: row and row + 8
        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
        float accum[kNumAccum];
        while (scheduler.next(tile)) {
            const uint32_t count = splits.count(tile.group);
            float sqr[2] = {0.0f, 0.0f};
            #pragma unroll
            for (uint32_t i = 0; i < kNumAccum; ++i)
                accum[i] = 0.0f;
            // NOTES: block k's A fragments are loaded (and squared) while block k - 1's WGMMAs still run; ptxas keeps
            // registers an in-flight WGMMA reads apart until the wait (the compile test checks it serialises nothing).
            uint32_t prev_stage = 0;
            #pragma unroll 1
            for (uint32_t k_block = 0; k_block < count; ++k_block) {
                shell.ring.wait_full(stages);
                float a[kBlockK / MMA::K][4];
                MMA::template load_a<kBlockK>(smem_u32(shell.smem_a + stages.stage * Shell::kSmemABytes), row,
                                              wg.lane_idx, a, sqr);
                wgmma_wait_group<0>();
                if (k_block > 0)
                    wg.release(prev_stage);
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    wgmma_fence_operand(accum[i]);
                wgmma_fence();
                MMA::template mma_k_block<kBlockK>(a, wg.b_desc_lo + stages.stage * (Shell::kSmemBBytes / 16), accum,
                                                   k_block > 0);
                wgmma_commit_group();
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    wgmma_fence_operand(accum[i]);
                prev_stage = stages.stage;
                stages.advance();
            }
            wgmma_wait_group<0>();
            #pragma unroll
            for (uint32_t i = 0; i < kNumAccum; ++i)
                wgmma_fence_operand(accum[i]);
            if (count > 0)
                wg.release(prev_stage);
            // The row sums of squares: this thread holds 2 x 16 of each 64-wide block's columns of its two rows, its
            // quad (4 lanes) all 64.
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                sqr[h] += __shfl_xor_sync(0xffffffff, sqr[h], 1);
                sqr[h] += __shfl_xor_sync(0xffffffff, sqr[h], 2);
                const uint32_t m = tile.m_block * BLOCK_M + row + h * 8;
                if (wg.lane_idx % 4 == 0 and m < shape_m)
                    sqr_sum[tile.group * shape_m + m] = sqr[h];
            }
            wg.store_tile([&] { Epilogue::write_warp(shell.smem_d, accum, wg.warp_row, wg.lane_idx); },
                          [&](bool is_leader) {
                              if (is_leader) {
                                  Epilogue::store(&tensor_map_d, shell.smem_d, tile.group, tile.m_block * BLOCK_M, 0);
                                  tma_store_commit();
                              }
                          });
        }
        wg.finish();
    }
    Shell::teardown();
#endif
}

}  // namespace deep_gemm::sm90
