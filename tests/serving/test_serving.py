"""The serving model: capacity, speculative decoding, pools, money; hand-derived values and properties."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.step.capacity import capacity, draft_kv_bytes_per_token, kv_bytes_per_request, kv_bytes_per_token, kv_window_bytes_per_request, weight_bytes_per_rank, workspace_bytes_per_token
from rubinperf.errors import SpecError
from rubinperf.specs.layout import parse_layout
from rubinperf.serving import (Serving, accepted_tokens, acceptance_rate, decode_engine, default_acceptance,
                               kv_transfer_s, kv_transfer_time, prefill_plan, prefix_load_s, serve, sweep)
from rubinperf.serving.prefill import prefix_load_bytes
from rubinperf.specs.stack import load_platform
from rubinperf.specs.loader import build_spec, to_toml
from rubinperf.specs.model import load_model
from rubinperf.specs.overrides import apply_overrides
from rubinperf.specs.workload import Workload, load_workload

V41 = load_model("deepseek-v4.1-flash")
V3 = load_model("deepseek-v3")
GB300 = load_platform("gb300-nvl72")
VR = load_platform("vr-nvl72")
AGENTX = load_workload("agentx")
CHAT = load_workload("chat-8k1k")
FP4 = 0.5 + 1 / 32
FP8 = 1 + 4 / (128 * 128)
EXPERT = 5120 * 3 * 2304          # one V4.1 expert's gate + up + down weights
GB = 1e9


def with_workload(**fields) -> Workload:
    return dataclasses.replace(AGENTX, **fields)


# ---------------------------------------------------------------- workload specs


@pytest.mark.parametrize("name", ["agentx", "chat-8k1k"])
def test_bundled_workloads_load_and_round_trip(tmp_path, name):
    w = load_workload(name)
    assert w.sources["workload"] and w.sources["serving"]
    path = tmp_path / "w.toml"
    path.write_text(to_toml(w))
    from rubinperf.specs.loader import read_toml

    assert build_spec(Workload, read_toml(path), path) == w


def test_token_accounting_of_a_turn():
    assert AGENTX.uncached_tokens_per_turn == pytest.approx(27000 * 0.035)
    assert AGENTX.cached_tokens_per_turn == pytest.approx(27000 * 0.965)
    assert AGENTX.tokens_per_turn == 27300
    assert CHAT.uncached_tokens_per_turn == 8192 and CHAT.cached_tokens_per_turn == 0
    # A full hit still computes the last token.
    full = with_workload(prefix_hit_rate=1.0)
    assert full.uncached_tokens_per_turn == 1 and full.cached_tokens_per_turn == 26999


@pytest.mark.parametrize("bad, match", [
    ({"workload": {"prefix_hit_rate": 1.5}}, "at most 1"),
    ({"serving": {"prefix_pool": "disk"}}, "prefix_pool"),
    ({"serving": {"prefill_layout": "pp4"}}, "prefill_layout"),
    ({"serving": {"kv_transfer_link": "pcie"}}, "kv_transfer_link"),
    ({"workload": {"output_tokens_per_turn": 0}}, "positive"),
    ({"workload": {"surprise": 1}}, "unknown key"),
])
def test_workload_loading_is_strict(tmp_path, bad, match):
    from rubinperf.specs.loader import read_toml

    data = read_toml(AGENTX.path)
    for table, values in bad.items():
        data[table].update(values)
    path = tmp_path / "bad.toml"
    path.write_text("")
    with pytest.raises(SpecError, match=match):
        build_spec(Workload, data, path)


def test_workload_overrides():
    w = apply_overrides(["workload.prefix_hit_rate=0.918", "output_tokens_per_turn=500", "runtime_reserve=12GB"], workload=AGENTX)["workload"]
    assert w.prefix_hit_rate == 0.918 and w.output_tokens_per_turn == 500 and w.runtime_reserve_bytes == 12e9
    with pytest.raises(SpecError):
        apply_overrides(["workload.prefix_pool=disk"], workload=AGENTX)


def test_unknown_workload_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown workload"):
        load_workload("no-such-workload")


# ---------------------------------------------------------------- capacity


def test_kv_bytes_per_token_is_the_seeds_890():
    # Sources 2, 8, 14 at 2x compression with index keys, 20 at 1x: 3 x (288 + 68) / 2 + (288 + 68).
    assert kv_bytes_per_token(V41) == 3 * (288 + 68) / 2 + (288 + 68) == 890
    assert draft_kv_bytes_per_token(V41) == 0           # the draft layers attend only their window
    # The window: 128 uncompressed entries on each of 4 KV sources and 3 draft layers.
    assert kv_window_bytes_per_request(V41) == 7 * 128 * 288
    assert kv_bytes_per_request(V41, 131072) == 890 * 131072 + 7 * 128 * 288


def test_kv_bytes_per_token_of_v3_is_mla_bf16():
    assert kv_bytes_per_token(V3) == 61 * 576 * 2 == 70272
    assert draft_kv_bytes_per_token(V3) == 1152       # its MTP layer keeps a full cache of its own


def test_weights_per_rank_by_hand():
    dep32 = weight_bytes_per_rank(V41, parse_layout("dep32"))
    assert dep32["routed experts"] == pytest.approx(40 * 12 * EXPERT * FP4)
    tp8 = weight_bytes_per_rank(V41, parse_layout("tp8"))
    assert tp8["routed experts"] == pytest.approx(40 * 384 * 5120 * 3 * 288 * FP4)
    dep1 = weight_bytes_per_rank(V41, parse_layout("dep1"))
    # DEP keeps every dense weight whole.
    assert dep32["dense + attention"] == dep1["dense + attention"]
    assert dep32["embedding + LM head"] == dep1["embedding + LM head"] == pytest.approx(2 * 129280 * 5120 * 2)
    # TP splits the LM head's vocabulary, not the embedding.
    assert tp8["embedding + LM head"] == pytest.approx(129280 * 5120 * 2 * (1 + 1 / 8))


@pytest.mark.parametrize("kind", ["dep", "tp"])
def test_weights_per_rank_fall_with_width(kind):
    totals = [sum(weight_bytes_per_rank(V41, parse_layout(f"{kind}{n}")).values()) for n in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(totals, totals[1:]))


def test_capacity_hand_case_dep32_decode():
    lay = parse_layout("dep32")
    cap = capacity(V41, GB300, lay, "decode", context_tokens=27300, tokens_per_request=6, logits_per_request=6,
                   reserve_bytes=10e9)
    weights = sum(weight_bytes_per_rank(V41, lay).values())
    engram = 2 * 101.36e9 / 32
    per_token_ws = 4 * 5120 * 4 * 2 + 6 * (5120 * FP8 + 2 * 2304 * 2) + 64 * 1024 * 2
    per_request = 890 * 27300 + 7 * 128 * 288 + 6 * per_token_ws + 6 * 129280 * 4
    assert workspace_bytes_per_token(V41, lay) == pytest.approx(per_token_ws)
    assert cap.engram_bytes == pytest.approx(engram)
    assert cap.bytes_per_request == pytest.approx(per_request)
    assert cap.max_requests == math.floor((279e9 - 10e9 - weights - engram) / per_request)
    assert cap.fits(cap.max_requests) and not cap.fits(cap.max_requests + 1)
    assert "does not fit in HBM" in cap.reason(cap.max_requests + 1)
    assert cap.reason(1) == ""


def test_engram_placement_moves_the_tables():
    lay = parse_layout("dep2")
    args = dict(context_tokens=27300, tokens_per_request=945, logits_per_request=1, reserve_bytes=10e9)
    hbm = capacity(V41, GB300, lay, "prefill", engram_placement="hbm", **args)
    host = capacity(V41, GB300, lay, "prefill", engram_placement="host", **args)
    peer = capacity(V41, GB300, lay, "prefill", engram_placement="peer-hbm", engram_peer_gpus=18, **args)
    assert hbm.engram_bytes == pytest.approx(101.36e9) and hbm.host_engram_bytes == 0
    assert host.engram_bytes == 0 and host.host_engram_bytes == pytest.approx(101.36e9)
    assert peer.engram_bytes == pytest.approx(2 * 101.36e9 / 18)
    assert host.max_requests > peer.max_requests > hbm.max_requests


def test_weights_that_do_not_fit_are_infeasible_with_the_reason():
    cap = capacity(V41, GB300, parse_layout("dep1"), "decode", 27300, 6, 6, reserve_bytes=10e9)
    assert cap.max_requests == 0 and not cap.fits(1)
    assert "exceed 279 GB of HBM" in cap.reason(1)


# ---------------------------------------------------------------- speculative decoding


def test_acceptance_model_by_hand():
    assert accepted_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert accepted_tokens(0.0, 5) == 1 and accepted_tokens(1.0, 5) == 6
    alpha = acceptance_rate(3.51, 5)
    assert accepted_tokens(alpha, 5) == pytest.approx(3.51, abs=1e-9)
    assert default_acceptance(V41, 5) == 3.51
    assert default_acceptance(V41, 0) == 1.0
    assert 1 < default_acceptance(V41, 3) < 3.51 < default_acceptance(V41, 7) < 8


def test_verify_step_is_target_plus_draft():
    d = decode_engine(V41, VR, parse_layout("dep32"), np.array([16.0, 64.0]), 27150)
    gpu = d.target_s + d.draft_s
    assert np.all(gpu > d.cpu_s)
    # the host path (the slowest rank's scheduling, then the DP sync) is shorter than the GPU step: hidden under
    # async scheduling
    assert np.all(d.exposed_s == 0)
    step = gpu + d.exposed_s
    assert d.step_s == pytest.approx(step)
    assert d.tokens_per_s_per_user == pytest.approx(3.51 / step)
    assert d.output_tokens_per_s_per_gpu == pytest.approx(np.array([16.0, 64.0]) * 3.51 / step)


def test_draft_cost_follows_the_draft_length():
    lay = parse_layout("tp8")
    one = dataclasses.replace(GB300, draft_first_pass="one-per-request")
    times = [decode_engine(V41, one, lay, 1.0, 27150, draft_tokens=k).draft_s for k in (0, 1, 3, 5)]
    assert times[0] == 0
    assert times[1] < times[2] < times[3]
    # k passes of one token per request: the draft time is linear in k.
    assert times[3] / times[1] == pytest.approx(5, rel=1e-9)
    # The stack's first pass over the 1 + k verified tokens: at batch 1 a weight-bound forward barely grows with
    # its rows, so the draft stays within a few percent of linear.
    wide = [decode_engine(V41, GB300, lay, 1.0, 27150, draft_tokens=k).draft_s for k in (1, 5)]
    assert wide[0] >= times[1] and wide[1] >= times[3]
    assert wide[1] / wide[0] == pytest.approx(5, rel=0.05)


@settings(max_examples=20, deadline=None)
@given(a=st.floats(1.0, 6.0), b=st.floats(1.0, 6.0), batch=st.sampled_from([1.0, 7.0, 64.0, 300.0]),
       layout=st.sampled_from(["tp8", "dep32"]), hw=st.sampled_from([GB300, VR]))
def test_raising_the_acceptance_never_lowers_tokens_per_user(a, b, batch, layout, hw):
    lo, hi = sorted((a, b))
    lay = parse_layout(layout)
    slow = serve(V41, hw, AGENTX, lay, batch, acceptance=lo, prefill=_PREFILL[hw.name])
    fast = serve(V41, hw, AGENTX, lay, batch, acceptance=hi, prefill=_PREFILL[hw.name])
    assert fast.tokens_per_s_per_user >= slow.tokens_per_s_per_user
    assert fast.tokens_per_s_per_gpu >= slow.tokens_per_s_per_gpu


_PREFILL = {hw.name: prefill_plan(V41, hw, AGENTX) for hw in (GB300, VR)}


# ---------------------------------------------------------------- prefill pool and TTFT


def test_prefill_chunks_the_uncached_tokens():
    p = _PREFILL["gb300-nvl72"]
    assert p.seqs == 17 and p.chunks_per_turn == 1              # floor(16384 / 945)
    assert p.new_tokens == pytest.approx(17 * 945)
    assert p.context == pytest.approx(26055)
    long = prefill_plan(V41, GB300, with_workload(input_tokens_per_turn=100000.0, prefix_hit_rate=0.0))
    assert long.seqs == 1 and long.chunks_per_turn == 7         # ceil(100000 / 16384)
    assert long.new_tokens == pytest.approx(100000 / 7)
    assert long.context == pytest.approx((100000 - 100000 / 7) / 2)


def test_ttft_by_hand():
    p = _PREFILL["gb300-nvl72"]
    prefix = 890 * 26055 + 7 * 128 * 288
    load = 17 * prefix / (min(256e9, 450e9) * 0.80)             # host pool over C2C, host efficiency
    sent = 17 * (890 * 27000 + 7 * 128 * 288)                    # each DEP rank sends its own sequences' KV
    transfer = sent / (900e9 * 0.80) + 1.5e-6                    # NVLink
    assert p.load_ttft_s == pytest.approx(load)
    assert p.transfer_s == pytest.approx(transfer)
    assert p.ttft_s == pytest.approx(load + p.step_s + transfer)
    assert p.turns_per_s_per_gpu == pytest.approx(17 / max(p.step_s, load))


def test_prefix_pool_changes_only_the_loads():
    slow = prefill_plan(V41, GB300, with_workload(prefix_pool="host"))
    fast = prefill_plan(V41, GB300, with_workload(prefix_pool="hbm"))
    assert fast.step_s == slow.step_s and fast.load_ttft_s < slow.load_ttft_s


@pytest.mark.parametrize("hw", [GB300, VR], ids=["gb300", "vr"])
def test_kv_loads_and_transfers_by_hand(hw):
    """Prefix loads and KV transfers are kernels timed by the roofline: link bytes at the link's
    efficiency plus one message latency; loads at the pool's rate (no launch: copy engines)."""
    nbytes = 3.7e9
    assert kv_transfer_time(hw, nbytes, "nvlink") == pytest.approx(
        nbytes / (hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency) + hw.nvlink_latency_s, rel=1e-12)
    assert kv_transfer_time(hw, nbytes, "scale-out") == pytest.approx(
        nbytes / (hw.scale_out_bandwidth_bytes_per_s * hw.scale_out_efficiency) + hw.scale_out_latency_s, rel=1e-12)
    host = min(hw.host_memory_bandwidth_bytes_per_s, hw.c2c_bandwidth_bytes_per_s) * hw.host_efficiency
    assert prefix_load_s(hw, nbytes, "host") == pytest.approx(nbytes / host, rel=1e-12)
    assert prefix_load_s(hw, nbytes, "peer-hbm") == pytest.approx(
        nbytes / (hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency), rel=1e-12)
    # Local HBM: KV bytes at the streaming rate of interleaved reads (Rubin: 0.75 of it, its two memory domains).
    hbm = hw.hbm_bandwidth_bytes_per_s * hw.hbm_stream_efficiency * hw.hbm_interleaved_bandwidth_factor
    assert prefix_load_s(hw, nbytes, "hbm") == pytest.approx(nbytes / hbm, rel=1e-12)
    assert prefix_load_s(hw, 0.0, "host") == 0.0


