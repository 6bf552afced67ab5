"""An MLA model's prefill attention in the form the stack's engine runs it (stack attention.mla_prefill_form):
absorbed (MQA over the latent) or decompressed (kv_b_proj up-projects the new and cached latent; MHA)."""

from __future__ import annotations

import dataclasses

import pytest

from rubinperf import kernels as K
from rubinperf.errors import SpecError
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform, load_stack
from rubinperf.step.graph import build_step
from rubinperf.step.point import make_point
from rubinperf.step.timing import step

V3 = load_model("deepseek-v3")
H100 = load_platform("h100-cluster")          # sglang-deepep-hopper: decompressed
ABSORBED = dataclasses.replace(H100, mla_prefill_form="absorbed")
DEP32 = parse_layout("dep32")
UP = "MLA K/V up-projection (kv_b_proj, new and cached; key assembly)"
MHA = "MLA attention (decompressed, MHA)"


def _ops(hw, **kw):
    p = make_point(V3, hw, DEP32, **kw)
    return {o.name: o for o in build_step(V3, DEP32, p, gpus_per_tray=8)}


def test_engine_stacks_run_prefill_decompressed_pytorch_absorbed():
    """The engines' code (SGLang, vLLM) and TensorRT-LLM's measured context rows say decompressed; PyTorch has no
    engine of its own and keeps the absorbed form."""
    for name in ("sglang-deepep-hopper", "sglang-blackwell", "trtllm-hopper", "trtllm-blackwell",
                 "vllm-gb300-oct2026", "vllm-rubin-nov2026"):
        assert load_stack(name).mla_prefill_form == "decompressed"
    assert load_stack("pytorch-2.11").mla_prefill_form == "absorbed"


def test_decompressed_prefill_flops_by_hand():
    """DeepSeek-V3 (128 heads, qk_nope 128, rope 64, v 128, latent 512), DEP32 (all heads on a rank), 2 sequences of
    1,000 new tokens after 3,000 cached: each query attends 3,000 + (1,000 + 1) / 2 = 3,500.5 positions;
    MHA FLOPs 2 x 2 x 128 x 1,000 x 3,500.5 x (192 + 128); the up-projection 2 x (2 x 4,000) x (128 x 256) x 512.
    No absorb GEMMs."""
    ops = _ops(H100, phase="prefill", batch=2, new_tokens=2000, context=3000)
    assert "MLA absorb" not in ops and "MLA attention" not in ops
    assert float(ops[MHA].cost.flops) == pytest.approx(2 * 2 * 128 * 1000 * 3500.5 * 320, rel=1e-12)
    up = ops[UP].kernels[0]
    assert float(up.cost.flops) == pytest.approx(2 * 8000 * 128 * 256 * 512, rel=1e-12)


def test_decompressed_attention_has_fewer_flops_by_the_head_widths():
    """The same queries and positions: absorbed QK + PV widths 576 + 512, decompressed 192 + 128: 1088 / 320."""
    kw = dict(phase="prefill", batch=4, new_tokens=8192, context=2048)
    a = float(_ops(ABSORBED, **kw)["MLA attention"].cost.flops)
    d = float(_ops(H100, **kw)[MHA].cost.flops)
    assert a / d == pytest.approx(1088 / 320, rel=1e-12)


def test_decode_and_draft_stay_absorbed():
    """Decode runs absorbed on every stack; so does the draft's extend in prefill (SGLang: draft extend -> MLA)."""
    dec = _ops(H100, phase="decode", batch=8, context=4096)
    assert "MLA absorb" in dec and UP not in dec
    pre = _ops(H100, phase="prefill", batch=2, new_tokens=4096, context=0)
    assert "draft: MLA absorb" in pre and "draft: MLA attention" in pre and MHA in pre


def test_the_cached_prefix_is_up_projected():
    """The up-projection grows with the cached prefix (seqs x (context + new) rows); the absorbed form has none."""
    short = _ops(H100, phase="prefill", batch=1, new_tokens=4096, context=0)[UP].cost
    long = _ops(H100, phase="prefill", batch=1, new_tokens=4096, context=12288)[UP].cost
    assert float(long.flops) == pytest.approx(4 * float(short.flops), rel=1e-12)


def test_decompressed_prefill_step_is_faster_where_attention_weighs():
    """A long cached prefix: the absorbed form's attention (3.4x the FLOPs) dominates; decompressed is faster."""
    kw = dict(phase="prefill", batch=4, new_tokens=16384, context=5277)
    fast = step(V3, H100, DEP32, make_point(V3, H100, DEP32, **kw))
    slow = step(V3, ABSORBED, DEP32, make_point(V3, ABSORBED, DEP32, **kw))
    assert float(fast.expected_s) < float(slow.expected_s)


def test_a_bad_form_is_a_spec_error(tmp_path):
    src = open(load_stack("sglang-deepep-hopper").path).read().replace(
        'mla_prefill_form = "decompressed"', 'mla_prefill_form = "both"')
    p = tmp_path / "bad.toml"
    p.write_text(src)
    with pytest.raises(SpecError, match="mla_prefill_form"):
        load_stack(str(p))


def test_kernel_functions_exported():
    k = K.mla_kv_up_projection(1, 10, 0, 4, 128, 128, 512, "fp8")
    assert float(k.cost.flops) == 2 * 10 * 4 * 256 * 512
    a = K.mla_key_assembly(1, 10, 0, 4, 128, 64)
    assert float(a.cost.activation_bytes) == 10 * (4 * (256 + 64) + 64) * 2


def test_a_decode_step_with_a_chunk_runs_the_chunk_decompressed():
    """Aggregated serving: a decode step carrying a prefill chunk runs the decode rows absorbed (their absorb GEMMs
    over the decode rows alone) and the chunk decompressed (its up-projection over the chunk and the earlier
    chunks' cached positions)."""
    b200 = load_platform("b200")
    lay = parse_layout("dep8")
    p = dataclasses.replace(make_point(V3, b200, lay, phase="decode", batch=8, context=8192),
                            chunk_tokens=4096, chunk_seqs=1, chunk_context=4096)
    ops = {o.name: o for o in build_step(V3, lay, p, gpus_per_tray=8)}
    bare = {o.name: o for o in build_step(V3, lay, dataclasses.replace(p, chunk_tokens=0), gpus_per_tray=8)}
    assert float(ops["MLA absorb"].cost.flops) == pytest.approx(float(bare["MLA absorb"].cost.flops), rel=1e-12)
    assert float(ops[UP].kernels[0].cost.flops) == pytest.approx(2 * 8192 * 128 * 256 * 512, rel=1e-12)
    assert MHA in ops and "MLA attention" in ops
