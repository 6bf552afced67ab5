"""Estimates for the `estimate` command: load specs once, build points, time steps, make records."""

from __future__ import annotations

import math

from rubinperf.errors import SpecError
from rubinperf.layout import parse_layout
from rubinperf.records import step_record
from rubinperf.scenario import DEFAULT_ENGINES, DEFAULT_HARDWARE, make_point
from rubinperf.specs.hardware import load_hardware
from rubinperf.specs.model import load_model
from rubinperf.specs.overrides import apply_overrides
from rubinperf.step import step


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


def load_specs(model: str, hardware=None, sets=None):
    """The model and hardware records with `--set` overrides applied to each."""
    names = list(hardware or DEFAULT_HARDWARE)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(f"--hardware: {', '.join(twice)} is listed twice (each rack once)")
    m = load_model(model)
    hws = []
    for name in names:
        specs = apply_overrides(sets, hardware=load_hardware(name), model=m)
        hws.append(specs["hardware"])
    return specs["model"], hws


def run_estimates(model: str, hardware=None, layouts=None, sets=None, **options) -> list[dict]:
    m, hws = load_specs(model, hardware, sets)
    if layouts:
        twice = sorted({t for t in layouts if list(layouts).count(t) > 1})
        if twice:
            raise SpecError(f"--layout: {', '.join(twice)} is listed twice (each layout once)")
        shapes = [(parse_layout(text), options.get("phase")) for text in layouts]
    else:
        shapes = [(parse_layout(name), options.get("phase") or phase) for name, phase, _ in DEFAULT_ENGINES]
    from rubinperf.scenario import default_phase

    shapes = [(lay, phase or default_phase(lay)) for lay, phase in shapes]
    _check_phase_options(options, {phase for _, phase in shapes})
    records = []
    for hw in hws:
        for lay, phase in shapes:
            point = make_point(m, hw, lay, **{**_for_phase(options, phase), "phase": phase})
            r = step(m, hw, lay, point)
            check_finite(r)
            records.append(step_record(r))
    return records


def check_finite(r) -> None:
    """Values in range one by one can still overflow together (--batch 1e300): fail, don't print nan."""
    t = float(r.expected_s)
    if not (math.isfinite(t) and t > 0 and math.isfinite(float(r.sol_s))):
        p = r.point
        raise SpecError(f"{r.hw.name} {r.layout.name} {p.phase} at --batch {float(p.batch):g}, --context {float(p.context):g}"
                        + (f", --new-tokens {float(p.new_tokens):g}" if p.phase == "prefill" else "")
                        + f": the step time ({t:g} s) is not a finite positive number; an option or a value in the "
                        f"{r.hw.name} or {r.model.name} spec is out of range")
