"""Result records: plain dicts built from costs and times, shared by every renderer."""

from __future__ import annotations

from rubinperf.cost import Cost, KernelTime


def kernel_record(kernel: str, cost: Cost, t: KernelTime, **extra) -> dict:
    """The contract's kernel record: times in ms, FLOPs and bytes raw."""
    rec = {
        "kernel": kernel,
        **extra,
        "time_ms": float(t.expected_s) * 1e3,
        "sol_time_ms": float(t.sol_s) * 1e3,
        "compute_ms": float(t.compute_s) * 1e3,
        "memory_ms": float(t.memory_s) * 1e3,
        "comm_ms": float(t.comm_s) * 1e3,
        "floor_ms": float(t.floor_s) * 1e3,
        "fraction_of_roofline": float(t.fraction_of_roofline),
        "bound": t.bound,
        "flops": float(cost.flops),
        "bytes": float(cost.bytes),
        "weight_bytes": float(cost.weight_bytes),
        "activation_bytes": float(cost.activation_bytes),
        "kv_bytes": float(cost.kv_bytes),
        "table_bytes": float(cost.table_bytes),
        "host_bytes": float(cost.host_bytes),
        "nvlink_bytes": float(cost.nvlink_bytes),
    }
    return rec
