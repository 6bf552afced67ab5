"""Kernel x Hardware -> KernelTime. The only place where time is computed.

Speed of light (SOL) is a true lower bound: max(FLOPs / peak, bytes / peak bandwidth,
link bytes / link bandwidth). Expected is how a real kernel of that shape approaches it,
each term named (KernelTime):

    expected = latency + overlap(compute, memory + parallelism, comm)

- latency: launches x (start + fill) + collectives x set-up + the host's step work; fill = (dependent HBM loads
  before the work streams + the drain of its last stores) x HBM latency, + the prologue cycles of a tensor-core
  kernel at the SM clock. The start depends on the launch (`launch_latency`): a graph boundary less what
  programmatic dependent launch hides, a stream boundary (eager, as do_bench times a kernel; stream: at least the
  host's dispatch per kernel), or a lone launch after a synchronisation (cold). A split-KV decode kernel with
  fewer (sequence, KV head) groups than SMs adds its reduction kernel.
- compute: useful FLOPs at the family's efficiency, x tile padding (rows padded to
  mma_tile_rows), / the SMs' share that has work (tiles x split-K over waves of SMs; causal attention's
  unequal CTAs, the longest started last: Kernel.critical_share); + the output stores the MMAs wait for
  (`epilogue_store`: mma_epilogue_exposed x store bytes at the HBM rate; DeepGEMM's SM90 GEMM waits for each block's).
- memory: bytes at the streaming rate, hbm x hbm_stream_efficiency (weights at the
  die-local or interleaved factor); for a kernel whose CTAs re-read an operand from L2 (the indexer's keys), no
  less than its loads at the L2's rate (`l2_time`).
- parallelism: extra memory time when the kernel keeps too few bytes in flight (Little's
  law): rate = bytes in flight / HBM latency, with min(CTAs, SMs) SMs each keeping a GEMM's
  pipeline stages, or ordinary loads up to a cap per SM.
- comm: link bytes / (link x efficiency) + per-message round trips; NVLink and the scale-out NIC
  carry their bytes at the same time (the larger sets the pace); scale_out_s is the NIC's part,
  shown beside the terms (not a term of its own).
- overlap: a kernel's pipeline hides the smaller terms under the largest (max). A fused
  kernel (MegaMoE) runs its GEMMs as one pipeline (max of compute and memory) and its exchange as
  dependent phases: a share rho = rows / (rows + fused_overlap_rows) of the smaller hides, the rest adds.
- MegaMoE as DeepGEMM's code runs it (kernels/deepgemm.py, docs/deepseek-kernels.md): its two GEMMs in waves of
  blocks of their own (`_two_phase`), stages x stage bytes in flight per SM against the stack's
  megamoe_stream_latency_s, its token pulls spread over dispatch-warp lanes (`serial_hops`), its fixed chain of
  syncs (megamoe_sync_s, in the latency term).

Works on numbers, numpy arrays and sympy symbols.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rubinperf.kept import kept
from rubinperf.kernels.cost import PEAKS, Kernel
from rubinperf.mathops import FieldArithmetic, Outer, dict_init, is_numpy, sadd, sceil, sdiv, sexcess, sfloor, smax, smin, sper, sscale, sstep, stimes_max

if TYPE_CHECKING:   # for annotations only (explain and sensitivity pass a record of sympy symbols with its fields)
    from rubinperf.specs.stack import Platform

LAUNCH_MODES = ("graph", "eager", "stream", "cold")
# Tensor-core families and the efficiency their MMAs run at (others: the CUDA-core vector rate).
TENSOR_CORE = {"gemm": "mma", "grouped_gemm": "mma", "fused_moe": "mma", "attention": "attention"}
GROUPED = ("grouped_gemm", "fused_moe")
# Dense GEMMs of these operand precisions run at a rate of their own (the library's kernels for that precision);
# others at mma_compute_efficiency.
MMA_PRECISION_EFFICIENCY = {"bf16": "mma_bf16_compute_efficiency", "fp4": "mma_fp4_compute_efficiency"}
# Grouped (MoE) kernels: a rate per MMA peak (specs.precision.mma_peak of the activation and weight formats):
# FP8 x FP8 and FP8 x FP4 (MXFP4 experts with MXFP8 activations, W4A8) the grouped rate; FP4 x FP4 (W4A4 NVFP4 or
# MXFP4) its own. A grouped kernel that dequantises its weights in the main loop (W4A16: FP4 experts widened to BF16)
# runs at grouped_w4a16_compute_efficiency; BF16 x BF16 experts at the GEMM rate, as other MMAs.
GROUPED_PRECISION_EFFICIENCY = {"fp8": "grouped_compute_efficiency", "fp8_fp4": "grouped_compute_efficiency",
                                "fp4": "grouped_fp4_compute_efficiency"}

# The terms of an expected kernel time, in the order a tie is broken; `bound` names the largest.
BOUNDS = ("compute", "memory", "parallelism", "comm", "latency")


def binding_term(seconds: dict) -> str:
    """The one bound rule: the name whose seconds are largest, a tie going to the first in the dict's order (BOUNDS
    order). A kernel's bound is its largest term; a breakdown row's and a step's, the term that binds the largest
    share of their time (each op's time counted under its own bound)."""
    return max(seconds, key=lambda name: float(seconds[name]))


# The units whose work overlaps in a kernel's time: the SMs' MMAs and vector work, HBM, the links.
UNITS = ("compute", "memory", "comm")


def busiest_unit(seconds: dict) -> str:
    """Of the units whose work overlaps (the SMs: compute_s; HBM: memory_s + parallelism_s, its bytes at the rate its
    bytes in flight allow; the links: comm_s), the one busy longest at the rates the kernel reaches: the unit a
    profiler's throughput counters read nearest its limit. The fixed latency_s is no unit's work (a chain of waits:
    launches, barriers, dependent loads), so where it is the largest term the bound is latency and this names the unit
    that the rest of the time keeps busiest (DeepGEMM's Mega MoE at one token: docs/deepseek-kernels.md, "Binding
    terms"). `seconds`: the terms by BOUNDS name."""
    memory = float(seconds["memory"]) + float(seconds["parallelism"])
    return binding_term({"compute": seconds["compute"], "memory": memory, "comm": seconds["comm"]})


@dict_init
@dataclass(frozen=True, init=False)
class KernelTime(FieldArithmetic):
    """Seconds. Every term is named so a reader can see which one sets the time.

    - compute_s: MMA / vector work on whole tiles and waves, at the family's efficiency;
    - memory_s: bytes at the rate a kernel with enough bytes in flight streams them;
    - parallelism_s: the extra memory time when too few CTAs keep too few bytes in flight
      (Little's law: active SMs x bytes in flight per SM / HBM latency);
    - comm_s: link bytes and per-message round trips;
    - latency_s: fixed per-kernel time (launch, pipeline fill and drain, collective set-up,
      host work of a step): it never overlaps the others;
    - expected_s: latency_s + the overlap of (compute, memory + parallelism, comm);
    - sol_*: the speed of light at datasheet peaks: a true lower bound;
    - scale_out_s: the NIC's share of comm_s (bytes over the NIC and RDMA round trips) when a
      collective spans NVLink domains, shown beside the terms.
    """

    compute_s: Any
    memory_s: Any
    parallelism_s: Any
    comm_s: Any
    latency_s: Any
    expected_s: Any
    sol_compute_s: Any
    sol_memory_s: Any
    sol_comm_s: Any
    sol_s: Any
    scale_out_s: Any = 0.0   # of comm_s, the scale-out NIC's bytes and messages alone (shown, not a term)

    @property
    def floor_s(self):
        """The fixed part under its record name (`floor_ms` in a kernel record)."""
        return self.latency_s

    @property
    def terms(self) -> dict:
        return {b: getattr(self, f"{b}_s") for b in BOUNDS}

    @property
    def bound(self) -> str:
        """Which term is largest: compute, memory, parallelism, comm or latency."""
        return binding_term(self.terms)

    @property
    def busiest(self) -> str:
        """Which unit's overlapping work is largest: compute, memory or comm (busiest_unit)."""
        return busiest_unit(self.terms)

    @property
    def fraction_of_roofline(self):
        """Speed-of-light time over expected time: 1.0 means the kernel runs at the roofline (and for no work)."""
        if isinstance(self.expected_s, (int, float)) and self.expected_s == 0:
            return 1.0
        return self.sol_s / self.expected_s

    @classmethod
    def _of_fields(cls, values) -> "KernelTime":
        """A KernelTime of these field values, in field order (FieldArithmetic's sums and products)."""
        return KernelTime(*values)

    def map(self, fn) -> "KernelTime":
        """The same times with `fn` applied to every term (one element of a sweep's arrays)."""
        return KernelTime(**{f: fn(v) for f, v in self.__dict__.items()})


def occupancy(kern: Kernel, hw: Platform):
    """How a kernel occupies the GPU: (CTAs, share of the SMs' compute in use, row padding factor) on `hw`.

    MMA kernels: tiles = groups x ceil(rows / tile rows) x ceil(n / tile cols); with fewer tiles
    than SMs, split-K up to split_k_max (each split keeping at least split_k_min_depth of K) raises
    the CTAs; the SMs' share in use is CTAs / (SMs x waves), with waves = CTAs / SMs plus
    wave_quantization x the idle part of the last wave. A kernel that names its own tile (Kernel.tile_rows,
    tile_cols), rounds each group's M tiles up to a cluster (m_tile_multiple) or runs a persistent grid of
    max_ctas CTAs (the share in use is then max_ctas / SMs, times the same wave tail over its tiles) uses
    those. Other kernels: the CTAs they launch. A kernel of unequal CTAs whose longest does a share c
    of the work (Kernel.critical_share) takes, in units of its work spread evenly over the SMs,
    max(SMs x c, 1 + wave_quantization x SMs x c) with more CTAs than SMs (list scheduling: the
    longest CTA, started in the last wave, runs on after the others), SMs x c in one wave; its padding is the
    kernel's work_padding (computed / useful MMA work: causal attention's masked diagonal blocks)."""
    sms = hw.sm_count
    if not kern.is_mma:
        pad = 1.0 if kern.work_padding is None else kern.work_padding
        if kern.ctas is None:
            return sms, 1.0, pad
        if kern.critical_share is None:
            return kern.ctas, smin(sper(kern.ctas, sms), 1.0), pad
        longest = sms * kern.critical_share
        tail = hw.wave_quantization * smin(1.0, smax(0.0, kern.ctas - sms))  # none in one wave
        return kern.ctas, 1.0 / smax(longest, 1.0 + tail * longest), pad
    tile_rows = hw.mma_tile_rows if kern.tile_rows is None else kern.tile_rows
    tile_cols = hw.mma_tile_cols if kern.tile_cols is None else kern.tile_cols
    if _deepgemm_sm90(kern, hw):   # an FP8 GEMM in the blocks DeepGEMM's SM90 heuristic picks (others: the stack's tile)
        from rubinperf.kernels.deepgemm import sm90_fp8_gemm_blocks

        rows, cols = sm90_fp8_gemm_blocks(kern.rows, kern.n, sms)
        tile_rows, tile_cols = _fp8_only(kern, rows, tile_rows), _fp8_only(kern, cols, tile_cols)
    m_tiles = sceil(kern.rows / tile_rows)
    if kern.m_tile_multiple is not None:  # a cluster of CTAs along M: each group's M tiles rounded up to it
        m_tiles = sceil(m_tiles / kern.m_tile_multiple) * kern.m_tile_multiple
    tiles = kern.groups * m_tiles * sceil(kern.n / tile_cols)
    if not _nonzero(tiles):  # an empty slice (a dimension split over more ranks than it has): no work to spread
        return 1.0, 1.0, 1.0
    per_tile = sms / tiles
    split = smax(1.0, smin(sfloor(per_tile), hw.split_k_max, sfloor(kern.k / hw.split_k_min_depth)))
    ctas = tiles * split
    if kern.second_n is not None:  # two GEMMs in turn (MegaMoE's linear 1 and 2): a persistent grid of one CTA per SM
        return _two_phase(kern, hw, m_tiles, tile_rows, tile_cols)
    if kern.max_ctas is not None:  # a persistent grid: at most max_ctas CTAs loop over the tiles
        exact = tiles / kern.max_ctas
        waves = exact + hw.wave_quantization * (sceil(exact - 1e-9) - exact)
        return smin(tiles, kern.max_ctas), smin(kern.max_ctas, sms) / sms * exact / waves, \
            m_tiles * tile_rows / kern.rows
    exact = ctas / sms
    # (ceil of exact - 1e-9: an exact whole number of waves stays whole where the symbolic path rounds 81 to 81.0000001)
    waves = exact + hw.wave_quantization * (sceil(exact - 1e-9) - exact)
    return ctas, exact / waves, m_tiles * tile_rows / kern.rows


def _two_phase(kern: Kernel, hw: Platform, m_tiles, tile_rows, tile_cols):
    """Occupancy of a persistent kernel that runs a first GEMM's blocks (n columns, k deep) and a second's
    (second_n, second_k) as one round-robin list over the SMs. MegaMoE: DeepGEMM @ 54e2261,
    deep_gemm/include/deep_gemm/scheduler/mega_moe.cuh, `get_next_block` (lines 150-182) hands an SM every kNumSMs-th
    block (`block_idx += kNumSMs`, lines 160 and 172) and carries `block_idx` from an expert wave's linear-1 blocks into
    its linear-2 blocks (line 165 resets only the expert) and on into the next wave's; the weight TMA warp loads a
    block's stages without waiting for its tokens (impls/sm100_fp8_fp4_mega_moe.cuh, the weight loads from line 726),
    so an SM whose linear-1 blocks end streams its first linear-2 block's weights at once. The SMs' share in use is
    the blocks' work over the list's span: the work spread over the SMs plus the idle part of the list's last wave of
    (linear-2) blocks (a block's time taken as its depth). Rows pad to pad_rows where the MMA shrinks to a block's
    valid rows, else to whole tiles."""
    sms = hw.sm_count
    first = kern.groups * m_tiles * sceil(kern.n / tile_cols)
    second = kern.groups * m_tiles * sceil(kern.second_n / tile_cols)
    work = (first * kern.k + second * kern.second_k) / sms
    exact = (first + second) / sms
    span = sadd(work, (_waves(exact, hw) - exact) * kern.second_k)
    pad = tile_rows if kern.pad_rows is None else kern.pad_rows
    padding = sceil(kern.rows / pad) * pad / kern.rows
    return smin(first, sms), work / span, padding


def _waves(exact, hw: Platform):
    """Waves of a grid `exact` times the SMs: whole waves, or, with wave_quantization below 1, part of the last one's
    idle SMs paid for."""
    return exact + hw.wave_quantization * (sceil(exact - 1e-9) - exact)


_peak_flops_of = operator.attrgetter(*[f"{p}_flops" for p in PEAKS])   # a Cost's FLOPs at each peak, in PEAKS' order


def kernel_time(kern: Kernel, hw: Platform, die_local_weights: bool = False, launch: str = "graph") -> KernelTime:
    cost = kern.cost
    ctas, sm_share, padding = occupancy(kern, hw)

    peaks = [(p, flops) for p, flops in zip(PEAKS, _peak_flops_of(cost)) if _nonzero(flops)]
    # (sper: x / d, an array times 1 / d)
    sol_compute = sadd(*[sper(flops, hw.peak_flops(p)) for p, flops in peaks]) if peaks else 0
    at_efficiency = [sper(flops, hw.peak_flops(p) * getattr(hw, efficiency_field(kern.family, p, kern.dequantises_weights)))
                     for p, flops in peaks]
    compute = sdiv(sscale(sadd(*at_efficiency), padding), sm_share) if peaks else 0.0
    if kern.critical_share is not None and _nonzero(hw.attention_tile_overhead_cycles):
        compute = sadd(compute, tile_overhead(kern, hw))
    store = epilogue_store(kern, hw)
    if _nonzero(store):
        compute = sadd(compute, store)
    if kern.serial_steps is not None and _nonzero(step_cycles(kern, hw)):
        compute = smax(compute, serial_chain(kern, hw, ctas))
    if _deepgemm_sm90(kern, hw) and _nonzero(hw.deepgemm_sm90_kblock_cycles):
        compute = smax(compute, _when_set(hw.deepgemm_sm90_kblock_cycles,
                                          lambda: _fp8_only(kern, sm90_gemm_chain(kern, hw), 0.0), 0.0))

    host_rate = smin(hw.host_memory_bandwidth_bytes_per_s, hw.c2c_bandwidth_bytes_per_s)
    other_bytes = sadd(cost.activation_bytes, cost.kv_bytes, cost.table_bytes)   # HBM bytes besides weights
    hbm_bytes = cost.hbm_bytes if _nonzero(cost.weight_bytes) else other_bytes   # (added once when no weights)
    sol_memory = sadd(sper(hbm_bytes, hw.hbm_bandwidth_bytes_per_s), sper(cost.host_bytes, host_rate))
    hbm = hw.hbm_bandwidth_bytes_per_s * hw.hbm_stream_efficiency
    weight_hbm = hw.hbm_bandwidth_bytes_per_s * (hw.grouped_hbm_efficiency if kern.family in GROUPED else hw.hbm_stream_efficiency)
    # Weights an op may keep on the die that reads them (each expert's GEMM on the die holding it), when the
    # stack places them so (die_local_expert_weights); otherwise interleaved over both memory domains.
    local = die_local_weights and hw.die_local_expert_weights
    weight_factor = hw.hbm_local_bandwidth_factor if local else hw.hbm_interleaved_bandwidth_factor
    hbm_time = sadd(sper(cost.weight_bytes, weight_hbm * weight_factor),
                    sper(other_bytes, hbm * hw.hbm_interleaved_bandwidth_factor))
    memory = sadd(hbm_time, sper(cost.host_bytes, host_rate * hw.host_efficiency))
    if _any(cost.l2_bytes):
        memory = smax(memory, l2_time(kern, hw, ctas, hbm_bytes))
    little = sper(bytes_in_flight(kern, hw, ctas), stream_latency(kern, hw))
    if kern.second_n is not None:   # in a partial wave fewer SMs keep bytes in flight; weights read from the SM's own
        # memory domain come back sooner than interleaved ones, by the weights' bandwidth factor (Rubin's die-local
        # expert weights)
        little = little * sm_share * weight_factor
    extra = smax(sper(hbm_bytes, little) - hbm_time, 0.0) if _nonzero(hbm_bytes) else 0.0
    if kern.second_n is not None:   # MegaMoE's weights stream through its own stages, no faster than they keep bytes in
        # flight: its memory term is that stream, HBM bytes at min(HBM rate, Little's law rate) (docs/deepseek-kernels.md)
        memory, extra = sadd(memory, extra), 0.0

    # NVLink and the scale-out NIC are separate links: their bytes move at the same time (the larger
    # sets the pace); each link's serial per-message latencies add.
    sol_comm = _links(cost.nvlink_bytes / hw.nvlink_bandwidth_bytes_per_s,
                      cost.scale_out_bytes / hw.scale_out_bandwidth_bytes_per_s)
    scale_out = (cost.scale_out_bytes / (hw.scale_out_bandwidth_bytes_per_s * hw.scale_out_efficiency)
                 + cost.scale_out_hops * hw.scale_out_latency_s)
    nvlink = cost.nvlink_bytes / (hw.nvlink_bandwidth_bytes_per_s * hw.nvlink_efficiency)
    if kern.hop_lanes_per_sm is None:   # a collective: its round trips one after another, then its bytes
        nvlink, hops = nvlink, cost.nvlink_hops * hw.nvlink_latency_s
    else:   # items pulled by many lanes at once: the link's rate or the lanes' round trips, whichever is slower
        nvlink, hops = smax(nvlink, serial_hops(kern, hw) * hw.nvlink_latency_s), 0.0
    comm = (
        _links(nvlink, cost.scale_out_bytes / (hw.scale_out_bandwidth_bytes_per_s * hw.scale_out_efficiency))
        + hops
        + cost.cross_tray_hops * hw.cross_tray_latency_s
        + cost.scale_out_hops * hw.scale_out_latency_s
    )

    latency = launch_latency(kern, hw, launch) + (
        cost.collectives * hw.collective_floor_s + cost.steps * hw.step_overhead_s + dp_sync_rounds(cost.dp_sync_ranks, hw) * hw.dp_sync_per_rank_s)

    body = overlap(kern, hw, compute, sadd(memory, extra), comm)
    if launch == "stream":  # the GPU waits for the host where the host issues the kernel slower than it runs
        latency = latency + smax(0.0, host_dispatch(kern, hw) - latency - body)
    return KernelTime(
        compute_s=compute, memory_s=memory, parallelism_s=extra, comm_s=comm, latency_s=latency,
        expected_s=latency + body,
        sol_compute_s=sol_compute if is_numpy(sol_compute) else sol_compute + 0.0, sol_memory_s=sol_memory,
        sol_comm_s=sol_comm,
        sol_s=stimes_max(sol_compute, sol_memory, sol_comm),
        scale_out_s=scale_out,
    )


def epilogue_store(kern: Kernel, hw: Platform):
    """Seconds a GEMM's MMAs wait for its output stores: the share mma_epilogue_exposed of its store_bytes at the HBM
    streaming rate. A kernel with one shared-memory output buffer that waits for each block's TMA store before the
    next block's MMAs (DeepGEMM's SM90 FP8 GEMM) runs its blocks' main loops and stores one after the other; the
    blocks of a wave start together and store together, so their stores share the HBM write rate. The next block's
    loads are issued by the producer warp meanwhile (they stay in the memory term). 0 where the stack's kernels overlap
    the epilogue with the next tile's main loop, or for a kernel that states no store."""
    if kern.out_bytes_per_element is None or kern.family not in ("gemm", "grouped_gemm") \
            or not _nonzero(hw.mma_epilogue_exposed):
        return 0.0
    rate = hw.hbm_bandwidth_bytes_per_s * hw.hbm_stream_efficiency * hw.hbm_interleaved_bandwidth_factor
    return hw.mma_epilogue_exposed * kern.cost.launches * kern.store_bytes / rate   # store_bytes: one launch's


def serial_chain(kern: Kernel, hw: Platform, ctas):
    """Seconds of a kernel whose CTAs each run `serial_steps` main-loop steps one after another (DeepGEMM's SM90 TF32
    pre-norm GEMM: one math warpgroup loads a K block's routes from shared memory, squares them, waits for the last
    block's WGMMAs and issues this block's): the CTAs' waves x steps x hc_prenorm_step_cycles at the SM clock. A floor
    under the kernel's compute: with few CTAs (a decode batch without splits: one CTA over all of K) it sets the time."""
    waves = sceil(ctas / hw.sm_count - 1e-9)
    chain = waves * kern.serial_steps * step_cycles(kern, hw) / hw.sm_clock_hz
    if kern.tail_store_bytes is None:
        return chain
    # the CTAs' last output tiles, stored together and waited for (Kernel.tail_store_bytes), at the HBM write rate
    rate = hw.hbm_bandwidth_bytes_per_s * hw.hbm_stream_efficiency * hw.hbm_interleaved_bandwidth_factor
    return chain + kern.tail_store_bytes / rate


def step_cycles(kern: Kernel, hw: Platform):
    """SM cycles of one step of a kernel's serial chain: the kernel's own (Kernel.step_cycles: FlashMLA's SM90 sparse
    decode, one 64-entry block) or the stack's hc_prenorm_step_cycles (DeepGEMM's SM90 pre-norm GEMM)."""
    return hw.hc_prenorm_step_cycles if kern.step_cycles is None else kern.step_cycles


def sm90_gemm_chain(kern: Kernel, hw: Platform):
    """Seconds of DeepGEMM's SM90 FP8 GEMM as each CTA's chain of K blocks (deep_gemm/include/deep_gemm/impls/
    sm90_fp8_gemm_1d2d.cuh @ 54e22612409371d6364144b69086735beb54e98b, lines 283-348): per K block of 128 values the
    math warpgroup waits for the stage's TMA barrier, issues four WGMMAs, waits for them (warpgroup_wait<0>) and promotes
    their FP32 accumulators with the block's scales on CUDA cores before it issues the next block's WGMMAs. One K block
    takes deepgemm_sm90_kblock_cycles (the barrier, the WGMMAs' issue and latency, the wait, the scale loads: fitted)
    at the SM clock, + its WGMMAs' FLOPs at one SM's FP8 peak + its promotion's FLOPs at one SM's FP32 peak
    (kernels.deepgemm.sm90_fp8_gemm_kblock_flops). The persistent grid of num_sms CTAs hands CTA i the blocks i, i +
    SMs, ... (scheduler/gemm.cuh line 198): a CTA runs ceil(blocks / SMs) blocks of ceil(k / 128) K blocks each, and
    loads each later block's B scales from global memory before its K loop (lines 241-251: one HBM latency a block; the
    first is in the launch's dependent loads). A floor under the kernel's compute: at decode sizes, where each CTA's
    weights would stream faster than its chain consumes them, it sets the time."""
    from rubinperf.kernels.deepgemm import SM90_GEMM_BLOCK_K, sm90_fp8_gemm_blocks, sm90_fp8_gemm_kblock_flops

    sms = hw.sm_count
    block_m, block_n = sm90_fp8_gemm_blocks(kern.rows, kern.n, sms)
    blocks = kern.groups * sceil(kern.rows / block_m) * sceil(kern.n / block_n)
    per_cta = sceil(blocks / sms - 1e-9)
    mma, promotion = sm90_fp8_gemm_kblock_flops(block_m, block_n)
    step = (hw.deepgemm_sm90_kblock_cycles / hw.sm_clock_hz + mma * sms / hw.peak_flops("fp8")
            + promotion * sms / hw.peak_flops("fp32"))
    return per_cta * sceil(kern.k / SM90_GEMM_BLOCK_K) * step + (per_cta - 1) * hw.hbm_latency_s


def tile_overhead(kern: Kernel, hw: Platform):
    """Seconds a causal flash kernel's tiles add beyond their MMAs: each of its CTAs (one per query tile) pays
    attention_tile_overhead_cycles at the SM clock (its query and first key loads, softmax epilogue, output store),
    spread over the SMs: CTAs x cycles / (clock x SMs)."""
    return kern.ctas * hw.attention_tile_overhead_cycles / (hw.sm_clock_hz * hw.sm_count)


def efficiency_field(family: str, peak: str, dequantises_weights: bool = False) -> str:
    """The field of the rate a family's work at `peak` runs at: a grouped (MoE) kernel the stack's grouped rate for its
    MMA peak (GROUPED_PRECISION_EFFICIENCY: `fp8` and `fp8_fp4` grouped_compute_efficiency, `fp4`
    grouped_fp4_compute_efficiency), or grouped_w4a16_compute_efficiency where it dequantises its weights in the main
    loop; a dense GEMM of BF16 or FP4 operands the stack's rate for that precision; other MMAs the GEMM rate. FP32
    operations run on CUDA cores in every family (a tensor-core kernel's epilogue): the vector rate."""
    if peak == "fp32":
        return "vector_compute_efficiency"
    if family == "fused_moe":
        return "megamoe_compute_efficiency"
    if family in GROUPED and dequantises_weights:
        return "grouped_w4a16_compute_efficiency"
    if family in GROUPED and peak in GROUPED_PRECISION_EFFICIENCY:
        return GROUPED_PRECISION_EFFICIENCY[peak]
    if family == "gemm" and peak in MMA_PRECISION_EFFICIENCY:
        return MMA_PRECISION_EFFICIENCY[peak]
    return f"{TENSOR_CORE.get(family, 'vector')}_compute_efficiency"


def l2_time(kern: Kernel, hw: Platform, ctas, hbm_bytes):
    """Seconds the L2 takes to deliver a kernel's loads when its CTAs re-read an operand from L2 (Cost.l2_bytes: the
    indexer's keys, read once per query block): every load (the HBM bytes, once, and the re-reads) passes the L2's
    ports at l2_bytes_per_clock_per_sm per SM that has a CTA, and no slower than the HBM's peak per SM (every HBM byte
    passes the L2: its rate is at least what the HBM feeds it). The kernel's memory term is the larger of this and its
    HBM time."""
    per_sm = smax(hw.l2_bytes_per_clock_per_sm * hw.sm_clock_hz, hw.hbm_bandwidth_bytes_per_s / hw.sm_count)
    rate = per_sm * smin(ctas, hw.sm_count)
    l2 = kern.cost.l2_bytes
    # only where the kernel re-reads (an element of stacked rows, a symbol's value) does the term apply
    return sscale(sper(sadd(hbm_bytes, l2), rate), sstep(l2, (0,), (0.0, 1.0)))   # (an array times the number 1: as it is)


def bytes_in_flight(kern: Kernel, hw: Platform, ctas):
    """HBM bytes the whole GPU keeps in flight. A GEMM's TMA pipeline keeps its stages in flight on
    every SM with a tile (mma_bytes_in_flight_per_sm); ordinary loads are capped per SM
    (stream_bytes_in_flight_per_sm), and a kernel that states its bytes per CTA keeps the lesser of
    its resident CTAs' bytes and that cap on each SM."""
    if kern.is_mma:
        per_sm = hw.mma_bytes_in_flight_per_sm if kern.in_flight_bytes_per_cta is None else kern.in_flight_bytes_per_cta
        if _dense(kern) and hw.dense_gemm_library == "deepgemm-sm100":
            from rubinperf.kernels.deepgemm import sm100_fp8_gemm_pipeline

            stages, stage_bytes = sm100_fp8_gemm_pipeline(int(hw.mma_tile_rows))
            per_sm = stages * stage_bytes
        if _deepgemm_sm90(kern, hw):
            def stages():   # with the chain: the stages its heuristic fits in shared memory
                from rubinperf.kernels.deepgemm import sm90_fp8_gemm_blocks, sm90_fp8_gemm_pipeline

                count, stage_bytes = sm90_fp8_gemm_pipeline(*sm90_fp8_gemm_blocks(kern.rows, kern.n, hw.sm_count),
                                                            kern.k)
                return count * stage_bytes

            per_sm = _fp8_only(kern, _when_set(hw.deepgemm_sm90_kblock_cycles, stages,
                                               hw.deepgemm_sm90_bytes_in_flight_per_sm), per_sm)
        return smin(ctas, hw.sm_count) * per_sm * distinct_share(kern, hw, ctas)
    cap = hw.stream_bytes_in_flight_per_sm
    if kern.in_flight_bytes_per_cta is None:
        return smin(ctas, hw.sm_count) * cap
    if kern.serial_steps is not None and kern.step_cycles is None and _nonzero(hw.hc_prenorm_step_cycles):
        # the pre-norm GEMM on a stack that prices its SM90 main loop: its CTAs keep their TMA stages in flight, one CTA
        # per SM (elsewhere its loads stay capped as ordinary loads: on the Blackwell stacks the stages made their
        # held-out aiconfigurator rows worse, docs/deepseek-kernels.md)
        return smin(ctas, hw.sm_count) * kern.in_flight_bytes_per_cta
    per_cta = smin(kern.in_flight_bytes_per_cta, cap)
    return smin(ctas * per_cta, hw.sm_count * cap)


def distinct_share(kern: Kernel, hw: Platform, ctas):
    """Of the weight bytes a dense GEMM's CTAs keep in flight (mma_bytes_in_flight_per_sm: a CTA's weight stages), the
    share that are distinct HBM lines: 1 / m_tiles for a grid in one wave (decode sizes), whose CTAs of one weight
    column (its M tiles) load the same weight stages, each line from HBM once (the other CTAs hit in L2 or merge into
    the miss in flight), so the weights stream with n_tiles x groups x split-K CTAs' stages in flight, not every CTA's;
    1 for a grid of more CTAs than SMs (its waves need not hold a column's M tiles together), for a kernel that states
    its own bytes in flight, for other families, and on stacks whose dense GEMM library was not read
    (dense_gemm_library "generic": their per-SM bytes in flight are what their own evidence set).

    DeepGEMM's SM100 FP8 GEMM (github.com/deepseek-ai/DeepGEMM @ 54e22612409371d6364144b69086735beb54e98b,
    csrc/jit_kernels/heuristics/sm100.hpp): at decode sizes it runs swap-AB (lines 47-58: block_m tokens, a multiple of
    16, x block_n = 128 weight rows a CTA; at 96 rows the comparator, lines 241-265, picks block_m 16 or 32, one wave,
    2-CTA clusters), each M block of a weight column loading that column's 128 x block_k weight stage through its own
    TMA pipeline (lines 194-195), the cluster multicasting the tokens only (load_block_m = block_m / cluster_n, line
    155); its persistent grid of num_sms CTAs (line 221) leaves the SMs beyond its blocks idle. At 96 rows and
    n = 1280 (wq_a): 60 CTAs, 10 distinct weight columns in flight."""
    if not _dense(kern) or hw.dense_gemm_library != "deepgemm-sm100":
        return 1.0
    tile_rows = hw.mma_tile_rows if kern.tile_rows is None else kern.tile_rows
    m_tiles = sceil(kern.rows / tile_rows)
    if kern.m_tile_multiple is not None:
        m_tiles = sceil(m_tiles / kern.m_tile_multiple) * kern.m_tile_multiple
    return sstep(ctas, (hw.sm_count,), (1.0 / m_tiles, 1.0))


def _deepgemm_sm90(kern: Kernel, hw: Platform) -> bool:
    """A dense GEMM on a stack whose FP8 dense GEMMs are DeepGEMM's SM90 kernel (dense_gemm_library "deepgemm-sm90")."""
    return _dense(kern) and hw.dense_gemm_library == "deepgemm-sm90"


def _when_set(field, on, off):
    """`on()` where a stack field that switches a mechanism on is set (above 0), `off` where it is 0: plain numbers
    choose at once; a symbol (explain's formulas) gives both, in a piecewise on the field."""
    if type(field) in (int, float):
        return on() if field > 0 else off
    return sstep(field, (0,), (off, on()))


def _fp8_only(kern: Kernel, fp8_value, other):
    """`fp8_value` for a GEMM of FP8 operands (its FP8 MMA FLOPs above 0), `other` for the rest (BF16 GEMMs run the
    stack's other library); element by element over stacked kernels."""
    return sstep(kern.cost.fp8_flops, (0,), (other, fp8_value))


def _dense(kern: Kernel) -> bool:
    """A dense GEMM whose tiles the stack's library picks (not a kernel that states its own bytes in flight or its own
    persistent grid, not a fused MoE)."""
    return kern.family == "gemm" and kern.in_flight_bytes_per_cta is None and kern.second_n is None \
        and kern.max_ctas is None


def stream_latency(kern: Kernel, hw: Platform):
    """The latency one load of a kernel's stream waits (Little's law: rate = bytes in flight / this): the HBM latency;
    for MegaMoE the stack's megamoe_stream_latency_s, the latency its stages' TMA loads of FP4 weights (unpacked to
    8 bits in shared memory on SM100) see, fitted to the kernel's measurements (docs/deepseek-kernels.md)."""
    return hw.megamoe_stream_latency_s if kern.family == "fused_moe" else hw.hbm_latency_s


def serial_hops(kern: Kernel, hw: Platform):
    """NVLink round trips one after another: a collective's messages; a kernel whose messages are independent items
    pulled by hop_lanes_per_sm chains on every SM (MegaMoE's dispatch warps), the hops over all those lanes, and never
    fewer than one item's own chain (Kernel.hops_per_item: a lane pulls an item's chunks and loads one after another)
    where there is any."""
    hops = kern.cost.nvlink_hops
    if kern.hop_lanes_per_sm is None:
        return hops
    spread = hops / (kern.hop_lanes_per_sm * hw.sm_count)
    return spread if kern.hops_per_item is None else smax(spread, smin(hops, kern.hops_per_item))


def dp_sync_rounds(ranks, hw: Platform):
    """Message rounds of a DP synchronisation's all-reduce over `ranks` ranks (0: none): one per rank for a
    linear all-reduce (Gloo's, as the October post measured it), ceil(log2 ranks) for recursive doubling."""
    if hw.dp_sync_algorithm == "linear":
        return ranks
    if type(ranks) in (int, float):   # (a layout's ranks: a number)
        return math.ceil(math.log2(ranks)) if ranks > 1 else 0
    import numpy as np

    return np.where(ranks > 1, np.ceil(np.log2(np.maximum(ranks, 1))), 0.0)


@functools.lru_cache(maxsize=64)
@kept(__file__)   # (the same float on every run: kept beside the bytecode, rubinperf/kept.py)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for one rank): the integral of x n phi(x) Phi(x)^(n-1), by the
    trapezoid rule over |x| <= 12 (step 1/200). 0.5642 for 2 (1/sqrt(pi)), 1.7660 for 16, 2.0697 for 32."""
    n = int(n)
    if n <= 1:
        return 0.0
    h, total, p = 1.0 / 200, 0.0, n - 1
    for x, phi, cdf in _normal_nodes():
        total += x * n * phi * cdf ** p
    return total * h


@functools.lru_cache(maxsize=1)
def _normal_nodes() -> tuple:
    """(x, phi(x), Phi(x)) at the nodes of expected_max_normal's trapezoid rule (the same for every n)."""
    h = 1.0 / 200
    out = []
    for j in range(-2400, 2401):
        x = j * h
        out.append((x, math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi), 0.5 * math.erfc(-x / math.sqrt(2))))
    return tuple(out)


