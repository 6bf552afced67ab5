"""Grids (batch x context) of steps, timed a block (rows x contexts) at a time from one graph."""


from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rubinperf.kernels.attention import indexer_logits, indexer_select, sparse_attention
from rubinperf.kernels.cost import KERNEL_SHAPE_FIELDS, _plain_value_key, forget_array_kernels
from rubinperf.mathops import _PLAIN, Bands, Outer, Unfactored, _full, only_factored, sscale, ssum
from rubinperf.specs.layout import Layout
from rubinperf.specs.model import Model
from rubinperf.step.graph import Op, build_step
from rubinperf.step.point import Point
from rubinperf.step.result import OpTime, StepResult, host_rule, tokens_per_s_per_gpu, tokens_per_s_per_user
from rubinperf.step.timing import (_FIRST_EQUAL, _GRAPHS, _KERNEL_KEYS, _SCALAR_TYPES, _STEP_TIMES, _array_key,
                                   _graph_key, _op_key, _same_kernel, _same_kernels, _same_value, _values_of,
                                   first_equal_ops, op_time, timed_ops)

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


# ---------------------------------------------------------------- grids (batch x context) in blocks


@dataclass(frozen=True)
class GridGraph:
    """What a grid's steps share on every rack of one tray size: the graph over the grid's batch column and
    context row, which ops read the grid (made and timed per block) and which not (timed once), the equal ops
    among each, and the makers of ops on blocks.

    No array over the whole grid is built: the kernels that read the context (build_step's context_kernel)
    are made on the grid's first point as placeholders, and made again on each block from their arguments
    cut to it, so a grid's memory is that of one block."""

    ops: list[Op]
    shape: tuple           # (rows, columns) of the grid: its batch and context axes
    once: list[int]        # ops that read no grid array
    once_firsts: list[int]   # first_equal_ops of those ops
    once_keys: list        # their _op_key (first_equal_ops found them): _time_once looks the kept times up by them
    same: list[int]        # each op read per block: the first such op with the same kernels
    cpu: list[bool]
    sync: list[bool]       # host barrier ops (DP sync) among the cpu ones
    made: dict             # id(placeholder kernel) -> (placeholder, constructor, arguments)
    cutters: dict          # op index -> function of a block giving the op on it (filled as blocks are cut)
    nbytes: int            # of the arrays its ops and made kernels' arguments hold (the once-ops' times hold as many)


class ContextKernels:
    """build_step's context_kernel over a grid: each kernel that reads the context is made on the grid's first
    point alone, its costs nan (a placeholder: a value read from it instead of a block's own shows as nan), and
    kept with its constructor and arguments, to be made on each block from the arguments cut to it."""

    def __init__(self, shape: tuple):
        self.shape = shape
        self.made: dict = {}

    def __call__(self, constructor, *args):
        at = [_cut(a, (slice(0, 1), slice(0, 1)), self.shape) for a in args]
        key = _first_point_key(constructor, at)
        hit = _PLACEHOLDERS.get(key) if key is not None else None
        if hit is None:
            first = constructor(*at)
            hit = dataclasses.replace(first, cost=first.cost.map(_nan))
            if key is not None:
                if len(_PLACEHOLDERS) >= PLACEHOLDERS_KEPT:
                    _PLACEHOLDERS.clear()
                _PLACEHOLDERS[key] = hit
        placeholder = object.__new__(type(hit))   # (a copy: each call's own object, its id the key of its recipe)
        object.__setattr__(placeholder, "__dict__", dict(hit.__dict__))
        self.made[id(placeholder)] = (placeholder, constructor, args)   # (kept: its id is not reused)
        return placeholder


# The placeholders ContextKernels made, by constructor and the arguments at the grid's first point (bit for bit:
# _first_point_key), for the next call with the same ones (the layers of another kind, DEP32's attention at DEP16's
# batch per rank): a constructor is a pure function of its arguments. Until forget_graphs, at most PLACEHOLDERS_KEPT.
_PLACEHOLDERS: dict = {}
PLACEHOLDERS_KEPT = 256


def _first_point_key(constructor, args: list):
    """A hashable key of a constructor and its arguments at one point (plain values by kernels.cost's
    _plain_value_key, numpy arrays of one element by their type and bytes: equal keys are equal arguments bit for
    bit), or None where one is another value (a float that equal numbers would not stand for bit for bit, -0.0 or
    nan: made each time)."""
    key = [constructor]
    for a in args:
        t = type(a)
        if t.__module__ == "numpy":
            if getattr(a, "size", 2) != 1 or a.dtype.kind not in "fiub":
                return None
            key.append((t, a.shape, a.dtype.str, a.tobytes()))
            continue
        k = _plain_value_key(a)
        if k is None:
            return None
        key.append(k)
    return tuple(key)


