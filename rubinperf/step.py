"""Aggregation of one step: per-op times summed over ops and layers.

Expert imbalance: an expert-parallel MoE op's time is stretched by 1 / balancedness,
since the busiest rank sets the pace (published-results.md).

Overlap rule: inside one op (one fused kernel) compute, memory traffic and link traffic
overlap, so the roofline takes their max (MegaMoE's EP dispatch and combine hide under
its expert GEMMs, up to the larger of the two). Different ops run one after another, so
their times add; a TP all-reduce is its own op and adds. The speed-of-light step is the
sum of per-op SOL times of the GPU work.

Host rule. The host's work for a step is the scheduler's (its step, input preparation,
sampling, admission: `host_s`) and the DP synchronisation (`sync_s`). The scheduler runs one
step ahead of the GPU (async scheduling), all but the stack's `host_exposed_share` of it; the
DP synchronisation is a host all-reduce every rank waits for before it launches the step (a
barrier), all of it on the critical path:

    exposed = sync + host_exposed_share x host
    step    = max(GPU + exposed, host + sync)

so a step whose host work exceeds the GPU's stays host-bound (the host's loop is the step),
and DP sync at DEP32 shows in full, as the October post measured it (10.8 ms before its fix,
an unoptimised DEP32 step slower than DEP16 with less GPU time; 1.5 ms after).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property

from rubinperf.cost import BOUNDS, KERNEL_SHAPE_FIELDS, Cost, KernelTime
from rubinperf.graph import Op, Point, build_step
from rubinperf.layout import Layout
from rubinperf.mathops import sadd, smax, sscale, ssum
from rubinperf.roofline import kernel_time, split_kv_reduction
from rubinperf.specs.model import Model


@dataclass(frozen=True)
class OpTime:
    op: Op
    time: KernelTime        # one occurrence

    @cached_property
    def expected_s(self):
        return sscale(self.time.expected_s, self.op.repeat, self.op.stretch)

    @cached_property
    def sol_s(self):
        return sscale(self.time.sol_s, self.op.repeat, self.op.stretch)


@dataclass(frozen=True)
class StepResult:
    model: Model
    hw: object
    layout: Layout
    point: Point
    ops: list[OpTime]
    extra_cpu_s: object = 0.0   # host work a caller adds to the step (serving: admitting new requests)

    @cached_property
    def gpu_s(self):
        return ssum(o.expected_s for o in self.ops if o.op.part != "cpu")

    @cached_property
    def host_s(self):
        """The scheduler's host work (its cpu ops but the DP sync, plus extra_cpu_s): overlapped with the GPU's
        but for the stack's host_exposed_share."""
        cpu = ssum(o.expected_s for o in self.ops if o.op.part == "cpu" and not o.op.barrier)
        extra = self.extra_cpu_s
        return cpu if type(extra) in (int, float) and extra == 0 else cpu + extra

    @cached_property
    def sync_s(self):
        """The DP synchronisation (host barrier ops): on the critical path."""
        return ssum(o.expected_s for o in self.ops if o.op.part == "cpu" and o.op.barrier)

    @cached_property
    def _host_rule(self):
        return host_rule(self.gpu_s, self.host_s, self.sync_s, self.hw.host_exposed_share)

    @property
    def cpu_s(self):
        """All of the host's work for the step: the scheduler's and the DP sync."""
        return self._host_rule[0]

    @property
    def exposed_s(self):
        """The host work the step waits for: sync + host_exposed_share x the scheduler's work."""
        return self._host_rule[1]

    @property
    def expected_s(self):
        return self._host_rule[2]

    @property
    def sol_s(self):
        return ssum(o.sol_s for o in self.ops if o.op.part != "cpu")

    @property
    def bound(self):
        """What limits the step: cpu when the host's work exceeds GPU time plus its exposed part (a
        host-bound step), or when the exposed host work is larger than the share of GPU time any one
        term binds; else the term (compute, memory, parallelism, comm, latency) that binds the largest
        share of GPU time (ties: the first in that order). A name for a scalar point; for array points
        (sweeps) an array of names, element by element by the same rule."""
        if not _is_array(self.expected_s):
            exposed = float(self.exposed_s)
            if float(self.cpu_s) > float(self.gpu_s) + exposed:
                return "cpu"
            shares = dict.fromkeys(BOUNDS, 0.0)
            present = set()
            for o in self.ops:
                if o.op.part != "cpu":
                    shares[o.time.bound] += float(o.expected_s)
                    present.add(o.time.bound)
            top = max((b for b in BOUNDS if b in present), key=shares.get)
            return "cpu" if exposed > shares[top] else top
        return self._bound_array()

    def _bound_array(self):
        import numpy as np

        shape = np.shape(self.expected_s)
        kinds = np.arange(len(BOUNDS)).reshape((-1,) + (1,) * len(shape))
        like = np.empty(shape)
        shares = np.zeros((len(BOUNDS),) + shape)
        for o in self.ops:
            if o.op.part == "cpu":
                continue
            t = o.time
            terms = np.broadcast_arrays(*(np.asarray(getattr(t, f"{b}_s"), dtype=float) for b in BOUNDS), like)[:-1]
            which = np.argmax(np.stack(terms), axis=0)    # the op's bound: its largest term (first in BOUNDS on a tie)
            shares += np.where(which == kinds, np.asarray(o.expected_s, dtype=float), 0.0)
        names = np.array(BOUNDS, dtype=object)[np.argmax(shares, axis=0)]
        zero = np.zeros(shape)
        exposed = np.asarray(self.exposed_s, dtype=float) + zero
        cpu = np.asarray(self.cpu_s, dtype=float) + zero > np.asarray(self.gpu_s, dtype=float) + exposed
        return np.where(cpu | (exposed > np.max(shares, axis=0)), "cpu", names)

    @property
    def tokens_per_step(self):
        """Tokens one engine instance emits (decode: accepted) or ingests (prefill) per step, over all its ranks."""
        return tokens_per_step(self.model, self.layout, self.point)

    @property
    def tokens_per_s_per_gpu(self):
        return tokens_per_s_per_gpu(self.model, self.layout, self.point, self.expected_s)

    @property
    def tokens_per_s_per_user(self):
        """Decode: accepted tokens per verify step over the step time. Prefill: one sequence's new tokens per second."""
        return tokens_per_s_per_user(self.model, self.point, self.expected_s)

    def at(self, index) -> "StepResult":
        """The scalar step at one element of an array point (a swept batch): every op's cost and time
        taken at that element, so nothing is rebuilt or re-timed; equal to step() at that point."""
        import numpy as np

        shape = np.shape(self.expected_s)

        def pick(x):
            if not _is_array(x):
                return x
            return float(x[index] if x.shape == shape else np.broadcast_to(x, shape)[index])

        def op_at(o: OpTime) -> OpTime:
            kernels = tuple(dataclasses.replace(k, cost=Cost(**{f: pick(v) for f, v in k.cost.__dict__.items()}),
                                                **{f: pick(getattr(k, f)) for f in KERNEL_SHAPE_FIELDS})
                            for k in o.op.kernels)
            op = dataclasses.replace(o.op, kernels=kernels, repeat=pick(o.op.repeat), stretch=pick(o.op.stretch))
            return OpTime(op, KernelTime(**{f: pick(v) for f, v in o.time.__dict__.items()}))

        point = dataclasses.replace(self.point, **{f.name: pick(getattr(self.point, f.name))
                                                   for f in dataclasses.fields(self.point)})
        return StepResult(self.model, self.hw, self.layout, point, [op_at(o) for o in self.ops], pick(self.extra_cpu_s))

    def op_kernels(self, op: Op):
        """Kernels one occurrence of `op` launches on this GPU: the graph's (Op.kernel_count), plus the reduction
        kernel a split-KV decode attention kernel enqueues where it splits (roofline.split_kv_reduction)."""
        extra = [k.cost.launches * split_kv_reduction(k, self.hw) for k in op.kernels if k.split_kv_groups is not None]
        return op.kernel_count + sum(extra) if extra else op.kernel_count

    def kernels_per_step(self, part: str | None = None):
        """Kernels one step launches on a rank (GPU parts; `part` one of them), summed over ops, layers and passes."""
        return ssum(self.op_kernels(o.op) * o.op.repeat for o in self.ops
                    if o.op.part != "cpu" and (part is None or o.op.part == part))

    def part_s(self, part: str):
        return ssum(o.expected_s for o in self.ops if o.op.part == part)

    def total_cost(self) -> Cost:
        return sum((o.op.cost * o.op.repeat for o in self.ops), Cost())

    def by_name(self) -> dict[str, dict]:
        """Breakdown rows: ops of one name summed over layers (and passes)."""
        rows: dict[str, dict] = {}
        for o in self.ops:
            op, t = o.op, o.time
            name, repeat, stretch, cost = op.name, op.repeat, op.stretch, op.cost
            r = rows.get(name)
            if r is None:
                r = rows[name] = {"kernel": name, "part": op.part, "expected_s": 0.0, "sol_s": 0.0, "flops": 0.0,
                                  "bytes": 0.0, "terms": {}, "scale_out_s": 0.0, "scale_out_bytes": 0.0, "kernels": 0.0}
            r["kernels"] = r["kernels"] + self.op_kernels(op) * repeat
            r["expected_s"] = r["expected_s"] + o.expected_s
            r["scale_out_s"] = r["scale_out_s"] + t.scale_out_s * repeat * stretch
            r["scale_out_bytes"] = r["scale_out_bytes"] + cost.scale_out_bytes * repeat
            r["sol_s"] = r["sol_s"] + o.sol_s
            r["flops"] = r["flops"] + cost.flops * repeat
            r["bytes"] = r["bytes"] + cost.bytes * repeat
            terms, times = r["terms"], t.__dict__
            for term, field in _TERMS:   # KernelTime.terms
                terms[term] = terms.get(term, 0.0) + times[field] * repeat * stretch
        return rows


