"""The aggregated engines' frontier, beside the disaggregated one (`pareto` and `compare` with --serving).

Each engine shape the stack runs (serving.decode_layouts, or the layouts asked for) serves the workload as one
aggregated engine (rubinperf/serving/aggregated.py): its closed-loop steady state at a series of concurrencies,
from one client to the most the engine holds before requests queue (the prefill budget or the KV cache stops the
running batch), gives one point each:

    tokens/s per GPU   = total (cached + uncached input + output) token throughput / the engine's GPUs
    tokens/s per user  = 1 / TPOT at the frontier's statistic (P90: 1 / P90 TPOT, the speed 90% of users reach;
                         P50: 1 / median TPOT; mean: 1 / mean TPOT): the same spreads as the disaggregated decode's

The request mix is the workload's turn at fixed lengths: its input tokens, its prefix hit rate, its output tokens;
each client waits the workload's turn_gap_s between a reply and its next turn (think time: more clients per running
request, the same steps).
The frontier is the non-dominated set of these points (rubinperf/serving/pareto.py). Where both are swept,
`winners` says which serving gives the higher throughput at each interactivity.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from rubinperf.errors import SpecError
from rubinperf.serving import money
from rubinperf.serving.aggregated import ClosedLoop, RequestMix, closed_loop, engine
from rubinperf.serving.pareto import Summary, frontier_mask
from rubinperf.serving.sweeps import stack_decode_layouts
from rubinperf.specs.layout import check_layout, parse_layout
from rubinperf.specs.workload import Workload

SERVINGS = ("agg", "disagg", "both")
CONCURRENCY_POINTS = 64      # concurrencies per engine, geometric from 1 client to the most it holds
TPOT_KEY = {"p90": "p90_tpot_ms", "p50": "median_tpot_ms", "mean": "mean_tpot_ms"}


def check_serving(serving: str) -> str:
    if serving not in SERVINGS:
        raise SpecError(f"--serving: expected one of {', '.join(SERVINGS)}, got {serving!r}")
    return serving


@dataclass(frozen=True, eq=False)
class AggPick:
    """One point of an aggregated engine's closed-loop sweep: a ClosedLoop and an element of its concurrencies."""

    loop: ClosedLoop
    i: int
    loop_record: dict          # the closed loop's own record of this concurrency
    workload: Workload
    stat: str
    serving = "agg"

    @cached_property
    def record(self) -> dict:
        e = self.loop.engine
        r = dict(self.loop_record)
        y = r["total_tokens_per_s_per_gpu"]
        speeds = {st: 1e3 / r[key] for st, key in TPOT_KEY.items()}
        r.update({
            "workload": self.workload.name, "serving": "agg", "decode_layout": e.layout.name,
            "prefill_layout": e.layout.name, "batch_per_rank": r["running_batch_per_rank"],
            "context_tokens": e.mix.mean_input + e.mix.mean_output / 2,
            "feasible": True, "reason": "", "interactivity_stat": self.stat,
            "tokens_per_s_per_gpu": y, "tokens_per_s_per_user": speeds[self.stat],
            **{f"tokens_per_s_per_user_{st}": v for st, v in speeds.items()},
            "decode_step_ms": r["mean_step_ms"], "decode_bound": r["bound"], "prefill_gpus_per_decode_gpu": 0.0,
            "decode_gpu_share": 1.0, "requests_per_decode_gpu": e.layout.per_gpu(r["running_batch_per_rank"]),
            "ttft_ms": r["mean_ttft_ms"], "usd_per_m_input": None, "usd_per_m_output": None,
            "usd_per_m_tokens": money.usd_per_m_tokens(e.hw, y), "tokens_per_s_per_kw": money.tokens_per_s_per_kw(e.hw, y),
            "decode_max_requests": e.max_requests,
        })
        return r

    @property
    def batch(self) -> float:
        return float(self.loop.columns["running_batch_per_rank"][self.i])


def concurrencies(e) -> np.ndarray:
    """Whole numbers of clients over the engine: CONCURRENCY_POINTS geometric steps from 1 to the most the engine
    holds without a queue (rounded down), each once."""
    top = max(np.floor(e.max_concurrency), 1.0)
    return np.unique(np.floor(np.geomspace(1.0, top, CONCURRENCY_POINTS)))


