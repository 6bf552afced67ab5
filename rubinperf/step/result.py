"""Aggregation of one step: per-op times summed over ops and layers.

Expert imbalance: an expert-parallel MoE op's time is stretched by 1 / balancedness,
since the busiest rank sets the pace (docs/sources/vllm-deepseek-v4.1-flash.md).

Overlap rule: inside one op (one fused kernel) compute, memory traffic and link traffic
overlap, so the roofline takes their max (MegaMoE's EP dispatch and combine hide under
its expert GEMMs, up to the larger of the two). Different ops run one after another, so
their times add; a TP all-reduce is its own op and adds. The speed-of-light step is the
sum of per-op SOL times of the GPU work.

Host rule. The host's work for a step is the scheduler's (its step, input preparation,
sampling, admission: `host_s`) and the DP synchronisation (`sync_s`), a host all-reduce every
rank waits for before it launches the step (a barrier): the slowest rank's scheduler work, then
the sync, is the host's path to the next launch (roofline.host_path; the ranks' spread:
host_rank_spread and the admissions' Poisson count). Under async scheduling (the stack's
async_scheduling: vLLM --async-scheduling, SGLang's and TensorRT-LLM's overlap schedulers) the
host prepares step n+1 while the GPU runs step n, so only the part of that path that outlasts
the GPU step shows; without it, all of it adds:

    exposed = max(0, host path - GPU)   (async)      exposed = host path   (not async)
    step    = GPU + exposed

so the DP sync reaches the step only where the host's work outlasts the GPU's: an unoptimised
DEP32 step (Gloo's linear all-reduce, 10.8 ms) is host-bound where DEP16's (5.4 ms) hides under
its GPU work, which is how DEP32 ran slower than DEP16 with less GPU time (the October post),
and the 10.8 -> 1.5 ms fix moves the step by the host path's excess over the GPU, not by 9.3 ms.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from rubinperf.kernels.cost import Cost
from rubinperf.step.graph import Op
from rubinperf.step.point import Point
from rubinperf.specs.layout import Layout
from rubinperf.mathops import sadd, sdiv, sscale, ssum
from rubinperf.roofline import BOUNDS, KernelTime, binding_term, exposed_host, host_path, split_kv_reduction
from rubinperf.specs.model import Model

_BOUND_FIELDS = tuple(f"{b}_s" for b in BOUNDS)   # KernelTime's field of each bound
_BOUND_AT_ONCE = 1 << 16   # terms (ops x bounds x points) a step's bound array is found from at once; more: op by op

@dataclass(frozen=True)
class OpTime:
    op: Op
    time: KernelTime        # one occurrence

    @cached_property
    def expected_s(self):
        return sscale(self.time.expected_s, self.op.repeat, self.op.stretch)

    @cached_property
    def sol_s(self):
        return sscale(self.time.sol_s, self.op.repeat, self.op.stretch)


@dataclass(frozen=True)
class StepResult:
    model: Model
    hw: object
    layout: Layout
    point: Point
    ops: list[OpTime]
    extra_cpu_s: object = 0.0   # host work a caller adds to the step (serving: admitting new requests)
    extra_cpu_var_s2: object = 0.0   # its variance across ranks (serving: a Poisson count of admissions)

    @cached_property
    def gpu_s(self):
        return ssum(o.expected_s for o in self.ops if o.op.part != "cpu")

    @cached_property
    def host_s(self):
        """The scheduler's host work on a mean rank (its cpu ops but the DP sync, plus extra_cpu_s)."""
        cpu = self._own_host_s
        extra = self.extra_cpu_s
        return cpu if type(extra) in (int, float) and extra == 0 else cpu + extra

    @cached_property
    def _own_host_s(self):
        """The scheduler's work of the step's own cpu ops (but the DP sync), without a caller's extra_cpu_s."""
        return ssum(o.expected_s for o in self.ops if o.op.part == "cpu" and not o.op.barrier)

    @cached_property
    def sync_s(self):
        """The DP synchronisation (host barrier ops): on the critical path."""
        return ssum(o.expected_s for o in self.ops if o.op.part == "cpu" and o.op.barrier)

    @cached_property
    def _host_rule(self):
        return host_rule(self.gpu_s, self.host_s, self.sync_s, self.hw, self.layout.dp, self.extra_cpu_var_s2,
                         self._own_host_s)

    @property
    def cpu_s(self):
        """The host's path to the next launch: the slowest rank's scheduler work, then the DP sync
        (roofline.host_path)."""
        return self._host_rule.cpu_s

    @property
    def exposed_s(self):
        """The host work the step waits for: max(0, host path - GPU) under async scheduling, else the host path."""
        return self._host_rule.exposed_s

    @property
    def expected_s(self):
        return self._host_rule.step_s

    @property
    def sol_s(self):
        return ssum(o.sol_s for o in self.ops if o.op.part != "cpu")

    @property
    def bound(self):
        """What limits the step: cpu when the host's work exceeds GPU time plus its exposed part (a
        host-bound step), or when the exposed host work is larger than the share of GPU time any one
        term binds; else the term (compute, memory, parallelism, comm, latency) that binds the largest
        share of GPU time (ties: the first in that order). A name for a scalar point; for array points
        (sweeps) an array of names, element by element by the same rule."""
        if not _is_array(self.expected_s):
            exposed = float(self.exposed_s)
            if float(self.cpu_s) > float(self.gpu_s):
                return "cpu"
            shares = {}
            for o in self.ops:
                if o.op.part != "cpu":
                    bound = o.time.bound
                    shares[bound] = shares.get(bound, 0.0) + float(o.expected_s)
            top = binding_term({b: shares[b] for b in BOUNDS if b in shares})
            return "cpu" if exposed > shares[top] else top
        return self._bound_array()

    def _bound_array(self):
        import numpy as np

        shape = np.shape(self.expected_s)
        kinds = np.arange(len(BOUNDS)).reshape((-1,) + (1,) * len(shape))
        gpu = [o for o in self.ops if o.op.part != "cpu"]
        if gpu and len(gpu) * len(BOUNDS) * math.prod(shape) <= _BOUND_AT_ONCE:
            # every op at once: its terms (each broadcast over the points), its bound (its largest term, first in
            # BOUNDS on a tie), and each bound's share of GPU time added op after op, in the order of the ops
            terms = np.empty((len(gpu), len(BOUNDS)) + shape)
            spent = np.empty((len(gpu), 1) + shape)
            for i, o in enumerate(gpu):
                t = o.time
                for j, b in enumerate(_BOUND_FIELDS):
                    terms[i, j] = getattr(t, b)
                spent[i, 0] = o.expected_s
            which = np.argmax(terms, axis=1)[:, None]
            shares = np.add.accumulate(np.where(which == kinds, spent, 0.0), axis=0)[-1]
        else:
            like = np.empty(shape)
            shares = np.zeros((len(BOUNDS),) + shape)
            for o in gpu:
                t = o.time
                terms = np.broadcast_arrays(*(np.asarray(getattr(t, b), dtype=float) for b in _BOUND_FIELDS), like)[:-1]
                which = np.argmax(np.stack(terms), axis=0)    # the op's bound: its largest term (first in BOUNDS on a tie)
                shares += np.where(which == kinds, np.asarray(o.expected_s, dtype=float), 0.0)
        names = np.array(BOUNDS, dtype=object)[np.argmax(shares, axis=0)]
        zero = np.zeros(shape)
        exposed = np.asarray(self.exposed_s, dtype=float) + zero
        cpu = np.asarray(self.cpu_s, dtype=float) + zero > np.asarray(self.gpu_s, dtype=float)
        return np.where(cpu | (exposed > np.max(shares, axis=0)), "cpu", names)

    @property
    def tokens_per_step(self):
        """Tokens one engine instance emits (decode: accepted) or ingests (prefill) per step, over all its ranks."""
        return tokens_per_step(self.model, self.layout, self.point)

    @property
    def tokens_per_s_per_gpu(self):
        return tokens_per_s_per_gpu(self.model, self.layout, self.point, self.expected_s)

    @property
    def tokens_per_s_per_user(self):
        """Decode: accepted tokens per verify step over the step time. Prefill: one sequence's new tokens per second."""
        return tokens_per_s_per_user(self.model, self.point, self.expected_s)

    def at(self, index) -> "StepResult":
        """The scalar step at one element of an array point (a swept batch): every op's cost and time
        taken at that element, so nothing is rebuilt or re-timed; equal to step() at that point."""
        import numpy as np

        shape = np.shape(self.expected_s)

        def pick(x):
            if not _is_array(x):
                return x
            return float(x[index] if x.shape == shape else np.broadcast_to(x, shape)[index])

        def op_at(o: OpTime) -> OpTime:
            kernels = tuple(k.map(pick) for k in o.op.kernels)
            op = dataclasses.replace(o.op, kernels=kernels, repeat=pick(o.op.repeat), stretch=pick(o.op.stretch))
            if o.op.names is not None:   # an op named by element (the all-reduce's algorithm by message size)
                op = dataclasses.replace(op, name=o.op.names.at(shape, index), names=None)
            return OpTime(op, o.time.map(pick))

        point = dataclasses.replace(self.point, **{f.name: pick(getattr(self.point, f.name))
                                                   for f in dataclasses.fields(self.point)})
        return StepResult(self.model, self.hw, self.layout, point, [op_at(o) for o in self.ops], pick(self.extra_cpu_s),
                          pick(self.extra_cpu_var_s2))

    def op_kernels(self, op: Op):
        """Kernels one occurrence of `op` launches on this GPU: the graph's (Op.kernel_count), plus the reduction
        kernel a split-KV decode attention kernel enqueues where it splits (roofline.split_kv_reduction)."""
        extra = [k.cost.launches * split_kv_reduction(k, self.hw) for k in op.kernels if k.split_kv_groups is not None]
        return op.kernel_count + sum(extra) if extra else op.kernel_count

    def kernels_per_step(self, part: str | None = None):
        """Kernels one step launches on a rank (GPU parts; `part` one of them), summed over ops, layers and passes."""
        return ssum(self.op_kernels(o.op) * o.op.repeat for o in self.ops
                    if o.op.part != "cpu" and (part is None or o.op.part == part))

    def part_s(self, part: str):
        return ssum(o.expected_s for o in self.ops if o.op.part == part)

    def total_cost(self) -> Cost:
        return Cost.total(o.op.cost * o.op.repeat for o in self.ops)

    def by_name(self) -> dict[str, dict]:
        """Breakdown rows: ops of one name summed over layers (and passes)."""
        rows: dict[str, dict] = {}
        for o in self.ops:
            op, t = o.op, o.time
            name, repeat, stretch, cost = op.name, op.repeat, op.stretch, op.cost
            r = rows.get(name)
            if r is None:
                r = rows[name] = {"kernel": name, "part": op.part, "expected_s": 0.0, "sol_s": 0.0, "flops": 0.0,
                                  "bytes": 0.0, "terms": {}, "shares": {}, "scale_out_s": 0.0, "scale_out_bytes": 0.0,
                                  "kernels": 0.0}
            r["kernels"] = r["kernels"] + self.op_kernels(op) * repeat
            r["expected_s"] = r["expected_s"] + o.expected_s
            r["scale_out_s"] = r["scale_out_s"] + t.scale_out_s * repeat * stretch
            r["scale_out_bytes"] = r["scale_out_bytes"] + cost.scale_out_bytes * repeat
            r["sol_s"] = r["sol_s"] + o.sol_s
            r["flops"] = r["flops"] + cost.flops * repeat
            r["bytes"] = r["bytes"] + cost.bytes * repeat
            terms, times = r["terms"], t.__dict__
            for term, field in _TERMS:   # KernelTime.terms
                terms[term] = terms.get(term, 0.0) + times[field] * repeat * stretch
            if op.part != "cpu":   # the row's time by the bound of each of its ops (binding_term's shares)
                shares = r["shares"]
                shares[t.bound] = shares.get(t.bound, 0.0) + float(o.expected_s)
        return rows


