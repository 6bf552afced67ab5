"""A grid sweep of `estimate`'s own point (make_point from the rack's stack, as benchmarks/bench.py sweeps it)
gives at each grid point what `rubinperf estimate --batch B --context C` gives there. The scalar step adds its
ops in another order than the grid's (ssum groups arrays by shape), so the two agree to the last few bits,
not bit for bit; from context 1, where sparse attention still reads the context, to 1M."""

from __future__ import annotations

import numpy as np
import pytest

from rubinperf.serving import sweep_grid_blocks
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.defaults import DEFAULT_MODEL
from rubinperf.specs.select import load_specs
from rubinperf.step.estimates import run_estimates
from rubinperf.step.point import make_point

BATCHES = np.array([1.0, 7.0, 64.0, 200.0])   # 200 requests of 1M tokens still fit in HBM (estimate checks)
CONTEXTS = np.array([1.0, 100.0, 3149.0, 131072.0, 1_000_000.0])
FIELDS = {"step_s": ("step_time_ms", 1e3), "sol_s": ("sol_step_time_ms", 1e3),
          "tokens_per_s_per_gpu": ("tokens_per_s_per_gpu", 1.0), "tokens_per_s_per_user": ("tokens_per_s_per_user", 1.0)}


@pytest.mark.parametrize("rack", ["gb300-nvl72", "vr-nvl72"])
@pytest.mark.parametrize("layout", ["dep32", "tp8", "tep8"])
def test_the_sweep_of_estimates_point_is_estimate(rack, layout):
    m, (hw,) = load_specs(DEFAULT_MODEL, [rack])
    lay = parse_layout(layout)
    point = make_point(m, hw, lay, phase="decode")
    seen = 0
    for rows, cols, values in sweep_grid_blocks(m, hw, lay, point, BATCHES, CONTEXTS, chunk_points=6):
        for i in range(rows.start, rows.stop):
            for j in range(cols.start, cols.stop):
                rec, = run_estimates(DEFAULT_MODEL, [rack], [layout], phase="decode", batch=BATCHES[i],
                                     context=CONTEXTS[j])
                for key, (field, scale) in FIELDS.items():
                    assert values[key][i - rows.start, j - cols.start] * scale == pytest.approx(rec[field], rel=1e-12)
                seen += 1
    assert seen == BATCHES.size * CONTEXTS.size
