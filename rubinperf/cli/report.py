"""`rubinperf report`: one self-contained HTML file of a comparison (the frontier with the published points and
targets, the compare table, a step's kernels, the sensitivity tornado, the sources of every spec field, the
command and the versions); and the `--save-dir` bundle of every command that prices points.

Thin: the records come from the core (rubinperf.serving, rubinperf.step, rubinperf.analysis); the page, the charts
and the bundle from rubinperf.render (html, svg, bundle).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rubinperf.cli.options import (DEFAULT_MODEL, LAYOUT_WORDS, DecodeLayouts, DraftLength, InteractivityStat,
                                   MaxBatch, Model, PrefillLayouts, Quiet, Racks, RackSets, SaveDir, Stacks,
                                   SweepAcceptance, SweepEplb, TotalGpus, Tpot, Ttft, Workload, command_line,
                                   complete_words)
from rubinperf.errors import SpecError

DEFAULT_OUTPUT = "rubinperf-report.html"
STEP_LAYOUT = "dep32"
SWING = 0.1
LIBRARIES = ("numpy", "sympy", "typer", "click", "rich", "tomli", "matplotlib")


# ---------------------------------------------------------------- what every bundle and report records


def versions() -> dict:
    import platform
    from importlib import metadata

    from rubinperf import __version__

    out = {"rubinperf": __version__, "python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def spec_records(model, platforms, workload=None) -> list[tuple[str, object]]:
    """(kind, record) of each spec a run read, once each: the model, each rack's hardware and stack, the workload."""
    out, seen = [("model", model)], set()
    for hw in platforms:
        for kind, rec in (("hardware", hw.hardware_spec()), ("stack", hw.stack_spec())):
            if (kind, rec.name, rec.path) not in seen:
                seen.add((kind, rec.name, rec.path))
                out.append((kind, rec))
    if workload is not None:
        out.append(("workload", workload))
    return out


def _sources_part(model, platforms, workload=None) -> str:
    from rubinperf.render.html import sources_section, spec_sources

    shown = [spec_sources(model, "model")] + [spec_sources(hw, "rack") for hw in platforms]
    if workload is not None:
        shown.append(spec_sources(workload, "workload"))
    return sources_section(shown)


def _spec_files(bundle, model, platforms, workload=None) -> None:
    from rubinperf.specs.loader import to_toml

    for kind, rec in spec_records(model, platforms, workload):
        bundle.add(f"specs/{kind}-{rec.name}.toml", to_toml(rec), f"the {kind} spec as this run used it "
                   "(--set applied), loadable again")


def _limit_lines(limits: dict, total_gpus) -> list[str]:
    out = [f"{k.split('_')[1].upper()} at most {v * 1e3:g} ms" for k, v in limits.items()]
    if total_gpus:
        out.append(f"at most {total_gpus} GPUs in whole instances")
    return out


def _page(title: str, parts: dict, limits=()) -> str:
    from rubinperf import __version__
    from rubinperf.render.html import report_html, run_section

    parts = {**parts, "run": run_section(command_line(), versions(), list(limits))}
    return report_html(title, f"rubinperf {__version__} · {command_line()}", parts)


def new_bundle():
    from rubinperf.render.bundle import Bundle

    return Bundle(command_line(), versions())


def check_save_dir(save_dir) -> None:
    if save_dir is not None:
        from rubinperf.render.bundle import check_save_dir as check

        check(save_dir)


# ---------------------------------------------------------------- the records of a comparison


def frontier_parts(records: list[dict], targets) -> tuple[str, str]:
    """(HTML section, SVG) of the frontier."""
    from rubinperf.render import plots, svg
    from rubinperf.render.html import frontier_section

    published = plots.published_points(records)
    chart = svg.frontier_svg(records, published, targets, plots.X_LABEL, plots.Y_LABEL, plots.layout_labels)
    return frontier_section(records, published, targets), chart


def frontier_figure(records, targets):
    from rubinperf.render import plots

    return lambda: plots.frontier_figure(records, targets=tuple(targets))


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


