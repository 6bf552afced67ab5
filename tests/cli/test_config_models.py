"""A Hugging Face config.json on the command line: estimate, compare and pareto take one of each family; bad and
mutated configs end as one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import random
import sys
from pathlib import Path

import pytest


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "specs"))
from test_hfconfig import DEEPSEEK, GPT_OSS, LLAMA, QWEN_MOE, V32  # noqa: E402

from rubinperf.cli import main  # noqa: E402

# Synthetic configs of serving size (so TP8 divides heads, K/V heads and expert widths).
BIG = {
    "llama": {**LLAMA, "max_position_embeddings": 131072, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "num_hidden_layers": 4},
    "qwen3_moe": {**QWEN_MOE, "max_position_embeddings": 40960, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
                  "head_dim": 128, "num_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "vocab_size": 151936, "num_hidden_layers": 4},
    "gpt_oss": {**GPT_OSS, "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                "num_local_experts": 32, "num_experts_per_tok": 4, "intermediate_size": 2880, "sliding_window": 128,
                "num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2},
    "deepseek_v3": {**DEEPSEEK, "hidden_size": 2048, "num_attention_heads": 16, "q_lora_rank": 512,
                    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "n_routed_experts": 64, "moe_intermediate_size": 1408, "intermediate_size": 10944},
    "deepseek_v32": {**V32, "hidden_size": 2048, "num_attention_heads": 16, "q_lora_rank": 512,
                     "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                     "n_routed_experts": 64, "moe_intermediate_size": 1408, "intermediate_size": 10944,
                     "index_n_heads": 16, "index_topk": 256},
}


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _config(tmp_path, cfg, name="config.json"):
    d = tmp_path / f"cfg{random.random():.12f}"
    d.mkdir()
    (d / name).write_text(json.dumps(cfg))
    return d / name


@pytest.mark.parametrize("family", sorted(BIG))
def test_estimate_takes_a_config_of_each_family(tmp_path, family):
    path = _config(tmp_path, BIG[family])
    code, out, err = _run(["estimate", "-m", str(path), "-H", "h200", "-l", "tp8", "--json"])
    assert code == 0, err
    recs = json.loads(out)
    assert recs and all(r["step_time_ms"] > 0 and r["tokens_per_s_per_gpu"] > 0 for r in recs)
    code, _, err = _run(["estimate", "-m", str(path.parent), "-H", "h200", "-l", "tp8", "--json"])   # the directory
    assert code == 0, err


def test_compare_and_pareto_take_a_config(tmp_path):
    path = str(_config(tmp_path, BIG["qwen3_moe"]))
    code, out, err = _run(["compare", "-m", path, "--json"])
    assert code == 0, err
    assert json.loads(out)
    code, out, err = _run(["pareto", "-m", path, "-H", "h200", "--json", "--max-batch", "64"])
    assert code == 0, err
    assert json.loads(out)


def test_gqa_kv_heads_split_over_tp_until_one_per_rank(tmp_path):
    """Per-rank KV: 8 K/V heads over TP2 -> 4 per rank, over TP8 -> 1: the attention's KV bytes fall 4x."""
    from rubinperf.specs.model import load_model as _load
    model_from_config = _load
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.stack import load_platform
    from rubinperf.step.graph import build_step
    from rubinperf.step.point import make_point

    m = model_from_config(str(_config(tmp_path, BIG["llama"])))
    hw = load_platform("h200")

    def kv(layout):
        lay = parse_layout(layout)
        ops = build_step(m, lay, make_point(m, hw, lay, phase="decode", batch=4, context=8192))
        return sum(o.cost.kv_bytes * o.repeat for o in ops if o.name.startswith("attention"))

    assert kv("tp2") == pytest.approx(4 * kv("tp8"))


MUTATIONS = [None, "x", -1, 0, 1, 3, 2 ** 62, 10 ** 400, 1.5, float("nan"), [], {}, True]


def test_mutated_configs_fail_in_one_line(tmp_path):
    """Every field of every family's config set to each odd value: a model or a one-line SpecError, never another
    exception; a sample of them run through `estimate` end in exit status 0 or 2 with at most one line on stderr."""
    from rubinperf.errors import SpecError
    from rubinperf.specs.model import load_model as _load
    model_from_config = _load

    rng = random.Random(7)
    cases = []
    for family, cfg in BIG.items():
        for key in cfg:
            for value in MUTATIONS:
                bad = {**cfg, key: value} if value is not None else {k: v for k, v in cfg.items() if k != key}
                cases.append(bad)
    cases += [[1, 2], "text", {"model_type": 5}]
    for bad in cases:
        try:
            text = json.dumps(bad)
        except ValueError:
            continue
        d = tmp_path / f"m{rng.random():.12f}"
        d.mkdir()
        (d / "config.json").write_text(text)
        try:
            model_from_config(str(d))
        except SpecError as exc:
            assert "\n" not in str(exc)
    for bad in rng.sample(cases[:-3], 40):
        path = _config(tmp_path, bad)
        code, _, err = _run(["estimate", "-m", str(path), "-H", "h200", "-l", "tp8"])
        assert code in (0, 2), err
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err


@pytest.mark.parametrize("text", ["{", "", "\xff", "[]", "{\"model_type\": \"llama\"}"])
def test_broken_files_exit_2(tmp_path, text):
    p = tmp_path / "config.json"
    p.write_bytes(text.encode("latin-1"))
    code, _, err = _run(["estimate", "-m", str(p)])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_model_import_writes_the_spec(tmp_path):
    out = tmp_path / "m.toml"
    code, _, err = _run(["model", "import", str(_config(tmp_path, BIG["gpt_oss"])), "-o", str(out)])
    assert code == 0, err
    assert 'name = "m"' in out.read_text() and "# config.json: num_key_value_heads" in out.read_text()
    code, out_text, err = _run(["estimate", "-m", str(out), "-H", "h200", "-l", "tp1", "--json"])
    assert code == 0, err
