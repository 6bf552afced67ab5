"""Elasticities of a step metric by the numeric path: central differences of `rubinperf.step.step`.

The same records as `rubinperf.analysis.sensitivity.sensitivity` (parameter, group, value,
elasticity, the metric at p x (1 - swing) and p x (1 + swing)), without sympy: each parameter
is changed in a copy of the platform or the operating point (dataclasses.replace) and the step
timed again: all the platform's fields at once, as numpy arrays (tens of milliseconds in all). The
elasticity d ln M / d ln p is the central difference
(ln M(p (1 + h)) - ln M(p (1 - h))) / (ln(1 + h) - ln(1 - h)), h = 1e-4; away from a kink it agrees
with sympy's derivative (tests/analysis/test_elasticity.py holds the two together), exactly at one
it is the mean of the one-sided slopes, as the symbolic path's Heaviside(0) = 1/2 gives. The
operating point's whole counts (batch, context, new tokens, drafted tokens) take h = the swing:
the arc elasticity, since the step has steps in them (tiles, pages) that a small h would measure.

Also here, shared with the symbolic path: which parameters vary (`varied_fields`,
`point_parameters`) and the metrics' labels (`METRICS`). Light at import: no sympy.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import get_type_hints

from rubinperf.errors import SpecError
from rubinperf.specs.loader import numeric_fields, spec_fields

# metric name -> (label, unit); the StepResult attribute the numeric path reads
METRICS = {
    "step-time": ("step time", "s"),
    "tokens-per-gpu": ("tokens/s per GPU", "tok/s"),
    "tokens-per-user": ("tokens/s per user", "tok/s"),
}
RESULT_ATTRIBUTE = {"step-time": "expected_s", "tokens-per-gpu": "tokens_per_s_per_gpu",
                    "tokens-per-user": "tokens_per_s_per_user"}

POINT_UNITS = {"batch": "requests", "context": "tokens", "new_tokens": "tokens", "draft_tokens": "tokens",
               "acceptance": "tokens/step", "balancedness": "", "draft_balancedness": ""}
POINT_DOC = {
    "batch": "requests (decode) or sequences (prefill) per rank",
    "context": "tokens already cached per request",
    "new_tokens": "prefill: new tokens per rank",
    "draft_tokens": "drafted tokens verified per step (k), acceptance held fixed",
    "acceptance": "tokens emitted per verify step",
    "balancedness": "MoE mean / max rank load (target model)",
    "draft_balancedness": "MoE mean / max rank load (draft model)",
}
STEP = 1e-4   # relative change of the central differences
# Operating-point parameters that count whole things: the step has steps in them (tiles, pages, waves), so a
# difference over 1e-4 of them measures a step, not a slope; their elasticity is the arc over the swing.
COUNTS = ("batch", "context", "new_tokens", "draft_tokens")


@functools.lru_cache(maxsize=None)
def varied_fields() -> dict[str, bool]:
    """Float fields of a platform (hardware and stack) that are varied -> whether each may be zero
    (cached: do not mutate). The stack's EPLB balancedness is not one: it only sets the operating
    point's default, and the point's balancedness is a parameter of its own."""
    from rubinperf.specs.stack import POINT_FIELDS as STACK_POINT_FIELDS, Platform

    hints = get_type_hints(Platform)
    return {f.name: not f.metadata["positive"] for f in spec_fields(Platform)
            if hints[f.name] is float and f.name not in STACK_POINT_FIELDS}


def point_parameters(model, layout, phase: str) -> list[str]:
    """The operating-point parameters that mean something for this engine shape."""
    names = ["batch", "context"]
    names += ["draft_tokens", "acceptance"] if phase == "decode" else ["new_tokens"]
    if layout.ep > 1:
        names.append("balancedness")
        if model.draft_layers:
            names.append("draft_balancedness")
    return names


def parameters(model, layout, phase: str) -> list[tuple[str, str, str, str]]:
    """(group, name, unit, doc) of every parameter a sensitivity lists: the platform's numeric fields,
    then the operating point's."""
    from rubinperf.specs.stack import POINT_FIELDS as STACK_POINT_FIELDS, Platform

    meta = {f.name: f.metadata for f in spec_fields(Platform)}
    out = [(meta[name]["spec"], name, meta[name]["unit"], "") for name in numeric_fields(Platform)
           if name not in STACK_POINT_FIELDS]
    out += [("operating point", name, POINT_UNITS[name], POINT_DOC[name])
            for name in point_parameters(model, layout, phase)]
    return out


