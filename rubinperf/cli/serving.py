"""`rubinperf pareto` and `rubinperf compare`: the serving model from the command line (thin).

Registered in rubinperf/cli/__init__.py; imports of the model, the renderers and matplotlib happen
inside the commands.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rubinperf.cli.options import SWEEP, QuietPlot, apply_wide, check_output_flags, shared_options
from rubinperf.errors import SpecError, shorten



MAX_TOTAL_GPUS = 10_000  # about 140 NVL72 racks: a deployment's size is searched instance by instance


def _check_gpus(total_gpus, setups=()):
    """--total-gpus: from the fewest GPUs one prefill and one decode instance need (2) to MAX_TOTAL_GPUS."""
    if total_gpus is not None and not 2 <= total_gpus <= MAX_TOTAL_GPUS:
        raise SpecError(f"--total-gpus {total_gpus}: expected 2 to {MAX_TOTAL_GPUS:,} GPUs (one prefill and one "
                        "decode instance at least)")
    return total_gpus


# What a bare number given to --ttft or --tpot means: None refuses it (the user writes 20ms or 2s; aiconfigurator's
# flags read milliseconds, rubinperf's first releases read seconds, so a bare number would be silently one or the
# other); 1e-3 would read it as milliseconds.
BARE_LIMIT_SCALE = None
LIMIT_RANGE_S = (1e-6, 3600.0)  # a microsecond to an hour: outside, a unit mistake


def _limits(ttft, tpot) -> dict:
    from rubinperf.units import parse_quantity

    out = {}
    for name, text, key in (("ttft", ttft, "max_ttft_s"), ("tpot", tpot, "max_tpot_s")):
        if text is None:
            continue
        v = parse_quantity(str(text), "s", f"--{name} {shorten(str(text))}", BARE_LIMIT_SCALE)
        lo, hi = LIMIT_RANGE_S
        if not lo <= v <= hi:
            raise SpecError(f"--{name} {shorten(str(text))}: expected a time from 1us to 1h, such as 20ms or 2s")
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


def parse_prefix_hit(text) -> float:
    """--prefix-hit 0.9 or 90% -> 0.9, in [0, 1]."""
    text = str(text).strip()
    try:
        hit = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise SpecError(f"--prefix-hit {shorten(text)!r}: expected a fraction such as 0.9 or a percentage such as 90%") from None
    if not 0 <= hit <= 1:
        raise SpecError(f"--prefix-hit {shorten(text)}: expected 0 to 1 (0% to 100%)")
    return hit


def workload_sets(isl, osl, prefix_hit, turn_gap=None) -> tuple[list[str], str]:
    """--isl/--osl/--prefix-hit/--turn-gap as workload `--set`s (applied after the user's), and the note to print: a
    length changed with the prefix hit rate kept says so."""
    sets = []
    if turn_gap is not None:
        import math

        if not (0 <= turn_gap <= 3600 and math.isfinite(turn_gap)):
            raise SpecError(f"--turn-gap {turn_gap:g}: expected 0 to 3,600 seconds between a reply and the next turn")
        sets.append(f"workload.turn_gap_s={float(turn_gap)!r}")
    for name, value, field in (("--isl", isl, "input_tokens_per_turn"), ("--osl", osl, "output_tokens_per_turn")):
        if value is not None:
            if not 1 <= value <= 1e7:
                raise SpecError(f"{name} {value:g}: expected 1 to 10,000,000 tokens")
            sets.append(f"workload.{field}={value!r}")
    if prefix_hit is not None:
        sets.append(f"workload.prefix_hit_rate={parse_prefix_hit(prefix_hit)!r}")
    note = ""
    if isl is not None and prefix_hit is None:
        note = "--isl changed the input length and kept the workload's prefix hit rate (give --prefix-hit to set it)"
    return sets, note


def _setups(model, hardware, workload, sets, stack, isl, osl, prefix_hit, turn_gap=None) -> tuple[list, str]:
    """(model, platform, workload) per rack with --set and --isl/--osl/--prefix-hit applied, and the note to print
    when --isl kept the workload's prefix hit rate."""
    from rubinperf.specs.select import serving_setups

    extra, workload_note = workload_sets(isl, osl, prefix_hit, turn_gap)
    setups = serving_setups(model, hardware, workload, list(sets or []) + extra, stack)
    if workload_note:
        w = setups[0][2]
        workload_note = (f"--isl {isl:,.0f}: workload {w.name}'s prefix hit rate of {100 * w.prefix_hit_rate:.1f}% kept "
                         "(give --prefix-hit to change it)")
    return setups, workload_note


def limits_line(sw, stat: str, total_gpus=None) -> str:
    """The limits a sweep applied, as one line under each table."""
    parts = [p for p in (sw.limits_text(stat),) if p]
    if total_gpus is not None:
        parts.append(f"at most {total_gpus:,} GPUs per deployment")
    parts.append(f"tok/s/user is the {'mean' if stat == 'mean' else stat.upper()} over users")
    return "limits: " + ", ".join(parts) if len(parts) > 1 else parts[0]


def _check_limits_leave_points(sw) -> None:
    """No rack has a point that meets --ttft/--tpot: an error naming the limit (one rack emptied: a note)."""
    if sw.max_ttft_s is None and sw.max_tpot_s is None:
        return
    why = {hw: sw.emptied_by(hw) for hw in sw.hardware_names()}
    if why and all(why.values()):
        raise SpecError("; ".join(f"{hw}: {text}" for hw, text in why.items()))


def _notes(summaries, sw, limits: str = "", workload_note: str = "") -> dict:
    notes: dict[str, list[str]] = {}
    for s in summaries:
        notes[s.hardware] = s.infeasible_reasons()
        if workload_note:
            notes[s.hardware].insert(0, workload_note)
        emptied = sw.emptied_by(s.hardware)
        if emptied:
            notes[s.hardware].insert(0, emptied)
        if limits:
            notes[s.hardware].append(limits)
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
               limits, total_gpus, workload_note: str = ""):
    """(summaries, notes, summaries per serving, the P/D sweep or None) of --serving disagg, agg or both: the P/D
    sweep's frontier, each aggregated engine's closed-loop frontier, or both in one Summary per rack."""
    from rubinperf.serving.agg_frontier import agg_loops, agg_summaries, check_serving, merged
    from rubinperf.serving.pareto import summarize

    check_serving(serving)
    if serving == "agg" and total_gpus is not None:
        raise SpecError("--total-gpus: sizes the prefill and decode pools of disaggregated serving; "
                        "not with --serving agg")
    disagg, agg, notes, sw = [], [], {}, None
    if serving != "agg":
        sw = _run_sweep(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet=quiet,
                        stat=stat, limits=limits, total_gpus=_check_gpus(total_gpus, setups))
        _check_any(None, sw)
        disagg = summarize(sw)
        notes = _notes(disagg, sw, workload_note=workload_note)
    if serving != "disagg":
        loops, skipped = agg_loops(setups, decode_layout, draft_tokens, acceptance, eplb, max_batch=max_batch)
        if not loops:
            raise SpecError("no aggregated engine fits any rack: " + "; ".join(skipped))
        agg = agg_summaries(loops, stat, **limits)
        for line in skipped:
            hw, _, text = line.partition(": ")
            notes.setdefault(hw, []).append("skipped " + text)
    chosen = {"disagg": disagg, "agg": agg}.get(serving) or merged(disagg, agg)
    return chosen, notes, {"disagg": disagg, "agg": agg}, sw