def host_path(host_s, host_var_s2, sync_s, ranks, hw: Platform, own_s=None):
    """Seconds from a step's launch to the next step's launch on the host side: the slowest of `ranks` DP ranks'
    scheduler work (mean host_s; across ranks a standard deviation of host_rank_spread x the step's own work own_s
    (default: all of host_s) plus host_var_s2, the variance a caller's work adds (admissions: a Poisson count of
    requests)), then the DP sync every rank waits for:

        host path = host_s + E[max of N standard normals] x sqrt((host_rank_spread x own_s)^2 + var) + sync

    (normal ranks; E[max] = expected_max_normal(N), 0 for one rank)."""
    e = expected_max_normal(ranks)
    if e == 0:
        return sadd(host_s, sync_s)
    own = sscale(host_s if own_s is None else own_s, hw.host_rank_spread)
    sd = sadd(own * own, host_var_s2) ** 0.5
    return sadd(host_s, sscale(sd, e), sync_s)


def exposed_host(gpu_s, path_s, hw: Platform):
    """Host seconds on the step's critical path. Under async scheduling the host prepares step n+1 (its scheduling,
    input preparation and the DP sync) while the GPU runs step n: only what outlasts the GPU step shows,
    max(0, host path - GPU). Without it the GPU waits for all of it: the host path."""
    if hw.async_scheduling:
        return sexcess(path_s, gpu_s)   # max(path - GPU, 0)
    return path_s


