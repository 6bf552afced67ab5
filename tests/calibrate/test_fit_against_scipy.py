"""The hand-written fits checked against scipy.optimize (skipped where scipy is not installed: rubinperf
does not depend on it, its import alone would cost start-up).

- `_nnls` (every subset of free columns, exact for the three columns of the collective fit) against
  scipy.optimize.nnls;
- the kernel fit's coordinate search on a shrinking log grid against scipy.optimize.minimize (Powell,
  bounded) on the same objective, mean |ln(measured / expected)|: the hand-written search reaches a loss
  at least as low, at the same values.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rubinperf.calibrate import fit

optimize = pytest.importorskip("scipy.optimize")


@pytest.mark.parametrize("seed", range(6))
def test_nnls_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(40, 3)) + np.array([1.0, 0.0, -0.5])
    y = a @ rng.normal(size=3) + rng.normal(0, 0.1, 40)   # true coefficients of either sign: some end at 0
    ours = fit._nnls(a, y)
    theirs, _ = optimize.nnls(a, y)
    assert np.all(ours >= 0)
    assert ours == pytest.approx(theirs, abs=1e-9)


FIELDS = ("hbm_stream_efficiency", "mma_compute_efficiency", "attention_compute_efficiency")


def test_kernel_fit_reaches_scipys_minimum():
    from test_calibrate_fit import TRUE_KERNELS, synthetic_kernels
    from rubinperf.specs.stack import load_platform

    h200 = load_platform("h200")
    rows = synthetic_kernels(h200, TRUE_KERNELS, sigma=0.03, seed=5)
    ours = fit.fit_kernels(rows, h200, fields=FIELDS, heldout=False)
    timed = fit.timed_rows(rows)
    probes, _ = fit.probe_values(rows)
    hw0 = dataclasses.replace(h200, **probes, **{f: ours.after[f] for f in fit.DISCRETE_FIELDS})
    t = fit.measured(timed)

    def loss(logx):
        vals = dict(zip(FIELDS, np.exp(logx)))
        return float(np.mean(np.abs(np.log(t / fit.expected(timed, dataclasses.replace(hw0, **vals))))))

    bounds = [(np.log(fit.EFF_BOUNDS[0]), np.log(fit.EFF_BOUNDS[1]))] * len(FIELDS)
    start = np.log([fit.START_EFFICIENCY] * len(FIELDS))
    theirs = optimize.minimize(loss, start, method="Powell", bounds=bounds, options={"xtol": 1e-4, "ftol": 1e-7})
    assert ours.loss_after <= theirs.fun * 1.01 + 1e-6
    for f, v in zip(FIELDS, np.exp(theirs.x)):
        assert ours.after[f] == pytest.approx(v, rel=0.03), f   # (the other fields stay at the spec's values, so
                                                               # these need not be TRUE_KERNELS': the same minimum is)