def _nan(v):
    return v * math.nan


def build_grid_graph(model: Model, layout: Layout, point: Point, gpus_per_tray=None) -> GridGraph:
    shape = grid_shape(point)
    made = ContextKernels(shape)
    ops = build_step(model, layout, point, gpus_per_tray=gpus_per_tray, context_kernel=made)
    made = made.made
    arrays: dict = {}   # id -> nbytes of the numpy values the ops and the made kernels' arguments hold
    both = []
    for o in ops:   # (each op's values read once: whether it reads the grid, and its arrays' bytes)
        grid, held = _scan_values((o.repeat, o.stretch), shape)
        arrays.update(held)
        for k in o.kernels:
            if id(k) in made:   # (a placeholder: reads the grid)
                reads, held = _scan_values(_values_of(k), shape)
                grid = True
            else:
                reads, held = _kernel_scan(k, shape)
                grid = grid or reads
            arrays.update(held)
        both.append(grid)
    for _, _, args in made.values():
        for a in args:
            if type(a) not in _SCALAR_TYPES and type(a).__module__ == "numpy":
                arrays[id(a)] = a.nbytes
    once = [n for n in range(len(ops)) if not both[n]]
    per_block = [n for n in range(len(ops)) if both[n]]
    same = list(range(len(ops)))
    for i, n in enumerate(per_block):
        same[n] = next((j for j in per_block[:i] if same[j] == j and _same_block_op(ops[j], ops[n], made)), n)
    keys = [None] * len(once)
    firsts = first_equal_ops([ops[n] for n in once], keys=keys)
    return GridGraph(ops, shape, once, firsts, keys, same,
                     [o.part == "cpu" for o in ops], [o.part == "cpu" and o.barrier for o in ops], made, {},
                     sum(arrays.values()))


def _scan_values(values, shape) -> tuple:
    """(whether any of the values spans the grid of `shape`, [(id, nbytes) of each numpy value])."""
    grid, held = False, []
    for v in values:
        if type(v) not in _SCALAR_TYPES:
            grid = grid or _is_grid(v, shape)
            if type(v).__module__ == "numpy":
                held.append((id(v), v.nbytes))
    return grid, held


def _kernel_scan(k, shape) -> tuple:
    """_scan_values of a kernel's values, kept by the kernel (kept_kernels gives the layers of another kind and the
    layouts of one rack's sweep one object for equal calls) until forget_graphs."""
    return _kept_by_identity(_KERNEL_SCANS, KERNEL_SCANS_KEPT, k, (id(k), shape),
                             lambda: _scan_values(_values_of(k), shape))


def _kept_by_identity(store: dict, bound: int, obj, key, compute):
    """compute() for `obj`, kept in `store` under `key` (which holds id(obj)) beside obj itself, so that the id is not
    reused while the entry lives; the store is emptied when it holds `bound` entries."""
    hit = store.get(key)
    if hit is not None and hit[0] is obj:
        return hit[1]
    value = compute()
    if len(store) >= bound:
        store.clear()
    store[key] = (obj, value)
    return value


_KERNEL_SCANS: dict = {}
KERNEL_SCANS_KEPT = 512   # (as timing.KERNEL_KEYS_KEPT: the kernels are kept alive beside their ids)


def _same_block_op(a: Op, b: Op, made: dict) -> bool:
    """Ops read per block that op_time times alike on every block: the same weight placement, and kernels made by
    one constructor from the same arguments (bit for bit) or equal as they are."""
    if a.die_local_weights != b.die_local_weights or len(a.kernels) != len(b.kernels):
        return False
    for x, y in zip(a.kernels, b.kernels):
        mx, my = made.get(id(x)), made.get(id(y))
        if mx is None and my is None:
            if not _same_kernel(x, y):
                return False
        elif mx is None or my is None or mx[1] is not my[1] or len(mx[2]) != len(my[2]) \
                or not all(map(_same_value, mx[2], my[2])):
            return False
    return True


