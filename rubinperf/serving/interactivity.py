"""Interactivity as a distribution: tokens/s per user at P50 and P90, not only the mean.

One user's decode speed is the tokens its request gets per verify step over the step time:

    u = a_i / t,   a_i = 1 + k f_i  (tokens per verify step of request i),   t = s x step

- Per-request acceptance. Requests differ in how predictable their text is, so each has its own
  share f_i of the k drafted tokens accepted on average: f_i ~ Beta(mu nu, (1 - mu) nu),
  mu = (a - 1) / k, so the mean of a_i is the measured mean acceptance a (3.51 at k = 5) exactly;
  nu (acceptance_concentration) sets the spread (the standard deviation of f is
  sqrt(mu (1 - mu) / (1 + nu))). The stacks take nu from public per-dataset acceptance lengths of
  EAGLE-3 and MTP drafts by the method of moments (their [interactivity] source says which).
- Step fluctuation. A request's mean step time differs from the swept step (the batch's mix of
  context lengths and its size change): s is lognormal with median 1 and log-standard deviation
  sigma (step_time_spread), from the published single-user P50/P90 pair at a fixed acceptance.

"Mean" interactivity is a / step (what the sweep computes and earlier releases reported). P50 is
the median of u; P90 is the speed 90% of users reach or beat (the 10th percentile of u, the
published figures' statistic); P10 the speed only 10% reach. The quantiles of u / (a / step) do
not depend on the step, so each is one factor per (k, a, nu, sigma).

Both spreads' law and its percentiles are rubinperf/step/latency.py's (acceptance_law and
time_per_token_factor: a request's time per token is 1 / u, so the speed's quantile q is 1 / the time per
token's percentile 100 (1 - q)); they are evaluated in scalars, deterministically (no sampling, no scipy),
once per (k, a, nu, sigma). A Monte Carlo of the same law (sampled_speed_factors) is what tests hold them to.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rubinperf.step.latency import acceptance_law, time_per_token_factor

STATS = ("p90", "p50", "mean")
QUANTILE_OF = {"p90": 0.10, "p50": 0.50, "p10": 0.90}   # user percentile -> quantile of the speed
BISECTIONS = 40           # halvings of the bracket of ln(x) in a step mixture (to 2^-40 of its width)


def per_request_acceptance(k: int, acceptance: float, concentration: float, n: int = 400_000, rng=None) -> np.ndarray:
    """Samples of a request's mean tokens per verify step: 1 + k f, f ~ Beta(mu nu, (1 - mu) nu), mu = (a - 1) / k
    (a Monte Carlo of the law speed_factors integrates; tests hold the two together)."""
    rng = np.random.default_rng(20261201) if rng is None else rng
    law = acceptance_law(float(k), float(acceptance), float(concentration))   # the one law, step/latency.py's
    if law is None:
        return np.full(n, max(float(acceptance), 1.0) if k > 0 else 1.0)
    return 1.0 + k * rng.beta(law.alpha, law.beta, n)


def sampled_speed_factors(k: int, acceptance: float, concentration: float, spread: float, n: int = 400_000,
                          seed: int = 20261201) -> dict:
    """speed_factors by Monte Carlo (n samples): the check the quadrature is held to."""
    rng = np.random.default_rng(seed)
    a = per_request_acceptance(k, acceptance, concentration, n, rng) / acceptance
    s = np.exp(spread * rng.standard_normal(n)) if spread > 0 else np.ones(n)
    u = a / s
    out = {name: float(np.quantile(u, q)) for name, q in QUANTILE_OF.items()}
    out["mean"] = 1.0
    return out


@functools.lru_cache(maxsize=256)
def speed_factors(k: int, acceptance: float, concentration: float, spread: float) -> dict:
    """{'p90': x, 'p50': x, 'p10': x, 'mean': 1.0}: tokens/s per user at each statistic over the mean a / step."""
    out = {name: speed_factor(int(k), acceptance, concentration, spread, name) for name in QUANTILE_OF}
    out["mean"] = 1.0
    return out


def speed_factor(k: float, acceptance: float, concentration: float, spread: float, stat: str = "p90") -> float:
    """One statistic's factor over the mean, for any (also fractional) k: what sensitivity differentiates."""
    if stat == "mean":
        return 1.0
    percentile = 100.0 * (1.0 - QUANTILE_OF[stat])   # of the time per token
    return 1.0 / time_per_token_factor(float(k), float(acceptance), float(concentration), float(spread), percentile)


# ---------------------------------------------------------------- the normal CDF, in numpy (step mixtures)


def _phi(z):
    """Standard normal CDF: 0.5 erfc(-z / sqrt 2), erfc by the Chebyshev fit of Numerical Recipes (Press et al.,
    2nd ed., section 6.2, erfcc: fractional error below 1.2e-7 everywhere)."""
    x = np.clip(-np.asarray(z, dtype=float) / math.sqrt(2.0), -40.0, 40.0)
    t = 1.0 / (1.0 + 0.5 * np.abs(x))
    poly = -x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    erfc_abs = t * np.exp(poly)
    erfc = np.where(x >= 0, erfc_abs, 2.0 - erfc_abs)
    return 0.5 * erfc


def check_stat(stat: str) -> str:
    from rubinperf.errors import SpecError

    if stat not in STATS:
        raise SpecError(f"--interactivity-stat: expected one of {', '.join(STATS)}, got {stat!r}")
    return stat


def time_per_token_factors(k: int, acceptance: float, concentration: float, spread: float,
                           percentiles: tuple = (50.0, 90.0, 99.0)) -> tuple:
    """Percentiles of one request's time per output token over its mean (mean step / mean acceptance), from the same
    spreads as the speed's."""
    return tuple(time_per_token_factor(float(k), float(acceptance), float(concentration), float(spread), float(p))
                 for p in percentiles)


def step_mixture_percentiles(times, weights, spread: float, percentiles) -> np.ndarray:
    """Percentiles of a step's time when a share `weights[j]` of steps take `times[j]` (arrays over points), each
    spread lognormally about it by `spread` (the step_time_spread P90 uses): the CDF
    sum_j w_j Phi(ln(x / t_j) / spread), inverted by bisection in ln x (spread 0: the step CDF, its left limit)."""
    t = np.asarray(times, dtype=float)            # (J, ...) step times
    w = np.asarray(weights, dtype=float)          # (J, ...) shares, summing to 1 over J
    log_t = np.log(t)                             # (the same in every bisection)
    lo0 = np.log(np.min(t, axis=0)) - 6 * spread - 1e-9
    hi0 = np.log(np.max(t, axis=0)) + 6 * spread + 1e-9
    # every percentile's bisection at once, along a first axis (each element's operations as for that percentile alone)
    q = (np.array([float(p) for p in percentiles]) / 100.0).reshape((-1,) + (1,) * lo0.ndim)
    lo = np.broadcast_to(lo0, q.shape[:1] + lo0.shape).copy()
    hi = np.broadcast_to(hi0, q.shape[:1] + hi0.shape).copy()
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        if spread > 0:
            cdf = np.sum(w * _phi((mid[:, None] - log_t) / spread), axis=1)
        else:
            cdf = np.sum(w * (log_t <= mid[:, None]), axis=1)
        below = cdf < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.exp(0.5 * (lo + hi))
