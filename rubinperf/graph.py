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

from rubinperf import kernels as K
from rubinperf.architecture import Weight, attention_weights, draft_layer_weights, embedding_weights, ffn_weights
from rubinperf.cost import Cost
from rubinperf.layout import Layout
from rubinperf.mathops import smin
from rubinperf.precision import PRECISIONS
from rubinperf.specs.model import Model

RESIDUAL_BYTES = 4  # the mHC residual routes are FP32
ACT_BYTES = 2       # BF16 activations between kernels


@dataclass(frozen=True)
class Point:
    """One operating point of one engine."""

    phase: str                    # "decode" or "prefill"
    batch: object = 1             # requests (decode) or sequences (prefill) per rank
    context: object = 131072      # tokens already cached per request
    new_tokens: object = 32768    # prefill: new tokens per rank
    draft_tokens: object = None   # decode: k drafted tokens verified per step (None: the model's)
    acceptance: object = None     # decode: mean tokens emitted per verify step (None: the model's)
    engram_placement: str | None = None   # hbm | host | peer-hbm (None: the model's)
    balancedness: object = 0.94   # MoE: mean rank load / max rank load (target model)
    draft_balancedness: object = 0.89

    def k(self, m: Model):
        return m.draft_tokens if self.draft_tokens is None else self.draft_tokens

    def accepted(self, m: Model):
        return m.mean_accepted_tokens if self.acceptance is None else self.acceptance


@dataclass(frozen=True)
class Op:
    name: str                 # what the engine calls it (breakdown row)
    cost: Cost                # per rank, one occurrence
    repeat: object = 1        # occurrences per step (layers)
    part: str = "target"      # target | draft (GPU work) | cpu (host work, overlapped with the GPU)
    die_local_weights: bool = False
    stretch: object = 1.0     # time multiplier: 1 / balancedness for expert-parallel MoE (the busiest rank sets the pace)


def bpe(dtype: str) -> float:
    return PRECISIONS[dtype].bytes_per_element


# ---------------------------------------------------------------- pieces


def _linear(w: Weight, tokens, layout: Layout, split: str = "n", act: str | None = None) -> Cost:
    """A dense linear on `tokens` rows; TP splits its output (`n`) or input (`k`) columns, or replicates it."""
    tp = layout.tp if split in ("n", "k") else 1
    n = w.n * w.count // tp if split == "n" else w.n * w.count
    k = w.k // tp if split == "k" else w.k
    return K.gemm(tokens, n, k, weight=w.dtype, act=act or ("fp8" if w.dtype in ("fp8", "fp4") else w.dtype))


def _mhc(m: Model, tokens) -> Cost:
    """Mega-mHC for one sublayer: read and write every residual route, mix, RMSNorm."""
    per_token = m.hc_routes * m.hidden_size * (RESIDUAL_BYTES if m.hc_routes > 1 else ACT_BYTES)
    mix = m.hc_mix_rows * m.hc_routes * m.hidden_size
    return K.elementwise(read_bytes=tokens * per_token, write_bytes=tokens * per_token,
                         flops=2 * tokens * mix + 4 * tokens * m.hidden_size, weight_bytes=mix * 4)


def _all_reduce(m: Model, tokens, layout: Layout, hw_tray) -> Cost:
    return K.all_reduce(tokens * m.hidden_size * ACT_BYTES, layout.tp, gpus_per_tray=hw_tray)


