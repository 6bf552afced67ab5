"""Aggregated serving: one engine that prefills and decodes, driven closed loop as `vllm bench serve` drives it.

The engine (a TP instance, or each rank of a DEP engine) runs steps. A step carries the decode rows
of every running request (1 + k each) and, when prompts are pending, a prefill chunk of up to what
the stack's token budget leaves (max_num_batched_tokens - decode rows). With mixed_prefill_decode
the chunk shares the decode rows' forward (the step graph at the mixed rows: rubinperf/step/graph.py);
without it the chunk runs as a prefill step of its own and the decodes wait for it. Either way a
step that carries prefill is slower than one that does not: that is the interference a P/D split
removes.

Steady state, per scheduler (a DEP rank, a TP instance), as a function of the running batch B:

    completions per step   c = B a / (O - 1)        (a tokens per verify step; the first token is prefill's)
    prefill per step       W = c U                  (U uncached prompt tokens per request)
    chunk of a prefill step  C = min(budget - B (1 + k), max(U, W))   (chunked prefill; else whole prompts)
    share of steps with prefill  f = min(1, W / C);  DEP: the step waits for every rank: F = 1 - (1 - f)^n
    busiest rank (DEP)     B_max = E[max of n Binomial(n B, 1/n) counts]   (prefill.busiest_rank_sequences)
    decode step (DEP)      t_decode = max(t(B_max), t(B))   (every layer waits for its slowest rank)
    mean step              t = (1 - F) t_decode + F max(t_mixed(B, C), t_decode)
    requests/s             lambda = c / t
    TTFT (no queue)        t / 2 + chunks(U) t_mixed      (the wait for the next step, then the chunks)
    concurrency            N(B) = B + lambda TTFT + lambda gap   (Little's law: in prefill, in decode, between turns)

B is found from the concurrency by N(B) = N. Where W reaches the budget left (f = 1), prefill is
saturated: B stops growing, the extra requests queue, and TTFT grows by queue / lambda, so TTFT rises
with concurrency past that point. A KV cache that holds fewer requests caps B the same way.

Reported as `vllm bench serve` reports: request, output and total token throughput, and mean, median,
P90 and P99 of TTFT, TPOT, ITL and end-to-end latency. The spreads are P90's (step_time_spread,
acceptance_concentration: rubinperf/serving/interactivity.py) plus the request mix's lengths
(uniform in a range, --random-range-ratio). ITL is pooled over steps: the two step kinds in their
shares, each spread by the step spread.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rubinperf.errors import SpecError
from rubinperf.roofline import admission_burst, admission_time
from rubinperf.serving.interactivity import step_mixture_percentiles, time_per_token_factors
from rubinperf.serving.prefill import busiest_rank_load
from rubinperf.serving.specdecode import check_times, default_acceptance
from rubinperf.specs.layout import Layout, layouts_that_fit, parse_layout
from rubinperf.specs.model import Model
from rubinperf.step.capacity import capacity
from rubinperf.step.point import make_point
from rubinperf.step.timing import step

RANGE_CONVENTIONS = ("vllm", "inferencex")
PERCENTILES = (50.0, 90.0, 99.0)
QUADRATURE = 8           # equal-mass nodes per spread (lengths, step-boundary wait, time per token) in the percentiles
DEFAULT_RESERVE_BYTES = 10.0e9   # HBM per GPU held back for the runtime (as the bundled workloads)


# The longest wait between a reply and a session's next request: an hour. Agentic sessions wait seconds
# (tool calls, a user reading); a gap of hours is a new session, not a closed-loop client.
MAX_TURN_GAP_S = 3600.0


@dataclass(frozen=True)
class RequestMix:
    """What the benchmark client sends: lengths uniform in a range around the nominal ones, a cached share of
    each prompt, and a gap between a session's turns (0: the next request goes out when the last one ends)."""

    isl: float
    osl: float
    range_ratio: float = 0.0
    convention: str = "vllm"     # vllm: [L (1 - r), L (1 + r)]; inferencex: [L r, L] (older benchmark_serving)
    prefix_hit: float = 0.0
    turn_gap_s: float = 0.0

    def __post_init__(self):
        if self.convention not in RANGE_CONVENTIONS:
            raise SpecError(f"--range-convention: expected one of {', '.join(RANGE_CONVENTIONS)}, got {self.convention!r}")
        if not (self.isl >= 1 and math.isfinite(self.isl)):
            raise SpecError(f"--isl: expected at least 1 token, got {self.isl:g}")
        if not (self.osl >= 2 and math.isfinite(self.osl)):
            raise SpecError(f"--osl: expected at least 2 tokens (TPOT needs a second token), got {self.osl:g}")
        hi = 1.0 if self.convention == "inferencex" else 0.999
        if not 0.0 <= self.range_ratio <= hi:
            raise SpecError(f"--random-range-ratio: expected 0 to {hi:g} ({self.convention} convention), got {self.range_ratio:g}")
        if not 0.0 <= self.prefix_hit < 1.0:
            raise SpecError(f"--prefix-hit: expected a fraction in [0, 1), got {self.prefix_hit:g}")
        if not 0 <= self.turn_gap_s <= MAX_TURN_GAP_S:
            raise SpecError(f"--turn-gap: expected 0 to {MAX_TURN_GAP_S:g} seconds, got {self.turn_gap_s:g}")

    def bounds(self, nominal: float) -> tuple[float, float]:
        r = self.range_ratio
        if self.convention == "inferencex":
            return (nominal * r, nominal) if r > 0 else (nominal, nominal)
        return nominal * (1 - r), nominal * (1 + r)

    def lengths(self, nominal: float, n: int = QUADRATURE) -> np.ndarray:
        """Equal-mass nodes of the uniform length law (cell midpoints), at least 1 token."""
        lo, hi = self.bounds(nominal)
        return np.maximum(lo + (hi - lo) * (np.arange(n) + 0.5) / n, 1.0)

    @property
    def mean_input(self) -> float:
        return float(np.mean(self.bounds(self.isl)))

    @property
    def mean_output(self) -> float:
        return max(float(np.mean(self.bounds(self.osl))), 2.0)

    @property
    def uncached(self) -> float:
        return max(self.mean_input * (1 - self.prefix_hit), 1.0)


