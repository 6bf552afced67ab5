"""The fast paths give exactly the numbers of the plain ones: a grid swept in chunks over a graph built
once, graphs reused between racks and stacks, and compared points read from the vectorised run
instead of re-running scalar steps. Equality here is exact (==), not approximate, except a grid's metrics against
step() over the same arrays: within 1e-12 relative (GridSteps.metrics times the kernels whose costs are a batch column
times a context row on those factors, mathops.Outer, and rounds otherwise in the last bits)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.step import timing as step_module
from rubinperf.kernels.cost import Cost
from rubinperf.roofline import KernelTime
from rubinperf.step.point import Point
from rubinperf.specs.layout import parse_layout
from rubinperf.mathops import sdiv, smax, smin, sper, sscale, sstep, ssum
from rubinperf.step.records import step_record
from rubinperf.roofline import admission_time
from rubinperf.step.point import make_point
from rubinperf.serving import batch_grid, sweep, sweep_grid
from rubinperf.serving.pareto import summarize
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform, platform
from rubinperf.specs.workload import load_workload
from rubinperf.step.grid import GridSteps
from rubinperf.step.timing import op_graph, step

V41 = load_model("deepseek-v4.1-flash")
GB300 = load_platform("gb300-nvl72")
VR = load_platform("vr-nvl72")
AGENTX = load_workload("agentx")
BATCHES = np.array([1.0, 3.0, 16.0, 77.0, 256.0, 1000.0])
CONTEXTS = np.array([0.0, 1024.0, 8191.0, 131072.0, 500_000.0, 1_000_000.0])


def _op_numbers(r):
    """Every op's expected and SOL time and each term, as floats in op order."""
    out = []
    for o in r.ops:
        t = o.time
        out.append((o.op.name, float(o.expected_s), float(o.sol_s), *(float(v) for v in t.__dict__.values())))
    return out


