"""Estimates for the `estimate` command: load specs once, build points, time steps, make records."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from rubinperf.errors import DoesNotFit, SpecError
from rubinperf.specs.defaults import DEFAULT_ENGINES
from rubinperf.specs.layout import Layout, fits, parse_layout
from rubinperf.specs.select import load_specs
from rubinperf.step.latency import step_latency
from rubinperf.step.point import make_point
from rubinperf.step.records import step_record
from rubinperf.step.timing import step

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


# Options that mean something in one phase only: given for a run with no step of that phase, they
# are an error; with steps of both phases (the default engines), they apply to their phase's rows.
DECODE_ONLY = ("acceptance", "draft_tokens")
PREFILL_ONLY = ("new_tokens",)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_phase_options(options: dict, phases: set) -> None:
    for names, phase in ((DECODE_ONLY, "decode"), (PREFILL_ONLY, "prefill")):
        for name in names:
            if options.get(name) is not None and phase not in phases:
                raise SpecError(f"{_flag(name)}: applies to {phase} steps only, and every step asked for is "
                                f"{'prefill' if phase == 'decode' else 'decode'} (add a {phase} layout or drop the option)")


def _for_phase(options: dict, phase: str) -> dict:
    drop = PREFILL_ONLY if phase == "decode" else DECODE_ONLY
    return {k: v for k, v in options.items() if k not in drop}


class EngineShape(NamedTuple):
    """One engine a run estimates: its layout and phase, the batch it runs by default (None: the option's or
    make_point's), and what the record should say about how it was chosen."""

    layout: Layout
    phase: str
    batch: int | None
    note: str
    unfit: str = ""   # a default shape no layout of the rack holds: why (the row is left out, or the error)


def run_estimates(model: str, hardware: list[str] | None = None, layouts: list[str] | None = None,
                  sets: list[str] | None = None, stacks: list[str] | None = None, *, phase: str | None = None,
                  batch: float | None = None, context: float | None = None, new_tokens: float | None = None,
                  draft_tokens: int | None = None, acceptance: float | None = None, balancedness: float | None = None,
                  eplb: bool = True, engram_placement: str | None = None, annotate=None) -> list[dict]:
    """The records of `rubinperf estimate`: one step per (rack, engine shape), the default shapes where no layout is
    given. The point options apply to every step of their phase (make_point checks them). `annotate(model, hw,
    layout, point)`, when given, returns fields added to each record (the CLI's band and basis)."""
    m, hws = load_specs(model, hardware, sets, stacks)
    from rubinperf.step.point import default_phase

    options = {"batch": batch, "context": context, "new_tokens": new_tokens, "draft_tokens": draft_tokens,
               "acceptance": acceptance, "balancedness": balancedness, "eplb": eplb,
               "engram_placement": engram_placement}

    if layouts:
        twice = sorted({t for t in layouts if list(layouts).count(t) > 1})
        if twice:
            raise SpecError(f"--layout: {', '.join(twice)} is listed twice (each layout once)")
        given = [EngineShape(lay, phase or default_phase(lay), None, "") for lay in map(parse_layout, layouts)]
        shapes_of = {hw.name: given for hw in hws}
    else:
        shapes_of = {hw.name: default_shapes(m, hw, phase) for hw in hws}
    _check_phase_options(options, {s.phase for shapes in shapes_of.values() for s in shapes})
    records, left_out = [], []
    several = sum(len(shapes) for shapes in shapes_of.values()) > 1
    for hw in hws:
        for shape in shapes_of[hw.name]:
            lay, note = shape.layout, shape.note
            opts = _for_phase(options, shape.phase)
            if shape.batch is not None and opts.get("batch") is None:
                opts["batch"] = shape.batch
            try:
                if shape.unfit:
                    raise DoesNotFit(shape.unfit)
                point = make_point(m, hw, lay, **{**opts, "phase": shape.phase})
                cap = check_fits(m, hw, lay, point)
            except DoesNotFit as exc:   # one row of several: the others print, this one says why it is left out
                if not several:
                    raise
                row = "" if str(exc).startswith(f"{m.name} on ") else f"{hw.name} {lay.name} {shape.phase}: "
                left_out.append((exc, f"left out: {row}{exc}"))
                continue
            r = step(m, hw, lay, point)
            check_finite(r)
            rec = step_record(r)
            used = cap.fixed_bytes + float(point.batch) * cap.bytes_per_request   # scalar: estimate loads no numpy
            rec.update(hbm_used_bytes=used, hbm_capacity_bytes=cap.hbm_bytes, max_batch_that_fits=cap.max_requests)
            rec.update(step_latency(m, hw, lay, r))
            note = "; ".join(x for x in (note, topology_note(rec, point)) if x)
            if note:
                rec["note"] = note
            if annotate is not None:
                rec.update(annotate(m, hw, lay, point))
            records.append(rec)
    if not records and left_out:   # nothing fits: the first reason is the error
        raise left_out[0][0]
    if left_out:   # said once under the table, and in every JSON record
        for rec in records:
            rec["left_out"] = [why for _, why in left_out]
    return records



def topology_note(rec: dict, point) -> str:
    """What a record spanning NVLink domains should say: the domains, the EP mode, the NIC's time, per node."""
    if rec["nvlink_domains"] <= 1:
        return ""
    from rubinperf.units import fmt_num

    mode = "normal (hierarchical)" if point.ep_hierarchical else "low-latency (direct RDMA)"
    return (f"{rec['hardware']} {rec['layout']} {rec['phase']}: {rec['nvlink_domains']} NVLink domains of "
            f"{rec['nvlink_domain_size']} GPUs, EP over the NIC in DeepEP {mode} mode, NIC time "
            f"{rec['scale_out_time_ms']:.3g} ms (before overlap); {fmt_num(rec['tokens_per_s_per_node'])} tok/s per "
            f"{rec['gpus_per_node']}-GPU node")


# HBM per GPU held back from weights and KV (runtime, communication buffers, CUDA graphs): the bundled
# workloads' serving.runtime_reserve_bytes, which `estimate` (no workload) assumes too.
RESERVE_BYTES = 10e9


def point_capacity(m, hw: Platform, lay, point):
    """The HBM budget of one rank at `point`: its requests (decode) or sequences (prefill) at their largest
    context, with the tokens each has in flight per step."""
    from rubinperf.step.capacity import capacity

    batch = float(point.batch)
    if point.phase == "decode":
        per_req = 1 + float(point.k(m))
        return capacity(m, hw, lay, "decode", context_tokens=float(point.context) + per_req,
                        tokens_per_request=per_req, logits_per_request=per_req, reserve_bytes=RESERVE_BYTES,
                        engram_placement=point.engram_placement)
    new = float(point.new_tokens) / batch
    return capacity(m, hw, lay, "prefill", context_tokens=float(point.context) + new, tokens_per_request=new,
                    logits_per_request=1, reserve_bytes=RESERVE_BYTES, engram_placement=point.engram_placement)


def check_fits(m, hw: Platform, lay, point):
    """Weights + Engram tables + KV + activations of `point` fit one rank's HBM (and host memory), else a
    SpecError naming the largest batch that fits. Returns the Capacity."""
    cap = point_capacity(m, hw, lay, point)
    batch = float(point.batch)
    why = cap.reason(batch)
    if not why:
        return cap
    where = (f"{m.name} on {hw.name} {lay.name} {point.phase} at --batch {batch:g}, --context {float(point.context):,.0f}"
             + (f", --new-tokens {float(point.new_tokens):,.0f}" if point.phase == "prefill" else ""))
    what = "requests per rank" if lay.kind == "dep" else "requests per instance"
    if point.phase == "prefill":
        what = "sequences per rank"
    fix = (f"; the largest batch that fits is --batch {cap.max_requests:,.0f} ({what})" if cap.max_requests >= 1
           else "; no batch fits: " + ("fewer --new-tokens or a wider layout" if point.phase == "prefill"
                                       else "a wider layout or a shorter --context"))
    raise DoesNotFit(f"{where}: {why.split(': ', 1)[1]}{fix}")


def _default_fits(m, hw: Platform, lay, phase, batch) -> bool:
    """A default engine shape at its default point fits one rank's HBM."""
    try:
        point = make_point(m, hw, lay, phase=phase, batch=batch)
    except SpecError:
        return False
    return not point_capacity(m, hw, lay, point).reason(float(point.batch))


def _fit_reason(m, hw: Platform, lay, phase, batch) -> str:
    """Why a default point does not fit `lay` (its capacity's reason, or the point's error)."""
    try:
        point = make_point(m, hw, lay, phase=phase, batch=batch)
    except SpecError as exc:
        return str(exc)
    return point_capacity(m, hw, lay, point).reason(float(point.batch)) or "it fits"


def default_shapes(m, hw: Platform, phase=None) -> list[EngineShape]:
    """The vLLM posts' engine shapes (DEP2 prefill, DEP32 and TP8 decode), adapted to a rack they do not
    fit: a DEP layout wider than the NVLink domain becomes the widest that fits (DEP8 on an 8-GPU
    H200 or B200), and a prefill layout whose weights overflow HBM the smallest DEP layout whose
    weights fit. Each change is said in the record's `note`."""
    out = []
    for name, ph, batch in DEFAULT_ENGINES:
        lay, ph = parse_layout(name), phase or ph
        note, unfit = "", ""
        if lay.kind == "dep" and (not fits(lay, m, hw) or not _default_fits(m, hw, lay, ph, batch)):
            wider = range(lay.ranks + 1, hw.nvlink_domain_size + 1)
            narrower = range(min(lay.ranks, hw.nvlink_domain_size + 1) - 1, 0, -1)
            order = list(wider) if ph == "prefill" or lay.ranks <= hw.nvlink_domain_size else list(narrower)
            pick = next((Layout("dep", n) for n in order
                         if fits(Layout("dep", n), m, hw) and _default_fits(m, hw, Layout("dep", n), ph, batch)), None)
            if pick is not None and all(pick != s.layout or ph != s.phase for s in out):
                why = ("exceeds the NVLink domain" if lay.ranks > hw.nvlink_domain_size
                       else "does not fit in HBM (weights, KV and activations)")
                note = f"default {name} {ph} {why} of {hw.name}: {pick.name} instead"
                lay = pick
            elif pick is None:
                widest = Layout("dep", min(lay.ranks, hw.nvlink_domain_size))
                unfit = (f"{m.name} on {hw.name} {ph}: no DEP layout of its {hw.nvlink_domain_size}-GPU NVLink domain "
                         f"holds the default {name} {ph} step ({_fit_reason(m, hw, widest, ph, batch)})")
        out.append(EngineShape(lay, ph, batch, note, unfit))
    return out


def check_finite(r) -> None:
    """Values in range one by one can still overflow together (--batch 1e300): fail, don't print nan."""
    t = float(r.expected_s)
    if not (math.isfinite(t) and t > 0 and math.isfinite(float(r.sol_s))):
        p = r.point
        raise SpecError(f"{r.hw.name} {r.layout.name} {p.phase} at --batch {float(p.batch):g}, --context {float(p.context):g}"
                        + (f", --new-tokens {float(p.new_tokens):g}" if p.phase == "prefill" else "")
                        + f": the step time ({t:g} s) is not a finite positive number; an option or a value in the "
                        f"{r.hw.name} or {r.model.name} spec is out of range")
