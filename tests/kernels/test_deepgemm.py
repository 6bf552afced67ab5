"""DeepGEMM's Mega MoE as its code configures it (rubinperf/kernels/deepgemm.py), and the model against the public
kernel evidence table (calibration/public/kernels.csv)."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest
import sympy

from rubinperf.analysis import kernel_evidence as KE
from rubinperf.analysis.evidence import load_evidence
from rubinperf.kernels import mega_moe
from rubinperf.kernels.deepgemm import megamoe_config
from rubinperf.kernels.moe import busiest_rank_experts
from rubinperf.roofline import bytes_in_flight, kernel_time, occupancy
from rubinperf.specs.stack import load_platform

B200 = load_platform("b200")
FLASH = dict(ranks=8, experts=256, top_k=6, hidden=4096)   # DeepSeek-V4-Flash under EP8 (DeepGEMM PR #316)


def test_one_token_config_by_hand():
    # 1 token x 8 ranks x top-6 over 256 experts: 0.1875 expected tokens per expert <= 8.5: block_m 16, block_k 256
    c = megamoe_config(1, **FLASH)
    assert c.expected_tokens_per_expert == pytest.approx(0.1875)
    assert (c.block_m, c.block_k) == (16, 256)
    # a stage: 8 token rows (A multicast over the 2-CTA cluster) + 128 weight rows unpacked to 8 bits, 256 deep,
    # SFs of 128 + 128 rows (aligned to 128) at one byte per 32 values, two 8-byte barriers
    stage = 8 * 256 + 128 * 256 + (128 + 128) * 256 // 32 + 16
    assert c.stage_smem_bytes == stage == 36880
    # fixed: expert counts (256 x 4 B, aligned to 1 KB), 4 dispatch warps' 4 KB pull buffers, the BF16 L2 output
    # staging (2 warpgroups x 8 rows x 128 x 2 B), the amax buffer (8 rows x 8 warps x 4 B), barriers, TMEM pointer
    fixed = 1024 + 16384 + 4096 + 256 + (4 + 4 + 16) * 8 + 4
    assert c.fixed_smem_bytes == fixed == 21956
    assert c.stages == (232448 - fixed) // stage == 5
    # from HBM a stage brings 128 x 256 packed FP4 weights, 8 x 256 FP8 tokens and the SFs
    assert c.stage_hbm_bytes == 128 * 256 // 2 + 8 * 256 + 2048 == 20480
    assert c.in_flight_bytes == 5 * 20480
    assert (c.pull_bytes, c.pulls_per_token) == (4096, 1)


def test_bytes_in_flight_at_one_token_are_sms_x_stages_x_stage_bytes():
    k = mega_moe(1, 8, 32, 256, 6, 3 * 2048, 4096)
    ctas, _, _ = occupancy(k, B200)
    assert ctas == B200.sm_count   # more blocks than SMs: every SM streams
    assert bytes_in_flight(k, B200, ctas) == B200.sm_count * 5 * 20480


def test_packed_fp4_stages_at_256_kb():
    # the Rubin post's SM107 layout: 7 -> 11 stages in 256 KB; DeepGEMM's SM100 layout fits 6 there (5 in its 227 KB)
    assert megamoe_config(1, **FLASH, smem_bytes=262144, smem_weight_bytes=0.5).stages == 11
    assert megamoe_config(1, **FLASH, smem_bytes=262144).stages == 6


def test_block_regimes_grow_with_tokens_and_vectorise():
    # tokens x 8 x 6 / 256 against the bounds 8.5, 16.5, 32.5, 64.5, 96.5
    tokens = np.array([1, 45, 46, 88, 89, 173, 174, 344, 345, 514, 515, 32768], dtype=float)
    c = megamoe_config(tokens, **FLASH)
    scalar = [megamoe_config(float(t), **FLASH).block_m for t in tokens]
    assert list(c.block_m) == scalar
    assert list(c.block_m) == [16, 16, 32, 32, 64, 64, 96, 96, 128, 128, 192, 192]
    assert np.all(np.diff(c.block_m) >= 0)
    t = sympy.Symbol("t", positive=True)
    sym = megamoe_config(t, **FLASH)
    for x in (1.0, 100.0, 5000.0):
        assert float(sym.in_flight_bytes.subs(t, x)) == megamoe_config(x, **FLASH).in_flight_bytes


def test_busiest_rank_properties():
    assert busiest_rank_experts(8, 6, 256, 32, 1) == pytest.approx(32 * (1 - (1 - 6 / 256) ** 8))  # one rank: the mean
    mean = 32 * (1 - (1 - 6 / 256) ** 8)
    b = busiest_rank_experts(8, 6, 256, 32, 8)
    assert mean < b <= 32
    assert busiest_rank_experts(1e6, 6, 256, 32, 8) == pytest.approx(32)   # every expert touched


def _time(tokens, hw=B200, **kw):
    return kernel_time(mega_moe(tokens, 8, 32, 256, 6, 3 * 2048, 4096, **kw), hw, launch="graph")


def test_megamoe_monotone_in_tokens_bandwidth_and_stages():
    times = [float(_time(t).expected_s) for t in (1, 8, 64, 512, 4096, 32768)]
    # more tokens never make it much faster: where the heuristic moves to a smaller block_k (8 -> 64 tokens: block_m
    # 16 -> 32, block_k 256 -> 128) more stages fit (5 x 20.5 KB -> 10 x 11.3 KB in flight per SM) and the weights
    # stream at a higher Little's-law rate (108.9 -> 112.0 us with 8 times the tokens)
    assert all(b >= 0.9 * a for a, b in zip(times, times[1:]))
    assert times[0] < times[2] < times[3] < times[4] < times[5]
    fast = dataclasses.replace(B200, hbm_bandwidth_bytes_per_s=2 * B200.hbm_bandwidth_bytes_per_s)
    deep = dataclasses.replace(B200, megamoe_stream_latency_s=B200.megamoe_stream_latency_s / 2)
    for t in (1, 512, 32768):
        assert _time(t, fast).expected_s <= _time(t).expected_s
        assert _time(t, deep).expected_s <= _time(t).expected_s
        assert _time(t, smem_bytes=262144, smem_weight_bytes=0.5).expected_s <= _time(t).expected_s


def test_binding_terms_agree_with_pr316_counters():
    # PR #316, V4-Flash EP8: at 32768 tokens per rank 2.0 PFLOP/s, the busiest of its counters: compute binds
    assert _time(32768).bound == "compute"
    # at 1 token the counters read 1311 GB/s of HBM, 5 TFLOP/s and 1 GB/s of NVLink: the weights, streamed at the rate
    # their bytes in flight allow (Little's law) and reported as memory, are the largest part of the body. The fitted
    # fixed chain (28.7 us, of which the code times 19.5) is still longer: latency binds, which the counters do not say
    # (docs/deepseek-kernels.md: what the rows want and the code does not explain)
    t = _time(1)
    assert t.parallelism_s == 0 and t.memory_s > max(t.compute_s, t.comm_s)
    assert t.bound == "latency" and t.latency_s > t.memory_s


def test_megamoe_memory_is_the_in_flight_limited_stream():
    # 1 token per rank, V4-Flash EP8 on B200 (the PR #316 shape): the busiest rank's experts' bytes at the slower of the
    # HBM rate and SMs in use x stages x stage bytes / megamoe_stream_latency_s, by hand from the kernel's own fields
    from rubinperf.roofline import occupancy

    k = mega_moe(1, 8, 32, 256, 6, 3 * 2048, 4096)
    _, share, _ = occupancy(k, B200)
    little = B200.sm_count * k.in_flight_bytes_per_cta * share / B200.megamoe_stream_latency_s
    hbm = B200.hbm_bandwidth_bytes_per_s * B200.grouped_hbm_efficiency
    assert little < hbm   # a few experts' weights cannot stream at the HBM rate
    t = kernel_time(k, B200, launch="graph")
    assert t.memory_s == pytest.approx(k.cost.hbm_bytes / little, rel=1e-9)
    # the same kernel with bytes enough in flight streams at the HBM rate: the memory term is then the plain one
    wide = kernel_time(k, dataclasses.replace(B200, megamoe_stream_latency_s=1e-9), launch="graph")
    assert wide.memory_s == pytest.approx(k.cost.weight_bytes / hbm + (k.cost.hbm_bytes - k.cost.weight_bytes)
                                          / (B200.hbm_bandwidth_bytes_per_s * B200.hbm_stream_efficiency), rel=1e-9)


def test_megamoe_fixed_chain_is_fitted_above_the_codes():
    # the floor of the fitted chain is the steps DeepGEMM's code times (@ 54e2261, impls/sm100_fp8_fp4_mega_moe.cuh
    # comments: 6.5 + 2 + 4 + 4 + 3 us), also the field's default; the vLLM stacks' fitted value lies within the range
    from rubinperf.roofline import launch_parts
    from rubinperf.specs.stack import Stack

    lo, hi = KE.FIT_RANGES["megamoe_sync_s"]
    assert lo == pytest.approx((6.5 + 2 + 4 + 4 + 3) * 1e-6) == Stack.__dataclass_fields__["megamoe_sync_s"].default
    assert lo <= B200.megamoe_sync_s <= hi
    assert launch_parts(mega_moe(1, 8, 32, 256, 6, 3 * 2048, 4096), B200, "graph")["sync"] == B200.megamoe_sync_s


def test_megamoe_pull_chain_is_at_least_one_tokens_round_trips():
    # a dispatch warp loads a token's chunks one at a time, each waited before the next, then its top-k weight
    # (DeepGEMM @ 54e2261, impls/sm100_fp8_fp4_mega_moe.cuh lines 538-557, 581-586). 1 token per rank: 6 x 7/8
    # remote token-topk rows, 2 round trips each, over 4 x 148 dispatch lanes: a lane still pays one token's two
    k = mega_moe(1, 8, 32, 256, 6, 3 * 2048, 4096, pull_round_trips=2)
    assert k.hops_per_item == 2
    assert kernel_time(k, B200, launch="graph").comm_s == pytest.approx(2 * B200.nvlink_latency_s, rel=1e-9)
    # with many tokens the lanes share the round trips: the floor no longer binds
    big = mega_moe(4096, 8, 32, 256, 6, 3 * 2048, 4096, pull_round_trips=2)
    spread = big.cost.nvlink_hops / (4 * B200.sm_count)
    assert spread > 2
    from rubinperf.roofline import serial_hops
    assert serial_hops(big, B200) == pytest.approx(spread)


def test_megamoe_linear_1_and_2_are_one_block_list():
    # DeepGEMM @ 54e2261, scheduler/mega_moe.cuh get_next_block (lines 150-182): block_idx carries over from linear 1's
    # blocks into linear 2's, so the SMs run both GEMMs' blocks as one round-robin list. 1 token per rank, V4-Flash
    # EP8: the busiest rank's touched experts x one M block x (2 x 2048 / 128) linear-1 and 4096 / 128 linear-2 blocks,
    # 4096 and 2048 deep; the list's last wave is partly idle
    k = mega_moe(1, 8, 32, 256, 6, 3 * 2048, 4096)
    first = second = k.groups * 32
    sms = B200.sm_count
    work = (first * 4096 + second * 2048) / sms
    exact = (first + second) / sms
    span = work + (math.ceil(exact) - exact) * 2048 * B200.wave_quantization
    _, share, _ = occupancy(k, B200)
    assert share == pytest.approx(work / span, rel=1e-9)
    # waves apart (linear 2 after all of linear 1) the same blocks would leave more SMs idle
    apart = math.ceil(first / sms) * 4096 + math.ceil(second / sms) * 2048
    assert share > work / apart


def test_fit_does_not_stall_where_it_starts():
    # the coordinate search stalls on the kinks of the absolute error; from the corner of the ranges where it stalls
    # alone (the chain at the top, the stream latency at the unloaded HBM latency) the fit still finds the stack's values
    lo, hi = KE.FIT_RANGES["megamoe_sync_s"]
    start = {"megamoe_sync_s": hi, "megamoe_stream_latency_s": KE.FIT_RANGES["megamoe_stream_latency_s"][0],
             "megamoe_compute_efficiency": 0.48}
    x, _ = KE.fit_family(ROWS, "mega_moe", "sm100", start)
    for field, value in x.items():
        assert value == pytest.approx(getattr(B200, field), rel=0.01), field


ROWS = load_evidence()


def test_pr316_rows_within_20_percent():
    rows = [r for r in ROWS if r.source == "deepseek-ai/DeepGEMM#316"]
    assert len(rows) == 8
    for r in rows:
        t, _, _ = KE.predict(r)
        assert abs(t / r.measured_s - 1) <= 0.2, r.id


def test_held_out_megamoe_rows_meet_the_bar():
    recs = [r for r in KE.kernel_records(ROWS) if r["kernel"] == "mega_moe" and r["gpu"] == "b200"]
    held = [r["abs_log"] for r in recs if r["split"] == "held-out"]
    assert len(held) >= 30 and not any(r["split"] == "fit" for r in recs if not r["id"].startswith("dg316-flash-"))
    assert statistics.median(held) <= KE.HELD_OUT_MEDIAN_MAX
    assert max(held) <= KE.HELD_OUT_WORST_MAX


def test_all_held_out_rows_median():
    held = next(s for s in KE.kernel_summary(KE.kernel_records(ROWS)) if s["kernel"] == "all")
    assert held["median_abs_log"] <= KE.HELD_OUT_MEDIAN_MAX


def test_fit_reproduces_the_stack_values():
    # the committed vLLM stack's megamoe fields are the fit to the PR #316 V4-Flash rows (3 significant figures)
    x, med = KE.fit_family(ROWS, "mega_moe", "sm100")
    for field, value in x.items():
        assert value == pytest.approx(getattr(B200, field), rel=0.01), field
    assert med < 0.05


def test_validate_kernels_cli(cli):
    r = cli("validate", "--kernels", "--json")
    data = r.json()
    assert {"split", "rows", "summary", "held_out"} <= set(data)
    assert len(data["rows"]) == len(ROWS) + len(KE.own_rows())   # the public table and the own H200 primary rows
    held = data["held_out"]
    assert held["median_abs_log"] <= 0.15
    # exit 0 only when the held-out rows meet both bars
    assert r.code == (0 if held["worst_abs_log"] <= 0.5 else 1)
    assert cli("validate", "--kernels", "--points", "x.toml").code == 2


# DeepGEMM's SM90 FP8 GEMM (fp8_gemm.cuh @ 327ec92, the code of the README tables) waits for each block's TMA store
H800 = load_platform("h800-cluster", "sglang-deepep-hopper")


def test_epilogue_store_by_hand():
    from rubinperf.kernels import gemm
    from rubinperf.roofline import epilogue_store

    k = gemm(4096, 32768, 512, weight="fp8", act="fp8")
    assert k.store_bytes == 4096 * 32768 * 2   # the BF16 output, 268 MB
    rate = H800.hbm_bandwidth_bytes_per_s * H800.hbm_stream_efficiency * H800.hbm_interleaved_bandwidth_factor
    assert H800.mma_epilogue_exposed == 1.0
    assert epilogue_store(k, H800) == pytest.approx(4096 * 32768 * 2 / rate)
    hidden = dataclasses.replace(H800, mma_epilogue_exposed=0.0)
    assert epilogue_store(k, hidden) == 0.0
    # the store adds to the MMAs' time, not to the memory term
    with_store, without = kernel_time(k, H800), kernel_time(k, hidden)
    assert with_store.compute_s - without.compute_s == pytest.approx(4096 * 32768 * 2 / rate)
    assert with_store.memory_s == without.memory_s
    # stacks whose epilogue overlaps the next tile's main loop (the default) pay nothing
    assert B200.mma_epilogue_exposed == 0.0


def test_large_output_gemm_row_lands_through_its_store():
    # 4096 x 32768 x 512 on H800: 268 MB of BF16 output stored after every block's 4 K steps
    row = next(r for r in ROWS if r.id == "dgreadme-gemm-4096x32768x512")
    t, _, _ = KE.predict(row)
    assert abs(math.log(row.measured_s / t)) <= 0.15
    t0, _, _ = KE.predict(row, dataclasses.replace(H800, mma_epilogue_exposed=0.0))
    assert abs(math.log(row.measured_s / t0)) > 0.5   # the overlapped store leaves it far short
    recs = [r for r in KE.kernel_records(ROWS) if r["kernel"] == "fp8_gemm"]
    assert len(recs) == 18 and max(r["abs_log"] for r in recs) <= KE.HELD_OUT_WORST_MAX


# ---- DeepGEMM's SM100 FP8 GEMM at decode sizes (the dense projections of the vLLM GB300 stack)

GB300 = load_platform("gb300-nvl72")


def test_sm100_fp8_gemm_pipeline_by_hand():
    from rubinperf.kernels.deepgemm import sm100_fp8_gemm_pipeline

    # swap-AB, block_m 32 in a 2-CTA cluster: a stage holds 16 token rows and 128 weight rows of 128 FP8 values,
    # SF words for 128 + 128 rows (4 B each); besides the stages a 16 x 128 BF16 output tile twice, 32 stages' three
    # barriers, two x two TMEM barriers, one more barrier and the TMEM pointer (sm100.hpp lines 176-216)
    stage = 16 * 128 + 128 * 128 + (128 + 128) * 4
    extra = 16 * 128 * 2 * 2 + 32 * 8 * 3 + 2 * 8 * 2 + 8 + 4
    assert (stage, extra) == (19456, 9004)
    assert sm100_fp8_gemm_pipeline(32) == ((232448 - extra) // stage, 16384) == (11, 16384)
    assert sm100_fp8_gemm_pipeline(16)[0] == (232448 - extra) // (8 * 128 + 128 * 128 + 256 * 4) == 12


def test_decode_gemm_streams_distinct_weight_columns():
    from rubinperf.kernels import gemm

    assert GB300.dense_gemm_library == "deepgemm-sm100" and GB300.mma_tile_rows == 32
    # wq_a at 96 rows (16 requests x 6 tokens): 3 M tiles x 10 weight columns = 30 CTAs in one wave; the 3 CTAs of a
    # column load the same weight stages, so 10 columns x 11 stages x 16 KB are in flight, not 30
    k = gemm(96, 1280, 5120, weight="fp8")
    ctas, _, _ = occupancy(k, GB300)
    assert ctas == 30
    assert bytes_in_flight(k, GB300, ctas) == pytest.approx(10 * 11 * 16384)
    # one row tile: every CTA streams a column of its own
    k1 = gemm(16, 1280, 5120, weight="fp8")
    assert bytes_in_flight(k1, GB300, occupancy(k1, GB300)[0]) == pytest.approx(10 * 11 * 16384)
    # more CTAs than SMs (the LM head): every SM's stages count
    big = gemm(96, 129280, 5120, weight="fp8")
    assert bytes_in_flight(big, GB300, occupancy(big, GB300)[0]) == pytest.approx(160 * 11 * 16384)


def test_distinct_columns_only_where_the_library_was_read():
    from rubinperf.kernels import gemm

    generic = dataclasses.replace(GB300, dense_gemm_library="generic")
    k = gemm(96, 1280, 5120, weight="fp8")
    assert bytes_in_flight(k, generic, 30) == pytest.approx(30 * generic.mma_bytes_in_flight_per_sm)


@pytest.mark.parametrize("rows", [16, 48, 96, 160, 384])
def test_fewer_distinct_bytes_never_faster(rows):
    from rubinperf.kernels import gemm

    generic = dataclasses.replace(GB300, dense_gemm_library="generic", mma_bytes_in_flight_per_sm=11 * 16384)
    for n, kk in ((1280, 5120), (512, 5120), (32768, 1280), (5120, 8192)):
        k = gemm(rows, n, kk, weight="fp8")
        assert kernel_time(k, GB300).expected_s >= kernel_time(k, generic).expected_s - 1e-15
