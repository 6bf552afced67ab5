"""Each measured row as the Kernel the model times: the same kernel functions `estimate` uses.

No torch here. A row's `mode` says how it was launched: `graph` (chained in one CUDA graph,
the default for rows written before the column existed), `eager` (as do_bench times a call: behind other
work in a stream), `stream` (calls back to back from the host) or `cold` (alone after a synchronisation).
Probe families measure one hardware fact directly instead of a kernel time:
`launch` (an empty kernel: the launch alone), `pointer_chase` (one dependent HBM load).
"""

from __future__ import annotations

import dataclasses

from rubinperf.kernels import activation_quant, copy, empty, stream_probe
from rubinperf.kernels.catalog import build
from rubinperf.kernels.cost import Kernel
from rubinperf.errors import SpecError

PROBES = ("launch", "pointer_chase")
# Attention implementations the model does not describe: PyTorch's memory-efficient SDPA backend and an
# untuned Triton split-KV kernel (0.1-0.7 TB/s where bmm -> softmax -> bmm reaches 2 TB/s on the same
# shapes); their times say how slow those kernels are, not what the GPU does.
UNMODELLED_IMPLS = ("sdpa-efficient", "triton")


def modelled(row: dict) -> bool:
    return not (row.get("impl") or "").startswith(UNMODELLED_IMPLS)


def row_mode(row: dict) -> str:
    return row.get("mode") or "graph"


def row_kernels(row: dict) -> tuple:
    """The kernels one measured call ran, in order, as (Kernel, launched as the row says) pairs, from the
    model's own kernel functions.

    Most rows are one operation of one kernel; attention done as bmm -> softmax -> bmm is three
    operations (a GEMM of the queries by the keys, a softmax over the scores in HBM, a GEMM of the
    probabilities by the values). Launched from the host, only the call's first kernel is launched as
    the row says: the host issues the later operations while the GPU runs the earlier ones, so each of
    those costs a kernel boundary in the stream (measured 2026-12-01: lone-launch minus graph time of
    bmm attention, three operations, is 41 us at the median, that of one `_scaled_mm` 47 us:
    calibration/h200/README.md). A call that ran more kernels than its operations (the row's
    `launches`: a split-K reduction, a workspace fill) pays a kernel boundary for each extra one,
    enqueued by the library."""
    if _is_bmm_attention(row):
        ops = list(_bmm_attention(row))
    elif row["family"] == "elementwise":  # torch's RMSNorm: one 128-thread CTA per row, each row read twice
        ops = [dataclasses.replace(_two_pass(elementwise_row(row, reads=2)), in_flight_bytes_per_cta=rms_norm_in_flight(row))]
    elif row["family"] == "moe" and (row.get("impl") or "") in CUTLASS_MOE_IMPLS:
        ops = list(cutlass_moe_row(row))
    elif row["family"] == "moe":
        ops = list(moe_kernels(row))
    elif row["family"] == "mhc" and tilelang_mhc_pass(row):
        ops = list(mhc_tilelang_kernels(row))
    elif row["family"] == "topk" and (row.get("impl") or "").startswith("torch.topk"):
        # PyTorch's radix select: one pass over the row per digit, each waiting on the one before
        ops = [dataclasses.replace(row_kernel(row), dependent_loads=torch_topk_passes(row["dtype"]), ctas=row["m"])]
    elif row["family"] == "grouped_gemm" and (row.get("impl") or "").startswith(TORCH_GROUPED):
        ops = [dataclasses.replace(row_kernel(row), **torch_grouped_geometry(row))]
    elif row["family"] == "gemm" and (fmt := quant_in_call(row)):
        ops = [activation_quant(row["m"], row["k"], fmt), row_kernel(row)]
    else:
        ops = [row_kernel(row)]
    out = [(k, i == 0) for i, k in enumerate(ops)]
    launches = max(row.get("launches") or 0, KERNELS_PER_CALL.get(row.get("impl") or "", 0))
    if launches and launches > len(ops) and row["family"] not in PROBES:
        out.append((empty(launches - len(ops)), False))
    return tuple(out)


