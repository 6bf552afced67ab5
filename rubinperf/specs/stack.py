"""Stack spec: the serving software's facts, apart from the silicon it runs on.

A deployment is hardware x model x stack x workload. The stack holds what a kernel library
and a serving engine decide: MMA tiles, split-K, pipeline stages (bytes a GEMM keeps in
flight), prologue and programmatic-dependent-launch overlap, fused-kernel overlap, the
efficiency its tuned kernels reach, collective set-up, CPU step and DP-sync costs, and the
expert balancedness its EPLB reaches. Swapping the stack on one rack changes only these
terms; swapping the rack under one stack changes only the silicon's.

`Platform` is the record the roofline reads: one hardware spec and one stack spec merged
into one flat frozen record (a field comes from exactly one of them; its metadata says
which). `load_platform("gb300-nvl72")` uses the stack the hardware file names
(`default_stack`); `load_platform("gb300-nvl72", "vllm-rubin-nov2026")` asks what GB300
would do with the November software.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rubinperf.errors import SpecError
from rubinperf.specs.hardware import Hardware, load_hardware
from rubinperf.specs.loader import load_spec_file, resolve_path, spec_field_of, spec_fields
from rubinperf.specs.wide import wide

DRAFT_EP_EXCHANGES = ("all-to-all", "all-gather")
DP_SYNC_ALGORITHMS = ("linear", "recursive-doubling")
DRAFT_FIRST_PASSES = ("verify-tokens", "accepted-tokens", "one-per-request")
MHC_KERNELS = ("mega-mhc", "tilelang")
MOE_KERNELS = ("megamoe", "routed-gemms", "cutlass-moe")
MLA_PREFILL_FORMS = ("absorbed", "decompressed")
DRAFT_FORWARDS = ("sequential", "parallel-block")
DENSE_GEMM_LIBRARIES = ("generic", "deepgemm-sm100", "deepgemm-sm90")
ALLREDUCE_ALGORITHMS = ("one-shot", "two-shot", "multicast", "ring")   # rubinperf.kernels.collectives.all_reduce_as


_field = spec_field_of("stack")   # a stack field (marked as the stack's in a Platform)


@wide
@dataclass(frozen=True, kw_only=True, eq=False, repr=False, init=False)
class Stack:
    name: str
    description: str
    # [kernel] the kernel library: tiles, split-K, pipelines, fixed costs
    mma_tile_rows: int = _field("kernel", "rows", doc="activation rows of one MMA tile: rows are padded to a multiple")
    mma_tile_cols: int = _field("kernel", "columns", doc="weight columns (output) of one CTA's tile")
    split_k_max: int = _field("kernel", doc="most K splits a GEMM with too few tiles uses to fill the SMs (1: none)")
    split_k_min_depth: int = _field("kernel", "elements", doc="fewest K elements one split keeps")
    wave_quantization: float = _field("kernel", positive=False, at_most=1.0, doc="share of the last wave's idle SMs a GEMM pays for (1: whole waves; 0: a persistent or stream-K schedule balances them)")
    mma_bytes_in_flight_per_sm: float = _field("kernel", "bytes", typical=(1e3, 1e6), doc="weight bytes one SM of a GEMM keeps in flight (stages x stage bytes); at most twice the SM's shared memory")
    kernel_launch_cold_s: float = _field("kernel", "s", doc="a lone kernel launched after a synchronisation (--launch cold): the framework's dispatch, the driver and the GPU's wake-up, to its first instruction")
    host_dispatch_s: float = _field("kernel", "s", positive=False, doc="host time to issue one kernel call with the GPU busy (the framework's dispatch and cudaLaunchKernel): a stream of calls from the host pays at least this per kernel")
    tensor_core_dispatch_s: float = _field("kernel", "s", positive=False, doc="a tensor-core library call's host work beyond a plain launch (GEMM/attention descriptors, heuristics, workspace), paid where the host issues it; not in a graph")
    mma_prologue_cycles: float = _field("kernel", "cycles", positive=False, doc="SM cycles a tensor-core kernel spends beyond its HBM round trips: barrier and descriptor set-up, pipeline ramp, epilogue (time at the hardware's sm_clock_hz)")
    attention_tile_overhead_cycles: float = _field("kernel", "cycles", positive=False, default=0.0, doc="SM cycles each CTA (query tile) of a causal flash prefill kernel spends beyond its MMAs and that no other tile's work hides: loading its queries and first key block, its softmax epilogue, writing its output (a grid of one CTA per tile; 0: a persistent kernel overlaps one tile's epilogue with the next one's prologue, or not measured)")
    pdl_hidden_s: float = _field("kernel", "s", positive=False, doc="time of each graph kernel's boundary and prologue that programmatic dependent launch starts under the previous kernel (0: no PDL)")
    fused_overlap_rows: float = _field("kernel", "rows", typical=(1, 1e6), doc="rows at which half of a fused kernel's smaller terms hide under the largest")
    preview_software: bool = _field("kernel", positive=False, default=False, doc="true when the stack's figures come from a vendor's preview (software measured only in a preview post, on previewed hardware): every figure it prices rests on them (the report's preview banner)")
    deepgemm_sm90_bytes_in_flight_per_sm: float = _field("kernel", "bytes", positive=False, default=0.0, doc="bytes a CTA of DeepGEMM's SM90 FP8 GEMM keeps in flight (dense_gemm_library deepgemm-sm90: each of its blocks streams its weights at this over the HBM latency, Little's law); unused on other stacks")
    deepgemm_sm90_kblock_cycles: int = _field("kernel", "cycles", positive=False, default=0, doc="SM cycles of one K block (128 values) of DeepGEMM's SM90 FP8 GEMM main loop beyond its WGMMAs' and its promotion's FLOPs at one SM's peaks: the math warpgroup waits for the stage's TMA barrier, issues four WGMMAs, waits for them and promotes the accumulators with the block's scales on CUDA cores before the next K block (deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh lines 283-348 @ 54e2261): each CTA runs its blocks' K blocks as one chain (roofline.sm90_gemm_chain), a floor under the GEMM's compute, and keeps the stages its heuristic fits in shared memory in flight (kernels.deepgemm.sm90_fp8_gemm_pipeline) in place of deepgemm_sm90_bytes_in_flight_per_sm; 0 (every bundled stack): no chain, deepgemm_sm90_bytes_in_flight_per_sm sets the per-CTA stream. Fitted as a candidate on the stack's FP8 GEMM fit rows (167 cycles; scripts/sm90_gemm_chain.py) and not adopted: the held-out rows got worse (docs/deepseek-kernels.md). An integer: explain's formulas keep it a number")
    hc_prenorm_step_cycles: float = _field("kernel", "cycles", positive=False, default=0.0, doc="SM cycles of one K block (64 values) of DeepGEMM's SM90 TF32 pre-norm GEMM main loop, which one math warpgroup runs as a chain (the block's BF16 routes loaded from shared memory and squared, the last block's WGMMAs waited for, this block's issued: deep_gemm/include/deep_gemm/impls/sm90_tf32_hc_prenorm_gemm.cuh lines 166-231 @ 54e2261): a CTA takes its K blocks x this, a wave of CTAs at once (Kernel.serial_steps; roofline.serial_chain); 0: no such chain (the SM100 kernel, other stacks)")
    mma_epilogue_exposed: float = _field("kernel", positive=False, at_most=1.0, default=0.0, doc="share of a GEMM's output store (each block's tile staged in shared memory, written by TMA) that its MMAs wait for: 1 where the kernel has one output buffer and waits for a block's store before the next block's MMAs (DeepGEMM's SM90 FP8 GEMM: tma_store_wait<0> then a named barrier), 0 where the epilogue overlaps the next tile's main loop; the stores of a wave of blocks go out together, at the HBM streaming rate")
    dense_gemm_library: str = _field("kernel", default="generic", doc="the library of the dense GEMMs (projections, shared expert, heads): generic (its CTAs keep mma_bytes_in_flight_per_sm of weights in flight) or deepgemm-sm100 (DeepGEMM's SM100 FP8 GEMM, swap-AB at decode sizes: each CTA keeps its pipeline's stages of 128 weight rows in flight, the stages that fit its shared memory at mma_tile_rows token rows: rubinperf.kernels.deepgemm.sm100_fp8_gemm_pipeline) or deepgemm-sm90 (DeepGEMM's SM90 FP8 GEMM: its blocks as its heuristic picks them, block_m 16 / 32 / 64 / 128 by rows and the narrowest block_n that fills whole waves of the SMs, rubinperf.kernels.deepgemm.sm90_fp8_gemm_blocks; each CTA keeps deepgemm_sm90_bytes_in_flight_per_sm; BF16 GEMMs keep the stack's tile and mma_bytes_in_flight_per_sm)")
    # MegaMoE as DeepGEMM's code runs it (rubinperf/kernels/deepgemm.py, docs/deepseek-kernels.md); defaults: DeepGEMM's
    # SM100 kernel at commit 54e2261 with the code comments' fixed chain and the unloaded HBM latency
    megamoe_sync_s: float = _field("kernel", "s", positive=False, default=19.5e-6, doc="MegaMoE's fixed chain per call, at least the steps its code times (DeepGEMM @ 54e2261, impls/sm100_fp8_fp4_mega_moe.cuh comments; the default): the SM offsets' global atomics (~6.5 us), the source-index writes to remote ranks (~2 us at 512 tokens), the NVLink barrier before the pulls (~4 us), the NVLink barrier before the combine (~4 us) and the combine's one-token reduction (~3 us); the vLLM stacks fit it above that floor (rubinperf.analysis.kernel_evidence.FIT_RANGES)")
    megamoe_stream_latency_s: float = _field("kernel", "s", default=0.5e-6, doc="latency one MegaMoE pipeline stage's weight load waits: with its stages x stage bytes in flight per SM, Little's law sets how fast a few experts' weights stream")
    megamoe_smem_bytes: float = _field("kernel", "bytes", typical=(1.2e5, 1e6), default=232448.0, doc="shared memory MegaMoE's heuristic sizes its pipeline stages to (DeepGEMM SM100ArchSpec::smem_capacity, 227 KB)")
    megamoe_smem_weight_bytes_per_value: float = _field("kernel", typical=(0.25, 2), default=1.0, doc="bytes of one FP4 expert weight in a MegaMoE stage's shared memory: 1 in SM100's unpacked layout, 0.5 packed (the Rubin post's SM107 kernels)")
    megamoe_pull_round_trips: int = _field("kernel", typical=(1, 8), default=2, doc="remote round trips MegaMoE's dispatch pays per pulled token chunk (DeepGEMM: the token's TMA load, then its top-k weight; 1 when every remote load is issued before any local store, the Rubin post's)")
    # [efficiency] how close the library's tuned kernels get to the silicon's peaks
    mma_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate a large GEMM reaches (FP8 operands, and those without a rate of their own below)")
    mma_bf16_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate a large dense GEMM of BF16 operands reaches (its library's kernels for that precision)")
    mma_fp4_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate a large dense GEMM of FP4 operands (W4A4) reaches")
    grouped_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate of a grouped (MoE) GEMM kernel of FP8 operands, or FP8 x FP4 (W4A8)")
    grouped_fp4_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate of a grouped (MoE) GEMM kernel of FP4 x FP4 operands (W4A4: NVFP4 or MXFP4 experts and activations)")
    grouped_w4a16_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate of a grouped (MoE) GEMM kernel that dequantises its weights in the main loop (W4A16: FP4 experts widened to BF16 for a BF16 MMA); BF16 experts run at mma_compute_efficiency")
    megamoe_compute_efficiency: float = _field("efficiency", at_most=1.0, default=0.72, doc="tensor-core rate MegaMoE's expert GEMMs reach at large token counts (its dispatch, SwiGLU epilogue and combine share the SMs)")
    grouped_hbm_efficiency: float = _field("efficiency", at_most=1.0, doc="HBM rate a grouped (MoE) GEMM kernel streams expert weights at")
    attention_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="tensor-core rate of attention and indexer logits")
    collective_floor_s: float = _field("efficiency", "s", doc="fixed cost of one collective (sync, set-up)")
    # [scheduler] the serving engine's host work
    step_overhead_s: float = _field("scheduler", "s", positive=False, doc="CPU/scheduling cost of one engine step")
    dp_sync_per_rank_s: float = _field("scheduler", "s", positive=False, doc="DP synchronisation: one message round of its all-reduce (linear: a round per rank of the DP group; recursive-doubling: ceil(log2 ranks) rounds)")
    dp_sync_algorithm: str = _field("scheduler", doc="the DP synchronisation's all-reduce: linear (rounds grow with the ranks) or recursive-doubling (log2 of them)")
    async_scheduling: bool = _field("scheduler", doc="the engine prepares step n+1 on the host while the GPU runs step n (vLLM --async-scheduling, SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler): the step is max(GPU, the slowest rank's host work + DP sync); false: host work and GPU work add")
    host_rank_spread: float = _field("scheduler", positive=False, at_most=1.0, doc="coefficient of variation of one rank's scheduler work per step across DP ranks (the slowest of N ranks sets the DP barrier: mean + E[max of N standard normals] x sd); admissions add their own Poisson spread")
    # [eplb] expert balancedness (mean rank load / max rank load) the engine's load balancer reaches
    eplb_target_balancedness: float = _field("eplb", at_most=1.0, doc="target model, EPLB on")
    eplb_draft_balancedness: float = _field("eplb", at_most=1.0, doc="draft model, EPLB on")
    no_eplb_target_balancedness: float = _field("eplb", at_most=1.0, doc="target model, EPLB off (--no-eplb)")
    no_eplb_draft_balancedness: float = _field("eplb", at_most=1.0, doc="draft model, EPLB off (--no-eplb)")
    # [interactivity] how per-user decode speed spreads around its mean (rubinperf/serving/interactivity.py)
    acceptance_concentration: float = _field("interactivity", typical=(1, 1e5), doc="nu of the Beta distribution of a request's accepted share of drafted tokens")
    acceptance_concentration_low: float = _field("interactivity", typical=(1, 1e5), doc="the lowest acceptance_concentration its source supports (the widest per-request spread): the range's low end, as data")
    acceptance_concentration_high: float = _field("interactivity", typical=(1, 1e5), doc="the highest acceptance_concentration its source supports: the range's high end, as data")
    step_time_spread: float = _field("interactivity", positive=False, typical=(1e-3, 1), doc="log-standard deviation of a decode step's time around the swept step (batch and context fluctuation)")
    # [fusion] which ops the engine's paths fuse into one kernel
    tp_allreduce_fused: bool = _field("fusion", doc="TP path: all-reduces run one-shot from the preceding GEMM's epilogue (Lamport mailbox, NVLink multicast), with no kernel or collective set-up of their own; false: a collective kernel each")
    mhc_kernels: str = _field("fusion", doc="the kernels of one mHC sublayer boundary (a model of several residual routes): mega-mhc (one kernel: post, pre mixing, Sinkhorn, route collapse and RMSNorm) or tilelang (SGLang's four: post; pre GEMM + sum of squares; split sum, Sinkhorn and route collapse; RMSNorm)")
    tp_mhc_in_epilogue: bool = _field("fusion", doc="TP path: the mHC work runs in the GEMM epilogues with the one-shot all-reduce (no kernel of its own; its bytes stay); needs tp_allreduce_fused")
    moe_kernels: str = _field("fusion", doc="routed experts: megamoe (one grouped kernel; on DEP with the EP dispatch and combine inside it), routed-gemms (gate + up grouped GEMM gathering its rows, down grouped GEMM, finalize: three kernels; on DEP beside a dispatch and a combine kernel of their own, as DeepEP runs them) or cutlass-moe (TensorRT-LLM's CUTLASS fused MoE: expert maps, expand with quantisation, strides set-up, GEMM1, activation, GEMM2, finalize: seven kernels; on DEP as routed-gemms); the router GEMM and its top-k are kernels of their own on all three")
    tp_shared_expert_fused_below_rows: int = _field("fusion", "rows", positive=False, doc="TP path: below this many rows per rank the shared expert runs inside the routed GEMMs (no kernels of its own); 0: never")
    activation_quant_fused: bool = _field("fusion", doc="a dense GEMM's FP8 or FP4 activations are quantised inside another kernel (the GEMM's prologue, the previous kernel's epilogue): no kernel of their own; false: a quantisation kernel before each such GEMM")
    rope_kv_insert_fused: bool = _field("fusion", doc="query RoPE and the KV-cache insert run in the projections' epilogues (no kernels of their own); false: a query RoPE kernel and a KV insert kernel per layer that writes KV")
    # [collective] the TP all-reduce the engine's communication library picks by message size
    allreduce_algorithms: tuple[str, ...] = _field("collective", doc="the all-reduce algorithms a TP all-reduce runs, smallest messages first: one-shot (each rank sums the n-1 others' whole partials, one round; fused into the GEMM epilogue where fusion.tp_allreduce_fused), two-shot (reduce-scatter + all-gather, two rounds), multicast (NVSwitch reduction, NCCL NVLS or symmetric-memory multimem; where the hardware has nvlink_multicast) or ring (NCCL's ring, 2(n-1) rounds)")
    allreduce_switch_bytes: tuple[int, ...] = _field("collective", "bytes", doc="message sizes (bytes, ascending; an equal pair leaves an algorithm out) at which the next algorithm of allreduce_algorithms takes over: one fewer than the algorithms, or one such row per allreduce_switch_ranks entry")
    allreduce_switch_ranks: tuple[int, ...] = _field("collective", "GPUs", default=(), doc="TP sizes (ascending) of the rows of allreduce_switch_bytes: a TP all-reduce over n GPUs uses the row of the first size >= n (past the last, the last); empty: one row for every size")
    # [attention] the decode attention kernels the engine runs
    attention_mma_dtype: str = _field("attention", default="bf16", doc="MMA format of the attention kernels: a quantised KV cache is dequantised to it before the QK and PV products (bf16: FlashMLA's sparse FP8 decode; fp8: an FP8 attention kernel, at the hardware's FP8 rate)")
    sparse_dequant_flops_per_value: float = _field("attention", "FLOP", positive=False, typical=(1, 1e3), default=0.0, doc="CUDA-core work the sparse attention kernel spends dequantising one quantised value of a gathered KV entry to its MMA format, in FP32 FLOP equivalents at the vector rate (a conversion of c per SM per clock costs 2 x 128 / c); done once per query token and entry, shared by the CTAs of its heads (FlashMLA's 'crossover'); 0: the conversion hides under the MMAs")
    sparse_decode_block_cycles: float = _field("attention", "cycles", positive=False, default=0.0, doc="SM cycles one CTA of FlashMLA's SM90 sparse FP8 decode spends on one block of 64 gathered entries for its 64 heads (index load, gather, dequantisation to BF16, the QK and PV WGMMAs and the online softmax; csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh @ 9241ae3), which it runs one after another: with it set, a top-k decode is that kernel's persistent split-KV grid (rubinperf.kernels.attention.flashmla_sm90_schedule) and its busiest CTA's blocks x this set a floor under the time (roofline.serial_chain); 0: MegaAttn's one or two tokens per CTA (other stacks)")
    sparse_entries_in_flight_per_cta: int = _field("attention", "entries", typical=(1, 4096), default=128, doc="top-k KV entries one CTA of the sparse decode kernel has in flight from HBM (its gathered entries per stage x the stages it buffers): with the CTAs, the gather's bytes in flight (Little's law)")
    mla_prefill_form: str = _field("attention", default="absorbed", doc="an MLA model's prefill attention as the engine runs it: absorbed (MQA over the latent: queries and outputs moved through W_UK and W_UV, QK over kv_lora_rank + rope, PV over kv_lora_rank, one latent head) or decompressed (MHA: kv_b_proj up-projects the latent of the new and cached positions into per-head keys and values, QK over qk_nope + rope, PV over v_head_dim); decode runs absorbed either way")
    # [placement] where the engine keeps its weights on a GPU of two memory domains
    die_local_expert_weights: bool = _field("placement", doc="expert weights on the die whose SMs run their GEMMs (read at the local rate); false: interleaved over both domains")
    # [serving] the engine's shapes and the admission of new requests into a decode batch
    decode_layouts: tuple[str, ...] = _field("serving", doc="decode engine shapes the stack runs (dep<N>, tp<N>, tep<N>): the layouts pareto, compare and validate sweep by default")
    admission_cpu_per_prompt_token_s: float = _field("serving", "s", positive=False, doc="host time to admit a request into a decode batch, per token of its prompt (scheduler work that grows with prompt length)")
    max_kv_loads_per_step: int = _field("serving", positive=False, doc="most new requests (KV loads) one scheduler admits per decode step; 0: no cap")
    admission_burst_requests: float = _field("serving", "requests", typical=(1, 1e4), default=1.0, doc="mean requests one scheduler admits together when it admits (the bursts of an uncapped scheduler that lets arrivals gather): a rank's admissions per step are then a compound Poisson count, the same mean and burst x the variance; capped at max_kv_loads_per_step where that is set; 1: requests admitted one by one (a Poisson count)")
    window_kv_whole_sequence: bool = _field("serving", default=False, doc="the KV cache keeps a sliding-window layer's entries for the whole sequence, as a full layer's (a cache manager with one attention window for every layer; the kernel still reads only the window); false: only the window's")
    # [aggregated] one engine that serves prefill and decode together (rubinperf/serving/aggregated.py)
    max_num_batched_tokens: int = _field("aggregated", "tokens", doc="aggregated engine: token budget of one step per scheduler (a DP rank, a TP instance): every running request's decode rows first, then pending prefill up to the budget")
    chunked_prefill: bool = _field("aggregated", doc="aggregated engine: a prompt longer than what the budget leaves is split over steps; false: a prompt is prefilled whole in one step")
    mixed_prefill_decode: bool = _field("aggregated", doc="aggregated engine: a prefill chunk runs in the same forward as the running decode rows; false: prefill runs as a step of its own and the running decodes wait for it")

    # [ep] how the engine's EP exchanges tokens: across NVLink domains (a layout wider than one domain), and the draft's
    ep_prefill_hierarchical: bool = _field("ep", doc="prefill: true = DeepEP normal mode (RDMA once per remote domain, then an NVLink forward); false = low-latency mode (direct RDMA to every destination rank)")
    ep_decode_hierarchical: bool = _field("ep", doc="decode: as ep_prefill_hierarchical")
    prefill_two_batch_overlap: bool = _field("ep", default=False, doc="prefill: the engine splits a step into two micro-batches and runs one's EP dispatch and combine (kernels of their own, not inside a fused MoE kernel) while the other computes (SGLang --enable-two-batch-overlap, vLLM --enable-dbo); false: the exchange runs between the computations")
    two_batch_min_tokens: int = _field("ep", "tokens", positive=False, default=512, doc="prefill: new tokens per rank above which a two-micro-batch engine splits the step (vLLM's dbo_prefill_token_threshold)")
    ep_exchange_sms: int = _field("ep", "SMs", positive=False, default=20, doc="SMs the EP exchange kernels hold while they run (DeepEP's Buffer.num_sms): the other micro-batch's compute runs on the rest")
    ep_overlap_exchange_stretch: float = _field("efficiency", default=1.0, typical=(1.0, 4.0), doc="prefill with two micro-batches: an EP exchange's time while the other micro-batch computes over its time alone (the exchange kernels share the GPU with the compute and wait on the ranks' slowest arrival; LMSYS measured DeepEP's normal kernels slower under two-batch overlap than in their unit test); 1: as alone")
    draft_ep_exchange: str = _field("ep", doc="how the draft model's MoE layers exchange tokens in DEP: all-to-all (dispatch and combine, as the target's MegaMoE) or all-gather (every rank gathers every rank's tokens, runs its experts on them, then a reduce-scatter)")
    # [speculative] how the engine runs the draft model in a decode step
    draft_first_pass: str = _field("speculative", doc="rows per request of the first of a decode step's draft forwards, which reads the target's hidden states: verify-tokens (every token the verify step scored, 1 + k), accepted-tokens (the accepted ones) or one-per-request; the later forwards run one token per request")
    draft_forwards: str = _field("speculative", doc="a decode step's draft forwards: sequential (k forwards, the first over draft_first_pass rows, then one token per request: EAGLE/MTP proposers) or parallel-block (one forward over k query rows per request, its LM head over all k: vLLM's DSpark speculator); parallel-block ignores draft_first_pass")
    sources: dict = dataclasses.field(default_factory=dict, compare=False)
    path: str = dataclasses.field(default="", compare=False)
    # [ranges]: an assumed field's range as data, {field: (low, high)} (rubinperf.specs.loader.check_ranges)
    ranges: dict = dataclasses.field(default_factory=dict, compare=False)

    def validate(self) -> None:
        from rubinperf.specs.layout import parse_layout

        from rubinperf.specs.precision import PRECISIONS

        if self.attention_mma_dtype not in PRECISIONS:
            raise SpecError(f"{self.path}: attention.attention_mma_dtype: expected one of {', '.join(PRECISIONS)}, "
                            f"got {self.attention_mma_dtype!r}")
        if not self.decode_layouts:
            raise SpecError(f"{self.path}: serving.decode_layouts: expected at least one layout (dep<N>, tp<N> or tep<N>)")
        for name in self.decode_layouts:
            try:
                parse_layout(name)
            except SpecError as exc:
                raise SpecError(f"{self.path}: serving.decode_layouts: {exc}") from None
        for key, choices in (("scheduler.dp_sync_algorithm", DP_SYNC_ALGORITHMS),
                             ("ep.draft_ep_exchange", DRAFT_EP_EXCHANGES),
                             ("speculative.draft_first_pass", DRAFT_FIRST_PASSES),
                             ("fusion.mhc_kernels", MHC_KERNELS), ("fusion.moe_kernels", MOE_KERNELS),
                             ("attention.mla_prefill_form", MLA_PREFILL_FORMS),
                             ("speculative.draft_forwards", DRAFT_FORWARDS),
                             ("kernel.dense_gemm_library", DENSE_GEMM_LIBRARIES)):
            value = getattr(self, key.split(".")[1])
            if value not in choices:
                raise SpecError(f"{self.path}: {key}: expected one of {', '.join(choices)}, got {value!r}")
        for name in self.allreduce_algorithms:
            if name not in ALLREDUCE_ALGORITHMS:
                raise SpecError(f"{self.path}: collective.allreduce_algorithms: expected each one of "
                                f"{', '.join(ALLREDUCE_ALGORITHMS)}, got {name!r}")
        if not self.allreduce_algorithms or len(set(self.allreduce_algorithms)) != len(self.allreduce_algorithms):
            raise SpecError(f"{self.path}: collective.allreduce_algorithms: expected at least one algorithm, each once, "
                            f"got {list(self.allreduce_algorithms)!r}")
        switch, ranks, per = self.allreduce_switch_bytes, self.allreduce_switch_ranks, len(self.allreduce_algorithms) - 1
        rows = [switch[i * per:(i + 1) * per] for i in range(max(1, len(ranks)))]
        if len(switch) != per * max(1, len(ranks)) or any(b < a for row in rows for a, b in zip(row, row[1:])):
            raise SpecError(f"{self.path}: collective.allreduce_switch_bytes: expected {per * max(1, len(ranks))} sizes, "
                            f"{per} ascending per row (one fewer than allreduce_algorithms, a row per "
                            f"allreduce_switch_ranks entry), got {list(switch)!r}")
        if any(b <= a for a, b in zip(ranks, ranks[1:])) or any(r < 2 for r in ranks):
            raise SpecError(f"{self.path}: collective.allreduce_switch_ranks: expected ascending TP sizes of 2 or more, "
                            f"got {list(ranks)!r}")
        if self.acceptance_concentration_low > self.acceptance_concentration_high:
            raise SpecError(f"{self.path}: interactivity.acceptance_concentration_low: expected at most "
                            f"acceptance_concentration_high ({self.acceptance_concentration_high:g}), "
                            f"got {self.acceptance_concentration_low:g}")
        if self.tp_mhc_in_epilogue and not self.tp_allreduce_fused:
            raise SpecError(f"{self.path}: fusion.tp_mhc_in_epilogue: expected false when tp_allreduce_fused is false: "
                            "the mHC work rides the epilogue pass of the one-shot all-reduce")
        for on, off in (("eplb_target_balancedness", "no_eplb_target_balancedness"),
                        ("eplb_draft_balancedness", "no_eplb_draft_balancedness")):
            if getattr(self, off) > getattr(self, on):
                raise SpecError(f"{self.path}: eplb.{off}: expected at most {on} ({getattr(self, on):g}): "
                                "a load balancer never makes the busiest rank busier")


def load_stack(name_or_path: str) -> Stack:
    """Load a bundled stack spec by name, or a user's TOML file by path."""
    path = resolve_path(name_or_path, "stack")
    return load_spec_file(Stack, path)


