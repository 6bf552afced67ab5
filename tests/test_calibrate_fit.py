"""`rubinperf calibrate` without a GPU: the plan's costs, the CSV, and the fits on synthetic data.

Synthetic measurements are the model's own expected times on hardware with known
efficiencies and floors, times log-normal noise; the fit must recover those values.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rubinperf.calibrate import fit
from rubinperf.calibrate.collectives import SIZES, message_elements, rank_counts
from rubinperf.calibrate.plan import KERNEL_COLUMNS, kernel_plan, read_csv, row_cost, rows_to_csv
from rubinperf.errors import SpecError
from rubinperf.kernels import attention, copy, gemm, grouped_gemm
from rubinperf.roofline import kernel_time
from rubinperf.specs.hardware import Hardware, load_hardware
from rubinperf.specs.loader import build_spec, tomllib

TRUE_KERNELS = dict(bf16_compute_efficiency=0.81, fp8_compute_efficiency=0.62, hbm_efficiency=0.91,
                    kernel_launch_floor_s=2.3e-6)
TRUE_COLLECTIVES = dict(collective_floor_s=6.0e-6, nvlink_latency_s=3.0e-6, nvlink_efficiency=0.78)


@pytest.fixture(scope="module")
def h200():
    return load_hardware("h200")


def synthetic_kernels(hw, truth, sigma=0.03, seed=1):
    rows = kernel_plan()
    touched_rng = np.random.default_rng(seed + 1)
    for r in rows:  # the benchmark records the experts a random routing actually touched
        if r["family"] == "grouped_gemm":
            r["touched"] = int(np.unique(touched_rng.integers(0, r["groups"], r["rows"])).size)
    e = fit.expected(rows, dataclasses.replace(hw, **truth))
    noise = np.exp(np.random.default_rng(seed).normal(0.0, sigma, len(rows)))
    for r, t, z in zip(rows, e, noise):
        r["measured_s"] = float(t * z)
    return rows


def test_row_cost_is_the_models_kernel_functions():
    assert row_cost({"family": "gemm", "dtype": "fp8", "m": 16, "n": 7168, "k": 2048}) == \
        gemm(16, 7168, 2048, weight="fp8", act="fp8", out="bf16")
    assert row_cost({"family": "grouped_gemm", "dtype": "bf16", "rows": 128, "groups": 8, "n": 4096, "k": 7168,
                     "touched": 7, "launches": 1}) == grouped_gemm(128, 8, 4096, 7168, weight="bf16", act="bf16",
                                                                   out="bf16", touched=7)
    assert row_cost({"family": "attention_prefill", "dtype": "bf16", "batch": 2, "heads": 32, "kv_heads": 8,
                     "q_len": 4096, "kv_len": 4096, "head_dim": 128, "causal": True}) == \
        attention(2, 32, 4096, 4096, 128, dtype="bf16", kv_heads=8, causal=True)
    assert row_cost({"family": "copy", "dtype": "bf16", "nbytes": 1 << 20}) == copy(1 << 20)
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
    rows = synthetic_kernels(load_hardware("h200"), TRUE_KERNELS)
    for r in rows:
        c = row_cost(r)
        r.update(impl="synthetic", flops=float(c.flops), bytes=float(c.bytes))
    p = tmp_path / "m.csv"
    p.write_text(rows_to_csv(rows, KERNEL_COLUMNS))
    kind, back = read_csv(p)
    assert kind == "kernels" and len(back) == len(rows)
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


@pytest.mark.parametrize("loss, noise_level", [("abs", 0.03 * (2 / np.pi) ** 0.5), ("sq", 0.03 ** 2)])
def test_kernel_fit_recovers_known_efficiencies_and_floor(h200, loss, noise_level):
    rows = synthetic_kernels(h200, TRUE_KERNELS)
    res = fit.fit_kernels(rows, h200, loss=loss)
    assert set(res.fitted) == set(fit.KERNEL_FIELDS)
    for f, v in TRUE_KERNELS.items():
        assert res.after[f] == pytest.approx(v, rel=0.04), f
    assert res.loss_after < res.loss_before
    assert res.loss_after < 1.2 * noise_level  # what the noise alone leaves
    # fields no measurement constrains keep their values
    for f in ("fp4_compute_efficiency", "fp8_fp4_compute_efficiency", "fp32_compute_efficiency"):
        assert getattr(res.hardware(h200), f) == getattr(h200, f)


def test_kernel_fit_leaves_unmeasured_precision_alone(h200):
    rows = [r for r in synthetic_kernels(h200, TRUE_KERNELS, sigma=0.0) if r.get("dtype") != "fp8"]
    res = fit.fit_kernels(rows, h200)
    assert "fp8_compute_efficiency" not in res.fitted
    assert res.after["fp8_compute_efficiency"] == h200.fp8_compute_efficiency
    assert any("fp8_compute_efficiency" in n for n in res.notes)
    assert res.after["bf16_compute_efficiency"] == pytest.approx(TRUE_KERNELS["bf16_compute_efficiency"], rel=0.01)


def test_empty_kernel_is_reported_not_fitted(h200):
    rows = synthetic_kernels(h200, TRUE_KERNELS, sigma=0.0)
    launch = next(r for r in rows if r["family"] == "launch")
    launch["measured_s"] = 0.5e-6  # an empty kernel: the launch alone, far below the whole floor
    res = fit.fit_kernels(rows, h200)
    assert res.after["kernel_launch_floor_s"] == pytest.approx(TRUE_KERNELS["kernel_launch_floor_s"], rel=0.01)
    assert res.n == len(rows) - 1 and any(n.startswith("launch") for n in res.notes)


def synthetic_collectives(hw, truth, sigma=0.02, seed=3):
    truth_hw = dataclasses.replace(hw, **truth)
    rng = np.random.default_rng(seed)
    rows = []
    for n in rank_counts(8):
        for coll in ("all_reduce", "all_to_all"):
            for size in SIZES:
                nbytes = message_elements(size, n) * 2
                row = {"collective": coll, "ranks": n, "nbytes": nbytes}
                t = float(kernel_time(fit.collective_cost(row), truth_hw).expected_s)
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
    src = tmp_path / "hw.toml"
    original = open(h200.path).read()
    src.write_text(original)
    text = fit.calibrated_toml(src, {"hbm_efficiency": 0.8123, "kernel_launch_floor_s": 2.5e-6}, 'Calibrated "x"')
    hw = build_spec(Hardware, tomllib.loads(text), src)
    assert hw.hbm_efficiency == 0.812 and hw.kernel_launch_floor_s == 2.5e-6
    assert hw.sources["efficiency"] == 'Calibrated "x"'
    changed = [(a, b) for a, b in zip(original.splitlines(), text.splitlines()) if a != b]
    assert len(changed) == 3 and len(original.splitlines()) == len(text.splitlines())
    for f in dataclasses.fields(Hardware):
        if f.name not in ("hbm_efficiency", "kernel_launch_floor_s", "sources", "path"):
            assert getattr(hw, f.name) == getattr(h200, f.name), f.name
    with pytest.raises(SpecError, match="no line for"):
        fit.rewrite_efficiency("[efficiency]\nsource = 'x'\n", {"hbm_efficiency": 0.5}, "y")


def test_calibrated_toml_is_checked_by_the_strict_loader(h200, tmp_path):
    src = tmp_path / "hw.toml"
    src.write_text(open(h200.path).read())
    with pytest.raises(SpecError, match="at most 1.0"):
        fit.calibrated_toml(src, {"hbm_efficiency": 1.5}, "x")
