"""Tier 1: hand-derived FLOPs and bytes for each kernel family.

Every expected number below is worked out by hand in a comment; the test never
re-calls the formula it is checking.
"""

from __future__ import annotations


import pytest

from conftest import BF16_B, FP4_B, FP8_B, FP32_B
from rubinperf import kernels as K
from rubinperf.kernels.cost import Cost
from rubinperf.kernels import experts_touched
from rubinperf.specs.precision import PRECISIONS, get_precision, mma_peak
from rubinperf.errors import SpecError

# These tests check the Cost each kernel function gives (what the kernel does); how its work
# spreads over SMs (tiles, CTAs) is tested in tests/roofline/test_roofline.py.
def gemm(*a, **kw) -> Cost:
    return K.gemm(*a, **kw).cost


def grouped_gemm(*a, **kw) -> Cost:
    return K.grouped_gemm(*a, **kw).cost


def attention(*a, **kw) -> Cost:
    return K.attention(*a, **kw).cost


def copy(*a, **kw) -> Cost:
    return K.copy(*a, **kw).cost


def all_reduce(*a, **kw) -> Cost:
    return K.all_reduce(*a, **kw).cost


def all_to_all(*a, **kw) -> Cost:
    return K.all_to_all(*a, **kw).cost


def all_gather(*a, **kw) -> Cost:
    return K.all_gather(*a, **kw).cost


PEAK_FIELDS = ("fp4_flops", "fp8_flops", "fp8_fp4_flops", "bf16_flops", "fp32_flops")


def only_peak(cost: Cost, peak: str) -> float:
    """The FLOPs of `cost`, checking they all sit on one MMA peak."""
    for f in PEAK_FIELDS:
        if f != f"{peak}_flops":
            assert getattr(cost, f) == 0, f"unexpected {f} = {getattr(cost, f)}"
    return getattr(cost, f"{peak}_flops")


# ------------------------------------------------------------------ precision


def test_bytes_per_element():
    # fp4: 4 bits = 0.5 B, plus a 1-byte scale shared by 32 values = 1/32 B -> 0.53125
    assert PRECISIONS["fp4"].bytes_per_element == 0.53125 == FP4_B
    # fp8: 1 B, plus a 4-byte FP32 scale per 128 x 128 = 16384 values -> 1.000244140625
    assert PRECISIONS["fp8"].bytes_per_element == 1.000244140625 == FP8_B
    assert PRECISIONS["bf16"].bytes_per_element == 2.0 == BF16_B
    assert PRECISIONS["fp32"].bytes_per_element == 4.0 == FP32_B


def test_precision_peaks_and_unknown_dtype():
    assert mma_peak("fp8", "fp8") == "fp8"
    assert mma_peak("fp8", "fp4") == mma_peak("fp4", "fp8") == "fp8_fp4"
    assert mma_peak("bf16", "fp8") == "bf16"      # no mixed rate: the wider operand's peak
    assert mma_peak("fp32", "bf16") == "fp32"
    assert get_precision("fp4").name == "fp4"
    with pytest.raises(SpecError, match="fp6"):
        get_precision("fp6")


# ------------------------------------------------------------------ gemm


def test_gemm_decode_fp8():
    c = gemm(16, 7168, 2048, weight="fp8", act="fp8", out="bf16")
    # FLOPs 2mnk = 2 * 16 * 7168 * 2048 = 2 * 114688 * 2048 = 469,762,048 on the FP8 peak
    assert only_peak(c, "fp8") == 469_762_048
    # weights n*k = 14,680,064 values * (1 + 1/4096) = 14,680,064 + 3,584 = 14,683,648 B
    assert c.weight_bytes == pytest.approx(14_683_648, rel=1e-12)
    # activations in: m*k = 32,768 values * (1 + 1/4096) = 32,776 B; out bf16: 16*7168*2 = 229,376 B
    assert c.activation_bytes == pytest.approx(32_776 + 229_376, rel=1e-12)  # 262,152
    assert c.bytes == pytest.approx(14_945_800, rel=1e-12)
    assert c.kv_bytes == c.table_bytes == c.host_bytes == c.nvlink_bytes == 0
    assert c.launches == 1


