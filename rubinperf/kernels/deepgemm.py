"""DeepGEMM's kernels as their own code configures them (github.com/deepseek-ai/DeepGEMM @ DEEPGEMM_COMMIT).

Each constant below is read from the file named beside it; docs/deepseek-kernels.md lists them and says how the
roofline uses each. The functions are pure functions of shapes (numbers, numpy arrays or sympy symbols): a heuristic's
table of regimes becomes a `sstep` over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rubinperf.mathops import sceil, sfloor, smax, smin, sstep

DEEPGEMM_COMMIT = "54e22612409371d6364144b69086735beb54e98b"

# csrc/jit_kernels/heuristics/sm100.hpp, SM100ArchSpec::smem_capacity: the shared memory the SM100 heuristics size
# their pipelines to (227 KB, the most one CTA may use on SM100).
SM100_SMEM_CAPACITY_BYTES = 232448

# csrc/jit_kernels/heuristics/mega_moe.hpp (get_mega_moe_config, get_block_config_for_mega_moe,
# get_pipeline_config_for_mega_moe) for the SM100 FP8 x FP4 Mega MoE:
MEGAMOE_BLOCK_N = 128                # block_n = 128 weight rows per CTA (swap-AB: the MMA's M side, 2-CTA clusters)
MEGAMOE_DISPATCH_WARPS = 4           # num_dispatch_threads = 128: four warps per SM pull tokens from remote ranks
MEGAMOE_PULL_THRESHOLD_BYTES = 4096  # kPullThreshold: a token's bytes halved until a pull is at most this
MEGAMOE_GRAN_K = 32                  # gran_k: one UE8M0 scale per 32 values (activations and weights)
# sm100_fp8_fp4_mega_moe.cuh: "Dynamic update of UMMA N based on effective M" (swap-AB: the block's valid tokens,
# scheduler.get_valid_m<true>() aligned to 16): a block's MMAs run on its valid rows, padded to 16
MEGAMOE_MMA_ROWS = 16
MEGAMOE_SF_ALIGN = 128               # SM100ArchSpec::get_sf_uttcp_aligned_block_sizes: SF blocks aligned to 128
SMEM_ALIGN = 1024                    # kSmemAlignment
EPILOGUE_STAGES = 2                  # kNumEpilogueStages
TMA_STORE_STAGES = 2                 # kNumTMAStoreStages
# get_block_config_for_mega_moe: by expected tokens per expert, tokens x ranks x top-k / experts (<= each bound):
# (block_m, store_block_m, block_k in bytes, epilogue warpgroups); cluster size 2 in every regime.
MEGAMOE_EXPECTED_BOUNDS = (8.5, 16.5, 32.5, 64.5, 96.5)
MEGAMOE_REGIMES = ((16, 8, 256, 2), (32, 16, 128, 2), (64, 32, 128, 1), (96, 16, 128, 2), (128, 32, 128, 2),
                   (192, 32, 128, 2))


def _align(x, a):
    """x rounded up to a multiple of a (numbers, numpy arrays and sympy expressions alike: floor division)."""
    return -(-x // a) * a


def megamoe_pull_bytes(hidden, act_bytes=1):
    """Bytes of one pull (get_mega_moe_config: a token's hidden x activation bytes, halved until at most
    kPullThreshold) and the pulls per token."""
    pull = hidden * act_bytes
    while pull > MEGAMOE_PULL_THRESHOLD_BYTES:
        pull /= 2
    return pull, hidden * act_bytes / pull


@dataclass(frozen=True)
class MegaMoEConfig:
    """What the heuristic picks for one shape (fields are numbers, arrays or expressions of the token count)."""
    expected_tokens_per_expert: Any
    block_m: Any            # token rows of one block (the MMA's N side after swap-AB)
    block_k: Any            # K values per pipeline stage
    stage_smem_bytes: Any   # shared memory of one stage: half the block's tokens (multicast), the weights, SFs
    fixed_smem_bytes: Any   # shared memory besides the stages (dispatch buffers, output staging, barriers)
    stages: Any             # pipeline stages that fit: (smem - fixed) // stage (the heuristic asserts at least 2; at
                            # least 1 here, for a spec swept below the kernel's needs)
    stage_hbm_bytes: Any    # bytes one stage brings from memory: FP4 weights and their SF, the tokens and theirs
    in_flight_bytes: Any    # stages x stage_hbm_bytes: what one SM keeps in flight while it streams weights
    pull_bytes: float       # bytes of one token pull
    pulls_per_token: float


def megamoe_config(tokens, ranks, experts, top_k, hidden, smem_bytes=SM100_SMEM_CAPACITY_BYTES,
                   smem_weight_bytes=1.0, weight_bytes=0.5, act_bytes=1) -> MegaMoEConfig:
    """The Mega MoE heuristic (csrc/jit_kernels/heuristics/mega_moe.hpp) for `tokens` per rank over `ranks`, `experts`
    routed experts top-`top_k`, `hidden` wide: its block regime, the stages that fit in `smem_bytes` of shared memory,
    and the bytes one SM keeps in flight.

    A stage holds block_m / 2 token rows (A multicast over the 2-CTA cluster) and block_n = 128 weight rows of block_k
    values, plus their scale factors (SF blocks aligned to 128 rows, one UE8M0 byte per 32 values) and two barriers.
    `smem_weight_bytes`: bytes of one weight value in shared memory (SM100: FP4 unpacked to 8 bits, 1; a packed FP4
    layout, as the Rubin post's SM107 kernels, 0.5). `weight_bytes`: one weight value in HBM (packed FP4, 0.5).
    FP8 x FP4: one byte per MMA element (block_k = block_k bytes)."""
    expected = tokens * ranks * top_k / experts
    pull, pulls = megamoe_pull_bytes(hidden, act_bytes)
    fields = {"block_m": [], "block_k": [], "stage": [], "fixed": [], "stages": [], "hbm": []}
    for bm, sbm, bk_bytes, wgs in MEGAMOE_REGIMES:
        bk = bk_bytes // act_bytes
        sf_m, sf_n = _align(bm, MEGAMOE_SF_ALIGN), _align(MEGAMOE_BLOCK_N, MEGAMOE_SF_ALIGN)
        sf_bytes = (sf_m + sf_n) * bk // MEGAMOE_GRAN_K
        stage = bm // 2 * bk * act_bytes + MEGAMOE_BLOCK_N * bk * smem_weight_bytes + sf_bytes + 2 * 8
        epilogue_warps = wgs * 4
        dispatch = _align(experts * 4, SMEM_ALIGN) + _align(pull * MEGAMOE_DISPATCH_WARPS, SMEM_ALIGN)
        cd = _align(max(wgs * sbm * (MEGAMOE_BLOCK_N // 2) * TMA_STORE_STAGES * act_bytes,
                        wgs * sbm * MEGAMOE_BLOCK_N * 2), SMEM_ALIGN)
        barriers = (MEGAMOE_DISPATCH_WARPS + EPILOGUE_STAGES * 2 + epilogue_warps * 2) * 8
        amax = sbm * epilogue_warps * 4
        fixed = dispatch + cd + amax + barriers + 4
        hbm = MEGAMOE_BLOCK_N * bk * weight_bytes + bm // 2 * bk * act_bytes + sf_bytes
        for name, value in (("block_m", bm), ("block_k", bk), ("stage", stage), ("fixed", fixed),
                            ("stages", smax(sfloor((smem_bytes - fixed) / stage), 1)), ("hbm", hbm)):
            fields[name].append(value)
    pick = {name: sstep(expected, MEGAMOE_EXPECTED_BOUNDS, values) for name, values in fields.items()}
    return MegaMoEConfig(expected, pick["block_m"], pick["block_k"], pick["stage"], pick["fixed"], pick["stages"],
                         pick["hbm"], pick["stages"] * pick["hbm"], pull, pulls)


# The SM100 FP8 GEMM (csrc/jit_kernels/heuristics/sm100.hpp, SM100ArchSpec; impls/sm100_fp8_fp4_gemm_1d1d.hpp) at
# decode sizes: swap-AB (the tokens are the UMMA's N side), block_n = 128 weight rows a CTA (line 120: swap-AB needs
# block_n = layout_ad_m = 128), block_k = 128 / element size (line 29: 128 FP8 values), a 2-CTA cluster along the
# tokens when the weight columns come in pairs (lines 81-116), the persistent grid of num_sms CTAs (line 221).
GEMM_SWAP_BLOCK_N = 128
GEMM_BLOCK_K_BYTES = 128
GEMM_MAX_STAGES = 32                    # kNumMaxStages (line 177)
GEMM_UMMA_STEP_N = 16                   # umma_step_n: a swap-AB block's store rows (line 157)
GEMM_SF_BYTES = 4                       # one packed UE8M0 word per 128-aligned row of a stage (lines 203-204)


def sm100_fp8_gemm_pipeline(block_m, cluster_n=2, act_bytes=1, weight_bytes=1, out_bytes=2,
                            smem_bytes=SM100_SMEM_CAPACITY_BYTES):
    """Stages and bytes of DeepGEMM's SM100 FP8 GEMM in its swap-AB layout with `block_m` token rows a block
    (get_pipeline_config, sm100.hpp lines 176-216): a stage holds load_block_m = block_m / cluster_n token rows
    (the cluster multicasts the tokens) and 128 weight rows of block_k values, plus SF words for 128-aligned rows of
    each; besides the stages, a double-buffered output tile of 16 x 128 values (store_block_m x store_block_n x 2),
    32 stages' barriers and the TMEM pointer. Returns (stages, weight bytes of one stage): at block_m 32, 11 stages
    of 16 KB of FP8 weights (180,224 B in flight a CTA); at 16, 12."""
    block_k = GEMM_BLOCK_K_BYTES // act_bytes
    stage = (block_m // cluster_n * block_k * act_bytes + GEMM_SWAP_BLOCK_N * block_k * weight_bytes
             + (_align(block_m, MEGAMOE_SF_ALIGN) + _align(GEMM_SWAP_BLOCK_N, MEGAMOE_SF_ALIGN)) * GEMM_SF_BYTES)
    extra = GEMM_UMMA_STEP_N * GEMM_SWAP_BLOCK_N * out_bytes * 2 + GEMM_MAX_STAGES * 8 * 3 + 2 * 8 * 2 + 8 + 4
    stages = min((smem_bytes - extra) // stage, GEMM_MAX_STAGES)
    return stages, GEMM_SWAP_BLOCK_N * block_k * weight_bytes


# The SM90 FP8 GEMM (csrc/jit_kernels/heuristics/sm90.hpp @ DEEPGEMM_COMMIT, SM90ArchSpec; impls/sm90_fp8_gemm_1d2d.hpp):
# block_m 64 or 128, and 16 / 32 where m <= 16 / 32 ("smaller block M can avoid TMA L2 OOB bound", lines 23-26);
# block_n every multiple of 16 (line 40) up to 192 for the 1D2D kernel ("register spills", line 52); the comparator
# (get_layout_info, lines 203-235) divides the L1/L2 cycles of a layout by its last wave's use of the SMs
# (wave_efficiency), so at decode sizes it picks the narrowest block_n whose blocks fill the SMs' waves; a persistent
# grid of num_sms CTAs (get_launch_config, line 193).
SM90_GEMM_BLOCK_N_STEP = 16
SM90_GEMM_MAX_BLOCK_N = 192


def sm90_fp8_gemm_blocks(m, n, sms):
    """The block DeepGEMM's SM90 FP8 GEMM takes for an m x n output on `sms` SMs (constants above), as the heuristic's
    choice reduces to: block_m 16, 32 or 64 where m fits (128 above 64 rows); block_n the narrowest multiple of 16
    (at most 192) that spreads the m blocks x n columns over whole waves of the SMs: waves = ceil(m blocks x n /
    (192 x SMs)), block_n = 16 x ceil(m blocks x n / (16 x SMs x waves)). At one token, n = 5120 gives 16 x 48
    (107 blocks), n = 128 gives 16 x 16 (8 blocks: the other 124 SMs idle), n = 32768 gives 16 x 128 in two waves,
    as the heuristic picks them. ASSUMPTION (a reduction of the comparator, checked against it at the own rows'
    shapes): above 64 rows the heuristic also weighs 64 against 128 and multicast clusters by their L2 traffic,
    which this leaves out."""
    block_m = sstep(m, (16, 32, 256), (16, 32, 64, 128))
    m_blocks = sceil(m / block_m)
    waves = sceil(m_blocks * n / (SM90_GEMM_MAX_BLOCK_N * sms))
    block_n = smin(smax(SM90_GEMM_BLOCK_N_STEP * sceil(m_blocks * n / (SM90_GEMM_BLOCK_N_STEP * sms * waves)),
                        SM90_GEMM_BLOCK_N_STEP), SM90_GEMM_MAX_BLOCK_N)
    return block_m, block_n


# The SM90 FP8 GEMM's main loop (deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh @ DEEPGEMM_COMMIT): per K block
# of 128 values (line 58) the math warpgroup(s) wait for the stage's TMA barrier (line 294), start four WGMMAs (128 / 32)
# m64 x block_n x k32 (FP8MMASelector, mma/sm90.cuh lines 26-29; lines 310-317), wait for them (`warpgroup_wait<0>`,
# line 321), free the stage (line 325) and promote the FP32 accumulators with the per-128 scales on CUDA cores (one FMA
# per accumulator, 64 x block_n per warpgroup, lines 333-347) before the next K block's WGMMAs: a chain per CTA. The TMA
# producer (one thread, lines 173-206) keeps up to `stages` K blocks of A, SFA and B ahead.
SM90_GEMM_BLOCK_K = 128
SM90_WGMMA_M = 64
SM90_SMEM_CAPACITY_BYTES = 232448   # SM90ArchSpec::smem_capacity (sm90.hpp line 14)
SM90_GEMM_MAX_STAGES = 16           # kNumMaxStages (sm90.hpp line 149)


def sm90_fp8_gemm_kblock_flops(block_m, block_n):
    """(tensor-core FLOPs, CUDA-core FLOPs) one CTA spends on one K block of DeepGEMM's SM90 FP8 GEMM: its WGMMAs run
    on max(block_m, 64) rows (a block of 16 or 32 rows pads to the WGMMA's 64; 128 rows are two warpgroups of 64) x
    block_n x 128 values; the promotion is one FMA (2 FLOPs) per accumulator, max(block_m, 64) x block_n. At 16 x 16:
    262,144 and 2,048."""
    rows = smax(block_m, SM90_WGMMA_M)
    return 2 * rows * block_n * SM90_GEMM_BLOCK_K, 2 * rows * block_n


def sm90_fp8_gemm_pipeline(block_m, block_n, k):
    """(stages, weight bytes of one stage) of DeepGEMM's SM90 FP8 GEMM (get_pipeline_config, sm90.hpp lines 148-187,
    1D2D kernel, BF16 output): a stage holds block_m x 128 FP8 activations, block_n x 128 FP8 weights and block_m FP32
    scales aligned to 128 B; besides the stages, the output tile (block_m x block_n BF16, aligned to 1 KB), 16 stages'
    barriers and the B scales of every K block (one or two FP32 a block, as block_n divides 128 or not, aligned to 8).
    At 16 x 16 and k 5120: 16 stages of 2,048 weight bytes; at 16 x 128: 12 of 16,384."""
    k_blocks = sceil(k / SM90_GEMM_BLOCK_K)
    two_sfb = smin(1, SM90_GEMM_BLOCK_K % block_n)       # 0 where block_n divides 128 (one B scale a K block), else 1
    extra = (_align(block_m * block_n * 2, SMEM_ALIGN) + SM90_GEMM_MAX_STAGES * 8 * 2
             + _align(k_blocks * 4 * (1 + two_sfb), 8))
    stage = block_m * SM90_GEMM_BLOCK_K + block_n * SM90_GEMM_BLOCK_K + _align(block_m * 4, 128)
    stages = smin(sfloor((SM90_SMEM_CAPACITY_BYTES - extra) / stage), SM90_GEMM_MAX_STAGES)
    return stages, block_n * SM90_GEMM_BLOCK_K

