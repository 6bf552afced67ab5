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
        "parallelism_ms": float(t.parallelism_s) * 1e3,
        "comm_ms": float(t.comm_s) * 1e3,
        "latency_ms": float(t.latency_s) * 1e3,
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
        "scale_out_bytes": float(cost.scale_out_bytes),
        "scale_out_ms": float(t.scale_out_s) * 1e3,
    }
    return rec


def step_record(r) -> dict:
    """The contract's estimate record for one StepResult, with its per-kernel breakdown."""
    # GPU kernels by time, then the host's work (which overlaps the GPU's).
    rows = sorted(r.by_name().values(), key=lambda x: (x["part"] == "cpu", -float(x["expected_s"])))
    total = float(r.expected_s)
    breakdown = []
    for x in rows:
        terms = {k: float(v) for k, v in x["terms"].items()}
        bound = max(terms, key=terms.get)
        breakdown.append({
            "kernel": x["kernel"], "part": x["part"],
            "time_ms": float(x["expected_s"]) * 1e3, "sol_time_ms": float(x["sol_s"]) * 1e3,
            "fraction_of_roofline": float(x["sol_s"]) / float(x["expected_s"]) if float(x["expected_s"]) else 1.0,
            "share_of_step": float(x["expected_s"]) / total,
            "flops": float(x["flops"]), "bytes": float(x["bytes"]), "bound": bound,
            "terms_ms": {k: v * 1e3 for k, v in terms.items()},
            "scale_out_ms": float(x["scale_out_s"]) * 1e3, "scale_out_bytes": float(x["scale_out_bytes"]),
        })
    p, m = r.point, r.model
    decode = p.phase == "decode"
    return {
        "hardware": r.hw.name, "model": m.name, "layout": r.layout.name, "phase": p.phase,
        "gpus": r.layout.ranks,
        "batch_per_rank": float(p.batch), "context_tokens": float(p.context),
        "new_tokens_per_rank": None if decode else float(p.new_tokens),
        "draft_tokens": float(p.k(m)) if decode else None,
        "acceptance": float(p.accepted(m)) if decode else None,
        "balancedness": float(p.balancedness) if r.layout.kind == "dep" else 1.0,
        "step_time_ms": total * 1e3, "sol_step_time_ms": float(r.sol_s) * 1e3,
        "gpu_time_ms": float(r.gpu_s) * 1e3, "cpu_time_ms": float(r.cpu_s) * 1e3,
        "fraction_of_roofline": float(r.sol_s) / total,
        "draft_time_ms": float(r.part_s("draft")) * 1e3,
        "tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu),
        "tokens_per_s_per_user": float(r.tokens_per_s_per_user),
        # Topology: a node is a tray (an 8-GPU HGX board; a 4-GPU NVL72 compute tray); a layout wider than one
        # NVLink domain spans several, and its scale-out (NIC) time is the breakdown rows' scale_out_ms.
        "gpus_per_node": int(r.hw.gpus_per_tray),
        "tokens_per_s_per_node": float(r.tokens_per_s_per_gpu) * int(r.hw.gpus_per_tray),
        "nvlink_domain_size": int(r.hw.nvlink_domain_size),
        "nvlink_domains": max(1, -(-r.layout.ranks // int(r.hw.nvlink_domain_size))),
        "scale_out_time_ms": sum(b["scale_out_ms"] for b in breakdown),
        "bound": r.bound,
        "stack": getattr(r.hw, "stack", None),
        "breakdown": breakdown,
    }
