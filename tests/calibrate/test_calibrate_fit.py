"""`rubinperf calibrate` without a GPU: the plan's costs, the CSV, and the fits on synthetic data.

Synthetic measurements are the model's own expected times on hardware with known
efficiencies and floors, times log-normal noise; the fit must recover those values.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rubinperf.calibrate import fit
from rubinperf.calibrate.measure.collectives import SIZES, message_elements, rank_counts
from rubinperf.calibrate.plan import (KERNEL_COLUMNS, SHAPES_COLUMNS, kernel_plan, read_csv, row_cost, rows_to_csv,
                                      shapes_plan)
from rubinperf.calibrate.rows import modelled, row_kernels
from rubinperf.errors import SpecError
from rubinperf.kernels import attention, copy, gemm, grouped_gemm
from rubinperf.roofline import kernel_time
from rubinperf.specs.hardware import Hardware
from rubinperf.specs.stack import load_platform
from rubinperf.specs.loader import build_spec, tomllib

# A GPU with known physics: every fitted parameter of the kernel model, and the probes' values.
TRUE_KERNELS = dict(hbm_stream_efficiency=0.85, hbm_latency_s=5e-7, stream_bytes_in_flight_per_sm=20000.0,
                    mma_prologue_cycles=3000.0, mma_compute_efficiency=0.66, mma_bytes_in_flight_per_sm=70000.0,
                    grouped_compute_efficiency=0.5, grouped_hbm_efficiency=0.75, attention_compute_efficiency=0.55,
                    kernel_launch_cold_s=1.2e-5, tensor_core_dispatch_s=1.5e-5,
                    # one GEMM rate for every operand precision (what a fit that does not fit them apart assumes)
                    mma_bf16_compute_efficiency=0.66, mma_fp4_compute_efficiency=0.66,
                    # and grouped rates tied as fit.TIED_TO ties them
                    grouped_fp4_compute_efficiency=0.5, grouped_w4a16_compute_efficiency=0.66)
TRUE_GRAPH_LAUNCH_S = 0.7e-6
TRUE_STREAM_LAUNCH_S = 2.8e-6
TRUE_HOST_DISPATCH_S = 9e-6
TRUE_COLLECTIVES = dict(collective_floor_s=6.0e-6, nvlink_latency_s=3.0e-6, nvlink_efficiency=0.78)


@pytest.fixture(scope="module")
def h200():
    return load_platform("h200")


def synthetic_kernels(hw, truth, sigma=0.02, seed=1):
    """The model-shape suite (quick) in every launch mode and the generic suite (quick), 'measured' as
    the model's own expected times on `truth` x log-normal noise; the probes (and each row's host dispatch)
    read the true values."""
    rows = []
    for r in shapes_plan(quick=True) + kernel_plan(quick=True):
        if r["family"] == "launch":
            rows.append({**r, "mode": "graph", "measured_s": TRUE_GRAPH_LAUNCH_S})
            rows.append({**r, "mode": "eager", "measured_s": TRUE_STREAM_LAUNCH_S})
        elif r["family"] == "pointer_chase":
            rows.append({**r, "mode": "eager", "measured_s": 4e-7})
        else:
            rows += [{**r, "mode": m, "host_s": TRUE_HOST_DISPATCH_S} for m in ("graph", "eager", "stream", "cold")]
    truth_hw = dataclasses.replace(hw, kernel_launch_graph_s=TRUE_GRAPH_LAUNCH_S,
                                   kernel_launch_stream_s=TRUE_STREAM_LAUNCH_S, host_dispatch_s=TRUE_HOST_DISPATCH_S,
                                   **truth)
    timed = [r for r in rows if "measured_s" not in r]
    noise = np.exp(np.random.default_rng(seed).normal(0.0, sigma, len(timed)))
    for r, t, z in zip(timed, fit.expected(timed, truth_hw), noise):
        r["measured_s"] = float(t * z)
    return rows


def test_row_cost_is_the_models_kernel_functions():
    assert row_cost({"family": "gemm", "dtype": "fp8", "m": 16, "n": 7168, "k": 2048}) == \
        gemm(16, 7168, 2048, weight="fp8", act="fp8", out="bf16").cost
    assert row_cost({"family": "grouped_gemm", "dtype": "bf16", "rows": 128, "groups": 8, "n": 4096, "k": 7168,
                     "touched": 7, "launches": 1}) == grouped_gemm(128, 8, 4096, 7168, weight="bf16", act="bf16",
                                                                   out="bf16", touched=7).cost
    assert row_cost({"family": "attention_prefill", "dtype": "bf16", "batch": 2, "heads": 32, "kv_heads": 8,
                     "q_len": 4096, "kv_len": 4096, "head_dim": 128, "causal": True}) == \
        attention(2, 32, 4096, 4096, 128, dtype="bf16", kv_heads=8, causal=True).cost
    assert row_cost({"family": "copy", "dtype": "bf16", "nbytes": 1 << 20}) == copy(1 << 20).cost
    launch = row_cost({"family": "launch", "dtype": ""})
    assert launch.launches == 1 and launch.flops == 0 and launch.bytes == 0


def test_plan_covers_the_families_and_shapes():
    plan = kernel_plan()
    fams = {r["family"] for r in plan}
    assert fams == {"launch", "copy", "gemm", "grouped_gemm", "attention_decode", "attention_prefill"}
    ms = {r["m"] for r in plan if r["family"] == "gemm"}
    assert min(ms) == 1 and max(ms) == 16384
    assert {r["dtype"] for r in plan if r["family"] == "gemm"} == {"bf16", "fp8"}
    groups = {r["groups"] for r in plan if r["family"] == "grouped_gemm"}
    assert min(groups) <= 8 and max(groups) >= 128
    assert len(kernel_plan(quick=True)) < len(plan) / 3


def test_csv_round_trip(tmp_path):
    rows = [r for r in synthetic_kernels(load_platform("h200"), TRUE_KERNELS) if r["family"] in
            ("launch", "copy", "gemm", "grouped_gemm", "attention_decode", "attention_prefill")]
    for r in rows:
        c = row_cost(r)
        r.update(impl="synthetic", flops=float(c.flops), bytes=float(c.bytes))
    p = tmp_path / "m.csv"
    p.write_text(rows_to_csv(rows, SHAPES_COLUMNS))
    kind, back = read_csv(p)
    assert kind == "kernels" and len(back) == len(rows)
    assert {b["mode"] for b in back} == {"graph", "eager", "stream", "cold"}
    for a, b in zip(rows, back):
        assert b["measured_s"] == a["measured_s"]
        assert row_cost(b) == row_cost(a)
        assert b["causal"] is bool(a.get("causal", False))


@pytest.mark.parametrize("text, fragment", [
    ("a,b\n1,2\n", "not a calibration CSV"),
    ("family,dtype,measured_s\nlaunch,,1e-6\n", "missing column"),
    (",".join(KERNEL_COLUMNS) + "\n" + "launch" + "," * (len(KERNEL_COLUMNS) - 1) + "\n", "measured_s"),
    (",".join(KERNEL_COLUMNS) + "\n", "no measurements"),
])
def test_bad_csv_is_a_spec_error(tmp_path, text, fragment):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(SpecError, match=fragment):
        read_csv(p)


def test_attention_by_bmm_is_timed_as_its_three_kernels():
    row = {"family": "attention_decode", "impl": "bmm -> softmax -> bmm", "dtype": "bf16", "batch": 2, "heads": 8,
           "kv_heads": 1, "q_len": 6, "kv_len": 1000, "head_dim": 576, "v_head_dim": 512, "launches": 4}
    kernels = row_kernels(row)
    (qk, first), (soft, second), (pv, third), (extra, by_host) = kernels
    # scores: 2 sequences x (8 heads x 6 queries) x 1000 keys over 576 dims; BF16 scores 2 x 48 x 1000 x 2 B
    assert (qk.groups, qk.rows, qk.n, qk.k) == (2, 48, 1000, 576)
    assert float(soft.cost.activation_bytes) == 3 * 2 * 48 * 1000 * 2   # read twice, written once
    assert (pv.groups, pv.rows, pv.n, pv.k) == (2, 48, 512, 1000)
    assert extra.cost.launches == 1 and not by_host   # the 4th kernel: enqueued by the library
    # launched alone, only the first operation waits on the host; the host issues the others while the GPU runs
    assert first and not second and not third
    assert not modelled({"impl": "triton split-KV"}) and modelled(row)


@pytest.fixture(scope="module")
def synthetic_fit(h200):
    """(rows, fit) of the synthetic suite with 2% noise: one fit for the tests that read it (about 10 s)."""
    rows = synthetic_kernels(h200, TRUE_KERNELS)
    return rows, fit.fit_kernels(rows, h200, heldout=False)


def test_kernel_fit_recovers_the_physical_parameters(h200, synthetic_fit):
    rows, res = synthetic_fit
    assert res.after["kernel_launch_graph_s"] == TRUE_GRAPH_LAUNCH_S   # read off the empty kernel
    assert res.after["kernel_launch_stream_s"] == TRUE_STREAM_LAUNCH_S
    assert res.after["host_dispatch_s"] == TRUE_HOST_DISPATCH_S       # read off the rows' host_s
    for f, v in TRUE_KERNELS.items():
        assert f in res.fitted
        assert res.after[f] == pytest.approx(v, rel=0.12), f
    for f in ("hbm_stream_efficiency", "hbm_latency_s", "mma_compute_efficiency", "kernel_launch_cold_s"):
        assert res.after[f] == pytest.approx(TRUE_KERNELS[f], rel=0.03), f
    assert res.loss_after < res.loss_before
    assert res.loss_after < 1.5 * 0.02 * (2 / np.pi) ** 0.5  # about what the noise alone leaves
    # fields no measurement constrains keep their values
    for f in ("vector_compute_efficiency", "nvlink_efficiency", "fused_overlap_rows", "pdl_hidden_s"):
        assert getattr(res.hardware(h200), f) == getattr(h200, f)


def test_cross_validation_reports_error_on_unseen_rows(h200):
    rows = synthetic_kernels(h200, TRUE_KERNELS, sigma=0.05)
    timed = fit.timed_rows(rows)
    folds = fit.folds(timed)
    # whole shape families are held out: no shape (at any size, in any launch mode) is on both sides
    by_shape = {}
    for r, f in zip(timed, folds):
        by_shape.setdefault(fit.shape_family(r), set()).add(f)
    assert all(len(v) == 1 for v in by_shape.values())
    # a kernel family of several shapes is in both halves (its parameters are fitted on the other shapes)
    for lab in {k[0] for k in by_shape}:
        shapes = [v for k, v in by_shape.items() if k[0] == lab]
        assert set().union(*shapes) == ({0, 1} if len(shapes) > 1 else shapes[0])
    # a GEMM at two sizes of one weight shape is one family; another weight shape another
    g = {"family": "gemm", "dtype": "bf16", "impl": "torch.mm", "n": 4096, "k": 4096, "launches": 1}
    assert fit.shape_family({**g, "m": 1}) == fit.shape_family({**g, "m": 4096, "mode": "cold"})
    assert fit.shape_family({**g, "m": 1}) != fit.shape_family({**g, "m": 1, "n": 7168})
    cv = fit.cross_validate(rows, h200, rounds=6, points=13)
    assert cv["held_out"] == "whole shape families" and cv["shape_families"] == len(by_shape)
    assert cv["n"] == len(timed) and set(cv["modes"]) == {"graph", "eager", "stream", "cold"}
    # log-normal noise of 0.05: a median |ln| near 0.05 x 0.674, and no model error beyond it
    assert 0.02 < cv["median_abs_log"] < 0.06
    assert cv["max_sol_over_measured"] < 1.2


def test_kernel_fit_leaves_unmeasured_families_alone(h200):
    rows = [r for r in synthetic_kernels(h200, TRUE_KERNELS, sigma=0.0) if not r["family"].startswith("attention")
            and r["family"] != "grouped_gemm"]
    res = fit.fit_kernels(rows, h200, heldout=False)
    for f in ("attention_compute_efficiency", "grouped_compute_efficiency", "grouped_hbm_efficiency"):
        assert f not in res.fitted and res.after[f] == getattr(h200, f)
        assert any(n.startswith(f) for n in res.notes)
    assert res.after["mma_compute_efficiency"] == pytest.approx(TRUE_KERNELS["mma_compute_efficiency"], rel=0.02)


def test_probes_are_read_not_fitted(synthetic_fit):
    rows, res = synthetic_fit
    probes = [r for r in rows if r["family"] in ("launch", "pointer_chase")]
    assert res.n == len(rows) - len(probes)
    assert any("pointer chase" in n and "400 ns" in n for n in res.notes)


def synthetic_collectives(hw, truth, sigma=0.02, seed=3):
    truth_hw = dataclasses.replace(hw, **truth)
    rng = np.random.default_rng(seed)
    rows = []
    for n in rank_counts(8):
        for coll in ("all_reduce", "all_to_all"):
            for size in SIZES:
                nbytes = message_elements(size, n) * 2
                row = {"collective": coll, "ranks": n, "nbytes": nbytes}
                t = float(kernel_time(fit.collective_kernel(row), truth_hw).expected_s)
                rows.append({**row, "measured_s": t * float(np.exp(rng.normal(0, sigma)))})
    return rows


def test_collective_fit_recovers_latency_efficiency_and_floor(h200):
    rows = synthetic_collectives(h200, TRUE_COLLECTIVES)
    assert {r["ranks"] for r in rows} == {2, 4, 8}
    res = fit.fit_collectives(rows, h200)
    assert res.after["nvlink_efficiency"] == pytest.approx(0.78, rel=0.03)
    assert res.after["collective_floor_s"] == pytest.approx(6.0e-6, rel=0.15)
    assert res.after["nvlink_latency_s"] == pytest.approx(3.0e-6, rel=0.15)
    assert res.loss_after < res.loss_before
    groups = fit.collective_groups(rows, res.hardware(h200))
    assert len(groups) == 6
    for g in groups:  # per collective and rank count: floor + hops x latency, and the link efficiency
        hops = 2 if g["collective"] == "all_reduce" else 1
        assert g["intercept_s"] == pytest.approx(6.0e-6 + hops * 3.0e-6, rel=0.2)
        assert g["nvlink_efficiency"] == pytest.approx(0.78, rel=0.05)


def test_collective_fit_with_one_hop_count_keeps_the_latency(h200):
    rows = [r for r in synthetic_collectives(h200, TRUE_COLLECTIVES, sigma=0.0) if r["collective"] == "all_to_all"]
    res = fit.fit_collectives(rows, h200)
    assert res.after["nvlink_latency_s"] == h200.nvlink_latency_s
    # the floor absorbs the difference between the true and the kept latency
    assert res.after["collective_floor_s"] == pytest.approx(6.0e-6 + 3.0e-6 - h200.nvlink_latency_s, rel=0.05)
    assert res.after["nvlink_efficiency"] == pytest.approx(0.78, rel=0.02)


def test_rank_counts_and_message_elements():
    assert rank_counts(8) == [2, 4, 8]
    assert rank_counts(6) == [2, 4, 6]
    assert rank_counts(1) == [] and rank_counts(1, min_ranks=1) == [1]
    assert message_elements(8, 8) == 8 and message_elements(4096, 3) % 3 == 0
    assert min(SIZES) <= 8 and max(SIZES) >= 256 * 2 ** 20


def test_calibrated_toml_keeps_every_other_line(h200, tmp_path):
    from rubinperf.specs.stack import Stack

    src = tmp_path / "hw.toml"
    original = open(h200.path).read()
    src.write_text(original)
    hw_part, stack_part = fit.split_updates({"hbm_stream_efficiency": 0.8123, "kernel_launch_graph_s": 0.7e-6,
                                             "mma_prologue_cycles": 2500.0, "split_k_max": 8})
    assert set(hw_part) == {"hbm_stream_efficiency", "kernel_launch_graph_s"} and set(stack_part) == {"mma_prologue_cycles", "split_k_max"}
    text = fit.calibrated_toml(src, hw_part, 'Calibrated "x"')
    hw = build_spec(Hardware, tomllib.loads(text), src)
    assert hw.hbm_stream_efficiency == 0.812 and hw.kernel_launch_graph_s == 0.7e-6
    assert hw.sources["efficiency"] == 'Calibrated "x"'
    assert "(calibrated: kernel_launch_graph_s" in hw.sources["kernel"]
    changed = [(a, b) for a, b in zip(original.splitlines(), text.splitlines()) if a != b]
    assert len(changed) == 4 and len(original.splitlines()) == len(text.splitlines())
    for f in dataclasses.fields(Hardware):
        if f.name not in ("hbm_stream_efficiency", "kernel_launch_graph_s", "sources", "path"):
            assert getattr(hw, f.name) == getattr(h200.hardware_spec(), f.name), f.name
    # the kernel-library fields go into the stack file, the same way
    ssrc = tmp_path / "st.toml"
    stack_original = open(h200.stack_path).read()
    ssrc.write_text(stack_original)
    stext = fit.calibrated_toml(ssrc, stack_part, 'Calibrated "y"', kind="stack")
    st = build_spec(Stack, tomllib.loads(stext), ssrc)
    assert st.mma_prologue_cycles == 2500.0 and st.split_k_max == 8 and st.sources["efficiency"] == 'Calibrated "y"'
    assert "(calibrated: mma_prologue_cycles, split_k_max" in st.sources["kernel"]
    changed = [(a, b) for a, b in zip(stack_original.splitlines(), stext.splitlines()) if a != b]
    assert len(changed) == 4
    with pytest.raises(SpecError, match="no line for"):
        fit.calibrated_toml(src, {"no_such_field": 0.5}, "y")
    with pytest.raises(SpecError, match="not a hardware field"):
        fit.calibrated_toml(src, {"split_k_max": 2}, "y")


def test_calibrated_toml_is_checked_by_the_strict_loader(h200, tmp_path):
    src = tmp_path / "hw.toml"
    src.write_text(open(h200.path).read())
    with pytest.raises(SpecError, match="at most 1.0"):
        fit.calibrated_toml(src, {"hbm_stream_efficiency": 1.5}, "x")


def test_a_row_that_fails_on_the_gpu_is_logged_and_skipped():
    import io
    import types

    from rubinperf.calibrate.measure.bench import measure_or_skip, shape_text

    calls = []
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: calls.append("sync"),
                                                             empty_cache=lambda: calls.append("empty")))
    log = io.StringIO()
    assert measure_or_skip(torch, lambda: 42, "[1/2] gemm fp8 m=1", log) == 42
    assert calls == ["empty"] and log.getvalue() == ""

    def boom():
        raise RuntimeError("no kernel for this shape\nmore detail")

    assert measure_or_skip(torch, boom, "[2/2] gemm fp8 m=2", log) is None
    assert log.getvalue() == "[2/2] gemm fp8 m=2: SKIPPED (RuntimeError: no kernel for this shape)\n"
    assert calls == ["empty", "sync", "empty"]
    assert shape_text({"family": "gemm", "dtype": "fp8", "m": 16, "n": 4096, "k": None, "launches": 1}) == "m=16 n=4096"


def test_precision_rates_are_fitted_apart_only_when_asked(h200):
    truth = {**TRUE_KERNELS, "mma_bf16_compute_efficiency": 0.8}
    rows = [r for r in synthetic_kernels(h200, truth, sigma=0.0) if r["family"] == "gemm" or r["family"] in
            ("launch", "pointer_chase")]
    apart = fit.fit_kernels(rows, h200, fields=fit.FIT_FIELDS + fit.PRECISION_FIELDS, heldout=False)
    assert apart.after["mma_bf16_compute_efficiency"] == pytest.approx(0.8, rel=0.03)
    assert apart.after["mma_compute_efficiency"] == pytest.approx(0.66, rel=0.03)
    # not asked: one rate for all, written to every precision's field
    tied = fit.fit_kernels(rows, h200, heldout=False)
    assert tied.after["mma_bf16_compute_efficiency"] == tied.after["mma_compute_efficiency"]
    assert "mma_bf16_compute_efficiency" in tied.fitted


def test_grouped_precision_rates_are_fitted_apart_only_when_asked():
    # TensorRT-LLM's MoE shapes on GB200 of three MMA precisions (FP8 x FP8, W4A4 NVFP4, W4A16 MXFP4 -> BF16),
    # 'measured' as the model's own times on a stack with a rate of each
    from rubinperf.calibrate.rows import moe_formats

    hw = load_platform("gb200-nvl72", "trtllm-blackwell")
    truth = dataclasses.replace(hw, grouped_compute_efficiency=0.3, grouped_fp4_compute_efficiency=0.15,
                                grouped_w4a16_compute_efficiency=0.08)
    rows = [r for r in read_csv(Path(__file__).parents[2] / "calibration/aiconfigurator/gb200-trtllm-models.csv")[1]
            if r["family"] == "moe" and r["rows"] >= 1024 and moe_formats(r) in
            (("fp8", "fp8"), ("nvfp4", "nvfp4"), ("fp4", "bf16"))]
    for r, t in zip(rows, fit.expected(rows, truth)):
        r["measured_s"] = float(t)
    # (the rates alone: with every field free the coordinate search stalls short of the NVFP4 rate, which trades
    # against the HBM rate on rows near the compute-memory crossover)
    apart = fit.fit_kernels(rows, hw, fields=("grouped_compute_efficiency", *fit.PRECISION_FIELDS), heldout=False)
    for f in ("grouped_compute_efficiency", "grouped_fp4_compute_efficiency", "grouped_w4a16_compute_efficiency"):
        assert apart.after[f] == pytest.approx(getattr(truth, f), rel=0.03), f
    # not asked: FP4 x FP4 at the grouped rate, BF16 at the GEMM rate (the rates they ran at before)
    tied = fit.fit_kernels(rows, hw, heldout=False)
    assert tied.after["grouped_fp4_compute_efficiency"] == tied.after["grouped_compute_efficiency"]
    assert tied.after["grouped_w4a16_compute_efficiency"] == tied.after["mma_compute_efficiency"]
    assert {"grouped_fp4_compute_efficiency", "grouped_w4a16_compute_efficiency"} <= set(tied.fitted)
