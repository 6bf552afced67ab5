"""Kernel count is a stack fact: which ops one kernel runs and which several, per stack ([fusion]).

Each test counts the kernels of one decode layer by hand from the stack's fields and holds the graph to it.
Layer 8 of V4.1-Flash is a KV-source layer with an indexer, compressed attention (ratio 2) and a routed MoE
with a router and a shared expert (models/deepseek-v4.1-flash.toml), so every counted op is there.
"""

import dataclasses

import pytest

from rubinperf.step.graph import attention_ops, build_step, mhc_op, moe_ops
from rubinperf.specs.layout import parse_layout
from rubinperf.step.point import make_point
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform
from rubinperf.step.timing import step

V41 = load_model("deepseek-v4.1-flash")
LAYER = 8


def _layer_ops(hw, layout: str, batch):
    lay = parse_layout(layout)
    p = make_point(V41, hw, lay, batch=batch)
    q = 1 + p.k(V41)
    tokens = batch * q
    return lay, p, tokens, (attention_ops(V41, LAYER, lay, p, tokens, batch, q, hw.gpus_per_tray)
                            + [mhc_op(V41, tokens, lay, p)] + moe_ops(V41, LAYER, lay, p, tokens, hw.gpus_per_tray))


def _by_hand(hw, lay, tokens) -> int:
    """The layer's kernels from the stack's [fusion] fields, counted as the posts and the public kernels run them."""
    tp = lay.tp > 1                 # TP attention (tp<N>, tep<N>): an all-reduce after attention and after the MoE
    tp_path = tp and lay.kind == "tp"   # the stack's TP-engine fusions; tep<N> runs the plain all-reduces
    attention = (2        # q down and up projections
                 + 2      # KV projection and compression (the insert in the last one's epilogue when fused)
                 + (0 if hw.rope_kv_insert_fused else 2)   # KV insert + query RoPE of their own
                 + 3      # indexer q, k and weight projections
                 + 1      # MQA logits
                 + 1      # DeepSelect top-k
                 + 1      # sparse attention (a split-KV reduction is the GPU's: not the graph's)
                 + 2      # grouped output projection, down then up
                 + (1 if tp and not (tp_path and hw.tp_allreduce_fused) else 0))
    if tp_path and hw.tp_mhc_in_epilogue:
        per_boundary = 0
    else:
        per_boundary = 4 if hw.mhc_kernels == "tilelang" else 1
    mhc = 2 * per_boundary   # before attention, before the FFN
    routed = 1                   # MegaMoE (on DEP with its dispatch and combine inside; on TEP the local experts)
    if hw.moe_kernels != "megamoe":
        routed = ((3 if hw.moe_kernels == "routed-gemms" else 7)   # GEMM1, GEMM2, finalize; CUTLASS: maps, expand,
                  + (2 if lay.kind == "dep" else 0))  # strides, GEMM1, activation, GEMM2, finalize; DeepEP's dispatch
                                                      # and combine on DEP (none on TEP: every GPU holds every token)
    shared_fused = lay.kind == "tp" and tokens < hw.tp_shared_expert_fused_below_rows
    moe = (2              # router GEMM, top-k
           + routed
           + (0 if shared_fused else 2)   # shared expert gate+up, down
           + (1 if tp and not (tp_path and hw.tp_allreduce_fused) else 0))
    return attention + mhc + moe


CASES = [
    # (hardware, stack, layout, batch per rank or instance): count by hand
    ("vr-nvl72", None, "tp8", 1, 15),     # November TP8 path, 6 rows: mHC in epilogues, shared expert fused
    ("vr-nvl72", None, "tp8", 4, 17),     # 24 rows: the shared expert's two kernels come back
    ("vr-nvl72", None, "dep32", 20, 19),
    ("gb300-nvl72", None, "tp4", 1, 19),  # October TP4 path: one-shot all-reduces only
    ("gb200-nvl72", None, "dep4", 64, 19),
    ("h200", None, "tp8", 1, 31),         # pytorch-2.11: SGLang's kernel set
    ("gb300-nvl72", "pytorch-2.11", "tp4", 1, 31),
    ("gb300-nvl72", "sglang-deepep-hopper", "dep32", 16, 31),
    ("gb300-nvl72", "sglang-blackwell", "dep4", 16, 31),  # DeepEP dispatch, routed GEMMs + finalize, combine
    ("vr-nvl72", None, "tep8", 1, 21),    # TP8 attention, EP8 experts: the two all-reduces as kernels, Mega-mHC
    ("gb300-nvl72", "sglang-blackwell", "tep8", 16, 31),  # local routed GEMMs + finalize, no dispatch or combine
    ("gb200-nvl72", "trtllm-blackwell", "dep4", 16, 35),  # the CUTLASS MoE's seven between dispatch and combine
    ("h200", "trtllm-hopper", "tp8", 1, 35),              # the CUTLASS MoE's seven on the TP path
]


