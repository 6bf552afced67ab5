"""Aggregated serving: mixed steps, the closed-loop steady state, its metrics, DP prefill imbalance."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.errors import SpecError
from rubinperf.serving.aggregated import RequestMix, closed_loop, engine, parse_concurrency
from rubinperf.serving.prefill import busiest_rank_sequences, dp_prefill_imbalance
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.select import load_specs, serving_setups
from rubinperf.step.point import make_point
from rubinperf.step.timing import step

V41, (GB300,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"])
V3, (H200,) = load_specs("deepseek-v3", ["h200"])
TP2, TP8, DEP8 = parse_layout("tp2"), parse_layout("tp8"), parse_layout("dep8")
MIX = RequestMix(8192, 1024)


def _decode_point(m, hw, layout, batch, context):
    return make_point(m, hw, layout, phase="decode", batch=batch, context=context, draft_tokens=0)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 256), chunk=st.integers(1, 16384), context=st.integers(0, 60000),
       chunk_context=st.integers(0, 60000))
def test_mixed_step_never_faster_than_decode_alone(batch, chunk, context, chunk_context):
    """Aggregated decode is never faster than disaggregated decode at the same batch: a chunk only adds rows."""
    p = _decode_point(V3, H200, TP8, batch, context)
    alone = float(step(V3, H200, TP8, p).expected_s)
    mixed = float(step(V3, H200, TP8, dataclasses.replace(p, chunk_tokens=float(chunk), chunk_seqs=1.0,
                                                          chunk_context=float(chunk_context))).expected_s)
    assert mixed >= alone * (1 - 1e-12)


def test_mixed_step_is_the_decode_step_plus_about_the_prefill_chunk():
    """A large chunk dominates: the mixed step lies between the prefill step alone and decode + prefill."""
    p = _decode_point(V3, H200, TP8, 64, 8192)
    decode = float(step(V3, H200, TP8, p).expected_s)
    mixed = float(step(V3, H200, TP8, dataclasses.replace(p, chunk_tokens=8192.0, chunk_seqs=1.0,
                                                          chunk_context=0.0)).expected_s)
    pre = float(step(V3, H200, TP8, make_point(V3, H200, TP8, phase="prefill", batch=1, context=0,
                                                new_tokens=8192)).expected_s)
    assert pre <= mixed <= decode + pre


def test_engine_step_never_faster_than_its_decode_step():
    e = engine(V41, GB300, TP2, MIX)
    assert np.all(e.step_s >= e.decode_s * (1 - 1e-12))
    assert np.all(e.mixed_s > e.decode_s)


@pytest.mark.parametrize("gap", [0.0, 3.0])
def test_littles_law(gap):
    """Clients = request rate x (end-to-end latency + gap between turns), within 1%, queued or not."""
    mix = RequestMix(8192, 1024, 0.5, prefix_hit=0.3, turn_gap_s=gap)
    conc = np.array([1, 4, 16, 64, 256, 1024], dtype=float)
    recs = closed_loop(engine(V41, GB300, TP2, mix), conc).records()
    for r in recs:
        implied = r["request_throughput_per_s"] * (r["mean_e2e_ms"] / 1e3 + gap)
        assert implied == pytest.approx(r["concurrency"], rel=0.01)
        assert r["total_tokens_per_s"] == pytest.approx(r["request_throughput_per_s"] * (mix.mean_input + mix.mean_output))
        assert r["output_tokens_per_s_per_gpu"] * TP2.ranks == pytest.approx(r["output_tokens_per_s"])


def test_ttft_grows_with_concurrency_past_prefill_saturation():
    """A small budget saturates prefill: past that point the batch stops growing and TTFT rises with every client."""
    m, (hw,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"], ["max_num_batched_tokens=1024"])
    conc = np.array([8, 32, 128, 256, 512, 1024], dtype=float)
    recs = closed_loop(engine(m, hw, TP2, RequestMix(8192, 256)), conc).records()
    held = [r for r in recs if r["limited_by"] == "prefill"]
    assert len(held) >= 3
    ttft = [r["mean_ttft_ms"] for r in held]
    assert all(b > a for a, b in zip(ttft, ttft[1:]))
    # the running batch and the throughput stay where saturation left them
    assert len({round(r["running_batch_per_rank"], 9) for r in held}) == 1
    assert held[-1]["request_throughput_per_s"] == pytest.approx(held[0]["request_throughput_per_s"])


def test_tpot_grows_with_prefill_interference():
    """At the same concurrency, more prefill per request (longer prompts) puts more chunks into the decode steps."""
    e_short, e_long = engine(V41, GB300, TP2, RequestMix(1024, 1024)), engine(V41, GB300, TP2, RequestMix(16384, 1024))
    a, b = closed_loop(e_short, [64]).records()[0], closed_loop(e_long, [64]).records()[0]
    assert b["prefill_step_share"] > a["prefill_step_share"]
    assert b["mean_tpot_ms"] > a["mean_tpot_ms"]
    # and TPOT is never below the decode step alone over the tokens it emits
    for r in (a, b):
        assert r["mean_tpot_ms"] >= r["decode_step_ms"] / r["acceptance"] * (1 - 1e-9)


def test_separate_prefill_steps_stall_decode_more_than_mixed_ones():
    """SGLang's default (a prefill forward of its own) costs the decodes the whole prefill step and a second pass over
    the weights (a model without bounded replay: V4.1's prefill path replays fewer rows than a mixed step runs)."""
    m, (sep,) = load_specs("deepseek-v3", ["h200"], ["mixed_prefill_decode=false"])
    a = closed_loop(engine(V3, H200, TP8, MIX), [64]).records()[0]
    b = closed_loop(engine(m, sep, TP8, MIX), [64]).records()[0]
    assert b["prefill_step_ms"] > a["prefill_step_ms"]


def test_dep_steps_carry_prefill_when_any_rank_does():
    e1 = engine(V3, H200, TP8, RequestMix(1024, 1024))
    e8 = engine(V3, H200, DEP8, RequestMix(1024, 1024))
    # at equal batch per scheduler, eight ranks' chances of a chunk compound: 1 - (1 - f)^8
    b = 16.0
    f = np.interp(b, e1.B, e1.prefill_share)
    assert np.interp(b, e8.B, e8.prefill_share) == pytest.approx(1 - (1 - f) ** 8, rel=1e-6)


def test_percentiles_are_ordered_and_the_single_user_is_unqueued():
    recs = closed_loop(engine(V41, GB300, TP2, RequestMix(8192, 1024, 0.5)), [1, 64, 4096]).records()
    for r in recs:
        for name in ("ttft", "tpot", "itl", "e2e"):
            assert r[f"median_{name}_ms"] <= r[f"p90_{name}_ms"] <= r[f"p99_{name}_ms"] * (1 + 1e-9)
    assert recs[0]["queued_per_rank"] == 0 and recs[0]["limited_by"] == ""
    assert recs[-1]["limited_by"] in ("prefill", "KV cache")


def test_itl_tail_is_the_prefill_step():
    """ITL pools steps: when more than 1% of steps carry prefill, P99 ITL is a prefill-carrying step."""
    r = closed_loop(engine(V41, GB300, TP2, MIX), [64]).records()[0]
    assert r["prefill_step_share"] > 0.02
    assert r["p99_itl_ms"] == pytest.approx(r["prefill_step_ms"], rel=0.1)
    assert r["median_itl_ms"] == pytest.approx(r["decode_step_ms"], rel=0.1)


def test_length_ranges():
    assert RequestMix(1000, 100, 0.8, "inferencex").bounds(1000) == (800.0, 1000)
    assert RequestMix(1000, 100, 0.5).bounds(1000) == (500.0, 1500.0)
    assert RequestMix(1000, 100, 0.8, "inferencex").mean_input == pytest.approx(900)
    assert RequestMix(1000, 100, 0.0).uncached == 1000
    assert RequestMix(1000, 100, prefix_hit=0.75).uncached == 250


@pytest.mark.parametrize("bad", [dict(isl=0, osl=10), dict(isl=10, osl=1), dict(isl=10, osl=10, range_ratio=1.5),
                                 dict(isl=10, osl=10, convention="x"), dict(isl=10, osl=10, prefix_hit=1.0)])
def test_bad_request_mix_is_a_spec_error(bad):
    with pytest.raises(SpecError):
        RequestMix(**bad)


def test_parse_concurrency():
    assert parse_concurrency("1,2,...,256") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert parse_concurrency("10,15,...,40") == [10, 15, 20, 25, 30, 35, 40]
    assert parse_concurrency("64") == [64]
    assert parse_concurrency("3,9,...,100") == [3, 9, 27, 81, 100]
    for bad in ("0", "1.5", "a", "1,...,8", "4,2,...,8", ""):
        with pytest.raises(SpecError):
            parse_concurrency(bad)


def test_busiest_rank_by_hand():
    # two ranks, two sequences: each rank's count Binomial(2, 1/2), F(0) = 1/4, F(1) = 3/4:
    # E[max] = (1 - 1/16) + (1 - 9/16) = 1.375
    assert busiest_rank_sequences(1.0, 2) == pytest.approx(1.375)
    assert busiest_rank_sequences(17.0, 1) == 17.0
    assert busiest_rank_sequences(0.5, 2) == 0.5


@settings(max_examples=30, deadline=None)
@given(seqs=st.integers(1, 64), ranks=st.integers(2, 16))
def test_busiest_rank_above_mean_and_grows_with_ranks(seqs, ranks):
    b = busiest_rank_sequences(float(seqs), ranks)
    assert seqs <= b <= seqs * ranks
    assert busiest_rank_sequences(float(seqs), ranks + 1) >= b - 1e-9


def test_dep4_prefill_loses_more_than_dep2():
    """Direction and size: DEP4's busiest-rank loss is about twice DEP2's (published 13.6% and 5.9%)."""
    (m, hw, w), = serving_setups("deepseek-v4.1-flash", ["gb300-nvl72"], "agentx", None)
    two, four = (dp_prefill_imbalance(m, hw, w, parse_layout(x))["loss"] for x in ("dep2", "dep4"))
    assert 0.03 < two < four < 0.25
    assert 1.5 < four / two < 3.0


def test_busiest_rank_of_three_by_hand():
    # three ranks, three requests, each rank's count Binomial(3, 1/3) taken as independent: F(0) = 8/27,
    # F(1) = 20/27, F(2) = 26/27, E[max] = 3 - (8^3 + 20^3 + 26^3) / 27^3 = 1.6746 (the exact multinomial
    # maximum is 17/9: independence understates it at a handful of requests)
    assert busiest_rank_sequences(1.0, 3) == pytest.approx(3 - (8 ** 3 + 20 ** 3 + 26 ** 3) / 27 ** 3)


def _balanced(monkeypatch, *args, **kw):
    """The same engine with every rank at the mean batch (the busiest-rank term off)."""
    from rubinperf.serving import aggregated

    with monkeypatch.context() as mp:
        mp.setattr(aggregated, "busiest_rank_load", lambda B, ranks: B)
        return engine(*args, **kw)


@pytest.mark.parametrize("hw_name, layout, mix", [("h200", "dep8", RequestMix(1024, 1024)),
                                                   ("gb300-nvl72", "dep16", RequestMix(8192, 1024)),
                                                   ("gb300-nvl72", "dep4", RequestMix(2048, 256, prefix_hit=0.5))])
def test_dep_engine_waits_for_its_busiest_rank(monkeypatch, hw_name, layout, mix):
    """A DEP step is timed at the busiest rank's running requests: never faster than the balanced step, and slower
    where the step grows with rows; a prefill-carrying step waits for the slower of the chunk's rank and the busiest."""
    m = V3 if hw_name == "h200" else V41
    _, (hw,) = load_specs(m.name, [hw_name])
    lay = parse_layout(layout)
    e, flat = engine(m, hw, lay, mix), _balanced(monkeypatch, m, hw, lay, mix)
    assert np.all(e.busiest >= e.B - 1e-12)
    at17 = e.B == 17.0   # the integer grid holds 17 requests per rank
    assert e.busiest[at17] == pytest.approx(busiest_rank_sequences(17.0, lay.dp))
    assert np.all(e.decode_s >= flat.decode_s * (1 - 1e-12))
    assert np.all(e.mixed_s >= flat.mixed_s * (1 - 1e-12))
    assert np.all(e.step_s >= flat.step_s * (1 - 1e-12))
    assert np.all(e.mixed_s >= e.decode_s * (1 - 1e-12))
    assert np.any(e.decode_s > flat.decode_s * 1.001)
    a, b = (closed_loop(x, [64]).records()[0] for x in (e, flat))
    assert a["median_tpot_ms"] >= b["median_tpot_ms"] and a["total_tokens_per_s_per_gpu"] <= b["total_tokens_per_s_per_gpu"]
    assert a["busiest_rank_batch"] > a["running_batch_per_rank"]


def test_dep_step_waits_for_its_slowest_rank_not_always_the_busiest():
    """Every MoE layer ends at a barrier of all the ranks, so the decode step is the slower of the busiest rank's
    step and a mean rank's. MegaMoE picks its block regime from the calling rank's own tokens (DeepGEMM's
    get_block_config_for_mega_moe, by rows x 8 ranks x top-6 / 384 experts): on GB300 DEP8 at 6 rows a request, from
    8 to 11 requests on a mean rank (48-66 rows: 6-8.25 an expert, block_m 16) the busiest rank holds 11.9-15.6
    (71-93 rows: 8.9-11.7, block_m 32, more bytes in flight per SM), so the mean rank is the slower one there."""
    lay, mix = parse_layout("dep8"), RequestMix(64, 2)
    e = engine(V41, GB300, lay, mix)
    point = make_point(V41, GB300, lay, phase="decode", batch=1, context=mix.mean_input + mix.mean_output / 2,
                       draft_tokens=e.draft_tokens, acceptance=e.acceptance, engram_placement=V41.engram_placement)
    whole = e.B >= 1
    B = e.B[whole]
    gpu = {name: np.asarray(step(V41, GB300, lay, dataclasses.replace(point, batch=rows)).gpu_s, dtype=float)
           for name, rows in (("busy", e.busiest[whole]), ("mean", B))}
    mean_slower = gpu["mean"] > gpu["busy"]
    assert np.any(mean_slower)                       # the heuristic's switch: the busiest rank is not always slowest
    assert np.all(e.decode_s[whole][mean_slower] >= gpu["mean"][mean_slower] * (1 - 1e-12))


def test_one_rank_has_no_busiest_rank_term(monkeypatch):
    """DEP1 (gpt-oss-120b fits one GB300) and a TP instance: one scheduler, the engine is the balanced one."""
    m, (hw,) = load_specs("gpt-oss-120b", ["gb300-nvl72"])
    for name in ("dep1", "tp2"):
        lay = parse_layout(name)
        e, flat = engine(m, hw, lay, MIX), _balanced(monkeypatch, m, hw, lay, MIX)
        assert np.array_equal(e.busiest, e.B)
        assert np.array_equal(e.decode_s, flat.decode_s) and np.array_equal(e.mixed_s, flat.mixed_s)


def test_an_engine_that_holds_no_request_says_which_layouts_would():
    """V4.1-Flash on H200 (141 GB): TP2 holds 154 GB of weights and 101 GB of Engram a GPU; TP4 halves both."""
    m, (h200,) = load_specs("deepseek-v4.1-flash", ["h200"])
    with pytest.raises(SpecError, match=r"exceed 141 GB of HBM \(layouts that hold one: tp4, tp8, tep4, tep8, dep8\)"):
        engine(m, h200, TP2, MIX, suggest=True)
    with pytest.raises(SpecError) as plain:
        engine(m, h200, TP2, MIX)
    assert "layouts that hold" not in str(plain.value)
