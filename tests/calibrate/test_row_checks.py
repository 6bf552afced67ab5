"""A calibration table's row checks (plan._RULES) read a column at a time (_checked_by_column, the path of a table
with no fault) and row by row (_checked, which names the line and the check): the two agree on every rule."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from rubinperf.calibrate import plan
from rubinperf.errors import SpecError

PATH = Path("t.csv")


def _kernel_rows() -> list[dict]:
    """Two rows of each family, each passing every rule: every count 4 but q_len 2 and kv_len 8, measured_s all
    different (a rule over numbers is told by the least and greatest), every mode and none (graph)."""
    rows = []
    for i, family in enumerate(2 * plan.FAMILIES):
        row = dict.fromkeys((*plan.INT_COLUMNS, *plan.SHAPES_INT_COLUMNS), 4)
        row.update(family=family, mode=("", *plan.MODES)[i % 5], dtype="" if family in plan.NO_DTYPE_FAMILIES else "bf16",
                   measured_s=1e-6 * (i + 1), q_len=2, kv_len=8)
        rows.append(row)
    return rows


def _collective_rows() -> list[dict]:
    return [{"collective": c, "ranks": 8, "nbytes": 4096 * (i + 1), "dtype": "bf16", "measured_s": 1e-5 * (i + 1),
             "samples": 10} for i, c in enumerate(2 * plan.READ_COLLECTIVES)]


TABLES = {"kernels": plan.rows_to_csv(_kernel_rows(), plan.SHAPES_COLUMNS),
          # (the default suite's columns: the families whose shape columns it has)
          "kernels without a mode column": plan.rows_to_csv(
              [r for r in _kernel_rows() if set(plan.SHAPE_COLUMNS.get(r["family"], ())) <= set(plan.KERNEL_COLUMNS)],
              plan.KERNEL_COLUMNS),
          "collectives": plan.rows_to_csv(_collective_rows(), plan.COLLECTIVE_COLUMNS)}


def _kind(text: str) -> str:
    return "kernels" if text.startswith("family") else "collectives"


def _by_column(text: str):
    """The column path's rows (None: it found a row that fails a check, or a cell it cannot type)."""
    header = next(csv.reader(io.StringIO(text)))
    return plan._typed_by_column(header, text, _kind(text))


def _by_row(text: str) -> list[dict]:
    """The row path's rows: each row typed and checked by _typed (ValueError: the first check a row fails)."""
    return [plan._typed(raw, _kind(text)) for raw in csv.DictReader(io.StringIO(text))]


def _same_rows(got: list[dict], want: list[dict]):
    assert len(got) == len(want)
    for a, b in zip(got, want):   # the same keys in the same order, the same values of the same types
        assert list(a.items()) == list(b.items())
        assert [type(v) for v in a.values()] == [type(v) for v in b.values()]


@pytest.mark.parametrize("name", TABLES)
def test_a_valid_table_reads_the_same_by_column_and_by_row(name):
    text = TABLES[name]
    by_column = _by_column(text)
    assert by_column is not None   # the column path took it
    want = _by_row(text)
    _same_rows(by_column, want)
    if name == "kernels":
        assert {r["family"] for r in want} == set(plan.FAMILIES) and {r["mode"] for r in want} == set(plan.MODES)
        assert [r["mode"] for r in want[:5]] == ["graph", *plan.MODES]   # (an empty mode reads as graph)
    if name == "kernels without a mode column":
        assert {r["mode"] for r in want} == {"graph"}


# Cell values to write into a rule's column (text, and the value it types to): each breaks some rule for some family.
COUNT_EDITS = (("", None), ("0", 0), ("1", 1), ("9", 9))   # (kv_len 1 < q_len 2; q_len 9 > kv_len 8)
EDITS = {"measured_s": (("", None), ("1e-13", 1e-13), ("2e6", 2e6)), "family": (("bogus", "bogus"),),
         "mode": (("warm", "warm"),), "dtype": (("fp6", "fp6"), ("", "")), "collective": (("broadcast", "broadcast"),)}