# Grid graphs kept for another rack of the same tray size (GB300 and Rubin at the same layouts), up to
# GRID_CACHE_BYTES of their arrays in all (a graph over many batches is not kept).
_GRID_GRAPHS: dict = {}
GRID_CACHE_BYTES = 16 * 2**20


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
    """One step over a grid point (a batch column times a context row), timed a block at a time.

    The graph is built once for the whole grid (grid_graph: once for the racks of one tray size); the ops
    whose costs vary along one axis only (all but the indexer's and the sparse attention's, which read both
    batch and context) are timed once, and each block takes its part of their times and of their shares of
    the step's sums; the others are made and timed per block, and ops whose kernels are equal (the same
    kernel in layers of another kind) once per block. A block is a slice of rows (every context) or a pair
    (rows, columns): sparse attention past its top-k and window reads no context, so on a block of such
    contexts its kernels carry the batch axis alone. (Rows keep the long context axis innermost: numpy's loops
    run over whole rows.)

    `chunk(block)` is the StepResult of the block, exactly step() of its point. `metrics(block)` is its step
    time, speed of light and tokens/s per GPU and per user alone, computed by the same operations on the same
    values in the same order (so equal bit for bit), without building the block's other ops."""

    def __init__(self, model: Model, hw: Platform, layout: Layout, point: Point):
        self.model, self.hw, self.layout, self.point = model, hw, layout, point
        g = grid_graph(model, layout, point, hw.gpus_per_tray)
        self.ops, self.shape, self.same, self.cpu, self.sync = g.ops, g.shape, g.same, g.cpu, g.sync
        self.height = self.shape[0]
        self._made, self._cut_op = g.made, g.cutters
        self.once = dict(zip(g.once, _time_once([g.ops[n] for n in g.once], hw, g.once_firsts, g.once_keys, g.nbytes)))
        self.per_block = [n for n in range(len(self.ops)) if n not in self.once]
        # the once-ops' terms of the block's four sums (GPU time, scheduler's host time, speed of light, DP sync),
        # in op order
        gpu = [n for n in g.once if not self.cpu[n]]
        for t in self.once.values():
            _scaled_once(t)
        self._terms = ([(n, self.once[n].expected_s) for n in gpu],
                       [(n, self.once[n].expected_s) for n in g.once if self.cpu[n] and not self.sync[n]],
                       [(n, self.once[n].sol_s) for n in gpu],
                       [(n, self.once[n].expected_s) for n in g.once if self.sync[n]])
        self._partials = [_shape_groups(terms) for terms in self._terms]
        self._row_cuts: dict = {}   # id(once term) -> its cut to the last block's rows (blocks go row by row)
        self._last_timed: dict = {}   # op index -> (the op on the last block it was timed on, its OpTime)
        self._span_times: dict = {}   # op index -> (span, its times over the span on their factors, or None)
        self._cut_rows: dict = {}   # (id(a span's row), columns) -> its cut to the current block (one object per row)

    def cut_op(self, n: int, block, factored: bool = False) -> Op:
        """Op n on a block: its arrays over the grid cut to it, its kernels that read the context made on it (with
        `factored`, those of FACTORED with the context row as an Outer: their costs a column times a row)."""
        cut = self._cut_op.get(n)
        if cut is None:
            cut = self._cut_op[n] = _op_cutter(self.ops[n], self.shape, self._made)
        return cut(_rows_cols(block), factored) if factored else cut(_rows_cols(block))

    def blocks(self, rows: int):
        """Slices of `rows` rows (the last shorter) over the grid."""
        rows = max(1, int(rows))
        return [slice(start, min(start + rows, self.height)) for start in range(0, self.height, rows)]

    def tiles(self, rows: int, cols: int):
        """(rows, columns) blocks of `rows` x `cols` points (the last of each axis shorter), row by row."""
        cols, width = max(1, int(cols)), self.shape[1]
        return [(r, slice(start, min(start + cols, width))) for r in self.blocks(rows) for start in range(0, width, cols)]

    def block_point(self, block) -> Point:
        block = _rows_cols(block)
        return dataclasses.replace(self.point, **{f.name: _cut(getattr(self.point, f.name), block, self.shape)
                                                  for f in dataclasses.fields(self.point)})

    def chunk(self, block) -> StepResult:
        block = _rows_cols(block)
        timed = []
        for n in range(len(self.ops)):
            part = self.cut_op(n, block)
            if n in self.once:
                time = _cutter(self.once[n].time, self.shape)(block)
            else:
                time = op_time(part, self.hw)
            timed.append(OpTime(part, time))
        return StepResult(self.model, self.hw, self.layout, self.block_point(block), timed)

    def _op_time(self, n: int, block, span=None):
        """op_time of op n on a block (its expected_s and sol_s). Within a span of blocks (the same rows, the block's
        columns among the span's): the op timed once over each piece of the span where its kernels' terms stay a column
        times a row (mathops.only_factored: nothing the size of the span is made), a block within a piece taking its
        columns of those factors, the same numbers element by element; else as below."""
        if span is not None:
            a, b = block[1].start, block[1].stop
            for x, y, times in self._pieces(n, span):
                if x <= a and b <= y:
                    if times is not None:
                        return _SpanCut(*(_cut_columns(v, a - x, b - x, self._cut_rows) for v in times))
                    break
        return self._block_op_time(n, block)

    def _pieces(self, n: int, span) -> list:
        """Op n's times over a span, as (first column, end column, (expected_s, sol_s) on their factors or None)."""
        key = (span[0].start, span[0].stop, span[1].start, span[1].stop)
        hit = self._span_times.get(n)
        if hit is None or hit[0] != key:
            hit = self._span_times[n] = (key, self._shared_pieces(n, span))
        return hit[1]

    def _shared_pieces(self, n: int, span) -> list:
        """_time_pieces over a span, or the pieces an earlier grid on the same rack timed for an op of the same weight
        placement whose kernels are made by the same constructors from the same arguments over its span, bit for bit
        (DEP32's indexer and sparse attention are DEP16's at the same batch per rank): op_time is a pure function of
        them and the rack."""
        start = span[1].start
        made = self._made_args(n, span)
        if made is None:
            return self._time_pieces(n, span[0], start, span[1].stop)
        key, args = made
        bucket = _SPAN_TIMES.setdefault(key, [])
        pieces = _kept_for(bucket, args)
        if pieces is not None:
            return [(a + start, b + start, t) for a, b, t in pieces]
        pieces = self._time_pieces(n, span[0], start, span[1].stop)
        if len(_SPAN_TIMES) <= SPAN_TIMES_KEPT:
            bucket.append((args, [(a - start, b - start, t) for a, b, t in pieces]))
        return pieces

    def _made_args(self, n: int, region):
        """(key, arguments) of op n's kernels as made over `region` (rows, columns) of the grid: by their weight
        placement, constructors and the arguments' keys, for times an earlier grid on this rack kept (_kept_for);
        None where a kernel of the op is not made by a constructor, or the kept times are another rack's."""
        o = self.ops[n]
        recipe = [self._made.get(id(k)) for k in o.kernels]
        if _RACK[0] is not self.hw or any(r is None for r in recipe):
            return None
        args = [[_cut(a, region, self.shape) for a in r[2]] for r in recipe]
        return (o.die_local_weights, tuple((id(r[1]), tuple(_arg_key(a) for a in cut))
                                           for r, cut in zip(recipe, args))), args

    def _time_pieces(self, n: int, rows, a: int, b: int, depth: int = 0) -> list:
        """_pieces over columns a:b: the whole, or where a formula would make the full block there, the pieces between
        the columns at which a row's regime changes (the top-k's rows split past a length: on either side the split
        is a plain number), each timed the same way; a piece that still would make its full block: None."""
        try:
            with only_factored(SPAN_FULL_POINTS) as cuts:
                t = op_time(self.cut_op(n, (rows, slice(a, b)), factored=True), self.hw)
        except Unfactored:
            inner = sorted(a + c for c in cuts if 0 < c < b - a)
            if not inner or depth > 1:
                return [(a, b, None)]
            ends = [a, *inner, b]
            return [p for x, y in zip(ends, ends[1:]) for p in self._time_pieces(n, rows, x, y, depth + 1)]
        times = (t.expected_s, t.sol_s)
        return [(a, b, times if all(map(_factored_only, times)) else None)]

    def span_cuts(self, span) -> list:
        """The columns inside a span at which an op's factored times change piece (_pieces): blocks that do not
        straddle them take every op from its factors."""
        cuts = set()
        for n in {self.same[n] for n in self.per_block}:
            cuts.update(x for x, _, _ in self._pieces(n, span)[1:])
        return sorted(cuts)

    def _block_op_time(self, n: int, block):
        """op_time of op n on a block. An op whose kernels carry no context axis on this block (sparse attention past
        its top-k and window) and equal, bit for bit, its kernels on the last block it was timed on (blocks go row by
        row: the next columns of the same rows) takes that block's times: the same inputs give the same numbers."""
        made = self._made_args(n, block)
        if made is not None and made[0] in _BLOCK_TIMES:   # (kept only for an op whose kernels carry the context axis
            times = _kept_for(_BLOCK_TIMES[made[0]], made[1])   # on the block: found before the op is made on it)
            if times is not None:
                self._last_timed.pop(n, None)
                return times
        part = self.cut_op(n, block, factored=True)
        if any(_columns(v) for k in part.kernels for v in _values_of(k)):
            self._last_timed.pop(n, None)
            return self._shared_block_time(n, block, part, made)
        last = self._last_timed.get(n)
        if last is not None and _same_kernels(part, last[0]):
            return last[1]
        t = op_time(part, self.hw)
        self._last_timed[n] = (part, t)   # (only ops of no context axis are kept: a column's arrays)
        return t

    def _shared_block_time(self, n: int, block, part, made=None):
        """op_time of op n on a block (`part`: the op on it), or its (expected_s, sol_s) that an earlier grid on the
        same rack timed for an op of the same weight placement whose kernels are made by the same constructors from the
        same arguments over the block, bit for bit (the top-k of DEP16, DEP32 and TP8 at the same batch per rank, on
        the blocks where its HBM and L2 times cross), kept while they hold at most BLOCK_TIMES_BYTES in all (4 MB: the
        2 MB of a 1,024-batch sweep's; a sweep of more batches per graph keeps fewer). `made`: _made_args(n, block),
        where the caller has it."""
        if made is None:
            made = self._made_args(n, block)
        if made is None:
            return op_time(part, self.hw)
        key, args = made
        bucket = _BLOCK_TIMES.setdefault(key, [])
        times = _kept_for(bucket, args)
        if times is not None:
            return times
        t = op_time(part, self.hw)
        times = _SpanCut(t.expected_s, t.sol_s)
        size = _nbytes(times.expected_s) + _nbytes(times.sol_s)
        if _BLOCK_BYTES[0] + size <= BLOCK_TIMES_BYTES:
            bucket.append((args, times))
            _BLOCK_BYTES[0] += size
        return times

    def metrics(self, block, span=None):
        """(step_s, sol_s, tokens_per_s_per_gpu, tokens_per_s_per_user) of a block: chunk(block)'s, exactly (within
        GRID_RTOL where ops are timed on their factors). `span`: (rows, columns) of the block's rows and columns of
        several blocks, whose factored ops are timed once for all of them (_op_time)."""
        block = _rows_cols(block)
        grid, hw = self.shape, self.hw
        terms, timed = ([], [], [], []), {}   # the per-block ops' terms of the four sums
        self._cut_rows.clear()
        for n in self.per_block:
            o = self.ops[n]
            first = self.same[n]
            t = timed.get(first)
            if t is None:
                t = timed[first] = self._op_time(first, block, span)
            repeat, stretch = _cut(o.repeat, block, grid), _cut(o.stretch, block, grid)
            expected = sscale(t.expected_s, repeat, stretch)   # OpTime.expected_s, sol_s
            if self.sync[n]:
                terms[3].append((n, expected))
            elif self.cpu[n]:
                terms[1].append((n, expected))
            else:
                terms[0].append((n, expected))
                terms[2].append((n, sscale(t.sol_s, repeat, stretch)))
        # StepResult.gpu_s, host_s, sol_s, sync_s, expected_s
        gpu_s, host_s, sol_s, sync_s = (block_sum(self._partials[k], self._terms[k], terms[k], block, grid,
                                                  self._row_cuts)
                                        for k in range(4))
        gpu_s, host_s, sol_s, sync_s = _full(gpu_s), _full(host_s), _full(sol_s), _full(sync_s)
        step_s = host_rule(gpu_s, host_s, sync_s, hw, self.layout.dp).step_s
        p, m = self.block_point(block), self.model
        return step_s, sol_s, tokens_per_s_per_gpu(m, self.layout, p, step_s), tokens_per_s_per_user(m, p, step_s)