@dataclass(frozen=True, eq=False)
class EngineSetup:
    """What an aggregated engine is before its steps are timed: its specs, request mix, draft, acceptance and token
    budget, checked as engine() checks them (all the step-by-step simulation reads of an engine: serve_records)."""

    model: Model
    hw: Any
    layout: Layout
    mix: RequestMix
    draft_tokens: int
    acceptance: float
    budget: float
    eplb: bool = True          # the stack's EPLB on (its balancedness), as the steps were timed


@dataclass(frozen=True, eq=False, kw_only=True)
class Engine(EngineSetup):
    """One aggregated engine's two step kinds over a grid of running batches B (per scheduler): its setup (specs,
    request mix, draft, acceptance, budget, EPLB) and the steps timed."""

    B: np.ndarray              # running decode requests per scheduler
    busiest: np.ndarray        # DEP: the busiest rank's expected running requests (B on a TP instance)
    chunk: np.ndarray          # prefill tokens of a step that carries prefill, per rank
    prefill_share: np.ndarray  # F: share of the engine's steps that carry prefill (any rank)
    decode_s: np.ndarray       # a step without prefill
    mixed_s: np.ndarray        # a step with a chunk (mixed, or a prefill step then a decode step)
    chunks_per_request: float  # steps one prompt's prefill takes (mean over the request mix)
    saturated: np.ndarray      # prefill demand reached the budget left (the grid point cannot grow)
    max_requests: float        # KV capacity per scheduler
    bound: np.ndarray

    @property
    def step_s(self):
        return (1 - self.prefill_share) * self.decode_s + self.prefill_share * self.mixed_s

    @property
    def requests_per_step(self):
        return self.B * self.acceptance / (self.mix.mean_output - 1)

    @property
    def requests_per_s(self):
        """Per scheduler."""
        return self.requests_per_step / self.step_s

    @property
    def ttft_service_s(self):
        """The wait for the next step (half a step on average), then the prompt's prefill steps."""
        return self.step_s / 2 + self.chunks_per_request * self.mixed_s

    @property
    def concurrency(self):
        """Requests per scheduler in the closed loop at each B: decoding, in prefill, between turns."""
        lam = self.requests_per_s
        return self.B + lam * (self.ttft_service_s + self.mix.turn_gap_s)

    @property
    def held(self) -> tuple[int, str]:
        """(the last grid point the engine can hold, what stops the running batch past it: the prefill budget
        (f reached 1) or the KV cache)."""
        ok = ~self.saturated & (self.B <= self.max_requests)
        top = int(np.max(np.nonzero(ok)[0])) if np.any(ok) else 0
        return top, "prefill" if top + 1 < len(self.B) and self.saturated[top + 1] else "KV cache"

    @property
    def max_concurrency(self) -> float:
        """Clients over the whole engine at the largest running batch it holds without a queue."""
        top, _ = self.held
        return float(np.max(self.concurrency[: top + 1])) * self.layout.dp


