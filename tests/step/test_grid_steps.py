"""The grid evaluator (GridSteps.metrics, what sweep_grid reads) and the reuse of equal ops' times give
the numbers of the plain path: each block's metrics are its StepResult's (GridSteps.chunk) and step()'s at that
block's point, for any grid and any cut into blocks, within 1e-12 relative (metrics times the kernels whose costs
are a batch column times a context row on those factors, mathops.Outer: x * c * r taken as c * (r * x) rounds
otherwise in the last bits; chunk() and step() are bit for bit each other's); an op whose kernels equal an earlier
op's takes that op's time only when op_time would give the same."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.step.graph import Op
from rubinperf.step.point import Point
from rubinperf.specs.layout import parse_layout
from rubinperf.step.point import make_point
from rubinperf.serving import sweep_grid
from rubinperf.specs.model import load_model
from rubinperf.specs.stack import load_platform
from rubinperf.step.grid import GridSteps
from rubinperf.step.timing import first_equal_ops, _same_value, op_graph, op_time, step, time_ops

V41 = load_model("deepseek-v4.1-flash")
RACKS = {"gb300": load_platform("gb300-nvl72"), "vr": load_platform("vr-nvl72"), "h200": load_platform("h200"),
         # Gloo's linear DP sync: host-bound and exposed-host-bound steps at DEP16/DEP32
         "gb300-unoptimised": load_platform("gb300-nvl72", "vllm-gb300-oct2026-unoptimised")}
SHAPES = [("dep32", "decode"), ("tp8", "decode"), ("dep16", "decode"), ("dep2", "prefill"), ("tp4", "decode")]


def _bits(x, shape) -> bytes:
    return np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=float), shape)).tobytes()


GRID_RTOL = 1e-12   # GridSteps.metrics against the plain path (its factored kernels round otherwise in the last bits)


def _close(got, want, shape) -> bool:
    """Within GRID_RTOL of each other at every element (infinities equal, nan where nan), both over `shape`."""
    a = np.broadcast_to(np.asarray(got, dtype=float), shape)
    b = np.broadcast_to(np.asarray(want, dtype=float), shape)
    return bool(np.all((a == b) | (np.abs(a - b) <= GRID_RTOL * np.abs(b)) | (np.isnan(a) & np.isnan(b))))


def _grid(rack, shape, batches, contexts):
    """(rack, layout, base point, batch column, context row, GridSteps) of a drawn grid: a layout wider than the
    rack's NVLink domain becomes DEP8 / TP4."""
    hw, (layout, phase) = RACKS[rack], shape
    lay = parse_layout(layout)
    if hw.nvlink_domain_size < lay.ranks:
        lay = parse_layout("dep8" if lay.kind == "dep" else "tp4")
    base = Point(phase, new_tokens=4096.0) if phase == "prefill" else Point(phase)
    b, c = np.array(batches).reshape(-1, 1), np.array(contexts).reshape(1, -1)
    grid = GridSteps(V41, hw, lay, dataclasses.replace(base, batch=b, context=c))
    return hw, lay, base, b, c, grid


@settings(max_examples=25, deadline=None)
@given(rack=st.sampled_from(sorted(RACKS)), shape=st.sampled_from(SHAPES),
       batches=st.lists(st.floats(1, 4096), min_size=1, max_size=5),
       contexts=st.lists(st.floats(0, 2e6), min_size=1, max_size=5),
       rows=st.integers(1, 6))
def test_block_metrics_are_the_block_step(rack, shape, batches, contexts, rows):
    hw, lay, base, b, c, grid = _grid(rack, shape, batches, contexts)
    seen = 0
    for sl in grid.blocks(rows):
        got = grid.metrics(sl)
        r = grid.chunk(sl)
        alone = step(V41, hw, lay, dataclasses.replace(base, batch=b[sl], context=c))
        shape2 = (sl.stop - sl.start, c.shape[1])
        for res in (r, alone):
            want = (res.expected_s, res.sol_s, res.tokens_per_s_per_gpu, res.tokens_per_s_per_user)
            assert all(_close(x, y, shape2) for x, y in zip(got, want))
        assert [_bits(x, shape2) for x in (r.expected_s, r.sol_s)] == [_bits(x, shape2) for x in (alone.expected_s,
                                                                                                  alone.sol_s)]
        seen += shape2[0]
    assert seen == b.shape[0]


@settings(max_examples=20, deadline=None)
@given(rack=st.sampled_from(sorted(RACKS)), shape=st.sampled_from(SHAPES),
       batches=st.lists(st.floats(1, 4096), min_size=1, max_size=4),
       contexts=st.lists(st.sampled_from([0.0, 1.0, 100.0, 1023.0, 4096.0, 131072.0, 1e6]), min_size=1, max_size=6),
       rows=st.integers(1, 4), cols=st.integers(1, 4))
