"""`rubinperf list hardware|stacks|models|layouts`: the bundled specs (thin: rubinperf.step.records' records out
to rubinperf.render.lists)."""

from __future__ import annotations

import inspect

import typer

from rubinperf.cli.options import apply_wide, emit, shared_options

list_app = typer.Typer(help="List bundled specs: hardware, stacks, models, workloads, layouts, and the spec fields.\n\n"
                       "Example: rubinperf list hardware --json")


def _table(name: str):
    """The renderer `name` of rubinperf.render.lists, imported when a table is printed."""
    def render(records):
        from rubinperf.render import lists

        getattr(lists, name)(records)
    return render


def _list_command(name: str, records: str, what: str, example: str, takes_wide: bool = True):
    """Register `list NAME`: rubinperf.step.records' `records()` printed as asked, the table by rubinperf.render.lists'
    `NAME_table`; `takes_wide`: the table takes --wide (else it is narrow enough for any terminal)."""
    @shared_options()
    def command(*, as_json, as_csv, quiet, wide):
        from rubinperf.step import records as built

        if takes_wide:
            apply_wide(wide)
        emit(getattr(built, records)(), as_json, _table(f"{name}_table"), as_csv=as_csv, quiet=quiet)

    if not takes_wide:
        sig = inspect.signature(command)
        command.__signature__ = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "wide"])
    command.__doc__ = f"{what}\n\nExample: {example}"
    command.__name__ = command.__qualname__ = f"list_{name}"
    list_app.command(name)(command)


_list_command("hardware", "hardware_records", "Bundled hardware specs with their headline peaks.",
              "rubinperf list hardware --json")
_list_command("stacks", "stack_records", "Bundled software stacks: kernel library and engine facts, and which racks "
              "name each as their default.", "rubinperf list stacks --json")
_list_command("models", "model_records", "Bundled model specs with total and active parameters implied by their "
              "shapes.", "rubinperf list models")
_list_command("layouts", "layout_records", "Parallel layouts: dep<N> (data-parallel attention + expert parallel), tp<N> (tensor "
              "parallel) and tep<N> (tensor-parallel attention + expert-parallel experts).", "rubinperf list layouts", takes_wide=False)
_list_command("workloads", "workload_records", "Bundled workloads: tokens per turn, prefix hit rate, prefill engine.",
              "rubinperf list workloads")
_list_command("fields", "field_records", "Every spec field --set can change: its unit and documented range (a value "
              "more than 100x outside is refused).", "rubinperf list fields --json")