def _edited(text: str, line: int, key: str, cell: str) -> str:
    table = list(csv.reader(io.StringIO(text)))
    table[line - 1][table[0].index(key)] = cell
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(table)
    return buf.getvalue()


def test_each_rule_broken_in_one_row_is_found_by_column_and_named_by_row():
    """Every rule's column is edited in the second row of each family (or collective) of a valid table, to values
    that break it or not: where the row fails a rule (plan._failing_rule on the typed row), the column path refuses
    the table and the reader names that line and the rule's words; where it passes, both paths give the same rows.
    Every rule of plan._RULES is broken by some edit."""
    broken = set()
    for name in ("kernels", "collectives"):
        text = TABLES[name]
        kind = _kind(text)
        header = next(csv.reader(io.StringIO(text)))
        valid = _by_row(text)
        half = len(valid) // 2
        keys = [k for k in dict.fromkeys(k for rule in plan._RULES for k in rule.columns) if k in header]
        for index in range(half, len(valid)):   # (the second row of its family: not the first of the column)
            line = index + 2
            for key in keys:
                for cell, value in EDITS.get(key, COUNT_EDITS):
                    bad = _edited(text, line, key, cell)
                    row = {**valid[index], key: value}
                    raw = {**dict(zip(header, next(csv.reader(io.StringIO(text.splitlines()[index + 1]))))), key: cell}
                    rule = plan._failing_rule(row, kind)
                    if rule is None:
                        _same_rows(_by_column(bad), _by_row(bad))
                        continue
                    broken.add(plan._RULES.index(rule))
                    assert _by_column(bad) is None, (name, line, key, cell)
                    with pytest.raises(SpecError) as err:
                        plan._parse_csv(PATH, bad)
                    assert str(err.value) == f"{PATH}: line {line}: {rule.says(row, raw)}"
    assert sorted(broken) == list(range(len(plan._RULES)))


DTYPES = ", ".join(plan.PRECISIONS)


@pytest.mark.parametrize("name, family, key, cell, words", [
    ("kernels", "gemm", "measured_s", "2e6", "measured_s: expected a positive number of seconds (1e-12 to 1e6), "
                                             "got '2e6'"),
    ("kernels", "gemm", "family", "bogus", "family: unknown 'bogus' (known: copy, gemm, grouped_gemm, attention_decode, "
                                           "attention_prefill, launch, pointer_chase, stream_ctas, elementwise, moe, "
                                           "mhc, topk)"),
    ("kernels", "gemm", "mode", "warm", "mode: expected one of graph, eager, stream, cold, got 'warm'"),
    ("kernels", "grouped_gemm", "groups", "0", "groups: a grouped_gemm row needs a positive groups, got '0'"),
    ("kernels", "pointer_chase", "stride_bytes", "", "stride_bytes: a pointer_chase row needs a positive stride_bytes, "
                                                     "got ''"),
    ("kernels", "topk", "m", "", "m: a topk row needs a positive m, got ''"),   # (was a KeyError: no shape columns)
    ("kernels", "attention_prefill", "kv_len", "1", "q_len: expected at most kv_len (1), got 2"),
    ("kernels", "gemm", "dtype", "fp6", f"dtype: expected one of {DTYPES}, got 'fp6'"),
    ("kernels", "gemm", "dtype", "", f"dtype: expected one of {DTYPES}, got ''"),
    ("collectives", "all_to_all", "ranks", "", "ranks: a all_to_all row needs a positive ranks, got ''"),
    ("collectives", "all_reduce", "dtype", "fp6", f"dtype: expected one of {DTYPES}, got 'fp6'"),
    ("collectives", "all_gather", "collective", "broadcast", "collective: unknown 'broadcast' (known: all_reduce, "
                                                             "all_to_all, all_gather)"),
])
def test_the_words_of_each_check(name, family, key, cell, words):
    text = TABLES[name]
    firsts = [line.split(",", 1)[0] for line in text.splitlines()]
    line = firsts.index(family, 1) + 1   # the first row of the family (or collective)
    with pytest.raises(SpecError) as err:
        plan._parse_csv(PATH, _edited(text, line, key, cell))
    assert str(err.value) == f"{PATH}: line {line}: {words}"
