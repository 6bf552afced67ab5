"""Every input bounded before work is done: each cause the fuzz found ends in one stderr line
and exit status 2, within 1 s of CPU, and a 1 KB config.json never takes more than 1 GB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO

HUGE = "9" * 400


def one_line(r, *needles):
    assert r.code == 2, r
    assert r.err.count("\n") == 1 and r.err.endswith("\n"), r
    assert "internal error" not in r.err and "Traceback" not in r.err, r
    for n in needles:
        assert n in r.err, r


def run_bounded(argv, limit_bytes=2 ** 30):
    """`python -m rubinperf ARGV` in a child limited to `limit_bytes` of address space: (exit code, stderr, CPU s)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "rubinperf", *argv], cwd=REPO, capture_output=True, text=True,
                         preexec_fn=limit, env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                         timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.returncode, out.stderr, cpu


V32 = {"model_type": "deepseek_v32", "num_hidden_layers": 10 ** 9, "hidden_size": 7168, "vocab_size": 129280,
       "max_position_embeddings": 163840, "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
       "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "index_head_dim": 128,
       "index_n_heads": 64, "index_topk": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
       "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 3,
       "num_nextn_predict_layers": 1}
GPT_OSS = {"model_type": "gpt_oss", "num_hidden_layers": 10 ** 9, "hidden_size": 2880, "vocab_size": 201088,
           "max_position_embeddings": 131072, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "num_local_experts": 128, "num_experts_per_tok": 4, "intermediate_size": 2880, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"]}


@pytest.mark.parametrize("cfg", [V32, GPT_OSS, {**V32, "num_hidden_layers": 61, "num_nextn_predict_layers": 10 ** 9}],
                         ids=["v32-layers", "gpt-oss-layers", "v32-mtp-layers"])
def test_a_1kb_config_with_a_billion_layers_is_refused_before_any_per_layer_structure(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert path.stat().st_size < 1024
    code, err, cpu = run_bounded(["estimate", "-m", str(path), "-H", "h200", "-l", "tp8"])
    assert code == 2 and err.count("\n") == 1 and "layers" in err and "10,000" in err, err
    assert "MemoryError" not in err and "internal error" not in err, err
    assert cpu < 1.0 + 1.5, f"{cpu:.2f} s of CPU (interpreter start-up included)"


def test_spec_and_config_files_are_size_checked_before_parsing(cli, tmp_path):
    from rubinperf.files import READ_LIMIT_BYTES

    spec = tmp_path / "rack.toml"
    spec.write_text((REPO / "hardware" / "h200.toml").read_text() + "# " + "x" * (4 * 2 ** 20) + "\n")
    t = time.process_time()
    one_line(cli("estimate", "-H", str(spec)), "rack.toml", "over the 1 MiB limit")
    assert time.process_time() - t < 1.0
    cfg = tmp_path / "big" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text('{"model_type": "llama", "x": "' + "y" * READ_LIMIT_BYTES["config"] + '"}')
    one_line(cli("estimate", "-m", str(cfg)), "config.json", "over the 4 MiB limit")
    one_line(cli("model", "import", str(cfg), "-o", str(tmp_path / "m.toml")), "over the 4 MiB limit")
    assert not (tmp_path / "m.toml").exists()
    # at the limit a spec file is read (and fails, if it does, for what it holds, not for its size)
    ok = tmp_path / "ok.toml"
    body = (REPO / "hardware" / "h200.toml").read_text()
    ok.write_text(body + "#" * (READ_LIMIT_BYTES["spec"] - len(body.encode()) - 1) + "\n")
    assert ok.stat().st_size == READ_LIMIT_BYTES["spec"]
    assert cli("kernel", "copy", "--bytes", "1GB", "-H", str(ok)).code == 0


@pytest.mark.parametrize("argv", [
    ["estimate", "-l", "dep32", "--draft-tokens", HUGE],
    ["explain", "megamoe", "-l", "dep32", "--draft-tokens", HUGE],
    ["pareto", "-k", HUGE],
    ["compare", "-k", HUGE],
    ["report", "-k", HUGE],
    ["serve", "--draft-tokens", HUGE],
    ["sensitivity", "-l", "dep32", "--draft-tokens", HUGE],
])
def test_a_400_digit_draft_length_is_one_line_everywhere(cli, argv):
    t = time.process_time()
    r = cli(*argv)
    one_line(r, "--draft-tokens", "0 to 64", "a 400-digit number")
    assert HUGE[:40] not in r.err and time.process_time() - t < 1.0


def test_turn_gap_has_a_documented_range(cli):
    one_line(cli("serve", "--turn-gap", "1e300"), "--turn-gap", "0 to 3600")
    one_line(cli("serve", "--turn-gap", "-1"), "--turn-gap", "0 to 3600")
    assert "Range: 0 to 3600" in " ".join(cli("serve", "--help").out.split())
    from rubinperf.errors import SpecError
    from rubinperf.serving.aggregated import RequestMix

    with pytest.raises(SpecError, match="0 to 3600"):
        RequestMix(isl=8192, osl=1024, turn_gap_s=1e300)


def _numeric_options():
    import click
    import typer

    from rubinperf.cli import app

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, path + [name])
        else:
            yield " ".join(path), cmd

    for path, cmd in walk(typer.main.get_command(app), []):
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag and p.type.name in ("INTEGER", "FLOAT", "TOKENS", "BYTES"):
                yield path, p


def test_every_numeric_option_documents_its_range():
    options = list(_numeric_options())
    assert len(options) > 40
    missing = [f"{path} {p.opts[0]}" for path, p in options if "Range:" not in (p.help or "")]
    assert not missing, missing


def test_every_plain_integer_option_refuses_a_huge_value_in_one_line(cli):
    from rubinperf.cli.options import Bounded

    for path, p in _numeric_options():
        if isinstance(p.type, Bounded) and p.type.integer:
            argv = path.split() + [p.opts[0], HUGE]
            r = cli(*argv)
            one_line(r, "a 400-digit number")


def test_no_draft_rows_at_draft_tokens_zero(cli):
    recs = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--draft-tokens", "0", "--json").json()
    rows = recs[0]["breakdown"]
    assert not [b for b in rows if b["part"] == "draft"]
    assert all(b["time_ms"] > 0 or b["fraction_of_roofline"] == 0 for b in rows)
    with_draft = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--json").json()[0]["breakdown"]
    assert [b for b in with_draft if b["part"] == "draft"]
    out = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--draft-tokens", "0", "--breakdown", "--wide").out
    assert "draft:" not in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_model_import_of_a_fifo_says_it_is_not_a_regular_file(cli, tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    one_line(cli("model", "import", str(fifo), "-o", str(tmp_path / "m.toml")), "not a regular file", "FIFO")
    one_line(cli("estimate", "-m", str(tmp_path)), "not a regular file")   # the directory's config.json


def test_calibrate_out_dir_on_a_dangling_link(cli, tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere" / "x")
    csv = REPO / "calibration" / "h200" / "shapes.csv"
    t = time.process_time()
    one_line(cli("calibrate", "-H", "h200", "--from-csv", str(csv), "--out-dir", str(link)), "--out-dir",
             "dangling")
    assert time.process_time() - t < 1.0   # refused before the fit


def test_huge_integers_in_a_config_are_echoed_short(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**V32, "num_hidden_layers": 61, "hidden_size": 10 ** 400}))
    r = cli("estimate", "-m", str(path))
    one_line(r, "hidden_size", "a 401-digit number")
    from rubinperf.errors import number_text

    assert number_text(10 ** 15) == "a 16-digit number" and number_text(999) == "999"
    assert number_text(-(10 ** 20)) == "a 21-digit negative number"


def test_a_model_that_does_not_fit_is_named(cli, tmp_path):
    """The case the issue's fresh clone failed on: a model spec (as the fuzz mutates one) too large for DEP2."""
    text = (REPO / "models" / "deepseek-v3.toml").read_text().replace('name = "deepseek-v3"', 'name = "my-big-v3"')
    import re

    text = re.sub(r"(?m)^moe_intermediate_size = \d+", "moe_intermediate_size = 204800", text)
    spec = tmp_path / "big.toml"
    spec.write_text(text)
    r = cli("estimate", "-m", str(spec), "-H", "h200", "-l", "dep2", "--json")
    one_line(r, "my-big-v3", "does not fit")


def test_explaining_a_draft_op_at_draft_tokens_zero(cli):
    r = cli("explain", "draft: lm head", "-l", "dep32", "--draft-tokens", "0")
    assert r.code == 0 and r.err == "", r
    assert "runs no kernel" in r.out and "100%" not in r.out.split("speed of light")[-1]
