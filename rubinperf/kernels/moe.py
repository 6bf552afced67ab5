"""Grouped (MoE) GEMM over experts, the expected experts a batch touches, and the fused MegaMoE kernel."""

from __future__ import annotations

import math

from rubinperf.kernels.cost import Cost, Kernel, kept_kernels
from rubinperf.kernels.deepgemm import (MEGAMOE_BLOCK_N, MEGAMOE_DISPATCH_WARPS, MEGAMOE_MMA_ROWS, SM100_SMEM_CAPACITY_BYTES,
                                        megamoe_config)
from rubinperf.kernels.memory import elementwise, empty
from rubinperf.mathops import smax, smin
from rubinperf.specs.precision import PRECISIONS, mma_peak


def experts_touched(rows, groups):
    """Expected distinct groups hit by `rows` independent uniform draws over `groups`: G(1 - (1 - 1/G)^rows).

    Numerically the expression can round just outside its exact range (1 row over 3 groups gives
    0.9999999999999998), so numbers and arrays are clamped to [min(rows, 1), min(G, max(rows, 1))],
    which the exact value always lies in; symbols keep the bare formula.
    """
    touched = groups * (1 - (1 - 1 / groups) ** rows)
    if hasattr(touched, "free_symbols"):
        return touched
    return smin(smax(touched, smin(rows, 1)), groups, smax(rows, 1))


def experts_touched_topk(tokens, top_k, experts, local_experts=None):
    """Expected experts touched among `local_experts` (default: all) when each of `tokens`
    picks `top_k` distinct experts of `experts` uniformly: L(1 - (1 - k/E)^tokens)."""
    local = experts if local_experts is None else local_experts
    return local * (1 - (1 - top_k / experts) ** tokens)


def _grouped_cost(rows, n, k, touched, weight, act, out) -> Cost:
    w, a, o = PRECISIONS[weight], PRECISIONS[act], PRECISIONS[out]
    return Cost.of_flops(mma_peak(act, weight), 2 * rows * n * k,
        weight_bytes=touched * n * k * w.bytes_per_element,
        activation_bytes=rows * k * a.bytes_per_element + rows * n * o.bytes_per_element,
        launches=1,
    )


@kept_kernels
def grouped_gemm(rows, groups, n, k, weight: str = "fp4", act: str | None = None, out: str = "bf16",
                 touched=None) -> Kernel:
    """`rows` = tokens x top-k routed rows spread uniformly over `groups` experts of [k, n] weights.

    Only touched experts' weights are read; `touched` overrides the uniform-routing expectation.
    Each touched expert is one GEMM of rows / touched rows (padded to whole tiles by the roofline).
    """
    act = act or weight
    if touched is None:
        touched = experts_touched(rows, groups)
    return Kernel("grouped_gemm", _grouped_cost(rows, n, k, touched, weight, act, out),
                  groups=touched, rows=rows / touched, n=n, k=k, dequantises_weights=dequantises(weight, act),
                  out_bytes_per_element=PRECISIONS[out].bytes_per_element)


def dequantises(weight: str, act: str) -> bool:
    """True where an MMA of `act` activations widens `weight` values to the activations' format before the MMA
    (W4A16, W8A16): the weights are narrower and the pair has no mixed-operand MMA of its own."""
    return PRECISIONS[weight].bits < PRECISIONS[act].bits and mma_peak(act, weight) == PRECISIONS[act].peak


def routed_gemms(tokens, top_k, groups, inter, hidden, weight: str = "fp4", act: str | None = None,
                 touched=None) -> tuple[Kernel, ...]:
    """The routed experts of one MoE layer as separate kernels, FlashInfer's TRT-LLM MoE runner's set (csrc/
    trtllm_fused_moe_kernel_launcher.cu, flashinfer-ai/flashinfer: routing, PermuteGemm1, Gemm2, finalize; the
    routing kernel is the router's top-k): the gate + up grouped GEMM gathering its rows (`inter` columns each of
    gate and up per expert, the gated activation in its epilogue), the down grouped GEMM, and the finalize that sums
    each token's top-k rows (BF16) back into one. Together the GEMMs read the weights and do the FLOPs of one
    `grouped_gemm` of 3 x inter columns over tokens x top-k rows."""
    rows = tokens * top_k
    if touched is None:
        touched = experts_touched(rows, groups)
    up = grouped_gemm(rows, groups, 2 * inter, hidden, weight=weight, act=act, touched=touched)
    down = grouped_gemm(rows, groups, hidden, inter, weight=weight, act=act, touched=touched)
    return up, down, finalize(tokens, top_k, hidden)


