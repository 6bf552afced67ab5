"""`rubinperf report`: one self-contained HTML file of a comparison (the frontier with the published points and
targets, the compare table, a step's kernels, the sensitivity tornado, the sources of every spec field, the
command and the versions); and the `--save-dir` bundle of every command that prices points.

Thin: the records come from the core (rubinperf.serving, rubinperf.step, rubinperf.analysis); the page, the charts
and the bundle from rubinperf.render (html, svg, bundle).
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from rubinperf.cli.options import LAYOUT_WORDS, SWEEP, complete_words, shared_options
from rubinperf.cli.bundles import (limit_lines, page, sources_part, spec_files, check_save_dir, frontier_figure,
                                   frontier_parts, new_bundle)
from rubinperf.errors import SpecError

DEFAULT_OUTPUT = "rubinperf-report.html"
STEP_LAYOUT = "dep32"
SWING = 0.1


def step_records(setups, layout: str) -> tuple[list[dict], list]:
    """One step per rack at `layout` (its default operating point): (records, (model, platform, layout, point))."""
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.estimates import check_finite
    from rubinperf.step.point import make_point
    from rubinperf.step.records import step_record
    from rubinperf.step.timing import step

    lay = parse_layout(layout)
    records, points = [], []
    for m, hw, _ in setups:
        point = make_point(m, hw, lay)
        r = step(m, hw, lay, point)
        check_finite(r)
        records.append(step_record(r))
        points.append((m, hw, lay, point))
    return records, points


def tornado_records(points, swing: float = SWING) -> list[list[dict]]:
    from rubinperf.analysis.elasticity import numeric_sensitivity

    return [numeric_sensitivity(m, hw, lay, point, metric="step-time", swing=swing) for m, hw, lay, point in points]


def serve_records(setups, layout: str, concurrency: str, draft_tokens, acceptance, eplb) -> tuple[list[dict], str]:
    """`rubinperf serve`'s records on each rack at `layout` and each concurrency (ISL 8K / OSL 1K, its defaults), and
    the command that gives the same."""
    from rubinperf.serving.aggregated import RequestMix, closed_loop, engine, parse_concurrency
    from rubinperf.specs.layout import check_layout, parse_layout

    levels = parse_concurrency(concurrency)
    lay = parse_layout(layout)
    mix = RequestMix(isl=8192.0, osl=1024.0, range_ratio=0.0, convention="vllm", prefix_hit=0.0, turn_gap_s=0.0)
    out = []
    for m, hw, _ in setups:
        check_layout(lay, m, hw)
        e = engine(m, hw, lay, mix, draft_tokens=draft_tokens, acceptance=acceptance, eplb=eplb, suggest=True)
        out += closed_loop(e, levels).records()
    return out, f"rubinperf serve -H RACK -l {layout} -c {concurrency} --isl 8K --osl 1K"


def validation_records(files, run: bool) -> tuple[list[dict] | None, list[dict] | None]:
    """(point records, ledger families), each None when not known: read from `rubinperf validate --json` files,
    or, with `run`, what `rubinperf validate` computes (every published point; the accuracy ledger's families where
    the core has one). Neither: (None, None), the page says how to get them."""
    if files:
        import json

        points, families = None, None
        for name in files:
            try:
                data = json.loads(open(name, encoding="utf-8").read())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise SpecError(f"--validation {name}: not a `rubinperf validate --json` output ({exc})") from None
            if isinstance(data, dict) and isinstance(data.get("families"), list):
                families = (families or []) + data["families"]
            elif isinstance(data, list) and all(isinstance(r, dict) and {"id", "in_band", "band"} <= set(r)
                                                for r in data):
                points = (points or []) + data
            else:
                raise SpecError(f"--validation {name}: expected the JSON of `rubinperf validate --json` (a list of "
                                "point records) or of `rubinperf validate --ledger --json` ({families, ...})")
        return points, families
    if not run:
        return None, None
    from rubinperf.analysis.validate import load_points, validate

    from rubinperf.analysis.ledger import all_families, apply_bands, ledger   # as `rubinperf validate` runs it

    records = validate(load_points())
    fams = all_families(records)
    apply_bands(records, fams)
    return records, ledger(records, fams)["families"]


@shared_options(SWEEP)
def report(
    *, model, hardware, stack, workload,
    at_interactivity: Annotated[str, typer.Option(
        "--at-interactivity",
        help="Comma-separated tokens/s per user: the targets drawn and compared at.")] = "196,387",
    decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, interactivity_stat, ttft, tpot,
    total_gpus, sets,
    layout: Annotated[str, typer.Option(
        "--layout", help="The engine step of the breakdown and the tornado: dep<N> or tp<N> (-l is --decode-layout).",
        autocompletion=complete_words(*LAYOUT_WORDS))] = STEP_LAYOUT,
    serve_layout: Annotated[str, typer.Option(
        "--serve-layout", help="The aggregated engine of the serving section, on every rack (as `rubinperf serve "
                               "-l`).")] = "tp2",
    concurrency: Annotated[str, typer.Option(
        "--concurrency", "-c", help="Clients of the serving section's closed loop (as `rubinperf serve -c`): 64 or "
                                    "16,64.")] = "64",
    validation: Annotated[Optional[List[str]], typer.Option(
        "--validation", help="A `rubinperf validate --json` output (its point records, or the ledger of --ledger "
                             "--json) to summarise in the validation section; repeatable.")] = None,
    run_validate: Annotated[bool, typer.Option(
        "--validate", help="Run `rubinperf validate` for the validation section (every published point and the "
                           "accuracy ledger: seconds more). Default: the section says how to add it.")] = False,
    output: Annotated[str, typer.Option(
        "--output", "-o",
        help="The HTML file to write (replaced whole; never a directory or a device).")] = DEFAULT_OUTPUT,
    save_dir, quiet,
):
    """Write one self-contained HTML report. Its first screen: one sentence per question (peak throughput, each
    interactivity target, one user) with the ratio of the racks, its band, what sets it, and a banner where a
    figure rests on preview specs. Then where the ratios come from (and silicon vs software), cost and power with
    their basis, the aggregated engine's TTFT/TPOT percentiles (`rubinperf serve`), the validation verdict
    (`rubinperf validate`), the Pareto frontier with the published points, one engine step's kernels, the
    sensitivity tornado, the source of every spec field read, and the command and versions.

    The file needs no network to be read (inline styles and SVG charts, no script), fits a phone's width and
    names no folder of this machine.
    The step breakdown and the tornado are of --layout (default dep32) at its default operating point, as
    `rubinperf estimate -l LAYOUT` prices it; the tornado's elasticities are central differences of the
    numeric step (`rubinperf sensitivity` gives sympy's derivative).

    Examples:

      rubinperf report

      rubinperf report -H gb200-nvl72 -H gb300-nvl72 -H vr-nvl72 -o racks.html

      rubinperf report -w chat-8k1k --layout tp8 --save-dir run1

      rubinperf report --validate -o checked.html
    """
    from pathlib import Path

    from rubinperf import files
    from rubinperf.cli import serving as S
    from rubinperf.serving.pareto import compare_records, point_records, summarize
    from rubinperf.specs.select import serving_setups

    if not output.lower().endswith((".html", ".htm")):
        raise SpecError(f"--output {output}: expected a file ending in .html")
    if not Path(output).parent.is_dir():
        raise SpecError(f"--output {output}: no such directory {Path(output).parent}")
    files.regular_target(Path(output))
    check_save_dir(save_dir)
    levels = S._levels(at_interactivity)
    setups = serving_setups(model, hardware, workload, sets, stack)
    from rubinperf.serving.interactivity import check_stat

    check_stat(interactivity_stat)
    limits = S._limits(ttft, tpot)
    sw = S._run_sweep(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance, eplb, quiet=True,
                      stat=interactivity_stat, limits=limits, total_gpus=S._check_gpus(total_gpus))
    S._check_any(None, sw)
    summaries = summarize(sw)
    points = [r for s in summaries for r in point_records(s)]
    stacks, swapped = S._swapped_stacks(setups, decode_layout, prefill_layout, max_batch, draft_tokens, acceptance,
                                        eplb, True, interactivity_stat, limits, total_gpus)
    compared = compare_records(summaries, levels, stacks=stacks, swapped=swapped)
    from rubinperf.analysis.bands import compare_bands

    compare_bands(compared, summaries)   # low/high from the assumed fields' ranges
    steps, step_points = step_records(setups, layout)
    tornados = tornado_records(step_points)
    m, _, w = setups[0]
    platforms = [hw for _, hw, _ in setups]
    served, serve_cmd = serve_records(setups, serve_layout, concurrency, draft_tokens, acceptance, eplb)
    checked, families = validation_records(validation, run_validate)

    from rubinperf.render import manager as M
    from rubinperf.render.html import compare_section, sensitivity_section, step_section

    frontier_html, frontier_svg = frontier_parts(points, levels)
    previews = M.preview_reasons(platforms)
    basis = {hw.name: {"price_usd_per_gpu_hour": hw.price_usd_per_gpu_hour, "gpu_power_w": hw.gpu_power_w,
                       "source": hw.sources.get("hardware.economics", "")} for hw in platforms}
    parts = {"banner": M.preview_banner(previews),
             "headline": M.headline_section(compared, previews, M.layout_reach(points)),
             "ratios": M.ratios_section(compared, previews), "compare": compare_section(compared),
             "money": M.money_section(compared, basis, previews),
             "serving": M.serving_section(served, serve_cmd, previews),
             "validation": M.ledger_section(checked, families),
             "frontier": frontier_html, "step": step_section(steps),
             "sensitivity": sensitivity_section(tornados, SWING), "sources": sources_part(m, platforms, w)}
    others = [hw.name for hw in platforms[1:]]
    title = (f"{', '.join(others)} against {platforms[0].name}" if others else f"{platforms[0].name}")
    title += f": {m.name}, workload {w.name}"
    html_page = page(title, parts, limit_lines(limits, total_gpus))
    files.write_atomic(output, html_page)
    if save_dir is not None:
        from rubinperf.render import plots, svg

        b = new_bundle()
        b.table("pareto", points, "every swept point of every rack, with on_frontier")
        b.table("compare", compared, "the racks compared at peak, at each target and at one user")
        b.table("estimate", steps, f"one {layout} step per rack")
        b.table("sensitivity", [r for group in tornados for r in group], "elasticities of the step time")
        b.chart("frontier", frontier_svg, "the Pareto frontier", frontier_figure(points, levels))
        for i, (group, rec) in enumerate(zip(tornados, steps)):
            name = f"{rec['hardware']}-{rec['layout']}"
            b.chart(f"tornado-{name}", svg.tornado_svg(group, SWING, plots.parameter_label),
                    f"sensitivity tornado of the step on {rec['hardware']}",
                    lambda group=group: plots.tornado_figure(group, SWING, top=12))
            b.chart(f"kernels-{name}", svg.kernel_bars_svg(rec), f"time of each op of the step on {rec['hardware']}")
        b.add("report.html", html_page, "the HTML report (self-contained)")
        spec_files(b, m, platforms, w)
        b.write(save_dir)
    if not quiet:
        from rubinperf.render.output import emit_text

        emit_text(f"wrote {output}" + (f" and {save_dir}/" if save_dir else ""))
