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

import math
from typing import TYPE_CHECKING

import sympy
from sympy.ntheory.multinomial import multinomial_coefficients_iterator

from rubinperf.analysis import symbolic as S
from rubinperf.errors import SpecError
from rubinperf.specs.hardware import Hardware
from rubinperf.specs.loader import numeric_fields, spec_fields

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

from rubinperf.analysis.elasticity import POINT_DOC, POINT_UNITS, point_parameters  # noqa: E402,F401


P90_METRIC = "tokens-per-user-p90"
P90_SPREADS = {"acceptance_concentration": "nu of the Beta law of a request's accepted share of drafts (P90 factor only)",
               "step_time_spread": "log-sd of a request's step time around the swept step (P90 factor only)"}


def sensitivity(model, hw: Hardware, layout, point, metric: str = "step-time", swing: float = 0.1) -> list[dict]:
    """One record per parameter, sorted by |elasticity| (largest first; discrete fields last)."""
    if metric == P90_METRIC:
        return _p90_sensitivity(model, hw, layout, point, swing)
    if metric not in S.METRICS:
        raise SpecError(f"--metric: expected one of {', '.join([*S.METRICS, P90_METRIC])}, got {metric!r}")
    if not 0 < swing < 1:
        raise SpecError(f"--swing: expected a fraction in (0, 1), got {swing}")
    ss = S.symbolic_step(model, hw, layout, point)
    expr = ss.metric(metric)
    numbers: dict = {}   # each node's number at the operating point, shared by the walks below
    base = S.evaluate(expr, ss.values, numbers)
    smooth = S.active_branch(expr, ss.values, numbers)   # the piece that holds here: its derivative is the elasticity
    order = list(ss.values)
    at = S.lambdify(expr, order)
    x0 = [float(ss.values[s]) for s in order]
    derivatives = _Derivatives(smooth)
    used = derivatives.free_symbols(expr)   # (memoised per node: the tree shares its sub-expressions)
    label, unit = S.METRICS[metric]
    common = {"hardware": hw.name, "model": model.name, "layout": layout.name, "phase": point.phase,
              "metric": metric, "metric_label": label, "metric_unit": unit, "metric_value": base}

    from rubinperf.specs.stack import POINT_FIELDS as STACK_POINT_FIELDS
    from rubinperf.specs.stack import Platform

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
            e = S.evaluate(derivatives.of(s), ss.values, numbers) * value / base
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



class _Derivatives:
    """d expr / d s of one smooth expression (sums, products and numeric powers of symbols: an active branch)
    for many s: the expressions sympy.diff builds, by its own rules (the sum rule, the Leibniz rule over a
    product's factors, the power rule), without the bookkeeping of sympy's Derivative around each sub-expression
    (it walks the whole sub-expression again for its free symbols and its derivatives, at every level: most of
    the time of `sensitivity`). A node of another kind is left to sympy.diff."""

    def __init__(self, expr):
        self.expr = expr
        self._free: dict = {}

    def free_symbols(self, e) -> set:
        free = self._free.get(e)
        if free is None:
            free = {e} if e.is_Symbol else set().union(*map(self.free_symbols, e.args)) if e.args else set()
            self._free[e] = free
        return free

    def of(self, s):
        return self._d(self.expr, s, {})

    def _d(self, e, s, memo: dict):
        if s not in self.free_symbols(e):
            return sympy.S.Zero
        if e is s:
            return sympy.S.One
        out = memo.get(e)
        if out is not None:
            return out
        if e.is_Add:
            out = e.func(*[self._d(a, s, memo) for a in e.args])
        elif e.is_Mul:
            args = e.args
            out = sympy.Add(*[c * sympy.Mul(*[self._d(a, s, memo) if k else a for k, a in zip(ks, args)])
                              for ks, c in multinomial_coefficients_iterator(len(args), 1)])
        elif e.is_Pow and e.exp.is_Number:   # d(b^n) = b^n (0 + db n / b): the terms sympy's Pow builds (0 log b: 0)
            out = e * (sympy.S.Zero + self._d(e.base, s, memo) * e.exp / e.base)
        else:
            out = e.diff(s)
        memo[e] = out
        return out


def _p90_sensitivity(model, hw: Platform, layout, point, swing: float) -> list[dict]:
    """P90 tokens/s per user = the mean (the step's, symbolic) x the P90 factor (serving/interactivity.py: a
    quadrature in k, the acceptance and the two spreads). Its elasticity to a parameter is the mean's plus the
    factor's, the factor's by a central difference in ln p (step 1e-3); the spreads enter the factor only."""
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

    records = sensitivity(model, hw, layout, point, "tokens-per-user", swing)
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