@pytest.mark.parametrize("hardware, stack, layout, batch, want", CASES)
def test_a_decode_layer_has_the_kernels_its_stack_says(hardware, stack, layout, batch, want):
    hw = load_platform(hardware, stack)
    lay, p, tokens, ops = _layer_ops(hw, layout, batch)
    assert _by_hand(hw, lay, tokens) == want
    assert sum(o.kernel_count for o in ops) == want


def test_sglang_stack_runs_four_mhc_kernels_a_boundary_and_the_routed_experts_as_three():
    hw = load_platform("h200")
    _, _, _, ops = _layer_ops(hw, "tp8", 1)
    rows = {o.name: o for o in ops}
    assert rows["mHC (TileLang: post, pre GEMM, Sinkhorn + collapse, RMSNorm)"].kernel_count == 8
    assert rows["routed experts (GEMM1, GEMM2, finalize)"].kernel_count == 3
    assert rows["query RoPE"].kernel_count == rows["KV insert (+ key RoPE)"].kernel_count == 1
    # The split kernels read the routes three times where Mega-mHC reads them once: more bytes, not fewer.
    mega = mhc_op(V41, 6, parse_layout("tp8"), dataclasses.replace(make_point(V41, hw, parse_layout("tp8")),
                                                                   mhc_kernels="mega-mhc"))
    split = rows["mHC (TileLang: post, pre GEMM, Sinkhorn + collapse, RMSNorm)"]
    per_token_routes = V41.hc_routes * V41.hidden_size * 4
    assert split.cost.activation_bytes - mega.cost.activation_bytes >= 2 * (2 * 6 * per_token_routes)


def test_the_routed_gemms_do_the_work_of_one_grouped_kernel():
    hw = load_platform("h200")
    lay = parse_layout("tp8")
    p = make_point(V41, hw, lay)
    fused = dataclasses.replace(p, moe_kernels="megamoe")
    tokens = 6
    split = [o for o in moe_ops(V41, LAYER, lay, p, tokens, 8) if o.name.startswith("routed experts")][0]
    one = [o for o in moe_ops(V41, LAYER, lay, fused, tokens, 8) if o.name == "MegaMoE (experts)"][0]
    assert split.cost.flops == pytest.approx(one.cost.flops)
    assert split.cost.weight_bytes == pytest.approx(one.cost.weight_bytes)
    assert split.kernel_count == 3 and one.kernel_count == 1


def test_a_fused_stack_launches_fewer_kernels_and_pays_fewer_fixed_costs():
    lay = parse_layout("tp8")
    nov = load_platform("vr-nvl72")
    unfused = dataclasses.replace(nov, mhc_kernels="tilelang", tp_mhc_in_epilogue=False, moe_kernels="routed-gemms",
                                  tp_shared_expert_fused_below_rows=0, rope_kv_insert_fused=False,
                                  tp_allreduce_fused=False)
    a, b = (step(V41, hw, lay, make_point(V41, hw, lay, batch=1)) for hw in (nov, unfused))
    assert a.kernels_per_step() < b.kernels_per_step()
    latency = lambda r: sum(float(o.time.latency_s) * o.op.repeat for o in r.ops if o.op.part != "cpu")
    assert latency(a) < latency(b)
    assert a.expected_s < b.expected_s


def test_the_whole_step_counts_every_layer_and_the_draft():
    hw = load_platform("vr-nvl72")
    lay = parse_layout("tp8")
    r = step(V41, hw, lay, make_point(V41, hw, lay, batch=1))
    ops = build_step(V41, lay, make_point(V41, hw, lay, batch=1), hw.gpus_per_tray)
    graph = sum(o.kernel_count * o.repeat for o in ops if o.part != "cpu")
    assert r.kernels_per_step() >= graph   # plus the split-KV reductions this GPU adds
    assert r.kernels_per_step() == pytest.approx(r.kernels_per_step("target") + r.kernels_per_step("draft"))
    # The draft's five forwards over its three layers: the draft share is five passes of one pass's kernels.
    assert r.kernels_per_step("draft") > 0


def test_estimate_breakdown_shows_the_kernels(cli):
    r = cli("estimate", "-H", "vr-nvl72", "-l", "tp8", "--batch", "1", "--breakdown", "--json")
    assert r.code == 0, r
    rec = r.json()[0]
    rows = {b["kernel"]: b for b in rec["breakdown"]}
    assert rows["MegaMoE (experts)"]["kernels"] == V41.num_layers   # every main layer is MoE: one kernel each
    assert rows["mHC (in GEMM epilogues)"]["kernels"] == 0
    assert rec["kernels_per_step"] == pytest.approx(sum(b["kernels"] for b in rec["breakdown"]))
    r = cli("estimate", "-H", "vr-nvl72", "-l", "tp8", "--batch", "1", "--breakdown")
    assert "kernels" in r.out


def test_mhc_in_the_epilogue_needs_the_fused_all_reduce(cli, tmp_path):
    text = open(load_platform("vr-nvl72").stack_path).read().replace("tp_allreduce_fused = true",
                                                                     "tp_allreduce_fused = false")
    p = tmp_path / "s.toml"
    p.write_text(text)
    r = cli("estimate", "-H", "vr-nvl72", "--stack", str(p))
    assert r.code == 2 and "fusion.tp_mhc_in_epilogue" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("estimate", "--set", "stack.mhc_kernels=two")
    assert r.code == 2 and "mhc_kernels" in r.err


