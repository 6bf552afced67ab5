"""Rules between output options, shared by every command (one place, one wording)."""

from __future__ import annotations

import typer

from rubinperf.errors import SpecError

WIDE_OPT = typer.Option(False, "--wide", help="Tables with every column at full width (default: fit the terminal, "
                        "leaving out the least needed columns, named under the table).")


def apply_wide(wide: bool) -> None:
    from rubinperf.render import tables as report

    report.set_wide(wide)


def check_output_flags(as_json: bool = False, as_csv: bool = False, quiet: bool = False) -> None:
    """--json and --csv are two formats of one output: choose one. --quiet prints nothing, so
    with --json or --csv it would silently drop what was asked for: an error too."""
    if as_json and as_csv:
        raise SpecError("--json and --csv: choose one output format")
    if quiet and (as_json or as_csv):
        raise SpecError(f"--quiet and {'--json' if as_json else '--csv'}: --quiet prints nothing; choose one")


# ---------------------------------------------------------------- numbers with units on the command line

import re as _re

import click as _click

_TOKENS = _re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([kKmM]?)\s*(?:tokens|tok)?\s*$")
TOKEN_PREFIX = {"": 1, "k": 1024, "K": 1024, "m": 1024 ** 2, "M": 1024 ** 2}


def parse_tokens(text: str) -> float:
    """A token count: 131072, 128K (= 131,072: K is 1024 and M is 1024², the way context windows
    are quoted, and the way tables print them), 1M, 855000, 1.5e5."""
    m = _TOKENS.match(str(text))
    if not m:
        raise ValueError(f"expected a token count such as 131072, 128K or 1M (K = 1024), got {text!r}")
    return float(m.group(1)) * TOKEN_PREFIX[m.group(2)]


class TokensType(_click.ParamType):
    name = "TOKENS"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_tokens(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class BytesType(_click.ParamType):
    """A byte count: 4e9, 4GB (SI: 4e9), 4GiB (2^32), as `--set` parses sizes."""

    name = "BYTES"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        from rubinperf.specs.overrides import parse_value

        try:
            return parse_value(str(value), "copy_bytes")
        except SpecError:
            self.fail(f"expected a byte count such as 4e9, 4GB or 4GiB, got {value!r}", param, ctx)


TOKENS = TokensType()
BYTES = BytesType()


# ---------------------------------------------------------------- software stacks

STACK_ONE_HELP = ("Software stack: a bundled name (rubinperf list stacks) or a path to a stack TOML file. "
                  "Default: the stack the hardware file names (default_stack).")
STACK_HELP = (STACK_ONE_HELP + " Give it once for every rack, or once per --hardware in the same order: "
              "-H gb300-nvl72 -H vr-nvl72 --stack vllm-rubin-nov2026 --stack vllm-rubin-nov2026 runs both racks "
              "on the November software.")


def _complete_stacks(incomplete: str):
    from rubinperf.specs.loader import bundled_names

    try:
        return [n for n in bundled_names("stack") if n.startswith(incomplete)]
    except SpecError:
        return []


STACK_ONE_OPT = typer.Option(None, "--stack", help=STACK_ONE_HELP, autocompletion=_complete_stacks)
STACK_OPT = typer.Option(None, "--stack", help=STACK_HELP, autocompletion=_complete_stacks)
