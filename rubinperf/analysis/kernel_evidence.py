"""The kernel section of `rubinperf validate`: every row of the public kernel evidence table
(`calibration/public/kernels.csv`, rubinperf.analysis.evidence) and the own H200 measurements' primary rows
(`calibration/hopper/deepgemm_sm90_evidence.csv`, `own_rows`) predicted through the kernel functions the step uses
(`rubinperf.kernels` + `roofline.kernel_time`) on the row's GPU and the stack that runs those kernels there.

The split between the rows a fit saw and the rows it did not is stated here and deterministic: FIT_ROWS names, per
kernel family and GPU generation, a regular expression of the ids of the rows `fit_family` fits FIT_FIELDS to; every
other row is held out. A family with no entry is predicted from its stack's values as they are: all of its rows are held out.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import statistics

# The GPU of a row -> (hardware spec, stack): the stack that runs DeepSeek's kernels on it. H20 has no spec.
GPU_SPECS = {"b200": ("b200", None), "b300": ("b300", None), "gb200": ("gb200-nvl72", None),
             "gb300": ("gb300-nvl72", None), "h100": ("h100-cluster", "sglang-deepep-hopper"),
             "h800": ("h800-cluster", "sglang-deepep-hopper"), "h200": ("h200", "sglang-deepep-hopper")}
GENERATION = {"b200": "sm100", "b300": "sm100", "gb200": "sm100", "gb300": "sm100", "h20": "sm90", "h100": "sm90",
              "h800": "sm90", "h200": "sm90"}

# The fit rows (a regular expression their ids match) per (kernel family, GPU generation), and the fields fitted to
# them. Mega MoE on SM100: the V4-Flash rows of DeepGEMM PR #316 (DeepGEMM's own harness, timed by kineto); held out:
# its V4-Pro rows and every other source's rows (vLLM PR #49636's moe_ep benchmark, five model geometries). The TF32
# pre-norm GEMM on SM90: the own H200 rows without K splits (num_splits=0: the call passed none, one CTA over all of K
# per 64 tokens); held out: the same shapes with 16 splits (16 times fewer steps a CTA). The FP8 GEMM on SM90: the own
# H200 rows of four of the eight linears (wq_a, wq_b, idx_wq_b, shared_w13: narrow and wide, short and deep K) at
# every m; held out: the other four linears (wkv, wo_b, idx_wk, shared_w2) and the H800 rows of DeepGEMM's README.
FIT_ROWS = {("mega_moe", "sm100"): r"^dg316-flash-",
            ("hc_prenorm_gemm", "sm90"): r"^own-h200-hc_prenorm_gemm:.*num_splits=0:",
            ("fp8_gemm", "sm90"): r"^own-h200-fp8_gemm:(wq_a|wq_b|idx_wq_b|shared_w13):",
            ("sparse_mla_decode", "sm90"): r"^own-h100-sparse_mla_decode:b(1|4|16|64)_"}
# megamoe_sync_s is the kernel's fixed chain: its floor is the steps DeepGEMM's code times (stacks/*.toml cite each).
FIT_FIELDS = {("mega_moe", "sm100"): ("megamoe_sync_s", "megamoe_stream_latency_s", "megamoe_compute_efficiency"),
              ("hc_prenorm_gemm", "sm90"): ("hc_prenorm_step_cycles",),
              ("fp8_gemm", "sm90"): ("deepgemm_sm90_bytes_in_flight_per_sm",),
              ("sparse_mla_decode", "sm90"): ("sparse_decode_block_cycles",)}
# The range each fitted field is held to (a fit that ends on a bound says so in docs/deepseek-kernels.md).
# megamoe_sync_s: from the steps the code times, 19.5 us (SM offsets ~6.5, source-index writes ~2, two NVLink barriers
# ~4 each, the combine's one-token reduction ~3: impls/sm100_fp8_fp4_mega_moe.cuh @ 54e2261), to twice that; above
# 19.5 us it holds the steps the code gives no time for (about 4-5 us at the stack's latencies: the per-SM counts, SM 0's
# remote counts, a pull's two dependent loads, the first tokens' release and poll, the top-6 combine's further loads)
# and what the rows want beyond them, which the code does not explain (docs/deepseek-kernels.md).
# megamoe_stream_latency_s: from the unloaded HBM latency (0.5 us) to ten times it.
# hc_prenorm_step_cycles: from the step's eight TF32 WGMMAs alone (2 x 64 x 32 x 64 FLOP at the H200's TF32 rate per
# SM, 494 TFLOP/s / 132 SMs / 1.98 GHz = 1,890 FLOP a cycle: 139 cycles) to ten times that.
# deepgemm_sm90_bytes_in_flight_per_sm: from one 2 KB stage (16 weight rows x 128 FP8 values, the narrowest
# block) to the 54.5 KB the H200 calibration gave cuBLAS's GEMMs (stacks/pytorch-2.11.toml).
# deepgemm_sm90_kblock_cycles: the SM90 FP8 GEMM's chain of K blocks, a candidate fitted by scripts/sm90_gemm_chain.py
# and not adopted (docs/deepseek-kernels.md, "The SM90 FP8 GEMM's chain of K blocks"): from a barrier wait and four
# WGMMAs' issue (tens of cycles) to 2,000 cycles. hbm_stream_efficiency, fitted there as the candidate's GPU-wide share
# of the HBM rate: 0.3 to the whole datasheet rate.
FIT_RANGES = {"megamoe_sync_s": (19.5e-6, 39e-6), "megamoe_stream_latency_s": (0.5e-6, 5e-6),
              "megamoe_compute_efficiency": (0.0, 1.0), "hc_prenorm_step_cycles": (139.0, 1390.0),
              "deepgemm_sm90_bytes_in_flight_per_sm": (2048.0, 54500.0),
              "deepgemm_sm90_kblock_cycles": (20.0, 2000.0), "hbm_stream_efficiency": (0.3, 1.0),
              "sparse_decode_block_cycles": (2048.0, 20480.0)}


# FlashMLA's SM90 sparse FP8 decode (@ 9241ae3): bytes of one cached entry, heads one CTA holds
FLASHMLA_SPARSE_ENTRY_BYTES = 512 + 4 * 4 + 64 * 2
FLASHMLA_SPARSE_HEADS_PER_CTA = 64
FLASHMLA_SPARSE_FP8_VALUES = 512
# ... and of its MODEL1 (V4) format: 448 FP8 + 64 BF16 RoPE values + 7 UE8M0 scales + 1 pad byte (csrc/api/sparse_decode.h)
FLASHMLA_MODEL1_ENTRY_BYTES = 448 + 64 * 2 + 7 + 1
FLASHMLA_MODEL1_FP8_VALUES = 448

# The accuracy bar the project sets for the held-out rows: median |ln(measured / predicted)| at most this, worst at most that.
HELD_OUT_MEDIAN_MAX = 0.15
HELD_OUT_WORST_MAX = 0.5
SPLIT = ("fit rows: the V4-Flash Mega MoE rows of DeepGEMM PR #316 (ids dg316-flash-*), to which the vLLM stacks' "
         "megamoe_sync_s (above the 19.5 us the code times), megamoe_stream_latency_s and megamoe_compute_efficiency were "
         "fitted; the own H200 TF32 pre-norm GEMM rows without K splits (num_splits=0), to which sglang-deepep-hopper's "
         "hc_prenorm_step_cycles was fitted (its 16-split rows held out); the own H200 FP8 GEMM rows of wq_a, wq_b, "
         "idx_wq_b and shared_w13, to which its deepgemm_sm90_bytes_in_flight_per_sm was fitted (the other four "
         "linears and the H800 rows held out); every other row is held out")


# The own measurements' timing method whose rows are the primary ones (one per case): kineto, the kernel's duration on
# the GPU with L2 flushed before each call, the method of DeepGEMM's bench_kineto and of the public DeepGEMM rows. The
# model's time of one kernel in a graph (`launch_of`: "graph") is that duration plus a graph boundary (0.65 us on the
# H200), the same treatment as the public kineto rows. The other two timings of each case (`flushed`: CUDA events,
# one eager call with its launch; `graph`: back-to-back calls in a CUDA graph, no flush, so weights that fit in L2
# stay there) stay in the file and are not rows here.
OWN_PRIMARY_METHOD = "kineto"


def own_rows(path=None) -> list:
    """The primary rows of the own measurements (every file of evidence.own_paths, or the file `path`): one per
    case."""
    from rubinperf.analysis.evidence import load_evidence, own_paths

    paths = [path] if path is not None else own_paths()
    rows = [r for p in paths for r in load_evidence(p, own_runs=True)]
    return [r for r in rows if r.id.endswith(":" + OWN_PRIMARY_METHOD)]


def evidence_rows(path=None) -> list:
    """The rows the kernel section predicts: the public table (or `path`) and, with the bundled table, the own
    measurements' primary rows."""
    from rubinperf.analysis.evidence import load_evidence

    return load_evidence(path) + (own_rows() if path is None else [])