def host_rule(gpu_s, host_s, sync_s, exposed_share):
    """(all host work, its exposed part, the step) of a step with GPU time gpu_s, scheduler work host_s and
    DP sync sync_s: exposed = sync + share x host, step = max(GPU + exposed, host + sync). StepResult and
    GridSteps.metrics both call it, so a grid's steps are bit for bit the scalar ones."""
    cpu = sadd(host_s, sync_s)
    exposed = sadd(sync_s, sscale(host_s, exposed_share))
    return cpu, exposed, smax(sadd(gpu_s, exposed), cpu)


def tokens_per_step(m: Model, lay: Layout, p: Point):
    """Tokens one engine instance emits (decode: accepted) or ingests (prefill) per step, over all its ranks."""
    per_rank_group = p.batch * p.accepted(m) if p.phase == "decode" else p.new_tokens
    return per_rank_group * lay.dp


def tokens_per_s_per_gpu(m: Model, lay: Layout, p: Point, step_s):
    return tokens_per_step(m, lay, p) / step_s / lay.ranks


def tokens_per_s_per_user(m: Model, p: Point, step_s):
    """Decode: accepted tokens per verify step over the step time. Prefill: one sequence's new tokens per second."""
    per_user = p.accepted(m) if p.phase == "decode" else p.new_tokens / p.batch
    return per_user / step_s


