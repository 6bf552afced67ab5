"""The prefill pool: one chunked prefill step of a workload's turn, its prefix loads and KV transfer.

A turn of the workload has `input` prompt tokens (a fraction `prefix_hit_rate` of them
cached) and `output` generated tokens. The prefill pool computes the uncached tokens,
chunked to a token budget per rank, after loading the cached prefix's KV from the shared
pool (host memory over C2C, peers' HBM over NVLink, or local HBM); the loads use copy
engines and overlap compute, so a prefill rank is busy max(step, loads) per chunk.

TTFT = loading the batch's cached prefixes + the prefill chunks + sending the prefilled
KV to the decode pool over the workload's link (on a cluster, the NIC when the two pools
cannot share an NVLink domain; queueing not modelled).

The step is the step model's; the loads and the transfer are kernels
(rubinperf/kernels/memory.py: kv_load, kv_transfer) timed by the roofline like any other.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rubinperf.errors import SpecError
from rubinperf.kernels.memory import kv_load
from rubinperf.roofline import kernel_time
from rubinperf.serving.specdecode import check_times
from rubinperf.specs.layout import Layout, check_layout, max_ranks, parse_layout
from rubinperf.specs.model import Model
from rubinperf.specs.workload import Workload
from rubinperf.step.capacity import Capacity, capacity, kv_bytes_per_rank
from rubinperf.step.latency import kv_link, kv_transfer_bytes, kv_transfer_time
from rubinperf.step.point import make_point
from rubinperf.step.result import StepResult
from rubinperf.step.timing import step

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


def prefix_load_s(hw: Platform, nbytes: float, pool: str) -> float:
    """Seconds one GPU takes to load `nbytes` of cached prefix KV from the shared pool."""
    return float(kernel_time(kv_load(nbytes, pool), hw).expected_s)


def kv_transfer_link(hw: Platform, w: Workload, prefill_layout: Layout, decode_layout: Layout | None = None) -> str:
    """The link that carries prefilled KV to the decode pool: the workload's, or the NIC where the two pools
    cannot share an NVLink domain of a cluster (rubinperf/step/latency.py: kv_link)."""
    return kv_link(hw, w.kv_transfer_link, prefill_layout, decode_layout)


def kv_transfer_s(m: Model, hw: Platform, w: Workload, layout: Layout, seqs: float, link: str) -> float:
    """Sending one step's prefilled KV (its sequences' whole input) from each prefill GPU over `link`
    (rubinperf/step/latency.py: kv_transfer_bytes)."""
    return kv_transfer_time(hw, kv_transfer_bytes(m, layout, seqs, w.input_tokens_per_turn), link)


def prefix_load_bytes(m: Model, layout: Layout, seqs: float, cached_tokens: float) -> float:
    """Cached-prefix KV bytes one GPU loads for `seqs` sequences: each needs its own share in its HBM (GQA: its K/V
    heads; a latent: all of it), as the capacity budget counts it."""
    return seqs * float(kv_bytes_per_rank(m, layout, cached_tokens)) if cached_tokens > 0 else 0.0


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
        return self.layout.per_gpu(self.seqs) / (self.busy_s * self.chunks_per_turn)

    @property
    def feasible(self) -> bool:
        return self.capacity.max_requests >= self.seqs

    @property
    def reason(self) -> str:
        return self.capacity.reason(self.seqs)


def prefill_plan(m: Model, hw: Platform, w: Workload, layout: Layout | None = None, eplb: bool = True) -> PrefillPlan:
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
    load_ttft = prefix_load_s(hw, prefix_load_bytes(m, layout, seqs, cached), w.prefix_pool)
    cap = capacity(m, hw, layout, "prefill", context_tokens=w.input_tokens_per_turn,
                   tokens_per_request=new / seqs, logits_per_request=1, reserve_bytes=w.runtime_reserve_bytes,
                   engram_placement=w.prefill_engram_placement, engram_peer_gpus=w.engram_peer_gpus)
    transfer = kv_transfer_s(m, hw, w, layout, seqs, kv_transfer_link(hw, w, layout))
    check_times(hw, m, f"{layout.name} prefill", r.expected_s, transfer, load_ttft + r.expected_s)
    return PrefillPlan(layout=layout, seqs=seqs, new_tokens=float(new), context=float(context), chunks_per_turn=chunks,
                       step_s=float(r.expected_s), load_s=load_ttft / chunks, load_ttft_s=load_ttft,
                       transfer_s=transfer, capacity=cap, bound=r.bound, result=r)


def default_prefill_layout(m: Model, hw: Platform, w: Workload, eplb: bool = True) -> tuple[Layout, str, PrefillPlan | None]:
    """The workload's prefill layout, or, when its weights do not fit this rack's HBM (DEP2 of a
    large model on an 8-GPU H200 or B200), the smallest DEP layout that fits; with a note saying so,
    and the plan of the chosen layout (None when it was not computed or does not compute).
    When none fits, the workload's layout is kept (its points are reported infeasible, with why)."""
    wanted = parse_layout(w.prefill_layout)

    def plan(layout: Layout) -> PrefillPlan | None:
        try:
            check_layout(layout, m, hw)
            return prefill_plan(m, hw, w, layout, eplb=eplb)
        except SpecError:
            return None

    first = plan(wanted)
    if first is not None and first.feasible:
        return wanted, "", first
    for n in range(wanted.ranks + 1, max_ranks(hw) + 1):
        candidate = Layout(wanted.kind, n)
        got = plan(candidate)
        if got is not None and got.feasible:
            return candidate, (f"prefill {wanted.name} (the workload's) does not fit; using {candidate.name}, the "
                               f"smallest {wanted.kind.upper()} prefill layout that does (--prefill-layout to choose)"), got
    return wanted, "", None


