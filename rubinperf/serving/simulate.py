"""An aggregated engine simulated step by step: open-loop traffic (a request rate, a trace) and closed-loop clients.

The engine is the one `serve` prices in closed form (rubinperf/serving/aggregated.py): a scheduler that runs steps,
each carrying the decode rows of its running requests (1 + k each) and a prefill chunk up to the stack's token budget
([aggregated] max_num_batched_tokens). Here the scheduler is run as an event loop over steps, as vLLM's V1 scheduler
runs it:

- running requests first: every decoding request's rows, then the chunks of the prompts already admitted, in
  admission order, each as much as the budget leaves (chunked_prefill; without it a prompt goes whole, or waits);
- then the waiting queue, first come first served, while the budget, the running-request limit (the budget's decode
  rows: (budget - 1) / (1 + k), as the closed form caps it) and the KV cache allow; a prompt's whole KV is allocated
  when it is admitted (a simplification: vLLM allocates chunk by chunk);
- a decoding request that cannot grow its KV preempts the most recently admitted running request, which goes back to
  the head of the queue and recomputes its prompt and the tokens it had written (vLLM's recompute preemption; the
  prefix cache of its own blocks is not credited);
- a session's later turn reuses its earlier context from the prefix cache (the turn's prefix-reuse tokens, at most
  what the session's last turn left), while the cache keeps it: finished contexts stay in the free KV blocks and the
  least recently used go first when running requests need the room. Synthetic traffic (--request-rate) has the
  request mix's --prefix-hit share cached, as the closed form assumes.

Each step's time comes from the closed-form step model through tables built once, with the vectorised step path
(numpy arrays through rubinperf.step.timing.step), over (decode rows, context) for steps without prefill and over
(decode rows, chunk tokens, decode context, chunk context) for steps with it, and interpolated multilinearly. A DEP
engine's ranks each run this scheduler and step together: a step lasts as long as the slowest rank's (its own rows,
chunk and contexts), so the wait for the busiest rank comes from the simulated ranks, not from a formula. A request
goes to its session's rank, else to the rank with the fewest requests (vLLM's DP load balancing counts waiting and
running requests). Disaggregated P/D (a KV transfer between pools) is not simulated: this is the aggregated engine.

Between events (an arrival, a completion, the KV cache filling, a prompt to prefill) the decode steps repeat with the
same rows; they are advanced together, their time taken at the run's middle context (each run at most
RUN_CONTEXT_GROWTH of the context), so the loop is over runs of steps, not tokens. Speculative decoding emits a
request's own acceptance a_i tokens a step, drawn once per request from the stack's per-request law (the one P90's
interactivity uses), so requests of one length finish after different numbers of steps.

Reported as `vllm bench serve` reports: request, output and total token throughput over the run (first arrival to
last completion), TTFT, TPOT ((E2E - TTFT) / (output - 1)), ITL (every decoding request's wait between steps, a sample
per request and step, so the steps' mix of contexts and chunks sets its spread) and E2E at any percentile, goodput
(completed requests per second that meet every --goodput limit), and counts of requests that queued (were not
admitted at the first step after they arrived) or were preempted.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import json
import math
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from rubinperf.errors import SpecError

RUN_CONTEXT_GROWTH = 0.05    # a run of decode steps advanced together grows the mean context by at most this share
# Points of the step tables' axes (geometric; rows also 1 to 8 one by one; the chunk's context also 0): the tables
# are interpolated linearly between them (tests/serving/test_simulate.py checks the closed form's steady state).
AXIS_POINTS = {"rows": 16, "chunk": 12, "context": 10, "chunk_context": 6}
MAX_REQUESTS = 1_000_000     # requests of one run (a trace's lines, --num-requests)
MIN_BURSTINESS = 1e-3       # gamma shape: below, nearly every gap is 0 and a few are huge (and 1e-320 is none)
MIN_RATE = 1e-6              # requests/s: one in 11 days
MAX_RATE = 1e6               # requests/s
TRACE_KEYS = {"arrival_s": "arrival time in seconds from the start", "input_tokens": "prompt tokens",
              "output_tokens": "generated tokens", "session": "session id (a string or an integer; optional)",
              "prefix_tokens": "prompt tokens shared with the session's earlier context (optional)",
              "turn_gap_s": "instead of arrival_s, for a session's later turn: seconds after its previous turn ends"}
GOODPUT_KEYS = {"ttft": "ttft", "tpot": "tpot", "e2el": "e2e", "e2e": "e2e", "itl": "itl"}


# ---------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Traffic:
    """Requests: arrival time (nan: sent by a closed-loop client, or after the request it follows), prompt and output
    tokens, the tokens of the prompt found cached (synthetic traffic), the session (-1: none), the prefix shared with
    the session's earlier turns, and the request a turn follows (-1: none) with its gap after that one ends."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray
    session: np.ndarray
    prefix_tokens: np.ndarray
    follows: np.ndarray = None
    gap_s: np.ndarray = None

    def __post_init__(self):
        n = len(self.input_tokens)
        if self.follows is None:
            object.__setattr__(self, "follows", np.full(n, -1, dtype=np.int64))
        if self.gap_s is None:
            object.__setattr__(self, "gap_s", np.zeros(n))

    def __len__(self) -> int:
        return len(self.input_tokens)


def _lengths(mix, nominal: float, n: int, rng) -> np.ndarray:
    """Lengths uniform over the mix's range (whole tokens), as vllm bench serve's random dataset draws them."""
    lo, hi = mix.bounds(nominal)
    lo, hi = max(int(round(lo)), 1), max(int(round(hi)), 1)
    return rng.integers(lo, hi + 1, size=n).astype(float) if hi > lo else np.full(n, float(lo))


