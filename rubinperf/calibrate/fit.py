"""Fit the few physical parameters of the kernel model to measurements (numpy only, no torch).

Kernels: every row is the Kernel the model itself times (`rows.row_kernel`), launched as
the row says (`graph`, `eager`, `stream` or `cold`), and its expected time is `roofline.kernel_time` on the
hardware with trial parameters. Three parameters are read off probes, not fitted:

- kernel_launch_graph_s / kernel_launch_stream_s: an empty kernel in a graph / behind others in a stream
  (do_bench's figure, mode eager); host_dispatch_s: the host's time to issue a call with the GPU busy, the
  median `host_s` of the rows whose kernels are no library (tensor-core) calls;
- hbm_latency_s: one dependent load of a pointer chase over a buffer far larger than L2.

The rest (FIT_FIELDS, and split_k_max among a few integers) minimise the mean absolute log
error, mean |ln(measured / expected)|, by coordinate search on a shrinking logarithmic grid
from a fixed start (refitting reproduces a calibration). Absolute rather than squared error:
a few rows far off must not set the values for all (``loss="sq"`` gives the other fit).

`cross_validate` fits on one half of the shape families and predicts the other (two folds of whole shape
families: a GEMM's weight shape at every m, an attention's heads at every batch and length), so the error it reports
is on shapes the fit did not see, not on other sizes of shapes it fitted.

Collectives: per row, time = collective_floor_s + hops x nvlink_latency_s
+ bytes_sent / (nvlink_bw x nvlink_efficiency), with hops and bytes sent from
`rubinperf.kernels.collectives`. That is linear in (floor, latency, 1/efficiency), so it
is a non-negative least-squares fit of relative errors.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import types
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rubinperf.calibrate.plan import MODES, family_label
from rubinperf.calibrate.rows import PROBES, modelled, row_kernels, row_mode
from rubinperf.errors import SpecError
from rubinperf.kernels.cost import PEAKS, Kernel, concatenated, group_key, stacked
from rubinperf.roofline import GROUPED, MMA_PRECISION_EFFICIENCY, TENSOR_CORE, efficiency_field, kernel_time

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

FIT_FIELDS = ("hbm_stream_efficiency", "hbm_latency_s", "stream_bytes_in_flight_per_sm", "mma_prologue_cycles",
              "mma_compute_efficiency", "mma_bytes_in_flight_per_sm", "grouped_compute_efficiency",
              "grouped_hbm_efficiency", "attention_compute_efficiency", "kernel_launch_cold_s", "tensor_core_dispatch_s")
DISCRETE_FIELDS = {"split_k_max": (1, 2, 4, 8, 16, 32, 64), "split_k_min_depth": (256, 512, 1024, 2048, 4096),
                   "wave_quantization": (0.0, 0.25, 0.5, 0.75, 1.0)}
PROBE_FIELDS = ("kernel_launch_graph_s", "kernel_launch_stream_s", "host_dispatch_s")
# A dense GEMM's rate per operand precision (roofline.MMA_PRECISION_EFFICIENCY) and a grouped kernel's
# (roofline.GROUPED_PRECISION_EFFICIENCY): fitted when asked for (fit_kernels(fields=FIT_FIELDS + PRECISION_FIELDS))
# on rows of kernels of that precision. One not fitted on its own moves with the rate those kernels ran at before
# rates per precision existed (TIED_TO): a dense GEMM's with mma_compute_efficiency, the grouped FP4 x FP4 rate with
# the grouped rate, the grouped W4A16 rate (experts dequantised in the main loop) with mma_compute_efficiency.
TIED_TO = {**{f: "mma_compute_efficiency" for f in MMA_PRECISION_EFFICIENCY.values()},
           "grouped_fp4_compute_efficiency": "grouped_compute_efficiency",
           "grouped_w4a16_compute_efficiency": "mma_compute_efficiency"}
PRECISION_FIELDS = tuple(TIED_TO)
KERNEL_FIELDS = PROBE_FIELDS + FIT_FIELDS + PRECISION_FIELDS + tuple(DISCRETE_FIELDS)
COLLECTIVE_FIELDS = ("collective_floor_s", "nvlink_latency_s", "nvlink_efficiency")
BOUNDS = {"mma_prologue_cycles": (0.0, 1e6), "collective_floor_s": (0.0, 1e-3), "nvlink_latency_s": (0.0, 1e-3),
          "mma_bytes_in_flight_per_sm": (1024.0, None), "stream_bytes_in_flight_per_sm": (1024.0, None),
          "hbm_latency_s": (1e-8, 1e-5), "kernel_launch_cold_s": (1e-7, 1e-3), "tensor_core_dispatch_s": (0.0, 1e-3)}
EFF_BOUNDS = (0.01, 1.0)
START = {"mma_prologue_cycles": 4000.0, "mma_bytes_in_flight_per_sm": 65536.0, "stream_bytes_in_flight_per_sm": 16384.0,
         "hbm_latency_s": 5e-7, "kernel_launch_cold_s": 1e-5, "tensor_core_dispatch_s": 1e-5}
START_EFFICIENCY = 0.7
# Columns of a measured row that say how the call ran and what it took, not which call it was (row_kernels reads none).
MEASURED_COLUMNS = frozenset({"measured_s", "spread", "samples", "host_s", "check_rel_err", "source"})
CHASE_MIN_BYTES = 2 ** 30  # a chase over at least 1 GiB misses a 50-60 MB L2


class Stacked:
    """The rows' kernels grouped by structure, each group one Kernel whose fields are numpy arrays;
    a row's time is the sum of its kernels' times."""

    def __init__(self, rows: list[dict], calls: list | None = None, by_columns: bool = False):
        """`calls`: the rows' call keys (call_key), where known; rows of one call build their kernels once.
        `by_columns`: the kernels built a column at a time (_column_groups: the same groups, bit for bit)."""
        self.n = len(rows)
        if by_columns:
            self.groups = _column_groups(rows, calls or list(map(call_key, rows)))
            return
        groups: dict[tuple, list] = {}
        kernels_of: dict = {}
        for i, (r, call) in enumerate(zip(rows, calls or map(call_key, rows))):
            grouped = kernels_of.get(call)
            if grouped is None:
                grouped = kernels_of[call] = _grouped_kernels(r)
            for key, k in grouped:
                groups.setdefault(key, []).append((i, k))
        self.groups = []
        for key, items in groups.items():
            self.groups.append((np.array([i for i, _ in items]), stacked([k for _, k in items]), key[0]))

    def times(self, hw: Platform, what: str = "expected_s") -> np.ndarray:
        """Each row's time on `hw`. A group's times are kept with the hardware fields its timing read: a later call
        whose hardware has the same values in those fields (a fit moving one field that group does not read) takes
        them again instead of timing the group anew. The timing is a function of the fields it reads, so the result
        is the same as timing every group."""
        return self.grid_times(hw, (), what)

    def grid_times(self, hw: Platform, shape: tuple, what: str = "expected_s") -> np.ndarray:
        """times() where some of `hw`'s fields are numpy arrays of `shape` + (1,) (a grid of values of one field, each
        a column): an array of `shape` + (rows,), each element the times of one grid value, computed as times() does
        for that value alone."""
        out = np.zeros(shape + (self.n,))
        memo = self.__dict__.setdefault("_memo", {})
        for g, (idx, kern, mode) in enumerate(self.groups):
            hit = memo.get((g, what))
            if hit is not None and all(_same(getattr(hw, k), v) for k, v in hit[0].items()):
                values = hit[1]
            else:
                reads = _Reads(hw)
                values = np.asarray(getattr(kernel_time(kern, reads, launch=mode), what), dtype=float)
                if not shape:
                    values = np.broadcast_to(values, idx.shape)
                    memo[(g, what)] = (reads.read, values)
            np.add.at(out, (Ellipsis, idx), np.broadcast_to(values, shape + idx.shape))
        return out


def _grouped_kernels(row: dict) -> tuple:
    """The row's kernels (row_kernels), each with the key of the group it is stacked into: one group per launch,
    family and set of fields given (each a numpy array of the group's values)."""
    out = []
    for k, waits_on_host in row_kernels(row):
        # The call's first kernel is launched as the row says; the library's later kernels start behind it in the
        # same stream (or graph).
        mode = row_mode(row) if waits_on_host or row_mode(row) == "graph" else "eager"
        out.append(((mode, *group_key(k)), k))
    return tuple(out)


# Columns a row's kernels branch on (`row.get(c) or ...`, a yes/no): rows built a column at a time share their values.
BRANCH_COLUMNS = frozenset({"family", "mode", "impl", "dtype", "launches", "touched", "v_head_dim", "causal",
                            "shared_kv"})
POW_FAMILIES = ("moe", "grouped_gemm")   # without `touched`, their kernels raise a column to a power (_column_kernels)
COLUMN_GROUP_MIN = 2   # fewer rows of one structure: built one by one


def _column_groups(rows: list[dict], calls: list) -> list:
    """Stacked's groups, (row indices, stacked Kernel, launch mode) in the order and with the values, bit for bit,
    that stacking each row's kernels (_grouped_kernels, kernels.stacked) gives, built a column at a time: the rows of one
    structure (the same columns, the same value of each column the kernels branch on or that is not a number, the same
    type of each number) go through row_kernels once, each numeric column one numpy array (int64 or float64, as the
    rows' ints and floats), so the kernel functions run their formulas on arrays as the sweep does; a structure of one
    row, or one whose kernels cannot take arrays (a branch on a value), is built row by row. Each kernel's cost and
    numeric shape fields become float64 columns, as stacked() makes them of each row's numbers."""
    structures: dict = {}
    for i, (names, values) in enumerate(calls):
        types = tuple(map(type, values))
        kept = _KEPT_VALUES.get((names, types))
        if kept is None:   # which values name the structure: those not numbers, and those the kernels branch on
            kept = _KEPT_VALUES[(names, types)] = tuple(t not in _NUMBER_TYPES or c in BRANCH_COLUMNS
                                                        for c, t in zip(names, types))
        structures.setdefault((names, types, tuple(itertools.compress(values, kept))), []).append(i)
    # each structure's kernels: (rows' indices, place among a row's kernels, group key, Kernel over those rows)
    by_group: dict = {}
    for (names, types, _), members in structures.items():
        built = None
        if len(members) >= COLUMN_GROUP_MIN:
            built = _column_kernels(rows[members[0]], names, types, [calls[i][1] for i in members])
        if built is None:
            for i in members:
                for j, (key, k) in enumerate(_grouped_kernels(rows[i])):
                    by_group.setdefault(key, []).append((np.array([i]), j, k))
        else:
            at = np.array(members)
            for j, (key, k) in enumerate(built):
                by_group.setdefault(key, []).append((at, j, k))
    # Stacked's order: groups by the first (row, place) of each, each group's items by (row, place)
    first = {key: min((int(at[0]), j) for at, j, _ in parts) for key, parts in by_group.items()}
    out = []
    for key in sorted(by_group, key=first.__getitem__):
        parts = by_group[key]
        rows_at = np.concatenate([at for at, _, _ in parts])
        places = np.concatenate([np.full(len(at), j) for at, j, _ in parts])
        order = np.lexsort((places, rows_at))
        out.append((rows_at[order], concatenated([(len(at), k) for at, _, k in parts], order), key[0]))
    return out


_NUMBER_TYPES = (int, float)
_KEPT_VALUES: dict = {}   # (columns, their values' types) -> which values name a structure (_column_groups)


def _column_kernels(row: dict, names: tuple, types: tuple, values: list):
    """_grouped_kernels of the calls `values` (call_key's values of `names`, of `types`) of one structure, built at once
    on numpy columns (`row` one of them); None where the kernels cannot be built so (a branch on a value) or where an
    array would not give the numbers bit for bit: a MoE row that gives no `touched` takes the expected experts touched,
    a power (kernels.moe.experts_touched), and numpy's vectorised pow differs from libm's in the last bit (in about 2%
    of the powers tried on this project's machine)."""
    if row.get("family") in POW_FAMILIES and not row.get("touched"):
        return None
    columns = dict(row)
    for c, t, column in zip(names, types, zip(*values)):
        if t in _NUMBER_TYPES and c not in BRANCH_COLUMNS:
            if t is int and not all(-INT_COLUMN_BOUND < v < INT_COLUMN_BOUND for v in column):
                return None   # (products of such ints could pass int64's range, where Python's ints do not wrap;
                # below it, an int64 product past 2**53 divided rounds twice where Python's rounds once: the
                # bundled tables, the one caller's rows, are held to the row path bit for bit by
                # tests/calibrate/test_stacked_columns.py)
            columns[c] = np.array(column, dtype=np.int64 if t is int else float)
    try:
        return _grouped_kernels(columns)
    except (TypeError, ValueError):   # a value the kernels branch on: `if`, `or`, max() of an array
        return None


INT_COLUMN_BOUND = 2 ** 40   # an int column with a value this large is built call by call (_column_kernels)


_CALL_COLUMNS: dict = {}   # a row's columns, in order -> (those that say which call it was, a getter of their values)


def call_key(row: dict) -> tuple:
    """What a measured row says of the call it timed, hashable: every column but the measurement's
    (MEASURED_COLUMNS), names and values, in the row's order (rows of one call are equal here; row_kernels and
    _describe read nothing else)."""
    columns = tuple(row)
    known = _CALL_COLUMNS.get(columns)
    if known is None:
        names = tuple(c for c in columns if c not in MEASURED_COLUMNS)
        known = _CALL_COLUMNS[columns] = (names, (lambda r: ()) if not names else
                                          operator.itemgetter(*names) if len(names) > 1 else
                                          (lambda r, c=names[0]: (r[c],)))
    return known[0], known[1](row)


def _same(a, b) -> bool:
    return type(a) is type(b) and type(a) is not np.ndarray and (a == b or a != a and b != b)


class _Reads:
    """A Platform whose field reads are recorded (`read`: field -> value), for Stacked.times to know what a group's
    timing depends on. A method of the Platform runs on this record, so that its reads are recorded too."""

    __slots__ = ("_hw", "read")

    def __init__(self, hw):
        object.__setattr__(self, "_hw", hw)
        object.__setattr__(self, "read", {})

    def __getattr__(self, name):
        attr = getattr(type(self._hw), name, None)
        if callable(attr):
            return types.MethodType(attr, self)
        value = getattr(self._hw, name)
        self.read[name] = value
        return value


def measured(rows: list[dict]) -> np.ndarray:
    return np.array([float(r["measured_s"]) for r in rows])


def timed_rows(rows: list[dict]) -> list[dict]:
    """The rows that time a kernel the model describes (not a probe, not an unmodelled implementation)."""
    return [r for r in rows if r["family"] not in PROBES and modelled(r)]


def expected(rows: list[dict], hw: Platform) -> np.ndarray:
    return Stacked(rows).times(hw)


def sol(rows: list[dict], hw: Platform) -> np.ndarray:
    return Stacked(rows).times(hw, "sol_s")


def log_ratios(rows: list[dict], hw: Platform) -> np.ndarray:
    """ln(measured / expected) per row."""
    return np.log(measured(rows) / expected(rows, hw))


@dataclass
class FitResult:
    before: dict                  # field -> value before the fit
    after: dict                   # field -> fitted value (unchanged fields included)
    fitted: tuple                 # fields the data constrained (probes and fit)
    loss_before: float            # the fit's objective (`method`) before and after
    loss_after: float
    n: int
    notes: list = field(default_factory=list)
    method: str = ""              # how the fit was made
    objective: str = ""           # what loss_before/loss_after measure
    heldout: dict = field(default_factory=dict)   # error on rows the fit did not see (cross_validate)

    def hardware(self, hw: Platform):
        return dataclasses.replace(hw, **self.after)


LOSSES = {  # name: (method, objective, function of the log ratios)
    "abs": ("least absolute log error", "mean |ln(measured/expected)|", lambda r: float(np.mean(np.abs(r)))),
    "sq": ("least squares in log time", "mean ln(measured/expected)^2", lambda r: float(np.mean(r ** 2))),
}


def probe_values(rows: list[dict]) -> tuple[dict, list]:
    """Facts read straight off the probes (medians): an empty kernel's graph and stream boundaries, the host's
    dispatch of a call that is no library call, and the pointer chase's HBM latency (reported)."""
    vals, notes = {}, []
    for mode, field, what in (("graph", "kernel_launch_graph_s", "in a graph"),
                              ("eager", "kernel_launch_stream_s", "behind others in a stream (do_bench)")):
        t = [float(r["measured_s"]) for r in rows if r["family"] == "launch" and row_mode(r) == mode]
        if t:
            vals[field] = _round(field, float(np.median(t)))
            notes.append(f"{field}: an empty kernel {what}, median of {len(t)}: {vals[field] * 1e6:.2f} us")
    cold = [float(r["measured_s"]) for r in rows if r["family"] == "launch" and row_mode(r) == "cold"]
    if cold:  # a lone real kernel also pays its framework's dispatch: kernel_launch_cold_s is fitted to those
        notes.append(f"an empty kernel launched alone (torch.cuda._sleep), median of {len(cold)}: "
                     f"{float(np.median(cold)) * 1e6:.2f} us")
    host = [float(r["host_s"]) for r in rows if r.get("host_s") and r["family"] not in PROBES and modelled(r)
            and not any(k.family in TENSOR_CORE for k, _ in row_kernels(r))]
    if host:
        vals["host_dispatch_s"] = _round("host_dispatch_s", float(np.median(host)))
        notes.append(f"host_dispatch_s: the host's time to issue a call that is no library call with the GPU busy, "
                     f"median of {len(host)} rows: {vals['host_dispatch_s'] * 1e6:.2f} us")
    chase = [float(r["measured_s"]) for r in rows if r["family"] == "pointer_chase" and (r.get("nbytes") or 0) >= CHASE_MIN_BYTES]
    if chase:  # unloaded: the latency under load (hbm_latency_s, fitted to the streaming probe) can only be longer
        notes.append(f"pointer chase over >= 1 GiB (one load at a time), median of {len(chase)}: "
                     f"{float(np.median(chase)) * 1e9:.0f} ns")
    return vals, notes


def _nonzero_flops(x) -> bool:
    return bool(np.any(np.asarray(x, dtype=float) > 0))


def _constrained(rows: list[dict], fields) -> list[str]:
    """The fit fields some row constrains, a precision's rate not among `fields` counting for the rate it is tied to."""
    fams = {r["family"] for r in rows}
    kernels = [k for r in rows for k, _ in row_kernels(r)]
    out = []
    if any(float(k.cost.hbm_bytes) > 0 for k in kernels):
        out.append("hbm_stream_efficiency")
    if any(k.in_flight_bytes_per_cta is not None for k in kernels):  # the Little's-law probe
        out += ["hbm_latency_s", "stream_bytes_in_flight_per_sm"]
    if any(k.cost.launches for k in kernels):
        out.append("mma_prologue_cycles")
    if any(k.is_mma for k in kernels):
        out += ["mma_compute_efficiency", "mma_bytes_in_flight_per_sm", "split_k_max", "split_k_min_depth",
                "wave_quantization"]
    rates = {efficiency_field(k.family, p, k.dequantises_weights) for k in kernels for p in PEAKS
             if _nonzero_flops(getattr(k.cost, f"{p}_flops"))} & {"grouped_compute_efficiency", *TIED_TO}
    out += [f if f in fields or f not in TIED_TO else TIED_TO[f] for f in sorted(rates)]
    if any(k.family in GROUPED for k in kernels):
        out.append("grouped_hbm_efficiency")
    if any(row_mode(r) == "cold" for r in rows):
        out.append("kernel_launch_cold_s")
    if any(row_mode(r) in ("cold", "stream") and first and k.family in TENSOR_CORE for r in rows
           for k, first in row_kernels(r)):
        out.append("tensor_core_dispatch_s")
    if fams & {"attention_decode", "attention_prefill"}:
        out.append("attention_compute_efficiency")
    return out


def fit_kernels(rows: list[dict], hw: Platform, fields=FIT_FIELDS, rounds: int = 12, points: int = 25,
                loss: str = "abs", heldout: bool = True, progress=None, fit_of: tuple | None = None) -> FitResult:
    """Probes read directly, then a coordinate search of the fields the timed rows constrain. `progress`, where
    given, is called as progress(done, total, label) after each round of the search, counting the rounds of every
    fit (the whole data's, then each held-out fold's); `fit_of`: (this fit's number, fits in all), for the folds."""
    probes, notes = probe_values(rows)
    timed = timed_rows(rows)
    skipped = sum(1 for r in rows if not modelled(r))
    if skipped:
        notes.append(f"{skipped} rows of implementations the model does not describe left out "
                     f"({', '.join(sorted({(r.get('impl') or '').split(' ')[0] for r in rows if not modelled(r)}))})")
    if not timed:
        raise SpecError("no kernel measurements to fit")
    base = {f: getattr(hw, f) for f in KERNEL_FIELDS}
    hw0 = dataclasses.replace(hw, **probes)
    stacked = Stacked(timed)
    t = measured(timed)
    constrained = _constrained(timed, fields)
    free = [f for f in fields if f in constrained]
    discrete = {f: opts for f, opts in DISCRETE_FIELDS.items() if f in constrained}
    # A fixed start, not the spec's values: the result depends on the data alone.
    x = {f: START.get(f, START_EFFICIENCY) for f in free}
    x.update({f: opts[0] for f, opts in discrete.items()})
    method, objective, measure = LOSSES[loss]
    limit = {"mma_bytes_in_flight_per_sm": 2 * hw.shared_memory_per_sm_bytes,
             "stream_bytes_in_flight_per_sm": 2 * hw.shared_memory_per_sm_bytes}

    # A precision's rate that is not fitted on its own moves with the rate it is tied to (TIED_TO)
    tied = [f for f in PRECISION_FIELDS if f not in free and TIED_TO[f] in free]

    def with_tied(vals: dict) -> dict:
        return {**vals, **{f: vals[TIED_TO[f]] for f in tied}}

    def value(vals: dict) -> float:
        return measure(np.log(t / stacked.times(dataclasses.replace(hw0, **with_tied(vals)))))

    def grid_values(f: str, grid: np.ndarray) -> np.ndarray:
        """value() at each of `grid`'s values of field `f` (the others as in x), the grid timed at once as a column
        of values (Stacked.grid_times); one value at a time where the timing does not take an array field."""
        try:
            column = grid.reshape(-1, 1)
            times = stacked.grid_times(dataclasses.replace(hw0, **with_tied({**x, f: column})), grid.shape)
        except (TypeError, ValueError):
            return np.array([value({**x, f: float(g)}) for g in grid])
        return np.array([measure(np.log(t / row)) for row in times])

    loss0 = measure(np.log(t / stacked.times(hw)))
    width = math.log(4.0)
    fit_no, fits = fit_of or (0, 1 + HELDOUT_FOLDS if heldout else 1)
    for round_no in range(rounds):
        for f, opts in discrete.items():
            # ties go to the larger option: a split or a quantization the data cannot tell apart from a
            # smaller one is what a library that fills the GPU would pick
            best = min(reversed(opts), key=lambda o: value({**x, f: o}))
            x[f] = best
        for f in free:
            lo_b, hi_b = BOUNDS.get(f, EFF_BOUNDS)
            hi_b = limit.get(f, hi_b)
            c = max(x[f], 1e-9)
            if f == "kernel_launch_cold_s":  # a lone kernel never starts sooner than one in a stream
                lo_b = max(lo_b, hw0.kernel_launch_stream_s)
            grid = np.clip(c * np.exp(np.linspace(-width, width, points)), max(lo_b, 1e-12), hi_b)
            grid = np.append(np.unique(grid), x[f])
            losses = grid_values(f, grid)
            i = int(np.argmin(losses))
            if losses[i] < losses[-1] - 1e-15:  # move only on a strict improvement
                x[f] = float(grid[i])
        width *= 0.6
        if progress is not None:
            progress(fit_no * rounds + round_no + 1, fits * rounds, "all rows" if fit_no == 0 else f"fold {fit_no}")
    rounded = with_tied({f: (_round(f, v) if f in free else v) for f, v in x.items()})
    after = {**base, **probes, **rounded}
    if after["kernel_launch_cold_s"] < after["kernel_launch_stream_s"]:
        # no cold row constrained the lone launch, and the measured stream boundary is slower than the
        # spec's value: a lone kernel never starts sooner than one in a stream
        after["kernel_launch_cold_s"] = after["kernel_launch_stream_s"]
        notes.append("kernel_launch_cold_s: below the measured stream boundary and not constrained; set equal to it")
    unconstrained = [f for f in list(fields) + list(DISCRETE_FIELDS) if f not in constrained]
    notes += [f"{f}: no measurement constrains it; kept {getattr(hw, f)!r}" for f in unconstrained]
    fitted = tuple(probes) + tuple(free) + tuple(tied) + tuple(discrete)
    if after["kernel_launch_cold_s"] != base["kernel_launch_cold_s"] and "kernel_launch_cold_s" not in fitted:
        fitted += ("kernel_launch_cold_s",)  # raised to the stream boundary above: written with the others
    result = FitResult(before=base, after=after, fitted=fitted,
                       loss_before=loss0, loss_after=value(rounded), n=len(timed), notes=notes, method=method,
                       objective=objective)
    if heldout:
        result.heldout = cross_validate(rows, hw, fields=fields, rounds=rounds, points=points, loss=loss,
                                        progress=progress)
    return result


# The columns that say how much work a row does, not which kernel shape it is: rows that differ only in these are
# one shape family (a GEMM's weight at every m, an attention's heads at every batch and length).
WORK_AXES = ("m", "rows", "touched", "batch", "q_len", "kv_len", "nbytes", "ctas", "inflight_bytes", "stride_bytes",
             "steps", "launches")


def shape_family(row: dict) -> tuple:
    """The shape family of a row: its family label and every shape column but the work axes (and the launch mode:
    one shape in every mode is one family)."""
    skip = set(WORK_AXES) | {"family", "mode", "measured_s", "spread", "samples", "calls", "flops", "bytes",
                             "launches_source", "check_rel_err", "host_s", "source"}
    return (family_label(row), *sorted((c, str(v)) for c, v in row.items() if c not in skip and v not in (None, "")))


def folds(rows: list[dict], k: int = 2) -> list[int]:
    """Fold of each row: whole shape families (`shape_family`) alternate between folds within each family label,
    in their order, so a fold's test rows are shapes its fit never saw in any launch mode, at any size. A label with
    a single shape family is held out whole in one fold (its fit saw none of that kernel's rows)."""
    index: dict[tuple, int] = {}
    per_label: dict[str, int] = {}
    out = []
    for r in rows:
        key = shape_family(r)
        if key not in index:
            lab = key[0]
            index[key] = per_label.get(lab, 0) % k
            per_label[lab] = per_label.get(lab, 0) + 1
        out.append(index[key])
    return out


HELDOUT_FOLDS = 2


def cross_validate(rows: list[dict], hw: Platform, k: int = HELDOUT_FOLDS, progress=None, **fit_options) -> dict:
    """Each timed row predicted by a fit made without its whole shape family (k folds of shape families, `folds`):
    median and worst |ln(measured/expected)|, on shapes the fit did not see."""
    timed = timed_rows(rows)
    probes = [r for r in rows if r["family"] in PROBES]
    fold = folds(timed, k)
    errors = np.empty(len(timed))
    sol_over = np.empty(len(timed))
    for f in range(k):
        train = [r for r, g in zip(timed, fold) if g != f]
        test_idx = [i for i, g in enumerate(fold) if g == f]
        if not train or not test_idx:
            continue
        res = fit_kernels(probes + train, hw, heldout=False, progress=progress, fit_of=(f + 1, k + 1), **fit_options)
        test = [timed[i] for i in test_idx]
        h = res.hardware(hw)
        errors[test_idx] = np.log(measured(test) / expected(test, h))
        sol_over[test_idx] = sol(test, h) / measured(test)
    return {"folds": k, "held_out": "whole shape families", "shape_families": len({shape_family(r) for r in timed}),
            **error_stats(timed, errors, sol_over)}


def error_stats(rows: list[dict], errors: np.ndarray, sol_over: np.ndarray) -> dict:
    """Median and worst |ln(measured/expected)| over rows, per launch mode and per family, and the largest SOL/measured."""
    def stats(idx) -> dict:
        e = np.abs(errors[idx])
        worst = idx[int(np.argmax(e))]
        return {"n": len(idx), "median_abs_log": float(np.median(e)), "worst_abs_log": float(np.max(e)),
                "worst_row": _describe(rows[worst]), "max_sol_over_measured": float(np.max(sol_over[idx]))}

    everything = list(range(len(rows)))
    modes = {m: [i for i in everything if row_mode(rows[i]) == m] for m in MODES}
    labels = [family_label(r) for r in rows]
    return {**stats(everything), "modes": {m: stats(idx) for m, idx in modes.items() if idx},
            "families": {lab: stats([i for i in everything if labels[i] == lab]) for lab in dict.fromkeys(labels)}}


def predict(rows: list[dict], hw: Platform) -> dict:
    """Error of `hw` on measurements it was not fitted to (another run, other shapes)."""
    timed = timed_rows(rows)
    t = measured(timed)
    stacked = Stacked(timed)
    return error_stats(timed, np.log(t / stacked.times(hw)), stacked.times(hw, "sol_s") / t)


def _describe(row: dict) -> str:
    shape = " ".join(f"{c}={row[c]}" for c in ("m", "n", "k", "groups", "rows", "batch", "heads", "q_len", "kv_len",
                                                "nbytes", "ctas") if row.get(c))
    return f"{family_label(row)} {row_mode(row)} {shape}".strip()


def _round(name: str, v: float) -> float:
    """Three significant digits: the data do not support more."""
    return float(f"{v:.3g}")


# ---------------------------------------------------------------- collectives


def collective_kernel(row: dict) -> Kernel:
    from rubinperf.kernels.collectives import all_gather, all_reduce, all_to_all

    fn = {"all_reduce": all_reduce, "all_to_all": all_to_all, "all_gather": all_gather}[row["collective"]]
    return fn(float(row["nbytes"]), int(row["ranks"]))


def fit_collectives(rows: list[dict], hw: Platform) -> FitResult:
    """Weighted non-negative least squares of t = floor + hops lat + sent / (bw eff), relative errors."""
    if not rows:
        raise SpecError("no collective measurements to fit")
    kernels = [collective_kernel(r) for r in rows]
    costs = [k.cost for k in kernels]
    t = measured(rows)
    hops = np.array([float(c.nvlink_hops) for c in costs])
    sent = np.array([float(c.nvlink_bytes) for c in costs]) / hw.nvlink_bandwidth_bytes_per_s
    ones = np.ones_like(t)
    before = {f: float(getattr(hw, f)) for f in COLLECTIVE_FIELDS}
    notes = []
    cols = {"collective_floor_s": ones, "nvlink_latency_s": hops, "inv_eff": sent}
    offset = np.zeros_like(t)
    if len(np.unique(hops)) < 2:
        # floor and latency are not separable with one hop count: keep the latency, fit the floor.
        offset = hops * hw.nvlink_latency_s
        del cols["nvlink_latency_s"]
        notes.append("one hop count only: nvlink_latency_s kept, collective_floor_s fitted")
    if not np.any(sent > 0):
        offset = offset + sent / hw.nvlink_efficiency
        del cols["inv_eff"]
        notes.append("no bytes sent: nvlink_efficiency kept")
    names = list(cols)
    a = np.stack([cols[n] for n in names], axis=1) / t[:, None]
    y = (t - offset) / t
    coef = _nnls(a, y)
    vals = dict(zip(names, coef))
    after = dict(before)
    if "collective_floor_s" in vals:
        after["collective_floor_s"] = vals["collective_floor_s"]
    if "nvlink_latency_s" in vals:
        after["nvlink_latency_s"] = vals["nvlink_latency_s"]
    if "inv_eff" in vals:
        if vals["inv_eff"] > 0:
            after["nvlink_efficiency"] = min(1.0, 1.0 / vals["inv_eff"])
            if vals["inv_eff"] < 1.0:
                notes.append("measured bandwidth above the spec's NVLink peak: nvlink_efficiency capped at 1.0")
        else:
            notes.append("bandwidth term not resolved: nvlink_efficiency kept")
    after = {k: (_round(k, v) if k in vals or (k == "nvlink_efficiency" and "inv_eff" in vals) else v)
             for k, v in after.items()}
    # The spec needs positive floors; a zero fit means "below resolution".
    for k in ("collective_floor_s", "nvlink_latency_s"):
        if after[k] <= 0:
            after[k] = 1e-9
            notes.append(f"{k}: fitted 0, written as 1e-9 s (below resolution)")

    def loss(vals_: dict) -> float:
        h = dataclasses.replace(hw, **vals_)
        e = np.array([float(kernel_time(k, h).expected_s) for k in kernels])
        return float(np.mean(np.abs(np.log(t / e))))

    return FitResult(before=before, after=after, fitted=tuple(COLLECTIVE_FIELDS), loss_before=loss(before),
                     loss_after=loss(after), n=len(rows), notes=notes,
                     method="non-negative least squares of relative error",
                     objective="mean |ln(measured/expected)|")


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0, by trying each set of free columns (few columns)."""
    k = a.shape[1]
    best, best_res = np.zeros(k), float(np.sum(y ** 2))
    for r in range(1, k + 1):
        for subset in itertools.combinations(range(k), r):
            sol_, *_ = np.linalg.lstsq(a[:, subset], y, rcond=None)
            if np.any(sol_ < 0):
                continue
            c = np.zeros(k)
            c[list(subset)] = sol_
            res = float(np.sum((a @ c - y) ** 2))
            if res < best_res:
                best, best_res = c, res
    return best


def collective_groups(rows: list[dict], hw: Platform) -> list[dict]:
    """Per collective and rank count: the fitted intercept (floor + hops x latency) and bandwidth efficiency."""
    out = []
    keys = sorted({(r["collective"], int(r["ranks"])) for r in rows})
    for coll, n in keys:
        sub = [r for r in rows if r["collective"] == coll and int(r["ranks"]) == n]
        costs = [collective_kernel(r).cost for r in sub]
        t = measured(sub)
        sent = np.array([float(c.nvlink_bytes) for c in costs]) / hw.nvlink_bandwidth_bytes_per_s
        a = np.stack([np.ones_like(t), sent], axis=1) / t[:, None]
        c0, c1 = _nnls(a, np.ones_like(t))
        out.append({"collective": coll, "ranks": n, "points": len(sub), "intercept_s": c0,
                    "nvlink_efficiency": (1.0 / c1) if c1 > 0 else float("nan"),
                    "busbw_bytes_per_s": (hw.nvlink_bandwidth_bytes_per_s / c1) if c1 > 0 else float("nan")})
    return out


# ---------------------------------------------------------------- reports


def family_stats(rows: list[dict], hw: Platform) -> list[dict]:
    """Per family: rows, median and worst (largest |ln|) measured/expected, and the largest SOL/measured."""
    rows = timed_rows(rows)
    stacked = Stacked(rows)
    ratio = measured(rows) / stacked.times(hw)
    sol_ratio = stacked.times(hw, "sol_s") / measured(rows)
    labels = [family_label(r) for r in rows]
    out = []
    for lab in [*dict.fromkeys(labels), "all"]:
        idx = [i for i, l in enumerate(labels) if l == lab or lab == "all"]
        r = ratio[idx]
        out.append({"family": lab, "n": len(idx), "median_ratio": float(np.median(r)),
                    "worst_ratio": float(r[int(np.argmax(np.abs(np.log(r))))]),
                    "median_abs_log": float(np.median(np.abs(np.log(r)))),
                    "max_sol_over_measured": float(np.max(sol_ratio[idx]))})
    return out


def before_after_markdown(rows: list[dict], before_hw, after_hw) -> str:
    """The README table: measured/expected per family with the spec's efficiencies before and after the fit."""
    b, a = family_stats(rows, before_hw), family_stats(rows, after_hw)
    lines = ["| family | rows | before: median | before: worst | before: median \\|ln\\| "
             "| after: median | after: worst | after: median \\|ln\\| |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for x, y in zip(b, a):
        lines.append(f"| {x['family']} | {x['n']} | {x['median_ratio']:.2f} | {x['worst_ratio']:.2f} | "
                     f"{x['median_abs_log']:.3f} | {y['median_ratio']:.2f} | {y['worst_ratio']:.2f} | "
                     f"{y['median_abs_log']:.3f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- calibrated TOML


CALIBRATED_NOTE = " (calibrated: "


def split_updates(updates: dict) -> tuple[dict, dict]:
    """Fitted values -> (hardware fields, stack fields): each is written into its own spec file."""
    from rubinperf.specs.stack import stack_field_names

    on_stack = set(stack_field_names())
    return ({k: v for k, v in updates.items() if k not in on_stack}, {k: v for k, v in updates.items() if k in on_stack})


def calibrated_toml(path, updates: dict, source: str, kind: str = "hardware") -> str:
    """The hardware (or, kind="stack", stack) file at `path` with `updates` (field -> value); checked by
    the strict loader.

    The [efficiency] table's source becomes `source`; another table that receives a value
    (nvlink_latency_s lives in [nvlink]) gets a note pointing there.
    """
    from pathlib import Path

    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import build_spec, spec_fields, tomllib
    from rubinperf.specs.rewrite import rewrite_tables
    from rubinperf.specs.stack import Stack

    cls = Stack if kind == "stack" else Hardware
    path = Path(path)
    text = path.read_text()
    data = tomllib.loads(text)
    where = {f.name: f.metadata["section"] for f in spec_fields(cls)}
    unknown = [k for k in updates if k not in where]
    if unknown:
        raise SpecError(f"{kind} TOML: no line for {', '.join(unknown)} (not a {kind} field)")
    keyed = {(where[k], k): v for k, v in updates.items()}
    sources = {"efficiency": source}
    for sec in sorted({sec for sec, _ in keyed} - {"efficiency"}):
        old = str(data.get(sec, {}).get("source", "")).split(CALIBRATED_NOTE, 1)[0]
        names = ", ".join(k for s_, k in keyed if s_ == sec)
        sources[sec] = f"{old}{CALIBRATED_NOTE}{names}; see the [efficiency] source)"
    text = rewrite_tables(text, keyed, sources)
    if any(k in data.get("ranges", {}) for k in updates):   # a calibrated field is no assumption: its range goes
        import tomlkit

        doc = tomlkit.parse(text)
        for k in updates:
            if k in doc["ranges"]:
                del doc["ranges"][k]
        text = tomlkit.dumps(doc)
    build_spec(cls, tomllib.loads(text), path)  # raises SpecError if anything is off
    return text


def efficiency_source(env: dict, command: str, result: FitResult, old_source: str, fit_command: str = "") -> str:
    """The [efficiency] table's new source: when, where, by which commands, how; and the old source."""
    when = (env.get("date_utc") or "")[:10] or "unknown date"
    gpu = env.get("gpu") or "unknown GPU"
    soft = f", torch {env['torch']}" if env.get("torch") else ""
    fitted = ", ".join(result.fitted)
    if old_source.startswith("Calibrated ") and "whose source was: " in old_source:  # a re-fit: keep the first source only
        old_source = old_source.rsplit("whose source was: ", 1)[1]
    how = f"measured by `{command}`" + (f", fitted by `{fit_command}`" if fit_command and fit_command != command else "")
    return (f"Calibrated {when} on {gpu}{soft}: {how} ({result.n} measurements; {result.method or 'fit'} "
            f"of the roofline: {fitted}). The other fields were not measured and keep their values, "
            f"whose source was: {old_source}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `rubinperf calibrate --from-csv FILE`")
