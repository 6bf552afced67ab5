"""Cost x Hardware -> KernelTime. The only place where time is computed.

Speed of light (SOL) is a true lower bound: max(FLOPs / peak, bytes / peak bandwidth,
link bytes / link bandwidth). Expected derates every peak by the hardware's measured
efficiency, reads weights at the die-local or interleaved HBM rate, adds per-message
latency to link time, and adds the fixed floors (launches, collectives, per-step CPU
overhead and DP synchronisation):

    expected = max(compute, memory, comm) + floor

Within one kernel, compute, memory traffic and link traffic overlap (the max); the
floors do not. Works on numbers, numpy arrays and sympy symbols.
"""

from __future__ import annotations

from rubinperf.cost import PEAKS, Cost, KernelTime
from rubinperf.mathops import smax, smin


def kernel_time(cost: Cost, hw, die_local_weights: bool = False) -> KernelTime:
    sol_compute = sum(getattr(cost, f"{p}_flops") / hw.peak_flops(p) for p in PEAKS if _nonzero(getattr(cost, f"{p}_flops")))
    compute = sum(
        getattr(cost, f"{p}_flops") / (hw.peak_flops(p) * hw.compute_efficiency(p))
        for p in PEAKS
        if _nonzero(getattr(cost, f"{p}_flops"))
    )

    host_rate = smin(hw.host_memory_bandwidth_bytes_per_s, hw.c2c_bandwidth_bytes_per_s)
    sol_memory = cost.hbm_bytes / hw.hbm_bandwidth_bytes_per_s + cost.host_bytes / host_rate
    hbm = hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency
    weight_factor = hw.hbm_local_bandwidth_factor if die_local_weights else hw.hbm_interleaved_bandwidth_factor
    memory = (
        cost.weight_bytes / (hbm * weight_factor)
        + (cost.activation_bytes + cost.kv_bytes + cost.table_bytes) / (hbm * hw.hbm_interleaved_bandwidth_factor)
        + cost.host_bytes / (host_rate * hw.host_efficiency)
    )

    sol_comm = cost.nvlink_bytes / hw.nvlink_bandwidth_bytes_per_s + cost.scale_out_bytes / hw.scale_out_bandwidth_bytes_per_s
    comm = (
        cost.nvlink_bytes / (hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency)
        + cost.nvlink_hops * hw.nvlink_latency_s
        + cost.cross_tray_hops * hw.cross_tray_latency_s
        + cost.scale_out_bytes / (hw.scale_out_bandwidth_bytes_per_s * hw.scale_out_efficiency)
        + cost.scale_out_hops * hw.scale_out_latency_s
    )
    floor = (
        cost.launches * hw.kernel_launch_floor_s
        + cost.collectives * hw.collective_floor_s
        + cost.steps * hw.step_overhead_s
        + cost.dp_sync_ranks * hw.dp_sync_per_rank_s
    )

    return KernelTime(
        compute_s=compute + 0.0,
        memory_s=memory,
        comm_s=comm,
        floor_s=floor,
        expected_s=smax(compute, memory, comm) + floor,
        sol_compute_s=sol_compute + 0.0,
        sol_memory_s=sol_memory,
        sol_comm_s=sol_comm,
        sol_s=smax(sol_compute, sol_memory, sol_comm),
    )


def _nonzero(x) -> bool:
    """Skip terms that are exactly the number 0 (keeps symbolic formulas short)."""
    return not (isinstance(x, (int, float)) and x == 0)
