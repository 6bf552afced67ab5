"""`explain` in plain words (rubinperf.analysis.plain): at most 15 lines a term each, before any formula, and their
numbers are the roofline's."""

from __future__ import annotations

import pytest

from rubinperf.analysis.plain import MAX_LINES, op_lines
from rubinperf.kernels.catalog import build
from rubinperf.roofline import kernel_time, launch_latency, launch_parts
from rubinperf.step.graph import Op
from rubinperf.units import fmt_time


def _plain_part(out: str) -> list[str]:
    """The logical lines before the formulas (continuation lines are indented)."""
    lines = []
    for line in out.splitlines():
        if line.startswith("(the formulas") or not line.strip():
            break
        if line.startswith("    ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def test_gemm_terms_are_the_roofline_terms(hardware_by_name):
    hw = hardware_by_name["gb300-nvl72"]
    kern = build("gemm", {"m": 16, "n": 4096, "k": 4096}, dtype="bf16")
    kt = kernel_time(kern, hw, launch="eager")
    lines = op_lines([Op("gemm", (kern,))], hw, launch="eager")
    text = "\n".join(lines)
    assert "compute = " in text and text.split("compute = ")[1].split("\n")[0].endswith(f"= {fmt_time(kt.compute_s)}")
    assert text.split("memory = ")[1].split("\n")[0].endswith(f"= {fmt_time(kt.memory_s)}")
    assert text.split("latency = ")[1].split("\n")[0].endswith(f"= {fmt_time(kt.latency_s)}")
    assert lines[-1].startswith(f"expected = {fmt_time(kt.expected_s)}")
    assert "mma_bf16_compute_efficiency" in text and "hbm_stream_efficiency" in text


def test_launch_parts_add_up_to_launch_latency(hardware_by_name):
    hw = hardware_by_name["gb300-nvl72"]
    for kern in (build("gemm", {"m": 16, "n": 4096, "k": 4096}),
                 build("attention", {"batch": 4, "heads": 64, "q_len": 1, "kv_len": 8192, "head_dim": 128})):
        for launch in ("graph", "eager", "stream", "cold"):
            parts = launch_parts(kern, hw, launch)
            own = kern.cost.launches * (parts["start"] + parts["loads"] + parts["prologue"] + parts["sync"] + parts["reduction"])
            assert launch_latency(kern, hw, launch) == pytest.approx(own, rel=1e-12)


@pytest.mark.parametrize("layout", ["dep32", "tp8", "dep2"])
def test_every_op_in_at_most_15_lines_and_its_time_is_the_estimate(cli, layout):
    est = cli("estimate", "-H", "gb300-nvl72", "-l", layout, "--json").json()[0]
    for row in est["breakdown"]:
        if row["kernel"].startswith("host work"):   # the step's exposed host time: not an op of the graph
            continue
        r = cli("explain", row["kernel"], "-H", "gb300-nvl72", "-l", layout)
        assert r.code == 0, (row["kernel"], r.err)
        lines = _plain_part(r.out)
        assert 3 <= len(lines) <= MAX_LINES, (row["kernel"], lines)
        if row["part"] != "cpu":
            assert lines[-1].startswith(f"expected = {fmt_time(row['time_ms'] / 1e3)}"), (row["kernel"], lines[-1])


def test_formulas_follow_the_plain_lines_on_request(cli):
    plain = cli("explain", "megamoe")
    full = cli("explain", "megamoe", "--formulas")
    assert plain.code == full.code == 0
    assert "hbm_bandwidth_bytes_per_s" not in plain.out and "(the formulas: --formulas)" in plain.out
    assert full.out.startswith(plain.out.split("(the formulas")[0]) and "hbm_bandwidth_bytes_per_s" in full.out


def test_step_lines(cli):
    r = cli("explain", "step", "-l", "tp8")
    lines = _plain_part(r.out)
    assert len(lines) <= MAX_LINES and "tp8 decode on gb300-nvl72" in lines[0]
    est = cli("estimate", "-H", "gb300-nvl72", "-l", "tp8", "--json").json()[0]
    assert f"= {fmt_time(est['step_time_ms'] / 1e3)};" in lines[1]


def test_plain_compute_line_names_the_output_store_where_the_stack_waits_for_it(cli):
    # DeepGEMM's SM90 GEMM (the Hopper stack) waits for each block's store: 268 MB of BF16 output at 4096 x 32768
    out = cli("explain", "gemm", "--m", "4096", "--n", "32768", "--k", "512", "-H", "h800-cluster").out
    assert "mma_epilogue_exposed" in out and "268 MB" in out
    # a stack whose epilogue overlaps the next tile's main loop says nothing of it
    assert "mma_epilogue_exposed" not in cli("explain", "gemm", "--m", "4096", "--n", "32768", "--k", "512").out


def test_explain_megamoe_binding_terms_at_pr316_sizes(cli):
    # DeepGEMM PR #316's setup (V4-Flash, EP8 on B200): its counters at 32768 tokens per rank read the MMAs busiest
    # (2.0 PFLOP/s): explain names compute. At 1 token they read HBM busiest (1311 GB/s, 5 TFLOP/s, ~0 NVLink); explain
    # names the fitted fixed chain (latency), with memory, the weights' in-flight-limited stream, the largest of the
    # others (docs/deepseek-kernels.md: what the rows want beyond the code's chain)
    base = ("explain", "megamoe", "-H", "b200", "-l", "dep8", "-m", "deepseek-v4-flash")
    one = cli(*base, "--batch", "1", "--draft-tokens", "0", "--json")
    big = cli(*base, "--phase", "prefill", "--new-tokens", "32K", "--context", "0", "--json")
    assert one.code == big.code == 0
    assert big.json()["bound"] == "compute" and one.json()["bound"] == "latency"
    # the unit the counters read busiest: memory at 1 token (beside the fixed chain), compute at 32768
    assert one.json()["busiest_unit"] == "memory" and big.json()["busiest_unit"] == "compute"
    terms = {t: one.json()["terms"][f"{t}_s"]["value"] for t in ("compute", "memory", "parallelism", "comm")}
    assert max(terms, key=terms.get) == "memory" and terms["parallelism"] == 0
    # the memory line shows the Little's-law limit its weight stream runs at
    text = cli(*base, "--batch", "1", "--draft-tokens", "0").out
    memory = next(line for line in _plain_part(text) if line.startswith("memory ="))
    assert "Little's law limit" in memory and "megamoe_stream_latency" in memory and "binds" in memory
    assert _plain_part(text)[0].endswith("bound: latency; busiest unit: memory")
