"""What a report page and a `--save-dir` bundle record of any command (the command line, the versions, the specs
read and their sources), and the bundle of each command that prices points: estimate, pareto, compare,
sensitivity, validate (thin: records in, rubinperf.render.html / svg / bundle out).
"""

from __future__ import annotations

from rubinperf.cli.options import command_line

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


def sources_part(model, platforms, workload=None) -> str:
    from rubinperf.render.html import sources_section, spec_sources

    shown = [spec_sources(model, "model")] + [spec_sources(hw, "rack") for hw in platforms]
    if workload is not None:
        shown.append(spec_sources(workload, "workload"))
    return sources_section(shown)


def spec_files(bundle, model, platforms, workload=None) -> None:
    from rubinperf.specs.loader import to_toml

    for kind, rec in spec_records(model, platforms, workload):
        bundle.add(f"specs/{kind}-{rec.name}.toml", to_toml(rec), f"the {kind} spec as this run used it "
                   "(--set applied), loadable again")


def limit_lines(limits: dict, total_gpus) -> list[str]:
    out = [f"{k.split('_')[1].upper()} at most {v * 1e3:g} ms" for k, v in limits.items()]
    if total_gpus:
        out.append(f"at most {total_gpus} GPUs in whole instances")
    return out


def page(title: str, parts: dict, limits=()) -> str:
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


# ---------------------------------------------------------------- --save-dir of the other commands


def save_pareto(save_dir: str, records: list[dict], setups, targets) -> None:
    frontier_html, chart = frontier_parts(records, targets)
    m, _, w = setups[0]
    platforms = [hw for _, hw, _ in setups]
    b = new_bundle()
    b.table("pareto", records, "the swept points of every rack, with on_frontier")
    b.chart("frontier", chart, "the Pareto frontier", frontier_figure(records, targets))
    b.add("report.html", page(f"{m.name}: Pareto frontier on workload {w.name}",
                               {"frontier": frontier_html, "sources": sources_part(m, platforms, w)}),
          "the HTML report (self-contained)")
    spec_files(b, m, platforms, w)
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
    b.add("report.html", page(f"{m.name} on {', '.join(hw.name for hw in platforms)}: workload {w.name}",
                               {"frontier": frontier_html, "compare": compare_section(compared),
                                "sources": sources_part(m, platforms, w)}),
          "the HTML report (self-contained)")
    spec_files(b, m, platforms, w)
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
    b.add("report.html", page(f"{model.name}: one engine step", {"step": step_section(records),
                                                                   "sources": sources_part(model, platforms)}),
          "the HTML report (self-contained)")
    spec_files(b, model, platforms)
    b.write(save_dir)


def save_sensitivity(save_dir: str, records: list[dict], swing: float, top, model, platform) -> None:
    from rubinperf.render import plots, svg
    from rubinperf.render.html import sensitivity_section

    b = new_bundle()
    b.table("sensitivity", records, "one row per parameter: elasticity and the metric at each end of the swing")
    b.chart("tornado", svg.tornado_svg(records, swing, plots.parameter_label, top=top or 12), "the tornado",
            lambda: plots.tornado_figure(records, swing, top=top))
    b.add("report.html", page(f"{model.name}: sensitivity", {
        "sensitivity": sensitivity_section([records], swing, top=top or 12, method="symbolic"),
        "sources": sources_part(model, [platform])}), "the HTML report (self-contained)")
    spec_files(b, model, [platform])
    b.write(save_dir)


def save_serve(save_dir: str, records: list[dict], model, platform) -> None:
    b = new_bundle()
    b.table("serve", records, "one row per concurrency: throughput and TTFT/TPOT/ITL/E2E statistics")
    spec_files(b, model, [platform])
    b.write(save_dir)


def save_validate(save_dir: str, records: list[dict], points_path) -> None:
    from pathlib import Path

    from rubinperf.render.html import validation_section

    b = new_bundle()
    b.table("validate", records, "one row per published point: predicted, published, ratio, band")
    b.add("report.html", page("rubinperf: predictions against published results",
                               {"validation": validation_section(records)}), "the HTML report (self-contained)")
    b.add("specs/points.toml", Path(points_path).read_text(encoding="utf-8"), "the points file validated")
    b.write(save_dir)