@functools.lru_cache(maxsize=4096)   # (a pure function of two numbers: an engine's batch grid asks the same again)
def busiest_rank_sequences(seqs_per_rank: float, ranks: int) -> float:
    """Expected sequences on the busiest of `ranks` DP ranks when a step's ranks x seqs_per_rank sequences are
    routed to ranks uniformly at random (each rank's count Binomial(S, 1 / ranks), the ranks taken as independent):
    E[max] = sum over k >= 0 of (1 - F(k)^ranks). One rank, or one sequence per step: no imbalance."""
    S = int(round(seqs_per_rank * ranks))
    if ranks <= 1 or S <= 1:
        return float(seqs_per_rank)
    # log pmf(k) by the binomial's ratio pmf(k+1) / pmf(k) = (S - k) / (k + 1) x p / (1 - p), from pmf(0) = (1 - p)^S
    p = 1.0 / ranks
    k = np.arange(S)
    log_pmf = S * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(np.log((S - k) / (k + 1)) + math.log(p / (1 - p)))))
    cdf = np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)
    return float(np.sum(1.0 - cdf[:-1] ** ranks))


def busiest_rank_load(per_rank, ranks: int):
    """busiest_rank_sequences over an array of mean loads per rank (requests or sequences), element by element."""
    flat = np.atleast_1d(np.asarray(per_rank, dtype=float))
    return np.array([busiest_rank_sequences(float(x), ranks) for x in flat]).reshape(np.shape(per_rank))


def dp_prefill_imbalance(m: Model, hw, w: Workload, layout: Layout, eplb: bool = True) -> dict:
    """A DEP prefill step waits for its busiest rank: the step at the busiest rank's expected sequences (the request
    mix: the workload's prompts, packed to the budget per rank) against the step at the mean. Returns the two step
    times, the sequences, and the throughput lost (1 - mean step / busiest step)."""
    plan = prefill_plan(m, hw, w, layout, eplb=eplb)
    busiest = busiest_rank_sequences(plan.seqs, layout.dp) if plan.chunks_per_turn == 1 else plan.seqs
    point = make_point(m, hw, layout, phase="prefill", batch=plan.seqs, context=plan.context,
                       new_tokens=plan.new_tokens, eplb=eplb, engram_placement=w.prefill_engram_placement)
    import dataclasses

    per_seq = plan.new_tokens / plan.seqs
    slow = step(m, hw, layout, dataclasses.replace(point, batch=busiest, new_tokens=busiest * per_seq))
    return {"layout": layout.name, "seqs_per_rank": plan.seqs, "busiest_rank_seqs": busiest,
            "step_s": plan.step_s, "busiest_step_s": float(slow.expected_s),
            "loss": 1.0 - plan.step_s / float(slow.expected_s)}