# TensorRT-LLM's CUTLASS fused MoE (CutlassMoeFCRunner, cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu
# in NVIDIA/TensorRT-LLM): fusedBuildExpertMapsSortFirstTokenKernel reads each routed row's int32 expert id and writes
# the two int32 maps permuted_row_to_unpermuted_row and unpermuted_row_to_permuted_row: 12 bytes a routed row.
EXPERT_MAP_BYTES_PER_ROW = 3 * 4


def cutlass_moe(tokens, top_k, groups, inter, hidden, weight: str = "fp4", act: str | None = None, touched=None,
                act_bytes=2) -> tuple[Kernel, ...]:
    """The routed experts of one MoE layer as TensorRT-LLM's CUTLASS fused MoE runs them (CutlassMoeFCRunner,
    cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu), seven kernels after the routing top-k:
      expert maps   fusedBuildExpertMapsSortFirstTokenKernel: EXPERT_MAP_BYTES_PER_ROW per routed row;
      expand        expandInputRowsKernel: each of the tokens x top-k routed rows reads its token's `hidden` BF16
                    values and writes them in GEMM1's activation format (quantising to NVFP4 / MXFP8 in the kernel);
      strides       the TMA set-up kernel (computeTmaWarpSpecializedInputStrides and ...Pointers per expert): each
                    expert's problem shape, strides and pointers, no bytes to speak of (a kernel boundary);
      GEMM1         gate + up grouped GEMM, 2 x `inter` BF16 columns out per routed row (no activation epilogue);
      activation    doActivationKernel: reads those 2 x inter BF16 values, writes `inter` in GEMM2's activation
                    format (NVFP4 / MXFP8 scale factors with them);
      GEMM2         down grouped GEMM, `hidden` BF16 columns out per routed row;
      finalize      finalizeMoeRoutingKernel: each token's top-k rows summed into one (`finalize`).
    The GEMMs read the weights and do the FLOPs of `routed_gemms`' two. ASSUMPTION: the expand quantises the BF16 input
    itself (the runner's need_nvfp4_quant / need_mxfp8_quant path); a caller that quantises before the op instead
    moves that work to a kernel over tokens (not routed) rows."""
    rows = tokens * top_k
    fmt = PRECISIONS[act or weight].bytes_per_element
    maps = Kernel("stream", Cost(activation_bytes=rows * EXPERT_MAP_BYTES_PER_ROW, launches=1))
    expand = elementwise(read_bytes=rows * hidden * act_bytes, write_bytes=rows * hidden * fmt)
    up, down, summed = routed_gemms(tokens, top_k, groups, inter, hidden, weight=weight, act=act, touched=touched)
    activation = elementwise(read_bytes=rows * 2 * inter * act_bytes, write_bytes=rows * inter * fmt)
    return maps, expand, empty(), up, activation, down, summed


def finalize(tokens, top_k, hidden, act_bytes=2) -> Kernel:
    """The MoE finalize: read each token's `top_k` routed BF16 output rows, write their weighted sum."""
    return Kernel("stream", Cost(activation_bytes=tokens * (top_k + 1) * hidden * act_bytes, launches=1))


def spans_domains(ranks, gpus_per_domain) -> bool:
    """True when `ranks` GPUs cannot sit in one NVLink domain of `gpus_per_domain` (None: one domain holds any group)."""
    return gpus_per_domain is not None and _gt(ranks, gpus_per_domain)


def ep_copies(ranks, top_k, gpus_per_domain=None, hierarchical=False) -> dict:
    """Copies of one token a dispatch (or combine) moves, by the link they cross, per token on the sending rank.

    A token's top-k experts spread uniformly over n ranks reach n(1 - (1 - 1/n)^k) distinct ranks; of
    those, a share 1/n is the sender itself, (d - 1)/n the other ranks of its NVLink domain of d GPUs and
    (n - d)/n ranks in other domains (the remote fraction). Delivered copies:
      total    = ranks_hit x (n - 1)/n          (the dispatch total: every copy that leaves the rank)
      direct   = ranks_hit x (d - 1)/n          (over NVLink, sender to destination)
      remote   = ranks_hit x (n - d)/n          (from another domain; direct + remote = total)
    Low-latency (direct) mode: each remote copy crosses the NIC once, nic = remote, and nothing is
    forwarded. Normal (hierarchical) mode, DeepEP's: a token crosses the NIC once per remote domain it
    reaches, to the GPU of the same local index there (domains hit: D(1 - (1 - 1/D)^k) of D = n/d, of
    which (D - 1)/D remote), which forwards it over NVLink to the ranks it is for: nic = domains_hit x
    (D - 1)/D, forward = remote x (d - 1)/d (a copy for the receiving GPU itself is not forwarded).
    NVLink carries direct + forward. Within one domain (n <= d): direct = total, nothing else."""
    ranks_hit = experts_touched(top_k, ranks)
    total = ranks_hit * (ranks - 1) / ranks
    if not spans_domains(ranks, gpus_per_domain):
        return {"total": total, "direct": total, "remote": 0.0, "nic": 0.0, "forward": 0.0}
    d = gpus_per_domain
    direct = ranks_hit * (d - 1) / ranks
    remote = ranks_hit * (ranks - d) / ranks
    if hierarchical:
        domains = ranks / d
        nic = experts_touched(top_k, domains) * (domains - 1) / domains
        forward = remote * (d - 1) / d
    else:
        nic, forward = remote, 0.0
    return {"total": total, "direct": direct, "remote": remote, "nic": nic, "forward": forward}


