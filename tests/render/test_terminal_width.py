"""Every table fits the console: nothing cut with '…', no line wider than COLUMNS; --wide shows all."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

COMMANDS = {
    "estimate": ["estimate"],
    "breakdown": ["estimate", "-H", "vr-nvl72", "-l", "dep32", "--breakdown"],
    "pareto": ["pareto", "--max-batch", "256"],
    "compare": ["compare", "--max-batch", "256"],
    "validate": ["validate"],
    "sensitivity": ["sensitivity", "--top", "8"],
    "list hardware": ["list", "hardware"],
    "list models": ["list", "models"],
    "explain op": ["explain", "megamoe"],
    "explain step": ["explain", "step"],
}
# Words that must appear whole (a cell folded across lines would split them).
WHOLE = {
    "estimate": ["gb300-nvl72", "vr-nvl72", "prefill", "compute", "memory", "t/s/GPU", "128K"],
    "breakdown": ["memory", "latency", "target"],
    "pareto": ["gb300-nvl72", "tok/s/user", "tok/s/GPU", "memory"],
    "compare": ["gb300-nvl72", "vr-nvl72", "tok/s/GPU", "tok/s/user"],
    "validate": ["vr-tp8-single-user", "gb300-throughput-at-196", "in band", "MISS", "0.95-1.10", "Accuracy ledger"],
    "sensitivity": ["hbm_bandwidth_bytes_per_s", "hbm_stream_efficiency", "elasticity"],
    "list hardware": ["gb300-nvl72", "gb200-nvl72", "PFLOP/s", "TB/s"],
    "list models": ["deepseek-v4.1-flash", "deepseek-v3", "top-6"],
    "explain op": ["MegaMoE", "speed of light", "balancedness"],
    "explain step": ["gb300-nvl72", "acceptance", "MegaMoE"],
}


@pytest.fixture(scope="module")
def outputs():
    return {}


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_fits_the_console(cli, monkeypatch, predictions_reused, name, width):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*COMMANDS[name])
    assert r.code in (0, 1), r  # validate exits 1 when a point misses its band
    assert r.out.strip()
    assert "…" not in r.out, r.out
    for word in WHOLE[name]:
        assert word in r.out, f"{name} at COLUMNS={width}: {word!r} is split or missing\n{r.out}"
    widest = max(cell_len(line.rstrip()) for line in r.out.splitlines())
    assert widest <= width, f"{name} at COLUMNS={width}: a line of {widest} columns\n{r.out}"


@pytest.mark.parametrize("width", [80, 100])
def test_compare_never_splits_a_number_from_its_suffix(cli, monkeypatch, predictions_reused, width):
    # Before: at 80 columns "1.13 M-1.34 M" folded as "1.34" / "M) tok/s/GPU" (a line starting with a bare suffix).
    import re

    monkeypatch.setenv("COLUMNS", str(width))
    r = cli("compare", "--max-batch", "256")
    assert r.code == 0, r
    split = [line for line in r.out.splitlines() if re.match(r"\s*[kMGT](\)|-|\s|$)", line)]
    assert not split, f"compare at COLUMNS={width}: a number's suffix begins a line\n{r.out}"
    assert re.search(r"\(\d[\d.,]*[kMGT]?-\d[\d.,]*[kMGT]?\)", r.out), r.out   # a band on one line, whole


def test_fitting_leaves_out_columns_and_says_so(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("estimate")
    assert "left out to fit 80 columns" in r.out and "--wide" in r.out
    assert "t/s/GPU" in r.out and "t/s/user" in r.out and "step" in r.out
    # batch and context are kept before %roof and SOL
    assert "batch" in r.out.splitlines()[1] and "ctx" in r.out.splitlines()[1] and "%roof" not in r.out.splitlines()[1]


def test_wide_shows_every_column(cli, monkeypatch, predictions_reused):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("estimate", "--wide")
    assert r.code == 0
    for header in ("batch/rank", "context", "SOL", "% roofline", "largest kernel"):
        assert header in r.out
    assert "left out" not in r.out and "…" not in r.out
    r = cli("validate", "--wide")
    assert "metric" in r.out and "why" in r.out and "…" not in r.out


def test_wide_on_every_table_command(cli, predictions_reused):
    for argv in (["estimate", "--wide", "-q"], ["pareto", "--wide", "-q", "--max-batch", "16"],
                 ["compare", "--wide", "-q", "--max-batch", "16"], ["validate", "--wide", "-q"]):
        assert cli(*argv).code in (0, 1), argv


@pytest.mark.parametrize("width", [80, 100, 160])
def test_terminal_chart_sizes_itself(cli, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli("pareto", "-H", "vr-nvl72", "--max-batch", "64")
    chart = r.out[r.out.index("tok/s/GPU\n"):]
    lines = chart.splitlines()
    axis = next(line for line in lines if "└" in line)
    assert width - 6 <= cell_len(axis.rstrip()) <= width  # the chart uses the width it has
    assert max(cell_len(line.rstrip()) for line in lines) <= width


def _all_help(cli):
    import typer

    from rubinperf.cli import app

    root = typer.main.get_command(app)
    out = {"": cli("--help").out}
    for name, cmd in root.commands.items():
        out[name] = cli(name, "--help").out
        for sub in getattr(cmd, "commands", {}) or {}:
            out[f"{name} {sub}"] = cli(name, sub, "--help").out
    return out


def test_help_texts_print_plain_brackets_and_claim_only_their_options(cli):
    helps = _all_help(cli)
    assert len(helps) > 10
    for name, text in helps.items():
        assert "\\[" not in text, name
    assert "[default: 1024]" in helps["pareto"]
    for name in ("compare", "explain", "estimate", "validate"):
        assert "--plot" not in helps[name], name
    for name in ("pareto", "sensitivity"):
        assert "--plot" in helps[name]
