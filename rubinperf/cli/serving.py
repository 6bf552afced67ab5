"""`rubinperf pareto` and `rubinperf compare`: the serving model from the command line (thin).

Registered in rubinperf/cli/__init__.py; imports of the model, the renderers and matplotlib happen
inside the commands.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rubinperf.cli.options import (DEFAULT_MODEL, DecodeLayouts, DraftLength, InteractivityStat, JsonRecords, MaxBatch,
                                   Model, PrefillLayouts, Quiet, QuietPlot, Racks, RackSets, ServingMode, Stacks,
                                   SweepAcceptance, SweepEplb, TotalGpus, Tpot, Ttft, Wide, Workload, apply_wide,
                                   check_output_flags)
from rubinperf.errors import SpecError

DEFAULT_WORKLOAD = "agentx"
DEFAULT_MAX_BATCH = 1024


def _check_gpus(total_gpus):
    if total_gpus is not None and total_gpus < 1:
        raise SpecError(f"--total-gpus: expected a positive number of GPUs, got {total_gpus}")
    return total_gpus


def _limits(ttft, tpot) -> dict:
    from rubinperf.units import parse_value

    out = {}
    for name, text, key in (("ttft", ttft, "max_ttft_s"), ("tpot", tpot, "max_tpot_s")):
        if text is None:
            continue
        try:
            v = parse_value(str(text), "limit_s")
        except SpecError:
            raise SpecError(f"--{name}: expected a time such as 2s, 500ms or 0.5, got {text!r}") from None
        if not (v > 0 and v < float("inf")):
            raise SpecError(f"--{name}: expected a positive time, got {text!r}")
        out[key] = v
    return out


def _run_sweep(setups, decode_layouts, prefill_layouts, max_batch, draft_tokens, acceptance, eplb, quiet=False,
               stat="p90", limits=None, total_gpus=None):
    sw = _sweep_once(setups, decode_layouts, prefill_layouts, max_batch, draft_tokens, acceptance, eplb, quiet, stat,
                     total_gpus)
    for key, v in (limits or {}).items():
        setattr(sw, key, v)
    return sw


def _sweep_once(setups, decode_layouts, prefill_layouts, max_batch, draft_tokens, acceptance, eplb, quiet=False,
                stat="p90", total_gpus=None):
    """The sweep, with a transient progress bar on stderr when it is a terminal."""
    import sys

    from rubinperf.serving import batch_grid, sweep

    if acceptance is not None and acceptance < 1:
        raise SpecError(f"--acceptance: expected at least 1 token per verify step, got {acceptance}")
    kwargs = dict(decode_layouts=decode_layouts or None, prefill_layouts=prefill_layouts or None,
                  batches=batch_grid(max_batch), draft_tokens=draft_tokens, acceptance=acceptance, eplb=eplb,
                  interactivity_stat=stat, total_gpus=total_gpus)
    if quiet or not sys.stderr.isatty():
        return sweep(setups, **kwargs)
    from rubinperf.render.progress import progress_bar

    with progress_bar("sweeping") as tick:
        return sweep(setups, progress=tick, **kwargs)


def _notes(summaries, sw) -> dict:
    notes: dict[str, list[str]] = {}
    for s in summaries:
        notes[s.hardware] = s.infeasible_reasons()
    for line in sw.skipped:
        hw = line.split(":", 1)[0]
        notes.setdefault(hw, []).append("skipped " + line.split(": ", 1)[1])
    for line in getattr(sw, "notes", []):
        hw, _, text = line.partition(": ")
        notes.setdefault(hw, []).insert(0, text)
    return notes


def _check_any(summaries, sw):
    if not sw.runs:
        raise SpecError("no layout fits any rack: " + "; ".join(sw.skipped))


def _summaries(serving, setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet, stat,
               limits, total_gpus):
    """(summaries, notes, summaries per serving) of --serving disagg, agg or both: the P/D sweep's frontier, each
    aggregated engine's closed-loop frontier, or both in one Summary per rack."""
    from rubinperf.serving.agg_frontier import agg_loops, agg_summaries, check_serving, merged
    from rubinperf.serving.pareto import summarize

    check_serving(serving)
    if serving == "agg" and total_gpus is not None:
        raise SpecError("--total-gpus: sizes the prefill and decode pools of disaggregated serving; "
                        "not with --serving agg")
    disagg, agg, notes = [], [], {}
    if serving != "agg":
        sw = _run_sweep(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet=quiet,
                        stat=stat, limits=limits, total_gpus=_check_gpus(total_gpus))
        _check_any(None, sw)
        disagg = summarize(sw)
        notes = _notes(disagg, sw)
    if serving != "disagg":
        loops, skipped = agg_loops(setups, decode_layout, draft_tokens, acceptance, eplb, max_batch=max_batch)
        if not loops:
            raise SpecError("no aggregated engine fits any rack: " + "; ".join(skipped))
        agg = agg_summaries(loops, stat, **limits)
        for line in skipped:
            hw, _, text = line.partition(": ")
            notes.setdefault(hw, []).append("skipped " + text)
    chosen = {"disagg": disagg, "agg": agg}.get(serving) or merged(disagg, agg)
    return chosen, notes, {"disagg": disagg, "agg": agg}


