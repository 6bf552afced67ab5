"""The op graph of one engine step: model x layout x phase -> named ops with per-rank costs.

Each Op is one kernel as the serving engine runs it (names follow the V4.1-Flash stack:
MegaMoE, MegaAttn, Mega-mHC, MegaGate, MQA logits, DeepSelect, ...), with its per-rank
Cost and a repeat count (layers that share a shape are built once).

Shapes come from `architecture` (one place for weight shapes); formulas from `kernels`.
Batch and context may be numpy arrays (sweeps) or sympy symbols (explain): nothing here
branches on them, only on the model's structure and the layout.

Conventions, per rank:
- decode: `batch` requests per rank (DEP) or per instance (TP), each verifying
  1 + draft_tokens tokens per step; `context` tokens already in each request's KV.
- prefill: `batch` sequences per rank sharing `new_tokens` new tokens per rank, each
  with `context` cached tokens before them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from rubinperf import kernels as K
from rubinperf.step.architecture import Weight, attention_weights, draft_layer_weights, embedding_weights, ffn_weights
from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.specs.layout import Layout
from rubinperf.mathops import sadd, sfloor, smin
from rubinperf.specs.precision import ACT_BYTES, PRECISIONS, RESIDUAL_BYTES
from rubinperf.specs.model import Model
from rubinperf.step.point import Point



@dataclass(frozen=True)
class Op:
    name: str                 # what the engine calls it (breakdown row)
    kernels: tuple            # the Kernels it launches, one after another, per rank, one occurrence
    repeat: object = 1        # occurrences per step (layers)
    part: str = "target"      # target | draft (GPU work) | cpu (host work: on the host path, exposed past the GPU step)
    die_local_weights: bool = False
    stretch: object = 1.0     # time multiplier: 1 / balancedness for expert-parallel MoE (the busiest rank sets the pace)
    barrier: bool = False     # host work every rank waits for before the step's GPU work (a synchronising collective)
    exchange: bool = False    # an EP dispatch or combine of its own (not inside a fused MoE kernel): what two micro-batches overlap
    names: object = dataclasses.field(default=None, compare=False)   # over a swept array whose elements name the op
                                                                     # differently (the all-reduce's algorithm): each one's

    def __post_init__(self):
        if isinstance(self.kernels, Kernel):
            object.__setattr__(self, "kernels", (self.kernels,))

    @cached_property
    def kernel_count(self):
        """Kernels the op launches per occurrence, as the graph states them: each kernel's launches, a collective
        kernel's collectives (one NCCL kernel each; a one-shot all-reduce in a GEMM epilogue has none). The split-KV
        reduction a decode attention kernel may add depends on the GPU (roofline.split_kv_reduction)."""
        return sadd(*[k.cost.collectives if k.family == "collective" else k.cost.launches for k in self.kernels]) \
            if self.kernels else 0

    @cached_property
    def cost(self) -> Cost:
        """The op's total work (all its kernels), per rank, one occurrence."""
        return Cost.total(k.cost for k in self.kernels)


_OP_FIELDS = tuple(f.name for f in dataclasses.fields(Op))


def _op_with(o: Op, **changes) -> Op:
    """dataclasses.replace(o, **changes) for changes of an Op's count and names (repeat, name, names: not its kernels,
    which __post_init__ reads), the fields set at once (a step's graph makes thousands)."""
    new = object.__new__(Op)
    fields = {f: o.__dict__[f] for f in _OP_FIELDS}
    fields.update(changes)
    object.__setattr__(new, "__dict__", fields)
    return new


def bpe(dtype: str) -> float:
    return PRECISIONS[dtype].bytes_per_element


# ---------------------------------------------------------------- pieces


def _linear(w: Weight, tokens, layout: Layout, split: str = "n", act: str | None = None) -> Kernel:
    """A dense linear on `tokens` rows; TP splits its output (`n`) or input (`k`) columns, or replicates it."""
    tp = layout.tp if split in ("n", "k") else 1
    n = w.n * w.count // tp if split == "n" else w.n * w.count
    k = w.k // tp if split == "k" else w.k
    return K.gemm(tokens, n, k, weight=w.dtype, act=act or ("fp8" if w.dtype in ("fp8", "fp4") else w.dtype))


def _mhc(m: Model, tokens, layout: Layout | None = None, p: Point | None = None) -> tuple:
    """The kernels of one mHC sublayer boundary (the residual routes are FP32; one route is a plain BF16 residual and
    its add + RMSNorm one kernel on every stack): one Mega-mHC, or SGLang's TileLang set (stack mhc_kernels); on a TP
    path that runs them from the GEMM epilogues with the one-shot all-reduce (tp_mhc_in_epilogue), no kernel."""
    routes, rb = m.hc_routes, (RESIDUAL_BYTES if m.hc_routes > 1 else ACT_BYTES)
    if p is not None and routes > 1 and p.mhc_kernels == "tilelang":
        kernels = K.mhc_split(tokens, routes, m.hidden_size, m.hc_mix_rows, rb, ACT_BYTES)
    else:
        kernels = (K.mhc(tokens, routes, m.hidden_size, m.hc_mix_rows, rb),)
    if p is not None and layout is not None and layout.kind == "tp" and layout.tp > 1 and p.tp_mhc_in_epilogue:
        kernels = tuple(K.in_epilogue(k) for k in kernels)
    return kernels


