"""Rewrite values of a TOML spec, keeping everything else: comments, order, layout.

The calibration writes fitted numbers back into a hardware file. Doing that line by line
breaks on anything but one `key = value` per line (a multi-line source string, a
`key = value # comment` with '=' in the comment, dotted keys, inline tables); this goes
through tomlkit, which parses the document and writes back every byte it was not asked
to change.

Use: `rewrite_tables(text, {(section, key): number}, {section: new_source})`
(`rubinperf.calibrate.fit.calibrated_toml` writes calibrated specs through it).
"""

from __future__ import annotations

import math

from rubinperf.errors import SpecError


def _number(v: float):
    """Three significant digits (what a fit can claim), as a TOML float; counts stay integers."""
    import tomlkit

    if isinstance(v, int) and not isinstance(v, bool):
        return tomlkit.item(v)
    v = float(v)
    if not math.isfinite(v):
        raise SpecError(f"hardware TOML: cannot write a non-finite value {v!r}")
    return tomlkit.item(float(f"{v:.3g}"))


def _keep_trivia(new, old):
    """The replaced value keeps the old one's comment and surrounding whitespace."""
    trivia_new, trivia_old = getattr(new, "trivia", None), getattr(old, "trivia", None)
    if trivia_new is not None and trivia_old is not None:
        trivia_new.indent = trivia_old.indent
        trivia_new.comment_ws = trivia_old.comment_ws
        trivia_new.comment = trivia_old.comment
        trivia_new.trail = trivia_old.trail
    return new


def rewrite_tables(text: str, updates: dict, sources: dict) -> str:
    """`text` with `updates` ((section, key) -> number) and `sources` (section -> source string) applied.

    Every other byte of the document is kept. A section or key that is not in the document
    is a SpecError naming it (nothing is invented); broken TOML is a SpecError too.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(text)
    except (TOMLKitError, RecursionError) as exc:
        raise SpecError(f"hardware TOML: malformed: {exc}") from None
    changes = [*(((sec, "source"), tomlkit.string(src)) for sec, src in sources.items()),
               *(((sec, key), _number(v)) for (sec, key), v in updates.items())]
    missing = []
    for (section, key), value in changes:
        table = doc.get(section)
        if not hasattr(table, "get") or key not in table:
            missing.append(f"[{section}] {key}")
            continue
        table[key] = _keep_trivia(value, table.item(key) if hasattr(table, "item") else None)
    if missing:
        raise SpecError(f"hardware TOML: no line for {', '.join(missing)}")
    return tomlkit.dumps(doc)


def rewrite_efficiency(text: str, updates: dict, source: str) -> str:
    """Replace values in the [efficiency] table, keeping everything else (see rewrite_tables)."""
    return rewrite_tables(text, {("efficiency", k): v for k, v in updates.items()}, {"efficiency": source})
