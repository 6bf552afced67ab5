"""Interactivity as a distribution: tokens/s per user at P50 and P90, not only the mean.

One user's decode speed is the tokens its request gets per verify step over the step time:

    u = a_i / t,   a_i = 1 + k f_i  (tokens per verify step of request i),   t = s x step

- Per-request acceptance. Requests differ in how predictable their text is, so each has its own
  share f_i of the k drafted tokens accepted on average. ASSUMPTION (the stack's [interactivity]
  table says so): f_i ~ Beta(mu nu, (1 - mu) nu), mu = (a - 1) / k, so the mean of a_i is the
  measured mean acceptance a (3.51 at k = 5) exactly; nu (acceptance_concentration) sets the spread
  (the standard deviation of f is sqrt(mu (1 - mu) / (1 + nu))).
- Step fluctuation. The batch's mix of context lengths and its size change from step to step (the
  sweep's step is at the workload's mean context and a full batch): s is lognormal with median 1
  and log-standard deviation sigma (step_time_spread), ASSUMPTION.

"Mean" interactivity is a / step (what the sweep computes and earlier releases reported). P50 is
the median of u; P90 is the speed 90% of users reach or beat (the 10th percentile of u, the
published figures' statistic); P10 the speed only 10% reach. The quantiles of u / (a / step) do
not depend on the step, so each is one factor per (k, a, nu, sigma), computed once from a seeded
sample (deterministic) and cached.
"""

from __future__ import annotations

import functools

import numpy as np

STATS = ("p90", "p50", "mean")
SAMPLES = 400_000
QUANTILE_OF = {"p90": 0.10, "p50": 0.50, "p10": 0.90}   # user percentile -> quantile of the speed


def per_request_acceptance(k: int, acceptance: float, concentration: float, n: int = SAMPLES, rng=None) -> np.ndarray:
    """Samples of a request's mean tokens per verify step: 1 + k f, f ~ Beta(mu nu, (1 - mu) nu), mu = (a - 1) / k."""
    rng = np.random.default_rng(20261201) if rng is None else rng
    if k <= 0 or acceptance <= 1.0:
        return np.ones(n)
    mu = min(max((acceptance - 1.0) / k, 1e-9), 1 - 1e-9)
    return 1.0 + k * rng.beta(mu * concentration, (1 - mu) * concentration, n)


@functools.lru_cache(maxsize=256)
def speed_factors(k: int, acceptance: float, concentration: float, spread: float) -> dict:
    """{'p90': x, 'p50': x, 'p10': x, 'mean': 1.0}: tokens/s per user at each statistic over the mean a / step."""
    rng = np.random.default_rng(20261201)
    a = per_request_acceptance(k, acceptance, concentration, SAMPLES, rng) / acceptance
    s = np.exp(spread * rng.standard_normal(SAMPLES)) if spread > 0 else np.ones(SAMPLES)
    u = a / s
    out = {name: float(np.quantile(u, q)) for name, q in QUANTILE_OF.items()}
    out["mean"] = 1.0
    return out


def check_stat(stat: str) -> str:
    from rubinperf.errors import SpecError

    if stat not in STATS:
        raise SpecError(f"--interactivity-stat: expected one of {', '.join(STATS)}, got {stat!r}")
    return stat
