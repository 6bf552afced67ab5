"""A model spec from a Hugging Face `config.json`: the architecture families and their quantisation.

Each family reads the fields its `config.json` carries and fills the model spec's tables, every
value with the config field it came from (or the rule that made it, marked as such):

- dense decoder with grouped-query attention: `llama`, `mistral`, `qwen2`, `qwen3`;
- MoE with grouped-query attention: `qwen3_moe`, `mixtral`, `gpt_oss` (alternating sliding-window and
  full layers from `layer_types`; attention sinks add one logit per head and no KV: not costed);
- MLA + MoE: `deepseek_v2`, `deepseek_v3`, `kimi_k2` (shared experts, leading dense layers, MTP layers);
- MLA + DeepSeek sparse attention with the lightning indexer: `deepseek_v32`.

The V4 family (compressed sparse attention, mHC, Engram) has its own bundled TOML specs.

`quantization_config` (in `config.json`) or a ModelOpt `hf_quant_config.json` beside it sets the
weight, activation and KV precisions per op group; `--set` overrides any of them afterwards.
Nothing is fetched: the user brings the file. Every problem is a one-line SpecError naming the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from rubinperf.errors import SpecError, number_text, shorten
from rubinperf.specs.loader import LARGEST_INT, MAX_LAYERS, build_spec, spec_fields, _toml_value

GQA_DENSE = ("llama", "mistral", "qwen2", "qwen3")
GQA_MOE = ("qwen3_moe", "mixtral", "gpt_oss")
MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32")
FAMILIES = GQA_DENSE + GQA_MOE + MLA
# DeepSeek-V3 report (arXiv 2412.19437, section 5.4.3): the second token is accepted 85-90% of the time.
MTP_ACCEPTED_TOKENS = 1.85
# FP8 index key with one FP32 scale per 128 values (DeepSeek-V3.2 reference Indexer: k_cache e4m3, k_scale_cache fp32).
INDEX_SCALE_BLOCK = 128
# The indexer's CUDA-core work per (query, key, head) after the logits MMA: ReLU, then the head weight's multiply-add
# into the sum over heads (DeepSeek-V3.2 reference Indexer; the V4 specs state the same 3 operations).
INDEXER_EPILOGUE_FLOPS = 3.0


class Fields:
    """The config's fields, read strictly: each read names the field in its error and in the value's source."""

    def __init__(self, data: dict, path: str):
        self.data, self.path = data, path

    def fail(self, key: str, why: str):
        raise SpecError(f"{self.path}: {key}: {why}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default=None):
        return self.data.get(key, default)

    def layers(self, key: str = "num_hidden_layers", default=None, positive: bool = True) -> int:
        """A layer count: at most MAX_LAYERS, checked before any per-layer structure (a tuple per layer, a
        layer_types list) is built from it, so a 1 KB config with num_hidden_layers = 10**9 costs nothing."""
        return self.int(key, default, positive, largest=MAX_LAYERS)

    def int(self, key: str, default=None, positive: bool = True, largest: int = LARGEST_INT) -> int:
        v = self.data.get(key)
        if v is None:
            if default is None:
                self.fail(key, f"missing (an integer; needed by model_type {self.data.get('model_type')!r})")
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(key, f"expected an integer, got {shorten(repr(v))}")
        if v < 0 or (positive and v == 0) or v > largest:
            self.fail(key, f"expected {'a positive' if positive else 'a non-negative'} integer of at most "
                      f"{largest:,}, got {number_text(v)}")
        return v

    def number(self, key: str, default: float) -> float:
        v = self.data.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1e6:
            self.fail(key, f"expected a positive number, got {shorten(repr(v))}")
        return float(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(key, f"expected true or false, got {shorten(repr(v))}")
        return v


def read_config(path_text: str) -> tuple[dict, dict | None, Path]:
    """(config.json, hf_quant_config.json beside it or None, the config's path) from a file or a directory."""
    import os

    p = Path(path_text)
    try:
        if p.is_dir():
            p = p / "config.json"
            if not os.path.lexists(p):
                raise SpecError(f"{shorten(path_text)}: no config.json in this directory")
    except OSError as exc:
        raise SpecError(f"{shorten(path_text)}: cannot read: {exc.strerror or exc}") from None
    config = _read_json(p)   # a FIFO, device or directory is refused by name, a missing file as "no such file"
    quant = p.parent / "hf_quant_config.json"
    return config, (_read_json(quant) if os.path.lexists(quant) else None), p


def _read_json(p: Path) -> dict:
    from rubinperf.files import read_bounded

    raw = read_bounded(p, "config", "a config.json")   # regular, at most 4 MiB: before any parsing
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise SpecError(f"{p}: malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise SpecError(f"{shorten(str(p))}: malformed JSON: {shorten(str(exc))}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: expected a JSON object (a Hugging Face config), got {type(data).__name__}")
    return data


# ---------------------------------------------------------------- quantisation


def precisions(cfg: Fields, quant_file: dict | None, moe: bool) -> dict:
    """Weight, activation and KV formats per op group: {field: (value, source)} for dense_dtype, embedding_dtype,
    expert_dtype, activation_dtype, router_dtype, and kv_bytes (bytes of one cached K or V value)."""
    bf16 = "bf16" if cfg.raw("torch_dtype", "bfloat16") != "float32" else "fp32"
    src_dtype = "config.json: torch_dtype" if cfg.has("torch_dtype") else "absent torch_dtype: bf16 assumed"
    out = {k: (bf16, src_dtype) for k in ("dense_dtype", "embedding_dtype", "expert_dtype", "activation_dtype")}
    out["router_dtype"] = ("bf16", "router kept in BF16 (quantisers exclude the gate)")
    out["kv_bytes"] = (2, "BF16 KV cache (no KV quantisation in the config)")
    q = cfg.raw("quantization_config")
    if q is None and quant_file is not None:
        q = {"quant_method": "modelopt", **(quant_file.get("quantization") or {})} \
            if isinstance(quant_file.get("quantization"), dict) else None
        where = "hf_quant_config.json: quantization"
    else:
        where = "config.json: quantization_config"
    if q is None:
        return out
    if not isinstance(q, dict):
        cfg.fail("quantization_config", f"expected an object, got {shorten(repr(q))}")
    method = q.get("quant_method")
    if method == "fp8":
        # FP8 e4m3 with 128x128 block scales (DeepSeek, Qwen FP8 releases), dynamic FP8 activations
        src = f"{where}.quant_method fp8, weight_block_size {q.get('weight_block_size')}"
        for k in ("dense_dtype", "expert_dtype", "activation_dtype"):
            out[k] = ("fp8", src)
    elif method == "mxfp4":
        # MXFP4 (e2m1 + one ue8m0 scale per 32: the fp4 format) on the MoE experts only; activations stay BF16
        out["expert_dtype"] = ("fp4", f"{where}.quant_method mxfp4: experts e2m1 + ue8m0 per 32")
        kept = q.get("modules_to_not_convert") or []
        if any("self_attn" in str(k) for k in kept):
            out["dense_dtype"] = (out["dense_dtype"][0], f"{where}.modules_to_not_convert: attention stays unquantised")
        if any("embed" in str(k) or "lm_head" in str(k) for k in kept):
            out["embedding_dtype"] = (out["embedding_dtype"][0], f"{where}.modules_to_not_convert: embedding, lm_head")
        if not moe:
            cfg.fail("quantization_config.quant_method", "mxfp4 quantises MoE experts; this model has none")
    elif method == "modelopt":
        algo = q.get("quant_algo")
        fmt = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo)
        if fmt is None:
            cfg.fail("quantization.quant_algo", f"expected FP8 or NVFP4 (ModelOpt), got {shorten(repr(algo))}")
        for k in ("dense_dtype", "expert_dtype", "activation_dtype"):
            out[k] = (fmt, f"{where}.quant_algo {algo} (weights and activations)")
        out.update(_kv(cfg, q.get("kv_cache_quant_algo"), f"{where}.kv_cache_quant_algo"))
    elif method == "compressed-tensors":
        out.update(_compressed_tensors(cfg, q, where))
    else:
        cfg.fail("quantization_config.quant_method",
                 f"unsupported {shorten(repr(method))} (known: fp8, mxfp4, modelopt, compressed-tensors)")
    return out


def _kv(cfg: Fields, algo, where: str) -> dict:
    if algo in (None, "", "null"):
        return {}
    if algo != "FP8":
        cfg.fail(where.split(": ", 1)[-1], f"expected FP8 or none, got {shorten(repr(algo))}")
    return {"kv_bytes": (1, f"{where} FP8")}


def _ct_format(cfg: Fields, scheme, key: str) -> str | None:
    """The format of one compressed-tensors scheme ({num_bits, type, group_size}): fp8, nvfp4, or None (absent)."""
    if scheme is None:
        return None
    if not isinstance(scheme, dict):
        cfg.fail(key, f"expected an object, got {shorten(repr(scheme))}")
    bits, typ = scheme.get("num_bits"), scheme.get("type")
    if typ == "float" and bits == 8:
        return "fp8"
    if typ == "float" and bits == 4 and scheme.get("group_size") == 16:
        return "nvfp4"
    cfg.fail(key, f"unsupported scheme {typ!r} {bits!r}-bit (known: float 8-bit, float 4-bit with group_size 16)")


def _compressed_tensors(cfg: Fields, q: dict, where: str) -> dict:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        cfg.fail("quantization_config.config_groups", "expected an object of quantisation groups")
    name, group = next(iter(groups.items()))
    if not isinstance(group, dict):
        cfg.fail(f"quantization_config.config_groups.{name}", "expected an object")
    key = f"quantization_config.config_groups.{name}"
    w = _ct_format(cfg, group.get("weights"), key + ".weights")
    if w is None:
        cfg.fail(key + ".weights", "missing")
    a = _ct_format(cfg, group.get("input_activations"), key + ".input_activations")
    src = f"{where} (compressed-tensors) {name}"
    out = {k: (w, src + ".weights") for k in ("dense_dtype", "expert_dtype")}
    out["activation_dtype"] = (a or "bf16", src + (".input_activations" if a else ": no input_activations: BF16"))
    kv = q.get("kv_cache_scheme")
    if kv is not None:
        if _ct_format(cfg, kv, "quantization_config.kv_cache_scheme") != "fp8":
            cfg.fail("quantization_config.kv_cache_scheme", "expected an 8-bit float KV cache")
        out["kv_bytes"] = (1, f"{where}.kv_cache_scheme FP8")
    return out


# ---------------------------------------------------------------- families


def _common(cfg: Fields) -> dict:
    rope = cfg.raw("rope_scaling")
    rope_kind = (rope.get("rope_type") or rope.get("type")) if isinstance(rope, dict) else None
    return {
        "num_layers": (cfg.layers(), "config.json: num_hidden_layers"),
        "hidden_size": (cfg.int("hidden_size"), "config.json: hidden_size"),
        "vocab_size": (cfg.int("vocab_size"), "config.json: vocab_size"),
        "max_context_tokens": (cfg.int("max_position_embeddings"), "config.json: max_position_embeddings"
                               + (f" (RoPE scaling {rope_kind}: no cost of its own)" if rope_kind else "")),
        "hc_routes": (1, "plain residual (no mHC)"),
        "hc_mix_rows": (0, "no mHC mixing"),
        "tied_embeddings": (cfg.bool("tie_word_embeddings", False), "config.json: tie_word_embeddings"
                            if cfg.has("tie_word_embeddings") else "absent tie_word_embeddings: the family default false"),
    }


def _no_indexer(layers: int) -> dict:
    none = "no lightning indexer"
    return {"indexer_layers": ((), none), "topk_layers": ((), none), "indexer_heads": (0, none),
            "indexer_head_dim": (0, none), "indexer_topk": (0, none), "index_key_bytes": (0, none),
            "indexer_dtype": ("fp8", none), "indexer_epilogue_flops_per_head": (0.0, none),
            "replay_start_layer": (layers, "no bounded replay (= num_layers)"), "replay_tokens": (0, "no bounded replay")}


def _no_engram() -> dict:
    none = "no Engram"
    return {"engram_layers": ((), none), "engram_table_bytes": (0.0, none), "engram_tables": (0, none),
            "engram_lookups_per_token": (0, none), "engram_row_bytes": (0, none), "engram_heads": (0, none),
            "engram_head_dim": (0, none), "engram_placement": ("hbm", none)}


def _no_draft() -> dict:
    none = "no MTP/draft layers"
    return {"draft_layers": (0, none), "draft_routed_experts": (0, none), "draft_experts_per_token": (0, none),
            "draft_moe_intermediate_size": (0, none), "draft_tokens": (0, none), "draft_passes": (0, none),
            "mean_accepted_tokens": (1.0, "one token per step (no speculative decoding)"),
            "draft_counts_in_total": (False, none)}


def _gqa_attention(cfg: Fields, kv_bytes: tuple) -> dict:
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.int("num_key_value_heads", default=heads)
    hidden = cfg.int("hidden_size")
    if cfg.has("head_dim"):
        hd, hd_src = cfg.int("head_dim"), "config.json: head_dim"
    else:
        if hidden % heads:
            cfg.fail("head_dim", f"missing, and hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        hd, hd_src = hidden // heads, "hidden_size / num_attention_heads (no head_dim in the config)"
    rotary = cfg.number("partial_rotary_factor", 1.0)
    if rotary > 1:
        cfg.fail("partial_rotary_factor", f"expected at most 1, got {rotary!r}")
    layers = cfg.layers()
    ratios, window, window_src = (), 0, "no sliding window"
    types = cfg.raw("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or \
                not all(t in ("sliding_attention", "full_attention") for t in types):
            cfg.fail("layer_types", f"expected {layers} entries, each sliding_attention or full_attention")
        if "sliding_attention" in types:
            ratios = tuple(0 if t == "sliding_attention" else 1 for t in types)
            window, window_src = cfg.int("sliding_window"), "config.json: sliding_window"
    elif cfg.has("sliding_window") and cfg.bool("use_sliding_window", True):
        ratios = (0,) * layers
        window, window_src = cfg.int("sliding_window"), "config.json: sliding_window (every layer)"
    b, b_src = kv_bytes
    ratio_src = ("config.json: layer_types (0 = sliding window, 1 = full)" if ratios and types is not None
                 else "every layer sliding-window" if ratios else "every layer full attention")
    kv_src = "config.json: num_key_value_heads" if cfg.has("num_key_value_heads") else \
        "absent num_key_value_heads: one per query head (MHA)"
    return {
        "attention_kind": ("gqa", f"grouped-query attention ({cfg.raw('model_type')})"),
        "num_heads": (heads, "config.json: num_attention_heads"),
        "num_kv_heads": (kv_heads, kv_src),
        "q_lora_rank": (0, "plain query projection"),
        "kv_latent_dim": (kv_heads * hd, "num_key_value_heads x head_dim (K width; V the same)"),
        "qk_head_dim": (hd, hd_src),
        "v_head_dim": (hd, hd_src),
        "qk_nope_head_dim": (0, "not MLA"),
        "mla_v_head_dim": (0, "not MLA"),
        "rope_dim": (max(1, int(hd * rotary)), "head_dim x partial_rotary_factor" if rotary < 1 else "head_dim (full RoPE)"),
        "o_groups": (0, "plain output projection"),
        "o_lora_rank": (0, "plain output projection"),
        "sliding_window_tokens": (window, window_src),
        "compress_ratios": (ratios, ratio_src),
        "kv_source_layers": ((), "every layer writes its own KV"),
        "kv_entry_bytes": (2 * kv_heads * hd * b, f"K and V: 2 x num_key_value_heads x head_dim x {b} B ({b_src})"),
        **_KV_AS_STATED,
    }


def _mla_attention(cfg: Fields, kv_bytes: tuple) -> dict:
    if cfg.raw("q_lora_rank", 0) is None:
        cfg.fail("q_lora_rank", "null (a plain query projection, as DeepSeek-V2-Lite): not supported for MLA")
    latent, rope = cfg.int("kv_lora_rank"), cfg.int("qk_rope_head_dim")
    b, b_src = kv_bytes
    return {
        "attention_kind": ("mla", "multi-head latent attention: decode absorbed (one latent head, K = V), prefill as the stack's mla_prefill_form"),
        "num_heads": (cfg.int("num_attention_heads"), "config.json: num_attention_heads"),
        "num_kv_heads": (1, "one shared latent (MLA)"),
        "q_lora_rank": (cfg.int("q_lora_rank"), "config.json: q_lora_rank"),
        "kv_latent_dim": (latent, "config.json: kv_lora_rank"),
        "qk_head_dim": (latent + rope, "kv_lora_rank + qk_rope_head_dim (absorbed key width)"),
        "v_head_dim": (latent, "kv_lora_rank (absorbed value width)"),
        "qk_nope_head_dim": (cfg.int("qk_nope_head_dim"), "config.json: qk_nope_head_dim"),
        "mla_v_head_dim": (cfg.int("v_head_dim"), "config.json: v_head_dim"),
        "rope_dim": (rope, "config.json: qk_rope_head_dim"),
        "o_groups": (0, "plain output projection"),
        "o_lora_rank": (0, "plain output projection"),
        "sliding_window_tokens": (0, "no sliding window"),
        "compress_ratios": ((), "every layer full (uncompressed) latent"),
        "kv_source_layers": ((), "every layer writes its own KV"),
        "kv_entry_bytes": ((latent + rope) * b, f"(kv_lora_rank + qk_rope_head_dim) x {b} B ({b_src})"),
        **_KV_AS_STATED,
    }


def _indexer(cfg: Fields, layers: int) -> dict:
    hd = cfg.int("index_head_dim")
    all_layers = tuple(range(layers))
    return {
        "indexer_layers": (all_layers, "every layer (DeepSeek sparse attention)"),
        "topk_layers": (all_layers, "every layer attends its indexer's top-k"),
        "indexer_heads": (cfg.int("index_n_heads"), "config.json: index_n_heads"),
        "indexer_head_dim": (hd, "config.json: index_head_dim"),
        "indexer_topk": (cfg.int("index_topk"), "config.json: index_topk"),
        "index_key_bytes": (hd + -(-hd // INDEX_SCALE_BLOCK) * 4,
                            "index_head_dim FP8 + one FP32 scale per 128 (reference Indexer key cache)"),
        "indexer_dtype": ("fp8", "FP8 index keys and queries (reference Indexer)"),
        "indexer_epilogue_flops_per_head": (INDEXER_EPILOGUE_FLOPS, "ReLU, head weight multiply-add (reference Indexer)"),
        "replay_start_layer": (layers, "no bounded replay (= num_layers)"),
        "replay_tokens": (0, "no bounded replay"),
    }


def _moe(cfg: Fields, mt: str) -> dict:
    layers = cfg.layers()
    if mt in GQA_DENSE:
        none = "dense model"
        return {"num_routed_experts": (0, none), "experts_per_token": (0, none), "moe_intermediate_size": (0, none),
                "num_shared_experts": (0, none), "first_dense_layers": (layers, "every layer dense (= num_layers)"),
                "dense_intermediate_size": (cfg.int("intermediate_size"), "config.json: intermediate_size"),
                "hash_routed_layers": (0, "no hash routing")}
    first, first_src, shared, shared_src = 0, "every layer MoE", 0, "no shared expert"
    if mt == "qwen3_moe":
        E, E_src, inter, inter_src = cfg.int("num_experts"), "num_experts", cfg.int("moe_intermediate_size"), \
            "moe_intermediate_size"
        dense_only = cfg.raw("mlp_only_layers") or []
        if cfg.int("decoder_sparse_step", default=1) != 1 or dense_only:
            cfg.fail("mlp_only_layers" if dense_only else "decoder_sparse_step",
                     "dense layers between MoE layers are not supported (expected every layer MoE)")
    elif mt in ("mixtral", "gpt_oss"):
        E, E_src, inter, inter_src = cfg.int("num_local_experts"), "num_local_experts", cfg.int("intermediate_size"), \
            "intermediate_size"
    else:
        E, E_src, inter, inter_src = cfg.int("n_routed_experts"), "n_routed_experts", cfg.int("moe_intermediate_size"), \
            "moe_intermediate_size"
        shared, shared_src = cfg.int("n_shared_experts", default=0, positive=False), "config.json: n_shared_experts"
        first, first_src = cfg.int("first_k_dense_replace", default=0, positive=False), "config.json: first_k_dense_replace"
        if cfg.int("moe_layer_freq", default=1) != 1:
            cfg.fail("moe_layer_freq", "expected 1 (dense layers between MoE layers are not supported)")
        if first > layers:
            cfg.fail("first_k_dense_replace", f"expected at most num_hidden_layers ({layers})")
    return {
        "num_routed_experts": (E, f"config.json: {E_src}"),
        "experts_per_token": (cfg.int("num_experts_per_tok"), "config.json: num_experts_per_tok"),
        "moe_intermediate_size": (inter, f"config.json: {inter_src}"),
        "num_shared_experts": (shared, shared_src),
        "first_dense_layers": (first, first_src),
        "dense_intermediate_size": ((cfg.int("intermediate_size") if first else 0),
                                    "config.json: intermediate_size" if first else "no dense layers"),
        "hash_routed_layers": (0, "no hash routing"),
    }


def _mtp(cfg: Fields, moe: dict) -> dict:
    n = cfg.layers("num_nextn_predict_layers", default=0, positive=False)
    if not n:
        return _no_draft()
    src = "config.json: num_nextn_predict_layers"
    return {"draft_layers": (n, src), "draft_routed_experts": (moe["num_routed_experts"][0], "as the main layers"),
            "draft_experts_per_token": (moe["experts_per_token"][0], "as the main layers"),
            "draft_moe_intermediate_size": (moe["moe_intermediate_size"][0], "as the main layers"),
            "draft_tokens": (n, "one drafted token per MTP layer"), "draft_passes": (1, "one MTP forward per step"),
            "mean_accepted_tokens": (min(MTP_ACCEPTED_TOKENS, n + 1), "ASSUMPTION: the DeepSeek-V3 report's 85-90% "
                                     "acceptance of the second token (arXiv 2412.19437), 1.85 tokens per step"),
            "draft_counts_in_total": (False, "published totals exclude the MTP module (DeepSeek-V3 README)")}


def spec_fields_from_config(cfg: Fields, quant_file: dict | None) -> dict:
    """{field: (value, source)} for every model spec field, from the config's family."""
    mt = cfg.raw("model_type")
    if not isinstance(mt, str):
        cfg.fail("model_type", "missing (a string naming the architecture family)")
    if mt not in FAMILIES:
        hint = " (use a bundled TOML spec: rubinperf list models)" if mt.startswith("deepseek_v4") else ""
        cfg.fail("model_type", f"unsupported {shorten(repr(mt))}{hint}; known: {', '.join(FAMILIES)}")
    moe = mt not in GQA_DENSE
    prec = precisions(cfg, quant_file, moe)
    kv = prec.pop("kv_bytes")
    fields = _common(cfg)
    fields.update({k: prec[k] for k in ("dense_dtype", "embedding_dtype")})
    layers = fields["num_layers"][0]
    fields.update(_mla_attention(cfg, kv) if mt in MLA else _gqa_attention(cfg, kv))
    fields.update(_indexer(cfg, layers) if mt == "deepseek_v32" else _no_indexer(layers))
    m = _moe(cfg, mt)
    fields.update(m)
    fields.update({k: prec[k] for k in ("expert_dtype", "activation_dtype", "router_dtype")})
    fields.update(_no_engram())
    fields.update(_mtp(cfg, m) if mt in MLA and moe else _no_draft())
    return fields


# The cache as kv_entry_bytes states it (no format set: `--set model.kv_cache_dtype=fp8` derives another).
_KV_AS_STATED = {"kv_cache_dtype": ("", "the entry as kv_entry_bytes states it"),
                 "kv_cache_formats": ((), "no packed entry formats"), "kv_cache_format_bytes": ((), "")}


def _document(cls, fields: dict, name: str, description: str, cited: str) -> tuple[dict, dict]:
    """The TOML document (tables with their `source`) a spec file of these fields holds, and its comments."""
    data: dict = {"name": name, "description": description}
    comments = {}
    for f in spec_fields(cls):
        table = data.setdefault(f.metadata["section"], {"source": cited})
        value, src = fields[f.name]
        table[f.name] = list(value) if isinstance(value, tuple) else value
        comments[f.name] = src
    return data, comments


def _describe(fields: dict, mt: str) -> str:
    experts = fields["num_routed_experts"][0]
    ffn = f"{experts} experts top-{fields['experts_per_token'][0]}" if experts else "dense FFN"
    return (f"{mt}: {fields['num_layers'][0]} layers, hidden {fields['hidden_size'][0]}, "
            f"{fields['attention_kind'][0]} attention ({fields['num_heads'][0]} heads), {ffn}")


def model_from_config(cls, path_text: str, name: str | None = None):
    """The model spec (of class `cls`, specs.model.Model) a Hugging Face config.json (a file, or a directory
    holding one) describes."""
    data, _, path = config_document(cls, path_text, name)
    return build_spec(cls, data, path)


def config_name(config: dict, path: Path) -> str:
    """The name of the model a config.json describes: its `_name_or_path` (the last part: "Llama-3.1-70B"),
    else the file's stem when it is not the generic "config", else `model_type` and the first architecture
    ("llama-LlamaForCausalLM"); never the folder, which two configs side by side share."""
    import re

    def clean(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:100]

    given = config.get("_name_or_path")
    if isinstance(given, str) and clean(given.rstrip("/").rsplit("/", 1)[-1]):
        return clean(given.rstrip("/").rsplit("/", 1)[-1])
    if path.stem != "config" and clean(path.stem):
        return clean(path.stem)
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    return clean("-".join(x for x in (str(config.get("model_type") or ""), arch) if x)) or "model"


def config_document(cls, path_text: str, name: str | None = None, cited: str | None = None) -> tuple[dict, dict, Path]:
    """The spec document a config describes, the source of each field, and the config's path."""
    config, quant_file, p = read_config(path_text)
    cfg = Fields(config, str(p))
    fields = spec_fields_from_config(cfg, quant_file)
    label = name or config_name(config, p)
    cited = cited or f"config.json read from {p}"
    data, comments = _document(cls, fields, label, _describe(fields, config["model_type"]), cited)
    return data, comments, p


def import_toml(cls, path_text: str, name: str, cited: str | None = None) -> str:
    """A model spec TOML (of class `cls`) from a config.json: each field with its source as a comment on its line."""
    data, comments, path = config_document(cls, path_text, name, cited)
    build_spec(cls, data, path)   # the spec must load before it is written
    lines = [f"name = {_toml_value(data['name'])}", f"description = {_toml_value(data['description'])}"]
    section = None
    for f in spec_fields(cls):
        if f.metadata["section"] != section:
            section = f.metadata["section"]
            lines += ["", f"[{section}]", f"source = {_toml_value(data[section]['source'])}"]
        v = data[section][f.name]
        note = " ".join(comments[f.name].split())
        lines.append(f"{f.name} = {_toml_value(tuple(v) if isinstance(v, list) else v)}  # {note}")
    return "\n".join(lines) + "\n"
