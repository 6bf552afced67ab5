"""Expert parallelism beyond one NVLink domain: the NVLink / NIC split of EP dispatch and
combine and of collectives, DeepEP's two modes, cluster specs, layouts across domains, KV over the NIC."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.errors import SpecError
from rubinperf.kernels import all_gather, all_reduce, all_to_all, ep_copies, ep_dispatch_combine
from rubinperf.specs.layout import Layout, check_layout, parse_layout
from rubinperf.roofline import kernel_time
from rubinperf.step.point import make_point
from rubinperf.specs.hardware import load_hardware
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform
from rubinperf.step.timing import step

CLUSTERS = ("h800-cluster", "h100-cluster", "h200-cluster", "b200-cluster")


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def h800():
    return load_platform("h800-cluster")


# ---------------------------------------------------------------- the split, by hand


def test_remote_fraction_by_hand():
    """n = 32 ranks, d = 8 per domain, top-8: ranks hit 32(1 - (31/32)^8); of them 1/32 is the sender,
    7/32 its domain, 24/32 = (n - d)/n other domains."""
    hit = 32 * (1 - (31 / 32) ** 8)
    c = ep_copies(32, 8, gpus_per_domain=8)
    assert c["total"] == pytest.approx(hit * 31 / 32)
    assert c["direct"] == pytest.approx(hit * 7 / 32)
    assert c["remote"] == pytest.approx(hit * 24 / 32) == pytest.approx(c["nic"])
    assert c["forward"] == 0.0
    # Hierarchical: 4 domains, a token reaches 4(1 - (3/4)^8) of them, 3/4 of those remote: once over the NIC each.
    h = ep_copies(32, 8, gpus_per_domain=8, hierarchical=True)
    assert h["nic"] == pytest.approx(4 * (1 - 0.75 ** 8) * 3 / 4)
    assert h["forward"] == pytest.approx(hit * 24 / 32 * 7 / 8)


@settings(max_examples=60, deadline=None)
@given(domains=st.integers(1, 32), d=st.sampled_from([1, 2, 4, 8, 72]), k=st.integers(1, 16),
       hier=st.booleans(), tokens=st.floats(1, 1e5))
def test_nvlink_plus_nic_equals_the_dispatch_total(domains, d, k, hier, tokens):
    """Copies delivered over NVLink from the sender plus those from other domains are the dispatch total; in
    low-latency mode the NIC carries exactly the remote ones, so NVLink bytes + NIC bytes = the total; the
    hierarchical NIC carries at most those (one copy per remote domain)."""
    n = domains * d
    c = ep_copies(n, k, gpus_per_domain=d, hierarchical=hier)
    assert c["direct"] + c["remote"] == pytest.approx(c["total"])
    if not hier:
        cost = ep_dispatch_combine(tokens, n, k, 7168, 1, 2, gpus_per_domain=d)
        one_domain = ep_dispatch_combine(tokens, n, k, 7168, 1, 2)
        assert cost.nvlink_bytes + cost.scale_out_bytes == pytest.approx(one_domain.nvlink_bytes)
    else:
        assert c["nic"] <= c["remote"] + 1e-12
    # All-to-all and all-gather move (n - 1)/n of their bytes however the ranks are grouped (direct / NIC + in-domain).
    a2a = all_to_all(1e9, n, gpus_per_domain=d).cost
    ag = all_gather(1e9, n, gpus_per_domain=d).cost
    assert a2a.nvlink_bytes + a2a.scale_out_bytes == pytest.approx(1e9 * (n - 1) / n)
    assert ag.nvlink_bytes + ag.scale_out_bytes == pytest.approx(1e9 * (n - 1) / n)


def test_within_one_domain_the_cost_is_todays():
    """A group inside one domain: the same Cost as with no topology at all (today's formulas)."""
    for n in (2, 8, 16, 72):
        for hier in (False, True):
            assert ep_dispatch_combine(128, n, 8, 7168, 1, 2, gpus_per_tray=4, gpus_per_domain=72,
                                       hierarchical=hier) == ep_dispatch_combine(128, n, 8, 7168, 1, 2, gpus_per_tray=4)
        assert all_to_all(1e6, n, 4, gpus_per_domain=72) == all_to_all(1e6, n, 4)
        assert all_reduce(1e6, n, 4, gpus_per_domain=72) == all_reduce(1e6, n, 4)
        assert all_gather(1e6, n, 4, gpus_per_domain=72) == all_gather(1e6, n, 4)


def test_hierarchical_all_reduce_by_hand():
    """16 ranks in 2 domains of 8: NVLink 2 x 7/8 x B (reduce-scatter + all-gather), NIC 2 x 1/2 x B / 8."""
    c = all_reduce(8e6, 16, gpus_per_domain=8).cost
    assert c.nvlink_bytes == pytest.approx(2 * 7 / 8 * 8e6)
    assert c.scale_out_bytes == pytest.approx(2 * 0.5 * 8e6 / 8)


# ---------------------------------------------------------------- steps and layouts


@pytest.mark.parametrize("name", ["h200", "b200", "gb300-nvl72", "vr-nvl72"])
def test_a_layout_within_one_domain_gives_todays_result(name, v3):
    """The same rack allowed to span 32 domains, and a Point with no topology at all: a layout inside one
    domain times exactly as before."""
    hw = load_platform(name)
    wide = dataclasses.replace(hw, max_nvlink_domains=32)
    for lay, phase in ((Layout("dep", 8), "decode"), (Layout("dep", 4), "prefill"), (Layout("tp", 8), "decode")):
        p = make_point(v3, hw, lay, phase=phase, batch=16, context=4096, new_tokens=8192 if phase == "prefill" else None)
        bare = dataclasses.replace(p, nvlink_domain_gpus=None, ep_hierarchical=False)
        t = float(step(v3, hw, lay, p).expected_s)
        assert float(step(v3, wide, lay, p).expected_s) == t
        assert float(step(v3, hw, lay, bare).expected_s) == t


@settings(max_examples=25, deadline=None)
@given(factor=st.floats(1.0, 16.0), ranks=st.sampled_from([16, 32, 64, 128]), phase=st.sampled_from(["decode", "prefill"]),
       batch=st.sampled_from([1, 16, 128]))
def test_more_nic_bandwidth_is_never_slower(factor, ranks, phase, batch, v3, h800):
    lay = Layout("dep", ranks)
    p = make_point(v3, h800, lay, phase=phase, batch=batch, context=4096, new_tokens=16384 if phase == "prefill" else None)
    faster = dataclasses.replace(h800, scale_out_bandwidth_bytes_per_s=h800.scale_out_bandwidth_bytes_per_s * factor)
    assert float(step(v3, faster, lay, p).expected_s) <= float(step(v3, h800, lay, p).expected_s) * (1 + 1e-12)
    assert float(step(v3, faster, lay, p).sol_s) <= float(step(v3, h800, lay, p).sol_s) * (1 + 1e-12)


def test_a_step_across_domains_sends_bytes_over_the_nic(v3, h800):
    lay = parse_layout("dep32")
    r = step(v3, h800, lay, make_point(v3, h800, lay, phase="decode", batch=64, context=4096))
    # the exchange: inside MegaMoE, or DeepEP's dispatch and combine kernels (stack moe_kernels)
    moe = [o for o in r.ops if o.op.name.startswith(("MegaMoE", "MoE dispatch", "MoE combine")) and o.op.part == "target"]
    assert moe and all(float(o.op.cost.scale_out_bytes) > 0 and float(o.time.scale_out_s) > 0 for o in moe)
    assert all("RDMA" in o.op.name for o in moe)


def test_layouts_across_domains_are_checked(v3):
    h800, h200 = load_platform("h800-cluster"), load_platform("h200")
    check_layout(parse_layout("dep256"), v3, h800)   # 32 domains of 8
    with pytest.raises(SpecError, match="4 ranks span NVLink domains of 3 GPUs: expected a multiple of 3"):
        check_layout(parse_layout("dep4"), load_model("deepseek-v3"), dataclasses.replace(h800, nvlink_domain_size=3,
                                                                                            gpus_per_tray=3))
    with pytest.raises(SpecError, match="deployment of 32 NVLink domains x 8 GPUs = 256"):
        check_layout(Layout("dep", 512), dataclasses.replace(v3, num_routed_experts=512, draft_routed_experts=512), h800)
    with pytest.raises(SpecError, match="TP stays inside one NVLink domain"):
        check_layout(parse_layout("tp16"), v3, h800)
    with pytest.raises(SpecError, match="exceed the h200 NVLink domain of 8 GPUs"):
        check_layout(parse_layout("dep16"), v3, h200)


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_silicon_is_its_nodes(name):
    """A cluster spec is its node's silicon plus the scale-out network: every field of the node's spec but the
    topology and the NIC's source is the same (h100 / h800 differ from the h200 in HBM, NVLink and price only)."""
    hw = load_hardware(name)
    assert hw.max_nvlink_domains > 1 and hw.nvlink_domain_size == hw.gpus_per_tray == 8
    assert hw.scale_out_bandwidth_bytes_per_s == 50e9   # 400 Gb/s per GPU
    base = load_hardware("b200" if name == "b200-cluster" else "h200")
    differ = {f.name for f in dataclasses.fields(hw) if f.compare and getattr(hw, f.name) != getattr(base, f.name)}
    allowed = {"name", "description", "default_stack", "max_nvlink_domains"}
    if name in ("h800-cluster", "h100-cluster"):
        allowed |= {"hbm_capacity_bytes", "hbm_bandwidth_bytes_per_s", "nvlink_bandwidth_bytes_per_s",
                    "nvlink_efficiency", "price_usd_per_gpu_hour"}
    assert differ <= allowed


# ---------------------------------------------------------------- the low-latency all-to-all against DeepEP

# DeepEP README (github.com/deepseek-ai/DeepEP): low-latency kernels on H800 + CX7 400 Gb/s, 128 tokens, hidden
# 7168, top-8, FP8 dispatch (7168 values + 56 FP32 scales per token) and BF16 combine; latency in us.
DEEPEP_DISPATCH_US = {16: 118, 32: 155, 64: 173, 128: 192, 256: 194}
DEEPEP_COMBINE_US = {16: 195, 32: 273, 64: 314, 128: 369, 256: 360}


def _ll_us(hw, ranks, bytes_per_token):
    # Low-latency mode sends one copy per selected expert: 128 tokens x 8 copies per rank.
    k = all_to_all(128 * 8 * bytes_per_token, ranks, gpus_per_tray=8, gpus_per_domain=8)
    return float(kernel_time(k, hw, launch="graph").expected_s) * 1e6


@pytest.mark.parametrize("figures,bytes_per_token", [(DEEPEP_DISPATCH_US, 7168 + 56 * 4), (DEEPEP_COMBINE_US, 7168 * 2)])
def test_low_latency_all_to_all_grows_with_ranks_as_deepep(h800, figures, bytes_per_token):
    """Latency rises with the ranks reached, steeply while the remote fraction (n - 8)/n climbs from 1/2 and
    flat once nearly every copy crosses the NIC, as DeepEP's figures do; each within +-25% of them."""
    model = {n: _ll_us(h800, n, bytes_per_token) for n in figures}
    ranks = sorted(figures)
    assert all(model[a] < model[b] for a, b in zip(ranks, ranks[1:]))
    for n in ranks:
        assert 0.75 <= model[n] / figures[n] <= 1.25, (n, model[n], figures[n])
    assert model[256] / model[128] < 1.1   # saturated, as 194 vs 192 and 360 vs 369 us
    published, predicted = figures[256] / figures[16], model[256] / model[16]
    assert 0.75 <= predicted / published <= 1.25


# ---------------------------------------------------------------- serving across nodes


def test_kv_goes_over_the_nic_when_the_pools_cannot_share_a_domain(v3):
    from rubinperf.serving import kv_transfer_link, serve, prefill_plan
    from rubinperf.specs.workload import load_workload

    w = load_workload("agentx")
    h200c, gb300 = load_platform("h200-cluster"), load_platform("gb300-nvl72")
    assert kv_transfer_link(gb300, w, parse_layout("dep2"), parse_layout("dep32")) == "nvlink"
    assert kv_transfer_link(h200c, w, parse_layout("dep16")) == "scale-out"
    assert kv_transfer_link(h200c, w, parse_layout("dep2"), parse_layout("dep8")) == "scale-out"
    pf = prefill_plan(v3, h200c, w, parse_layout("dep16"))
    s = serve(v3, h200c, w, parse_layout("dep32"), [8.0], prefill=pf)
    rec = s.record(0)
    assert rec["kv_transfer_link"] == "scale-out" and rec["prefill_layout"] == "dep16" and rec["decode_layout"] == "dep32"
    # The transfer: each prefill GPU sends its sequences' KV over its own 400 Gb/s NIC.
    from rubinperf.step.capacity import kv_bytes_per_request

    sent = pf.seqs * float(kv_bytes_per_request(v3, w.input_tokens_per_turn))
    assert rec["kv_transfer_ms"] == pytest.approx((sent / (50e9 * 0.85) + 5e-6) * 1e3)


# ---------------------------------------------------------------- the command line


def test_estimate_gives_per_node_throughput_with_the_scale_out_term(cli):
    for layout, phase in (("dep32", "prefill"), ("dep128", "decode")):
        r = cli("estimate", "-m", "deepseek-v3", "-H", "h800-cluster", "-l", layout, "--phase", phase,
                "--context", "4096", "--batch", "8", "--json")
        assert r.code == 0, r.err
        rec = json.loads(r.out)[0]
        assert rec["tokens_per_s_per_node"] == pytest.approx(rec["tokens_per_s_per_gpu"] * 8)
        assert rec["nvlink_domains"] == int(layout[3:]) // 8 and rec["scale_out_time_ms"] > 0
        rows = [b for b in rec["breakdown"] if "RDMA" in b["kernel"]]
        assert rows and all(b["scale_out_ms"] > 0 and b["scale_out_bytes"] > 0 for b in rows)
        assert "NVLink domains" in rec["note"] and "tok/s per 8-GPU node" in rec["note"]


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v4.1-flash"])
def test_compare_a_cluster_with_the_racks(cli, model):
    r = cli("compare", "-m", model, "-H", "h200-cluster", "-H", "gb300-nvl72", "-H", "vr-nvl72", "--json")
    assert r.code == 0, r.err
    assert "h200-cluster" in r.out and "vr-nvl72" in r.out


def test_kernel_all_to_all_across_domains(cli):
    r = cli("kernel", "all-to-all", "--bytes", "8e6", "--ranks", "32", "-H", "h800-cluster", "--json")
    assert r.code == 0, r.err
    rec = json.loads(r.out)
    assert rec["nvlink_bytes"] == pytest.approx(8e6 * 7 / 32) and rec["scale_out_bytes"] == pytest.approx(8e6 * 24 / 32)
    assert rec["nvlink_domains"] == 4 and rec["scale_out_ms"] > 0
    inside = json.loads(cli("kernel", "all-to-all", "--bytes", "8e6", "--ranks", "8", "-H", "h800-cluster", "--json").out)
    assert inside["scale_out_bytes"] == 0 and inside["nvlink_bytes"] == pytest.approx(8e6 * 7 / 8)
    for kind in ("all-reduce", "all-gather"):
        assert cli("kernel", kind, "--bytes", "64MB", "--ranks", "16", "-H", "h100-cluster").code == 0
    bad = cli("kernel", "all-reduce", "--bytes", "1e6", "--mode", "hierarchical")
    assert bad.code == 2 and "--mode" in bad.err


def test_the_public_v3_points_land_in_their_bands():
    from rubinperf.analysis.validate import load_points, validate

    pts = [p for p in load_points() if p.model == "deepseek-v3" and p.metric == "tokens_per_s_per_node"]
    assert len(pts) == 8
    recs = {r["id"]: r for r in validate(pts)}
    # The decode nodes within their evidence bands; the H100 prefill node within the band its point states (+-30%).
    # DeepSeek's own profile of its prefill engine (perfectly balanced routing) and SGLang's balanced run of the same
    # shape within their evidence bands; the H800 production day-average lands high (1.51): that average is half the
    # same engine's profile (README, "Prefill nodes").
    for name in ("deepseek-h800-decode-node", "sglang-h100-decode-node", "deepseek-h800-prefill-profile",
                 "sglang-h100-prefill-4k-balanced", "deepseek-h800-decode-profile"):
        assert recs[name]["in_band"], name
    assert 0.7 <= recs["sglang-h100-prefill-node"]["ratio"] <= 1.3
    assert recs["deepseek-h800-prefill-node"]["ratio"] > 1.3
    # real routing is slower than balanced routing by the stretch of the experts and both exchanges; the stack's
    # balancedness is fitted to the two rows' ratio, so the default row lands where the balanced one does
    assert recs["sglang-h100-prefill-4k-default"]["predicted"] < recs["sglang-h100-prefill-4k-balanced"]["predicted"]
    assert recs["sglang-h100-prefill-4k-default"]["ratio"] == pytest.approx(
        recs["sglang-h100-prefill-4k-balanced"]["ratio"], rel=0.003)
    assert recs["sglang-h100-prefill-4k-default"]["in_band"]