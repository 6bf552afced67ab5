"""Strict TOML loading shared by every spec kind.

A spec dataclass declares its fields once; each field's metadata says which TOML table
holds it (`section`) and its unit. The loader checks the file against that declaration:
missing keys, unknown keys, wrong types and out-of-range values are a SpecError naming
the file, the key and what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints



def _tomllib():
    """tomllib (tomli before 3.11), imported where a file is parsed: a bundled spec's parse is usually kept
    (_parsed_cache), and the parser's import is a few ms of every command's start-up."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


def __getattr__(name: str):   # `from rubinperf.specs.loader import tomllib` (imported on first use)
    if name == "tomllib":
        return _tomllib()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

from rubinperf.bundled import SOURCE_ROOT as REPO_ROOT  # noqa: F401  (the checkout; bundled specs: bundled.folder)
from rubinperf.errors import SpecError
from rubinperf.kept import kept_file, read_kept, write_kept

# Sanity range of any non-zero number in a spec, in SI units. Nothing a GPU, a rack or a model
# has comes near either end (peaks ~1e16 FLOP/s, capacities ~1e12 B, latencies ~1e-6 s); a value
# outside is a unit mistake, and would overflow or underflow the formulas to inf, 0 or nan.
SMALLEST, LARGEST = 1e-15, 1e24
LARGEST_INT = 2 ** 40  # counts and sizes (layers are bounded tighter: they are looped over)
MAX_LAYERS = 10_000  # a model's layers are looped over: a sanity bound, far above any real model

# The documented range of a field, by its unit where the field gives none of its own (`typical=`): what
# GPUs, racks, models and workloads of the next few years may have. A value more than RANGE_SLACK times
# outside it is a unit mistake or a typo (a bandwidth in GB/s written as B/s), refused with the range named.
# Fractions (at_most=1) have their hard range [0, 1] instead. `rubinperf list fields` prints every range.
RANGE_SLACK = 100
TYPICAL = {"FLOP/s": (1e13, 1e17), "B/s": (1e10, 1e14), "bytes": (1.0, 1e13), "s": (1e-8, 1.0), "Hz": (1e8, 1e10),
           "W": (100.0, 1e4), "USD/GPU-hour": (0.1, 100.0), "GPUs": (1, 576), "SMs": (16, 1024), "domains": (1, 64),
           "tokens": (1, 1e7), "rows": (1, 1e5), "columns": (1, 1e5), "elements": (1, 1e6), "cycles": (1, 1e5),
           "": (1, 1e6)}


def documented_range(meta: dict) -> tuple[float, float] | None:
    """(low, high) a field's values usually lie in; None for a fraction (its range is [0, 1]) or a non-number."""
    if meta.get("at_most") == 1.0:
        return None
    return meta.get("typical") or TYPICAL.get(meta["unit"])


def spec_field(section: str, unit: str = "", *, positive: bool = True, at_most: float | None = None,
               typical: tuple[float, float] | None = None, default: Any = dataclasses.MISSING, doc: str = "",
               spec: str = "") -> Any:
    """Declare a spec field: which TOML table holds it, its unit, and its valid range.

    Every number must also be finite and, unless zero, within [SMALLEST, LARGEST] (integers:
    at most LARGEST_INT) and within RANGE_SLACK times its documented range (`typical`, else its
    unit's in TYPICAL); a positive amount in tokens or bytes is at least one."""
    meta = {"section": section, "unit": unit, "positive": positive, "at_most": at_most, "doc": doc}
    if spec:   # which spec kind declares it, where a record merges two (a Platform: hardware + stack)
        meta["spec"] = spec
    if typical is not None:
        meta["typical"] = typical
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def spec_field_of(spec: str):
    """spec_field for the fields of one spec kind (`hardware`, `stack`): each marked as that kind's where a record
    merges two (a Platform)."""
    def field_of(*args, **kwargs):
        return spec_field(*args, spec=spec, **kwargs)
    return field_of