def test_prefill_plan_uses_the_workloads_link_and_pool():
    w = with_workload(kv_transfer_link="scale-out", prefix_pool="peer-hbm")
    p, q = prefill_plan(V41, GB300, w), _PREFILL["gb300-nvl72"]
    sent = q.seqs * float(kv_bytes_per_request(V41, w.input_tokens_per_turn))   # DEP: per rank = per GPU
    assert p.transfer_s == kv_transfer_time(GB300, sent, "scale-out")
    assert p.load_ttft_s == prefix_load_s(GB300, p.seqs * float(kv_bytes_per_request(V41, w.cached_tokens_per_turn)),
                                          "peer-hbm")
    assert p.step_s == q.step_s


@pytest.mark.parametrize("layout, per_gpu_share", [("tp8", 1 / 8), ("tp16", 1 / 8), ("tp4", 1 / 4), ("dep8", 1.0)])
def test_gqa_prefix_loads_and_transfer_by_hand(layout, per_gpu_share):
    """Llama-3.1-70B: 80 layers x 8 K/V heads x 128 dims x (K, V) x 2 B = 327,680 B per token. A GPU loads its
    own K/V heads of the cached prefix (1/TP of them, one head at least: TP16 keeps 1/8); the prefilled KV goes
    out once per instance, split over its GPUs."""
    m, lay = load_model("llama-3.1-70b"), parse_layout(layout)
    assert kv_bytes_per_token(m) == 80 * 8 * 128 * 2 * 2 == 327_680
    w = with_workload(input_tokens_per_turn=9000.0, prefix_hit_rate=2 / 3)   # 6,000 tokens cached
    seqs = 3.0
    assert prefix_load_bytes(m, lay, seqs, 6000.0) == pytest.approx(seqs * 6000 * 327_680 * per_gpu_share, rel=1e-12)
    sent = seqs * 9000 * 327_680 / (lay.tp if lay.kind == "tp" else 1)
    assert kv_transfer_s(m, GB300, w, lay, seqs, "nvlink") == kv_transfer_time(GB300, sent, "nvlink")
    assert prefix_load_bytes(m, lay, seqs, 0.0) == 0.0