def kernel_section(path=None) -> dict:
    """The section `validate --kernels` prints: every row's record (the public table's and the own H200 rows'), the
    summary per family, GPU and split, the held-out rows' overall figures, and the split rule."""
    rows = kernel_records(evidence_rows(path))
    summary = kernel_summary(rows)
    held = next((s for s in summary if s["kernel"] == "all"), None)
    return {"split": SPLIT, "rows": rows, "summary": summary, "held_out": held}


def launch_of(row) -> str:
    """How the row's time was taken, as a launch mode: a profiler's kernel duration (kineto, Nsight) is the kernel
    alone, as inside a graph; CUDA events or do_bench around calls issued back to back see the gap between stream
    kernels (eager)."""
    how = row.timing_method.lower()
    if "kineto" in how or "nsys" in how or "nsight" in how:
        return "graph"
    if "event" in how or "do_bench" in how:
        return "eager"
    return "graph"


def platform_of(row):
    """The row's hardware with the stack that runs its kernels, or None where no spec exists (H20)."""
    from rubinperf.specs.stack import load_platform

    spec = GPU_SPECS.get(row.gpu)
    return None if spec is None else load_platform(*spec)


def kernels_of(row, hw):
    """The row's kernels as the step builds them (a list of Kernels timed one after another), or a reason string
    when this version has no predictor for it."""
    from rubinperf import kernels as K

    s, gen = row.shape, GENERATION[row.gpu]
    if row.kernel == "mega_moe":
        if gen != "sm100":
            return ("the SM90 Mega MoE (DeepGEMM PRs #323, #383, #440, #352) is another kernel with heuristics of "
                    "its own; rubinperf models the SM100 one")
        ep, experts = int(s["ep"]), int(s["experts"])
        return [K.mega_moe(s["tokens_per_rank"], ep, experts // ep, experts, int(s["top_k"]), 3 * s["intermediate"],
                           s["hidden"], weight="fp4", act="fp8", gpus_per_tray=hw.gpus_per_tray,
                           gpus_per_domain=hw.nvlink_domain_size, smem_bytes=hw.megamoe_smem_bytes,
                           smem_weight_bytes=hw.megamoe_smem_weight_bytes_per_value,
                           pull_round_trips=hw.megamoe_pull_round_trips)]
    if row.kernel == "mega_moe_sm90":
        # own one-GPU runs of the PR #323 fork's SM90 FP8 Mega MoE (calibration/hopper/megamoe_sm90/): measured, not
        # predicted; what their fixed part and stream say about the SM100 model's terms is in that folder's README
        return ("the SM90 FP8 Mega MoE (DeepGEMM PR #323's fork, one rank holding every expert) is another kernel "
                "with heuristics of its own; rubinperf models the SM100 one")
    if row.kernel in ("fp8_gemm", "bf16_gemm") and {"m", "n", "k"} <= set(s):
        dtype = "fp8" if row.kernel == "fp8_gemm" else "bf16"
        return [K.gemm(s["m"], s["n"], s["k"], weight=dtype, act=dtype)]
    if row.kernel in ("grouped_gemm_contiguous", "grouped_gemm_masked"):
        per = s.get("m_per_group", s.get("expected_m"))
        if per is not None and {"groups", "n", "k"} <= set(s):
            g = s["groups"]
            # the rows the timed call holds where the row states them (own runs: the masked rows' sum; the
            # contiguous layout's rows, each group padded to its alignment), else groups x rows per group
            rows = s.get("masked_m_sum", s.get("m_total", g * per))
            return [K.grouped_gemm(rows, g, s["n"], s["k"], weight="fp8", act="fp8", touched=g)]
    if row.kernel in ("mqa_logits", "mqa_logits_paged") and {"kv_len", "heads", "head_dim"} <= set(s):
        # the lightning indexer's logits (DeepGEMM fp8_fp4_mqa_logits / fp8_fp4_paged_mqa_logits) over FP8 keys with
        # one FP32 scale each; the new tokens are the last of the context (own runs: bench_deepgemm.py build_mqa,
        # build_paged); the epilogue as the model specs state it (ReLU, head weight, sum: INDEXER_EPILOGUE_FLOPS)
        from rubinperf.specs.hfconfig import INDEXER_EPILOGUE_FLOPS

        paged = row.kernel == "mqa_logits_paged"
        seqs, q = (s["batch"], s["next_n"]) if paged else (1, s["seq_q"])
        return [K.indexer_logits(seqs * q, seqs, q, s["kv_len"] - q, s["heads"], s["head_dim"], 1,
                                 s["head_dim"] + 4, "fp8", not paged, INDEXER_EPILOGUE_FLOPS)]
    if row.kernel == "hc_prenorm_gemm" and {"m", "n", "k"} <= set(s):
        # BF16 routes x FP32 weight on TF32 MMAs, split-K into num_splits partials (1: the call passed none)
        return [K.hc_prenorm_gemm(s["m"], s["k"], s["n"], a_bytes=2, splits=s.get("num_splits", 1))]
    if row.kernel == "sparse_mla_decode" and {"batch", "heads", "seq_q", "topk_tokens"} <= set(s):
        # FlashMLA's SM90 sparse FP8 decode (github deepseek-ai/FlashMLA @ 9241ae3, csrc/sm90/decode/sparse_fp8/
        # config.h): BLOCK_M = 64 heads per CTA (a cluster of heads / 64 CTAs per query token), FP8 entries gathered
        # by top-k index, dequantised to BF16 for BF16 WGMMAs. Two cache formats (csrc/api/sparse_decode.h): V3.2's
        # (head_dim 576: 656-byte entries, 512 FP8 values + 4 FP32 scales + 64 BF16 RoPE) and MODEL1's, V4's (head_dim
        # 512: 584-byte entries, 448 FP8 values + 64 BF16 RoPE + 7 UE8M0 scales + a pad byte). A sliding window
        # (window_tokens, the own V4.1 rows) is a second cache whose entries each query token gathers beside its top-k.
        # The cached context only has to hold the top-k: where the row does not state it, taken as 4 x top-k.
        b, sq, topk = s["batch"], s["seq_q"], s["topk_tokens"]
        model1 = s.get("head_dim", 576) == 512
        entry, values = (FLASHMLA_MODEL1_ENTRY_BYTES, FLASHMLA_MODEL1_FP8_VALUES) if model1 else \
            (FLASHMLA_SPARSE_ENTRY_BYTES, FLASHMLA_SPARSE_FP8_VALUES)
        return [K.sparse_attention(b * sq, b, sq, s.get("context", 4 * topk), s["heads"], 1, topk,
                                   s.get("window_tokens", 0), entry, s["head_dim"], s["head_dim_v"], False,
                                   hw.attention_mma_dtype, hw.sparse_entries_in_flight_per_cta,
                                   tokens_per_cta=FLASHMLA_SPARSE_HEADS_PER_CTA / s["heads"],
                                   dequant_flops_per_value=hw.sparse_dequant_flops_per_value,
                                   quantised_values_per_entry=values,
                                   persistent_sms=hw.sm_count if hw.sparse_decode_block_cycles else None,
                                   block_cycles=hw.sparse_decode_block_cycles or None)]
    return f"no predictor for {row.kernel} in this version"