def report(
    model: Model = DEFAULT_MODEL,
    hardware: Racks = None,
    stack: Stacks = None,
    workload: Workload = "agentx",
    at_interactivity: Annotated[str, typer.Option(
        "--at-interactivity", help="Comma-separated tokens/s per user: the targets drawn and compared at.")] = "196,387",
    decode_layout: DecodeLayouts = None,
    prefill_layout: PrefillLayouts = None,
    max_batch: MaxBatch = 1024,
    draft_tokens: DraftLength = None,
    acceptance: SweepAcceptance = None,
    eplb: SweepEplb = True,
    interactivity_stat: InteractivityStat = "p90",
    ttft: Ttft = None,
    tpot: Tpot = None,
    total_gpus: TotalGpus = None,
    sets: RackSets = None,
    layout: Annotated[str, typer.Option(
        "--layout", help="Engine shape of the step breakdown and the sensitivity tornado (its default operating "
                         "point, as `rubinperf estimate -l LAYOUT`).",
        autocompletion=complete_words(*LAYOUT_WORDS))] = STEP_LAYOUT,
    output: Annotated[str, typer.Option(
        "--output", "-o", help="The HTML file to write (replaced whole; never a directory or a device).")] = DEFAULT_OUTPUT,
    save_dir: SaveDir = None,
    quiet: Quiet = False,
):
    """Write one self-contained HTML report: the Pareto frontier of every rack with the published points and the
    interactivity targets, the racks compared, one engine step's kernels, the sensitivity tornado, the source of
    every spec field read, and the exact command and versions.

    The file needs no network to be read (inline styles and SVG charts, no script) and fits a phone's width.

    Examples:

      rubinperf report

      rubinperf report -H gb200-nvl72 -H gb300-nvl72 -H vr-nvl72 -o racks.html

      rubinperf report -w chat-8k1k --layout tp8 --save-dir run1
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
    steps, step_points = step_records(setups, layout)
    tornados = tornado_records(step_points)

    from rubinperf.render.html import compare_section, sensitivity_section, step_section

    frontier_html, frontier_svg = frontier_parts(points, levels)
    m, _, w = setups[0]
    platforms = [hw for _, hw, _ in setups]
    parts = {"frontier": frontier_html, "compare": compare_section(compared), "step": step_section(steps),
             "sensitivity": sensitivity_section(tornados, SWING), "sources": _sources_part(m, platforms, w)}
    title = f"{m.name} on {', '.join(hw.name for hw in platforms)}: workload {w.name}"
    page = _page(title, parts, _limit_lines(limits, total_gpus))
    files.write_atomic(output, page)
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
        b.add("report.html", page, "the HTML report (self-contained)")
        _spec_files(b, m, platforms, w)
        b.write(save_dir)
    if not quiet:
        from rubinperf.render.output import emit_text

        emit_text(f"wrote {output}" + (f" and {save_dir}/" if save_dir else ""))


# ---------------------------------------------------------------- --save-dir of the other commands


def save_pareto(save_dir: str, records: list[dict], setups, targets) -> None:
    frontier_html, chart = frontier_parts(records, targets)
    m, _, w = setups[0]
    platforms = [hw for _, hw, _ in setups]
    b = new_bundle()
    b.table("pareto", records, "the swept points of every rack, with on_frontier")
    b.chart("frontier", chart, "the Pareto frontier", frontier_figure(records, targets))
    b.add("report.html", _page(f"{m.name}: Pareto frontier on workload {w.name}",
                               {"frontier": frontier_html, "sources": _sources_part(m, platforms, w)}),
          "the HTML report (self-contained)")
    _spec_files(b, m, platforms, w)
    b.write(save_dir)


def save_compare(save_dir: str, compared: list[dict], points: list[dict], setups, targets) -> None:
    from rubinperf.render.html import compare_section

    frontier_html, chart = frontier_parts(points, targets)
    m, _, w = setups[0]
    platforms = [hw for _, hw, _ in setups]
    b = new_bundle()
    b.table("compare", compared, "the racks compared at peak, at each interactivity and at one user")
    b.table("pareto", points, "the swept points of every rack the comparison reads, with on_frontier")
    b.chart("frontier", chart, "the Pareto frontier", frontier_figure(points, targets))
    b.add("report.html", _page(f"{m.name} on {', '.join(hw.name for hw in platforms)}: workload {w.name}",
                               {"frontier": frontier_html, "compare": compare_section(compared),
                                "sources": _sources_part(m, platforms, w)}),
          "the HTML report (self-contained)")
    _spec_files(b, m, platforms, w)
    b.write(save_dir)


def save_estimate(save_dir: str, records: list[dict], model, platforms) -> None:
    from rubinperf.render import svg
    from rubinperf.render.html import step_section

    b = new_bundle()
    b.table("estimate", records, "one row per rack, layout and phase (the per-op breakdown in the JSON)")
    b.table("breakdown", [{"hardware": r["hardware"], "layout": r["layout"], "phase": r["phase"], **op}
                          for r in records for op in r["breakdown"]], "every op of every step")
    for r in records:
        name = f"{r['hardware']}-{r['layout']}-{r['phase']}"
        b.chart(f"kernels-{name}", svg.kernel_bars_svg(r), f"time of each op of the {r['layout']} step on "
                f"{r['hardware']}")
    b.add("report.html", _page(f"{model.name}: one engine step", {"step": step_section(records),
                                                                   "sources": _sources_part(model, platforms)}),
          "the HTML report (self-contained)")
    _spec_files(b, model, platforms)
    b.write(save_dir)


def save_sensitivity(save_dir: str, records: list[dict], swing: float, top, model, platform) -> None:
    from rubinperf.render import plots, svg
    from rubinperf.render.html import sensitivity_section

    b = new_bundle()
    b.table("sensitivity", records, "one row per parameter: elasticity and the metric at each end of the swing")
    b.chart("tornado", svg.tornado_svg(records, swing, plots.parameter_label, top=top or 12), "the tornado",
            lambda: plots.tornado_figure(records, swing, top=top))
    b.add("report.html", _page(f"{model.name}: sensitivity", {
        "sensitivity": sensitivity_section([records], swing, top=top or 12, method="symbolic"),
        "sources": _sources_part(model, [platform])}), "the HTML report (self-contained)")
    _spec_files(b, model, [platform])
    b.write(save_dir)


def save_validate(save_dir: str, records: list[dict], points_path) -> None:
    from pathlib import Path

    from rubinperf.render.html import validation_section

    b = new_bundle()
    b.table("validate", records, "one row per published point: predicted, published, ratio, band")
    b.add("report.html", _page("rubinperf: predictions against published results",
                               {"validation": validation_section(records)}), "the HTML report (self-contained)")
    b.add("specs/points.toml", Path(points_path).read_text(encoding="utf-8"), "the points file validated")
    b.write(save_dir)