@pytest.mark.parametrize("layout", ["tp8", "dep8"])
def test_mla_prefix_loads_by_hand(layout):
    """DeepSeek-R1 (MLA): one 576-value latent per layer, BF16: 61 x 576 x 2 = 70,272 B per token (the MTP layer's
    own KV on top). Every TP GPU holds the whole latent, so each loads all of it; a DEP rank its own sequences'."""
    m, lay = load_model("deepseek-r1"), parse_layout(layout)
    assert kv_bytes_per_token(m) == 61 * 576 * 2 == 70_272
    per_token = kv_bytes_per_token(m) + draft_kv_bytes_per_token(m)
    assert prefix_load_bytes(m, lay, 2.0, 5000.0) == pytest.approx(2 * 5000 * per_token, rel=1e-12)
    w = with_workload(input_tokens_per_turn=8000.0)
    sent = 2 * 8000 * per_token / (8 if lay.kind == "tp" else 1)   # sent once per instance, in equal slices
    assert kv_transfer_s(m, GB300, w, lay, 2.0, "nvlink") == pytest.approx(kv_transfer_time(GB300, sent, "nvlink"), rel=1e-12)


def test_prefill_plan_loads_a_gqa_prefix_per_head_share():
    """The plan's TTFT prefix load under TP is the GPU's K/V heads of the cached prefix, not the whole KV."""
    m, lay = load_model("llama-3.1-70b"), parse_layout("tp8")
    w = with_workload(input_tokens_per_turn=9000.0, prefix_hit_rate=2 / 3, prefill_tokens_per_rank=16384)
    p = prefill_plan(m, GB300, w, lay)
    whole = p.seqs * float(kv_bytes_per_request(m, w.cached_tokens_per_turn))
    assert p.load_ttft_s == prefix_load_s(GB300, whole / 8, w.prefix_pool)


