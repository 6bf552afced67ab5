"""The draft's MoE exchange in DEP: all-gather + reduce-scatter (vLLM's default EP backend) or all-to-all."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.step.graph import build_step
from rubinperf.kernels import all_gather, ep_all_gather_exchange, ep_dispatch_combine, reduce_scatter
from rubinperf.specs.layout import parse_layout
from rubinperf.step.point import make_point
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform

V41 = load_model("deepseek-v4.1-flash")
GB200 = load_platform("gb200-nvl72")


def test_all_gather_exchange_by_hand():
    # 64 tokens on each of 32 ranks, hidden 5120 in BF16: every rank gathers 32 x 64 x 5120 x 2 = 20,971,520 B,
    # of which it receives 31/32 = 20,316,160 B from the others; the reduce-scatter sends as many back.
    gather, scatter = ep_all_gather_exchange(64, 32, 5120, "bf16", gpus_per_tray=4)
    for k in (gather, scatter):
        assert k.cost.nvlink_bytes == pytest.approx(20_316_160)
        assert (k.cost.nvlink_hops, k.cost.cross_tray_hops, k.cost.collectives) == (1, 1, 1)
    assert reduce_scatter(1e6, 8).cost == all_gather(1e6, 8).cost


@settings(max_examples=30, deadline=None)
@given(tokens=st.integers(1, 512), ranks=st.sampled_from([2, 4, 8, 16, 32, 64]))
def test_gathered_bytes_grow_with_the_ranks_where_a_dispatch_does_not(tokens, ranks):
    def gathered(n):
        return float(ep_all_gather_exchange(tokens, n, 5120)[0].cost.nvlink_bytes)

    def dispatched(n):
        return float(ep_dispatch_combine(tokens, n, 3, 5120, 2, 2).nvlink_bytes)

    # per rank: (n - 1) x tokens x hidden x 2 B gathered; a dispatch sends at most top-k copies of each token
    assert gathered(2 * ranks) > gathered(ranks)
    assert dispatched(2 * ranks) <= tokens * 5120 * 4 * 3


def _draft_moe_names(hw, layout="dep32", phase=None):
    lay = parse_layout(layout)
    ops = build_step(V41, lay, make_point(V41, hw, lay, phase=phase, batch=64 if phase != "prefill" else None))
    return {o.name for o in ops if o.part == "draft" and "MoE" in o.name}, {o.name for o in ops if o.part == "target"}


def test_vllm_stacks_gather_the_drafts_tokens_and_keep_megamoe_for_the_target():
    draft, target = _draft_moe_names(GB200)
    assert draft == {"draft: MoE all-gather (tokens)", "draft: MoE experts (gathered tokens)",
                     "draft: MoE reduce-scatter (outputs)"}
    assert "MegaMoE (dispatch + experts + combine)" in target
    fused = dataclasses.replace(GB200, draft_ep_exchange="all-to-all")
    assert _draft_moe_names(fused)[0] == {"draft: MegaMoE (dispatch + experts + combine)"}
    # TP has no exchange: both settings give the same draft. Its all-reduce by message size (vLLM's switch points at
    # TP4, stacks/vllm-gb300-oct2026.toml: one-shot below 4 MiB): the first draft pass's 64 x 6 rows x 4096 x 2 B
    # = 3 MiB and the later passes' 64 rows (512 KiB) both run one-shot
    assert _draft_moe_names(GB200, "tp4")[0] == _draft_moe_names(fused, "tp4")[0] == {
        "draft: MegaMoE (experts)", "draft: all-reduce (MoE, one-shot)"}


def test_the_draft_exchange_grows_with_dep_and_the_rest_of_the_step_stays_flat(cli):
    # The vLLM posts' GB200 decode (64 requests per GPU, 128K, 1 + 5 tokens): from DEP4 to DEP32 the step's work other
    # than the target's MegaMoE "stays around 10 ms", "the draft's communication starts to offset the gain".
    def rest_and_exchange(layout):
        r = cli("estimate", "-H", "gb200-nvl72", "-l", layout, "--batch", "64", "--breakdown", "--json")
        rec = r.json()[0]
        rows = {b["kernel"]: b["time_ms"] for b in rec["breakdown"]}
        exchange = rows["draft: MoE all-gather (tokens)"] + rows["draft: MoE reduce-scatter (outputs)"]
        return rec["gpu_time_ms"] - rows["MegaMoE (dispatch + experts + combine)"], exchange

    (rest4, ex4), (rest16, ex16), (rest32, ex32) = map(rest_and_exchange, ("dep4", "dep16", "dep32"))
    assert ex4 < ex16 < ex32                  # every rank receives every rank's tokens
    assert rest32 > rest16                    # the exchange now outgrows the draft's shrinking expert weights
    assert max(rest4, rest16, rest32) < 1.15 * min(rest4, rest16, rest32)


def test_a_stack_with_an_unknown_exchange_is_one_line(cli, tmp_path):
    text = (GB200.stack_path and open(GB200.stack_path).read()).replace('draft_ep_exchange = "all-gather"',
                                                                         'draft_ep_exchange = "broadcast"')
    path = tmp_path / "odd.toml"
    path.write_text(text)
    r = cli("estimate", "--stack", str(path))
    assert r.code == 2
    assert "ep.draft_ep_exchange" in r.err and "all-to-all, all-gather" in r.err and len(r.err.strip().splitlines()) == 1
