"""Sweeps: the deployment over racks x decode layouts x prefill layouts x decode batches, and
grids of one engine step over batch x context.

A deployment sweep evaluates each (rack, layouts) once, vectorised over the batch grid.
A step grid (`sweep_grid`, `sweep_grid_blocks`) evaluates the step model on numpy arrays directly
(broadcasting batch as a column and context as a row), a block of the grid at a time, so its peak
memory is that of one block.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rubinperf.errors import SpecError
from rubinperf.serving.interactivity import check_stat
from rubinperf.serving.pools import Serving, check_workload, serve
from rubinperf.serving.prefill import default_prefill_layout, prefill_plan
from rubinperf.specs.layout import Layout, check_layout, fits, parse_layout
from rubinperf.specs.model import Model
from rubinperf.step.grid import GridSteps
from rubinperf.step.point import Point

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

DEFAULT_DECODE_LAYOUTS = ("tp4", "tp8", "dep8", "dep16", "dep32", "dep64")
DEFAULT_MAX_BATCH = 1024

MAX_BATCH_LIMIT = 1 << 20  # requests per rank: far beyond any HBM's KV capacity, and exact in float64


def batch_grid(max_batch: float = DEFAULT_MAX_BATCH) -> np.ndarray:
    """Every batch 1..128, then 48 geometric steps to `max_batch`."""
    if not max_batch >= 1:
        raise SpecError(f"--max-batch: expected at least 1, got {max_batch}")
    if max_batch > MAX_BATCH_LIMIT:
        shown = str(max_batch) if len(str(max_batch)) <= 24 else f"{str(max_batch)[:12]}... ({len(str(max_batch))} digits)"
        raise SpecError(f"--max-batch: expected at most {MAX_BATCH_LIMIT:,} requests per rank or instance, got {shown}")
    dense = np.arange(1, min(128, max_batch) + 1, dtype=float)
    tail = np.round(np.geomspace(128, max_batch, 48)) if max_batch > 128 else np.array([])
    return np.unique(np.concatenate([dense, tail, [float(math.floor(max_batch))]]))


@dataclass
class Sweep:
    """Runs of the deployment over racks x decode layouts x prefill layouts, each an array over batch."""

    runs: list[Serving]
    skipped: list[str]
    notes: list[str] = field(default_factory=list)   # defaults changed to make a rack work, said aloud
    max_ttft_s: float | None = None   # --ttft: points whose time to first token is longer are left out
    max_tpot_s: float | None = None   # --tpot: points whose time per output token (1 / tokens/s per user) is longer

    def hardware_names(self) -> list[str]:
        return list(dict.fromkeys(r.hw.name for r in self.runs))

    def within_limits(self, r: Serving) -> np.ndarray:
        """Points of run `r` that meet --ttft and --tpot (TPOT at the frontier's statistic: 1 / tokens/s per user)."""
        c = r.columns
        keep = np.ones(c["batch_per_rank"].size, dtype=bool)
        if self.max_ttft_s is not None:
            keep &= r.ttft_s <= self.max_ttft_s
        if self.max_tpot_s is not None:
            keep &= 1.0 / np.ravel(c["tokens_per_s_per_user"]) <= self.max_tpot_s
        return keep

    def limits_text(self, stat: str = "p90") -> str:
        """The limits applied, as printed under each table: '' when none."""
        from rubinperf.units import fmt_time

        parts = []
        if self.max_ttft_s is not None:
            parts.append(f"TTFT ≤ {fmt_time(self.max_ttft_s)}")
        if self.max_tpot_s is not None:
            parts.append(f"TPOT ≤ {fmt_time(self.max_tpot_s)} (at {stat.upper() if stat != 'mean' else 'mean'} tok/s/user)")
        return ", ".join(parts)

    def emptied_by(self, hardware: str) -> str:
        """When --ttft/--tpot leave no point of `hardware` that fits: which limit emptied it, with the best value
        the points that fit reach; '' otherwise."""
        from rubinperf.units import fmt_time

        if self.max_ttft_s is None and self.max_tpot_s is None:
            return ""
        mine = [r for r in self.runs if r.hw.name == hardware]
        fits = [np.ravel(r.columns["feasible"]) for r in mine]
        if not any(f.any() for f in fits) or any((f & self.within_limits(r)).any() for f, r in zip(fits, mine)):
            return ""   # nothing fits (the reasons say why), or the limits leave points
        why = []
        if self.max_ttft_s is not None:
            best = min(float(np.min(np.broadcast_to(r.ttft_s, f.shape)[f])) for f, r in zip(fits, mine) if f.any())
            if best > self.max_ttft_s:
                why.append(f"--ttft {fmt_time(self.max_ttft_s)} (the shortest TTFT of a point that fits is {fmt_time(best)})")
        if self.max_tpot_s is not None:
            best = min(float(np.min(1.0 / np.ravel(r.columns["tokens_per_s_per_user"])[f]))
                       for f, r in zip(fits, mine) if f.any())
            if best > self.max_tpot_s:
                why.append(f"--tpot {fmt_time(self.max_tpot_s)} (the shortest TPOT of a point that fits is {fmt_time(best)})")
        return "no point meets " + (" and ".join(why) if why else "--ttft and --tpot together")

    def points(self, hardware: str | None = None):
        """(run index, element index, tok/s/user, tok/s/GPU, feasible) arrays over every swept point."""
        idx, el, x, y, ok = [], [], [], [], []
        for n, r in enumerate(self.runs):
            if hardware is not None and r.hw.name != hardware:
                continue
            c = r.columns
            size = c["batch_per_rank"].size
            idx.append(np.full(size, n))
            el.append(np.arange(size))
            x.append(np.ravel(c["tokens_per_s_per_user"]))
            y.append(np.ravel(c["tokens_per_s_per_gpu"]))
            ok.append(np.ravel(c["feasible"]) & self.within_limits(r))
        if not idx:
            return tuple(np.array([]) for _ in range(5))
        return (np.concatenate(idx), np.concatenate(el), np.concatenate(x), np.concatenate(y), np.concatenate(ok))


def sweep(setups, decode_layouts=None, prefill_layouts=None, batches=None, draft_tokens=None, acceptance=None,
          eplb: bool = True, progress=None, interactivity_stat: str = "p90", total_gpus: int | None = None) -> Sweep:
    """The deployment for every (model, rack, workload) setup, decode layout and prefill layout,
    vectorised over `batches`.

    `setups` is a list of (model, hardware, workload) triples (one per rack, each with its
    own `--set` overrides applied). Layouts a rack or model cannot take (experts not
    divisible, wider than the NVLink domain) are skipped with a note. `progress(done,
    total, label)` is called before each run and once at the end. `interactivity_stat` (p90, p50
    or mean) is the statistic of tokens/s per user the frontier is drawn over.
    """
    check_stat(interactivity_stat)
    batches = batch_grid() if batches is None else np.asarray(batches, dtype=float)
    asked = [parse_layout(x) if isinstance(x, str) else x for x in decode_layouts] if decode_layouts else None
    plans, notes, prefills = [], [], {}
    for m, hw, w in setups:
        decode_layouts = asked or stack_decode_layouts(m, hw, notes)
        check_workload(m, w)
        defaults = [w.prefill_layout]
        if not prefill_layouts:
            chosen, note, plan = default_prefill_layout(m, hw, w, eplb=eplb)
            defaults = [chosen]
            if plan is not None:   # computed while choosing: not computed again
                prefills[(id(m), id(hw), id(w), chosen)] = plan
            if note:
                notes.append(f"{hw.name}: {note}")
        for pl in (prefill_layouts or defaults):
            pl = parse_layout(pl) if isinstance(pl, str) else pl
            for dl in decode_layouts:
                plans.append((m, hw, w, pl, dl))
    runs, skipped = [], []
    for n, (m, hw, w, pl, dl) in enumerate(plans):
        if progress:
            progress(n, len(plans), f"{hw.name} {dl.name}")
        try:
            check_layout(pl, m, hw)
        except SpecError as exc:
            note = f"{hw.name}: prefill_layout {pl.name}: {exc}"
            if note not in skipped:
                skipped.append(note)
            continue
        try:
            check_layout(dl, m, hw)
        except SpecError as exc:
            skipped.append(f"{hw.name}: {exc}")
            continue
        key = (id(m), id(hw), id(w), pl)
        if key not in prefills:
            prefills[key] = prefill_plan(m, hw, w, pl, eplb=eplb)
        runs.append(serve(m, hw, w, dl, batches, draft_tokens, acceptance, eplb, prefill=prefills[key],
                          interactivity_stat=interactivity_stat, total_gpus=total_gpus))
    if progress:
        progress(len(plans), len(plans), "done")
    return Sweep(runs=runs, skipped=skipped, notes=notes)


def stack_decode_layouts(m: Model, hw: Platform, notes: list | None = None) -> list[Layout]:
    """The decode engine shapes of the rack's stack (serving.decode_layouts) that this rack and model can take;
    when none can (a stack of 72-GPU racks on an 8-GPU server), the generic set that can, with a note."""
    wanted = [parse_layout(x) for x in hw.decode_layouts]
    chosen = [x for x in wanted if fits(x, m, hw)]
    if chosen:
        return chosen
    chosen = [x for x in map(parse_layout, DEFAULT_DECODE_LAYOUTS) if fits(x, m, hw)]
    if notes is not None:
        notes.append(f"{hw.name}: none of the {hw.stack} decode shapes ({', '.join(hw.decode_layouts)}) fit; "
                     f"sweeping {', '.join(x.name for x in chosen)}")
    return chosen or wanted


# ---------------------------------------------------------------- grids of one step

GRID_METRICS = ("step_s", "sol_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user")
CHUNK_POINTS = 200_000
CHUNK_CONTEXTS = 64
GRID_ROWS = 4096   # batches of one graph: its ops that read no context hold arrays of this many rows


def sweep_grid(model, hw: Platform, layout, point: Point, batches, contexts, chunk_points: int = CHUNK_POINTS) -> dict:
    """Metrics on the grid batches x contexts (arrays of shape [len(batches), len(contexts)]): the blocks of
    sweep_grid_blocks put together."""
    b, c = np.size(batches), np.size(contexts)
    out = {k: np.empty((b, c)) for k in GRID_METRICS}
    for rows, cols, values in sweep_grid_blocks(model, hw, layout, point, batches, contexts, chunk_points):
        for key in GRID_METRICS:
            out[key][rows, cols] = values[key]
    return out


def sweep_grid_blocks(model, hw, layout, point: Point, batches, contexts, chunk_points: int = CHUNK_POINTS):
    """The grid batches x contexts a block at a time: yields (rows, columns, {metric: array over the block}),
    so a sweep of any size holds one block's arrays (about `chunk_points` points) at a time, and the graph
    of at most GRID_ROWS batches.

    The step's graph is built once for GRID_ROWS batches and its ops that do not read the context are timed
    once (step/grid.py: GridSteps); the others are made and timed a block at a time: a row's first block
    CHUNK_CONTEXTS contexts wide, the rest as wide as make about `chunk_points` points (_tiles), over as many
    rows as make about `chunk_points` points of CHUNK_CONTEXTS contexts, in equal blocks (sparse attention past
    its top-k reads no context: on a block of such contexts it is timed once for the blocks of its rows). Each number is step()'s
    over the block, bit for bit."""
    b = np.asanyarray(batches, dtype=float).reshape(-1, 1)
    c = np.asanyarray(contexts, dtype=float).reshape(1, -1)
    _keep_freed_memory()
    width = min(c.shape[1], CHUNK_CONTEXTS)
    cols = -(-c.shape[1] // max(1, round(c.shape[1] / width)))   # columns of equal width (no narrow last one)
    for start in range(0, b.shape[0], GRID_ROWS):
        part = b[start:start + GRID_ROWS]
        rows = max(1, chunk_points // max(1, cols))
        rows = -(-part.shape[0] // max(1, round(part.shape[0] / rows)))   # blocks of equal rows (no short last block)
        grid = GridSteps(model, hw, layout, dataclasses.replace(point, batch=part, context=c))
        for r, cl, span in _tiles(grid, rows, cols, chunk_points):
            yield slice(start + r.start, start + r.stop), cl, dict(zip(GRID_METRICS, grid.metrics((r, cl), span)))


def _tiles(grid: GridSteps, rows: int, cols: int, chunk_points: int) -> list:
    """Blocks of `rows` rows, row by row: in each, a first block of `cols` columns, then the rest of the row in
    blocks of equal width, wider where the rows are too few to make about `chunk_points` points of `cols` columns
    (every block pays the same Python to make and time its kernels; only the first block of a row, from the
    shortest contexts, holds contexts whose sparse attention still reads them). Each as (rows, columns, span): the
    span, the rest of the row's blocks, over which GridSteps.metrics times an op once where it stays on its factors
    (None for a row's first block, or a rest of one block)."""
    width = grid.shape[1]
    rest = width - min(cols, width)
    wide = max(cols, chunk_points // max(1, rows))
    n = max(1, round(rest / wide)) if rest else 0
    step = -(-rest // n) if n else 0
    bounds = [0, min(cols, width)] + [min(cols, width) + k * step for k in range(1, n)] + ([width] if n else [])
    if n < 2:
        return [(r, slice(a, b), None) for r in grid.blocks(rows) for a, b in zip(bounds, bounds[1:])]
    out = []
    for r in grid.blocks(rows):
        span = (r, slice(0, width))
        ends = _snapped(bounds, grid.span_cuts(span))
        out += [(r, slice(a, b), span) for a, b in zip(ends, ends[1:])]
    return out


def _snapped(bounds: list, cuts: list) -> list:
    """Block bounds with each cut (a column where an op's factored times change piece: GridSteps.span_cuts) made a
    bound: the nearest bound between the first block's end and the row's end moved to it where that is at most half
    its block away, else the cut added (a cut inside the first block is left: that block is narrow)."""
    ends, fixed = list(bounds), {bounds[0], bounds[1], bounds[-1]}
    for c in cuts:
        if c < bounds[1]:   # (inside the first block, narrow already: its ops that straddle it are timed on it)
            continue
        if c in ends:
            fixed.add(c)
            continue
        j = next(i for i in range(len(ends) - 1) if ends[i] < c < ends[i + 1])
        half = (ends[j + 1] - ends[j]) / 2
        near = sorted((i for i in (j, j + 1) if ends[i] not in fixed and abs(ends[i] - c) <= half),
                      key=lambda i: abs(ends[i] - c))
        if near:
            ends[near[0]] = c
        else:
            ends.insert(j + 1, c)
        fixed.add(c)
    return ends


def _keep_freed_memory() -> None:
    """Let the C allocator keep the memory of one block's arrays for the next block's.

    glibc's malloc gives an array above its mmap threshold a fresh mapping, and hands the top of its
    heap back to the system once more than its trim threshold lies free there; both start at 128 kB
    and rise with the largest mapped block freed so far (up to 32 MB; trim at twice that). Until they
    have risen, each temporary of a block (25,000 points: 200 kB) is new memory the kernel zeroes page
    by page: half of a grid sweep's time (measured: 3.5 -> 6.2 M points/s). An array of 30 MB,
    allocated and freed without being touched, raises them as a large array of the process would.
    The numbers are the same; other allocators ignore it. Once a process: the thresholds stay raised."""
    global _FREED_MEMORY_KEPT
    if not _FREED_MEMORY_KEPT:
        np.empty(30 * 2**20 // 8)
        _FREED_MEMORY_KEPT = True


_FREED_MEMORY_KEPT = False