# ---------------------------------------------------------------- pools, money, power


def _stub(output_per_decode_gpu=40000.0, prefill_turns=100.0, price=2.65, power=1400.0):
    hw = SimpleNamespace(name="stub", price_usd_per_gpu_hour=price, gpu_power_w=power)
    decode = SimpleNamespace(output_tokens_per_s_per_gpu=output_per_decode_gpu, tokens_per_s_per_user=300.0)
    prefill = SimpleNamespace(turns_per_s_per_gpu=prefill_turns, ttft_s=0.1, feasible=True)
    return Serving(hw=hw, model=V41, workload=AGENTX, prefill=prefill, decode=decode, decode_capacity=None)


def test_pools_and_money_by_hand():
    s = _stub()
    turns_d = 40000 / 300                                   # turns/s per decode GPU
    ratio = turns_d / 100                                   # prefill GPUs per decode GPU = 4/3
    per_gpu = turns_d / (1 + ratio)                         # turns/s per GPU of both pools = 57.14
    assert s.prefill_gpus_per_decode_gpu == pytest.approx(4 / 3)
    assert s.tokens_per_s_per_gpu == pytest.approx(per_gpu * 27300)
    assert s.usd_per_m_input == pytest.approx(2.65 / 3600 * 1e6 / (100 * 27000))     # $0.2726
    assert s.usd_per_m_output == pytest.approx(2.65 / 3600 * 1e6 / 40000)            # $0.0184
    assert s.usd_per_m_tokens == pytest.approx(2.65 / 3600 * 1e6 / (per_gpu * 27300))
    assert s.tokens_per_s_per_kw == pytest.approx(per_gpu * 27300 / 1.4)