def launch_latency(kern: Kernel, hw: Platform, launch: str = "graph"):
    """Fixed time of the kernel's launches: its start, then its fill (prologue and the chain of dependent HBM
    loads) and its drain; plus, for a split-KV decode kernel that splits, the reduction kernel the library enqueues
    after it. How it starts depends on the launch:

    - graph: a kernel boundary of a CUDA graph replay; programmatic dependent launch starts up to pdl_hidden_s of
      the boundary and the prologue under the previous kernel (never the loads of data that kernel writes);
    - eager: a kernel issued from the host behind others (the way do_bench and Nsight time one): the GPU's gap
      between two stream kernels; the host's dispatch runs while the GPU works;
    - stream: as eager, but the host must also issue each call: a kernel takes at least its host dispatch
      (kernel_time: max(host, GPU) per kernel, so a stream of kernels costs the sum of those);
    - cold: a lone launch after a synchronisation: the host's dispatch (and a library call's host set-up), the
      driver and the GPU's wake-up, then the kernel."""
    parts = launch_parts(kern, hw, launch)
    fill = parts["loads"] + parts["prologue"]
    if kern.family == "fused_moe":
        fill = fill + parts["sync"]
    own = kern.cost.launches * (parts["start"] + fill)
    if kern.split_kv_groups is None:
        return own
    return own + kern.cost.launches * parts["reduction"]


