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
    ends = {name: got[1 + 4 * i: 5 + 4 * i] for i, name in enumerate(varied)}
    for group, name, _, _ in params:
        if group == "operating point":
            value = _point_value(model, point, name)
            ends[name] = metric_of(step(model, hw, layout, dataclasses.replace(
                point, **{name: value * np.asarray(factors)})), 4)

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
        low, high, down, up = (float(x) for x in ends[name])
        if value == 0:
            rec.update(value=value, elasticity=0.0, metric_low=base, metric_high=base, discrete=False,
                       note="zero here: a relative change does not move it")
            records.append(rec)
            continue
        arc = group == "operating point" and name in COUNTS
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
