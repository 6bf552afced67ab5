"""Instrument DeepGEMM's SM90 FP8 Mega MoE (qiushixiaoyu/DeepGEMM @ 820861bd3) with a per-CTA timeline.

Usage: python3 patch_timeline.py DEEPGEMM_ROOT   (patches deep_gemm/include/deep_gemm/impls/sm90_fp8_mega_moe.cuh)

DeepGEMM JIT-compiles the kernel from this header at run time, so the patched header is all an instrumented build
needs; the host code, the heuristics and the kernel's arguments are unchanged. The timeline buffer rides on the
kernel's existing `cumulative_local_expert_recv_stats` pointer (an int[experts per rank] the kernel adds received
token counts to): the bench allocates that tensor longer and passes its first `experts` ints (the host asserts
numel == experts on the view, which holds); the int64 timeline starts after them, aligned to 16 bytes. A null
stats pointer records nothing.

Layout per CTA (blockIdx.x = SM index; one CTA per SM): kSlots slots of (globaltimer ns, clock64), int64 each:
  slots [0, 48)    events (EVENTS below), written by one lane of the warp that reaches them
  slots [48, 112)  the weight-TMA warp's first 64 weight loads: issue time (after the TMA and its expect_tx)
  slots [112, 176) the math warpgroups' first 64 pipeline stages: the full-barrier wait's return (stage landed and
                   consumer ready), warpgroup 0, warp 0, lane 0
A "first" event is written once, a "last" event at every occurrence (the last write stays). Count slots hold
numbers, not times. Every write is one lane's plain global store of two int64: no added barrier, fence or wait.
"""
import sys

EVENTS = [
    # name, slot, who
    ("ENTRY", 0, "thread 0, first instruction after the index setup"),
    ("INIT", 1, "thread 0, after the barrier-init __syncthreads"),
    ("D_COUNT", 2, "dispatch thread 0: per-SM expert counts in smem done (after the sync)"),
    ("D_OFFSETS", 3, "dispatch thread 0: global atomics for per-SM offsets done (after the sync)"),
    ("D_SRCIDX", 4, "dispatch thread 0: source token-topk indices written, before grid sync 1"),
    ("D_GRIDSYNC", 5, "dispatch thread 0: grid sync 1 released"),
    ("D_COUNTS_SENT", 6, "dispatch thread 0: SM 0's expert counts written to every rank (after the sync)"),
    ("D_NVL_PULL", 7, "dispatch thread 0: NVLink barrier before the pulls released (its closing grid sync)"),
    ("D_PULL_START", 8, "dispatch thread 0: the dispatch/epilogue named barrier passed; pulls start"),
    ("D_PULL_FIRST_W0", 9, "dispatch warp 0: its first pulled token landed (mbarrier wait returned)"),
    ("D_PULL_FIRST_W1", 10, "dispatch warp 1: the same"),
    ("D_PULL_LAST_W0", 11, "dispatch warp 0: its last pulled token stored and released (red_add_rel)"),
    ("D_PULL_LAST_W1", 12, "dispatch warp 1: the same"),
    ("D_LOOP_END_W0", 13, "dispatch warp 0: pull loop left"),
    ("D_LOOP_END_W1", 14, "dispatch warp 1: pull loop left"),
    ("D_CLEAN_SYNC", 15, "dispatch thread 0: named barrier with the math warps (they reached the combine) passed"),
    ("D_CLEAN_DONE", 16, "dispatch thread 0: workspace clean done"),
    ("D_EXIT", 17, "dispatch thread 0: last NVLink barrier done (dispatch role ends)"),
    ("A_FIRST_BLOCK", 18, "token-TMA warp: first block handed out (expert counts fetched)"),
    ("A_L1_READY", 19, "token-TMA warp: first L1 block's tokens arrived (l1_arrival_count wait returned)"),
    ("A_L2_WAIT", 20, "token-TMA warp: first L2 block, wait for its expert's L1 outputs begins"),
    ("A_L2_READY", 21, "token-TMA warp: first L2 block's L1 outputs arrived (l2_arrival_mask wait returned)"),
    ("A_DONE", 23, "token-TMA warp: no blocks left"),
    ("B_FIRST_BLOCK", 24, "weight-TMA warp: first block handed out (expert counts fetched)"),
    ("B_FIRST_ISSUE", 25, "weight-TMA warp: first weight TMA issued"),
    ("B_FIRST_L2_ISSUE", 26, "weight-TMA warp: first linear-2 weight TMA issued"),
    ("B_LAST_ISSUE", 27, "weight-TMA warp: last weight TMA issued"),
    ("B_DONE", 28, "weight-TMA warp: no blocks left"),
    ("M_START", 30, "math WG0 thread 0: named barrier with dispatch passed (after the NVLink barrier)"),
    ("M_L1_FIRST_FULL", 32, "math: first linear-1 stage landed (full-barrier wait returned; first L1 MMA issues)"),
    ("M_L1_FIRST_DONE", 33, "math: first linear-1 block's MMAs done"),
    ("M_L1_LAST_DONE", 34, "math: last linear-1 block's MMAs done"),
    ("M_L1_EPI_DONE", 35, "math: last linear-1 epilogue done (TMA store drained, l2_arrival_mask released)"),
    ("M_L2_FIRST_FULL", 36, "math: first linear-2 stage landed"),
    ("M_L2_FIRST_DONE", 37, "math: first linear-2 block's MMAs done"),
    ("M_L2_LAST_DONE", 38, "math: last linear-2 block's MMAs done"),
    ("M_L2_EPI_DONE", 39, "math: last linear-2 epilogue (BF16 scatter to the combine buffer) done"),
    ("M_GEMM_DONE", 40, "math: no blocks left"),
    ("M_NVL_COMBINE", 41, "math: NVLink barrier before the combine released (grid sync, signal, grid sync)"),
    ("M_COMBINE_SYNC", 42, "math: named barrier with dispatch passed; combine reduction starts"),
    ("M_COMBINE_END_W0", 43, "math warp 0: combine loop left"),
    ("M_COMBINE_END_MAX", 44, "any math warp: combine loop left (atomicMax of globaltimer; clock64 slot unused)"),
    ("C_BLOCKS", 45, "count: linear-1 blocks, linear-2 blocks (math)"),
    ("C_KBLOCKS", 46, "count: weight TMAs issued, stages consumed"),
    ("C_PULLS", 47, "count: tokens pulled by dispatch warp 0, warp 1"),
]
NUM_EVENTS = 48
NUM_TRACE = 64
SLOTS = NUM_EVENTS + 2 * NUM_TRACE  # 176