def launch_parts(kern: Kernel, hw: Platform, launch: str = "graph") -> dict:
    """The fixed time of ONE launch of the kernel, by part (launch_latency adds them, times the launches):
      start       how it starts (`launch_latency`'s modes; a graph boundary less what PDL hides, which may go below 0
                  where PDL also hides the prologue);
      loads       its chain of dependent HBM loads before the work streams, and the drain of its last stores;
      prologue    a tensor-core kernel's prologue cycles at the SM clock;
      sync        MegaMoE's fixed chain (megamoe_sync_s: at least the steps its code times, the SM offsets'
                  atomics, the source-index writes, the two NVLink barriers, the combine's one-token reduction; fitted
                  above that floor);
      reduction   a split-KV decode kernel's reduction kernel, where it splits (0 otherwise)."""
    if launch not in LAUNCH_MODES:
        raise ValueError(f"launch: expected one of {LAUNCH_MODES}, got {launch!r}")
    prologue = hw.mma_prologue_cycles / hw.sm_clock_hz if kern.family in TENSOR_CORE else 0.0
    if launch == "graph":
        start = hw.kernel_launch_graph_s - smin(hw.pdl_hidden_s, hw.kernel_launch_graph_s + prologue)
    elif launch == "cold":
        start = hw.kernel_launch_cold_s + (hw.tensor_core_dispatch_s if kern.family in TENSOR_CORE else 0.0)
    else:
        start = hw.kernel_launch_stream_s
    reduction = 0.0
    if kern.split_kv_groups is not None:
        # one reduction after each launch, started as a kernel of the same stream or graph: its dependent loads, then
        # the drain of its stores
        boundary = hw.kernel_launch_graph_s - smin(hw.pdl_hidden_s, hw.kernel_launch_graph_s) if launch == "graph" \
            else hw.kernel_launch_stream_s
        loads = REDUCE_DEPENDENT_LOADS if kern.reduce_loads is None else kern.reduce_loads
        reduction = split_kv_reduction(kern, hw) * (boundary + (loads + 1) * hw.hbm_latency_s)
    # MegaMoE's fixed chain of expert counts, grid syncs and NVLink barriers (docs/deepseek-kernels.md)
    sync = hw.megamoe_sync_s if kern.family == "fused_moe" else 0.0
    return {"start": start, "loads": (kern.dependent_loads + kern.drain_loads) * hw.hbm_latency_s,
            "prologue": prologue, "sync": sync, "reduction": reduction}


