"""Dense GEMM: activations [m, k] x weights [k, n] -> output [m, n]."""

from __future__ import annotations

from rubinperf.cost import Cost
from rubinperf.precision import PRECISIONS, mma_peak


def gemm(m, n, k, weight: str = "bf16", act: str | None = None, out: str = "bf16", launches=1) -> Cost:
    """FLOPs 2mnk at the MMA rate of (act, weight); weights read once, activations read and written once."""
    act = act or weight
    w, a, o = PRECISIONS[weight], PRECISIONS[act], PRECISIONS[out]
    return Cost.of_flops(mma_peak(act, weight), 2 * m * n * k) + Cost(
        weight_bytes=n * k * w.bytes_per_element,
        activation_bytes=m * k * a.bytes_per_element + m * n * o.bytes_per_element,
        launches=launches,
    )