# The most elements of a full array made over a span (only_factored's limit: the top-k's few rows whose parallelism term
# is not 0, made in full over the span's columns), so a span's times hold no more than a small block's memory.
SPAN_FULL_POINTS = 1 << 16


def _nbytes(v) -> int:
    """Bytes of the arrays a value holds (a number: 0; an Outer: its column, row and added part; Bands: its runs)."""
    t = type(v)
    if t is Outer:
        return sum(_nbytes(x) for x in (v.col, v.row, v.add))
    if t is Bands:
        return sum(_nbytes(w) for _, _, w in v.parts)
    return getattr(v, "nbytes", 0) if t.__module__ == "numpy" else 0


def _kept_for(bucket: list, args: list):
    """The value kept in `bucket` ([(arguments, value)]) for made kernels' arguments equal to `args`, bit for bit; None
    where none is."""
    for seen, value in bucket:
        if all(len(x) == len(y) and all(map(_same_value, x, y)) for x, y in zip(seen, args)):
            return value
    return None


def _arg_key(a):
    """A made kernel's argument, hashable: a number as it is, an array by timing._array_key."""
    return a if type(a) in _SCALAR_TYPES else _array_key(a)


class _SpanCut:
    """An op's expected_s and sol_s on a block, cut from its times over a span (GridSteps._op_time)."""

    __slots__ = ("expected_s", "sol_s")

    def __init__(self, expected_s, sol_s):
        self.expected_s, self.sol_s = expected_s, sol_s


