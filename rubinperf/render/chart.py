"""The terminal chart of `pareto`: a log-log character chart of each rack's frontier, as wide as the console.

Presentation only: it reads the point records of `rubinperf.serving.pareto`.
"""

from __future__ import annotations

import math

from rubinperf.render.output import console_width
from rubinperf.units import si

MARKERS = ("●", "▲", "■", "◆", "✚", "★")
COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red")


def _log_scale(lo: float, hi: float, n: int):
    lo, hi = math.log10(lo), math.log10(hi)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    return lambda v: int(round((math.log10(v) - lo) / (hi - lo) * (n - 1))), (lo, hi)


CHART_LABEL_W = 9  # the y axis labels and the axis line: the chart's width is the console's less this and 2


def chart_width() -> int:
    """Plot columns of the terminal chart: the console's width less the axis, between 24 and 150."""
    return max(24, min(150, console_width() - CHART_LABEL_W - 3))


def series_name(r: dict, servings: set) -> str:
    """The series a point is drawn in: its rack, and its serving where records hold more than one."""
    return f"{r['hardware']} {r.get('serving', 'disagg')}" if len(servings) > 1 else r["hardware"]


def series_names(records: list[dict]) -> tuple[list[str], set]:
    servings = {r.get("serving", "disagg") for r in records}
    return list(dict.fromkeys(series_name(r, servings) for r in records)), servings


def frontier_chart(records: list[dict], width: int = 72, height: int = 16):
    """A log-log character chart: tokens/s per GPU (up) against tokens/s per user (right); a marker
    per rack on its frontier, dots for the other feasible points. Returns a rich Text."""
    from rich.text import Text

    pts = [r for r in records if r["feasible"] and r["tokens_per_s_per_user"] > 0 and r["tokens_per_s_per_gpu"] > 0]
    if not pts:
        return Text("(no feasible points to chart)")
    xs = [r["tokens_per_s_per_user"] for r in pts]
    ys = [r["tokens_per_s_per_gpu"] for r in pts]
    fx, (xlo, xhi) = _log_scale(min(xs), max(xs), width)
    fy, (ylo, yhi) = _log_scale(min(ys), max(ys), height)
    hardware, servings = series_names(records)
    grid = [[(" ", "")] * width for _ in range(height)]
    for r in sorted(pts, key=lambda r: r["on_frontier"]):      # frontier markers drawn last, on top
        k = hardware.index(series_name(r, servings)) % len(MARKERS)
        col, row = fx(r["tokens_per_s_per_user"]), height - 1 - fy(r["tokens_per_s_per_gpu"])
        if r["on_frontier"]:
            grid[row][col] = (MARKERS[k], COLORS[k])
        elif grid[row][col][0] == " ":
            grid[row][col] = ("·", "dim " + COLORS[k])
    label_w = CHART_LABEL_W
    text = Text()
    text.append("tok/s/GPU\n", style="bold")
    for i, line in enumerate(grid):
        yv = 10 ** (yhi - (yhi - ylo) * i / (height - 1))
        label = si(yv) if i % 3 == 0 or i == height - 1 else ""
        text.append(f"{label:>{label_w}} ┤" if label else " " * label_w + " │")
        for ch, style in line:
            text.append(ch, style=style or None)
        text.append("\n")
    text.append(" " * label_w + " └" + "─" * width + "\n")
    ticks = [" "] * (width + 12)
    last = si(10 ** xhi)
    for j in range(0, width, 16):
        s = si(10 ** (xlo + (xhi - xlo) * j / (width - 1)))
        if j + len(s) + 2 > width - len(last):
            break
        ticks[j:j + len(s)] = list(s)
    ticks[width - len(last):width] = list(last)
    text.append(" " * (label_w + 2) + "".join(ticks).rstrip() + "\n")
    stat = (records[0].get("interactivity_stat") or "mean") if records else "mean"
    text.append(" " * (label_w + 2) + f"tok/s/user ({stat if stat == 'mean' else stat.upper()}, log) →")
    legend = sum(len(hw) + 4 for hw in hardware) + 20
    text.append("\n" + " " * (label_w + 2) if label_w + 23 + legend > label_w + 2 + width else "   ")
    for k, hw in enumerate(hardware):
        text.append(f"{MARKERS[k % len(MARKERS)]} {hw}  ", style=COLORS[k % len(COLORS)])
    text.append("· other swept points", style="dim")
    return text