@settings(max_examples=40, deadline=None)
@given(out=st.floats(1.0, 1e6), turns=st.floats(1e-3, 1e4), price=st.floats(0.1, 10), inp=st.floats(1, 200000),
       hit=st.floats(0, 1), gen=st.floats(1, 20000))
def test_token_accounting_and_money_are_conserved_between_pools(out, turns, price, inp, hit, gen):
    w = with_workload(input_tokens_per_turn=inp, prefix_hit_rate=hit, output_tokens_per_turn=gen)
    s = dataclasses.replace(_stub(out, turns, price), workload=w)
    decode_gpus, prefill_gpus = 1.0, s.prefill_gpus_per_decode_gpu
    # Every turn the prefill pool finishes, the decode pool finishes.
    assert prefill_gpus * turns == pytest.approx(decode_gpus * s.decode_turns_per_s_per_gpu, rel=1e-9)
    # Cached + uncached + output = the throughput, in the workload's proportions.
    parts = s.cached_tokens_per_s_per_gpu + s.uncached_tokens_per_s_per_gpu + s.output_tokens_per_s_per_gpu
    assert parts == pytest.approx(s.tokens_per_s_per_gpu, rel=1e-9)
    assert s.output_tokens_per_s_per_gpu * (1 + prefill_gpus) == pytest.approx(out, rel=1e-9)
    # The input and output bills add up to the blended bill.
    bill = s.usd_per_m_input * (s.cached_tokens_per_s_per_gpu + s.uncached_tokens_per_s_per_gpu) + \
        s.usd_per_m_output * s.output_tokens_per_s_per_gpu
    assert bill == pytest.approx(s.usd_per_m_tokens * s.tokens_per_s_per_gpu, rel=1e-9)


