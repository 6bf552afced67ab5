"""The Pareto frontier of tokens/s per GPU against tokens/s per user, and the comparisons built on it.

A point dominates another when it is at least as good on both axes and better on one.
The frontier is the set of feasible swept points no other feasible point dominates
(of identical points, one is kept). "Throughput at interactivity X" is the best
tokens/s per GPU among feasible points that give every user at least X tokens/s: the
frontier read as a step function, never interpolated between configurations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rubinperf.step.records import step_record
from rubinperf.serving.pools import Serving
from rubinperf.serving.sweeps import Sweep


def frontier_mask(x, y, feasible=None) -> np.ndarray:
    """True for the non-dominated feasible points of (x, y), both maximised."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.ones(x.shape, dtype=bool) if feasible is None else np.asarray(feasible, dtype=bool)
    idx = np.flatnonzero(ok & np.isfinite(x) & np.isfinite(y))
    mask = np.zeros(x.shape, dtype=bool)
    if idx.size == 0:
        return mask
    order = idx[np.lexsort((-y[idx], -x[idx]))]        # x descending, then y descending
    ys = y[order]
    before = np.concatenate([[-np.inf], np.maximum.accumulate(ys)[:-1]])   # best y among larger-or-equal x
    mask[order[ys > before]] = True
    return mask


def dominates(ax, ay, bx, by) -> bool:
    return ax >= bx and ay >= by and (ax > bx or ay > by)


def best_at(x, y, feasible, level: float):
    """Index of the best y among feasible points with x >= level (a frontier point), or None."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    idx = np.flatnonzero(np.asarray(feasible, dtype=bool) & (x >= level))
    if idx.size == 0:
        return None
    return int(idx[np.lexsort((-x[idx], -y[idx]))[0]])     # highest y; of equal y, the highest x


@dataclass(frozen=True)
class Pick:
    """One swept point: a run of the sweep and an element of its batch array."""

    run: Serving
    i: int
    serving = "disagg"   # prefill and decode pools (an aggregated engine's points: rubinperf/serving/agg_frontier.py)

    @property
    def record(self) -> dict:
        return {**self.run.record(self.i), "serving": self.serving}

    @property
    def batch(self) -> float:
        return float(np.asarray(self.run.decode.batch)[self.i])

    def step_result(self):
        """The decode step at this point (for the bound and the per-kernel breakdown): the swept run's
        ops taken at this element, not a step re-run."""
        return self.run.decode.result.at(self.i)

    def kernel_terms(self) -> list[dict]:
        """Per-kernel GPU time per output token on one GPU of the decode pool (µs), largest first.

        The rows add up to 1 / (output tokens/s per decode GPU) when the GPU, not the CPU, sets the step."""
        rec = step_record(self.step_result())
        d = self.run.decode
        tokens = d.layout.per_gpu(self.batch * d.acceptance)    # output tokens per GPU per step
        rows = [{"kernel": b["kernel"], "part": b["part"], "time_ms": b["time_ms"], "bound": b["bound"],
                 "us_per_token": b["time_ms"] * 1e3 / tokens} for b in rec["breakdown"]]
        return rows


@dataclass
class Summary:
    """One rack's frontier and the points `compare` reports."""

    hardware: str
    x: np.ndarray
    y: np.ndarray
    feasible: np.ndarray
    on_frontier: np.ndarray
    picks: list                  # Pick for every swept point, in the order of x and y
    serving: str = "disagg"      # disagg, agg (aggregated engines), or both (each point's own serving in its pick)

    def pick(self, j) -> Pick | None:
        return None if j is None else self.picks[j]

    @property
    def frontier(self) -> list[Pick]:
        j = np.flatnonzero(self.on_frontier)
        return [self.picks[k] for k in j[np.argsort(self.x[j])]]

    @property
    def peak(self) -> Pick | None:
        return self.pick(best_at(self.x, self.y, self.feasible, -np.inf))

    def at_interactivity(self, level: float) -> Pick | None:
        return self.pick(best_at(self.x, self.y, self.feasible, level))

    @property
    def max_interactivity(self) -> float:
        return float(np.max(self.x[self.feasible])) if self.feasible.any() else 0.0

    @property
    def best_single_user(self) -> Pick | None:
        """The fastest a user is served (ties: the higher throughput)."""
        if not self.feasible.any():
            return None
        return self.pick(best_at(self.x, self.y, self.feasible, self.max_interactivity))

    def infeasible_reasons(self) -> list[str]:
        """One line per reason runs' points are infeasible: how many, of which layouts, and why (runs that fail
        alike, from the same batch for the same reason, share a line: the note is said once)."""
        groups: dict[tuple, list] = {}
        for run in dict.fromkeys(p.run for p in self.picks if isinstance(p, Pick)):
            bad = ~np.asarray(run.columns["feasible"])
            if bad.any():
                i = int(np.argmax(bad))
                key = (int(bad.sum()), bad.size, float(run.columns["batch_per_rank"][i]), run.reason(i))
                groups.setdefault(key, []).append(run.decode.layout.name)
        out = []
        for (n, size, batch, why), layouts in groups.items():
            what = (f"{n} of {size} {layouts[0]} points infeasible" if len(layouts) == 1
                    else f"{n} of {size} points infeasible in each of {', '.join(layouts)}")
            out.append(f"{what}, from batch {batch:g}: {why}")
        return out


