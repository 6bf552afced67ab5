"""`explain` in words: one plain line per term of an op's time (or of a step), with its numbers, before any formula.

Numbers only (no sympy): the op's kernels are timed by the roofline's own functions (kernel_time, occupancy,
bytes_in_flight, launch_parts, efficiency_field), and each line names the spec fields the term is made of. The
formulas themselves stay in `explain --formulas` (rubinperf.analysis.symbolic); the two agree because both evaluate
the same roofline.
"""

from __future__ import annotations

from rubinperf.roofline import (BOUNDS, GROUPED, TENSOR_CORE, binding_term, busiest_unit, bytes_in_flight,
                                distinct_share, efficiency_field, epilogue_store, kernel_time, launch_parts, occupancy,
                                stream_latency)
from rubinperf.kernels.cost import PEAKS
from rubinperf.units import fmt_num, fmt_pct, fmt_time, si

MAX_LINES = 15


def _t(seconds) -> str:
    return fmt_time(float(seconds))


def _kernels_of(ops):
    """(kernel, occurrences per step x stretch, stretch) of every kernel launch group of the ops."""
    for op in ops:
        for k in op.kernels:
            yield k, float(op.repeat), float(op.stretch), op.die_local_weights


def op_lines(ops, hw, step_time_s: float | None = None, launch: str = "graph") -> list[str]:
    """Plain lines for the ops of one name in a step (their kernels summed over layers, stretched as the step
    stretches them): what it is, its work, then one line per term with the spec fields behind it, then how they
    compose. At most MAX_LINES lines."""
    timed = [(k, rep, st, kernel_time(k, hw, die_local_weights=local, launch=launch)) for k, rep, st, local
             in _kernels_of(ops)]
    if not timed:
        return []
    total = lambda f: sum(getattr(t, f) * rep * st for _, rep, st, t in timed)   # noqa: E731
    cost = lambda f: sum(float(getattr(k.cost, f)) * rep for k, rep, _, _ in timed)   # noqa: E731
    expected, sol = total("expected_s"), total("sol_s")
    if not expected and not cost("flops") and not sum(float(k.cost.launches) * rep for k, rep, _, _ in timed):
        return [f"{ops[0].name}: no work at this point: it runs no kernel (a draft's op at --draft-tokens 0)"]
    terms = {b: total(f"{b}_s") for b in BOUNDS}
    launches = sum(float(k.cost.launches) * rep for k, rep, _, _ in timed)
    kernels = sum(float(op.kernel_count) * float(op.repeat) for op in ops)
    occurrences = sum(float(op.repeat) for op in ops)
    name = ops[0].name
    per = "a step" if step_time_s else "a call"
    head = (f"{name}: {fmt_num(kernels)} kernel(s) {per}" + (f" ({fmt_num(occurrences)} occurrences, one per layer or "
            "pass)" if occurrences > 1 else ""))
    if step_time_s:
        head += f", {_t(expected)} of a {_t(step_time_s)} step ({fmt_pct(expected / step_time_s)})"
    bound, busiest = binding_term(terms), busiest_unit(terms)
    lines = [head + f"; bound: {bound}" + (f"; busiest unit: {busiest}" if busiest != bound else "")]
    work = [f"{si(cost('flops'), 'FLOP')}"]
    hbm = cost("weight_bytes") + cost("activation_bytes") + cost("kv_bytes") + cost("table_bytes")
    if hbm:
        parts = [f"{si(cost(f), 'B')} {label}" for f, label in (("weight_bytes", "weights"),
                 ("activation_bytes", "activations"), ("kv_bytes", "KV"), ("table_bytes", "tables")) if cost(f)]
        work.append(f"{si(hbm, 'B')} through HBM ({', '.join(parts)})")
    if cost("host_bytes"):
        work.append(f"{si(cost('host_bytes'), 'B')} from host memory")
    if cost("nvlink_bytes") or cost("scale_out_bytes"):
        work.append(f"{si(cost('nvlink_bytes'), 'B')} over NVLink" + (
            f", {si(cost('scale_out_bytes'), 'B')} over the NIC" if cost("scale_out_bytes") else ""))
    lines.append(f"work {per}: " + ", ".join(work))

    # the kernel that carries most of each term explains it
    def main(term):
        return max(timed, key=lambda x: getattr(x[3], f"{term}_s") * x[1] * x[2])

    if terms["compute"]:
        k, *_ = main("compute")
        _, share, pad = occupancy(k, hw)
        peaks = [p for p in PEAKS if float(getattr(k.cost, f"{p}_flops"))]
        rates = ", ".join(f"{p.upper().replace('_', 'x')} {si(float(hw.peak_flops(p)), 'FLOP/s')} x "
                          f"{float(getattr(hw, efficiency_field(k.family, p, k.dequantises_weights))):.2f} "
                          f"({efficiency_field(k.family, p, k.dequantises_weights)})" for p in peaks)
        lines.append(f"compute = FLOPs / ({rates}) / {fmt_pct(float(share))} of the SMs busy (tiles and waves)"
                     + (f" x {float(pad):.2f} padded to whole tiles" if float(pad) > 1.0005 else "")
                     + (f" + the output stores the MMAs wait for ({si(float(k.store_bytes), 'B')} at the HBM streaming "
                        f"rate x {float(hw.mma_epilogue_exposed):.2f} mma_epilogue_exposed: {_t(store)})"
                        if float(store := epilogue_store(k, hw)) else "")
                     + f" = {_t(terms['compute'])}")
    if terms["memory"]:
        k, *_ = main("memory")
        grouped = k.family in GROUPED
        eff = "grouped_hbm_efficiency" if grouped and float(k.cost.weight_bytes) else "hbm_stream_efficiency"
        lines.append(f"memory = HBM bytes / ({si(float(hw.hbm_bandwidth_bytes_per_s), 'B/s')} hbm_bandwidth x "
                     f"{float(getattr(hw, eff)):.2f} {eff}"
                     + (f" x {float(hw.hbm_interleaved_bandwidth_factor):.2f} interleaved factor"
                        if float(hw.hbm_interleaved_bandwidth_factor) != 1 else "")
                     + (_stream_limit(k, hw) if k.second_n is not None else "")
                     + f") = {_t(terms['memory'])}")
    if terms["parallelism"]:
        k, *_ = main("parallelism")
        ctas, _, _ = occupancy(k, hw)
        flight = float(bytes_in_flight(k, hw, ctas))
        shared = float(distinct_share(k, hw, ctas))
        columns = (f", {fmt_num(min(float(ctas), float(hw.sm_count)) * shared)} CTAs' weight stages: the M tiles of a "
                   "weight column load the same stages" if shared < 1 else "")
        lines.append(f"parallelism = the extra memory time when {si(flight, 'B')} in flight "
                     f"({fmt_num(min(float(ctas), float(hw.sm_count)))} SMs busy{columns}) / {_t(stream_latency(k, hw))} HBM "
                     f"latency streams slower than the HBM rate (Little's law) = {_t(terms['parallelism'])}")
    if terms["comm"]:
        hops = cost("nvlink_hops")
        k, *_ = main("comm")
        lanes = k.hop_lanes_per_sm
        pulls = (f", or if slower {fmt_num(hops)} round trips over {fmt_num(float(lanes))} x {fmt_num(float(hw.sm_count))} "
                 f"pulling lanes" + (f" (a lane at least one token's {fmt_num(float(k.hops_per_item))})"
                                     if k.hops_per_item is not None else "")
                 + f" x {_t(hw.nvlink_latency_s)} nvlink_latency") if lanes is not None and hops else ""
        lines.append(f"link = NVLink bytes / ({si(float(hw.nvlink_bandwidth_bytes_per_s), 'B/s')} x "
                     f"{float(hw.nvlink_efficiency):.2f} nvlink_efficiency{pulls})"
                     + (f" + {fmt_num(hops)} round trips x {_t(hw.nvlink_latency_s)} nvlink_latency"
                        if hops and lanes is None else "")
                     + (" (the NIC's bytes and hops beside)" if cost("scale_out_bytes") else "")
                     + f" = {_t(terms['comm'])}")
    if terms["latency"]:
        k, rep, st, _ = main("latency")
        p = launch_parts(k, hw, launch)
        bits = [f"start {_t(p['start'])} ({launch} launch"
                + (f": boundary {_t(hw.kernel_launch_graph_s)} less {_t(hw.pdl_hidden_s)} PDL-hidden" if launch == "graph" else "")
                + ")"]
        if k.dependent_loads + k.drain_loads:
            bits.append(f"{fmt_num(float(k.dependent_loads + k.drain_loads))} HBM round trips x {_t(hw.hbm_latency_s)}")
        if k.family in TENSOR_CORE:
            bits.append(f"MMA prologue {fmt_num(float(hw.mma_prologue_cycles))} cycles ({_t(p['prologue'])})")
        if float(p["sync"]):
            bits.append(f"fixed chain {_t(p['sync'])} (megamoe_sync_s: the code's timed steps and the fitted rest)")
        if float(p["reduction"]):
            bits.append(f"split-KV reduction {_t(p['reduction'])}")
        own = sum(float(k.cost.launches) * rep * st * float(sum(launch_parts(k, hw, launch).values()))
                  for k, rep, st, _ in timed)
        sets = sum(float(k.cost.collectives) * rep * st for k, rep, st, _ in timed) * float(hw.collective_floor_s)
        parts = [f"{fmt_num(launches)} launches x ({' + '.join(bits)})"] if launches else []
        if sets:
            parts.append(f"{fmt_num(cost('collectives'))} collective set-ups x {_t(hw.collective_floor_s)} "
                         "collective_floor")
        other = terms["latency"] - own - sets
        if other > 1e-9 * terms["latency"]:
            parts.append(f"host work {_t(other)}")
        text = "latency = " + " + ".join(parts)
        lines.append(f"{text} = {_t(terms['latency'])}")
    fused = [k for k, *_ in timed if k.fused_rows is not None]
    if ops[0].part == "cpu":
        lines.append("host work: it runs beside the GPU's; the step shows the part the GPU waits for (estimate "
                     "--breakdown: host work on the critical path)")
        return lines[:MAX_LINES]
    if fused:
        rows = float(fused[0].fused_rows)
        rho = rows / (rows + float(hw.fused_overlap_rows))
        lines.append(f"overlap: fused kernel, {fmt_pct(rho)} of the smaller terms hide under the largest "
                     f"(rows {fmt_num(rows)} / (rows + {fmt_num(float(hw.fused_overlap_rows))} fused_overlap_rows))")
    else:
        lines.append("overlap: each kernel's pipeline hides the smaller terms under the largest: "
                     "latency + max(compute, memory + parallelism, link)")
    stretch = max(st for _, _, st, _ in timed)
    if stretch != 1:
        lines.append(f"stretch: x {stretch:.3f} = 1 / balancedness (the busiest expert rank sets the pace)")
    lines.append(f"expected = {_t(expected)}; speed of light = {_t(sol)} ({fmt_pct(sol / expected if expected else 1.0)}"
                 " of roofline)")
    return lines[:MAX_LINES]


