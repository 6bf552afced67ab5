"""Per-request latency at one step (what `estimate` prints beside the step): TPOT and ITL of a decode
point with their P90, TTFT of a prefill point with its KV transfer to the decode pool. numpy-free.

Decode, for a request in the step's batch (a accepted tokens per verify step, k drafted):

    TPOT mean = step / a            TPOT P90 = TPOT mean x the P90 factor of a request's time per token
    ITL mean  = step                ITL P90  = step exp(z90 sigma)         (z90 = 1.2816)
    GPU share of ITL = GPU time / step     (the rest: host work on the step's critical path)

A request's time per token is s x step / a_i: its own acceptance a_i = 1 + k f_i, f_i ~ Beta(mu nu,
(1 - mu) nu), mu = (a - 1) / k, and its step's fluctuation s, lognormal with median 1 and log-sd sigma
(acceptance_concentration nu and step_time_spread sigma of the stack: the spreads P90 interactivity
uses, rubinperf/serving/interactivity.py, which takes its factors from here). Its percentile p
is 1 / the (100 - p)-th percentile of u = (a_i / a) / s, whose CDF is

    P(ln u <= y) = E_Z[ F_f((a e^(y + sigma Z) - 1) / k) ],   Z ~ N(0, 1),  F_f the law of f,

evaluated here by the trapezoid rule in Z (spectrally accurate for a Gaussian weight, its step finer
than the law of f's width in units of sigma) where F_f is smooth there; for a law of f with mass near 0
or 1 (F_f ~ x^alpha), or far narrower than sigma, as E_f[Phi((y - ln(a_i / a)) / sigma)] over cells of
the law of f, each cell's mass at its conditional mean. y is solved by safeguarded Newton. sigma = 0
inverts F_f itself; no drafts (or no spread) leaves the lognormal alone: exp(z_p sigma).

Prefill (a request whose uncached prompt is this step's new tokens, its context already cached on the
rank: prefix loads and queueing are `pareto`'s and `serve`'s):

    TTFT = step + sending the step's KV (each sequence's context + new tokens) to the decode pool

over the P/D link (NVLink, as the bundled workloads; the NIC on a cluster when the prefill instance
is wider than one NVLink domain: kv_link). The transfer is the kv_transfer kernel, timed by the roofline.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, NamedTuple

from rubinperf.kept import kept
from rubinperf.kernels.memory import kv_transfer
from rubinperf.roofline import kernel_time
from rubinperf.step.capacity import kv_bytes_per_request

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.layout import Layout
    from rubinperf.specs.stack import Platform

NORMAL_BETA_NU = 2000.0    # alpha + beta above which the Beta law of f is taken as normal (skewness below 0.05)
CF_ITERATIONS = 400        # most terms of the incomplete beta's continued fraction (it needs ~sqrt(nu))
Z_SPAN = 8.5               # the trapezoid rule's nodes in Z cover |z| <= Z_SPAN (the tail beyond: below 1e-16)
Z_STEP = 0.5               # its widest step (finer where the law of f is narrow against sigma)
CELLS_NARROW = 256         # cells of a law of f narrower than sigma / 8 (over mu +- 14 sd)
CELLS_EDGE = 2048          # cells of a law of f with mass near 0 or 1 (over [0, 1])
DEFAULT_KV_LINK = "nvlink"   # the bundled workloads' serving.kv_transfer_link, which `estimate` (no workload) assumes


class AcceptanceLaw(NamedTuple):
    """The law of a request's accepted share f of k drafted tokens: Beta(alpha, beta) with mean mu and
    standard deviation sd, taken as normal(mu, sd) where `normal` (alpha + beta above NORMAL_BETA_NU)."""

    mu: float
    sd: float
    alpha: float
    beta: float
    normal: bool

    @property
    def log_beta(self) -> float:
        """ln B(alpha, beta)."""
        return _log_beta(self.alpha, self.beta)


def acceptance_law(k: float, acceptance: float, nu: float) -> AcceptanceLaw | None:
    """The per-request acceptance law at mean `acceptance` tokens per verify step; None where requests do not
    differ (no drafts, no acceptance past the first token, or a spread below 1e-12 of a token)."""
    if k <= 0 or acceptance <= 1.0:
        return None
    mu = min(max((acceptance - 1.0) / k, 1e-9), 1 - 1e-9)
    sd = math.sqrt(mu * (1 - mu) / (1 + nu))
    if sd * k < 1e-12 * acceptance:
        return None
    alpha, beta = mu * nu, (1 - mu) * nu
    return AcceptanceLaw(mu, sd, alpha, beta, alpha + beta > NORMAL_BETA_NU)


# ---------------------------------------------------------------- the time-per-token factor, in scalars


@functools.lru_cache(maxsize=256)
@kept(__file__)   # (the same float on every run: kept beside the bytecode, rubinperf/kept.py)
def time_per_token_factor(k: float, acceptance: float, nu: float, sigma: float, percentile: float) -> float:
    """The `percentile`-th percentile of one request's time per token over its mean (step / acceptance)."""
    q = 1.0 - percentile / 100.0            # the matching quantile of the speed u
    law = acceptance_law(float(k), float(acceptance), float(nu))
    if law is None:
        return math.exp(-sigma * _phi_inverse(q))
    a = float(acceptance)
    if sigma <= 0:
        return a / (1.0 + k * _law_inverse(law, q))
    y = _solve(law, float(k), a, float(sigma), q)
    return math.exp(-y)