def test_dspark_parallel_block_is_one_forward_of_k_rows_per_request():
    # vLLM's DSpark speculator: one backbone forward over k query rows per request; the sequential proposer runs k
    # forwards of the same layers (the first over 1 + k rows per request). Same kernels per forward, k times fewer.
    lay = parse_layout("dep4")
    seq = load_platform("gb200-nvl72")
    block = dataclasses.replace(seq, draft_forwards="parallel-block")
    a, b = (step(V41, hw, lay, make_point(V41, hw, lay, batch=64)) for hw in (seq, block))
    k = V41.draft_tokens
    assert a.kernels_per_step("draft") == pytest.approx(k * b.kernels_per_step("draft"))
    assert a.kernels_per_step("target") == b.kernels_per_step("target")
    head = [o for o in b.ops if o.op.name == "draft: LM head"][0]
    assert head.op.kernels[0].rows == 64 * k and head.op.repeat == 1


def test_an_unfused_stack_quantises_each_dense_low_precision_gemms_input_in_a_kernel_of_its_own():
    lay = parse_layout("tp4")
    counts = {}
    for stack in ("sglang-blackwell", "vllm-gb300-oct2026"):
        hw = load_platform("gb300-nvl72", stack)
        ops = build_step(V41, lay, make_point(V41, hw, lay, batch=16), hw.gpus_per_tray)
        kernels = [k for o in ops for k in o.kernels]
        low = [i for i, k in enumerate(kernels) if k.family == "gemm" and (float(k.cost.fp8_flops) > 0
                                                                           or float(k.cost.fp4_flops) > 0)]
        quant = [i - 1 for i in low if i > 0 and kernels[i - 1].family == "stream"
                 and float(kernels[i - 1].cost.hbm_bytes) == pytest.approx(kernels[i].rows * kernels[i].groups
                                                                            * kernels[i].k * 3, rel=1e-3)]
        counts[stack] = (len(low), len(quant))
    low, quant = counts["sglang-blackwell"]
    assert low > 0 and quant == low            # each FP8 GEMM after its quantisation (BF16 read, FP8 written)
    assert counts["vllm-gb300-oct2026"][1] == 0   # the fused stack: none


def test_the_cutlass_moe_bytes_by_hand():
    # 4 tokens x top-2 = 8 routed rows over 8 experts, inter 64, hidden 128, FP8 experts and activations
    # (1 B + one FP32 scale per 128 x 128 block: specs.precision), every expert touched.
    from rubinperf.kernels import cutlass_moe

    maps, expand, strides, up, act, down, fin = cutlass_moe(4, 2, 8, 64, 128, weight="fp8", act="fp8", touched=8)
    f8 = 1 + 4 / (128 * 128)
    assert maps.cost.activation_bytes == 8 * 12                      # expert id read, two int32 maps written
    assert expand.cost.activation_bytes == pytest.approx(8 * 128 * (2 + f8))   # BF16 row in, FP8 copy out
    assert strides.cost.launches == 1 and strides.cost.activation_bytes == 0
    assert up.cost.activation_bytes == pytest.approx(8 * 128 * f8 + 8 * 128 * 2)   # GEMM1: 2 x 64 BF16 columns out
    assert up.cost.weight_bytes == pytest.approx(8 * 128 * 128 * f8)
    assert act.cost.activation_bytes == pytest.approx(8 * 128 * 2 + 8 * 64 * f8)   # 2 x inter BF16 in, inter out
    assert down.cost.activation_bytes == pytest.approx(8 * 64 * f8 + 8 * 128 * 2)
    assert fin.cost.activation_bytes == 4 * 3 * 128 * 2               # each token's two rows in, one out
    assert sum(k.cost.launches for k in (maps, expand, strides, up, act, down, fin)) == 7


def test_the_cutlass_moe_does_the_routed_gemms_work_with_four_more_kernels():
    hw = load_platform("h200", "trtllm-hopper")
    lay = parse_layout("tp8")
    p = make_point(V41, hw, lay)
    gemms = dataclasses.replace(p, moe_kernels="routed-gemms")
    name = "routed experts (CUTLASS: maps, expand, strides, GEMM1, activation, GEMM2, finalize)"
    cut = {o.name: o for o in moe_ops(V41, LAYER, lay, p, 6, 8)}[name]
    rg = {o.name: o for o in moe_ops(V41, LAYER, lay, gemms, 6, 8)}["routed experts (GEMM1, GEMM2, finalize)"]
    assert cut.cost.flops == pytest.approx(rg.cost.flops) and cut.cost.weight_bytes == pytest.approx(rg.cost.weight_bytes)
    assert cut.cost.activation_bytes > rg.cost.activation_bytes
    assert cut.kernel_count == 7 and rg.kernel_count == 3
