"""Every accepted input gives a finite, meaningful answer; conflicting options are errors."""

from __future__ import annotations

import math

import pytest


def one_line(r, *needles):
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1, r
    for n in needles:
        assert n in r.err, r


@pytest.mark.parametrize("argv,needle", [
    (["estimate", "-l", "dep32", "--balancedness", "1e-308"], "--balancedness"),
    (["estimate", "-l", "dep32", "--balancedness", "0.03"], "1/32"),
    (["estimate", "-l", "dep32", "--batch", "1e-300"], "--batch"),
    (["estimate", "-l", "tp8", "--batch", "0.5"], "--batch"),
    (["estimate", "-l", "dep32", "--batch", "1e12"], "--batch"),
    (["estimate", "-l", "dep32", "--draft-tokens", "100000"], "--draft-tokens"),
    (["explain", "step", "-l", "dep32", "--balancedness", "1e-308"], "--balancedness"),
    (["sensitivity", "-l", "dep32", "--batch", "1e-300"], "--batch"),
])
def test_values_outside_meaningful_bounds_are_refused(cli, argv, needle):
    one_line(cli(*argv), needle)


def test_lowest_meaningful_balancedness_gives_finite_numbers(cli):
    r = cli("estimate", "-l", "dep32", "--balancedness", str(1 / 32), "--json")
    assert r.code == 0, r
    for rec in r.json():
        assert math.isfinite(rec["step_time_ms"]) and rec["tokens_per_s_per_gpu"] > 1


def test_smallest_batch_gives_meaningful_tokens_per_second(cli):
    (rec,) = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--batch", "1", "--json").json()
    assert rec["tokens_per_s_per_gpu"] > 1


@pytest.mark.parametrize("argv,needles", [
    (["estimate", "--json", "--csv"], ["--json and --csv"]),
    (["estimate", "-q", "--json"], ["--quiet and --json"]),
    (["estimate", "-q", "--csv"], ["--quiet and --csv"]),
    (["list", "hardware", "-q", "--json"], ["--quiet"]),
    (["validate", "-q", "--json"], ["--quiet"]),
    (["pareto", "-q", "--json"], ["--quiet"]),
    (["compare", "-q", "--json"], ["--quiet"]),
    (["sensitivity", "-q", "--json"], ["--quiet"]),
    (["explain", "megamoe", "-q", "--json"], ["--quiet"]),
    (["kernel", "copy", "--bytes", "1e9", "-q", "--json"], ["--quiet"]),
    (["estimate", "-l", "dep2", "--acceptance", "2"], ["--acceptance", "decode steps only"]),
    (["estimate", "-l", "dep2", "--draft-tokens", "3"], ["--draft-tokens", "decode steps only"]),
    (["estimate", "-l", "dep32", "--new-tokens", "4096"], ["--new-tokens", "prefill steps only"]),
    (["explain", "step", "-l", "dep2", "--acceptance", "2"], ["--acceptance", "prefill"]),
    (["estimate", "-H", "vr-nvl72", "-H", "vr-nvl72"], ["--hardware", "twice"]),
    (["estimate", "-l", "tp8", "-l", "tp8"], ["--layout", "twice"]),
    (["compare", "-H", "vr-nvl72", "-H", "vr-nvl72"], ["--hardware", "twice"]),
    (["pareto", "-H", "gb300-nvl72", "-H", "gb300-nvl72"], ["--hardware", "twice"]),
])
def test_conflicting_options(cli, argv, needles):
    one_line(cli(*argv), *needles)


def test_phase_options_apply_to_their_own_rows(cli):
    """With both phases present (the default engines), --acceptance changes the decode rows only."""
    base = {(r["layout"], r["phase"]): r for r in cli("estimate", "-H", "vr-nvl72", "--json").json()}
    new = {(r["layout"], r["phase"]): r for r in cli("estimate", "-H", "vr-nvl72", "--acceptance", "2", "--json").json()}
    assert new[("dep2", "prefill")]["step_time_ms"] == base[("dep2", "prefill")]["step_time_ms"]
    assert new[("tp8", "decode")]["tokens_per_s_per_user"] < base[("tp8", "decode")]["tokens_per_s_per_user"]


UNREACHABLE = '''
[[point]]
id = "unreachable-one"
source = "test"
metric = "throughput_at_interactivity"
hardware = "gb300-nvl72"
layout = "sweep"
phase = "serving"
workload = "agentx"
interactivity = 1000000.0
published = 1000.0
band = [0.5, 2.0]

[[point]]
id = "unreachable-ratio"
source = "test"
metric = "throughput_ratio_at_interactivity"
hardware = "vr-nvl72"
baseline_hardware = "gb300-nvl72"
layout = "sweep"
phase = "serving"
workload = "agentx"
interactivity = 1000000.0
published = 2.0
band = [0.5, 2.0]
'''


def test_validate_reports_unreachable_points(cli, tmp_path):
    path = tmp_path / "points.toml"
    path.write_text(UNREACHABLE)
    r = cli("validate", "--points", str(path), "--json")
    assert r.code == 1, r
    recs = r.json()
    for rec in recs:
        assert rec["reachable"] is False and rec["in_band"] is False
        assert rec["predicted"] is None and rec["ratio"] is None
    r = cli("validate", "--points", str(path))
    assert r.code == 1 and "unreachable" in r.out and "inf" not in r.out, r


def test_new_tokens_beyond_the_context_limit_blame_new_tokens(cli):
    """Found by the fuzz tests (seed 32): the message named --context and printed a 309-digit number."""
    r = cli("estimate", "--new-tokens", "1e308", "--phase", "prefill", "-l", "dep32")
    one_line(r, "--new-tokens", "1 to 1e12 tokens")    # a token count beyond any: refused as it is read
    assert len(r.err) < 200
    r = cli("estimate", "--new-tokens", "1e9", "--phase", "prefill", "-l", "dep32")
    one_line(r, "--new-tokens", "maximum context")
    assert len(r.err) < 200
    r = cli("estimate", "--context", "1048000", "--new-tokens", "32768", "-l", "dep2")
    one_line(r, "--context", "1,048,000 cached + 32,768 new tokens")