_TERMS = tuple((b, f"{b}_s") for b in BOUNDS)


def _is_array(x) -> bool:
    """A numpy array of more than a scalar (numpy is not imported for scalar points)."""
    return getattr(x, "ndim", 0) > 0


def op_time(op: Op, hw, launch: str = "graph") -> KernelTime:
    """An op's kernels run one after another: their times add (each term separately)."""
    return sum(kernel_time(k, hw, die_local_weights=op.die_local_weights, launch=launch) for k in op.kernels)


def step(model: Model, hw, layout: Layout, point: Point) -> StepResult:
    """Build the step's op graph (or reuse the same graph built before) and time every op on `hw`."""
    ops = op_graph(model, layout, point, hw.gpus_per_tray)
    return StepResult(model, hw, layout, point, time_ops(ops, hw))


def time_ops(ops: list[Op], hw, firsts: list[int] | None = None) -> list[OpTime]:
    """OpTime of each op; an op whose kernels equal an earlier op's (the same GEMM in layers of another
    kind) takes that op's KernelTime: op_time is a pure function of the kernels, so it is the same.
    `firsts`: _firsts(ops), where the caller keeps it."""
    if firsts is None:
        hit = _FIRSTS.get(id(ops))
        firsts = hit[1] if hit is not None and hit[0] is ops else _firsts(ops)   # a graph op_graph keeps: found once
    times: list = []
    for n, first in enumerate(firsts):
        times.append(op_time(ops[n], hw) if first == n else times[first])
    return [OpTime(o, t) for o, t in zip(ops, times)]