# Kernels one timed call of an implementation runs, where its source says more than its row's operations.
# A MoE layer's timed call runs its routing and the permutation or reduction around the two grouped GEMMs:
# FlashInfer's TRT-LLM MoE runner (SGLang's FP4 MoE rows) routing, permute + GEMM1, GEMM2, finalize, four kernels
# (flashinfer/fused_moe, trtllm-gen runner); SGLang's Triton fused MoE (its FP8 rows) moe_align_block_size, the
# gate-up fused_moe_kernel, silu_and_mul, the down fused_moe_kernel and moe_sum_reduce, five kernels
# (python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py).
KERNELS_PER_CALL = {"sglang_mxfp4_flashinfer_trtllm_moe": 4, "sglang_fused_moe_triton": 5}
# TensorRT-LLM's CUTLASS fused MoE (aiconfigurator's moe_torch_flow_cutlass rows; cpp/tensorrt_llm/kernels/cutlass_kernels/
# moe_gemm, CutlassMoeFCRunner, in NVIDIA/TensorRT-LLM) is modelled kernel by kernel, as the step graph runs it
# (`cutlass_moe_row`): the routing top-k, then kernels.cutlass_moe's seven, eight kernels with their bytes.
CUTLASS_MOE_IMPLS = ("moe_torch_flow_cutlass",)
# GEMM calls timed with the quantisation of their BF16 activations before the GEMM (a kernel of its own, then the
# GEMM), and the format it writes. aiconfigurator 0.12.0's SGLang collector (ai-dynamo/aiconfigurator,
# collector/sglang/collect_gemm.py, run_gemm) times per call: fp8_block, SGLang's per-token-group FP8 quantisation
# (groups of 128) then DeepGEMM's gemm_nt_f8f8bf16 (and systems/data/<system>/gemm/sglang/0.5.14/collection_meta.yaml:
# "the timed op is act-quant + gemm"); fp8, sgl-kernel's per-token FP8 quantisation then fp8_scaled_mm; nvfp4,
# FlashInfer's fp4_quantize (e2m1, one e4m3 scale per 16) then mm_fp4; bfloat16/float16, F.linear alone.
QUANT_IN_CALL = {"sglang_deepgemm_gemm_nt_f8f8bf16": "fp8", "sglang_sgl_kernel_fp8_scaled_mm": "fp8",
                 "sglang_flashinfer_cutedsl_nvfp4": "nvfp4"}
# TensorRT-LLM's GEMM calls (aiconfigurator's TensorRT-LLM collector, collector/trtllm/collect_gemm.py: it times
# tensorrt_llm._torch.modules.linear.Linear.forward on a BF16 input): an FP8 per-tensor or NVFP4 Linear quantises its
# input (a kernel of its own) before the GEMM; an FP8 block Linear (DeepGEMM on SM100) quantises per token group of 128.
# The implementation is shared with BF16 rows, so the format is the row's own.
QUANT_IN_CALL_OF_DTYPE = {"torch_flow": ("fp8", "nvfp4"), "deepgemm": ("fp8",)}


def quant_in_call(row: dict) -> str | None:
    """The format a GEMM call quantises its BF16 activations to before the GEMM, None where it does not."""
    impl = row.get("impl") or ""
    if impl in QUANT_IN_CALL:
        return QUANT_IN_CALL[impl]
    return row["dtype"] if row["dtype"] in QUANT_IN_CALL_OF_DTYPE.get(impl, ()) else None


# torch.topk over a short row (PyTorch 2.11, aten/src/ATen/native/cuda/SortingRadixSelect.cuh): gatherTopK, one CTA per
# row, finds the k-th value by a radix select of RADIX_BITS = 2 per pass over the key's bits, each pass counting the row's
# digits (a read of the row and a block-wide reduction) before the next can start; then bitonicSortKVInPlace sorts the
# k results (a second kernel: torch.topk's sorted=True). The profiled layer (calibration/h200/layer/layer_kernels.csv)
# names both kernels.
TORCH_TOPK_RADIX_BITS = 2