def test_gemm_square_bf16():
    c = gemm(4096, 4096, 4096, weight="bf16")
    # 2 * 4096^3 = 2 * 68,719,476,736 = 137,438,953,472
    assert only_peak(c, "bf16") == 137_438_953_472
    # weights 4096*4096*2 = 33,554,432 B
    assert c.weight_bytes == 33_554_432
    # in 4096*4096*2 + out 4096*4096*2 = 67,108,864 B
    assert c.activation_bytes == 67_108_864


def test_gemm_fp4_weights_fp8_activations():
    c = gemm(128, 4608, 5120, weight="fp4", act="fp8", out="bf16")
    # 2 * 128 * 4608 * 5120 = 2 * 589,824 * 5120 = 6,039,797,760 on the mixed FP8 x FP4 peak
    assert only_peak(c, "fp8_fp4") == 6_039_797_760
    # weights 4608*5120 = 23,592,960 values * (1/2 + 1/32) = 11,796,480 + 737,280 = 12,533,760 B
    assert c.weight_bytes == pytest.approx(12_533_760, rel=1e-12)
    # in 128*5120 = 655,360 * (1 + 1/4096) = 655,520 B; out 128*4608*2 = 1,179,648 B
    assert c.activation_bytes == pytest.approx(655_520 + 1_179_648, rel=1e-12)


def test_gemm_tiny_fp32():
    c = gemm(2, 3, 5, weight="fp32", act="fp32", out="fp32")
    assert only_peak(c, "fp32") == 60          # 2*2*3*5
    assert c.weight_bytes == 60                # 3*5*4
    assert c.activation_bytes == 64            # 2*5*4 + 2*3*4 = 40 + 24


def test_gemm_mixed_bf16_act_uses_bf16_peak():
    c = gemm(1, 1, 1, weight="fp8", act="bf16")
    assert only_peak(c, "bf16") == 2


# ------------------------------------------------------------------ grouped gemm


def test_experts_touched_exact_small_cases():
    # one draw touches exactly one group
    assert experts_touched(1, 8) == pytest.approx(1.0, rel=1e-12)
    # G = 2, two rows: 2 * (1 - (1/2)^2) = 2 * 3/4 = 1.5
    assert experts_touched(2, 2) == pytest.approx(1.5, rel=1e-12)
    # G = 4, two rows: 4 * (1 - (3/4)^2) = 4 * 7/16 = 1.75
    assert experts_touched(2, 4) == pytest.approx(1.75, rel=1e-12)
    # a single group is always the one touched
    assert experts_touched(1000, 1) == pytest.approx(1.0)
    # no rows, no groups touched
    assert experts_touched(0, 16) == 0


def test_grouped_gemm_decode_batch_fp8():
    # 128 tokens x top-6 = 768 rows over 256 experts of [7168, 4096]:
    # (255/256)^768 = exp(768 * ln(1 - 1/256)) = exp(-3.0058747) = 0.0494954
    # touched = 256 * (1 - 0.0494954) = 243.329
    c = grouped_gemm(768, 256, 4096, 7168, weight="fp8", act="fp8", out="bf16")
    touched = 243.3291666475
    assert only_peak(c, "fp8") == 2 * 768 * 4096 * 7168  # = 45,097,156,608
    assert only_peak(c, "fp8") == 45_097_156_608
    # weight bytes = touched * n * k * (1 + 1/4096) = 243.329 * 29,360,128 * 1.000244 = 7.1459e9 (243.329 * 29.36e6 = 7.1442e9, * 1.000244)
    assert c.weight_bytes == pytest.approx(touched * 29_360_128 * 1.000244140625, rel=1e-9)
    assert c.weight_bytes == pytest.approx(7.14592e9, rel=1e-5)
    # in 768*7168 values fp8 = 5,505,024 + 1,344 = 5,506,368 B; out 768*4096*2 = 6,291,456 B
    assert c.activation_bytes == pytest.approx(5_506_368 + 6_291_456, rel=1e-12)


