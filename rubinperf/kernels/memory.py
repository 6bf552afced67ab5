"""Streaming kernels: device copy, elementwise passes (norms, mixing), table look-ups."""

from __future__ import annotations

from rubinperf.cost import Cost


def copy(nbytes, launches=1) -> Cost:
    """Device-to-device copy of `nbytes`: read once, write once."""
    return Cost(activation_bytes=2 * nbytes, launches=launches)


def elementwise(read_bytes, write_bytes, flops=0, weight_bytes=0, launches=1, peak: str = "fp32") -> Cost:
    """A streaming pass (RMSNorm, mHC mixing, SwiGLU): bytes in and out, a few FLOPs per element."""
    return Cost.of_flops(peak, flops) + Cost(
        activation_bytes=read_bytes + write_bytes, weight_bytes=weight_bytes, launches=launches
    )


def table_lookup(lookups, row_bytes, where: str = "hbm", launches=1) -> Cost:
    """Gather `lookups` rows of `row_bytes` from a table held in HBM, host memory or peers' HBM."""
    nbytes = lookups * row_bytes
    if where == "host":
        return Cost(host_bytes=nbytes, launches=launches)
    if where == "peer-hbm":
        return Cost(nvlink_bytes=nbytes, nvlink_hops=1, launches=launches)
    return Cost(table_bytes=nbytes, launches=launches)