def test_serving_over_a_batch_array_matches_scalars():
    lay = parse_layout("dep16")
    batches = np.array([1.0, 33.0, 500.0])
    arr = serve(V41, VR, AGENTX, lay, batches, prefill=_PREFILL["vr-nvl72"])
    for i, b in enumerate(batches):
        one = serve(V41, VR, AGENTX, lay, b, prefill=_PREFILL["vr-nvl72"])
        assert arr.tokens_per_s_per_gpu[i] == pytest.approx(one.tokens_per_s_per_gpu, rel=1e-12)
        assert arr.tokens_per_s_per_user[i] == pytest.approx(one.tokens_per_s_per_user, rel=1e-12)
        assert arr.record(i)["decode_bound"] == one.decode.result.bound


def test_infeasible_points_say_why():
    w = with_workload(runtime_reserve_bytes=250e9)
    s = serve(V41, GB300, w, parse_layout("dep32"), np.array([1.0, 10.0, 1000.0]))
    assert not np.any(s.feasible)
    rec = s.record(0)
    assert rec["feasible"] is False and "exceed" in rec["reason"]
    # Million-token contexts: 890 MB of KV per request, so a few hundred fit on a DEP32 rank (the prefill pool
    # such prompts need is far larger than one NVLink domain: the KV goes over the scale-out NIC).
    w = with_workload(input_tokens_per_turn=1e6, kv_transfer_link="scale-out")
    s = serve(V41, GB300, w, parse_layout("dep32"), np.array([1.0, 10.0, 200.0, 1000.0]))
    assert s.prefill.feasible
    assert [bool(x) for x in s.feasible] == [True, True, True, False]
    assert "does not fit in HBM" in s.record(3)["reason"] and s.record(2)["reason"] == ""


