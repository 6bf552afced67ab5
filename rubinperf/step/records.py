"""Result records: plain dicts built from costs and times, shared by every renderer."""

from __future__ import annotations

from rubinperf.kernels.cost import Cost
from rubinperf.roofline import BOUNDS, KernelTime, binding_term


def kernel_record(kernel: str, cost: Cost, t: KernelTime, **extra) -> dict:
    """The kernel record of `--json`: times in ms, FLOPs and bytes raw."""
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


EXPOSED_HOST_ROW = "host work on the critical path (step - GPU)"


def step_record(r) -> dict:
    """The `estimate --json` record for one StepResult, with its per-kernel breakdown."""
    # GPU kernels by time, then the host's work (which overlaps the GPU's but for its exposed part, the last row).
    rows = sorted(r.by_name().values(), key=lambda x: (x["part"] == "cpu", -float(x["expected_s"])))
    total = float(r.expected_s)
    breakdown = []
    for x in rows:
        terms = {k: float(v) for k, v in x["terms"].items()}
        shares = x["shares"]
        bound = binding_term({b: shares[b] for b in BOUNDS if b in shares}) if shares else "cpu"
        breakdown.append({
            "kernel": x["kernel"], "part": x["part"],
            "time_ms": float(x["expected_s"]) * 1e3, "sol_time_ms": float(x["sol_s"]) * 1e3,
            "fraction_of_roofline": float(x["sol_s"]) / float(x["expected_s"]) if float(x["expected_s"]) else 1.0,
            "share_of_step": float(x["expected_s"]) / total,
            "flops": float(x["flops"]), "bytes": float(x["bytes"]), "bound": bound,
            "terms_ms": {k: v * 1e3 for k, v in terms.items()},
            "scale_out_ms": float(x["scale_out_s"]) * 1e3, "scale_out_bytes": float(x["scale_out_bytes"]),
            "kernels": float(x["kernels"]),
        })
    # The host's time on the step's critical path (under async scheduling what of the host path outlasts the GPU; all the host's
    # excess over the GPU where the step is host-bound): GPU rows + this row = the step.
    on_path = total - float(r.gpu_s)
    if on_path > 0:
        breakdown.append({
            "kernel": EXPOSED_HOST_ROW, "part": "cpu", "time_ms": on_path * 1e3, "sol_time_ms": 0.0,
            "fraction_of_roofline": 0.0, "share_of_step": on_path / total, "flops": 0.0, "bytes": 0.0, "bound": "cpu",
            "terms_ms": {"latency": on_path * 1e3}, "scale_out_ms": 0.0, "scale_out_bytes": 0.0, "kernels": 0.0,
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
        "balancedness": float(p.balancedness) if r.layout.ep > 1 else 1.0,
        "step_time_ms": total * 1e3, "sol_step_time_ms": float(r.sol_s) * 1e3,
        "gpu_time_ms": float(r.gpu_s) * 1e3, "cpu_time_ms": float(r.cpu_s) * 1e3,
        "exposed_host_time_ms": float(r.exposed_s) * 1e3,
        "fraction_of_roofline": float(r.sol_s) / total,
        "draft_time_ms": float(r.part_s("draft")) * 1e3,
        "kernels_per_step": float(r.kernels_per_step()),
        "tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu),
        "tokens_per_s_per_user": float(r.tokens_per_s_per_user),   # the mean over users: the key below says so
        "tokens_per_s_per_user_mean": float(r.tokens_per_s_per_user),
        "interactivity_stat": "mean",
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


# ---------------------------------------------------------------- the bundled specs (`rubinperf list`)


def _spec_records(kind: str, load, fields: str, extra=None) -> list[dict]:
    """A record per bundled spec of `kind` (loaded by `load`): the attributes `fields` names, in that order, each
    under its own name or `key=attribute`; `*` is where the keys of `extra(spec)` go."""
    from rubinperf.specs.loader import bundled_names

    recs = []
    for name in bundled_names(kind):
        spec, rec = load(name), {}
        for field in fields.split():
            key, _, attr = field.partition("=")
            rec.update(extra(spec) if key == "*" else {key: getattr(spec, attr or key)})
        recs.append(rec)
    return recs


def hardware_records() -> list[dict]:
    """Each bundled hardware spec with its headline peaks (SI)."""
    from rubinperf.specs.hardware import load_hardware

    return _spec_records("hardware", load_hardware, """name description preview default_stack fp4_dense_flops_per_s
        fp8_dense_flops_per_s bf16_dense_flops_per_s hbm_capacity_bytes hbm_bandwidth_bytes_per_s
        nvlink_bandwidth_bytes_per_s nvlink_domain_size gpu_power_w price_usd_per_gpu_hour""")


def stack_records() -> list[dict]:
    """Each bundled software stack: kernel library and engine facts, and the racks that name it as their default."""
    from rubinperf.specs.hardware import load_hardware
    from rubinperf.specs.loader import bundled_names
    from rubinperf.specs.stack import load_stack

    default_of: dict = {}
    for name in bundled_names("hardware"):
        hw = load_hardware(name)
        default_of.setdefault(hw.default_stack, []).append(hw.name)
    return _spec_records("stack", load_stack, """name description * split_k_max mma_bytes_in_flight_per_sm pdl_hidden_s
        mma_compute_efficiency grouped_compute_efficiency grouped_fp4_compute_efficiency
        grouped_w4a16_compute_efficiency step_overhead_s dp_sync_per_rank_s dp_sync_algorithm
        async_scheduling host_rank_spread eplb_target_balancedness""", lambda st: {"default_for": default_of.get(st.name, [])})


def model_records() -> list[dict]:
    """Each bundled model with the total and active parameters its shapes imply."""
    from rubinperf.step.architecture import parameter_counts
    from rubinperf.specs.model import load_model

    return _spec_records("model", load_model, "name description layers=num_layers routed_experts=num_routed_experts "
                         "experts_per_token *", parameter_counts)


def layout_records() -> list[dict]:
    """The parallel layouts, by example."""
    from rubinperf.specs.layout import LAYOUT_EXAMPLES

    return [{"name": n, "description": d} for n, d in LAYOUT_EXAMPLES]


def workload_records() -> list[dict]:
    """The bundled workloads: one turn's tokens, the prefix hit rate and the prefill engine."""
    from rubinperf.specs.workload import load_workload

    return _spec_records("workload", load_workload, "name description input_tokens_per_turn output_tokens_per_turn "
                         "prefix_hit_rate prefill_layout prefix_pool")


def field_records() -> list[dict]:
    """Every spec field: its spec, table, unit, documented range and meaning (what --set may change)."""
    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import RANGE_SLACK, _type_hints, documented_range, spec_fields
    from rubinperf.specs.model import Model
    from rubinperf.specs.stack import Stack
    from rubinperf.specs.workload import Workload

    out = []
    for kind, cls in (("hardware", Hardware), ("stack", Stack), ("model", Model), ("workload", Workload)):
        hints = _type_hints(cls)
        for f in spec_fields(cls):
            typ, meta = hints[f.name], f.metadata
            span = documented_range(meta) if typ in (int, float) else None
            if typ in (int, float) and span is None:   # a fraction: its hard range
                low, high = 0.0, float(meta["at_most"])
            elif span is not None:
                low, high = span
            else:
                low = high = None
            out.append({"spec": kind, "field": f"{meta['section']}.{f.name}", "name": f.name,
                        "type": getattr(typ, "__name__", str(typ)), "unit": meta["unit"], "low": low, "high": high,
                        "refused_outside": [low / RANGE_SLACK, high * RANGE_SLACK] if span is not None else None,
                        "positive": meta["positive"], "doc": meta["doc"]})
    return out
