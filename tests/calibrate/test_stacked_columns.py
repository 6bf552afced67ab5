"""Stacked(by_columns=True) builds the rows' kernels a column at a time: the same groups as stacking each row's kernels,
bit for bit (the ledger's held-out kernel evidence takes its times from it)."""

import numpy as np
import pytest

import rubinperf.calibrate.fit as fit
from rubinperf.bundled import data_root
from rubinperf.calibrate.fit import Stacked, call_key, timed_rows
from rubinperf.calibrate.plan import read_csv
from rubinperf.kernels.cost import _COST_FIELDS, KERNEL_SHAPE_FIELDS


def _kernel_tables():
    out = []
    for path in sorted((data_root() / "calibration").rglob("*.csv")):
        try:
            rows = read_csv(path)[1]
        except Exception:   # not a kernel table (collectives, steps, layers)
            continue
        if rows and "family" in rows[0]:
            out.append(path)
    return out


def _same(a, b) -> bool:
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _groups_equal(a: Stacked, b: Stacked) -> bool:
    if len(a.groups) != len(b.groups):
        return False
    for (ia, ka, ma), (ib, kb, mb) in zip(a.groups, b.groups):
        if not (_same(ia, ib) and ma == mb and ka.family == kb.family):
            return False
        if not all(_same(getattr(ka.cost, f), getattr(kb.cost, f)) for f in _COST_FIELDS):
            return False
        if not all(_same(getattr(ka, f), getattr(kb, f)) for f in KERNEL_SHAPE_FIELDS):
            return False
    return True


TABLES = _kernel_tables()


def test_the_bundled_kernel_tables_are_found():
    assert len(TABLES) >= 20
    assert any(p.parent.name == "aiconfigurator" for p in TABLES)


@pytest.mark.parametrize("path", TABLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_column_built_groups_equal_the_row_built_ones_bit_for_bit(path):
    rows = timed_rows(read_csv(path)[1])
    if not rows:
        pytest.skip("no timed rows")
    try:
        by_rows = Stacked(rows)
    except Exception:   # a table whose rows the model does not build (an error either way)
        with pytest.raises(Exception):
            Stacked(rows, by_columns=True)
        return
    by_columns = Stacked(rows, by_columns=True)
    assert _groups_equal(by_rows, by_columns)
    # and the groups are timed as the rows' are
    from rubinperf.specs.stack import load_platform

    hw = load_platform("h200")
    assert by_rows.times(hw).tobytes() == by_columns.times(hw).tobytes()


def test_most_aiconfigurator_rows_are_built_in_columns(monkeypatch):
    """The point of the change: the aiconfigurator tables' calls go through row_kernels once per structure, not per row."""
    calls = []
    real = fit._grouped_kernels
    monkeypatch.setattr(fit, "_grouped_kernels", lambda row: calls.append(row) or real(row))
    rows = timed_rows(read_csv(data_root() / "calibration/aiconfigurator/gb300-trtllm.csv")[1])
    Stacked(rows, by_columns=True)
    assert len(rows) > 1000
    assert len(calls) < len(rows) / 10


def test_a_structure_the_kernels_branch_on_is_built_row_by_row(monkeypatch):
    """A value a kernel function branches on (here: every numeric column made a branch column's array would raise) falls
    back to the rows one by one, with the same groups."""
    rows = timed_rows(read_csv(data_root() / "calibration/aiconfigurator/gb300-trtllm.csv")[1])[:200]
    by_rows = Stacked(rows)
    monkeypatch.setattr(fit, "BRANCH_COLUMNS", frozenset({"family", "mode", "impl", "dtype"}))
    calls = []
    real = fit._grouped_kernels
    monkeypatch.setattr(fit, "_grouped_kernels", lambda row: calls.append(row) or real(row))
    assert _groups_equal(by_rows, Stacked(rows, by_columns=True))
    assert len(calls) > len({call_key(r) for r in rows})   # each call once more, after its structure's failed try


def test_the_structure_key_tells_ints_from_floats(monkeypatch):
    """A column of ints and one of floats are two structures (an int64 and a float64 column), each built at once."""
    row = {"family": "gemm", "mode": "graph", "impl": "torch_flow", "dtype": "bf16", "m": 64, "n": 4096, "k": 7168,
           "measured_s": 1e-5}
    rows = [row, {**row, "m": 128}, {**row, "m": 64.5}, {**row, "m": 128.0}]
    built = []
    real = fit._column_kernels
    monkeypatch.setattr(fit, "_column_kernels", lambda *a: built.append(a[-1]) or real(*a))
    assert _groups_equal(Stacked(rows), Stacked(rows, by_columns=True))
    assert sorted(len(values) for values in built) == [2, 2]


def test_a_moe_row_without_touched_is_built_row_by_row(monkeypatch):
    """Without `touched`, a MoE row's kernels take the expected experts touched, G(1 - (1 - 1/G)^rows): a power, which
    numpy's vectorised pow may round otherwise than Python's (libm's). Such structures are built call by call."""
    row = {"family": "moe", "mode": "graph", "impl": "moe_torch_flow", "dtype": "fp4", "m": 1, "n": 7168, "k": 2048,
           "groups": 32, "rows": 8, "touched": None, "measured_s": 1e-5}
    rows = [{**row, "m": m, "rows": 8 * m} for m in (1, 3, 17, 129, 1000, 4097)]
    built = []
    real = fit._grouped_kernels
    monkeypatch.setattr(fit, "_grouped_kernels", lambda r: built.append(r) or real(r))
    by_columns = Stacked(rows, by_columns=True)
    assert all(type(r["rows"]) is int for r in built) and len(built) == len(rows)
    monkeypatch.setattr(fit, "_grouped_kernels", real)
    assert _groups_equal(Stacked(rows), by_columns)


def test_the_comparison_sees_one_value_moved_by_one_ulp():
    rows = timed_rows(read_csv(data_root() / "calibration/aiconfigurator/gb300-trtllm.csv")[1])[:100]
    a, b = Stacked(rows), Stacked(rows, by_columns=True)
    assert _groups_equal(a, b)
    launches = b.groups[-1][1].cost.launches
    launches[-1] = np.nextafter(launches[-1], np.inf)
    assert not _groups_equal(a, b)
