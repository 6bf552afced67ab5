"""Grids (batch x context) of steps, timed a block of rows at a time from one graph."""


from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rubinperf.kernels.cost import KERNEL_SHAPE_FIELDS, Cost
from rubinperf.mathops import sscale, ssum
from rubinperf.roofline import KernelTime
from rubinperf.specs.layout import Layout
from rubinperf.specs.model import Model
from rubinperf.step.graph import Op, build_step
from rubinperf.step.point import Point
from rubinperf.step.result import OpTime, StepResult, host_rule, tokens_per_s_per_gpu, tokens_per_s_per_user
from rubinperf.step.timing import _FIRST_EQUAL, _GRAPHS, _SCALAR_TYPES, first_equal_ops, _graph_key, _values_of, op_time, time_ops

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


# ---------------------------------------------------------------- grids (batch x context) in chunks


@dataclass(frozen=True)
class GridGraph:
    """What a grid's steps share on every rack of one tray size: the graph over the whole grid, which ops
    read the grid (timed per block) and which not (timed once), the equal ops among each, and the cutters
    of ops to blocks of rows."""

    ops: list[Op]
    height: int            # rows of the grid (its batch axis)
    once: list[int]        # ops that read no grid array
    once_firsts: list[int]   # first_equal_ops of those ops
    same: list[int]        # each op read per block: the first such op with the same kernels
    cpu: list[bool]
    sync: list[bool]       # host barrier ops (DP sync) among the cpu ones
    cutters: dict          # op index -> _op_cutter (filled as blocks are cut)
    nbytes: int            # of the grid arrays its ops hold (the others' arrays are a row or a column)


def build_grid_graph(model: Model, layout: Layout, point: Point, gpus_per_tray=None) -> GridGraph:
    ops = build_step(model, layout, point, gpus_per_tray=gpus_per_tray)
    height = max((_first(getattr(point, f.name)) for f in dataclasses.fields(point)), default=1)
    both = [_reads_grid(o, height) for o in ops]
    once = [n for n in range(len(ops)) if not both[n]]
    per_block = [n for n in range(len(ops)) if both[n]]
    arrays = {id(v): v.nbytes for n in per_block for v in _op_values(ops[n]) if type(v).__module__ == "numpy"}
    return GridGraph(ops, height, once, first_equal_ops([ops[n] for n in once]), first_equal_ops(ops, among=per_block),
                     [o.part == "cpu" for o in ops], [o.part == "cpu" and o.barrier for o in ops], {},
                     sum(arrays.values()))


# Grid graphs kept for another rack of the same tray size (GB300 and Rubin at the same layouts), up to
# GRID_CACHE_BYTES of their arrays in all (a graph over a large grid is not kept: its arrays are the grid's).
_GRID_GRAPHS: dict = {}
GRID_CACHE_BYTES = 64 * 2**20


def grid_graph(model: Model, layout: Layout, point: Point, gpus_per_tray=None) -> GridGraph:
    """build_grid_graph, remembered (as op_graph remembers graphs) while the kept graphs' arrays fit GRID_CACHE_BYTES."""
    key = _graph_key(model, layout, point, gpus_per_tray)
    hit = _GRID_GRAPHS.get(key) if key is not None else None
    if hit is not None and hit[0] is model:
        return hit[1]
    g = build_grid_graph(model, layout, point, gpus_per_tray)
    if key is not None and g.nbytes <= GRID_CACHE_BYTES:
        while _GRID_GRAPHS and sum(x.nbytes for _, x in _GRID_GRAPHS.values()) + g.nbytes > GRID_CACHE_BYTES:
            _GRID_GRAPHS.pop(next(iter(_GRID_GRAPHS)))
        _GRID_GRAPHS[key] = (model, g)   # the model is kept, so its id is not reused while the entry lives
    return g


