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


def load_specs(model: str, hardware=None, sets=None):
    """The model and hardware records with `--set` overrides applied to each."""
    m = load_model(model)
    hws = []
    for name in hardware or DEFAULT_HARDWARE:
        specs = apply_overrides(sets, hardware=load_hardware(name), model=m)
        hws.append(specs["hardware"])
    return specs["model"], hws


def run_estimates(model: str, hardware=None, layouts=None, sets=None, **options) -> list[dict]:
    m, hws = load_specs(model, hardware, sets)
    if layouts:
        shapes = [(parse_layout(text), options.get("phase")) for text in layouts]
    else:
        shapes = [(parse_layout(name), options.get("phase") or phase) for name, phase, _ in DEFAULT_ENGINES]
    records = []
    for hw in hws:
        for lay, phase in shapes:
            point = make_point(m, hw, lay, **{**options, "phase": phase})
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