def _firsts(ops, among=None) -> list[int]:
    """For each op the index of the first op (of those in `among`, default all) with the same kernels,
    bit for bit, and the same weight placement; ops holding symbols are their own."""
    buckets: dict = {}
    out = list(range(len(ops)))
    for n in (range(len(ops)) if among is None else among):
        o = ops[n]
        key = _op_key(o)
        if key is None:
            continue
        bucket = buckets.setdefault(key, [])
        for j in bucket:
            if _same_kernels(ops[j], o):
                out[n] = j
                break
        else:
            bucket.append(n)
    return out


def _op_key(o: Op):
    """A hashable summary of an op's kernels (equal kernels have equal keys), or None (symbols)."""
    parts = [o.die_local_weights]
    for k in o.kernels:
        parts.append(k.family)
        values = _values_of(k)
        if not _SCALAR_TYPES.issuperset(map(type, values)):   # arrays: a summary of each (numbers as they are)
            values = tuple(v if type(v) in _SCALAR_TYPES else _array_key(v) for v in values)
            if _NO_KEY in values:
                return None
        parts.append(values)
    return tuple(parts)


def _array_key(v):
    """A numpy array's shape, type and first and last values, or _NO_KEY (a symbol)."""
    if type(v).__module__ != "numpy":
        return _NO_KEY
    return (v.shape, v.dtype.str, v.item(0), v.item(-1)) if v.size else (v.shape, v.dtype.str)


_SCALAR_TYPES = frozenset((float, int, type(None)))
_NO_KEY = object()


def _values_of(k) -> tuple:
    """A kernel's cost values, then its shape fields."""
    d = k.__dict__
    return (*k.cost.__dict__.values(), *[d[f] for f in KERNEL_SHAPE_FIELDS])


# ---------------------------------------------------------------- reusing graphs

# The graph depends on the model, the layout, the point and the tray size only (not on the rest of the
# hardware or the stack): a sweep that runs the same engine on another rack or stack (compare's
# silicon/software split) builds it once. Graphs over small arrays only (a serving sweep's batch grid);
# a grid sweep builds its one large graph itself (GridSteps).
_GRAPHS: dict = {}
GRAPH_CACHE_SIZE = 64
GRAPH_CACHE_MAX_POINTS = 1 << 14


def op_graph(model: Model, layout: Layout, point: Point, gpus_per_tray=None) -> list[Op]:
    """build_step, remembered for the last GRAPH_CACHE_SIZE (model, layout, point, tray) of numbers or small arrays."""
    key = _graph_key(model, layout, point, gpus_per_tray)
    if key is None:
        return build_step(model, layout, point, gpus_per_tray=gpus_per_tray)
    hit = _GRAPHS.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    ops = build_step(model, layout, point, gpus_per_tray=gpus_per_tray)
    if len(_GRAPHS) >= GRAPH_CACHE_SIZE:
        _FIRSTS.pop(id(_GRAPHS.pop(next(iter(_GRAPHS)))[1]), None)
    _GRAPHS[key] = (model, ops)   # the model is kept, so its id is not reused while the entry lives
    _FIRSTS[id(ops)] = (ops, _firsts(ops))   # which ops time_ops times (the list kept beside its id)
    return ops