def test_tile_metrics_are_the_tile_step(rack, shape, batches, contexts, rows, cols):
    """A block of rows x contexts (GridSteps.tiles: sparse attention past its top-k and window reads no context
    on a tile of such contexts) is step() of its point, bit for bit, and chunk() of it too."""
    hw, lay, base, b, c, grid = _grid(rack, shape, batches, contexts)
    seen = 0
    for r, cl in grid.tiles(rows, cols):
        got = grid.metrics((r, cl))
        alone = step(V41, hw, lay, dataclasses.replace(base, batch=b[r], context=c[:, cl]))
        chunk = grid.chunk((r, cl))
        tile = (r.stop - r.start, cl.stop - cl.start)
        for res in (alone, chunk):
            want = (res.expected_s, res.sol_s, res.tokens_per_s_per_gpu, res.tokens_per_s_per_user)
            assert all(_close(x, y, tile) for x, y in zip(got, want))
        assert [_bits(x, tile) for x in (chunk.expected_s, chunk.sol_s)] == [_bits(x, tile) for x in (alone.expected_s,
                                                                                                      alone.sol_s)]
        seen += tile[0] * tile[1]
    assert seen == b.size * c.size


@settings(max_examples=20, deadline=None)
@given(rack=st.sampled_from(sorted(RACKS)), shape=st.sampled_from(SHAPES),
       batches=st.lists(st.floats(1, 4096), min_size=1, max_size=4),
       contexts=st.lists(st.sampled_from([0.0, 1.0, 100.0, 1023.0, 4096.0, 131072.0, 3e5, 1e6]), min_size=2,
                         max_size=7),
       rows=st.integers(1, 4), cols=st.integers(1, 3))
def test_span_metrics_are_the_tile_step(rack, shape, batches, contexts, rows, cols):
    """A block timed within a span (the rest of its rows' blocks: its factored ops timed once over the span and cut to
    the block's columns) is step() of its point within GRID_RTOL."""
    hw, lay, base, b, c, grid = _grid(rack, shape, batches, contexts)
    for r, cl in grid.tiles(rows, cols):
        span = (r, slice(min(cols, c.shape[1]), c.shape[1])) if cl.start else None
        got = grid.metrics((r, cl), span)
        alone = step(V41, hw, lay, dataclasses.replace(base, batch=b[r], context=c[:, cl]))
        tile = (r.stop - r.start, cl.stop - cl.start)
        want = (alone.expected_s, alone.sol_s, alone.tokens_per_s_per_gpu, alone.tokens_per_s_per_user)
        assert all(_close(x, y, tile) for x, y in zip(got, want))


def test_factored_ops_are_timed_once_over_a_span(monkeypatch):
    """estimate's decode point over a grid whose rest of a row is one span: the indexer's kernels are timed over the
    span on their factors (nothing the span's size made: mathops.only_factored) and each block takes its columns, the
    blocks' metrics those of the same blocks timed alone within GRID_RTOL; an op whose terms would make the full span
    (the top-k where its rows start to split over CTAs) is timed in pieces on either side of the context where the split
    starts, or per block. (No full array allowed over a span, as over a span of more points than this grid's.)"""
    import rubinperf.step.grid as grid_module

    monkeypatch.setattr(grid_module, "SPAN_FULL_POINTS", 0)
    hw = RACKS["gb300"]
    lay = parse_layout("dep16")
    b, c = np.arange(1.0, 257.0).reshape(-1, 1), np.round(np.linspace(1, 1 << 20, 60)).reshape(1, -1)
    point = dataclasses.replace(make_point(V41, hw, lay, phase="decode"), batch=b, context=c)
    grid, alone = GridSteps(V41, hw, lay, point), GridSteps(V41, hw, lay, point)
    span = (slice(0, 256), slice(8, 60))
    for cl in (slice(8, 20), slice(20, 40), slice(40, 60)):
        got, want = grid.metrics((span[0], cl), span), alone.metrics((span[0], cl))
        assert all(_close(x, y, (256, cl.stop - cl.start)) for x, y in zip(got, want))
    pieces = {grid.ops[n].name: [(a, b, t is not None) for a, b, t in hit[1]] for n, hit in grid._span_times.items()}
    assert pieces["MQA logits (indexer)"] == [(8, 60, True)]
    # the top-k's rows split over CTAs from a context on: two pieces, the split one on its factors; the cut is a column
    # the sweep's blocks take as a bound (serving.sweeps._snapped)
    split = pieces["DeepSelect (indexer top-k)"]
    assert len(split) == 2 and split[1][2] and split[1][0] in grid.span_cuts(span)


