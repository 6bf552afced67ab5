"""The Pareto frontier, sweeps, `rubinperf pareto` and `rubinperf compare`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.serving.pareto import best_at, compare_records, dominates, frontier_mask, point_records, summarize
from rubinperf.serving import batch_grid, sweep
from rubinperf.specs.stack import load_platform
from rubinperf.specs.model import load_model
from rubinperf.specs.workload import load_workload

V41 = load_model("deepseek-v4.1-flash")
AGENTX = load_workload("agentx")
RACKS = [load_platform("gb300-nvl72"), load_platform("vr-nvl72")]
SMALL = dict(decode_layouts=["tp8", "dep16", "dep32"], batches=batch_grid(512))
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def summaries():
    return summarize(sweep([(V41, hw, AGENTX) for hw in RACKS], **SMALL))


# ---------------------------------------------------------------- the frontier


def _check_frontier(x, y, ok, mask):
    assert not np.any(mask & ~ok), "an infeasible point is on the frontier"
    fx, fy = x[mask], y[mask]
    if ok.any():
        assert mask.any()
    for a, b in zip(fx, fy):                       # no frontier point is dominated by a swept point
        assert not np.any(ok & (x >= a) & (y >= b) & ((x > a) | (y > b)))
    for a, b in zip(x[ok], y[ok]):                 # every swept point lies on or under the frontier
        assert np.any((fx >= a) & (fy >= b))


points = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.booleans()), min_size=0, max_size=60)


@settings(max_examples=200, deadline=None)
@given(points)
def test_frontier_properties_on_random_clouds(pts):
    x = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float)
    ok = np.array([p[2] for p in pts], dtype=bool)
    mask = frontier_mask(x, y, ok)
    _check_frontier(x, y, ok, mask)
    # Identical points appear once.
    pairs = list(zip(x[mask], y[mask]))
    assert len(pairs) == len(set(pairs))


@settings(max_examples=100, deadline=None)
@given(points, st.floats(0, 31))
def test_throughput_at_interactivity_is_the_frontier_step(pts, level):
    x = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float)
    ok = np.array([p[2] for p in pts], dtype=bool)
    j = best_at(x, y, ok, level)
    reach = ok & (x >= level)
    if j is None:
        assert not reach.any()
        return
    assert ok[j] and x[j] >= level and y[j] == y[reach].max()
    # The chosen point is on the frontier (as a value: of identical points the frontier keeps one).
    mask = frontier_mask(x, y, ok)
    assert (x[j], y[j]) in set(zip(x[mask], y[mask]))


def test_frontier_by_hand():
    x = np.array([1, 2, 3, 2, 1, 3])
    y = np.array([9, 5, 1, 4, 9, 1])
    assert list(frontier_mask(x, y)) == [True, True, True, False, False, False]


def test_real_sweep_frontier_properties(summaries):
    for s in summaries:
        _check_frontier(s.x, s.y, s.feasible, s.on_frontier)
        front = s.frontier
        xs = [p.record["tokens_per_s_per_user"] for p in front]
        ys = [p.record["tokens_per_s_per_gpu"] for p in front]
        assert xs == sorted(xs) and ys == sorted(ys, reverse=True)


def test_throughput_falls_as_interactivity_rises(summaries):
    for s in summaries:
        vals = [s.at_interactivity(v) for v in (50, 100, 200, 400, 800, 1200)]
        got = [p.record["tokens_per_s_per_gpu"] for p in vals if p is not None]
        assert got == sorted(got, reverse=True)
        assert s.at_interactivity(1e6) is None
        assert s.peak.record["tokens_per_s_per_gpu"] == pytest.approx(s.y[s.feasible].max())
        assert s.best_single_user.record["tokens_per_s_per_user"] == pytest.approx(s.max_interactivity)


def test_compare_records_and_ratio_terms(summaries):
    recs = compare_records(summaries, levels=(196, 387, 1e6))
    by = {(r["hardware"], r["metric"], r["target_tokens_per_s_per_user"]): r for r in recs}
    gb, vr = "gb300-nvl72", "vr-nvl72"
    assert by[(gb, "peak", None)]["ratio"] == 1.0
    for metric, level in (("peak", None), ("interactivity", 196.0), ("interactivity", 387.0)):
        r = by[(vr, metric, level)]
        assert r["reachable"] and r["ratio"] > 1
        assert r["ratio_terms_product"] == pytest.approx(r["ratio"], rel=1e-9)
        ref = by[(gb, metric, level)]
        assert r["ratio"] == pytest.approx(r["tokens_per_s_per_gpu"] / ref["tokens_per_s_per_gpu"])
        # The kernels' time per output token adds up to the decode GPU's time per token.
        per_token = sum(k["us_per_token"] for k in r["kernels"]) * 1e-6
        assert per_token == pytest.approx((r["target_ms"] + r["draft_ms"]) / 1e3 / (r["requests_per_decode_gpu"] * r["acceptance"]))
    far = by[(vr, "interactivity", 1e6)]
    assert not far["reachable"] and far["ratio"] is None and "cannot reach" in far["note"]


def test_point_records_flag_the_frontier(summaries):
    recs = point_records(summaries[0])
    assert len(recs) == summaries[0].x.size
    front = point_records(summaries[0], frontier_only=True)
    assert front and all(r["on_frontier"] for r in front)
    assert sum(r["on_frontier"] for r in recs) == len(front)


def test_skipped_layouts_are_noted():
    b200 = load_platform("b200")       # an 8-GPU NVLink domain
    sw = sweep([(V41, b200, AGENTX)], decode_layouts=["tp8", "dep16"], batches=[1.0, 8.0])
    assert [r.decode.layout.name for r in sw.runs] == ["tp8"]
    assert any("dep16" in line and "NVLink domain" in line for line in sw.skipped)


# ---------------------------------------------------------------- command line

FAST = ["-l", "tp8", "-l", "dep32", "--max-batch", "256"]


def test_compare_json(cli):
    r = cli("compare", *FAST, "--json")
    assert r.code == 0, r
    recs = r.json()
    assert {x["hardware"] for x in recs} == {"gb300-nvl72", "vr-nvl72"}
    assert [x["target_tokens_per_s_per_user"] for x in recs if x["metric"] == "interactivity"][:2] == [196.0, 387.0]
    for x in recs:
        if x["reachable"]:
            for key in ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "usd_per_m_input", "usd_per_m_output",
                        "tokens_per_s_per_kw", "decode_layout", "batch_per_rank", "kernels"):
                assert key in x


def test_compare_table_says_when_a_rack_cannot_reach(cli):
    r = cli("compare", *FAST, "--at-interactivity", "300,5000", "--kernels", "2")
    assert r.code == 0, r
    assert "cannot reach 5,000 tok/s/user" in r.out
    assert "Where the vr-nvl72 / gb300-nvl72 throughput ratios come from" in r.out
    assert "$/M input tokens at peak" in r.out and "tok/s per kW at peak" in r.out


def test_pareto_json_frontier(cli):
    r = cli("pareto", *FAST, "--json", "--frontier-only", "-H", "vr-nvl72")
    assert r.code == 0, r
    recs = r.json()
    assert recs and all(x["on_frontier"] and x["feasible"] for x in recs)
    for a in recs:
        for b in recs:
            assert not dominates(b["tokens_per_s_per_user"], b["tokens_per_s_per_gpu"],
                                 a["tokens_per_s_per_user"], a["tokens_per_s_per_gpu"])


def test_pareto_table_and_chart(cli):
    r = cli("pareto", *FAST, "--rows", "5")
    assert r.code == 0, r
    assert "Pareto frontier" in r.out and "tok/s/user (P90, log)" in r.out and "on the frontier" in r.out


def test_infeasible_everywhere_is_reported(cli):
    r = cli("compare", *FAST, "--set", "runtime_reserve=275GB", "--kernels", "0")
    assert r.code == 0, r
    assert "no feasible point" in r.out and "exceed" in r.out


@pytest.mark.parametrize("args, match", [
    (["compare", "--at-interactivity", "fast"], "--at-interactivity"),
    (["compare", "--at-interactivity", "-5"], "--at-interactivity"),
    (["pareto", "--plot", "chart.txt"], "--plot"),
    (["pareto", "-w", "no-such-workload"], "unknown workload"),
    (["compare", "--set", "workload.prefix_hit_rate=2"], "at most 1"),
    (["compare", "--set", "h100:hbm_bandwidth=1TB/s"], "no rack named"),
    (["pareto", "-l", "pp3"], "unknown layout"),
    (["compare", "--acceptance", "9"], "acceptance"),
    (["pareto", "-H", "gb300-nvl72", "-H", "gb300-nvl72"], "twice"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, match):
    r = cli(*args)
    assert r.code == 2, r
    assert match in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err


def test_per_rack_override_changes_one_rack(cli):
    base = {(x["hardware"], x["metric"]): x for x in cli("compare", *FAST, "--json").json()}
    slow = {(x["hardware"], x["metric"]): x for x in
            cli("compare", *FAST, "--json", "--set", "gb300-nvl72:step_overhead=20ms").json()}
    assert slow[("vr-nvl72", "peak")]["tokens_per_s_per_gpu"] == base[("vr-nvl72", "peak")]["tokens_per_s_per_gpu"]
    assert slow[("gb300-nvl72", "single_user")]["tokens_per_s_per_user"] < 3.51 / 0.020 + 1e-9


@pytest.mark.skipif(HAS_MPL, reason="matplotlib is installed")
def test_plot_without_matplotlib_says_how_to_get_it(cli, tmp_path):
    r = cli("pareto", *FAST, "--plot", str(tmp_path / "f.png"))
    assert r.code == 2 and "pip install 'rubinperf[plot]'" in r.err


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib (the plot extra) is not installed")
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_plot_writes_the_file(cli, tmp_path, suffix, magic):
    path = tmp_path / f"frontier{suffix}"
    r = cli("pareto", *FAST, "--plot", str(path), "--no-chart")
    assert r.code == 0, r
    assert path.read_bytes().startswith(magic)


def test_serving_commands_import_nothing_heavy():
    code = ("import sys, rubinperf.cli.serving; "
            "bad = [m for m in ('matplotlib', 'sympy', 'rubinperf.serving', 'numpy') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_terminal_chart_and_progress(summaries):
    from rich.console import Console

    from rubinperf.render.chart import frontier_chart

    recs = [r for s in summaries for r in point_records(s)]
    console = Console(width=120, record=True)
    console.print(frontier_chart(recs, width=60, height=12))
    text = console.export_text()
    assert "●" in text and "▲" in text and "gb300-nvl72" in text and "tok/s/user (P90, log)" in text
    calls = []
    sweep([(V41, RACKS[0], AGENTX)], decode_layouts=["tp8", "dep32"], batches=[1.0, 2.0],
          progress=lambda done, total, label: calls.append((done, total)))
    assert calls[0] == (0, 2) and calls[-1] == (2, 2)
