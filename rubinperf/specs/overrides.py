"""What-if overrides: `--set hardware.hbm_bandwidth_bytes_per_s=30e12` or `--set hbm_bandwidth=30TB/s`.

A key is `[hardware.|stack.|model.|workload.]field` (a stack field lives in the platform record
passed as hardware=); the field may drop its unit suffix
(`hbm_bandwidth` for `hbm_bandwidth_bytes_per_s`). A value is
- a number with an SI prefix and a unit that matches the field (`30TB/s`, `288GB`, `1.5us`,
  `50PFLOP/s`, `1800W`; token counts take K = 1024: `1M`), parsed by rubinperf.units;
- a plain number, in the field's SI unit when the key spells the unit
  (`hbm_bandwidth_bytes_per_s=3e13`) or the field has none (a count, a fraction); a plain
  number for a key without its unit (`hbm_bandwidth=30`) is refused, showing the forms;
- relative to the loaded value: `+20%`, `-10%`, `x1.2` (or `*1.2`).
The new record is validated like a loaded one (ranges included); anything wrong is a SpecError
that lists close matches.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

from rubinperf.errors import SpecError
from rubinperf.specs.loader import LARGEST_INT, _type_hints, check_value, spec_fields
from rubinperf.units import dimension_of, parse_value, relative_factor, unit_suffix

def _views(records: dict) -> dict:
    """Spec kind -> (record key, fields). A platform (hardware + stack) answers to both `hardware.`
    and `stack.`, each with its own fields. (A function of the records' keys and classes: made once for each.)"""
    return _views_of(tuple((k, type(rec)) for k, rec in records.items() if rec is not None))


@functools.cache
def _views_of(kinds: tuple) -> dict:
    views = {}
    for k, cls in kinds:
        fields = spec_fields(cls)
        if k == "hardware" and {f.metadata.get("spec") for f in fields} >= {"hardware", "stack"}:
            for spec in ("hardware", "stack"):
                views[spec] = (k, [f for f in fields if f.metadata.get("spec") == spec])
        else:
            views[k] = (k, fields)
    return views


def _resolve(key: str, records: dict) -> tuple[str, str]:
    """`hardware.hbm_bandwidth` -> ('hardware', 'hbm_bandwidth_bytes_per_s'); `stack.split_k_max` -> ('hardware',
    'split_k_max') when the hardware record is a platform (the stack's fields live in it)."""
    kind, _, name = key.rpartition(".")
    views = _views(records)
    known = list(views) if "stack" in views else list(records)
    if kind and kind not in views:
        raise SpecError(f"--set {key}: unknown spec '{kind}' (expected {', '.join(known)})")
    kinds = [kind] if kind else list(views)
    candidates = [(k, n) for k in kinds for n in _names_of(views[k][1]).get(name, ())]
    if len(candidates) == 1:
        return views[candidates[0][0]][0], candidates[0][1]
    if len(candidates) > 1:
        raise SpecError(f"--set {key}: ambiguous, say which: {', '.join(f'{k}.{n}' for k, n in candidates)}")
    if kind:  # the field may be the other spec's: say which
        other = [k for k in views if k != kind for f in views[k][1]
                 if f.name == name or f.name[: len(f.name) - len(unit_suffix(f.name))] == name]
        if other:
            raise SpecError(f"--set {key}: {name} is a {other[0]} field, not a {kind} one (write {other[0]}.{name})")
    every = [f"{k}.{f.name}" for k in kinds for f in views[k][1]]
    import difflib   # (only for the hint of an unknown field)

    near = difflib.get_close_matches(key if kind else name, every + [e.split(".", 1)[1] for e in every], n=4, cutoff=0.5)
    hint = f" (close: {', '.join(near)})" if near else ""
    raise SpecError(f"--set {key}: unknown field{hint}")


_NAMES: dict = {}   # id(a view's list of fields) -> (the list, {a field's name, or that name less its unit: its fields})


def _names_of(fields: list) -> dict:
    """Each name a field of `fields` answers to (its own, or its name without the unit suffix) -> the names of the
    fields that answer to it, in the fields' order (a view's fields are _views_of's, made once)."""
    hit = _NAMES.get(id(fields))
    if hit is None or hit[0] is not fields:
        names: dict = {}
        for f in fields:
            for n in dict.fromkeys((f.name, f.name[: len(f.name) - len(unit_suffix(f.name))])):
                names.setdefault(n, []).append(f.name)
        hit = _NAMES[id(fields)] = (fields, names)
    return hit[1]


def apply_overrides(assignments: list[str] | None, **records):
    """Return the records (hardware=, model=, workload=) with every `key=value` applied, in the order given."""
    out = dict(records)
    from rubinperf.errors import shorten

    for text in assignments or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SpecError(f"--set {shorten(text)!r}: expected key=value, e.g. hbm_bandwidth=30TB/s")
        if len(key) > 200 or len(value) > 10_000:  # no field is named so, no value is written so
            raise SpecError(f"--set {shorten(text)!r}: expected key=value with a spec field name and a value, "
                            "e.g. hbm_bandwidth=30TB/s")
        kind, field = _resolve(key.strip(), out)
        rec = out[kind]
        f = next(f for f in spec_fields(type(rec)) if f.name == field)
        typ = _type_hints(type(rec))[field]   # (evaluated once per class and run)
        raw = value.strip()
        if typ in (float, int):
            factor = relative_factor(raw)
            if factor is not None:
                parsed = getattr(rec, field) * factor
                if typ is int and math.isfinite(parsed) and parsed != round(parsed):
                    raise SpecError(f"--set {text.strip()}: {raw} of {getattr(rec, field)} is {parsed:g}, not a whole "
                                    f"number (write {field}={math.floor(parsed)} or {math.ceil(parsed)})")
                if typ is int and math.isfinite(parsed):
                    parsed = round(parsed)
            else:
                parsed = parse_value(raw, field, bare_ok=key.strip().rpartition(".")[2] == field
                                     or not dimension_of(field), what=f"--set {shorten(text.strip())} ({field})")
            if typ is int:
                if not math.isfinite(parsed) or parsed != int(parsed):
                    raise SpecError(f"--set {field}: expected an integer, got {raw!r}")
                if abs(parsed) > LARGEST_INT:
                    raise SpecError(f"--set {field}: expected an integer of magnitude at most {LARGEST_INT:,}, got {raw!r}")
                parsed = int(parsed)
        elif typ is bool:
            if raw.lower() not in ("true", "false"):
                raise SpecError(f"--set {field}: expected true or false, got {raw!r}")
            parsed = raw.lower() == "true"
        elif typ is str:
            parsed = raw
        else:
            try:
                parsed = [int(x) for x in raw.strip("[]").split(",") if x.strip()]
            except ValueError:
                raise SpecError(f"--set {field}: expected a list of integers like [1,14], got {raw!r}") from None
        checked = check_value(Path(f"--set {kind}"), field, parsed, typ, f.metadata)
        new = dataclasses.replace(rec, **{field: checked})
        if field in getattr(rec, "ranges", {}):   # a value the user sets is no longer the file's assumption
            new = dataclasses.replace(new, ranges={k: v for k, v in rec.ranges.items() if k != field})
        check = getattr(new, "validate", None)
        if check is not None:
            try:
                check()
            except SpecError as exc:  # the override broke a cross-field rule: blame the override, not the file
                why = str(exc).removeprefix(f"{rec.path}: ")
                if getattr(rec, "stack_path", ""):
                    why = why.removeprefix(f"{rec.stack_path}: ")
                raise SpecError(f"--set {text.strip()}: {why} (in {kind} {rec.name})") from None
        out[kind] = new
    return out