def _stream_limit(k, hw) -> str:
    """MegaMoE's memory line: the rate its weights stream at is also capped by Little's law on its own stages (the
    SMs with blocks x stages x stage bytes in flight, over megamoe_stream_latency_s); the memory term is the slower."""
    ctas, share, _ = occupancy(k, hw)
    flight = float(bytes_in_flight(k, hw, ctas)) * float(share)
    rate = flight / float(stream_latency(k, hw))
    hbm = float(hw.hbm_bandwidth_bytes_per_s) * float(hw.grouped_hbm_efficiency)
    return (f", or if slower the Little's law limit {si(flight, 'B')} in flight ({fmt_pct(float(share))} of "
            f"{fmt_num(float(hw.sm_count))} SMs x {si(float(k.in_flight_bytes_per_cta), 'B')} stages) / "
            f"{_t(stream_latency(k, hw))} megamoe_stream_latency = {si(rate, 'B/s')}: "
            + ("binds" if rate < hbm else "does not bind"))


def step_lines(result, top: int = 6) -> list[str]:
    """Plain lines for a whole step: its time and what it is made of, then its largest ops with their bound."""
    rec = result.record() if hasattr(result, "record") else result
    lines = [f"step = max(GPU + exposed host, CPU) = max({_t(rec['gpu_time_ms'] / 1e3)} + "
             f"{_t(rec['exposed_host_time_ms'] / 1e3)}, {_t(rec['cpu_time_ms'] / 1e3)}) = {_t(rec['step_time_ms'] / 1e3)}; "
             f"speed of light {_t(rec['sol_step_time_ms'] / 1e3)} ({fmt_pct(rec['fraction_of_roofline'])} of roofline)"]
    if rec.get("kernels_per_step"):
        lines.append(f"kernels a step: {fmt_num(rec['kernels_per_step'])}"
                     + (f"; the draft's passes take {_t(rec['draft_time_ms'] / 1e3)}" if rec.get("draft_time_ms") else ""))
    for b in rec["breakdown"][:top]:
        lines.append(f"{b['kernel']}: {_t(b['time_ms'] / 1e3)} ({fmt_pct(b['share_of_step'])}), {b['bound']}-bound, "
                     f"{fmt_pct(b['fraction_of_roofline'])} of roofline")
    rest = rec["breakdown"][top:]
    if rest:
        lines.append(f"{len(rest)} other ops: {_t(sum(b['time_ms'] for b in rest) / 1e3)}")
    lines.append(f"bound: {rec['bound']}; tokens/s per GPU {fmt_num(rec['tokens_per_s_per_gpu'])}, per user "
                 f"{fmt_num(rec['tokens_per_s_per_user'])}")
    return lines[:MAX_LINES]
