"""Numbers as people read them: SI prefixes, times in s/ms/µs, percentages, token counts (K = 1024).

Neutral ground: the core (validate's details) and the presentation (tables) both format with these.
"""

from __future__ import annotations

import math

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]


def si(value, unit: str = "", digits: int = 3) -> str:
    """12345678 -> '12.3 M' (+unit). Zero and non-finite values print plainly."""
    if value is None:
        return "—"
    v = float(value)
    if not math.isfinite(v) or v == 0:
        return f"{v:g}{(' ' + unit) if unit else ''}"
    for scale, prefix in _PREFIXES:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}g} {prefix}{unit}".rstrip()
    return f"{v:.{digits}g} {unit}".rstrip()


def fmt_time(seconds) -> str:
    """Seconds as ms or µs, three significant digits."""
    if seconds is None:
        return "—"
    s = float(seconds)
    if not math.isfinite(s):
        return "inf"
    if abs(s) >= 1.0:
        return f"{s:.3g} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_pct(fraction) -> str:
    return "—" if fraction is None else f"{100 * float(fraction):.0f}%"


def fmt_tokens(value) -> str:
    """Token counts in one convention, K = 1024 and M = 1024² (as context windows are quoted, and as
    --context parses them): 131072 -> '128K', 1048576 -> '1M'; other counts in digits: 855000 -> '855,000'."""
    if value is None:
        return "—"
    v = float(value)
    if not math.isfinite(v):
        return f"{v:g}"
    if v >= 1024 and v % (1 << 20) == 0:
        return f"{v / (1 << 20):g}M"
    if v >= 1024 and v % 1024 == 0:
        return f"{v / 1024:g}K"
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def fmt_num(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    v = float(value)
    if abs(v) >= 1e4:
        return si(v, digits=digits)
    return f"{v:,.{digits}g}" if abs(v) < 100 else f"{v:,.0f}"