def synthetic(mix, n: int, seed: int = 0, rate: float | None = None, burstiness: float = 1.0) -> Traffic:
    """n requests of the mix; with `rate`, arriving as vllm bench serve sends them: gaps drawn from a gamma law of
    shape `burstiness` and mean 1 / rate (burstiness 1: a Poisson process), the first at 0; without, no arrival
    times (closed-loop clients send them)."""
    n = _count(n)
    rng = np.random.default_rng(seed)
    if rate is None:
        arrival = np.full(n, np.nan)
    elif rate == math.inf:   # vllm bench serve's default: every request at once
        arrival = np.zeros(n)
    else:
        if not (MIN_RATE <= rate <= MAX_RATE):
            raise SpecError(f"--request-rate: expected {MIN_RATE:g} to {MAX_RATE:g} requests per second, got {rate:g}")
        if not (MIN_BURSTINESS <= burstiness <= 1e3):
            raise SpecError(f"--burstiness: expected a gamma shape from {MIN_BURSTINESS:g} to 1000 (1: Poisson; below 1: "
                            f"burstier), got {burstiness:g}")
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
        arrival = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    inp = _lengths(mix, mix.isl, n, rng)
    out = np.maximum(_lengths(mix, mix.osl, n, rng), 2.0)
    cached = np.minimum(np.floor(inp * mix.prefix_hit), inp - 1)
    return Traffic(arrival, inp, out, cached, np.full(n, -1, dtype=np.int64), np.zeros(n))


def _count(n) -> int:
    if not (isinstance(n, (int, np.integer)) and 1 <= n <= MAX_REQUESTS):
        raise SpecError(f"--num-requests: expected 1 to {MAX_REQUESTS:,} requests, got {n!r}")
    return int(n)


def read_trace(path: str, limit: int | None = None) -> Traffic:
    """A JSONL trace, one request per line: {"arrival_s", "input_tokens", "output_tokens"[, "session",
    "prefix_tokens"]}, or a session's later turn with "turn_gap_s" (seconds after its previous turn ends: a session
    keeps its think time however fast the engine serves it) instead of "arrival_s". Checked strictly: the file's size
    first, then every line (unknown or missing keys, wrong types, negative or out-of-order times, a prefix longer than
    its prompt, a gap without an earlier turn of its session) is a SpecError naming the line."""
    from rubinperf.files import read_bounded

    try:   # (its size, and a regular file, checked before anything is read: rubinperf.files)
        text = read_bounded(path, "trace", "a JSONL trace").decode("utf-8")
    except SpecError as exc:
        raise SpecError(f"--trace {exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"--trace {path}: cannot read it as UTF-8 text ({exc})") from None
    rows, sessions, last, latest = [], {}, {}, 0.0
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(rows) >= (limit or MAX_REQUESTS):
            if limit:
                break
            raise SpecError(f"--trace {path}: more than {MAX_REQUESTS:,} requests")
        where = f"--trace {path}:{no}"
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise SpecError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise SpecError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
        unknown = sorted(set(rec) - set(TRACE_KEYS))
        if unknown:
            raise SpecError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(TRACE_KEYS)})")
        if "arrival_s" in rec and "turn_gap_s" in rec:
            raise SpecError(f"{where}: give arrival_s or turn_gap_s, not both")
        for key in ("arrival_s" if "turn_gap_s" not in rec else "turn_gap_s", "input_tokens", "output_tokens"):
            if key not in rec:
                raise SpecError(f"{where}: missing {key!r} ({TRACE_KEYS[key]})")
        s = rec.get("session")
        if s is not None and (isinstance(s, bool) or not isinstance(s, (str, int))):
            raise SpecError(f"{where}: session: expected a string or an integer, got {type(s).__name__}")
        follows, gap = -1, 0.0
        if "turn_gap_s" in rec:
            gap = _number(rec["turn_gap_s"], where, "turn_gap_s", 0.0, 1e6)
            if s is None or s not in last:
                raise SpecError(f"{where}: turn_gap_s: only a session's later turn has one (no earlier line of "
                                f"session {s!r})" if s is not None else f"{where}: turn_gap_s: needs a session")
            t, follows = math.nan, last[s]
        else:
            t = _number(rec["arrival_s"], where, "arrival_s", 0.0, 1e9)
            if t < latest:
                raise SpecError(f"{where}: arrival_s {t:g} is before an earlier line's {latest:g} (sort the trace by arrival)")
            latest = t
        inp = _number(rec["input_tokens"], where, "input_tokens", 1, 1e7, whole=True)
        out = _number(rec["output_tokens"], where, "output_tokens", 1, 1e7, whole=True)
        prefix = _number(rec.get("prefix_tokens", 0), where, "prefix_tokens", 0, 1e7, whole=True)
        if prefix >= inp:
            raise SpecError(f"{where}: prefix_tokens {prefix:g} must be below input_tokens {inp:g} (one token at least is computed)")
        sid = -1 if s is None else sessions.setdefault(s, len(sessions))
        if s is not None:
            last[s] = len(rows)
        rows.append((t, inp, out, sid, prefix, follows, gap))
    if not rows:
        raise SpecError(f"--trace {path}: no requests")
    a = np.array(rows, dtype=float)
    shared = np.where(a[:, 3] < 0, a[:, 4], 0.0)   # a prefix without a session: shared by every request (kept cached)
    return Traffic(a[:, 0], a[:, 1], a[:, 2], shared, a[:, 3].astype(np.int64), np.where(a[:, 3] < 0, 0.0, a[:, 4]),
                   a[:, 5].astype(np.int64), a[:, 6])


def check_context(traffic: Traffic, model, what: str = "request") -> None:
    """Every request's input + output within the model's maximum context: else a SpecError naming the first one."""
    total = traffic.input_tokens + traffic.output_tokens
    over = np.nonzero(total > model.max_context_tokens)[0]
    if over.size:
        i = int(over[0])
        raise SpecError(f"{what} {i + 1}: {total[i]:,.0f} tokens exceed {model.name}'s maximum context of "
                        f"{model.max_context_tokens:,}")


