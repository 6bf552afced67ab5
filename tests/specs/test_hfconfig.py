"""Model specs from Hugging Face config.json files: each family from a small synthetic config (counts by hand),
the bundled models against their published totals, KV bytes per token by hand, quantisation, import round trip,
and one-line errors."""

from __future__ import annotations

import json

import pytest

from rubinperf.errors import SpecError
from rubinperf.specs.hfconfig import import_toml as _import_toml, model_from_config as _from_config
from rubinperf.specs.layout import Layout
from rubinperf.specs.loader import build_spec, read_toml
from rubinperf.specs.model import Model, load_model


def model_from_config(path, name=None):
    return _from_config(Model, path, name)


def import_toml(path, name):
    return _import_toml(Model, path, name)
from rubinperf.step.architecture import parameter_counts
from rubinperf.step.capacity import kv_bytes_per_request, kv_bytes_per_token, kv_rank_share, weight_bytes_per_rank

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 100,
         "max_position_embeddings": 4096, "num_attention_heads": 8, "num_key_value_heads": 2,
         "intermediate_size": 96, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
QWEN_MOE = {**LLAMA, "model_type": "qwen3_moe", "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "decoder_sparse_step": 1, "mlp_only_layers": []}
GPT_OSS = {**LLAMA, "model_type": "gpt_oss", "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
           "intermediate_size": 32, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"],
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}}
DEEPSEEK = {"model_type": "deepseek_v3", "num_hidden_layers": 3, "hidden_size": 64, "vocab_size": 100,
            "max_position_embeddings": 4096, "num_attention_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 8,
            "qk_rope_head_dim": 4, "qk_nope_head_dim": 6, "v_head_dim": 5, "n_routed_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 12, "n_shared_experts": 1, "first_k_dense_replace": 1,
            "intermediate_size": 40, "num_nextn_predict_layers": 1,
            "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
V32 = {**DEEPSEEK, "model_type": "deepseek_v32", "index_n_heads": 4, "index_head_dim": 128, "index_topk": 32}


def _write(tmp_path, cfg, name="config.json", quant=None):
    d = tmp_path / cfg["model_type"]
    d.mkdir(exist_ok=True)
    (d / name).write_text(json.dumps(cfg))
    if quant is not None:
        (d / "hf_quant_config.json").write_text(json.dumps(quant))
    return d


def test_dense_gqa_counts_by_hand(tmp_path):
    m = model_from_config(str(_write(tmp_path, LLAMA)))
    # per layer: q 64x64 + k,v 2 x 64x(2x8) + o 64x64 = 10,240; MLP 3 x 64 x 96 = 18,432; embeddings 2 x 100 x 64
    assert parameter_counts(m)["total_params"] == 2 * (10_240 + 18_432) + 12_800
    assert parameter_counts(m)["active_params"] == 2 * (10_240 + 18_432) + 6_400   # the look-up table left out
    assert m.attention_kind == "gqa" and m.num_kv_heads == 2 and m.qk_head_dim == 8
    assert kv_bytes_per_token(m) == 2 * 2 * 2 * 8 * 2      # layers x (K, V) x kv heads x head dim x BF16
    assert kv_rank_share(m, Layout("tp", 2)) == 0.5 and kv_rank_share(m, Layout("tp", 8)) == 0.5  # >= one head
    assert kv_rank_share(m, Layout("dep", 8)) == 1.0


def test_tied_embeddings_store_one_matrix(tmp_path):
    m = model_from_config(str(_write(tmp_path, {**LLAMA, "tie_word_embeddings": True})))
    assert parameter_counts(m)["total_params"] == 2 * (10_240 + 18_432) + 6_400
    untied = model_from_config(str(_write(tmp_path, {**LLAMA, "model_type": "qwen2"})))
    w, wu = weight_bytes_per_rank(m, Layout("tp", 1)), weight_bytes_per_rank(untied, Layout("tp", 1))
    assert wu["embedding + LM head"] - w["embedding + LM head"] == 100 * 64 * 2


def test_moe_gqa_counts_by_hand(tmp_path):
    m = model_from_config(str(_write(tmp_path, QWEN_MOE)))
    # head_dim 16: q 64x128, k,v 2 x 64x32, o 128x64 = 20,480; experts 8 x 3 x 64 x 32 = 49,152; router 64 x 8
    per_layer = 20_480 + 49_152 + 512
    assert parameter_counts(m)["total_params"] == 2 * per_layer + 12_800
    assert parameter_counts(m)["active_params"] == 2 * (20_480 + 2 * 3 * 64 * 32 + 512) + 6_400


def test_gpt_oss_windows_and_mxfp4(tmp_path):
    m = model_from_config(str(_write(tmp_path, GPT_OSS)))
    assert m.compress_ratios == (0, 1) and m.sliding_window_tokens == 16
    assert (m.expert_dtype, m.dense_dtype, m.activation_dtype) == ("fp4", "bf16", "bf16")
    entry = 2 * 2 * 8 * 2                                     # one layer's K and V: 2 heads x 8 dims x BF16
    assert kv_bytes_per_token(m) == entry                     # only the full layer grows with the context
    assert kv_bytes_per_request(m, 1000) == entry * 1000 + entry * 16   # the window layer holds 16 tokens


def test_mla_family_counts_by_hand(tmp_path):
    m = model_from_config(str(_write(tmp_path, DEEPSEEK)))
    att = 64 * 16 + 16 * 4 * (6 + 4) + 64 * (8 + 4) + 8 * 4 * (6 + 5) + 4 * 5 * 64   # 4,000
    moe = 9 * 3 * 64 * 12 + 64 * 8                             # 8 routed + 1 shared experts, router
    dense = 3 * 64 * 40
    assert parameter_counts(m)["total_params"] == 3 * att + dense + 2 * moe + 12_800
    assert m.draft_layers == 1 and m.mean_accepted_tokens == 1.85
    assert m.kv_entry_bytes == (8 + 4) * 2 and kv_bytes_per_token(m) == 3 * 12 * 2
    assert (m.dense_dtype, m.expert_dtype, m.activation_dtype, m.router_dtype) == ("fp8", "fp8", "fp8", "bf16")


def test_v32_indexer(tmp_path):
    m = model_from_config(str(_write(tmp_path, V32)))
    assert m.indexer_layers == (0, 1, 2) == m.topk_layers and m.indexer_topk == 32
    assert m.index_key_bytes == 128 + 4                        # FP8 key + one FP32 scale per 128
    assert kv_bytes_per_token(m) == 3 * (24 + 132)
    plain = model_from_config(str(_write(tmp_path, DEEPSEEK)))
    extra = 16 * 4 * 128 + 64 * 128 + 64 * 4                   # wq_b, wk, weights_proj per layer
    assert parameter_counts(m)["total_params"] - parameter_counts(plain)["total_params"] == 3 * extra


def test_modelopt_nvfp4_with_fp8_kv(tmp_path):
    d = _write(tmp_path, QWEN_MOE, quant={"producer": {"name": "modelopt"},
                                          "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}})
    m = model_from_config(str(d))
    assert (m.dense_dtype, m.expert_dtype, m.activation_dtype) == ("nvfp4",) * 3
    assert m.kv_entry_bytes == 2 * 2 * 16 * 1


def test_compressed_tensors_fp8(tmp_path):
    q = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8, "type": "float"}}},
        "kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    m = model_from_config(str(_write(tmp_path, {**LLAMA, "quantization_config": q}) / "config.json"))
    assert (m.dense_dtype, m.activation_dtype, m.kv_entry_bytes) == ("fp8", "fp8", 2 * 2 * 8)


