"""Speculative decoding: one decode engine (target + draft) over an array of batches.

A decode verify step runs the target over 1 + k tokens per request and the draft's k
sequential passes; it emits `acceptance` tokens per request on average. The step, its
tokens/s and its bound are the step model's (rubinperf/step.py):

    tokens/s per user (mean) = acceptance / step,   step = max(target + draft GPU time, CPU time)

Users differ (per-request acceptance, step fluctuation): P50 and P90 are the mean times a
factor from rubinperf/serving/interactivity.py; the frontier uses P90 unless asked otherwise.

When k changes and no acceptance is given, the acceptance follows from a constant
per-token acceptance rate alpha fitted to the model's (k, acceptance):
acceptance(k) = (1 - alpha^(k+1)) / (1 - alpha).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rubinperf.errors import SpecError
from rubinperf.roofline import admission_burst, admission_time
from rubinperf.serving.interactivity import speed_factors
from rubinperf.specs.layout import Layout
from rubinperf.specs.model import Model
from rubinperf.step.point import make_point
from rubinperf.step.result import StepResult
from rubinperf.step.timing import step

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


def accepted_tokens(alpha, k):
    """Mean tokens emitted per verify step with k drafted tokens, each accepted with probability alpha
    (until the first rejection), plus the target's own token: (1 - alpha^(k+1)) / (1 - alpha)."""
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(alpha >= 1.0, k + 1.0, (1.0 - alpha ** (k + 1)) / (1.0 - np.where(alpha >= 1.0, 0.0, alpha)))
    return float(out) if out.ndim == 0 else out


@functools.lru_cache(maxsize=256)
def acceptance_rate(accepted: float, k: int) -> float:
    """The per-token acceptance alpha that gives `accepted` tokens per step at draft length k (200 bisections: once
    per process for each pair, as a validate's engines ask the same model's again and again)."""
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
    cpu_s: Any                 # host time (scheduling, admission, DP sync)
    exposed_s: Any             # the part of it on the critical path (DP sync + the stack's share of the rest)
    step_s: Any                # max(target + draft, cpu)
    result: StepResult = field(repr=False, compare=False)
    speed: dict = field(default_factory=lambda: {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p10": 1.0}, compare=False)
    output_tokens_per_turn: float = 0.0   # the workload's, when the engine serves one (admissions); 0: a bare step

    @property
    def tokens_per_s_per_user(self):
        """The mean: mean acceptance over the step (the step model's tokens/s per user)."""
        return _full(self.result.tokens_per_s_per_user, self.batch)

    def tokens_per_s_per_user_at(self, stat: str):
        """P50, P90 (the speed 90% of users reach), P10 or the mean (rubinperf/serving/interactivity.py)."""
        return self.tokens_per_s_per_user * self.speed[stat]

    @property
    def output_tokens_per_s_per_gpu(self):
        """Accepted tokens per second per GPU of the engine (the step model's tokens/s per GPU)."""
        return _full(self.result.tokens_per_s_per_gpu, self.batch)

    @property
    def bound(self):
        return self.result.bound

    @property
    def admissions_per_step(self):
        return admissions_per_step(self.batch, self.acceptance, self.output_tokens_per_turn)


def admissions_per_step(batch, acceptance, output_tokens_per_turn):
    """New requests one scheduler (a DEP rank, a TP instance) admits per step in steady state: each step
    emits batch x acceptance tokens, and a turn leaves after its output, so batch x acceptance / output
    turns end, and as many start, per step (0 without a workload's turn)."""
    return batch * acceptance / output_tokens_per_turn if output_tokens_per_turn else 0.0


def decode_engine(m: Model, hw: Platform, layout: Layout, batch, context: float, draft_tokens: int | None = None,
                  acceptance: float | None = None, eplb: bool = True, prompt_tokens_per_turn: float = 0.0,
                  output_tokens_per_turn: float = 0.0) -> SpecDecode:
    """The decode engine over an array of batches. With a workload's turn (prompt and output tokens), the host
    also admits the requests that replace finished ones: admissions per step x prompt tokens x the stack's
    admission_cpu_per_prompt_token_s of CPU per step (roofline.admission_time), host work of the step
    (StepResult.extra_cpu_s, its Poisson spread across ranks extra_cpu_var_s2), on the host's path to the next step
    (StepResult's host rule)."""
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
    if output_tokens_per_turn:
        rate = admissions_per_step(b, a, output_tokens_per_turn)
        each = admission_time(hw, prompt_tokens_per_turn)
        # a rank admits a Poisson count of requests a step (turns end independently), gathered into bursts of
        # roofline.admission_burst requests where the scheduler admits them together: mean rate x each, variance
        # rate x burst x each^2 across ranks (the slowest rank's admissions reach the DP barrier: roofline.host_path)
        r = dataclasses.replace(r, extra_cpu_s=admission_time(hw, rate * prompt_tokens_per_turn),
                                extra_cpu_var_s2=rate * admission_burst(hw) * each * each)
    check_times(hw, m, f"{layout.name} decode", r.expected_s)
    speed = speed_factors(k, a, float(hw.acceptance_concentration), float(hw.step_time_spread))
    return SpecDecode(layout=layout, batch=b, context=float(context), draft_tokens=k, acceptance=a,
                      target_s=_full(r.part_s("target"), b), draft_s=_full(r.part_s("draft"), b),
                      cpu_s=_full(r.cpu_s, b), exposed_s=_full(r.exposed_s, b), step_s=_full(r.expected_s, b), result=r, speed=speed,
                      output_tokens_per_turn=float(output_tokens_per_turn))


def check_times(hw: Platform, m: Model, what: str, *times) -> None:
    """Out-of-range spec values (a rate of 1e-300, a floor of 1e300) end here, not in a division by zero."""
    for t in times:
        t = np.asarray(t, dtype=float)
        if not (np.all(np.isfinite(t)) and np.all(t > 0)):
            raise SpecError(f"{hw.name} with {m.name}: {what} times are not finite positive numbers; "
                            "a rate, size or floor in the specs is out of range, or the layout splits the model "
                            "finer than its shapes allow")


def _full(x, like):
    return np.broadcast_to(np.asarray(x, dtype=float), np.shape(like)).copy() if np.ndim(like) else float(x)
