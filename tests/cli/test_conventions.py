"""Conventions: output tokens beside total tokens, units on token and byte options, name
suggestions, default layouts that fit 8-GPU racks, one token-count convention."""

from __future__ import annotations

import pytest

from rubinperf.cli.options import parse_tokens
from rubinperf.units import fmt_tokens


@pytest.mark.parametrize("text,value", [("131072", 131072), ("128K", 131072), ("128k", 131072), ("1M", 1 << 20),
                                        ("855000", 855000), ("1.5e5", 150000), ("32K tokens", 32768)])
def test_token_counts_parse_with_k_as_1024(text, value):
    assert parse_tokens(text) == value


@pytest.mark.parametrize("value,text", [(131072, "128K"), (1 << 20, "1M"), (855000, "855,000"), (100, "100"),
                                        (32768, "32K")])
def test_token_counts_print_in_the_same_convention(value, text):
    assert fmt_tokens(value) == text
    assert parse_tokens(text.replace(",", "")) == value


def test_context_with_a_unit(cli):
    a = cli("estimate", "-l", "dep32", "--context", "128K", "--json").json()
    b = cli("estimate", "-l", "dep32", "--context", "131072", "--json").json()
    assert [r["context_tokens"] for r in a] == [131072] * 2
    assert [r["step_time_ms"] for r in a] == [r["step_time_ms"] for r in b]
    r = cli("explain", "megamoe", "--context", "1M", "--json")
    assert r.code == 0, r


def test_context_with_a_bad_unit_is_one_line(cli):
    r = cli("estimate", "--context", "12Q")
    assert r.code == 2 and r.err.count("\n") == 1 and "--context" in r.err and "K = 1024" in r.err


def test_copy_bytes_with_a_unit(cli):
    a = cli("kernel", "copy", "--bytes", "4GB", "--json").json()
    b = cli("kernel", "copy", "--bytes", "4e9", "--json").json()
    assert a["copy_bytes"] == 4e9 and a["time_ms"] == b["time_ms"]
    assert cli("kernel", "copy", "--bytes", "4GiB", "--json").json()["copy_bytes"] == 4 * 2 ** 30
    r = cli("kernel", "copy", "--bytes", "4XB")
    assert r.code == 2 and "--bytes" in r.err and r.err.count("\n") == 1


@pytest.mark.parametrize("typed,meant", [("gb300", "gb300-nvl72"), ("vr", "vr-nvl72"), ("h20", "h200"),
                                         ("GB300-NVL72x", "gb300-nvl72")])
def test_a_partial_hardware_name_suggests_the_full_one(cli, typed, meant):
    r = cli("estimate", "-H", typed)
    assert r.code == 2 and f"did you mean {meant}" in r.err, r


def test_a_partial_model_name_suggests(cli):
    r = cli("estimate", "-m", "deepseek-v4")
    assert r.code == 2 and "did you mean deepseek-v4-flash or deepseek-v4.1-flash" in r.err


@pytest.mark.parametrize("hw", ["h200", "b200"])
def test_eight_gpu_racks_get_default_layouts_that_fit(cli, hw):
    r = cli("estimate", "-H", hw, "--json")
    assert r.code == 0, r
    recs = r.json()
    assert [x["phase"] for x in recs] == ["prefill", "decode", "decode"]
    assert recs[1]["layout"] == "dep8" and "NVLink domain" in recs[1]["note"]
    table = cli("estimate", "-H", hw)
    assert "dep8 instead" in table.out


def test_h200_prefill_moves_to_a_layout_whose_weights_fit(cli):
    recs = cli("estimate", "-H", "h200", "--json").json()
    assert recs[0]["layout"] == "dep4" and "does not fit in HBM (weights" in recs[0]["note"]
    recs = cli("pareto", "-H", "h200", "--json", "--frontier-only", "--max-batch", "32").json()
    assert recs and all(r["prefill_layout"] == "dep4" for r in recs)
    out = cli("pareto", "-H", "h200", "--max-batch", "32", "--no-chart").out
    assert "using dep4" in out


def test_explicit_layout_that_does_not_fit_says_which_do(cli):
    r = cli("estimate", "-H", "h200", "-l", "dep32")
    assert r.code == 2 and "dep layouts that fit: dep1, dep2, dep4, dep8" in r.err


def test_pareto_shows_output_tokens_per_gpu_beside_total(cli):
    r = cli("pareto", "-H", "vr-nvl72", "--max-batch", "32", "--no-chart")
    assert "tok/s/GPU" in r.out and ("out tok/s/GPU" in r.out or "out/GPU" in r.out)
    recs = cli("pareto", "-H", "vr-nvl72", "--max-batch", "32", "--json", "--frontier-only").json()
    for rec in recs:
        assert 0 < rec["output_tokens_per_s_per_gpu"] < rec["tokens_per_s_per_gpu"]


def test_scalar_estimate_on_the_defaults_loads_no_numpy():
    """The default-engine layout checks (weights per rank) must not pull numpy into a scalar estimate."""
    from conftest import heavy_modules_after

    assert heavy_modules_after("from rubinperf.cli import main\n"
                               "assert not main(['estimate', '-H', 'h200', '-H', 'vr-nvl72'])") == []
