"""Figures for `--plot` (presentation only): the Pareto frontier and the sensitivity tornado.

One renderer, matplotlib (the `plot` extra). Each figure is built by a function that returns
it (`frontier_figure`, `tornado_figure`: tested without writing a file) and written by
`save_figure` as PNG, SVG or PDF through `rubinperf.files.write_atomic`. SVG keeps its text as text
(`svg.fonttype = none`), so labels can be searched in the file. Nothing here computes a
formula: the records come from `rubinperf.serving.pareto` / `rubinperf.analysis.sensitivity`, the published
points from `validation/published.toml` (through `rubinperf.analysis.validate.load_points`).
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rubinperf import files
from rubinperf.errors import SpecError, shorten
from rubinperf.files import regular_target
from rubinperf.units import fmt_num, fmt_time, si

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # .pgf, .ps, .eps would make matplotlib run LaTeX or ghostscript
INSTALL_HINT = "pip install 'rubinperf[plot]'"
# Interactivity targets drawn on the frontier: the levels of the published points (and compare's defaults).
INTERACTIVITY_TARGETS = (196.0, 387.0)
# Published serving points a frontier can show: a throughput at an interactivity (a point), a peak (a level).
PUBLISHED_METRICS = ("throughput_at_interactivity", "peak_throughput")
X_LABEL = "tokens/s per user (decode interactivity)"
Y_LABEL = "tokens/s per GPU (cached + uncached input + output)"


# ---------------------------------------------------------------- checks and writing


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_matplotlib() -> None:
    """One line, exit 2, when the plot extra is not installed."""
    if not has_matplotlib():
        raise SpecError(f"--plot needs matplotlib, an optional extra: {INSTALL_HINT}")


def check_plot_path(path: str) -> None:
    """Fail before any work when --plot cannot be written: a suffix matplotlib is not tested with,
    no such directory, something that is not a regular file, or no matplotlib."""
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        raise SpecError(f"--plot {shorten(path)}: expected a file ending in {', '.join(PLOT_SUFFIXES)}")
    parent = Path(path).parent
    if not parent.is_dir():
        raise SpecError(f"--plot {shorten(path)}: no such directory {shorten(str(parent))}")
    try:
        regular_target(Path(path))  # a device, FIFO or socket is refused before any work
    except SpecError as exc:
        raise SpecError(f"--plot {exc}") from None
    except OSError as exc:
        raise SpecError(f"--plot {shorten(path)}: {exc.strerror or exc}") from None
    require_matplotlib()


def _pyplot():
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    # Every text is plain: a '$' in a name or a price is a dollar, never the start of mathtext ('$x^$' would fail).
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str) -> None:
    """Write `fig` to `path` (format from the suffix), atomically; the figure is closed."""
    plt = _pyplot()
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        plt.close(fig)
        raise SpecError(f"--plot {shorten(path)}: expected a file ending in {', '.join(PLOT_SUFFIXES)}")
    try:
        data = figure_bytes(fig, suffix.lstrip("."))
    except SpecError as exc:
        raise SpecError(f"--plot {shorten(path)}: {exc}") from None
    files.write_atomic(path, data)


def figure_bytes(fig, fmt: str) -> bytes:
    """`fig` as the bytes of a PNG, SVG or PDF file; the figure is closed."""
    import matplotlib

    plt = _pyplot()
    buf = io.BytesIO()
    # Text stays text in an SVG; no date in the file, and a fixed id salt: the same figure, the same bytes.
    metadata = {"Date": None} if fmt in ("svg", "pdf") else {}
    try:
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "rubinperf"}):
            fig.savefig(buf, format=fmt, metadata=metadata)
    except (ValueError, RuntimeError) as exc:
        raise SpecError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from None
    finally:
        plt.close(fig)
    return buf.getvalue()


def log_tick_text(value: float) -> str:
    """A log axis's tick label as plain text with an SI prefix: 100, 1 k, 20 k, 1 M. The figures set
    text.parse_math = False (a '$' is a dollar), so matplotlib's own log labels, mathtext such as
    $\\mathdefault{10^{2}}$, would print raw and widen the axis until its label falls off the figure."""
    return si(value) if value > 0 else ""


def plain_log_ticks(axis) -> None:
    """Label a log axis in plain text (log_tick_text) at 1, 2 and 5 of every decade, so a span of less than a
    decade still has labels; minor ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: log_tick_text(v)))
    axis.set_minor_formatter(NullFormatter())