def agg_loops(setups, decode_layouts=None, draft_tokens=None, acceptance=None, eplb: bool = True,
              max_batch: float | None = None) -> tuple[list, list[str]]:
    """(model, hardware, workload, ClosedLoop) for every setup and engine shape that fits, and the shapes skipped."""
    asked = [parse_layout(x) if isinstance(x, str) else x for x in decode_layouts] if decode_layouts else None
    out, skipped = [], []
    for m, hw, w in setups:
        mix = RequestMix(isl=w.input_tokens_per_turn, osl=max(w.output_tokens_per_turn, 2.0),
                         prefix_hit=min(w.prefix_hit_rate, 1.0 - 1e-9), turn_gap_s=w.turn_gap_s)
        for lay in asked or stack_decode_layouts(m, hw):
            try:
                check_layout(lay, m, hw)
                e = engine(m, hw, lay, mix, draft_tokens=draft_tokens, acceptance=acceptance, eplb=eplb,
                           max_batch=max_batch)
            except SpecError as exc:
                skipped.append(f"{hw.name}: aggregated {lay.name}: {exc}")
                continue
            out.append((m, hw, w, closed_loop(e, concurrencies(e))))
    return out, skipped


def agg_summaries(loops, stat: str = "p90", max_ttft_s: float | None = None,
                  max_tpot_s: float | None = None) -> list[Summary]:
    """Each rack's aggregated frontier over its engines' closed-loop points (--ttft / --tpot leave points out)."""
    out = []
    for name in dict.fromkeys(hw.name for _, hw, _, _ in loops):
        picks = []
        for _, hw, w, loop in loops:
            if hw.name != name:
                continue
            picks += [AggPick(loop, i, rec, w, stat) for i, rec in enumerate(loop.records())]
        x = np.array([p.record["tokens_per_s_per_user"] for p in picks])
        y = np.array([p.record["tokens_per_s_per_gpu"] for p in picks])
        ok = np.ones(x.shape, dtype=bool)
        if max_ttft_s is not None:
            ok &= np.array([p.record["ttft_ms"] / 1e3 <= max_ttft_s for p in picks])
        if max_tpot_s is not None:
            ok &= 1.0 / x <= max_tpot_s
        out.append(Summary(hardware=name, x=x, y=y, feasible=ok, on_frontier=frontier_mask(x, y, ok), picks=picks,
                           serving="agg"))
    return out


def merged(disagg: list[Summary], agg: list[Summary]) -> list[Summary]:
    """Per rack, one Summary holding both servings' points; each point keeps its own serving's frontier flag."""
    by = {s.hardware: s for s in agg}
    out = []
    for d in disagg:
        a = by.pop(d.hardware, None)
        if a is None:
            out.append(d)
            continue
        out.append(Summary(hardware=d.hardware, x=np.concatenate([d.x, a.x]), y=np.concatenate([d.y, a.y]),
                           feasible=np.concatenate([d.feasible, a.feasible]),
                           on_frontier=np.concatenate([d.on_frontier, a.on_frontier]), picks=d.picks + a.picks,
                           serving="both"))
    return out + list(by.values())


def winners(s: Summary) -> list[tuple[str, float, float]]:
    """Where each serving gives the higher throughput, over interactivity: (serving, from, to) runs of the frontier
    of both servings together, read as `throughput at interactivity X` reads it (the best point with at least X):
    the point at x_j wins every level in (x_{j-1}, x_j]. `from` of the first run is 0."""
    both = frontier_mask(s.x, s.y, s.feasible)
    j = np.flatnonzero(both)
    j = j[np.argsort(s.x[j])]
    runs: list[list] = []
    prev = 0.0
    for k in j:
        who = s.picks[k].serving
        if runs and runs[-1][0] == who:
            runs[-1][2] = float(s.x[k])
        else:
            runs.append([who, prev, float(s.x[k])])
        prev = float(s.x[k])
    return [tuple(r) for r in runs]