class GridSteps:
    """One step over a grid point (a batch column times a context row), timed a block of rows at a time.

    The graph is built once for the whole grid (grid_graph: once for the racks of one tray size); the ops
    whose costs vary along one axis only (most: only the indexer, and attention short of its top-k, read
    both batch and context) are timed once, and each block takes its rows of their times and of their
    shares of the step's sums; the others are timed per block on their rows of their costs, and ops
    whose kernels are equal (the same kernel in layers of another kind) once per block.
    (Rows keep the long context axis innermost: numpy's loops run over whole rows.)

    `chunk(sl)` is the StepResult of rows `sl`, exactly step() of those rows. `metrics(sl)` is its step
    time, speed of light and tokens/s per GPU and per user alone, computed by the same operations on
    the same values in the same order (so equal bit for bit), without building the block's ops."""

    def __init__(self, model: Model, hw: Platform, layout: Layout, point: Point):
        self.model, self.hw, self.layout, self.point = model, hw, layout, point
        g = grid_graph(model, layout, point, hw.gpus_per_tray)
        self.ops, self.height, self.same, self.cpu, self.sync, self._cut_op = g.ops, g.height, g.same, g.cpu, g.sync, g.cutters
        self.once = dict(zip(g.once, time_ops([g.ops[n] for n in g.once], hw, firsts=g.once_firsts)))
        self.per_block = [n for n in range(len(self.ops)) if n not in self.once]
        # the once-ops' terms of the block's four sums (GPU time, scheduler's host time, speed of light, DP sync),
        # in op order
        gpu = [n for n in g.once if not self.cpu[n]]
        self._terms = ([(n, self.once[n].expected_s) for n in gpu],
                       [(n, self.once[n].expected_s) for n in g.once if self.cpu[n] and not self.sync[n]],
                       [(n, self.once[n].sol_s) for n in gpu],
                       [(n, self.once[n].expected_s) for n in g.once if self.sync[n]])
        self._partials = [_shape_groups(terms) for terms in self._terms]

    def cut_op(self, n: int, sl) -> Op:
        """Op n with its arrays over the grid's rows cut to rows `sl`."""
        cut = self._cut_op.get(n)
        if cut is None:
            cut = self._cut_op[n] = _op_cutter(self.ops[n], self.height)
        return cut(sl)

    def blocks(self, rows: int):
        rows = max(1, int(rows))
        return [slice(start, min(start + rows, self.height)) for start in range(0, self.height, rows)]

    def block_point(self, sl) -> Point:
        return dataclasses.replace(self.point, **{f.name: _cut(getattr(self.point, f.name), sl, self.height)
                                                  for f in dataclasses.fields(self.point)})

    def chunk(self, sl) -> StepResult:
        timed = []
        for n in range(len(self.ops)):
            part = self.cut_op(n, sl)
            if n in self.once:
                time = _cutter(self.once[n].time, KernelTime, self.height)(sl)
            else:
                time = op_time(part, self.hw)
            timed.append(OpTime(part, time))
        return StepResult(self.model, self.hw, self.layout, self.block_point(sl), timed)

    def metrics(self, sl):
        """(step_s, sol_s, tokens_per_s_per_gpu, tokens_per_s_per_user) of rows `sl`: chunk(sl)'s, exactly."""
        height, hw = self.height, self.hw
        terms, timed = ([], [], [], []), {}   # the per-block ops' terms of the four sums
        for n in self.per_block:
            o = self.ops[n]
            first = self.same[n]
            t = timed.get(first)
            if t is None:
                t = timed[first] = op_time(self.cut_op(first, sl), hw)
            repeat, stretch = _cut(o.repeat, sl, height), _cut(o.stretch, sl, height)
            expected = sscale(t.expected_s, repeat, stretch)   # OpTime.expected_s, sol_s
            if self.sync[n]:
                terms[3].append((n, expected))
            elif self.cpu[n]:
                terms[1].append((n, expected))
            else:
                terms[0].append((n, expected))
                terms[2].append((n, sscale(t.sol_s, repeat, stretch)))
        # StepResult.gpu_s, host_s, sol_s, sync_s, expected_s
        gpu_s, host_s, sol_s, sync_s = (block_sum(self._partials[k], self._terms[k], terms[k], sl, height)
                                        for k in range(4))
        step_s = host_rule(gpu_s, host_s, sync_s, hw.host_exposed_share).step_s
        p, m = self.block_point(sl), self.model
        return step_s, sol_s, tokens_per_s_per_gpu(m, self.layout, p, step_s), tokens_per_s_per_user(m, p, step_s)


