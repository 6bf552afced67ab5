"""Tables that fit the terminal (rich): compact column sets, short headers, wrapped text columns,
optional columns left out and named under the table; --wide shows every column at full width.

Rows are strings already formatted (`rubinperf.units`); printed by `rubinperf.render.output.print_out`.

rich draws every table. Where nothing needs rich's styles (plain output to a pipe or file), `FitTable.plain` writes
the very text rich would, without importing rich (a quarter of `estimate`'s start-up; `validate`'s tables, wrapped
at the pipe's 200 columns, took rich 0.06-0.1 s): cells wrapped at single spaces to the widths layout() gives
(greedily, as rich breaks them), titles and captions wider than the table wrapped the same way. Texts go to rich as
rich.text.Text, never as markup: a bracket or a colon prints as it is on both paths. Anything it cannot be sure of (a
word wider than its column, two spaces together, a character of uncertain width, a table narrower than its columns)
returns None and rich draws it. tests/render/test_plain_tables.py holds it to rich's text for every table the
commands print, at many widths.
"""

from __future__ import annotations

import re as _re

_WIDE = False

# Characters of one cell on any terminal, as rich measures them (ASCII printable, and the few others
# the tables use); a string with any other character is measured by rich.
_NARROW = frozenset(chr(c) for c in range(32, 127)) | frozenset("µ—–…×→←↑≥≤·°±≈⋅²³½")


def _shown(text: str) -> str | None:
    """A cell's text as the plain drawer prints it, or None where rich must draw it (a line break or tab, a character
    of uncertain width). Every text goes to rich as rich.text.Text, never as markup: brackets and colons print as they
    are ("stack [serving]: ..."), on both paths."""
    return None if "\n" in text or "\t" in text or not _NARROW.issuperset(text) else text


def cell_len(text: str) -> int:
    """Terminal cells of `text` (rich.cells.cell_len; rich is imported only for unusual characters)."""
    if _NARROW.issuperset(text):
        return len(text)
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def set_wide(wide: bool) -> None:
    global _WIDE
    _WIDE = bool(wide)


