"""`rubinperf estimate`: one engine step per rack, layout and phase (thin: options in, rubinperf.step.estimates's
records out to rubinperf.render.step)."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from rubinperf.errors import SpecError
from rubinperf.cli.options import (LAYOUT_WORDS, Stacks, apply_wide, check_output_flags, complete_names, complete_words,
                                   precision_sets,
                                   emit, shared_options)


@shared_options()
def estimate(
    *, model,
    hardware: Annotated[Optional[List[str]], typer.Option(
        "--hardware", "-H", help="Hardware (repeatable). Default: gb300-nvl72 and vr-nvl72.",
        autocompletion=complete_names("hardware"))] = None,
    layout: Annotated[Optional[List[str]], typer.Option(
        "--layout", "-l", help="dep<N> or tp<N> (repeatable). Default: dep2 prefill, dep32 and tp8 decode.",
        autocompletion=complete_words(*LAYOUT_WORDS))] = None,
    phase, batch, context, new_tokens, draft_tokens, acceptance, balancedness, eplb,
    stack: Stacks = None,
    engram_placement: Annotated[Optional[str], typer.Option(
        help="Engram tables: hbm (split over the instance's ranks), host (C2C) or peer-hbm (NVLink). "
             "Default: hbm for decode, host for prefill.",
        autocompletion=complete_words("hbm", "host", "peer-hbm"))] = None,
    breakdown: Annotated[bool, typer.Option(
        "--breakdown", "-b", help="Per-kernel table: time, speed of light, % of roofline, share of step, bound.")] = False,
    baseline: Annotated[bool, typer.Option(
        "--baseline", help="With --set: run the same steps without the overrides too and print the what-if as "
                           "differences: per step and per kernel the time before, after, the change, and which "
                           "roofline term (compute, memory, parallelism, comm, latency) moved the most.")] = False,
    band: Annotated[bool, typer.Option(
        "--band", help="Low/high band beside tok/s per GPU (and step time and tok/s per user in --json): the step at "
                       "both ends of every assumed spec field's range ([ranges] of the hardware and stack files), "
                       "combined in quadrature; band_drivers names the fields that set it. Off by default: it needs "
                       "numpy's vectorised step, which would double a plain estimate's time.")] = False,
    as_json, as_csv, quiet, sets, dtype, kv_dtype, wide, save_dir,
):
    """Step time and tokens/s of a model on racks, per parallel layout and phase.

    With no options: DeepSeek-V4.1-Flash on GB300 NVL72 and Vera Rubin NVL72 in the three
    engine shapes (DEP2 prefill at 32K new tokens per rank, DEP32 decode at 16 requests per
    rank x 6 tokens, TP8 decode at batch 1), at 128K context.

    Examples:

      rubinperf estimate

      rubinperf estimate -H vr-nvl72 -l dep32 --batch 64 --context 855000 --breakdown

      rubinperf estimate -l tp8 --acceptance 3.0 --json

      rubinperf estimate -H vr-nvl72 -l dep32 --set hbm_bandwidth=+20% --baseline
    """
    check_output_flags(as_json, as_csv, quiet)
    sets = precision_sets(dtype, kv_dtype, sets)
    apply_wide(wide)
    if save_dir is not None:
        from rubinperf.cli.bundles import check_save_dir

        check_save_dir(save_dir)
    if baseline and not sets:
        raise SpecError("--baseline compares a what-if with the unchanged specs: give the what-if with --set")
    if baseline and save_dir is not None:
        raise SpecError("--baseline and --save-dir: a bundle holds one run; save the what-if without --baseline")

    point = dict(phase=phase, batch=batch, context=context, new_tokens=new_tokens, draft_tokens=draft_tokens,
                 acceptance=acceptance, balancedness=balancedness, eplb=eplb, engram_placement=engram_placement,
                 stacks=stack)
    records = estimates(model, hardware, layout, sets, point, band)
    if baseline:
        from rubinperf.analysis.whatif import diff_step

        before = estimates(model, hardware, layout, None, point, None)
        diffs = [{**diff_step(b, a), "sets": list(sets)} for b, a in zip(before, records)]

        def diff_tables(ds):
            from rubinperf.render.step import whatif_tables

            whatif_tables(ds)

        emit(diffs, as_json, diff_tables, as_csv=as_csv, quiet=quiet)
        return

    def tables(rs):
        from rubinperf.render.step import estimate_tables

        estimate_tables(rs, breakdown)

    if save_dir is not None:
        from rubinperf.cli.bundles import save_estimate
        from rubinperf.specs.select import load_specs

        m, hws = load_specs(model, hardware, sets, stack)
        save_estimate(save_dir, records, m, hws)
    emit(records, as_json, tables, as_csv=as_csv, quiet=quiet)


def estimates(model: str, hardware, layouts, sets, point: dict, band: bool | None) -> list[dict]:
    """run_estimates's records, with the band and basis of each step (`band` True or False: its --band) or without
    (None: --baseline's steps before the what-if). Where every spec is named by a bundled name (the defaults
    included), the records are a function of the arguments and the tree's files alone, and are kept between runs
    (rubinperf/kept.py: kept_of_call): a run that finds them imports none of the core. A path, a config.json or a
    file of the working directory named as given computes afresh every time."""
    def compute():
        from rubinperf.step.estimates import run_estimates

        return run_estimates(model, hardware, layouts, sets=sets, annotate=None if band is None else _annotate(band),
                             **point)

    from rubinperf.bundled import only_bundled

    if not all(map(only_bundled, [model, *(hardware or ()), *(point["stacks"] or ())])):
        return compute()
    from rubinperf.kept import kept_of_call

    return kept_of_call("estimate records", (model, hardware, layouts, sets, point, band), compute)


def _annotate(band: bool):
    """The fields run_estimates adds to each record for the CLI: where each roofline term comes from, what is not
    modelled, and with `band`, the low/high band."""
    def annotate(m, hw, lay, point):
        from rubinperf.analysis.bands import estimate_band, not_modelled, term_basis

        out = {"terms_basis": term_basis(hw), "not_modelled": not_modelled(m, hw, lay, point.phase)}
        if band:
            out.update(estimate_band(m, hw, lay, point))
        return out
    return annotate