def pareto(
    model: Model = DEFAULT_MODEL,
    hardware: Racks = None,
    stack: Stacks = None,
    workload: Workload = DEFAULT_WORKLOAD,
    decode_layout: DecodeLayouts = None,
    prefill_layout: PrefillLayouts = None,
    max_batch: MaxBatch = DEFAULT_MAX_BATCH,
    draft_tokens: DraftLength = None,
    acceptance: SweepAcceptance = None,
    eplb: SweepEplb = True,
    interactivity_stat: InteractivityStat = "p90",
    ttft: Ttft = None,
    tpot: Tpot = None,
    total_gpus: TotalGpus = None,
    sets: RackSets = None,
    serving: ServingMode = "disagg",
    as_json: JsonRecords = False,
    frontier_only: Annotated[bool, typer.Option(
        "--frontier-only", help="JSON: only the frontier points (default: every swept point, with on_frontier).")] = False,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", help="Also write the frontier chart to FILE (.png, .svg or .pdf; needs matplotlib: "
                       "pip install 'rubinperf[plot]').")] = None,
    rows: Annotated[int, typer.Option("--rows", help="Frontier rows shown per rack in the table (0: all).")] = 14,
    chart: Annotated[bool, typer.Option(
        "--chart/--no-chart", help="Draw the frontier in the terminal after the tables.")] = True,
    quiet: QuietPlot = False,
    wide: Wide = False,
):
    """Pareto frontier of tokens/s per GPU against tokens/s per user, per rack.

    Sweeps the decode batch (every value up to 128, then geometric steps to --max-batch) over
    decode layouts and racks; the prefill pool (DEP2 by default) is sized to keep up with
    the decode pool. Throughput counts cached + uncached input + output tokens over every
    GPU of both pools; interactivity is the decode speed one user sees, with speculative
    decoding (k drafted tokens, mean acceptance). Points whose KV cache, weights or
    Engram tables do not fit in HBM are reported as infeasible, with the reason. --serving agg
    sweeps each engine shape as one aggregated engine over closed-loop concurrency (see
    `rubinperf serve`); --serving both shows both frontiers and which wins where.

    Examples:

      rubinperf pareto

      rubinperf pareto -w chat-8k1k -H vr-nvl72 --plot frontier.svg

      rubinperf pareto --set workload.prefix_hit_rate=0.918 --json --frontier-only

      rubinperf pareto --serving both -w chat-8k1k --plot agg-vs-disagg.svg
    """
    from rubinperf.serving.pareto import point_records
    from rubinperf.render import plots

    check_output_flags(as_json, quiet=quiet)
    apply_wide(wide)
    if rows < 0:
        raise SpecError(f"--rows: expected 0 or more, got {rows}")
    if plot:
        plots.check_plot_path(plot)
    from rubinperf.specs.select import serving_setups

    setups = serving_setups(model, hardware, workload, sets, stack)
    from rubinperf.serving.interactivity import check_stat

    check_stat(interactivity_stat)
    summaries, notes, _ = _summaries(serving, setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance,
                                     eplb, quiet, interactivity_stat, _limits(ttft, tpot), total_gpus)
    records = [r for s in summaries for r in point_records(s, frontier_only=frontier_only and as_json)]
    if plot:
        m, _, w = setups[0]
        plots.plot_frontier(records, plot, title=f"{m.name}, workload {w.name}")
    if as_json:
        _json(records)
        return
    if quiet:
        return
    from rubinperf.render.chart import chart_width, frontier_chart
    from rubinperf.render.output import print_out
    from rubinperf.render.serving import pareto_tables

    pareto_tables(records, notes, rows=rows, wins=_wins(summaries) if serving == "both" else None)
    if chart:
        print_out(frontier_chart(records, width=chart_width()))
    if plot:
        print_out(f"wrote {plot}")


def _wins(summaries) -> dict:
    """{rack: [(serving, from, to) tok/s/user]} where each serving gives the higher throughput."""
    from rubinperf.serving.agg_frontier import winners

    return {s.hardware: winners(s) for s in summaries}


def _json(records) -> None:
    from rubinperf.render.output import emit_text, to_json

    emit_text(to_json(records))


