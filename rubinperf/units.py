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
#
# The one parser of numbers with units: `--set`, the command-line options with units (--ttft, --tpot,
# --context, --new-tokens, --bytes), and the hint a spec file gets when it writes "8TB/s".
#
# One rule for K: SI quantities (bytes, B/s, FLOP/s, seconds, watts, hertz) take SI prefixes,
# k = K = 1000 (288GB = 288e9 bytes), and binary ones Ki/Mi/Gi/Ti (192GiB = 192 x 2^30); token counts take
# K = 1024 and M = 1024^2, the way context windows are quoted and the way tables print them (128K = 131,072).
# A bare number for a quantity with a dimension is refused (`--set hbm_bandwidth=30` is not 30 B/s), except
# where the unit is in the name written: `--set hbm_bandwidth_bytes_per_s=3e13`, `--bytes 4e9`, and
# counts (tokens, SMs, layers), which have no unit to forget.
#
# Hand-written on purpose: pint's import and registry cost about a second of start-up, quantiphy's import
# about 60 ms (start-up is budgeted at 1.5x a bare `import numpy`), and neither reads 128K tokens as 131,072
# (quantiphy reads 4GiB as 4e9 of a unit 'iB').

SI_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "m": 1e-3, "u": 1e-6, "µ": 1e-6, "μ": 1e-6, "n": 1e-9, "p": 1e-12,
             "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40, "Pi": 2.0 ** 50}
TOKEN_PREFIX = {"": 1.0, "k": 1024.0, "K": 1024.0, "m": 1024.0 ** 2, "M": 1024.0 ** 2, "G": 1024.0 ** 3}
PREFIX = SI_PREFIX  # (the name other modules imported)

# Dimension -> accepted unit spellings (after the prefix), longest first where one ends another.
SPELLINGS = {
    "B/s": ("B/s", "bytes/s", "Bps"),
    "FLOP/s": ("FLOP/s", "FLOPS", "flop/s", "FLOPs/s"),
    "B": ("B", "bytes", "byte"),
    "s": ("s", "sec"),
    "W": ("W",),
    "Hz": ("Hz",),
    "USD/GPU-hour": ("USD/GPU-hour", "$/GPU-hour", "USD/h", "$/h", "/h"),
    "tokens": ("tokens", "token", "tok"),
}
# Accepted forms shown in errors, per dimension.
EXAMPLES = {"B/s": "30TB/s, 900GB/s", "FLOP/s": "5PFLOP/s, 2.5e15FLOP/s", "B": "288GB, 192GiB, 4e9B",
            "s": "20ms, 1.5us, 2s", "W": "1400W, 1.4kW", "Hz": "1.9GHz", "USD/GPU-hour": "6USD/h, $6/h",
            "tokens": "131072, 128K, 1M"}
# Field-name unit suffix -> dimension.
SUFFIX_DIMENSION = {"_bytes_per_s": "B/s", "_flops_per_s": "FLOP/s", "_bytes": "B", "_s": "s", "_w": "W",
                    "_hz": "Hz", "_usd_per_gpu_hour": "USD/GPU-hour", "_tokens": "tokens"}
UNITS = {suffix: SPELLINGS[dim] for suffix, dim in SUFFIX_DIMENSION.items()}  # suffix -> spellings
COUNTS = ("tokens",)  # dimensions whose bare number is a count (no unit to forget)
_NUMBER = re.compile(r"^\s*\$?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")
_RELATIVE = re.compile(r"^\s*(?:([-+])\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*%|[x×*]\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))\s*$")


def unit_suffix(field: str) -> str:
    """The unit suffix of a field name: `hbm_bandwidth_bytes_per_s` -> '_bytes_per_s'; '' when none."""
    got = _SUFFIXES.get(field)
    if got is None:
        got = _SUFFIXES[field] = next((s for s in _LONGEST_FIRST if field.endswith(s)), "")
    return got