def summarize(sw: Sweep) -> list[Summary]:
    """The frontier of every rack in the sweep, in the sweep's order."""
    out = []
    for name in sw.hardware_names():
        idx, el, x, y, ok = sw.points(name)
        picks = [Pick(sw.runs[int(a)], int(b)) for a, b in zip(idx, el)]
        out.append(Summary(hardware=name, x=x, y=y, feasible=ok, on_frontier=frontier_mask(x, y, ok), picks=picks))
    return out


def point_records(summary: Summary, frontier_only: bool = False, extra: list | None = None) -> list[dict]:
    """Records of every swept point of a rack (or its frontier only), with `on_frontier`; `extra`: fields to add
    per point (aligned with summary.picks; None adds nothing)."""
    out = []
    for j, (p, front, ok) in enumerate(zip(summary.picks, summary.on_frontier, summary.feasible)):
        if frontier_only and not front:
            continue
        out.append({**p.record, "on_frontier": bool(front), "eligible": bool(ok),   # eligible: fits and meets --ttft/--tpot
                    **((extra[j] or {}) if extra is not None else {})})
    return out


def ratio_terms(base: Pick, other: Pick) -> dict:
    """Throughput ratio other/base as the product of the terms that set it:

        tokens/s per GPU = requests per decode GPU x acceptance / decode step x decode share of GPUs x tokens per output token
    """
    def parts(p: Pick):
        r = p.record
        d = p.run.decode
        return {
            "requests_per_decode_gpu": d.layout.per_gpu(p.batch),
            "acceptance": d.acceptance,
            "decode_step_s": r["decode_step_ms"] / 1e3,
            "decode_gpu_share": 1 / (1 + r["prefill_gpus_per_decode_gpu"]),
            "tokens_per_output_token": p.run.workload.tokens_per_turn / p.run.workload.output_tokens_per_turn,
        }

    a, b = parts(base), parts(other)
    factors = {
        "requests_per_decode_gpu": b["requests_per_decode_gpu"] / a["requests_per_decode_gpu"],
        "acceptance": b["acceptance"] / a["acceptance"],
        "decode_step_speedup": a["decode_step_s"] / b["decode_step_s"],
        "decode_gpu_share": b["decode_gpu_share"] / a["decode_gpu_share"],
        "tokens_per_output_token": b["tokens_per_output_token"] / a["tokens_per_output_token"],
    }
    product = float(np.prod(list(factors.values())))
    return {"base": a, "other": b, "factors": factors, "product": product,
            "throughput_ratio": other.record["tokens_per_s_per_gpu"] / base.record["tokens_per_s_per_gpu"]}


# ---------------------------------------------------------------- compare

METRICS = ("peak", "interactivity", "single_user")


def _names(s: Summary) -> dict:
    """{model, workload} of a summary's swept points (infeasible ones included), where it has any."""
    for p in s.picks:
        rec = getattr(p, "record", None) or {}
        if rec.get("model"):
            return {k: rec[k] for k in ("model", "workload") if k in rec}
    return {}


