"""Dense GEMM: activations [m, k] x weights [k, n] -> output [m, n], `groups` independent copies."""

from __future__ import annotations

from rubinperf.kernels.cost import Cost, Kernel, kept_kernels
from rubinperf.specs.precision import PRECISIONS, mma_peak


@kept_kernels
def gemm(m, n, k, weight: str = "bf16", act: str | None = None, out: str = "bf16", groups=1) -> Kernel:
    """FLOPs 2mnk per group at the MMA rate of (act, weight); weights read once, activations read and written once;
    the output (`Kernel.store_bytes`) written by the epilogue, tile by tile.

    `groups` > 1 is a batched GEMM of distinct weights (the grouped output projection).
    """
    act = act or weight
    w, a, o = PRECISIONS[weight], PRECISIONS[act], PRECISIONS[out]
    cost = Cost.of_flops(mma_peak(act, weight), 2 * m * n * k * groups,
        weight_bytes=groups * n * k * w.bytes_per_element,
        activation_bytes=groups * (m * k * a.bytes_per_element + m * n * o.bytes_per_element),
        launches=1,
    )
    return Kernel("gemm", cost, groups=groups, rows=m, n=n, k=k, out_bytes_per_element=o.bytes_per_element)