@pytest.mark.parametrize("cfg", [LLAMA, QWEN_MOE, GPT_OSS, DEEPSEEK, V32])
def test_import_writes_a_spec_that_loads_back_equal(tmp_path, cfg):
    d = _write(tmp_path, cfg)
    text = import_toml(str(d), "x")
    body = [line for line in text.splitlines() if " = " in line and not line.startswith(("name", "description", "source"))]
    assert body and all("  # " in line for line in body)          # every field carries its source
    assert "num_hidden_layers" in text
    out = tmp_path / "x.toml"
    out.write_text(text)
    assert build_spec(Model, read_toml(out), out) == model_from_config(str(d), "x")


@pytest.mark.parametrize("change, words", [
    ({"model_type": "bert"}, ["model_type", "unsupported"]),
    ({"model_type": "deepseek_v4"}, ["model_type", "bundled"]),
    ({"num_key_value_heads": 3}, ["num_kv_heads"]),
    ({"num_hidden_layers": None}, ["num_hidden_layers", "missing"]),
    ({"hidden_size": "64"}, ["hidden_size", "integer"]),
    ({"num_attention_heads": 0}, ["num_attention_heads", "positive"]),
    ({"quantization_config": {"quant_method": "gptq"}}, ["quant_method", "gptq"]),
])
def test_bad_configs_name_the_field(tmp_path, change, words):
    cfg = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    with pytest.raises(SpecError) as e:
        model_from_config(str(_write(tmp_path, cfg)))
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words)