def _chunks(mix: RequestMix, room: float, chunked: bool) -> float:
    """Mean prefill steps of one prompt: ceil(U / room) chunks (chunked prefill), one step otherwise."""
    if not chunked:
        return 1.0
    u = np.maximum(mix.lengths(mix.isl) * (1 - mix.prefix_hit), 1.0)
    return float(np.mean(np.ceil(u / max(room, 1.0) - 1e-9)))


def batch_grid_for(top: float) -> np.ndarray:
    """Running batches per scheduler: fractions below 1 (a request that alternates prefill and decode), every
    integer to 64, then geometric steps to `top`."""
    top = max(float(top), 1.0)
    low = np.linspace(0.02, 1.0, 12)
    mid = np.arange(2.0, min(top, 64.0) + 1)
    high = np.geomspace(64.0, top, 48) if top > 64 else np.array([])
    return np.unique(np.concatenate([low, mid, high, [top]]))


def _kv_capacity(m: Model, hw, layout: Layout, mix: RequestMix, per_req: int):
    return capacity(m, hw, layout, "decode", context_tokens=mix.mean_input + mix.mean_output, tokens_per_request=per_req,
                    logits_per_request=per_req, reserve_bytes=DEFAULT_RESERVE_BYTES, engram_placement=m.engram_placement)


def layouts_that_hold(m: Model, hw, mix: RequestMix, draft_tokens: int = 0, most: int = 3) -> list[str]:
    """The narrowest layouts of each kind (tp, tep, dep) whose HBM holds one request of the mix: what to try when
    the one asked for holds none."""
    out = []
    for kind in ("tp", "tep", "dep"):
        held = [n for n in layouts_that_fit(m, hw, kind)
                if _kv_capacity(m, hw, parse_layout(n), mix, 1 + draft_tokens).max_requests >= 1]
        out += held[:most]
    return out


def engine_setup(m: Model, hw, layout: Layout, mix: RequestMix, draft_tokens: int | None = None,
                 acceptance: float | None = None, eplb: bool = True, max_batch: float | None = None,
                 suggest: bool = False) -> EngineSetup:
    """The engine engine() times, without timing its steps over the grid of running batches (which a simulation
    does not read: it times its own tables): the same checks, the same draft, acceptance and budget."""
    k, a, budget, _, _ = _setup(m, hw, layout, mix, draft_tokens, acceptance, max_batch, suggest)
    return EngineSetup(model=m, hw=hw, layout=layout, mix=mix, draft_tokens=k, acceptance=a, budget=budget,
                       eplb=bool(eplb))


