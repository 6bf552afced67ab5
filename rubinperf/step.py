"""Aggregation of one step: per-op times summed over ops and layers.

Expert imbalance: an expert-parallel MoE op's time is stretched by 1 / balancedness,
since the busiest rank sets the pace (published-results.md).

Overlap rule: inside one op (one fused kernel) compute, memory traffic and link traffic
overlap, so the roofline takes their max (MegaMoE's EP dispatch and combine hide under
its expert GEMMs, up to the larger of the two). Different ops run one after another, so
their times add; a TP all-reduce is its own op and adds. The host's work for a step
(scheduling, DP synchronisation) runs while the GPU executes the previous step (async
scheduling), so the step takes max(GPU time, CPU time): CPU overhead only shows once it
exceeds the GPU work, as the seed saw when DEP32 ran slower than DEP16. The
speed-of-light step is the sum of per-op SOL times of the GPU work.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rubinperf.cost import BOUNDS, Cost, KernelTime
from rubinperf.graph import Op, Point, build_step
from rubinperf.layout import Layout
from rubinperf.mathops import smax, ssum
from rubinperf.roofline import kernel_time
from rubinperf.specs.model import Model


@dataclass(frozen=True)
class OpTime:
    op: Op
    time: KernelTime        # one occurrence

    @cached_property
    def expected_s(self):
        return self.time.expected_s * self.op.repeat * self.op.stretch

    @cached_property
    def sol_s(self):
        return self.time.sol_s * self.op.repeat * self.op.stretch


@dataclass(frozen=True)
class StepResult:
    model: Model
    hw: object
    layout: Layout
    point: Point
    ops: list[OpTime]
    extra_cpu_s: object = 0.0   # host work a caller adds to the step (serving: admitting new requests)

    @cached_property
    def gpu_s(self):
        return ssum(o.expected_s for o in self.ops if o.op.part != "cpu")

    @cached_property
    def cpu_s(self):
        """The host's work for the step (its cpu ops, plus extra_cpu_s), overlapped with the GPU's."""
        cpu = self.part_s("cpu")
        extra = self.extra_cpu_s
        return cpu if type(extra) in (int, float) and extra == 0 else cpu + extra

    @property
    def expected_s(self):
        return smax(self.gpu_s, self.cpu_s)

    @property
    def sol_s(self):
        return ssum(o.sol_s for o in self.ops if o.op.part != "cpu")

    @property
    def bound(self):
        """What limits the step: cpu when host overhead exceeds GPU time, else the term
        (compute, memory, parallelism, comm, latency) that binds the largest share of GPU time
        (ties: the first in that order). A name for a scalar point; for array points (sweeps) an
        array of names, element by element by the same rule."""
        if not _is_array(self.expected_s):
            if float(self.cpu_s) > float(self.gpu_s):
                return "cpu"
            shares = dict.fromkeys(BOUNDS, 0.0)
            present = set()
            for o in self.ops:
                if o.op.part != "cpu":
                    shares[o.time.bound] += float(o.expected_s)
                    present.add(o.time.bound)
            return max((b for b in BOUNDS if b in present), key=shares.get)
        return self._bound_array()

    def _bound_array(self):
        import numpy as np

        shape = np.shape(self.expected_s)
        shares = np.zeros((len(BOUNDS),) + shape)
        for o in self.ops:
            if o.op.part == "cpu":
                continue
            t = o.time
            terms = np.stack(np.broadcast_arrays(*(np.asarray(getattr(t, f"{b}_s"), dtype=float) + np.zeros(shape)
                                                   for b in BOUNDS)))
            which = np.argmax(terms, axis=0)          # the op's bound: its largest term (first in BOUNDS on a tie)
            share = np.asarray(o.expected_s, dtype=float) + np.zeros(shape)
            for i in range(len(BOUNDS)):
                shares[i] += np.where(which == i, share, 0.0)
        names = np.array(BOUNDS, dtype=object)[np.argmax(shares, axis=0)]
        cpu = np.asarray(self.cpu_s, dtype=float) + np.zeros(shape) > np.asarray(self.gpu_s, dtype=float) + np.zeros(shape)
        return np.where(cpu, "cpu", names)

    @property
    def tokens_per_step(self):
        """Tokens one engine instance emits (decode: accepted) or ingests (prefill) per step, over all its ranks."""
        m, p, lay = self.model, self.point, self.layout
        per_rank_group = p.batch * p.accepted(m) if p.phase == "decode" else p.new_tokens
        return per_rank_group * lay.dp

    @property
    def tokens_per_s_per_gpu(self):
        return self.tokens_per_step / self.expected_s / self.layout.ranks

    @property
    def tokens_per_s_per_user(self):
        """Decode: accepted tokens per verify step over the step time. Prefill: one sequence's new tokens per second."""
        m, p = self.model, self.point
        per_user = p.accepted(m) if p.phase == "decode" else p.new_tokens / p.batch
        return per_user / self.expected_s

    def part_s(self, part: str):
        return ssum(o.expected_s for o in self.ops if o.op.part == part)

    def total_cost(self) -> Cost:
        return sum((o.op.cost * o.op.repeat for o in self.ops), Cost())

    def by_name(self) -> dict[str, dict]:
        """Breakdown rows: ops of one name summed over layers (and passes)."""
        rows: dict[str, dict] = {}
        for o in self.ops:
            name = o.op.name
            r = rows.setdefault(name, {"kernel": name, "part": o.op.part, "expected_s": 0.0, "sol_s": 0.0,
                                       "flops": 0.0, "bytes": 0.0, "terms": {}, "scale_out_s": 0.0,
                                       "scale_out_bytes": 0.0})
            r["expected_s"] = r["expected_s"] + o.expected_s
            r["scale_out_s"] = r["scale_out_s"] + o.time.scale_out_s * o.op.repeat * o.op.stretch
            r["scale_out_bytes"] = r["scale_out_bytes"] + o.op.cost.scale_out_bytes * o.op.repeat
            r["sol_s"] = r["sol_s"] + o.sol_s
            r["flops"] = r["flops"] + o.op.cost.flops * o.op.repeat
            r["bytes"] = r["bytes"] + o.op.cost.bytes * o.op.repeat
            for term, v in o.time.terms.items():
                r["terms"][term] = r["terms"].get(term, 0.0) + v * o.op.repeat * o.op.stretch
        return rows


def _is_array(x) -> bool:
    """A numpy array of more than a scalar (numpy is not imported for scalar points)."""
    return getattr(x, "ndim", 0) > 0


def op_time(op: Op, hw, launch: str = "graph") -> KernelTime:
    """An op's kernels run one after another: their times add (each term separately)."""
    return sum(kernel_time(k, hw, die_local_weights=op.die_local_weights, launch=launch) for k in op.kernels)


def step(model: Model, hw, layout: Layout, point: Point) -> StepResult:
    """Build the step's op graph and time every op on `hw`."""
    ops = build_step(model, layout, point, gpus_per_tray=hw.gpus_per_tray)
    timed = [OpTime(o, op_time(o, hw)) for o in ops]
    return StepResult(model, hw, layout, point, timed)