def _caption(fig, lines: list[str], width: int = 150) -> int:
    """Wrap the caption lines; return how many text lines they take."""
    wrapped = [w for line in lines for w in (textwrap.wrap(line, width) or [""])]
    fig.text(0.01, 0.01, "\n".join(wrapped), fontsize=7, va="bottom", ha="left", color="#333333", gid="caption")
    return len(wrapped)


# ---------------------------------------------------------------- the frontier


def _racks(records):
    """The series drawn: each rack, and each rack's serving where the records hold more than one."""
    from rubinperf.render.chart import series_names

    return series_names(records)[0]


def _series(records, hw: Platform):
    from rubinperf.render.chart import series_name

    servings = {r.get("serving", "disagg") for r in records}
    mine = [r for r in records if series_name(r, servings) == hw and r["feasible"]
            and r["tokens_per_s_per_user"] > 0 and r["tokens_per_s_per_gpu"] > 0]
    rest = [r for r in mine if not r["on_frontier"]]
    front = sorted((r for r in mine if r["on_frontier"]), key=lambda r: r["tokens_per_s_per_user"])
    return rest, front


def layout_runs(front: list[dict]) -> list[tuple[str, list[dict]]]:
    """The frontier (sorted by interactivity) cut where its decode layout changes: (layout, points) runs."""
    runs: list[tuple[str, list[dict]]] = []
    for r in front:
        if runs and runs[-1][0] == r["decode_layout"]:
            runs[-1][1].append(r)
        else:
            runs.append((r["decode_layout"], [r]))
    return runs


