"""Elasticities of a step metric to every hardware and operating-point parameter.

The elasticity of a metric M to a parameter p is d ln M / d ln p = (dM/dp) (p / M): the
percentage change of M for a one percent change of p. It comes from sympy's derivative of
the symbolic metric (the step built over symbols, see `symbolic`), evaluated at the
operating point. The step is piecewise (max of compute, memory and link terms per op,
max of GPU and CPU time): away from a kink the derivative is exact; exactly at one sympy's
Heaviside(0) = 1/2 gives the mean of the two one-sided elasticities.

Integer hardware fields (`gpus_per_tray`, `nvlink_domain_size`, `memory_domains`,
`sm_count`) shape the graph rather than scale a rate; they are listed as discrete and not
varied. Beside each elasticity, the metric at p x (1 - swing) and p x (1 + swing),
evaluated exactly (the tornado plot's bars).
"""

from __future__ import annotations

import sympy

from rubinperf import symbolic as S
from rubinperf.errors import SpecError
from rubinperf.specs.hardware import Hardware
from rubinperf.specs.loader import numeric_fields, spec_fields

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


def point_parameters(model, layout, phase: str) -> list[str]:
    """The operating-point parameters that mean something for this engine shape."""
    names = ["batch", "context"]
    names += ["draft_tokens", "acceptance"] if phase == "decode" else ["new_tokens"]
    if layout.kind == "dep":
        names.append("balancedness")
        if model.draft_layers:
            names.append("draft_balancedness")
    return names


def sensitivity(model, hw: Hardware, layout, point, metric: str = "step-time", swing: float = 0.1) -> list[dict]:
    """One record per parameter, sorted by |elasticity| (largest first; discrete fields last)."""
    if metric not in S.METRICS:
        raise SpecError(f"--metric: expected one of {', '.join(S.METRICS)}, got {metric!r}")
    if not 0 < swing < 1:
        raise SpecError(f"--swing: expected a fraction in (0, 1), got {swing}")
    ss = S.symbolic_step(model, hw, layout, point)
    expr = ss.metric(metric)
    base = S.evaluate(expr, ss.values)
    smooth = S.active_branch(expr, ss.values)   # the piece that holds here: its derivative is the elasticity
    order = list(ss.values)
    at = S.lambdify(expr, order)
    x0 = [float(ss.values[s]) for s in order]
    used = expr.free_symbols
    label, unit = S.METRICS[metric]
    common = {"hardware": hw.name, "model": model.name, "layout": layout.name, "phase": point.phase,
              "metric": metric, "metric_label": label, "metric_unit": unit, "metric_value": base}

    from rubinperf.specs.stack import POINT_FIELDS as STACK_POINT_FIELDS, Platform

    meta = {f.name: f.metadata for f in spec_fields(Platform)}
    params = [(meta[name]["spec"], name, meta[name]["unit"], "") for name in numeric_fields(Platform)
              if name not in STACK_POINT_FIELDS]
    params += [("operating point", name, POINT_UNITS[name], POINT_DOC[name])
               for name in point_parameters(model, layout, point.phase)]
    floats = S.hardware_fields()

    records = []
    for group, name, u, doc in params:
        rec = {**common, "parameter": name, "group": group, "unit": u, "doc": doc}
        if group in ("hardware", "stack") and name not in floats:
            rec.update(value=float(getattr(hw, name)), elasticity=None, metric_low=None, metric_high=None,
                       discrete=True, note=("integer structure (trays, domains): not varied" if group == "hardware"
                                            else "integer kernel-library choice (tiles, split-K): not varied"))
            records.append(rec)
            continue
        s = S.hardware_symbol(name) if group in ("hardware", "stack") else S.point_symbol(name)
        value = float(ss.values[s])
        if s in used and value != 0:
            e = S.evaluate(sympy.diff(smooth, s), ss.values) * value / base
            i = order.index(s)
            lo, hi = list(x0), list(x0)
            lo[i], hi[i] = value * (1 - swing), value * (1 + swing)
            low, high = float(at(*lo)), float(at(*hi))
        else:
            e, low, high = 0.0, base, base
        rec.update(value=value, elasticity=e + 0.0, metric_low=low, metric_high=high, discrete=False,
                   note="" if s in used else "does not enter this step")
        records.append(rec)
    records.sort(key=lambda r: (r["elasticity"] is None, -abs(r["elasticity"] or 0.0)))
    return records

