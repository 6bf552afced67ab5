"""Presentation only: number formatting and rendering records as a rich table, JSON or CSV.

Records are plain dicts with SI values (and the contract's `_ms` fields); nothing here
computes a formula.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys

from rubinperf.units import fmt_num, fmt_pct, fmt_time, fmt_tokens, si  # noqa: E402,F401  (re-exported)


def to_json(records) -> str:
    """Strict JSON: a non-finite number (a ratio over zero, an unreachable point) becomes null.

    The text is exactly json.dumps(..., indent=2) of the records with non-finite numbers as null;
    `_indented` writes it about twice as fast (json's C encoder does not indent, its Python one is
    generic), and anything it does not know (a non-string key, another type) goes to json.dumps."""
    try:
        return _indented(records, "")
    except _Generic:
        return json.dumps(_finite(records), indent=2, default=_jsonable, allow_nan=False)


class _Generic(Exception):
    """A value _indented leaves to json.dumps."""


_float_repr = float.__repr__
_int_repr = int.__repr__
_enc_str = json.encoder.encode_basestring_ascii  # C


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
    """Flat columns only: nested values (lists, dicts) are left out of CSV."""
    if not records:
        return ""
    cols = [k for k, v in records[0].items() if not isinstance(v, (list, dict))]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: r.get(k) for k in cols})
    return buf.getvalue()


from rubinperf.files import write_atomic  # noqa: E402,F401  (re-exported)


_WIDE = False
PIPE_WIDTH = 200  # output that is not a terminal, and no COLUMNS: tables as wide as they need, up to this


def set_wide(wide: bool) -> None:
    global _WIDE
    _WIDE = bool(wide)


def col(header: str, justify: str = "right", short: str | None = None, drop: int = 0, wrap: bool | None = None,
        min_width: int = 0, fold: bool = False):
    """A column of `table`: `short` is the header used when the table must shrink; `drop` > 0
    makes the column optional, the highest value left out first when the table does not fit;
    `wrap` lets its cells wrap at spaces (default: left-justified columns), down to `min_width`;
    `fold` lets a word longer than that continue on the next line (formulas, which have no spaces)."""
    return {"header": header, "justify": justify, "short": short or header, "drop": drop,
            "wrap": justify == "left" if wrap is None else wrap, "min_width": min_width, "fold": fold}


def _colspec(c) -> dict:
    if isinstance(c, dict):
        return c
    header, justify = c[0], c[1]
    return col(header, justify)


class FitTable:
    """A table that fits the width it is printed in (never cutting a cell with '...').

    When the boxed table is too wide: a lighter style (no box), then the short headers, then
    text columns wrapped at spaces, then optional columns left out (named in the caption;
    --wide shows every column). Numbers never wrap. Rendered by print_out."""

    def __init__(self, title, columns, rows, caption=None):
        self.title, self.caption = title, caption
        self.cols = [_colspec(c) for c in columns]
        self.rows = [[str(x) for x in r] for r in rows]

    # widths
    def _natural(self, i: int, short: bool) -> int:
        from rich.cells import cell_len

        head = self.cols[i]["short" if short else "header"]
        cells = [head] + [r[i] for r in self.rows]
        return max(cell_len(line) for c in cells for line in (c.split("\n") or [""]))

    def _minimum(self, i: int, short: bool) -> int:
        from rich.cells import cell_len

        c = self.cols[i]
        if not c["wrap"]:  # numbers do not wrap
            return self._natural(i, short)
        head = c["short" if short else "header"]
        words = [w for cell in [head] + [r[i] for r in self.rows] for w in cell.split()]
        if c.get("fold"):
            words = [w for w in head.split()]
        return min(max([cell_len(w) for w in words] + [1, c["min_width"]]), self._natural(i, short))

    def natural_width(self) -> int:
        n = len(self.cols)
        return sum(self._natural(i, False) for i in range(n)) + 3 * n + 1

    def build(self, width: int):
        from rich import box

        n = len(self.cols)
        keep = list(range(n))
        if _WIDE or self.natural_width() <= width:
            return self._rich(keep, short=False, boxed=True, widths=None)
        dropped = []

        def need(ids, measure):  # compact style: two spaces between columns, no edges
            return sum(measure(i, True) for i in ids) + 2 * (len(ids) - 1)

        while True:
            if need(keep, self._natural) <= width:
                return self._rich(keep, short=True, boxed=False, widths=None, dropped=dropped, width=width)
            if need(keep, self._minimum) <= width:
                return self._rich(keep, short=True, boxed=False, widths=self._shrink(keep, width), dropped=dropped,
                                  width=width)
            optional = [i for i in keep if self.cols[i]["drop"] > 0]
            if not optional:  # nothing left to leave out: fold what must be folded (still no '...')
                return self._rich(keep, short=True, boxed=False, widths=self._shrink(keep, width), dropped=dropped,
                                  width=width)
            worst = max(optional, key=lambda i: (self.cols[i]["drop"], i))
            keep.remove(worst)
            dropped.append(self.cols[worst]["header"])

    def _shrink(self, keep, width) -> dict:
        """Widths for the kept columns: natural, the widest wrappable ones narrowed down to fit."""
        widths = {i: self._natural(i, True) for i in keep}
        mins = {i: self._minimum(i, True) for i in keep}
        budget = width - 2 * (len(keep) - 1)
        while sum(widths.values()) > budget:
            slack = [i for i in keep if widths[i] > mins[i]]
            if not slack:
                break
            i = max(slack, key=lambda j: widths[j] - mins[j])
            widths[i] -= 1
        return widths

    def _rich(self, keep, short, boxed, widths, dropped=(), width=None):
        from rich import box
        from rich.table import Table

        caption = self.caption
        if dropped:
            note = f"(left out to fit {width} columns: {', '.join(dropped)}; --wide shows every column)"
            caption = f"{caption}\n{note}" if caption else note
        style = {} if boxed else dict(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        t = Table(title=self.title, caption=caption, header_style="bold", title_justify="left", caption_justify="left",
                  **style)
        for i in keep:
            c = self.cols[i]
            t.add_column(c["short"] if short else c["header"], justify=c["justify"], overflow="fold",
                         no_wrap=widths is None, width=None if widths is None else widths[i])
        for r in self.rows:
            t.add_row(*[r[i] for i in keep])
        return t


def table(title: str, columns: list, rows: list[list[str]], caption: str | None = None) -> FitTable:
    """A table that fits the console; columns are (header, justify) or `col(...)` records."""
    return FitTable(title, columns, rows, caption)


def console_width() -> int:
    """The width output is laid out for: the terminal's, else $COLUMNS, else PIPE_WIDTH."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console.width
    try:
        cols = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        cols = 0
    return cols if cols > 0 else PIPE_WIDTH


def print_out(renderable) -> None:
    from rich.console import Console

    width = console_width()
    if isinstance(renderable, FitTable):
        if _WIDE:
            width = max(width, renderable.natural_width())
        renderable = renderable.build(width)
    console = Console(soft_wrap=False, width=width)
    console.on_broken_pipe = _reader_gone  # rich's own handler exits 1; a closed pipe is not a failure here
    with _stdout_errors():
        console.print(renderable)


def _reader_gone() -> None:
    from rubinperf.render.console import silence_stdout

    silence_stdout()
    raise SystemExit(0)


def emit_text(text: str) -> None:
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
