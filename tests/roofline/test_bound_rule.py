"""The one bound rule (roofline.binding_term) behind every bound column: a kernel's largest term; a breakdown
row's and a step's, the term that binds the largest share of their time."""

from __future__ import annotations

import dataclasses

from rubinperf.kernels import elementwise, gemm
from rubinperf.roofline import BOUNDS, KernelTime, binding_term, busiest_unit
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform
from rubinperf.step.graph import Op
from rubinperf.step.point import make_point
from rubinperf.step.records import step_record
from rubinperf.step.result import OpTime, StepResult
from rubinperf.step.timing import step


def _time(**terms) -> KernelTime:
    values = {f.name: 0.0 for f in dataclasses.fields(KernelTime)}
    values.update({f"{k}_s": v for k, v in terms.items()})
    values["expected_s"] = sum(terms.values())
    return KernelTime(**values)


def test_ties_go_to_the_first_term_in_bounds_order():
    assert binding_term(dict.fromkeys(BOUNDS, 1.0)) == "compute"
    assert binding_term({"memory": 2e-6, "latency": 2e-6}) == "memory"
    assert binding_term({"memory": 1e-6, "latency": 2e-6}) == "latency"


def test_a_kernel_is_bound_by_its_largest_term():
    assert _time(compute=3e-6, memory=2e-6, latency=1e-6).bound == "compute"
    assert _time(memory=1e-6, parallelism=4e-6, latency=1e-6).bound == "parallelism"


def test_the_busiest_unit_leaves_latency_out_and_counts_parallelism_as_memory():
    """Latency is no unit's work: a kernel bound by latency still names the unit its other terms keep busiest. The
    parallelism term is HBM time (bytes too few in flight), so it adds to memory: 0.6 + 0.7 us of HBM outweighs
    1.1 us on the link and 1.0 us of compute."""
    t = _time(compute=1.0e-6, memory=0.6e-6, parallelism=0.7e-6, comm=1.1e-6, latency=5e-6)
    assert t.bound == "latency" and t.busiest == "memory"
    assert _time(compute=1.0e-6, memory=0.6e-6, comm=1.1e-6, latency=5e-6).busiest == "comm"
    assert busiest_unit(dict.fromkeys(BOUNDS, 1.0)) == "memory"      # memory + parallelism 2.0 against 1.0
    assert busiest_unit({**dict.fromkeys(BOUNDS, 0.0), "compute": 1.0, "comm": 1.0}) == "compute"   # ties: UNITS order


def test_a_row_is_bound_by_the_term_of_most_of_its_time_not_its_largest_summed_term():
    """Three ops of one name: one compute-bound (3 us compute + 0.1 us latency = 3.1 us) and two latency-bound
    (0.9 us compute + 1 us latency = 1.9 us each, 3.8 us together). Summed, compute (4.8 us) exceeds latency
    (2.1 us); but latency-bound ops hold more of the row's time (3.8 us against 3.1 us): the row is latency-bound."""
    m, hw, lay = load_model("deepseek-v4.1-flash"), load_platform("gb300-nvl72"), parse_layout("tp8")
    point = make_point(m, hw, lay, phase="decode", batch=1)
    k = gemm(1, 128, 128, weight="bf16", act="bf16")
    ops = [OpTime(Op("x", k), _time(compute=3.0e-6, latency=0.1e-6)),
           OpTime(Op("x", k), _time(compute=0.9e-6, latency=1.0e-6)),
           OpTime(Op("x", k), _time(compute=0.9e-6, latency=1.0e-6)),
           OpTime(Op("host", elementwise(1, 1), part="cpu"), _time(latency=1e-7))]
    r = StepResult(m, hw, lay, point, ops)
    rows = {b["kernel"]: b for b in step_record(r)["breakdown"]}
    summed = rows["x"]["terms_ms"]
    assert summed["compute"] > summed["latency"]          # the largest summed term would say compute
    assert rows["x"]["bound"] == "latency"                 # 3.8 us latency-bound against 3.1 us compute-bound
    assert r.bound == "latency"                            # the step by the same rule
    assert rows["host"]["bound"] == "cpu"                  # host work is bound by the CPU


def test_every_breakdown_row_of_a_real_step_follows_the_rule():
    m, hw = load_model("deepseek-v4.1-flash"), load_platform("vr-nvl72")
    for name in ("dep32", "tp8"):
        lay = parse_layout(name)
        r = step(m, hw, lay, make_point(m, hw, lay, phase="decode"))
        rows = r.by_name()
        for b in step_record(r)["breakdown"]:
            x = rows.get(b["kernel"])
            if x is None or x["part"] == "cpu":
                assert b["bound"] == "cpu"
                continue
            assert b["bound"] == binding_term({t: x["shares"][t] for t in BOUNDS if t in x["shares"]})


def test_per_gpu_divides_a_scheduler_s_quantity_over_its_gpus():
    assert parse_layout("dep16").per_gpu(64) == 64          # a DEP rank is one GPU
    assert parse_layout("tp8").per_gpu(64) == 8             # a TP instance spreads over 8