@functools.cache
def _type_hints(cls) -> dict:
    """get_type_hints of a spec class, evaluated once per run (string annotations are slow to evaluate)."""
    return get_type_hints(cls)


def spec_fields(cls) -> list[dataclasses.Field]:
    """The fields of a spec class that live in TOML tables (not name/sources)."""
    return list(_spec_fields(cls))


@functools.cache
def _spec_fields(cls) -> tuple:
    return tuple(f for f in dataclasses.fields(cls) if "section" in f.metadata)


def numeric_fields(cls) -> list[str]:
    """Names of scalar numeric fields: what `--set` and sensitivity may vary."""
    hints = _type_hints(cls)
    return [f.name for f in spec_fields(cls) if hints[f.name] in (float, int)]


NAME_MAX = 255  # bytes in one path component (Linux, macOS); a longer name cannot be a file


def resolve_path(name_or_path: str, kind: str) -> Path:
    """A bundled spec name (`gb300-nvl72`) or a path to a user's TOML file."""
    from rubinperf.errors import shorten

    shown = shorten(name_or_path)
    if "\0" in name_or_path:
        raise SpecError(f"{shown!r}: a {kind} name or path cannot contain a NUL character")
    p = Path(name_or_path)
    too_long = any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX for part in p.parts)
    as_path = p.suffix == ".toml" or "/" in name_or_path
    if too_long:
        if as_path:
            raise SpecError(f"{shown}: no such {kind} spec file (a path component is over {NAME_MAX} bytes)")
        raise SpecError(f"unknown {kind} '{shown}' (a name of {len(name_or_path.encode('utf-8', 'replace')):,} bytes; "
                        f"known: {', '.join(bundled_names(kind))})")
    try:
        if as_path or p.is_file():
            if not p.is_file():
                if p.is_dir():
                    raise SpecError(f"{shown}: is a directory, not a file (a {kind} spec is a .toml file)")
                if p.exists():
                    return p   # a FIFO, device or socket: read_bounded names what it is, without reading it
                raise SpecError(f"{shown}: no such {kind} spec file")
            return p
    except OSError as exc:  # a directory without search permission, a loop of links, ...
        raise SpecError(f"{shown}: cannot read {kind} spec: {exc.strerror or exc}") from None
    bundled = bundled_dir(kind) / f"{name_or_path}.toml"
    if not bundled.is_file():
        names = bundled_names(kind)
        near = [n for n in names if n.startswith(name_or_path.lower()) or name_or_path.lower().startswith(n)]
        near = near or __import__("difflib").get_close_matches(name_or_path.lower(), names, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(near)}? " if near else ""
        raise SpecError(f"unknown {kind} '{shown}' ({hint}known: {', '.join(names)}; or give a path to a .toml file)")
    return bundled


def kind_dir(kind: str) -> str:
    return {"hardware": "hardware", "model": "models", "workload": "examples", "stack": "stacks"}[kind]


def bundled_dir(kind: str) -> Path:
    """The folder of bundled specs of one kind: inside the installed package, or the checkout's."""
    from rubinperf.bundled import folder

    return folder(kind_dir(kind))


def bundled_names(kind: str) -> list[str]:
    """Names of the bundled specs of one kind. None at all is a broken install: an error, never an empty list."""
    d = bundled_dir(kind)
    names = sorted(p.stem for p in d.glob("*.toml"))
    if not names:
        raise SpecError(f"no bundled {kind} specs found in {d} (a broken install: reinstall rubinperf)")
    return names


def read_toml(path: Path) -> dict:
    from rubinperf.files import read_bounded

    data = read_bounded(path, "spec", "a .toml spec file")   # regular, at most 1 MiB: before any parsing
    cache = _parsed_cache(path, data)
    kept = read_kept(cache)
    if kept is not None:
        return kept
    tomllib = _tomllib()
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: malformed TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: malformed TOML: arrays or tables nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if cache is not None:
        write_kept(cache, parsed)   # (a value marshal cannot hold, a TOML date: not kept)
    return parsed