def attention_ops(m: Model, layer: int, layout: Layout, p: Point, tokens, seqs, q_per_seq, hw_tray,
                  kv_tokens=None, part: str = "target") -> list[Op]:
    """Projections, indexer, sparse/dense attention and output projection of one layer.

    `tokens` query tokens on this rank, from `seqs` sequences with `q_per_seq` queries each;
    `kv_tokens` new tokens whose KV this layer writes (defaults to `tokens`).
    """
    kv_tokens = tokens if kv_tokens is None else kv_tokens
    w = {x.name: x for x in attention_weights(m, layer)}
    heads = m.num_heads // layout.tp
    ratio = m.compress_ratio(layer)
    prefill = p.phase == "prefill"
    source = m.is_kv_source(layer) or part == "draft"
    ops: list[Op] = []

    q_cost = _linear(w["q_down"], tokens, layout, split="none") + _linear(w["q_up"], tokens, layout)
    ops.append(Op("q projection", q_cost, part=part))
    if source:
        kv = _linear(w["kv_down" if m.attention_kind == "mla" else "kv_proj"], kv_tokens, layout, split="none")
        if "kv_compress" in w:
            kv = kv + _linear(w["kv_compress"], kv_tokens, layout, split="none")
        entry_writes = kv_tokens * (m.kv_entry_bytes + m.index_key_bytes * (layer in m.indexer_layers)) / (ratio or 1)
        ops.append(Op("KV projection + compression", kv + Cost(kv_bytes=entry_writes), part=part))
    if m.attention_kind == "mla":
        # Absorbed MLA: queries move into the latent space, outputs back out (per-head batched GEMMs).
        absorb = K.gemm(tokens * heads, m.kv_latent_dim, m.qk_nope_head_dim, weight=m.dense_dtype, act="bf16") + K.gemm(
            tokens * heads, m.mla_v_head_dim, m.kv_latent_dim, weight=m.dense_dtype, act="bf16", launches=0)
        ops.append(Op("MLA absorb", absorb, part=part))

    # Mean KV positions one query sees: cached context plus, in prefill, the causal half of the new ones.
    seen = p.context + ((q_per_seq + 1) / 2 if prefill else q_per_seq)
    window = smin(m.sliding_window_tokens, seen) if m.sliding_window_tokens else 0
    entries = seen / ratio if ratio else 0  # compressed entries visible to one query

    if layer in m.indexer_layers and part == "target":
        iw = {x.name: x for x in attention_weights(m, layer) if x.name.startswith("indexer")}
        iheads = m.indexer_heads // layout.tp
        proj = _linear(iw["indexer_q"], tokens, layout) + _linear(iw["indexer_k"], kv_tokens, layout, split="none") + \
            _linear(iw["indexer_weights"], tokens, layout, split="none")
        keys_per_seq = (p.context + q_per_seq) / ratio
        logits = Cost.of_flops(PRECISIONS[m.indexer_dtype].peak, 2 * tokens * iheads * m.indexer_head_dim * entries) + Cost(
            kv_bytes=seqs * keys_per_seq * m.index_key_bytes,
            activation_bytes=tokens * entries * 4, launches=1)
        ops.append(Op("indexer projections", proj, part=part))
        ops.append(Op("MQA logits (indexer)", logits, part=part))
        ops.append(Op("DeepSelect (indexer top-k)", K.elementwise(read_bytes=tokens * entries * 4,
                                                                  write_bytes=tokens * m.indexer_topk * 4), part=part))

    if ratio and layer in m.topk_layers:
        selected = smin(m.indexer_topk, entries)
        # Each query gathers its own selection; a request's window is read once for all its queries.
        kv_read = tokens * selected * m.kv_entry_bytes + seqs * window * m.kv_entry_bytes
        if prefill:
            kv_read = smin(kv_read, seqs * (p.context + q_per_seq) * m.kv_entry_bytes * (1 / ratio + 1))
    else:
        selected = entries
        kv_read = seqs * (entries + window) * m.kv_entry_bytes
    attended = selected + window
    att = Cost.of_flops("bf16", 2 * tokens * heads * attended * (m.qk_head_dim + m.v_head_dim)) + Cost(
        kv_bytes=kv_read, activation_bytes=tokens * heads * (m.qk_head_dim + m.v_head_dim) * ACT_BYTES, launches=1)
    ops.append(Op("MegaAttn (sparse attention)" if m.attention_kind != "mla" else "MLA attention", att, part=part))

    if m.attention_kind == "mla":
        out = _linear(w["o_proj"], tokens, layout, split="k")
    elif m.o_groups:
        groups = w["o_down"]
        out = K.gemm(tokens, groups.n * groups.count // layout.tp, groups.k, weight=groups.dtype, act="fp8") + \
            _linear(w["o_up"], tokens, layout, split="k")
    else:
        out = _linear(w["o_proj"], tokens, layout, split="k")
    ops.append(Op("output projection", out, part=part))
    if layout.tp > 1:
        ops.append(Op("all-reduce (attention)", _all_reduce(m, tokens, layout, hw_tray), part=part))
    return ops


def moe_ops(m: Model, layer: int, layout: Layout, p: Point, tokens, hw_tray, part: str = "target") -> list[Op]:
    """Router, routed experts with EP dispatch/combine (MegaMoE), shared expert; or a dense FFN."""
    draft = part == "draft"
    ws = {x.name: x for x in ffn_weights(m, layer, draft=draft)}
    if "dense_ffn" in ws:
        w = ws["dense_ffn"]
        ops = [Op("dense FFN", _linear(w, tokens, layout), part=part)]
        if layout.tp > 1:
            ops.append(Op("all-reduce (FFN)", _all_reduce(m, tokens, layout, hw_tray), part=part))
        return ops

    experts = ws["routed_experts"]
    E, k = experts.count, (m.draft_experts_per_token if draft else m.experts_per_token)
    inter3 = experts.n  # gate + up + down columns (3 x intermediate)
    act = m.activation_dtype
    ops = []
    if "router" in ws:
        ops.append(Op("MegaGate (router)", _linear(ws["router"], tokens, layout, split="none", act="bf16")
                      + K.elementwise(read_bytes=tokens * E * 4, write_bytes=tokens * k * 8), part=part))
    bal = p.draft_balancedness if draft else p.balancedness
    if layout.kind == "dep":
        n = layout.ranks
        local = E // n
        touched = K.experts_touched_topk(tokens * n, k, E, local_experts=local)
        gemms = K.grouped_gemm(tokens * k, local, inter3, m.hidden_size, weight=experts.dtype, act=act,
                               touched=touched, launches=0)
        ranks_hit = K.experts_touched(k, n)  # distinct ranks one token's top-k lands on
        remote = ranks_hit * (n - 1) / n
        dispatch = tokens * remote * m.hidden_size * bpe(act)
        combine = tokens * remote * m.hidden_size * ACT_BYTES
        comm = Cost(nvlink_bytes=dispatch + combine, nvlink_hops=2,
                    cross_tray_hops=2 if n > (hw_tray or n) else 0, collectives=2)
        ops.append(Op("MegaMoE (dispatch + experts + combine)", gemms + comm + Cost(launches=1), part=part,
                      die_local_weights=True, stretch=1 / bal))
    else:
        touched = K.experts_touched_topk(tokens, k, E)
        gemms = K.grouped_gemm(tokens * k, E, inter3 // layout.tp, m.hidden_size, weight=experts.dtype, act=act,
                               touched=touched, launches=1)
        ops.append(Op("MegaMoE (experts)", gemms, part=part, die_local_weights=True))
    if "shared_expert" in ws:
        ops.append(Op("shared expert", _linear(ws["shared_expert"], tokens, layout), part=part))
    if layout.tp > 1:
        ops.append(Op("all-reduce (MoE)", _all_reduce(m, tokens, layout, hw_tray), part=part))
    return ops


def engram_ops(m: Model, layout: Layout, tokens, placement: str | None = None) -> list[Op]:
    """Hashed n-gram look-ups of one Engram layer and their projection into the hidden state."""
    lookups = tokens * m.engram_lookups_per_token
    placement = placement or m.engram_placement
    if placement == "hbm":
        # Tables split over the instance's ranks: 1/n of the rows are local, the rest come over NVLink.
        n = layout.ranks
        cost = K.table_lookup(lookups / n, m.engram_row_bytes) + K.table_lookup(
            lookups * (n - 1) / n, m.engram_row_bytes, where="peer-hbm", launches=0)
    else:
        cost = K.table_lookup(lookups, m.engram_row_bytes, where=placement)
    proj = K.gemm(tokens, m.hidden_size, m.engram_heads * m.engram_head_dim, weight=m.dense_dtype, act="bf16")
    return [Op("Engram look-up", cost + proj)]


def head_ops(m: Model, layout: Layout, tokens, logits_tokens, part: str = "target") -> list[Op]:
    """Embedding gather, LM head over the vocabulary (split by TP) and the sampler."""
    emb, head = embedding_weights(m)
    vocab = head.n // layout.tp
    ops = [
        Op("embedding", K.elementwise(read_bytes=tokens * m.hidden_size * bpe(emb.dtype),
                                      write_bytes=tokens * m.hidden_size * ACT_BYTES), part=part),
        Op("LM head", K.gemm(logits_tokens, vocab, m.hidden_size, weight=head.dtype, act="bf16", out="fp32"), part=part),
        Op("DeepSelect (sampler)", K.elementwise(read_bytes=logits_tokens * vocab * 4, write_bytes=logits_tokens * 8),
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


def build_step(m: Model, layout: Layout, p: Point, gpus_per_tray=None) -> list[Op]:
    """Every op of one step on one rank, with repeat counts. See the module docstring for the point."""
    decode = p.phase == "decode"
    if decode:
        q_per_seq = 1 + p.k(m)
        seqs = p.batch
    else:
        seqs = p.batch
        q_per_seq = p.new_tokens / p.batch
    tokens = seqs * q_per_seq

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
        else:  # bounded replay: only the last `replay_tokens` of each sequence go on
            q = smin(m.replay_tokens, q_per_seq)
            t, s = seqs * q, seqs
            kv_t = tokens if replay == "start" else t
        if sig[0] == "attention":
            # Replayed layers see the earlier new tokens as cached context.
            pp = dataclasses.replace(p, context=p.context + q_per_seq - q) if replay != "none" else p
            layer_ops = attention_ops(m, layer, layout, pp, t, s, q, gpus_per_tray, kv_tokens=kv_t)
        else:
            layer_ops = [Op("Mega-mHC (norm + mixing)", _mhc(m, t) * 2)]
            if layer in m.engram_layers:
                layer_ops += engram_ops(m, layout, t, p.engram_placement)
            layer_ops += moe_ops(m, layer, layout, p, t, gpus_per_tray)
        ops += [dataclasses.replace(o, repeat=o.repeat * n_layers) for o in layer_ops]

    logits_tokens = tokens if decode else seqs
    ops += head_ops(m, layout, tokens, logits_tokens)
    ops += draft_ops(m, layout, p, seqs, tokens, gpus_per_tray)
    ops.append(Op("CPU overhead + DP sync", Cost(steps=1, dp_sync_ranks=layout.dp if layout.dp > 1 else 0), part="cpu"))
    return ops


def draft_ops(m: Model, layout: Layout, p: Point, seqs, tokens, gpus_per_tray) -> list[Op]:
    """The draft model's share of a step.

    Decode: `draft_passes` sequential forwards of one token per request through the draft
    layers, each ending in the LM head. Prefill: one pass over the new tokens to build the
    draft's KV.
    """
    if not m.draft_layers:
        return []
    decode = p.phase == "decode"
    if decode:
        # Sequential draft forwards scale with the drafted length k (the spec gives them for its own k).
        passes = m.draft_passes * p.k(m) / m.draft_tokens if m.draft_tokens else m.draft_passes
        t, q = seqs, 1
    else:
        passes, t, q = 1, tokens, tokens / seqs
    # Draft layers of one shape are built once, repeated.
    by_ratio: dict[int, list[int]] = {}
    for i in range(m.draft_layers):
        by_ratio.setdefault(m.compress_ratio(m.num_layers + i), []).append(i)
    ops: list[Op] = []
    for same in by_ratio.values():
        i = same[0]
        layer = m.num_layers + i
        layer_ops = [Op("Mega-mHC (norm + mixing)", _mhc(m, t) * 2, part="draft")]
        fuse = [w for w in draft_layer_weights(m, i) if w.name == "draft_fuse"][0]
        layer_ops.append(Op("draft input fusion", _linear(fuse, t, layout, split="none"), part="draft"))
        layer_ops += attention_ops(m, layer, layout, p, t, seqs, q, gpus_per_tray, part="draft")
        layer_ops += moe_ops(m, layer, layout, p, t, gpus_per_tray, part="draft")
        ops += [dataclasses.replace(o, repeat=o.repeat * len(same)) for o in layer_ops]
    if decode:
        ops += head_ops(m, layout, t, t, part="draft")
    return [dataclasses.replace(o, name="draft: " + o.name, repeat=o.repeat * passes) for o in ops]
