"""Rules between output options, shared by every command (one place, one wording)."""

from __future__ import annotations

import typer

from rubinperf.errors import SpecError

WIDE_OPT = typer.Option(False, "--wide", help="Tables with every column at full width (default: fit the terminal, "
                        "leaving out the least needed columns, named under the table).")


def apply_wide(wide: bool) -> None:
    from rubinperf import report

    report.set_wide(wide)


def check_output_flags(as_json: bool = False, as_csv: bool = False, quiet: bool = False) -> None:
    """--json and --csv are two formats of one output: choose one. --quiet prints nothing, so
    with --json or --csv it would silently drop what was asked for: an error too."""
    if as_json and as_csv:
        raise SpecError("--json and --csv: choose one output format")
    if quiet and (as_json or as_csv):
        raise SpecError(f"--quiet and {'--json' if as_json else '--csv'}: --quiet prints nothing; choose one")