def _factored_only(v) -> bool:
    """A value that holds no full block beyond SPAN_FULL_POINTS elements: a number, a column, a row, an Outer of a
    column and a row, Bands of those (or of a few rows in full)."""
    t = type(v)
    if t in _PLAIN:
        return True
    if t is Outer:
        return _factored_only(v.add)
    if t is Bands:
        return all(_factored_only(w) for _, _, w in v.parts)
    shape = getattr(v, "shape", ())
    return not (len(shape) == 2 and shape[0] > 1 and shape[1] > 1 and shape[0] * shape[1] > SPAN_FULL_POINTS)


def _cut_columns(v, a: int, b: int, rows: dict):
    """A span's value (a number, column, row, Outer or Bands of those) on columns a:b of the span: each row cut once
    (`rows`, by the id of the span's row and the columns, so Outers that share a row share its cut)."""
    t = type(v)
    if t in _PLAIN:
        return v
    if t is Outer:
        key = (id(v.row), a, b)
        row = rows.get(key)
        if row is None:
            row = rows[key] = v.row[:, a:b]
        return Outer(v.col, row, v.scale, _cut_columns(v.add, a, b, rows), v.cpos, v.rpos)
    if t is Bands:
        return Bands([(x, y, _cut_columns(w, a, b, rows)) for x, y, w in v.parts],
                     (v.shape[0], b - a) if v.shape[1] > 1 else v.shape)
    shape = getattr(v, "shape", ())
    if len(shape) == 2 and shape[1] > 1:
        key = (id(v), a, b)
        cut = rows.get(key)
        if cut is None:
            cut = rows[key] = v[:, a:b]
        return cut
    return v