def _swept(save_dir, model, hardware, workload, sets, stack, isl, osl, prefix_hit, serving, decode_layout,
           prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet, stat, ttft, tpot, total_gpus, turn_gap=None):
    """pareto's and compare's sweep, after their own checks: --save-dir checked, the setups built, the statistic
    checked, then (setups, _summaries(...))."""
    from rubinperf.cli.bundles import check_save_dir

    check_save_dir(save_dir)
    setups, workload_note = _setups(model, hardware, workload, sets, stack, isl, osl, prefix_hit, turn_gap)
    from rubinperf.serving.interactivity import check_stat

    check_stat(stat)
    return setups, _summaries(serving, setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb,
                              quiet, stat, _limits(ttft, tpot), total_gpus, workload_note)


@shared_options(SWEEP)
def pareto(
    *, model, hardware, stack, workload, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb,
    interactivity_stat, ttft, tpot, total_gpus, isl, osl, prefix_hit, turn_gap, sets, serving, as_json, as_csv,
    frontier_only: Annotated[bool, typer.Option(
        "--frontier-only", help="JSON: only the frontier points (default: every swept point, with on_frontier).")] = False,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", help="Also write the frontier chart to FILE (.png, .svg or .pdf; needs matplotlib: "
                       "pip install 'rubinperf[plot]').")] = None,
    rows: Annotated[int, typer.Option("--rows", help="Frontier rows shown per rack in the table (0: all).")] = 14,
    chart: Annotated[bool, typer.Option(
        "--chart/--no-chart", help="Draw the frontier in the terminal after the tables.")] = True,
    quiet: QuietPlot = False,
    wide, save_dir,
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

    check_output_flags(as_json, as_csv, quiet)
    apply_wide(wide)
    if rows < 0:
        raise SpecError(f"--rows: expected 0 or more, got {rows}")
    if plot:
        plots.check_plot_path(plot)
    setups, (summaries, notes, _, sw) = _swept(save_dir, model, hardware, workload, sets, stack, isl, osl, prefix_hit,
                                               serving, decode_layout, prefill_layout, max_batch, draft_tokens,
                                               acceptance, eplb, quiet, interactivity_stat, ttft, tpot, total_gpus,
                                               turn_gap)
    if sw is not None:
        _check_limits_leave_points(sw)
        line = limits_line(sw, interactivity_stat, total_gpus)
        for hw in dict.fromkeys(s.hardware for s in summaries):
            notes.setdefault(hw, []).append(line)
    records = [r for s in summaries for r in point_records(s, frontier_only=frontier_only and (as_json or as_csv))]
    if plot:
        m, _, w = setups[0]
        plots.plot_frontier(records, plot, title=f"{m.name}, workload {w.name}")
    if save_dir is not None:
        from rubinperf.cli.bundles import save_pareto

        save_pareto(save_dir, records, setups, plots.INTERACTIVITY_TARGETS)
    if as_json or as_csv:
        _records_out(records, as_csv)
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
    if save_dir is not None:
        print_out(f"wrote {save_dir}/")


