"""HBM budget of one rank: weights for the layout, Engram tables, KV cache and activation workspace.

    free HBM = capacity - runtime reserve - weights - Engram share
    requests that fit = floor(free HBM / (KV of one request + workspace of one request))

Weights per rank follow the same splits as `graph.py`: DEP holds every dense weight and
1/N of the routed experts (target and draft); TP divides the head-split and
expert-column-split weights by N (query up-projection, output projection, indexer
query, shared expert, routed experts' columns, dense FFN, LM head) and replicates the
rest (down-projections, KV projections, routers, mHC, Engram projection, embedding);
TEP splits as TP, but holds 1/N of the routed experts whole (the same bytes).

KV per token of one request: over the KV source layers, (KV entry + index key on indexer
layers) / compression ratio; plus, per request, the sliding window's uncompressed
entries on every KV-writing layer (KV sources and draft layers). Each rank of a DEP
engine holds its own requests' KV; a TP engine's latent KV (one shared KV head) is
held whole on every rank, so its batch counts per instance and per rank alike.

Shapes come from `architecture`; this module only adds them up.
"""

from __future__ import annotations

import functools

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rubinperf.specs.layout import Layout
from rubinperf.specs.model import Model
from rubinperf.specs.precision import ACT_BYTES, LOGIT_BYTES, PRECISIONS, RESIDUAL_BYTES
from rubinperf.step.architecture import Weight, draft_layer_weights, layer_weights, stored_embedding_weights

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

GB = 1e9
# Weights whose columns (or heads) a TP layout splits, as graph.py does.
TP_SPLIT = frozenset({"q_proj", "q_up", "kv_up", "o_proj", "o_down", "o_up", "indexer_q", "dense_ffn", "shared_expert",
                      "routed_experts", "lm_head"})


def weight_bytes(w: Weight) -> float:
    return w.params * PRECISIONS[w.dtype].bytes_per_element