def test_grouped_gemm_one_row_reads_one_expert_fp4():
    c = grouped_gemm(1, 384, 4608, 5120, weight="fp4", act="fp8")
    # one row -> one expert: 4608*5120 values * 0.53125 = 12,533,760 B, the same as one dense GEMM
    assert c.weight_bytes == pytest.approx(12_533_760, rel=1e-12)
    assert only_peak(c, "fp8_fp4") == 2 * 4608 * 5120  # 47,185,920


def test_grouped_gemm_many_rows_read_every_expert():
    # 100,000 rows over 8 groups: (7/8)^100000 underflows to 0, every expert is read
    c = grouped_gemm(100_000, 8, 64, 32, weight="bf16")
    assert c.weight_bytes == pytest.approx(8 * 64 * 32 * 2, rel=1e-12)  # 32,768 B


def test_grouped_gemm_touched_override():
    c = grouped_gemm(10, 256, 100, 10, weight="bf16", touched=3)
    assert c.weight_bytes == 3 * 100 * 10 * 2  # 6,000 B


# ------------------------------------------------------------------ attention


def test_attention_gqa_decode_bf16():
    # batch 8, 64 query heads sharing 8 KV heads, one query token, 32,768 cached tokens, d = 128
    c = attention(8, 64, 1, 32768, 128, dtype="bf16", kv_heads=8)
    # attended = kv_len = 32,768 (decode: no mask)
    # FLOPs = 2 * 8 * 64 * 1 * 32768 * (128 + 128) = 2 * 512 * 32768 * 256 = 8,589,934,592
    assert only_peak(c, "bf16") == 8_589_934_592
    # KV = batch * kv_heads * kv_len * (dk + dv) * 2 = 8 * 8 * 32768 * 256 * 2 = 1,073,741,824 B
    assert c.kv_bytes == 1_073_741_824
    # Q in + O out = 8 * 1 * 64 * (128 + 128) * 2 = 262,144 B
    assert c.activation_bytes == 262_144


def test_attention_gqa_reduces_kv_bytes_only():
    mha = attention(8, 64, 1, 32768, 128, dtype="bf16")
    gqa = attention(8, 64, 1, 32768, 128, dtype="bf16", kv_heads=8)
    mqa = attention(8, 64, 1, 32768, 128, dtype="bf16", kv_heads=1)
    assert mha.kv_bytes == 8 * gqa.kv_bytes == 64 * mqa.kv_bytes  # 8,589,934,592 B for MHA
    assert mha.kv_bytes == 8_589_934_592
    assert mha.flops == gqa.flops == mqa.flops
    assert mha.activation_bytes == gqa.activation_bytes


def test_attention_causal_prefill_square():
    # one sequence, 16 heads, q = kv = 4096, d = 128, causal
    c = attention(1, 16, 4096, 4096, 128, dtype="bf16", causal=True)
    # query i (1-based) attends i keys: mean = (4096 + 1) / 2 = 2048.5
    # FLOPs = 2 * 1 * 16 * 4096 * 2048.5 * 256 = 68,736,253,952
    assert only_peak(c, "bf16") == pytest.approx(68_736_253_952, rel=1e-12)
    # K/V read once: 16 * 4096 * 256 * 2 = 33,554,432 B; Q + O the same size
    assert c.kv_bytes == 33_554_432
    assert c.activation_bytes == 33_554_432


