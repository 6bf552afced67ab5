"""Output streams: records as strict JSON or CSV, text and tables printed to standard output.

A write to standard output that fails (a full disk) is one line, not a traceback; a reader
that has gone (`| head`) ends the command quietly. Presentation only: nothing here computes.
"""

from __future__ import annotations

import io
import math
import os
import sys

PIPE_WIDTH = 200  # output that is not a terminal, and no COLUMNS: tables as wide as they need, up to this


def to_json(records) -> str:
    """Strict JSON: a non-finite number (a ratio over zero, an unreachable point) becomes null.

    The text is exactly json.dumps(..., indent=2) of the records with non-finite numbers as null;
    `_indented` writes it about twice as fast (json's C encoder does not indent, its Python one is
    generic), and anything it does not know (a non-string key, another type) goes to json.dumps."""
    global _enc_str
    try:   # json's C string encoder, without importing the json package (its decoder and scanner) for it
        from _json import encode_basestring_ascii as _enc_str
    except ImportError:   # pragma: no cover - not CPython
        import json

        _enc_str = json.encoder.encode_basestring_ascii
    try:
        return _indented(records, "")
    except _Generic:
        import json   # (imported here: a table needs none of it)

        return json.dumps(_finite(records), indent=2, default=_jsonable, allow_nan=False)


class _Generic(Exception):
    """A value _indented leaves to json.dumps."""


_float_repr = float.__repr__
_int_repr = int.__repr__
_enc_str = None  # json's C string encoder, set by to_json


def _indented(x, pad: str) -> str:
    """json.dumps(_finite(x), indent=2) for str/int/float/bool/None, lists, tuples, str-keyed dicts and
    numpy values; raises _Generic for anything else."""
    t = type(x)
    if t is str:
        return _enc_str(x)
    if t is float:
        return _float_repr(x) if math.isfinite(x) else "null"
    if t is int:
        return _int_repr(x)
    if x is None:
        return "null"
    if x is True:
        return "true"
    if x is False:
        return "false"
    inner = pad + "  "
    if t is dict:
        if not x:
            return "{}"
        parts = []
        for k, v in x.items():
            if type(k) is not str:
                raise _Generic
            tv = type(v)   # the commonest leaves written here, as _indented writes them (a call fewer each)
            if tv is float:
                parts.append(f"{inner}{_enc_str(k)}: {_float_repr(v) if v - v == 0.0 else 'null'}")
            elif tv is str:
                parts.append(f"{inner}{_enc_str(k)}: {_enc_str(v)}")
            else:
                parts.append(f"{inner}{_enc_str(k)}: {_indented(v, inner)}")
        return "{\n" + ",\n".join(parts) + "\n" + pad + "}"
    if t is list or t is tuple:
        if not x:
            return "[]"
        return "[\n" + ",\n".join([inner + _indented(v, inner) for v in x]) + "\n" + pad + "]"
    if hasattr(x, "dtype") and hasattr(x, "tolist"):  # numpy scalars and arrays
        return _indented(x.tolist(), pad)
    raise _Generic


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if hasattr(x, "dtype") and hasattr(x, "tolist"):  # numpy scalars and arrays
        return _finite(x.tolist())
    return x


def _jsonable(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def to_csv(records: list[dict]) -> str:
    """Flat columns only: nested values (lists, dicts) are left out of CSV. The columns are every flat field
    of any record, in the order first met (a record without one leaves its cell empty)."""
    if not records:
        return ""
    import csv

    cols = list(dict.fromkeys(k for r in records for k, v in r.items() if not isinstance(v, (list, dict))))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: r.get(k) for k in cols})
    return buf.getvalue()


def console_width() -> int:
    """The width output is laid out for: the terminal's, else $COLUMNS, else PIPE_WIDTH."""
    if _plain_stdout():
        return _columns()
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console.width
    return _columns()


def _columns() -> int:
    try:
        cols = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        cols = 0
    return cols if cols > 0 else PIPE_WIDTH


# What makes rich treat a stream as a terminal (styles, its size) or a notebook, besides isatty.
_RICH_TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES",
                      "DATABRICKS_RUNTIME_VERSION", "VSCODE_PID")


def _plain_stdout() -> bool:
    """Standard output is a UTF-8 pipe or file that rich would print to without styles (no terminal, no
    notebook, nothing forcing colour): a table's plain text is then what rich would write."""
    out = sys.stdout
    if sys.platform == "win32" or any(k in os.environ for k in _RICH_TERMINAL_ENV) or "IPython" in sys.modules:
        return False
    if not (getattr(out, "encoding", None) or "").lower().replace("-", "").startswith("utf"):
        return False   # rich draws ASCII boxes for other encodings
    isatty = getattr(out, "isatty", None)
    try:
        return isatty is not None and not isatty()
    except ValueError:
        return False


def print_out(renderable) -> None:
    """Print a table (fitted to the console's width), a rich renderable or a string."""
    _clear_progress()
    from rubinperf.render.tables import FitTable, is_wide

    width = console_width()
    if isinstance(renderable, FitTable):
        if is_wide():
            width = max(width, renderable.natural_width())
        text = renderable.plain(width) if _plain_stdout() else None
        if text is not None:
            with _stdout_errors():
                sys.stdout.write(_no_trailing_spaces(text))
            return
        renderable = renderable.build(width)
    from rich.console import Console

    console = Console(soft_wrap=False, width=width, markup=False, emoji=False)   # text as it is: "[serving]" prints
    console.on_broken_pipe = _reader_gone  # rich's own handler exits 1; a closed pipe is not a failure here
    with _stdout_errors():
        if _is_terminal():
            console.print(renderable)
            return
        with console.capture() as captured:   # a pipe or file: the same text, without rich's padding at line ends
            console.print(renderable)
        sys.stdout.write(_no_trailing_spaces(captured.get()))


def _no_trailing_spaces(text: str) -> str:
    """Text for a pipe or a file: no line ends in spaces (rich pads titles and cells to the table's width)."""
    return "\n".join(line.rstrip(" ") for line in text.split("\n"))


def _is_terminal() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:
        return False


def _reader_gone() -> None:
    from rubinperf.render.console import silence_stdout

    silence_stdout()
    raise SystemExit(0)


def emit_text(text: str) -> None:
    _clear_progress()
    with _stdout_errors():
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


class _stdout_errors:
    """A write to standard output that fails (a full disk) is a one-line error, not a traceback."""

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is None or not issubclass(typ, OSError):
            return False
        from rubinperf.render.console import silence_stdout
        from rubinperf.errors import SpecError

        silence_stdout()
        if issubclass(typ, BrokenPipeError):  # the reader has gone (| head): done, successfully, quietly
            raise SystemExit(0)
        raise SpecError(f"cannot write to standard output: {exc.strerror or exc}") from None


def _clear_progress() -> None:
    """A spinner on standard error (rubinperf.render.progress) is cleared before anything is printed."""
    progress = sys.modules.get("rubinperf.render.progress")
    if progress is not None:
        progress.stop_working()
