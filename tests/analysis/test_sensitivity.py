"""Elasticities d ln(metric) / d ln(parameter): sympy's derivative of the symbolic step must
agree with central finite differences of the numeric path (rubinperf.step.step on
dataclasses.replace(hw, field=value * (1 +- h))), and must say the expected things about
a memory-bound decode step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys

import pytest

pytest.importorskip("sympy")

from rubinperf.specs.layout import parse_layout  # noqa: E402
from rubinperf.step.point import make_point  # noqa: E402
from rubinperf.analysis.sensitivity import point_parameters, sensitivity  # noqa: E402
from rubinperf.specs.hardware import Hardware  # noqa: E402
from rubinperf.specs.stack import load_platform  # noqa: E402
from rubinperf.specs.loader import numeric_fields  # noqa: E402
from rubinperf.specs.model import load_model  # noqa: E402
from rubinperf.step.timing import step  # noqa: E402

V41 = load_model("deepseek-v4.1-flash")
GB300 = load_platform("gb300-nvl72")
DEP32 = parse_layout("dep32")
TP8 = parse_layout("tp8")
H = 1e-4   # relative step of the finite differences
METRIC_ATTR = {"step-time": "expected_s", "tokens-per-gpu": "tokens_per_s_per_gpu", "tokens-per-user": "tokens_per_s_per_user"}


def numeric_metric(hw, layout, point, metric):
    return float(getattr(step(V41, hw, layout, point), METRIC_ATTR[metric]))


def finite_difference(hw, layout, point, metric, group, name, value):
    """Central and one-sided log-log differences of the numeric path."""
    def at(x):
        if group in ("hardware", "stack"):
            return numeric_metric(dataclasses.replace(hw, **{name: x}), layout, point, metric)
        return numeric_metric(hw, layout, dataclasses.replace(point, **{name: x}), metric)

    f0, up, down = at(value), at(value * (1 + H)), at(value * (1 - H))
    central = (math.log(up) - math.log(down)) / (math.log(1 + H) - math.log(1 - H))
    right = (math.log(up) - math.log(f0)) / math.log(1 + H)
    left = (math.log(f0) - math.log(down)) / -math.log(1 - H)
    return central, left, right


def check_against_finite_differences(records, hw, layout, point, metric):
    checked = 0
    for r in records:
        if r["elasticity"] is None:       # integer structure, not varied
            continue
        central, left, right = finite_difference(hw, layout, point, metric, r["group"], r["parameter"], r["value"])
        e = r["elasticity"]
        if abs(left - right) > 1e-3 * max(1.0, abs(central)):
            # A kink within h (a max() switching branch) or a step (one more tile or wave): the
            # derivative is one-sided there, and the side that crosses no step is the smooth one.
            lo, hi = sorted((left, right))
            near_one_side = min(abs(e - left), abs(e - right)) <= 1e-3 * max(1.0, abs(e))
            assert lo - 1e-6 <= e <= hi + 1e-6 or near_one_side, (r["parameter"], e, left, right)
        else:
            assert e == pytest.approx(central, rel=1e-4, abs=1e-7), (
                f"{metric}: elasticity to {r['parameter']} is {e}, finite differences give {central}")
        checked += 1
    return checked


@functools.lru_cache(maxsize=None)
def symbolic_at(rack: str, layout: str, phase: str, metric: str):
    """(hardware, layout, point, sympy's records) at the rack's default operating point: made once in this module
    (dep32_decode and the held-roundings case of the same point share them; the records are only read)."""
    hw = GB300 if rack == "gb300-nvl72" else load_platform(rack)
    lay = parse_layout(layout)
    point = make_point(V41, hw, lay, phase=phase)
    return hw, lay, point, sensitivity(V41, hw, lay, point, metric=metric)


@pytest.fixture(scope="module")
def dep32_decode():
    _, _, point, records = symbolic_at("gb300-nvl72", "dep32", "decode", "step-time")
    return point, records


def test_step_time_elasticities_match_finite_differences(dep32_decode):
    point, records = dep32_decode
    assert check_against_finite_differences(records, GB300, DEP32, point, "step-time") >= 35


@pytest.mark.parametrize("metric", ["tokens-per-gpu", "tokens-per-user"])
def test_throughput_elasticities_match_finite_differences(metric):
    point = make_point(V41, GB300, TP8, phase="decode", context=500_000)
    records = sensitivity(V41, GB300, TP8, point, metric=metric)
    # The largest dozen, and every operating-point parameter.
    chosen = records[:12] + [r for r in records[12:] if r["group"] == "operating point"]
    assert check_against_finite_differences(chosen, GB300, TP8, point, metric) >= 12
    acceptance = next(r for r in records if r["parameter"] == "acceptance")
    assert acceptance["elasticity"] == pytest.approx(1.0)   # tokens per step scale with it, step time does not


def test_memory_bound_decode_is_more_elastic_to_hbm_bandwidth_than_to_fp4_flops(dep32_decode):
    point, records = dep32_decode
    assert step(V41, GB300, DEP32, point).bound == "memory"     # the premise: a memory-bound decode step
    e = {r["parameter"]: r["elasticity"] for r in records}
    hbm, fp4 = e["hbm_bandwidth_bytes_per_s"], e["fp4_dense_flops_per_s"]
    assert abs(hbm) > abs(fp4), (
        f"a memory-bound decode step should respond more to HBM bandwidth ({hbm:+.3f}) than to FP4 FLOP/s ({fp4:+.3f})")
    peaks = {k: v for k, v in e.items() if k.endswith("_dense_flops_per_s")}
    assert all(abs(hbm) > abs(v) for v in peaks.values()), (
        f"a memory-bound decode step should respond more to HBM bandwidth ({hbm:+.3f}) than to any FLOP/s peak {peaks}")
    assert hbm < -0.3, "more bandwidth should shorten a memory-bound step markedly"


def test_time_scaling_sum_rule(dep32_decode):
    """Rates x L and latencies / L scale every time by 1/L: sum(E_rate) - sum(E_latency) = -1 (the SM clock is a rate:
    a kernel's fixed cycles take 1/L the time at L times the clock)."""
    _, records = dep32_decode
    e = {r["parameter"]: r["elasticity"] for r in records
         if r["group"] in ("hardware", "stack") and r["elasticity"] is not None}
    rates = sum(v for k, v in e.items() if k.endswith(("_per_s", "_hz")) and not k.endswith("_per_rank_s"))
    latencies = sum(v for k, v in e.items() if k.endswith("_s") and not k.endswith("_per_s"))
    assert rates - latencies == pytest.approx(-1.0, abs=1e-9)


def test_records_cover_every_numeric_hardware_field_sorted(dep32_decode):
    point, records = dep32_decode
    hw_params = {r["parameter"] for r in records if r["group"] == "hardware"}
    assert hw_params == set(numeric_fields(Hardware))
    from rubinperf.specs.stack import POINT_FIELDS, Stack

    stack_params = {r["parameter"] for r in records if r["group"] == "stack"}
    assert stack_params == set(numeric_fields(Stack)) - set(POINT_FIELDS)   # EPLB: the point's balancedness
    assert {r["parameter"] for r in records if r["group"] == "operating point"} == {
        "batch", "context", "draft_tokens", "acceptance", "balancedness", "draft_balancedness"}
    mags = [abs(r["elasticity"]) for r in records if r["elasticity"] is not None]
    assert mags == sorted(mags, reverse=True)
    tray = next(r for r in records if r["parameter"] == "gpus_per_tray")
    assert tray["elasticity"] is None and tray["discrete"]
    price = next(r for r in records if r["parameter"] == "price_usd_per_gpu_hour")
    assert price["elasticity"] == 0.0    # does not enter the step
    for r in records:
        if r["elasticity"]:
            # the swing columns move the way the sign says
            assert (r["metric_high"] - r["metric_value"]) * r["elasticity"] > 0, r["parameter"]


def test_point_parameters_follow_the_engine_shape():
    assert point_parameters(V41, DEP32, "decode") == [
        "batch", "context", "draft_tokens", "acceptance", "balancedness", "draft_balancedness"]
    assert point_parameters(V41, parse_layout("dep2"), "prefill") == [
        "batch", "context", "new_tokens", "balancedness", "draft_balancedness"]
    assert point_parameters(V41, TP8, "decode") == ["batch", "context", "draft_tokens", "acceptance"]


# ---------------------------------------------------------------- the command


def test_sensitivity_command_table_and_json(cli):
    r = cli("sensitivity", "--top", "5")
    assert r.code == 0, r
    assert "hbm_bandwidth_bytes_per_s" in r.out and "elasticity" in r.out and "hidden (--all shows them)" in r.out
    assert "price_usd_per_gpu_hour" not in r.out          # zero: hidden without --all
    recs = cli("sensitivity", "--json", "--all").json()
    assert {"gpus_per_tray", "price_usd_per_gpu_hour"} <= {x["parameter"] for x in recs}
    # Decode is memory-bound: an HBM parameter tops the list. Since MegaMoE's Little's-law rate scales with the
    # weights' bandwidth factor (roofline.kernel_time: little x sm_share x weight_factor; GB300's weights are
    # interleaved, factor 1), the interleaved factor moves every HBM byte as the bandwidth does and MegaMoE's
    # bytes-in-flight rate besides, so it reaches at least the bandwidth's elasticity and is the top one at DEP32.
    assert recs[0]["parameter"] in ("hbm_interleaved_bandwidth_factor", "hbm_bandwidth_bytes_per_s",
                                    "hbm_stream_efficiency")
    el = {x["parameter"]: x["elasticity"] for x in recs}
    assert el["hbm_interleaved_bandwidth_factor"] <= el["hbm_bandwidth_bytes_per_s"] < 0
    assert all(x["metric"] == "step-time" and x["layout"] == "dep32" for x in recs)


@pytest.mark.parametrize("args, culprit", [
    (("--metric", "latency"), "--metric"),
    (("--top", "0"), "--top"),
    (("--swing", "1.5"), "--swing"),
    (("-l", "tp7"), "tp7"),
])
def test_sensitivity_bad_input_is_one_line_exit_2(cli, args, culprit):
    r = cli("sensitivity", *args)
    assert r.code == 2, r
    assert culprit in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_plot_without_matplotlib_is_one_line_exit_2(cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    r = cli("sensitivity", "--plot", str(tmp_path / "t.png"))
    assert r.code == 2, r
    assert "matplotlib" in r.err and "rubinperf[plot]" in r.err and len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / "t.png").exists()


def test_plot_writes_a_tornado(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "tornado.png"
    r = cli("sensitivity", "--plot", str(out), "--top", "8")
    assert r.code == 0, r
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_numeric_sensitivity_agrees_with_the_symbolic_path(dep32_decode):
    """rubinperf.analysis.elasticity (central differences of the numeric step, every field an array in one
    step) gives the symbolic path's records: the same parameters, the same swing ends, the same elasticities
    wherever the derivative is smooth; whole counts take the arc over the swing, read off the swing ends."""
    from rubinperf.analysis.elasticity import numeric_sensitivity

    point, symbolic = dep32_decode
    numeric = {r["parameter"]: r for r in numeric_sensitivity(V41, GB300, DEP32, point, metric="step-time")}
    assert set(numeric) == {r["parameter"] for r in symbolic}
    smooth = 0
    for s in symbolic:
        n = numeric[s["parameter"]]
        assert n["group"] == s["group"] and n["value"] == pytest.approx(s["value"])
        if s["elasticity"] is None:
            assert n["elasticity"] is None and n["discrete"]
            continue
        assert n["metric_low"] == pytest.approx(s["metric_low"], rel=1e-12)
        assert n["metric_high"] == pytest.approx(s["metric_high"], rel=1e-12)
        if s["parameter"] in ("batch", "context", "draft_tokens"):
            arc = math.log(s["metric_high"] / s["metric_low"]) / math.log(1.1 / 0.9)
            assert n["elasticity"] == pytest.approx(arc, rel=1e-12)
        else:
            assert n["elasticity"] == pytest.approx(s["elasticity"], rel=1e-4, abs=1e-7), s["parameter"]
            smooth += 1
    assert smooth >= 40


@pytest.mark.parametrize("rack, layout, phase, metric", [
    ("gb300-nvl72", "dep32", "decode", "step-time"),
    ("vr-nvl72", "tp8", "decode", "tokens-per-gpu"),
    ("gb300-nvl72", "dep32", "prefill", "step-time"),
    ("vr-nvl72", "dep8", "decode", "tokens-per-user-p90"),
])
def test_held_roundings_sensitivity_prints_what_sympys_does(rack, layout, phase, metric):
    """`rubinperf sensitivity` (elasticity.sensitivity_records: central differences of the numeric step with its
    roundings held at the operating point) gives the symbolic path's elasticities to the four decimals the table
    prints, whole counts included (batch 16 sits on a tile boundary: a plain central difference there reads a jump,
    -12 against sympy's +0.2323), the same parameters at zero, and the swing ends to 1e-12."""
    from rubinperf.analysis.elasticity import sensitivity_records

    hw, lay, point, records = symbolic_at(rack, layout, phase, metric)
    symbolic = {r["parameter"]: r for r in records}
    held = {r["parameter"]: r for r in sensitivity_records(V41, hw, lay, point, metric=metric)}
    assert set(held) == set(symbolic)
    counts = 0
    for name, s in symbolic.items():
        n = held[name]
        if s["elasticity"] is None:
            assert n["elasticity"] is None and n["discrete"]
            continue
        assert f"{n['elasticity']:+.4f}" == f"{s['elasticity']:+.4f}", name
        assert bool(n["elasticity"]) == bool(s["elasticity"]), name
        assert n["metric_low"] == pytest.approx(s["metric_low"], rel=1e-12)
        assert n["metric_high"] == pytest.approx(s["metric_high"], rel=1e-12)
        counts += name in ("batch", "context", "new_tokens", "draft_tokens") and bool(s["elasticity"])
    assert counts >= 2
    from rubinperf.analysis.sensitivity import sensitivity as symbolic_records

    assert [r["parameter"] for r in symbolic_records(V41, hw, lay, point, metric=metric)] == list(symbolic)


def test_held_roundings_give_every_row_row_zeros_rounding():
    """mathops.held_roundings(rows): a ceil or floor of an array of that many rows is row 0's in every row; other
    arrays, and every array outside, are rounded as usual."""
    import numpy as np

    from rubinperf.mathops import held_roundings, sceil, sfloor

    x = np.array([16.0, 16.0 * (1 - 1e-4), 16.0 * (1 + 1e-4)])
    assert list(sceil(x)) == [16.0, 16.0, 17.0]
    with held_roundings(3):
        assert list(sceil(x)) == [16.0, 16.0, 16.0] and list(sfloor(x)) == [16.0, 16.0, 16.0]
        assert list(sceil(np.array([0.5, 1.5]))) == [1.0, 2.0]   # not 3 rows: as usual
        assert sceil(2.5) == 3.0
    assert list(sfloor(x)) == [16.0, 15.0, 16.0]


def test_sensitivity_command_loads_no_sympy_unless_symbolic(cli):
    """The default sensitivity is the numeric step's (no sympy: tenths of a second); --symbolic is sympy's, with
    the same table but its caption."""
    import subprocess

    code = ("import sys; from rubinperf.cli import main; main(['sensitivity', '--top', '3']); "
            "sys.stderr.write(str('sympy' in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stderr.strip().endswith("False") and "its roundings held" in " ".join(r.stdout.split())
    a, b = cli("sensitivity", "--top", "5"), cli("sensitivity", "--top", "5", "--symbolic")
    assert a.code == b.code == 0
    assert "from the symbolic step" in " ".join(b.out.split())
    assert a.out.splitlines()[:7] == b.out.splitlines()[:7]