def _solve(law: AcceptanceLaw, k: float, a: float, sigma: float, q: float) -> float:
    """y with P(ln u <= y) = q: Newton on the CDF, kept inside a bracket that bisects where it strays."""
    width = k * law.sd / a                  # of ln(a_i / a), near its mean
    y = math.log((1.0 + k * law.mu) / a) + math.hypot(width, sigma) * _phi_inverse(q)   # a normal law's, to start
    if _at_an_end(law) or width < sigma / 8:
        cdf_and_density, y = _over_f(law, k, a, sigma, CELLS_EDGE if _at_an_end(law) else CELLS_NARROW, q)
    else:
        cdf_and_density = _over_z(law, k, a, sigma, min(Z_STEP, width / (3.0 * sigma)))
    lo = math.log(1.0 / a) - (Z_SPAN + 1.0) * sigma
    hi = math.log((1.0 + k) / a) + (Z_SPAN + 1.0) * sigma
    y = min(max(y, lo), hi)
    for _ in range(200):
        c, d = cdf_and_density(y)
        if c < q:
            lo = y
        else:
            hi = y
        step = (c - q) / d if d > 0 else math.inf
        nxt = y - step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - y) < 1e-14 or hi - lo < 1e-14:
            return nxt
        y = nxt
    return y


def _over_z(law: AcceptanceLaw, k: float, a: float, sigma: float, h: float):
    """The CDF of ln u and its density as E_Z[F_f(f*(y + sigma Z))], by the trapezoid rule in Z of step <= h: for a
    law of f not much narrower than sigma and away from 0 and 1 (its CDF smooth where the nodes read it)."""
    n = int(math.ceil(Z_SPAN / h))
    h = Z_SPAN / n
    ws = [math.exp(-0.5 * (j * h) ** 2) for j in range(-n, n + 1)]
    total = sum(ws)
    nodes = [(sigma * j * h, w / total) for j, w in zip(range(-n, n + 1), ws)]

    def cdf_and_density(y: float) -> tuple[float, float]:
        c = d = 0.0
        for dz, w in nodes:
            e = a * math.exp(y + dz)
            x = (e - 1.0) / k
            if x <= 0.0:
                continue
            if x >= 1.0:
                c += w
                continue
            c += w * _law_cdf(law, x)
            d += w * _law_density(law, x) * e / k
        return c, d

    return cdf_and_density


def _over_f(law: AcceptanceLaw, k: float, a: float, sigma: float, cells: int, q: float):
    """The CDF of ln u and its density as E_f[Phi((y - ln(a_i / a)) / sigma)] over cells of the law of f (each its
    mass at its conditional mean): for a law far narrower than sigma, or one with
    mass near 0 or 1 (there its CDF is x^alpha or (1 - x)^beta: not smooth enough for the trapezoid in Z). With a
    point to start Newton from."""
    nodes, total = _f_nodes(law, k, a, cells)
    norm = 1.0 / (sigma * math.sqrt(2 * math.pi))
    seen, start = 0.0, nodes[-1][0]   # to start: the cells' own q-quantile, shifted by the step spread's
    for lp, w in nodes:
        seen += w / total
        if seen >= q:
            start = lp
            break
    start += sigma * _phi_inverse(q)

    root2, erfc, exp = math.sqrt(2.0), math.erfc, math.exp

    def cdf_and_density(y: float) -> tuple[float, float]:
        c = d = 0.0
        for lp, w in nodes:
            z = (y - lp) / sigma
            c += w * (0.5 * erfc(-z / root2))   # _phi(z), inline
            d += w * exp(-0.5 * z * z) * norm
        return c / total, d / total

    return cdf_and_density, start


