"""Roofline: Kernel x Hardware -> speed-of-light and expected times, every term by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import HARDWARE_NAMES
from rubinperf.roofline import BOUNDS, KernelTime
from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.kernels import all_reduce, copy, gemm, grouped_gemm, mega_moe
from rubinperf.roofline import kernel_time


# Hand cases run on a pinned GPU (conftest.PINNED_GB300), so that calibrating the bundled spec
# cannot move them: 160 SMs; BF16 2.5e15 and FP8 5e15 FLOP/s, MMA efficiency 0.72; HBM 8e12 B/s
# streamed at 0.88, 0.8 us per dependent load; tiles 32 rows x 128 columns, K stages of 128, no
# split-K; 131,072 B in flight per SM in a GEMM, 65,536 in a streaming kernel; launch 4 us
# alone, 0.5 us in a graph; prologue 1 us, half of the fill hidden by PDL in a graph; collective
# set-up 3 us; NVLink 900e9 B/s at 0.80 with 1.5 us per message and 0.3 us per cross-tray one.
@pytest.fixture
def gb300(pinned_gb300):
    return pinned_gb300


def test_compute_bound_gemm(gb300):
    t = kernel_time(gemm(4096, 4096, 4096, weight="bf16"), gb300)
    # flops 137,438,953,472 / 2.5e15 = 54.9756 us;  bytes 100,663,296 / 8e12 = 12.5829 us
    assert t.sol_compute_s == pytest.approx(54.9755813888e-6, rel=1e-12)
    assert t.sol_memory_s == pytest.approx(12.582912e-6, rel=1e-12)
    assert t.sol_s == pytest.approx(54.9755813888e-6, rel=1e-12)
    # tiles: (4096 / 32) x (4096 / 128) = 128 x 32 = 4096 CTAs (no split-K: more tiles than SMs),
    # in ceil(4096 / 160) = 26 waves, so the SMs are busy 4096 / (26 x 160) = 0.984615 of the time:
    # compute = 54.9756 us / 0.72 / 0.984615 = 77.5480 us
    assert t.compute_s == pytest.approx(54.9755813888e-6 / 0.72 * 4160 / 4096, rel=1e-12)
    assert t.compute_s == pytest.approx(77.54801e-6, rel=1e-6)
    # memory: 100,663,296 / (8e12 x 0.88) = 14.2988 us; in flight 160 x 131,072 B / 0.8 us = 26.2 TB/s: no shortfall
    assert t.memory_s == pytest.approx(14.2987636364e-6, rel=1e-9)
    assert t.parallelism_s == 0
    # latency in a graph: the 0.5 us boundary less the 0.25 us PDL hides, then the fill: (1 load + 1 drain) x 0.8 us
    # + 2000 prologue cycles at 2 GHz (1 us) = 2.85 us
    assert t.latency_s == pytest.approx(2.85e-6, rel=1e-12)
    assert t.comm_s == 0
    assert t.expected_s == pytest.approx(2.85e-6 + 77.54801e-6, rel=1e-6)
    assert t.bound == "compute"
    assert t.fraction_of_roofline == pytest.approx(54.9755813888 / 80.39801, rel=1e-6)
    # behind others in a stream (do_bench): the 2 us stream boundary + the 2.6 us fill, nothing hidden = 4.6 us
    eager = kernel_time(gemm(4096, 4096, 4096, weight="bf16"), gb300, launch="eager")
    assert eager.latency_s == pytest.approx(4.6e-6, rel=1e-12)
    # launched alone after a synchronisation: 4 us launch + 2 us of a tensor-core library call's host set-up + 2.6 us
    alone = kernel_time(gemm(4096, 4096, 4096, weight="bf16"), gb300, launch="cold")
    assert alone.latency_s == pytest.approx(8.6e-6, rel=1e-12)
    assert alone.expected_s - t.expected_s == pytest.approx(5.75e-6, rel=1e-9)
    # issued back to back from the host: the 3 + 2 us host dispatch is far shorter than the kernel: eager's time
    assert kernel_time(gemm(4096, 4096, 4096, weight="bf16"), gb300, launch="stream").expected_s == eager.expected_s


def test_memory_bound_copy(gb300):
    t = kernel_time(copy(1e9), gb300)
    # 2e9 B / 8e12 B/s = 250 us at the speed of light; / 0.88 = 284.0909 us
    assert t.sol_s == pytest.approx(250e-6, rel=1e-12)
    assert t.memory_s == pytest.approx(284.0909090909e-6, rel=1e-9)
    # in flight: 160 SMs x 65,536 B / 0.8 us = 13.1 TB/s, above the 7.04 TB/s streaming rate
    assert t.parallelism_s == 0
    # a streaming kernel has no tensor-core prologue: 0.5 us - 0.25 us hidden + (1 load + 1 drain) x 0.8 us = 1.85 us
    assert t.latency_s == pytest.approx(1.85e-6, rel=1e-12)
    assert t.expected_s == pytest.approx(284.0909090909e-6 + 1.85e-6, rel=1e-9)
    assert t.compute_s == 0 and t.sol_compute_s == 0
    assert t.bound == "memory"
    # launched alone: 4 us + 1.6 us of fill and drain; no tensor-core set-up for a streaming kernel
    assert kernel_time(copy(1e9), gb300, launch="cold").latency_s == pytest.approx(5.6e-6, rel=1e-12)


def test_latency_bound_small_copy(gb300):
    t = kernel_time(copy(1024), gb300)
    # 2048 B / 7.04e12 B/s = 0.29 ns: the 1.85 us of launch, fill and drain dominate
    assert t.memory_s == pytest.approx(2048 / 7.04e12, rel=1e-12)
    assert t.expected_s == pytest.approx(1.85e-6 + 2048 / 7.04e12, rel=1e-12)
    assert t.bound == "latency"
    # issued back to back from the host: the 3 us host dispatch is shorter than the kernel behind others
    # (2 us + 1.6 us + its bytes), so the stream runs at the GPU's pace
    eager = kernel_time(copy(1024), gb300, launch="eager")
    assert eager.expected_s == pytest.approx(3.6e-6 + 2048 / 7.04e12, rel=1e-12)
    assert kernel_time(copy(1024), gb300, launch="stream").expected_s == eager.expected_s
    # a tiny GEMM is a library call: 3 us + 2 us of host set-up outlast its 4.6 us + body on the GPU: the host binds
    tiny = kernel_time(gemm(16, 128, 128, weight="bf16"), gb300, launch="stream")
    assert tiny.expected_s == pytest.approx(5e-6, rel=1e-12) and tiny.bound == "latency"


def test_few_tiles_cannot_stream_the_weights(gb300):
    # a generic GEMM library: every CTA keeps the stack's mma_bytes_in_flight_per_sm in flight (the DeepGEMM library
    # of this stack: tests/kernels/test_deepgemm.py)
    gb300 = dataclasses.replace(gb300, dense_gemm_library="generic")
    # A decode GEMM: 16 rows x [7168 -> 2048] FP8: weights 2048 x 7168 x (1 + 1/4096) = 14,683,648 B,
    # activations 16 x 7168 x (1 + 1/4096) + 16 x 2048 x 2 = 114,716 + 65,536 = 180,252 B.
    g = gemm(16, 2048, 7168, weight="fp8")
    t = kernel_time(g, gb300)
    nbytes = 14_683_648 + 180_252
    assert float(g.cost.hbm_bytes) == pytest.approx(nbytes, rel=1e-12)
    # 1 x 16 tiles and no split-K: 16 CTAs keep 16 x 131,072 B in flight; / 0.8 us = 2.62144e12 B/s
    assert t.memory_s == pytest.approx(nbytes / 7.04e12, rel=1e-12)
    assert t.memory_s + t.parallelism_s == pytest.approx(nbytes / 2.62144e12, rel=1e-12)   # 5.670 us
    assert t.bound == "parallelism"
    # split-K up to 8: min(floor(160 / 16), 8, 7168 / 128) = 8 splits, 128 CTAs, 20.97 TB/s in flight
    split = kernel_time(g, dataclasses.replace(gb300, split_k_max=8))
    assert split.parallelism_s == 0
    assert split.expected_s < t.expected_s
    # more bytes in flight per SM (deeper pipelines) never slows it
    deeper = kernel_time(g, dataclasses.replace(gb300, mma_bytes_in_flight_per_sm=262144.0))
    assert deeper.memory_s + deeper.parallelism_s == pytest.approx(nbytes / 5.24288e12, rel=1e-12)


def test_small_rows_are_padded_to_whole_tiles(gb300):
    # 1 row pads to a 32-row tile: the MMA work is 32x the useful FLOPs; 4 x 16 = 64 tiles on 160 SMs
    t = kernel_time(gemm(1, 2048, 7168, weight="fp8"), gb300)
    useful = 2 * 1 * 2048 * 7168 / 5e15
    assert t.compute_s == pytest.approx(useful * 32 / 0.72 / (16 / 160), rel=1e-12)
    # 33 rows: 2 row tiles of 32, padding 64 / 33
    t33 = kernel_time(gemm(33, 2048, 7168, weight="fp8"), gb300)
    assert t33.compute_s == pytest.approx(33 * useful * (64 / 33) / 0.72 / (32 / 160), rel=1e-12)


def test_last_wave_tail(gb300):
    # 32 x 161 rows -> 161 row tiles x 1 column tile = 161 CTAs on 160 SMs: 2 waves, half empty
    t = kernel_time(gemm(32 * 161, 128, 4096, weight="bf16"), gb300)
    useful = 2 * 32 * 161 * 128 * 4096 / 2.5e15
    assert t.compute_s == pytest.approx(useful / 0.72 * 320 / 161, rel=1e-12)


def test_comm_bound_all_reduce(gb300):
    t = kernel_time(all_reduce(1_000_000, 8, gpus_per_tray=4), gb300)
    # 1.75e6 B sent; SOL 1.75e6 / 900e9 = 1.9444 us
    assert t.sol_comm_s == pytest.approx(1.75e6 / 900e9, rel=1e-12)
    assert t.sol_s == pytest.approx(1.944444444e-6, rel=1e-9)
    # expected: 1.75e6 / 720e9 = 2.4306 us + 2 rounds * (1.5 + 0.3) us = 6.0306 us; + 3 us collective set-up
    assert t.comm_s == pytest.approx(2.430555556e-6 + 3.6e-6, rel=1e-9)
    assert t.latency_s == pytest.approx(3e-6)
    assert t.expected_s == pytest.approx(9.030555556e-6, rel=1e-9)
    assert t.bound == "comm"


def test_fused_kernel_hides_a_share_of_its_smaller_terms(gb300):
    # MegaMoE on one of 32 ranks: 96 tokens x top-6 = 576 rows; rho = 576 / (576 + 16384) = 0.033962. Its GEMMs are one
    # pipeline (compute and memory: their max); the exchange adds but for the share rho of the smaller part
    k = mega_moe(96, 32, 12, 384, 6, 6912, 5120, gpus_per_tray=4)
    t = kernel_time(k, gb300, die_local_weights=True)
    gemm, comm = max(t.compute_s, t.memory_s + t.parallelism_s), t.comm_s
    rho = 576 / (576 + 16384)
    body = max(gemm, comm) + (1 - rho) * min(gemm, comm)
    assert t.expected_s == pytest.approx(t.latency_s + body, rel=1e-12)
    # at decode sizes the GEMMs and the exchange nearly add; a plain kernel would take only the largest
    assert t.expected_s - t.latency_s > 0.95 * (gemm + comm)


def test_a_grouped_gemm_runs_at_its_mma_precisions_rate(gb300):
    # 5120 rows over 8 experts (all touched): 640 rows each = 20 row tiles of 32, x 8192 / 128 = 64 column tiles,
    # 8 x 20 x 64 = 10,240 CTAs = 64 whole waves of 160 SMs: no padding, no idle SM; 2 x 5120 x 8192 x 8192 FLOPs
    hw = dataclasses.replace(gb300, fp4_dense_flops_per_s=15e15, mma_compute_efficiency=0.6,
                             grouped_compute_efficiency=0.5,
                             grouped_fp4_compute_efficiency=0.3, grouped_w4a16_compute_efficiency=0.2)
    flops = 2 * 5120 * 8192 * 8192

    def compute(weight, act):
        return kernel_time(grouped_gemm(5120, 8, 8192, 8192, weight=weight, act=act, touched=8), hw).compute_s

    # W4A4 (NVFP4 x NVFP4, FP4 MMA): 687.2e9 / (15e15 x 0.3) = 152.7 us
    assert compute("nvfp4", "nvfp4") == pytest.approx(flops / (15e15 * 0.3), rel=1e-12)
    # W4A16 (MXFP4 experts dequantised to BF16, BF16 MMA): 687.2e9 / (2.5e15 x 0.2) = 1.374 ms
    assert compute("fp4", "bf16") == pytest.approx(flops / (2.5e15 * 0.2), rel=1e-12)
    # BF16 experts (nothing to dequantise) run at the GEMM rate: 687.2e9 / (2.5e15 x 0.6)
    assert compute("bf16", "bf16") == pytest.approx(flops / (2.5e15 * hw.mma_compute_efficiency), rel=1e-12)
    # only the narrower weights of a pair with no mixed-operand MMA are dequantised in the main loop
    assert [grouped_gemm(64, 8, 256, 256, weight=w, act=a).dequantises_weights
            for w, a in (("fp4", "bf16"), ("fp8", "bf16"), ("fp4", "fp8"), ("nvfp4", "nvfp4"), ("bf16", "bf16"))] \
        == [True, True, False, False, False]
    # FP8 and W4A8 (MXFP4 x MXFP8, the FP8 x FP4 peak 5e15) keep the grouped rate
    assert compute("fp8", "fp8") == pytest.approx(flops / (5e15 * 0.5), rel=1e-12)
    assert compute("fp4", "fp8") == pytest.approx(flops / (5e15 * 0.5), rel=1e-12)


def test_mixed_peaks_add_their_times(gb300):
    cost = Cost.of_flops("fp8", 5e12) + Cost.of_flops("bf16", 2.5e12)
    t = kernel_time(Kernel("attention", cost), gb300)
    # 5e12 / 5e15 + 2.5e12 / 2.5e15 = 1 ms + 1 ms, at the attention efficiency 0.6
    assert t.sol_compute_s == pytest.approx(2e-3)
    assert t.compute_s == pytest.approx(2e-3 / 0.6)
    assert t.latency_s == 0  # no launch in a bare Cost


def test_host_and_scale_out_terms(gb300):
    t = kernel_time(Kernel("lookup", Cost(host_bytes=1e9)), gb300)
    # host rate = min(256e9 LPDDR5X, 450e9 C2C) = 256e9 B/s
    assert t.sol_memory_s == pytest.approx(1e9 / 256e9)             # 3.90625 ms
    assert t.memory_s == pytest.approx(1e9 / (256e9 * 0.80))        # 4.8828 ms
    t = kernel_time(Kernel("collective", Cost(scale_out_bytes=1e9, scale_out_hops=1)), gb300)
    assert t.sol_comm_s == pytest.approx(1e9 / 100e9)               # 10 ms
    assert t.comm_s == pytest.approx(1e9 / 85e9 + 5e-6)
    assert t.bound == "comm"


def test_vr_die_local_weights(hardware_by_name):
    vr = dataclasses.replace(hardware_by_name["vr-nvl72"], hbm_bandwidth_bytes_per_s=22e12, hbm_stream_efficiency=0.88,
                             hbm_local_bandwidth_factor=1.0, hbm_interleaved_bandwidth_factor=0.75)
    c = gemm(16, 7168, 2048, weight="fp8")   # weights 14,683,648 B, activations 262,152 B
    hbm = 22e12 * 0.88
    inter = kernel_time(c, vr)
    local = kernel_time(c, vr, die_local_weights=True)
    assert inter.memory_s == pytest.approx((14_683_648 + 262_152) / (hbm * 0.75), rel=1e-9)
    assert local.memory_s == pytest.approx(14_683_648 / hbm + 262_152 / (hbm * 0.75), rel=1e-9)
    # the speed of light ignores die placement
    assert inter.sol_s == local.sol_s == pytest.approx(14_945_800 / 22e12, rel=1e-9)


@pytest.mark.parametrize("name", HARDWARE_NAMES)
def test_every_bundled_hardware_bounds_the_speed_of_light(name, hardware_by_name):
    hw = hardware_by_name[name]
    for m in (1, 16, 256, 4096):
        for launch in ("graph", "eager"):
            t = kernel_time(gemm(m, 7168, 2048, weight="fp8"), hw, launch=launch)
            sol = max(2 * m * 7168 * 2048 / hw.fp8_dense_flops_per_s, t.sol_memory_s)
            assert t.sol_s == pytest.approx(sol, rel=1e-12)
            assert t.expected_s >= t.sol_s
            assert t.bound in BOUNDS


def test_roofline_vectorises_over_numpy(gb300):
    m = np.array([1, 16, 256, 4096])
    t = kernel_time(gemm(m, 7168, 2048, weight="fp8"), gb300)
    for i, mi in enumerate(m):
        ti = kernel_time(gemm(int(mi), 7168, 2048, weight="fp8"), gb300)
        assert t.expected_s[i] == pytest.approx(ti.expected_s)
        assert t.sol_s[i] == pytest.approx(ti.sol_s)


def test_kernel_time_add_and_scale(gb300):
    a = kernel_time(copy(1e6), gb300)
    b = kernel_time(gemm(64, 64, 64), gb300)
    s = a + b
    for f in dataclasses.fields(KernelTime):
        assert getattr(s, f.name) == pytest.approx(getattr(a, f.name) + getattr(b, f.name))
        assert getattr(3 * a, f.name) == pytest.approx(3 * getattr(a, f.name))


def test_unknown_launch_mode(gb300):
    with pytest.raises(ValueError, match="launch"):
        kernel_time(copy(1e6), gb300, launch="async")


def test_streaming_kernel_with_few_ctas_is_capped_per_sm(gb300):
    # a probe of 8 CTAs, each keeping 256 KB of ordinary loads in flight: capped at 65,536 B per SM,
    # 8 x 65,536 B / 0.8 us = 655 GB/s; reading 1e9 B takes 1.526 ms instead of 0.142 ms at 7.04 TB/s
    k = Kernel("stream", Cost(activation_bytes=1e9, launches=1), ctas=8, in_flight_bytes_per_cta=262144)
    t = kernel_time(k, gb300)
    assert t.memory_s == pytest.approx(1e9 / 7.04e12, rel=1e-12)
    assert t.memory_s + t.parallelism_s == pytest.approx(1e9 / (8 * 65536 / 0.8e-6), rel=1e-12)
    # 4 KB per CTA: below the cap, each CTA keeps its own
    small = kernel_time(dataclasses.replace(k, in_flight_bytes_per_cta=4096), gb300)
    assert small.memory_s + small.parallelism_s == pytest.approx(1e9 / (8 * 4096 / 0.8e-6), rel=1e-12)
    # 1024 such CTAs (6.4 per SM) saturate: no more than 160 x 65,536 B in flight, 13.1 TB/s > 7.04
    many = kernel_time(dataclasses.replace(k, ctas=1024), gb300)
    assert many.parallelism_s == 0


def test_causal_tiles_the_longest_sets_the_time(gb300):
    from rubinperf.kernels import attention

    # One head, 1024 causal queries over 1024 keys, head dim 128: 8 CTAs of 128 queries on 160 SMs (one wave).
    # The last CTA's 128 queries compute all 1024 keys (its diagonal key block in full): 2 x 128 x 1024 x 256 =
    # 67,108,864 FLOPs on one SM, whose share of the BF16 rate at 0.6 is 2.5e15 x 0.6 / 160 = 9.375e12 FLOP/s.
    t = kernel_time(attention(1, 1, 1024, 1024, 128, causal=True), gb300)
    assert t.compute_s == pytest.approx(2 * 128 * 1024 * 256 / (2.5e15 * 0.6 / 160), rel=1e-12)
    # 64 heads: 512 CTAs, more than the SMs: the evenly spread work (each query computes 512.5 + 63.5 = 576 keys),
    # plus the longest CTA once more (the pinned stack's wave_quantization is 1): (1 + 160 c) x, with
    # c = 128 x 1024 / (64 x 1024 x 576)
    wide = kernel_time(attention(1, 64, 1024, 1024, 128, causal=True), gb300)
    c = 128 * 1024 / (64 * 1024 * 576)
    assert wide.compute_s == pytest.approx(2 * 64 * 1024 * 576 * 256 / (2.5e15 * 0.6) * (1 + 160 * c), rel=1e-12)
    # not causal: CTAs are equal and the kernel fills the GPU as before (no tail)
    flat = kernel_time(attention(1, 64, 1024, 1024, 128), gb300)
    assert flat.compute_s == pytest.approx(2 * 64 * 1024 * 1024 * 256 / (2.5e15 * 0.6), rel=1e-12)


def test_attention_tile_overhead_by_hand(gb300):
    import dataclasses

    from rubinperf.kernels import attention

    # 64 heads x 1024 causal queries: 512 query tiles (CTAs); 10,000 cycles each, spread over 160 SMs at the
    # hardware's SM clock, add 512 x 10,000 / (clock x 160) to the compute term; a stack without it (0) adds none,
    # and non-causal kernels (no tiles of unequal work) never pay it
    kern = attention(1, 64, 1024, 1024, 128, causal=True)
    with_tiles = dataclasses.replace(gb300, attention_tile_overhead_cycles=10_000.0)
    base = kernel_time(kern, gb300).compute_s
    assert kernel_time(kern, with_tiles).compute_s == pytest.approx(
        base + 512 * 10_000 / (gb300.sm_clock_hz * 160), rel=1e-12)
    flat = attention(1, 64, 1024, 1024, 128)
    assert kernel_time(flat, with_tiles).compute_s == kernel_time(flat, gb300).compute_s


def test_split_kv_decode_pays_a_reduction_kernel_only_when_it_splits(gb300):
    from rubinperf.kernels import attention
    from rubinperf.roofline import split_kv_reduction

    # One query per sequence, 32 heads over 8 KV heads: one CTA per (sequence, KV head) before any split.
    alone = attention(1, 32, 1, 1024, 128, kv_heads=8)
    assert alone.split_kv_groups == 8
    t = kernel_time(alone, gb300)
    # 8 groups on 160 SMs: the KV is split and a reduction kernel follows it in the stream. In a graph:
    # the kernel 0.5 - 0.25 us + (1 load + 1 drain) x 0.8 us + 1 us prologue = 2.85 us; the reduction
    # 0.5 - 0.25 us + (2 loads + 1 drain) x 0.8 us = 2.65 us
    assert split_kv_reduction(alone, gb300) == 1
    assert t.latency_s == pytest.approx(2.85e-6 + 2.65e-6, rel=1e-12)
    # 64 sequences x 8 KV heads = 512 groups fill the 160 SMs: no split, no reduction
    full = attention(64, 32, 1, 1024, 128, kv_heads=8)
    assert split_kv_reduction(full, gb300) == 0
    assert kernel_time(full, gb300).latency_s == pytest.approx(2.85e-6, rel=1e-12)
    # launched alone, the reduction is still enqueued by the library: a stream boundary (2 us), not a host launch
    assert kernel_time(alone, gb300, launch="cold").latency_s == pytest.approx((4 + 2 + 2.6) * 1e-6 + (2 + 2.4) * 1e-6,
                                                                               rel=1e-12)
