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

The law of f (its mean, spread and normal limit) is rubinperf/step/latency.py's acceptance_law, which also
evaluates one percentile of a request's time per token in scalars for `estimate` (no numpy); tests hold the two
evaluators together. Here they are computed over arrays by quadrature, not sampling (deterministic, about a millisecond, no scipy):

    P(u <= x) = E_f[ Phi(ln(x a_mean / a(f)) / sigma) ]

The Beta law of f is cut into CELLS equal cells of [0, 1]; each cell's mass is a difference of the
regularized incomplete beta function I_x(alpha, beta) (a continued fraction, below) and its
point is the cell's conditional mean, from I_x(alpha + 1, beta) (so the mixture's mean is exact).
The quantile is found by bisection on that CDF. With sigma = 0 the CDF of a itself is interpolated
between cell edges. A Beta law narrower than NORMAL_BETA_NU (alpha + beta above it) is taken as
normal with the same mean and variance (its skewness is then below 0.05).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rubinperf.step.latency import CF_ITERATIONS, NORMAL_BETA_NU, acceptance_law  # noqa: F401 (the one law of f)

STATS = ("p90", "p50", "mean")
QUANTILE_OF = {"p90": 0.10, "p50": 0.50, "p10": 0.90}   # user percentile -> quantile of the speed
CELLS = 2048              # cells of the Beta law of f on [0, 1]
BISECTIONS = 40           # halvings of the bracket of ln(x) (to 2^-40 of its width)


def per_request_acceptance(k: int, acceptance: float, concentration: float, n: int = 400_000, rng=None) -> np.ndarray:
    """Samples of a request's mean tokens per verify step: 1 + k f, f ~ Beta(mu nu, (1 - mu) nu), mu = (a - 1) / k
    (a Monte Carlo of the law speed_factors integrates; tests hold the two together)."""
    rng = np.random.default_rng(20261201) if rng is None else rng
    if k <= 0 or acceptance <= 1.0:
        return np.ones(n)
    mu = min(max((acceptance - 1.0) / k, 1e-9), 1 - 1e-9)
    return 1.0 + k * rng.beta(mu * concentration, (1 - mu) * concentration, n)


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
    qs = np.array(list(QUANTILE_OF.values()))
    nodes = _acceptance_nodes(int(k), float(acceptance), float(concentration))
    x = _quantiles(nodes, float(spread), qs)
    out = {name: float(v) for name, v in zip(QUANTILE_OF, x)}
    out["mean"] = 1.0
    return out


def speed_factor(k: float, acceptance: float, concentration: float, spread: float, stat: str = "p90") -> float:
    """One statistic's factor over the mean, uncached, for any (also fractional) k: what sensitivity differentiates."""
    if stat == "mean":
        return 1.0
    nodes = _acceptance_nodes(float(k), float(acceptance), float(concentration))
    return float(_quantiles(nodes, float(spread), np.array([QUANTILE_OF[stat]]))[0])


def _acceptance_nodes(k: float, acceptance: float, nu: float):
    """(weights, points, edges, cdf at edges, normal) of a / a_mean: cells of the law of f with their mass and
    conditional mean; a one-point law where there is no spread (no drafts, or nu past any width); `normal`
    the (mean, sd) of a / a_mean where the law of f is taken as normal, else None."""
    one = np.ones(1)
    law = acceptance_law(k, acceptance, nu)
    if law is None:
        return one, one, None, None, None
    mu, sd, alpha, beta = law.mu, law.sd, law.alpha, law.beta
    edges = np.linspace(0.0, 1.0, CELLS + 1)
    normal = None
    if law.normal:
        normal = ((1.0 + k * mu) / acceptance, k * sd / acceptance)
        z = (edges - mu) / sd
        cdf = _phi(z)
        cdf[0], cdf[-1] = 0.0, 1.0
        dens = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        first = mu * cdf - sd * dens          # integral of f over the normal law up to each edge
    else:
        cdf = _betainc(alpha, beta, edges)
        # I_x(alpha + 1, beta) = I_x(alpha, beta) - x^alpha (1 - x)^beta / (alpha B(alpha, beta)): E[f; f <= x] = mu I_x(alpha + 1, beta)
        with np.errstate(divide="ignore"):
            log_term = alpha * np.log(edges) + beta * np.log1p(-edges) - math.log(alpha) - _log_beta(alpha, beta)
        first = mu * (cdf - np.exp(log_term))
    mass = np.diff(cdf)
    keep = mass > 1e-15
    f_mean = np.diff(first)[keep] / mass[keep]
    f_mean = np.clip(f_mean, edges[:-1][keep], edges[1:][keep])
    weights = mass[keep] / mass[keep].sum()
    points = (1.0 + k * f_mean) / acceptance
    return weights, points, (1.0 + k * edges) / acceptance, cdf, normal