# Fields that parameterise an operating point (Point), the spread of per-user speed around the step
# or the serving engine's admission, not a kernel's time: never sympy symbols (the step does not read them).
POINT_SECTIONS = ("eplb", "interactivity", "serving", "ep", "speculative", "fusion", "aggregated", "collective")
POINT_FIELDS = tuple(f.name for f in spec_fields(Stack) if f.metadata["section"] in POINT_SECTIONS)


@wide
@dataclass(frozen=True, kw_only=True, eq=False, repr=False, init=False)
class Platform(Stack, Hardware):
    """One rack's silicon and the software stack on it, merged: what the roofline, step and serving read.

    Every Hardware field and every Stack field, under its own name (no name is in both; each field's metadata
    says which spec declares it), and the stack's name and file."""

    stack: str
    stack_path: str = dataclasses.field(default="", compare=False)

    def validate(self) -> None:
        """The hardware's and the stack's own checks, and what a stack may not ask of this silicon."""
        self.hardware_spec().validate()
        self.stack_spec().validate()
        if self.kernel_launch_stream_s > self.kernel_launch_cold_s:
            raise SpecError(f"{self.stack_path}: kernel.kernel_launch_cold_s: expected at least {self.name}'s "
                            f"kernel_launch_stream_s ({self.kernel_launch_stream_s:g} s): a kernel launched after a "
                            "synchronisation is never quicker to start than one behind others in a stream")
        limit = 2 * self.shared_memory_per_sm_bytes
        if self.mma_bytes_in_flight_per_sm > limit:
            raise SpecError(f"{self.stack_path}: kernel.mma_bytes_in_flight_per_sm: expected at most twice "
                            f"{self.name}'s shared_memory_per_sm_bytes ({limit:g}): an SM cannot keep more bytes in flight")

    def _part(self, cls, spec: str):
        kw = {f.name: getattr(self, f.name) for f in spec_fields(cls)}
        srcs = {k.split(".", 1)[1]: v for k, v in self.sources.items() if k.startswith(spec + ".")}
        names = {f.name for f in spec_fields(cls)}
        kw["ranges"] = {k: v for k, v in self.ranges.items() if k in names}
        return kw, srcs

    def hardware_spec(self) -> Hardware:
        """The silicon part of this platform, as a Hardware record."""
        kw, srcs = self._part(Hardware, "hardware")
        return Hardware(name=self.name, description=self.description, default_stack=self.default_stack,
                        sources=srcs, path=self.path, **kw)

    def stack_spec(self) -> Stack:
        """The software part of this platform, as a Stack record."""
        kw, srcs = self._part(Stack, "stack")
        return Stack(name=self.stack, description="", sources=srcs, path=self.stack_path, **kw)