@pytest.mark.parametrize("first", [3.0, 4097.0, 12289.0])
def test_a_grid_of_batches_from_past_1_is_timed_on_its_factors(monkeypatch, first):
    """A grid whose batch column starts past 1 (3, 4, 5, ...; sweep_grid_blocks' graph parts past the first, 4097,
    4098, ...), whose first element divides none of the others, has its indexer's kernels and sparse attention timed
    over a span on their factors as a grid from batch 1 has: the logits and the attention in one piece, the top-k in
    two on either side of its split, the split one on its factors; the blocks' metrics those of the blocks timed alone
    within GRID_RTOL. (The top-k's bytes, tokens x candidates + tokens x k, add a column to an Outer on an equal
    column: mathops._canon makes them one object; before, the full span was made, and every block of such a grid was
    timed in full.)"""
    import rubinperf.step.grid as grid_module

    monkeypatch.setattr(grid_module, "SPAN_FULL_POINTS", 0)
    hw = RACKS["gb300"]
    b, c = np.arange(first, first + 256.0).reshape(-1, 1), np.round(np.linspace(1, 1 << 20, 60)).reshape(1, -1)
    grid, alone = _decode_grid(hw, "dep16", b, c), _decode_grid(hw, "dep16", b, c)
    span = (slice(0, 256), slice(8, 60))
    for cl in (slice(8, 23), slice(23, 40), slice(40, 60)):
        got, want = grid.metrics((span[0], cl), span), alone.metrics((span[0], cl))
        assert all(_close(x, y, (256, cl.stop - cl.start)) for x, y in zip(got, want))
    pieces = {n: [(a, b, t is not None) for a, b, t in hit[1]] for n, hit in grid._span_times.items()}
    assert {grid.ops[n].name for n in pieces} == {"MQA logits (indexer)", "DeepSelect (indexer top-k)",
                                                  "MegaAttn (sparse attention)", "draft: MegaAttn (sparse attention)"}
    for n, timed in pieces.items():
        if "top-k" in grid.ops[n].name:   # (each layer kind's top-k: split over CTAs from its own context on)
            assert len(timed) == 2 and timed[1][2] and timed[1][0] in grid.span_cuts(span)
        else:
            assert timed == [(8, 60, True)]


def _decode_grid(hw, name, b, c) -> GridSteps:
    """The rack's decode point of layout `name` over batches `b` (a column) x contexts `c` (a row)."""
    lay = parse_layout(name)
    return GridSteps(V41, hw, lay, dataclasses.replace(make_point(V41, hw, lay, phase="decode"), batch=b, context=c))


def test_a_grid_takes_the_span_pieces_of_an_earlier_grid_on_the_rack():
    """DEP32's indexer, top-k and sparse attention are DEP16's at the same batch per rank (the same constructors, the
    same arguments bit for bit): its spans take DEP16's pieces (GridSteps._shared_pieces), and its blocks' metrics are
    those of a DEP32 grid that timed its own, bit for bit."""
    from rubinperf.step.grid import forget_graphs

    hw = RACKS["gb300"]
    b, c = np.arange(1.0, 257.0).reshape(-1, 1), np.round(np.linspace(1, 1 << 20, 200)).reshape(1, -1)
    span, block = (slice(0, 256), slice(0, 200)), (slice(0, 256), slice(64, 130))

    def grid(name):
        return _decode_grid(hw, name, b, c)

    forget_graphs()
    dep16 = grid("dep16")
    dep16.span_cuts(span)
    dep32 = grid("dep32")
    dep32.span_cuts(span)
    theirs = {id(t) for _, pieces in dep16._span_times.values() for _, _, t in pieces if t is not None}
    assert any(id(t) in theirs for _, pieces in dep32._span_times.values() for _, _, t in pieces if t is not None)
    got = dep32.metrics(block, span)
    forget_graphs()
    alone = grid("dep32")
    alone.span_cuts(span)
    want = alone.metrics(block, span)
    assert [_bits(x, (256, 66)) for x in got] == [_bits(x, (256, 66)) for x in want]
    forget_graphs()


def test_a_grid_takes_the_block_times_of_an_earlier_grid_on_the_rack(monkeypatch):
    """An op timed per block (its span refused: here no full array allowed over a span) whose kernels are made from the
    same arguments as an earlier grid's on the same rack takes that grid's times for the block (DEP32's top-k is
    DEP16's), and the block's metrics are those of a DEP32 grid that timed its own, bit for bit."""
    import rubinperf.step.grid as grid_module

    monkeypatch.setattr(grid_module, "SPAN_FULL_POINTS", 0)
    hw = RACKS["gb300"]
    b, c = np.arange(1.0, 257.0).reshape(-1, 1), np.round(np.linspace(1, 1 << 20, 200)).reshape(1, -1)
    span, block = (slice(0, 256), slice(0, 200)), (slice(0, 256), slice(0, 64))

    def grid(name):
        return _decode_grid(hw, name, b, c)

    grid_module.forget_graphs()
    grid("dep16").metrics(block, span)
    kept = {id(t) for bucket in grid_module._BLOCK_TIMES.values() for _, t in bucket}
    assert kept
    dep32 = grid("dep32")
    calls = []
    real = grid_module.op_time
    monkeypatch.setattr(grid_module, "op_time", lambda *a, **k: calls.append(a[0].name) or real(*a, **k))
    got = dep32.metrics(block, span)
    assert not any("top-k" in name for name in calls)
    monkeypatch.setattr(grid_module, "op_time", real)
    grid_module.forget_graphs()
    alone = grid("dep32")
    want = alone.metrics(block, span)
    assert [_bits(x, (256, 64)) for x in got] == [_bits(x, (256, 64)) for x in want]
    grid_module.forget_graphs()


def _is(a, b) -> bool:
    return a is b