# The bundled specs' parsed TOML, kept as Python keeps a module's bytecode: in the package's __pycache__ (ignored by
# git, left out of the sdist and the wheel), named by a digest of the file's bytes, so an edited file is parsed
# afresh. Parsing the five files of `rubinperf estimate` costs about a twentieth of its start-up; loading them from
# marshal a tenth of that. Only the bundled folders' files are kept (a user's own specs are parsed each time), and a
# folder that cannot be written (a read-only install) only means parsing each time.


def _parsed_cache(path, data: bytes, kind: str = "spec", version: bytes = b"") -> Path | None:
    """Where the parse of bundled file `path` (its bytes `data`) is kept (rubinperf/kept.py), or None for a file
    outside the bundled folders. `kind` names the cache file; `version` (the reader's own code, for a reader that
    types what it parses) goes into the digest beside the bytes, so that a changed reader parses afresh."""
    from rubinperf.bundled import SPEC_FOLDERS, data_root

    try:
        where = Path(path).resolve().relative_to(data_root())
    except (OSError, ValueError, RuntimeError):
        return None
    if len(where.parts) < 2 or where.parts[0] not in SPEC_FOLDERS:
        return None
    return kept_file(kind, data, version)


def check_value(path: Path, key: str, value: Any, typ: Any, meta: dict) -> Any:
    where = f"{path}: {meta['section']}.{key}"
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{where}: expected a number{_unit(meta)}, got {type(value).__name__} {value!r}"
                            + _suggest(value, key))
        value = float(value)
        if not math.isfinite(value):
            raise SpecError(f"{where}: expected a finite number{_unit(meta)}, got {value!r}")
    elif typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
    elif typ is str:
        if not isinstance(value, str):
            raise SpecError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
        return value
    elif typ is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{where}: expected true or false, got {type(value).__name__} {value!r}")
        return value
    elif get_origin(typ) is tuple and get_args(typ)[0] is str:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{where}: expected a list of strings, got {value!r}")
        return tuple(value)
    elif get_origin(typ) is tuple:
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise SpecError(f"{where}: expected a list of integers, got {value!r}")
        if any(v < 0 for v in value):
            raise SpecError(f"{where}: expected non-negative integers, got {value!r}")
        return tuple(value)
    else:  # pragma: no cover - a programming error in a spec class
        raise TypeError(f"unsupported spec field type {typ}")
    if meta["positive"] and not value > 0:
        raise SpecError(f"{where}: expected a positive value{_unit(meta)}, got {value!r}")
    if not meta["positive"] and value < 0:
        raise SpecError(f"{where}: expected a non-negative value{_unit(meta)}, got {value!r}")
    if meta["at_most"] is not None and value > meta["at_most"]:
        raise SpecError(f"{where}: expected at most {meta['at_most']}, got {value!r}")
    if typ is int and value > LARGEST_INT:
        raise SpecError(f"{where}: expected at most {LARGEST_INT:,}, got {value!r}")
    if typ is float and value and not SMALLEST <= abs(value) <= LARGEST:
        raise SpecError(f"{where}: expected a magnitude between {SMALLEST:g} and {LARGEST:g}{_unit(meta)} "
                        f"(SI units: is the unit right?), got {value!r}")
    if meta["unit"] in ("tokens", "bytes") and meta["positive"] and value < 1:
        raise SpecError(f"{where}: expected at least 1 {meta['unit'].rstrip('s')}, got {value!r}")
    span = documented_range(meta)
    if span is not None and value and not span[0] / RANGE_SLACK <= value <= span[1] * RANGE_SLACK:
        raise SpecError(f"{where}: {value:g}{_unit(meta)} is more than {RANGE_SLACK}x outside the documented range "
                        f"{format_range(span, meta['unit'])} (is the unit right?)")
    return value


