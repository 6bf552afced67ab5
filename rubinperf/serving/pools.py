"""The deployment: a prefill pool and a decode pool serving one workload on one rack.

The decode pool runs the turn's output (rubinperf/serving/specdecode.py); the prefill pool
its input (rubinperf/serving/prefill.py). The pools are sized so that turns per second
match (a continuous ratio; or, with --total-gpus, whole instances):

    prefill GPUs per decode GPU = decode turns/s per GPU / prefill turns/s per GPU
    tokens/s per GPU            = turns/s x (cached + uncached + output) / (prefill + decode GPUs)

Money and power per point come from rubinperf/serving/money.py. Everything is vectorised
over the decode batch (numpy arrays); the prefill plan of a (rack, layout, workload) is a scalar.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from rubinperf.errors import SpecError
from rubinperf.serving import money
from rubinperf.serving.prefill import PrefillPlan, kv_transfer_link, kv_transfer_s, prefill_plan
from rubinperf.serving.specdecode import SpecDecode, decode_engine
from rubinperf.specs.layout import Layout
from rubinperf.specs.model import Model
from rubinperf.specs.workload import Workload
from rubinperf.step.capacity import Capacity, capacity

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


def _per_turn(count: str, doc: str | None = None) -> property:
    """A throughput per GPU: turns/s per GPU x the workload's `count` (tokens of one turn)."""
    return property(lambda self: self.turns_per_s_per_gpu * getattr(self.workload, count), doc=doc)


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

        def pick(x):  # point i's values (the whole run's when i is None)
            return np.asarray(x)[i] if i is not None and np.ndim(x) else x

        def top(x):
            return float(np.max(pick(x)))

        why = self.decode_capacity.reason(top(self.decode.batch))
        if why:
            return why
        if not np.all(pick(self.admits)):
            return (f"admission: {top(self.decode.admissions_per_step):.3g} new requests per step per scheduler, more "
                    f"than the stack's max_kv_loads_per_step = {self.hw.max_kv_loads_per_step} ({self.hw.stack})")
        if not np.all(pick(self.fits_domain)):
            gpus = top(self.deployment_gpus)
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

    cached_tokens_per_s_per_gpu = _per_turn("cached_tokens_per_turn")
    uncached_tokens_per_s_per_gpu = _per_turn("uncached_tokens_per_turn")
    output_tokens_per_s_per_gpu = _per_turn("output_tokens_per_turn")
    tokens_per_s_per_gpu = _per_turn("tokens_per_turn", "Throughput as the vLLM posts count it: cached + uncached "
                                     "input + output tokens over every GPU of both pools.")

    @property
    def tokens_per_s_per_user(self):
        """Tokens/s per user at the chosen statistic (P90 unless asked otherwise)."""
        return self.decode.tokens_per_s_per_user_at(self.interactivity_stat)

    @property
    def ttft_s(self) -> float:
        return self.prefill.ttft_s

    # -- money and power (rubinperf/serving/money.py)
    @property
    def usd_per_gpu_s(self) -> float:
        return money.usd_per_gpu_s(self.hw)

    @property
    def usd_per_m_input(self) -> float:
        """Prefill-pool GPU time per million input (cached + uncached) tokens."""
        return money.usd_per_m_tokens(self.hw, self.prefill.turns_per_s_per_gpu * self.workload.input_tokens_per_turn)

    @property
    def usd_per_m_output(self):
        """Decode-pool GPU time per million output tokens."""
        return money.usd_per_m_tokens(self.hw, self.decode.output_tokens_per_s_per_gpu)

    @property
    def usd_per_m_tokens(self):
        """Every GPU-hour over every token."""
        return money.usd_per_m_tokens(self.hw, self.tokens_per_s_per_gpu)

    @property
    def tokens_per_s_per_kw(self):
        return money.tokens_per_s_per_kw(self.hw, self.tokens_per_s_per_gpu)

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
        out["requests_per_decode_gpu"] = d.layout.per_gpu(out["batch_per_rank"])
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


def serve(m: Model, hw: Platform, w: Workload, decode_layout: Layout, batch, draft_tokens: int | None = None,
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