def _number(v, where, key, lo, hi, whole=False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where}: {key}: expected a number, got {json.dumps(v)[:40]}")
    if whole and v != int(v):
        raise SpecError(f"{where}: {key}: expected a whole number of tokens, got {v!r}")
    if not lo <= v <= hi:
        raise SpecError(f"{where}: {key}: expected {lo:g} to {hi:g}, got {v!r}")
    return float(v)


def parse_goodput(text: str | None) -> dict:
    """'ttft:2s tpot:50ms' (spaces or commas between) -> {'ttft': 2.0, 'tpot': 0.05}: the limits a good request
    meets (vllm bench serve's --goodput; e2el as its name for E2E)."""
    if not text:
        return {}
    from rubinperf.units import parse_quantity

    out = {}
    for part in str(text).replace(",", " ").split():
        key, sep, value = part.partition(":")
        if not sep or key.lower() not in GOODPUT_KEYS:
            raise SpecError(f"--goodput {part!r}: expected NAME:TIME with NAME one of ttft, tpot, itl, e2el, such as ttft:2s tpot:50ms")
        v = parse_quantity(value, "s", f"--goodput {part}", None)
        if not 0 < v <= 3600:
            raise SpecError(f"--goodput {part}: expected a time above 0 and at most 1h")
        out[GOODPUT_KEYS[key.lower()]] = v
    return out


def parse_percentiles(text) -> tuple:
    """'50,90,99' -> (50.0, 90.0, 99.0): each in (0, 100]."""
    out = []
    for p in str(text).split(","):
        p = p.strip()
        try:
            v = float(p)
        except ValueError:
            raise SpecError(f"--percentiles: expected numbers such as 50,90,99, got {p!r}") from None
        if not 0 < v <= 100:
            raise SpecError(f"--percentiles: expected percentiles above 0 and at most 100, got {p}")
        out.append(v)
    if not out or len(out) > 32:
        raise SpecError("--percentiles: expected 1 to 32 percentiles, such as 50,90,99")
    return tuple(dict.fromkeys(out))


# ---------------------------------------------------------------- step tables


