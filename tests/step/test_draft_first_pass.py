"""The draft's first decode forward: over every token the verify step scored (vLLM's EagleProposer, SGLang's
draft-extend), over the accepted ones, or over one per request; the later forwards run one token per request."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.step.graph import build_step
from rubinperf.specs.layout import parse_layout
from rubinperf.step.point import make_point
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform
from rubinperf.step.timing import step

V41 = load_model("deepseek-v4.1-flash")
GB200 = load_platform("gb200-nvl72")


def _draft_ops(first_pass, layout="dep32", batch=64, **point):
    hw = dataclasses.replace(GB200, draft_first_pass=first_pass)
    lay = parse_layout(layout)
    ops = build_step(V41, lay, make_point(V41, hw, lay, batch=batch, **point))
    total = {}
    for o in ops:
        if o.part == "draft":
            c = o.cost
            total.setdefault(o.name, []).append((o.repeat, c))
    return total


def _summed(ops, name, field):
    return sum(float(r) * float(getattr(c, field)) for r, c in ops[name])


def test_row_work_of_the_first_pass_by_hand():
    # k = 5 at 64 requests per rank: five draft forwards. One per request: 5 x 64 = 320 token-passes. Verify
    # tokens: the first over 64 x (1 + 5) = 384 rows, four over 64: 640, twice as many. Accepted tokens: the
    # first over 64 x 3.51 rows: (3.51 + 4) / 5 = 1.502 times. The all-gathered bytes follow the rows.
    one, verify, accepted = (_draft_ops(f) for f in ("one-per-request", "verify-tokens", "accepted-tokens"))
    name = "draft: MoE all-gather (tokens)"
    base = _summed(one, name, "nvlink_bytes")
    assert _summed(verify, name, "nvlink_bytes") == pytest.approx(2 * base, rel=1e-12)
    assert _summed(accepted, name, "nvlink_bytes") == pytest.approx((3.51 + 4) / 5 * base, rel=1e-12)
    # The LM head scores one row per request in every forward (logits at each request's last token): its weight
    # bytes and FLOPs are the same whichever rows the first forward runs.
    for field in ("flops", "hbm_bytes"):
        assert _summed(verify, "draft: LM head", field) == pytest.approx(_summed(one, "draft: LM head", field))


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 8), batch=st.sampled_from([1.0, 8.0, 64.0, 200.0]), layout=st.sampled_from(["tp8", "dep32"]))
def test_a_wider_first_pass_never_makes_the_step_faster(k, batch, layout):
    lay = parse_layout(layout)
    times = []
    for first_pass in ("one-per-request", "accepted-tokens", "verify-tokens"):
        hw = dataclasses.replace(GB200, draft_first_pass=first_pass)
        acceptance = min(1 + k, 3.51)  # never above the 1 + k tokens a verify step scores
        times.append(step(V41, hw, lay, make_point(V41, hw, lay, batch=batch, draft_tokens=k,
                                                   acceptance=acceptance)).expected_s)
    assert times[0] <= times[1] * (1 + 1e-12) and times[1] <= times[2] * (1 + 1e-12)


def test_prefill_and_no_draft_are_untouched():
    # Prefill's one draft pass over the new tokens and a step without drafted tokens do not read the setting.
    for args in ({"layout": "dep2", "batch": None, "phase": "prefill"}, {"draft_tokens": 0}):
        a, b = _draft_ops("one-per-request", **args), _draft_ops("verify-tokens", **args)
        work = [{n: _summed(ops, n, "flops") + _summed(ops, n, "hbm_bytes") for n in ops} for ops in (a, b)]
        assert work[0] == pytest.approx(work[1], rel=1e-12)
    assert all(_summed(_draft_ops("verify-tokens", draft_tokens=0), n, "hbm_bytes") == 0
               for n in _draft_ops("verify-tokens", draft_tokens=0))


def test_every_bundled_engine_drafts_over_the_verify_tokens():
    for name in ("gb300-nvl72", "vr-nvl72", "h800-cluster", "h200"):
        assert load_platform(name).draft_first_pass == "verify-tokens", name


def test_a_stack_with_an_unknown_first_pass_is_one_line(cli, tmp_path):
    text = open(GB200.stack_path).read().replace('draft_first_pass = "verify-tokens"', 'draft_first_pass = "all"')
    path = tmp_path / "odd.toml"
    path.write_text(text)
    r = cli("estimate", "--stack", str(path))
    assert r.code == 2
    assert "speculative.draft_first_pass" in r.err and "verify-tokens" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = cli("estimate", "--set", "stack.draft_first_pass=all")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r


def test_the_rest_of_the_gb200_step_rises_at_dep32_only_with_the_wide_first_pass(cli):
    # The vLLM posts' GB200 decode (64 requests per GPU, 128K, 1 + 5 tokens): the rest of the step "stays around 10 ms"
    # and at DEP32 "the draft's communication starts to offset the gain".
    def rest(layout, first_pass):
        r = cli("estimate", "-H", "gb200-nvl72", "-l", layout, "--batch", "64", "--breakdown", "--json",
                "--set", f"stack.draft_first_pass={first_pass}")
        rec = r.json()[0]
        rows = {b["kernel"]: b["time_ms"] for b in rec["breakdown"]}
        return rec["gpu_time_ms"] - rows["MegaMoE (dispatch + experts + combine)"]

    assert rest("dep32", "verify-tokens") > rest("dep4", "verify-tokens")
    assert rest("dep32", "one-per-request") < rest("dep4", "one-per-request")
    for layout in ("dep4", "dep32"):
        assert 8.0 <= rest(layout, "verify-tokens") <= 12.0, layout   # within the posts' ~10 ms +- 20%