HELPERS = r'''
// ---- megatl: per-CTA timeline (rubinperf calibration/hopper/megamoe_sm90/timeline/patch_timeline.py) ----
namespace megatl {
constexpr uint32_t kNumEvents = %(NUM_EVENTS)d;
constexpr uint32_t kNumTrace = %(NUM_TRACE)d;
constexpr uint32_t kSlots = %(SLOTS)d;
constexpr uint32_t kIssueBase = kNumEvents;
constexpr uint32_t kLandBase = kNumEvents + kNumTrace;
enum : uint32_t {
%(ENUM)s
};
__device__ __forceinline__ int64_t gtime() {
    uint64_t t;
    asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t));
    return static_cast<int64_t>(t);
}
__device__ __forceinline__ void rec(int64_t* ev, const uint32_t& slot) {
    if (ev != nullptr) {
        const int64_t t = gtime();
        const int64_t c = clock64();
        ev[2 * slot] = t;
        ev[2 * slot + 1] = c;
    }
}
__device__ __forceinline__ void put(int64_t* ev, const uint32_t& slot, const int64_t& a, const int64_t& b) {
    if (ev != nullptr) {
        ev[2 * slot] = a;
        ev[2 * slot + 1] = b;
    }
}
__device__ __forceinline__ void rec_max(int64_t* ev, const uint32_t& slot) {
    if (ev != nullptr)
        atomicMax(reinterpret_cast<unsigned long long*>(ev + 2 * slot), static_cast<unsigned long long>(gtime()));
}
}  // namespace megatl

'''


def helpers():
    enum = "\n".join(f"    {n} = {s}," for n, s, _ in EVENTS)
    # `%%%%globaltimer` -> `%%globaltimer` after this substitution: the asm string needs %% for a literal %
    return HELPERS % dict(NUM_EVENTS=NUM_EVENTS, NUM_TRACE=NUM_TRACE, SLOTS=SLOTS, ENUM=enum)


