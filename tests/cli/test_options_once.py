"""Command options are declared once (rubinperf/cli/options.py) and shared: a command that takes a flag
declared there takes one of its declarations, not a copy of its own; the few that mean something
else in one command are listed here, each with why."""

from __future__ import annotations

from typing import Annotated, get_args, get_origin

import pytest
import typer
from typer.models import OptionInfo

from rubinperf.cli import app, options

# (command path, flag): declared by that command itself, because it means something else there.
OWN = {
    ("estimate", "--hardware"): "repeatable: a row per rack (pareto/compare's racks also set the baseline of ratios)",
    ("estimate", "--layout"): "repeatable, each in its phase (explain/sensitivity take one layout)",
    ("explain", "--batch"): "also the sequences of the generic attention kernel",
    ("kernel attention", "--batch"): "a shape of the kernel: sequences (required)",
    ("explain", "--launch"): "applies to the generic kernels only (step ops are timed as in a graph)",
    ("explain", "--json"): "one record, with formulas as text and LaTeX",
    ("sensitivity", "--json"): "one record per parameter",
    ("validate", "--quiet"): "the exit status says whether every point is in band",
    ("validate", "--stack"): "applies to the points that name no stack of their own",
    ("calibrate", "--hardware"): "the spec the fit starts from (default h200)",
    ("calibrate", "--quiet"): "files are still written",
    ("serve", "--turn-gap"): "seconds, 0 by default: serve reads no workload file (pareto/compare: the workload's)",
    ("serve", "--prefill-layout"): "one shape, and none by default: the engine is aggregated unless it is given",
}


def _aliases():
    """(name, OptionInfo, flags) of each option type declared in rubinperf.cli.options."""
    for name in dir(options):
        alias = getattr(options, name)
        if get_origin(alias) is not Annotated:
            continue
        info = next(a for a in get_args(alias)[1:] if isinstance(a, OptionInfo))
        decls = [info.default, *(info.param_decls or ())]   # in Annotated, Option's first argument is a flag
        assert all(isinstance(d, str) and d.startswith("-") for d in decls), f"{name}: name its flags"
        yield name, info, [flag.strip() for d in decls for flag in d.split("/")]


def _shared() -> dict[str, set[str]]:
    """flag -> the help texts of the declarations in rubinperf.cli.options that carry it."""
    out: dict[str, set[str]] = {}
    for _, info, flags in _aliases():
        for flag in flags:
            out.setdefault(flag, set()).add(info.help)
    return out


def _commands():
    def walk(cmd, path):
        yield path, cmd
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            yield from walk(sub, path + [name])

    return [(" ".join(p), c) for p, c in walk(typer.main.get_command(app), []) if p]


def test_a_shared_flag_is_taken_from_its_declaration():
    shared = _shared()
    assert {"--model", "--hardware", "--stack", "--set", "--json", "--quiet", "--wide", "--context"} <= set(shared)
    copies = []
    seen = set()
    for path, cmd in _commands():
        for p in getattr(cmd, "params", []):
            flags = [f for f in p.opts + p.secondary_opts if f in shared]
            if not flags:
                continue
            own = [f for f in flags if (path, f) in OWN]
            if own:
                seen.update((path, f) for f in own)
                assert p.help not in shared[own[0]], f"{path} {own[0]}: listed as its own, yet the shared one"
            elif not any(p.help in shared[f] for f in flags):
                copies.append(f"{path} {'/'.join(flags)}: {p.help!r}")
    assert not copies, "declared again instead of taken from rubinperf.cli.options:\n" + "\n".join(copies)
    assert seen == set(OWN), f"listed in OWN but no such option: {set(OWN) - seen}"


def test_each_shared_declaration_is_used_by_two_commands_or_more():
    """What only one command takes belongs in that command, not among the shared options."""
    users: dict[tuple[str, str], set[str]] = {}
    for path, cmd in _commands():
        for p in getattr(cmd, "params", []):
            for flag in p.opts + p.secondary_opts:
                users.setdefault((flag, p.help), set()).add(path)
    lonely = [f"{name}: {sorted(users.get((flags[0], info.help), ()))}" for name, info, flags in _aliases()
              if len(users.get((flags[0], info.help), ())) < 2]
    assert not lonely, lonely


def test_a_bare_parameter_takes_the_shared_option_and_its_default():
    """@shared_options: a bare keyword-only name gets the table's option and default; what the command writes
    itself stays; the sweeps' table gives the racks' variant; typer builds the option from it."""
    @options.shared_options()
    def command(*, model, quiet, rows: int = 3):
        return model, quiet, rows

    assert command() == (options.DEFAULT_MODEL, False, 3)   # a direct call gets the defaults
    assert command.__annotations__ == {"model": options.Model, "quiet": options.Quiet, "rows": "int"}
    one = typer.Typer()
    one.command()(command)
    params = {p.name: p for p in typer.main.get_command(one).params}
    assert params["model"].opts == ["--model", "-m"] and params["model"].default == "deepseek-v4.1-flash"
    assert params["rows"].opts == ["--rows"] and params["rows"].default == 3

    @options.shared_options(options.SWEEP)
    def swept(*, hardware, draft_tokens, eplb):
        return hardware, draft_tokens, eplb

    assert swept() == (None, None, True)
    assert swept.__annotations__ == {"hardware": options.Racks, "draft_tokens": options.DraftLength,
                                     "eplb": options.SweepEplb}


def test_a_bare_parameter_with_no_shared_option_is_refused():
    with pytest.raises(TypeError, match="no shared option 'colour'"):
        @options.shared_options()
        def command(*, model, colour):
            return model, colour