def is_wide() -> bool:
    return _WIDE


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

    Every table in one style (SIMPLE_HEAD, no box: a command's tables once mixed boxed and plain ones). When
    the full headers do not fit: the short headers, then text columns wrapped at spaces, then optional
    columns left out (named in the caption; --wide shows every column). Numbers never wrap. Rendered by
    print_out."""

    def __init__(self, title, columns, rows, caption=None):
        self.title, self.caption = title, caption
        self.cols = [_colspec(c) for c in columns]
        self.rows = [[str(x) for x in r] for r in rows]
        self._measured: dict = {}   # (measure, column, short headers?) -> width, and (width, --wide) -> layout: a
        # table is not changed once made, and layout() asks a column's widths again for every column it leaves out
        # and for every width it narrows (print_out lays a table out twice where rich draws it: plain(), then build())

    # widths
    def _natural(self, i: int, short: bool) -> int:
        key = ("natural", i, short)
        width = self._measured.get(key)
        if width is None:
            head = self.cols[i]["short" if short else "header"]
            cells = [head] + [r[i] for r in self.rows]
            width = self._measured[key] = max(cell_len(line) for c in cells for line in (c.split("\n") or [""]))
        return width

    def _minimum(self, i: int, short: bool) -> int:
        key = ("minimum", i, short)
        width = self._measured.get(key)
        if width is None:
            width = self._measured[key] = self._minimum_of(i, short)
        return width

    def _minimum_of(self, i: int, short: bool) -> int:
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
        """The rich Table for `width` columns."""
        return self._rich(*self.layout(width))

    def plain(self, width: int) -> str | None:
        """The text rich prints for build(width) on a console without styles, or None where rich must draw it."""
        keep, short, boxed, widths, dropped, width = self.layout(width)
        heads = [self.cols[i]["short" if short else "header"] for i in keep]
        if any(_shown(x) is None for x in heads):
            return None
        rows = [[_shown(r[i]) for i in keep] for r in self.rows]   # (what rich prints of each cell)
        if any(None in r for r in rows):
            return None
        justify = [self.cols[i]["justify"] for i in keep]
        if any(j not in ("left", "right") for j in justify):
            return None
        if widths is None:
            sizes = [max([len(h)] + [len(r[k]) for r in rows]) for k, h in enumerate(heads)]
        else:   # columns of the widths layout() gave, their cells wrapped at spaces as rich wraps them
            sizes = [widths[i] for i in keep]
            if boxed or sum(sizes) + 2 * (len(sizes) - 1) > width:   # (too narrow even so: rich narrows them its way)
                return None
            heads, rows = self._wrapped(heads, sizes, bottom=True), [self._wrapped(r, sizes) for r in rows]
            if heads is None or None in rows:
                return None
            rows = [line for r in rows for line in r]   # (a row of n lines: n lines of the table)

        def fill(text, k):
            return text.ljust(sizes[k]) if justify[k] == "left" else text.rjust(sizes[k])

        if boxed:   # rich's HEAVY_HEAD box: padding of one space each side of every cell
            inner = [n + 2 for n in sizes]
            lines = ["┏" + "┳".join("━" * n for n in inner) + "┓",
                     "┃" + "┃".join(f" {fill(h, k)} " for k, h in enumerate(heads)) + "┃",
                     "┡" + "╇".join("━" * n for n in inner) + "┩"]
            lines += ["│" + "│".join(f" {fill(x, k)} " for k, x in enumerate(r)) + "│" for r in rows]
            lines.append("└" + "┴".join("─" * n for n in inner) + "┘")
        else:       # SIMPLE_HEAD, no edge, no edge padding, collapsed padding: two spaces between columns
            last = len(sizes) - 1

            def line(cells):   # each cell's right padding (none after the last) and one space between
                return " ".join(fill(x, k) + (" " if k < last else "") for k, x in enumerate(cells))

            head = [line(h) for h in heads] if widths is not None else [line(heads)]
            lines = head + ["─" * (sum(sizes) + 2 * last)] + [line(r) for r in rows]
        table_width = len(lines[0])
        caption = self._caption(dropped, width)
        notes = []
        for text in (self.title, caption):
            if not text:
                notes.append([])
                continue
            parts = text.split("\n")
            if any(not _NARROW.issuperset(x) or "  " in x for x in parts):
                return None   # rich measures or wraps it its own way
            if any(len(x) > table_width for x in parts):   # wrapped at spaces, greedily, as rich wraps it
                if any(len(w) > table_width for x in parts for w in x.split(" ")):
                    return None   # a word wider than the table: rich folds it
                parts = [w for x in parts for w in (_wrap(x, table_width) or [""])]
            notes.append([x.ljust(table_width) for x in parts])
        return "\n".join(notes[0] + lines + notes[1]) + "\n"

    @staticmethod
    def _wrapped(cells: list, sizes: list, bottom: bool = False) -> list | None:
        """A row's cells, each wrapped to its column's width, as the row's lines (a cell of fewer lines than the row's
        tallest blank below, rich's top alignment, or above for the header row, which rich aligns at the bottom), or
        None where rich must break it: a cell wider than its column with a space at either end or two together (rich
        counts them in its words), or a word wider than the column (rich folds it). Rich breaks a line before the first
        word that would end past the width (its words' trailing spaces counted up to there), the greedy rule of _wrap
        for words one space apart."""
        parts = []
        for text, size in zip(cells, sizes):
            if len(text) <= size:
                parts.append([text])
                continue
            if text != text.strip(" ") or "  " in text:
                return None
            broken = _wrap(text, size)
            if any(len(x) > size for x in broken):
                return None
            parts.append(broken)
        height = max(map(len, parts))
        if bottom:
            parts = [[""] * (height - len(p)) + p for p in parts]
        return [[p[j] if j < len(p) else "" for p in parts] for j in range(height)]

    def layout(self, width: int):
        """(kept columns, short headers?, boxed?, widths or None, columns left out, width) for `width` columns:
        the table that fits (see the class)."""
        key = ("layout", width, _WIDE)
        done = self._measured.get(key)
        if done is None:
            done = self._measured[key] = self._layout(width)
        keep, short, boxed, widths, dropped, width = done
        return list(keep), short, boxed, None if widths is None else dict(widths), list(dropped), width

    def _layout(self, width: int):
        n = len(self.cols)
        keep = list(range(n))
        if _WIDE or self.natural_width() <= width:   # one style for every table: no box
            return keep, False, False, None, [], width
        dropped = []

        def need(ids, measure):  # compact style: two spaces between columns, no edges
            return sum(measure(i, True) for i in ids) + 2 * (len(ids) - 1)

        while True:
            if need(keep, self._natural) <= width:
                return keep, True, False, None, dropped, width
            if need(keep, self._minimum) <= width:
                return keep, True, False, self._shrink(keep, width), dropped, width
            optional = [i for i in keep if self.cols[i]["drop"] > 0]
            if not optional:  # nothing left to leave out: fold what must be folded (still no '...')
                return keep, True, False, self._shrink(keep, width), dropped, width
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

    def _caption(self, dropped, width):
        caption = self.caption
        if dropped:
            note = f"(left out to fit {width} columns: {', '.join(dropped)}; --wide shows every column)"
            caption = f"{caption}\n{note}" if caption else note
        return caption

    def _rich(self, keep, short, boxed, widths, dropped=(), width=None):
        from rich import box
        from rich.table import Table
        from rich.text import Text

        def text(x, style=""):   # (the text as it is: no markup, no emoji codes)
            return None if x is None else Text(x, style=style)

        caption = self._caption(dropped, width)
        style = {} if boxed else dict(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        t = Table(title=text(self.title, "table.title"), caption=text(caption, "table.caption"), header_style="bold",
                  title_justify="left", caption_justify="left", **style)
        for i in keep:
            c = self.cols[i]
            t.add_column(text(c["short"] if short else c["header"]), justify=c["justify"], overflow="fold",
                         no_wrap=widths is None, width=None if widths is None else widths[i])
        for r in self.rows:
            t.add_row(*[text(r[i]) for i in keep])
        return t


def _wrap(text: str, width: int) -> list[str]:
    """`text` broken at single spaces into lines of at most `width` (greedy, as rich's word wrap)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


def table(title: str, columns: list, rows: list[list[str]], caption: str | None = None) -> FitTable:
    """A table that fits the console; columns are (header, justify) or `col(...)` records."""
    return FitTable(title, columns, rows, caption)