def deepseek_kernels(m: Model, p: Point | None) -> bool:
    """Whether the step's router, samplers and indexer top-k are DeepSeek's own kernels (MegaGate, DeepSelect), so
    named: a DeepSeek-V4 model (mHC residual routes) on a stack that runs DeepSeek's fused set (moe_kernels megamoe).
    Any other model or stack gets the ops' plain names (router, sampler, indexer top-k)."""
    return m.hc_routes > 1 and (p is None or p.moe_kernels == "megamoe")


def mhc_op(m: Model, tokens, layout: Layout, p: Point, part: str = "target") -> Op:
    """A layer's two mHC sublayer boundaries (before attention, before the FFN), named by how the stack runs them;
    a model without mHC has its residual add + RMSNorm there, named so."""
    one = _mhc(m, tokens, layout, p)
    epilogue = layout.kind == "tp" and layout.tp > 1 and p.tp_mhc_in_epilogue
    if m.hc_routes <= 1:
        name = "norm (in GEMM epilogues)" if epilogue else "norm (residual add + RMSNorm)"
    elif epilogue:
        name = "mHC (in GEMM epilogues)"
    elif len(one) > 1:
        name = "mHC (TileLang: post, pre GEMM, Sinkhorn + collapse, RMSNorm)"
    else:
        name = "Mega-mHC (norm + mixing)"
    return Op(name, one + one, part=part)


def _all_reduce(m: Model, tokens, layout: Layout, hw_tray, p: Point, what: str, part: str) -> Op:
    """The TP all-reduce of a sublayer's output (`what`: attention, FFN, MoE), as the stack's communication library
    runs it for this message size (stack [collective]: one-shot, two-shot, multicast or ring); a one-shot runs from
    the output GEMM's epilogue where the stack fuses it (tp_allreduce_fused). Its name says the algorithm."""
    nbytes = tokens * m.hidden_size * ACT_BYTES
    kernel, algorithm = K.all_reduce_by_size(nbytes, layout.tp, p.allreduce_algorithms, p.allreduce_switch_bytes,
                                             gpus_per_tray=hw_tray, multicast=p.nvlink_multicast,
                                             fused_one_shot=p.tp_allreduce_fused, at=dict(p.symbol_values),
                                             switch_ranks=p.allreduce_switch_ranks)
    names = None
    if "/" in algorithm:   # a swept array of sizes over several algorithms: each element's own name
        switch = K.switch_row(p.allreduce_switch_bytes, p.allreduce_algorithms, layout.tp, p.allreduce_switch_ranks)
        idx = K.all_reduce_algorithm(nbytes, p.allreduce_algorithms, switch, p.nvlink_multicast)
        names = ElementNames([f"all-reduce ({what}, {a})" for a in p.allreduce_algorithms], idx)
    return Op(f"all-reduce ({what}, {algorithm})", kernel, part=part, names=names)


class ElementNames:
    """An op's name element by element over a swept array (the all-reduce's algorithm by message size): the names by
    index and each element's index, a name made at an element when asked (StepResult.at); a grid sweep never reads
    them (an array of names over the grid's batches held 160 bytes an element)."""

    __slots__ = ("labels", "idx")

    def __init__(self, labels, idx):
        self.labels, self.idx = tuple(labels), idx

    def __radd__(self, prefix: str) -> "ElementNames":
        return ElementNames([prefix + x for x in self.labels], self.idx)

    def at(self, shape, index) -> str:
        """The name at `index` of an array of `shape` (the element's index broadcast to it)."""
        import numpy as np

        return self.labels[int(np.broadcast_to(self.idx, shape)[index])]


