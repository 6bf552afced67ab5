"""What a user sees: parameter counts for any model, a config.json named after its model,
output to a pipe without trailing spaces, op names from the model and the stack, precision options, partial
results, bundled CSV names from any directory, and tables at 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

LLAMA_8B = {"_name_or_path": "meta-llama/Llama-3.1-8B", "model_type": "llama", "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": 32, "hidden_size": 4096, "vocab_size": 128256, "max_position_embeddings": 131072,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "torch_dtype": "bfloat16"}


def rubinperf(*argv, columns=100, cwd=REPO):
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "rubinperf", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_piped_tables_have_no_trailing_spaces():
    for argv in (["estimate"], ["estimate", "-H", "vr-nvl72", "-l", "dep32", "--breakdown"], ["list", "stacks"],
                 ["serve", "-c", "64"]):
        out = rubinperf(*argv)
        assert out.returncode == 0, out.stderr
        bad = [line for line in out.stdout.splitlines() if line.endswith(" ")]
        assert not bad, (argv, bad[:3])


def test_parameter_counts_are_shown_for_any_model(cli, tmp_path):
    from rubinperf.specs.model import load_model
    from rubinperf.step.architecture import parameter_counts

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    rec = cli("estimate", "-m", str(tmp_path / "config.json"), "-H", "h200", "-l", "tp8", "--json").json()[0]
    # Llama-3.1-8B: 8.03 G parameters (the bundled spec's count, held to the published total by test_hfconfig)
    assert rec["model_params"] == pytest.approx(parameter_counts(load_model("llama-3.1-8b"))["total_params"])
    assert 7.9e9 < rec["model_params"] < 8.1e9 and rec["model_active_params"] < rec["model_params"]
    out = cli("estimate", "-m", str(tmp_path / "config.json"), "-H", "h200", "-l", "tp8").out
    assert "Llama-3.1-8B (8.03 G params, 7.5 G active)" in out


def test_a_config_is_named_after_its_model_not_its_folder(tmp_path):
    from rubinperf.specs.hfconfig import config_name

    folder = tmp_path / "hf"
    folder.mkdir()
    assert config_name(LLAMA_8B, folder / "config.json") == "Llama-3.1-8B"
    bare = {k: v for k, v in LLAMA_8B.items() if k != "_name_or_path"}
    assert config_name(bare, folder / "llama-70b.json") == "llama-70b"
    assert config_name(bare, folder / "config.json") == "llama-LlamaForCausalLM"
    assert config_name({"model_type": "llama"}, folder / "config.json") == "llama"
    assert config_name({**LLAMA_8B, "_name_or_path": "/weights/x y/"}, folder / "config.json") == "x-y"


@pytest.mark.parametrize("argv", [["estimate", "-m", "llama-3.1-70b", "-H", "h200", "-l", "tp8"],
                                  ["serve", "-m", "llama-3.1-70b", "-H", "h200", "-l", "tp8", "-c", "8"]])
def test_dtype_and_kv_dtype_are_the_set_they_stand_for(cli, argv):
    sugar = cli(*argv, "--dtype", "fp8", "--kv-dtype", "fp8", "--json").json()
    long = cli(*argv, "--set", "model.dense_dtype=fp8", "--set", "model.expert_dtype=fp8",
               "--set", "model.kv_cache_dtype=fp8", "--json").json()
    plain = cli(*argv, "--json").json()
    assert sugar == long and sugar != plain
    # a --set given too wins (applied after the sugar)
    assert cli(*argv, "--dtype", "fp8", "--set", "model.dense_dtype=bf16", "--set", "model.expert_dtype=bf16",
               "--json").json() == plain
    r = cli(*argv, "--dtype", "fp9")
    assert r.code == 2 and r.err.count("\n") == 1 and "--dtype" in r.err and "fp8" in r.err, r


def test_dtype_on_the_sweeps(cli):
    for command in ("pareto", "compare"):
        r = cli(command, "--dtype", "bf16", "-l", "dep32", "--max-batch", "8", "--json")
        assert r.code == 0, r
    from rubinperf.cli.options import precision_sets

    assert precision_sets("FP8", "fp4", ["x=1"]) == ["model.dense_dtype=fp8", "model.expert_dtype=fp8",
                                                     "model.kv_cache_dtype=fp4", "x=1"]


def test_op_names_come_from_the_model_and_the_stack(cli):
    def kernels(*argv):
        rec = cli("estimate", *argv, "--json").json()[0]
        return [b["kernel"] for b in rec["breakdown"]]

    llama = kernels("-m", "llama-3.1-70b", "-H", "h200", "-l", "tp8")
    assert not [k for k in llama if "Mega" in k or "DeepSelect" in k or "mHC" in k], llama
    assert "norm (residual add + RMSNorm)" in llama and "sampler (top-k)" in llama
    qwen = kernels("-m", "qwen3-235b-a22b", "-H", "b200", "-l", "dep8")
    assert "router (GEMM + top-k)" in qwen and "MegaGate (router)" not in qwen
    v4 = kernels("-H", "vr-nvl72", "-l", "dep32")   # DeepSeek-V4.1 on vLLM: DeepSeek's kernels, by their names
    assert {"MegaGate (router)", "DeepSelect (sampler)", "Mega-mHC (norm + mixing)"} <= set(v4)
    sglang = kernels("-H", "gb300-nvl72", "--stack", "sglang-blackwell", "-l", "dep32")
    assert "MegaGate (router)" not in sglang and "router (GEMM + top-k)" in sglang


def test_rows_that_fit_print_and_the_ones_that_do_not_say_why(cli):
    r = cli("estimate", "-m", "llama-3.1-70b", "-H", "b200")
    assert r.code == 0 and r.err == "", r
    assert "b200      tp8     decode" in r.out
    assert r.out.count("left out: llama-3.1-70b on b200") == 2 and "does not fit in HBM" in r.out
    recs = cli("estimate", "-m", "llama-3.1-70b", "-H", "b200", "--json").json()
    assert [(x["layout"], x["phase"]) for x in recs] == [("tp8", "decode")]
    assert len(recs[0]["left_out"]) == 2
    long = cli("estimate", "--context", "1M", "--json").json()
    assert {x["phase"] for x in long} == {"decode"} and len(long) == 4
    assert all("dep2 prefill: --context" in why for why in long[0]["left_out"])
    # one row asked for: its reason is the error, as before
    r = cli("estimate", "-m", "llama-3.1-70b", "-H", "b200", "-l", "dep2")
    assert r.code == 2 and r.err.count("\n") == 1 and "llama-3.1-70b on b200 dep2" in r.err, r
    # every row left out: the first reason is the error
    r = cli("estimate", "-m", "llama-3.1-70b", "-H", "b200", "-l", "dep2", "-l", "dep4")
    assert r.code == 2 and "does not fit in HBM" in r.err, r


def test_a_note_is_printed_once(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    for argv in (["pareto"], ["compare"], ["estimate"]):
        r = cli(*argv)
        assert r.code == 0, r
        lines = [line for line in r.out.splitlines() if len(line) > 40 and "infeasible" in line]
        assert len(lines) == len(set(lines)), lines
        assert len([line for line in lines if "points infeasible" in line]) <= 2, lines   # one per rack and reason


def test_bundled_calibration_csvs_are_named_from_any_directory(monkeypatch, tmp_path):
    from rubinperf.bundled import data_root, resolve_bundled

    monkeypatch.chdir(tmp_path)
    name = "calibration/h200/shapes.csv"
    assert resolve_bundled(name) == str(data_root() / name)
    (tmp_path / "calibration" / "h200").mkdir(parents=True)
    (tmp_path / name).write_text("mine")
    assert resolve_bundled(name) == name                           # a file of the user's own wins
    assert resolve_bundled("calibration/no/such.csv") == "calibration/no/such.csv"
    assert resolve_bundled("elsewhere/x.csv") == "elsewhere/x.csv"


def test_calibrate_reads_the_readme_csv_outside_the_clone(cli, monkeypatch, tmp_path):
    """The README's `--from-csv calibration/h200/...` from another directory: the file is found (an unknown
    option after it stops the run before the fit, so no fit is paid for here)."""
    from rubinperf.calibrate import plan

    monkeypatch.chdir(tmp_path)
    seen = []
    real = plan.read_csv

    def read_csv(path):
        seen.append(path)
        raise SystemExit(0)

    monkeypatch.setattr("rubinperf.calibrate.plan.read_csv", read_csv)
    cli("calibrate", "-H", "h200", "--from-csv", "calibration/h200/shapes.csv", "--out-dir", str(tmp_path / "o"))
    assert seen and seen[0].endswith("calibration/h200/shapes.csv") and seen[0] != "calibration/h200/shapes.csv"
    assert real("/" + seen[0].lstrip("/"))[0] == "kernels"