def test_causal_key_blocks_computed_in_full():
    from rubinperf.kernels.attention import computed_per_query

    # 512 queries over 512 keys in 4 tiles of 128: tiles compute 128, 256, 384, 512 keys per query (mean 320);
    # they attend (512 + 1) / 2 = 256.5: the kernel's compute is padded by 320 / 256.5 = 1.248 (its FLOPs stay the
    # useful ones)
    assert computed_per_query(512, 512) == 320
    k = K.attention(1, 1, 512, 512, 64, causal=True)
    assert k.cost.flops == 2 * 512 * 256.5 * 128
    assert k.work_padding == pytest.approx(320 / 256.5, rel=1e-12)
    # 4096 x 4096: 2048.5 + 127 / 2 = 2112 computed (tile j computes 128 (j + 1) keys: mean 128 x 33 / 2)
    assert computed_per_query(4096, 4096) == 2112
    # a chunk of 256 behind 1024 cached keys: tiles compute 1152 and 1280 keys (mean 1216 = 1024 + 128.5 + 63.5)
    assert computed_per_query(256, 1280) == 1216
    # never past the last key block: one query over 100 keys computes one block of 128
    assert computed_per_query(1, 100) == 128
    # not causal: no padding
    assert K.attention(1, 1, 512, 512, 64).work_padding is None


def test_attention_causal_chunk_and_decode():
    # 2 new queries at the end of 5 positions attend 4 and 5 keys: mean 4.5
    c = attention(1, 1, 2, 5, 1, dtype="bf16", causal=True)
    assert c.flops == pytest.approx(2 * 1 * 1 * 2 * 4.5 * 2)  # = 36
    # causal decode (q = 1) attends every cached key, like non-causal
    assert attention(3, 4, 1, 100, 64, causal=True).flops == attention(3, 4, 1, 100, 64).flops
    assert attention(3, 4, 1, 100, 64).flops == 2 * 3 * 4 * 1 * 100 * 128  # 307,200


def test_attention_non_causal_prefill_attends_all():
    c = attention(2, 4, 10, 10, 8, dtype="bf16")
    assert c.flops == 2 * 2 * 4 * 10 * 10 * 16  # 25,600: every query sees all 10 keys


def test_attention_fp8_bytes_and_peak():
    c = attention(1, 8, 1, 1024, 128, dtype="fp8", kv_heads=1)
    assert only_peak(c, "fp8") == 2 * 8 * 1024 * 256  # 4,194,304
    # KV: 1 head * 1024 * 256 values * (1 + 1/4096) = 262,144 + 64 = 262,208 B
    assert c.kv_bytes == pytest.approx(262_208, rel=1e-12)
    # Q + O: 8 * 256 values * (1 + 1/4096) = 2,048 + 0.5 = 2,048.5 B
    assert c.activation_bytes == pytest.approx(2_048.5, rel=1e-12)


def test_attention_shared_latent_kv():
    # absorbed MLA decode: qk 576, v 512 over one shared latent read once (K = V)
    c = attention(1, 128, 1, 1000, 576, v_head_dim=512, kv_heads=1, shared_kv=True, dtype="bf16")
    assert c.flops == 2 * 128 * 1000 * (576 + 512)  # 278,528,000
    assert c.kv_bytes == 1000 * 576 * 2               # 1,152,000 B: the latent once
    packed = attention(1, 128, 1, 1000, 576, v_head_dim=512, kv_heads=1, kv_entry_bytes=656)
    assert packed.kv_bytes == 656_000


# ------------------------------------------------------------------ memory and collectives


def test_copy_moves_twice_the_bytes():
    c = copy(1e9)
    assert c.activation_bytes == 2e9 and c.bytes == 2e9
    assert c.flops == 0 and c.launches == 1


def test_all_reduce_bytes_and_hops():
    # ring reduce-scatter + all-gather: 2 * (8 - 1) / 8 * 1 MB = 1.75 MB sent per rank, 2 rounds
    c = all_reduce(1_000_000, 8)
    assert c.nvlink_bytes == pytest.approx(1_750_000)
    assert c.nvlink_hops == 2 and c.collectives == 1 and c.cross_tray_hops == 0
    assert c.hbm_bytes == 0 and c.flops == 0
    # 8 ranks over 4-GPU trays: both rounds cross a tray
    assert all_reduce(1_000_000, 8, gpus_per_tray=4).cross_tray_hops == 2
    assert all_reduce(1_000_000, 4, gpus_per_tray=4).cross_tray_hops == 0
    assert all_reduce(1_000_000, 1).nvlink_bytes == 0  # one rank sends nothing


