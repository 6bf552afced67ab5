"""The --plot figures (rubinperf.render.plots): what the frontier and tornado figures show, checked on the
figure's artists (built without writing) and in the written SVG's text; and the path without
matplotlib, one line and exit 2."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from rubinperf.render import plots
from rubinperf.errors import SpecError

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="matplotlib (the plot extra) is not installed")
FAST = ["-l", "tp8", "-l", "dep32", "--max-batch", "256"]
VR_SOURCE = "vLLM DeepSeek-V4.1-Flash on Vera Rubin NVL72 (Nov 2026)"
GB300_SOURCE = "vLLM DeepSeek-V4.1-Flash on GB300 NVL72 (Oct 2026)"


def _records(workload="agentx"):
    from rubinperf.serving.pareto import point_records, summarize
    from rubinperf.serving import batch_grid, sweep
    from rubinperf.specs.stack import load_platform as load_hardware  # a rack: hardware with its default stack
    from rubinperf.specs.model import load_model
    from rubinperf.specs.workload import load_workload

    m, w = load_model("deepseek-v4.1-flash"), load_workload(workload)
    sw = sweep([(m, load_hardware(hw), w) for hw in ("gb300-nvl72", "vr-nvl72")],
               decode_layouts=["tp8", "dep16", "dep32"], batches=batch_grid(512))
    return [r for s in summarize(sw) for r in point_records(s)]


@pytest.fixture(scope="module")
def agentx():
    return _records()


def _by_gid(fig):
    out = {}
    for ax in fig.axes:
        for a in [*ax.lines, *ax.collections, *ax.texts]:
            if a.get_gid():
                out.setdefault(a.get_gid(), []).append(a)
    for t in fig.texts:
        if t.get_gid():
            out.setdefault(t.get_gid(), []).append(t)
    return out


# ---------------------------------------------------------------- pure helpers (no matplotlib)


def test_published_points_for_the_agentx_racks(agentx):
    pts = {p["id"]: p for p in plots.published_points(agentx)}
    assert set(pts) == {"vr-throughput-at-387", "vr-peak-throughput", "gb300-throughput-at-196"}
    assert pts["vr-throughput-at-387"]["interactivity"] == 387.0 and pts["vr-throughput-at-387"]["published"] == 1.7e6
    assert pts["vr-peak-throughput"]["interactivity"] is None
    assert pts["vr-throughput-at-387"]["short_source"] == VR_SOURCE
    assert pts["gb300-throughput-at-196"]["short_source"] == GB300_SOURCE
    assert all(p["p90"] for p in pts.values() if p["interactivity"])


def test_published_points_only_for_their_workload_and_racks(agentx):
    assert plots.published_points([r for r in agentx if r["hardware"] == "gb300-nvl72"]) != []
    assert {p["hardware"] for p in plots.published_points([r for r in agentx if r["hardware"] == "gb300-nvl72"])} == {"gb300-nvl72"}
    other = [{**r, "workload": "chat-8k1k"} for r in agentx]
    assert plots.published_points(other) == []
    assert plots.published_points([]) == []


def _front(*layouts, x0=10.0, step=1.02):
    return [{"decode_layout": lay, "tokens_per_s_per_user": x0 * step ** i, "tokens_per_s_per_gpu": 1e6 / (i + 1)}
            for i, lay in enumerate(layouts)]


def test_layout_labels_one_per_run_and_merged_when_they_would_overlap():
    front = _front(*(["dep32"] * 30 + ["dep16"] * 30 + ["tp8"] * 30), step=1.2)   # long runs, far apart
    labels = plots.layout_labels(front, decades_per_char=0.01)
    assert [t for t, _ in labels] == ["dep32", "dep16", "tp8"]
    (t, (x, y)), = [lab for lab in labels if lab[0] == "dep16"]
    assert (x, y) == (front[45]["tokens_per_s_per_user"], front[45]["tokens_per_s_per_gpu"])  # the run's middle
    alternating = _front(*(["dep8", "dep16"] * 5), step=1.001)                      # short runs, close together
    labels = plots.layout_labels(alternating, decades_per_char=0.01)
    assert [t for t, _ in labels] == ["dep8/dep16"]
    assert plots.layout_labels([], 0.01) == []


def test_every_frontier_layout_is_named(agentx):
    for hw in ("gb300-nvl72", "vr-nvl72"):
        _, front = plots._series(agentx, hw)
        named = {n for text, _ in plots.layout_labels(front, 0.004) for n in text.split("/")}
        assert named == {r["decode_layout"] for r in front}


def test_parameter_labels():
    assert plots.parameter_label("hbm_bandwidth_bytes_per_s") == "HBM bandwidth (hbm_bandwidth_bytes_per_s)"
    assert plots.parameter_label("nvlink_latency_s") == "NVLink latency (nvlink_latency_s)"
    assert plots.parameter_label("some_new_field_s") == "some new field s"   # fallback: underscores as spaces


def test_every_hardware_field_sensitivity_varies_has_a_readable_label():
    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import numeric_fields
    from rubinperf.analysis import symbolic as S

    floats = set(S.hardware_fields())
    missing = [n for n in numeric_fields(Hardware) if n in floats and n not in plots.PARAMETER_LABELS]
    assert missing == []


def test_assumptions_caption(agentx):
    lines = plots.frontier_assumptions(agentx)
    text = " ".join(lines)
    for word in ("model deepseek-v4.1-flash", "workload agentx", "interactivity: P90", "k = 5",
                 "acceptance 3.51", "196 and 387 tok/s/user", "decode layout"):
        assert word in text, word
    p90 = [{**r, "interactivity_stat": "p90"} for r in agentx]
    assert "interactivity: P90" in " ".join(plots.frontier_assumptions(p90))


# ---------------------------------------------------------------- the figures


@needs_mpl
def test_frontier_figure_shows_layouts_published_points_targets_and_assumptions(agentx):
    import matplotlib.pyplot as plt

    fig = plots.frontier_figure(agentx, title="t")
    try:
        g = _by_gid(fig)
        # The targets: vertical lines at 196 and 387, labelled.
        for t in (196, 387):
            (line,) = g[f"target-{t}"]
            xs = line.get_xdata()
            assert list(xs) == [t, t]
            assert g[f"target-label-{t}"][0].get_text() == f"{t} tok/s/user"
        # The published points: a star at (interactivity, published) in the rack's colour, a peak line.
        (star,) = g["published-vr-throughput-at-387"]
        assert [tuple(o) for o in star.get_offsets()] == [(387.0, 1.7e6)]
        assert "[1]" in star.get_label() and "P90 387" in star.get_label()
        (star,) = g["published-gb300-throughput-at-196"]
        assert [tuple(o) for o in star.get_offsets()] == [(196.0, 954e3)]
        (peak,) = g["published-vr-peak-throughput"]
        assert list(peak.get_ydata()) == [2.52e6, 2.52e6]
        ax = fig.axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("published peak 2.52 M" in t for t in legend) and any("gb300-nvl72 frontier" == t for t in legend)
        # The layouts along each frontier.
        for hw in ("gb300-nvl72", "vr-nvl72"):
            labels = [a for gid, arts in g.items() if gid.startswith(f"layout-{hw}-") for a in arts]
            names = {n for a in labels for n in a.get_text().split("/")}
            assert names == {r["decode_layout"] for r in agentx if r["hardware"] == hw and r["on_frontier"]}
            assert g[f"frontier-{hw}"][0].get_color() == labels[0].get_color()
        # The caption names the assumptions and the sources.
        caption = g["caption"][0].get_text().replace("\n", " ")
        for word in ("workload agentx", "interactivity: P90", VR_SOURCE, GB300_SOURCE, "P90",
                     "validation/published.toml"):
            assert word in caption, word
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    finally:
        plt.close(fig)


@needs_mpl
def test_frontier_without_published_points_says_so(agentx):
    import matplotlib.pyplot as plt

    fig = plots.frontier_figure([{**r, "workload": "chat-8k1k"} for r in agentx])
    try:
        g = _by_gid(fig)
        assert not [k for k in g if k.startswith("published-")]
        assert "target-196" in g and "target-387" in g
        assert "No published point" in g["caption"][0].get_text()
    finally:
        plt.close(fig)


@needs_mpl
def test_frontier_svg_written_by_the_cli_keeps_its_text(cli, tmp_path):
    path = tmp_path / "frontier.svg"
    r = cli("pareto", *FAST, "--plot", str(path), "--no-chart")
    assert r.code == 0, r
    svg = path.read_text()
    assert svg.startswith("<?xml") and "<text" in svg
    for word in ("387 tok/s/user", "196 tok/s/user", "dep32", "tp8", "gb300-nvl72 frontier", "workload agentx",
                 "interactivity: P90", VR_SOURCE, 'id="published-vr-throughput-at-387"', 'id="target-196"'):
        assert word in svg, word
    assert "<dc:date>" not in svg                            # the same figure, the same bytes
    assert not list(tmp_path.glob(".frontier.svg.*"))


@needs_mpl
def test_frontier_png(cli, tmp_path):
    path = tmp_path / "frontier.png"
    r = cli("pareto", *FAST, "--plot", str(path), "--no-chart", "-q")
    assert r.code == 0, r
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 20_000 < len(data) < 400_000


@needs_mpl
def test_frontier_picture_has_readable_log_ticks_and_both_axis_labels_inside_it(agentx):
    """The picture as drawn, not its data: every tick label of the log axes is plain text (no raw mathtext such as
    $\\mathdefault{10^{2}}$, which text.parse_math = False prints verbatim), each axis has at least two labels, and
    both axis labels lie inside the figure (raw ticks pushed the y label off the left edge)."""
    import matplotlib

    fig = plots.frontier_figure(agentx, title="t")
    fig.canvas.draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    figbox = fig.bbox
    for axis in (ax.xaxis, ax.yaxis):
        lo, hi = axis.get_view_interval()
        texts = [t.get_text() for t in axis.get_ticklabels() if t.get_text() and lo <= t.get_position()[
            0 if axis is ax.xaxis else 1] <= hi]
        assert len(texts) >= 2, texts
        assert all("$" not in t and "\\" not in t and "{" not in t for t in texts), texts
        label = axis.label.get_window_extent(renderer)
        assert axis.label.get_text() and figbox.x0 <= label.x0 and label.x1 <= figbox.x1 and figbox.y0 <= label.y0, \
            (axis.label.get_text(), label, figbox)
    assert plots.log_tick_text(100) == "100" and plots.log_tick_text(2e5) == "200 k" and plots.log_tick_text(1e6) == "1 M"
    matplotlib.pyplot.close(fig)


@needs_mpl
def test_frontier_svg_text_holds_the_tick_labels_and_axis_labels(cli, tmp_path):
    path = tmp_path / "frontier.svg"
    assert cli("pareto", *FAST, "--plot", str(path), "--no-chart", "-q").code == 0
    svg = path.read_text()
    assert "mathdefault" not in svg and "10^{" not in svg
    assert plots.X_LABEL in svg and plots.Y_LABEL in svg
    assert ">1 M<" in svg or ">100 k<" in svg


def _tornado_records():
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.analysis.sensitivity import sensitivity
    from rubinperf.specs.stack import load_platform as load_hardware  # a rack: hardware with its default stack
    from rubinperf.specs.model import load_model

    m, hw, lay = load_model("deepseek-v4.1-flash"), load_hardware("gb300-nvl72"), parse_layout("dep32")
    return sensitivity(m, hw, lay, make_point(m, hw, lay, phase="decode"), metric="step-time")


@needs_mpl
def test_tornado_figure_shows_the_baseline_and_readable_names():
    import matplotlib.pyplot as plt

    from rubinperf.units import fmt_time

    records = _tornado_records()
    base = records[0]["metric_value"]
    fig = plots.tornado_figure(records, 0.1, top=6)
    try:
        g = _by_gid(fig)
        ax = fig.axes[0]
        (line,) = g["baseline"]
        assert list(line.get_xdata()) == pytest.approx([base * 1e3] * 2)   # ms
        assert g["baseline-label"][0].get_text() == f"baseline {fmt_time(base)}"
        names = [t.get_text() for t in ax.get_yticklabels()]
        assert len(names) == 6
        assert names[-1] == plots.parameter_label(records[0]["parameter"])         # the largest on top
        assert "HBM bandwidth (hbm_bandwidth_bytes_per_s)" in names
        assert ax.get_xlabel() == "step time (ms)"
        # Each bar spans baseline -> the metric at x0.9 / x1.1.
        bars = [p for p in ax.patches]
        top = records[0]
        ends = sorted(round(b.get_x() + b.get_width(), 9) for b in bars[-2:])
        assert ends == pytest.approx(sorted([top["metric_low"] * 1e3, top["metric_high"] * 1e3]))
        assert all(b.get_x() == pytest.approx(base * 1e3) for b in bars)
    finally:
        plt.close(fig)


@needs_mpl
def test_tornado_svg_from_the_cli(cli, tmp_path):
    path = tmp_path / "tornado.svg"
    r = cli("sensitivity", "--plot", str(path), "--top", "5", "-q")
    assert r.code == 0, r
    svg = path.read_text()
    assert "baseline" in svg and "HBM bandwidth (hbm_bandwidth_bytes_per_s)" in svg and 'id="baseline"' in svg


@needs_mpl
def test_tornado_with_nothing_to_plot_names_the_file(tmp_path):
    records = [{**r, "elasticity": 0.0} for r in _tornado_records()]
    with pytest.raises(SpecError, match="tornado.png: every elasticity is zero"):
        plots.plot_tornado(records, str(tmp_path / "tornado.png"), 0.1)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- without matplotlib


@pytest.mark.parametrize("argv", [["pareto", *FAST, "--no-chart"], ["sensitivity", "--top", "3"]])
@pytest.mark.parametrize("name", ["f.svg", "f.png", "f.pdf"])
def test_without_matplotlib_every_format_says_how_to_install_it(cli, monkeypatch, tmp_path, argv, name):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    out = tmp_path / name
    r = cli(*argv, "--plot", str(out))
    assert r.code == 2, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "pip install 'rubinperf[plot]'" in lines[0] and "matplotlib" in lines[0], r.err
    assert "Traceback" not in r.err and r.out == ""
    assert list(tmp_path.iterdir()) == []                   # refused before any work: nothing written


def test_no_svg_fallback_renderer_is_left():
    from rubinperf.render import chart, serving

    assert not hasattr(serving, "svg_chart") and not hasattr(chart, "svg_chart")
