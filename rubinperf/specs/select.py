"""The specs a run uses: defaults (model, racks, engine shapes) and the records loaded with `--set` applied."""

from __future__ import annotations

from rubinperf.errors import SpecError
from rubinperf.specs.stack import load_platform
from rubinperf.specs.model import load_model
from rubinperf.specs.overrides import apply_overrides

DEFAULT_MODEL = "deepseek-v4.1-flash"
DEFAULT_HARDWARE = ("gb300-nvl72", "vr-nvl72")
# The engine shapes of vLLM's DeepSeek-V4.1-Flash posts: DEP2 prefill, Wide-EP DEP32 decode, TP8 low-latency decode.
DEFAULT_ENGINES = (("dep2", "prefill", 1), ("dep32", "decode", 16), ("tp8", "decode", 1))
DEFAULT_CONTEXT = 131072


def pair_stacks(racks: list, stacks) -> list:
    """The stack of each rack: none given -> each rack's default (None); one -> every rack; one per rack -> in order."""
    stacks = list(stacks or [])
    if not stacks:
        return [None] * len(racks)
    if len(stacks) == 1:
        return stacks * len(racks)
    if len(stacks) == len(racks):
        return stacks
    raise SpecError(f"--stack: given {len(stacks)} times for {len(racks)} racks ({', '.join(racks)}); "
                    "give it once for every rack or once per --hardware, in order")


def serving_setups(model: str, hardware, workload: str, sets, stacks=None) -> list:
    """(model, platform, workload) per rack (hardware + its stack) for pareto and compare, with the `--set`
    overrides that apply to it: `rack:field=value` changes one rack only."""
    from rubinperf.specs.workload import load_workload

    names = list(hardware or DEFAULT_HARDWARE)
    if len(set(names)) != len(names):
        raise SpecError(f"--hardware: a rack is listed twice ({', '.join(names)})")
    m, w = load_model(model), load_workload(workload)
    racks = [(name, load_platform(name, stack)) for name, stack in zip(names, pair_stacks(names, stacks))]
    scoped: dict[str, list[str]] = {}
    common = []
    for text in sets or []:
        key = text.partition("=")[0]
        if ":" in key:
            rack, _, rest = text.partition(":")
            matches = [hw.name for name, hw in racks if rack in (name, hw.name)]
            if not matches:
                raise SpecError(f"--set {text!r}: no rack named {rack!r} in this run ({', '.join(hw.name for _, hw in racks)})")
            scoped.setdefault(matches[0], []).append(rest)
        else:
            common.append(text)
    out = []
    for _, hw in racks:
        specs = apply_overrides(common + scoped.get(hw.name, []), hardware=hw, model=m, workload=w)
        out.append((specs["model"], specs["hardware"], specs["workload"]))
    return out


def swapped_stack_setups(setups) -> dict:
    """For compare's silicon/software split: {stack: the first rack's silicon on that stack, as a setup} for every
    other rack's stack that differs from the first rack's (the --set overrides of each part kept)."""
    from rubinperf.specs.stack import platform

    m0, hw0, w0 = setups[0]
    out = {}
    for _, hw, _ in setups[1:]:
        if hw.stack != hw0.stack and hw.stack not in out:
            out[hw.stack] = (m0, platform(hw0.hardware_spec(), hw.stack_spec()), w0)
    return out


def load_specs(model: str, hardware=None, sets=None, stacks=None):
    """The model and platform (hardware + stack) records with `--set` overrides applied to each."""
    names = list(hardware or DEFAULT_HARDWARE)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(f"--hardware: {', '.join(twice)} is listed twice (each rack once)")
    m = load_model(model)
    hws = []
    for name, stack in zip(names, pair_stacks(names, stacks)):
        specs = apply_overrides(sets, hardware=load_platform(name, stack), model=m)
        hws.append(specs["hardware"])
    return specs["model"], hws
