"""Inputs as users type them: units that cannot trap, what-ifs in percent, capacity checked before a
point is priced, figures that say which statistic they are, limits printed, lengths and typos."""

from __future__ import annotations

import pytest

SWEEP = ("-H", "vr-nvl72", "--max-batch", "16")   # a small sweep: these tests check inputs, not the frontier


def one_line_error(r):
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err, r
    return r.err


# ---------------------------------------------------------------- units


def test_bare_tpot_is_an_error_that_shows_20ms(cli):
    err = one_line_error(cli("pareto", "--tpot", "20"))
    assert "--tpot" in err and "20ms" in err


@pytest.mark.parametrize("flag", ["--ttft", "--tpot"])
def test_help_says_the_limit_is_in_milliseconds_with_its_unit(cli, flag):
    out = " ".join(cli("pareto", "--help").out.split())
    assert f"aiconfigurator's {flag}" in out and "a bare number is refused" in out


def test_tpot_with_a_unit_is_applied_and_printed(cli):
    r = cli("pareto", *SWEEP, "--tpot", "20ms", "--ttft", "2s", "--no-chart")
    assert r.code == 0, r
    assert "limits: TTFT ≤ 2 s, TPOT ≤ 20 ms" in r.out
    a = cli("pareto", *SWEEP, "--tpot", "20ms", "--json").json()
    b = cli("pareto", *SWEEP, "--tpot", "0.02s", "--json").json()
    assert a == b
    assert all(1 / r["tokens_per_s_per_user"] <= 0.02 for r in a if r["eligible"])


@pytest.mark.parametrize("value", ["30", "30000000000000"])
def test_bare_set_for_a_dimensioned_field_is_refused(cli, value):
    err = one_line_error(cli("estimate", "--set", f"hbm_bandwidth={value}"))
    assert "30TB/s" in err and "hbm_bandwidth_bytes_per_s=" in err


def test_set_with_the_unit_in_the_key_takes_a_bare_number(cli):
    a = cli("estimate", "-l", "dep32", "--set", "hbm_bandwidth_bytes_per_s=3e13", "--json").json()
    b = cli("estimate", "-l", "dep32", "--set", "hbm_bandwidth=30TB/s", "--json").json()
    assert [r["step_time_ms"] for r in a] == [r["step_time_ms"] for r in b]


def test_a_unit_mistake_is_refused_with_the_range(cli):
    err = one_line_error(cli("estimate", "--set", "hbm_bandwidth=30B/s"))
    assert "documented range" in err and "B/s" in err


# ---------------------------------------------------------------- what-ifs


@pytest.mark.parametrize("command", [("estimate", "-l", "dep32"), ("explain", "megamoe"), ("sensitivity", "--top", "3")])
def test_relative_what_ifs_equal_the_absolute_value(cli, command):
    from rubinperf.specs.stack import load_platform

    bw = load_platform("gb300-nvl72").hbm_bandwidth_bytes_per_s
    extra = ("-H", "gb300-nvl72") if command[0] != "estimate" else ("-H", "gb300-nvl72")
    outs = [cli(*command, *extra, "--set", f"hbm_bandwidth={v}", "--json").out
            for v in ("+20%", "x1.2", "*1.2", f"{bw * 1.2 / 1e12!r}TB/s")]
    assert outs[0] and outs[0] == outs[1] == outs[2]
    base = cli(*command, *extra, "--json").out
    assert outs[0] != base


def test_rack_scoped_relative_set_changes_one_rack(cli):
    both = cli("pareto", "-H", "gb300-nvl72", "-H", "vr-nvl72", "--max-batch", "8", "--json").json()
    one = cli("pareto", "-H", "gb300-nvl72", "-H", "vr-nvl72", "--max-batch", "8", "--json",
              "--set", "vr-nvl72:hbm_bandwidth=+50%").json()
    key = lambda r: (r["hardware"], r["decode_layout"], r["batch_per_rank"])  # noqa: E731
    a, b = {key(r): r for r in both}, {key(r): r for r in one}
    assert all(a[k]["decode_step_ms"] == b[k]["decode_step_ms"] for k in a if k[0] == "gb300-nvl72")
    assert any(a[k]["decode_step_ms"] > b[k]["decode_step_ms"] for k in a if k[0] == "vr-nvl72")
    assert all(a[k]["decode_step_ms"] >= b[k]["decode_step_ms"] for k in a if k[0] == "vr-nvl72")


# ---------------------------------------------------------------- capacity


def test_estimate_that_does_not_fit_names_the_largest_batch_that_fits(cli):
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.capacity import capacity

    err = one_line_error(cli("estimate", "-H", "gb300-nvl72", "-l", "dep32", "--batch", "5000", "--context", "1M"))
    assert "does not fit in HBM" in err
    m, hw = load_model("deepseek-v4.1-flash"), load_platform("gb300-nvl72")
    cap = capacity(m, hw, parse_layout("dep32"), "decode", context_tokens=(1 << 20) + 6, tokens_per_request=6,
                   logits_per_request=6, reserve_bytes=10e9)
    n = int(cap.max_requests)
    assert f"--batch {n:,}" in err
    assert cli("estimate", "-H", "gb300-nvl72", "-l", "dep32", "--batch", str(n), "--context", "1M", "-q").code == 0
    assert cli("estimate", "-H", "gb300-nvl72", "-l", "dep32", "--batch", str(n + 1), "--context", "1M").code == 2