def block_sum(partials: list, once_terms: list, block_terms: list, sl, height):
    """ssum, in op order, of (index, value) terms over a grid's rows cut to rows `sl` (once_terms, whose
    _shape_groups are `partials`) and a block's own terms, exactly.

    ssum adds the terms of one shape in order, then those partial sums from the smallest: the once terms'
    partial sums over the whole grid, cut to the block, are the partial sums of their cut terms (the
    additions are element by element). They stand in for their terms, at the first term's place, where
    the block's terms are arrays of none of their shapes (else every term is added)."""
    cut = [(n, _cut(v, sl, height)) for n, v in partials]
    shapes = {_shape(v) for _, v in cut}
    if (block_terms and all(type(v).__module__ == "numpy" for _, v in block_terms)   # (ssum's path for arrays)
            and len(shapes) == len(cut) and shapes.isdisjoint(_shape(v) for _, v in block_terms)):
        return ssum(v for _, v in sorted(cut + block_terms, key=_first_item))
    once = [(n, _cut(v, sl, height)) for n, v in once_terms]
    return ssum(v for _, v in sorted(once + block_terms, key=_first_item))


def _shape(v) -> tuple:
    """numpy.shape, without importing numpy for a number."""
    return getattr(v, "shape", ())


def _first_item(pair):
    return pair[0]


def _shape_groups(terms: list) -> list:
    """(index, value) terms grouped by shape as ssum groups them, each group added up in order: a list of
    (first index, partial sum), in the order the groups first appear."""
    groups: dict = {}
    for n, v in terms:
        shape = _shape(v)
        hit = groups.get(shape)
        groups[shape] = (n, v) if hit is None else (hit[0], hit[1] + v)
    return list(groups.values())


def forget_graphs() -> None:
    """Drop every remembered graph (op_graph's and grid_graph's): the next step or grid builds its own."""
    _GRAPHS.clear()
    _FIRST_EQUAL.clear()
    _GRID_GRAPHS.clear()



def _cutter(obj, cls, height):
    """A function of a slice giving `obj` (a Cost or KernelTime) with its arrays over the grid's rows cut to it."""
    values = obj.__dict__
    names = [f for f in values if _cuttable(values[f], height)]
    if not names:
        return lambda sl: obj
    return lambda sl: cls(**{**values, **{f: values[f][sl] for f in names}})


def _op_cutter(o: Op, height):
    """A function of a slice giving op `o` with every array over the grid's rows (costs, shapes) cut to it."""
    parts = []
    for k in o.kernels:
        cost = _cutter(k.cost, Cost, height)
        names = [f for f in KERNEL_SHAPE_FIELDS if _cuttable(getattr(k, f), height)]
        parts.append((k, cost, names))
    extra = [f for f in ("repeat", "stretch") if _cuttable(getattr(o, f), height)]
    if not extra and all(c(slice(0, 1)) is k.cost and not names for k, c, names in parts):
        return lambda sl: o

    def cut(sl):
        kernels = tuple(dataclasses.replace(k, cost=c(sl), **{f: getattr(k, f)[sl] for f in names})
                        for k, c, names in parts)
        return dataclasses.replace(o, kernels=kernels, **{f: getattr(o, f)[sl] for f in extra})
    return cut


def _cuttable(v, height) -> bool:
    return height > 1 and getattr(v, "ndim", 0) > 1 and v.shape[0] == height


def _first(v) -> int:
    """Length of the first axis of an array (1 for numbers)."""
    shape = getattr(v, "shape", ())
    return shape[0] if shape else 1


def _is_grid(v, height) -> bool:
    """An array that varies along the first axis and another one."""
    shape = getattr(v, "shape", ())
    return len(shape) > 1 and shape[0] == height and any(d > 1 for d in shape[1:])


def _cut(v, sl, height):
    return v[sl] if height > 1 and _first(v) == height and getattr(v, "ndim", 0) > 1 else v


def _op_values(o: Op) -> list:
    """Op o's values: repeat, stretch, its kernels' costs and shape fields."""
    values = [o.repeat, o.stretch]
    for k in o.kernels:
        values.extend(_values_of(k))
    return values


def _reads_grid(o: Op, height) -> bool:
    """Whether any of op o's values is a grid array."""
    return any(_is_grid(v, height) for v in _op_values(o) if type(v) not in _SCALAR_TYPES)
