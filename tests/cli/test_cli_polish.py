"""Polish of the command line: an example in every --help, --quiet on every command that
prints results, shell completion, and number formatting (SI/ms/µs in tables, raw SI in JSON)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO


def _walk():
    """(argv path, click command) for the root, every command and every subcommand."""
    import typer

    from rubinperf.cli import app

    def walk(cmd, path):
        yield path, cmd
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            yield from walk(sub, path + [name])

    return list(walk(typer.main.get_command(app), []))


COMMANDS = _walk()
LEAVES = [(path, cmd) for path, cmd in COMMANDS if not getattr(cmd, "commands", None)]


def _opts(cmd) -> set[str]:
    return {o for p in cmd.params for o in p.opts}


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "rubinperf")
def test_help_has_an_example(cli, path):
    r = cli(*path, "--help")
    assert r.code == 0, r
    assert re.search(r"^\s*Examples?:", r.out, re.M), f"`rubinperf {' '.join(path)} --help` shows no example"
    assert "rubinperf " in r.out.split("Example", 1)[1], r.out


@pytest.mark.parametrize("path", [p for p, c in LEAVES if "--json" in _opts(c)], ids=lambda p: " ".join(p))
def test_every_command_that_prints_results_has_quiet(path):
    cmd = dict((tuple(p), c) for p, c in LEAVES)[tuple(path)]
    assert {"--quiet", "-q"} <= _opts(cmd), f"rubinperf {' '.join(path)}: no --quiet/-q"


QUICK_RUNS = {
    "estimate": ["estimate", "-H", "vr-nvl72", "-l", "dep32"],
    "kernel gemm": ["kernel", "gemm", "--m", "16", "--n", "64", "--k", "32"],
    "kernel grouped-gemm": ["kernel", "grouped-gemm", "--tokens", "64", "--groups", "8", "--n", "64", "--k", "32"],
    "kernel attention": ["kernel", "attention", "--batch", "1", "--heads", "8", "--q-len", "1", "--kv-len", "128",
                         "--head-dim", "64"],
    "kernel copy": ["kernel", "copy", "--bytes", "1e6"],
    "list hardware": ["list", "hardware"],
    "list models": ["list", "models"],
    "list layouts": ["list", "layouts"],
    "explain": ["explain", "gemm", "--m", "16", "--n", "64", "--k", "32"],
    "sensitivity": ["sensitivity", "-l", "dep8", "--top", "3"],
    "pareto": ["pareto", "-H", "gb300-nvl72", "-l", "dep8", "--max-batch", "16"],
    "compare": ["compare", "-l", "dep8", "--max-batch", "16", "--kernels", "2"],
    "validate": ["validate"],
}


@pytest.mark.parametrize("name", sorted(QUICK_RUNS))
def test_quiet_prints_nothing_and_keeps_the_exit_status(cli, predictions_reused, name):
    if name.split()[0] not in dict((p[0], 1) for p, _ in LEAVES if p):
        pytest.skip(f"no {name} command")
    argv = QUICK_RUNS[name]
    loud = cli(*argv)
    assert loud.code in (0, 1), loud          # validate: 1 when a published point is out of its band
    assert loud.out.strip(), loud
    quiet = cli(*argv, "--quiet")
    assert quiet.code == loud.code, quiet
    assert quiet.out == "", quiet
    assert cli(*argv, "-q").out == ""


def test_quiet_calibrate_from_csv_writes_files_only(cli, tmp_path):
    from test_fuzz import calibration_csv

    if "calibrate" not in dict((p[0], 1) for p, _ in LEAVES if p):
        pytest.skip("no calibrate command")
    csv = calibration_csv(tmp_path / "m.csv")
    r = cli("calibrate", "-H", "h200", "--from-csv", str(csv), "--out-dir", str(tmp_path / "out"), "-q")
    assert r.code == 0, r
    assert r.out == ""
    assert (tmp_path / "out" / "h200.toml").is_file()


def test_quiet_still_fails_loudly(cli):
    r = cli("estimate", "-l", "dep5", "--quiet")
    assert r.code == 2
    assert len(r.err.splitlines()) == 1 and "dep5" in r.err, r


# ------------------------------------------------------------------ shell completion


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def test_show_completion_prints_a_script():
    r = subprocess.run([sys.executable, "-m", "rubinperf", "--show-completion", "bash"], capture_output=True, text=True,
                       timeout=60, env=_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"))
    assert r.returncode == 0, r.stderr
    assert "_RUBINPERF_COMPLETE" in r.stdout and "complete" in r.stdout


@pytest.mark.parametrize("words, cword, expect", [
    ("rubinperf est", 1, {"estimate"}),
    ("rubinperf kernel g", 2, {"gemm", "grouped-gemm"}),
    ("rubinperf estimate -H vr", 3, {"vr-nvl72"}),
    ("rubinperf estimate -m deepseek-v4", 3, {"deepseek-v4-flash", "deepseek-v4.1-flash"}),
    ("rubinperf kernel gemm --dtype bf", 4, {"bf16"}),
])
def test_completion_of_commands_and_names(words, cword, expect):
    r = subprocess.run([sys.executable, "-m", "rubinperf"], capture_output=True, text=True, timeout=60,
                       env=_env(_RUBINPERF_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword)))
    assert r.returncode == 0, r.stderr
    assert expect <= set(r.stdout.split()), r.stdout


# ------------------------------------------------------------------ formatting


def test_tables_use_si_and_time_units(cli):
    r = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--breakdown")
    assert r.code == 0, r
    assert re.search(r"\d (ms|µs)\b", r.out), r.out          # times as ms / µs
    assert re.search(r"\d (k|M|G|T)B\b", r.out), r.out       # bytes with SI prefixes
    assert not re.search(r"\de[+-]\d", r.out), r.out          # no exponent notation in tables
    kr = cli("kernel", "gemm", "--m", "4096", "--n", "4096", "--k", "4096")
    assert re.search(r"\d+(\.\d+)? (G|T)FLOP\b", kr.out) and re.search(r"\d (ms|µs)\b", kr.out), kr.out
    lr = cli("list", "hardware")
    assert "PFLOP/s" in lr.out and "TB/s" in lr.out and " kW" in lr.out, lr.out


def test_json_is_raw_si(cli):
    rec = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "--context", "855000", "--json").json()[0]
    assert rec["context_tokens"] == 855000                          # a number, not "855 k"
    assert isinstance(rec["step_time_ms"], float) and 0.1 < rec["step_time_ms"] < 1e3
    for b in rec["breakdown"]:
        assert all(not isinstance(b[k], str) for k in ("time_ms", "sol_time_ms", "flops", "bytes"))
    k = cli("kernel", "copy", "--bytes", "4e9", "--json").json()
    assert k["bytes"] == 8e9 and isinstance(k["time_ms"], float)
    hw = cli("list", "hardware", "--json").json()
    assert {h["name"]: h["hbm_bandwidth_bytes_per_s"] for h in hw}["gb300-nvl72"] == 8e12


def test_json_is_strict_json(cli):
    """No NaN or Infinity (which strict JSON readers refuse) in any record."""
    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-finite number {c} in JSON"))

    strict(cli("estimate", "--json").out)
    strict(cli("kernel", "gemm", "--m", "1", "--n", "1", "--k", "1", "--json").out)
