"""Ranges of assumed spec fields as data ([ranges], loaded strictly), and the low/high bands they give
(rubinperf/analysis/bands.py): estimate --band, compare."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rubinperf.analysis import bands as B
from rubinperf.errors import SpecError
from rubinperf.specs.hardware import load_hardware
from rubinperf.specs.loader import build_spec, read_toml, to_toml
from rubinperf.specs.stack import load_platform, load_stack

REPO = Path(__file__).resolve().parent.parent.parent


def _with_ranges(tmp_path, body: str) -> Path:
    text = (REPO / "hardware" / "gb300-nvl72.toml").read_text().split("\n[ranges]")[0]
    p = tmp_path / "hw.toml"
    p.write_text(text + "\n[ranges]\n" + body)
    return p


def test_the_headline_racks_state_their_assumptions_ranges_as_data():
    vr, gb = load_platform("vr-nvl72"), load_platform("gb300-nvl72")
    # the prose's ranges: SM clock 1.7-2.1 GHz on Rubin, streaming 85-95% of HBM, large GEMMs 65-80% of peak
    assert vr.ranges["sm_clock_hz"] == (1.7e9, 2.1e9)
    assert vr.ranges["hbm_stream_efficiency"] == gb.ranges["hbm_stream_efficiency"] == (0.85, 0.95)
    assert vr.ranges["mma_compute_efficiency"] == gb.ranges["mma_compute_efficiency"] == (0.65, 0.80)
    assert vr.ranges["host_rank_spread"] == (0.0, 0.5)
    for p in (vr, gb):
        for f, (lo, hi) in p.ranges.items():
            assert lo <= getattr(p, f) <= hi, f
        assert p.sources["hardware.ranges"] and p.sources["stack.ranges"]
    # datasheet (preview) figures are NVIDIA's: no range
    assert "fp4_dense_flops_per_s" not in vr.ranges and "hbm_bandwidth_bytes_per_s" not in vr.ranges


@pytest.mark.parametrize("body, culprit", [
    ('hbm_stream_efficiency = [0.85, 0.95]\n', "ranges.source"),
    ('source = "s"\nhbm_stream_efficency = [0.85, 0.95]\n', "not a number field"),
    ('source = "s"\nsm_count = [100, 200]\n', "not a number field"),
    ('source = "s"\nhbm_stream_efficiency = [0.9, 0.95]\n', "low <= efficiency.hbm_stream_efficiency"),
    ('source = "s"\nhbm_stream_efficiency = [0.85]\n', "expected [low, high]"),
    ('source = "s"\nhbm_stream_efficiency = [0.85, 1.5]\n', "at most 1"),
    ('source = "s"\nhbm_stream_efficiency = ["a", 0.95]\n', "expected [low, high]"),
])
def test_a_bad_range_is_one_line_naming_the_key(tmp_path, cli, body, culprit):
    p = _with_ranges(tmp_path, body)
    with pytest.raises(SpecError, match=culprit.replace("[", r"\[")):
        load_hardware(str(p))
    r = cli("estimate", "-H", str(p), "-l", "tp8")
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err


def test_ranges_round_trip_through_to_toml(tmp_path):
    for rec, kind in ((load_hardware("vr-nvl72"), "hardware"), (load_stack("vllm-rubin-nov2026"), "stack")):
        p = tmp_path / f"{kind}.toml"
        p.write_text(to_toml(rec))
        back = build_spec(type(rec), read_toml(p), p)
        assert back == rec and back.ranges == rec.ranges and back.sources["ranges"] == rec.sources["ranges"]


def test_calibrating_a_field_drops_its_range():
    from rubinperf.calibrate.fit import calibrated_toml

    text = calibrated_toml(REPO / "hardware" / "gb300-nvl72.toml", {"hbm_stream_efficiency": 0.97}, "fitted here")
    assert "hbm_stream_efficiency = [" not in text and "nvlink_efficiency = [" in text


def test_bands_combine_the_ends_in_quadrature():
    c = B.combine(100.0, {"a": (90.0, 110.0), "b": (100.0, 120.0), "c": (100.0, 100.0)})
    assert c["low"] == pytest.approx(90.0)
    assert c["high"] == pytest.approx(100 * math.exp(math.hypot(math.log(1.1), math.log(1.2))))
    assert c["drivers"][0].startswith("b ") and len(c["drivers"]) == 2   # c does not move it


def test_estimate_band_brackets_the_best_figure_and_names_its_drivers(cli):
    r = cli("estimate", "--band", "--json")
    assert r.code == 0, r.err
    for rec in json.loads(r.out):
        assert rec["low"] <= rec["tokens_per_s_per_gpu"] <= rec["high"]
        assert rec["step_time_ms_low"] <= rec["step_time_ms"] <= rec["step_time_ms_high"]
        assert rec["band_drivers"] and rec["band_method"].startswith("ends of")
        assert set(rec["terms_basis"]) == {"compute", "memory", "parallelism", "comm", "latency"}
        assert rec["not_modelled"]
    # without --band: the basis and what is left out, no band (estimate stays as fast as it was)
    plain = json.loads(cli("estimate", "--json").out)
    assert all("low" not in rec and rec["terms_basis"] for rec in plain)


def test_the_calibrated_h200_is_banded_by_its_unfitted_assumptions_alone(cli):
    rec = json.loads(cli("estimate", "-H", "h200", "-l", "tp8", "--band", "--json").out)[0]
    assert rec["low"] <= rec["tokens_per_s_per_gpu"] <= rec["high"]
    # the H200's kernel fields and its PyTorch stack's were fitted: what is left is assumed (the engine's host work,
    # NVLink's per-message latency, the host link), and no fitted field has a range
    fitted = load_platform("h200")
    ranged = set(fitted.ranges)
    assert all(d.split(" ")[0] in ranged for d in rec["band_drivers"])
    assert not ranged & {"hbm_stream_efficiency", "mma_compute_efficiency", "hbm_latency_s", "kernel_launch_graph_s"}
    assert rec["terms_basis"]["compute"] == "calibrated"
    assert B.combine(5.0, {}) == {"low": 5.0, "high": 5.0, "drivers": [],
                                  "band_method": "ends of the assumed fields' ranges, combined in quadrature"}


def test_every_headline_figure_of_compare_carries_a_band(cli):
    r = cli("compare", "--json", "--max-batch", "512")
    assert r.code == 0, r.err
    recs = json.loads(r.out)
    assert {x["metric"] for x in recs} == {"peak", "interactivity", "single_user"}
    for x in recs:
        if not x["reachable"]:
            continue
        key = x["band_of"]
        assert x["low"] <= x[key] <= x["high"], x["metric"]
        assert x["band_drivers"]
        if x["hardware"] != x["baseline"]:
            assert x["ratio_low"] <= x["ratio"] <= x["ratio_high"]
    out = cli("compare", "--max-batch", "512").out
    assert "(low-high)" in out


def test_pareto_frontier_points_carry_a_band(cli):
    r = cli("pareto", "--json", "--frontier-only", "-H", "vr-nvl72", "--max-batch", "256")
    assert r.code == 0, r.err
    recs = json.loads(r.out)
    assert recs and all(x["low"] <= x["tokens_per_s_per_gpu"] <= x["high"] for x in recs)
    assert all(x["tokens_per_s_per_user_low"] <= x["tokens_per_s_per_user"] <= x["tokens_per_s_per_user_high"]
               for x in recs)


def test_serve_records_carry_bands_on_throughput_tpot_and_ttft(cli):
    r = cli("serve", "-H", "gb300-nvl72", "-c", "4,64", "--json")
    assert r.code == 0, r.err
    for x in json.loads(r.out):
        assert x["low"] <= x["total_tokens_per_s_per_gpu"] <= x["high"] and x["low"] < x["high"]
        assert x["median_tpot_ms_low"] <= x["median_tpot_ms"] <= x["median_tpot_ms_high"]
        assert x["mean_ttft_ms_low"] <= x["mean_ttft_ms"] <= x["mean_ttft_ms_high"]
        assert x["not_modelled"] and x["terms_basis"]


def test_a_field_set_on_the_command_line_loses_its_range():
    from rubinperf.specs.overrides import apply_overrides

    hw = load_platform("vr-nvl72")
    new = apply_overrides(["hbm_stream_efficiency=0.99"], hardware=hw)["hardware"]
    assert "hbm_stream_efficiency" not in new.ranges and "nvlink_efficiency" in new.ranges


def test_every_bundled_rack_and_stack_states_ranges_for_its_assumptions():
    from rubinperf.specs.loader import bundled_names

    for kind, load in (("hardware", load_hardware), ("stack", load_stack)):
        for name in bundled_names(kind):
            rec = load(name)
            assert rec.ranges and rec.sources["ranges"].startswith("The range of each assumed field"), name
    # a field its table's source calls calibrated (fitted) carries no range
    from rubinperf.specs.loader import spec_fields
    from rubinperf.specs.stack import Platform

    meta = {f.name: f.metadata for f in spec_fields(Platform)}
    for name in bundled_names("hardware"):
        for stack in bundled_names("stack"):
            p = load_platform(name, stack)
            for f in p.ranges:
                listed = B.fitted_fields(p.sources[f"{meta[f]['spec']}.{meta[f]['section']}"])
                assert not listed or f not in listed, (name, stack, f)
    # the fitted lists are read: the H200's PyTorch stack names its fitted fields
    h200 = load_platform("h200")
    assert "mma_compute_efficiency" in B.fitted_fields(h200.sources["stack.efficiency"])
    assert B.term_basis(h200)["compute"] == "calibrated" and B.term_basis(load_platform("vr-nvl72"))["compute"] == "assumed"