@pytest.mark.parametrize("hw", [GB300, VR], ids=["gb300", "vr"])
@pytest.mark.parametrize("layout, phase", [("dep32", "decode"), ("tp8", "decode"), ("dep2", "prefill")])
@pytest.mark.parametrize("chunk_points", [7, 25, 10_000])
def test_grid_in_chunks_is_the_whole_grid_step(hw, layout, phase, chunk_points):
    """sweep_grid builds the graph once, times the context-free ops once and makes the kernels that read the
    context a block of rows at a time; each block's numbers are step()'s over its rows, within 1e-12 relative (the
    kernels whose costs are a batch column times a context row timed on those factors, mathops.Outer). In decode
    (a number of queries per sequence: where attention stops reading the context is the same in every block)
    they are step()'s over the whole grid too, however the rows are chunked (7 points: one row at a time)."""
    lay = parse_layout(layout)
    b, c = BATCHES[:4], CONTEXTS
    point = Point(phase, new_tokens=4096.0) if phase == "prefill" else Point(phase)
    got = sweep_grid(V41, hw, lay, point, b, c, chunk_points=chunk_points)
    rows = -(-b.size // max(1, round(b.size / max(1, chunk_points // c.size))))
    blocks = [slice(i, i + rows) for i in range(0, b.size, rows)] if phase == "prefill" else [slice(0, b.size)]
    for sl in blocks:
        whole = step(V41, hw, lay, dataclasses.replace(point, batch=b[sl].reshape(-1, 1), context=c.reshape(1, -1)))
        for key, want in (("step_s", whole.expected_s), ("sol_s", whole.sol_s),
                          ("tokens_per_s_per_gpu", whole.tokens_per_s_per_gpu),
                          ("tokens_per_s_per_user", whole.tokens_per_s_per_user)):
            want = np.broadcast_to(want, got[key][sl].shape)   # (GridSteps.metrics: within 1e-12, its factored kernels)
            assert np.all((got[key][sl] == want) | (np.abs(got[key][sl] - want) <= 1e-12 * np.abs(want))), key


def test_each_chunk_is_step_of_its_rows():
    lay = parse_layout("dep16")
    point = dataclasses.replace(Point("decode"), batch=BATCHES.reshape(-1, 1), context=CONTEXTS.reshape(1, -1))
    seen = 0
    grid = GridSteps(V41, VR, lay, point)
    for sl in grid.blocks(4):
        r = grid.chunk(sl)
        alone = step(V41, VR, lay, dataclasses.replace(point, batch=point.batch[sl]))
        assert np.array_equal(r.expected_s, alone.expected_s) and np.array_equal(r.sol_s, alone.sol_s)
        assert [o.op.name for o in r.ops] == [o.op.name for o in alone.ops]
        for a, b in zip(r.ops, alone.ops):
            assert np.array_equal(np.broadcast_to(a.expected_s, r.expected_s.shape),
                                  np.broadcast_to(b.expected_s, r.expected_s.shape))
            assert np.array_equal(np.broadcast_to(a.op.cost.flops, r.expected_s.shape),
                                  np.broadcast_to(b.op.cost.flops, r.expected_s.shape))
        seen += r.expected_s.shape[0]
    assert seen == BATCHES.size


@pytest.mark.parametrize("hw", [GB300, VR], ids=["gb300", "vr"])
@pytest.mark.parametrize("layout", ["tp8", "dep8", "dep32", "dep64"])
def test_an_element_of_a_vectorised_step_is_the_scalar_step(hw, layout):
    """StepResult.at(i) (what compare reads its kernel tables from) equals step() run at that batch:
    every op's times and terms, the step, its bound and its record."""
    lay = parse_layout(layout)
    point = make_point(V41, hw, lay, phase="decode", batch=1, context=27150.0)
    arr = step(V41, hw, lay, dataclasses.replace(point, batch=BATCHES))
    for i, b in enumerate(BATCHES):
        one = step(V41, hw, lay, dataclasses.replace(point, batch=float(b)))
        at = arr.at(i)
        assert _op_numbers(at) == _op_numbers(one)
        assert at.expected_s == one.expected_s and at.sol_s == one.sol_s and at.bound == one.bound
        assert step_record(at) == step_record(one)


def test_compared_points_read_the_sweep_not_a_new_step():
    sw = sweep([(V41, GB300, AGENTX), (V41, VR, AGENTX)], decode_layouts=["tp8", "dep32"], batches=batch_grid(256))
    for s in summarize(sw):
        for pick in (s.peak, s.at_interactivity(196.0), s.best_single_user):
            d, w = pick.run.decode, pick.run.workload
            rerun = step(V41, pick.run.hw, d.layout, dataclasses.replace(d.result.point, batch=pick.batch))
            # The serving step's host work also admits the requests that replace finished ones.
            rate = pick.batch * d.acceptance / w.output_tokens_per_turn
            each = admission_time(pick.run.hw, w.input_tokens_per_turn)   # a Poisson count of them across ranks
            rerun = dataclasses.replace(rerun, extra_cpu_s=admission_time(pick.run.hw, rate * w.input_tokens_per_turn),
                                        extra_cpu_var_s2=rate * each * each)
            assert step_record(pick.step_result()) == step_record(rerun)
            assert pick.kernel_terms() == [{"kernel": b["kernel"], "part": b["part"], "time_ms": b["time_ms"],
                                            "bound": b["bound"], "us_per_token": b["time_ms"] * 1e3 / (
                                                pick.batch * d.acceptance * d.layout.dp / d.layout.ranks)}
                                           for b in step_record(rerun)["breakdown"]]


def test_graphs_are_reused_for_equal_inputs_only():
    lay = parse_layout("dep32")
    point = make_point(V41, GB300, lay, phase="decode", batch=1)
    a = dataclasses.replace(point, batch=np.array([1.0, 2.0, 4.0]))
    same = dataclasses.replace(point, batch=np.array([1.0, 2.0, 4.0]))          # equal values, another array
    other = dataclasses.replace(point, batch=np.array([1.0, 2.0, 5.0]))
    g = op_graph(V41, lay, a, GB300.gpus_per_tray)
    assert op_graph(V41, lay, same, GB300.gpus_per_tray) is g
    assert op_graph(V41, lay, other, GB300.gpus_per_tray) is not g
    assert op_graph(V41, parse_layout("dep16"), a, GB300.gpus_per_tray) is not g
    assert op_graph(V41, lay, dataclasses.replace(a, balancedness=0.5), GB300.gpus_per_tray) is not g
    big = dataclasses.replace(point, batch=np.arange(1.0, step_module.GRAPH_CACHE_MAX_POINTS + 2))
    assert op_graph(V41, lay, big, GB300.gpus_per_tray) is not op_graph(V41, lay, big, GB300.gpus_per_tray)


def test_a_reused_graph_times_like_a_fresh_one_on_another_stack():
    """compare's silicon/software split runs the first rack on the other rack's stack: the graph built
    for the first rack is reused, and the timing is the one a freshly built graph gives."""
    mixed = platform(GB300.hardware_spec(), VR.stack_spec())
    lay = parse_layout("dep32")
    point = dataclasses.replace(make_point(V41, mixed, lay, phase="decode", batch=1), batch=batch_grid(512))
    step(V41, GB300, lay, dataclasses.replace(make_point(V41, GB300, lay, phase="decode", batch=1),
                                              batch=batch_grid(512)))
    cached = step(V41, mixed, lay, point)
    step_module._GRAPHS.clear()
    fresh = step(V41, mixed, lay, point)
    assert np.array_equal(cached.expected_s, fresh.expected_s) and np.array_equal(cached.sol_s, fresh.sol_s)
    assert np.array_equal(cached.bound, fresh.bound)


def _ssum_by_hand(values):
    """ssum as its docstring says: the values of each shape added in order, then those sums from the smallest."""
    groups: dict = {}
    for v in values:
        s = np.shape(v)
        groups[s] = groups[s] + v if s in groups else v
    out = None
    for g in sorted(groups.values(), key=np.size):
        out = g if out is None else out + g
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_ssum_adds_in_place_only_into_its_own_sums(data):
    """ssum adds into the partial sums it made itself: the same bits as new arrays, the inputs untouched."""
    shapes = [(3, 1), (1, 4), (3, 4), ()]
    picks = data.draw(st.lists(st.sampled_from(shapes), min_size=1, max_size=8))
    pool = [1e16, 1.0, -1e16, 3.3, 1e-3, -0.0]
    values = [data.draw(st.sampled_from(pool)) if s == () else
              np.array(data.draw(st.lists(st.sampled_from(pool), min_size=int(np.prod(s)), max_size=int(np.prod(s)))))
              .reshape(s) for s in picks]
    if not any(np.ndim(v) for v in values):
        values.append(np.ones((3, 1)))
    before = [np.copy(v) for v in values]
    got, want = ssum(values), _ssum_by_hand(before)
    assert np.shape(got) == np.shape(want) and np.asarray(got).tobytes() == np.asarray(want).tobytes()
    assert all(np.asarray(v).tobytes() == np.asarray(b).tobytes() for v, b in zip(values, before))


def test_absent_cost_fields_add_no_pass_over_an_array():
    """An absent field (0.0) beside an array: the sum is the array itself (the same values, no copy); numbers
    and arrays of both sides add as before (KernelTime alike)."""
    kv = np.array([[1.0, 2.0], [3.0, 4.0]])
    c = Cost(kv_bytes=kv, launches=1) + Cost(activation_bytes=np.array([[5.0], [6.0]]), launches=2)
    assert c.kv_bytes is kv and c.launches == 3 and c.fp4_flops == 0.0
    assert np.array_equal(c.activation_bytes, [[5.0], [6.0]])
    both = c + Cost(kv_bytes=kv)
    assert np.array_equal(both.kv_bytes, 2 * kv) and both.kv_bytes is not kv
    t = KernelTime(*([kv] * 10)) + KernelTime(*([0.0] * 10))
    assert t.expected_s is kv and t.scale_out_s == 0.0
    # the additions pair fields by their order in __dict__: the fields' order, however the object was made
    for obj in (Cost(launches=1, fp4_flops=2.0), dataclasses.replace(Cost(), steps=1.0), t,
                KernelTime(**{f.name: 1.0 for f in reversed(dataclasses.fields(KernelTime))})):
        assert list(obj.__dict__) == [f.name for f in dataclasses.fields(obj)]
    mixed = Cost(launches=1, fp4_flops=2.0) + Cost(steps=1.0, fp4_flops=0.5)
    assert (mixed.launches, mixed.fp4_flops, mixed.steps) == (1.0, 2.5, 1.0)


def test_scaling_by_one_keeps_an_array():
    x = np.array([[-0.0, 1.5], [3.0, np.inf]])
    assert sscale(x, 1, 1.0) is x and sdiv(x, 1.0, 1) is x
    assert np.array_equal(sdiv(x, 2.0), x / 2.0) and np.array_equal(sscale(x, 3.0), x * 3.0)
    assert sdiv(3.0, 1) == 3.0 and type(sdiv(3, 1)) is float   # numbers divide as written


_EDGES = [0.0, -0.0, 1.0, -1.0, 2.5, 199_999.0, 200_000.0, 1e300, np.inf, -np.inf, np.nan, 5e-324]


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_one_sided_max_and_min_are_numpys(data):
    """A two-operand max or min of a large array and a number, where one side wins everywhere, is the array itself or
    the number: np.maximum's (np.minimum's) values at every element; otherwise np.maximum's array, bit for bit."""
    lo = data.draw(st.sampled_from(_EDGES[:9]))
    base = data.draw(st.sampled_from([-3.0, -1e-9, 0.0, 1e-9, 7.0]))
    x = np.full((64, 80), base)
    x[data.draw(st.integers(0, 63)), data.draw(st.integers(0, 79))] = data.draw(st.sampled_from(_EDGES))
    for fn, ufunc in ((smax, np.maximum), (smin, np.minimum)):
        for got, want in ((fn(x, lo), ufunc(x, lo)), (fn(lo, x), ufunc(lo, x))):
            assert np.broadcast_to(got, x.shape).tobytes() == want.tobytes()
            assert got is x or type(got) is float or (isinstance(got, np.ndarray) and got.shape == x.shape)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_sstep_of_one_regime_is_its_value(data):
    """sstep over an array told from its least and largest element: the plain value of a regime every element falls
    in, else np.select's array; the same values as np.select element by element."""
    bounds = tuple(sorted(data.draw(st.lists(st.sampled_from([0.0, 1.0, 128.0, 199_999.0, 1e6]), min_size=1,
                                             max_size=3, unique=True))))
    values = tuple(data.draw(st.lists(st.sampled_from([0, 1, 2.5, 7.0]), min_size=len(bounds) + 1,
                                      max_size=len(bounds) + 1)))
    x = np.array(data.draw(st.lists(st.sampled_from(_EDGES), min_size=1, max_size=12))).reshape(1, -1)
    got = sstep(x, bounds, values)
    want = np.select([x <= b for b in bounds], values[:-1], values[-1])
    assert np.array_equal(np.broadcast_to(got, x.shape), want)
    if not np.isnan(x).any() and len({next((n for n, b in enumerate(bounds) if v <= b), len(bounds)) for v in x.ravel()}) == 1:
        assert np.ndim(got) == 0


def test_sper_takes_the_same_steps_for_numbers_and_arrays():
    """x / d as x * (1 / d): an element of an array's quotient is the number's, bit for bit, whichever side is the
    array (a divisor column takes its reciprocals once); within two ulps of x / d."""
    x = np.array([[3.0, 7.0, 1e300], [0.1, 5e-324, np.inf]])
    col = np.array([[3.0], [0.7]])
    for d in (3.0, 0.7, 1e-300, col):
        with np.errstate(over="ignore"):
            got, plain = sper(x, d), x / d
        for i in range(2):
            for j in range(3):
                one = sper(float(x[i, j]), float(np.broadcast_to(d, x.shape)[i, j]))
                assert np.float64(one).tobytes() == got[i, j].tobytes()
        assert np.allclose(got, plain, rtol=4.5e-16, atol=0)   # (two ulps)
    assert sper(6.0, 3) == 2.0 and type(sper(6, 3.0)) is float