def test_all_to_all_bytes():
    # EP32 dispatch of 128 tokens x 7168 hidden x top-8 in FP8 = 7,340,032 B per rank; 31/32 leave the rank
    c = all_to_all(7_340_032, 32)
    assert c.nvlink_bytes == pytest.approx(7_110_656)   # 7,340,032 * 31 / 32
    assert c.nvlink_hops == 1 and c.collectives == 1
    assert all_to_all(7_340_032, 32, gpus_per_tray=4).cross_tray_hops == 1


def test_all_gather_bytes():
    c = all_gather(8e6, 4)
    assert c.nvlink_bytes == pytest.approx(6e6)   # 8 MB * 3/4
    assert c.nvlink_hops == 1


def test_decode_attention_ctas_top_k_gather_vs_dense_split_kv():
    from rubinperf.kernels.attention import sparse_attention
    # MegaAttn gathering each query's top-512: one CTA per 2 tokens (12 tokens -> 6 CTAs).
    sparse = sparse_attention(12, 2, 6, 131072, 64, 2, 512, 128, 288, 512, 512, prefill=False)
    assert sparse.ctas == 6
    # A dense pass over the whole cache (MLA, no top-k) splits the KV over CTAs: it fills the GPU.
    dense = sparse_attention(12, 2, 6, 131072, 128, 1, None, 0, 656, 576, 512, prefill=False)
    assert dense.ctas is None


def test_one_shot_all_reduce_in_the_gemm_epilogue():
    from rubinperf.kernels.collectives import all_reduce, all_reduce_one_shot
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.stack import load_platform

    vr = load_platform("vr-nvl72")
    nbytes = 6 * 4096 * 2                       # 6 tokens x 4096 hidden x BF16
    fused = all_reduce_one_shot(nbytes, 8, gpus_per_tray=4)
    c = fused.cost
    # each rank receives the 7 others' partials; one round across trays; no launch, no collective set-up
    assert (c.nvlink_bytes, c.nvlink_hops, c.cross_tray_hops, c.collectives, c.launches) == (7 * nbytes, 1, 1, 0, 0)
    t = kernel_time(fused, vr)
    want = 7 * nbytes / (vr.nvlink_bandwidth_bytes_per_s * vr.nvlink_efficiency) + vr.nvlink_latency_s + vr.cross_tray_latency_s
    assert t.expected_s == pytest.approx(want, rel=1e-12)
    # the collective kernel pays two rounds and the stack's set-up: always slower at decode sizes
    assert kernel_time(all_reduce(nbytes, 8, gpus_per_tray=4), vr).expected_s > t.expected_s + vr.collective_floor_s


