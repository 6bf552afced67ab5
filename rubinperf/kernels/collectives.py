"""Collectives over the NVLink domain: bytes sent per GPU and serial message latencies.

Model: time = collective floor + hops x per-message latency + bytes / link bandwidth.
A group wider than one tray pays the cross-tray latency on each hop.
"""

from __future__ import annotations

from rubinperf.cost import Cost, Kernel
from rubinperf.kernels.moe import _gt


def all_to_all(bytes_per_rank, ranks, gpus_per_tray=None, hops=1) -> Kernel:
    """Each rank sends (n-1)/n of its `bytes_per_rank` to the others in one round (EP dispatch/combine)."""
    return _collective(bytes_per_rank * (ranks - 1) / ranks, hops, ranks, gpus_per_tray)


def all_reduce(nbytes, ranks, gpus_per_tray=None) -> Kernel:
    """Reduce-scatter then all-gather: 2(n-1)/n x bytes sent per rank, two latency rounds."""
    return _collective(2 * nbytes * (ranks - 1) / ranks, 2, ranks, gpus_per_tray)


def all_gather(nbytes_out, ranks, gpus_per_tray=None) -> Kernel:
    """Each rank receives (n-1)/n of the gathered `nbytes_out`; one latency round."""
    return _collective(nbytes_out * (ranks - 1) / ranks, 1, ranks, gpus_per_tray)


def _collective(sent_bytes, hops, ranks, gpus_per_tray) -> Kernel:
    cross = hops if (gpus_per_tray is not None and _gt(ranks, gpus_per_tray)) else 0
    return Kernel("collective", Cost(nvlink_bytes=sent_bytes, nvlink_hops=hops, cross_tray_hops=cross, collectives=1),
                  dependent_loads=0)