def _no_field_in_both() -> None:
    both = {f.name for f in spec_fields(Hardware)} & {f.name for f in spec_fields(Stack)}
    if both:  # pragma: no cover - a programming error in the spec classes
        raise TypeError(f"{', '.join(sorted(both))}: in both the hardware and the stack spec")


_no_field_in_both()


def platform(hw: Hardware, st: Stack) -> Platform:
    """Merge one hardware spec and one stack spec; checked (a stack's pipelines must fit the SM)."""
    kw = {f.name: getattr(hw, f.name) for f in spec_fields(Hardware)}
    kw.update({f.name: getattr(st, f.name) for f in spec_fields(Stack)})
    sources = {f"hardware.{k}": v for k, v in hw.sources.items()}
    sources.update({f"stack.{k}": v for k, v in st.sources.items()})
    rec = Platform(name=hw.name, description=hw.description, default_stack=hw.default_stack, stack=st.name,
                   sources=sources, path=hw.path, stack_path=st.path, ranges={**hw.ranges, **st.ranges}, **kw)
    rec.validate()
    return rec


def load_platform(hardware: str, stack: str | None = None) -> Platform:
    """A rack with a stack: `stack` a bundled name or a path; None takes the hardware's default_stack. The records
    loaded are remembered while their files stay the same (loader.load_spec_file), and so is the Platform made of
    a pair of them (frozen: a validate loads the same rack and stack for point after point)."""
    hw = load_hardware(hardware)
    try:
        st = load_stack(stack or _beside(hw.default_stack, hw.path))
    except SpecError as exc:
        if stack is None:
            raise SpecError(f"{hw.path}: default_stack: {exc}") from None
        raise
    hit = _PLATFORMS.get((id(hw), id(st)))
    if hit is not None and hit[0] is hw and hit[1] is st:
        return hit[2]
    rec = platform(hw, st)
    if len(_PLATFORMS) >= 64:
        _PLATFORMS.pop(next(iter(_PLATFORMS)))
    _PLATFORMS[(id(hw), id(st))] = (hw, st, rec)   # (the records kept beside it: their ids are not reused)
    return rec


_PLATFORMS: dict = {}   # (id(hardware record), id(stack record)) -> (hardware, stack, their Platform)


def _beside(name_or_path: str, hardware_path: str) -> str:
    """Where a hardware file's default_stack is read: a relative path beside the hardware file; a name
    from `<name>.toml` beside the hardware file when there is one (a calibration writes both files into
    one folder), else the bundled stack of that name."""
    from pathlib import Path

    p = Path(name_or_path)
    here = Path(hardware_path).parent
    if p.suffix == ".toml" or "/" in name_or_path:
        return name_or_path if p.is_absolute() else str(here / p)
    if hardware_path and (here / f"{name_or_path}.toml").is_file() and "\0" not in name_or_path:
        return str(here / f"{name_or_path}.toml")
    return name_or_path


def stack_field_names() -> list[str]:
    return [f.name for f in spec_fields(Stack)]