def format_range(span, unit: str = "") -> str:
    """(1e10, 1e14) -> '1e+10 to 1e+14 B/s'."""
    return f"{span[0]:g} to {span[1]:g}" + (f" {unit}" if unit else "")


def _suggest(value: Any, key: str) -> str:
    """'8TB/s' in a spec file: say which plain SI number was meant."""
    if not isinstance(value, str):
        return ""
    from rubinperf.units import parse_value

    try:
        number = parse_value(value, key)
    except SpecError:
        return ""
    return f" (spec files take plain SI numbers: write {number:g})" if math.isfinite(number) else ""


def _unit(meta: dict) -> str:
    return f" in {meta['unit']}" if meta["unit"] else ""


def top_level_keys(cls) -> tuple[str, ...]:
    """The top-level string keys of a spec (name, description; a hardware's default_stack): every field
    outside a table, but the loader's own (sources, path, ranges)."""
    return tuple(f.name for f in dataclasses.fields(cls)
                 if "section" not in f.metadata and f.name not in ("sources", "path", RANGES) and f.init)


# The [ranges] table of a spec whose class has a `ranges` field (hardware, stack): an assumed field's range as data,
# `<field> = [low, high]` in the field's unit, with a `source` saying why. Strict: a field of the spec that holds a
# number, two finite numbers low <= value <= high, each a value the field itself may take.
RANGES = "ranges"


def has_ranges(cls) -> bool:
    return any(f.name == RANGES for f in dataclasses.fields(cls))


def check_ranges(path: Path, table: Any, cls, values: dict) -> tuple[dict, str]:
    """The [ranges] table checked against the spec's fields and values: ({field: (low, high)}, source)."""
    if not isinstance(table, dict):
        raise SpecError(f"{path}: '{RANGES}' should be a table [{RANGES}], got {type(table).__name__}")
    src = table.get("source")
    if not isinstance(src, str) or not src.strip():
        raise SpecError(f"{path}: missing key '{RANGES}.source' (a string saying where each range comes from)")
    hints = _type_hints(cls)
    by_name = {f.name: f for f in spec_fields(cls)}
    out = {}
    for key, span in table.items():
        if key == "source":
            continue
        where = f"{path}: {RANGES}.{key}"
        f = by_name.get(key)
        if f is None or hints[key] is not float:
            near = _close(key, [n for n in by_name if hints[n] is float])
            raise SpecError(f"{where}: not a number field of this spec" + (f" (did you mean {near}?)" if near else ""))
        if not (isinstance(span, list) and len(span) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in span)):
            raise SpecError(f"{where}: expected [low, high] (two numbers{_unit(f.metadata)}), got {span!r}")
        lo, hi = (check_value(path, key, x, float, f.metadata) for x in span)
        value = values[key]
        if not lo <= value <= hi:
            raise SpecError(f"{where}: expected low <= {f.metadata['section']}.{key} ({value:g}) <= high, got "
                            f"[{lo:g}, {hi:g}]")
        out[key] = (lo, hi)
    return out, src