def _wins(summaries) -> dict:
    """{rack: [(serving, from, to) tok/s/user]} where each serving gives the higher throughput."""
    from rubinperf.serving.agg_frontier import winners

    return {s.hardware: winners(s) for s in summaries}


def _json(records) -> None:
    from rubinperf.render.output import emit_text, to_json

    emit_text(to_json(records))


def _records_out(records, as_csv: bool) -> None:
    from rubinperf.render.output import emit_text, to_csv

    emit_text(to_csv(records)) if as_csv else _json(records)


@shared_options(SWEEP)
def compare(
    *, model, hardware, stack, workload,
    at_interactivity: Annotated[str, typer.Option(
        "--at-interactivity", help="Comma-separated tokens/s per user at which to compare throughput.")] = "196,387",
    decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, interactivity_stat, ttft, tpot,
    total_gpus, isl, osl, prefix_hit, turn_gap, sets, serving,
    kernels: Annotated[int, typer.Option(
        "--kernels", help="Decode kernels listed per compared point (0: no kernel tables).")] = 6,
    baseline: Annotated[bool, typer.Option(
        "--baseline", help="With --set: compare each rack with itself without the overrides: per compared point "
                           "the figures before, after and the change, and the decode kernels that moved.")] = False,
    as_json, as_csv, quiet, wide, save_dir,
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

      rubinperf compare --set vr-nvl72:hbm_bandwidth=+20% --baseline
    """
    from rubinperf.serving.pareto import compare_records

    check_output_flags(as_json, as_csv, quiet)
    apply_wide(wide)
    levels = _levels(at_interactivity)
    if kernels < 0:
        raise SpecError(f"--kernels: expected 0 or more, got {kernels}")
    if baseline:
        if not sets:
            raise SpecError("--baseline compares a what-if with the unchanged specs: give the what-if with --set")
        if save_dir is not None or serving == "both":
            raise SpecError("--baseline: one serving (disagg or agg) and no --save-dir")
        from rubinperf.analysis.whatif import diff_compare

        sides = []
        for these in (None, sets):
            setups, (summaries, _, _, _) = _swept(None, model, hardware, workload, these, stack, isl, osl, prefix_hit,
                                                 serving, decode_layout, prefill_layout, max_batch, draft_tokens,
                                                 acceptance, eplb, quiet, interactivity_stat, ttft, tpot, total_gpus)
            sides.append(compare_records(summaries, levels, stacks={hw.name: hw.stack for _, hw, _ in setups}))
        diffs = [{**d, "sets": list(sets)} for d in diff_compare(*sides)]

        def diff_tables(ds):
            from rubinperf.render.serving import compare_whatif_tables

            compare_whatif_tables(ds, kernels)

        from rubinperf.cli.options import emit

        emit(diffs, as_json, diff_tables, as_csv=as_csv, quiet=quiet)
        return
    setups, (summaries, notes, per, sw) = _swept(save_dir, model, hardware, workload, sets, stack, isl, osl, prefix_hit,
                                                 serving, decode_layout, prefill_layout, max_batch, draft_tokens,
                                                 acceptance, eplb, quiet, interactivity_stat, ttft, tpot, total_gpus,
                                                 turn_gap)
    stacks, swapped = {hw.name: hw.stack for _, hw, _ in setups}, {}
    if serving != "agg":   # the silicon/software split is between P/D deployments
        stacks, swapped = _swapped_stacks(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance,
                                          eplb, quiet, interactivity_stat, _limits(ttft, tpot), total_gpus)
    if serving == "both":   # each rack's P/D deployment, then its aggregated engines
        agg = {s.hardware: s for s in per["agg"]}
        summaries = [x for d in per["disagg"] for x in (d, agg.get(d.hardware)) if x is not None]
    records = compare_records(summaries, levels, stacks=stacks, swapped=swapped)
    for rec in records:   # a rack the limits emptied: its unreachable points say which limit
        emptied = sw.emptied_by(rec["hardware"]) if sw is not None and not rec["reachable"] else ""
        if emptied:
            rec["note"] = emptied
    if save_dir is not None:
        from rubinperf.cli.bundles import save_compare
        from rubinperf.serving.pareto import point_records

        save_compare(save_dir, records, [r for s in summaries for r in point_records(s)], setups, levels)
    if as_json or as_csv:
        _records_out(records, as_csv)
        return
    if quiet:
        return
    from rubinperf.render.output import print_out
    from rubinperf.render.serving import compare_tables

    from rubinperf.serving.agg_frontier import merged

    wins = _wins(merged(per["disagg"], per["agg"])) if serving == "both" else None
    compare_tables(records, kernels=kernels, note=f"decode batch swept from 1 to {max_batch} per rank (DEP) or instance (TP)"
                   + ("; " + limits_line(sw, interactivity_stat, total_gpus) if sw is not None else ""), wins=wins)
    for hw, lines in notes.items():
        for line in lines:
            print_out(f"{hw}: {line}")
    if save_dir is not None:
        print_out(f"wrote {save_dir}/")


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
        if not 0.01 <= v <= 1e5:
            raise SpecError(f"--at-interactivity: expected 0.01 to 100,000 tokens/s per user, got {shorten(part)!r}")
        out.append(v)
    if len(out) > 64:
        raise SpecError(f"--at-interactivity: expected at most 64 levels, got {len(out):,}")
    return out