def _setup(m: Model, hw, layout: Layout, mix: RequestMix, draft_tokens, acceptance, max_batch, suggest):
    """engine()'s checks of its arguments, and (draft tokens, acceptance, token budget, KV capacity, the largest
    running batch per scheduler)."""
    k = 0 if draft_tokens is None and not m.draft_layers else (m.draft_tokens if draft_tokens is None else int(draft_tokens))
    if k > 0 and not m.draft_layers:
        raise SpecError(f"--draft-tokens: {m.name} has no draft layers")
    a = default_acceptance(m, k) if acceptance is None else float(acceptance)
    if not 1.0 <= a <= k + 1:
        raise SpecError(f"--acceptance: expected between 1 and draft tokens + 1 = {k + 1}, got {a:g}")
    if mix.mean_input + mix.mean_output > m.max_context_tokens:
        raise SpecError(f"--isl/--osl: {mix.mean_input + mix.mean_output:,.0f} tokens per request exceed {m.name}'s "
                        f"maximum context of {m.max_context_tokens:,}")
    budget = float(hw.max_num_batched_tokens)
    per_req = 1 + k
    cap = _kv_capacity(m, hw, layout, mix, per_req)
    top = min(cap.max_requests, (budget - 1) / per_req, max_batch or math.inf)
    if not top >= 1:
        why = cap.reason(1) or (f"the stack's token budget of {budget:,.0f} leaves no room for one request's "
                                f"{per_req} decode rows")
        hold = layouts_that_hold(m, hw, mix, k) if suggest and cap.max_requests < 1 else []
        raise SpecError(f"{hw.name} {layout.name}: no aggregated engine: {why}"
                        + (f" (layouts that hold one: {', '.join(hold)})" if hold else ""))
    return k, a, budget, cap, top


def engine(m: Model, hw, layout: Layout, mix: RequestMix, draft_tokens: int | None = None,
           acceptance: float | None = None, eplb: bool = True, max_batch: float | None = None,
           suggest: bool = False) -> Engine:
    """Time the engine's decode and prefill-carrying steps over a grid of running batches. With `suggest`, an engine
    whose HBM holds no request says which layouts would."""
    k, a, budget, cap, top = _setup(m, hw, layout, mix, draft_tokens, acceptance, max_batch, suggest)
    per_req = 1 + k
    B = batch_grid_for(top)
    U, O = mix.uncached, mix.mean_output
    rows = B * per_req
    room = budget - rows
    demand = B * a / (O - 1) * U
    if hw.chunked_prefill:
        chunk = np.minimum(room, np.maximum(U, demand))
    else:   # whole prompts: at least one per prefill step, past the budget if it must be (no chunking)
        chunk = np.maximum(np.minimum(room, demand), U)
    share = np.minimum(1.0, demand / chunk)
    saturated = demand >= room * (1 - 1e-12)
    if layout.dp > 1:   # the engine steps together: a step carries prefill when any rank's does
        share = 1 - (1 - share) ** layout.dp
    per_seq = np.minimum(chunk, U)
    seqs = chunk / per_seq
    cached = mix.mean_input * mix.prefix_hit
    chunk_context = cached + (U - per_seq) / 2   # the mean of a chunked prompt's chunks' preceding tokens
    context = mix.mean_input + O / 2             # a decoding request's mean KV while it writes its output
    point = make_point(m, hw, layout, phase="decode", batch=1, context=context, draft_tokens=k, acceptance=a, eplb=eplb,
                       engram_placement=m.engram_placement)
    steps_at = np.maximum(B, 1.0)   # a step's decode rows are whole requests (below 1: one request, part of the time)
    # DEP: the ranks step together and each step waits for its busiest rank. The running requests sit on the ranks
    # as routed at random (the expected busiest of dp ranks holding dp x B requests: prefill.busiest_rank_sequences,
    # the formula of the disaggregated prefill pool's imbalance), so a decode step is timed at the busiest rank's
    # rows; a step that carries prefill waits for the rank with the chunk (its rows the mean) or for the busiest
    # decode rank, whichever is slower.
    busiest = busiest_rank_load(B, layout.dp) if layout.dp > 1 else B
    # The scheduler admits the requests that replace the finished ones (B a / (O - 1) a step), host work that grows
    # with each prompt's length, as a disaggregated decode engine's admissions do (roofline.admission_time).
    admit = admission_time(hw, B * a / (O - 1) * mix.mean_input)
    each = admission_time(hw, mix.mean_input)
    # a Poisson count of admissions per rank, in bursts where the scheduler gathers them (specdecode.decode_engine)
    spread = B * a / (O - 1) * admission_burst(hw) * each * each
    # Every MoE layer ends at a barrier of all the ranks (the EP exchange; MegaMoE's NVLink barriers), so a layer
    # takes its slowest rank's time and the step the slowest rank's step. The busiest rank is the slowest where time
    # grows with rows; not always where a kernel heuristic switches with its rank's own token count (DeepGEMM's Mega
    # MoE picks its block regime from the calling rank's tokens, kernels/deepgemm.py): a rank at the mean count, in the
    # regime below, runs the same routed rows in smaller blocks, slower. The step is the slower of the busiest rank's
    # and a mean rank's (the P/D decode engine's step at the same batch), never faster than the balanced engine.
    def decode_at(rows):
        return dataclasses.replace(step(m, hw, layout, dataclasses.replace(point, batch=rows)),
                                   extra_cpu_s=admit, extra_cpu_var_s2=spread)

    busy = decode_at(np.maximum(busiest, 1.0))
    busy_s = np.broadcast_to(np.asarray(busy.expected_s, dtype=float), B.shape)
    if layout.dp > 1:
        mean = decode_at(steps_at)
        mean_s = np.broadcast_to(np.asarray(mean.expected_s, dtype=float), B.shape)
        decode_s = np.maximum(busy_s, mean_s)
        bound = np.where(busy_s >= mean_s, np.broadcast_to(np.asarray(busy.bound), B.shape),
                         np.broadcast_to(np.asarray(mean.bound), B.shape))
    else:
        decode_s, bound = busy_s.copy(), np.broadcast_to(np.asarray(busy.bound), B.shape)
    if hw.mixed_prefill_decode:
        mixed = step(m, hw, layout, dataclasses.replace(point, batch=steps_at, chunk_tokens=chunk, chunk_seqs=seqs,
                                                        chunk_context=chunk_context))
        mixed = dataclasses.replace(mixed, extra_cpu_s=admit, extra_cpu_var_s2=spread)
        mixed_s = np.maximum(np.asarray(mixed.expected_s, dtype=float), decode_s)
    else:
        pf = make_point(m, hw, layout, phase="prefill", batch=1, context=min(cached, m.max_context_tokens - U),
                        new_tokens=U, eplb=eplb, engram_placement=m.engram_placement)
        alone = step(m, hw, layout, dataclasses.replace(pf, batch=seqs, new_tokens=chunk, context=chunk_context))
        mixed_s = decode_s + np.asarray(alone.expected_s, dtype=float)
    mixed_s = np.broadcast_to(mixed_s, B.shape).copy()
    check_times(hw, m, f"{layout.name} aggregated", decode_s, mixed_s)
    return Engine(model=m, hw=hw, layout=layout, mix=mix, draft_tokens=k, acceptance=a, budget=budget, B=B,
                  busiest=np.broadcast_to(np.asarray(busiest, dtype=float), B.shape).copy(), chunk=chunk,
                  prefill_share=share, decode_s=decode_s, mixed_s=mixed_s,
                  chunks_per_request=_chunks(mix, float(room[0]), bool(hw.chunked_prefill)), saturated=saturated,
                  max_requests=float(cap.max_requests), bound=np.asarray(bound).copy(),
                  eplb=bool(eplb))


