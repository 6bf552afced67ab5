"""The weight matrices of a model, layer by layer, read off its spec.

One place for the shapes: parameter counts, per-rank weight bytes and the step graph's
GEMMs all use these. A Weight is a [k_in, n_out] matrix, `count` copies of it.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

from rubinperf.specs.model import Model


@dataclass(frozen=True)
class Weight:
    name: str
    k: int            # input width
    n: int            # output width
    dtype: str
    count: int = 1    # copies (experts, groups)
    kind: str = "dense"   # dense | routed | shared | router | embedding | mhc | norm

    @property
    def params(self) -> int:
        return self.k * self.n * self.count


def attention_weights(m: Model, layer: int) -> list[Weight]:
    d, dt = m.hidden_size, m.dense_dtype
    if m.attention_kind == "gqa":
        # Grouped-query attention: a plain query projection, K and V of num_kv_heads heads each (kv_latent_dim wide).
        w = [
            Weight("q_proj", d, m.num_heads * m.qk_head_dim, dt),
            Weight("kv_heads_proj", d, 2 * m.kv_latent_dim, dt),
            Weight("o_proj", m.num_heads * m.v_head_dim, d, dt),
        ]
    elif m.attention_kind == "mla":
        w = [
            Weight("q_down", d, m.q_lora_rank, dt),
            Weight("q_up", m.q_lora_rank, m.num_heads * (m.qk_nope_head_dim + m.rope_dim), dt),
            Weight("kv_down", d, m.kv_latent_dim + m.rope_dim, dt),
            Weight("kv_up", m.kv_latent_dim, m.num_heads * (m.qk_nope_head_dim + m.mla_v_head_dim), dt),
            Weight("o_proj", m.num_heads * m.mla_v_head_dim, d, dt),
        ]
    else:
        w = [
            Weight("q_down", d, m.q_lora_rank, dt),
            Weight("q_up", m.q_lora_rank, m.num_heads * m.qk_head_dim, dt),
        ]
        if m.is_kv_source(layer) or layer >= m.num_layers:
            w.append(Weight("kv_proj", d, m.kv_latent_dim, dt))
        if m.compress_ratio(layer) > 1 and (m.is_kv_source(layer) or layer >= m.num_layers):
            # Compressor: a KV and a gate projection of the hidden state (V4 Compressor, overlap off).
            w.append(Weight("kv_compress", d, 2 * m.kv_latent_dim, dt))
        if m.o_groups:
            w += [
                Weight("o_down", m.num_heads // m.o_groups * m.v_head_dim, m.o_lora_rank, dt, count=m.o_groups),
                Weight("o_up", m.o_groups * m.o_lora_rank, d, dt),
            ]
        else:
            w.append(Weight("o_proj", m.num_heads * m.v_head_dim, d, dt))
    if layer in m.indexer_layers:
        w += [
            Weight("indexer_q", m.q_lora_rank, m.indexer_heads * m.indexer_head_dim, dt),
            Weight("indexer_k", d, m.indexer_head_dim, dt),
            Weight("indexer_weights", d, m.indexer_heads, "bf16"),
        ]
    return w


def ffn_weights(m: Model, layer: int, draft: bool = False) -> list[Weight]:
    d = m.hidden_size
    if not draft and not m.is_moe_layer(layer):
        return [Weight("dense_ffn", d, 3 * m.dense_intermediate_size, m.dense_dtype)]
    experts = m.draft_routed_experts if draft else m.num_routed_experts
    inter = m.draft_moe_intermediate_size if draft else m.moe_intermediate_size
    w = [Weight("routed_experts", d, 3 * inter, m.expert_dtype, count=experts, kind="routed")]
    if m.num_shared_experts:
        w.append(Weight("shared_expert", d, 3 * inter, m.dense_dtype, count=m.num_shared_experts, kind="shared"))
    if draft or layer >= m.hash_routed_layers:
        w.append(Weight("router", d, experts, m.router_dtype, kind="router"))
    return w


def extra_weights(m: Model, layer: int) -> list[Weight]:
    """mHC mixing and Engram projection of one main layer."""
    w = []
    if m.hc_mix_rows:
        w.append(Weight("mhc_mix", m.hc_routes * m.hidden_size, m.hc_mix_rows, "fp32", count=2, kind="mhc"))
    if layer in m.engram_layers:
        w.append(Weight("engram_proj", m.engram_heads * m.engram_head_dim, m.hidden_size, m.dense_dtype))
    return w


def layer_weights(m: Model, layer: int) -> list[Weight]:
    return attention_weights(m, layer) + ffn_weights(m, layer) + extra_weights(m, layer)


def draft_layer_weights(m: Model, i: int) -> list[Weight]:
    """One draft/MTP layer: window or full attention as its compress ratio says, its own MoE, and the input fusion."""
    layer = m.num_layers + i
    att = [w for w in attention_weights(m, layer) if not w.name.startswith("indexer")]
    fuse = Weight("draft_fuse", 2 * m.hidden_size, m.hidden_size, m.dense_dtype)
    return att + ffn_weights(m, layer, draft=True) + [fuse]


def embedding_weights(m: Model) -> list[Weight]:
    """The embedding table and the LM head (with tied embeddings one matrix: `stored_weights` drops the table)."""
    return [
        Weight("embedding", m.vocab_size, m.hidden_size, m.embedding_dtype, kind="embedding"),
        Weight("lm_head", m.hidden_size, m.vocab_size, m.embedding_dtype),
    ]


def stored_embedding_weights(m: Model) -> list[Weight]:
    """The embedding and LM head matrices as stored: one of them when the model ties them."""
    emb = embedding_weights(m)
    return [w for w in emb if w.kind != "embedding"] if m.tied_embeddings else emb


def parameter_counts(m: Model) -> dict:
    """Total and active-per-token parameters, and the draft's own, from the weight shapes.

    Matrices only: norm weights, biases and attention-sink scalars are left out (under 0.05% of any
    bundled model). Active excludes the embedding table (a look-up), counts the LM head. (Computed once per
    model: every record of `estimate` carries them; a model with a field that cannot be hashed is counted anew.)"""
    try:
        return dict(_parameter_counts(m))
    except TypeError:   # unhashable: not cached
        return _parameter_counts.__wrapped__(m)


@functools.lru_cache(maxsize=16)
def _parameter_counts(m: Model) -> dict:
    main = [w for layer in range(m.num_layers) for w in layer_weights(m, layer)] + stored_embedding_weights(m)
    draft = [w for i in range(m.draft_layers) for w in draft_layer_weights(m, i)]
    total = sum(w.params for w in main)
    inactive = sum(
        w.params * (w.count - m.experts_per_token) // w.count for w in main if w.kind == "routed"
    )
    embed = sum(w.params for w in main if w.kind == "embedding")
    return {
        "total_params": total + (sum(w.params for w in draft) if m.draft_counts_in_total else 0),
        "active_params": total - inactive - embed,
        "draft_params": sum(w.params for w in draft),
        "engram_table_bytes": m.engram_table_bytes * m.engram_tables,
    }