def test_indexer_epilogue_by_hand():
    # 4,096 queries of one sequence over 131,072 cached entries (decode-style visibility: context + queries),
    # 32 heads x 128 dims in FP4: 2 x 4096 x 32 x 128 x 135,168 MMA FLOPs; the epilogue takes 3 FP32 operations
    # per (query, entry, head): 3 x 4096 x 32 x 135,168.
    from rubinperf.kernels.attention import indexer_logits
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform

    entries = 131072 + 4096
    plain = indexer_logits(4096, 1, 4096, 131072, 32, 128, 1, 68, "fp4", False)
    full = indexer_logits(4096, 1, 4096, 131072, 32, 128, 1, 68, "fp4", False, epilogue_flops_per_head=3.0)
    assert plain.cost.fp32_flops == 0 and full.cost.fp32_flops == pytest.approx(3 * 4096 * 32 * entries)
    assert full.cost.fp4_flops == plain.cost.fp4_flops == pytest.approx(2 * 4096 * 32 * 128 * entries)
    # FP32 runs on CUDA cores at the vector efficiency, after the MMA (one kernel's compute terms add): on GB300
    # 3 x 32 / (80 TF x 0.80) = 1.5 ps per query-entry pair against 8,192 / (15 PF x 0.6) = 0.91 ps of MMA
    gb = load_platform("gb300-nvl72")
    extra = kernel_time(full, gb).compute_s - kernel_time(plain, gb).compute_s
    pairs = 4096 * entries
    assert extra == pytest.approx(pairs * 96 / (gb.fp32_dense_flops_per_s * gb.vector_compute_efficiency), rel=1e-9)
    mma = pairs * 8192 / (gb.fp4_dense_flops_per_s * gb.attention_compute_efficiency)
    assert kernel_time(plain, gb).compute_s == pytest.approx(mma, rel=1e-9) and extra > 1.5 * mma
    # the bundled models: V4 and V4.1 take the epilogue, V3 has no indexer
    assert [load_model(n).indexer_epilogue_flops_per_head for n in ("deepseek-v4.1-flash", "deepseek-v4-flash",
                                                                      "deepseek-v3")] == [3.0, 3.0, 0.0]


def test_each_launch_of_a_split_kv_kernel_pays_its_reduction():
    # A split-KV decode kernel with one (sequence, head) group splits and reduces after every launch: two
    # launches back to back (cost x 2) pay the reduction twice, so every term doubles (a random draw of
    # tests/kernels/test_properties.py found it paid once).
    import dataclasses

    from rubinperf.kernels.cost import Cost, Kernel
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.stack import load_platform

    h200 = load_platform("h200")
    one = Kernel("attention", Cost(fp4_flops=256.0, kv_bytes=1e6, launches=1), split_kv_groups=1.0)
    two = dataclasses.replace(one, cost=one.cost * 2)
    t1, t2 = kernel_time(one, h200), kernel_time(two, h200)
    assert t2.latency_s == pytest.approx(2 * t1.latency_s, rel=1e-12)
    assert t2.expected_s == pytest.approx(2 * t1.expected_s, rel=1e-12)


def test_ep_exchange_phases_add_up_to_the_dispatch_and_combine():
    from rubinperf.kernels import ep_dispatch_combine, ep_exchange

    both = ep_dispatch_combine(64, 4, 6, 4096, 1, 2)
    dispatch, combine = ep_exchange(64, 4, 6, 4096, 1), ep_exchange(64, 4, 6, 4096, 2)
    # a token's 6 experts over 4 ranks reach 4(1 - (3/4)^6) ranks, 3/4 of them remote: 64 x 4096 values per copy
    copies = 4 * (1 - 0.75 ** 6) * 3 / 4
    assert float(dispatch.cost.nvlink_bytes) == pytest.approx(64 * 4096 * 1 * copies)
    assert float(dispatch.cost.nvlink_bytes + combine.cost.nvlink_bytes) == pytest.approx(float(both.nvlink_bytes))
    assert dispatch.cost.nvlink_hops + combine.cost.nvlink_hops == both.nvlink_hops
    assert dispatch.cost.collectives == combine.cost.collectives == 1


