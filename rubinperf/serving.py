"""Serving model: speculative decoding, disaggregated prefill/decode pools, a workload, money and power.

Speculative decoding. A decode verify step runs the target over 1 + k tokens per request
and the draft's k sequential passes; it emits `acceptance` tokens per request on average:

    tokens/s per user (mean) = acceptance / step,   step = max(target + draft GPU time, CPU time)

Users differ (per-request acceptance, step fluctuation): P50 and P90 are the mean times a
factor from rubinperf/interactivity.py; the frontier uses P90 unless asked otherwise.

When k changes and no acceptance is given, the acceptance follows from a constant
per-token acceptance rate alpha fitted to the model's (k, acceptance):
acceptance(k) = (1 - alpha^(k+1)) / (1 - alpha).

Pools. A turn of the workload has `input` prompt tokens (a fraction `prefix_hit_rate`
of them cached) and `output` generated tokens. The prefill pool computes the uncached
tokens, chunked to a token budget per rank, after loading the cached prefix's KV from
the shared pool (host memory over C2C, peers' HBM over NVLink, or local HBM); the
loads use copy engines and overlap compute, so a prefill rank is busy
max(step, loads) per chunk. The decode pool then runs the turn's output. The pools are
sized so that turns per second match (a continuous ratio; whole instances are a
rounding of it):

    prefill GPUs per decode GPU = decode turns/s per GPU / prefill turns/s per GPU
    tokens/s per GPU            = turns/s x (cached + uncached + output) / (prefill + decode GPUs)

TTFT = loading the batch's cached prefixes + the prefill chunks + sending the prefilled
KV to the decode pool over the workload's link (queueing not modelled).

Money and power. $ per million tokens from the rack's $/GPU-hour: the prefill pool's
GPU-hours are charged to input tokens (cached and uncached), the decode pool's to output
tokens; the blended figure charges every GPU-hour to every token. Tokens/s per kW uses
the spec's power per GPU.

Everything here is vectorised over the decode batch (numpy arrays); the prefill plan of a
(rack, layout, workload) is a scalar.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from rubinperf.capacity import Capacity, capacity, kv_bytes_per_request
from rubinperf.cost import BOUNDS
from rubinperf.errors import SpecError
from rubinperf.layout import Layout, check_layout, parse_layout
from rubinperf.roofline import admission_time
from rubinperf.scenario import make_point
from rubinperf.specs.model import Model
from rubinperf.specs.workload import Workload
from rubinperf.step import StepResult, step

DEFAULT_DECODE_LAYOUTS = ("tp4", "tp8", "dep8", "dep16", "dep32", "dep64")
DEFAULT_MAX_BATCH = 1024
SECONDS_PER_HOUR = 3600.0


# ---------------------------------------------------------------- speculative decoding


def accepted_tokens(alpha, k):
    """Mean tokens emitted per verify step with k drafted tokens, each accepted with probability alpha
    (until the first rejection), plus the target's own token: (1 - alpha^(k+1)) / (1 - alpha)."""
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(alpha >= 1.0, k + 1.0, (1.0 - alpha ** (k + 1)) / (1.0 - np.where(alpha >= 1.0, 0.0, alpha)))
    return float(out) if out.ndim == 0 else out


def acceptance_rate(accepted: float, k: int) -> float:
    """The per-token acceptance alpha that gives `accepted` tokens per step at draft length k."""
    if k <= 0:
        return 0.0
    if not 1.0 <= accepted <= k + 1:
        raise SpecError(f"acceptance {accepted:g}: expected between 1 and k + 1 = {k + 1}")
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if accepted_tokens(mid, k) < accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def default_acceptance(m: Model, k: int) -> float:
    """The model's acceptance at its own draft length; at another k, the same per-token rate's."""
    if not 1.0 <= m.mean_accepted_tokens <= m.draft_tokens + 1:
        raise SpecError(f"model {m.name}: draft.mean_accepted_tokens {m.mean_accepted_tokens:g}: expected between 1 "
                        f"and draft_tokens + 1 = {m.draft_tokens + 1}")
    if k == m.draft_tokens:
        return m.mean_accepted_tokens
    if m.draft_tokens <= 0:
        return 1.0
    return accepted_tokens(acceptance_rate(m.mean_accepted_tokens, m.draft_tokens), k)