@dataclass(frozen=True, eq=False)
class ClosedLoop:
    """The steady state of an engine at an array of concurrencies (clients over the whole engine)."""

    engine: Engine
    concurrency: np.ndarray
    columns: dict

    def records(self) -> list[dict]:
        e = self.engine
        out = []
        for i, n in enumerate(self.concurrency):
            r = {"hardware": e.hw.name, "stack": e.hw.stack, "model": e.model.name, "layout": e.layout.name,
                 "serving": "agg", "concurrency": float(n), "isl": e.mix.isl, "osl": e.mix.osl,
                 "random_range_ratio": e.mix.range_ratio, "range_convention": e.mix.convention,
                 "prefix_hit_rate": e.mix.prefix_hit, "turn_gap_s": e.mix.turn_gap_s,
                 "mean_input_tokens": e.mix.mean_input, "mean_output_tokens": e.mix.mean_output,
                 "draft_tokens": e.draft_tokens, "acceptance": e.acceptance,
                 "max_num_batched_tokens": e.budget, "chunked_prefill": bool(e.hw.chunked_prefill),
                 "mixed_prefill_decode": bool(e.hw.mixed_prefill_decode), "gpus": e.layout.ranks}
            for key, col in self.columns.items():
                v = col[i]
                r[key] = v.item() if hasattr(v, "item") else v
            out.append(r)
        return out