M = "megatl::"
PATCHES = [
    # (anchor, replacement, count): the anchor must occur exactly `count` times
    ("template <float kActivationClamp>\n__forceinline__ __device__ float sm90_fp8_mega_moe_clamp_gate",
     helpers() + "template <float kActivationClamp>\n__forceinline__ __device__ float sm90_fp8_mega_moe_clamp_gate", 1),
    # kernel entry: the buffer pointer and the first stamp
    ("    const uint32_t lane_idx   = ptx::get_lane_idx();\n",
     "    const uint32_t lane_idx   = ptx::get_lane_idx();\n"
     "    int64_t* const megatl_ev = cumulative_local_expert_recv_stats == nullptr ? nullptr :\n"
     "        reinterpret_cast<int64_t*>(cumulative_local_expert_recv_stats + ((kNumExpertsPerRank + 3u) / 4u) * 4u)\n"
     "        + static_cast<uint64_t>(blockIdx.x) * megatl::kSlots * 2;\n"
     "    if (thread_idx == 0) megatl::rec(megatl_ev, megatl::ENTRY);\n", 1),
    ("    __syncthreads();\n\n    // =====================================================================\n    // Scheduler (cluster=1)",
     "    __syncthreads();\n    if (thread_idx == 0) megatl::rec(megatl_ev, megatl::INIT);\n\n"
     "    // =====================================================================\n    // Scheduler (cluster=1)", 1),
    # ---- dispatch warps
    ("            atomicAdd_block(smem_expert_count + expert_idx, 1);\n        });\n"
     "        ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx);\n",
     "            atomicAdd_block(smem_expert_count + expert_idx, 1);\n        });\n"
     "        ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx);\n"
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_COUNT);\n", 1),
    ("                ptx::atomic_add(workspace.get_expert_send_count_ptr(i), send_value));\n        }\n"
     "        ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx);\n",
     "                ptx::atomic_add(workspace.get_expert_send_count_ptr(i), send_value));\n        }\n"
     "        ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx);\n"
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_OFFSETS);\n", 1),
    ("        comm::grid_sync<kNumSMs, kDispatchGridSyncIndex>(",
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_SRCIDX);\n"
     "        comm::grid_sync<kNumSMs, kDispatchGridSyncIndex>(", 1),
    ("            [=]() { ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx); }\n        );\n",
     "            [=]() { ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx); }\n        );\n"
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_GRIDSYNC);\n", 1),
    ("        ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx);\n\n"
     "        comm::nvlink_barrier<kNumRanks, kNumSMs, kNumDispatchThreads,\n"
     "                             kDispatchGridSyncIndex, kBeforeDispatchPullBarrierTag>(",
     "        ptx::sync_aligned(kNumDispatchThreads, kDispatchBarrierIdx);\n"
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_COUNTS_SENT);\n\n"
     "        comm::nvlink_barrier<kNumRanks, kNumSMs, kNumDispatchThreads,\n"
     "                             kDispatchGridSyncIndex, kBeforeDispatchPullBarrierTag>(", 1),
    ("        // Sync with epilogue warps before pulling tokens.\n",
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_NVL_PULL);\n"
     "        // Sync with epilogue warps before pulling tokens.\n", 1),
    ("        // Token / SF pull loop\n        uint32_t pull_mbarrier_phase = 0;\n",
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_PULL_START);\n"
     "        // Token / SF pull loop\n        uint32_t pull_mbarrier_phase = 0;\n"
     "        uint32_t megatl_npull = 0;\n", 1),
    ("                    ptx::mbarrier_wait_and_flip_phase(pull_mbarrier, pull_mbarrier_phase);\n",
     "                    ptx::mbarrier_wait_and_flip_phase(pull_mbarrier, pull_mbarrier_phase);\n"
     "                    if (warp_idx < 2 and megatl_npull == 0) megatl::rec(megatl_ev, megatl::D_PULL_FIRST_W0 + warp_idx);\n", 1),
    ("                    ptx::red_add_rel(\n                        workspace.get_l1_arrival_count_ptr(pool_block_idx), 1);\n",
     "                    ptx::red_add_rel(\n                        workspace.get_l1_arrival_count_ptr(pool_block_idx), 1);\n"
     "                    ++ megatl_npull;\n"
     "                    if (warp_idx < 2) {\n"
     "                        megatl::rec(megatl_ev, megatl::D_PULL_LAST_W0 + warp_idx);\n"
     "                        if (megatl_ev != nullptr) megatl_ev[2 * megatl::C_PULLS + warp_idx] = megatl_npull;\n"
     "                    }\n", 1),
    ("        // Cleanup workspace, overlapping with combine.\n",
     "        if (lane_idx == 0 and warp_idx < 2) megatl::rec(megatl_ev, megatl::D_LOOP_END_W0 + warp_idx);\n"
     "        // Cleanup workspace, overlapping with combine.\n", 1),
    ("        DG_STATIC_ASSERT(kNumSMs > 1, \"Invalid SM count\");\n",
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_CLEAN_SYNC);\n"
     "        DG_STATIC_ASSERT(kNumSMs > 1, \"Invalid SM count\");\n", 1),
    ("        comm::nvlink_barrier<kNumRanks, kNumSMs, kNumDispatchThreads,\n"
     "                             kDispatchGridSyncIndex, kAfterWorkspaceCleanBarrierTag>(",
     "        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_CLEAN_DONE);\n"
     "        comm::nvlink_barrier<kNumRanks, kNumSMs, kNumDispatchThreads,\n"
     "                             kDispatchGridSyncIndex, kAfterWorkspaceCleanBarrierTag>(", 1),
    ("            true, false);\n\n    // =====",
     "            true, false);\n        if (thread_idx == 0) megatl::rec(megatl_ev, megatl::D_EXIT);\n\n    // =====", 1),
    # ---- token (A) TMA warp
    ("        auto process_a_sfa_block = [&](",
     "        uint32_t megatl_a_nblk = 0;\n        bool megatl_a_first_l1 = true, megatl_a_first_l2 = true;\n"
     "        auto process_a_sfa_block = [&](", 1),
    ("            const uint32_t pool_block_idx = scheduler.get_current_pool_block_offset() + m_block_idx;\n\n"
     "            // Wait for the pool to be ready\n",
     "            const uint32_t pool_block_idx = scheduler.get_current_pool_block_offset() + m_block_idx;\n\n"
     "            if (lane_idx == 0) {\n"
     "                if (megatl_a_nblk == 0) megatl::rec(megatl_ev, megatl::A_FIRST_BLOCK);\n"
     "                if (block_phase == sched::BlockPhase::Linear2 and megatl_a_first_l2) megatl::rec(megatl_ev, megatl::A_L2_WAIT);\n"
     "            }\n"
     "            // Wait for the pool to be ready\n", 1),
    ("            for (uint32_t k_block_idx = 0; k_block_idx < num_k_blocks; advance_pipeline(k_block_idx)) {\n"
     "                empty_barriers[stage_idx]->wait(phase ^ 1);\n\n"
     "                if (cute::elect_one_sync()) {\n"
     "                    const uint32_t m_idx = pool_block_idx * BLOCK_M;",
     "            if (lane_idx == 0) {\n"
     "                if (block_phase == sched::BlockPhase::Linear1 and megatl_a_first_l1) {\n"
     "                    megatl::rec(megatl_ev, megatl::A_L1_READY);\n"
     "                    megatl_a_first_l1 = false;\n"
     "                }\n"
     "                if (block_phase == sched::BlockPhase::Linear2 and megatl_a_first_l2) {\n"
     "                    megatl::rec(megatl_ev, megatl::A_L2_READY);\n"
     "                    megatl_a_first_l2 = false;\n"
     "                }\n"
     "            }\n"
     "            ++ megatl_a_nblk;\n"
     "            for (uint32_t k_block_idx = 0; k_block_idx < num_k_blocks; advance_pipeline(k_block_idx)) {\n"
     "                empty_barriers[stage_idx]->wait(phase ^ 1);\n\n"
     "                if (cute::elect_one_sync()) {\n"
     "                    const uint32_t m_idx = pool_block_idx * BLOCK_M;", 1),
    ("    } else if (warp_idx == kNumDispatchWarps + 1) {\n"
     "        cutlass::arch::warpgroup_reg_dealloc<kNumNonEpilogueRegisters>();\n",
     "        if (lane_idx == 0) megatl::rec(megatl_ev, megatl::A_DONE);\n"
     "    } else if (warp_idx == kNumDispatchWarps + 1) {\n"
     "        cutlass::arch::warpgroup_reg_dealloc<kNumNonEpilogueRegisters>();\n"
     "        uint32_t megatl_b_n = 0, megatl_b_blk = 0;\n        bool megatl_b_first_l2 = true;\n", 1),
    # ---- weight (B) TMA warp
    ("            const uint32_t shape_n = block_phase == sched::BlockPhase::Linear2 ? L2_SHAPE_N : L1_SHAPE_N;\n",
     "            const uint32_t shape_n = block_phase == sched::BlockPhase::Linear2 ? L2_SHAPE_N : L1_SHAPE_N;\n"
     "            if (lane_idx == 0 and megatl_b_blk == 0) megatl::rec(megatl_ev, megatl::B_FIRST_BLOCK);\n"
     "            ++ megatl_b_blk;\n", 1),
    ("                    full_barriers[stage_idx]->arrive_and_expect_tx(SMEM_B_SIZE_PER_STAGE);\n",
     "                    full_barriers[stage_idx]->arrive_and_expect_tx(SMEM_B_SIZE_PER_STAGE);\n"
     "                    if (megatl_b_n == 0) megatl::rec(megatl_ev, megatl::B_FIRST_ISSUE);\n"
     "                    if (block_phase == sched::BlockPhase::Linear2 and megatl_b_first_l2) {\n"
     "                        megatl::rec(megatl_ev, megatl::B_FIRST_L2_ISSUE);\n"
     "                        megatl_b_first_l2 = false;\n"
     "                    }\n"
     "                    megatl::rec(megatl_ev, megatl::B_LAST_ISSUE);\n"
     "                    if (megatl_b_n < megatl::kNumTrace) megatl::rec(megatl_ev, megatl::kIssueBase + megatl_b_n);\n"
     "                    ++ megatl_b_n;\n", 1),
    ("    } else if (warp_idx < kNumDispatchWarps + kNumMMANonEpilogueWarps) {",
     "        if (cute::elect_one_sync()) {\n"
     "            megatl::rec(megatl_ev, megatl::B_DONE);\n"
     "            if (megatl_ev != nullptr) megatl_ev[2 * megatl::C_KBLOCKS] = megatl_b_n;\n"
     "        }\n        __syncwarp();\n"
     "    } else if (warp_idx < kNumDispatchWarps + kNumMMANonEpilogueWarps) {", 1),
    # ---- math warpgroups
    ("        // Sync with dispatch in the full communication path.\n"
     "        ptx::sync_unaligned(kNumDispatchThreads + kNumEpilogueThreads, kDispatchWithEpilogueBarrierIdx);\n",
     "        // Sync with dispatch in the full communication path.\n"
     "        ptx::sync_unaligned(kNumDispatchThreads + kNumEpilogueThreads, kDispatchWithEpilogueBarrierIdx);\n"
     "        if (epilogue_thread_idx == 0) megatl::rec(megatl_ev, megatl::M_START);\n"
     "        uint32_t megatl_nk = 0, megatl_l1_blocks = 0, megatl_l2_blocks = 0;\n", 1),
    ("                float accum[kAccumPerThread];\n\n"
     "                for (uint32_t k_block_idx = 0; k_block_idx < num_k_blocks; advance_pipeline(k_block_idx)) {\n"
     "                    full_barriers[stage_idx]->wait(phase);\n",
     "                float accum[kAccumPerThread];\n\n"
     "                for (uint32_t k_block_idx = 0; k_block_idx < num_k_blocks; advance_pipeline(k_block_idx)) {\n"
     "                    full_barriers[stage_idx]->wait(phase);\n"
     "                    if (epilogue_thread_idx == 0) {\n"
     "                        if (megatl_nk < megatl::kNumTrace) megatl::rec(megatl_ev, megatl::kLandBase + megatl_nk);\n"
     "                        if (k_block_idx == 0 and block_phase == sched::BlockPhase::Linear1 and megatl_l1_blocks == 0)\n"
     "                            megatl::rec(megatl_ev, megatl::M_L1_FIRST_FULL);\n"
     "                        if (k_block_idx == 0 and block_phase == sched::BlockPhase::Linear2 and megatl_l2_blocks == 0)\n"
     "                            megatl::rec(megatl_ev, megatl::M_L2_FIRST_FULL);\n"
     "                        ++ megatl_nk;\n"
     "                    }\n", 1),
    ("            // Skip epilogue when block is past valid M (still must release via empty)\n",
     "            if (epilogue_thread_idx == 0) {\n"
     "                if (block_phase == sched::BlockPhase::Linear1) {\n"
     "                    if (megatl_l1_blocks == 0) megatl::rec(megatl_ev, megatl::M_L1_FIRST_DONE);\n"
     "                    megatl::rec(megatl_ev, megatl::M_L1_LAST_DONE);\n"
     "                    ++ megatl_l1_blocks;\n"
     "                } else {\n"
     "                    if (megatl_l2_blocks == 0) megatl::rec(megatl_ev, megatl::M_L2_FIRST_DONE);\n"
     "                    megatl::rec(megatl_ev, megatl::M_L2_LAST_DONE);\n"
     "                    ++ megatl_l2_blocks;\n"
     "                }\n"
     "            }\n"
     "            // Skip epilogue when block is past valid M (still must release via empty)\n", 1),
    ("                __syncwarp();\n                // In the shared-tile split only the first warpgroup issues and\n",
     "                __syncwarp();\n"
     "                if (epilogue_thread_idx == 0) megatl::rec(megatl_ev, megatl::M_L1_EPI_DONE);\n"
     "                // In the shared-tile split only the first warpgroup issues and\n", 1),
    ("                if constexpr (kL2EpilogueRequiresFullSync)\n"
     "                    ptx::sync_aligned(kNumEpilogueThreads, kEpilogueFullBarrierIdx);\n            }\n        };\n",
     "                if constexpr (kL2EpilogueRequiresFullSync)\n"
     "                    ptx::sync_aligned(kNumEpilogueThreads, kEpilogueFullBarrierIdx);\n"
     "                if (epilogue_thread_idx == 0) megatl::rec(megatl_ev, megatl::M_L2_EPI_DONE);\n"
     "            }\n        };\n", 1),
    ("        // ---------------- COMBINE ----------------\n",
     "        if (epilogue_thread_idx == 0) {\n"
     "            megatl::rec(megatl_ev, megatl::M_GEMM_DONE);\n"
     "            megatl::put(megatl_ev, megatl::C_BLOCKS, megatl_l1_blocks, megatl_l2_blocks);\n"
     "            if (megatl_ev != nullptr) megatl_ev[2 * megatl::C_KBLOCKS + 1] = megatl_nk;\n"
     "        }\n"
     "        // ---------------- COMBINE ----------------\n", 1),
    ("        // Sync with dispatch (paired with dispatch's pre-cleanup sync) so that\n",
     "        if (epilogue_thread_idx == 0) megatl::rec(megatl_ev, megatl::M_NVL_COMBINE);\n"
     "        // Sync with dispatch (paired with dispatch's pre-cleanup sync) so that\n", 1),
    ("        if (epilogue_warp_idx >= kNumCombineWarps)\n            return;\n",
     "        if (epilogue_thread_idx == 0) megatl::rec(megatl_ev, megatl::M_COMBINE_SYNC);\n"
     "        if (epilogue_warp_idx >= kNumCombineWarps)\n            return;\n", 1),
    ("                __syncwarp();\n            }\n        }\n    }\n#else\n",
     "                __syncwarp();\n            }\n        }\n"
     "        if (epilogue_thread_idx == 0) megatl::rec(megatl_ev, megatl::M_COMBINE_END_W0);\n"
     "        if (lane_idx == 0) megatl::rec_max(megatl_ev, megatl::M_COMBINE_END_MAX);\n"
     "    }\n#else\n", 1),
]


def patch(src):
    for anchor, new, count in PATCHES:
        n = src.count(anchor)
        assert n == count, f"anchor found {n} times, expected {count}: {anchor[:120]!r}"
        src = src.replace(anchor, new)
    return src


if __name__ == "__main__":
    import os
    path = os.path.join(sys.argv[1], "deep_gemm/include/deep_gemm/impls/sm90_fp8_mega_moe.cuh")
    src = open(path).read()
    assert "megatl" not in src, "already patched"
    out = patch(src)
    open(path, "w").write(out)
    print(f"patched {path}: {len(PATCHES)} insertions, {NUM_EVENTS} event slots + 2 x {NUM_TRACE} trace slots per CTA")