def block_sum(partials: list, once_terms: list, block_terms: list, block, grid, row_cuts: dict | None = None):
    """ssum, in op order, of (index, value) terms over a grid cut to a block (once_terms, whose _shape_groups
    are `partials`) and a block's own terms, exactly (where a block term is a mathops.Outer, a factored kernel's:
    the partial sums and the block's terms, within a few ulps).

    ssum adds the terms of one shape in order, then those partial sums from the smallest: the once terms'
    partial sums over the whole grid, cut to the block, are the partial sums of their cut terms (the
    additions are element by element). They stand in for their terms, at the first term's place, where
    the block's terms are arrays of none of their shapes (else every term is added: a column's cut to the
    block's rows is kept in `row_cuts` for the next block of those rows)."""
    cut = [(n, _cut(v, block, grid)) for n, v in partials]
    if any(type(v) is Outer for _, v in block_terms):   # (factored terms: the sum within GRID_RTOL, in any grouping)
        return ssum([v for _, v in cut] + [v for _, v in block_terms])
    shapes = {_shape(v) for _, v in cut}
    if (block_terms and all(type(v).__module__ == "numpy" for _, v in block_terms)   # (ssum's path for arrays)
            and len(shapes) == len(cut) and shapes.isdisjoint(_shape(v) for _, v in block_terms)):
        return ssum(v for _, v in sorted(cut + block_terms, key=_first_item))
    if row_cuts is None:
        once = [(n, _cut(v, block, grid)) for n, v in once_terms]
    else:
        rows = block[0]
        key = (rows.start, rows.stop)
        if row_cuts.get("rows") != key:
            row_cuts.clear()
            row_cuts["rows"] = key
        once = []
        for n, v in once_terms:
            shape = _shape(v)
            if len(shape) > 1 and shape[0] == grid[0] > 1 and not shape[1] == grid[1] > 1:   # a column: cut by rows
                hit = row_cuts.get(id(v))
                if hit is None or hit[0] is not v:
                    hit = row_cuts[id(v)] = (v, v[rows])
                once.append((n, hit[1]))
            else:
                once.append((n, _cut(v, block, grid)))
    return ssum(v for _, v in sorted(once + block_terms, key=_first_item))


def _columns(v) -> bool:
    """An array with more than one column (numbers, columns and 1-d arrays have none)."""
    shape = getattr(v, "shape", ())
    return len(shape) > 1 and shape[1] > 1


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
    """Drop every remembered graph (op_graph's and grid_graph's) and the once-timed ops' times (a grid's and the
    steps'): the next step or grid builds and times its own."""
    _GRAPHS.clear()
    _FIRST_EQUAL.clear()
    _KERNEL_KEYS.clear()
    forget_array_kernels()
    _STEP_TIMES.clear()
    _GRID_GRAPHS.clear()
    _forget_once_times()
    _SPAN_TIMES.clear()
    _BLOCK_TIMES.clear()
    _BLOCK_BYTES[0] = 0
    _PLACEHOLDERS.clear()
    _KERNEL_SCANS.clear()