def closed_loop(e: Engine, concurrency) -> ClosedLoop:
    """Solve N(B) = N per scheduler for each concurrency N (vectorised) and derive the benchmark's metrics."""
    N = np.atleast_1d(np.asarray(concurrency, dtype=float))
    if not (np.all(np.isfinite(N)) and np.all(N >= 1)):
        raise SpecError(f"--concurrency: expected whole numbers of clients of at least 1, got {concurrency}")
    dp, ranks = e.layout.dp, e.layout.ranks
    n = N / dp
    top, limit = e.held
    conc = np.maximum.accumulate(e.concurrency)[: top + 1]
    Bs = e.B[: top + 1]
    inside = n <= conc[-1]

    def at(x, where=None):
        return np.interp(b if where is None else where, e.B, x)

    def clients(x):   # N(B) between grid points, from the interpolated step times (Little's law holds exactly)
        st = at(e.step_s, x)
        lam = x * e.acceptance / (e.mix.mean_output - 1) / st
        return x + lam * (st / 2 + e.chunks_per_request * at(e.mixed_s, x) + e.mix.turn_gap_s)

    lo, hi = np.zeros_like(n), np.full_like(n, Bs[-1])
    for _ in range(48):   # bisection: N(B) rises with B
        mid = 0.5 * (lo + hi)
        below = clients(mid) < n
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    b = np.where(inside, 0.5 * (lo + hi), Bs[-1])

    step_s, t0, t1, F = at(e.step_s), at(e.decode_s), at(e.mixed_s), at(e.prefill_share)
    lam = b * e.acceptance / (e.mix.mean_output - 1) / step_s                 # requests/s per scheduler
    in_loop = n - lam * e.mix.turn_gap_s                                      # clients with a request out
    queue = np.where(inside, 0.0, np.maximum(in_loop - b - lam * (step_s / 2 + e.chunks_per_request * t1), 0.0))
    wait_s = queue / lam                                                      # queued behind a saturated prefill
    ttft = step_s / 2 + e.chunks_per_request * t1 + wait_s
    tpot = step_s / e.acceptance
    O, I = e.mix.mean_output, e.mix.mean_input
    e2e = ttft + (O - 1) * tpot
    req_s = lam * dp
    c: dict = {
        "running_batch_per_rank": b, "busiest_rank_batch": at(e.busiest), "queued_per_rank": queue,
        "prefill_step_share": F,
        "decode_step_ms": t0 * 1e3, "prefill_step_ms": t1 * 1e3, "mean_step_ms": step_s * 1e3,
        "prefill_chunk_tokens": at(e.chunk), "saturated": ~inside,
        "limited_by": np.where(inside, "", limit),
        "request_throughput_per_s": req_s,
        "output_tokens_per_s": req_s * O, "total_tokens_per_s": req_s * (I + O),
        "output_tokens_per_s_per_gpu": req_s * O / ranks, "total_tokens_per_s_per_gpu": req_s * (I + O) / ranks,
        "tokens_per_s_per_user": 1.0 / tpot,
    }
    hw = e.hw
    nu, sigma = float(hw.acceptance_concentration), float(hw.step_time_spread)
    # TPOT: a request's mean time per token, spread as P90's interactivity is.
    f_tpot = time_per_token_factors(e.draft_tokens, e.acceptance, nu, sigma, PERCENTILES)
    # ITL: every step is a sample; a share F of them carry prefill.
    itl = step_mixture_percentiles(np.stack([t0, t1]), np.stack([1 - F, F]), sigma, PERCENTILES)
    # TTFT and E2E over the request mix: the prompt's chunks (its length), the wait for the next step
    # (uniform over a step), the queue; E2E adds (output - 1) x the request's time per token.
    u = np.maximum(e.mix.lengths(e.mix.isl) * (1 - e.mix.prefix_hit), 1.0)
    room = max(float(e.budget - b.min() * (1 + e.draft_tokens)), 1.0)
    chunks = np.ceil(u / room - 1e-9) if hw.chunked_prefill else np.ones_like(u)
    chunks = chunks * (e.chunks_per_request / max(float(np.mean(chunks)), 1e-12))   # the mean as the steady state's
    def ttft_at(v, ch):
        return (wait_s[:, None, None] + step_s[:, None, None] * v[None, :, None]
                + t1[:, None, None] * ch[None, None, :]).reshape(len(N), -1)

    v = (np.arange(QUADRATURE) + 0.5) / QUADRATURE
    ttft_nodes = ttft_at(v, chunks)
    fine = (np.arange(4 * QUADRATURE) + 0.5) / (4 * QUADRATURE)   # TTFT alone: finer nodes (its P99 is in its tail)
    fine_chunks = np.interp(fine, v, chunks) if chunks.size > 1 else np.full(fine.shape, float(chunks[0]))
    ttft_fine = ttft_at(fine, fine_chunks)
    mid = tuple(100.0 * v)
    per_token = tpot[:, None] * np.array(time_per_token_factors(e.draft_tokens, e.acceptance, nu, sigma, mid))[None, :]
    per_token *= 1.0 / np.mean(per_token, axis=1, keepdims=True) * tpot[:, None]   # nodes keep the mean
    outs = e.mix.lengths(e.mix.osl) - 1
    e2e_nodes = (ttft_nodes[:, :, None, None] + outs[None, None, :, None] * per_token[:, None, None, :]).reshape(len(N), -1)
    for name, mean, pct in (("ttft", ttft, np.percentile(ttft_fine, PERCENTILES, axis=1)),
                            ("tpot", tpot, np.array(f_tpot)[:, None] * tpot[None, :]),
                            ("itl", step_s, itl),
                            ("e2e", e2e, np.percentile(e2e_nodes, PERCENTILES, axis=1))):
        c[f"mean_{name}_ms"] = mean * 1e3
        for p, row in zip(("median", "p90", "p99"), pct):
            c[f"{p}_{name}_ms"] = row * 1e3
    c["bound"] = np.asarray([str(x) for x in np.broadcast_to(e.bound, e.B.shape)[np.searchsorted(e.B, b).clip(0, len(e.B) - 1)]])
    return ClosedLoop(engine=e, concurrency=N, columns=c)