def test_sparse_decode_gather_keeps_its_kernels_entries_in_flight():
    from rubinperf.kernels.attention import sparse_attention
    from rubinperf.roofline import bytes_in_flight, kernel_time
    from rubinperf.specs.stack import load_platform

    # 2 decode tokens -> one CTA (two tokens per CTA); FlashMLA's 64 entries per stage x 2 stages in flight.
    kern = sparse_attention(2, 2, 1, 131072, 64, 2, 512, 128, 288, 512, 512, prefill=False)
    assert kern.in_flight_bytes_per_cta == 128 * 288 == 36864
    vr, gb = load_platform("vr-nvl72"), load_platform("gb300-nvl72")
    assert bytes_in_flight(kern, vr, kern.ctas) == 36864            # under Rubin's 64 KB per SM
    assert bytes_in_flight(kern, gb, kern.ctas) == 32768            # GB300's 32 KB cap per SM binds
    # the gather term by Little's law: 2 x (512 + 128) entries x 288 B = 368,640 B of KV and 262,144 B of BF16
    # queries and outputs, at 36,864 B per 0.5 us (73.7 GB/s) = 8.56 us, less the same bytes at the streaming rate
    # (interleaved over Rubin's two dies)
    t = kernel_time(kern, vr)
    hbm = 2 * 640 * 288 + 2 * 64 * 1024 * 2
    stream = hbm / (vr.hbm_bandwidth_bytes_per_s * vr.hbm_stream_efficiency * vr.hbm_interleaved_bandwidth_factor)
    assert t.parallelism_s == pytest.approx(hbm / (36864 / vr.hbm_latency_s) - stream, rel=1e-9)
    assert hbm / (36864 / 0.5e-6) == pytest.approx(8.56e-6, rel=1e-3)
    # fewer entries in flight per CTA: the gather slows in proportion
    few = sparse_attention(2, 2, 1, 131072, 64, 2, 512, 128, 288, 512, 512, False, "bf16", 8)
    assert few.in_flight_bytes_per_cta == 8 * 288
    assert kernel_time(few, vr).parallelism_s == pytest.approx(hbm / (8 * 288 / vr.hbm_latency_s) - stream,
                                                               rel=1e-9)
    # prefill and a dense decode pass (no top-k) fill the GPU and keep the SMs' own cap
    assert sparse_attention(2, 2, 1, 131072, 64, 2, 512, 128, 288, 512, 512, prefill=True).in_flight_bytes_per_cta is None
    assert sparse_attention(12, 2, 6, 131072, 128, 1, None, 0, 656, 576, 512, prefill=False).in_flight_bytes_per_cta \
        is None


def test_attention_compute_term_halves_from_bf16_to_fp8_mma():
    from rubinperf.kernels.attention import sparse_attention
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.stack import load_platform

    gb = load_platform("gb300-nvl72")
    args = (384, 64, 6, 131072, 64, 2, 512, 128, 288, 512, 512, False)
    bf16, fp8 = (sparse_attention(*args, dtype) for dtype in ("bf16", "fp8"))
    assert bf16.cost.flops == fp8.cost.flops == 2 * 384 * 64 * 640 * 1024
    tb, tf = kernel_time(bf16, gb), kernel_time(fp8, gb)
    # 2.5 vs 5.0 PFLOP/s dense (GB300 datasheet): the MMA term halves, the bytes do not move
    assert tf.compute_s == pytest.approx(tb.compute_s / 2, rel=1e-12)
    assert tf.memory_s == tb.memory_s
    fp8_gqa, bf16_gqa = attention(1, 8, 1, 4096, 128, mma_dtype="fp8"), attention(1, 8, 1, 4096, 128)
    assert fp8_gqa.fp8_flops == bf16_gqa.bf16_flops == 2 * 8 * 4096 * 256 and not fp8_gqa.bf16_flops
    assert fp8_gqa.activation_bytes == bf16_gqa.activation_bytes   # queries and outputs stay BF16


def test_indexer_logits_reread_keys_per_query_block_by_hand():
    # DeepGEMM's MQA logits (@ 54e2261): 32 heads -> query blocks of 128 / 32 = 4 tokens; prefill of 8 new tokens after
    # 1,000 cached ones at ratio 1 -> 2 blocks, each walking its last token's keys: the mean query's visible
    # entries (1000 + 4.5) + half a block (2) = 1006.5 keys a block. 68-byte keys: HBM reads the sequence's 1,008 keys
    # once, L2 serves the rest of 2 x 1006.5 key reads.
    from rubinperf.kernels.attention import indexer_logits

    k = indexer_logits(8, 1, 8, 1000, 32, 128, 1, 68, "fp4", True)
    assert k.cost.kv_bytes == pytest.approx(1008 * 68)
    assert k.cost.l2_bytes == pytest.approx(2 * 1006.5 * 68 - 1008 * 68)
    assert k.cost.fp4_flops == pytest.approx(2 * 8 * 32 * 128 * 1006.5)
    assert k.ctas == 2   # the persistent grid's 2 blocks: the other SMs idle
    # decode (paged): 6 tokens of one request make ceil(6 / 4) = 2 blocks over the whole context; the metadata
    # spreads them over every SM
    d = indexer_logits(6, 1, 6, 4090, 32, 128, 1, 68, "fp4", False)
    assert d.ctas is None and d.cost.l2_bytes == pytest.approx((2 * 4096 - 4096) * 68)