def host_dispatch(kern: Kernel, hw: Platform):
    """Host seconds to issue the kernel's launches with the GPU busy (the framework's dispatch, the driver, and a
    tensor-core library call's set-up): what a stream of calls from the host pays at least per kernel."""
    return kern.cost.launches * (hw.host_dispatch_s + (hw.tensor_core_dispatch_s if kern.family in TENSOR_CORE else 0.0))


# The reduction after a split-KV decode kernel (FlashAttention's splitkv_combine, cuDNN's lean_reduction, FlashMLA's
# combine): it reads every split's log-sum-exp, then their partial outputs, and writes the result: two rounds of
# dependent HBM loads, enqueued by the library (a kernel boundary in a stream, even when the call was launched alone).
REDUCE_DEPENDENT_LOADS = 2


def split_kv_reduction(kern: Kernel, hw: Platform):
    """1 when a split-KV decode kernel has fewer (sequence, KV head, query tile) groups than SMs, so it splits the
    KV over more CTAs and reduces their partial outputs in a second kernel; 0 when its groups fill the SMs."""
    return smin(1.0, smax(0.0, sceil(hw.sm_count / kern.split_kv_groups) - 1))


def overlap(kern: Kernel, hw: Platform, compute, memory, comm):
    """How the body terms compose: the max in a pipelined kernel. A fused kernel (MegaMoE) runs its GEMMs as one
    pipeline (the TMA stages stream the weights under the MMAs: the max of compute and memory), and its exchange as
    phases before and after them: a share rho = rows / (rows + fused_overlap_rows) of the smaller of the two hides
    under the larger (the dispatch of later experts under the GEMMs of earlier ones), the rest adds."""
    largest = stimes_max(compute, memory, comm)
    if kern.fused_rows is None:
        return largest
    gemm = stimes_max(compute, memory)
    rho = kern.fused_rows / (kern.fused_rows + hw.fused_overlap_rows)
    return largest + (1 - rho) * (gemm + comm - largest)


