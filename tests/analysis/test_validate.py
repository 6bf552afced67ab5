"""`rubinperf validate`: bundled published points, predicted through the CLI's own path."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rubinperf.analysis.validate import METRICS, POINTS_FILE, load_points, validate

POINTS = load_points()


def test_bundled_points_cover_the_published_results():
    ids = {p.id for p in POINTS}
    assert {"vr-tp8-single-user", "vr-throughput-at-387", "vr-peak-throughput", "gb300-throughput-at-196",
            "peak-ratio-vr-vs-gb300", "ratio-at-387-vr-vs-gb300", "v41-kv-bytes-per-token"} <= ids
    for p in POINTS:
        assert p.source and p.metric in METRICS and p.band[0] <= 1 <= p.band[1]


def test_validate_command_reports_every_point(cli, predictions_reused):
    res = cli("validate", "--json")
    code, out, err = res.code, res.out, res.err
    records = json.loads(out)
    assert [r["id"] for r in records] == [p.id for p in POINTS]
    for r, p in zip(records, POINTS):
        assert r["ratio"] == pytest.approx(r["predicted"] / p.published)
        # the band checked is the evidence's (rubinperf.analysis.ledger), never wider than the file's
        assert r["stated_band"] == list(p.band)
        assert p.band[0] <= r["band"][0] <= r["band"][1] <= p.band[1]
        assert r["in_band"] == (r["band"][0] <= r["ratio"] <= r["band"][1])
    # Exit status 0 only when every point lies in its band.
    assert code == (0 if all(r["in_band"] for r in records) else 1)
    assert err == ""


def test_points_that_must_hold(predictions_reused):
    from rubinperf.analysis.ledger import validate_with_evidence

    by_id = {r["id"]: r for r in validate_with_evidence(POINTS)}
    # The vLLM posts' 890 B/token of global KV follows from the spec's entry sizes and sharing.
    assert by_id["v41-kv-bytes-per-token"]["predicted"] == pytest.approx(890.0)
    # Decode grows only a few percent from 128K to 855K context, on both racks.
    for rack in ("vr-context-growth", "gb300-context-growth"):
        assert by_id[rack]["in_band"], by_id[rack]
    # Rubin's peak-throughput advantage over GB300 lands near the published 2.7x.
    assert by_id["peak-ratio-vr-vs-gb300"]["in_band"], by_id["peak-ratio-vr-vs-gb300"]
    # Never faster than physics: every predicted throughput is finite and positive.
    assert all(r["predicted"] > 0 for r in by_id.values())


@pytest.mark.parametrize("text,culprit", [
    ('[[point]]\nid = "x"\n', "missing key"),
    ('[[point]]\nid = "x"\nsource = "s"\nmetric = "nope"\nhardware = "h200"\nlayout = "tp8"\nphase = "decode"\n'
     'published = 1.0\nband = [0.5, 2.0]\n', "metric"),
    ('[[point]]\nid = "x"\nsource = "s"\nmetric = "kv_bytes_per_token"\nhardware = "h200"\nlayout = "tp8"\n'
     'phase = "decode"\npublished = 1.0\nband = [1.5, 2.0]\n', "band"),
    ('[[point]]\nid = "x"\ncolour = "red"\n', "unknown key"),
    ('[[point]\n', "malformed"),
])
def test_bad_points_file_is_one_line_exit_2(cli, tmp_path, text, culprit):
    path = tmp_path / "points.toml"
    path.write_text(text)
    res = cli("validate", "--points", str(path))
    code, out, err = res.code, res.out, res.err
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and culprit in err and "Traceback" not in err


def test_a_change_of_the_stack_is_checked_by_the_share_of_gpu_time_it_saves():
    import dataclasses

    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform
    from rubinperf.step.timing import step

    point = next(p for p in POINTS if p.id == "vr-split-k-dep32-b16")
    assert point.metric == "gpu_time_saved" and point.without == {"split_k_max": 1}
    m, lay = load_model("deepseek-v4.1-flash"), parse_layout("dep32")
    hw = load_platform("vr-nvl72")
    after = step(m, hw, lay, make_point(m, hw, lay, batch=16)).gpu_s
    plain = dataclasses.replace(hw, split_k_max=1)
    before = step(m, plain, lay, make_point(m, plain, lay, batch=16)).gpu_s
    rec = validate([point])[0]
    assert 0 < rec["predicted"] == pytest.approx(1 - after / before, rel=1e-12)
    saved_us = dataclasses.replace(point, metric="gpu_time_saved_us")
    assert validate([saved_us])[0]["predicted"] == pytest.approx((before - after) * 1e6, rel=1e-12)


def test_a_model_field_before_a_change_is_checked_the_same_way():
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform
    from rubinperf.step.timing import step

    point = next(p for p in POINTS if p.id == "gb300-replay-layer20-prefill-4k")
    assert point.without == {"replay_start_layer": 21}
    m, hw, lay = load_model("deepseek-v4.1-flash"), load_platform("gb300-nvl72"), parse_layout("dep2")
    m21 = dataclasses.replace(m, replay_start_layer=21)
    after = step(m, hw, lay, make_point(m, hw, lay, phase="prefill", new_tokens=4096)).gpu_s
    before = step(m21, hw, lay, make_point(m21, hw, lay, phase="prefill", new_tokens=4096)).gpu_s
    assert validate([point])[0]["predicted"] == pytest.approx(1 - after / before, rel=1e-12)
    assert before > after   # one more layer over every new token


@pytest.mark.parametrize("without,culprit", [
    ("{ colour = 1 }", "'colour' is not a field"),
    ("{ split_k_max = \"one\" }", "split_k_max"),
    ("{ split_k_max = [1] }", "without: expected a table"),
    ("{ draft_ep_exchange = \"broadcast\" }", "draft_ep_exchange"),
    ("{ split_k_max = 0 }", "split_k_max"),
    ("{ replay_start_layer = 2.5 }", "replay_start_layer"),
    ("{}", "without: expected a table"),
])
def test_a_bad_without_table_is_one_line(cli, tmp_path, without, culprit):
    path = tmp_path / "points.toml"
    path.write_text('[[point]]\nid = "x"\nsource = "s"\nmetric = "gpu_time_saved"\nhardware = "vr-nvl72"\n'
                    'layout = "dep32"\nphase = "decode"\nbatch = 16\npublished = 0.03\nband = [0.5, 2.0]\n'
                    f"without = {without}\n")
    res = cli("validate", "--points", str(path))
    assert res.code == 2 and res.out == "" and res.err.count("\n") == 1 and culprit in res.err, res


def test_default_points_file_is_bundled():
    assert POINTS_FILE.is_file()


def test_every_point_with_a_previous_prediction_says_what_changed(cli, predictions_reused):
    points = load_points(POINTS_FILE)
    with_previous = [p for p in points if p.previous is not None]
    assert with_previous and all(p.changed.strip() for p in with_previous)
    r = cli("validate", "--json")
    recs = {x["id"]: x for x in r.json()}
    for p in with_previous:
        assert recs[p.id]["changed"] == p.changed and recs[p.id]["moved"] is not None


def _offline(pid: str):
    from rubinperf.serving.aggregated import RequestMix
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.select import load_specs
    from rubinperf.analysis.validate import _sets

    p = next(q for q in POINTS if q.id == pid)
    m, (hw,) = load_specs(p.model, [p.hardware], sets=list(p.set) + _sets(p.run_with), stacks=[p.stack] if p.stack else None)
    return p, m, hw, parse_layout(p.layout), RequestMix(isl=p.input_tokens, osl=p.output_tokens)


def test_offline_rows_run_as_trtllm_bench_runs_them():
    """trtllm-bench throughput: the dataset sent at once, whole prompts mixed into generation steps within the run's
    max num tokens. Each row's figure is the closed loop's, by hand from its step times."""
    from rubinperf.serving.aggregated import _kv_capacity, closed_loop, engine

    rows = [p for p in POINTS if p.metric == "offline_tokens_per_s_per_gpu"]
    assert len(rows) == 8
    for p in rows:
        assert p.concurrency == 3000 and p.run_with["chunked_prefill"] is False and p.run_with["mixed_prefill_decode"]
        # trtllm-bench raises max num tokens to at least ISL + max batch when chunked prefill is off
        assert p.run_with["max_num_batched_tokens"] >= p.input_tokens + p.batch
    by_id = {r["id"]: r for r in validate(rows)}
    # Llama-3.3-70B FP8 on H200 TP2: B requests running complete B / (OSL - 1) a step; each needs one whole
    # 1,000-token prompt, which fits the 2,048-token budget beside the B decode rows, so a share B / 999 of the
    # steps carries a prompt; output tokens/s/GPU = B / 999 / mean step x 1,000 / 2 GPUs.
    p, m, hw, lay, mix = _offline("trtllm-llama-70b-fp8-h200-tp2")
    r = by_id[p.id]
    rec = closed_loop(engine(m, hw, lay, mix, draft_tokens=0, max_batch=p.batch), [p.concurrency]).records()[0]
    B = rec["running_batch_per_rank"]
    assert rec["prefill_step_share"] == pytest.approx(B / 999, rel=1e-9)
    assert rec["prefill_chunk_tokens"] == pytest.approx(1000.0)
    step = (1 - B / 999) * rec["decode_step_ms"] + B / 999 * rec["prefill_step_ms"]
    assert rec["output_tokens_per_s_per_gpu"] == pytest.approx(B / 999 / (step / 1e3) * 1000 / 2, rel=1e-6)
    assert B < p.batch and "held by the KV cache" in r["detail"]   # the KV cache binds below trtllm-bench's 768
    assert r["predicted"] <= rec["output_tokens_per_s_per_gpu"] * (1 + 1e-9)   # 95% of the free HBM: no more
    # gpt-oss-120b on GB200: TensorRT-LLM's cache keeps the 18 window layers whole, so a request of 2,000 tokens holds
    # 36 layers x 1,024 B (FP8 K and V, 8 heads x 64) x 2,000 = 73.7 MB, and the KV cache binds below BuildConfig's
    # max batch of 2048 (2.6k requests would fit with 128-token windows).
    g = by_id["trtllm-gpt-oss-120b-gb200-tp1"]
    assert int(g["detail"].split()[1]) < 2048 and "held by the KV cache" in g["detail"]
    p, m, hw, lay, mix = _offline("trtllm-gpt-oss-120b-gb200-tp1")
    assert _kv_capacity(m, hw, lay, mix, 1).kv_bytes_per_request == 36 * 1024 * 2000
    # B200 DEP2: 3,000 requests over 2 ranks; the engine cannot run more than were sent.
    d = by_id["trtllm-gpt-oss-120b-b200-dep2"]
    assert float(d["detail"].split()[1]) <= 1500 and "held by the requests sent" in d["detail"]


def test_offline_row_without_concurrency_is_one_line(cli, tmp_path):
    text = ('[[point]]\nid = "x"\nsource = "s"\nmetric = "offline_tokens_per_s_per_gpu"\nmodel = "llama-3.1-70b"\n'
            'hardware = "h200"\nlayout = "tp2"\nphase = "serving"\nbatch = 512\ninput_tokens = 1000\n'
            'output_tokens = 1000\npublished = 1.0\nband = [0.5, 2.0]\n')
    path = tmp_path / "points.toml"
    path.write_text(text)
    res = cli("validate", "--points", str(path))
    assert res.code == 2 and res.err.count("\n") == 1 and "concurrency" in res.err and "Traceback" not in res.err


# ---------------------------------------------------------------- open-loop runs at a request rate

RATE_POINTS = [p for p in POINTS if p.metric == "simulated_request_rate"]


def test_request_rate_rows_load_with_their_runs_settings():
    assert len(RATE_POINTS) >= 4
    for p in RATE_POINTS:
        assert "http" in p.source and p.request_rate and p.num_requests and p.isl and p.osl and p.quantity
        assert p.band[0] < 1 < p.band[1]


def test_a_request_rate_row_is_predicted_as_serve_request_rate_prints_it(cli):
    """The row's prediction is the field of `rubinperf serve --request-rate R --num-requests N --json` with the row's
    model, rack, layout, lengths and run settings: one path, not a second model of the run."""
    p = next(x for x in RATE_POINTS if x.id == "sglang-v3-h200-dp8-rate10-time")
    rec, = validate([p])
    sets = [a for k, v in p.run_with.items() for a in ("--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}")]
    res = cli("serve", "-m", p.model, "-H", p.hardware, "-l", p.layout, "--request-rate", f"{p.request_rate:g}",
              "--num-requests", str(int(p.num_requests)), "--isl", f"{p.isl:g}", "--osl", f"{p.osl:g}",
              "--draft-tokens", "0", *sets, "--json")
    assert res.code == 0, res.err
    out, = json.loads(res.out)
    assert rec["predicted"] == pytest.approx(out[p.quantity], rel=1e-9)
    # the run's duration is at least the last arrival (50 requests at 10/s) plus one request's decode
    assert rec["predicted"] > 49 / 10 * 0.5 and rec["predicted"] > (p.osl - 1) * out["median_tpot_ms"] / 1e3


def test_a_request_rate_row_names_an_unknown_quantity():
    from rubinperf.errors import SpecError

    p = dataclasses.replace(RATE_POINTS[0], quantity="no_such_field")
    with pytest.raises(SpecError, match="quantity"):
        validate([p])


def test_points_of_one_run_share_it_and_give_what_each_gives_alone(monkeypatch):
    """Two points that differ only in the figure they compare (a run's TTFT and its throughput) are one run of the
    benchmark in a validate (_run_once): each point's prediction is the one it has validated alone."""
    import rubinperf.analysis.validate as V

    runs = []
    once = V._run_once
    monkeypatch.setattr(V, "_run_once", lambda p, run: once(p, lambda: (runs.append(p.id), run())[1]))
    for metric in ("serve", "simulated_request_rate"):
        pairs = [(a, b) for a in POINTS for b in POINTS if a.metric == b.metric == metric and a.id < b.id
                 and dataclasses.replace(a, **V._NOT_RUN) == dataclasses.replace(b, **V._NOT_RUN)]
        assert pairs, metric   # (the bundled points have such pairs: the check below is not empty)
        a, b = pairs[0]
        runs.clear()
        together = V._records([a, b], None)
        assert runs == [a.id]   # one run for the two
        alone = V._records([a], None) + V._records([b], None)
        assert runs == [a.id, a.id, b.id]
        assert [r["predicted"] for r in together] == [r["predicted"] for r in alone]
        assert [r["detail"] for r in together] == [r["detail"] for r in alone]
        assert not V._RUNS   # nothing outlives the validate that made it