def test_a_rack_s_grids_share_placeholders_and_scaled_times():
    """The layouts of one rack's sweep share what is the same bit for bit: a context kernel's placeholder made from the
    same arguments at the grid's first point (each call still its own object, keyed to its own recipe), and a once-timed
    op's expected_s and sol_s scaled from the same KernelTime by the same repeat and stretch; each is what the grid would
    make alone."""
    from rubinperf.mathops import sscale
    from rubinperf.step.grid import ContextKernels, forget_graphs
    from rubinperf.kernels.attention import indexer_select

    hw = RACKS["gb300"]
    b, c = np.arange(1.0, 65.0).reshape(-1, 1), np.array([[1.0, 5e4, 3e5]])
    forget_graphs()
    made = ContextKernels((64, 3))
    args = (b * 2, 2.0, c, 4, 2048, False)
    x, y = made(indexer_select, *args), made(indexer_select, *args)
    assert x is not y and all(all(map(_is, made.made[id(k)][2], args)) for k in (x, y))
    assert x.__dict__.keys() == y.__dict__.keys() and all(a is b for a, b in zip(x.__dict__.values(),
                                                                             y.__dict__.values()))
    z = made(indexer_select, b * 2, -0.0, c, 4, 2048, False)   # (-0.0: not a key; made on its own)
    assert z.family == x.family and made.made[id(z)][1] is indexer_select
    dep16 = _decode_grid(hw, "dep16", b, c)
    dep32 = _decode_grid(hw, "dep32", b, c)
    earlier = {id(getattr(t, name)) for t in dep16.once.values() for name in ("expected_s", "sol_s")}
    shared = 0
    for t in dep32.once.values():
        for name in ("expected_s", "sol_s"):
            want = sscale(getattr(t.time, name), t.op.repeat, t.op.stretch)
            assert _bits(getattr(t, name), (64, 1)) == _bits(want, (64, 1))
            got = getattr(t, name)   # (a column scaled by DEP16's grid, not the KernelTime's own: shared)
            shared += id(got) in earlier and got is not getattr(t.time, name) and type(got).__module__ == "numpy"
    assert shared   # (DEP32's attention takes DEP16's scaled columns: the same objects)
    forget_graphs()


def test_a_cut_is_a_block_bound():
    """serving.sweeps._snapped: a column where an op's factored times change piece becomes a block bound, the nearest
    bound moved to it where that is at most half its block away, else added; the first block and the row's end stay
    (a cut inside the first block is left)."""
    from rubinperf.serving.sweeps import _snapped

    bounds = [0, 64, 252, 440, 628, 816, 1000]
    assert _snapped(bounds, [300]) == [0, 64, 300, 440, 628, 816, 1000]
    assert _snapped(bounds, [400, 420]) == [0, 64, 252, 400, 420, 628, 816, 1000]
    assert _snapped(bounds, [100]) == [0, 64, 100, 252, 440, 628, 816, 1000]
    assert _snapped(bounds, [990, 440]) == [0, 64, 252, 440, 628, 816, 990, 1000]
    assert _snapped(bounds, [1, 63]) == bounds


@settings(max_examples=15, deadline=None)
@given(rack=st.sampled_from(sorted(RACKS)), shape=st.sampled_from(SHAPES),
       batches=st.lists(st.floats(1, 4096), min_size=1, max_size=6),
       contexts=st.integers(65, 300), longest=st.floats(1e3, 2e6), chunk=st.integers(64, 1500))
def test_a_swept_grid_is_the_grid_step(rack, shape, batches, contexts, longest, chunk):
    """sweep_grid (past its first 64 contexts, a row's blocks on the row's span, their bounds snapped to the columns
    where an op's factored times change piece) is step() over the whole grid within GRID_RTOL, whatever the blocks."""
    hw, lay, base, b, c, _ = _grid(rack, shape, batches, np.round(np.linspace(1, longest, contexts)))
    point = dataclasses.replace(base, batch=b, context=c)
    got = sweep_grid(V41, hw, lay, point, b.ravel(), c.ravel(), chunk_points=chunk)
    whole = step(V41, hw, lay, point)
    grid = (b.size, c.size)
    assert _close(got["step_s"], whole.expected_s, grid) and _close(got["sol_s"], whole.sol_s, grid)
    assert _close(got["tokens_per_s_per_gpu"], whole.tokens_per_s_per_gpu, grid)
    assert _close(got["tokens_per_s_per_user"], whole.tokens_per_s_per_user, grid)


def test_sweep_grid_reads_the_block_metrics():
    hw, lay = RACKS["vr"], parse_layout("dep32")
    b, c = np.array([1.0, 7.0, 64.0, 300.0]), np.array([0.0, 4096.0, 131072.0, 999_999.0])
    got = sweep_grid(V41, hw, lay, Point("decode"), b, c, chunk_points=8)   # two rows a block
    whole = step(V41, hw, lay, dataclasses.replace(Point("decode"), batch=b.reshape(-1, 1), context=c.reshape(1, -1)))
    assert _close(got["step_s"], whole.expected_s, (4, 4))
    assert _close(got["tokens_per_s_per_user"], whole.tokens_per_s_per_user, (4, 4))


@settings(max_examples=30, deadline=None)
@given(rack=st.sampled_from(sorted(RACKS)), shape=st.sampled_from(SHAPES), batch=st.floats(1, 2048),
       context=st.floats(0, 1e6), vector=st.booleans())
