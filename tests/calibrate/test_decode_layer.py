"""The V4.1-shaped decode layer measured on the H200 (calibration/h200/layer) against the model, which never saw it."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from rubinperf.calibrate.layer import LAYER_ROWS, compare, layer_ops, layer_rows_as_run, read_layer_csv
from rubinperf.calibrate.rows import KERNELS_PER_CALL, row_kernels
from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.roofline import kernel_time
from rubinperf.specs.stack import load_platform

LAYER_DIR = Path(__file__).resolve().parent.parent.parent / "calibration" / "h200" / "layer"


@pytest.fixture(scope="module")
def measured():
    return read_layer_csv()


@pytest.fixture(scope="module")
def result(measured):
    return compare(load_platform("h200"), measured)


def test_the_layer_is_the_models_shapes():
    ops = layer_ops(16)
    assert [o["op"] for o in ops][:4] == ["attn_norm", "q_down", "q_norm", "q_up"]
    q_up = next(o for o in ops if o["op"] == "q_up")
    assert (q_up["m"], q_up["n"], q_up["k"]) == (16, 64 * 512, 1280)   # 64 heads of 512 from the 1280-wide q rank
    experts = next(o for o in ops if o["op"] == "experts_up")
    assert (experts["rows"], experts["groups"], experts["n"], experts["k"]) == (16 * 6, 384, 2 * 2304, 5120)


def test_every_row_count_was_measured_alone_and_without_each_op(measured):
    for r in LAYER_ROWS:
        kinds = {(m["kind"], m["op"]) for m in measured if m["rows"] == r}
        for o in layer_ops(r):
            assert ("alone", o["op"]) in kinds and ("without", o["op"]) in kinds, (r, o["op"])
        assert ("layer", "") in kinds and ("eager", "") in kinds


def test_the_unseen_layer_lands_within_15_percent_at_every_row_count(result):
    """The layer in one graph, 1 to 384 rows, against the sum of its kernels each timed in a graph: within 15%."""
    assert [r["rows"] for r in result] == list(LAYER_ROWS)
    for r in result:
        assert 1 / 1.15 <= r["measured_s"] / r["expected_s"] <= 1.15, r["rows"]


def test_the_bf16_norms_bytes_in_flight_are_read_off_its_cold_runs():
    """rows.RMS_NORM_IN_FLIGHT_BF16 from the norm kernel timed alone with its row in HBM: the time per element of
    the row (6 bytes: read twice, written once) at the H200's HBM latency is Little's law's bytes in flight."""
    from rubinperf.calibrate.rows import RMS_NORM_IN_FLIGHT_BF16

    rows = list(csv.DictReader(open(LAYER_DIR / "layer_kernels.csv")))
    widths = {"attn_norm": 5120, "q_norm": 1280}
    latency = load_platform("h200").hbm_latency_s
    got = []
    for r in ("1", "4", "16", "64"):
        t = {w: statistics.median(float(x["duration_us"]) for x in rows
                                  if x["rows"] == r and x["what"] == "alone_cold" and x["op"] == op)
             for op, w in widths.items()}
        slope = (t[5120] - t[1280]) * 1e-6 / (5120 - 1280)
        got.append(6 * latency / slope)
    assert min(got) <= RMS_NORM_IN_FLIGHT_BF16 <= max(got)
    assert 1500 < min(got) < max(got) < 2100   # about one 16-byte load per thread of 128 in flight


def test_the_ops_measured_alone_add_up_to_the_layer_but_for_their_boundaries(result):
    # alone, an operation's inputs partly stay in L2 and it follows its own copy: the sum is a little under the layer
    for r in result:
        assert 0.85 < r["alone_sum_s"] / r["measured_s"] <= 1.05, r["rows"]


def test_the_profiled_layer_has_its_kernels_and_sub_microsecond_gaps():
    rows = list(csv.DictReader(open(LAYER_DIR / "layer_kernels.csv")))
    layer = [r for r in rows if r["what"] == "layer" and r["rows"] == "1"]
    assert len(layer) == 29 * 8 * 5          # 29 kernels a layer, 8 copies a graph, 5 replays profiled
    gaps = [float(r["gap_us"]) for r in layer if r["gap_us"]]
    assert 0.2 < statistics.median(gaps) < 1.0
    # a one-CTA RMSNorm over a row from HBM takes about twice its time with the row in L2
    norm = [float(r["duration_us"]) for r in rows if r["rows"] == "1" and r["op"] == "attn_norm"]
    assert norm


def test_layer_rows_carry_the_kernels_pytorch_ran(measured):
    ops = {o["op"]: o for o in layer_rows_as_run(1, measured)}
    assert ops["topk"]["launches"] == 2 and ops["experts_up"]["launches"] == 2 and ops["q_down"]["launches"] == 1
    # the extra kernel is a kernel boundary of its own in the model
    assert len(row_kernels(ops["topk"])) == 2


def test_torch_topk_is_a_radix_select_of_dependent_passes():
    from rubinperf.calibrate.rows import torch_topk_passes

    # PyTorch's radix select takes RADIX_BITS = 2 of the key per pass: 16-bit BF16 keys in 8 passes, FP32 in 16
    assert (torch_topk_passes("bf16"), torch_topk_passes("fp32")) == (8, 16)
    row = next(o for o in layer_ops(4) if o["op"] == "topk")
    (select, _), (sort, _) = row_kernels(row)
    assert select.dependent_loads == 8 and select.ctas == 4   # one CTA per row, each pass waiting on the last
    assert sort.cost.launches == 1                              # then the sort of the k results, a kernel of its own


def test_an_implementations_kernel_count_adds_boundaries():
    # FlashInfer's TRT-LLM MoE runner: routing, permute + GEMM1, GEMM2, finalize: two launches beyond the two GEMMs
    row = {"family": "moe", "dtype": "fp4", "m": 16, "n": 4096, "k": 2048, "groups": 256, "rows": 96, "touched": 96,
           "impl": "sglang_mxfp4_flashinfer_trtllm_moe", "mode": "graph"}
    assert KERNELS_PER_CALL[row["impl"]] == 4
    kernels = row_kernels(row)
    assert [k.family for k, _ in kernels] == ["grouped_gemm", "grouped_gemm", "stream"]
    assert kernels[2][0].cost.launches == 2 and float(kernels[2][0].cost.hbm_bytes) == 0


def test_pdl_never_hides_more_than_the_boundary_and_prologue(pinned_gb300):
    import dataclasses

    k = Kernel("stream", Cost(activation_bytes=1024, launches=1))
    # a streaming kernel: PDL hides at most the 0.5 us boundary; the fill (1 load + 1 drain) x 0.8 us stays
    huge = dataclasses.replace(pinned_gb300, pdl_hidden_s=1e-3)
    assert kernel_time(k, huge).latency_s == pytest.approx(2 * 0.8e-6, rel=1e-12)
    none = dataclasses.replace(pinned_gb300, pdl_hidden_s=0.0)
    assert kernel_time(k, none).latency_s == pytest.approx(0.5e-6 + 2 * 0.8e-6, rel=1e-12)