def build_spec(cls, data: dict, path: Path, top_level: tuple[str, ...] | None = None):
    """Check `data` (a parsed TOML document) against `cls` and build the frozen record."""
    top_level = top_level_keys(cls) if top_level is None else top_level
    hints = _type_hints(cls)
    fields = spec_fields(cls)
    sections: dict[str, list[dataclasses.Field]] = {}
    for f in fields:
        sections.setdefault(f.metadata["section"], []).append(f)

    kwargs: dict[str, Any] = {}
    ranges_table = None
    if has_ranges(cls) and RANGES in data:
        ranges_table = data[RANGES]
        data = {k: v for k, v in data.items() if k != RANGES}
    for key in top_level:
        if key not in data:
            raise SpecError(f"{path}: missing key '{key}' (a string)")
        if not isinstance(data[key], str):
            raise SpecError(f"{path}: {key}: expected a string, got {data[key]!r}")
        kwargs[key] = data[key]
    for key, value in data.items():
        if key in top_level:
            continue
        if key not in sections:
            raise SpecError(f"{path}: unknown key '{key}' (expected tables: {', '.join(sections)})")
        if not isinstance(value, dict):
            raise SpecError(f"{path}: '{key}' should be a table [{key}], got {type(value).__name__}")

    sources: dict[str, str] = {}
    for section, members in sections.items():
        table = data.get(section)
        if table is None:
            raise SpecError(f"{path}: missing table [{section}]")
        known = {f.name for f in members}
        for key in table:
            if key != "source" and key not in known:
                near = _close(key, known)
                raise SpecError(f"{path}: unknown key '{section}.{key}'" + (f" (did you mean {near}?)" if near else ""))
        src = table.get("source")
        if not isinstance(src, str) or not src.strip():
            raise SpecError(f"{path}: missing key '{section}.source' (a string saying where the numbers come from)")
        sources[section] = src
        for f in members:
            if f.name not in table:
                if f.default is not dataclasses.MISSING:
                    kwargs[f.name] = f.default
                    continue
                raise SpecError(f"{path}: missing key '{section}.{f.name}'{_expect(hints[f.name], f.metadata)}")
            kwargs[f.name] = check_value(path, f.name, table[f.name], hints[f.name], f.metadata)
    if ranges_table is not None:
        kwargs[RANGES], sources[RANGES] = check_ranges(path, ranges_table, cls, kwargs)
    kwargs["sources"] = sources
    kwargs["path"] = str(path)
    record = cls(**kwargs)
    check = getattr(record, "validate", None)
    if check is not None:
        check()
    return record


def _expect(typ: Any, meta: dict) -> str:
    if typ is float:
        return f" (a number{_unit(meta)})"
    if typ is int:
        return " (an integer)"
    if typ is str:
        return " (a string)"
    if get_origin(typ) is tuple:
        return " (a list of integers)"
    return ""


def _close(key: str, candidates) -> str:
    import difflib

    near = difflib.get_close_matches(key, list(candidates), n=3, cutoff=0.6)
    return ", ".join(near)


def to_toml(record) -> str:
    """Write a spec record back as TOML (round-trips through `build_spec`)."""
    lines = [f'{key} = {_toml_value(getattr(record, key))}' for key in top_level_keys(type(record))]
    by_section: dict[str, list[dataclasses.Field]] = {}
    for f in spec_fields(type(record)):
        by_section.setdefault(f.metadata["section"], []).append(f)
    for section, members in by_section.items():
        lines += ["", f"[{section}]", f"source = {_toml_value(record.sources[section])}"]
        for f in members:
            lines.append(f"{f.name} = {_toml_value(getattr(record, f.name))}")
    spans = getattr(record, RANGES, None)
    if spans:
        lines += ["", f"[{RANGES}]", f"source = {_toml_value(record.sources.get(RANGES, ''))}"]
        lines += [f"{k} = [{lo!r}, {hi!r}]" for k, (lo, hi) in spans.items()]
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(repr(x) for x in v) + "]"
    return _toml_string(str(v))


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(s: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (they may not appear raw)."""
    out = []
    for ch in s:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_SPECS: dict = {}


def load_spec_file(cls, path: Path):
    """build_spec(cls, read_toml(path), path), remembered for the process while the file's size, modification time
    and inode stay the same: a command that evaluates many points (validate, compare) reads each spec file once. The
    records are frozen; a file that fails to load is read again (and fails again) each time."""
    import os

    try:
        st = os.stat(path)
        key = (cls, str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        key = None
    hit = _SPECS.get(key) if key is not None else None
    if hit is not None:
        return hit
    record = build_spec(cls, read_toml(path), path)
    if key is not None:
        if len(_SPECS) >= 256:
            _SPECS.pop(next(iter(_SPECS)))
        _SPECS[key] = record
    return record