def parse_concurrency(text: str) -> list[float]:
    """'64', '4,16,64', or a series 'a,b,...,z': doubling-style (ratio b / a) when b / a is a whole number of at
    least 2 (1,2,...,256), else stepped by b - a (16,32,...,64 doubles; 10,15,...,40 steps by 5); z ends it."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if "..." in parts:
        if len(parts) != 4 or parts[2] != "...":
            raise SpecError(f"--concurrency: expected a series as a,b,...,z (e.g. 1,2,...,256), got {text!r}")
        a, b, z = _int(parts[0]), _int(parts[1]), _int(parts[3])
        if not a < b <= z:
            raise SpecError(f"--concurrency: expected a < b <= z in a,b,...,z, got {text!r}")
        ratio = b / a
        out = [a]
        while True:
            nxt = out[-1] * ratio if ratio == int(ratio) and ratio >= 2 else out[-1] + (b - a)
            if nxt > z:
                break
            out.append(nxt)
            if len(out) > MAX_LEVELS:
                raise SpecError(f"--concurrency: {text!r} gives more than {MAX_LEVELS} levels; take a larger step")
        if out[-1] != z:
            out.append(z)
        return out
    vals = [_int(p) for p in parts]
    if len(vals) > MAX_LEVELS:
        raise SpecError(f"--concurrency: more than {MAX_LEVELS} levels given")
    if not vals:
        raise SpecError(f"--concurrency: expected numbers of clients such as 64 or 1,2,...,256, got {text!r}")
    return vals


def _int(p: str) -> float:
    try:
        v = float(p)
    except ValueError:
        raise SpecError(f"--concurrency: expected whole numbers of clients, got {p!r}") from None
    if not (math.isfinite(v) and 1 <= v <= MAX_CONCURRENCY and v == int(v)):
        raise SpecError(f"--concurrency: expected whole numbers of clients from 1 to {MAX_CONCURRENCY:,}, got {p!r}")
    return v


MAX_CONCURRENCY = 1_000_000   # clients: far beyond what one engine's KV holds (the steady state queues the rest)
MAX_LEVELS = 512              # concurrency levels of one run (a series a,b,...,z), bounding the work