def ep_dispatch_combine(tokens, ranks, top_k, hidden, dispatch_bytes_per_value, combine_bytes_per_value,
                        gpus_per_tray=None, round_trips=1, gpus_per_domain=None, hierarchical=False) -> Cost:
    """Wide-EP token exchange of one MoE layer: each token goes to the ranks its top-k experts live on.

    Ranks one token reaches: n(1 - (1 - 1/n)^k) (its top-k spread uniformly over n ranks), of
    which (n - 1)/n are remote; each remote copy is sent at dispatch and returned at combine.
    Per-message latency: `round_trips` per phase (1 when all remote loads are issued before any
    local store, as the November 2026 Rubin post's dispatch; 2-3 otherwise), two phases per layer.

    Across NVLink domains (`ranks` above `gpus_per_domain`) the copies split by link as `ep_copies`
    says (direct low-latency RDMA, or DeepEP's hierarchical normal mode). Each phase then waits on
    one RDMA message per round trip, plus, in hierarchical mode, one NVLink message for the forward;
    in direct mode the NVLink and RDMA messages of a phase are in flight together (the RDMA one is
    the longer)."""
    c = ep_copies(ranks, top_k, gpus_per_domain, hierarchical)
    per_copy = tokens * hidden * (dispatch_bytes_per_value + combine_bytes_per_value)
    hops = 2 * round_trips
    if not spans_domains(ranks, gpus_per_domain):
        cross = hops if (gpus_per_tray is not None and _gt(ranks, gpus_per_tray)) else 0
        return Cost(nvlink_bytes=per_copy * c["total"], nvlink_hops=hops, cross_tray_hops=cross, collectives=2)
    return Cost(nvlink_bytes=per_copy * (c["direct"] + c["forward"]), scale_out_bytes=per_copy * c["nic"],
                nvlink_hops=hops if hierarchical else 0, scale_out_hops=hops, collectives=2)


def ep_exchange(tokens, ranks, top_k, hidden, bytes_per_value, gpus_per_tray=None, round_trips=1, gpus_per_domain=None,
                hierarchical=False) -> Kernel:
    """One phase of the EP token exchange (a dispatch of `bytes_per_value` activations, or a combine of the expert
    outputs) as a kernel of its own, as DeepEP's dispatch and combine run beside the expert GEMMs (github.com/
    deepseek-ai/DeepEP: low-latency `low_latency_dispatch` / `low_latency_combine`, one call each per MoE layer): the
    copies and messages of `ep_dispatch_combine` for that phase alone, one collective."""
    c = ep_dispatch_combine(tokens, ranks, top_k, hidden, bytes_per_value, 0, gpus_per_tray, round_trips,
                            gpus_per_domain, hierarchical)
    return Kernel("collective", Cost(nvlink_bytes=c.nvlink_bytes, scale_out_bytes=c.scale_out_bytes,
                                     nvlink_hops=c.nvlink_hops / 2, scale_out_hops=c.scale_out_hops / 2,
                                     cross_tray_hops=c.cross_tray_hops / 2, collectives=1), dependent_loads=0)