def compare_records(summaries: list[Summary], levels=(196.0, 387.0), stacks: dict | None = None,
                    swapped: dict | None = None) -> list[dict]:
    """One record per rack and compared point: peak throughput, throughput at each interactivity
    level, best single-user speed; with ratios to the first rack, the ratio's terms, and every
    decode kernel's GPU time per output token, largest first.

    Silicon vs software: `stacks` maps each rack to the stack it ran; `swapped` maps a stack name to
    the Summary of the first (baseline) rack run on that stack. For rack B on stack sB against the
    baseline A on sA, the ratio B(sB) / A(sA) splits exactly into
        hardware = B(sB) / A(sB)   (the same stack on both racks)
        software = A(sB) / A(sA)   (the same rack, the other stack),
    whose product is the whole ratio (A(sB) cancels)."""
    if not summaries:
        return []
    base = summaries[0]
    stacks, swapped = stacks or {}, swapped or {}
    wanted = [("peak", None)] + [("interactivity", float(v)) for v in levels] + [("single_user", None)]
    out = []
    for s in summaries:
        for metric, level in wanted:
            pick = _chosen(s, metric, level)
            ref = _chosen(base, metric, level)
            rec = {"hardware": s.hardware, "serving": s.serving, "metric": metric, "target_tokens_per_s_per_user": level,
                   "reachable": pick is not None, "max_tokens_per_s_per_user": s.max_interactivity,
                   "baseline": base.hardware, "stack": stacks.get(s.hardware), "baseline_stack": stacks.get(base.hardware)}
            if pick is None:
                rec.update(_names(s))   # the model and workload of a rack with no point to read them from
                rec["note"] = (f"cannot reach {level:,.0f} tok/s/user (its fastest is {s.max_interactivity:,.0f})"
                               if metric == "interactivity" and s.feasible.any() else
                               f"cannot reach {level:,.0f} tok/s/user: no feasible point"
                               if metric == "interactivity" else "no feasible point")
            else:
                rec.update(pick.record)
                rec["kernels"] = _kernels(pick) if isinstance(pick, Pick) else []
            if pick is not None and ref is not None:
                key = "tokens_per_s_per_user" if metric == "single_user" else "tokens_per_s_per_gpu"
                rec["ratio_metric"] = key
                rec["ratio"] = pick.record[key] / ref.record[key]
                pools = isinstance(pick, Pick) and isinstance(ref, Pick)   # the terms of two P/D deployments
                if metric != "single_user" and pools:
                    t = ratio_terms(ref, pick)
                    rec["ratio_terms"] = t["factors"]
                    rec["ratio_terms_product"] = t["product"]
                if s is not base and pools:
                    rec.update(split_ratio(pick, ref, key, metric, level, stacks.get(s.hardware),
                                           stacks.get(base.hardware), swapped))
                rec["ratio_usd_per_m_tokens"] = pick.record["usd_per_m_tokens"] / ref.record["usd_per_m_tokens"]
                rec["ratio_tokens_per_s_per_kw"] = pick.record["tokens_per_s_per_kw"] / ref.record["tokens_per_s_per_kw"]
            else:
                rec["ratio"] = None
            out.append(rec)
    return out


def split_ratio(pick: Pick, ref: Pick, key: str, metric: str, level, stack, base_stack, swapped: dict) -> dict:
    """The hardware and software parts of pick / ref (see compare_records); None where the baseline rack
    on the other stack cannot reach the point."""
    whole = pick.record[key] / ref.record[key]
    if stack is None or stack == base_stack:
        return {"ratio_hardware": whole, "ratio_software": 1.0, "swapped_value": ref.record[key]}
    other = swapped.get(stack)
    mid = _chosen(other, metric, level) if other is not None else None
    if mid is None:
        return {"ratio_hardware": None, "ratio_software": None, "swapped_value": None}
    value = mid.record[key]
    return {"ratio_hardware": pick.record[key] / value, "ratio_software": value / ref.record[key],
            "swapped_value": value}


def _chosen(s: Summary, metric: str, level):
    if metric == "peak":
        return s.peak
    if metric == "interactivity":
        return s.at_interactivity(level)
    return s.best_single_user


def _kernels(pick: Pick) -> list[dict]:
    rows = [r for r in pick.kernel_terms() if r["part"] != "cpu"]
    return sorted(rows, key=lambda r: -r["us_per_token"])