def compare(
    model: Model = DEFAULT_MODEL,
    hardware: Racks = None,
    stack: Stacks = None,
    workload: Workload = DEFAULT_WORKLOAD,
    at_interactivity: Annotated[str, typer.Option(
        "--at-interactivity", help="Comma-separated tokens/s per user at which to compare throughput.")] = "196,387",
    decode_layout: DecodeLayouts = None,
    prefill_layout: PrefillLayouts = None,
    max_batch: MaxBatch = DEFAULT_MAX_BATCH,
    draft_tokens: DraftLength = None,
    acceptance: SweepAcceptance = None,
    eplb: SweepEplb = True,
    interactivity_stat: InteractivityStat = "p90",
    ttft: Ttft = None,
    tpot: Tpot = None,
    total_gpus: TotalGpus = None,
    sets: RackSets = None,
    serving: ServingMode = "disagg",
    kernels: Annotated[int, typer.Option(
        "--kernels", help="Decode kernels listed per compared point (0: no kernel tables).")] = 6,
    as_json: JsonRecords = False,
    quiet: Quiet = False,
    wide: Wide = False,
):
    """Racks side by side: peak throughput, throughput at given interactivity, best single-user speed.

    Each figure comes from the rack's Pareto frontier (see `rubinperf pareto`), with ratio
    columns against the first rack, a table that splits each throughput ratio into its terms
    (requests per decode GPU, decode step time, acceptance, share of GPUs in decode), and the
    decode kernels' GPU time per output token at each compared point. $ per million tokens
    (input and output apart) and tokens/s per kW come from the racks' specs. --serving agg or
    both compares the racks' aggregated engines (see `rubinperf pareto`), or both servings.

    Examples:

      rubinperf compare

      rubinperf compare --at-interactivity 100,200,400,800 -w chat-8k1k

      rubinperf compare -H gb200-nvl72 -H gb300-nvl72 -H vr-nvl72 --json

      rubinperf compare --serving both -H gb300-nvl72 -w chat-8k1k
    """
    from rubinperf.serving.pareto import compare_records

    check_output_flags(as_json, quiet=quiet)
    apply_wide(wide)
    levels = _levels(at_interactivity)
    if kernels < 0:
        raise SpecError(f"--kernels: expected 0 or more, got {kernels}")
    from rubinperf.specs.select import serving_setups

    setups = serving_setups(model, hardware, workload, sets, stack)
    from rubinperf.serving.interactivity import check_stat

    check_stat(interactivity_stat)
    summaries, notes, per = _summaries(serving, setups, decode_layout, prefill_layout, max_batch, draft_tokens,
                                       acceptance, eplb, quiet, interactivity_stat, _limits(ttft, tpot), total_gpus)
    stacks, swapped = {hw.name: hw.stack for _, hw, _ in setups}, {}
    if serving != "agg":   # the silicon/software split is between P/D deployments
        stacks, swapped = _swapped_stacks(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance,
                                          eplb, quiet, interactivity_stat, _limits(ttft, tpot), total_gpus)
    if serving == "both":   # each rack's P/D deployment, then its aggregated engines
        agg = {s.hardware: s for s in per["agg"]}
        summaries = [x for d in per["disagg"] for x in (d, agg.get(d.hardware)) if x is not None]
    records = compare_records(summaries, levels, stacks=stacks, swapped=swapped)
    if as_json:
        _json(records)
        return
    if quiet:
        return
    from rubinperf.render.output import print_out
    from rubinperf.render.serving import compare_tables

    from rubinperf.serving.agg_frontier import merged

    wins = _wins(merged(per["disagg"], per["agg"])) if serving == "both" else None
    compare_tables(records, kernels=kernels, note=f"decode batch swept from 1 to {max_batch} per rank (DEP) or instance (TP)"
                   + "".join(f"; only points with {k.split('_')[1].upper()} ≤ {v * 1e3:g} ms"
                             for k, v in _limits(ttft, tpot).items()), wins=wins)
    for hw, lines in notes.items():
        for line in lines:
            print_out(f"{hw}: {line}")


def _swapped_stacks(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet,
                    stat="p90", limits=None, total_gpus=None):
    """For the silicon/software split: the first rack's silicon swept on every other rack's stack.
    Returns ({rack: stack}, {stack: Summary})."""
    from rubinperf.specs.select import swapped_stack_setups
    from rubinperf.serving.pareto import summarize

    swapped = {}
    for stack, setup in swapped_stack_setups(setups).items():
        got = summarize(_run_sweep([setup], decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb,
                                   quiet=quiet, stat=stat, limits=limits, total_gpus=total_gpus))
        if got:
            swapped[stack] = got[0]
    return {hw.name: hw.stack for _, hw, _ in setups}, swapped


def _levels(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise SpecError(f"--at-interactivity: expected numbers like 196,387, got {part!r}") from None
        if not v > 0 or v != v or v == float("inf"):
            raise SpecError(f"--at-interactivity: expected positive tokens/s per user, got {part!r}")
        out.append(v)
    return out
