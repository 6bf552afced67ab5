"""The stacks' acceptance concentration and its range come from the committed per-request rows
(calibration/acceptance/, scripts/acceptance_concentration.py)."""

from __future__ import annotations

import importlib.util
import csv
from pathlib import Path

import pytest

from rubinperf.specs.stack import load_platform

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("acceptance_concentration",
                                                  REPO / "scripts" / "acceptance_concentration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_steps_of_a_request_by_hand():
    """A step emits min(acceptance length at its position, k + 1) tokens and moves past them."""
    s = _script()
    assert s.steps_of([3, 9, 9, 1, 8, 1, 1, 1, 1, 1], k=5) == [3, 1, 6]
    assert s.steps_of([1, 1, 1], k=5) == [1, 1, 1]


def test_stack_concentration_is_the_pooled_estimate_and_its_range_the_datasets():
    s = _script()
    rows = list(csv.DictReader(s.CSV.open()))
    pooled = s.concentration(rows)[0]
    per_set = [s.concentration([r for r in rows if r["dataset"] == d])[0] for d in s.DATASETS]
    hw = load_platform("gb300-nvl72")
    assert hw.acceptance_concentration == pytest.approx(pooled, abs=0.05)
    assert hw.acceptance_concentration_low == pytest.approx(min(per_set), abs=0.5)
    assert hw.acceptance_concentration_high == pytest.approx(max(per_set), abs=0.5)
