"""A seeded fuzz of the edges of every input: each command and option with out-of-range, denormal,
huge, negative, non-finite and malformed values, and --set on every numeric spec field.

Every run ends in exit 0 or 2 with one stderr line, never a traceback or an 'internal error', within
10 s of CPU; a --json run prints no absurd number (non-finite, denormal, or beyond 1e30 in magnitude,
and no zero or negative throughput). The cases are drawn from a fixed seed (RUBINPERF_EDGE_SEED changes
it, RUBINPERF_EDGE_CASES the count), so a failure reproduces.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from test_fuzz import check_clean, run_cli
from conftest import REPO

SEED = int(os.environ.get("RUBINPERF_EDGE_SEED", "20261125"))
CASES = int(os.environ.get("RUBINPERF_EDGE_CASES", "90"))
CPU_LIMIT_S = 10.0

VALUES = ["0", "-1", "1e-320", "5e-324", "1e300", "1e308", "2147483648", "9" * 40, "nan", "inf", "-inf", "", " ",
          "1e", "12Q", "30", "20ms", "+20%", "x1e300", "-100%", "*0", "1K", "1M", "0.5", "1", "3", "ü", "$x^$",
          "1e-15", "0x10", "1_000"]
# (command argv, options that take a value) per command; sweeps are kept small so the fuzz stays fast.
COMMANDS = {
    ("estimate", "-H", "vr-nvl72"): ["--batch", "--context", "--new-tokens", "--draft-tokens", "--acceptance",
                                     "--balancedness", "--layout", "--phase"],
    ("pareto", "-H", "vr-nvl72", "-l", "dep32", "--max-batch", "8", "--no-chart"): [
        "--ttft", "--tpot", "--total-gpus", "--isl", "--osl", "--prefix-hit", "--draft-tokens", "--acceptance",
        "--rows", "--interactivity-stat"],
    ("compare", "-l", "dep32", "--max-batch", "8", "--kernels", "1"): [
        "--at-interactivity", "--ttft", "--tpot", "--total-gpus", "--isl", "--osl", "--prefix-hit"],
    ("explain", "megamoe"): ["--batch", "--context", "--acceptance"],
    ("kernel", "gemm", "--m", "16", "--n", "4096", "--k", "7168"): ["--m", "--n", "--k", "--dtype"],
    ("kernel", "copy"): ["--bytes"],
    ("serve", "-H", "vr-nvl72", "-l", "tp8"): ["--concurrency", "--isl", "--osl", "--random-range-ratio",
                                              "--prefix-hit", "--turn-gap", "--draft-tokens", "--acceptance",
                                              "--request-rate", "--burstiness", "--percentiles", "--goodput",
                                              "--prefill-layout", "--prefill-instances"],
    ("kernel", "attention", "--batch", "4", "--heads", "64", "--q-len", "1", "--kv-len", "4096",
     "--head-dim", "512"): ["--kv-len", "--heads", "--batch"],
}


def _set_fields() -> list[str]:
    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import numeric_fields
    from rubinperf.specs.model import Model
    from rubinperf.specs.stack import Stack

    return ([f"hardware.{n}" for n in numeric_fields(Hardware)] + [f"stack.{n}" for n in numeric_fields(Stack)]
            + [f"model.{n}" for n in numeric_fields(Model)])


def _cases() -> list[list[str]]:
    rng = random.Random(SEED)
    fields = _set_fields()
    out = []
    for _ in range(CASES):
        base, opts = rng.choice(list(COMMANDS.items()))
        argv = list(base)
        if rng.random() < 0.5:
            argv += [rng.choice(opts), rng.choice(VALUES)]
        else:
            field = rng.choice(fields)
            key = field if rng.random() < 0.5 else field.split(".", 1)[1]
            argv += ["--set", f"{key}={rng.choice(VALUES)}"]
        if rng.random() < 0.6:
            argv.append("--json")
        out.append(argv)
    return out


def absurd(value, key="") -> str:
    """Why a number in a --json record is absurd ('' when it is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return f"{key} = {v}"
    if v and abs(v) < 1e-200:
        return f"{key} = {v!r} (denormal)"
    if abs(v) > 1e30:
        return f"{key} = {v:g} (beyond 1e30)"
    if key.startswith("tokens_per_s") and v <= 0:
        return f"{key} = {v:g} (no throughput)"
    return ""


def _walk(obj, key=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v, key)
    else:
        yield key, obj


@pytest.mark.parametrize("argv", _cases(), ids=lambda a: " ".join(a)[:80])
def test_edge(capsys, argv):
    t = time.process_time()
    r = run_cli(capsys, argv)
    cpu = time.process_time() - t
    assert cpu <= CPU_LIMIT_S, f"{cpu:.1f} s of CPU: {r}"
    culprits = [a for a in argv if a.startswith("-")] + [a.split("=")[0].rpartition(".")[2] for a in argv if "=" in a]
    culprits += [a for a in argv if not a.startswith("-")]
    check_clean(r, culprits)
    if r.code == 0 and "--json" in argv:
        def refuse(constant):
            raise AssertionError(f"non-finite {constant} in JSON: {r}")

        data = json.loads(r.out, parse_constant=refuse)
        bad = [why for k, v in _walk(data) if (why := absurd(v, k))]
        if "eligible" in r.out:   # pareto: only points that fit and meet the limits carry figures to check
            data = [x for x in data if x.get("eligible", True)]
            bad = [why for k, v in _walk(data) if (why := absurd(v, k))]
        assert not bad, f"absurd numbers {bad[:5]}: {r}"


# ------------------------------------------------------------------ config.json and file sizes

CONFIG_BASES = {
    "llama": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "vocab_size": 1000,
              "max_position_embeddings": 8192, "num_attention_heads": 8, "num_key_value_heads": 2,
              "intermediate_size": 512},
    "gpt_oss": {"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 256, "vocab_size": 1000,
                "max_position_embeddings": 8192, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 256, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"]},
    "deepseek_v32": {"model_type": "deepseek_v32", "num_hidden_layers": 4, "hidden_size": 256, "vocab_size": 1000,
                     "max_position_embeddings": 8192, "num_attention_heads": 8, "q_lora_rank": 64,
                     "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
                     "index_head_dim": 64, "index_n_heads": 4, "index_topk": 64, "n_routed_experts": 16,
                     "num_experts_per_tok": 2, "moe_intermediate_size": 64, "intermediate_size": 512,
                     "first_k_dense_replace": 1, "num_nextn_predict_layers": 1},
}
CONFIG_VALUES = [0, -1, 1, 3, 10 ** 4, 10 ** 4 + 1, 10 ** 9, 2 ** 63, 10 ** 400, 1.5, float("nan"), "8", None, [],
                 ["full_attention"] * 3, {"x": 1}, True, 1e308]


def _config_cases() -> list[tuple[str, dict]]:
    rng = random.Random(SEED + 35)
    out = []
    for _ in range(CASES // 3):
        base = rng.choice(sorted(CONFIG_BASES))
        cfg = dict(CONFIG_BASES[base])
        for _ in range(rng.choice([1, 1, 2])):
            key = rng.choice(sorted(cfg) + ["num_hidden_layers", "num_nextn_predict_layers", "layer_types"])
            cfg[key] = rng.choice(CONFIG_VALUES)
        out.append((base, {k: v for k, v in cfg.items() if v is not None}))
    return out


def _json_text(cfg: dict) -> str:
    import sys

    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    return json.dumps(cfg)


@pytest.mark.parametrize("base, cfg", _config_cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_config_edge(capsys, tmp_path, base, cfg):
    """A small config.json with an edge value in a count (a billion layers, 400 digits, a wrong type): exit 0
    or one line naming the field, within 1 s of CPU (no per-layer structure is built before the bound)."""
    path = tmp_path / "config.json"
    path.write_text(_json_text(cfg))
    argv = ["estimate", "-m", str(path), "-H", "h200", "-l", "tp8", "--json"]
    t = time.process_time()
    r = run_cli(capsys, argv)
    cpu = time.process_time() - t
    assert cpu <= 1.0, f"{cpu:.1f} s of CPU: {r}"
    check_clean(r, sorted(cfg) + [str(path), "config.json", "--context", "--batch", "tp8", "h200", "layout"])


@pytest.mark.parametrize("kind, flag, extra", [("hardware", "-H", 0), ("hardware", "-H", 1), ("models", "-m", 1),
                                               ("examples", "-w", 1), ("models", "-m", 40)])
def test_spec_size_edge(capsys, tmp_path, kind, flag, extra):
    """A spec file at its size limit plus `extra` MiB of comment: refused by size, before parsing, within 1 s."""
    from rubinperf.files import READ_LIMIT_BYTES

    src = sorted((REPO / kind).glob("*.toml"))[0]
    path = tmp_path / src.name
    body = src.read_bytes()
    pad = READ_LIMIT_BYTES["spec"] - len(body) - 1 + extra * 2 ** 20 + (1 if extra else 0)
    with open(path, "wb") as fh:
        fh.write(body + b"#" * pad + b"\n")
    argv = (["pareto", flag, str(path), "-l", "dep32", "--max-batch", "8", "--no-chart", "--json"] if flag == "-w"
            else ["estimate", flag, str(path), "--json"])
    t = time.process_time()
    r = run_cli(capsys, argv)
    assert time.process_time() - t <= 1.0 + (0 if extra else 9.0), r
    if extra:
        assert r.code == 2 and "MiB limit" in r.err, r
    check_clean(r, [str(path), src.name])