def two_batch_time(compute_s, exchange_s, layers, hw: Platform):
    """GPU seconds of a step split into two micro-batches whose EP exchanges (dispatch, combine) run while the other
    micro-batch computes (SGLang's two-batch overlap, DeepSeek's prefill, vLLM's dual-batch overlap). compute_s and
    exchange_s: both halves' compute and exchange, each half timed at its own size (the split's cost: two
    half-size GEMMs, attention and launches) and each exchange as it runs alone. Beside the other half's compute an
    exchange takes ep_overlap_exchange_stretch times as long (s: its kernels share the GPU with the compute and wait
    on the slowest rank's arrival), and while it runs its kernels hold ep_exchange_sms of the SMs, the other half
    computing on the rest (free = 1 - ep_exchange_sms / SMs):

        overlapped = exchange x s
        pipeline   = max(overlapped, compute + overlapped x (1 - free))
        ends       = min(compute, exchange) / (2 layers)   (one half's one layer of the side that does not bind:
                                                            the first compute or the last combine, alone)
        step GPU   = pipeline + ends

    never below max(compute, exchange x s), never above compute + exchange x s (with free >= 1 / (2 layers))."""
    free = (hw.sm_count - hw.ep_exchange_sms) / hw.sm_count
    overlapped = exchange_s * hw.ep_overlap_exchange_stretch
    pipeline = smax(overlapped, compute_s + overlapped * (1 - free))
    return pipeline + smin(compute_s, exchange_s) / (2 * layers)