def _quantiles(nodes, sigma: float, qs: np.ndarray) -> np.ndarray:
    """Quantiles qs of u = a / s, a from the nodes, ln s ~ N(0, sigma)."""
    weights, points, edges, cdf, normal = nodes
    if sigma <= 0:
        if edges is None:
            return np.full(qs.shape, float(points[0]))
        if normal is not None:   # a normal law's quantiles, in closed form
            return normal[0] + normal[1] * _phi_inverse(qs)
        return np.interp(qs, cdf, edges)   # the CDF of a, linear within a cell
    z = _phi_inverse(qs)
    lo = np.log(points.min()) - sigma * (abs(z) + 1.0) - 1e-12   # brackets of ln x: past every node's own quantile
    hi = np.log(points.max()) + sigma * (abs(z) + 1.0) + 1e-12
    lo, hi = np.broadcast_to(lo, qs.shape).copy(), np.broadcast_to(hi, qs.shape).copy()
    logp = np.log(points)
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        c = _phi((mid[:, None] - logp[None, :]) * (1.0 / sigma)) @ weights
        below = c < qs
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.exp(0.5 * (lo + hi))


# ---------------------------------------------------------------- special functions, in numpy


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


def _phi_inverse(q: np.ndarray) -> np.ndarray:
    """Standard normal quantile by bisection on _phi (only to bracket a search)."""
    lo, hi = np.full(q.shape, -9.0), np.full(q.shape, 9.0)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        below = _phi(mid) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _betainc(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """Regularized incomplete beta I_x(a, b) on an array of x in [0, 1]: the continued fraction of
    Abramowitz & Stegun 26.5.8 evaluated by the modified Lentz method, on the side of the symmetry
    I_x(a, b) = 1 - I_{1-x}(b, a) where it converges fast (x < (a + 1) / (a + b + 2))."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    out[x <= 0] = 0.0
    out[x >= 1] = 1.0
    inner = (x > 0) & (x < 1)
    xi = x[inner]
    flip = xi >= (a + 1) / (a + b + 2)
    aa, bb = np.where(flip, b, a), np.where(flip, a, b)
    xx = np.where(flip, 1 - xi, xi)
    lead = np.exp(aa * np.log(xx) + bb * np.log1p(-xx) - _log_beta(a, b)) / aa
    val = lead * _betacf(aa, bb, xx)
    out[inner] = np.where(flip, 1 - val, val)
    return np.clip(out, 0.0, 1.0)


def _betacf(a, b, x):
    """The continued fraction of I_x(a, b) (a, b, x arrays of one shape), to a relative 1e-14."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1.0 / d
    h = d.copy()
    done = np.zeros(x.shape, dtype=bool)
    for m in range(1, CF_ITERATIONS + 1):
        m2 = 2 * m
        num = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + num * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        h = np.where(done, h, h * d * c)
        num = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + num * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        step = d * c
        h = np.where(done, h, h * step)
        done |= np.abs(step - 1.0) < 1e-14
        if m % 8 == 0 and done.all():
            break
    return h


def check_stat(stat: str) -> str:
    from rubinperf.errors import SpecError

    if stat not in STATS:
        raise SpecError(f"--interactivity-stat: expected one of {', '.join(STATS)}, got {stat!r}")
    return stat


@functools.lru_cache(maxsize=256)
def time_per_token_factors(k: int, acceptance: float, concentration: float, spread: float,
                           percentiles: tuple = (50.0, 90.0, 99.0)) -> tuple:
    """Percentiles of one request's time per output token over its mean (mean step / mean acceptance), from the same
    spreads as the speed's: the request's time per token is 1 / u, so its p-th percentile is 1 / the (100 - p)-th
    percentile of u / (a / step)."""
    qs = 1.0 - np.asarray(percentiles, dtype=float) / 100.0
    nodes = _acceptance_nodes(int(k), float(acceptance), float(concentration))
    return tuple(float(1.0 / x) for x in _quantiles(nodes, float(spread), qs))


def step_mixture_percentiles(times, weights, spread: float, percentiles) -> np.ndarray:
    """Percentiles of a step's time when a share `weights[j]` of steps take `times[j]` (arrays over points), each
    spread lognormally about it by `spread` (the step_time_spread P90 uses): the CDF
    sum_j w_j Phi(ln(x / t_j) / spread), inverted by bisection in ln x (spread 0: the step CDF, its left limit)."""
    t = np.asarray(times, dtype=float)            # (J, ...) step times
    w = np.asarray(weights, dtype=float)          # (J, ...) shares, summing to 1 over J
    out = []
    lo0 = np.log(np.min(t, axis=0)) - 6 * spread - 1e-9
    hi0 = np.log(np.max(t, axis=0)) + 6 * spread + 1e-9
    for p in percentiles:
        q = p / 100.0
        lo, hi = lo0.copy(), hi0.copy()
        for _ in range(BISECTIONS):
            mid = 0.5 * (lo + hi)
            if spread > 0:
                cdf = np.sum(w * _phi((mid - np.log(t)) / spread), axis=0)
            else:
                cdf = np.sum(w * (np.log(t) <= mid), axis=0)
            below = cdf < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out.append(np.exp(0.5 * (lo + hi)))
    return np.array(out)
