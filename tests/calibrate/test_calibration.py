"""The committed H200 calibration: the measurements under calibration/h200/ against the committed
hardware/h200.toml, through the same kernel functions and roofline the CLI uses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rubinperf.calibrate import fit
from rubinperf.calibrate.plan import read_csv, row_cost
from rubinperf.specs.stack import load_platform

REPO = Path(__file__).resolve().parent.parent.parent
DIR = REPO / "calibration" / "h200"
CSVS = [DIR / "shapes_dobench.csv", DIR / "measurements.csv"]   # the fit's inputs, in the fit command's order
REPEAT = DIR / "shapes_repeat.csv"   # an earlier run of the suite (graph and cold rows): never fitted
README = DIR / "README.md"

# hardware/h200.toml's kernel-model values before calibration (the uncalibrated assumption).
ORIGINAL_H200 = dict(hbm_stream_efficiency=0.90, hbm_latency_s=0.7e-6, stream_bytes_in_flight_per_sm=32768.0,
                     mma_prologue_cycles=3960.0, mma_compute_efficiency=0.71, mma_bytes_in_flight_per_sm=131072.0,
                     grouped_compute_efficiency=0.71, grouped_hbm_efficiency=0.90, attention_compute_efficiency=0.5,
                     kernel_launch_cold_s=4e-6, host_dispatch_s=6.1e-6, tensor_core_dispatch_s=0.0,
                     kernel_launch_graph_s=0.62e-6, kernel_launch_stream_s=3.1e-6, split_k_max=4,
                     split_k_min_depth=1024, wave_quantization=0.0,
                     # one GEMM rate for every operand precision then
                     mma_bf16_compute_efficiency=0.71, mma_fp4_compute_efficiency=0.71,
                     grouped_fp4_compute_efficiency=0.71, grouped_w4a16_compute_efficiency=0.71)


@pytest.fixture(scope="module")
def rows(committed_rows):
    return committed_rows   # the rows of CSVS (tests/calibrate/conftest.py reads the same files, in this order)


@pytest.fixture(scope="module")
def h200():
    return load_platform("h200")


@pytest.fixture(scope="module")
def result(committed_fit):
    return committed_fit[2]   # fit.fit_kernels(rows, h200), made once per session (tests/calibrate/conftest.py)


def test_the_csvs_cover_every_family_in_every_mode(rows):
    fams = {(r["family"], r["mode"]) for r in rows}
    for fam in ("copy", "gemm", "grouped_gemm", "attention_decode", "stream_ctas", "elementwise"):
        assert {(fam, m) for m in ("graph", "eager", "stream", "cold")} <= fams, fam
    assert {("launch", m) for m in ("graph", "eager", "stream", "cold")} <= fams
    assert {("pointer_chase", "eager"), ("attention_prefill", "graph")} <= fams
    assert len(rows) >= 1000


def test_recorded_flops_and_bytes_are_the_models(rows):
    for r in rows:
        c = row_cost(r)
        assert float(c.flops) == pytest.approx(r["flops"], rel=1e-9, abs=0.0), r
        assert float(c.bytes) == pytest.approx(r["bytes"], rel=1e-9, abs=0.0), r


def test_the_committed_values_are_the_fit_of_the_committed_csvs(result, h200):
    for f in result.fitted:
        assert getattr(h200, f) == result.after[f], f
    assert set(result.fitted) == set(fit.KERNEL_FIELDS)


def test_error_on_rows_the_fit_did_not_see(result):
    """The bar on held-out rows, for kernels chained in a graph (how a step runs them) and timed as do_bench times
    them (eager): median |ln(measured/expected)| at most 0.10 and the worst row within 0.5, and no speed of light
    above a measurement."""
    # Held out are whole shape families (a shape never fitted at another size): graph 0.071, eager 0.100, all 0.087
    # when this bar was set (the two-fold split of rows it replaced, which held out other sizes of fitted shapes,
    # gave eager 0.083); the eager bar is 0.11 for that harder split
    assert result.heldout["held_out"] == "whole shape families"
    for mode, bar in (("graph", 0.10), ("eager", 0.11)):
        held = result.heldout["modes"][mode]
        assert held["n"] > 400
        assert held["median_abs_log"] <= bar and held["worst_abs_log"] <= 0.5, mode
    assert result.heldout["median_abs_log"] <= 0.10
    assert result.heldout["max_sol_over_measured"] <= 1.0


def test_a_second_run_of_the_suite_is_predicted_as_well(h200):
    kind, rows = read_csv(REPEAT)
    p = fit.predict(rows, h200)
    assert p["modes"]["graph"]["median_abs_log"] <= 0.10
    assert p["max_sol_over_measured"] <= 1.0


def test_the_probes_look_physical(h200, result):
    # HBM latency under load (Little's law on the streaming probe) is above the unloaded pointer chase (355 ns)
    assert 3.5e-7 < h200.hbm_latency_s < 6e-7
    assert any("pointer chase" in n for n in result.notes)
    # a graph boundary is under a microsecond, a stream's a few; a lone kernel through PyTorch pays tens of them
    assert 0.3e-6 < h200.kernel_launch_graph_s < 1e-6 < h200.kernel_launch_stream_s < 5e-6 < h200.kernel_launch_cold_s
    # the host's dispatch of a call with the GPU busy is read off the rows: a few to tens of microseconds
    assert 3e-6 < h200.host_dispatch_s < 5e-5
    # a GEMM's TMA pipeline keeps more bytes in flight per SM than ordinary loads do
    assert h200.mma_bytes_in_flight_per_sm > h200.stream_bytes_in_flight_per_sm


def test_the_spec_says_it_was_calibrated(h200):
    for spec in ("hardware", "stack"):   # the fit wrote silicon fields to h200.toml, library fields to pytorch-2.11.toml
        src = h200.sources[f"{spec}.efficiency"]
        assert src.startswith("Calibrated") and "H200" in src and "rubinperf calibrate" in src
    assert h200.stack == "pytorch-2.11"
    assert "(calibrated:" in h200.sources["hardware.kernel"] and "(calibrated:" in h200.sources["hardware.memory"]
    assert "mma_prologue_cycles" in h200.sources["stack.kernel"].split("(calibrated:")[1]
    # datasheet peaks are not touched by calibration
    assert h200.bf16_dense_flops_per_s == 0.989e15 and h200.hbm_bandwidth_bytes_per_s == 4.8e12


def test_readme_table_is_the_before_after_of_the_committed_files(rows, h200):
    table = fit.before_after_markdown(rows, dataclasses.replace(h200, **ORIGINAL_H200), h200)
    assert table in README.read_text()


def test_speed_of_light_never_beats_a_measurement(rows, h200):
    timed = fit.timed_rows(rows)
    over = fit.sol(timed, h200) / fit.measured(timed)
    worst = int(np.argmax(over))
    assert over[worst] <= 1.0, timed[worst]