@functools.lru_cache(maxsize=64)
def _f_nodes(law: AcceptanceLaw, k: float, a: float, cells: int) -> tuple:
    """(nodes, their total mass) of _over_f: each cell of the law of f as (ln((1 + k f) / a) at its conditional mean f,
    its mass), cells of no mass left out. The same for every percentile of one law (a closed loop asks for a dozen):
    made once per process (a CDF and a first moment at each of up to 2,049 edges, a continued fraction each)."""
    lo, hi = (0.0, 1.0) if _at_an_end(law) else (max(0.0, law.mu - 14 * law.sd), min(1.0, law.mu + 14 * law.sd))
    edges = [lo + (hi - lo) * j / cells for j in range(cells + 1)]
    lb = None if law.normal else law.log_beta   # (computed once for every edge)
    cdf = [_law_cdf(law, x, lb) for x in edges]
    first = [_law_first(law, x, c, lb) for x, c in zip(edges, cdf)]
    cdf[0], first[0] = 0.0, 0.0
    cdf[-1], first[-1] = 1.0, law.mu
    nodes = []
    for j in range(cells):
        mass = cdf[j + 1] - cdf[j]
        if mass > 1e-15:
            f = min(max((first[j + 1] - first[j]) / mass, edges[j]), edges[j + 1])
            nodes.append((math.log((1.0 + k * f) / a), mass))
    return tuple(nodes), sum(w for _, w in nodes)


def _at_an_end(law: AcceptanceLaw) -> bool:
    """The law of f has mass within 6 standard deviations of 0 or 1, where its CDF is not smooth (x^alpha)."""
    return law.mu - 6 * law.sd < 0.0 or law.mu + 6 * law.sd > 1.0


def _law_first(law: AcceptanceLaw, x: float, cdf: float, log_beta: float | None = None) -> float:
    """E[f; f <= x]: mu I_x(alpha + 1, beta) for the Beta law, mu Phi(z) - sd phi(z) for the normal."""
    if law.normal:
        z = (x - law.mu) / law.sd
        return law.mu * _phi(z) - law.sd * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    a, b = law.alpha, law.beta   # I_x(a + 1, b) = I_x(a, b) - x^a (1 - x)^b / (a B(a, b))
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else law.mu
    lb = _log_beta(a, b) if log_beta is None else log_beta
    return law.mu * (cdf - math.exp(a * math.log(x) + b * math.log1p(-x) - math.log(a) - lb))


def _law_cdf(law: AcceptanceLaw, x: float, log_beta: float | None = None) -> float:
    if law.normal:
        return _phi((x - law.mu) / law.sd)
    return _betainc(law.alpha, law.beta, x, log_beta)


def _law_density(law: AcceptanceLaw, x: float) -> float:
    if law.normal:
        z = (x - law.mu) / law.sd
        return math.exp(-0.5 * z * z) / (law.sd * math.sqrt(2 * math.pi))
    a, b = law.alpha, law.beta
    return math.exp((a - 1) * math.log(x) + (b - 1) * math.log1p(-x) - _log_beta(a, b))


def _law_inverse(law: AcceptanceLaw, q: float) -> float:
    """The q-quantile of f."""
    if law.normal:
        return law.mu + law.sd * _phi_inverse(q)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _betainc(law.alpha, law.beta, mid, law.log_beta) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _phi_inverse(q: float) -> float:
    """The standard normal quantile, by bisection on _phi (to 2^-60 of [-40, 40])."""
    lo, hi = -40.0, 40.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _phi(mid) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _betainc(a: float, b: float, x: float, log_beta: float | None = None) -> float:
    """Regularized incomplete beta I_x(a, b): the continued fraction of Abramowitz & Stegun 26.5.8 by the modified
    Lentz method, on the side of I_x(a, b) = 1 - I_{1-x}(b, a) where it converges fast. `log_beta`: ln B(a, b), where
    the caller has it (the same number either way: B(a, b) = B(b, a) in floating point too)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lb = _log_beta(a, b) if log_beta is None else log_beta
    if x >= (a + 1) / (a + b + 2):
        return 1.0 - _betainc_cf(b, a, 1.0 - x, lb)
    return _betainc_cf(a, b, x, lb)


def _betainc_cf(a: float, b: float, x: float, log_beta: float) -> float:
    # The partial numerators m (b - m) x / ((a - 1 + 2m)(a + 2m)) and -(a + m)(a + b + m) x / ((a + 2m)(a + 1 + 2m)),
    # their parts without x taken from _cf_terms (the same operations, in the same order, as written out here
    # each time): this runs a few thousand times for one percentile of a law at an end, in `estimate`'s start-up.
    tiny = 1e-300
    lead = math.exp(a * math.log(x) + b * math.log1p(-x) - log_beta) / a
    qab, qap = a + b, a + 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    # (|v| > tiny written as v > tiny or v < -tiny, and |v| < e as -e < v < e: the same for every float, nan
    # included, without a call to abs)
    for even_top, even_bottom, odd_top, odd_bottom in _cf_terms(a, b):
        for top, bottom in ((even_top, even_bottom), (odd_top, odd_bottom)):   # Lentz's step, even then odd
            num = top * x / bottom
            d = 1.0 + num * d
            d = 1.0 / (d if d > tiny or d < -tiny else tiny)
            c = 1.0 + num / c
            c = c if c > tiny or c < -tiny else tiny
            h *= d * c
        if -1e-14 < d * c - 1.0 < 1e-14:
            break
    return min(max(lead * h, 0.0), 1.0)


@functools.lru_cache(maxsize=64)
def _cf_terms(a: float, b: float) -> tuple:
    """The parts of the continued fraction's partial numerators that do not depend on x, for m = 1..CF_ITERATIONS:
    (m (b - m), (a - 1 + 2m)(a + 2m), -(a + m)(a + b + m), (a + 2m)(a + 1 + 2m))."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    out = []
    for m in range(1, CF_ITERATIONS + 1):
        m2 = 2 * m
        out.append((m * (b - m), (qam + m2) * (a + m2), -(a + m) * (qab + m), (a + m2) * (qap + m2)))
    return tuple(out)


