"""Timing one step: each op on the hardware, equal ops timed once, graphs remembered for the next step."""


from __future__ import annotations

import dataclasses
import math
import operator
from typing import TYPE_CHECKING

from rubinperf.kernels.cost import KERNEL_SHAPE_FIELDS
from rubinperf.mathops import ssum
from rubinperf.roofline import KernelTime, kernel_time, two_batch_time
from rubinperf.specs.layout import Layout
from rubinperf.specs.model import Model
from rubinperf.step.graph import Op, build_step
from rubinperf.step.point import Point
from rubinperf.step.result import OpTime, StepResult, _is_array

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


def op_time(op: Op, hw: Platform, launch: str = "graph") -> KernelTime:
    """An op's kernels run one after another: their times add (each term separately)."""
    return sum(kernel_time(k, hw, die_local_weights=op.die_local_weights, launch=launch) for k in op.kernels)


def step(model: Model, hw: Platform, layout: Layout, point: Point) -> StepResult:
    """Build the step's op graph (or reuse the same graph built before) and time every op on `hw`; a prefill step of
    a stack that overlaps two micro-batches' EP exchanges with each other's compute, as two_micro_batches."""
    ops = op_graph(model, layout, point, hw.gpus_per_tray)
    if splits_in_two(hw, point, ops):
        return StepResult(model, hw, layout, point, two_micro_batches(model, hw, layout, point))
    return StepResult(model, hw, layout, point, time_ops(ops, hw))


def splits_in_two(hw: Platform, point: Point, ops: list[Op]) -> bool:
    """A prefill step on a stack with two-micro-batch overlap (prefill_two_batch_overlap), over more new tokens per
    rank than its threshold (two_batch_min_tokens), whose graph has EP exchanges of their own (DeepEP's dispatch and
    combine; a fused MoE kernel overlaps its exchange inside)."""
    if point.phase != "prefill" or not hw.prefill_two_batch_overlap or not any(o.exchange for o in ops):
        return False
    tokens = point.new_tokens
    if _is_array(tokens):
        import numpy as np

        return bool(np.all(tokens > hw.two_batch_min_tokens))
    try:
        return float(tokens) > hw.two_batch_min_tokens
    except TypeError:   # a symbol: the stack splits (explain's formulas)
        return True


def two_micro_batches(model: Model, hw: Platform, layout: Layout, point: Point) -> list[OpTime]:
    """The step as two micro-batches of half the sequences and new tokens each: every GPU op of the half-size graph
    twice (repeat x 2: the split's own cost), the exchanges' time scaled to what of it shows past the other half's
    compute (roofline.two_batch_time), so the rows still add to the GPU time; host ops once."""
    half = dataclasses.replace(point, batch=point.batch / 2, new_tokens=point.new_tokens / 2)
    timed = time_ops(op_graph(model, layout, half, hw.gpus_per_tray), hw)
    gpu = [o for o in timed if o.op.part != "cpu"]
    compute = 2 * ssum(o.expected_s for o in gpu if not o.op.exchange)
    exchange = 2 * ssum(o.expected_s for o in gpu if o.op.exchange)
    layers = max(float(o.op.repeat) for o in gpu if o.op.exchange)
    shown = (two_batch_time(compute, exchange, layers, hw) - compute) / exchange
    out = []
    for o in timed:
        if o.op.part == "cpu":
            out.append(o)
            continue
        stretch = o.op.stretch * shown if o.op.exchange else o.op.stretch
        out.append(OpTime(dataclasses.replace(o.op, repeat=o.op.repeat * 2, stretch=stretch), o.time))
    return out


def time_ops(ops: list[Op], hw: Platform, firsts: list[int] | None = None) -> list[OpTime]:
    """OpTime of each op; an op whose kernels equal an earlier op's (the same GEMM in layers of another
    kind) takes that op's KernelTime: op_time is a pure function of the kernels, so it is the same.
    `firsts`: first_equal_ops(ops), where the caller keeps it."""
    if firsts is None:
        hit = _FIRST_EQUAL.get(id(ops))
        if hit is not None and hit[0] is ops:   # a graph op_graph keeps: found once, and its ops' times kept for the
            return timed_ops(ops, hw, hit[1], _kept_times(hw), hit[2])   # next steps (times of numbers only)
        firsts = first_equal_ops(ops)
    return timed_ops(ops, hw, firsts)