def predict(row, hw=None):
    """(expected seconds, bound, KernelTime of the last kernel) of one row, or (None, reason, None)."""
    from rubinperf.roofline import kernel_time

    hw = hw if hw is not None else platform_of(row)
    if hw is None:
        return None, f"no hardware spec for {row.gpu}", None
    ks = kernels_of(row, hw)
    if isinstance(ks, str):
        return None, ks, None
    times = [kernel_time(k, hw, launch=launch_of(row)) for k in ks]
    return sum(float(t.expected_s) for t in times), times[-1].bound, times[-1]


def is_fit_row(row) -> bool:
    pattern = FIT_ROWS.get((row.kernel, GENERATION[row.gpu]))
    return pattern is not None and re.search(pattern, row.id) is not None


def kernel_records(rows, platforms: dict | None = None) -> list[dict]:
    """One record per row: measured and predicted microseconds, their log ratio, the bound, whether a fit saw the row."""
    cache = dict(platforms or {})
    out = []
    for row in rows:
        if row.gpu not in cache:
            cache[row.gpu] = platform_of(row)
        t, why, kt = predict(row, cache[row.gpu])
        rec = {"id": row.id, "kernel": row.kernel, "gpu": row.gpu, "source": row.source, "shape": dict(row.shape),
               "launch": launch_of(row), "measured_us": row.measured_us,
               "predicted_us": None if t is None else t * 1e6, "split": "fit" if is_fit_row(row) else "held-out"}
        if t is None:
            rec.update(abs_log=None, bound=None, skipped=why)
        else:
            rec.update(ratio=row.measured_s / t, abs_log=abs(math.log(row.measured_s / t)), bound=why, skipped=None)
        out.append(rec)
    return out


