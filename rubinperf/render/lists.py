"""Tables of `rubinperf list`: bundled hardware, stacks, models and layouts (presentation only)."""

from __future__ import annotations

from rubinperf.render.output import print_out
from rubinperf.render.tables import col, table
from rubinperf.units import fmt_time, si


def hardware_table(rs: list[dict]) -> None:
    rows = [[r["name"] + (" (preview)" if r["preview"] else ""), si(r["fp4_dense_flops_per_s"], "FLOP/s"),
             si(r["fp8_dense_flops_per_s"], "FLOP/s"), si(r["bf16_dense_flops_per_s"], "FLOP/s"),
             si(r["hbm_capacity_bytes"], "B"), si(r["hbm_bandwidth_bytes_per_s"], "B/s"),
             si(r["nvlink_bandwidth_bytes_per_s"], "B/s"), str(r["nvlink_domain_size"]),
             si(r["gpu_power_w"], "W"), f"${r['price_usd_per_gpu_hour']:.2f}"] for r in rs]
    cols = [col("hardware", "left", min_width=11), col("FP4"), col("FP8", drop=3), col("BF16", drop=4), col("HBM"),
            col("HBM BW"), col("NVLink/dir", drop=2), col("domain", drop=5), col("power", drop=6),
            col("$/GPU-h", drop=1)]
    print_out(table("Hardware (dense peaks per GPU)", cols, rows))


def stacks_table(rs: list[dict]) -> None:
    rows = [[r["name"], ", ".join(r["default_for"]) or "—", str(r["split_k_max"]),
             si(r["mma_bytes_in_flight_per_sm"], "B"), fmt_time(r["pdl_hidden_s"]),
             f"{r['mma_compute_efficiency']:.2f}/{r['grouped_compute_efficiency']:.2f}/"
             f"{r['grouped_fp4_compute_efficiency']:.2f}/{r['grouped_w4a16_compute_efficiency']:.2f}",
             fmt_time(r["dp_sync_per_rank_s"]), f"{r['eplb_target_balancedness']:.2f}"] for r in rs]
    cols = [col("stack", "left", min_width=12), col("default for", "left", wrap=True, min_width=10),
            col("split-K", drop=4), col("GEMM bytes in flight/SM", short="in flight", wrap=True, drop=3),
            col("PDL hidden", short="PDL", drop=5), col("GEMM/MoE FP8/FP4/W4A16 eff.", short="GEMM/MoE eff.", wrap=True),
            col("DP sync/rank", short="DP sync", drop=2), col("EPLB bal.", short="EPLB", drop=1)]
    print_out(table("Software stacks (stacks/*.toml; --stack NAME|PATH)", cols, rows))


def models_table(rs: list[dict]) -> None:
    rows = [[r["name"], str(r["layers"]), f"{r['routed_experts']} top-{r['experts_per_token']}" if r["routed_experts"] else "dense",
             si(r["total_params"]), si(r["active_params"]), si(r["draft_params"]),
             si(r["engram_table_bytes"], "B") if r["engram_table_bytes"] else "—"] for r in rs]
    cols = [col("model", "left", wrap=False), col("layers", drop=2), col("experts", drop=3),
            col("total params", short="total"), col("active/token", short="active"), col("draft/MTP", short="draft"),
            col("Engram tables", short="Engram", drop=1)]
    print_out(table("Models (parameters from the spec's shapes)", cols, rows))


def layouts_table(rs: list[dict]) -> None:
    print_out(table("Layouts (any N that divides the model: dep<N>, tp<N>, tep<N>)", [("layout", "left"), ("meaning", "left")],
                    [[r["name"], r["description"]] for r in rs]))


def workloads_table(rs: list[dict]) -> None:
    from rubinperf.units import fmt_tokens

    rows = [[r["name"], fmt_tokens(r["input_tokens_per_turn"]), fmt_tokens(r["output_tokens_per_turn"]),
             f"{100 * r['prefix_hit_rate']:.1f}%", r["prefill_layout"], r["prefix_pool"], r["description"]] for r in rs]
    cols = [col("workload", "left", wrap=False), col("input/turn", short="in"), col("output/turn", short="out"),
            col("prefix hit"), col("prefill", "left", drop=2), col("prefix pool", "left", drop=3),
            col("description", "left", wrap=True, drop=1, min_width=20)]
    print_out(table("Workloads (examples/*.toml; -w NAME|PATH; --isl, --osl, --prefix-hit change one)", cols, rows))


def fields_table(rs: list[dict]) -> None:
    def span(r):
        if r["low"] is None:
            return "—"
        if r["refused_outside"] is None:
            return f"{'0' if not r['positive'] else '>0'} to 1"
        return f"{r['low']:g} to {r['high']:g}"

    rows = [[f"{r['spec']}.{r['name']}", r["unit"] or ("fraction" if r["refused_outside"] is None and r["low"] is not None
                                                       else "—"), span(r), r["doc"]] for r in rs]
    cols = [col("field (--set)", "left", wrap=False), col("unit", "left"), col("documented range", "left"),
            col("meaning", "left", wrap=True, drop=1, min_width=20)]
    print_out(table("Spec fields: a value more than 100x outside its range is refused", cols, rows))