def admission_time(hw: Platform, prompt_tokens):
    """Host time to admit requests into a decode batch: their prompt tokens x the stack's
    admission_cpu_per_prompt_token_s (scheduler work that grows with prompt length)."""
    return prompt_tokens * hw.admission_cpu_per_prompt_token_s

def admission_burst(hw: Platform):
    """Requests one scheduler admits together (admission_burst_requests), no more than the stack's cap on new KV
    loads per step (max_kv_loads_per_step, where set): the variance factor of a rank's admissions per step over a
    Poisson count (a compound Poisson count of bursts of this size: mean rate, variance rate x burst)."""
    cap = hw.max_kv_loads_per_step
    return smin(hw.admission_burst_requests, cap) if cap else hw.admission_burst_requests


def _links(nvlink, scale_out):
    """Transfer time over NVLink and the NIC at once: the larger (a link with no bytes drops out, keeping
    symbolic formulas short)."""
    if not _nonzero(scale_out):
        return nvlink
    if not _nonzero(nvlink):
        return scale_out
    return smax(nvlink, scale_out)


def _any(x) -> bool:
    """A term that is not zero everywhere: a number other than 0, a numpy array with an element other than 0, or a
    symbol."""
    if is_numpy(x):   # (an element other than 0: a nan counts, as nan != 0); the first element tells most often
        return bool(x.flat[0] != 0) if getattr(x, "size", 0) and x.flat[0] != 0 else bool(x.any())
    if type(x) is Outer:   # (a grid block's column times row: zero where its scale and its added part are)
        return x.scale != 0 or not (type(x.add) in (int, float) and x.add == 0) if x.col is not None else _any(x.row)
    return _nonzero(x)


def _nonzero(x) -> bool:
    """Skip terms that are exactly the number 0 (keeps symbolic formulas short)."""
    return not (isinstance(x, (int, float)) and x == 0)
