"""Tier 2: hypothesis properties of the kernel roofline core."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import HARDWARE_NAMES
from rubinperf.roofline import BOUNDS
from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.kernels import (all_gather, all_reduce, all_to_all, attention, copy, elementwise, experts_touched,
                               gemm, grouped_gemm, mega_moe, sparse_attention, table_lookup)
from rubinperf.roofline import kernel_time, launch_parts, split_kv_reduction
from rubinperf.specs.hardware import Hardware
from rubinperf.specs.stack import Platform, load_platform
from rubinperf.specs.loader import spec_fields

FAST = settings(max_examples=80, deadline=None)

_HW = {name: load_platform(name) for name in HARDWARE_NAMES}
RATE_FIELDS = [f.name for f in spec_fields(Platform) if f.name.endswith(("_flops_per_s", "_bandwidth_bytes_per_s"))]
EFFICIENCY_FIELDS = [f.name for f in spec_fields(Platform)
                     if f.name.endswith("_efficiency") or f.name.endswith("_bandwidth_factor")]
FLOOR_FIELDS = ["kernel_launch_graph_s", "mma_prologue_cycles", "hbm_latency_s", "collective_floor_s", "nvlink_latency_s",
                "cross_tray_latency_s", "scale_out_latency_s", "fused_overlap_rows"]
CAPACITY_FIELDS = ["mma_bytes_in_flight_per_sm", "stream_bytes_in_flight_per_sm"]
COST_FIELDS = [f.name for f in dataclasses.fields(Cost)]

DTYPES = ("fp4", "fp8", "bf16", "fp32")


def test_field_lists_are_not_empty():
    assert len(RATE_FIELDS) >= 10   # 5 peaks + HBM, NVLink, scale-out, host memory, C2C
    assert {"hbm_stream_efficiency", "mma_compute_efficiency", "attention_compute_efficiency"} <= set(EFFICIENCY_FIELDS)


# ------------------------------------------------------------------ strategies

dims = st.integers(min_value=1, max_value=1 << 16)
dtypes = st.sampled_from(DTYPES)


@st.composite
def kernel_costs(draw) -> Kernel:
    kind = draw(st.sampled_from(["gemm", "grouped", "attention", "copy", "all_reduce", "all_to_all", "all_gather",
                                 "elementwise", "lookup", "mega_moe", "sparse_attention"]))
    if kind == "mega_moe":
        ranks = draw(st.sampled_from([2, 4, 8, 16, 32, 64]))
        return mega_moe(draw(st.integers(1, 1 << 15)), ranks, 384 // ranks, 384, 6, 6912, 5120,
                        gpus_per_tray=draw(st.sampled_from([None, 4])))
    if kind == "sparse_attention":
        seqs, q = draw(st.integers(1, 256)), draw(st.integers(1, 6))
        return sparse_attention(seqs * q, seqs, q, draw(st.integers(0, 1 << 20)), draw(st.integers(1, 64)),
                                draw(st.sampled_from([0, 1, 2, 4])), draw(st.sampled_from([None, 512])), 128, 528,
                                576, 512, prefill=draw(st.booleans()))
    if kind == "gemm":
        return gemm(draw(dims), draw(dims), draw(dims), weight=draw(dtypes), act=draw(dtypes), out=draw(dtypes))
    if kind == "grouped":
        return grouped_gemm(draw(dims), draw(st.integers(1, 512)), draw(dims), draw(dims), weight=draw(dtypes),
                            act=draw(dtypes))
    if kind == "attention":
        heads = draw(st.integers(1, 128))
        kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
        kv_len = draw(st.integers(1, 1 << 20))
        q_len = draw(st.integers(1, min(kv_len, 1 << 14)))
        return attention(draw(st.integers(1, 256)), heads, q_len, kv_len, draw(st.sampled_from([64, 128, 192, 512])),
                         dtype=draw(dtypes), kv_heads=kv_heads, causal=draw(st.booleans()))
    if kind == "copy":
        return copy(draw(st.floats(1, 1e12)))
    if kind == "all_reduce":
        return all_reduce(draw(st.floats(1, 1e10)), draw(st.integers(1, 72)), gpus_per_tray=draw(st.sampled_from([None, 4, 8])))
    if kind == "all_to_all":
        return all_to_all(draw(st.floats(1, 1e10)), draw(st.integers(1, 72)), gpus_per_tray=draw(st.sampled_from([None, 4])))
    if kind == "all_gather":
        return all_gather(draw(st.floats(1, 1e10)), draw(st.integers(1, 72)))
    if kind == "elementwise":
        return elementwise(draw(st.floats(0, 1e10)), draw(st.floats(0, 1e10)), flops=draw(st.floats(0, 1e10)))
    return table_lookup(draw(st.integers(1, 1 << 20)), draw(st.integers(1, 1024)),
                        where=draw(st.sampled_from(["hbm", "host", "peer-hbm"])))


@st.composite
def costs(draw) -> Kernel:
    """One kernel, sometimes with the work of others fused into it (exercises every term at once)."""
    parts = draw(st.lists(kernel_costs(), min_size=1, max_size=3))
    total = parts[0].plus(sum((p.cost for p in parts[1:]), Cost()))
    # and sometimes raw traffic that no kernel above produces (scale-out)
    if draw(st.booleans()):
        total = total.plus(Cost(scale_out_bytes=draw(st.floats(0, 1e10)), scale_out_hops=draw(st.integers(0, 4))))
    return total


@st.composite
def hardwares(draw) -> Hardware:
    """A bundled GPU with its rates, efficiencies and floors perturbed (staying a valid spec)."""
    hw = _HW[draw(st.sampled_from(HARDWARE_NAMES))]
    changes = {}
    for name in draw(st.lists(st.sampled_from(RATE_FIELDS), max_size=4, unique=True)):
        changes[name] = getattr(hw, name) * draw(st.floats(0.1, 10))
    for name in draw(st.lists(st.sampled_from(EFFICIENCY_FIELDS), max_size=3, unique=True)):
        changes[name] = draw(st.floats(0.05, 1.0))
    for name in draw(st.lists(st.sampled_from(FLOOR_FIELDS), max_size=2, unique=True)):
        changes[name] = draw(st.floats(1e-9, 1e-4)) * (1e9 if name in ("fused_overlap_rows", "mma_prologue_cycles") else 1)
    for name in draw(st.lists(st.sampled_from(CAPACITY_FIELDS), max_size=2, unique=True)):
        changes[name] = getattr(hw, name) * draw(st.floats(0.05, 2.0))
    if draw(st.booleans()):
        changes["split_k_max"] = draw(st.integers(1, 16))
    changes["pdl_hidden_s"] = draw(st.sampled_from([hw.pdl_hidden_s, 0.0, 1e-5]))
    # a valid spec: a kernel in a graph starts no later than behind others in a stream, and that no later than
    # alone after a synchronisation (Hardware.validate, Platform.validate)
    changes["kernel_launch_stream_s"] = max(hw.kernel_launch_stream_s, changes.get("kernel_launch_graph_s", 0.0))
    changes["kernel_launch_cold_s"] = max(hw.kernel_launch_cold_s, changes["kernel_launch_stream_s"])
    return dataclasses.replace(hw, **changes)


def _le(a, b, rel=1e-12):
    """a <= b up to float rounding."""
    return a <= b * (1 + rel) + 1e-300


# ------------------------------------------------------------------ expected >= SOL >= every SOL term


@FAST
@given(cost=costs(), hw=hardwares(), die_local=st.booleans(), launch=st.sampled_from(["graph", "eager", "stream", "cold"]))
def test_expected_bounds_sol_bounds_terms(cost, hw, die_local, launch):
    t = kernel_time(cost, hw, die_local_weights=die_local, launch=launch)
    for term in (t.sol_compute_s, t.sol_memory_s, t.sol_comm_s):
        assert term >= 0
        assert t.sol_s >= term
    for term in (t.compute_s, t.memory_s, t.parallelism_s, t.comm_s, t.latency_s):
        assert term >= 0
        assert _le(term, t.expected_s)
    assert _le(t.sol_s, t.expected_s)
    # each derated term is no faster than its speed-of-light counterpart
    assert _le(t.sol_compute_s, t.compute_s)
    assert _le(t.sol_memory_s, t.memory_s)
    assert _le(t.sol_comm_s, t.comm_s)
    assert 0 < t.fraction_of_roofline <= 1 + 1e-12 or t.sol_s == 0
    assert t.bound in BOUNDS
    assert math.isfinite(t.expected_s)


# ------------------------------------------------------------------ more hardware never slows anything


@FAST
@given(cost=costs(), hw=hardwares(), field=st.sampled_from(RATE_FIELDS), factor=st.floats(1.0, 100.0),
       die_local=st.booleans())
def test_raising_a_rate_never_slows(cost, hw, field, factor, die_local):
    before = kernel_time(cost, hw, die_local_weights=die_local)
    faster = dataclasses.replace(hw, **{field: getattr(hw, field) * factor})
    after = kernel_time(cost, faster, die_local_weights=die_local)
    assert _le(after.expected_s, before.expected_s)
    assert after.sol_s <= before.sol_s


@FAST
@given(cost=costs(), hw=hardwares(), field=st.sampled_from(EFFICIENCY_FIELDS), to=st.floats(0, 1))
def test_raising_an_efficiency_never_slows(cost, hw, field, to):
    old = getattr(hw, field)
    better = dataclasses.replace(hw, **{field: old + (1.0 - old) * to})
    before, after = kernel_time(cost, hw), kernel_time(cost, better)
    assert _le(after.expected_s, before.expected_s)
    assert after.sol_s == before.sol_s   # efficiencies never touch the speed of light


@FAST
@given(cost=costs(), hw=hardwares(), field=st.sampled_from(FLOOR_FIELDS), frac=st.floats(0.01, 1))
def test_lowering_a_floor_or_latency_never_slows(cost, hw, field, frac):
    lower = dataclasses.replace(hw, **{field: getattr(hw, field) * frac})
    if field == "kernel_launch_graph_s":
        lower = dataclasses.replace(lower, kernel_launch_stream_s=hw.kernel_launch_stream_s,
                                    kernel_launch_cold_s=hw.kernel_launch_cold_s)
    assert kernel_time(cost, lower).expected_s <= kernel_time(cost, hw).expected_s * (1 + 1e-12)


@FAST
@given(cost=costs(), hw=hardwares(), field=st.sampled_from(CAPACITY_FIELDS), factor=st.floats(1.0, 100.0),
       split=st.integers(0, 8))
def test_more_bytes_in_flight_or_split_k_never_slows(cost, hw, field, factor, split):
    more = dataclasses.replace(hw, **{field: getattr(hw, field) * factor, "split_k_max": hw.split_k_max + split})
    assert kernel_time(cost, more).expected_s <= kernel_time(cost, hw).expected_s * (1 + 1e-12)


@FAST
@given(cost=costs(), hw=hardwares(), extra=st.integers(0, 200))
def test_more_sms_at_the_same_rate_per_sm_never_slow(cost, hw, extra):
    """More SMs with the peaks scaled alike (each SM as fast as before) never slow a kernel, but for one step of a
    library's heuristic: a split-KV decode kernel whose groups filled the SMs and no longer do splits its KV and
    enqueues its reduction kernel (roofline.split_kv_reduction), so it may take up to that kernel longer."""
    scale = (hw.sm_count + extra) / hw.sm_count
    peaks = {f: getattr(hw, f) * scale for f in RATE_FIELDS if f.endswith("_flops_per_s")}
    bigger = dataclasses.replace(hw, sm_count=hw.sm_count + extra, **peaks)
    splits = (cost.split_kv_groups is not None
              and float(split_kv_reduction(cost, bigger)) > float(split_kv_reduction(cost, hw)))
    reduction = float(cost.cost.launches) * float(launch_parts(cost, bigger)["reduction"]) if splits else 0.0
    assert kernel_time(cost, bigger).expected_s <= kernel_time(cost, hw).expected_s * (1 + 1e-12) + reduction


@FAST
@given(cost=costs(), hw=hardwares(), die_local=st.booleans())
def test_a_kernel_in_a_graph_is_never_slower_than_alone(cost, hw, die_local):
    """graph <= eager (behind others in a stream) <= stream (the host issuing each call) <= cold (alone after a
    synchronisation, when the host's cold launch is at least its dispatch)."""
    t = {m: kernel_time(cost, hw, die_local_weights=die_local, launch=m).expected_s
         for m in ("graph", "eager", "stream", "cold")}
    assert t["graph"] <= t["eager"] * (1 + 1e-12) and t["eager"] <= t["stream"] * (1 + 1e-12)
    if hw.kernel_launch_cold_s >= hw.host_dispatch_s + hw.kernel_launch_stream_s:
        assert t["stream"] <= t["cold"] * (1 + 1e-12)


# ------------------------------------------------------------------ experts touched


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(1, 1 << 20), groups=st.integers(1, 4096))
def test_experts_touched_bounds(rows, groups):
    t = experts_touched(rows, groups)
    assert 1 <= t <= min(groups, rows)


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(0, 1 << 16), more=st.integers(0, 1 << 16), groups=st.integers(1, 4096))
def test_experts_touched_non_decreasing_in_rows(rows, more, groups):
    assert experts_touched(rows, groups) <= experts_touched(rows + more, groups)