def test_a_directory_without_a_config(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_model(str(tmp_path) + "/config.json")


# ---------------------------------------------------------------- the bundled models against published figures

# (total, active) hand-derived from the configs (matrices only: norms, biases and sink scalars left out), and the
# published figure each is compared with, at 1%.
BUNDLED = {
    # Llama-3.1-70B: 80 x (150,994,944 attention + 704,643,072 MLP) + 2 x 128,256 x 8,192; HF "70.6B params"
    # (the checkpoint adds 1,318,912 norm weights: 70,553,706,496)
    "llama-3.1-70b": (70_552_387_584, 70.6e9, None),
    # Llama-3.1-8B: 32 x (41,943,040 attention + 176,160,768 MLP) + 2 x 128,256 x 4,096; HF "8.03B params"
    # (the checkpoint adds 266,240 norm weights: 8,030,261,248)
    "llama-3.1-8b": (8_029_995_008, 8.03e9, None),
    # Llama-3.1-405B: 126 x (16384^2 x 2 + 2 x 16384 x 1024 + 3 x 16384 x 53248) + 2 x 128,256 x 16,384; HF "406B"
    "llama-3.1-405b": (405_849_243_648, 406e9, None),
    # Qwen3 technical report: 235B total, 22B activated (active here excludes the embedding table: 21.57B, -2.0%;
    # the report's rounding: compared at 3%)
    "qwen3-235b-a22b": (235_092_836_352, 235e9, 22e9),
    # gpt-oss model card: 116.83B total, 5.13B active (embedding excluded, as here)
    "gpt-oss-120b": (116_788_838_400, 116.83e9, 5.13e9),
    # DeepSeek-V3 report: 671B total (MTP excluded), 37B activated
    "deepseek-r1": (671_025_397_760, 671e9, 37e9),
    # Kimi K2 model card: "1T total, 32B activated", rounded figures; compared with the config-derived 1.026T exactly
    "kimi-k2": (1_026_407_202_816, 1.026e12, 32e9),
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_parameter_counts(name):
    exact, published_total, published_active = BUNDLED[name]
    pc = parameter_counts(load_model(name))
    assert pc["total_params"] == exact
    assert abs(pc["total_params"] / published_total - 1) < 0.01
    if published_active:
        assert abs(pc["active_params"] / published_active - 1) < 0.03   # published active figures are rounded


@pytest.mark.parametrize("name, per_token", [
    ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2),       # 327,680
    ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),        # 131,072
    ("llama-3.1-405b", 2 * 126 * 8 * 128 * 2),     # 516,096
    ("qwen3-235b-a22b", 2 * 94 * 4 * 128 * 2),     # 192,512
    ("gpt-oss-120b", 2 * 18 * 8 * 64 * 2),         # 36,864: the 18 full layers; the 18 window layers hold 128 tokens
    ("deepseek-r1", 61 * 576 * 2),                 # 70,272
    ("kimi-k2", 61 * 576 * 2),
])
def test_bundled_kv_bytes_per_token(name, per_token):
    assert kv_bytes_per_token(load_model(name)) == per_token


def test_bundled_specs_are_the_research_configs_imported():
    """Each bundled spec cites its config by repository and commit in every table."""
    for name in BUNDLED:
        m = load_model(name)
        assert all("ai-dynamo/aiconfigurator" in s and "commit" in s for s in m.sources.values()), name


def test_deepseek_r1_config_matches_the_hand_written_v3_spec():
    r1, v3 = load_model("deepseek-r1"), load_model("deepseek-v3")
    import dataclasses

    differ = {f.name for f in dataclasses.fields(Model) if getattr(r1, f.name) != getattr(v3, f.name)}
    assert differ == {"name", "description", "max_context_tokens", "path", "sources"}   # 160K context in the R1 config


def test_a_cache_that_keeps_window_layers_whole_holds_the_sequence_on_them():
    """gpt-oss-120b at 2,000 tokens: 18 full layers x 2,048 B a token (K and V, 8 heads x 64, BF16) hold every token;
    the 18 window layers hold 128 tokens each (4.72 MB), or, on a stack whose cache keeps them whole (TensorRT-LLM's
    V1 cache manager), all 2,000 (73.7 MB), as the full layers do."""
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.stack import load_platform
    from rubinperf.step.capacity import capacity

    m = load_model("gpt-oss-120b")
    assert kv_bytes_per_request(m, 2000) == 18 * 2048 * 2000 + 18 * 2048 * 128
    assert kv_bytes_per_request(m, 2000, window_whole_sequence=True) == 36 * 2048 * 2000
    lay = parse_layout("tp1")
    per_request = {name: capacity(m, load_platform("h200", name), lay, "decode", 2000, 1, 1, 0.0).kv_bytes_per_request
                   for name in ("trtllm-hopper", "pytorch-2.11")}
    assert per_request == {"trtllm-hopper": 36 * 2048 * 2000, "pytorch-2.11": 18 * 2048 * 2128}
