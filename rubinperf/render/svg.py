"""Charts as SVG text, written by hand (presentation only): the Pareto frontier, the sensitivity tornado and
a step's kernel times. No matplotlib: the HTML report and the bundle's .svg files draw on any install.

Each function takes the records the core built (`rubinperf.serving.pareto`, `rubinperf.analysis`,
`rubinperf.step.records`) and returns one `<svg>` element: a viewBox and no fixed size, so that it
scales to the page; every mark carries a `<title>` (the browser's tooltip) and text stays text.
Nothing here computes a formula: positions only.
"""

from __future__ import annotations

import math
from html import escape

from rubinperf.units import fmt_num, fmt_time, si

# The colours of matplotlib's default cycle (the --plot figures use the same), one per rack.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
BOUND_COLOURS = {"compute": "#d62728", "memory": "#1f77b4", "parallelism": "#9467bd", "comm": "#2ca02c",
                 "latency": "#7f7f7f", "cpu": "#8c564b", "host": "#8c564b"}
FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif\""


def colour(k: int) -> str:
    return PALETTE[k % len(PALETTE)]


def _t(x: float) -> str:
    """A coordinate, short."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _svg(width: int, height: int, body: list[str], label: str, gid: str, cls: str = "") -> str:
    """`cls`: "wide" or "narrow" where a page holds both drawings of one chart (its CSS shows one per width)."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(label)}" id="{escape(gid)}" class="chart{" " + cls if cls else ""}" {FONT} '
            'font-size="11">' + "".join(body) + "</svg>")