def test_reused_op_times_are_each_ops_own(rack, shape, batch, context, vector):
    """time_ops gives every op exactly op_time(op): reused times only where the kernels are equal."""
    hw, (layout, phase) = RACKS[rack], shape
    lay = parse_layout(layout)
    if hw.nvlink_domain_size < lay.ranks:
        lay = parse_layout("dep8" if lay.kind == "dep" else "tp4")
    point = make_point(V41, hw, lay, phase=phase, batch=batch, context=context)
    if vector:
        point = dataclasses.replace(point, batch=np.array([1.0, batch, 2 * batch]))
    ops = op_graph(V41, lay, point, hw.gpus_per_tray)
    for o, t in zip(ops, time_ops(ops, hw)):
        own = op_time(o, hw)
        assert [_bits(v, np.shape(v)) for v in t.time.__dict__.values()] == \
               [_bits(v, np.shape(v)) for v in own.__dict__.values()]


def test_layers_of_another_kind_share_their_equal_kernels():
    """The default model's attention layers differ in kind (KV source, indexer) while many of their kernels
    are the same: those are timed once. Ops that differ in one number are not merged."""
    hw, lay = RACKS["gb300"], parse_layout("dep32")
    ops = op_graph(V41, lay, make_point(V41, hw, lay, phase="decode", batch=16), hw.gpus_per_tray)
    firsts = first_equal_ops(ops)
    assert any(f != n for n, f in enumerate(firsts))
    assert all(ops[f].kernels == ops[n].kernels for n, f in enumerate(firsts))
    k = Kernel("stream", Cost(activation_bytes=1e6))
    other = Kernel("stream", Cost(activation_bytes=1e6 + 1))
    local = [Op("a", (k,)), Op("b", (k,), repeat=3), Op("c", (other,)), Op("d", (k,), die_local_weights=True)]
    assert first_equal_ops(local) == [0, 0, 2, 3]


def test_equal_means_bit_for_bit():
    assert _same_value(1.5, 1.5) and not _same_value(0.0, -0.0) and not _same_value(1, 1.0)
    a = np.arange(6.0).reshape(2, 3)
    assert _same_value(a, a.copy()) and not _same_value(a, a.reshape(3, 2)) and not _same_value(a, a + 1e-12)
    assert not _same_value(a, a.astype(np.float32)) and _same_value(None, None)
    assert not _same_value(np.zeros((2, 2)), -np.zeros((2, 2))) and _same_value(a.T, a.T.copy())   # in place; a copy


def test_large_arrays_equal_bit_for_bit():
    """Arrays past the small-array path are compared in place, still bit for bit."""
    a = np.arange(10_000.0).reshape(100, 100)
    b = a.copy()
    assert _same_value(a, b) and _same_value(a.T, b.T)
    b[37, 41] = -0.0 if a[37, 41] == 0 else np.nextafter(a[37, 41], np.inf)
    assert not _same_value(a, b)
    z = np.zeros(5000)
    assert not _same_value(z, -z) and _same_value(z, np.zeros(5000))


# ---------------------------------------------------------------- what makes a grid fast, held to the plain path


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, -0.0, 1.0, 511.0, 512.0, 513.0, 1e6, np.inf, np.nan]), min_size=1,
                       max_size=6),
       cap=st.sampled_from([0.0, 1.0, 512.0, 128.0]))
def test_a_saturating_count_is_min(values, cap):
    """scap(x, cap) is min(cap, x) at every element; past the cap everywhere it is the number cap itself."""
    from rubinperf.mathops import scap

    x = np.array(values).reshape(1, -1)
    got = scap(x, cap)
    assert _bits(got, x.shape) == _bits(np.minimum(cap, x), x.shape)
    if cap != 0 and np.all(x >= cap):
        assert type(got) is float and got == cap
    else:
        assert isinstance(got, np.ndarray)
    assert [repr(scap(v, cap)) for v in values] == [repr(min(cap, v)) for v in values]   # numbers: min itself


def test_a_saturating_count_stays_symbolic():
    import sympy

    from rubinperf.mathops import scap

    x = sympy.Symbol("x", positive=True)
    assert scap(x, 512) == sympy.Min(512, x)


def test_sparse_attention_past_its_top_k_does_not_read_the_context():
    """Past top-k x ratio positions (and the window), sparse attention's work is the same at every context:
    on a grid of such contexts its kernels carry the batch axis alone (timed once per row), equal at each
    point to the step there; below them (context 0) they read the grid."""
    hw, lay = RACKS["gb300"], parse_layout("dep16")
    b = np.array([1.0, 8.0, 64.0]).reshape(-1, 1)
    past = np.array([1024.0, 65536.0, 1e6]).reshape(1, -1)
    assert V41.indexer_topk * max(V41.compress_ratios) <= past.min()
    ops = op_graph(V41, lay, dataclasses.replace(Point("decode"), batch=b, context=past), hw.gpus_per_tray)
    attention = [o for o in ops if "sparse attention" in o.name]
    assert attention and all(np.shape(v) in ((), (3, 1)) for o in attention for k in o.kernels
                             for v in k.cost.__dict__.values())
    grid = step(V41, hw, lay, dataclasses.replace(Point("decode"), batch=b, context=past))
    for i, batch in enumerate(b.ravel()):
        for j, context in enumerate(past.ravel()):
            alone = step(V41, hw, lay, dataclasses.replace(Point("decode"), batch=batch, context=context))
            assert np.broadcast_to(grid.expected_s, (3, 3))[i, j] == pytest.approx(alone.expected_s, rel=1e-12)
    below = op_graph(V41, lay, dataclasses.replace(Point("decode"), batch=b, context=np.array([[0.0, 1e6]])),
                     hw.gpus_per_tray)
    assert any(np.shape(v) == (3, 2) for o in below if "sparse attention" in o.name for k in o.kernels
               for v in k.cost.__dict__.values())


