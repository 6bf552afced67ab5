"""The committed H200 calibration: measurements (calibration/h200/measurements.csv) against the
committed hardware/h200.toml, through the same kernel functions and roofline the CLI uses."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from rubinperf.calibrate import fit
from rubinperf.calibrate.plan import read_csv, row_cost
from rubinperf.specs.hardware import load_hardware

REPO = Path(__file__).resolve().parent.parent
CSV = REPO / "calibration" / "h200" / "measurements.csv"
README = REPO / "calibration" / "h200" / "README.md"

# hardware/h200.toml's [efficiency] values before calibration (the uncalibrated assumption).
ORIGINAL_H200 = dict(bf16_compute_efficiency=0.75, fp8_compute_efficiency=0.70, hbm_efficiency=0.88,
                     kernel_launch_floor_s=4.0e-6)


@pytest.fixture(scope="module")
def rows():
    kind, rows = read_csv(CSV)
    assert kind == "kernels"
    return rows


@pytest.fixture(scope="module")
def h200():
    return load_hardware("h200")


def test_the_csv_covers_every_family_on_an_h200(rows):
    fams = {r["family"] for r in rows}
    assert fams == {"launch", "copy", "gemm", "grouped_gemm", "attention_decode", "attention_prefill"}
    assert {r["dtype"] for r in rows if r["family"] == "gemm"} == {"bf16", "fp8"}
    assert len(rows) >= 100


def test_recorded_flops_and_bytes_are_the_models(rows):
    for r in rows:
        c = row_cost(r)
        assert float(c.flops) == pytest.approx(r["flops"], rel=1e-9, abs=0.0), r
        assert float(c.bytes) == pytest.approx(r["bytes"], rel=1e-9, abs=0.0), r


def test_calibrated_expected_times_match_the_measurements(rows, h200):
    err = np.abs(fit.log_ratios(rows, h200))
    assert np.median(err) < 0.15


def test_speed_of_light_never_beats_a_measurement(rows, h200):
    over = fit.sol(rows, h200) / fit.measured(rows)
    worst = int(np.argmax(over))
    assert over[worst] <= 1.03, rows[worst]


def test_the_spec_says_it_was_calibrated(h200):
    src = h200.sources["efficiency"]
    assert src.startswith("Calibrated") and "H200" in src and "rubinperf calibrate" in src
    # datasheet peaks are not touched by calibration
    assert h200.bf16_dense_flops_per_s == 0.989e15 and h200.hbm_bandwidth_bytes_per_s == 4.8e12


def test_the_committed_values_are_the_fit_of_the_committed_csv(rows, h200):
    res = fit.fit_kernels(rows, h200)
    for f in res.fitted:
        assert getattr(h200, f) == res.after[f], f


def test_readme_table_is_the_before_after_of_the_committed_files(rows, h200):
    table = fit.before_after_markdown(rows, dataclasses.replace(h200, **ORIGINAL_H200), h200)
    text = README.read_text()
    assert table in text
    for name, value in ORIGINAL_H200.items():  # the README keeps the original values too
        assert re.search(rf"{name}\b.*{re.escape(f'{value:g}')}", text), name