def _text(x, y, text, anchor="start", size=11, fill="#222", extra="") -> str:
    return (f'<text x="{_t(x)}" y="{_t(y)}" text-anchor="{anchor}" font-size="{size}" fill="{fill}"{extra}>'
            f"{escape(str(text))}</text>")


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis from lo to hi: 1, 2, 5 x 10^n (1 x 10^n alone over many decades)."""
    if not (lo > 0 and hi > lo):
        return [lo] if lo > 0 else []
    steps = (1, 2, 5) if math.log10(hi / lo) <= 4 else (1,)
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for s in steps:
            v = s * 10.0 ** e
            if lo <= v <= hi:
                out.append(v)
    return out


class LogAxes:
    """A log-log frame: data to pixels, ticks, grid."""

    def __init__(self, x_range, y_range, box):
        (self.x0, self.x1), (self.y0, self.y1) = x_range, y_range
        self.left, self.top, self.right, self.bottom = box

    def x(self, v: float) -> float:
        f = (math.log10(v) - math.log10(self.x0)) / (math.log10(self.x1) - math.log10(self.x0))
        return self.left + f * (self.right - self.left)

    def y(self, v: float) -> float:
        f = (math.log10(v) - math.log10(self.y0)) / (math.log10(self.y1) - math.log10(self.y0))
        return self.bottom - f * (self.bottom - self.top)

    def inside(self, x: float, y: float) -> bool:
        return self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1

    def frame(self, x_label: str, y_label: str) -> list[str]:
        out = []
        for v in log_ticks(self.x0, self.x1):
            px = self.x(v)
            out.append(f'<line x1="{_t(px)}" y1="{_t(self.top)}" x2="{_t(px)}" y2="{_t(self.bottom)}" '
                       f'stroke="#ddd" stroke-width="0.8"/>')
            out.append(_text(px, self.bottom + 15, si(v).strip(), "middle", 10, "#444"))
        for v in log_ticks(self.y0, self.y1):
            py = self.y(v)
            out.append(f'<line x1="{_t(self.left)}" y1="{_t(py)}" x2="{_t(self.right)}" y2="{_t(py)}" '
                       f'stroke="#ddd" stroke-width="0.8"/>')
            out.append(_text(self.left - 5, py + 3.5, si(v).strip(), "end", 10, "#444"))
        out.append(f'<rect x="{_t(self.left)}" y="{_t(self.top)}" width="{_t(self.right - self.left)}" '
                   f'height="{_t(self.bottom - self.top)}" fill="none" stroke="#888" stroke-width="1"/>')
        out.append(_text((self.left + self.right) / 2, self.bottom + 34, x_label, "middle", 11))
        cy = (self.top + self.bottom) / 2
        out.append(_text(14, cy, y_label, "middle", 11, extra=f' transform="rotate(-90 14 {_t(cy)})"'))
        return out


def _range(values, pad: float = 0.08) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi <= lo:
        lo, hi = lo / 2, hi * 2
    span = math.log10(hi / lo)
    return lo / 10 ** (pad * span), hi * 10 ** (pad * span)


def _star(cx: float, cy: float, r: float) -> str:
    pts = []
    for i in range(10):
        a = -math.pi / 2 + i * math.pi / 5
        rr = r if i % 2 == 0 else r * 0.45
        pts.append(f"{_t(cx + rr * math.cos(a))},{_t(cy + rr * math.sin(a))}")
    return " ".join(pts)


# ---------------------------------------------------------------- the frontier


def frontier_svg(records: list[dict], published: list[dict], targets, x_label: str, y_label: str,
                 labels_of, width: int = 760, height: int = 460, narrow: bool = False) -> str:
    """Each rack's frontier (log-log), its feasible points faint, the decode layout along it
    (`labels_of(front, decades_per_char)`: rubinperf.render.plots.layout_labels), the published points
    (stars; a peak: a dotted level) and the interactivity targets (dashed). `narrow`: drawn for a phone
    (360 wide, text at the size it is read), id frontier-narrow."""
    gid, cls = ("frontier-narrow", "narrow") if narrow else ("frontier", "")
    if narrow:
        width, height = 360, 400
    racks = list(dict.fromkeys(r["hardware"] for r in records))
    feasible = [r for r in records
                if r["feasible"] and r["tokens_per_s_per_user"] > 0 and r["tokens_per_s_per_gpu"] > 0]
    if not feasible:
        return _svg(width, 60, [_text(10, 35, "no feasible point to draw")], "frontier: no feasible point", gid, cls)
    xs = [r["tokens_per_s_per_user"] for r in feasible] + [float(t) for t in targets]
    xs += [p["interactivity"] for p in published if p.get("interactivity")]
    ys = [r["tokens_per_s_per_gpu"] for r in feasible] + [p["published"] for p in published]
    ax = LogAxes(_range(xs), _range(ys), (48 if narrow else 62, 28, width - (10 if narrow else 14), height - 48))
    body = ax.frame(x_label, y_label)
    decades_per_char = math.log10(ax.x1 / ax.x0) / (ax.right - ax.left) * 6.2
    for k, hw in enumerate(racks):
        c = colour(k)
        mine = [r for r in feasible if r["hardware"] == hw]
        rest = [r for r in mine if not r["on_frontier"]]
        front = sorted((r for r in mine if r["on_frontier"]), key=lambda r: r["tokens_per_s_per_user"])
        dots = "".join(f'<circle cx="{_t(ax.x(r["tokens_per_s_per_user"]))}" '
                       f'cy="{_t(ax.y(r["tokens_per_s_per_gpu"]))}" r="1.6"/>' for r in rest)
        body.append(f'<g class="swept" fill="{c}" fill-opacity="0.22"><title>{escape(hw)}: feasible points off '
                    f'the frontier</title>{dots}</g>')
        if not front:
            continue
        pts = " ".join(f"{_t(ax.x(r['tokens_per_s_per_user']))},{_t(ax.y(r['tokens_per_s_per_gpu']))}" for r in front)
        body.append(f'<polyline class="frontier" points="{pts}" fill="none" stroke="{c}" stroke-width="2">'
                    f'<title>{escape(hw)} frontier</title></polyline>')
        marks = []
        for r in front:
            tip = (f"{hw} {r['decode_layout']} x {fmt_num(r['batch_per_rank'])}: {fmt_num(r['tokens_per_s_per_user'])} "
                   f"tok/s/user, {fmt_num(r['tokens_per_s_per_gpu'])} tok/s/GPU")
            marks.append(f'<circle cx="{_t(ax.x(r["tokens_per_s_per_user"]))}" '
                         f'cy="{_t(ax.y(r["tokens_per_s_per_gpu"]))}" r="2.6"><title>{escape(tip)}</title></circle>')
        body.append(f'<g fill="{c}">' + "".join(marks) + "</g>")
        for text, (x, y) in labels_of(front, decades_per_char):
            body.append(_text(ax.x(x) + 4, ax.y(y) - 6, text, "start", 10, c, ' font-weight="bold" class="layout"'))
    for t in targets:
        px = ax.x(float(t))
        body.append(f'<line class="target" x1="{_t(px)}" y1="{_t(ax.top)}" x2="{_t(px)}" y2="{_t(ax.bottom)}" '
                    f'stroke="#555" stroke-width="1" stroke-dasharray="5 4"><title>target {float(t):g} tok/s/user'
                    f'</title></line>')
        body.append(_text(px, ax.top - 6, f"{float(t):g}" if narrow else f"{float(t):g} tok/s/user", "middle", 10,
                          "#333"))
    for n, p in enumerate(published):
        c = colour(racks.index(p["hardware"])) if p["hardware"] in racks else "#000"
        tip = f"[{n + 1}] {p['hardware']} published {si(p['published'])} tok/s/GPU: {p['source']}"
        if p["metric"] == "peak_throughput" or not p.get("interactivity"):
            py = ax.y(p["published"])
            body.append(f'<line class="published" x1="{_t(ax.left)}" y1="{_t(py)}" x2="{_t(ax.right)}" y2="{_t(py)}" '
                        f'stroke="{c}" stroke-width="1.4" stroke-dasharray="2 3"><title>{escape(tip)}</title></line>')
            body.append(_text(ax.right - 4, py - 4, f"[{n + 1}]" if narrow else f"[{n + 1}] published peak", "end",
                              10, c))
        else:
            cx, cy = ax.x(p["interactivity"]), ax.y(p["published"])
            body.append(f'<polygon class="published" points="{_star(cx, cy, 8)}" fill="{c}" stroke="#000" '
                        f'stroke-width="0.7"><title>{escape(tip)}</title></polygon>')
            body.append(_text(cx + 9, cy + 4, f"[{n + 1}]", "start", 10, "#000"))
    return _svg(width, height, body, "Pareto frontier per rack: tokens/s per GPU against tokens/s per user", gid, cls)


# ---------------------------------------------------------------- the tornado


def tornado_svg(records: list[dict], swing: float, label_of, top: int = 12, gid: str = "tornado",
                width: int = 760, narrow: bool = False) -> str:
    """The metric at each parameter x (1 - swing) (blue) and x (1 + swing) (orange) around the baseline,
    largest elasticity on top; `label_of(name)` gives the parameter's readable name. `narrow`: drawn for a
    phone (360 wide, each name above its bars), id `gid`-narrow."""
    cls = "narrow" if narrow else ""
    if narrow:
        gid, width = f"{gid}-narrow", 360
    rows = [r for r in records if r["elasticity"]][:top]
    if not rows:
        return _svg(width, 60, [_text(10, 35, "every elasticity is zero: nothing to draw")], "tornado: empty", gid,
                    cls)
    r0 = rows[0]
    base, unit = r0["metric_value"], r0["metric_unit"]
    fmt = fmt_time if unit == "s" else (lambda v: f"{fmt_num(v)} {unit}".strip())
    ends = [v for r in rows for v in (r["metric_low"], r["metric_high"])] + [base]
    lo, hi = min(ends), max(ends)
    span = (hi - lo) or abs(base) or 1.0
    lo, hi = lo - 0.12 * span, hi + 0.12 * span
    if narrow:   # the name on a line of its own above the bars
        left, right, top_y, bar_h, gap, head = 8, width - 44, 34, 12, 5, 14
    else:
        left, right, top_y, bar_h, gap, head = 250, width - 16, 34, 16, 6, 0
    row_h = head + bar_h + gap
    height = top_y + len(rows) * row_h + 42

    def x(v):
        return left + (v - lo) / (hi - lo) * (right - left)

    body = []
    bx = x(base)
    for i, r in enumerate(rows):
        y = top_y + i * row_h + head
        if narrow:
            body.append(_text(left, y - 3, label_of(r["parameter"]), "start", 11))
        else:
            body.append(_text(left - 8, y + bar_h * 0.72, label_of(r["parameter"]), "end", 10.5))
        for end, c, word in ((r["metric_low"], "#1f77b4", f"x{1 - swing:g}"), (r["metric_high"], "#ff7f0e",
                                                                               f"x{1 + swing:g}")):
            x0, x1 = sorted((bx, x(end)))
            tip = f"{r['parameter']} {word}: {fmt(end)} (elasticity {r['elasticity']:+.3g})"
            body.append(f'<rect class="bar" x="{_t(x0)}" y="{_t(y)}" width="{_t(max(x1 - x0, 0.8))}" '
                        f'height="{bar_h}" fill="{c}"><title>{escape(tip)}</title></rect>')
        far = max(x(r["metric_low"]), x(r["metric_high"]))
        edge = width - 2 if narrow else right
        body.append(_text(min(far + 4, edge), y + bar_h * 0.72, f"{r['elasticity']:+.3g}",
                          "start" if far + 40 < edge else "end", 10, "#333"))
    bottom = top_y + len(rows) * row_h
    body.append(f'<line x1="{_t(bx)}" y1="{top_y - 6}" x2="{_t(bx)}" y2="{_t(bottom)}" stroke="#000" '
                f'stroke-width="1.2"><title>baseline {escape(fmt(base))}</title></line>')
    body.append(_text(min(max(bx, 60), width - 60), top_y - 12, f"baseline {fmt(base)}", "middle", 10.5))
    for v in (lo + 0.12 * span / 1.24, hi - 0.12 * span / 1.24):
        body.append(_text(x(v), bottom + 16, fmt(v), "middle", 10, "#444"))
    legend = (f"blue x{1 - swing:g}, orange x{1 + swing:g}; numbers: elasticity" if narrow else
              f"{r0['metric_label']}: blue x{1 - swing:g}, orange x{1 + swing:g}; numbers: elasticity")
    body.append(_text(width / 2 if narrow else (left + right) / 2, bottom + 34, legend, "middle", 10.5))
    return _svg(width, height, body, f"sensitivity of {r0['metric_label']}", gid, cls)


# ---------------------------------------------------------------- a step's kernels


def step_bars(record: dict) -> list[dict]:
    """The breakdown rows that add up to the step: its GPU ops and the host's time on the critical path
    (rubinperf.step.records.EXPOSED_HOST_ROW). The host's other rows (DP sync, scheduling) overlap the GPU
    but for that exposed part, so they are not added again."""
    from rubinperf.step.records import EXPOSED_HOST_ROW

    return [b for b in record["breakdown"] if b.get("part") != "cpu" or b["kernel"] == EXPOSED_HOST_ROW]


def kernel_bars_svg(record: dict, top: int = 12, gid: str = "kernels", width: int = 760, narrow: bool = False) -> str:
    """The step's largest ops (time, coloured by what bounds each), as horizontal bars; the rest summed. The
    bars add up to the step (step_bars). `narrow`: drawn for a phone (360 wide, each name above its bar),
    id `gid`-narrow."""
    cls = "narrow" if narrow else ""
    if narrow:
        gid, width = f"{gid}-narrow", 360
    ops = sorted(step_bars(record), key=lambda b: -b["time_ms"])
    shown, rest = ops[:top], ops[top:]
    rows = [(b["kernel"], b["time_ms"], b["bound"], b.get("share_of_step")) for b in shown]
    if rest:
        rows.append((f"{len(rest)} other ops", sum(b["time_ms"] for b in rest), "other",
                     sum(b.get("share_of_step") or 0.0 for b in rest)))
    if not rows:
        return _svg(width, 60, [_text(10, 35, "no op in this step")], "kernels: empty", gid, cls)
    if narrow:
        left, right, top_y, bar_h, gap, head = 8, width - 62, 12, 12, 5, 14
    else:
        left, right, top_y, bar_h, gap, head = 270, width - 70, 12, 15, 5, 0
    row_h = head + bar_h + gap
    height = top_y + len(rows) * row_h + 30
    longest = max(t for _, t, _, _ in rows) or 1.0
    body = []
    for i, (name, t, bound, share) in enumerate(rows):
        y = top_y + i * row_h + head
        w = max((right - left) * t / longest, 0.8)
        c = BOUND_COLOURS.get(bound, "#bbbbbb")
        keep = 56 if narrow else 44
        label = name if len(name) <= keep else name[:keep - 2] + "…"
        if narrow:
            body.append(_text(left, y - 3, label, "start", 11))
        else:
            body.append(_text(left - 8, y + bar_h * 0.75, label, "end", 10.5))
        tip = f"{name}: {fmt_time(t / 1e3)}, {bound}-bound" + (f", {100 * share:.0f}% of the step" if share else "")
        body.append(f'<rect class="bar" x="{left}" y="{_t(y)}" width="{_t(w)}" height="{bar_h}" fill="{c}">'
                    f"<title>{escape(tip)}</title></rect>")
        body.append(_text(left + w + 4, y + bar_h * 0.75, fmt_time(t / 1e3), "start", 10, "#333"))
    bounds = list(dict.fromkeys(b for _, _, b, _ in rows))
    x = left
    y = top_y + len(rows) * row_h + 14
    for b in bounds:
        if x + 24 + 6.5 * len(b) > width:
            x, y = left, y + 14
            height += 14
        body.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{BOUND_COLOURS.get(b, "#bbbbbb")}"/>')
        body.append(_text(x + 14, y, b, "start", 10))
        x += 24 + 6.5 * len(b)
    return _svg(width, height, body, f"{record['hardware']} {record['layout']} {record['phase']}: time of each op", gid,
                cls)
