"""Fixtures of the calibration tests: the fit of the committed H200 measurements, made once."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubinperf.calibrate import fit
from rubinperf.calibrate.plan import read_csv
from rubinperf.specs.stack import load_platform

DIR = Path(__file__).resolve().parent.parent.parent / "calibration" / "h200"
# the committed fit's inputs, in the order of the fit command (calibration/h200/README.md)
COMMITTED_CSVS = [DIR / "shapes_dobench.csv", DIR / "measurements.csv"]


@pytest.fixture(scope="session")
def committed_rows():
    """The rows of COMMITTED_CSVS, in order."""
    rows = []
    for path in COMMITTED_CSVS:
        kind, rs = read_csv(path)
        assert kind == "kernels"
        rows += rs
    return rows


@pytest.fixture(scope="session")
def committed_fit(committed_rows):
    """(rows, platform, result): the committed rows, the bundled h200 platform and `fit.fit_kernels` of them
    with its default options, the fit that hardware/h200.toml and stacks/pytorch-2.11.toml hold. About 20 s
    of CPU: made once for the tests that check it."""
    hw = load_platform("h200")
    return committed_rows, hw, fit.fit_kernels(committed_rows, hw)


@pytest.fixture
def committed_fit_reused(monkeypatch, committed_fit):
    """`fit.fit_kernels` answering `committed_fit`'s result when asked for that very fit (rows and platform equal,
    default options), as the `calibrate` command does on the committed CSVs; any other fit is run. Returns the
    list of the calls it answered so."""
    rows, hw, result = committed_fit
    real = fit.fit_kernels
    answered = []

    def fit_kernels(rs, platform, *args, **options):
        if not args and not options and platform == hw and rs == rows:
            answered.append(len(rs))
            return result
        return real(rs, platform, *args, **options)

    monkeypatch.setattr(fit, "fit_kernels", fit_kernels)
    return answered