# The once-timed ops' times of the grids built on one rack (_RACK), by _op_key: [(op, its KernelTime)], for the
# next grid on that rack (DEP32's attention and dense GEMMs are DEP16's, at the same batch per rank), kept for grids
# whose graphs hold at most ONCE_TIMES_BYTES of arrays in all (_ONCE_BYTES; the times and their scaled sums hold about
# 1.4 times that: a sweep of many parts of GRID_ROWS batches keeps a few parts' worth) and at most ONCE_TIMES_KEPT ops
# (many small grids, whose arrays are few bytes).
_ONCE_TIMES: dict = {}
_ONCE_BYTES: list = [0]
_RACK: list = [None]
# The span ops' pieces (GridSteps._shared_pieces) of the grids built on that rack: {key: [(the made kernels'
# arguments over the span, pieces)]}, at most SPAN_TIMES_KEPT keys (their values are columns, rows and arrays of at most
# SPAN_FULL_POINTS elements).
_SPAN_TIMES: dict = {}
SPAN_TIMES_KEPT = 64
# The same for ops timed per block (GridSteps._shared_block_time), while their times hold at most BLOCK_TIMES_BYTES.
_BLOCK_TIMES: dict = {}
_BLOCK_BYTES: list = [0]
BLOCK_TIMES_BYTES = 4 * 2**20
ONCE_TIMES_BYTES = 16 * 2**20   # (a 4,096-batch graph holds about 3.6 MB: the three layouts of a part kept)
ONCE_TIMES_KEPT = 1024   # (ops kept, and _SCALED's entries)


def _time_once(ops: list, hw: Platform, firsts: list[int], keys: list | None, nbytes: int) -> list[OpTime]:
    """time_ops(ops, hw, firsts), where an op equal to one a grid before timed on the same rack (the same kernels, bit
    for bit, and weight placement: op_time is a pure function of them and the rack) takes that op's time. `keys`: each
    op's _op_key (first_equal_ops' keys) or None; `nbytes`: the arrays of the ops' graph (GridGraph.nbytes): where
    they would take the kept grids' past ONCE_TIMES_BYTES, or more than ONCE_TIMES_KEPT ops are kept, the kept times
    are dropped first."""
    _on_rack(hw)
    if _ONCE_BYTES[0] + nbytes > ONCE_TIMES_BYTES or sum(map(len, _ONCE_TIMES.values())) > ONCE_TIMES_KEPT:
        _forget_once_times()
    _ONCE_BYTES[0] += nbytes
    return timed_ops(ops, hw, firsts, _ONCE_TIMES, keys, any_time=True)


def _scaled_once(t: OpTime) -> None:
    """Fill a once-timed op's OpTime.expected_s and sol_s (its KernelTime's times scaled by the op's repeat and stretch)
    with those an earlier grid on the rack scaled from the same KernelTime (the object _time_once shares) by the same
    plain repeat and stretch (DEP32's attention is DEP16's, layer for layer): sscale is a pure function of them."""
    repeat, stretch = _plain_value_key(t.op.repeat), _plain_value_key(t.op.stretch)   # (None: an array, -0.0, nan)
    if repeat is None or stretch is None or "expected_s" in t.__dict__:
        return
    t.__dict__["expected_s"], t.__dict__["sol_s"] = _kept_by_identity(   # (OpTime's cached properties)
        _SCALED, ONCE_TIMES_KEPT, t.time, (id(t.time), repeat, stretch), lambda: (t.expected_s, t.sol_s))


# OpTime.expected_s and sol_s of the once-timed ops of the grids on the rack (_RACK), by their KernelTime's identity and
# the op's repeat and stretch (_scaled_once).
_SCALED: dict = {}


def _forget_once_times() -> None:
    _SCALED.clear()
    _ONCE_TIMES.clear()
    _ONCE_BYTES[0] = 0


def _on_rack(hw: Platform) -> None:
    """The grids' kept times (_ONCE_TIMES, _SPAN_TIMES, _BLOCK_TIMES) are those of rack `hw`: another rack's dropped."""
    if _RACK[0] is not hw:
        _forget_once_times()
        _SPAN_TIMES.clear()
        _BLOCK_TIMES.clear()
        _BLOCK_BYTES[0] = 0
        _RACK[0] = hw   # (kept, so its id is not reused while the times live)


def _cutter(obj, grid):
    """A function of a block giving `obj` (a Cost or KernelTime) with its arrays over the grid cut to it (by its own
    class's map: a record is made where its class is)."""
    if not any(_cuttable(v, grid) for v in obj.__dict__.values()):
        return lambda block: obj
    return lambda block: obj.map(lambda v: _cut(v, block, grid))


