"""Kernel x Hardware -> KernelTime. The only place where time is computed.

Speed of light (SOL) is a true lower bound: max(FLOPs / peak, bytes / peak bandwidth,
link bytes / link bandwidth). Expected is how a real kernel of that shape approaches it,
each term named (KernelTime):

    expected = latency + overlap(compute, memory + parallelism, comm)

- latency: launches x (launch + (1 - PDL share) x (prologue + dependent HBM loads x HBM
  latency)) + collectives x set-up + the host's step work. A lone (eager) kernel pays the
  host launch and no PDL; a kernel in a graph pays the graph boundary.
- compute: useful FLOPs at the family's efficiency, x tile padding (rows padded to
  mma_tile_rows), / the SMs' share that has work (tiles x split-K over waves of SMs).
- memory: bytes at the streaming rate, hbm x hbm_stream_efficiency (weights at the
  die-local or interleaved factor).
- parallelism: extra memory time when the kernel keeps too few bytes in flight (Little's
  law): rate = min(CTAs, SMs) x bytes in flight per SM / HBM latency.
- comm: link bytes / (link x efficiency) + per-message round trips.
- overlap: a kernel's pipeline hides the smaller terms under the largest (max). A fused
  kernel (MegaMoE) runs dependent phases: a share rho = rows / (rows + fused_overlap_rows)
  of the smaller terms hides, the rest adds.

Works on numbers, numpy arrays and sympy symbols.
"""

from __future__ import annotations

from rubinperf.cost import PEAKS, Kernel, KernelTime
from rubinperf.mathops import sceil, sfloor, smax, smin

LAUNCH_MODES = ("graph", "eager")
COMPUTE_EFFICIENCY = {"gemm": "mma", "grouped_gemm": "mma", "fused_moe": "mma", "attention": "attention"}


def parallelism(kern: Kernel, hw):
    """(CTAs, share of the SMs' compute in use, row padding factor) of a kernel on `hw`.

    MMA kernels: tiles = groups x ceil(rows / tile rows) x ceil(n / tile cols); with fewer tiles
    than SMs, split-K up to split_k_max (and at most one stage of K per split) raises the CTAs;
    the last wave's empty SMs cost compute time. Other kernels: the CTAs they launch."""
    sms = hw.sm_count
    if not kern.is_mma:
        if kern.ctas is None:
            return sms, 1.0, 1.0
        return kern.ctas, smin(kern.ctas / sms, 1.0), 1.0
    m_tiles = sceil(kern.rows / hw.mma_tile_rows)
    tiles = kern.groups * m_tiles * sceil(kern.n / hw.mma_tile_cols)
    split = smax(1.0, smin(sfloor(sms / tiles), hw.split_k_max, sceil(kern.k / hw.mma_tile_depth)))
    ctas = tiles * split
    waves = sceil(ctas / sms)
    return ctas, ctas / (waves * sms), m_tiles * hw.mma_tile_rows / kern.rows


def kernel_time(kern: Kernel, hw, die_local_weights: bool = False, launch: str = "graph") -> KernelTime:
    cost = kern.cost
    ctas, sm_share, padding = parallelism(kern, hw)

    sol_compute = sum(getattr(cost, f"{p}_flops") / hw.peak_flops(p) for p in PEAKS if _nonzero(getattr(cost, f"{p}_flops")))
    eff = getattr(hw, f"{COMPUTE_EFFICIENCY.get(kern.family, 'vector')}_compute_efficiency")
    compute = sol_compute * padding / (eff * sm_share) if _nonzero(sol_compute) else 0.0

    host_rate = smin(hw.host_memory_bandwidth_bytes_per_s, hw.c2c_bandwidth_bytes_per_s)
    sol_memory = cost.hbm_bytes / hw.hbm_bandwidth_bytes_per_s + cost.host_bytes / host_rate
    hbm = hw.hbm_bandwidth_bytes_per_s * hw.hbm_stream_efficiency
    weight_factor = hw.hbm_local_bandwidth_factor if die_local_weights else hw.hbm_interleaved_bandwidth_factor
    hbm_time = (cost.weight_bytes / (hbm * weight_factor)
                + (cost.activation_bytes + cost.kv_bytes + cost.table_bytes) / (hbm * hw.hbm_interleaved_bandwidth_factor))
    memory = hbm_time + cost.host_bytes / (host_rate * hw.host_efficiency)
    little = bytes_in_flight(kern, hw, ctas) / hw.hbm_latency_s
    extra = smax(cost.hbm_bytes / little - hbm_time, 0.0) if _nonzero(cost.hbm_bytes) else 0.0

    sol_comm = cost.nvlink_bytes / hw.nvlink_bandwidth_bytes_per_s + cost.scale_out_bytes / hw.scale_out_bandwidth_bytes_per_s
    comm = (
        cost.nvlink_bytes / (hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency)
        + cost.nvlink_hops * hw.nvlink_latency_s
        + cost.cross_tray_hops * hw.cross_tray_latency_s
        + cost.scale_out_bytes / (hw.scale_out_bandwidth_bytes_per_s * hw.scale_out_efficiency)
        + cost.scale_out_hops * hw.scale_out_latency_s
    )

    latency = launch_latency(kern, hw, launch) + (
        cost.collectives * hw.collective_floor_s + cost.steps * hw.step_overhead_s + cost.dp_sync_ranks * hw.dp_sync_per_rank_s)

    body = overlap(kern, hw, compute, memory + extra, comm)
    return KernelTime(
        compute_s=compute, memory_s=memory, parallelism_s=extra, comm_s=comm, latency_s=latency,
        expected_s=latency + body,
        sol_compute_s=sol_compute + 0.0, sol_memory_s=sol_memory, sol_comm_s=sol_comm,
        sol_s=smax(sol_compute, sol_memory, sol_comm),
    )


def bytes_in_flight(kern: Kernel, hw, ctas):
    """HBM bytes the whole GPU keeps in flight: one pipeline per active SM at the family's
    per-SM figure, or every CTA's own bytes where the kernel states them."""
    if kern.in_flight_bytes_per_cta is not None:
        return ctas * kern.in_flight_bytes_per_cta
    per_sm = hw.mma_bytes_in_flight_per_sm if kern.is_mma else hw.stream_bytes_in_flight_per_sm
    return smin(ctas, hw.sm_count) * per_sm


def launch_latency(kern: Kernel, hw, launch: str = "graph"):
    """Fixed time of the kernel's launches: start, then fill (prologue and the chain of dependent HBM loads)."""
    if launch not in LAUNCH_MODES:
        raise ValueError(f"launch: expected one of {LAUNCH_MODES}, got {launch!r}")
    fill = hw.kernel_prologue_s + kern.dependent_loads * hw.hbm_latency_s
    if launch == "eager":
        return kern.cost.launches * (hw.kernel_launch_eager_s + fill)
    return kern.cost.launches * (hw.kernel_launch_graph_s + (1 - hw.pdl_hidden_fraction) * fill)


def overlap(kern: Kernel, hw, compute, memory, comm):
    """How the body terms compose: the max in a pipelined kernel; in a fused kernel a share
    rho = rows / (rows + fused_overlap_rows) of the smaller terms hides under the largest."""
    largest = smax(compute, memory, comm)
    if kern.fused_rows is None:
        return largest
    rho = kern.fused_rows / (kern.fused_rows + hw.fused_overlap_rows)
    return largest + (1 - rho) * (compute + memory + comm - largest)


def _nonzero(x) -> bool:
    """Skip terms that are exactly the number 0 (keeps symbolic formulas short)."""
    return not (isinstance(x, (int, float)) and x == 0)
