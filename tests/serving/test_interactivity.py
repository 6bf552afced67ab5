"""Interactivity as a distribution: P50 and P90 tokens/s per user beside the mean; the
frontier and --at-interactivity use P90 by default, the mean on request."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.serving.interactivity import per_request_acceptance, sampled_speed_factors, speed_factors
from rubinperf.specs.layout import parse_layout
from rubinperf.serving import batch_grid, serve, sweep
from rubinperf.specs.model import load_model
from rubinperf.specs.overrides import apply_overrides
from rubinperf.specs.stack import load_platform
from rubinperf.specs.workload import load_workload

V41 = load_model("deepseek-v4.1-flash")
AGENTX = load_workload("agentx")


def test_per_request_acceptance_has_the_measured_mean():
    """mu = (3.51 - 1) / 5 = 0.502; a = 1 + 5 f with E[f] = mu: the mean is 3.51 whatever nu is."""
    for nu in (2.0, 10.0, 50.0):
        a = per_request_acceptance(5, 3.51, nu)
        assert a.mean() == pytest.approx(3.51, abs=0.01)
        assert a.min() >= 1.0 and a.max() <= 6.0
        # standard deviation of f: sqrt(mu (1 - mu) / (1 + nu)); of a: 5 x that
        assert a.std() == pytest.approx(5 * np.sqrt(0.502 * 0.498 / (1 + nu)), rel=0.02)


def test_p90_below_mean_below_p10():
    f = speed_factors(5, 3.51, 10.0, 0.05)
    assert f["p90"] < f["mean"] == 1.0 < f["p10"]
    assert f["p90"] < f["p50"] < f["p10"]
    # no spread at all: every statistic is the mean
    assert speed_factors(0, 1.0, 10.0, 0.0) == {"p90": 1.0, "p50": 1.0, "p10": 1.0, "mean": 1.0}
    # only the step fluctuates (no drafts): lognormal, P90 = exp(-1.2816 sigma)
    assert speed_factors(0, 1.0, 10.0, 0.05)["p90"] == pytest.approx(np.exp(-1.2816 * 0.05), rel=2e-3)
    # a wider acceptance distribution lowers P90
    assert speed_factors(5, 3.51, 3.0, 0.05)["p90"] < f["p90"]


@pytest.mark.parametrize("k, a, nu, sigma", [(5, 3.51, 72.0, 0.0145), (5, 3.51, 10.0, 0.05), (5, 3.51, 2.0, 0.0),
                                             (5, 3.51, 0.6, 0.05), (1, 1.875, 86.0, 0.0145), (7, 3.5, 40.0, 1e-4),
                                             (5, 1.3, 20.0, 0.03), (5, 5.7, 12.0, 0.02), (5, 3.51, 5000.0, 0.01)])
def test_quadrature_agrees_with_a_large_monte_carlo(k, a, nu, sigma):
    """The deterministic quadrature (Beta cells by the incomplete beta, bisection on the mixture's CDF) against
    4 million samples of a = 1 + k Beta and a lognormal step: within 0.2% at P90, P50 and P10 (the sampling error
    of a 10th percentile over 4M samples is about 0.01%)."""
    q = speed_factors(k, a, nu, sigma)
    mc = sampled_speed_factors(k, a, nu, sigma, n=4_000_000, seed=7)
    for stat in ("p90", "p50", "p10"):
        assert q[stat] == pytest.approx(mc[stat], rel=2e-3), stat


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 8), share=st.floats(0.02, 0.98), nu=st.floats(0.5, 500.0), sigma=st.floats(0.0, 0.3))
def test_quantiles_are_ordered(k, share, nu, sigma):
    f = speed_factors(k, 1 + k * share, nu, sigma)
    assert f["p90"] <= f["p50"] <= f["p10"]


def test_no_spread_gives_the_mean():
    """nu -> infinity and sigma -> 0: every quantile tends to the mean; the factor rises toward 1 as either narrows."""
    assert speed_factors(5, 3.51, 1e12, 0.0)["p90"] == pytest.approx(1.0, abs=1e-5)
    assert speed_factors(5, 3.51, 1e9, 1e-9)["p90"] == pytest.approx(1.0, abs=1e-4)
    by_nu = [speed_factors(5, 3.51, nu, 0.0145)["p90"] for nu in (5, 10, 20, 40, 72, 1e4, 1e8)]
    by_sigma = [speed_factors(5, 3.51, 72.0, s)["p90"] for s in (0.05, 0.0145, 0.001)]
    assert by_nu == sorted(by_nu) and by_sigma == sorted(by_sigma)
    assert by_nu[-1] == pytest.approx(np.exp(-1.2816 * 0.0145), rel=2e-3)


def test_the_single_user_pair_is_the_sourced_step_spread():
    """The November post's single-user pair at a fixed acceptance (Rubin TP8, batch 1): P50 1,844, P90 1,810 tok/s.
    The stacks' sigma = ln(1844 / 1810) / 1.2816 = 0.0145 gives P50 / P90 = 1,844 / 1,810 within 0.5%."""
    sigma = load_platform("vr-nvl72").step_time_spread
    assert sigma == pytest.approx(np.log(1844 / 1810) / 1.2816, rel=0.01)
    f = speed_factors(5, 3.51, 1e12, sigma)   # fixed acceptance: validate's nu
    assert f["p50"] / f["p90"] == pytest.approx(1844 / 1810, rel=5e-3)


def test_the_factor_is_fast_and_needs_no_sampling():
    import time

    start = time.perf_counter()
    speed_factors.__wrapped__(5, 3.51, 72.0, 0.0145)
    assert time.perf_counter() - start < 0.05   # the 400,000-sample draw it replaced took ~90 ms


def test_every_swept_point_orders_p90_mean_p10():
    hw = load_platform("vr-nvl72")
    s = serve(V41, hw, AGENTX, parse_layout("dep32"), batch_grid(256))
    c = s.columns
    assert np.all(c["tokens_per_s_per_user_p90"] <= c["tokens_per_s_per_user_mean"])
    assert np.all(c["tokens_per_s_per_user_mean"] <= c["tokens_per_s_per_user_p10"])
    assert np.array_equal(c["tokens_per_s_per_user"], c["tokens_per_s_per_user_p90"])     # P90 by default
    rec = s.record(0)
    assert rec["interactivity_stat"] == "p90" and rec["tokens_per_s_per_user"] == rec["tokens_per_s_per_user_p90"]


def test_the_spread_comes_from_the_stack():
    hw = load_platform("vr-nvl72")
    narrow = apply_overrides(["stack.step_time_spread=0", "stack.acceptance_concentration=1e6"], hardware=hw)["hardware"]
    a = serve(V41, hw, AGENTX, parse_layout("tp8"), np.array([1.0])).columns
    b = serve(V41, narrow, AGENTX, parse_layout("tp8"), np.array([1.0])).columns
    assert b["tokens_per_s_per_user_p90"][0] == pytest.approx(b["tokens_per_s_per_user_mean"][0], rel=2e-3)
    assert a["tokens_per_s_per_user_p90"][0] < b["tokens_per_s_per_user_p90"][0]
    assert a["tokens_per_s_per_user_mean"][0] == b["tokens_per_s_per_user_mean"][0]   # the mean is the step's alone


def test_p90_frontier_is_stricter_than_the_mean_one():
    from rubinperf.serving.pareto import summarize

    setups = [(V41, load_platform("gb300-nvl72"), AGENTX)]
    p90 = summarize(sweep(setups, batches=batch_grid(256)))[0]
    mean = summarize(sweep(setups, batches=batch_grid(256), interactivity_stat="mean"))[0]
    for level in (100.0, 196.0, 387.0):
        a, b = p90.at_interactivity(level), mean.at_interactivity(level)
        if b is None:
            assert a is None
            continue
        assert a is None or a.record["tokens_per_s_per_gpu"] <= b.record["tokens_per_s_per_gpu"]
        if a is not None:
            assert a.record["tokens_per_s_per_user_p90"] >= level


def test_cli_interactivity_stat(cli):
    r = cli("pareto", "-H", "vr-nvl72", "--max-batch", "64", "--json", "--interactivity-stat", "mean")
    assert r.code == 0, r
    recs = r.json()
    rows = recs if isinstance(recs, list) else recs["points"]
    row = next(x for x in rows if "tokens_per_s_per_user_mean" in x)
    assert row["tokens_per_s_per_user"] == row["tokens_per_s_per_user_mean"]
    bad = cli("compare", "--interactivity-stat", "p95")
    assert bad.code == 2 and bad.err.count("\n") == 1 and "p90, p50, mean" in bad.err


def test_ttft_and_tpot_limits_filter_the_frontier(cli):
    """--tpot 1.5ms keeps points of at least 1 / 1.5 ms = 667 tok/s per user (at P90); --ttft below every TTFT
    leaves nothing to compare; a limit that is not a time is one line and exit 2."""
    r = cli("pareto", "-H", "vr-nvl72", "--max-batch", "64", "--tpot", "1.5ms", "--json", "--frontier-only")
    assert r.code == 0, r
    front = r.json()
    assert front and all(x["tokens_per_s_per_user"] >= 1 / 1.5e-3 and x["eligible"] for x in front)
    free = cli("pareto", "-H", "vr-nvl72", "--max-batch", "64", "--json", "--frontier-only").json()
    assert min(x["tokens_per_s_per_user"] for x in free) < 1 / 1.5e-3       # the limit did remove points
    c = cli("compare", "-H", "vr-nvl72", "--max-batch", "64", "--ttft", "2s", "--json", "--kernels", "0").json()
    assert all(x["ttft_ms"] <= 2000.0 for x in c if x["reachable"])
    none = cli("compare", "-H", "vr-nvl72", "--max-batch", "64", "--ttft", "1us", "--json", "--kernels", "0").json()
    assert not any(x["reachable"] for x in none)
    for bad in (("--ttft", "soon"), ("--tpot", "-1ms")):
        e = cli("compare", *bad)
        assert e.code == 2 and e.err.count("\n") == 1, e


# ---------------------------------------------------------------- whole deployments (--total-gpus)

@pytest.mark.parametrize("total", [72, 144, 1000])
def test_integer_pools_never_exceed_total_gpus(total):
    hw = load_platform("gb300-nvl72")
    for dl in ("dep8", "dep32", "tp8"):
        s = serve(V41, hw, AGENTX, parse_layout(dl), batch_grid(256), total_gpus=total)
        cont = serve(V41, hw, AGENTX, parse_layout(dl), batch_grid(256))
        npf, nd, _ = s.pools
        P, D = s.prefill.layout.ranks, s.decode.layout.ranks
        assert np.all(npf * P + nd * D <= total) and np.all(nd >= 1) and np.all(npf >= 1)
        assert npf.dtype.kind == "i" and nd.dtype.kind == "i"
        # whole instances, every GPU counted, never beat the continuous ratio
        assert np.all(s.tokens_per_s_per_gpu <= cont.tokens_per_s_per_gpu * (1 + 1e-9))
        rec = s.record(0)
        assert rec["pools"] == f"{rec['prefill_instances']}P{rec['decode_instances']}D" and rec["gpus_used"] <= total


def test_integer_pools_hand_derived():
    """One decode instance of D GPUs needs np = ceil(D x decode rate / (P x prefill rate)) prefill instances of P
    GPUs; with room for it, turns/s = min(np P prefill rate, D decode rate) and tok/s/GPU = that x tokens per
    turn / total GPUs."""
    hw = load_platform("vr-nvl72")
    s = serve(V41, hw, AGENTX, parse_layout("dep32"), np.array([16.0]), total_gpus=40)   # room for one DEP32 only
    cont = serve(V41, hw, AGENTX, parse_layout("dep32"), np.array([16.0]))
    P, D = cont.prefill.layout.ranks, 32
    pr, dr = float(cont.prefill.turns_per_s_per_gpu), float(np.ravel(cont.decode_turns_per_s_per_gpu)[0])
    need = int(np.ceil(D * dr / (P * pr) - 1e-9))
    npf = min(need, (40 - D) // P)
    assert (int(s.pools[0][0]), int(s.pools[1][0])) == (npf, 1)
    want = min(npf * P * pr, D * dr) * AGENTX.tokens_per_turn / 40
    assert float(np.ravel(s.tokens_per_s_per_gpu)[0]) == pytest.approx(want, rel=1e-12)


def test_total_gpus_on_the_cli(cli):
    r = cli("compare", "--total-gpus", "72", "--json", "--kernels", "0", "--max-batch", "128")
    assert r.code == 0, r
    for x in r.json():
        if x["reachable"]:
            assert x["gpus_used"] <= 72 and x["total_gpus"] == 72
    few = cli("pareto", "--total-gpus", "2", "-H", "gb300-nvl72", "--json", "--max-batch", "16")
    assert few.code in (0, 2) and "Traceback" not in few.err
    bad = cli("compare", "--total-gpus", "0")
    assert bad.code == 2 and bad.err.count("\n") == 1


def test_sensitivity_ranks_the_p90_spreads(cli):
    """`sensitivity --metric tokens-per-user-p90`: P90 = mean x factor; a wider acceptance spread (smaller nu) or a
    wider step spread lowers it, so nu's elasticity is positive and sigma's negative; a step field moves it as it
    moves the mean; a prefill point has no P90 (one line, exit 2)."""
    r = cli("sensitivity", "-H", "vr-nvl72", "-l", "tp8", "--metric", "tokens-per-user-p90", "--json", "--all")
    assert r.code == 0, r
    rows = {x["parameter"]: x for x in r.json()}
    nu, sigma = rows["acceptance_concentration"], rows["step_time_spread"]
    assert nu["elasticity"] > 0 > sigma["elasticity"]
    f = speed_factors(5, 3.51, 21.5, 0.0145)["p90"]   # the stack's nu (per-request data) and sigma
    assert nu["metric_value"] == pytest.approx(rows["hbm_bandwidth_bytes_per_s"]["metric_value"])
    mean = cli("sensitivity", "-H", "vr-nvl72", "-l", "tp8", "--metric", "tokens-per-user", "--json").json()
    assert nu["metric_value"] == pytest.approx(mean[0]["metric_value"] * f, rel=1e-12)
    hbm = next(x for x in mean if x["parameter"] == "hbm_bandwidth_bytes_per_s")
    assert rows["hbm_bandwidth_bytes_per_s"]["elasticity"] == pytest.approx(hbm["elasticity"], rel=1e-12)
    bad = cli("sensitivity", "-l", "dep2", "--phase", "prefill", "--metric", "tokens-per-user-p90")
    assert bad.code == 2 and bad.err.count("\n") == 1


def test_step_mixture_percentiles_at_once_are_each_percentile_alone():
    """All percentiles bisected together (one array axis) give, bit for bit, what each gives bisected alone; the
    median of one step time without spread is that time."""
    from rubinperf.serving.interactivity import step_mixture_percentiles

    rng = np.random.default_rng(7)
    t = rng.uniform(1e-3, 0.1, (2, 9))
    w = rng.uniform(0, 1, 9)
    w = np.stack([1 - w, w])
    for spread in (0.0, 0.02, 0.4):
        together = step_mixture_percentiles(t, w, spread, (50.0, 90.0, 99.0))
        alone = np.concatenate([step_mixture_percentiles(t, w, spread, (p,)) for p in (50.0, 90.0, 99.0)])
        assert together.tobytes() == alone.tobytes()
        assert (np.diff(together, axis=0) >= 0).all()   # percentiles in order at every point
    one = step_mixture_percentiles(np.array([[0.02]]), np.array([[1.0]]), 0.0, (50.0,))
    assert one[0, 0] == pytest.approx(0.02, rel=1e-9)