def test_weights_that_do_not_fit_one_gpu_are_an_error(cli):
    err = one_line_error(cli("estimate", "-H", "h200", "-l", "dep1", "--phase", "decode"))
    assert "does not fit in HBM" in err and "weights" in err and "no batch fits" in err
    assert "does not fit in HBM" in one_line_error(cli("explain", "megamoe", "-H", "h200", "-l", "dep1", "--phase",
                                                       "decode"))


def test_default_commands_still_run_on_every_rack(cli):
    for hw in ("h200", "b200", "gb200-nvl72", "b300", "gb300-nvl72", "vr-nvl72"):
        recs = cli("estimate", "-H", hw, "--json").json()
        assert len(recs) == 3 and all(r["hbm_used_bytes"] <= r["hbm_capacity_bytes"] for r in recs), hw


def test_pareto_marks_points_that_do_not_fit(cli):
    recs = cli("pareto", "-H", "gb300-nvl72", "-l", "dep32", "--max-batch", "4096", "--json",
               "--isl", "200K", "--prefix-hit", "0").json()
    bad = [r for r in recs if not r["feasible"] and "does not fit in HBM" in r["reason"]]
    assert bad and all(r["batch_per_rank"] > r["decode_max_requests"] for r in bad)
    assert all(not r["on_frontier"] for r in bad)


# ---------------------------------------------------------------- every figure says what it is


def test_statistic_in_headers_and_keys(cli):
    est = cli("estimate", "-l", "dep32", "-H", "vr-nvl72")
    assert "tok/s/user (mean)" in est.out
    rec = cli("estimate", "-l", "dep32", "-H", "vr-nvl72", "--json").json()[0]
    assert rec["tokens_per_s_per_user_mean"] == rec["tokens_per_s_per_user"] and rec["interactivity_stat"] == "mean"
    par = cli("pareto", *SWEEP, "--no-chart", "--wide")
    assert "tok/s/user (P90)" in par.out
    par = cli("pareto", *SWEEP, "--no-chart", "--wide", "--interactivity-stat", "p50")
    assert "tok/s/user (P50)" in par.out


def test_an_empty_result_names_the_limit(cli):
    err = one_line_error(cli("pareto", *SWEEP, "--tpot", "10us"))
    assert "--tpot 10 µs" in err and "shortest TPOT" in err
    # compare keeps its records (reachable: false); each says which limit emptied the rack
    recs = cli("compare", *SWEEP, "--ttft", "1us", "--json", "--kernels", "0").json()
    assert recs and all(not r["reachable"] and "--ttft 1 µs" in r["note"] and "shortest TTFT" in r["note"]
                        for r in recs)


def test_isl_osl_prefix_hit(cli):
    a = cli("pareto", *SWEEP, "--isl", "8K", "--osl", "1K", "--prefix-hit", "0", "--json").json()
    b = cli("pareto", *SWEEP, "-w", "chat-8k1k", "--json").json()
    key = lambda r: (r["decode_layout"], r["batch_per_rank"])  # noqa: E731
    assert {key(r): r["tokens_per_s_per_gpu"] for r in a} == {key(r): r["tokens_per_s_per_gpu"] for r in b}
    out = cli("pareto", *SWEEP, "--isl", "8K", "--no-chart").out
    assert "prefix hit rate of 96.5% kept" in " ".join(out.split())
    assert "--prefix-hit" in one_line_error(cli("pareto", *SWEEP, "--prefix-hit", "150%"))


def test_list_workloads_and_fields(cli):
    recs = cli("list", "workloads", "--json").json()
    assert {"agentx", "chat-8k1k"} <= {r["name"] for r in recs}
    fields = cli("list", "fields", "--json").json()
    bw = next(r for r in fields if r["name"] == "hbm_bandwidth_bytes_per_s")
    assert bw["unit"] == "B/s" and bw["low"] == 1e10 and bw["refused_outside"] == [1e8, 1e16]


@pytest.mark.parametrize("typo,meant", [(("estimat",), "estimate"), (("paerto",), "pareto"),
                                        (("list", "workload"), "workloads"), (("kernel", "gem"), "gemm")])
def test_command_typos_get_a_did_you_mean(cli, typo, meant):
    assert f"Did you mean {meant}" in one_line_error(cli(*typo))


# ---------------------------------------------------------------- edges


@pytest.mark.parametrize("argv,culprit", [
    (("pareto", "--total-gpus", "2147483648"), "--total-gpus"),
    (("pareto", "--total-gpus", "1e300"), "--total-gpus"),
    (("kernel", "gemm", "--m", "1", "--n", "1", "--k", "1", "--set", "sm_count=1000000000000"), "sm_count"),
    (("estimate", "--set", "hbm_capacity=1e-320B"), "hbm_capacity"),
    (("compare", "--at-interactivity", "1e-320"), "--at-interactivity"),
    (("pareto", "--set", "step_overhead=1e20s"), "step_overhead"),
])
def test_edges_are_one_line(cli, argv, culprit):
    assert culprit in one_line_error(cli(*argv))


def test_published_far_out_of_range_is_refused(cli, tmp_path):
    p = tmp_path / "points.toml"
    p.write_text('[[point]]\nid = "x"\nsource = "s"\nmetric = "step_time_ms"\nhardware = "gb300-nvl72"\n'
                 'layout = "dep32"\nphase = "decode"\npublished = 1e308\nband = [0.5, 2.0]\n')
    assert "published" in one_line_error(cli("validate", "--points", str(p)))