def timed_ops(ops: list[Op], hw: Platform, firsts: list[int], kept: dict | None = None, keys: list | None = None,
              any_time: bool = False) -> list[OpTime]:
    """time_ops(ops, hw, firsts), where an op equal to one timed before on `hw` takes that op's time: `kept`, the times
    kept for the rack ({_op_key: [(op, KernelTime)]}, _op_time_kept), None for none; `keys`, each op's _op_key where
    the caller has them; `any_time`: times over arrays kept too (a grid's once-timed ops), else times of numbers
    only."""
    times: list = []
    for n, first in enumerate(firsts):
        if first != n:
            times.append(times[first])
        elif kept is None:
            times.append(op_time(ops[n], hw))
        else:
            key = _op_key(ops[n]) if keys is None else keys[n]
            times.append(_op_time_kept(ops[n], hw, kept, key, any_time))
    return [OpTime(o, t) for o, t in zip(ops, times)]


# The times of the ops of the graphs op_graph keeps, timed on each rack (by its identity, the rack kept beside them so
# that its id is not reused while they live), by _op_key: [(op, its KernelTime)], for an equal op of a later step on
# that rack (the same kernels, bit for bit, and weight placement: op_time is a pure function of them and the rack; a
# validate's points time the same GEMMs, norms and collectives at the same rows again and again), times of numbers
# only, at most STEP_TIMES_KEPT ops in all. Inside mathops.held_roundings the roundings of arrays differ: its own
# entries.
_STEP_TIMES: dict = {}
STEP_TIMES_KEPT = 8192
STEP_RACKS_KEPT = 64   # (racks made by --set or a sensitivity's perturbations: each a rack of its own)


def _kept_times(hw) -> dict:
    """The kept op times of rack `hw` (a new entry, all others dropped past STEP_RACKS_KEPT racks or STEP_TIMES_KEPT
    ops)."""
    from rubinperf import mathops

    key = (id(hw), mathops._HELD_ROWS)
    entry = _STEP_TIMES.get(key)
    if entry is not None and entry[0] is hw:
        return entry[1]
    if len(_STEP_TIMES) >= STEP_RACKS_KEPT or sum(len(e[1]) for e in _STEP_TIMES.values()) > STEP_TIMES_KEPT:
        _STEP_TIMES.clear()
    _STEP_TIMES[key] = entry = (hw, {})
    return entry[1]


def _op_time_kept(o: Op, hw, kept: dict, key, any_time: bool = False) -> KernelTime:
    """op_time(o, hw), or the time of an equal op timed before on `hw` (kept: the rack's kept times; key: _op_key(o));
    a new time kept where it is of numbers only, or `any_time`."""
    if key is None:
        return op_time(o, hw)
    bucket = kept.get(key)
    if bucket is not None:
        for x, t in bucket:
            if _same_kernels(x, o):
                return t
    t = op_time(o, hw)
    # (a step's times over arrays stay with their step: a validate's engines kept 21 MB of them)
    if any_time or _SCALAR_TYPES.issuperset(map(type, t.__dict__.values())):
        if len(kept) >= STEP_TIMES_KEPT:
            kept.clear()
        kept.setdefault(key, []).append((o, t))
    return t


def first_equal_ops(ops, among=None, keys: list | None = None) -> list[int]:
    """For each op the index of the first op (of those in `among`, default all) with the same kernels,
    bit for bit, and the same weight placement; ops holding symbols are their own. `keys`, a list as long as `ops`,
    receives each op's _op_key."""
    buckets: dict = {}
    out = list(range(len(ops)))
    for n in (range(len(ops)) if among is None else among):
        o = ops[n]
        key = _op_key(o)
        if keys is not None:
            keys[n] = key
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
        hit = _KERNEL_KEYS.get(id(k))
        if hit is not None and hit[0] is k:   # (a kernel of several ops or graphs: kept_kernels gives equal calls one)
            values = hit[1]
        else:
            values = _values_of(k)
            if not _SCALAR_TYPES.issuperset(map(type, values)):   # arrays: a summary of each (numbers as they are)
                values = tuple([v if type(v) in _SCALAR_TYPES else _array_key(v) for v in values])
                if len(_KERNEL_KEYS) >= KERNEL_KEYS_KEPT:
                    _KERNEL_KEYS.clear()
                _KERNEL_KEYS[id(k)] = (k, values)   # (the kernel kept beside its id, so that the id is not reused)
        if _NO_KEY in values:
            return None
        parts.append(values)
    return tuple(parts)


