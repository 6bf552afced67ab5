"""`pareto` and `compare` with --serving: disagg is today's output, agg and both add the aggregated frontier."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import invoke

BASE = ["-H", "gb300-nvl72", "-w", "chat-8k1k", "-l", "tp4", "-l", "dep16"]


def _ok(args):
    got = invoke(args, env={"COLUMNS": "100"})
    assert got.exit_code == 0, got.output
    return got.output


def test_disagg_is_the_default_output():
    assert _ok(["pareto", *BASE, "--no-chart"]) == _ok(["pareto", *BASE, "--no-chart", "--serving", "disagg"])


def test_both_json_carries_each_serving_and_its_own_frontier():
    recs = json.loads(_ok(["pareto", *BASE, "--serving", "both", "--json"]))
    assert {r["serving"] for r in recs} == {"agg", "disagg"}
    for sv in ("agg", "disagg"):
        assert any(r["on_frontier"] for r in recs if r["serving"] == sv)
    agg = [r for r in recs if r["serving"] == "agg"]
    assert {r["decode_layout"] for r in agg} == {"tp4", "dep16"} and all(r["concurrency"] >= 1 for r in agg)
    only = json.loads(_ok(["pareto", *BASE, "--serving", "agg", "--json"]))
    assert {r["serving"] for r in only} == {"agg"} and len(only) == len(agg)


def test_both_table_has_a_serving_column_and_says_who_wins():
    out = _ok(["pareto", *BASE, "--serving", "both"])   # the terminal chart needs no plot extra
    assert "serving" in out or "srv" in out
    assert "gb300-nvl72: disagg wins" in out or "gb300-nvl72: agg wins" in out
    assert "gb300-nvl72 agg" in out and "gb300-nvl72 disagg" in out          # the chart's legend


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib (the plot extra) is not installed")
def test_both_plot_draws_each_serving(tmp_path):
    _ok(["pareto", *BASE, "--serving", "both", "--plot", str(tmp_path / "f.svg")])
    svg = (tmp_path / "f.svg").read_text()
    assert "frontier-gb300-nvl72 agg" in svg and "frontier-gb300-nvl72 disagg" in svg


def test_compare_both_puts_each_rack_and_serving_side_by_side():
    recs = json.loads(_ok(["compare", *BASE, "--serving", "both", "--json", "--kernels", "0"]))
    assert [r["serving"] for r in recs if r["metric"] == "peak"] == ["disagg", "agg"]
    agg_peak = next(r for r in recs if r["metric"] == "peak" and r["serving"] == "agg")
    disagg_peak = next(r for r in recs if r["metric"] == "peak" and r["serving"] == "disagg")
    assert agg_peak["ratio"] == agg_peak["tokens_per_s_per_gpu"] / disagg_peak["tokens_per_s_per_gpu"]
    out = _ok(["compare", *BASE, "--serving", "both", "--kernels", "0"])
    assert "gb300-nvl72 agg" in out and " wins " in out


def test_bad_serving_and_agg_with_total_gpus_are_one_line_errors(cli):
    for args, needle in ((["pareto", "--serving", "mixed"], "--serving"),
                         (["compare", "--serving", "agg", "--total-gpus", "72"], "--total-gpus")):
        r = cli(*args)
        assert r.code == 2 and r.err.count("\n") == 1 and needle in r.err and "Traceback" not in r.err, r