def _rank_share(w: Weight, layout: Layout) -> float:
    """Bytes of `w` one rank of `layout` holds."""
    if layout.kind == "dep":
        return weight_bytes(w) / layout.ranks if w.kind == "routed" else weight_bytes(w)
    if layout.kind == "tep" and w.kind == "routed":   # n-th of the experts, whole
        return weight_bytes(w) / layout.ep
    if w.name == "kv_heads_proj":  # GQA K/V heads split over TP ranks, one head each once TP passes them
        return weight_bytes(w) * kv_heads_share(w.n // 2, layout)
    return weight_bytes(w) / layout.tp if w.name in TP_SPLIT else weight_bytes(w)


def kv_heads_share(kv_heads: int, layout: Layout) -> float:
    """Share of a layer's K/V heads one rank holds: 1/TP of them, at least one head (engines replicate a head when
    TP exceeds the K/V heads); DEP ranks hold all of their own requests' heads."""
    if layout.kind == "dep":
        return 1.0
    return max(1, kv_heads // layout.tp) / kv_heads


def kv_rank_share(m: Model, layout: Layout) -> float:
    """Share of a request's KV cache one rank holds: GQA heads split over TP ranks; a latent (MLA, V4 MQA) is whole."""
    return kv_heads_share(m.num_kv_heads, layout) if m.attention_kind == "gqa" else 1.0


def weight_bytes_per_rank(m: Model, layout: Layout) -> dict[str, float]:
    """Weight bytes one rank holds, by group: routed experts, other target weights, draft, embeddings (computed once
    per model and layout; a model with a field that cannot be hashed is counted anew)."""
    try:
        return dict(_weight_bytes_per_rank(m, layout))
    except TypeError:   # unhashable: not cached
        return _weight_bytes_per_rank.__wrapped__(m, layout)


@functools.lru_cache(maxsize=64)
def _weight_bytes_per_rank(m: Model, layout: Layout) -> dict[str, float]:
    routed = other = draft = 0.0
    for layer in range(m.num_layers):
        for w in layer_weights(m, layer):
            if w.kind == "routed":
                routed += _rank_share(w, layout)
            else:
                other += _rank_share(w, layout)
    for i in range(m.draft_layers):
        draft += sum(_rank_share(w, layout) for w in draft_layer_weights(m, i))
    embed = sum(_rank_share(w, layout) for w in stored_embedding_weights(m))
    return {"routed experts": routed, "dense + attention": other, "draft": draft, "embedding + LM head": embed}


def kv_bytes_per_token(m: Model) -> float:
    """Main-layer KV cache bytes per context token of one request (890 B for V4.1-Flash, as the vLLM posts give it)."""
    total = 0.0
    for layer in range(m.num_layers):
        ratio = m.compress_ratio(layer)
        if m.is_kv_source(layer) and ratio:
            total += (m.cache_entry_bytes + m.index_key_bytes * (layer in m.indexer_layers)) / ratio
    return total


def draft_kv_bytes_per_token(m: Model) -> float:
    """The draft/MTP layers' own KV per context token (0 when they attend only a window)."""
    total = 0.0
    for i in range(m.draft_layers):
        ratio = m.compress_ratio(m.num_layers + i)
        if ratio:
            total += m.cache_entry_bytes / ratio
    return total


def kv_window_bytes_per_request(m: Model, tokens=None) -> float:
    """Uncompressed sliding-window entries of one request, on every KV-writing layer: `tokens` each (default: the
    window, a constant); in GQA models only the sliding-window layers (compress ratio 0) keep a window, the others
    hold every token."""
    tokens = m.sliding_window_tokens if tokens is None else tokens
    if m.attention_kind == "gqa":
        writers = sum(1 for layer in range(m.num_layers + m.draft_layers) if not m.compress_ratio(layer))
        return tokens * m.cache_entry_bytes * writers
    writers = sum(1 for layer in range(m.num_layers) if m.is_kv_source(layer)) + m.draft_layers
    return tokens * m.cache_entry_bytes * writers


def kv_bytes_per_request(m: Model, context, window_whole_sequence: bool = False):
    """KV bytes one request holds at `context` tokens (numbers or arrays); a cache that keeps the window layers'
    entries for the whole sequence (window_whole_sequence) holds `context` of them on each, not the window."""
    window = kv_window_bytes_per_request(m, context if window_whole_sequence else None) if m.sliding_window_tokens \
        else 0.0
    return (kv_bytes_per_token(m) + draft_kv_bytes_per_token(m)) * context + window


def kv_bytes_per_rank(m: Model, layout: Layout, context, window_whole_sequence: bool = False):
    """KV bytes of one request that one rank (one GPU) holds at `context` tokens: the family's bytes per request
    times the rank's share (GQA: its K/V heads, at least one; a latent: all of it; DEP: its own requests whole)."""
    return kv_bytes_per_request(m, context, window_whole_sequence) * kv_rank_share(m, layout)


def workspace_bytes_per_token(m: Model, layout: Layout) -> float:
    """Activation workspace per token in flight on a rank: residual routes in and out, the MoE
    dispatch buffer and expert intermediate (top-k copies), and the attention's query/output."""
    residual = m.hc_routes * m.hidden_size * (RESIDUAL_BYTES if m.hc_routes > 1 else ACT_BYTES) * 2
    act = PRECISIONS[m.activation_dtype].bytes_per_element
    moe = m.experts_per_token * (m.hidden_size * act + 2 * m.moe_intermediate_size / layout.expert_tp * ACT_BYTES)
    if layout.kind == "tep":   # no dispatch buffer: the tokens are local; a GPU's experts take top-k / n rows a token
        moe = m.experts_per_token / layout.ep * (m.hidden_size * act + 2 * m.moe_intermediate_size * ACT_BYTES)
    attention = m.num_heads / layout.tp * (m.qk_head_dim + m.v_head_dim) * ACT_BYTES
    if not m.num_routed_experts:  # a dense model: the FFN's gate and up outputs instead of the experts'
        return residual + 2 * m.dense_intermediate_size / layout.tp * ACT_BYTES + attention
    return residual + moe + attention


def engram_bytes_per_gpu(m: Model, layout: Layout, placement: str, peer_gpus: int) -> tuple[float, float]:
    """(HBM bytes, host-memory bytes) of Engram tables per GPU of the engine."""
    total = m.engram_table_bytes * m.engram_tables if m.engram_layers else 0.0
    if placement == "hbm":
        return total / layout.ranks, 0.0
    if placement == "peer-hbm":
        return total / peer_gpus, 0.0
    return 0.0, total / layout.ranks


@dataclass(frozen=True)
class Capacity:
    """HBM budget of one rank of an engine, and how many requests fit."""

    layout: Layout
    phase: str
    hbm_bytes: float
    reserve_bytes: float
    weights: dict
    engram_bytes: float
    host_engram_bytes: float
    host_capacity_bytes: float
    context_tokens: float            # tokens a request holds at its largest
    kv_bytes_per_request: float
    workspace_bytes_per_request: float

    @property
    def weight_bytes(self) -> float:
        return sum(self.weights.values())

    @property
    def fixed_bytes(self) -> float:
        return self.reserve_bytes + self.weight_bytes + self.engram_bytes

    @property
    def bytes_per_request(self) -> float:
        return self.kv_bytes_per_request + self.workspace_bytes_per_request

    @property
    def free_bytes(self) -> float:
        return self.hbm_bytes - self.fixed_bytes

    @property
    def host_fits(self) -> bool:
        return self.host_engram_bytes <= self.host_capacity_bytes

    @property
    def max_requests(self) -> float:
        """Requests per rank (DEP) or per instance (TP) whose KV and workspace fit; 0 when nothing fits."""
        if self.free_bytes <= 0 or not self.host_fits:
            return 0.0
        return float(math.floor(self.free_bytes / self.bytes_per_request))

    def fits(self, batch):
        import numpy as np  # only here: a scalar estimate never loads numpy

        return np.asarray(batch) <= self.max_requests

    def used_bytes(self, batch):
        import numpy as np

        return self.fixed_bytes + np.asarray(batch, dtype=float) * self.bytes_per_request

    def reason(self, batch=None) -> str:
        """Why `batch` (or anything, when None) does not fit; '' when it does."""
        where = f"{self.phase} {self.layout.name}"
        if not self.host_fits:
            return (f"{where}: does not fit in host memory: Engram tables need {self.host_engram_bytes / GB:.0f} GB of host memory per GPU, "
                    f"{self.host_capacity_bytes / GB:.0f} GB available")
        if self.free_bytes <= 0 or self.max_requests < 1:
            return (f"{where}: does not fit in HBM: weights {self.weight_bytes / GB:.1f} GB + Engram {self.engram_bytes / GB:.1f} GB + "
                    f"reserve {self.reserve_bytes / GB:.0f} GB + one request {self.bytes_per_request / GB:.2f} GB "
                    f"exceed {self.hbm_bytes / GB:.0f} GB of HBM")
        if batch is not None and float(batch) > self.max_requests:
            return (f"{where}: does not fit in HBM: {float(batch):g} requests of {self.context_tokens:,.0f} tokens need "
                    f"{float(batch) * self.bytes_per_request / GB:.1f} GB, {self.free_bytes / GB:.1f} GB free "
                    f"(at most {self.max_requests:.0f} per {'rank' if self.layout.kind == 'dep' else 'instance'})")
        return ""

    def record(self) -> dict:
        return {
            "layout": self.layout.name, "phase": self.phase, "hbm_bytes": self.hbm_bytes,
            "reserve_bytes": self.reserve_bytes, "weight_bytes": self.weight_bytes,
            "weights": dict(self.weights), "engram_hbm_bytes": self.engram_bytes,
            "engram_host_bytes": self.host_engram_bytes, "free_bytes": self.free_bytes,
            "context_tokens": self.context_tokens, "kv_bytes_per_request": self.kv_bytes_per_request,
            "workspace_bytes_per_request": self.workspace_bytes_per_request, "max_requests": self.max_requests,
        }


def capacity(m: Model, hw: Platform, layout: Layout, phase: str, context_tokens: float, tokens_per_request: float,
             logits_per_request: float, reserve_bytes: float, engram_placement: str | None = None,
             engram_peer_gpus: int = 18) -> Capacity:
    """Budget of one rank for requests of up to `context_tokens`, each with `tokens_per_request`
    tokens in flight per step and `logits_per_request` rows of logits."""
    placement = engram_placement or m.engram_placement
    engram_hbm, engram_host = engram_bytes_per_gpu(m, layout, placement, engram_peer_gpus)
    ws = tokens_per_request * workspace_bytes_per_token(m, layout) + \
        logits_per_request * m.vocab_size / layout.tp * LOGIT_BYTES
    return Capacity(layout=layout, phase=phase, hbm_bytes=hw.hbm_capacity_bytes, reserve_bytes=reserve_bytes,
                    weights=weight_bytes_per_rank(m, layout), engram_bytes=engram_hbm,
                    host_engram_bytes=engram_host, host_capacity_bytes=hw.host_memory_capacity_bytes,
                    context_tokens=float(context_tokens),
                    kv_bytes_per_request=float(kv_bytes_per_rank(m, layout, context_tokens, hw.window_kv_whole_sequence)),
                    workspace_bytes_per_request=float(ws))