# ---------------------------------------------------------------- the KV transfer of prefill


def kv_transfer_time(hw: Platform, nbytes: float, link: str) -> float:
    """Seconds to send `nbytes` of prefilled KV (per GPU) from the prefill to the decode pool over `link`."""
    return float(kernel_time(kv_transfer(nbytes, link), hw).expected_s)


def kv_transfer_bytes(m, layout: Layout, seqs: float, tokens: float) -> float:
    """Prefilled KV bytes one prefill GPU sends for `seqs` sequences of `tokens` each, at the family's bytes per
    token. The instance's KV goes out once, shared equally by its GPUs: a DEP rank sends its own sequences; TP GPUs
    send their K/V heads, and a copy that several GPUs hold (a latent, or a K/V head replicated once TP passes the
    heads) in equal slices (ASSUMPTION: the engine does not send a copy twice)."""
    return layout.per_gpu(seqs * float(kv_bytes_per_request(m, tokens)))


def kv_link(hw: Platform, link: str, prefill_layout: Layout, decode_layout: Layout | None = None) -> str:
    """The link that carries prefilled KV to the decode pool: `link`; on a cluster (a rack whose instances may
    span NVLink domains, max_nvlink_domains > 1) the scale-out NIC whenever a prefill instance and a decode
    instance cannot sit in one NVLink domain (either spans more than one, or the two together are wider than
    it). A single-domain rack keeps `link` (with NVLink, both pools must fit its domain)."""
    d = hw.nvlink_domain_size
    wide = prefill_layout.ranks > d or (decode_layout is not None and prefill_layout.ranks + decode_layout.ranks > d)
    cluster = getattr(hw, "max_nvlink_domains", 1) > 1
    return "scale-out" if wide and cluster else link


# ---------------------------------------------------------------- a step's latency record

P90 = 90.0


def step_latency(m, hw: Platform, layout: Layout, r, link: str = DEFAULT_KV_LINK) -> dict:
    """The latency keys of `estimate`'s record for step result `r` (times in ms; None where the phase has none)."""
    p = r.point
    step_s = float(r.expected_s)
    sigma = float(hw.step_time_spread)
    out = {"mean_tpot_ms": None, "p90_tpot_ms": None, "mean_itl_ms": None, "p90_itl_ms": None,
           "itl_gpu_share": None, "mean_ttft_ms": None, "kv_transfer_ms": None, "kv_transfer_link": None}
    if p.phase == "decode":
        k, a = float(p.k(m)), float(p.accepted(m))
        tpot = step_s / a
        factor = time_per_token_factor(k, a, float(hw.acceptance_concentration), sigma, P90)
        out.update(mean_tpot_ms=tpot * 1e3, p90_tpot_ms=tpot * factor * 1e3, mean_itl_ms=step_s * 1e3,
                   p90_itl_ms=step_s * math.exp(sigma * _phi_inverse(P90 / 100.0)) * 1e3,
                   itl_gpu_share=min(float(r.gpu_s) / step_s, 1.0))
        return out
    seqs = float(p.batch)
    prompt = float(p.context) + float(p.new_tokens) / seqs
    used = kv_link(hw, link, layout)
    transfer = kv_transfer_time(hw, kv_transfer_bytes(m, layout, seqs, prompt), used)
    out.update(mean_ttft_ms=(step_s + transfer) * 1e3, kv_transfer_ms=transfer * 1e3, kv_transfer_link=used)
    return out