def test_a_grid_graph_is_kept_for_another_rack_of_its_tray(monkeypatch):
    """Racks of one tray size share a grid's graph (it depends on the model, layout, point and tray only);
    another tray size builds its own, forget_graphs drops them, and a graph over GRID_CACHE_BYTES is not kept."""
    import rubinperf.step.grid as S

    S.forget_graphs()
    lay = parse_layout("tp8")
    point = dataclasses.replace(Point("decode"), batch=np.array([[1.0], [4.0]]), context=np.array([[1024.0, 2e5]]))
    first = GridSteps(V41, RACKS["gb300"], lay, point)
    again = GridSteps(V41, RACKS["vr"], lay, point)
    assert RACKS["gb300"].gpus_per_tray == RACKS["vr"].gpus_per_tray and again.ops is first.ops
    assert GridSteps(V41, RACKS["h200"], lay, point).ops is not first.ops   # 8 GPUs a tray, not 4
    assert GridSteps(V41, RACKS["vr"], lay, point).metrics(slice(0, 2))[0].tolist() == \
        again.metrics(slice(0, 2))[0].tolist()
    S.forget_graphs()
    assert GridSteps(V41, RACKS["vr"], lay, point).ops is not first.ops
    monkeypatch.setattr(S, "GRID_CACHE_BYTES", 8)
    S.forget_graphs()
    assert GridSteps(V41, RACKS["vr"], lay, point).ops is not GridSteps(V41, RACKS["vr"], lay, point).ops
    S.forget_graphs()


_H, _M = 5, 3
_ONCE_SHAPES = [(), (_H, 1), (1, _M)]


@settings(max_examples=80, deadline=None)
@given(once=st.lists(st.tuples(st.sampled_from(_ONCE_SHAPES), st.booleans()), max_size=6),
       block=st.lists(st.sampled_from([(2, _M)] * 3 + [(2, 1), (), (1, _M)]), max_size=6),
       order=st.randoms(use_true_random=False), start=st.integers(0, _H - 2))
def test_a_block_sum_is_ssum_of_its_terms_in_op_order(once, block, order, start):
    """block_sum (the once terms' partial sums cut to the block stand in for them) gives ssum of every
    term in op order, bit for bit, whatever the shapes: it adds them all where shapes would mix."""
    from rubinperf.mathops import ssum
    from rubinperf.step.grid import _cut, _shape_groups, block_sum

    rng = np.random.default_rng(len(once) * 7 + len(block))
    sl, grid = (slice(start, start + 2), slice(None)), (_H, _M)
    indices = list(range(len(once) + len(block)))
    order.shuffle(indices)

    def value(shape, plain=False):   # magnitudes far apart: the order of additions shows in the bits
        if shape == () and plain:
            return float(rng.uniform(0.1, 10.0) * 10.0 ** rng.integers(-6, 7))
        return rng.uniform(0.1, 10.0, size=shape) * 10.0 ** rng.integers(-6, 7, size=shape)

    once_terms = sorted((n, value(shape, plain)) for n, (shape, plain) in zip(indices, once))
    block_terms = sorted((n, value(shape)) for n, shape in zip(indices[len(once):], block))
    got = block_sum(_shape_groups(once_terms), once_terms, block_terms, sl, grid)
    want = ssum(v for _, v in sorted([(n, _cut(v, sl, grid)) for n, v in once_terms] + block_terms,
                                     key=lambda t: t[0]))
    assert _bits(got, (2, _M)) == _bits(want, (2, _M))


def test_a_decode_grid_graph_holds_no_array_over_the_grid():
    """The kernels that read the context are placeholders (nan costs, made on the grid's first point) kept with
    their arguments; no array of the graph, nor of those arguments, spans both the batch and the context axis."""
    from rubinperf.step.grid import _op_values, build_grid_graph

    lay = parse_layout("dep32")
    b, c = np.arange(1.0, 41.0).reshape(-1, 1), np.linspace(0.0, 1e6, 30).reshape(1, -1)
    g = build_grid_graph(V41, lay, dataclasses.replace(make_point(V41, RACKS["gb300"], lay), batch=b, context=c),
                         RACKS["gb300"].gpus_per_tray)
    values = [v for o in g.ops for v in _op_values(o)] + [a for _, _, args in g.made.values() for a in args]
    assert g.made and not any(np.ndim(v) == 2 and np.shape(v)[0] > 1 and np.shape(v)[1] > 1 for v in values)
    assert all(np.isnan(k.cost.kv_bytes) for k, _, _ in g.made.values())


