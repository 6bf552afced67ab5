"""TP attention with EP experts (tep<N>): the layout, its op graph, its HBM, and the commands that take it.

With one data-parallel rank every GPU holds every token after the attention all-reduce, so a TEP MoE layer
dispatches nothing: each GPU runs its N-th of the experts (whole) over the tokens routed to them and the MoE
all-reduce sums the partial outputs (vLLM's FusedMoE uses all-to-all kernels only with DP > 1).
"""

from __future__ import annotations

import pytest

from rubinperf.errors import SpecError
from rubinperf.kernels import experts_touched_topk
from rubinperf.specs.layout import Layout, check_layout, layouts_that_fit, parse_layout
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform
from rubinperf.step.capacity import weight_bytes_per_rank
from rubinperf.step.graph import moe_ops
from rubinperf.step.point import make_point
from rubinperf.step.timing import step

V41 = load_model("deepseek-v4.1-flash")   # 64 heads, 384 routed experts (top-6), a draft of 128 experts
GB300, H200 = load_platform("gb300-nvl72"), load_platform("h200")
LAYER = 8   # a routed MoE layer with a router and a shared expert


def test_names_and_degrees():
    tep = parse_layout("tep8")
    assert tep == parse_layout("tp8-ep8") == parse_layout("TP8EP8") == Layout("tep", 8)
    assert (tep.tp, tep.ep, tep.dp, tep.expert_tp, tep.name) == (8, 8, 1, 1, "tep8")
    assert (parse_layout("tp8").ep, parse_layout("tp8").expert_tp) == (1, 8)
    assert (parse_layout("dep8").tp, parse_layout("dep8").ep, parse_layout("dep8").expert_tp) == (1, 8, 1)
    # a TP instance counts per instance: per_gpu divides by its GPUs as tp<N> does
    assert tep.per_gpu(8.0) == parse_layout("tp8").per_gpu(8.0) == 1.0


@pytest.mark.parametrize("text, why", [("tp8-ep4", "one N"), ("tep", "unknown layout"), ("tep0", "at least 1")])
def test_bad_names(text, why):
    with pytest.raises(SpecError, match=why):
        parse_layout(text)


def test_checks_divide_experts_and_heads_and_stay_in_one_domain():
    check_layout(parse_layout("tep16"), V41, GB300)
    with pytest.raises(SpecError, match="draft's 128 experts"):   # 384 experts split 3 ways, the draft's 128 not
        check_layout(parse_layout("tep3"), V41, GB300)
    with pytest.raises(SpecError, match="384 routed experts"):
        check_layout(parse_layout("tep5"), V41, GB300)
    with pytest.raises(SpecError, match="NVLink domain of 8"):
        check_layout(parse_layout("tep16"), V41, H200)
    # no expert-width condition: TEP keeps each expert whole (TP needs 2304 / N whole)
    assert layouts_that_fit(V41, H200, "tep") == ["tep1", "tep2", "tep4", "tep8"]


def _moe(hw, name, tokens):
    lay = parse_layout(name)
    p = make_point(V41, hw, lay, batch=1)
    return p, {o.name: o for o in moe_ops(V41, LAYER, lay, p, tokens, hw.gpus_per_tray)}


def test_moe_runs_local_experts_then_the_all_reduce_and_dispatches_nothing():
    tokens, n, E, k = 192.0, 8, 384, 6
    p, ops = _moe(GB300, "tep8", tokens)
    # 192 tokens x 5120 x 2 B = 1.875 MiB: below the vLLM stack's 2 MiB one-shot limit at TP8
    assert list(ops) == ["MegaGate (router)", "MegaMoE (local experts)", "shared expert", "all-reduce (MoE, one-shot)"]
    experts = ops["MegaMoE (local experts)"]
    (g,) = experts.kernels
    touched = experts_touched_topk(tokens, k, E, local_experts=E // n)   # 48 local experts, each hit w.p. 1-(1-k/E)^t
    assert g.groups == pytest.approx(touched)
    assert g.rows * g.groups == pytest.approx(tokens * k / n)   # 144 of the 1,152 routed rows
    assert (g.n, g.k) == (3 * 2304, 5120)                        # whole experts
    assert g.cost.flops == pytest.approx(2 * tokens * k / n * 3 * 2304 * 5120)
    assert experts.stretch == pytest.approx(1 / p.balancedness) and p.balancedness == GB300.eplb_target_balancedness
    # The all-reduce sums every token's BF16 hidden state over the 8 GPUs: one-shot, each rank receives the n - 1
    # others' partials whole; a collective kernel of its own (TEP is no TP engine path: nothing in the epilogue).
    (ar,) = ops["all-reduce (MoE, one-shot)"].kernels
    assert ar.cost.nvlink_bytes == pytest.approx((n - 1) * tokens * 5120 * 2) and ar.cost.collectives == 1
    _, tp = _moe(GB300, "tp8", tokens)
    # TP8 runs every expert's eighth: the same FLOPs and (in expectation) the same weight bytes per GPU.
    (t,) = tp["MegaMoE (experts)"].kernels
    assert g.cost.flops == pytest.approx(t.cost.flops)
    assert g.cost.weight_bytes == pytest.approx(t.cost.weight_bytes, rel=1e-9)
    assert tp["MegaMoE (experts)"].stretch == 1.0


def test_step_has_tp_attention_and_no_dp_sync():
    lay = parse_layout("tep8")
    r = step(V41, GB300, lay, make_point(V41, GB300, lay, batch=32))
    names = {o.op.name for o in r.ops}
    ar = {"all-reduce (attention, one-shot)", "all-reduce (MoE, one-shot)"}   # 32 x 6 rows x 10 KiB: 1.875 MiB
    assert ar | {"MegaMoE (local experts)"} <= names
    assert not any("dispatch" in x or "combine" in x or "DeepEP" in x or x == "DP sync" for x in names)
    # one all-reduce after every attention sublayer and every MoE sublayer of the 40 main layers
    repeats: dict = {}
    for o in r.ops:
        if o.op.part == "target":
            repeats[o.op.name] = repeats.get(o.op.name, 0) + o.op.repeat
    assert repeats["all-reduce (attention, one-shot)"] == repeats["all-reduce (MoE, one-shot)"] == V41.num_layers


def test_hbm_as_tp_the_experts_split_whole():
    tep, tp = weight_bytes_per_rank(V41, parse_layout("tep8")), weight_bytes_per_rank(V41, parse_layout("tp8"))
    assert tep == pytest.approx(tp)   # an eighth of the experts whole, or every expert's eighth: the same bytes


def test_estimate_and_serve_take_it(cli):
    r = cli("estimate", "-H", "gb300-nvl72", "-l", "tp8-ep8", "--batch", "32", "--json")
    assert r.code == 0, r
    rec = r.json()[0]
    assert (rec["layout"], rec["gpus"], rec["balancedness"]) == ("tep8", 8, GB300.eplb_target_balancedness)
    r = cli("serve", "-H", "gb300-nvl72", "-l", "tep8", "-c", "64", "--isl", "8K", "--osl", "1K", "--json")
    assert r.code == 0, r
    rec = r.json()[0]
    assert (rec["layout"], rec["gpus"], rec["concurrency"]) == ("tep8", 8, 64.0)
    assert rec["busiest_rank_batch"] == pytest.approx(rec["running_batch_per_rank"])   # one scheduler
