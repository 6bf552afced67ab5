"""`rubinperf list hardware|stacks|models|layouts`: the bundled specs (thin: rubinperf.step.records' records out
to rubinperf.render.lists)."""

from __future__ import annotations

import typer

from rubinperf.cli.options import Csv, JsonRecords, Quiet, Wide, apply_wide, emit

list_app = typer.Typer(help="List bundled specs: hardware, stacks, models, workloads, layouts, and the spec fields.\n\n"
                       "Example: rubinperf list hardware --json")


def _table(name: str):
    """The renderer `name` of rubinperf.render.lists, imported when a table is printed."""
    def render(records):
        from rubinperf.render import lists

        getattr(lists, name)(records)
    return render


@list_app.command("hardware")
def list_hardware(as_json: JsonRecords = False, as_csv: Csv = False, quiet: Quiet = False, wide: Wide = False):
    """Bundled hardware specs with their headline peaks.

    Example: rubinperf list hardware --json
    """
    from rubinperf.step.records import hardware_records

    apply_wide(wide)
    emit(hardware_records(), as_json, _table("hardware_table"), as_csv=as_csv, quiet=quiet)


@list_app.command("stacks")
def list_stacks(as_json: JsonRecords = False, as_csv: Csv = False, quiet: Quiet = False, wide: Wide = False):
    """Bundled software stacks: kernel library and engine facts, and which racks name each as their default.

    Example: rubinperf list stacks --json
    """
    from rubinperf.step.records import stack_records

    apply_wide(wide)
    emit(stack_records(), as_json, _table("stacks_table"), as_csv=as_csv, quiet=quiet)


@list_app.command("models")
def list_models(as_json: JsonRecords = False, as_csv: Csv = False, quiet: Quiet = False, wide: Wide = False):
    """Bundled model specs with total and active parameters implied by their shapes.

    Example: rubinperf list models
    """
    from rubinperf.step.records import model_records

    apply_wide(wide)
    emit(model_records(), as_json, _table("models_table"), as_csv=as_csv, quiet=quiet)


@list_app.command("layouts")
def list_layouts(as_json: JsonRecords = False, as_csv: Csv = False, quiet: Quiet = False):
    """Parallel layouts: dep<N> (data-parallel attention + expert parallel), tp<N> (tensor parallel) and tep<N>
    (tensor-parallel attention + expert-parallel experts).

    Example: rubinperf list layouts
    """
    from rubinperf.step.records import layout_records

    emit(layout_records(), as_json, _table("layouts_table"), as_csv=as_csv, quiet=quiet)


@list_app.command("workloads")
def list_workloads(as_json: JsonRecords = False, as_csv: Csv = False, quiet: Quiet = False, wide: Wide = False):
    """Bundled workloads: tokens per turn, prefix hit rate, prefill engine.

    Example: rubinperf list workloads
    """
    from rubinperf.step.records import workload_records

    apply_wide(wide)
    emit(workload_records(), as_json, _table("workloads_table"), as_csv=as_csv, quiet=quiet)


@list_app.command("fields")
def list_fields(as_json: JsonRecords = False, as_csv: Csv = False, quiet: Quiet = False, wide: Wide = False):
    """Every spec field --set can change: its unit and documented range (a value more than 100x outside is refused).

    Example: rubinperf list fields --json
    """
    from rubinperf.step.records import field_records

    apply_wide(wide)
    emit(field_records(), as_json, _table("fields_table"), as_csv=as_csv, quiet=quiet)