def test_a_grid_takes_the_once_timed_ops_of_an_earlier_grid_on_the_rack(monkeypatch):
    """DEP32's attention and dense GEMMs are DEP16's at the same batch per rank: a DEP32 grid after a DEP16 one on the
    same rack times only the ops DEP16 did not have, and its blocks are still step() of their points (chunk() bit for
    bit, metrics within GRID_RTOL)."""
    import rubinperf.step.grid as grid_module
    import rubinperf.step.timing as timing_module

    hw, b, c = RACKS["gb300"], np.array([[1.0], [9.0], [300.0]]), np.array([[1.0, 5000.0, 400_000.0]])
    calls = []
    real = grid_module.op_time
    for module in (grid_module, timing_module):   # (the once-timed ops are timed by timing.timed_ops)
        monkeypatch.setattr(module, "op_time", lambda o, h, *a: calls.append(o.name) or real(o, h, *a))
    grid_module.forget_graphs()
    points = {name: dataclasses.replace(make_point(V41, hw, parse_layout(name), phase="decode"), batch=b, context=c)
              for name in ("dep16", "dep32")}
    GridSteps(V41, hw, parse_layout("dep16"), points["dep16"])
    alone = len(calls)
    grid_module.forget_graphs()
    GridSteps(V41, hw, parse_layout("dep32"), points["dep32"])
    fresh = len(calls) - alone
    grid_module.forget_graphs()
    GridSteps(V41, hw, parse_layout("dep16"), points["dep16"])
    before = len(calls)
    again = GridSteps(V41, hw, parse_layout("dep32"), points["dep32"])
    assert 0 < len(calls) - before < fresh
    want = step(V41, hw, parse_layout("dep32"), points["dep32"])
    got = again.metrics(slice(0, 3))
    assert all(_close(x, y, (3, 3)) for x, y in zip(got, (want.expected_s, want.sol_s, want.tokens_per_s_per_gpu,
                                                         want.tokens_per_s_per_user)))
    assert _bits(again.chunk(slice(0, 3)).expected_s, (3, 3)) == _bits(want.expected_s, (3, 3))


def test_a_sweep_of_many_parts_keeps_the_once_timed_ops_of_a_few(monkeypatch):
    """A sweep past GRID_ROWS batches builds a graph a part; the once-timed ops' times are kept for the grids whose
    graphs hold at most ONCE_TIMES_BYTES (and at most ONCE_TIMES_KEPT ops), so what a sweep keeps stops growing with its
    parts (it grew by every part's ops: 40 MB a 4,096-batch part of three layouts, 308 MB of RSS at 32,768 batches),
    and its numbers are step()'s."""
    import rubinperf.serving.sweeps as sweeps
    import rubinperf.step.grid as grid_module

    monkeypatch.setattr(sweeps, "GRID_ROWS", 8)
    hw, lay = RACKS["vr"], parse_layout("dep16")
    point, c = make_point(V41, hw, lay, phase="decode"), np.array([1.0, 5000.0, 400_000.0])

    def kept(parts):
        grid_module.forget_graphs()
        batches = np.arange(1.0, 8 * parts + 1)
        got = sweep_grid(V41, hw, lay, point, batches, c)
        return sum(map(len, grid_module._ONCE_TIMES.values())), batches, got

    one = kept(1)[0]
    (_, graph), = grid_module._GRID_GRAPHS.values()   # (the part's graph: its arrays, GridGraph.nbytes)
    monkeypatch.setattr(grid_module, "ONCE_TIMES_BYTES", 3 * graph.nbytes, raising=False)
    few = max(kept(parts)[0] for parts in (1, 2, 3))
    assert few > one   # (the bound holds more than one part's)
    many, batches, got = kept(12)
    assert many <= few
    # many small grids, whose arrays weigh little: at most ONCE_TIMES_KEPT ops kept (and a grid's own beyond it)
    monkeypatch.setattr(grid_module, "ONCE_TIMES_BYTES", 2**40, raising=False)
    monkeypatch.setattr(grid_module, "ONCE_TIMES_KEPT", one)
    assert kept(12)[0] <= 2 * one + 1 < many
    want = step(V41, hw, lay, dataclasses.replace(point, batch=batches.reshape(-1, 1), context=c.reshape(1, -1)))
    assert _close(got["step_s"], want.expected_s, (96, 3))
    assert _close(got["tokens_per_s_per_gpu"], want.tokens_per_s_per_gpu, (96, 3))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), rows=st.integers(2, 9), cols=st.integers(2, 7))