# The summaries _op_key made of kernels that hold arrays: id(kernel) -> (kernel, its values' summary), at most
# KERNEL_KEYS_KEPT, until step.grid.forget_graphs.
_KERNEL_KEYS: dict = {}
KERNEL_KEYS_KEPT = 512


def _array_key(v):
    """A numpy array's shape, type and first and last values, or _NO_KEY (a symbol)."""
    if type(v).__module__ != "numpy":
        return _NO_KEY
    return (v.shape, v.dtype.str, v.item(0), v.item(-1)) if v.size else (v.shape, v.dtype.str)


_SCALAR_TYPES = frozenset((float, int, bool, type(None)))
_NO_KEY = object()


def _values_of(k) -> tuple:
    """A kernel's cost values, then its shape fields."""
    return (*k.cost.__dict__.values(), *_shape_fields_of(k.__dict__))


_shape_fields_of = operator.itemgetter(*KERNEL_SHAPE_FIELDS)   # a Kernel's __dict__ -> its shape fields, in order


# ---------------------------------------------------------------- reusing graphs

# The graph depends on the model, the layout, the point and the tray size only (not on the rest of the
# hardware or the stack): a sweep that runs the same engine on another rack or stack (compare's
# silicon/software split) builds it once. Graphs over small arrays only (a serving sweep's batch grid);
# a grid sweep builds its graph itself, the kernels that read the context a block at a time (GridSteps).
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
        _FIRST_EQUAL.pop(id(_GRAPHS.pop(next(iter(_GRAPHS)))[1]), None)
    _GRAPHS[key] = (model, ops)   # the model is kept, so its id is not reused while the entry lives
    keys = [None] * len(ops)
    _FIRST_EQUAL[id(ops)] = (ops, first_equal_ops(ops, keys=keys), keys)   # which ops time_ops times (the list kept
    # beside its id), and their keys
    return ops


_FIRST_EQUAL: dict = {}   # id(graph) -> (graph, first_equal_ops(graph), each op's _op_key) for the graphs in _GRAPHS


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
        elif type(v) is tuple and all(type(x) in (int, float, str) for x in v):   # the stack's all-reduce lists
            parts.append((f.name, "tuple", v))
        else:
            return None
    try:
        key = (id(model), layout, gpus_per_tray, tuple(parts))
        hash(key)
    except TypeError:
        return None
    return key


def _same_kernels(a: Op, b: Op) -> bool:
    """Ops that op_time times alike: the same kernels (bit for bit) and weight placement."""
    if a.die_local_weights != b.die_local_weights or len(a.kernels) != len(b.kernels):
        return False
    return all(map(_same_kernel, a.kernels, b.kernels))


def _same_kernel(x, y) -> bool:
    """Kernels that kernel_time times alike: the same family, costs and shape fields, bit for bit."""
    if x is y:   # (one kernel: kernels.cost.kept_kernels gives equal calls the same)
        return True
    if x.family != y.family:
        return False
    u, v = _values_of(x), _values_of(y)
    if _SCALAR_TYPES.issuperset(map(type, u)):
        # numbers: equal, and equal as written: of one type each (1 is not 1.0, nor True), a zero of one sign (-0.0
        # is not 0.0); equal numbers of one type are written alike, and a nan is equal in the tuples only as the
        # same object
        return u == v and all(map(_same_number, u, v))
    return all(map(_same_value, u, v))


def _same_number(a, b) -> bool:
    """Two equal numbers (or Nones) written alike: the same object, or of one type and, for a zero float, one sign."""
    return a is b or type(a) is type(b) and (a != 0 or type(a) is not float
                                             or math.copysign(1.0, a) == math.copysign(1.0, b))


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
            import numpy as np  # the bits compared in place (a grid's arrays are large)

            return bool(np.array_equal(u.view(np.uint64), v.view(np.uint64)))
        return u.tobytes() == v.tobytes()   # (faster for a small array)
    return u == v   # ints, None, strings


