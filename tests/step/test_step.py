"""The step model: hand-derived per-rank costs, properties of the aggregation, seed behaviour."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.cli import main
from rubinperf.step.point import Point
from rubinperf.step.graph import build_step
from rubinperf.specs.layout import parse_layout
from rubinperf.step.point import make_point
from rubinperf.specs.stack import load_platform
from rubinperf.specs.model import load_model
from rubinperf.step.timing import step

V41 = load_model("deepseek-v4.1-flash")
GB300 = load_platform("gb300-nvl72")
VR = load_platform("vr-nvl72")
FP4 = 0.5 + 1 / 32          # e2m1 + one ue8m0 scale per 32 values
FP8 = 1 + 4 / (128 * 128)   # e4m3 + one FP32 scale per 128x128 block
EXPERT = 5120 * 3 * 2304    # gate + up + down of one V4.1 expert: 35,389,440 weights


def ops_named(ops, name, part="target"):
    found = [o for o in ops if o.name == name and o.part == part]
    assert found, f"no op {name!r}"
    return found


def test_tp8_reads_an_eighth_of_every_touched_expert():
    # Batch 1 verifying 1 + 5 tokens: 6 tokens pick 6 of 384 experts each.
    ops = build_step(V41, parse_layout("tp8"), make_point(V41, VR, parse_layout("tp8")))
    untouched = (1 - 6 / 384) ** 6            # chance one expert is missed by all 6 tokens
    touched = 384 * (1 - untouched)           # ~34.6 experts: 36 picks, a few repeats
    assert 34.0 < touched < 35.0
    per_layer = touched * 5120 * (3 * 2304 // 8) * FP4   # 288-column slice of each, per projection
    moe = ops_named(ops, "MegaMoE (experts)")
    assert sum(o.repeat for o in moe) == 40
    for o in moe:
        assert o.cost.weight_bytes == pytest.approx(per_layer, rel=1e-12)
        assert o.cost.nvlink_bytes == 0  # no dispatch in TP
    # Two all-reduces per layer (attention, MoE) of 6 tokens x 5120 BF16 (60 KiB, below the stack's 256 KiB
    # one-shot limit). Rubin's stack runs them one-shot from the GEMM epilogues: each rank receives the 7 others'
    # partials, with no collective set-up of its own.
    ar = ops_named(ops, "all-reduce (MoE, one-shot)")
    assert ar[0].cost.nvlink_bytes == pytest.approx(7 * 6 * 5120 * 2) and ar[0].cost.collectives == 0
    # Unfused, the one-shot is a collective kernel of its own; as a two-shot kernel (reduce-scatter, all-gather),
    # 2 x 7/8 of it is sent.
    tp8 = make_point(V41, VR, parse_layout("tp8"))
    plain = build_step(V41, parse_layout("tp8"), dataclasses.replace(tp8, tp_allreduce_fused=False))
    (one,) = {o.cost.collectives for o in ops_named(plain, "all-reduce (MoE, one-shot)")}
    assert one == 1
    two = build_step(V41, parse_layout("tp8"), dataclasses.replace(tp8, allreduce_algorithms=("two-shot",),
                                                                   allreduce_switch_bytes=()))
    assert ops_named(two, "all-reduce (MoE, two-shot)")[0].cost.nvlink_bytes == pytest.approx(2 * 6 * 5120 * 2 * 7 / 8)


def test_dep32_reads_the_touched_experts_of_its_12():
    lay = parse_layout("dep32")
    ops = build_step(V41, lay, make_point(V41, GB300, lay))   # 16 requests x 6 tokens per rank
    moe = ops_named(ops, "MegaMoE (dispatch + experts + combine)")
    assert sum(o.repeat for o in moe) == 40
    # 96 tokens per rank x 32 ranks = 3072 tokens route into this rank's 384 / 32 = 12 experts: all touched.
    weight_bytes = 12 * EXPERT * FP4
    assert weight_bytes == pytest.approx(225_607_680)
    # Routed rows: 96 tokens x top-6 = 576 on average; FLOPs 2 x rows x 5120 x 6912.
    flops = 2 * 576 * 5120 * 6912
    # MegaMoE pulls every routed token-topk row that lives on another rank (DeepGEMM's dispatch: one slot per
    # token-topk), 31/32 of the 6 per token, and writes each back.
    remote = 6 * 31 / 32
    comm = 96 * remote * 5120 * (FP8 + 2)   # dispatch FP8 out, combine BF16 back
    for o in moe:
        assert o.cost.weight_bytes == pytest.approx(weight_bytes, rel=1e-9)
        assert o.cost.fp8_fp4_flops == pytest.approx(flops)
        assert o.cost.nvlink_bytes == pytest.approx(comm)
        assert o.stretch == pytest.approx(1 / 0.94)   # EPLB balancedness


def test_query_projection_per_layout():
    for name, cols in (("dep32", 32768), ("tp8", 32768 // 8)):
        lay = parse_layout(name)
        p = make_point(V41, GB300, lay)
        tokens = (16 if name == "dep32" else 1) * 6
        q = ops_named(build_step(V41, lay, p), "q projection")[0]
        # q_down [5120 -> 1280] replicated, q_up [1280 -> 64 heads x 512] split by heads under TP.
        assert q.cost.fp8_flops == pytest.approx(2 * tokens * 1280 * 5120 + 2 * tokens * cols * 1280)
        assert q.cost.weight_bytes == pytest.approx((5120 * 1280 + 1280 * cols) * FP8)


def test_tp_weight_bytes_fall_as_one_over_n():
    # Enough tokens that every expert is touched, so only the split changes.
    totals = {}
    for n in (1, 2, 4, 8):
        lay = parse_layout(f"tp{n}")
        ops = build_step(V41, lay, Point("decode", batch=256, context=8192, balancedness=1.0, draft_balancedness=1.0))
        split = [o for o in ops if o.part == "target" and o.name in ("MegaMoE (experts)", "shared expert", "LM head")]
        totals[n] = sum(o.cost.weight_bytes * o.repeat for o in split)
    for n in (2, 4, 8):
        assert totals[n] * n == pytest.approx(totals[1], rel=1e-5)


LAYOUTS = st.sampled_from(["dep8", "dep16", "dep32", "tp4", "tp8"])
HARDWARE = st.sampled_from([GB300, VR])


@settings(max_examples=40, deadline=None)
@given(HARDWARE, LAYOUTS, st.integers(1, 200), st.integers(1, 64), st.integers(0, 900_000), st.integers(1, 200_000))
def test_step_grows_with_batch_and_context(hw, layout, batch, more, context, more_context):
    lay = parse_layout(layout)
    t = lambda b, c: step(V41, hw, lay, Point("decode", batch=b, context=c)).expected_s
    base = t(batch, context)
    assert t(batch + more, context) >= base * (1 - 1e-12)
    assert t(batch, context + more_context) >= base * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(HARDWARE, st.integers(1024, 65536), st.integers(0, 500_000), st.integers(1, 32768))
def test_prefill_grows_with_new_tokens_and_context(hw, new, context, more):
    lay = parse_layout("dep2")
    t = lambda n, c: step(V41, hw, lay, Point("prefill", batch=1, context=c, new_tokens=n)).expected_s
    assert t(new + more, context) >= t(new, context) * (1 - 1e-12)
    assert t(new, context + more) >= t(new, context) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(HARDWARE, st.sampled_from(["dep2", "dep16", "dep32", "tp8"]), st.sampled_from(["prefill", "decode"]),
       st.integers(1, 128), st.integers(0, 800_000))
def test_speed_of_light_never_exceeds_expected(hw, layout, phase, batch, context):
    lay = parse_layout(layout)
    p = make_point(V41, hw, lay, phase=phase, batch=batch, context=context, new_tokens=max(batch, 8192))
    r = step(V41, hw, lay, p)
    for o in r.ops:
        assert o.sol_s <= o.expected_s * (1 + 1e-12), o.op.name
        assert o.time.sol_s >= max(o.time.sol_compute_s, o.time.sol_memory_s, o.time.sol_comm_s) * (1 - 1e-12)
    assert r.sol_s <= r.expected_s * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(HARDWARE, st.sampled_from(["dep16", "dep32", "tp4", "tp8"]), st.integers(1, 128))
def test_tokens_per_gpu_times_gpus_is_instance_throughput(hw, layout, batch):
    lay = parse_layout(layout)
    r = step(V41, hw, lay, make_point(V41, hw, lay, batch=batch))
    instance = batch * 3.51 * lay.dp / r.expected_s      # accepted tokens per second of the whole instance
    assert r.tokens_per_s_per_gpu * lay.ranks == pytest.approx(instance, rel=1e-12)
    assert r.tokens_per_s_per_user == pytest.approx(3.51 / r.expected_s)


E16, E32 = 1.765991, 2.069669   # E[max of 16 (32) standard normals]: the integral of x n phi Phi^(n-1), done apart (numpy, scipy.special.ndtr, 3M points)


def test_expected_max_of_normals():
    """E[max of n standard normals]: 1/sqrt(pi) for two, 1.765991 for 16 and 2.069669 for 32 (integrated apart)."""
    from rubinperf.roofline import expected_max_normal

    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-5)
    assert expected_max_normal(16) == pytest.approx(E16, rel=1e-5)
    assert expected_max_normal(32) == pytest.approx(E32, rel=1e-5)


def test_host_hidden_under_async_scheduling_when_shorter_than_the_gpu():
    """DEP32 on the November stack: scheduling 0.2 ms on a mean rank, the slowest of 32 at 0.2 ms x (1 + 0.2 x E32),
    then the DP sync by recursive doubling, 5 rounds x 0.3 ms = 1.5 ms: a host path of 1.783 ms, shorter than the GPU
    step, all of it hidden under async scheduling (step = GPU); without async scheduling all of it adds."""
    lay = parse_layout("dep32")
    r = step(V41, VR, lay, make_point(V41, VR, lay))
    path = 0.2e-3 * (1 + 0.2 * E32) + 1.5e-3
    assert (r.host_s, r.sync_s) == (pytest.approx(0.2e-3), pytest.approx(1.5e-3))
    assert r.cpu_s == pytest.approx(path, rel=1e-5)
    assert r.gpu_s > r.cpu_s and r.exposed_s == 0 and r.expected_s == r.gpu_s
    assert r.bound != "cpu"
    sync = dataclasses.replace(VR, async_scheduling=False)
    s = step(V41, sync, lay, make_point(V41, sync, lay))
    assert s.exposed_s == pytest.approx(path, rel=1e-5)
    assert s.expected_s == pytest.approx(s.gpu_s + path, rel=1e-5) and s.expected_s == s.gpu_s + s.cpu_s
    # TP: no DP sync op and one scheduler (no slowest rank): 0.2 ms, hidden
    tp = step(V41, VR, parse_layout("tp8"), make_point(V41, VR, parse_layout("tp8")))
    assert tp.sync_s == 0 and not any(o.op.name == "DP sync" for o in tp.ops)
    assert tp.cpu_s == pytest.approx(0.2e-3) and tp.expected_s == tp.gpu_s


def test_a_host_path_longer_than_the_gpu_step_shows_by_the_difference():
    """Async scheduling: step = GPU + max(0, host path - GPU) = the host path where it is longer (scheduler at 50 ms,
    the slowest of 32 ranks at 50 x (1 + 0.2 x E32) ms, + 1.5 ms of DP sync); bound cpu."""
    lay = parse_layout("dep32")
    slow = dataclasses.replace(VR, step_overhead_s=50e-3)
    r = step(V41, slow, lay, make_point(V41, slow, lay))
    path = 50e-3 * (1 + 0.2 * E32) + 1.5e-3
    assert r.cpu_s == pytest.approx(path, rel=1e-5)
    assert r.exposed_s == pytest.approx(path - r.gpu_s, rel=1e-5)
    assert r.expected_s == pytest.approx(path, rel=1e-5) and r.bound == "cpu"
    # no spread across ranks: the mean rank's
    even = dataclasses.replace(slow, host_rank_spread=0.0)
    e = step(V41, even, lay, make_point(V41, even, lay))
    assert e.expected_s == pytest.approx(51.5e-3, rel=1e-9)


def test_admissions_spread_across_ranks_as_a_poisson_count():
    """A caller's host work with a variance (admissions): the slowest rank's is mean + E[max] x sd, the sd the root of
    (spread x the step's own work)^2 + the variance: at DEP32, 1 ms of admissions a step with variance (1 ms)^2."""
    lay = parse_layout("dep32")
    r = step(V41, VR, lay, make_point(V41, VR, lay))
    r = dataclasses.replace(r, extra_cpu_s=1e-3, extra_cpu_var_s2=1e-6)
    sd = math.sqrt((0.2 * 0.2e-3) ** 2 + 1e-6)
    assert r.cpu_s == pytest.approx(1.2e-3 + E32 * sd + 1.5e-3, rel=1e-5)


def test_exposed_host_work_larger_than_any_gpu_term_is_the_bound():
    """Without async scheduling a DP sync of 5 x 0.7 ms = 3.5 ms adds in full and outweighs every term's share of the GPU
    time: bound cpu, though the host path is shorter than the GPU step; the breakdown's last row is that exposed
    time."""
    from rubinperf.step.records import EXPOSED_HOST_ROW, step_record

    lay = parse_layout("dep32")
    slow = dataclasses.replace(VR, dp_sync_per_rank_s=0.7e-3, async_scheduling=False)
    r = step(V41, slow, lay, make_point(V41, slow, lay))
    path = 0.2e-3 * (1 + 0.2 * E32) + 3.5e-3
    assert r.expected_s == pytest.approx(r.gpu_s + path, rel=1e-5) and r.gpu_s > r.cpu_s
    assert r.bound == "cpu"
    rec = step_record(r)
    last = rec["breakdown"][-1]
    assert last["kernel"] == EXPOSED_HOST_ROW and last["time_ms"] == pytest.approx(path * 1e3, rel=1e-5)
    gpu = sum(b["time_ms"] for b in rec["breakdown"] if b["part"] != "cpu")
    assert gpu + last["time_ms"] == pytest.approx(rec["step_time_ms"], rel=1e-12)


def test_dp_sync_rounds():
    """Linear all-reduce: one round per rank; recursive doubling: ceil(log2 ranks)."""
    from rubinperf.roofline import dp_sync_rounds

    lin = dataclasses.replace(VR, dp_sync_algorithm="linear")
    assert [dp_sync_rounds(n, VR) for n in (1, 2, 4, 16, 32, 48)] == [0, 1, 2, 4, 5, 6]
    assert [dp_sync_rounds(n, lin) for n in (2, 16, 32)] == [2, 16, 32]


UNOPTIMISED = "vllm-gb300-oct2026-unoptimised"
AGENTX_TURN = dict(prompt_tokens_per_turn=27000.0, output_tokens_per_turn=300.0)   # examples/agentx.toml


@pytest.mark.parametrize("per_rank_16, per_rank_32", [(16, 16), (32, 16), (48, 48)])   # same batch per rank; same concurrency
def test_unoptimised_dep32_is_slower_than_dep16_with_less_gpu_time(per_rank_16, per_rank_32):
    """The October post: an unoptimised DEP32 step was slower than DEP16 (17.57 vs 13.84 ms) although its GPU work was
    1.1 ms shorter. Under async scheduling, serving the agentic turn (admissions of 27K-token prompts at 4.54e-8 s a
    token, a Poisson count per rank): DEP16's host path (5.4 ms of linear Gloo sync + the slowest of 16 ranks'
    scheduling) hides under its GPU step, DEP32's (10.8 ms + the slowest of 32) outlasts it. On the fixed stack
    (recursive doubling, 1.2 / 1.5 ms) both hide and DEP32 is the shorter, as its GPU work; the fix moves the DEP32 step
    by far less than the 9.3 ms the sync shrank by."""
    from rubinperf.serving.specdecode import decode_engine

    d16, d32 = parse_layout("dep16"), parse_layout("dep32")
    steps = {}
    for stack, slower in ((UNOPTIMISED, True), ("vllm-gb300-oct2026", False)):
        hw = load_platform("gb300-nvl72", stack)
        a = decode_engine(V41, hw, d16, float(per_rank_16), 131072, **AGENTX_TURN).result
        b = decode_engine(V41, hw, d32, float(per_rank_32), 131072, **AGENTX_TURN).result
        assert b.gpu_s < a.gpu_s, stack
        assert (b.expected_s > a.expected_s) == slower, (stack, a.expected_s, b.expected_s)
        assert a.exposed_s == 0, stack                       # DEP16: the host path hides
        steps[stack] = b.expected_s
    assert 0 < steps[UNOPTIMISED] - steps["vllm-gb300-oct2026"] < 0.5 * 9.3e-3
    hw = load_platform("gb300-nvl72", UNOPTIMISED)
    assert step(V41, hw, d32, make_point(V41, hw, d32)).sync_s == pytest.approx(10.8e-3)


def test_admission_bursts_widen_the_ranks_spread_and_the_cap_bounds_them():
    """Admissions in bursts of b requests (admission_burst_requests): a rank's count per step is compound Poisson, the
    same mean host work and b x its variance; the slowest of 32 ranks then reaches the DP barrier later, so DEP32's
    step minus DEP16's grows with b (the unoptimised stack: no cap). A cap of c new KV loads per step bounds a burst at
    c (the fixed stack: 4), so a burst of 140 there is one of 4."""
    from rubinperf.serving.specdecode import decode_engine

    def pair(stack, burst):
        hw = dataclasses.replace(load_platform("gb300-nvl72", stack), admission_burst_requests=burst)
        return [decode_engine(V41, hw, parse_layout(lay), 48.0, 131072, **AGENTX_TURN).result for lay in ("dep16", "dep32")]

    gaps = []
    for burst in (1.0, 4.0, 140.0):
        a, b = pair(UNOPTIMISED, burst)
        one = pair(UNOPTIMISED, 1.0)[1]
        assert float(b.extra_cpu_s) == pytest.approx(float(one.extra_cpu_s))           # the same mean work
        assert float(b.extra_cpu_var_s2) == pytest.approx(burst * float(one.extra_cpu_var_s2))
        gaps.append(float(b.expected_s - a.expected_s))
    assert gaps[0] < gaps[1] < gaps[2]
    capped = pair("vllm-gb300-oct2026", 140.0)[1]
    at_cap = pair("vllm-gb300-oct2026", 4.0)[1]
    assert float(capped.extra_cpu_var_s2) == pytest.approx(float(at_cap.extra_cpu_var_s2))
    assert float(capped.cpu_s) == pytest.approx(float(at_cap.cpu_s))


def _default_records():
    import io
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["estimate", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_default_estimate_contract_and_seed_behaviour():
    recs = _default_records()
    assert [(r["hardware"], r["layout"], r["phase"]) for r in recs] == [
        (h, l, p) for h in ("gb300-nvl72", "vr-nvl72") for l, p in (("dep2", "prefill"), ("dep32", "decode"), ("tp8", "decode"))
    ]
    keys = {"hardware", "model", "layout", "phase", "batch_per_rank", "context_tokens", "step_time_ms", "sol_step_time_ms",
            "tokens_per_s_per_gpu", "tokens_per_s_per_user", "bound", "breakdown"}
    for r in recs:
        assert keys <= set(r)
        assert r["model"] == "deepseek-v4.1-flash" and r["context_tokens"] == 131072
        for b in r["breakdown"]:
            assert {"kernel", "time_ms", "sol_time_ms", "flops", "bytes", "bound"} <= set(b)
        gpu = [b for b in r["breakdown"] if b["part"] != "cpu"]
        assert sum(b["time_ms"] for b in gpu) == pytest.approx(r["gpu_time_ms"])
        if r["phase"] == "decode":
            # The vLLM posts: decode is MoE-bound, attention and indexer a small share. At TP8 batch 1 the
            # per-sublayer all-reduces (latency) may outweigh it; among kernels MoE still leads.
            kernels = [b for b in gpu if not b["kernel"].startswith("all-")]
            assert kernels[0]["kernel"].startswith("MegaMoE"), (r["hardware"], r["layout"], kernels[0]["kernel"])
            attention = sum(b["time_ms"] for b in gpu if "Attn" in b["kernel"] or "indexer" in b["kernel"])
            assert attention < 0.25 * r["gpu_time_ms"]
            if r["layout"] == "dep32":
                assert gpu[0]["kernel"].startswith("MegaMoE")
    dep32 = [r for r in recs if r["layout"] == "dep32"]
    assert [r["batch_per_rank"] for r in dep32] == [16, 16]


@pytest.mark.parametrize("hw", [GB300, VR])
def test_long_context_moves_decode_by_a_few_percent(hw):
    lay = parse_layout("dep32")
    short = step(V41, hw, lay, make_point(V41, hw, lay, context=131072)).expected_s
    long = step(V41, hw, lay, make_point(V41, hw, lay, context=855_000)).expected_s
    assert 1.0 < long / short < 1.15, f"128K -> 855K moved the step by {long / short:.2f}x"


@pytest.mark.parametrize("model,layout", [("deepseek-v4-flash", "dep8"), ("deepseek-v3", "dep8"), ("deepseek-v3", "tp8"),
                                          ("deepseek-v4-flash", "tp4")])
def test_other_models_build_their_own_graphs(model, layout):
    m = load_model(model)
    lay = parse_layout(layout)
    r = step(m, GB300, lay, make_point(m, GB300, lay, context=32768))
    names = {o.op.name for o in r.ops}
    if model == "deepseek-v3":
        assert "dense FFN" in names and "MLA attention" in names and "MQA logits (indexer)" not in names
    else:
        assert "MQA logits (indexer)" in names
    assert math.isfinite(r.expected_s) and r.expected_s > 0


def test_bounded_replay_only_moves_the_last_128_tokens_through_late_layers():
    lay = parse_layout("dep2")
    p = make_point(V41, GB300, lay)   # 32K new tokens on one sequence
    ops = build_step(V41, lay, p)
    moe = ops_named(ops, "MegaMoE (dispatch + experts + combine)")
    rows = sorted({o.cost.fp8_fp4_flops / (2 * 5120 * 6912) for o in moe})
    # Layers 0-19 route all 32768 tokens x top-6; layers 20-39 route only 128 x 6.
    assert rows == pytest.approx([128 * 6, 32768 * 6])
    assert sum(o.repeat for o in moe) == 40


@pytest.mark.parametrize("args,culprit", [
    (["estimate", "--layout", "dep5"], "dep5"),
    (["estimate", "--layout", "tp3"], "tp3"),
    (["estimate", "--layout", "dep128"], "dep128"),
    (["estimate", "--layout", "foo"], "foo"),
    (["estimate", "--batch", "0"], "--batch"),
    (["estimate", "--batch", "-3"], "--batch"),
    (["estimate", "--context", "2000000"], "--context"),
    (["estimate", "--context", "-1"], "--context"),
    (["estimate", "--acceptance", "7"], "--acceptance"),
    (["estimate", "--balancedness", "1.5"], "--balancedness"),
    (["estimate", "--phase", "train"], "--phase"),
    (["estimate", "--model", "nope"], "nope"),
    (["estimate", "--hardware", "nope"], "nope"),
])
def test_estimate_bad_input_is_one_line_exit_2(args, culprit, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and culprit in err and "Traceback" not in err


def test_estimate_csv_and_breakdown(capsys):
    assert main(["estimate", "-H", "vr-nvl72", "-l", "dep32", "--csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("hardware,model,layout,phase") and len(lines) == 2
    assert main(["estimate", "-H", "vr-nvl72", "-l", "tp8", "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert "MegaMoE" in out and "% roofline" in out and "share" in out


def test_default_context_leaves_room_for_new_tokens_in_a_shorter_window():
    from rubinperf.errors import SpecError
    v3 = load_model("deepseek-v3")            # 131,072-token window
    lay = parse_layout("dep8")
    p = make_point(v3, load_platform("h200"), lay, phase="prefill")
    assert p.context == 131072 - 32768 and p.new_tokens == 32768
    # Asked for, the full context with 32K new tokens is still refused.
    with pytest.raises(SpecError, match="exceed"):
        make_point(v3, load_platform("h200"), lay, phase="prefill", context=131072)


@pytest.mark.parametrize("hw", [GB300, VR], ids=["gb300", "vr"])
@pytest.mark.parametrize("layout", ["tp8", "dep32", "dep64"])
def test_array_bound_is_the_scalar_bound_element_by_element(hw, layout):
    """One bound rule: a step over an array of batches names, per element, what the scalar step at
    that batch names (cpu where host work exceeds GPU work)."""
    import numpy as np

    lay = parse_layout(layout)
    batches = np.array([1.0, 2.0, 16.0, 64.0, 300.0])
    point = make_point(V41, hw, lay, phase="decode", batch=1)
    arr = step(V41, hw, lay, dataclasses.replace(point, batch=batches))
    bounds = arr.bound
    assert bounds.shape == batches.shape
    for i, b in enumerate(batches):
        one = step(V41, hw, lay, dataclasses.replace(point, batch=float(b)))
        assert bounds[i] == one.bound


@pytest.mark.parametrize("hw, layout, phase", [(GB300, "dep16", "decode"), (GB300, "tp8", "prefill"),
                                               (VR, "tp8", "decode"), (load_platform("h200"), "tp8", "decode")])
def test_the_bound_of_an_array_point_at_once_is_the_bound_op_by_op_and_at_each_point(monkeypatch, hw, layout, phase):
    """StepResult.bound over arrays: found at once for small arrays, op by op for large ones: the same names, and
    each the bound of the scalar step at that point."""
    import numpy as np

    import rubinperf.step.result as R

    lay = parse_layout(layout)
    batch = np.array([1.0, 3.0, 16.0, 64.0, 256.0, 1024.0])
    context = np.array([[1.0], [8192.0], [1e6]]) if phase == "decode" else 4096.0
    p = dataclasses.replace(make_point(V41, hw, lay, phase=phase), batch=batch, context=context)
    r = step(V41, hw, lay, p)
    at_once = r.bound
    monkeypatch.setattr(R, "_BOUND_AT_ONCE", 0)
    op_by_op = r._bound_array()
    assert at_once.shape == op_by_op.shape and (at_once == op_by_op).all()
    for i in (0, 3, 5):
        one = step(V41, hw, lay, dataclasses.replace(p, batch=float(batch[i]),
                                                     context=float(np.ravel(context)[-1])))
        assert at_once[..., i].ravel()[-1] == one.bound