def kernel_summary(records: list[dict]) -> list[dict]:
    """Median and worst |ln(measured / predicted)| per kernel family, GPU and split (fit / held-out), and overall
    over every held-out row; rows skipped are counted apart."""
    groups: dict[tuple, list] = {}
    for r in records:
        if r["abs_log"] is not None:
            groups.setdefault((r["kernel"], r["gpu"], r["split"]), []).append(r)
    out = [_stats(k, g, s, rs) for (k, g, s), rs in sorted(groups.items())]
    held = [r for r in records if r["abs_log"] is not None and r["split"] == "held-out"]
    if held:
        out.append(_stats("all", "all", "held-out", held))
    return out


def _stats(kernel, gpu, split, rs) -> dict:
    worst = max(rs, key=lambda r: r["abs_log"])
    return {"kernel": kernel, "gpu": gpu, "split": split, "rows": len(rs),
            "median_abs_log": statistics.median(r["abs_log"] for r in rs), "worst_abs_log": worst["abs_log"],
            "worst_row": worst["id"]}


def fit_family(rows, kernel: str, generation: str, start: dict | None = None, fields: tuple | None = None):
    """Least absolute log error of FIT_FIELDS[(kernel, generation)] (or `fields`: a candidate model's) on that family's
    fit rows (a coordinate search in log space, each field held to FIT_RANGES): (fields -> values, the fit rows' median
    |ln|). The search stalls on the kinks of an absolute error, so it runs from the stack's values (or `start`) and from
    each corner and the middle (geometric) of the ranged fields' ranges, and keeps the lowest error. Deterministic."""
    fields = FIT_FIELDS[(kernel, generation)] if fields is None else tuple(fields)
    fit = [r for r in rows if r.kernel == kernel and GENERATION[r.gpu] == generation and is_fit_row(r)]
    hws = {r.gpu: platform_of(r) for r in fit}
    given = {f: float((start or {}).get(f, getattr(next(iter(hws.values())), f))) for f in fields}

    def clamp(vals):
        return {f: min(max(v, FIT_RANGES.get(f, (0.0, math.inf))[0]), FIT_RANGES.get(f, (0.0, math.inf))[1])
                for f, v in vals.items()}

    def loss(vals):
        total = 0.0
        for r in fit:
            t, _, _ = predict(r, dataclasses.replace(hws[r.gpu], **vals))
            total += abs(math.log(r.measured_s / t))
        return total

    def search(x):
        best = loss(x)
        step = 0.5
        while step > 1e-3:
            improved = False
            for f in fields:
                for sign in (1, -1):
                    trial = dict(x, **{f: x[f] * math.exp(sign * step)})
                    lo, hi = FIT_RANGES.get(f, (0.0, math.inf))
                    if not lo <= trial[f] <= hi:
                        trial[f] = min(max(trial[f], lo), hi)
                        if trial[f] == x[f]:
                            continue
                    val = loss(trial)
                    if val < best - 1e-12:
                        x, best, improved = trial, val, True
            if not improved:
                step /= 2
        return best, x

    ranged = [f for f in fields if 0 < FIT_RANGES.get(f, (0.0, math.inf))[0] and FIT_RANGES[f][1] < math.inf]
    grid = [dict(given, **dict(zip(ranged, point))) for point in itertools.product(
        *[(FIT_RANGES[f][0], math.sqrt(FIT_RANGES[f][0] * FIT_RANGES[f][1]), FIT_RANGES[f][1]) for f in ranged])]
    found = [search(clamp(s)) for s in [given] + grid]
    x = min(found, key=lambda bx: bx[0])[1]   # the first of equal errors: the stack's own start
    errs = [abs(math.log(r.measured_s / predict(r, dataclasses.replace(hws[r.gpu], **x))[0])) for r in fit]
    return x, statistics.median(errs)
