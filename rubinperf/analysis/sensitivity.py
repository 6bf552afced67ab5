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


from rubinperf.analysis.elasticity import P90_METRIC, P90_SPREADS  # noqa: E402,F401


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
    """P90 tokens/s per user by elasticity.p90_sensitivity, the mean's elasticities sympy's (this module's)."""
    from rubinperf.analysis.elasticity import p90_sensitivity

    return p90_sensitivity(model, hw, layout, point, swing, mean_sensitivity=sensitivity)
