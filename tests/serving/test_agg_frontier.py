"""Aggregated engines beside P/D pools: decode never faster when aggregated, the frontier, and which wins where."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.serving.agg_frontier import (AggPick, CONCURRENCY_POINTS, agg_loops, agg_summaries, concurrencies,
                                            merged, winners)
from rubinperf.serving.aggregated import RequestMix, engine
from rubinperf.serving.pareto import Summary, frontier_mask
from rubinperf.serving.specdecode import decode_engine
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.select import load_specs, serving_setups

SETUPS = {
    "gb300-nvl72": load_specs("deepseek-v4.1-flash", ["gb300-nvl72"]),
    "vr-nvl72": load_specs("deepseek-v4.1-flash", ["vr-nvl72"]),
    "h200": load_specs("deepseek-v3", ["h200"]),
}


@settings(max_examples=12, deadline=None)
@given(rack=st.sampled_from(sorted(SETUPS)), layout=st.sampled_from(["tp8", "tep8", "dep8"]),
       isl=st.integers(64, 32768), osl=st.integers(2, 4096), hit=st.floats(0.0, 0.97))
def test_aggregated_decode_never_faster_than_disaggregated_at_the_same_batch(rack, layout, isl, osl, hit):
    """At every running batch: the mixed step >= the decode-only step of the same engine >= the P/D decode engine's
    step at that batch (the same op graph and the same admissions; a chunk only adds rows), so the aggregated TPOT
    is at least the disaggregated one."""
    m, (hw,) = SETUPS[rack]
    lay = parse_layout(layout)
    mix = RequestMix(isl, osl, prefix_hit=hit)
    e = engine(m, hw, lay, mix)
    whole = e.B >= 1
    pools = decode_engine(m, hw, lay, e.B[whole], mix.mean_input + mix.mean_output / 2,
                          prompt_tokens_per_turn=mix.mean_input, output_tokens_per_turn=mix.mean_output)
    d = np.broadcast_to(pools.step_s, e.B[whole].shape)
    assert np.all(e.mixed_s >= e.decode_s * (1 - 1e-12))
    assert np.all(e.decode_s[whole] >= d * (1 - 1e-9))
    assert np.all(e.step_s[whole] / e.acceptance >= d / pools.acceptance * (1 - 1e-9))


def test_concurrencies_are_whole_clients_from_one_to_the_most_held():
    m, (hw,) = SETUPS["gb300-nvl72"]
    e = engine(m, hw, parse_layout("tp4"), RequestMix(8192, 1024))
    c = concurrencies(e)
    assert c[0] == 1 and c[-1] == np.floor(e.max_concurrency) and len(c) <= CONCURRENCY_POINTS
    assert np.all(c == np.floor(c)) and np.all(np.diff(c) > 0)


def _setups(rack="gb300-nvl72", workload="chat-8k1k"):
    model = "deepseek-v3" if rack == "h200" else "deepseek-v4.1-flash"
    return serving_setups(model, [rack], workload, None, None)


def test_agg_points_are_the_closed_loop_at_the_workload_lengths():
    """Each point is `rubinperf serve` at that concurrency: total tok/s/GPU, and 1 / P90 TPOT as tok/s/user."""
    (m, hw, w), = _setups()
    loops, skipped = agg_loops([(m, hw, w)], ["tp4"])
    assert not skipped
    (_, _, _, loop), = loops
    mix = loop.engine.mix
    assert (mix.isl, mix.osl, mix.prefix_hit) == (w.input_tokens_per_turn, w.output_tokens_per_turn, w.prefix_hit_rate)
    (s,) = agg_summaries(loops, "p90")
    r = s.picks[3].record
    assert r["serving"] == "agg" and r["tokens_per_s_per_gpu"] == r["total_tokens_per_s_per_gpu"]
    assert r["tokens_per_s_per_user"] == pytest.approx(1e3 / r["p90_tpot_ms"], rel=1e-12)
    # P90 of speed (the speed 90% of users reach) is below the median speed
    assert r["tokens_per_s_per_user_p90"] < r["tokens_per_s_per_user_p50"]
    assert np.array_equal(s.on_frontier, frontier_mask(s.x, s.y, s.feasible))


def test_tpot_limit_leaves_points_out():
    (m, hw, w), = _setups()
    loops, _ = agg_loops([(m, hw, w)], ["tp4"])
    (s,) = agg_summaries(loops, "p90", max_tpot_s=0.01)
    assert s.feasible.any() and not s.feasible.all()
    assert np.all(1 / s.x[s.feasible] <= 0.01)


class _P:   # a point of a serving, for winners by hand
    def __init__(self, serving):
        self.serving = serving


def test_winners_by_hand():
    """Frontier of both: agg (10, 100), disagg (20, 90), disagg (40, 50), agg (80, 10); agg (15, 60) is dominated.
    The best point with at least X: agg for X <= 10, disagg for 10 < X <= 40, agg for 40 < X <= 80."""
    x = np.array([10.0, 20.0, 40.0, 80.0, 15.0])
    y = np.array([100.0, 90.0, 50.0, 10.0, 60.0])
    picks = [_P("agg"), _P("disagg"), _P("disagg"), _P("agg"), _P("agg")]
    s = Summary("r", x, y, np.ones(5, bool), np.ones(5, bool), picks)
    assert winners(s) == [("agg", 0.0, 10.0), ("disagg", 10.0, 40.0), ("agg", 40.0, 80.0)]


def test_an_eight_gpu_server_that_cannot_hold_both_pools_is_won_by_agg():
    """H200 DEP8 decode leaves no GPU for a prefill pool in its 8-GPU domain: the P/D frontier is TP8's only, and the
    aggregated TP8 engine, which needs no second pool, wins somewhere."""
    from rubinperf.serving import sweep
    from rubinperf.serving.pareto import summarize

    setups = _setups("h200")
    disagg = summarize(sweep(setups, decode_layouts=["tp8"]))
    agg = agg_summaries(agg_loops(setups, ["tp8"])[0])
    (both,) = merged(disagg, agg)
    assert len(both.picks) == len(disagg[0].picks) + len(agg[0].picks)
    assert any(who == "agg" for who, _, _ in winners(both))
    assert isinstance(both.picks[-1], AggPick)