_FIRSTS: dict = {}   # id(graph) -> (graph, _firsts(graph)) for the graphs in _GRAPHS


def forget_graphs() -> None:
    """Drop every remembered graph (op_graph's and grid_graph's): the next step or grid builds its own."""
    _GRAPHS.clear()
    _FIRSTS.clear()
    _GRID_GRAPHS.clear()


def _graph_key(model, layout, point, gpus_per_tray):
    """A hashable key of the graph's inputs, or None (symbols, large arrays, anything unhashable)."""
    parts = []
    for f in dataclasses.fields(point):
        v = getattr(point, f.name)
        if _is_array(v):
            if v.size > GRAPH_CACHE_MAX_POINTS or v.dtype.kind != "f":
                return None
            parts.append((f.name, v.shape, v.tobytes()))
        elif v is None or type(v) in (int, float, str, bool):
            parts.append((f.name, type(v).__name__, v))
        elif type(v).__module__ == "numpy" and getattr(v, "ndim", 1) == 0:
            parts.append((f.name, "float", float(v)))
        else:
            return None
    try:
        key = (id(model), layout, gpus_per_tray, tuple(parts))
        hash(key)
    except TypeError:
        return None
    return key


# ---------------------------------------------------------------- grids (batch x context) in chunks


@dataclass(frozen=True)
class GridGraph:
    """What a grid's steps share on every rack of one tray size: the graph over the whole grid, which ops
    read the grid (timed per block) and which not (timed once), the equal ops among each, and the cutters
    of ops to blocks of rows."""

    ops: list[Op]
    height: int            # rows of the grid (its batch axis)
    once: list[int]        # ops that read no grid array
    once_firsts: list[int]   # _firsts of those ops
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
    return GridGraph(ops, height, once, _firsts([ops[n] for n in once]), _firsts(ops, among=per_block),
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

    def __init__(self, model: Model, hw, layout: Layout, point: Point):
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
        step_s = host_rule(gpu_s, host_s, sync_s, hw.host_exposed_share)[2]
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


def _same_kernels(a: Op, b: Op) -> bool:
    """Ops that op_time times alike: the same kernels (bit for bit) and weight placement."""
    if a.die_local_weights != b.die_local_weights or len(a.kernels) != len(b.kernels):
        return False
    for x, y in zip(a.kernels, b.kernels):
        if x.family != y.family:
            return False
        u, v = _values_of(x), _values_of(y)
        if _SCALAR_TYPES.issuperset(map(type, u)):
            # numbers: equal, and equal as written (repr tells -0.0 from 0.0 and 1 from 1.0; a nan is equal
            # in the tuples only as the same object)
            if not (u == v and repr(u) == repr(v)):
                return False
        elif not all(map(_same_value, u, v)):
            return False
    return True


def _same_value(u, v) -> bool:
    """Bit for bit: -0.0 is not 0.0; numpy arrays of the same shape, type and bytes."""
    if u is v:
        return True
    t = type(u)
    if t is not type(v):
        return False
    if t is float:
        return u == v and (u != 0 or math.copysign(1.0, u) == math.copysign(1.0, v))
    if t.__module__ == "numpy":   # arrays and numpy scalars
        if u.shape != v.shape or u.dtype != v.dtype:
            return False
        if u.size > 4096 and u.dtype.itemsize == 8 and u.flags.c_contiguous and v.flags.c_contiguous:
            import numpy as np   # the bits compared in place (a grid's arrays are large)

            return bool(np.array_equal(u.view(np.uint64), v.view(np.uint64)))
        return u.tobytes() == v.tobytes()   # (faster for a small array)
    return u == v   # ints, None, strings


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
