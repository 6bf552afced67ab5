"""`rubinperf pareto` and `rubinperf compare`: the serving model from the command line (thin).

Registered in cli.py; imports of the model and of matplotlib happen inside the commands.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from rubinperf.cli.options import STACK_OPT, WIDE_OPT, apply_wide
from rubinperf.errors import SpecError

MODEL_OPT = typer.Option("deepseek-v4.1-flash", "--model", "-m", help="Bundled model name or a path to a TOML file.")
HW_OPT = typer.Option(None, "--hardware", "-H", help="Rack (repeatable). Default: gb300-nvl72 and vr-nvl72; the first is the baseline of ratios.")
WORKLOAD_OPT = typer.Option("agentx", "--workload", "-w", help="Bundled workload (examples/: agentx, chat-8k1k) or a path to a TOML file.")
DECODE_OPT = typer.Option(None, "--decode-layout", "-l", help="Decode engine shape, repeatable. Default: the engine shapes of each rack's stack (serving.decode_layouts: tp4, dep16, dep32 on GB300; tp8, dep16, dep32 on Rubin).")
PREFILL_OPT = typer.Option(None, "--prefill-layout", help="Prefill engine shape, repeatable. Default: the workload's (dep2).")
MAX_BATCH_OPT = typer.Option(1024, "--max-batch", help="Largest decode batch swept (requests per rank for DEP, per instance for TP).")
K_OPT = typer.Option(None, "--draft-tokens", "-k", help="Draft length k. Default: the model's (5); another k keeps the per-token acceptance rate.")
ACC_OPT = typer.Option(None, "--acceptance", help="Mean tokens emitted per verify step. Default: the model's (3.51 at k = 5).")
EPLB_OPT = typer.Option(True, "--eplb/--no-eplb", help="Expert load balancing on (default) or off: sets the decode and prefill balancedness.")
SET_OPT = typer.Option(None, "--set", "-s", help=(
    "What-if override, repeatable: --set hbm_bandwidth=30TB/s, --set workload.prefix_hit_rate=0.9, "
    "--set model.mean_accepted_tokens=3. Prefix a rack name to change one rack only: "
    "--set gb300-nvl72:dp_sync_per_rank=0.3ms."))
JSON_OPT = typer.Option(False, "--json", help="Print JSON records instead of tables.")
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Print nothing but errors (exit status still tells).")
QUIET_PLOT_OPT = typer.Option(False, "--quiet", "-q", help="Print nothing but errors (exit status still tells; --plot still writes).")


def _setups(model: str, hardware, workload: str, sets, stacks=None) -> list:
    """(model, platform, workload) per rack (hardware + its stack), with the `--set` overrides that apply to it."""
    from rubinperf.engine import pair_stacks

    from rubinperf.scenario import DEFAULT_HARDWARE
    from rubinperf.specs.stack import load_platform
    from rubinperf.specs.model import load_model
    from rubinperf.specs.overrides import apply_overrides
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


STAT_OPT = typer.Option("p90", "--interactivity-stat",
                        help="Statistic of tokens/s per user the frontier and --at-interactivity use: p90 (the speed "
                             "90% of users reach; the published figures' statistic), p50 or mean.")


TTFT_OPT = typer.Option(None, "--ttft", help="Keep only points whose time to first token (prefix loads + prefill + "
                        "KV transfer) is at most this: 2s, 500ms or 0.5 (seconds).")
TPOT_OPT = typer.Option(None, "--tpot", help="Keep only points whose time per output token (1 / tokens/s per user, "
                        "at --interactivity-stat) is at most this: 20ms or 0.02 (seconds).")


GPUS_OPT = typer.Option(None, "--total-gpus", help="Size the deployment in whole instances within this many GPUs "
                        "(e.g. 72: 7P1D is 7 DEP2 prefill and 1 DEP32 decode instance... as the seed writes them); "
                        "throughput is counted over all of them. Default: a continuous prefill/decode ratio.")


def _check_gpus(total_gpus):
    if total_gpus is not None and total_gpus < 1:
        raise SpecError(f"--total-gpus: expected a positive number of GPUs, got {total_gpus}")
    return total_gpus


def _limits(ttft, tpot) -> dict:
    from rubinperf.specs.overrides import parse_value

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
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("sweeping {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None)

        def tick(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

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


def pareto(
    model: str = MODEL_OPT,
    hardware: Optional[List[str]] = HW_OPT,
    stack: Optional[List[str]] = STACK_OPT,
    workload: str = WORKLOAD_OPT,
    decode_layout: Optional[List[str]] = DECODE_OPT,
    prefill_layout: Optional[List[str]] = PREFILL_OPT,
    max_batch: int = MAX_BATCH_OPT,
    draft_tokens: Optional[int] = K_OPT,
    acceptance: Optional[float] = ACC_OPT,
    eplb: bool = EPLB_OPT,
    interactivity_stat: str = STAT_OPT,
    ttft: Optional[str] = TTFT_OPT,
    tpot: Optional[str] = TPOT_OPT,
    total_gpus: Optional[int] = GPUS_OPT,
    sets: Optional[List[str]] = SET_OPT,
    as_json: bool = JSON_OPT,
    frontier_only: bool = typer.Option(False, "--frontier-only", help="JSON: only the frontier points (default: every swept point, with on_frontier)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Also write the frontier chart to FILE (.png, .svg or .pdf; needs matplotlib: pip install 'rubinperf[plot]')."),
    rows: int = typer.Option(14, "--rows", help="Frontier rows shown per rack in the table (0: all)."),
    chart: bool = typer.Option(True, "--chart/--no-chart", help="Draw the frontier in the terminal after the tables."),
    quiet: bool = QUIET_PLOT_OPT,
    wide: bool = WIDE_OPT,
):
    """Pareto frontier of tokens/s per GPU against tokens/s per user, per rack.

    Sweeps the decode batch (every value up to 128, then geometric steps to --max-batch) over
    decode layouts and racks; the prefill pool (DEP2 by default) is sized to keep up with
    the decode pool. Throughput counts cached + uncached input + output tokens over every
    GPU of both pools; interactivity is the decode speed one user sees, with speculative
    decoding (k drafted tokens, mean acceptance). Points whose KV cache, weights or
    Engram tables do not fit in HBM are reported as infeasible, with the reason.

    Examples:

      rubinperf pareto

      rubinperf pareto -w chat-8k1k -H vr-nvl72 --plot frontier.svg

      rubinperf pareto --set workload.prefix_hit_rate=0.918 --json --frontier-only
    """
    from rubinperf.render import tables as report
    from rubinperf.pareto import point_records, summarize
    from rubinperf.render.serving import chart_width, check_plot_path, frontier_chart, pareto_tables, plot_file

    from rubinperf.cli.options import check_output_flags

    check_output_flags(as_json, quiet=quiet)
    apply_wide(wide)
    if rows < 0:
        raise SpecError(f"--rows: expected 0 or more, got {rows}")
    if plot:
        check_plot_path(plot)
    setups = _setups(model, hardware, workload, sets, stack)
    from rubinperf.interactivity import check_stat

    check_stat(interactivity_stat)
    sw = _run_sweep(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet=quiet,
                    stat=interactivity_stat, limits=_limits(ttft, tpot), total_gpus=_check_gpus(total_gpus))
    _check_any(None, sw)
    summaries = summarize(sw)
    records = [r for s in summaries for r in point_records(s, frontier_only=frontier_only and as_json)]
    if plot:
        m, _, w = setups[0]
        plot_file(records, plot, title=f"{m.name}, workload {w.name}")
    if as_json:
        report.emit_text(report.to_json(records))
        return
    if quiet:
        return
    pareto_tables(records, _notes(summaries, sw), rows=rows)
    if chart:
        report.print_out(frontier_chart(records, width=chart_width()))
    if plot:
        report.print_out(f"wrote {plot}")


def compare(
    model: str = MODEL_OPT,
    hardware: Optional[List[str]] = HW_OPT,
    stack: Optional[List[str]] = STACK_OPT,
    workload: str = WORKLOAD_OPT,
    at_interactivity: str = typer.Option("196,387", "--at-interactivity", help="Comma-separated tokens/s per user at which to compare throughput."),
    decode_layout: Optional[List[str]] = DECODE_OPT,
    prefill_layout: Optional[List[str]] = PREFILL_OPT,
    max_batch: int = MAX_BATCH_OPT,
    draft_tokens: Optional[int] = K_OPT,
    acceptance: Optional[float] = ACC_OPT,
    eplb: bool = EPLB_OPT,
    interactivity_stat: str = STAT_OPT,
    ttft: Optional[str] = TTFT_OPT,
    tpot: Optional[str] = TPOT_OPT,
    total_gpus: Optional[int] = GPUS_OPT,
    sets: Optional[List[str]] = SET_OPT,
    kernels: int = typer.Option(6, "--kernels", help="Decode kernels listed per compared point (0: no kernel tables)."),
    as_json: bool = JSON_OPT,
    quiet: bool = QUIET_OPT,
    wide: bool = WIDE_OPT,
):
    """Racks side by side: peak throughput, throughput at given interactivity, best single-user speed.

    Each figure comes from the rack's Pareto frontier (see `rubinperf pareto`), with ratio
    columns against the first rack, a table that splits each throughput ratio into its terms
    (requests per decode GPU, decode step time, acceptance, share of GPUs in decode), and the
    decode kernels' GPU time per output token at each compared point. $ per million tokens
    (input and output apart) and tokens/s per kW come from the racks' specs.

    Examples:

      rubinperf compare

      rubinperf compare --at-interactivity 100,200,400,800 -w chat-8k1k

      rubinperf compare -H gb200-nvl72 -H gb300-nvl72 -H vr-nvl72 --json
    """
    from rubinperf.render import tables as report
    from rubinperf.pareto import compare_records, summarize
    from rubinperf.render.serving import compare_tables

    from rubinperf.cli.options import check_output_flags

    check_output_flags(as_json, quiet=quiet)
    apply_wide(wide)
    levels = _levels(at_interactivity)
    if kernels < 0:
        raise SpecError(f"--kernels: expected 0 or more, got {kernels}")
    setups = _setups(model, hardware, workload, sets, stack)
    from rubinperf.interactivity import check_stat

    check_stat(interactivity_stat)
    sw = _run_sweep(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet=quiet,
                    stat=interactivity_stat, limits=_limits(ttft, tpot), total_gpus=_check_gpus(total_gpus))
    _check_any(None, sw)
    summaries = summarize(sw)
    stacks, swapped = _swapped_stacks(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb,
                                      quiet, interactivity_stat, _limits(ttft, tpot), total_gpus)
    records = compare_records(summaries, levels, stacks=stacks, swapped=swapped)
    if as_json:
        report.emit_text(report.to_json(records))
        return
    if quiet:
        return
    compare_tables(records, kernels=kernels, note=f"decode batch swept from 1 to {max_batch} per rank (DEP) or instance (TP)"
                   + "".join(f"; only points with {k.split('_')[1].upper()} ≤ {v * 1e3:g} ms"
                             for k, v in _limits(ttft, tpot).items()))
    notes = _notes(summaries, sw)
    for hw, lines in notes.items():
        for line in lines:
            report.print_out(f"{hw}: {line}")


def _swapped_stacks(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet,
                    stat="p90", limits=None, total_gpus=None):
    """For the silicon/software split: the first rack's silicon run on every other rack's stack (one more
    sweep per stack that differs from the first rack's). Returns ({rack: stack}, {stack: Summary})."""
    from rubinperf.pareto import summarize
    from rubinperf.specs.stack import platform

    stacks = {hw.name: hw.stack for _, hw, _ in setups}
    m0, hw0, w0 = setups[0]
    swapped = {}
    for _, hw, _ in setups[1:]:
        if hw.stack == hw0.stack or hw.stack in swapped:
            continue
        mixed = platform(hw0.hardware_spec(), hw.stack_spec())   # --set overrides of each part kept
        sw = _run_sweep([(m0, mixed, w0)], decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb,
                        quiet=quiet, stat=stat, limits=limits, total_gpus=total_gpus)
        got = summarize(sw)
        if got:
            swapped[hw.stack] = got[0]
    return stacks, swapped


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
