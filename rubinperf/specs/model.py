"""Model spec: the architecture fields the kernel formulas need, each table with its source.

Layer indices count from 0. Lists indexed by layer (`compress_ratios`) cover the main
layers followed by the draft/MTP layers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rubinperf.errors import SpecError
from rubinperf.specs.precision import PRECISIONS
from rubinperf.specs.loader import MAX_LAYERS, load_spec_file, resolve_path, spec_field
from rubinperf.specs.wide import wide

ATTENTION_KINDS = ("sparse-mqa", "mla", "gqa")
ENGRAM_PLACEMENTS = ("hbm", "host", "peer-hbm")


@wide
@dataclass(frozen=True, kw_only=True, eq=False, repr=False, init=False)
class Model:
    name: str
    description: str
    # [architecture]
    num_layers: int = spec_field("architecture", at_most=MAX_LAYERS, doc="main transformer layers")
    hidden_size: int = spec_field("architecture")
    vocab_size: int = spec_field("architecture")
    max_context_tokens: int = spec_field("architecture", "tokens", typical=(1e3, 1e7))
    hc_routes: int = spec_field("architecture", doc="mHC residual routes (1 = plain residual)")
    hc_mix_rows: int = spec_field("architecture", positive=False, doc="rows of the per-sublayer mHC mixing weight (0 = none)")
    dense_dtype: str = spec_field("architecture", doc="attention and shared-expert linears")
    embedding_dtype: str = spec_field("architecture")
    tied_embeddings: bool = spec_field("architecture", positive=False, default=False,
                                       doc="the LM head is the embedding matrix (stored once)")
    # [attention]
    attention_kind: str = spec_field("attention", doc="sparse-mqa (V4), mla (V2/V3) or gqa (grouped-query: K/V heads)")
    num_heads: int = spec_field("attention")
    num_kv_heads: int = spec_field("attention", default=1, doc="gqa: K/V heads (1 = MQA); sparse-mqa and mla: 1 latent")
    q_lora_rank: int = spec_field("attention", positive=False, doc="low-rank query width (0 for gqa: a plain query projection)")
    kv_latent_dim: int = spec_field("attention", doc="width of the cached latent KV (K = V for V4); gqa: K width, kv heads x head dim")
    qk_head_dim: int = spec_field("attention", doc="per-head dot-product width seen by the attention kernel")
    v_head_dim: int = spec_field("attention", doc="per-head value width seen by the attention kernel")
    qk_nope_head_dim: int = spec_field("attention", positive=False, doc="MLA: per-head non-RoPE query/key width before absorption (0 for V4)")
    mla_v_head_dim: int = spec_field("attention", positive=False, doc="MLA: per-head value width before absorption (0 for V4)")
    rope_dim: int = spec_field("attention")
    o_groups: int = spec_field("attention", positive=False, doc="grouped low-rank output projection groups (0 = plain)")
    o_lora_rank: int = spec_field("attention", positive=False)
    sliding_window_tokens: int = spec_field("attention", "tokens", positive=False)
    compress_ratios: tuple[int, ...] = spec_field("attention", doc="per layer: 0 = window only, r = one entry per r tokens")
    kv_source_layers: tuple[int, ...] = spec_field("attention", doc="layers that write KV; empty = every layer")
    kv_entry_bytes: int = spec_field("attention", "bytes", positive=False, typical=(16, 1e5), default=0, doc="one cached KV entry of one layer as stored, where kv_cache_dtype is empty (a set kv_cache_dtype decides the entry)")
    kv_cache_dtype: str = spec_field("attention", default="", positive=False, doc="format the KV cache is stored in: its entry is then the listed kv_cache_format_bytes, else its elements (gqa: K and V; mla: latent + RoPE; sparse-mqa: the latent) at the format's bits (per-tensor scales, not counted; sparse-mqa: a listed format only); empty: kv_entry_bytes as stated")
    kv_cache_formats: tuple[str, ...] = spec_field("attention", default=(), positive=False, doc="cache formats of a packed entry layout (FlashMLA's), with their entry sizes in kv_cache_format_bytes")
    kv_cache_format_bytes: tuple[int, ...] = spec_field("attention", "bytes", default=(), positive=False, typical=(16, 1e5), doc="one cached entry in each of kv_cache_formats (values, scales and the RoPE part)")
    # [indexer]
    indexer_layers: tuple[int, ...] = spec_field("indexer", doc="layers that compute indexer logits and top-k")
    topk_layers: tuple[int, ...] = spec_field("indexer", doc="layers that attend only the selected top-k entries")
    indexer_heads: int = spec_field("indexer", positive=False)
    indexer_head_dim: int = spec_field("indexer", positive=False)
    indexer_topk: int = spec_field("indexer", positive=False)
    index_key_bytes: int = spec_field("indexer", "bytes", positive=False, typical=(1, 1e4), doc="one index key entry")
    indexer_dtype: str = spec_field("indexer")
    indexer_epilogue_flops_per_head: float = spec_field("indexer", positive=False, typical=(0.1, 100), doc="FP32 CUDA-core operations per query-key pair and indexer head after the logits MMA (ReLU, then the head weight's multiply-add into the sum over heads)")
    replay_start_layer: int = spec_field("indexer", positive=False, doc="prefill: first layer of bounded replay (>= num_layers: none)")
    replay_tokens: int = spec_field("indexer", "tokens", positive=False)
    # [moe]
    num_routed_experts: int = spec_field("moe", positive=False, doc="0 for a dense model (every layer a dense FFN)")
    experts_per_token: int = spec_field("moe", positive=False)
    moe_intermediate_size: int = spec_field("moe", positive=False)
    num_shared_experts: int = spec_field("moe", positive=False)
    first_dense_layers: int = spec_field("moe", positive=False, doc="leading layers with a dense FFN instead of MoE")
    dense_intermediate_size: int = spec_field("moe", positive=False)
    hash_routed_layers: int = spec_field("moe", positive=False, doc="leading MoE layers routed by token hash (no router GEMM)")
    expert_dtype: str = spec_field("moe")
    activation_dtype: str = spec_field("moe", doc="activations fed to the expert GEMMs")
    router_dtype: str = spec_field("moe")
    # [engram]
    engram_layers: tuple[int, ...] = spec_field("engram")
    engram_table_bytes: float = spec_field("engram", "bytes", positive=False, typical=(1e6, 1e12), doc="one table")
    engram_tables: int = spec_field("engram", positive=False)
    engram_lookups_per_token: int = spec_field("engram", positive=False, doc="per token per Engram layer")
    engram_row_bytes: int = spec_field("engram", "bytes", positive=False)
    engram_heads: int = spec_field("engram", positive=False)
    engram_head_dim: int = spec_field("engram", positive=False)
    engram_placement: str = spec_field("engram", doc="hbm (split over DP ranks), host (C2C) or peer-hbm (NVLink)")
    # [draft] speculative decoding
    draft_layers: int = spec_field("draft", positive=False, at_most=MAX_LAYERS)
    draft_routed_experts: int = spec_field("draft", positive=False)
    draft_experts_per_token: int = spec_field("draft", positive=False)
    draft_moe_intermediate_size: int = spec_field("draft", positive=False)
    draft_tokens: int = spec_field("draft", "tokens", positive=False, doc="k tokens drafted per verify step")
    draft_passes: int = spec_field("draft", positive=False, doc="sequential draft forwards per verify step")
    mean_accepted_tokens: float = spec_field("draft", "tokens", typical=(1, 16), doc="tokens emitted per verify step")
    draft_counts_in_total: bool = spec_field("draft", positive=False, doc="whether the published total includes the draft layers")
    sources: dict = dataclasses.field(default_factory=dict, compare=False)
    path: str = dataclasses.field(default="", compare=False)

    def validate(self) -> None:
        def bad(key, why):
            raise SpecError(f"{self.path}: {key}: {why}")

        n_all = self.num_layers + self.draft_layers
        if self.replay_start_layer < self.num_layers and self.replay_tokens < 1:
            bad("indexer.replay_tokens", f"expected at least 1 token when bounded replay starts at layer "
                f"{self.replay_start_layer} (a replayed layer with no tokens does no work; to turn replay off, "
                f"set replay_start_layer to {self.num_layers} or more)")
        if self.attention_kind not in ATTENTION_KINDS:
            bad("attention.attention_kind", f"expected one of {', '.join(ATTENTION_KINDS)}, got {self.attention_kind!r}")
        if self.engram_placement not in ENGRAM_PLACEMENTS:
            bad("engram.engram_placement", f"expected one of {', '.join(ENGRAM_PLACEMENTS)}, got {self.engram_placement!r}")
        if len(self.kv_cache_formats) != len(self.kv_cache_format_bytes):
            bad("attention.kv_cache_format_bytes", f"expected one size per format of kv_cache_formats "
                f"({len(self.kv_cache_formats)}), got {len(self.kv_cache_format_bytes)}")
        for fmt in self.kv_cache_formats:
            if fmt not in PRECISIONS:
                bad("attention.kv_cache_formats", f"expected formats of {', '.join(PRECISIONS)}, got {fmt!r}")
        if self.kv_cache_dtype and self.kv_cache_dtype not in PRECISIONS:
            bad("attention.kv_cache_dtype", f"expected one of {', '.join(PRECISIONS)} (or empty), got {self.kv_cache_dtype!r}")
        if not self.kv_cache_dtype and not self.kv_entry_bytes:
            bad("attention.kv_entry_bytes", "expected the bytes of one cached entry, or a kv_cache_dtype to derive them")
        if self.kv_cache_dtype and self.kv_entry_bytes and self.attention_kind == "sparse-mqa":
            bad("attention.kv_entry_bytes", f"a packed sparse-mqa entry is the kv_cache_format_bytes of kv_cache_dtype "
                f"({self.kv_cache_dtype}): set kv_cache_dtype empty to give kv_entry_bytes instead")
        if (self.kv_cache_dtype and self.attention_kind == "sparse-mqa"
                and self.kv_cache_dtype not in self.kv_cache_formats):
            bad("attention.kv_cache_dtype", f"a sparse-mqa cache is a packed layout (values, scales, the RoPE part): "
                f"expected one of its listed kv_cache_formats ({', '.join(self.kv_cache_formats) or 'none'}), got "
                f"{self.kv_cache_dtype!r}; to use another, set kv_cache_formats and kv_cache_format_bytes")
        for key in ("dense_dtype", "embedding_dtype", "expert_dtype", "activation_dtype", "router_dtype", "indexer_dtype"):
            if getattr(self, key) not in PRECISIONS:
                bad(key, f"expected one of {', '.join(PRECISIONS)}, got {getattr(self, key)!r}")
        if self.compress_ratios and len(self.compress_ratios) != n_all:
            bad("attention.compress_ratios", f"expected {n_all} entries (main + draft layers), got {len(self.compress_ratios)}")
        for key in ("kv_source_layers", "indexer_layers", "topk_layers", "engram_layers"):
            for layer in getattr(self, key):
                if layer >= self.num_layers:
                    bad(key, f"layer {layer} is beyond the model's {self.num_layers} layers")
            if len(set(getattr(self, key))) != len(getattr(self, key)):
                bad(key, f"expected distinct layers, got {list(getattr(self, key))}")
        for layer in self.indexer_layers:
            if not self.compress_ratio(layer):
                bad("indexer.indexer_layers", f"layer {layer} keeps only a window (compress ratio 0): nothing to index")
        if self.draft_tokens and not self.draft_layers:
            bad("draft.draft_tokens", "expected 0 when draft_layers is 0 (no draft model to draft with)")
        moe = (self.num_routed_experts, self.experts_per_token, self.moe_intermediate_size)
        if any(moe) or self.first_dense_layers < self.num_layers:
            for key, v in zip(("num_routed_experts", "experts_per_token", "moe_intermediate_size"), moe):
                if not v:
                    bad(f"moe.{key}", "expected a positive value (0 only in a dense model, where first_dense_layers "
                        "= num_layers)")
        if self.draft_layers:
            for key in ("draft_routed_experts", "draft_experts_per_token", "draft_moe_intermediate_size"):
                if not getattr(self, key):
                    bad(f"draft.{key}", "expected a positive value when draft_layers > 0")
        if self.attention_kind != "gqa" and not self.q_lora_rank:
            bad("attention.q_lora_rank", f"expected a positive value for {self.attention_kind} attention")
        if self.attention_kind == "gqa":
            if self.num_heads % self.num_kv_heads:
                bad("attention.num_kv_heads", f"expected a divisor of num_heads ({self.num_heads})")
            if self.kv_latent_dim != self.num_kv_heads * self.qk_head_dim:
                bad("attention.kv_latent_dim", f"expected num_kv_heads x qk_head_dim = "
                    f"{self.num_kv_heads * self.qk_head_dim} for gqa attention")
        if self.experts_per_token > self.num_routed_experts:
            bad("moe.experts_per_token", "expected at most num_routed_experts")
        if (self.o_groups > 0) != (self.o_lora_rank > 0):
            bad("attention.o_lora_rank", f"expected o_groups and o_lora_rank both 0 (a plain output projection) or both "
                f"positive (a grouped low-rank one), got {self.o_groups} and {self.o_lora_rank}")
        if self.draft_experts_per_token > self.draft_routed_experts:
            bad("draft.draft_experts_per_token", "expected at most draft_routed_experts")
        if self.mean_accepted_tokens > self.draft_tokens + 1:
            bad("draft.mean_accepted_tokens", f"expected at most draft_tokens + 1 = {self.draft_tokens + 1}")
        if self.first_dense_layers and not self.dense_intermediate_size:
            bad("moe.dense_intermediate_size", "expected a positive size when first_dense_layers > 0")
        if self.o_groups and self.num_heads % self.o_groups:
            bad("attention.o_groups", f"expected a divisor of num_heads ({self.num_heads})")

    @property
    def kv_entry_elements(self) -> int:
        """Values of one cached entry of one layer: K and V of every KV head (gqa), the latent and its RoPE part
        (mla), or the shared latent, RoPE part included (sparse-mqa)."""
        if self.attention_kind == "gqa":
            return 2 * self.kv_latent_dim
        if self.attention_kind == "mla":
            return self.kv_latent_dim + self.rope_dim
        return self.kv_latent_dim

    @property
    def cache_entry_bytes(self) -> float:
        """Bytes of one cached KV entry of one layer in the cache's format (kv_cache_dtype): the packed layout's
        listed size, else its elements at the format's bits; kv_entry_bytes when no format is set."""
        fmt = self.kv_cache_dtype
        if not fmt:
            return self.kv_entry_bytes
        if fmt in self.kv_cache_formats:
            return self.kv_cache_format_bytes[self.kv_cache_formats.index(fmt)]
        return self.kv_entry_elements * PRECISIONS[fmt].bits / 8

    def compress_ratio(self, layer: int) -> int:
        """Compression ratio of a layer (main layers first, then draft layers); 1 when none is listed."""
        if not self.compress_ratios:
            return 1
        return self.compress_ratios[layer]

    def is_kv_source(self, layer: int) -> bool:
        return not self.kv_source_layers or layer in self.kv_source_layers

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.first_dense_layers and self.num_routed_experts > 0


def load_model(name_or_path: str) -> Model:
    """Load a bundled model spec by name, a user's TOML file by path, or a Hugging Face config.json
    (or a directory holding one), read by the architecture families of `specs.hfconfig`."""
    if name_or_path.endswith(".json") or _is_dir(name_or_path):
        from rubinperf.specs.hfconfig import model_from_config

        return model_from_config(Model, name_or_path)
    path = resolve_path(name_or_path, "model")
    return load_spec_file(Model, path)


def _is_dir(name_or_path: str) -> bool:
    """A directory holding a config.json (a Hugging Face checkpoint's folder)."""
    import os

    try:
        return ("\0" not in name_or_path and os.path.isdir(name_or_path)
                and os.path.lexists(os.path.join(name_or_path, "config.json")))
    except (OSError, ValueError):
        return False


def import_model_toml(config_path: str, name: str | None, cited: str | None = None) -> str:
    """A model spec TOML written from a Hugging Face config.json, each field with its source."""
    from rubinperf.specs.hfconfig import import_toml

    return import_toml(Model, config_path, name, cited)
