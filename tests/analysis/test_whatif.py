"""A what-if as differences (`estimate --set ... --baseline`, rubinperf.analysis.whatif)."""

from __future__ import annotations

import json

import pytest

from rubinperf.analysis.whatif import diff_kernels, term_moved


def _row(name, time_ms, **terms):
    full = {t: 0.0 for t in ("compute", "memory", "parallelism", "comm", "latency")}
    full.update(terms)
    return {"kernel": name, "part": "target", "time_ms": time_ms, "terms_ms": full, "bound": "memory"}


def test_term_moved_names_the_largest_change():
    before = _row("a", 3.0, compute=1.0, memory=2.0, latency=0.5)
    after = _row("a", 2.5, compute=1.1, memory=1.5, latency=0.5)
    assert term_moved(before, after) == ("memory", pytest.approx(-0.5))
    assert term_moved(before, before) == ("", 0.0)


def test_diff_kernels_by_hand():
    before = [_row("x", 1.0, memory=1.0), _row("y", 2.0, compute=2.0), _row("gone", 0.5, latency=0.5)]
    after = [_row("x", 0.8, memory=0.8), _row("y", 2.0, compute=2.0), _row("new", 0.25, latency=0.25)]
    rows = {r["kernel"]: r for r in diff_kernels(before, after)}
    assert rows["x"]["delta_ms"] == pytest.approx(-0.2) and rows["x"]["delta_frac"] == pytest.approx(-0.2)
    assert rows["x"]["term"] == "memory"
    assert rows["y"]["delta_ms"] == 0 and rows["y"]["term"] == ""
    assert rows["gone"]["after_ms"] == 0 and rows["gone"]["delta_ms"] == pytest.approx(-0.5)
    assert rows["new"]["before_ms"] == 0 and rows["new"]["delta_frac"] is None
    order = [r["kernel"] for r in diff_kernels(before, after)]
    assert order[0] == "gone" and order[-1] == "y"   # largest change first


def test_baseline_json_sums_to_the_step(cli):
    res = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--set", "hbm_bandwidth=+20%", "--baseline", "--json")
    assert res.code == 0, res
    diffs = json.loads(res.out)
    (d,) = diffs
    assert d["sets"] == ["hbm_bandwidth=+20%"]
    step = d["step"]["step_time_ms"]
    assert step["after"] < step["before"]            # more bandwidth never makes the step slower
    # every kernel that moved, moved through its memory or parallelism term (only the HBM rate changed)
    moved = [k for k in d["kernels"] if abs(k["delta_ms"]) > 1e-9]
    assert moved and all(k["term"] in ("memory", "parallelism") for k in moved)
    assert all(k["delta_ms"] <= 1e-12 for k in d["kernels"])
    # the GPU time's change is the kernels' changes summed (the step adds kernels; host time did not move)
    gpu = d["step"]["gpu_time_ms"]["delta"]
    assert d["step"]["exposed_host_time_ms"]["delta"] == pytest.approx(0, abs=1e-12)
    assert sum(k["delta_ms"] for k in d["kernels"]) == pytest.approx(gpu, rel=1e-6)


def test_baseline_without_set_is_one_line_exit_2(cli):
    res = cli("estimate", "--baseline")
    assert res.code == 2 and "--set" in res.err and "\n" not in res.err.strip()


def test_baseline_table_names_the_term(cli):
    res = cli("estimate", "-H", "vr-nvl72", "-l", "tp8", "--set", "hbm_bandwidth=+20%", "--baseline", "--wide")
    out = res.out
    assert res.code == 0 and "before and after" in out and "term moved" in out and "memory" in out


def test_compare_baseline_moves_only_the_rack_named(cli):
    res = cli("compare", "--set", "vr-nvl72:hbm_bandwidth=+20%", "--baseline", "--json", "--kernels", "0")
    assert res.code == 0, res
    diffs = json.loads(res.out)
    assert {d["hardware"] for d in diffs} == {"gb300-nvl72", "vr-nvl72"}
    for d in diffs:
        tps = d["point"]["tokens_per_s_per_gpu"]
        if d["hardware"] == "gb300-nvl72":   # the what-if names the other rack: nothing moves
            assert tps["delta"] == 0 and all(k["delta_ms"] == 0 for k in d["kernels"])
        else:                                # more HBM bandwidth never lowers throughput at a point
            assert tps["delta"] >= 0
    assert any(d["point"]["tokens_per_s_per_gpu"]["delta"] > 0 for d in diffs if d["hardware"] == "vr-nvl72")