def _point_value(model, point, name: str) -> float:
    if name == "draft_tokens":
        return float(point.k(model))
    if name == "acceptance":
        return float(point.accepted(model))
    return float(getattr(point, name))


DISCRETE_NOTE = {"hardware": "integer structure (trays, domains): not varied",
                 "stack": "integer kernel-library choice (tiles, split-K): not varied"}


def numeric_sensitivity(model, hw, layout, point, metric: str = "step-time", swing: float = 0.1) -> list[dict]:
    """One record per parameter, sorted by |elasticity| (largest first; discrete fields last): the records
    of `sensitivity.sensitivity`, by differences of the numeric step.

    The step takes numpy arrays for any float field: every platform field is an array of 1 + 4 n values
    (the baseline, then each field at x (1 - swing), x (1 + swing), x (1 - h), x (1 + h) with the others
    at their values), timed in one step; each operating-point parameter likewise in one step of its own."""
    import numpy as np

    from rubinperf.step.timing import step

    if metric not in METRICS:
        raise SpecError(f"--metric: expected one of {', '.join(METRICS)}, got {metric!r}")
    if not 0 < swing < 1:
        raise SpecError(f"--swing: expected a fraction in (0, 1), got {swing}")
    attr = RESULT_ATTRIBUTE[metric]
    factors = (1 - swing, 1 + swing, 1 - STEP, 1 + STEP)

    def metric_of(result, rows: int):
        return np.broadcast_to(np.asarray(getattr(result, attr), dtype=float), (rows,))

    params = parameters(model, layout, point.phase)
    floats = varied_fields()
    varied = [name for group, name, _, _ in params if group in ("hardware", "stack") and name in floats]
    rows = 1 + 4 * len(varied)
    columns = {}
    for i, name in enumerate(varied):
        col = np.full(rows, float(getattr(hw, name)))
        col[1 + 4 * i: 5 + 4 * i] *= factors
        columns[name] = col
    got = metric_of(step(model, dataclasses.replace(hw, **columns), layout, point), rows)
    base = float(got[0])
    ends = {name: got[1 + 4 * i: 3 + 4 * i] for i, name in enumerate(varied)}
    near = {name: got[3 + 4 * i: 5 + 4 * i] for i, name in enumerate(varied)}
    for group, name, _, _ in params:
        if group == "operating point":
            value = _point_value(model, point, name)
            four = metric_of(step(model, hw, layout, dataclasses.replace(
                point, **{name: value * np.asarray(factors)})), 4)
            ends[name], near[name] = four[:2], four[2:]
    return _records(model, hw, layout, point, metric, params, base, ends, near, swing, arc_counts=True)


def _records(model, hw, layout, point, metric: str, params, base: float, ends: dict, near: dict, swing: float,
             arc_counts: bool) -> list[dict]:
    """The sensitivity records, sorted by |elasticity| (largest first; discrete fields last), from the metric at the
    operating point (`base`), at p (1 -+ swing) (`ends`) and at p (1 -+ STEP) (`near`) per parameter; a parameter
    with neither is discrete. With `arc_counts` a whole count of the operating point takes the arc elasticity over
    the swing."""
    label, unit = METRICS[metric]
    common = {"hardware": hw.name, "model": model.name, "layout": layout.name, "phase": point.phase,
              "metric": metric, "metric_label": label, "metric_unit": unit, "metric_value": base}
    records = []
    for group, name, u, doc in params:
        rec = {**common, "parameter": name, "group": group, "unit": u, "doc": doc}
        if name not in ends:
            rec.update(value=float(getattr(hw, name)), elasticity=None, metric_low=None, metric_high=None,
                       discrete=True, note=DISCRETE_NOTE[group])
            records.append(rec)
            continue
        value = _point_value(model, point, name) if group == "operating point" else float(getattr(hw, name))
        (low, high), (down, up) = (float(x) for x in ends[name]), (float(x) for x in near[name])
        if value == 0:
            rec.update(value=value, elasticity=0.0, metric_low=base, metric_high=base, discrete=False,
                       note="zero here: a relative change does not move it")
            records.append(rec)
            continue
        arc = arc_counts and group == "operating point" and name in COUNTS
        e = _log_slope(high, low, base, swing) if arc else _log_slope(up, down, base, STEP)
        moved = any(x != base for x in (low, high, down, up))
        rec.update(value=value, elasticity=e + 0.0, metric_low=low, metric_high=high, discrete=False,
                   note=(f"a whole count: arc elasticity over x{1 - swing:g} to x{1 + swing:g}" if arc and moved
                         else "" if moved else "does not move this step"))
        records.append(rec)
    records.sort(key=lambda r: (r["elasticity"] is None, -abs(r["elasticity"] or 0.0)))
    return records