def torch_topk_passes(dtype: str) -> int:
    """Digit passes of PyTorch's radix select over keys of `dtype` (16-bit BF16: 8; FP32: 16)."""
    from rubinperf.specs.precision import PRECISIONS

    return PRECISIONS[dtype].bits // TORCH_TOPK_RADIX_BITS


# torch.nn.functional.rms_norm on FP32 rows (PyTorch 2.11, CUDA): vectorized_layer_norm_kernel<float, float, rms=true>,
# one CTA of 32 x 4 = 128 threads per row (probe.log: grid [m], block [32, 4], 32 registers). Its statistics loop is
# unrolled four times, four 16-byte LDG.E.128 per thread issued before the first is used (the SASS in probe.log), so a
# CTA keeps 128 x 4 x 16 B in flight; the row is read again to scale it, then written.
RMS_NORM_IN_FLIGHT = 128 * 4 * 16
# On BF16 rows the same kernel (vectorized_layer_norm_kernel<c10::BFloat16, float, true>) keeps far less in flight: timed
# alone with its row in HBM (calibration/h200/layer/layer_kernels.csv, `alone_cold`, widths 1280 and 5120 at 1, 4, 16 and
# 64 rows), its time grows by 1.29-1.52 ns per element, 6 bytes each (read twice, written once) at 411 ns a round trip:
# 1.6-1.9 KB in flight per CTA, about one 16-byte load per thread (128 x 16 B = 2 KB). Taken: 1.8 KB, the median.
RMS_NORM_IN_FLIGHT_BF16 = 1800


def rms_norm_in_flight(row: dict) -> int:
    """Bytes one CTA of torch's RMSNorm keeps in flight on rows of the row's dtype."""
    return RMS_NORM_IN_FLIGHT_BF16 if row.get("dtype") == "bf16" else RMS_NORM_IN_FLIGHT
TORCH_GROUPED = ("torch._scaled_grouped_mm", "torch._grouped_mm")
# PyTorch 2.11's grouped GEMMs on sm90 pick a CUTLASS tile from M = rows / groups (every expert of the weight tensor),
# N and K (aten/src/ATen/native/cuda/ScaledGroupMM.cu and GroupMM.cu, dispatch on tile size): "small" (M <= 128 or
# N <= 128) a 64 x 128 ping-pong tile; else FP8 with fast accumulation and two of M, N, K >= 2048 a 256 x 128 tile,
# otherwise 128 x 256. Thread-block clusters are 2 x 2 CTAs (FP8) and 2 x 1 (BF16): two along M, so each expert's
# M tiles round up to an even count; 200 rows per expert run on 512 rows of FP8 tiles. The grids are persistent:
# [58, 2, 1] = 116 CTAs for FP8 (four-CTA clusters do not fill all 132 SMs), [132, 1, 1] for BF16 (probe.log).
TORCH_GROUPED_CTAS = {"fp8": 116, "bf16": 132}


def torch_grouped_geometry(row: dict) -> dict:
    """The tile PyTorch's grouped GEMM dispatch picks for a measured row (Kernel tile fields)."""
    m, n, k = row["rows"] // row["groups"], row["n"], row["k"]
    fp8 = row["dtype"] == "fp8"
    if m <= 128 or n <= 128:
        tile = (64, 128)
    elif fp8 and ((m >= 2048 and k >= 2048) or (m >= 2048 and n >= 2048) or (k >= 2048 and n >= 2048)):
        tile = (256, 128)
    else:
        tile = (128, 256)
    return {"tile_rows": tile[0], "tile_cols": tile[1], "m_tile_multiple": 2,
            "max_ctas": TORCH_GROUPED_CTAS["fp8" if fp8 else "bf16"]}


def _is_bmm_attention(row: dict) -> bool:
    return row["family"].startswith("attention") and (row.get("impl") or "").startswith("bmm")


