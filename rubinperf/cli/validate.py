"""`rubinperf validate`: predictions against published results (thin: rubinperf.analysis.validate's records out to
rubinperf.render.step)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rubinperf.cli.options import Csv, JsonRecords, SaveDir, Wide, apply_wide, check_output_flags, emit


def validate_cmd(
    points: Annotated[Optional[str], typer.Option(
        "--points", help="A TOML file of [[point]] tables. Default: the bundled validation/published.toml.")] = None,
    as_json: JsonRecords = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print nothing; the exit status says whether every point is in band.")] = False,
    stack: Annotated[Optional[str], typer.Option(
        "--stack", help="Run every point that names no stack of its own on this stack (a bundled name or a path). "
                        "Default: each point's stack, else its hardware's default_stack.")] = None,
    ledger_only: Annotated[bool, typer.Option(
        "--ledger", help="Only the accuracy ledger (held-out error per family of evidence, coverage); with --json "
                         "its record {families, coverage}.")] = False,
    kernels: Annotated[bool, typer.Option(
        "--kernels", help="The kernel section instead of the points: every row of the public kernel evidence table "
                          "(calibration/public/kernels.csv) predicted through the kernel functions the step uses, and "
                          "the median |ln(measured / predicted)| per kernel family, GPU and split (fit / held-out). "
                          "Exit 0 when the held-out rows' median is at most 0.15 and their worst at most 0.5.")] = False,
    wide: Wide = False,
    as_csv: Csv = False,
    save_dir: SaveDir = None,
):
    """Compare predictions with published results; exit 0 when every point lies in its band, 1 otherwise
    (--ledger: 1 when a family's held-out error grew past validation/ledger-baseline.json's margin).

    Each point carries its source, operating point, the published figure and a band for
    predicted/published: the band the evidence beneath it allows (its rack's held-out kernel error,
    the other step rows' held-out error), never wider than the one the file states. Points marked
    fitted informed a spec field and are not independent. After the points, the accuracy ledger:
    held-out error per family (kernels per GPU and stack, steps, mechanisms, serving), a verdict per
    family, and which racks, stacks and models have any measured evidence.

    Example: rubinperf validate --json
    """
    from rubinperf.render.step import validate_table
    from rubinperf.analysis.validate import POINTS_FILE, load_points, validate

    check_output_flags(as_json, as_csv, quiet)
    apply_wide(wide)
    if save_dir is not None:
        from rubinperf.cli.bundles import check_save_dir

        check_save_dir(save_dir)
    if stack is not None:
        from rubinperf.specs.stack import load_stack

        load_stack(stack)   # a bad name fails once, before any point runs
    if kernels:
        from rubinperf.analysis.kernel_evidence import HELD_OUT_MEDIAN_MAX, HELD_OUT_WORST_MAX, kernel_section
        from rubinperf.render.step import kernel_evidence_table

        if points or stack or save_dir is not None or as_csv:
            from rubinperf.errors import SpecError

            raise SpecError("--kernels: reads the evidence table alone (no --points, --stack, --save-dir or --csv)")
        section = kernel_section()
        emit(section, as_json, kernel_evidence_table, quiet=quiet)
        held = section["held_out"]
        if held is None or held["median_abs_log"] > HELD_OUT_MEDIAN_MAX or held["worst_abs_log"] > HELD_OUT_WORST_MAX:
            raise typer.Exit(1)
        return
    from rubinperf.analysis.ledger import all_families, apply_bands, ledger

    records = validate(load_points(points or POINTS_FILE), stack=stack)
    families = all_families(records)
    apply_bands(records, families)
    led = ledger(records, families)
    if ledger_only:
        from rubinperf.render.ledger import ledger_tables

        from rubinperf.analysis.ledger import baseline, regressions

        emit(led["families"] if as_csv else led, as_json, lambda _: ledger_tables(led), as_csv=as_csv, quiet=quiet)
        if points is None and stack is None and regressions(led["families"], baseline()):
            raise typer.Exit(1)   # a family's held-out error grew past the committed baseline's margin
        return
    if save_dir is not None:
        from rubinperf.cli.bundles import save_validate

        save_validate(save_dir, records, points or POINTS_FILE)
    def tables(rs):
        from rubinperf.render.ledger import ledger_tables

        validate_table(rs)
        ledger_tables(led)

    emit(records, as_json, tables, as_csv=as_csv, quiet=quiet)
    if not all(r["in_band"] for r in records):
        raise typer.Exit(1)