class HostTimes(NamedTuple):
    cpu_s: object        # the host's path to the next launch: the slowest rank's scheduler work + the DP sync
    exposed_s: object    # its part on the critical path
    step_s: object       # the step: GPU + exposed


def host_rule(gpu_s, host_s, sync_s, hw, ranks, host_var_s2=0.0, own_s=None) -> HostTimes:
    """The host path, its exposed part and the step, for a step with GPU time gpu_s, mean scheduler work host_s (its
    variance across ranks beyond the stack's spread: host_var_s2), DP sync sync_s over `ranks` DP ranks:
    path = roofline.host_path, exposed = roofline.exposed_host (max(0, path - GPU) under async scheduling, else the
    path), step = GPU + exposed. StepResult and GridSteps.metrics both call it, so a grid's steps are bit for bit
    the scalar ones."""
    path = host_path(host_s, host_var_s2, sync_s, ranks, hw, own_s)
    exposed = exposed_host(gpu_s, path, hw)
    return HostTimes(path, exposed, sadd(gpu_s, exposed))


def tokens_per_step(m: Model, lay: Layout, p: Point):
    """Tokens one engine instance emits (decode: accepted) or ingests (prefill) per step, over all its ranks."""
    per_rank_group = p.batch * p.accepted(m) if p.phase == "decode" else p.new_tokens
    return per_rank_group * lay.dp


def tokens_per_s_per_gpu(m: Model, lay: Layout, p: Point, step_s):
    return sdiv(tokens_per_step(m, lay, p), step_s, lay.ranks)


def tokens_per_s_per_user(m: Model, p: Point, step_s):
    """Decode: accepted tokens per verify step over the step time. Prefill: one sequence's new tokens per second."""
    per_user = p.accepted(m) if p.phase == "decode" else p.new_tokens / p.batch
    return per_user / step_s


_TERMS = tuple((b, f"{b}_s") for b in BOUNDS)


def _is_array(x) -> bool:
    """A numpy array of more than a scalar (numpy is not imported for scalar points)."""
    return getattr(x, "ndim", 0) > 0