@dataclass(frozen=True)
class SpecDecode:
    """One decode engine (target + draft), vectorised over the batch."""

    layout: Layout
    batch: Any                 # requests per rank (DEP) or per instance (TP)
    context: float             # mean tokens in a request's KV while it decodes
    draft_tokens: int
    acceptance: float          # tokens emitted per request per verify step
    target_s: Any              # target GPU time of one verify step
    draft_s: Any               # draft GPU time of one verify step (k sequential passes)
    cpu_s: Any                 # host time (scheduling, DP sync), overlapped with the GPU
    step_s: Any                # max(target + draft, cpu)
    result: StepResult = field(repr=False, compare=False)
    speed: dict = field(default_factory=lambda: {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p10": 1.0}, compare=False)
    output_tokens_per_turn: float = 0.0   # the workload's, when the engine serves one (admissions); 0: a bare step

    @property
    def tokens_per_s_per_user(self):
        """The mean: mean acceptance over the step."""
        return self.acceptance / self.step_s

    def tokens_per_s_per_user_at(self, stat: str):
        """P50, P90 (the speed 90% of users reach), P10 or the mean (rubinperf/interactivity.py)."""
        return self.tokens_per_s_per_user * self.speed[stat]

    @property
    def output_tokens_per_s_per_gpu(self):
        return self.batch * self.acceptance * self.layout.dp / self.step_s / self.layout.ranks

    @property
    def bound(self):
        return bound_array(self.result, self.cpu_s)

    @property
    def admissions_per_step(self):
        """New requests one scheduler (a DEP rank, a TP instance) admits per step in steady state: each step
        emits batch x acceptance tokens, and a turn leaves after its output, so batch x acceptance / output
        turns end, and as many start, per step."""
        return self.batch * self.acceptance / self.output_tokens_per_turn if self.output_tokens_per_turn else 0.0


def decode_engine(m: Model, hw, layout: Layout, batch, context: float, draft_tokens: int | None = None,
                  acceptance: float | None = None, eplb: bool = True, prompt_tokens_per_turn: float = 0.0,
                  output_tokens_per_turn: float = 0.0) -> SpecDecode:
    """The decode engine over an array of batches. With a workload's turn (prompt and output tokens), the host
    also admits the requests that replace finished ones: admissions per step x prompt tokens x the stack's
    admission_cpu_per_prompt_token_s of CPU per step (roofline.admission_time), overlapped with the GPU."""
    k = m.draft_tokens if draft_tokens is None else int(draft_tokens)
    if k < 0:
        raise SpecError(f"--draft-tokens: expected 0 or more, got {k}")
    if k > 0 and m.draft_layers == 0:
        raise SpecError(f"--draft-tokens: {m.name} has no draft layers")
    if acceptance is not None and not 1.0 <= acceptance <= k + 1:
        raise SpecError(f"--acceptance: expected between 1 and draft tokens + 1 = {k + 1}, got {acceptance:g}")
    a = default_acceptance(m, k) if acceptance is None else float(acceptance)
    point = make_point(m, hw, layout, phase="decode", batch=1, context=context, draft_tokens=k, acceptance=a, eplb=eplb,
                       engram_placement=m.engram_placement)
    b = np.asarray(batch, dtype=float)
    r = step(m, hw, layout, dataclasses.replace(point, batch=b))
    _check_times(hw, m, f"{layout.name} decode", r.expected_s)
    from rubinperf.interactivity import speed_factors

    speed = speed_factors(k, a, float(hw.acceptance_concentration), float(hw.step_time_spread))
    admitted = b * a / output_tokens_per_turn * prompt_tokens_per_turn if output_tokens_per_turn else 0.0
    cpu = r.cpu_s + admission_time(hw, admitted)
    return SpecDecode(layout=layout, batch=b, context=float(context), draft_tokens=k, acceptance=a,
                      target_s=_full(r.part_s("target"), b), draft_s=_full(r.part_s("draft"), b),
                      cpu_s=_full(cpu, b), step_s=_full(np.maximum(r.gpu_s, cpu), b), result=r, speed=speed,
                      output_tokens_per_turn=float(output_tokens_per_turn))


def _check_times(hw, m: Model, what: str, *times) -> None:
    """Out-of-range spec values (a rate of 1e-300, a floor of 1e300) end here, not in a division by zero."""
    for t in times:
        t = np.asarray(t, dtype=float)
        if not (np.all(np.isfinite(t)) and np.all(t > 0)):
            raise SpecError(f"{hw.name} with {m.name}: {what} times are not finite positive numbers; "
                            "a rate, size or floor in the specs is out of range, or the layout splits the model "
                            "finer than its shapes allow")


def _full(x, like):
    return np.broadcast_to(np.asarray(x, dtype=float), np.shape(like)).copy() if np.ndim(like) else float(x)


def bound_array(r: StepResult, cpu_s=None):
    """StepResult.bound for array points: per element, the term (compute, memory, parallelism, comm, latency) binding the
    largest share of GPU time, or cpu when host time (`cpu_s`, default the step's) exceeds it."""
    shape = np.shape(r.expected_s)
    shares = np.zeros((len(BOUNDS),) + shape)
    for o in r.ops:
        if o.op.part == "cpu":
            continue
        t = o.time
        terms = np.stack(np.broadcast_arrays(*(np.asarray(getattr(t, f"{b}_s"), dtype=float) + np.zeros(shape)
                                               for b in BOUNDS)))
        which = np.argmax(terms, axis=0)
        share = np.asarray(o.expected_s, dtype=float) + np.zeros(shape)
        for i in range(len(BOUNDS)):
            shares[i] += np.where(which == i, share, 0.0)
    names = np.array(BOUNDS, dtype=object)[np.argmax(shares, axis=0)]
    cpu = np.asarray(r.cpu_s if cpu_s is None else cpu_s, dtype=float) + np.zeros(shape) > np.asarray(r.gpu_s, dtype=float) + np.zeros(shape)
    out = np.where(cpu, "cpu", names)
    return str(out) if out.ndim == 0 else out


# ---------------------------------------------------------------- prefill pool


def prefix_load_rate(hw, pool: str) -> float:
    """Bytes/s one GPU loads cached prefix KV at, from the shared pool."""
    if pool == "host":
        return min(hw.host_memory_bandwidth_bytes_per_s, hw.c2c_bandwidth_bytes_per_s) * hw.host_efficiency
    if pool == "peer-hbm":
        return hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency
    return hw.hbm_bandwidth_bytes_per_s * hw.hbm_stream_efficiency


def kv_transfer_link(hw, w: Workload, prefill_layout: Layout, decode_layout: Layout | None = None) -> str:
    """The link that carries prefilled KV to the decode pool: the workload's; on a cluster (a rack whose
    instances may span NVLink domains, max_nvlink_domains > 1) the scale-out NIC whenever a prefill
    instance and a decode instance cannot sit in one NVLink domain (either spans more than one, or the two
    together are wider than it). A single-domain rack keeps the workload's link (with NVLink, both pools
    must fit its domain: Serving.fits_domain)."""
    d = hw.nvlink_domain_size
    wide = prefill_layout.ranks > d or (decode_layout is not None and prefill_layout.ranks + decode_layout.ranks > d)
    cluster = getattr(hw, "max_nvlink_domains", 1) > 1
    return "scale-out" if wide and cluster else w.kv_transfer_link


def kv_transfer_s(m: Model, hw, w: Workload, layout: Layout, seqs: float, link: str) -> float:
    """Sending one step's prefilled KV (its sequences' whole input) from each prefill GPU over `link`."""
    link_rate, latency = kv_link(hw, link)
    sent = seqs * float(kv_bytes_per_request(m, w.input_tokens_per_turn)) * layout.dp / layout.ranks
    return sent / link_rate + latency


def kv_link(hw, link: str) -> tuple[float, float]:
    """(bytes/s, latency) of the link that carries KV from the prefill to the decode pool."""
    if link == "nvlink":
        return hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency, hw.nvlink_latency_s
    return hw.scale_out_bandwidth_bytes_per_s * hw.scale_out_efficiency, hw.scale_out_latency_s


@dataclass(frozen=True)
class PrefillPlan:
    """The prefill pool's engine for one workload: one chunked step, repeated."""

    layout: Layout
    seqs: float                # sequences per step per rank (DEP) or per instance (TP)
    new_tokens: float          # new tokens per step per rank (DEP) or per instance (TP)
    context: float             # cached tokens before the step's new tokens
    chunks_per_turn: int       # steps one turn's uncached tokens take
    step_s: float
    load_s: float              # prefix loads of one step's sequences (overlaps compute)
    load_ttft_s: float         # prefix loads a request waits for before its first chunk
    transfer_s: float          # sending the step's prefilled KV to the decode pool
    capacity: Capacity
    bound: str
    result: StepResult = field(repr=False, compare=False)

    @property
    def busy_s(self) -> float:
        return max(self.step_s, self.load_s)

    @property
    def ttft_s(self) -> float:
        return self.load_ttft_s + self.chunks_per_turn * self.step_s + self.transfer_s

    @property
    def turns_per_s_per_gpu(self) -> float:
        return self.seqs * self.layout.dp / self.layout.ranks / (self.busy_s * self.chunks_per_turn)

    @property
    def feasible(self) -> bool:
        return self.capacity.max_requests >= self.seqs

    @property
    def reason(self) -> str:
        return self.capacity.reason(self.seqs)


def prefill_plan(m: Model, hw, w: Workload, layout: Layout | None = None, eplb: bool = True) -> PrefillPlan:
    """Chunk the workload's uncached tokens to the budget per rank, time one step, add loads and transfer."""
    layout = layout or parse_layout(w.prefill_layout)
    uncached, cached = w.uncached_tokens_per_turn, w.cached_tokens_per_turn
    budget = w.prefill_tokens_per_rank
    if uncached <= budget:
        seqs, chunks = float(math.floor(budget / uncached)), 1
        new, context = seqs * uncached, cached
    else:
        # No more chunks than whole tokens: a budget of 1 over 945.0000001 tokens is 945 chunks, not 946 of 0.999.
        seqs, chunks = 1.0, min(math.ceil(uncached / budget), max(1, math.floor(uncached)))
        new = uncached / chunks
        context = cached + (uncached - new) / 2   # mean of the chunks' preceding tokens
    point = make_point(m, hw, layout, phase="prefill", batch=seqs, context=context, new_tokens=new, eplb=eplb,
                       engram_placement=w.prefill_engram_placement)
    r = step(m, hw, layout, point)
    prefix_bytes = float(kv_bytes_per_request(m, cached)) if cached > 0 else 0.0
    rate = prefix_load_rate(hw, w.prefix_pool)
    load_ttft = seqs * prefix_bytes / rate
    cap = capacity(m, hw, layout, "prefill", context_tokens=w.input_tokens_per_turn,
                   tokens_per_request=new / seqs, logits_per_request=1, reserve_bytes=w.runtime_reserve_bytes,
                   engram_placement=w.prefill_engram_placement, engram_peer_gpus=w.engram_peer_gpus)
    transfer = kv_transfer_s(m, hw, w, layout, seqs, kv_transfer_link(hw, w, layout))
    _check_times(hw, m, f"{layout.name} prefill", r.expected_s, transfer, load_ttft + r.expected_s)
    return PrefillPlan(layout=layout, seqs=seqs, new_tokens=float(new), context=float(context), chunks_per_turn=chunks,
                       step_s=float(r.expected_s), load_s=load_ttft / chunks, load_ttft_s=load_ttft,
                       transfer_s=transfer, capacity=cap, bound=r.bound, result=r)


# ---------------------------------------------------------------- the deployment


@dataclass(frozen=True, eq=False)
class Serving:
    """A prefill pool and a decode pool serving one workload on one rack, over an array of decode batches."""

    hw: Any
    model: Model
    workload: Workload
    prefill: PrefillPlan
    decode: SpecDecode
    decode_capacity: Capacity
    interactivity_stat: str = "p90"   # which statistic of tokens/s per user the frontier uses (and records show)
    total_gpus: int | None = None     # --total-gpus: whole prefill and decode instances within this many GPUs

    # -- whole instances (--total-gpus)
    @cached_property
    def pools(self):
        """(prefill instances, decode instances) per batch point, or None for the continuous ratio.

        For each count of decode instances nd (of D GPUs) that fits, the prefill instances (of P GPUs) are
        the fewest that keep up, np = ceil(nd D x decode turns/s per GPU / (P x prefill turns/s per GPU)),
        capped by the GPUs left; turns/s = min(np P x prefill rate, nd D x decode rate). The pick is the
        nd with the most turns/s (ties: fewer GPUs). np P + nd D never exceeds total_gpus."""
        if self.total_gpus is None:
            return None
        N, P, D = int(self.total_gpus), self.prefill.layout.ranks, self.decode.layout.ranks
        dr = np.ravel(np.broadcast_to(np.asarray(self.decode_turns_per_s_per_gpu, dtype=float),
                                      np.shape(self.decode.batch)))
        pr = float(self.prefill.turns_per_s_per_gpu)
        best_turns = np.zeros_like(dr)
        best = (np.zeros(dr.shape, dtype=int), np.zeros(dr.shape, dtype=int))
        for nd in range(1, N // D + 1):
            room = (N - nd * D) // P
            if room < 1:
                break
            need = np.ceil(nd * D * dr / (P * pr) - 1e-9) if pr > 0 else np.full(dr.shape, room)
            npf = np.clip(need, 1, room).astype(int)
            turns = np.minimum(npf * P * pr, nd * D * dr)
            better = turns > best_turns * (1 + 1e-12)
            best_turns = np.where(better, turns, best_turns)
            best = (np.where(better, npf, best[0]), np.where(better, nd, best[1]))
        shape = np.shape(self.decode.batch)
        return best[0].reshape(shape), best[1].reshape(shape), best_turns.reshape(shape)

    # -- feasibility
    @property
    def admits(self):
        """The stack's cap on new KV loads per step keeps up with the turns that end (0: no cap)."""
        cap = self.hw.max_kv_loads_per_step
        return np.asarray(self.decode.admissions_per_step <= cap * (1 + 1e-12)) if cap else np.True_

    @property
    def deployment_gpus(self):
        """GPUs of one decode instance with its share of prefill GPUs (continuous ratio), or of --total-gpus."""
        if self.pools is not None:
            return float(self.total_gpus)
        return self.decode.layout.ranks * (1.0 + self.prefill_gpus_per_decode_gpu)

    @property
    def fits_domain(self):
        """With the KV cache sent over NVLink, a decode instance and its prefill GPUs share one NVLink domain."""
        if self.workload.kv_transfer_link != "nvlink" or self.pools is not None:
            return np.True_
        if getattr(self.hw, "max_nvlink_domains", 1) > 1:   # a cluster: KV that cannot stay in a domain takes the NIC
            return np.True_
        return np.asarray(self.deployment_gpus <= self.hw.nvlink_domain_size * (1 + 1e-12))

    @property
    def feasible(self):
        ok = self.decode_capacity.fits(self.decode.batch) & self.prefill.feasible & self.admits & self.fits_domain
        if self.pools is not None:
            ok = ok & (self.pools[1] >= 1)
        return ok

    def reason(self, i=None) -> str:
        """Why point `i` (or the whole run) is infeasible; '' when it is feasible."""
        if not self.prefill.feasible:
            return self.prefill.reason
        if self.pools is not None and not np.any(self.pools[1] >= 1):
            return (f"--total-gpus {self.total_gpus}: no room for one {self.prefill.layout.name} prefill and one "
                    f"{self.decode.layout.name} decode instance")
        b = self.decode.batch if i is None else np.asarray(self.decode.batch)[i]
        b = np.max(b) if np.ndim(b) else b
        why = self.decode_capacity.reason(b)
        if why:
            return why
        pick = (lambda x: x) if i is None else (lambda x: np.asarray(x)[i] if np.ndim(x) else x)
        if not np.all(pick(self.admits)):
            per = self.decode.admissions_per_step
            per = float(np.max(pick(per))) if np.ndim(per) else float(per)
            return (f"admission: {per:.3g} new requests per step per scheduler, more than the stack's "
                    f"max_kv_loads_per_step = {self.hw.max_kv_loads_per_step} ({self.hw.stack})")
        if not np.all(pick(self.fits_domain)):
            gpus = pick(self.deployment_gpus)
            gpus = float(np.max(gpus)) if np.ndim(gpus) else float(gpus)
            return (f"{self.decode.layout.name} decode and its prefill GPUs need {gpus:.1f} GPUs, more than the "
                    f"{self.hw.nvlink_domain_size}-GPU NVLink domain that kv_transfer_link = nvlink puts both pools in "
                    "(the workload's kv_transfer_link = scale-out lets them span domains)")
        return ""

    # -- rates (per GPU of the whole deployment unless the name says otherwise)
    @property
    def decode_turns_per_s_per_gpu(self):
        return self.decode.output_tokens_per_s_per_gpu / self.workload.output_tokens_per_turn

    @property
    def prefill_gpus_per_decode_gpu(self):
        if self.pools is not None:
            npf, nd, _ = self.pools
            return np.where(nd > 0, npf * self.prefill.layout.ranks / np.maximum(nd * self.decode.layout.ranks, 1), np.inf)
        return self.decode_turns_per_s_per_gpu / self.prefill.turns_per_s_per_gpu

    @property
    def decode_gpu_fraction(self):
        return 1.0 / (1.0 + self.prefill_gpus_per_decode_gpu)

    @property
    def turns_per_s_per_gpu(self):
        if self.pools is not None:   # whole instances: every one of the deployment's GPUs is counted
            return self.pools[2] / self.total_gpus
        return self.decode_turns_per_s_per_gpu * self.decode_gpu_fraction

    @property
    def cached_tokens_per_s_per_gpu(self):
        return self.turns_per_s_per_gpu * self.workload.cached_tokens_per_turn

    @property
    def uncached_tokens_per_s_per_gpu(self):
        return self.turns_per_s_per_gpu * self.workload.uncached_tokens_per_turn

    @property
    def output_tokens_per_s_per_gpu(self):
        return self.turns_per_s_per_gpu * self.workload.output_tokens_per_turn

    @property
    def tokens_per_s_per_gpu(self):
        """The seed's throughput: cached + uncached input + output tokens over every GPU of both pools."""
        return self.turns_per_s_per_gpu * self.workload.tokens_per_turn

    @property
    def tokens_per_s_per_user(self):
        """Tokens/s per user at the chosen statistic (P90 unless asked otherwise)."""
        return self.decode.tokens_per_s_per_user_at(self.interactivity_stat)

    @property
    def ttft_s(self) -> float:
        return self.prefill.ttft_s

    # -- money and power
    @property
    def usd_per_gpu_s(self) -> float:
        return self.hw.price_usd_per_gpu_hour / SECONDS_PER_HOUR

    @property
    def usd_per_m_input(self) -> float:
        """Prefill-pool GPU time per million input (cached + uncached) tokens."""
        return self.usd_per_gpu_s * 1e6 / (self.prefill.turns_per_s_per_gpu * self.workload.input_tokens_per_turn)

    @property
    def usd_per_m_output(self):
        """Decode-pool GPU time per million output tokens."""
        return self.usd_per_gpu_s * 1e6 / self.decode.output_tokens_per_s_per_gpu

    @property
    def usd_per_m_tokens(self):
        """Every GPU-hour over every token."""
        return self.usd_per_gpu_s * 1e6 / self.tokens_per_s_per_gpu

    @property
    def tokens_per_s_per_kw(self):
        return self.tokens_per_s_per_gpu / (self.hw.gpu_power_w / 1e3)

    # -- records
    @cached_property
    def columns(self) -> dict:
        """Every per-point quantity as an array over the batch (scalars broadcast)."""
        d = self.decode
        n = np.shape(d.batch)
        full = lambda x: np.broadcast_to(np.asarray(x), n)   # noqa: E731
        return {
            "batch_per_rank": full(d.batch), "feasible": full(self.feasible),
            "tokens_per_s_per_gpu": full(self.tokens_per_s_per_gpu),
            "tokens_per_s_per_user": full(self.tokens_per_s_per_user),
            **{f"tokens_per_s_per_user_{st}": full(d.tokens_per_s_per_user_at(st)) for st in ("mean", "p50", "p90", "p10")},
            "cached_tokens_per_s_per_gpu": full(self.cached_tokens_per_s_per_gpu),
            "uncached_tokens_per_s_per_gpu": full(self.uncached_tokens_per_s_per_gpu),
            "output_tokens_per_s_per_gpu": full(self.output_tokens_per_s_per_gpu),
            "decode_output_tokens_per_s_per_decode_gpu": full(d.output_tokens_per_s_per_gpu),
            "decode_step_ms": full(d.step_s * 1e3), "target_ms": full(d.target_s * 1e3),
            "draft_ms": full(d.draft_s * 1e3), "cpu_ms": full(d.cpu_s * 1e3), "decode_bound": full(d.bound),
            "prefill_gpus_per_decode_gpu": full(self.prefill_gpus_per_decode_gpu),
            "usd_per_m_output": full(self.usd_per_m_output), "usd_per_m_tokens": full(self.usd_per_m_tokens),
            "tokens_per_s_per_kw": full(self.tokens_per_s_per_kw),
            "decode_hbm_used_bytes": full(self.decode_capacity.used_bytes(d.batch)),
        }

    def record(self, i=()) -> dict:
        """One swept point as a plain record (SI values; times in ms where the name says)."""
        c = self.columns
        d, p = self.decode, self.prefill
        feasible = bool(c["feasible"][i])
        out = {
            "hardware": self.hw.name, "model": self.model.name, "workload": self.workload.name,
            "decode_layout": d.layout.name, "prefill_layout": p.layout.name,
            "batch_per_rank": float(c["batch_per_rank"][i]), "context_tokens": d.context,
            "draft_tokens": d.draft_tokens, "acceptance": d.acceptance,
            "feasible": feasible, "reason": "" if feasible else self.reason(i),
        }
        out["interactivity_stat"] = self.interactivity_stat
        for key in ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "tokens_per_s_per_user_mean",
                    "tokens_per_s_per_user_p50", "tokens_per_s_per_user_p90", "tokens_per_s_per_user_p10",
                    "cached_tokens_per_s_per_gpu",
                    "uncached_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
                    "decode_output_tokens_per_s_per_decode_gpu", "decode_step_ms", "target_ms", "draft_ms", "cpu_ms"):
            out[key] = float(c[key][i])
        out["decode_bound"] = str(c["decode_bound"][i])
        out["requests_per_decode_gpu"] = out["batch_per_rank"] * d.layout.dp / d.layout.ranks
        out["prefill_gpus_per_decode_gpu"] = float(c["prefill_gpus_per_decode_gpu"][i])
        out["decode_gpu_share"] = 1.0 / (1.0 + out["prefill_gpus_per_decode_gpu"])
        if self.pools is not None:
            npf, nd = int(np.asarray(self.pools[0])[i]), int(np.asarray(self.pools[1])[i])
            used = npf * p.layout.ranks + nd * d.layout.ranks
            out.update(total_gpus=self.total_gpus, prefill_instances=npf, decode_instances=nd, pools=f"{npf}P{nd}D",
                       gpus_used=used)
        out.update({
            "prefill_step_ms": p.step_s * 1e3, "prefill_seqs": p.seqs, "prefill_new_tokens": p.new_tokens,
            "prefill_chunks_per_turn": p.chunks_per_turn, "prefill_bound": p.bound,
            "ttft_ms": self.ttft_s * 1e3, "prefix_load_ms": p.load_ttft_s * 1e3, "kv_transfer_ms": p.transfer_s * 1e3,
            "kv_transfer_link": kv_transfer_link(self.hw, self.workload, p.layout, d.layout),
            "usd_per_m_input": self.usd_per_m_input, "usd_per_m_output": float(c["usd_per_m_output"][i]),
            "usd_per_m_tokens": float(c["usd_per_m_tokens"][i]), "tokens_per_s_per_kw": float(c["tokens_per_s_per_kw"][i]),
            "decode_max_requests": self.decode_capacity.max_requests,
            "decode_hbm_used_bytes": float(c["decode_hbm_used_bytes"][i]),
        })
        return out


def check_workload(m: Model, w: Workload) -> None:
    if w.tokens_per_turn > m.max_context_tokens:
        raise SpecError(f"workload {w.name}: {w.tokens_per_turn:,.0f} tokens per turn exceed {m.name}'s maximum "
                        f"context of {m.max_context_tokens:,}")


def serve(m: Model, hw, w: Workload, decode_layout: Layout, batch, draft_tokens: int | None = None,
          acceptance: float | None = None, eplb: bool = True, prefill: PrefillPlan | None = None,
          interactivity_stat: str = "p90", total_gpus: int | None = None) -> Serving:
    """The deployment at an array of decode batches (requests per rank for DEP, per instance for TP)."""
    check_workload(m, w)
    prefill = prefill or prefill_plan(m, hw, w, eplb=eplb)
    context = w.input_tokens_per_turn + w.output_tokens_per_turn / 2   # mean while the output is written
    link = kv_transfer_link(hw, w, prefill.layout, decode_layout)
    if link != kv_transfer_link(hw, w, prefill.layout):   # this decode layout leaves no room in the prefill's domain
        prefill = dataclasses.replace(prefill, transfer_s=kv_transfer_s(m, hw, w, prefill.layout, prefill.seqs, link))
    d = decode_engine(m, hw, decode_layout, batch, context, draft_tokens, acceptance, eplb,
                      prompt_tokens_per_turn=w.input_tokens_per_turn, output_tokens_per_turn=w.output_tokens_per_turn)
    per_req = 1 + d.draft_tokens
    cap = capacity(m, hw, decode_layout, "decode", context_tokens=w.tokens_per_turn, tokens_per_request=per_req,
                   logits_per_request=per_req, reserve_bytes=w.runtime_reserve_bytes, engram_placement=m.engram_placement)
    return Serving(hw=hw, model=m, workload=w, prefill=prefill, decode=d, decode_capacity=cap,
                   interactivity_stat=interactivity_stat, total_gpus=total_gpus)


# ---------------------------------------------------------------- sweeps


MAX_BATCH_LIMIT = 1 << 20  # requests per rank: far beyond any HBM's KV capacity, and exact in float64


def batch_grid(max_batch: float = DEFAULT_MAX_BATCH) -> np.ndarray:
    """Every batch 1..128, then 48 geometric steps to `max_batch`."""
    if not max_batch >= 1:
        raise SpecError(f"--max-batch: expected at least 1, got {max_batch}")
    if max_batch > MAX_BATCH_LIMIT:
        shown = str(max_batch) if len(str(max_batch)) <= 24 else f"{str(max_batch)[:12]}... ({len(str(max_batch))} digits)"
        raise SpecError(f"--max-batch: expected at most {MAX_BATCH_LIMIT:,} requests per rank or instance, got {shown}")
    dense = np.arange(1, min(128, max_batch) + 1, dtype=float)
    tail = np.round(np.geomspace(128, max_batch, 48)) if max_batch > 128 else np.array([])
    return np.unique(np.concatenate([dense, tail, [float(math.floor(max_batch))]]))


@dataclass
class Sweep:
    """Runs of the deployment over racks x decode layouts x prefill layouts, each an array over batch."""

    runs: list[Serving]
    skipped: list[str]
    notes: list[str] = field(default_factory=list)   # defaults changed to make a rack work, said aloud
    max_ttft_s: float | None = None   # --ttft: points whose time to first token is longer are left out
    max_tpot_s: float | None = None   # --tpot: points whose time per output token (1 / tokens/s per user) is longer

    def hardware_names(self) -> list[str]:
        return list(dict.fromkeys(r.hw.name for r in self.runs))

    def within_limits(self, r: "Serving") -> np.ndarray:
        """Points of run `r` that meet --ttft and --tpot (TPOT at the frontier's statistic: 1 / tokens/s per user)."""
        c = r.columns
        keep = np.ones(c["batch_per_rank"].size, dtype=bool)
        if self.max_ttft_s is not None:
            keep &= r.ttft_s <= self.max_ttft_s
        if self.max_tpot_s is not None:
            keep &= 1.0 / np.ravel(c["tokens_per_s_per_user"]) <= self.max_tpot_s
        return keep

    def points(self, hardware: str | None = None):
        """(run index, element index, tok/s/user, tok/s/GPU, feasible) arrays over every swept point."""
        idx, el, x, y, ok = [], [], [], [], []
        for n, r in enumerate(self.runs):
            if hardware is not None and r.hw.name != hardware:
                continue
            c = r.columns
            size = c["batch_per_rank"].size
            idx.append(np.full(size, n))
            el.append(np.arange(size))
            x.append(np.ravel(c["tokens_per_s_per_user"]))
            y.append(np.ravel(c["tokens_per_s_per_gpu"]))
            ok.append(np.ravel(c["feasible"]) & self.within_limits(r))
        if not idx:
            return tuple(np.array([]) for _ in range(5))
        return (np.concatenate(idx), np.concatenate(el), np.concatenate(x), np.concatenate(y), np.concatenate(ok))


def sweep(setups, decode_layouts=None, prefill_layouts=None, batches=None, draft_tokens=None, acceptance=None,
          eplb: bool = True, progress=None, interactivity_stat: str = "p90", total_gpus: int | None = None) -> Sweep:
    """The deployment for every (model, rack, workload) setup, decode layout and prefill layout,
    vectorised over `batches`.

    `setups` is a list of (model, hardware, workload) triples (one per rack, each with its
    own `--set` overrides applied). Layouts a rack or model cannot take (experts not
    divisible, wider than the NVLink domain) are skipped with a note. `progress(done,
    total, label)` is called before each run and once at the end. `interactivity_stat` (p90, p50
    or mean) is the statistic of tokens/s per user the frontier is drawn over.
    """
    from rubinperf.interactivity import check_stat

    check_stat(interactivity_stat)
    batches = batch_grid() if batches is None else np.asarray(batches, dtype=float)
    asked = [parse_layout(x) if isinstance(x, str) else x for x in decode_layouts] if decode_layouts else None
    plans, notes = [], []
    for m, hw, w in setups:
        decode_layouts = asked or stack_decode_layouts(m, hw, notes)
        check_workload(m, w)
        defaults = [w.prefill_layout]
        if not prefill_layouts:
            chosen, note = default_prefill_layout(m, hw, w, eplb=eplb)
            defaults = [chosen]
            if note:
                notes.append(f"{hw.name}: {note}")
        for pl in (prefill_layouts or defaults):
            pl = parse_layout(pl) if isinstance(pl, str) else pl
            for dl in decode_layouts:
                plans.append((m, hw, w, pl, dl))
    runs, skipped, prefills = [], [], {}
    for n, (m, hw, w, pl, dl) in enumerate(plans):
        if progress:
            progress(n, len(plans), f"{hw.name} {dl.name}")
        try:
            check_layout(pl, m, hw)
        except SpecError as exc:
            note = f"{hw.name}: prefill_layout {pl.name}: {exc}"
            if note not in skipped:
                skipped.append(note)
            continue
        try:
            check_layout(dl, m, hw)
        except SpecError as exc:
            skipped.append(f"{hw.name}: {exc}")
            continue
        key = (id(m), id(hw), id(w), pl)
        if key not in prefills:
            prefills[key] = prefill_plan(m, hw, w, pl, eplb=eplb)
        runs.append(serve(m, hw, w, dl, batches, draft_tokens, acceptance, eplb, prefill=prefills[key],
                          interactivity_stat=interactivity_stat, total_gpus=total_gpus))
    if progress:
        progress(len(plans), len(plans), "done")
    return Sweep(runs=runs, skipped=skipped, notes=notes)


def stack_decode_layouts(m: Model, hw, notes: list | None = None) -> list[Layout]:
    """The decode engine shapes of the rack's stack (serving.decode_layouts) that this rack and model can take;
    when none can (a stack of 72-GPU racks on an 8-GPU server), the generic set that can, with a note."""
    def fits(layout: Layout) -> bool:
        try:
            check_layout(layout, m, hw)
            return True
        except SpecError:
            return False

    wanted = [parse_layout(x) for x in hw.decode_layouts]
    chosen = [x for x in wanted if fits(x)]
    if chosen:
        return chosen
    chosen = [x for x in map(parse_layout, DEFAULT_DECODE_LAYOUTS) if fits(x)]
    if notes is not None:
        notes.append(f"{hw.name}: none of the {hw.stack} decode shapes ({', '.join(hw.decode_layouts)}) fit; "
                     f"sweeping {', '.join(x.name for x in chosen)}")
    return chosen or wanted


def default_prefill_layout(m: Model, hw, w: Workload, eplb: bool = True) -> tuple[Layout, str]:
    """The workload's prefill layout, or, when its weights do not fit this rack's HBM (DEP2 of a
    large model on an 8-GPU H200 or B200), the smallest DEP layout that fits; with a note saying so.
    When none fits, the workload's layout is kept (its points are reported infeasible, with why)."""
    wanted = parse_layout(w.prefill_layout)

    def fits(layout: Layout) -> bool:
        try:
            check_layout(layout, m, hw)
            return prefill_plan(m, hw, w, layout, eplb=eplb).feasible
        except SpecError:
            return False

    if fits(wanted):
        return wanted, ""
    from rubinperf.layout import max_ranks

    for n in range(wanted.ranks + 1, max_ranks(hw) + 1):
        candidate = Layout(wanted.kind, n)
        if fits(candidate):
            return candidate, (f"prefill {wanted.name} (the workload's) does not fit; using {candidate.name}, the "
                               f"smallest {wanted.kind.upper()} prefill layout that does (--prefill-layout to choose)")
    return wanted, ""