def _op_cutter(o: Op, grid, made: dict):
    """A function of a block giving op `o` on it: every array over the grid (costs, shapes) cut to it, and each
    made kernel (ContextKernels) made again from its arguments cut to it."""
    parts = []
    for k in o.kernels:
        recipe = made.get(id(k))
        if recipe is not None:
            parts.append((k, recipe[1:], None))
            continue
        names = [f for f in KERNEL_SHAPE_FIELDS if _cuttable(getattr(k, f), grid)]
        parts.append((k, _cutter(k.cost, grid), names))
    extra = [f for f in ("repeat", "stretch") if _cuttable(getattr(o, f), grid)]
    plains: dict = {}
    if not extra and all(names == [] and not any(_cuttable(v, grid) for v in k.cost.__dict__.values())
                         for k, _, names in parts):
        return lambda block, factored=False: o

    def kernel(k, c, names, block, factored):
        if names is None:
            constructor, args = c
            if factored and constructor in FACTORED:
                plain = plains.get(id(k))
                if plain is None:   # (its arguments of one value over the whole grid, as numbers: the same on a block)
                    plain = plains[id(k)] = [_one_value(a) for a in args]
                return _factored(constructor, [a if p is None else p for a, p in zip((_cut(a, block, grid)
                                                                                     for a in args), plain)])
            return constructor(*[_cut(a, block, grid) for a in args])
        return dataclasses.replace(k, cost=c(block), **{f: _cut(getattr(k, f), block, grid) for f in names})

    def cut(block, factored=False):
        kernels = tuple(kernel(k, c, names, block, factored) for k, c, names in parts)
        return dataclasses.replace(o, kernels=kernels, **{f: _cut(getattr(o, f), block, grid) for f in extra})
    return cut


# Kernel constructors whose costs over a block are a column (the batch's) times a row (the context's) in every field:
# made on a block with the context row as mathops.Outer, for GridSteps.metrics to time on the factors.
FACTORED = (indexer_logits, indexer_select, sparse_attention)


def _factored(constructor, args):
    """constructor(*args) with every row among args (a 2-d array of one row and more columns) as Outer(None, row) (the
    caller gives a column of one value over the grid, a draft pass's queries per sequence, tokens / sequences, as
    that number: the same value at every element, so the same numbers): its cost fields that are a column times a
    row come out as Outers, rows as rows; shape fields as numpy values."""
    k = constructor(*map(_factor_arg, args))
    cost = k.cost.__dict__
    if any(type(v) is Outer and v.col is None for v in cost.values()):
        k = dataclasses.replace(k, cost=k.cost.map(_row_alone))
    shape = {f: _full(v) for f, v in k.__dict__.items() if type(v) is Outer}
    return dataclasses.replace(k, **shape) if shape else k


def _factor_arg(a):
    """An argument of a FACTORED kernel on a block: a row as Outer(None, row); anything else as it is."""
    shape = getattr(a, "shape", ())
    if len(shape) == 2 and shape[0] == 1 and shape[1] > 1:
        return Outer(None, a)
    return a


def _one_value(a):
    """A float column (rows, 1) whose every element is one number (not nan; a zero of one sign: +0.0) as that number;
    None for anything else."""
    shape = getattr(a, "shape", ())
    if len(shape) == 2 and shape[1] == 1 and shape[0] > 1 and a.dtype.char == "d":
        lo, hi = a.min(), a.max()
        if lo == hi and (lo != 0 or not a.view("i8").any()):
            return float(lo)
    return None


def _row_alone(v):
    return v.full() if type(v) is Outer and v.col is None else v


def grid_shape(point: Point) -> tuple:
    """(rows, columns) of a grid point: the longest first and second axes of its fields (1 for numbers)."""
    shapes = [getattr(getattr(point, f.name), "shape", ()) for f in dataclasses.fields(point)]
    return (max((s[0] for s in shapes if len(s) > 1), default=1), max((s[1] for s in shapes if len(s) > 1), default=1))


def _rows_cols(block) -> tuple:
    """A block as (rows, columns): a slice of rows spans every column."""
    return (block, _ALL) if type(block) is slice else block


_ALL = slice(None)


def _cuttable(v, grid) -> bool:
    shape = getattr(v, "shape", ())
    return len(shape) > 1 and (shape[0] == grid[0] > 1 or shape[1] == grid[1] > 1)


def _cut(v, block, grid):
    """`v` on a block (rows, columns) of a grid of `grid` (rows, columns): each axis of a 2-d array that spans
    the grid's axis is cut; numbers, rows of one column and columns of one row stay as they are."""
    shape = getattr(v, "shape", ())
    if len(shape) < 2:
        return v
    rows = shape[0] == grid[0] > 1
    cols = shape[1] == grid[1] > 1
    if rows and cols:
        return v[block]
    if rows:
        return v[block[0]]
    if cols:
        return v[:, block[1]]
    return v


def _op_values(o: Op) -> list:
    """Op o's values: repeat, stretch, its kernels' costs and shape fields."""
    values = [o.repeat, o.stretch]
    for k in o.kernels:
        values.extend(_values_of(k))
    return values


def _is_grid(v, grid) -> bool:
    """An array that spans both axes of the grid (a column or a row spans one)."""
    shape = getattr(v, "shape", ())
    return len(shape) > 1 and shape[0] == grid[0] > 1 and shape[1] == grid[1] > 1