def _bmm_attention(row: dict) -> tuple:
    """Scores S = Q K^T (per sequence: heads x q_len query rows against kv_len keys as the 'weights'),
    P = softmax(S) read and written in BF16, O = P V (V the first v_head_dim of each latent entry)."""
    from rubinperf.kernels import elementwise, gemm

    b, rows_q, kv = row["batch"], row["heads"] * row["q_len"], row["kv_len"]
    d, dv = row["head_dim"], row.get("v_head_dim") or row["head_dim"]
    scores = b * rows_q * kv * 2
    return (gemm(rows_q, kv, d, weight="bf16", groups=b),
            _two_pass(elementwise(2 * scores, scores, ctas=b * rows_q)),
            gemm(rows_q, dv, kv, weight="bf16", groups=b))


def _two_pass(kern: Kernel) -> Kernel:
    """A row-wise reduction that reads its row twice (softmax: max and sum, then normalise; a norm: sum of
    squares, then scale): the second pass waits for the first, two HBM round trips before the writes."""
    return dataclasses.replace(kern, dependent_loads=2)


def elementwise_row(row: dict, reads: int = 1) -> Kernel:
    """A row-wise pass over m rows (nbytes: bytes read + written once), one row per CTA, its input read `reads` times."""
    from rubinperf.kernels import elementwise

    return elementwise(reads * row["nbytes"] / 2, row["nbytes"] / 2, ctas=row.get("m"))


# A MoE layer's weight formats (`dtype` column) and the activations its GEMMs take: MXFP4 experts with MXFP8
# activations are the model's own `fp4` (e2m1 + ue8m0 per 32, FP8 x FP4 MMA); NVFP4 experts take NVFP4
# activations (W4A4); FP8 and BF16 experts take activations of their own format.
MOE_ACTIVATION = {"fp4": "fp8", "nvfp4": "nvfp4", "fp8": "fp8", "bf16": "bf16"}
# A MoE row whose impl ends so takes BF16 activations whatever its weights (W4A16: MXFP4 experts dequantised to BF16
# in the kernel, as aiconfigurator 0.12.0's TensorRT-LLM tables' moe_dtype w4a16_mxfp4; calibration/aiconfigurator/
# extract.py --models appends it to the table's kernel_source).
W4A16_SUFFIX = " w4a16"


def moe_formats(row: dict) -> tuple[str, str]:
    """A MoE row's (weight, activation) formats."""
    w = row["dtype"]
    if (row.get("impl") or "").endswith(W4A16_SUFFIX):
        return w, "bf16"
    return w, MOE_ACTIVATION.get(w, w)
# An mHC sublayer's mixing weight rows (DeepSeek-V4: [24, 4 x hidden], as models/deepseek-v4.1-flash.toml's
# hc_mix_rows) and the bytes of one residual value in the measured TileLang kernels. FP32 routes (specs.precision's
# RESIDUAL_BYTES) cannot be what they move: at MHC_SITES_PER_ROW boundaries a GB300 post row of 4,096 tokens would move
# 1.14 GB, 142 us at the 8 TB/s HBM peak, where it is measured at 94 us (and 8,192 tokens at 179 us against 285 us): the
# tables' rows are below that speed of light at every size over 2,048 tokens. BF16 routes (2 B) put them at 0.6-0.8 of
# the peak, as the other stream kernels; taken for these rows.
MHC_MIX_ROWS, MHC_RESIDUAL_BYTES = 24, 2


# aiconfigurator 0.12.0's mHC module rows (systems/data/<system>/mhc/<framework>/<version>/mhc_module_perf.parquet) time one
# pass at `num_sites` sublayer boundaries: 2 in every table (its DeepSeek-V4 model, sdk/models/deepseek_v4.py, charges one
# mhc_pre and one mhc_post row per layer, a layer having two boundaries), hc_mult 4, sinkhorn_iters 20.
MHC_SITES_PER_ROW = 2


def tilelang_mhc_pass(row: dict) -> str | None:
    """'pre' or 'post' for a row of SGLang's or vLLM's TileLang mHC kernels (their kernel_source names the pass)."""
    impl = row.get("impl") or ""
    if "tilelang" not in impl:
        return None
    return "pre" if impl.endswith(("mhc_pre", "mhc_pre_tilelang")) else "post" if impl.endswith(
        ("mhc_post", "mhc_post_tilelang")) else None


