"""The plain drawer of tables (FitTable.plain, used for output that is not a terminal) writes exactly
the text rich writes, for every table the commands print: whole commands run both ways give the same
bytes, and each of their tables at many widths, compact and --wide, draws the same or is left to rich."""

from __future__ import annotations

import contextlib
import io

import pytest
from rich.cells import cell_len as rich_cell_len
from rich.console import Console

from rubinperf.cli import main
from rubinperf.render import tables
from rubinperf.render.tables import FitTable, col, set_wide, table

COMMANDS = [
    ["estimate"], ["estimate", "--breakdown"], ["estimate", "--wide", "--breakdown"],
    ["estimate", "-H", "vr-nvl72", "-l", "tp8", "--batch", "4", "--breakdown"], ["estimate", "--phase", "prefill"],
    ["estimate", "-H", "h200"], ["pareto"], ["pareto", "--wide"], ["compare"], ["validate"],
    ["explain", "megamoe"], ["explain", "step", "-l", "tp8"],
    ["kernel", "gemm", "--m", "16", "--n", "4096", "--k", "4096", "--dtype", "fp8"],
    ["list", "hardware"], ["list", "models"], ["list", "stacks"], ["list", "layouts"],
]
WIDTHS = [50, 80, 100, 142, 200]
PLAIN = FitTable.plain   # the drawer itself (the fixture below counts its uses)


def _run(argv, monkeypatch, rich_only: bool, columns: str | None) -> str:
    """The command's standard output as a UTF-8 pipe would receive it."""
    if rich_only:
        monkeypatch.setenv("TTY_COMPATIBLE", "0")   # rich: not a terminal (plain text); rubinperf: let rich draw
    else:
        monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
    with contextlib.redirect_stdout(out):
        try:
            main(list(argv))
        except SystemExit:
            pass
        out.flush()
    return raw.getvalue().decode("utf-8")


@pytest.fixture
def drawn(monkeypatch):
    """Every FitTable made while the test runs, and how often the plain drawer drew one."""
    made, used = [], []
    init, plain = FitTable.__init__, FitTable.plain

    def record(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    def counted(self, width):
        text = plain(self, width)
        used.append(text is not None)
        return text

    monkeypatch.setattr(FitTable, "__init__", record)
    monkeypatch.setattr(FitTable, "plain", counted)
    return made, used


@pytest.mark.parametrize("columns", [None])
def test_commands_print_the_same_bytes_drawn_plain_or_by_rich(monkeypatch, drawn, predictions_reused, columns):
    made, used = drawn
    for argv in COMMANDS[:2] + COMMANDS[6:7] + COMMANDS[9:]:
        assert _run(argv, monkeypatch, False, columns) == _run(argv, monkeypatch, True, columns), argv
    assert made and any(used)   # the plain drawer did draw (the default estimate at least)


def _rich_text(t: FitTable, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, soft_wrap=False, width=width).print(t.build(width))
    return buf.getvalue()


def test_every_table_at_every_width_is_rich_s_text_or_left_to_rich(monkeypatch, drawn, predictions_reused):
    made, _ = drawn
    for argv in COMMANDS:
        _run(argv, monkeypatch, False, None)
    drew = 0
    try:
        for wide in (False, True):
            set_wide(wide)
            for t in made:
                # --wide draws at least the table's natural width: widths below it draw the same (drawn once)
                for width in sorted({max(w, t.natural_width()) for w in WIDTHS} if wide else WIDTHS):
                    text = PLAIN(t, width)
                    if text is not None:
                        drew += 1
                        assert text == _rich_text(t, width), (t.title, width, wide)
    finally:
        set_wide(False)
    assert drew > len(made)   # most tables draw plain at most widths


def test_what_the_plain_drawer_leaves_to_rich():
    cols = [col("name", "left"), col("value")]
    assert table("t", cols, [["a", "1"]]).plain(80) is not None
    # brackets and colons are text, not markup: printed as they are, by rich and by the plain drawer alike
    for cell in ("stack [serving]: a", "[bold]b[/bold]", "a \\[b]", "[1] a", "a :smile: b"):
        t = table("t [x]", [col("name [unit]", "left"), col("value")], [[cell, "1"]])
        assert t.plain(80) == _rich_text(t, 80) and cell in t.plain(80) and "t [x]" in t.plain(80), cell
    assert table("t", cols, [["日本", "1"]]).plain(80) is None               # wide characters
    wider = table("a title wider than its table", cols, [["a", "1"]], caption="a caption wider than it too")
    assert wider.plain(80) == _rich_text(wider, 80)     # wrapped at spaces as rich wraps it
    assert table("t", cols, [["a", "1"]], caption="a  b c d e f g h").plain(80) is None   # two spaces: rich's
    assert table("t", cols, [["a", "1"]], caption="x" * 30).plain(80) is None
    words = [col("name", "left", min_width=8), col("note", "left", min_width=6), col("value")]
    long = [["a name that wraps", "one two three four five six", "12"], ["short", "x", "3"]]
    for width in range(20, 60):   # cells wrapped at spaces to layout()'s widths, as rich breaks them
        text = table("t", words, long).plain(width)
        assert text is None or text == _rich_text(table("t", words, long), width), width
    assert table("t", words, long).plain(30) is not None
    assert table("t", words, [["a  b c d e f g h i j k l m n", "x", "1"]]).plain(24) is None   # two spaces: rich's
    for ch in tables._NARROW:   # what the plain drawer counts as one cell, rich does too
        assert rich_cell_len(ch) == 1, repr(ch)


def test_a_table_to_a_pipe_loads_no_rich():
    """`estimate` into a pipe draws its table without importing rich (the plain drawer's point); on a
    terminal, or when the table must wrap, rich draws it as before."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    code = ("import sys\nfrom rubinperf.cli import main\ncode = main(['estimate'])\n"
            "sys.stderr.write(repr(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE")})
    assert r.returncode == 0 and "one engine step" in r.stdout, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]"