def layout_labels(front: list[dict], decades_per_char: float) -> list[tuple[str, tuple[float, float]]]:
    """Where to write the decode layout along a frontier: one label per run of one layout, at the
    run's middle point. A run whose middle falls under the previous label (its text takes
    `decades_per_char` of log10 interactivity per character) joins it ('dep16/dep32'), so that short
    alternating runs do not print over each other."""
    groups: list[list] = []  # [names, anchor point]
    for layout, run in layout_runs(front):
        mid = run[len(run) // 2]
        x = math.log10(mid["tokens_per_s_per_user"])
        if groups:
            names, anchor = groups[-1]
            text = "/".join(names)
            if x - math.log10(anchor["tokens_per_s_per_user"]) < (len(text) + 2) * decades_per_char:
                if layout not in names:
                    names.append(layout)
                continue
        groups.append([[layout], mid])
    return [("/".join(names), (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"])) for names, p in groups]


def short_source(source: str) -> str:
    """'vLLM ... on Vera Rubin NVL72 (Nov 2026): 1.7M tokens/s/GPU at ...' -> the part before the colon."""
    head = source.split(": ", 1)[0].strip()
    return head if len(head) <= 90 else head[:87] + "..."


def published_points(records: list[dict], path=None) -> list[dict]:
    """The published serving points (validation/published.toml) for the racks, model and workload of
    `records`: a throughput at an interactivity or a peak throughput, each with its source."""
    from rubinperf.analysis import validate

    if not records:
        return []
    models = {r.get("model") for r in records}
    workloads = {r.get("workload") for r in records}
    racks = {r["hardware"] for r in records}
    points = validate.load_points(path) if path is not None else validate.load_points()
    out = []
    for p in points:
        if p.metric in PUBLISHED_METRICS and p.hardware in racks and p.model in models and p.workload in workloads:
            out.append({"id": p.id, "hardware": p.hardware, "metric": p.metric, "published": p.published,
                        "interactivity": p.interactivity, "source": p.source, "short_source": short_source(p.source),
                        "p90": "P90" in p.source})
    return out


def interactivity_basis(records: list[dict]) -> str:
    """How the records' interactivity is summarised, as the record says (`interactivity_stat`: mean,
    p50, p90), else the mean."""
    first = records[0] if records else {}
    stat = str(first.get("interactivity_stat") or "mean")
    return stat.upper() if stat.lower().startswith("p") else stat


def _basis_words(records: list[dict]) -> str:
    basis = interactivity_basis(records)
    return "P90 too" if basis == "P90" else f"the {basis}"


def frontier_assumptions(records: list[dict], targets=INTERACTIVITY_TARGETS) -> list[str]:
    """The caption's lines: what the figure assumes, in words."""
    first = records[0] if records else {}
    pools = [r for r in records if r.get("serving", "disagg") == "disagg"]
    prefill = ", ".join(dict.fromkeys(r["prefill_layout"] for r in pools))
    basis = interactivity_basis(records)
    swept = len(records)
    feasible = sum(bool(r["feasible"]) for r in records)
    lines = [
        f"Assumptions: model {first.get('model', '?')}, workload {first.get('workload', '?')}; "
        f"interactivity: {basis} decode tokens/s per user with speculative decoding (k = {first.get('draft_tokens', '?')}, "
        f"acceptance {fmt_num(first.get('acceptance', 0))} tokens/step); throughput: cached + uncached input + "
        + (f"output tokens/s over every prefill ({prefill}) and decode GPU" if pools else "output tokens/s over the engine's GPUs")
        + f"; {swept} points swept, {feasible} fit in HBM "
        "(faint dots: feasible points off the frontier).",
        "Labels along each frontier: its decode layout. Dashed lines: interactivity targets "
        + " and ".join(f"{t:g}" for t in targets) + " tok/s/user.",
    ]
    if len(pools) < len(records):
        lines.append("agg: one engine prefills and decodes within the stack's aggregated token budget, swept over "
                     "closed-loop concurrency (rubinperf serve); its interactivity is 1 / TPOT at the same statistic.")
    return lines


def frontier_figure(records: list[dict], title: str = "", published: list[dict] | None = None,
                    targets=INTERACTIVITY_TARGETS):
    """The frontier of each rack (log-log), its decode layouts labelled, the published points and
    the interactivity targets drawn, the assumptions in a caption. Returns the matplotlib Figure.

    `published`: points as `published_points` returns them (None: read them for these records)."""
    plt = _pyplot()
    if not any(_series(records, hw)[1] for hw in _racks(records)):
        raise SpecError("--plot: no feasible point to plot (every swept point is infeasible; run without --plot to see why)")
    if published is None:
        published = published_points(records)
    racks = _racks(records)
    sources = list(dict.fromkeys(p["short_source"] for p in published))
    caption = frontier_assumptions(records, targets)
    if published:
        caption.append("Published (validation/published.toml): "
                       + "; ".join(f"[{i + 1}] {s}" for i, s in enumerate(sources))
                       + (f". Published interactivity is P90; the model's is {_basis_words(records)}."
                          if any(p["p90"] for p in published) else "."))
    else:
        caption.append("No published point for this model, workload and these racks.")
    n_caption = sum(len(textwrap.wrap(c, 150)) for c in caption)
    height = 5.6 + 0.13 * n_caption
    fig, ax = plt.subplots(figsize=(9.5, height), dpi=100)
    fig.subplots_adjust(left=0.09, right=0.98, top=1 - 0.45 / height, bottom=(0.75 + 0.13 * n_caption) / height)

    xs = [r["tokens_per_s_per_user"] for hw in racks for r in _series(records, hw)[1]]
    decades_per_char = 1.05 * (math.log10(max(xs) / min(xs)) or 1.0) * 5.5 / (9.5 * 100 * 0.89)  # ~5.5 px a character
    for k, hw in enumerate(racks):
        rest, front = _series(records, hw)
        color = f"C{k}"
        ax.scatter([r["tokens_per_s_per_user"] for r in rest], [r["tokens_per_s_per_gpu"] for r in rest],
                   s=4, color=color, alpha=0.2, linewidths=0, gid=f"swept-{hw}")
        ax.plot([r["tokens_per_s_per_user"] for r in front], [r["tokens_per_s_per_gpu"] for r in front],
                "-o", ms=2.5, color=color, label=f"{hw} frontier", gid=f"frontier-{hw}")
        for text, (x, y) in layout_labels(front, decades_per_char):
            ax.annotate(text, (x, y), xytext=(4, 5), textcoords="offset points", fontsize=7.5, color=color,
                        fontweight="bold", gid=f"layout-{hw}-{text}")

    for p in published:
        k = next(i for i, name in enumerate(racks) if name.split(" ")[0] == p["hardware"])
        color = f"C{k}"
        ref = f"[{sources.index(p['short_source']) + 1}]"
        if p["metric"] == "peak_throughput":
            ax.axhline(p["published"], color=color, ls=":", lw=1.2, gid=f"published-{p['id']}",
                       label=f"{p['hardware']} published peak {si(p['published'])} tok/s/GPU {ref}")
        else:
            stat = "P90 " if p["p90"] else ""
            ax.scatter([p["interactivity"]], [p["published"]], marker="*", s=160, color=color, edgecolors="black",
                       linewidths=0.6, zorder=5, gid=f"published-{p['id']}",
                       label=(f"{p['hardware']} published {si(p['published'])} tok/s/GPU at {stat}"
                              f"{p['interactivity']:g} tok/s/user {ref}"))

    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    for t in targets:
        ax.axvline(t, color="#555555", ls="--", lw=0.9, zorder=1, gid=f"target-{t:g}")
        ax.text(t, 1.005, f"{t:g} tok/s/user", transform=ax.get_xaxis_transform(), va="bottom",
                ha="center", fontsize=7, color="#333333", gid=f"target-label-{t:g}")
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel(Y_LABEL)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(title or f"{records[0].get('model', '')}, workload {records[0].get('workload', '')}: "
                 "Pareto frontier per rack", fontsize=10, pad=14)
    _caption(fig, caption)
    return fig


def plot_frontier(records: list[dict], path: str, title: str = "") -> None:
    """Write the frontier figure to `path` (PNG, SVG or PDF)."""
    check_plot_path(path)
    try:
        fig = frontier_figure(records, title)
    except SpecError as exc:
        raise SpecError(str(exc).replace("--plot:", f"--plot {shorten(path)}:", 1)) from None
    save_figure(fig, path)


# ---------------------------------------------------------------- the tornado

# Readable names of the parameters sensitivity varies (the common ones; others: the name with spaces).
PARAMETER_LABELS = {
    "fp4_dense_flops_per_s": "FP4 dense FLOP/s",
    "fp8_dense_flops_per_s": "FP8 dense FLOP/s",
    "fp8_fp4_dense_flops_per_s": "FP8 x FP4 dense FLOP/s",
    "bf16_dense_flops_per_s": "BF16 dense FLOP/s",
    "fp32_dense_flops_per_s": "FP32 dense FLOP/s",
    "shared_memory_per_sm_bytes": "shared memory per SM",
    "hbm_capacity_bytes": "HBM capacity",
    "hbm_bandwidth_bytes_per_s": "HBM bandwidth",
    "hbm_local_bandwidth_factor": "HBM local-domain bandwidth factor",
    "hbm_interleaved_bandwidth_factor": "HBM interleaved bandwidth factor",
    "hbm_remote_bandwidth_factor": "HBM cross-domain bandwidth factor",
    "hbm_latency_s": "HBM load latency",
    "l2_bytes_per_clock_per_sm": "L2 bytes per clock per SM",
    "nvlink_bandwidth_bytes_per_s": "NVLink bandwidth",
    "nvlink_latency_s": "NVLink latency",
    "cross_tray_latency_s": "cross-tray latency",
    "scale_out_bandwidth_bytes_per_s": "scale-out bandwidth",
    "scale_out_latency_s": "scale-out latency",
    "host_memory_capacity_bytes": "host memory capacity",
    "host_memory_bandwidth_bytes_per_s": "host memory bandwidth",
    "c2c_bandwidth_bytes_per_s": "CPU-GPU (C2C) bandwidth",
    "gpu_power_w": "GPU power",
    "price_usd_per_gpu_hour": "price per GPU-hour",
    "wave_quantization": "wave quantization",
    "mma_bytes_in_flight_per_sm": "GEMM bytes in flight per SM",
    "stream_bytes_in_flight_per_sm": "streaming bytes in flight per SM",
    "kernel_launch_cold_s": "lone (cold) kernel launch",
    "kernel_launch_stream_s": "stream kernel boundary",
    "host_dispatch_s": "host dispatch per kernel",
    "sm_clock_hz": "SM clock",
    "kernel_launch_graph_s": "graph kernel boundary",
    "mma_prologue_cycles": "tensor-core kernel prologue cycles",
    "pdl_hidden_s": "PDL hidden time per kernel",
    "fused_overlap_rows": "fused-kernel overlap rows",
    "mma_compute_efficiency": "GEMM compute efficiency",
    "mma_bf16_compute_efficiency": "BF16 GEMM compute efficiency",
    "mma_fp4_compute_efficiency": "FP4 GEMM compute efficiency",
    "grouped_compute_efficiency": "grouped GEMM compute efficiency",
    "grouped_fp4_compute_efficiency": "grouped FP4 GEMM compute efficiency",
    "grouped_w4a16_compute_efficiency": "grouped W4A16 GEMM compute efficiency",
    "grouped_hbm_efficiency": "grouped GEMM HBM efficiency",
    "attention_compute_efficiency": "attention compute efficiency",
    "vector_compute_efficiency": "vector compute efficiency",
    "hbm_stream_efficiency": "HBM streaming efficiency",
    "nvlink_efficiency": "NVLink efficiency",
    "scale_out_efficiency": "scale-out efficiency",
    "host_efficiency": "host link efficiency",
    "collective_floor_s": "collective floor",
    "step_overhead_s": "CPU step overhead",
    "dp_sync_per_rank_s": "DP sync per rank",
    "batch": "batch per rank",
    "context": "context tokens",
    "new_tokens": "new tokens per rank",
    "draft_tokens": "drafted tokens k",
    "acceptance": "acceptance (tokens/step)",
    "balancedness": "MoE balancedness",
    "draft_balancedness": "draft MoE balancedness",
}


def parameter_label(name: str) -> str:
    """'hbm_bandwidth_bytes_per_s' -> 'HBM bandwidth (hbm_bandwidth_bytes_per_s)'; an unknown field:
    its name with spaces for underscores."""
    label = PARAMETER_LABELS.get(name)
    return f"{label} ({name})" if label else name.replace("_", " ")


def _metric_scale(unit: str, base: float) -> tuple[float, str]:
    """Display factor and unit for the metric axis (a time in ms or µs)."""
    if unit == "s":
        return (1e3, "ms") if abs(base) >= 1e-3 else (1e6, "µs")
    return 1.0, unit


def _fmt_metric(value: float, unit: str) -> str:
    return fmt_time(value) if unit == "s" else f"{fmt_num(value)} {unit}".strip()


def tornado_figure(records: list[dict], swing: float, top: int | None = None):
    """Bars of the metric at each parameter x (1 - swing) and x (1 + swing) around the baseline (a
    labelled vertical line at the metric's value), largest elasticity on top; parameter names
    readable. Returns the matplotlib Figure."""
    plt = _pyplot()
    rows = [r for r in records if r["elasticity"]][: top or None][::-1]
    if not rows:
        raise SpecError("--plot: every elasticity is zero, nothing to plot")
    r0 = rows[0]
    base = r0["metric_value"]
    unit = r0["metric_unit"]
    scale, shown_unit = _metric_scale(unit, base)
    labels = [parameter_label(r["parameter"]) for r in rows]
    height = 0.32 * len(rows) + 2.0
    fig, ax = plt.subplots(figsize=(10, height), dpi=100)
    for i, r in enumerate(rows):
        lo, hi = r["metric_low"] * scale, r["metric_high"] * scale
        ax.barh(i, lo - base * scale, left=base * scale, color="tab:blue", height=0.7,
                label=f"parameter x {1 - swing:g}" if i == 0 else None)
        ax.barh(i, hi - base * scale, left=base * scale, color="tab:orange", height=0.7,
                label=f"parameter x {1 + swing:g}" if i == 0 else None)
        ax.text(max(lo, hi), i, f"  {r['elasticity']:+.3g}", va="center", fontsize=7.5)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.axvline(base * scale, color="black", linewidth=1.0, gid="baseline")
    ax.text(base * scale, 1.0, f"baseline {_fmt_metric(base, unit)}", transform=ax.get_xaxis_transform(),
            ha="center", va="bottom", fontsize=8, gid="baseline-label")
    ax.margins(x=0.18)
    ax.set_xlabel(f"{r0['metric_label']} ({shown_unit})" if shown_unit else r0["metric_label"])
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{r0['model']} {r0['layout']} {r0['phase']} on {r0['hardware']}: {r0['metric_label']}\n"
                 f"with each parameter scaled by {1 - swing:g} and {1 + swing:g}", fontsize=9)
    fig.text(0.01, 0.01, "numbers beside the bars: elasticity d ln(metric) / d ln(parameter); "
             "in brackets: the spec field (--set NAME=VALUE)", fontsize=7, color="#333333", gid="caption")
    fig.tight_layout(rect=(0, 0.25 / height, 1, 1))
    return fig


def plot_tornado(records: list[dict], path: str, swing: float, top: int | None = None) -> None:
    check_plot_path(path)
    try:
        fig = tornado_figure(records, swing, top)
    except SpecError as exc:
        raise SpecError(str(exc).replace("--plot:", f"--plot {shorten(path)}:", 1)) from None
    save_figure(fig, path)