def _log_slope(up: float, down: float, base: float, h: float) -> float:
    """d ln M / d ln p from M at p (1 +- h); a metric that is not positive: the relative slope."""
    if up > 0 and down > 0:
        return (math.log(up) - math.log(down)) / (math.log1p(h) - math.log1p(-h))
    return (up - down) / (2 * h * base) if base else 0.0


def step_sensitivity(model, hw, layout, point, metric: str = "step-time", swing: float = 0.1) -> list[dict]:
    """The records of `sensitivity.sensitivity` (sympy's derivative of the symbolic step), by the numeric step,
    without sympy (`rubinperf sensitivity`: tenths of a second where building and differentiating the symbolic
    step takes seconds).

    The elasticity is the central difference (ln M(p (1 + h)) - ln M(p (1 - h))) / (ln(1 + h) - ln(1 - h)),
    h = STEP, for every parameter, whole counts included, with the step's roundings (tiles, pages, waves) held at
    their values at the operating point (mathops.held_roundings), as the symbolic derivative holds them; at a
    kink, the mean of the two one-sided slopes, as sympy's Heaviside(0) = 1/2 gives. The swing ends are the
    metric at p (1 -+ swing), roundings free. All the platform's fields go in one step of 1 + 2 n rows (and one
    of 2 n for the ends); each operating-point parameter in steps of its own. Agrees with the symbolic path to
    the four decimals it prints (tests/analysis/test_sensitivity.py); a parameter whose changes do not move the
    metric is noted "does not move this step" (the symbolic path tells one that never enters it)."""
    import numpy as np

    from rubinperf.mathops import held_roundings
    from rubinperf.step.timing import step

    if metric not in METRICS:
        raise SpecError(f"--metric: expected one of {', '.join([*METRICS, P90_METRIC])}, got {metric!r}")
    if not 0 < swing < 1:
        raise SpecError(f"--swing: expected a fraction in (0, 1), got {swing}")
    attr = RESULT_ATTRIBUTE[metric]

    def metric_of(result, rows: int):
        return np.broadcast_to(np.asarray(getattr(result, attr), dtype=float), (rows,))

    params = parameters(model, layout, point.phase)
    floats = varied_fields()
    varied = [name for group, name, _, _ in params if group in ("hardware", "stack") and name in floats]
    n = len(varied)
    near, ends = {}, {}
    slopes = {name: np.full(1 + 2 * n, float(getattr(hw, name))) for name in varied}
    swings = {name: np.full(2 * n, float(getattr(hw, name))) for name in varied}
    for i, name in enumerate(varied):
        slopes[name][1 + 2 * i: 3 + 2 * i] *= (1 - STEP, 1 + STEP)
        swings[name][2 * i: 2 + 2 * i] *= (1 - swing, 1 + swing)
    with held_roundings(1 + 2 * n):
        got = metric_of(step(model, dataclasses.replace(hw, **slopes), layout, point), 1 + 2 * n)
    base = float(got[0])
    wide = metric_of(step(model, dataclasses.replace(hw, **swings), layout, point), 2 * n)
    for i, name in enumerate(varied):
        near[name], ends[name] = got[1 + 2 * i: 3 + 2 * i], wide[2 * i: 2 + 2 * i]
    for group, name, _, _ in params:
        if group == "operating point":
            value = _point_value(model, point, name)
            with held_roundings(3):
                near[name] = metric_of(step(model, hw, layout, dataclasses.replace(
                    point, **{name: value * np.array([1.0, 1 - STEP, 1 + STEP])})), 3)[1:]
            ends[name] = metric_of(step(model, hw, layout, dataclasses.replace(
                point, **{name: value * np.array([1 - swing, 1 + swing])})), 2)
    return _records(model, hw, layout, point, metric, params, base, ends, near, swing, arc_counts=False)


