"""Vectorised sweeps of the step model over batch x context, in memory-bounded chunks.

The step model evaluates numpy arrays directly (broadcasting batch as a column and
context as a row); a sweep only has to keep its peak memory down by evaluating the
context axis a chunk at a time.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rubinperf.graph import Point
from rubinperf.step import step

METRICS = ("step_s", "sol_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user")
CHUNK_POINTS = 25_000


def sweep_grid(model, hw, layout, point: Point, batches, contexts, chunk_points: int = CHUNK_POINTS) -> dict:
    """Metrics on the grid batches x contexts (arrays of shape [len(batches), len(contexts)])."""
    b = np.asarray(batches, dtype=float).reshape(-1, 1)
    c = np.asarray(contexts, dtype=float).reshape(-1)
    out = {k: np.empty((b.shape[0], c.shape[0])) for k in METRICS}
    cols = max(1, chunk_points // max(1, b.shape[0]))
    for start in range(0, c.shape[0], cols):
        sl = slice(start, start + cols)
        r = step(model, hw, layout, dataclasses.replace(point, batch=b, context=c[sl].reshape(1, -1)))
        out["step_s"][:, sl] = r.expected_s
        out["sol_s"][:, sl] = r.sol_s
        out["tokens_per_s_per_gpu"][:, sl] = r.tokens_per_s_per_gpu
        out["tokens_per_s_per_user"][:, sl] = r.tokens_per_s_per_user
    return out
