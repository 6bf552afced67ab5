"""Write `kernels.csv`: public measurements of the kernels the bundled stacks name.

Every number below is transcribed from the source named beside it (README.md in this folder
describes each source, its GPU, shapes and timing method). Where a source publishes only a
rate, the time is derived here from the shape's FLOPs or bytes by the formula the source's own
benchmark prints the rate with, and the row's `notes` give that formula. Run from the
repository root:

    python calibration/public/make_kernels_csv.py

It rewrites calibration/public/kernels.csv; the file is committed, so this script is only the
record of how it was made (it imports nothing from rubinperf).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = ("id", "source_url", "source_detail", "gpu", "kernel", "precision", "shape",
           "measured_us", "reported_rate", "reported_rate_unit", "timing_method", "notes")

rows: list[dict[str, str]] = []


def shape(**kv) -> str:
    return ";".join(f"{k}={v}" for k, v in kv.items())


def fmt(x: float) -> str:
    """A derived time: four significant figures (the published rates carry two to four)."""
    return f"{float(f'{x:.4g}'):g}"


def add(**row) -> None:
    for key in COLUMNS:
        row.setdefault(key, "")
    rows.append({k: str(row[k]) for k in COLUMNS})


# ---------------------------------------------------------------------------------------------
# 1. DeepGEMM PR #316: Mega MoE (SM100 FP8 x FP4) under EP8, B200. Time, compute, global memory,
#    interconnect, exactly as the PR description's two tables give them.
# ---------------------------------------------------------------------------------------------
PR316 = "https://github.com/deepseek-ai/DeepGEMM/pull/316"
PR316_TIMING = ("DeepGEMM bench_kineto of the 'mega_moe' kernel (tests/test_mega_moe.py at merge commit "
                "891d57b4db1071624b5c8fa0d1e51cb317fa709f); averaged across the 8 ranks")
PR316_NOTE = ("reported_rate = 2*recv_tokens*hidden*intermediate*3/t (3 matmuls); the memory and interconnect "
              "columns are printed x t/(t - t_reduction), t_reduction = tokens*hidden*2*(1+top_k)/6.5e12 s "
              "(test_mega_moe.py), so they are slightly above bytes/t at large batches")
for model, geo, table in (
    ("DeepSeek-V4-Flash", dict(experts=256, top_k=6, hidden=4096, intermediate=2048), (
        (1, 56.5, 5, 1311, 1, "1.96x"),
        (512, 146.5, 1056, 3192, 266, "1.73x"),
        (8192, 1283.1, 1928, 998, 499, "1.56x"),
        (32768, 4855.5, 2038, 794, 529, "1.62x"))),
    ("DeepSeek-V4-Pro", dict(experts=384, top_k=6, hidden=7168, intermediate=3072), (
        (1, 108.1, 7, 1758, 1, "1.61x"),
        (512, 369.6, 1098, 4619, 182, "1.54x"),
        (8192, 2818.5, 2304, 1094, 393, "1.50x"),
        (32768, 10655.2, 2438, 692, 417, "1.54x"))),
):
    tag = "flash" if "Flash" in model else "pro"
    for tokens, us, tflops, hbm, nvl, speedup in table:
        add(id=f"dg316-{tag}-{tokens}", source_url=PR316,
            source_detail=f"PR description 2026-04-24, table '{model}', row batch size {tokens}",
            gpu="b200", kernel="mega_moe", precision="fp8xfp4",
            shape=shape(tokens_per_rank=tokens, **geo, ep=8),
            measured_us=us, reported_rate=tflops, reported_rate_unit="TFLOPS", timing_method=PR316_TIMING,
            notes=f"SM100 (B200 class); {speedup} vs the legacy path (DeepEP dispatch, two FP8xFP4 m-grouped contiguous "
                  f"GEMMs, TileLang SwiGLU, DeepEP combine; TileLang do_bench in a CUDA graph, median); {PR316_NOTE} "
                  f"[other_rates hbm_gbps={hbm} nvlink_gbps={nvl}]")

# ---------------------------------------------------------------------------------------------
# 2. DeepGEMM PR #323 (open): SM90 FP8 Mega MoE on 8x H20, DeepSeek-V4-Flash, batch 1-8 per rank.
# ---------------------------------------------------------------------------------------------
PR323 = "https://github.com/deepseek-ai/DeepGEMM/pull/323"
for batch, us, normal, ll in ((1, 188.0, 505.0, 250.1), (2, 239.0, 615.8, 299.9),
                              (4, 361.1, 828.1, 416.0), (8, 432.2, 950.4, 494.8)):
    add(id=f"dg323-flash-{batch}", source_url=PR323,
        source_detail=f"PR description 2026-04-30, table 'DeepSeekV4Flash (8 card H20)', row batch {batch}",
        gpu="h20", kernel="mega_moe", precision="fp8",
        shape=shape(tokens_per_rank=batch, experts=256, top_k=6, hidden=4096, intermediate=2048, ep=8),
        measured_us=us, timing_method="not stated (tests/test_mega_moe_hopper.py in the PR, fused-kernel benchmark mode)",
        notes=f"SM90 FP8 weights x FP8 activations; same table: DeepEP normal + grouped FP8 GEMM path {normal} us, "
              f"DeepEP low-latency path {ll} us (composite paths, not rows here)")

# DeepGEMM PR #383 (merged): the upstream SM90 FP8 Mega MoE, timed on 8x H20 in a comment by
# huangzhilin-hzl (2026-08-17), column 'PR #383 (us)' (the 'sgl-project#36' column is a fork's kernel).
PR383 = "https://github.com/deepseek-ai/DeepGEMM/pull/383"
PR383_TOKENS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
for tag, geo, times in (
    ("flash", dict(experts=256, top_k=6, hidden=4096, intermediate=2048),
     (273.1, 304.4, 302.0, 340.7, 414.4, 569.5, 922.0, 1516.6, 2735.1, 5116.0, 9749.0)),
    ("pro", dict(experts=384, top_k=6, hidden=7168, intermediate=3072),
     (768.0, 950.3, 1026.3, 1059.9, 1201.0, 1639.9, 2599.0, 4036.0, 6986.0, 12932.0, 24777.0)),
):
    for tokens, us in zip(PR383_TOKENS, times):
        add(id=f"dg383-{tag}-{tokens}", source_url=PR383,
            source_detail=f"PR comment by huangzhilin-hzl 2026-08-17, table '{tag.capitalize()}', column 'PR #383 (us)', "
                          f"row M={tokens}",
            gpu="h20", kernel="mega_moe", precision="fp8",
            shape=shape(tokens_per_rank=tokens, **geo, ep=8), measured_us=us,
            timing_method="not stated ('the same setup as this PR', the PR's own benchmark harness)",
            notes="upstream SM90 FP8 x FP8 Mega MoE as merged in PR #383 (two kernels, per PR #440's description); "
                  "M read as tokens per rank")

# DeepGEMM PR #440 (open): its description times #383's two-kernel SM90 Mega MoE ('split' column) on
# 8x H100, EP8, DeepSeek-V4-Flash geometry; the readable rows only (64-4096 tokens per rank).
PR440 = "https://github.com/deepseek-ai/DeepGEMM/pull/440"
for tokens, us in ((64, 369), (128, 371), (256, 424), (512, 527), (1024, 737), (2048, 1188), (4096, 2073)):
    add(id=f"dg440-split-flash-{tokens}", source_url=PR440,
        source_detail=f"PR description 2026-09-13, table '--model-config flash', column 'split (us)', row {tokens}",
        gpu="h100", kernel="mega_moe", precision="fp8",
        shape=shape(tokens_per_rank=tokens, experts=256, top_k=6, hidden=4096, intermediate=2048, ep=8),
        measured_us=us,
        timing_method="Kineto device time summed over #383's two kernels, DeepGEMM's own harness, several rounds",
        notes="upstream SM90 FP8 Mega MoE of PR #383 (the PR's 'split' arm); symmetric buffer sized for 8192 "
              "tokens per rank in every row; the PR's fused kernel (its own, unmerged) is not a row")

# DeepGEMM PR #352 (closed, not merged): an SM90 FP8 Mega MoE split into L1 and L2 launches, built on
# #323, timed on 8x H200 at DeepSeek-V3 geometry in a comment by mpdfdfl (2026-06-08).
PR352 = "https://github.com/deepseek-ai/DeepGEMM/pull/352"
for tokens, us, tflops in ((8, 403.9, 14.8), (16, 422.6, 27.9), (32, 514.4, 39.2), (64, 443.8, 90.9),
                           (128, 490.2, 184.2), (256, 615.2, 303.4), (260, 623.0, 287.8), (512, 806.9, 452.1),
                           (819, 1106.0, 517.9), (1024, 1222.3, 594.8), (2048, 2088.1, 690.6),
                           (4096, 3866.0, 743.2), (8192, 7492.0, 768.4)):
    add(id=f"dg352-v3-{tokens}", source_url=PR352,
        source_detail=f"PR comment by mpdfdfl 2026-06-08, table on H200, column 'This branch (us)', row M={tokens}",
        gpu="h200", kernel="mega_moe", precision="fp8",
        shape=shape(tokens_per_rank=tokens, experts=256, top_k=8, hidden=7168, intermediate=2048, ep=8),
        measured_us=us, reported_rate=tflops, reported_rate_unit="TFLOPS",
        timing_method="not stated (the comment's attached tests/bench_mega_moe_sm90.py, EP_DISABLE_GIN=1)",
        notes="kernel of PR #352 (closed without merging; L1 and L2 launches, built on #323), not the merged "
              "upstream one; DeepSeek-V3 geometry (7168 / 2048 / 256 experts / top-8)")

# ---------------------------------------------------------------------------------------------
# 3. DeepGEMM README performance tables (H800 SXM5, NVCC 12.8), last version that carried them:
#    commit 327ec92f6977e7fee022cb76a8f273b75483c3d8 (2025-04-09). Rates only; time derived.
# ---------------------------------------------------------------------------------------------
DG_README = "https://github.com/deepseek-ai/DeepGEMM/blob/327ec92f6977e7fee022cb76a8f273b75483c3d8/README.md"
DG_README_TIMING = "DeepGEMM bench_kineto of the 'fp8_gemm' kernel (tests/test_core.py at the same commit)"
GEMMS = (  # (m, n, k, TFLOPS, GB/s, speedup)
    (64, 2112, 7168, 206, 1688, "2.7x"), (64, 24576, 1536, 289, 2455, "1.7x"),
    (64, 32768, 512, 219, 2143, "1.8x"), (64, 7168, 16384, 336, 2668, "1.4x"),
    (64, 4096, 7168, 287, 2320, "1.4x"), (64, 7168, 2048, 295, 2470, "1.7x"),
    (128, 2112, 7168, 352, 1509, "2.4x"), (128, 24576, 1536, 535, 2448, "1.6x"),
    (128, 32768, 512, 358, 2103, "1.5x"), (128, 7168, 16384, 645, 2604, "1.4x"),
    (128, 4096, 7168, 533, 2221, "2.0x"), (128, 7168, 2048, 510, 2277, "1.7x"),
    (4096, 2112, 7168, 1127, 562, "1.2x"), (4096, 24576, 1536, 1212, 962, "1.2x"),
    (4096, 32768, 512, 775, 1620, "1.2x"), (4096, 7168, 16384, 1520, 384, "1.4x"),
    (4096, 4096, 7168, 1410, 541, "1.3x"), (4096, 7168, 2048, 1168, 794, "1.2x"),
)
for m, n, k, tflops, gbs, speedup in GEMMS:
    us = 2 * m * n * k / (tflops * 1e12) * 1e6
    add(id=f"dgreadme-gemm-{m}x{n}x{k}", source_url=DG_README,
        source_detail=f"README 'Normal GEMMs for dense models', row M={m} N={n} K={k} (commit date 2025-04-09)",
        gpu="h800", kernel="fp8_gemm", precision="fp8",
        shape=shape(m=m, n=n, k=k), measured_us=fmt(us), reported_rate=tflops, reported_rate_unit="TFLOPS",
        timing_method=DG_README_TIMING,
        notes=f"time derived: 2*m*n*k / TFLOPS (the test's own formula; TFLOPS rounded to an integer); "
              f"FP8 e4m3 in with 1x128 / 128x128 scales, BF16 out; {speedup} vs DeepSeek's CUTLASS 3.6 "
              f"[other_rates hbm_gbps={gbs}]")

for groups, mpg, n, k, tflops, gbs, speedup in (
        (4, 8192, 4096, 7168, 1346, 434, "1.3x"), (4, 8192, 7168, 2048, 1214, 752, "1.3x"),
        (8, 4096, 4096, 7168, 1346, 516, "1.3x"), (8, 4096, 7168, 2048, 1214, 826, "1.2x")):
    us = 2 * groups * mpg * n * k / (tflops * 1e12) * 1e6
    add(id=f"dgreadme-contig-{groups}x{mpg}x{n}x{k}", source_url=DG_README,
        source_detail=f"README 'Grouped GEMMs for MoE models (contiguous layout)', row groups={groups} "
                      f"M per group={mpg} N={n} K={k}",
        gpu="h800", kernel="grouped_gemm_contiguous", precision="fp8",
        shape=shape(groups=groups, m_per_group=mpg, n=n, k=k), measured_us=fmt(us),
        reported_rate=tflops, reported_rate_unit="TFLOPS", timing_method=DG_README_TIMING,
        notes=f"time derived: 2*groups*m_per_group*n*k / TFLOPS (test_core.py's formula); every group "
              f"holds exactly m_per_group rows; {speedup} vs CUTLASS 3.6 [other_rates hbm_gbps={gbs}]")

for groups, mpg, n, k, tflops, gbs, speedup in (
        (1, 1024, 4096, 7168, 1233, 924, "1.2x"), (1, 1024, 7168, 2048, 925, 968, "1.2x"),
        (2, 512, 4096, 7168, 1040, 1288, "1.2x"), (2, 512, 7168, 2048, 916, 1405, "1.2x"),
        (4, 256, 4096, 7168, 932, 2064, "1.1x"), (4, 256, 7168, 2048, 815, 2047, "1.2x")):
    us = 2 * groups * mpg * n * k / (tflops * 1e12) * 1e6
    add(id=f"dgreadme-masked-{groups}x{mpg}x{n}x{k}", source_url=DG_README,
        source_detail=f"README 'Grouped GEMMs for MoE models (masked layout)', row groups={groups} "
                      f"M per group={mpg} N={n} K={k}",
        gpu="h800", kernel="grouped_gemm_masked", precision="fp8",
        shape=shape(groups=groups, expected_m=mpg, max_m=mpg, n=n, k=k), measured_us=fmt(us),
        reported_rate=tflops, reported_rate_unit="TFLOPS", timing_method=DG_README_TIMING,
        notes=f"time derived: 2*groups*m*n*k / TFLOPS (test_core.py's formula); the timed call has every "
              f"group full (masked_m = expected_m = m); {speedup} vs CUTLASS 3.6 [other_rates hbm_gbps={gbs}]")

# ---------------------------------------------------------------------------------------------
# 4. DeepGEMM PR #192, comment by KevinZeng08 (2025-10-06): upstream masked grouped FP8 GEMM on
#    H100 ('Original' block; the 'SwapAB' block is the PR's own kernel and is not taken).
# ---------------------------------------------------------------------------------------------
PR192 = "https://github.com/deepseek-ai/DeepGEMM/pull/192"
for epg, n, k, us, tflops, gbs in ((32, 4096, 7168, 168, 175, 2836), (32, 7168, 2048, 94, 155, 2581),
                                   (96, 4096, 7168, 176, 521, 2807), (96, 7168, 2048, 100, 434, 2599),
                                   (160, 4096, 7168, 229, 645, 2220), (160, 7168, 2048, 116, 634, 2379)):
    add(id=f"dg192-masked-16x{epg}x{n}x{k}", source_url=PR192,
        source_detail=f"PR comment by KevinZeng08 2025-10-06, block 'Original', line num_groups=16 "
                      f"expected_m_per_group={epg} n={n} k={k}",
        gpu="h100", kernel="grouped_gemm_masked", precision="fp8",
        shape=shape(groups=16, expected_m=epg, n=n, k=k), measured_us=us,
        reported_rate=tflops, reported_rate_unit="TFLOPS",
        timing_method="DeepGEMM bench_kineto (tests/test_fp8.py, printed 'Perf (...)' line)",
        notes="upstream DeepGEMM SM90 1D2D kernel; masked_m per group = int(expected_m * U(0.7, 1.3)) "
              "(tests/generators.py), TFLOPS counts the valid rows; time printed to the microsecond "
              f"[other_rates hbm_gbps={gbs}]")

# ---------------------------------------------------------------------------------------------
# 5. DeepEP V1 README tables (H800, CX7 400 Gb/s IB), last V1 README: commit
#    567632dd59810d77b3cc05553df953cc0f779799 (2026-02-03; the same tables live on in docs/legacy.md).
# ---------------------------------------------------------------------------------------------
DEEPEP_README = "https://github.com/deepseek-ai/DeepEP/blob/567632dd59810d77b3cc05553df953cc0f779799/README.md"
LL = ((8, 77, 98, 114, 127), (16, 118, 63, 195, 74), (32, 155, 48, 273, 53),
      (64, 173, 43, 314, 46), (128, 192, 39, 369, 39), (256, 194, 39, 360, 40))
LL_TIMING = "not stated in the README (tests/test_low_latency.py prints bench_kineto per-kernel times)"
for ep, d_us, d_bw, c_us, c_bw in LL:
    for kind, us, bw, prec in (("dispatch", d_us, d_bw, "fp8"), ("combine", c_us, c_bw, "bf16")):
        add(id=f"deepep-ll-{kind}-ep{ep}", source_url=DEEPEP_README,
            source_detail=f"README 'Low-latency kernels with pure RDMA', {kind} row #EP={ep} "
                          "(table as updated 2025-06-05, commit de8cfca)",
            gpu="h800", kernel=f"deepep_ll_{kind}", precision=prec,
            shape=shape(tokens_per_rank=128, hidden=7168, top_k=8, ep=ep),
            measured_us=us, reported_rate=bw, reported_rate_unit="GB/s RDMA", timing_method=LL_TIMING,
            notes="pure RDMA (CX7 400 Gb/s InfiniBand, ~50 GB/s), NVLink not used; the README does not give "
                  "the expert count (tests/test_low_latency.py at de8cfca uses 288 experts on 8 ranks)")

# Normal (intranode) kernels: only the bottleneck bandwidth is published. The test
# (tests/test_intranode.py at 567632d) routes each of 4096 tokens to 8 experts drawn uniformly
# from 256 (top-k of |randn|+1) over 8 ranks of 32 experts, and prints
# recv_tokens * hidden * bytes / t. Expected received tokens per rank:
# 8 ranks * 4096 * p, p = 1 - C(224, 8) / C(256, 8) (the chance a token touches a given rank).
p_hit = 1 - math.comb(224, 8) / math.comb(256, 8)
recv = 8 * 4096 * p_hit
for kind, bw, prec, per_token in (("dispatch", 153, "fp8", 7168 * (1 + 4 / 128)),
                                  ("combine", 158, "bf16", 7168 * 2)):
    us = recv * per_token / (bw * 1e9) * 1e6
    add(id=f"deepep-normal-{kind}-ep8", source_url=DEEPEP_README,
        source_detail=f"README 'Normal kernels with NVLink and RDMA forwarding', Intranode {kind} row #EP=8",
        gpu="h800", kernel=f"deepep_{kind}", precision=prec,
        shape=shape(tokens_per_rank=4096, hidden=7168, top_k=8, experts=256, ep=8),
        measured_us=fmt(us), reported_rate=bw, reported_rate_unit="GB/s NVLink",
        timing_method="not stated in the README (tests/test_intranode.py: DeepEP bench, best SM/chunk config)",
        notes=f"time derived: recv_tokens * bytes_per_token / bandwidth with the test's uniform routing, "
              f"recv_tokens = 8*4096*(1 - C(224,8)/C(256,8)) = {recv:.0f}; bytes_per_token = "
              f"{'hidden*(1+4/128) (FP8 + scales)' if kind == 'dispatch' else 'hidden*2 (BF16)'}; "
              "the README's setting also names top-4 groups, which the intranode test does not apply")

# ---------------------------------------------------------------------------------------------
# 6. FlashMLA: the Hopper FP8 sparse decoding deep dive (2025-09-29).
# ---------------------------------------------------------------------------------------------
FLASHMLA_DOC = ("https://github.com/deepseek-ai/FlashMLA/blob/9241ae3ef9bac614dd25e45e507e089f888280e0/"
                "docs/20250929-hopper-fp8-sparse-deep-dive.md")
b, h, s_q, topk = 128, 128, 2, 2048
flops = 2 * h * (b * s_q * topk) * (576 + 512)
add(id="flashmla-sparse-decode-b128-h128-sq2-topk2048", source_url=FLASHMLA_DOC,
    source_detail="deep-dive blog, paragraph 'Using these techniques, we achieved 410 TFLOPS ...'",
    gpu="h800", kernel="sparse_mla_decode", precision="fp8_kv_bf16_mma",
    shape=shape(batch=b, heads=h, seq_q=s_q, topk_tokens=topk, head_dim=576, head_dim_v=512),
    measured_us=fmt(flops / 410e12 * 1e6), reported_rate=410, reported_rate_unit="TFLOPS",
    timing_method="not stated (tests/test_flash_mla_sparse_decoding.py times with kernelkit bench_kineto)",
    notes="time derived: 2*heads*(batch*seq_q*topk_tokens)*(576+512) / TFLOPS (tests/lib.py "
          "count_flop_and_mem_vol_for_decode); FP8 KV cache (656 B/token) dequantised to BF16; "
          "compute-bound configuration; the same post gives 250 TFLOPS for the previous kernel and "
          "'up to 460 TFLOPS' at topk 32768 (batch not restated), not rows here")

# FlashMLA issue #30: the first dense MLA decoding kernel on an H20, tests/test_flash_mla.py output
# (the varlen=False lines; every sequence holds mean_sk keys then).
FLASHMLA_30 = "https://github.com/deepseek-ai/FlashMLA/issues/30"
for s_q_, ms, tflops, gbs in ((1, 0.601, 30, 1012), (2, 0.606, 60, 1012), (3, 0.609, 90, 1013),
                              (4, 0.614, 119, 1012), (5, 1.168, 78, 536), (6, 1.172, 93, 538)):
    add(id=f"flashmla30-dense-decode-b128-h16-sq{s_q_}", source_url=FLASHMLA_30,
        source_detail=f"issue description (robotzheng), line 'b=128, s_q={s_q_}, mean_sk=4096, h_q=16, h_kv=1, "
                      "d=576, dv=512, causal=True, varlen=False'",
        gpu="h20", kernel="mla_decode", precision="bf16",
        shape=shape(batch=128, seq_q=s_q_, heads=16, kv_heads=1, kv_len=4096, head_dim=576, head_dim_v=512),
        measured_us=fmt(ms * 1e3), reported_rate=tflops, reported_rate_unit="TFLOPS",
        timing_method="triton.testing.do_bench, fast_flush=False (tests/test_flash_mla.py of the first release, 414a2f3)",
        notes="BF16 KV cache, paged (block 64); TFLOPS = s_q*total_kv*h_q*(576+512)*2/t; the kernel of "
              f"February 2025 (before the 2025-04-22 rewrite) [other_rates hbm_gbps={gbs}]")

# ---------------------------------------------------------------------------------------------
# 7. vLLM PR #49636's microbenchmark (companion repo mhoqueanik/moe_ep_benchmark,
#    expected_results.md section 3): DeepGEMM Mega MoE ('dg' column, FlashInfer moe_ep's
#    deep_gemm_mega backend) on one 8x B200 node, DP8 + EP8.
# ---------------------------------------------------------------------------------------------
MOE_EP = ("https://github.com/mhoqueanik/moe_ep_benchmark/blob/5c2018c09f60848b4bba9dc9c9616368f0867e49/"
          "expected_results.md")
MOE_EP_TIMING = ("CUDA events around FlashInfer moe_ep's compute() call (MEGA_TIMING=e2e_pipelined: calls "
                 "enqueued back to back, 300 MB L2 flush outside the event window), p50 per rank")
MOE_EP_SHAPES = (
    ("deepseek_v4_flash", dict(experts=256, top_k=6, hidden=4096, intermediate=2048),
     (108.5, 124.9, 154.7, 233.5, 379.1, 680.0, 1320.4)),
    ("deepseek_v4_pro", dict(experts=384, top_k=6, hidden=7168, intermediate=3072),
     (260.1, 327.7, 376.9, 492.1, 899.1, 1591.8, 3144.2)),
    ("deepseek_v3", dict(experts=256, top_k=8, hidden=7168, intermediate=2048),
     (170.8, 184.4, 282.6, 465.0, 809.4, 1604.6, 3236.3)),
    ("kimi_k2_6", dict(experts=384, top_k=8, hidden=7168, intermediate=2048),
     (206.8, 253.9, 315.4, 450.7, 825.3, 1664.0, 3128.4)),
    ("qwen3_5_397b", dict(experts=512, top_k=10, hidden=4096, intermediate=1024),
     (112.7, 131.1, 194.7, 309.2, 549.0, 1032.2, 2022.4)),
)
for name, geo, times in MOE_EP_SHAPES:
    for tokens, us in zip((8, 64, 512, 1024, 2048, 4096, 8192), times):
        add(id=f"moeep-{name}-{tokens}", source_url=MOE_EP,
            source_detail=f"section 3 'Kernel microbenchmark', table '{name}', column dg, row tok/rank {tokens}; "
                          "quoted in https://github.com/vllm-project/vllm/pull/49636 (description)",
            gpu="b200", kernel="mega_moe", precision="fp8xfp4",
            shape=shape(tokens_per_rank=tokens, **geo, ep=8), measured_us=us, timing_method=MOE_EP_TIMING,
            notes="DeepGEMM Mega MoE reached through FlashInfer moe_ep (flashinfer 4_5_2-perf-fix @ 1ee41bcd, "
                  "vLLM 0.25.1); inputs pre-quantised and staged outside the timed region, which holds the wrapper's "
                  "compute() (host work and any copies inside it besides DeepGEMM's kernel), so it sits above "
                  "the bare kernel time (cf. PR #316); random synthetic weights and routing")


def main() -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate ids"
    with open(HERE / "kernels.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows from {len({r['source_url'] for r in rows})} sources -> {HERE / 'kernels.csv'}")


if __name__ == "__main__":
    main()