def mhc_tilelang_kernels(row: dict) -> tuple:
    """The TileLang kernels of one mHC module row, as the step graph runs them (kernels.mhc_split) at each of its
    MHC_SITES_PER_ROW boundaries: pre = the pre GEMM + sum of squares and the big-fuse (split sum, Sinkhorn, route
    collapse); post = the post kernel. The RMSNorm of mhc_split is a row of its own in those tables' model."""
    from rubinperf.kernels import mhc_split

    post, gemm, fuse, _norm = mhc_split(row["m"], row["groups"], row["n"], MHC_MIX_ROWS, MHC_RESIDUAL_BYTES)
    one = (gemm, fuse) if tilelang_mhc_pass(row) == "pre" else (post,)
    return one * MHC_SITES_PER_ROW


def cutlass_moe_row(row: dict) -> tuple:
    """A CUTLASS fused MoE row as the step graph's cutlass-moe kernels (kernels.cutlass_moe) after the routing top-k
    (kernels.topk_select over the rank's `groups` experts: ASSUMPTION, the row names no global expert count). The
    router GEMM is not in the row: aiconfigurator's collector (collector/trtllm/collect_moe.py, ai-dynamo/aiconfigurator)
    times moe.forward(hidden_states, router_logits), which takes the logits as given and runs the routing inside."""
    from rubinperf.kernels import cutlass_moe, topk_select

    w, act = moe_formats(row)
    tokens, top_k = row["m"], row["rows"] / row["m"]
    return (topk_select(tokens, row["groups"], top_k),
            *cutlass_moe(tokens, top_k, row["groups"], row["k"], row["n"], weight=w, act=act,
                         touched=row.get("touched") or None))


def moe_kernels(row: dict) -> tuple:
    """A MoE layer on one rank as two grouped GEMMs over its `groups` local experts: the fused gate and up
    projection ([k] -> [2k] per expert of `n` = hidden in, `k` = intermediate width per rank) and the down
    projection ([k] -> [n]); `rows` routed rows on this rank, spread evenly over the experts when
    `touched` is given (balanced routing), else the uniform-routing expectation."""
    from rubinperf.kernels import grouped_gemm

    w, act = moe_formats(row)
    touched = row.get("touched") or None
    return (grouped_gemm(row["rows"], row["groups"], 2 * row["k"], row["n"], weight=w, act=act, touched=touched),
            grouped_gemm(row["rows"], row["groups"], row["n"], row["k"], weight=w, act=act, touched=touched))


def row_kernel(row: dict) -> Kernel:
    """The Kernel of one measured row's work (what its `flops` and `bytes` columns count), from the model's
    own kernel functions; `row_kernels` gives the kernels the measured implementation ran to do it."""
    fam = row["family"]
    if fam in PROBES:
        return empty(drain_loads=0)
    if fam == "copy":
        return copy(row["nbytes"])
    if fam == "elementwise":
        return elementwise_row(row)
    if fam == "stream_ctas":  # a read-only probe of `ctas` CTAs, each with `inflight_bytes` in flight
        return stream_probe(row["nbytes"], row["ctas"], row["inflight_bytes"])
    if fam == "gemm":
        return build("gemm", row, dtype=row["dtype"])
    if fam == "mhc":  # one mHC pass (pre or post) of m tokens over `groups` residual routes of width n
        from rubinperf.kernels import mhc

        return mhc(row["m"], row["groups"], row["n"], MHC_MIX_ROWS, MHC_RESIDUAL_BYTES)
    if fam == "moe":
        raise SpecError("a moe row is two kernels: use rows.moe_kernels")
    if fam == "topk":  # the top k of n candidates in each of m rows
        from rubinperf.kernels import topk_select

        return topk_select(row["m"], row["n"], row["k"])
    if fam == "grouped_gemm":  # rows already multiplied by top-k, as the catalog's tokens
        return build("grouped-gemm", {**row, "tokens": row["rows"]}, dtype=row["dtype"])
    if fam in ("attention_decode", "attention_prefill"):
        return build("attention", row, dtype=row["dtype"], causal=bool(row["causal"]))
    raise SpecError(f"unknown kernel family '{fam}'")