def test_workload_longer_than_the_context_is_refused():
    w = with_workload(input_tokens_per_turn=2e6)
    with pytest.raises(SpecError, match="maximum"):
        serve(V41, GB300, w, parse_layout("dep32"), 1.0)


def test_pools_that_share_an_nvlink_domain_must_fit_in_it():
    # 1M-token prompts need about 0.67 prefill GPUs per decode GPU at batch 1 (27 at batch 200): DEP32 with its
    # prefill share is 32 x 1.67 = 53 GPUs at batch 1 (fits 72) and hundreds beyond.
    w = with_workload(input_tokens_per_turn=1e6)
    s = serve(V41, GB300, w, parse_layout("dep32"), np.array([1.0, 200.0]))
    gpus = s.decode.layout.ranks * (1 + s.prefill_gpus_per_decode_gpu)
    assert list(s.deployment_gpus) == pytest.approx(list(gpus))
    assert [bool(x) for x in s.fits_domain] == [bool(g <= 72) for g in gpus] == [True, False]
    assert "NVLink domain" in s.record(1)["reason"]
    far = serve(V41, GB300, with_workload(input_tokens_per_turn=1e6, kv_transfer_link="scale-out"),
                parse_layout("dep32"), np.array([200.0]))
    assert bool(np.all(far.fits_domain))


def test_admission_cap_and_cpu_per_admitted_prompt():
    # Steady state: a scheduler admits batch x acceptance / output turns per step. AgentX (27,000-token prompts,
    # 300 output tokens) at acceptance 3.51: 342 requests per rank admit 342 x 3.51 / 300 = 4.0 per step, the
    # October stack's cap of 4 new KV loads per step; 7e-9 s per prompt token x 27,000 x 4.0 = 0.76 ms of CPU.
    assert GB300.max_kv_loads_per_step == 4 and GB300.admission_cpu_per_prompt_token_s == pytest.approx(7.0e-9)
    s = serve(V41, GB300, AGENTX, parse_layout("dep32"), np.array([341.0, 343.0]))
    per = 341.0 * 3.51 / 300
    assert s.decode.admissions_per_step[0] == pytest.approx(per)
    assert [bool(x) for x in s.admits] == [True, False]
    assert "max_kv_loads_per_step = 4" in s.record(1)["reason"]
    bare = decode_engine(V41, GB300, parse_layout("dep32"), np.array([341.0]), s.decode.context)
    each = 27000 * 7.0e-9
    assert s.decode.result.host_s[0] - bare.result.host_s == pytest.approx(per * each, rel=1e-9)
    # the host path: the mean rank's scheduling and admissions, the slowest of 32 ranks' spread (the step's own 0.2 ms
    # x 0.2, and a Poisson count of admissions: variance per x each^2), then the DP sync (5 x 0.3 ms)
    from rubinperf.roofline import expected_max_normal

    sd = math.sqrt((0.2 * 0.2e-3) ** 2 + per * each ** 2)
    path = 0.2e-3 + per * each + expected_max_normal(32) * sd + 1.5e-3
    assert s.decode.cpu_s[0] == pytest.approx(path, rel=1e-9)
    gpu = bare.target_s[0] + bare.draft_s[0]
    assert s.decode.step_s[0] == pytest.approx(gpu + max(0.0, path - gpu))


def test_sweeps_default_to_the_stack_engine_shapes():
    sw = sweep([(V41, GB300, AGENTX), (V41, VR, AGENTX)], batches=np.array([1.0]))
    shapes = {(r.hw.name, r.decode.layout.name) for r in sw.runs}
    assert shapes == {("gb300-nvl72", x) for x in ("tp4", "dep16", "dep32")} | {
        ("vr-nvl72", x) for x in ("tp8", "dep16", "dep32")}