@kept_kernels
def mega_moe(tokens, ranks, local_experts, experts, top_k, n, k, weight: str = "fp4", act: str = "fp8",
             out: str = "bf16", gpus_per_tray=None, round_trips=1, gpus_per_domain=None, hierarchical=False,
             smem_bytes=SM100_SMEM_CAPACITY_BYTES, smem_weight_bytes=1.0, pull_round_trips=2) -> Kernel:
    """MegaMoE on one of `ranks` expert-parallel ranks: dispatch, expert GEMMs over the rank's
    `local_experts`, combine, in one kernel. `tokens` per rank, each routed to `top_k` of `experts`;
    `n` = 3 x intermediate (gate, up and down), `k` = hidden.

    As DeepGEMM's SM100 Mega MoE runs (kernels/deepgemm.py, docs/deepseek-kernels.md):
    - experts touched on this rank: local x (1 - (1 - k/E)^(tokens x ranks)) (every rank's tokens can land here);
      their FP4 weights are read once;
    - blocks of the heuristic's block_m token rows x 128 weight rows (the tiles the roofline counts, padding rows to
      block_m), each SM keeping stages x stage bytes in flight (`megamoe_config`: the stages that fit in
      `smem_bytes` with `smem_weight_bytes` per weight value in shared memory);
    - the dispatch pulls every remote token-topk row (FP8 + scales) and the combine writes each back (BF16): both
      over NVLink, one copy per routed row that lands on another rank; each pull pays `pull_round_trips` remote round
      trips per pull chunk, four dispatch warps per SM pulling at once (Kernel.hop_lanes_per_sm);
    - its fixed chain (expert counts, grid syncs, two NVLink barriers, the combine's first load) is the stack's
      megamoe_sync_s (roofline.launch_latency).
    Across NVLink domains the exchange uses the NIC as `ep_dispatch_combine` says (DeepEP's modes), with its
    collectives; within one domain the pulls above."""
    touched = busiest_rank_experts(tokens * ranks, top_k, experts, local_experts, ranks)
    rows = tokens * top_k
    a, o = PRECISIONS[act].bytes_per_element, PRECISIONS[out].bytes_per_element
    cfg = megamoe_config(tokens, ranks, experts, top_k, k, smem_bytes=smem_bytes, smem_weight_bytes=smem_weight_bytes,
                         weight_bytes=PRECISIONS[weight].bits / 8, act_bytes=1)
    if spans_domains(ranks, gpus_per_domain):
        comm = ep_dispatch_combine(tokens, ranks, top_k, k, a, o, gpus_per_tray, round_trips, gpus_per_domain,
                                   hierarchical)
        lanes = None
    else:
        remote = rows * (ranks - 1) / ranks   # routed rows that live on another rank: pulled, then written back
        cross = 2 * round_trips if (gpus_per_tray is not None and _gt(ranks, gpus_per_tray)) else 0
        comm = Cost(nvlink_bytes=remote * k * (a + o), nvlink_hops=remote * cfg.pulls_per_token * pull_round_trips,
                    cross_tray_hops=cross)
        lanes = MEGAMOE_DISPATCH_WARPS
    inter = n / 3
    return Kernel("fused_moe", _grouped_cost(rows, n, k, touched, weight, act, out) + comm,
                  groups=touched, rows=rows / touched, n=2 * inter, k=k, second_n=k, second_k=inter, fused_rows=rows,
                  tile_rows=cfg.block_m, tile_cols=MEGAMOE_BLOCK_N, pad_rows=MEGAMOE_MMA_ROWS,
                  in_flight_bytes_per_cta=cfg.in_flight_bytes, hop_lanes_per_sm=lanes,
                  hops_per_item=None if lanes is None else cfg.pulls_per_token * pull_round_trips)


def busiest_rank_experts(tokens, top_k, experts, local_experts, ranks):
    """Experts touched on the busiest of `ranks` ranks when `tokens` (all ranks') each pick `top_k` of `experts`
    uniformly, `local_experts` per rank: a fused EP kernel waits at its NVLink barrier for the last rank, so the rank
    with the most experts to stream sets the time. Each local expert is touched with q = 1 - (1 - k/E)^tokens
    (`experts_touched_topk`); the count on one rank has mean L q and variance L q (1 - q) (experts taken as
    independent); the busiest of n ranks lies z_n standard deviations above the mean, z_n the expected largest of n
    standard normals (Blom's approximation: the normal quantile at (n - 0.375) / (n + 0.25); 1.43 for 8 ranks), and
    at most L. With every expert touched (decode at a few hundred tokens per rank) it is L on every rank."""
    mean = experts_touched_topk(tokens, top_k, experts, local_experts=local_experts)
    q = mean / local_experts
    spread = _largest_normal(ranks) * (local_experts * q * (1 - q)) ** 0.5
    return smin(mean + spread, local_experts)


def _largest_normal(n) -> float:
    """Expected largest of n standard normal draws (Blom): 0 for one. The normal quantile by bisection on math.erf
    (the statistics module costs the CLI's start-up more than this)."""
    if not n > 1:
        return 0.0
    p = (n - 0.375) / (n + 0.25)
    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p else (lo, mid)
    return (lo + hi) / 2


def _gt(a, b) -> bool:
    try:
        return bool(a > b)
    except TypeError:  # symbolic rank count: assume it stays in one tray
        return False