class Table:
    """Step time on a grid of axes, interpolated multilinearly (clamped at the edges), in pure Python: one lookup a
    step costs microseconds, not a numpy call per axis."""

    def __init__(self, axes, values):
        self.axes = [list(map(float, ax)) for ax in axes]
        v = np.asarray(values, dtype=float)
        if not np.all(np.isfinite(v)):
            raise SpecError("simulation: the step model gave a non-finite step time on its table")
        self.flat = v.ravel().tolist()
        self.strides = [int(s // v.itemsize) for s in v.strides]

    def __call__(self, *x) -> float:
        base, corners = 0, [(0, 1.0)]
        for ax, stride, xi in zip(self.axes, self.strides, x):
            n = len(ax)
            if n == 1 or xi <= ax[0]:
                continue
            if xi >= ax[-1]:
                base += (n - 1) * stride
                continue
            j = bisect.bisect_right(ax, xi) - 1
            w = (xi - ax[j]) / (ax[j + 1] - ax[j])
            base += j * stride
            corners = [(o, c * (1 - w)) for o, c in corners] + [(o + stride, c * w) for o, c in corners]
        flat = self.flat
        return sum(flat[base + o] * c for o, c in corners)


@dataclass(frozen=True, eq=False)
class SimEngine:
    """What the event loop needs of each scheduler (a TP instance, or each DEP rank): its step tables, budget and KV."""

    engine: object             # the closed form's aggregated.Engine (its model, rack, layout, draft, acceptance)
    decode: Table              # (decode rows, decode context) -> s
    mixed: Table               # (decode rows, chunk tokens, decode context, chunk context) -> s
    budget: float
    rows_per_request: int
    acceptance: float
    max_running: int
    kv_tokens: float           # KV capacity, in tokens
    request_kv_tokens: float   # each running request's fixed part (window entries, workspace), in tokens
    chunked: bool
    build_cpu_s: float = 0.0

    @property
    def layout(self):
        return self.engine.layout


def _axis(lo, hi, n, zero=False):
    ax = np.unique(np.round(np.geomspace(max(lo, 1.0), max(hi, lo, 1.0), n)))
    return np.concatenate(([0.0], ax)) if zero else ax


def sim_engine(e, max_context: float, chunk_hint: float | None = None) -> SimEngine:
    """Step tables of aggregated engine `e` over decode rows up to what it runs, chunks up to its budget and contexts
    up to `max_context`, built once with the vectorised step path; KV in tokens from its capacity."""
    import time

    t0 = time.process_time()
    from rubinperf.roofline import admission_time
    from rubinperf.serving.aggregated import DEFAULT_RESERVE_BYTES
    from rubinperf.step.capacity import capacity
    from rubinperf.step.point import make_point
    from rubinperf.step.timing import step

    m, hw, lay, mix = e.model, e.hw, e.layout, e.mix
    k, a = e.draft_tokens, e.acceptance
    per_req = 1 + k
    budget = float(e.budget)
    max_running = int(max(1, math.floor((budget - 1) / per_req)))
    caps = [capacity(m, hw, lay, "decode", context_tokens=c, tokens_per_request=per_req, logits_per_request=per_req,
                     reserve_bytes=DEFAULT_RESERVE_BYTES, engram_placement=m.engram_placement) for c in (1024.0, 2048.0)]
    per_token = (caps[1].kv_bytes_per_request - caps[0].kv_bytes_per_request) / 1024.0
    fixed = caps[0].bytes_per_request - 1024.0 * per_token
    kv_tokens = caps[0].free_bytes / per_token if caps[0].host_fits else 0.0
    max_running = int(min(max_running, max(1, kv_tokens // max(fixed / per_token + 1, 1e-9))))
    # axes
    B = np.unique(np.concatenate((np.arange(1.0, min(max_running, 8) + 1), _axis(8, max_running, AXIS_POINTS["rows"]))))
    B = B[B <= max_running]
    top = max(float(max_context), 2.0)
    Xd = _axis(16, top, AXIS_POINTS["context"])
    Xc = _axis(64, top, AXIS_POINTS["chunk_context"], zero=True)
    C = _axis(1, budget, AXIS_POINTS["chunk"])
    O, U = mix.mean_output, mix.uncached
    admit = admission_time(hw, B * a / max(O - 1, 1.0) * mix.mean_input)   # as the closed form: a function of B
    point = make_point(m, hw, lay, phase="decode", batch=1, context=mix.mean_input + O / 2, draft_tokens=k,
                       acceptance=a, eplb=e.eplb, engram_placement=m.engram_placement)
    # decode steps: batch (B, 1) x context (1, Xd)
    dec = step(m, hw, lay, dataclasses.replace(point, batch=B[:, None], context=Xd[None, :]))
    dec = dataclasses.replace(dec, extra_cpu_s=admit[:, None])
    dec_s = np.broadcast_to(np.asarray(dec.expected_s, dtype=float), (len(B), len(Xd))).copy()
    seqs_per = max(U, 1.0) if chunk_hint is None else max(chunk_hint, 1.0)
    CC, XD, XC = (g.reshape(1, -1) for g in np.meshgrid(C, Xd, Xc, indexing="ij"))
    seqs = np.maximum(CC / seqs_per, 1.0)
    if hw.mixed_prefill_decode:
        mix_r = step(m, hw, lay, dataclasses.replace(point, batch=B[:, None], context=XD, chunk_tokens=CC,
                                                     chunk_seqs=seqs, chunk_context=XC))
        mix_r = dataclasses.replace(mix_r, extra_cpu_s=admit[:, None])
        mixed = np.asarray(mix_r.expected_s, dtype=float)
        mixed = np.broadcast_to(mixed, (len(B), CC.size)).reshape(len(B), len(C), len(Xd), len(Xc))
        mixed = np.maximum(mixed, dec_s[:, None, :, None])   # a chunk only adds rows
    else:   # the chunk runs as a prefill step of its own, then the decode step
        pf = make_point(m, hw, lay, phase="prefill", batch=1, context=0.0, new_tokens=float(budget), eplb=e.eplb,
                        engram_placement=m.engram_placement)
        c2, x2 = np.meshgrid(C, Xc, indexing="ij")
        alone = step(m, hw, lay, dataclasses.replace(pf, batch=np.maximum(c2 / seqs_per, 1.0), new_tokens=c2,
                                                     context=x2))
        alone_s = np.broadcast_to(np.asarray(alone.expected_s, dtype=float), c2.shape)
        mixed = dec_s[:, None, :, None] + alone_s[None, :, None, :]
    return SimEngine(engine=e, decode=Table([B, Xd], dec_s), mixed=Table([B, C, Xd, Xc], mixed), budget=budget,
                     rows_per_request=per_req, acceptance=float(a), max_running=max_running,
                     kv_tokens=float(kv_tokens), request_kv_tokens=float(fixed / per_token),
                     chunked=bool(hw.chunked_prefill), build_cpu_s=time.process_time() - t0)


# ---------------------------------------------------------------- the event loop


@dataclass(frozen=True, eq=False)
class Run:
    """One engine's simulated run: per-request times and counts, the steps' times (a run of K equal steps is one entry)
    and mean rows per scheduler, and the count in the system integrated over time (for Little's law)."""

    sim: SimEngine
    traffic: Traffic
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    end_s: np.ndarray
    queued: np.ndarray         # not admitted at the first step after arriving
    preempted: np.ndarray      # times preempted
    step_s: np.ndarray         # each run of steps: one step's time
    step_count: np.ndarray     # steps in the run
    step_rows: np.ndarray      # decoding requests in each of its steps
    step_chunk: np.ndarray     # prefill chunk tokens of each step
    gap_s: np.ndarray          # preempted requests' waits between their tokens
    in_system_s: float         # integral over time of requests arrived and not finished
    busy_s: float              # time the engine ran steps


class _Rank:
    """One scheduler's state (a TP instance, or one DEP rank)."""

    __slots__ = ("waiting", "running", "prefilling", "palloc", "Bd", "A", "S", "fin", "cache", "cache_tok", "load",
                 "pieces", "C", "Cx", "growth")

    def __init__(self):
        self.waiting: deque = deque()
        self.running: dict = {}       # id -> None, in admission order (the last is preempted first)
        self.prefilling: list = []    # [id, tokens left to compute, tokens in KV before the next piece]
        self.palloc = 0.0             # KV tokens the prefilling requests hold
        self.Bd, self.A, self.S = 0, 0.0, 0.0   # decoding requests, their tokens per step, their KV tokens
        self.fin: list = []           # heap of (decode step index at which it finishes, epoch, id)
        self.cache: OrderedDict = OrderedDict()   # session -> KV tokens its last context left in the prefix cache
        self.cache_tok = 0.0
        self.load = 0                 # requests routed here and not finished
        self.pieces: list = []
        self.C = self.Cx = self.growth = 0.0


def simulate(sim: SimEngine, traffic: Traffic, clients: int = 0, think_s: float = 0.0, seed: int = 0) -> Run:
    """Run the engine's schedulers over the traffic, stepping together (a DEP engine's ranks wait for the slowest
    rank's step; a TP instance is one). Open loop (clients 0): each request arrives at its arrival time (a session's
    later turn given a gap: that long after its previous turn ends) and goes to its session's rank, else to the
    rank with the fewest requests (waiting and running). Closed loop: `clients` clients, client c on rank c mod dp,
    each sends a request, waits for its last token, thinks `think_s`, and sends the next (the traffic's requests in
    order; their arrival times unused). With a draft, each request keeps its own acceptance a_i (tokens per verify
    step), drawn (`seed`) from the stack's per-request law (interactivity.per_request_acceptance: mean a, concentration
    acceptance_concentration), so requests of one length finish after different numbers of steps."""
    from rubinperf.serving.interactivity import per_request_acceptance

    n = len(traffic)
    dp = max(1, int(sim.layout.dp))
    a, per_row, budget = sim.acceptance, sim.rows_per_request, sim.budget
    cap, fixed_tok, max_run, chunked = sim.kv_tokens, sim.request_kv_tokens, sim.max_running, sim.chunked
    T_dec, T_mix = sim.decode, sim.mixed
    inp = traffic.input_tokens.tolist()
    out = traffic.output_tokens.tolist()
    cached0 = traffic.cached_tokens.tolist()
    sess = traffic.session.tolist()
    prefix = traffic.prefix_tokens.tolist()
    check_context(traffic, sim.engine.model)
    for i in range(n):
        if inp[i] + out[i] + fixed_tok > cap:
            raise SpecError(f"request {i + 1}: {inp[i] + out[i]:,.0f} tokens do not fit the engine's KV cache of "
                            f"{max(cap - fixed_tok, 0):,.0f} tokens per scheduler")
    ranks = [_Rank() for _ in range(dp)]
    home: dict = {}             # session -> its rank
    rank_of = [-1] * n
    arrival = [math.nan] * n
    first = [math.nan] * n
    end = [math.nan] * n
    queued = [False] * n
    preempted = [0] * n
    eligible = [0] * n          # the step index at which a request could first be admitted
    alloc = [0.0] * n           # KV tokens a prefilling request holds
    kv0 = [0.0] * n             # KV tokens of a decoding request at its decode start
    dstart = [0] * n            # decode step index at its decode start
    left = [0] * n              # decode steps left at (re)start
    emitted = [0.0] * n         # tokens emitted so far (for a recompute)
    epoch = [0] * n
    t_pre = [math.nan] * n
    arrivals: list = []         # heap of (time, id)
    if clients > 0:
        for i in range(min(clients, n)):
            arrivals.append((0.0, i))
            rank_of[i] = i % dp
        next_new = min(clients, n)
    else:
        arrivals = [(t, i) for i, (t, f) in enumerate(zip(traffic.arrival_s.tolist(), traffic.follows.tolist())) if f < 0]
        next_new = n
    heapq.heapify(arrivals)
    followers: dict = {}        # request -> the turns sent a gap after it ends
    gap_after = traffic.gap_s.tolist()
    if clients <= 0:
        for j, f in enumerate(traffic.follows.tolist()):
            if f >= 0:
                followers.setdefault(f, []).append(j)
    e = sim.engine
    acc = per_request_acceptance(int(e.draft_tokens), float(a), float(e.hw.acceptance_concentration), n,
                                 np.random.default_rng([int(seed), 1])).tolist()
    dec_steps = [max(0, math.ceil((o - 1) / x - 1e-9)) for o, x in zip(out, acc)]
    counter = 0
    now = 0.0
    done = 0
    area, busy = 0.0, 0.0
    in_sys = 0
    steps_t, steps_k, steps_b, steps_c, gaps = [], [], [], [], []
    heappop, heappush = heapq.heappop, heapq.heappush

    def evict(r, need):
        """Drop the rank's least recently used cached contexts until `need` more KV tokens fit beside its running ones."""
        used = r.S + r.palloc + len(r.running) * fixed_tok
        cache = r.cache
        while cache and used + r.cache_tok + need > cap:
            _, v = cache.popitem(last=False)
            r.cache_tok -= v

    def finish(r, i):
        nonlocal done, in_sys, next_new
        end[i] = now
        done += 1
        in_sys -= 1
        r.load -= 1
        s = sess[i]
        if s >= 0:
            r.cache_tok -= r.cache.pop(s, 0.0)
            r.cache[s] = inp[i] + out[i]
            r.cache_tok += inp[i] + out[i]
        if clients > 0 and next_new < n:
            rank_of[next_new] = rank_of[i]   # the same client
            heappush(arrivals, (now + think_s, next_new))
            next_new += 1
        for j in followers.get(i, ()):
            heappush(arrivals, (now + gap_after[j], j))

    def plan(r):
        """Schedule the rank's next step: preempt while its decodes cannot grow, then the prompts' chunks and the
        admissions. Sets r.pieces, r.C, r.Cx, r.growth; returns the step's time on this rank (0: nothing to run)."""
        growth = r.A
        if r.cache:
            evict(r, growth)
        running, prefilling = r.running, r.prefilling
        while running and r.S + growth + r.palloc + len(running) * fixed_tok > cap:
            v, _ = running.popitem()
            preempted[v] += 1
            epoch[v] += 1
            if alloc[v] > 0:
                prefilling[:] = [p for p in prefilling if p[0] != v]
                r.palloc -= alloc[v]
                alloc[v] = 0.0
            else:
                steps = counter - dstart[v]
                r.S -= kv0[v] + acc[v] * steps
                r.Bd -= 1
                r.A -= acc[v]
                emitted[v] += acc[v] * steps
                left[v] = max(left[v] - steps, 0)
                t_pre[v] = now
                if r.Bd == 0:
                    r.A = r.S = 0.0
            r.waiting.appendleft(v)
            growth = r.A
        room = budget - r.Bd * per_row
        pieces, C, Cx = [], 0.0, 0.0
        for p in prefilling:
            if room <= 0 or (not chunked and p[1] > room and C > 0):
                break
            piece = min(p[1], room) if chunked else p[1]
            pieces.append((p, piece))
            C += piece
            Cx += piece * p[2]
            room -= piece
        waiting, cache = r.waiting, r.cache
        while waiting and room > 0 and len(running) < max_run:
            i = waiting[0]
            need = inp[i] + (emitted[i] if preempted[i] else 0.0)
            s = sess[i]
            hit = cached0[i]
            mine = cache.pop(s, None) if s >= 0 and not preempted[i] else None   # its blocks go to the request
            if mine is not None:
                r.cache_tok -= mine
                hit = max(hit, min(prefix[i], mine))
            hit = min(hit, need - 1)
            todo = need - hit
            if not chunked and todo > room and C > 0:
                fits = False
            else:
                evict(r, need + fixed_tok)
                fits = r.S + growth + r.palloc + (len(running) + 1) * fixed_tok + need + r.cache_tok <= cap
            if not fits:
                if mine is not None:   # not admitted: its context stays cached
                    cache[s] = mine
                    r.cache_tok += mine
                break
            waiting.popleft()
            if counter > eligible[i]:
                queued[i] = True
            running[i] = None
            alloc[i] = need
            r.palloc += need
            p = [i, todo, hit]
            prefilling.append(p)
            piece = min(todo, room) if chunked else todo
            pieces.append((p, piece))
            C += piece
            Cx += piece * hit
            room -= piece
        r.pieces, r.C, r.Cx, r.growth = pieces, C, Cx, growth
        if C > 0:
            return T_mix(max(r.Bd, 1), C, r.S / r.Bd if r.Bd else Cx / C, Cx / C)
        return T_dec(r.Bd, r.S / r.Bd) if r.Bd else 0.0

    def decode_run(r):
        """Steps this decode-only rank can repeat before an event: a completion, its KV filling, RUN_CONTEXT_GROWTH."""
        fin = r.fin
        while fin and epoch[fin[0][2]] != fin[0][1]:
            heappop(fin)
        K = fin[0][0] - counter if fin else 1
        free = cap - (r.S + r.growth + r.palloc + len(r.running) * fixed_tok)
        if r.growth > 0:
            K = min(K, 1 + int(free // r.growth))
        return max(1, min(K, int(RUN_CONTEXT_GROWTH * r.S / max(r.A, 1e-9))))

    while done < n:
        # arrivals up to now join a rank's queue
        while arrivals and arrivals[0][0] <= now:
            t, i = heappop(arrivals)
            k = rank_of[i]
            if k < 0:
                s = sess[i]
                k = home.get(s, -1) if s >= 0 else -1
                if k < 0:
                    k = min(range(dp), key=lambda q: ranks[q].load) if dp > 1 else 0
                    if s >= 0:
                        home[s] = k
                rank_of[i] = k
            r = ranks[k]
            r.waiting.append(i)
            r.load += 1
            arrival[i] = t
            area += now - t
            eligible[i] = counter
            in_sys += 1
        if in_sys == 0:
            if not arrivals:
                raise SpecError("simulation: requests left that never arrive (a turn whose session's earlier turn is missing)")
            now = arrivals[0][0]
            continue
        dt = max(plan(r) for r in ranks)
        active = [r for r in ranks if r.Bd or r.C]
        if not active:   # cannot happen: an empty rank admits its queue's head
            raise SpecError("simulation: the scheduler could not run a step")
        K = 1
        if not any(r.C for r in active):
            # a run of decode steps up to the next event on any rank, timed at its middle context
            K = min(decode_run(r) for r in active)
            if arrivals:
                K = min(K, max(1, math.ceil((arrivals[0][0] - now) / dt)))
            if K > 1:
                dt = max(T_dec(r.Bd, (r.S + r.growth * (K - 1) / 2) / r.Bd) for r in active)
        span = K * dt
        area += in_sys * span
        busy += span
        now += span
        counter += K
        rows = 0
        chunk = 0.0
        for r in active:
            rows += r.Bd
            chunk += r.C
            r.S += r.growth * K
        steps_t.append(dt)
        steps_k.append(K)
        steps_b.append(rows)
        steps_c.append(chunk)
        for r in active:
            # prefill pieces done
            for p, piece in r.pieces:
                p[1] -= piece
                p[2] += piece
                if p[1] <= 0:
                    i = p[0]
                    r.prefilling.remove(p)
                    r.palloc -= alloc[i]
                    alloc[i] = 0.0
                    if first[i] != first[i]:   # nan: its first token
                        first[i] = now
                        emitted[i] = 1.0
                        left[i] = dec_steps[i]
                    elif t_pre[i] == t_pre[i]:
                        gaps.append(now - t_pre[i])
                        t_pre[i] = math.nan
                    if left[i] <= 0:
                        del r.running[i]
                        finish(r, i)
                        continue
                    kv0[i] = inp[i] + emitted[i]
                    dstart[i] = counter
                    r.S += kv0[i]
                    r.Bd += 1
                    r.A += acc[i]
                    heappush(r.fin, (counter + left[i], epoch[i], i))
            r.pieces = []
            r.C = 0.0
            fin = r.fin
            while fin and fin[0][0] <= counter:
                _, ep, i = heappop(fin)
                if epoch[i] != ep:
                    continue
                r.S -= kv0[i] + acc[i] * (counter - dstart[i])
                r.Bd -= 1
                r.A -= acc[i]
                del r.running[i]
                finish(r, i)
            if r.Bd == 0:
                r.S = r.A = 0.0
    return Run(sim=sim, traffic=traffic, arrival_s=np.array(arrival), first_token_s=np.array(first),
               end_s=np.array(end), queued=np.array(queued), preempted=np.array(preempted),
               step_s=np.array(steps_t), step_count=np.array(steps_k, dtype=float),
               step_rows=np.array(steps_b, dtype=float) / dp, step_chunk=np.array(steps_c),
               gap_s=np.array(gaps), in_system_s=area, busy_s=busy)


# ---------------------------------------------------------------- metrics


def weighted_percentiles(values, weights, pcts) -> np.ndarray:
    """Percentiles of samples `values` each counted `weights` times (inverted CDF at the cumulative share)."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    keep = w > 0
    v, w = v[keep], w[keep]
    if v.size == 0:
        return np.full(len(pcts), np.nan)
    order = np.argsort(v, kind="stable")
    v, cw = v[order], np.cumsum(w[order])
    return v[np.minimum(np.searchsorted(cw, np.asarray(pcts) / 100.0 * cw[-1], side="left"), v.size - 1)]


def _pkey(p: float) -> str:
    return "median" if p == 50 else "p" + f"{p:g}".replace(".", "_")


def run_engine(sim: SimEngine, traffic: Traffic, clients: int = 0, think_s: float = 0.0, seed: int = 0) -> list[Run]:
    """Simulate the engine (its schedulers stepping together) over the traffic: a list of one Run."""
    return [simulate(sim, traffic, clients=clients, think_s=think_s, seed=seed)]


def _gather(runs: list[Run], name: str) -> np.ndarray:
    return np.concatenate([getattr(r, name) for r in runs])


def disaggregated(prefill: SimEngine, instances: int, decode: SimEngine, traffic: Traffic, seed: int = 0) -> Run:
    """P/D: the prompts run on `instances` prefill engines (requests round robin in arrival order), each a simulated
    engine whose requests end with their first token; each request's KV then goes to the decode engine over the link
    the pools share (step/latency.py: kv_link, kv_transfer_time, for one request's KV per GPU), and the decode engine
    admits it (one token to compute: its KV is loaded) and decodes the rest. The decode pool does not hold the
    prefill pool back (no backpressure), so the two are simulated one after the other, exactly. Open loop only: a
    session's turn sent after the previous one ends, or a closed-loop client, would couple them.

    The Run: arrival, TTFT from the prefill engines, E2E from the decode engine; queued in either; the decode
    engine's steps, preemptions and count in the system; the prefill's count in the system added."""
    from rubinperf.step.capacity import kv_bytes_per_rank
    from rubinperf.step.latency import kv_link, kv_transfer_time

    if np.any(traffic.follows >= 0):
        raise SpecError("--prefill-layout: a trace whose turns wait for earlier turns (turn_gap_s) couples the pools; "
                        "give arrival_s for every line")
    n = len(traffic)
    ones = np.ones(n)
    first, queued, area = np.full(n, np.nan), np.zeros(n, dtype=bool), 0.0
    for k in range(instances):
        idx = np.arange(k, n, instances)
        if not idx.size:
            continue
        part = Traffic(traffic.arrival_s[idx], traffic.input_tokens[idx], ones[idx], traffic.cached_tokens[idx],
                       traffic.session[idx], traffic.prefix_tokens[idx])
        run = simulate(prefill, part, seed=seed)
        first[idx] = run.first_token_s
        queued[idx] = run.queued
        area += run.in_system_s
    m, hw = decode.engine.model, decode.engine.hw
    link = kv_link(hw, "nvlink", prefill.layout, decode.layout)
    tokens = np.geomspace(1.0, max(float(traffic.input_tokens.max()), 2.0), 48)
    secs = [kv_transfer_time(hw, float(kv_bytes_per_rank(m, prefill.layout, t, hw.window_kv_whole_sequence)), link)
            for t in tokens]
    moved = first + np.interp(traffic.input_tokens, tokens, secs)
    order = np.argsort(moved, kind="stable")
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    dec = Traffic(moved[order], traffic.input_tokens[order], traffic.output_tokens[order],
                  np.maximum(traffic.input_tokens[order] - 1, 0.0), np.full(n, -1, dtype=np.int64), np.zeros(n))
    run = simulate(decode, dec, seed=seed)
    return Run(sim=decode, traffic=traffic, arrival_s=traffic.arrival_s.copy(), first_token_s=first,
               end_s=run.end_s[back], queued=queued | run.queued[back], preempted=run.preempted[back],
               step_s=run.step_s, step_count=run.step_count, step_rows=run.step_rows, step_chunk=run.step_chunk,
               gap_s=run.gap_s, in_system_s=area + float(np.sum(moved - first)) + run.in_system_s, busy_s=run.busy_s)


def summary(runs: list[Run], percentiles=(50.0, 90.0, 99.0), goodput: dict | None = None, gpus: int | None = None
            ) -> dict:
    """The benchmark's figures over the engine's runs: throughput over the run (first arrival to last completion),
    per-request latencies at the percentiles, goodput, and counts of queued and preempted requests."""
    sim = runs[0].sim
    e = sim.engine
    arr, first, end = _gather(runs, "arrival_s"), _gather(runs, "first_token_s"), _gather(runs, "end_s")
    inp = np.concatenate([r.traffic.input_tokens for r in runs])
    out = np.concatenate([r.traffic.output_tokens for r in runs])
    n = arr.size
    duration = float(np.max(end) - np.min(arr))
    ttft = first - arr
    e2e = end - arr
    several = out > 1
    tpot = np.where(several, (end - first) / np.maximum(out - 1, 1), np.nan)
    step_t, step_k, step_b = _gather(runs, "step_s"), _gather(runs, "step_count"), _gather(runs, "step_rows")
    step_c = _gather(runs, "step_chunk")
    gaps = _gather(runs, "gap_s")
    itl_v = np.concatenate([step_t, gaps])
    itl_w = np.concatenate([step_k * step_b, np.ones(gaps.size)])
    ranks = e.layout.ranks if gpus is None else gpus
    busy = sum(r.busy_s for r in runs)
    total_steps = float(np.sum(step_k))
    rec = {
        "hardware": e.hw.name, "stack": e.hw.stack, "model": e.model.name, "layout": e.layout.name,
        "serving": "agg", "simulated": True, "gpus": ranks, "draft_tokens": e.draft_tokens, "acceptance": e.acceptance,
        "max_num_batched_tokens": sim.budget, "chunked_prefill": sim.chunked,
        "mixed_prefill_decode": bool(e.hw.mixed_prefill_decode),
        "max_running_requests_per_rank": sim.max_running, "kv_capacity_tokens_per_rank": sim.kv_tokens,
        "num_requests": int(n), "completed": int(np.sum(np.isfinite(end))), "duration_s": duration,
        "mean_input_tokens": float(np.mean(inp)), "mean_output_tokens": float(np.mean(out)),
        "request_throughput_per_s": n / duration,
        "output_tokens_per_s": float(np.sum(out)) / duration,
        "total_tokens_per_s": float(np.sum(inp + out)) / duration,
    }
    rec["output_tokens_per_s_per_gpu"] = rec["output_tokens_per_s"] / ranks
    rec["total_tokens_per_s_per_gpu"] = rec["total_tokens_per_s"] / ranks
    good = np.ones(n, dtype=bool)
    samples = {"ttft": ttft, "tpot": tpot, "e2e": e2e}
    for key, limit in (goodput or {}).items():
        if key == "itl":   # a request's ITL: its mean time between tokens after the first, as TPOT
            good &= ~(tpot > limit)
        else:
            good &= ~(samples[key] > limit)
    if goodput:
        rec["goodput_limits_s"] = dict(goodput)
        rec["request_goodput_per_s"] = float(np.sum(good)) / duration
        rec["good_requests"] = int(np.sum(good))
    for name, v, w in (("ttft", ttft, None), ("tpot", tpot[several], None), ("itl", itl_v, itl_w), ("e2e", e2e, None)):
        if w is None:
            rec[f"mean_{name}_ms"] = float(np.mean(v)) * 1e3 if v.size else math.nan
            pct = np.percentile(v, percentiles) if v.size else np.full(len(percentiles), np.nan)
        else:
            rec[f"mean_{name}_ms"] = float(np.sum(v * w) / np.sum(w)) * 1e3 if np.sum(w) > 0 else math.nan
            pct = weighted_percentiles(v, w, percentiles)
        for p, x in zip(percentiles, np.atleast_1d(pct)):
            rec[f"{_pkey(p)}_{name}_ms"] = float(x) * 1e3
    rec.update({
        "percentiles": list(percentiles),
        "requests_queued": int(np.sum(_gather(runs, "queued"))),
        "requests_preempted": int(np.sum(_gather(runs, "preempted") > 0)),
        "preemptions": int(np.sum(_gather(runs, "preempted"))),
        "steps_per_scheduler": total_steps / len(runs),
        "mean_step_ms": busy / total_steps * 1e3 if total_steps else math.nan,
        "prefill_step_share": float(np.sum(step_k[step_c > 0]) / total_steps) if total_steps else 0.0,
        "mean_running_batch_per_rank": float(np.sum(step_t * step_k * step_b) / busy) if busy else 0.0,
        "mean_in_system": sum(r.in_system_s for r in runs) / duration,
    })
    return rec


def parse_rates(text) -> list[float]:
    """--request-rate '4' or '1,2,4,8' (requests/s) or 'inf' (every request at once, vllm bench serve's default)."""
    out = []
    for p in str(text).split(","):
        p = p.strip().lower()
        try:
            v = float(p)
        except ValueError:
            raise SpecError(f"--request-rate: expected requests per second such as 4 or 1,2,4 (or inf), got {p!r}") from None
        if not (v == math.inf or MIN_RATE <= v <= MAX_RATE):
            raise SpecError(f"--request-rate: expected {MIN_RATE:g} to {MAX_RATE:g} requests per second (or inf), got {p}")
        out.append(v)
    if not out or len(out) > 64:
        raise SpecError("--request-rate: expected 1 to 64 rates")
    return out


def serve_records(e, *, rates=(), trace: Traffic | None = None, trace_path: str = "", clients=(), num_requests=1000,
                  seed=0, burstiness=1.0, think_s=0.0, percentiles=(50.0, 90.0, 99.0), goodput=None,
                  prefill=None, prefill_instances: int = 1) -> list[dict]:
    """`serve` simulated: a record per request rate, per concurrency (closed-loop clients), or of the trace; the
    step tables built once for all of them. With `prefill` (an aggregated.Engine of the prefill layout), P/D: the
    prompts on `prefill_instances` such engines, the decode on `e` (disaggregated)."""
    if prefill is not None and clients:
        raise SpecError("--prefill-layout: P/D is simulated open loop (--request-rate or --trace), not with --simulate")
    if prefill is not None and not 1 <= prefill_instances <= 1024:
        raise SpecError(f"--prefill-instances: expected 1 to 1,024, got {prefill_instances}")
    jobs = []
    for r in rates:
        jobs.append(({"mode": "request-rate", "request_rate": r, "burstiness": burstiness, "seed": seed},
                     synthetic(e.mix, num_requests, seed, rate=r, burstiness=burstiness), 0))
    for c in clients:
        jobs.append(({"mode": "closed-loop", "concurrency": float(c), "seed": seed, "turn_gap_s": think_s},
                     synthetic(e.mix, num_requests, seed), int(c)))
    if trace is not None:
        jobs.append(({"mode": "trace", "trace": trace_path}, trace, 0))
    top = max(float(np.max(t.input_tokens + t.output_tokens)) for _, t, _ in jobs)
    sim = sim_engine(e, top)
    pre = sim_engine(prefill, top) if prefill is not None else None
    out = []
    for extra, traffic, c in jobs:
        if pre is None:
            runs = run_engine(sim, traffic, clients=c, think_s=think_s if c else 0.0, seed=seed)
            rec = summary(runs, percentiles, goodput)
        else:
            runs = [disaggregated(pre, prefill_instances, sim, traffic, seed=seed)]
            rec = summary(runs, percentiles, goodput, gpus=e.layout.ranks + prefill_instances * prefill.layout.ranks)
            rec.update({"serving": "disagg", "prefill_layout": prefill.layout.name,
                        "prefill_instances": prefill_instances, "decode_layout": e.layout.name})
        rec.update(extra)
        rec.update({"isl": e.mix.isl, "osl": e.mix.osl, "random_range_ratio": e.mix.range_ratio,
                    "range_convention": e.mix.convention, "prefix_hit_rate": e.mix.prefix_hit})
        out.append(rec)
    return out