P90_METRIC = "tokens-per-user-p90"
P90_SPREADS = {"acceptance_concentration": "nu of the Beta law of a request's accepted share of drafts (P90 factor only)",
               "step_time_spread": "log-sd of a request's step time around the swept step (P90 factor only)"}


def p90_sensitivity(model, hw, layout, point, swing: float, mean_sensitivity=step_sensitivity) -> list[dict]:
    """P90 tokens/s per user = the mean (the step's: `mean_sensitivity`'s records of tokens-per-user) x the P90
    factor (serving/interactivity.py: a quadrature in k, the acceptance and the two spreads). Its elasticity to a
    parameter is the mean's plus the factor's, the factor's by a central difference in ln p (step 1e-3); the
    spreads enter the factor only."""
    from rubinperf.serving.interactivity import speed_factor

    if point.phase != "decode":
        raise SpecError(f"--metric {P90_METRIC}: a decode metric (the spread of per-user decode speed); got a prefill point")
    k, a = float(point.k(model)), float(point.accepted(model))
    args = {"draft_tokens": k, "acceptance": a, "acceptance_concentration": float(hw.acceptance_concentration),
            "step_time_spread": float(hw.step_time_spread)}

    def factor(**change):
        x = {**args, **change}
        return speed_factor(x["draft_tokens"], x["acceptance"], x["acceptance_concentration"], x["step_time_spread"])

    f0 = factor()

    def elasticity_and_ends(name):
        v = args[name]
        if v == 0:
            return 0.0, f0, f0
        h = 1e-3
        e = (math.log(factor(**{name: v * math.exp(h)})) - math.log(factor(**{name: v * math.exp(-h)}))) / (2 * h)
        return e, factor(**{name: v * (1 - swing)}), factor(**{name: v * (1 + swing)})

    records = mean_sensitivity(model, hw, layout, point, "tokens-per-user", swing)
    out = []
    for r in records:
        r = {**r, "metric": P90_METRIC, "metric_label": "P90 tokens/s per user", "metric_value": r["metric_value"] * f0}
        if r["elasticity"] is not None:
            if r["parameter"] in ("draft_tokens", "acceptance"):
                e, lo, hi = elasticity_and_ends(r["parameter"])
                r.update(elasticity=r["elasticity"] + e, metric_low=r["metric_low"] * lo, metric_high=r["metric_high"] * hi,
                         note=f"{r['note'] or r['doc']}; P90 factor elasticity {e:+.4f}")
            else:
                r.update(metric_low=r["metric_low"] * f0, metric_high=r["metric_high"] * f0)
        out.append(r)
    base = records[0]["metric_value"]
    for name, doc in P90_SPREADS.items():
        e, lo, hi = elasticity_and_ends(name)
        out.append({**{k: out[0][k] for k in ("hardware", "model", "layout", "phase", "metric", "metric_label",
                                               "metric_unit", "metric_value")},
                    "parameter": name, "group": "stack", "unit": "", "doc": doc, "value": args[name],
                    "elasticity": e + 0.0, "metric_low": base * lo, "metric_high": base * hi, "discrete": False,
                    "note": f"enters the P90 factor ({f0:.3f} x the mean), not the step"})
    out.sort(key=lambda r: (r["elasticity"] is None, -abs(r["elasticity"] or 0.0)))
    return out


def sensitivity_records(model, hw, layout, point, metric: str = "step-time", swing: float = 0.1) -> list[dict]:
    """`rubinperf sensitivity`'s records by the numeric step (step_sensitivity); `--symbolic` takes sympy's derivative
    of the symbolic step instead (rubinperf.analysis.sensitivity.sensitivity, which imports sympy)."""
    if metric == P90_METRIC:
        return p90_sensitivity(model, hw, layout, point, swing)
    return step_sensitivity(model, hw, layout, point, metric=metric, swing=swing)