_LONGEST_FIRST = sorted(SUFFIX_DIMENSION, key=len, reverse=True)
_SUFFIXES: dict = {}   # field name -> its suffix (--set resolves a name against every field of a platform)


def dimension_of(field: str) -> str:
    """The dimension a field's name carries ('B/s', 's', 'tokens', ...), '' for a plain number."""
    return SUFFIX_DIMENSION.get(unit_suffix(field), "")


def relative_factor(text: str) -> float | None:
    """A what-if relative to the loaded value: '+20%' -> 1.2, '-10%' -> 0.9, 'x1.2' (or '*1.2', '×1.2') -> 1.2;
    None when `text` is not relative."""
    m = _RELATIVE.match(str(text))
    if not m:
        return None
    if m.group(3) is not None:
        return float(m.group(3))
    pct = float(m.group(2))
    return 1.0 + (pct if m.group(1) == "+" else -pct) / 100.0


def parse_quantity(text: str, dimension: str, what: str, bare_scale: float | None = 1.0) -> float:
    """`text` as a number in SI units of `dimension` ('' for a plain number). A bare number is taken
    times `bare_scale`; with bare_scale=None a bare number is an error that shows the accepted forms
    (counts, dimension 'tokens', are always read bare). `what` names the input in errors."""
    m = _NUMBER.match(str(text))
    if not m:
        forms = f" such as {EXAMPLES[dimension]}" if dimension in EXAMPLES else ""
        raise SpecError(f"{what}: expected a number{' with a unit' if dimension and dimension not in COUNTS else ''}"
                        f"{forms}, got {str(text)!r}")
    number, unit = float(m.group(1)), m.group(2)
    if not unit:
        if dimension in COUNTS:
            return number
        if bare_scale is None and dimension:
            raise SpecError(f"{what}: {str(text).strip()!r} has no unit: write it with one, such as {EXAMPLES[dimension]}")
        return number * (bare_scale or 1.0)
    if not dimension:
        raise SpecError(f"{what}: a plain number has no unit, got {str(text)!r}")
    prefixes = TOKEN_PREFIX if dimension == "tokens" else SI_PREFIX
    if dimension == "tokens" and unit in TOKEN_PREFIX:  # 128K, 1M: a count with a prefix and no unit word
        return number * TOKEN_PREFIX[unit]
    for spelling in sorted(SPELLINGS[dimension], key=len, reverse=True):
        if unit.endswith(spelling):
            prefix = unit[: -len(spelling)].strip()
            if prefix in prefixes:
                return number * prefixes[prefix]
    raise SpecError(f"{what}: unit {unit!r} does not fit (expected {dimension}, such as {EXAMPLES[dimension]})")


def parse_value(text: str, field: str, bare_ok: bool = True, what: str = "") -> float:
    """`30TB/s` for a `_bytes_per_s` field -> 3e13. A bare number is taken in the field's SI unit when
    `bare_ok` (the unit is in the name written), else refused for a field with a dimension."""
    what = what or f"--set {field}"
    if not _NUMBER.match(str(text)):
        forms = f"a number with a unit such as {EXAMPLES[dimension_of(field)]}" if dimension_of(field) else "a number"
        raise SpecError(f"{what}: expected {forms}, or a change of the loaded value such as +20%, -10% or x1.2")
    try:
        return parse_quantity(text, dimension_of(field), what, 1.0 if bare_ok else None)
    except SpecError as exc:
        if bare_ok or not _NUMBER.match(str(text)) or _NUMBER.match(str(text)).group(2):
            raise
        raise SpecError(f"{exc} (or {field}={str(text).strip()} in {dimension_of(field)}: the unit in the name)") from None


def parse_tokens(text: str, what: str = "token count") -> float:
    """A token count: 131072, 128K (= 131,072: K is 1024 and M is 1024²), 1M, 855000, 1.5e5, 32K tokens."""
    return parse_quantity(text, "tokens", what)
