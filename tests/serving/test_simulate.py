"""The aggregated engine simulated step by step (rubinperf/serving/simulate.py): its speed, its agreement with the
closed form's steady state, Little's law, queueing past capacity, preemption, the prefix cache, traces and the CLI."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.errors import SpecError
from rubinperf.serving import simulate as S
from rubinperf.serving.aggregated import RequestMix, closed_loop, engine
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.select import load_specs

V41, (GB300,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"])
TP2 = parse_layout("tp2")
MIX = RequestMix(8192, 1024)
ENGINE = engine(V41, GB300, TP2, MIX)
SIM = S.sim_engine(ENGINE, 8192 + 1024)
# The engine's capacity in requests/s: the closed form's throughput where its running batch stops growing.
CAPACITY = float(closed_loop(ENGINE, [ENGINE.max_concurrency]).columns["request_throughput_per_s"][0])


def _steady(run: S.Run, skip: float = 0.2):
    """Throughput and mean TPOT over the completions between the first and last `skip` of the run."""
    end = np.sort(run.end_s)
    n = end.size
    a, b = end[int(skip * n)], end[int((1 - skip) * n)]
    inside = (run.end_s > a) & (run.end_s <= b)
    tpot = (run.end_s - run.first_token_s) / (run.traffic.output_tokens - 1)
    return np.sum(inside) / (b - a), float(np.mean(tpot[inside]))


def test_ten_thousand_requests_within_two_cpu_seconds():
    """Done-when: a 10,000-request run of one engine (its step tables built, the loop, the summary) takes <= 2 s of
    CPU, open loop at 80% of capacity and closed loop at 64 clients."""
    for kwargs in ({"rate": 0.8 * CAPACITY}, {}):
        t = time.process_time()
        sim = S.sim_engine(ENGINE, 8192 + 1024)
        traffic = S.synthetic(MIX, 10_000, seed=0, **kwargs)
        rec = S.summary(S.run_engine(sim, traffic, clients=0 if kwargs else 64))
        cpu = time.process_time() - t
        assert rec["completed"] == 10_000
        assert cpu <= 2.0, cpu


@pytest.mark.parametrize("mix,clients,where", [(MIX, 16, None), (MIX, 64, None), (MIX, 160, None),
                                               (RequestMix(27000, 300, prefix_hit=0.965), 48, None),
                                               (MIX, 64, ("b200", "dep8"))])
def test_closed_loop_simulation_agrees_with_the_steady_state(mix, clients, where):
    """Done-when: N clients with no think time, simulated, give the closed form's request throughput and mean TPOT
    within 5% once the run is steady. On a DEP engine the simulated ranks step together, each step as long as the
    slowest rank's; the closed form's share of steps that carry prefill on any rank (1 - (1 - f)^ranks) and its
    busiest-rank rows come out of that."""
    if where is None:
        e = ENGINE if mix is MIX else engine(V41, GB300, TP2, mix)
    else:
        m, (hw,) = load_specs("deepseek-v4.1-flash", [where[0]])
        e = engine(m, hw, parse_layout(where[1]), mix)
    sim = SIM if e is ENGINE else S.sim_engine(e, mix.isl + mix.osl)
    (run,) = S.run_engine(sim, S.synthetic(mix, 3000, seed=1), clients=clients)
    thr, tpot = _steady(run)
    ref = closed_loop(e, [clients]).columns
    assert thr == pytest.approx(float(ref["request_throughput_per_s"][0]), rel=0.05)
    assert tpot * 1e3 == pytest.approx(float(ref["mean_tpot_ms"][0]), rel=0.05)


def test_littles_law():
    """Done-when: the mean number in the system (the loop's own count of arrived, unfinished requests, integrated
    over time) equals the arrival rate times the mean time in the system within 1%, over the whole run and over a
    steady window (the count then from the requests' arrival and end times, the rate from the arrivals in it)."""
    (run,) = S.run_engine(SIM, S.synthetic(MIX.__class__(8192, 1024, 0.5), 8000, seed=2, rate=0.7 * CAPACITY))
    duration = run.end_s.max() - run.arrival_s.min()
    e2e = run.end_s - run.arrival_s
    L = run.in_system_s / duration
    assert L == pytest.approx(len(e2e) / duration * e2e.mean(), rel=0.01)
    t1, t2 = 0.2 * duration, 0.8 * duration
    overlap = np.clip(np.minimum(run.end_s, t2) - np.maximum(run.arrival_s, t1), 0, None)
    L_window = overlap.sum() / (t2 - t1)
    came = (run.arrival_s >= t1) & (run.arrival_s < t2)
    assert L_window == pytest.approx(came.sum() / (t2 - t1) * e2e[came].mean(), rel=0.01)
    assert L > 1   # a loaded engine: the check is not 0 = 0


@settings(max_examples=8, deadline=None, derandomize=True)
@given(load=st.floats(0.3, 0.8), seed=st.integers(0, 1000))
def test_ttft_p99_stays_finite_below_capacity(load, seed):
    """Done-when: below the engine's capacity TTFT P99 does not grow with the run's length (4x the requests: at
    most 1.5x the P99, and under 5 s)."""
    p99 = [S.summary(S.run_engine(SIM, S.synthetic(MIX, n, seed=seed, rate=load * CAPACITY)))["p99_ttft_ms"]
           for n in (1000, 4000)]
    assert p99[1] <= 1.5 * p99[0] + 50 and p99[1] < 5000


@settings(max_examples=8, deadline=None, derandomize=True)
@given(load=st.floats(1.2, 3.0), seed=st.integers(0, 1000))
def test_ttft_p99_grows_without_bound_past_capacity(load, seed):
    """Done-when: past capacity the queue grows with every request: TTFT P99 grows about in proportion to the
    run's length (4x the requests: at least 3x the P99), at the queue's rate 1 / capacity - 1 / rate a request."""
    p99 = [S.summary(S.run_engine(SIM, S.synthetic(MIX, n, seed=seed, rate=load * CAPACITY)))["p99_ttft_ms"]
           for n in (1000, 4000)]
    assert p99[1] >= 3 * p99[0]
    growth = 4000 * (1 / CAPACITY - 1 / (load * CAPACITY)) * 1e3   # the last request's wait, roughly
    assert p99[1] >= 0.5 * growth


def test_requests_queue_and_are_preempted_when_the_kv_cache_is_small():
    """A KV cache that holds fewer requests than the budget admits: requests queue, and decoding requests that
    cannot grow preempt the last admitted (which recompute); every request still completes."""
    m, (hw,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"], ["hbm_capacity=266.5GB"])
    e = engine(m, hw, TP2, MIX)
    sim = S.sim_engine(e, 9216)
    assert sim.kv_tokens < SIM.kv_tokens
    rec = S.summary(S.run_engine(sim, S.synthetic(MIX, 2000, seed=0, rate=6.0)))
    assert rec["completed"] == 2000
    assert rec["requests_preempted"] > 0 and rec["requests_queued"] > 0
    free = S.summary(S.run_engine(SIM, S.synthetic(MIX, 2000, seed=0, rate=6.0)))
    assert free["requests_preempted"] == 0
    assert rec["p99_ttft_ms"] > free["p99_ttft_ms"]


def _trace(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(p)


def test_session_turns_reuse_their_prefix(tmp_path):
    """A session's later turn computes only what its earlier context does not cover: with prefix_tokens the turn's
    TTFT falls to that of its new tokens; without a session the prefix is not found."""
    rows = [{"arrival_s": 0.0, "input_tokens": 30000, "output_tokens": 50, "session": "a"},
            {"arrival_s": 60.0, "input_tokens": 31000, "output_tokens": 50, "session": "a", "prefix_tokens": 30050}]
    (run,) = S.run_engine(SIM, S.read_trace(_trace(tmp_path, rows)))
    ttft = run.first_token_s - run.arrival_s
    assert ttft[1] < ttft[0] / 5
    other = dict(rows[1], session="b")
    (run2,) = S.run_engine(SIM, S.read_trace(_trace(tmp_path, [rows[0], other])))
    assert (run2.first_token_s - run2.arrival_s)[1] > ttft[0]   # a longer prompt, nothing cached


def test_traffic_arrives_as_vllm_bench_serve_sends_it():
    """Poisson at burstiness 1 (gaps' coefficient of variation 1), gamma bursts below (CV 1 / sqrt(shape)), the mean
    gap 1 / rate either way; the same seed gives the same run."""
    for shape in (1.0, 0.25):
        t = S.synthetic(MIX, 20000, seed=5, rate=4.0, burstiness=shape).arrival_s
        gaps = np.diff(t)
        assert gaps.mean() == pytest.approx(0.25, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(shape), rel=0.05)
    a = S.summary(S.run_engine(SIM, S.synthetic(MIX, 300, seed=9, rate=5.0)))
    b = S.summary(S.run_engine(SIM, S.synthetic(MIX, 300, seed=9, rate=5.0)))
    assert a == b


def test_itl_spread_comes_from_the_steps():
    """4a: ITL's spread is that of the simulated steps: steps that carry a chunk are slower, so under load P90 ITL
    sits above the median, and the mean ITL is the mean step a decoding request waits."""
    rec = S.summary(S.run_engine(SIM, S.synthetic(MIX, 2000, seed=4, rate=0.7 * CAPACITY)))
    assert rec["p90_itl_ms"] > 1.5 * rec["median_itl_ms"]
    assert rec["median_itl_ms"] <= rec["mean_itl_ms"] <= rec["p99_itl_ms"]


@pytest.mark.parametrize("line,why", [
    ('{"arrival_s": 0, "input_tokens": 10}', "missing 'output_tokens'"),
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5, "x": 1}', "unknown key 'x'"),
    ('{"arrival_s": -1, "input_tokens": 10, "output_tokens": 5}', "arrival_s: expected 0"),
    ('{"arrival_s": 0, "input_tokens": 10.5, "output_tokens": 5}', "whole number"),
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5, "prefix_tokens": 10}', "below input_tokens"),
    ('[1, 2]', "a JSON object"),
    ('{"arrival_s": 0, ', "not JSON"),
])
def test_trace_errors_name_the_line(tmp_path, line, why):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n' + line + "\n")
    with pytest.raises(SpecError, match=why) as exc:
        S.read_trace(str(p))
    assert ":2:" in str(exc.value)


def test_trace_size_is_checked_before_parsing(tmp_path, monkeypatch):
    p = tmp_path / "big.jsonl"
    p.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n' * 10)
    from rubinperf import files

    monkeypatch.setitem(files.READ_LIMIT_BYTES, "trace", 100)
    with pytest.raises(SpecError, match="bytes, over the 100 bytes limit"):
        S.read_trace(str(p))


def test_goodput_and_percentile_parsing():
    assert S.parse_goodput("ttft:2s tpot:50ms") == {"ttft": 2.0, "tpot": 0.05}
    assert S.parse_goodput("e2el:10s,itl:40ms") == {"e2e": 10.0, "itl": 0.04}
    for bad in ("ttft", "ttft:2", "foo:2s", "ttft:-1s"):
        with pytest.raises(SpecError):
            S.parse_goodput(bad)
    assert S.parse_percentiles("50,90,99.9") == (50.0, 90.0, 99.9)
    for bad in ("0", "101", "x", ""):
        with pytest.raises(SpecError):
            S.parse_percentiles(bad)


def test_goodput_counts_requests_within_every_limit():
    runs = S.run_engine(SIM, S.synthetic(MIX, 500, seed=3, rate=0.9 * CAPACITY))
    loose, tight = S.summary(runs, goodput={"ttft": 100.0}), S.summary(runs, goodput={"ttft": 0.2, "tpot": 0.012})
    assert loose["request_goodput_per_s"] == pytest.approx(loose["request_throughput_per_s"])
    assert tight["request_goodput_per_s"] < tight["request_throughput_per_s"]
    first = runs[0].first_token_s - runs[0].arrival_s
    tpot = (runs[0].end_s - runs[0].first_token_s) / (runs[0].traffic.output_tokens - 1)
    assert tight["good_requests"] == int(np.sum((first <= 0.2) & (tpot <= 0.012)))


def test_cli_request_rate_trace_json_csv(tmp_path, capsys):
    from conftest import invoke

    r = invoke(["serve", "-H", "gb300-nvl72", "-l", "tp2", "--request-rate", "2,4", "-n", "200",
                "--percentiles", "50,99.9", "--goodput", "ttft:2s tpot:50ms", "--json"])
    assert r.exit_code == 0, r.output
    recs = json.loads(r.output)
    assert [x["request_rate"] for x in recs] == [2.0, 4.0]
    assert {"p99_9_ttft_ms", "median_itl_ms", "request_goodput_per_s", "requests_queued", "requests_preempted"} <= set(recs[0])
    path = _trace(tmp_path, [{"arrival_s": 0.5 * i, "input_tokens": 2000, "output_tokens": 100} for i in range(20)])
    r = invoke(["serve", "-H", "gb300-nvl72", "-l", "tp2", "--trace", path, "--csv"])
    assert r.exit_code == 0, r.output
    head, row = r.output.splitlines()[:2]
    assert "mean_ttft_ms" in head.split(",") and len(r.output.splitlines()) == 2
    r = invoke(["serve", "-H", "gb300-nvl72", "-l", "tp2", "--trace", path])
    assert r.exit_code == 0 and "TTFT" in r.output
    args = ["serve", "-H", "gb300-nvl72", "-l", "tp2", "--simulate", "-c", "4,8", "-n", "100", "--turn-gap", "2",
            "--json"]
    runs = [json.loads(invoke(args).output) for _ in range(2)]
    assert runs[0] == runs[1]   # deterministic for a seed
    assert [(x["mode"], x["concurrency"], x["turn_gap_s"]) for x in runs[0]] == [("closed-loop", 4.0, 2.0),
                                                                              ("closed-loop", 8.0, 2.0)]
    from rubinperf.cli import main

    for bad in (["--request-rate", "0"], ["--trace", str(tmp_path / "none.jsonl")], ["--goodput", "ttft:2s"],
                ["--request-rate", "2", "--trace", path], ["--trace", path, "--isl", "1000"],
                ["--request-rate", "2", "--percentiles", "0"], ["--request-rate", "2", "--burstiness", "0"]):
        capsys.readouterr()
        try:
            code = main(["serve", "-H", "gb300-nvl72", "-l", "tp2", *bad])
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (bad, err)


def test_a_session_turn_waits_its_gap_after_the_previous_turn_ends(tmp_path):
    """turn_gap_s: a later turn goes out that long after its session's previous turn ends, however long the engine
    took; its prefix comes from that turn's context. A gap without an earlier turn of its session is an error."""
    rows = [{"arrival_s": 0.0, "input_tokens": 20000, "output_tokens": 200, "session": 7},
            {"turn_gap_s": 7.0, "input_tokens": 20500, "output_tokens": 200, "session": 7, "prefix_tokens": 20200},
            {"arrival_s": 1.0, "input_tokens": 8000, "output_tokens": 100}]
    (run,) = S.run_engine(SIM, S.read_trace(_trace(tmp_path, rows)))
    assert run.arrival_s[1] == pytest.approx(run.end_s[0] + 7.0)
    assert run.first_token_s[1] - run.arrival_s[1] < (run.first_token_s[0] - run.arrival_s[0]) / 5
    for bad, why in (([{"turn_gap_s": 1.0, "input_tokens": 10, "output_tokens": 5, "session": 1}], "no earlier line"),
                     ([rows[0], dict(rows[1], arrival_s=3.0)], "not both"),
                     ([rows[0], dict(rows[1], session=None)], "needs a session")):
        with pytest.raises(SpecError, match=why):
            S.read_trace(_trace(tmp_path, bad, "bad.jsonl"))


def test_pareto_and_compare_take_the_turn_gap(capsys):
    """--turn-gap (default: the workload's turn_gap_s, agentx 7 s) is the aggregated engines' think time: each point's
    clients are its running requests, those in prefill and those thinking, N = B + lambda (TTFT + gap) (Little's law),
    and the gap adds lambda x gap clients at the same running batch."""
    from conftest import invoke

    got = {}
    for gap in ("0", "7"):
        r = invoke(["pareto", "--serving", "agg", "-H", "gb300-nvl72", "-l", "tp2", "--turn-gap", gap,
                    "--json", "--no-chart"])
        assert r.exit_code == 0, r.output
        got[gap] = json.loads(r.output)
    for rec in got["7"]:
        lam = rec["request_throughput_per_s"]
        assert rec["turn_gap_s"] == 7.0
        assert rec["concurrency"] == pytest.approx(rec["running_batch_per_rank"] + rec["queued_per_rank"]
                                                   + lam * (rec["mean_ttft_ms"] / 1e3 + 7.0), rel=0.02)
    from rubinperf.specs.workload import load_workload

    assert load_workload("agentx").turn_gap_s == 7.0 and load_workload("chat-8k1k").turn_gap_s == 0.0
    r = invoke(["compare", "--serving", "agg", "-H", "gb300-nvl72", "-l", "tp2", "--turn-gap", "3",
                "--json", "--kernels", "0"])
    assert r.exit_code == 0, r.output
    from rubinperf.cli import main

    capsys.readouterr()
    try:
        code = main(["pareto", "--serving", "agg", "-l", "tp2", "--turn-gap", "-1"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "--turn-gap" in capsys.readouterr().err


def test_disaggregated_prefill_removes_the_interference():
    """P/D (--prefill-layout): the prompts run on prefill engines, the KV goes to the decode engine, which only
    decodes: at the same rate its TPOT is below the aggregated engine's (no chunk shares its steps), TTFT is the
    prefill engines', every request ends after its first token plus its KV transfer, and Little's law still holds over
    the run (the transfer counted in the system)."""
    dep = parse_layout("dep2")
    pre = engine(V41, GB300, dep, MIX)
    traffic = S.synthetic(MIX, 1500, seed=6, rate=4.0)
    run = S.disaggregated(S.sim_engine(pre, 9216), 1, SIM, traffic, seed=6)
    agg = S.summary(S.run_engine(SIM, traffic, seed=6))
    pd = S.summary([run], gpus=TP2.ranks + dep.ranks)
    assert pd["completed"] == 1500 and pd["gpus"] == 4
    assert pd["median_tpot_ms"] < 0.8 * agg["median_tpot_ms"]
    assert pd["p99_itl_ms"] < 0.5 * agg["p99_itl_ms"]   # no step carries a prompt's chunk
    assert np.all(run.end_s > run.first_token_s)
    duration = run.end_s.max() - run.arrival_s.min()
    e2e = run.end_s - run.arrival_s
    assert run.in_system_s / duration == pytest.approx(e2e.sum() / duration, rel=1e-9)
    with pytest.raises(SpecError, match="open loop"):
        S.serve_records(ENGINE, clients=[4], num_requests=10, prefill=pre)