def test_factored_values_are_the_full_blocks(data, rows, cols):
    """mathops.Outer (a column times a row, kept apart) and Bands (runs of rows) give, through the operators and
    mathops' max, min, sums, sstep and ceil, the full block's numbers within GRID_RTOL: a rule that took a max on the
    wrong factor, cut the wrong rows or dropped an added part would fail here."""
    from rubinperf.mathops import outer, sceil, smax, smin, ssum, sstep

    pos = st.floats(0.5, 4.0)
    col = lambda: np.array(data.draw(st.lists(pos, min_size=rows, max_size=rows))).reshape(-1, 1)   # noqa: E731
    row = lambda: np.array(data.draw(st.lists(pos, min_size=cols, max_size=cols))).reshape(1, -1)   # noqa: E731
    c1, c2, r1, r2 = col(), col(), row(), row()
    x, y, X, Y = outer(c1, r1), outer(c2, r2), c1 * r1, c2 * r2
    k = data.draw(pos)
    cases = [(x + y, X + Y), (x - y, X - Y), (x * k, X * k), (x / c2, X / c2), (x * r2, X * r2), (x + r2, X + r2),
             (x + c1 * k, X + c1 * k), (smax(x, y), np.maximum(X, Y)), (smin(x, y), np.minimum(X, Y)),
             (smax(x - y, 0.0), np.maximum(X - Y, 0.0)), (smin(x, k), np.minimum(X, k)),
             (ssum([x, y, c1, r1, k]), X + Y + c1 + r1 + k),
             (sstep(x, (k,), (0.0, 1.0)), np.where(X <= k, 0.0, 1.0))]
    # one side wins on the first rows, the other on the rest (Bands), and a term that is 0 on the last rows
    ramp = np.arange(1.0, rows + 1).reshape(-1, 1)
    b = smax(outer(ramp, r1), outer(np.full((rows, 1), rows / 2 + 0.25), r1 * 1.001))
    B = np.maximum(ramp * r1, (rows / 2 + 0.25) * r1 * 1.001)
    zero = np.where(np.arange(rows) < rows // 2, ramp.ravel(), 0.0).reshape(-1, 1)
    cases += [(b, B), (b + x, B + X), (smax(b, 0.0) * k + 1.0, B * k + 1.0), (ssum([b, x, c1]), B + X + c1),
              (x + outer(zero, r2), X + zero * r2)]
    # within GRID_RTOL of the operands' scale (products up to 16, ramps up to 9 x 4): a difference of two near
    # equal blocks (x - y) may round to a few ulps of 16 on one side and to 0 on the other
    scale = 64.0
    for got, want in cases:
        a = np.broadcast_to(np.asarray(got, dtype=float), np.broadcast_shapes(np.shape(want), (rows, cols)))
        assert np.all(np.abs(a - want) <= GRID_RTOL * np.maximum(np.abs(want), scale))
    # a ceiling of the factors is the block's, whole numbers (1.5 x 2.0) included (mathops._canon keeps a factor as it
    # is where dividing by its first element may round)
    assert np.array_equal(np.asarray(sceil(x), dtype=float), np.ceil(X))


def test_a_block_of_whole_numbers_from_its_factors_stays_whole():
    """A column of whole numbers that its first element does not divide (3, 4, 5, ...: 4 / 3 rounds) is taken over
    their greatest common divisor, not over its first element (mathops._canon: 1 for 3, 4, 5, the column as it is; 6
    for 18, 24, 30), so col x row x k made from the factors is the plain product and its ceiling the plain path's:
    normalised by 3, 7 x 9 came out 63.00000000000001 and its ceiling 64."""
    from rubinperf.mathops import outer, sceil

    row = np.arange(1.0, 50.0).reshape(1, -1)
    for first in (2.0, 3.0, 7.0, 1.5, 18.0):
        for step_ in (1.0, 6.0):   # (a column over 6, its greatest common divisor from 18: mathops._whole_divisor)
            col = np.arange(first, first + 40.0 * step_, step_).reshape(-1, 1)
            for k in (1.0, 3.0, 0.5):
                assert np.array_equal(np.asarray(sceil(outer(col, row) * k), dtype=float), np.ceil(col * row * k))


def test_equal_columns_of_whole_numbers_are_one_factor():
    """Columns of whole numbers that their first element does not divide (a batch from 4097: 4098 / 4097 rounds) are
    taken over their greatest common divisor (mathops._canon), so multiples of one batch column are one object and an
    Outer on one plus another (the top-k's tokens x candidates + tokens x k) stays on its factors: the same numbers as
    the full block, bit for bit, nothing the block's size made."""
    from rubinperf.mathops import Outer, _COLS, _canon, only_factored, outer

    batch = np.arange(4097.0, 4097.0 + 300).reshape(-1, 1)
    row = np.round(np.linspace(1, 1 << 20, 50)).reshape(1, -1)
    x, y = outer(batch * 24.0, row), outer(batch * 12288.0, row * 0.5)
    assert x.col is y.col and np.array_equal(x.col * x.scale, batch * 24.0)
    with only_factored():
        s = x + batch * 8.0
    assert type(s) is Outer and np.array_equal(s.full(), batch * 24.0 * row + batch * 8.0)
    # not whole numbers (or nan): kept as they are, as before
    for v in (batch + 0.5, np.where(batch > 4100, np.nan, batch)):
        n, scale, _ = _canon(v, _COLS)
        assert n is v and scale == 1.0


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 90), gap=st.floats(-2.0, 2.0), nan=st.booleans())
def test_an_excess_is_the_max_of_the_difference_and_0(rows, cols, gap, nan):
    """mathops.sexcess(a, b) (the host's exposed time, max(path - GPU, 0)) is smax(a - b, 0.0), the plain 0.0 where a
    column or a number a is below a block b at every element (told from b's least element) and the same array
    otherwise."""
    from rubinperf.mathops import sexcess, smax

    rng = np.random.default_rng(rows * 100 + cols)
    a = rng.uniform(0, 1, (rows, 1))
    b = rng.uniform(1, 2, (rows, cols)) + gap
    if nan:
        b[rows // 2, cols // 2] = np.nan
    for x in (a, float(a[0, 0])):   # a column of b's rows, a number
        got, want = sexcess(x, b), smax(x - b, 0.0)
        assert type(got) is type(want)
        assert np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True)
    assert sexcess(0.5, 0.25) == smax(0.5 - 0.25, 0.0) and sexcess(0.25, 0.5) == 0.0
