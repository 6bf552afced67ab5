"""Numbers as people read them: SI prefixes, times in s/ms/µs, percentages, token counts (K = 1024).

Neutral ground: the core (validate's details) and the presentation (tables) both format with these.
"""

from __future__ import annotations

import math
import re

from rubinperf.errors import SpecError

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


# ---------------------------------------------------------------- numbers with units, read

PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# Field-name unit suffix -> accepted unit spellings (after the prefix).
UNITS = {
    "_bytes_per_s": ("B/s", "bytes/s"),
    "_flops_per_s": ("FLOP/s", "FLOPS", "flop/s"),
    "_bytes": ("B", "bytes"),
    "_s": ("s",),
    "_w": ("W",),
    "_usd_per_gpu_hour": ("$/h", "USD/h", "$"),
    "_tokens": ("tokens", "tok"),
}
_NUMBER = re.compile(r"^\s*\$?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def unit_suffix(field: str) -> str:
    return next((s for s in sorted(UNITS, key=len, reverse=True) if field.endswith(s)), "")


def parse_value(text: str, field: str) -> float:
    """`30TB/s` for a `_bytes_per_s` field -> 3e13. A bare number is taken in the field's SI unit."""
    m = _NUMBER.match(text)
    if not m:
        raise SpecError(f"--set {field}: expected a number, optionally with a unit, got {text!r}")
    number, unit = float(m.group(1)), m.group(2)
    if not unit:
        return number
    suffix = unit_suffix(field)
    for spelling in UNITS.get(suffix, ()):
        if unit.endswith(spelling):
            prefix = unit[: -len(spelling)].strip()
            if prefix in PREFIX:
                return number * PREFIX[prefix]
    allowed = ", ".join(UNITS[suffix]) if suffix in UNITS else "no unit"
    raise SpecError(f"--set {field}: unit {unit!r} does not fit this field (expected {allowed}, with an SI prefix)")