def test_l2_rereads_bind_only_past_the_l2_rate():
    # the memory term is the larger of the HBM time and every load at the L2's rate (never below the HBM peak per SM)
    import dataclasses

    from rubinperf.kernels.attention import indexer_logits
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.stack import load_platform

    gb = load_platform("gb300-nvl72")
    k = indexer_logits(32768, 1, 32768, 131072, 32, 128, 2, 68, "fp4", True)
    slow = dataclasses.replace(gb, l2_bytes_per_clock_per_sm=1e-3)   # floored at the HBM peak per SM
    t, t_slow = kernel_time(k, gb), kernel_time(k, slow)
    loads = k.cost.hbm_bytes + k.cost.l2_bytes
    assert t_slow.memory_s == pytest.approx(loads / gb.hbm_bandwidth_bytes_per_s)
    assert t.memory_s == pytest.approx(max(k.cost.hbm_bytes / (gb.hbm_bandwidth_bytes_per_s * gb.hbm_stream_efficiency
                                                                * gb.hbm_interleaved_bandwidth_factor),
                                           loads / (gb.l2_bytes_per_clock_per_sm * gb.sm_clock_hz * gb.sm_count)))


def test_hc_prenorm_gemm_runs_tf32_mmas_at_half_the_bf16_rate():
    # DeepGEMM's tf32_hc_prenorm_gemm: 4,096 tokens x (4 x 4096) BF16 routes times [24, 16384] FP32: 64 blocks of 64
    # tokens x 16 splits = 1,024 CTAs; MMAs on 32 columns (24 aligned to 16)
    from rubinperf.kernels.memory import hc_prenorm_gemm
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.stack import load_platform

    k = hc_prenorm_gemm(4096, 16384, 24)
    assert k.ctas == 16 * 64 and k.cost.tf32_flops == 2 * 4096 * 32 * 16384
    b = load_platform("b200", "sglang-blackwell")
    assert b.peak_flops("tf32") == b.bf16_dense_flops_per_s / 2
    t = kernel_time(k, b)
    assert t.sol_compute_s == pytest.approx(k.cost.tf32_flops / (b.bf16_dense_flops_per_s / 2)
                                            + k.cost.fp32_flops / b.fp32_dense_flops_per_s)


def test_sparse_fp8_decode_dequantisation_adds_cuda_core_work_once_per_token_and_entry():
    # FlashMLA's SM90 sparse FP8 decode: each query token's 2,048 gathered entries have 512 FP8 values dequantised,
    # 25 FP32 FLOP equivalents each (the deep-dive's cycle count), whatever the heads; none in prefill or dense passes
    from rubinperf.kernels.attention import sparse_attention

    k = sparse_attention(256, 128, 2, 8192, 128, 1, 2048, 0, 656, 576, 512, False, "bf16", 128, 0.5,
                         dequant_flops_per_value=25.0, quantised_values_per_entry=512)
    assert k.cost.fp32_flops == pytest.approx(25.0 * 256 * 2048 * 512)
    pre = sparse_attention(256, 128, 2, 8192, 128, 1, 2048, 0, 656, 576, 512, True, "bf16", 128, 0.5,
                           dequant_flops_per_value=25.0, quantised_values_per_entry=512)
    assert pre.cost.fp32_flops == 0