def attention_ops(m: Model, layer: int, layout: Layout, p: Point, tokens, seqs, q_per_seq, hw_tray,
                  kv_tokens=None, part: str = "target", chunk: bool = False, context_kernel=None) -> list[Op]:
    """Projections, indexer, sparse/dense attention and output projection of one layer.

    `tokens` query tokens on this rank, from `seqs` sequences with `q_per_seq` queries each;
    `kv_tokens` new tokens whose KV this layer writes (defaults to `tokens`). With `chunk` (a decode
    step of an aggregated engine), the point's prefill chunk shares the step: the projections run over
    both sets of rows, the indexer and attention over each set at its own context. The kernels that read
    the context are made by `context_kernel(constructor, *args)` (build_step).
    """
    made = context_kernel or _made
    kv_tokens = tokens if kv_tokens is None else kv_tokens
    if chunk:
        bare = dataclasses.replace(p, chunk_tokens=0)
        # row-wise ops over every row of the step; the per-sequence ops of the decode rows and of the chunk
        rows = attention_ops(m, layer, layout, bare, tokens + p.chunk_tokens, seqs, q_per_seq, hw_tray,
                             kv_tokens=kv_tokens + p.chunk_tokens, part=part, context_kernel=context_kernel)
        mine = {o.name: o for o in attention_ops(m, layer, layout, bare, tokens, seqs, q_per_seq, hw_tray,
                                                 kv_tokens=kv_tokens, part=part, context_kernel=context_kernel)}
        cp = dataclasses.replace(bare, phase="prefill", context=p.chunk_context)
        theirs = {o.name: o for o in attention_ops(m, layer, layout, cp, p.chunk_tokens, p.chunk_seqs,
                                                   p.chunk_tokens / p.chunk_seqs, hw_tray, part=part,
                                                   context_kernel=context_kernel)}
        merged = [dataclasses.replace(o, kernels=mine[o.name].kernels + (theirs[o.name].kernels if o.name in theirs
                                                                         else ()))
                  if o.name in PER_SEQUENCE_OPS else
                  # a chunk run decompressed has no absorb GEMMs: the decode rows' alone
                  mine[o.name] if o.name == "MLA absorb" and o.name not in theirs else o for o in rows]
        # the chunk's own per-sequence ops that the decode rows lack (an MLA chunk's decompressed up-projection and
        # attention): after the rows' ops, in the chunk's order
        names = {o.name for o in rows}
        return merged + [o for o in theirs.values() if o.name in PER_SEQUENCE_OPS and o.name not in names]
    if m.attention_kind == "gqa":
        return gqa_attention_ops(m, layer, layout, p, tokens, seqs, q_per_seq, hw_tray, kv_tokens, part)
    w = {x.name: x for x in attention_weights(m, layer)}
    heads = m.num_heads // layout.tp
    ratio = m.compress_ratio(layer)
    prefill = p.phase == "prefill"
    source = m.is_kv_source(layer) or part == "draft"
    indexed = layer in m.indexer_layers and part == "target"
    ops: list[Op] = []

    ops.append(Op("q projection", (_linear(w["q_down"], tokens, layout, split="none"), _linear(w["q_up"], tokens, layout)),
                  part=part))
    if source:
        kv = [_linear(w["kv_down" if m.attention_kind == "mla" else "kv_proj"], kv_tokens, layout, split="none")]
        if "kv_compress" in w:
            kv.append(_linear(w["kv_compress"], kv_tokens, layout, split="none"))
        keys = m.index_key_bytes if layer in m.indexer_layers else 0
        if p.rope_kv_insert_fused:
            # The last projection's epilogue inserts the compressed entries (and index keys) into the cache.
            kv[-1] = kv[-1].plus(K.kv_insert(kv_tokens, m.cache_entry_bytes, ratio, index_key_bytes=keys))
        ops.append(Op("KV projection + compression", tuple(kv), part=part))
        if not p.rope_kv_insert_fused:
            # Its own kernel: reads the projection's BF16 output (the key's RoPE applied on the way), writes the entries.
            ops.append(Op("KV insert (+ key RoPE)", K.kv_insert_kernel(kv_tokens, m.cache_entry_bytes, ratio, keys,
                                                                       read_bytes_per_token=kv[-1].n * ACT_BYTES),
                          part=part))
    if not p.rope_kv_insert_fused:
        ops.append(Op("query RoPE", K.rope(tokens, heads, m.rope_dim, ACT_BYTES), part=part))
    # Decompressed MLA prefill (the stack's mla_prefill_form): the engine runs the target's prefill attention as MHA
    # over keys and values up-projected from the latent (SGLang's MHA / MHA_CHUNKED_KV forward, vLLM's MLA prefill);
    # a draft extend and every decode run absorbed.
    # (DeepSeek sparse attention, an indexer over MLA, runs in MQA mode: absorbed.)
    decompressed = (m.attention_kind == "mla" and prefill and part == "target" and not indexed
                    and p.mla_prefill_form == "decompressed")
    if m.attention_kind == "mla" and not decompressed:
        # Absorbed MLA: queries move into the latent space, outputs back out (per-head batched GEMMs).
        ops.append(Op("MLA absorb", (
            K.gemm(tokens, m.kv_latent_dim, m.qk_nope_head_dim, weight=m.dense_dtype, act="bf16", groups=heads),
            K.gemm(tokens, m.mla_v_head_dim, m.kv_latent_dim, weight=m.dense_dtype, act="bf16", groups=heads)),
            part=part))

    if indexed:
        iw = {x.name: x for x in attention_weights(m, layer) if x.name.startswith("indexer")}
        proj = (_linear(iw["indexer_q"], tokens, layout), _linear(iw["indexer_k"], kv_tokens, layout, split="none"),
                _linear(iw["indexer_weights"], tokens, layout, split="none"))
        logits = made(K.indexer_logits, tokens, seqs, q_per_seq, p.context, m.indexer_heads // layout.tp,
                      m.indexer_head_dim, ratio, m.index_key_bytes, m.indexer_dtype, prefill,
                      m.indexer_epilogue_flops_per_head)
        ops.append(Op("indexer projections", proj, part=part))
        ops.append(Op("MQA logits (indexer)", logits, part=part))
        ops.append(Op("DeepSelect (indexer top-k)" if deepseek_kernels(m, p) else "indexer top-k", made(K.indexer_select, tokens, q_per_seq, p.context, ratio,
                                                                     m.indexer_topk, prefill), part=part))

    if decompressed:
        ops.append(Op("MLA K/V up-projection (kv_b_proj, new and cached; key assembly)",
                      (made(K.mla_kv_up_projection, seqs, q_per_seq, p.context, heads, m.qk_nope_head_dim,
                            m.mla_v_head_dim, m.kv_latent_dim, m.dense_dtype),
                       made(K.mla_key_assembly, seqs, q_per_seq, p.context, heads, m.qk_nope_head_dim, m.rope_dim)),
                      part=part))
        # MHA: one K/V head per query head, keys of qk_nope + rope, values of v_head_dim, causal over the new
        # positions after the cached ones
        att = made(K.attention, seqs, heads, q_per_seq, p.context + q_per_seq, m.qk_nope_head_dim + m.rope_dim,
                   "bf16", heads, True, m.mla_v_head_dim, None, False, None, p.attention_mma_dtype)
        ops.append(Op("MLA attention (decompressed, MHA)", att, part=part))
    else:
        topk = m.indexer_topk if ratio and layer in m.topk_layers else None
        att = made(K.sparse_attention, tokens, seqs, q_per_seq, p.context, heads, ratio, topk, m.sliding_window_tokens,
                   m.cache_entry_bytes, m.qk_head_dim, m.v_head_dim, prefill, p.attention_mma_dtype,
                   p.sparse_entries_in_flight_per_cta, SPARSE_TOKENS_PER_CTA, p.sparse_dequant_flops_per_value, None,
                   p.sparse_decode_sms, p.sparse_decode_block_cycles or None)
        ops.append(Op("MegaAttn (sparse attention)" if m.attention_kind != "mla" else "MLA attention", att, part=part))

    if m.attention_kind == "mla" or not m.o_groups:
        out = (_linear(w["o_proj"], tokens, layout, split="k"),)
    else:
        groups = w["o_down"]
        # TP splits the groups over ranks; wider than the group count, each rank holds part of one group's heads.
        per_rank = max(1, groups.count // layout.tp)
        k_in = groups.k * min(1.0, groups.count / layout.tp)
        out = (K.gemm(tokens, groups.n, k_in, weight=groups.dtype, act="fp8", groups=per_rank),
               _linear(w["o_up"], tokens, layout, split="k"))
    ops.append(Op("output projection", out, part=part))
    if layout.tp > 1:
        ops.append(_all_reduce(m, tokens, layout, hw_tray, p, "attention", part))
    return ops


def gqa_attention_ops(m: Model, layer: int, layout: Layout, p: Point, tokens, seqs, q_per_seq, hw_tray, kv_tokens,
                      part: str = "target") -> list[Op]:
    """Grouped-query attention of one layer: query, K/V and output projections and flash attention over K/V heads.

    TP splits the query heads and the K/V heads (at least one K/V head per rank: engines replicate a head when TP
    exceeds them). A full-attention layer (compress ratio 1) attends every cached token; a sliding-window layer
    (compress ratio 0) at most `sliding_window_tokens` of them. The attention is the generic kernel with
    `kv_heads` (K/V read once per K/V head, shared by its group of query heads); prefill is causal, and a
    window layer's queries each attend a window, so its prefill runs as the non-causal kernel over that window."""
    w = {x.name: x for x in attention_weights(m, layer)}
    heads = m.num_heads // layout.tp
    kv_heads = max(1, m.num_kv_heads // layout.tp)
    head_bytes = m.cache_entry_bytes / m.num_kv_heads   # one cached token of one K/V head (K and V)
    entry_bytes = head_bytes * kv_heads               # one cached token of the rank's K/V heads
    kvw = w["kv_heads_proj"]
    act = "fp8" if kvw.dtype in ("fp8", "fp4") else kvw.dtype
    ops = [Op("q projection", _linear(w["q_proj"], tokens, layout), part=part)]
    kv = K.gemm(kv_tokens, 2 * m.qk_head_dim * kv_heads, kvw.k, weight=kvw.dtype, act=act)
    if p.rope_kv_insert_fused:
        ops.append(Op("KV projection", kv.plus(K.kv_insert(kv_tokens, entry_bytes)), part=part))
    else:
        ops.append(Op("KV projection", kv, part=part))
        ops.append(Op("KV insert (+ key RoPE)", K.kv_insert_kernel(kv_tokens, entry_bytes,
                                                                   read_bytes_per_token=kv.n * ACT_BYTES), part=part))
        ops.append(Op("query RoPE", K.rope(tokens, heads, m.rope_dim, ACT_BYTES), part=part))
    prefill = p.phase == "prefill"
    window = not m.compress_ratio(layer)
    cached = p.context + q_per_seq
    if window:
        seen = smin(K.visible_positions(p.context, q_per_seq, prefill), m.sliding_window_tokens)
        att = K.attention(seqs, heads, q_per_seq, seen, m.qk_head_dim, kv_heads=kv_heads, v_head_dim=m.v_head_dim,
                          kv_entry_bytes=head_bytes, mma_dtype=p.attention_mma_dtype)
    else:
        att = K.attention(seqs, heads, q_per_seq, cached, m.qk_head_dim, kv_heads=kv_heads, causal=prefill,
                          v_head_dim=m.v_head_dim, kv_entry_bytes=head_bytes, mma_dtype=p.attention_mma_dtype)
    ops.append(Op("attention (GQA" + (", sliding window)" if window else ")"), att, part=part))
    ops.append(Op("output projection", _linear(w["o_proj"], tokens, layout, split="k"), part=part))
    if layout.tp > 1:
        ops.append(_all_reduce(m, tokens, layout, hw_tray, p, "attention", part))
    return ops


# Query tokens one sparse decode CTA holds (MegaAttn: one or two, as the November 2026 Rubin post describes it)
SPARSE_TOKENS_PER_CTA = 2

# Attention ops whose work depends on each sequence's own context (the rest are row-wise GEMMs and collectives).
PER_SEQUENCE_OPS = ("MQA logits (indexer)", "DeepSelect (indexer top-k)", "indexer top-k", "MegaAttn (sparse attention)", "MLA attention",
                    "MLA K/V up-projection (kv_b_proj, new and cached; key assembly)", "MLA attention (decompressed, MHA)",
                    "attention (GQA)", "attention (GQA, sliding window)")


def _ffn(w: Weight, tokens, layout: Layout) -> tuple:
    """A gated MLP stored as one [k, 3 x inter] weight: the gate+up GEMM, then the down GEMM (TP splits inter)."""
    inter = w.n // 3
    act = "fp8" if w.dtype in ("fp8", "fp4") else w.dtype
    return (K.gemm(tokens, 2 * inter * w.count // layout.tp, w.k, weight=w.dtype, act=act),
            K.gemm(tokens, w.k, inter * w.count // layout.tp, weight=w.dtype, act=act))


def _routed_experts(p: Point, tokens, top_k, groups, inter, hidden, weight, act, touched,
                    local: bool = False) -> tuple[str, tuple]:
    """The routed experts' op name and kernels as the stack's moe_kernels runs them (not megamoe): routed-gemms (GEMM1,
    GEMM2, finalize) or cutlass-moe (TensorRT-LLM's CUTLASS fused MoE after its routing top-k: expert maps, expand,
    strides, GEMM1, activation, GEMM2, finalize); `local`: a GPU's own experts (TEP)."""
    where = "local, " if local else ""
    if p.moe_kernels == "cutlass-moe":
        return (f"routed experts ({where}CUTLASS: maps, expand, strides, GEMM1, activation, GEMM2, finalize)",
                K.cutlass_moe(tokens, top_k, groups, inter, hidden, weight=weight, act=act, touched=touched))
    return (f"routed experts ({where}GEMM1, GEMM2, finalize)",
            K.routed_gemms(tokens, top_k, groups, inter, hidden, weight=weight, act=act, touched=touched))


def moe_ops(m: Model, layer: int, layout: Layout, p: Point, tokens, hw_tray, part: str = "target") -> list[Op]:
    """Router, routed experts with EP dispatch/combine (MegaMoE, or dispatch, routed GEMMs and combine as kernels of
    their own when the stack's moe_kernels says routed-gemms or cutlass-moe; the draft's by all-gather +
    reduce-scatter when the stack says so), or, under TP attention, each GPU's local experts (TEP) or every expert's TP slice (TP); shared
    expert; or a dense FFN."""
    draft = part == "draft"
    ws = {x.name: x for x in ffn_weights(m, layer, draft=draft)}
    if "dense_ffn" in ws:
        ops = [Op("dense FFN", _ffn(ws["dense_ffn"], tokens, layout), part=part)]
        if layout.tp > 1:
            ops.append(_all_reduce(m, tokens, layout, hw_tray, p, "FFN", part))
        return ops

    experts = ws["routed_experts"]
    E, k = experts.count, (m.draft_experts_per_token if draft else m.experts_per_token)
    inter3 = experts.n  # gate + up + down columns (3 x intermediate)
    act = m.activation_dtype
    ops = []
    if "router" in ws:
        gate = _linear(ws["router"], tokens, layout, split="none", act="bf16")
        ops.append(Op("MegaGate (router)" if deepseek_kernels(m, p) else "router (GEMM + top-k)",
                      (gate, K.topk_select(tokens, E, k)), part=part))
    bal = p.draft_balancedness if draft else p.balancedness
    if layout.kind == "dep" and draft and p.draft_ep_exchange == "all-gather":
        n = layout.ranks
        gather, scatter = K.ep_all_gather_exchange(tokens, n, m.hidden_size, "bf16", hw_tray, p.nvlink_domain_gpus)
        # every rank's tokens reach every rank; a rank's experts get tokens x top-k rows on average. Between the two
        # collectives the experts are the engine's fused-MoE experts (vLLM's modular kernel: prepare = all-gather,
        # finalize = reduce-scatter), not MegaMoE: routed GEMMs and a finalize, as the TP path's unfused set.
        touched = K.experts_touched_topk(tokens * n, k, E, local_experts=E // n)
        gemms = K.routed_gemms(tokens, k, E // n, inter3 // 3, m.hidden_size, weight=experts.dtype, act=act,
                               touched=touched)
        ops += [Op("MoE all-gather (tokens)", gather, part=part),
                Op("MoE experts (gathered tokens)", gemms, part=part, die_local_weights=True,
                   stretch=1 / bal),
                Op("MoE reduce-scatter (outputs)", scatter, part=part)]
    elif layout.kind == "dep" and p.moe_kernels != "megamoe":
        # The exchange and the experts as separate kernels (SGLang's DeepEP MoE: dispatch, the local experts' GEMMs,
        # combine; under cutlass-moe the CUTLASS runner's kernels between the same two exchanges): every rank's tokens
        # can land on this rank's E / n experts, tokens x top-k rows on average.
        n = layout.ranks
        ex = dict(gpus_per_tray=hw_tray, gpus_per_domain=p.nvlink_domain_gpus, hierarchical=p.ep_hierarchical)
        touched = K.experts_touched_topk(tokens * n, k, E, local_experts=E // n)
        name, gemms = _routed_experts(p, tokens, k, E // n, inter3 // 3, m.hidden_size, experts.dtype, act, touched)
        # The exchanges wait for the busiest rank as the experts do (1 / balancedness): a rank receives (dispatch)
        # and sends back (combine) the rows routed to its experts, and the busiest rank's rows finish last (LMSYS,
        # May 2025, 'Profile Results': with real routing SGLang's DeepEP kernels ran longer and more unevenly than
        # DeepSeek's profile of perfectly balanced routing).
        via = "DeepEP" + (", RDMA" if K.spans_domains(n, p.nvlink_domain_gpus) else "")
        ops += [Op(f"MoE dispatch ({via})", K.ep_exchange(tokens, n, k, m.hidden_size, bpe(act), **ex), part=part,
                   exchange=True, stretch=1 / bal),
                Op(name, gemms, part=part, die_local_weights=True, stretch=1 / bal),
                Op(f"MoE combine ({via})", K.ep_exchange(tokens, n, k, m.hidden_size, ACT_BYTES, **ex), part=part,
                   exchange=True, stretch=1 / bal)]
    elif layout.kind == "dep":
        n = layout.ranks
        moe = K.mega_moe(tokens, n, E // n, E, k, inter3, m.hidden_size, weight=experts.dtype, act=act,
                         gpus_per_tray=hw_tray, gpus_per_domain=p.nvlink_domain_gpus, hierarchical=p.ep_hierarchical,
                         smem_bytes=p.megamoe_smem_bytes, smem_weight_bytes=p.megamoe_smem_weight_bytes_per_value,
                         pull_round_trips=p.megamoe_pull_round_trips)
        # Across NVLink domains the row's name says so: its link term then holds the scale-out NIC's bytes.
        name = ("MegaMoE (dispatch + experts + combine" + (", RDMA" if K.spans_domains(n, p.nvlink_domain_gpus) else "")
                + ")")
        ops.append(Op(name, moe, part=part, die_local_weights=True, stretch=1 / bal))
    elif layout.kind == "tep":
        # TP attention leaves every token on every GPU: no dispatch. A GPU runs its E / n whole experts over the
        # tokens routed to them (tokens x top-k / n rows on average; its experts touched by all the tokens), and
        # the MoE all-reduce below sums the GPUs' partial outputs (the combine). The busiest GPU's experts set the
        # pace (balancedness), as on DEP.
        n = layout.ranks
        touched = K.experts_touched_topk(tokens, k, E, local_experts=E // n)
        if p.moe_kernels != "megamoe":
            name, gemms = _routed_experts(p, tokens, k / n, E // n, inter3 // 3, m.hidden_size, experts.dtype, act,
                                          touched, local=True)
            ops.append(Op(name, gemms, part=part, die_local_weights=True, stretch=1 / bal))
        else:
            gemms = K.grouped_gemm(tokens * k / n, E // n, inter3, m.hidden_size, weight=experts.dtype, act=act,
                                   touched=touched)
            ops.append(Op("MegaMoE (local experts)", gemms, part=part, die_local_weights=True, stretch=1 / bal))
    else:
        touched = K.experts_touched_topk(tokens, k, E)
        if p.moe_kernels != "megamoe":
            name, gemms = _routed_experts(p, tokens, k, E, inter3 // 3 // layout.expert_tp, m.hidden_size,
                                          experts.dtype, act, touched)
            ops.append(Op(name, gemms, part=part, die_local_weights=True))
        else:
            gemms = K.grouped_gemm(tokens * k, E, inter3 // layout.expert_tp, m.hidden_size, weight=experts.dtype,
                                   act=act, touched=touched)
            ops.append(Op("MegaMoE (experts)", gemms, part=part, die_local_weights=True))
    if "shared_expert" in ws:
        shared = _ffn(ws["shared_expert"], tokens, layout)
        below = p.tp_shared_expert_fused_below_rows
        if layout.kind == "tp" and not (isinstance(below, (int, float)) and below == 0):
            # Below `below` rows the routed GEMMs run the shared expert as one more expert (no launches of its own):
            # 0 launches under the threshold, 1 at or above it.
            on = smin(1, sfloor(tokens / below))
            shared = tuple(dataclasses.replace(g, cost=dataclasses.replace(g.cost, launches=g.cost.launches * on))
                           for g in shared)
        ops.append(Op("shared expert", shared, part=part))
    if layout.tp > 1:
        ops.append(_all_reduce(m, tokens, layout, hw_tray, p, "MoE", part))
    return ops


def engram_ops(m: Model, layout: Layout, tokens, placement: str | None = None, gpus_per_domain=None) -> list[Op]:
    """Hashed n-gram look-ups of one Engram layer and their projection into the hidden state."""
    lookups = tokens * m.engram_lookups_per_token
    placement = placement or m.engram_placement
    # In HBM the tables are split over the instance's ranks: 1/n of the rows are local, the rest come over NVLink
    # (from an instance wider than one NVLink domain of d GPUs, (n - d)/n of them over the NIC).
    local = 1 / layout.ranks if placement == "hbm" else 1
    nic = ((layout.ranks - gpus_per_domain) / layout.ranks
           if placement == "hbm" and K.spans_domains(layout.ranks, gpus_per_domain) else 0)
    gather = K.table_lookup(lookups, m.engram_row_bytes, where=placement, local_fraction=local, nic_fraction=nic)
    proj = K.gemm(tokens, m.hidden_size, m.engram_heads * m.engram_head_dim, weight=m.dense_dtype, act="bf16")
    return [Op("Engram look-up", (gather, proj))]


def head_ops(m: Model, layout: Layout, tokens, logits_tokens, part: str = "target", p: Point | None = None) -> list[Op]:
    """Embedding gather, LM head over the vocabulary (split by TP) and the sampler."""
    emb, head = embedding_weights(m)
    vocab = head.n // layout.tp
    ops = [
        Op("embedding", K.elementwise(read_bytes=tokens * m.hidden_size * bpe(emb.dtype),
                                      write_bytes=tokens * m.hidden_size * ACT_BYTES), part=part),
        Op("LM head", K.gemm(logits_tokens, vocab, m.hidden_size, weight=head.dtype, act="bf16", out="fp32"), part=part),
        Op("DeepSelect (sampler)" if deepseek_kernels(m, p) else "sampler (top-k)", K.topk_select(logits_tokens, vocab, 2),
           part=part),
    ]
    if layout.tp > 1:
        ops.append(Op("all-gather (logits)", K.all_gather(logits_tokens * 8 * layout.tp, layout.tp), part=part))
    return ops


# ---------------------------------------------------------------- the step


def _replay(m: Model, layer: int, p: Point) -> str:
    """Bounded replay in prefill: 'start' for the first replayed layer, 'tail' after it, else 'none'."""
    if p.phase != "prefill" or layer < m.replay_start_layer:
        return "none"
    return "start" if layer == m.replay_start_layer else "tail"


def _attention_signature(m: Model, layer: int, p: Point) -> tuple:
    return ("attention", m.compress_ratio(layer), m.is_kv_source(layer), layer in m.indexer_layers,
            layer in m.topk_layers, _replay(m, layer, p))


def _ffn_signature(m: Model, layer: int, p: Point) -> tuple:
    return ("ffn", layer in m.engram_layers, m.is_moe_layer(layer), layer >= m.hash_routed_layers, _replay(m, layer, p))


def _made(constructor, *args):
    return constructor(*args)


def build_step(m: Model, layout: Layout, p: Point, gpus_per_tray=None, context_kernel=None) -> list[Op]:
    """Every op of one step on one rank, with repeat counts. See the module docstring for the point.

    The context enters the step through three kernels alone (the indexer's logits and top-k, the sparse
    attention): each is made as `context_kernel(constructor, *args)`, by default `constructor(*args)` (a grid
    of steps makes them a block of rows at a time: step/grid.py)."""
    decode = p.phase == "decode"
    if decode:
        q_per_seq = 1 + p.k(m)
        seqs = p.batch
    else:
        seqs = p.batch
        q_per_seq = p.new_tokens / p.batch
    tokens = seqs * q_per_seq
    # Aggregated serving: a decode step that also carries a prefill chunk. Its rows join every row-wise op
    # (GEMMs, MoE, mHC, Engram, collectives); attention reads each row's own context (attention_ops); no
    # bounded replay (a decode step has none); the draft builds the chunk's KV with one pass over it.
    chunk = decode and has_chunk(p)
    rows = tokens + p.chunk_tokens if chunk else tokens

    # Group main layers' sublayers by shape so each distinct one is built once (and, in a sweep,
    # evaluated once): attention sublayers by compression, KV source, indexer and replay; FFN
    # sublayers (with their mHC and Engram) by MoE, routing and replay.
    classes: dict[tuple, list[int]] = {}
    for layer in range(m.num_layers):
        classes.setdefault(_attention_signature(m, layer, p), []).append(layer)
        classes.setdefault(_ffn_signature(m, layer, p), []).append(layer)

    ops: list[Op] = []
    for sig, layers in classes.items():
        layer, n_layers = layers[0], len(layers)
        replay = sig[-1]
        if replay == "none":
            t, s, q, kv_t = tokens, seqs, q_per_seq, tokens
            rt = rows
        else:  # bounded replay: only the last `replay_tokens` of each sequence go on
            q = smin(m.replay_tokens, q_per_seq)
            t, s = seqs * q, seqs
            kv_t = tokens if replay == "start" else t
            rt = t
        if sig[0] == "attention":
            # Replayed layers see the earlier new tokens as cached context.
            pp = dataclasses.replace(p, context=p.context + q_per_seq - q) if replay != "none" else p
            layer_ops = attention_ops(m, layer, layout, pp, t, s, q, gpus_per_tray, kv_tokens=kv_t, chunk=chunk,
                                      context_kernel=context_kernel)
        else:
            layer_ops = [mhc_op(m, rt, layout, p)]
            if layer in m.engram_layers:
                layer_ops += engram_ops(m, layout, rt, p.engram_placement, p.nvlink_domain_gpus)
            layer_ops += moe_ops(m, layer, layout, p, rt, gpus_per_tray)
        ops += [_op_with(o, repeat=o.repeat * n_layers) for o in layer_ops]

    logits_tokens = tokens if decode else seqs
    if chunk:   # a chunk's last row samples the sequence's first token
        ops += head_ops(m, layout, rows, logits_tokens + p.chunk_seqs, p=p)
    else:
        ops += head_ops(m, layout, tokens, logits_tokens, p=p)
    ops += draft_ops(m, layout, p, seqs, tokens, gpus_per_tray, context_kernel)
    if chunk and m.draft_layers and p.k(m):
        cp = dataclasses.replace(p, phase="prefill", context=p.chunk_context, chunk_tokens=0)
        ops += _draft_pass(m, layout, cp, p.chunk_seqs, p.chunk_tokens, p.chunk_tokens / p.chunk_seqs, p.chunk_seqs,
                           1, gpus_per_tray, context_kernel, head=False)
    if not p.activation_quant_fused:
        ops = [_with_activation_quant(o) for o in ops]
    ops.append(Op("CPU overhead (scheduler, sampling)", K.host_step(), part="cpu"))
    if layout.dp > 1:
        ops.append(Op("DP sync", K.dp_sync(layout.dp), part="cpu", barrier=True))
    return ops


# The format a dense GEMM's activations are quantised to, by the MMA rate it runs at.
QUANT_FORMATS = {"fp8": "fp8", "fp8_fp4": "fp8", "fp4": "nvfp4"}


def _with_activation_quant(op: Op) -> Op:
    """An op whose dense GEMMs of FP8 or FP4 activations each run after a quantisation kernel of their BF16 input
    (a stack that does not fuse it: activation_quant_fused false)."""
    kernels = []
    for k in op.kernels:
        fmt = next((f for peak, f in QUANT_FORMATS.items() if k.family == "gemm"
                    and not (type(getattr(k.cost, f"{peak}_flops")) in (int, float) and getattr(k.cost, f"{peak}_flops") == 0)),
                   None)
        if fmt is not None:
            kernels.append(K.activation_quant(k.rows * k.groups, k.k, fmt))
        kernels.append(k)
    return dataclasses.replace(op, kernels=tuple(kernels)) if len(kernels) > len(op.kernels) else op


def has_chunk(p: Point) -> bool:
    """Whether a point's step carries a prefill chunk (its chunk_tokens is not the number 0)."""
    c = p.chunk_tokens
    return not (isinstance(c, (int, float)) and c == 0)


def draft_ops(m: Model, layout: Layout, p: Point, seqs, tokens, gpus_per_tray, context_kernel=None) -> list[Op]:
    """The draft model's share of a step.

    Decode: `draft_passes` sequential forwards through the draft layers, each ending in the LM
    head over one row per request. The first reads the target's hidden states of the verify step
    and so runs over `draft_first_pass` rows per request (every verified token, the accepted
    ones, or one); the others over one token per request. Prefill: one pass over the new tokens
    to build the draft's KV.
    """
    if not m.draft_layers:
        return []
    if p.phase != "decode":
        return _draft_pass(m, layout, p, seqs, tokens, tokens / seqs, seqs, 1, gpus_per_tray, context_kernel, head=False)
    if p.draft_forwards == "parallel-block":
        # vLLM's DSpark speculator (vllm/v1/worker/gpu/spec_decode/dspark/speculator.py): one backbone forward over a
        # block of k query rows per request (the anchor and k - 1 noise slots), the LM head over all k, then k
        # sequential Markov-bias samples (the Markov head is not modelled: its rank is not in the model spec).
        k = p.k(m)
        return _draft_pass(m, layout, p, seqs, seqs * k, k, seqs * k, 1, gpus_per_tray, context_kernel)
    # Sequential draft forwards scale with the drafted length k (the spec gives them for its own k).
    passes = m.draft_passes * p.k(m) / m.draft_tokens if m.draft_tokens else m.draft_passes
    if p.draft_first_pass == "one-per-request":
        return _draft_pass(m, layout, p, seqs, seqs, 1, seqs, passes, gpus_per_tray, context_kernel)
    first = smin(passes, 1)
    rows = tokens / seqs if p.draft_first_pass == "verify-tokens" else p.accepted(m)
    return (_draft_pass(m, layout, p, seqs, seqs * rows, rows, seqs, first, gpus_per_tray, context_kernel)
            + _draft_pass(m, layout, p, seqs, seqs, 1, seqs, passes - first, gpus_per_tray, context_kernel))


def _draft_pass(m: Model, layout: Layout, p: Point, seqs, t, q, logits_t, passes, gpus_per_tray, context_kernel=None,
                head: bool = True) -> list[Op]:
    """`passes` draft forwards over `t` rows (`q` per request), the LM head over `logits_t`."""
    # Draft layers of one shape are built once, repeated.
    by_ratio: dict[int, list[int]] = {}
    for i in range(m.draft_layers):
        by_ratio.setdefault(m.compress_ratio(m.num_layers + i), []).append(i)
    ops: list[Op] = []
    for same in by_ratio.values():
        i = same[0]
        layer = m.num_layers + i
        layer_ops = [mhc_op(m, t, layout, p, part="draft")]
        fuse = [w for w in draft_layer_weights(m, i) if w.name == "draft_fuse"][0]
        layer_ops.append(Op("draft input fusion", _linear(fuse, t, layout, split="none"), part="draft"))
        layer_ops += attention_ops(m, layer, layout, p, t, seqs, q, gpus_per_tray, part="draft",
                                   context_kernel=context_kernel)
        layer_ops += moe_ops(m, layer, layout, p, t, gpus_per_tray, part="draft")
        ops += [_op_with(o, repeat=o.repeat * len(same)) for o in layer_ops]
    if head:
        ops += head_ops(m, layout, t, logits_t, part="draft", p=p)
    return [_op_with(o, name="draft: " + o.name, repeat=o.repeat * passes,
                     names=None if o.names is None else "draft: " + o.names) for o in ops]