def test_experts_touched_small_exhaustive():
    """Every (rows, groups) with rows <= 64 and groups <= 400: inside [1, min(G, rows)], non-decreasing."""
    for g in range(1, 401):
        prev = 0.0
        for r in range(1, 65):
            t = experts_touched(r, g)
            assert 1 <= t <= min(g, r), (r, g, t)
            assert t >= prev, (r, g)
            prev = t


def test_experts_touched_vectorises():
    rows = np.arange(0, 2000, 7)
    vec = experts_touched(rows, 384)
    assert vec.shape == rows.shape
    for r, v in zip(rows, vec):
        assert v == pytest.approx(experts_touched(int(r), 384), rel=1e-12, abs=1e-12)


def test_experts_touched_symbolic():
    sympy = pytest.importorskip("sympy")
    r, g = sympy.symbols("rows groups", positive=True)
    expr = experts_touched(r, g)
    assert float(expr.subs({r: 2, g: 4})) == pytest.approx(1.75)


# ------------------------------------------------------------------ Cost is linear

nonneg = st.floats(min_value=0, max_value=1e15, allow_nan=False)
raw_costs = st.builds(lambda vals: Cost(**dict(zip(COST_FIELDS, vals))),
                      st.lists(nonneg, min_size=len(COST_FIELDS), max_size=len(COST_FIELDS)))


@FAST
@given(a=raw_costs, b=raw_costs, c=raw_costs, k=st.floats(0, 1e3), j=st.floats(0, 1e3))
def test_cost_is_linear(a, b, c, k, j):
    for f in COST_FIELDS:
        x, y, z = getattr(a, f), getattr(b, f), getattr(c, f)
        assert getattr(a + b, f) == x + y
        assert getattr(b + a, f) == getattr(a + b, f)
        assert getattr((a + b) + c, f) == pytest.approx(getattr(a + (b + c), f), rel=1e-12)
        assert getattr(a * k, f) == getattr(k * a, f) == x * k
        assert getattr((a + b) * k, f) == pytest.approx(getattr(a * k + b * k, f), rel=1e-12, abs=1e-300)
        assert getattr(a * (k + j), f) == pytest.approx(getattr(a * k + a * j, f), rel=1e-12, abs=1e-300)
    assert (a + b).flops == pytest.approx(a.flops + b.flops, rel=1e-12)
    assert (a + b).bytes == pytest.approx(a.bytes + b.bytes, rel=1e-12)
    assert (a * k).hbm_bytes == pytest.approx(a.hbm_bytes * k, rel=1e-12)
    assert sum([a, b, c]) == (a + b) + c          # sum() starts from 0
    assert a * 1 == a and (a * 0).flops == 0


@FAST
@given(cost=costs(), hw=hardwares(), n=st.integers(1, 64))
def test_repeating_a_kernel_scales_its_time(cost, hw, n):
    """n launches of the same kernel back to back: every term of the time scales by n."""
    one, many = kernel_time(cost, hw), kernel_time(dataclasses.replace(cost, cost=cost.cost * n), hw)
    for f in ("compute_s", "memory_s", "parallelism_s", "comm_s", "latency_s", "expected_s", "sol_s"):
        assert getattr(many, f) == pytest.approx(n * getattr(one, f), rel=1e-9, abs=1e-300)
