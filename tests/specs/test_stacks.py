"""Stack specs: software apart from silicon.

Loading and strictness like the other specs; the move of the software fields out of the hardware
files changed no number; swapping stacks changes only software terms (and the reverse); --stack
and --set stack.X reach the roofline; compare's silicon x software split multiplies to the ratio."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import HARDWARE_NAMES
from rubinperf.errors import SpecError
from rubinperf.kernels import gemm
from rubinperf.roofline import kernel_time
from rubinperf.specs.hardware import Hardware, load_hardware
from rubinperf.specs.loader import bundled_names, spec_fields, to_toml
from rubinperf.specs.overrides import apply_overrides
from rubinperf.specs.stack import POINT_FIELDS, Platform, Stack, load_platform, load_stack

REPO = Path(__file__).resolve().parent.parent.parent
STACKS = ["pytorch-2.11", "vllm-gb300-oct2026", "vllm-rubin-nov2026", "sglang-deepep-hopper"]
DEFAULTS = {"h200": "pytorch-2.11", "b200": "vllm-gb300-oct2026", "b300": "vllm-gb300-oct2026",
            "gb200-nvl72": "vllm-gb300-oct2026", "gb300-nvl72": "vllm-gb300-oct2026", "vr-nvl72": "vllm-rubin-nov2026",
            "h800-cluster": "sglang-deepep-hopper", "h100-cluster": "sglang-deepep-hopper",
            "h200-cluster": "sglang-deepep-hopper", "b200-cluster": "vllm-gb300-oct2026"}


def test_bundled_stacks_and_defaults():
    assert set(STACKS) <= set(bundled_names("stack"))
    for hw in HARDWARE_NAMES:
        assert load_hardware(hw).default_stack == DEFAULTS[hw]
        assert load_platform(hw).stack == DEFAULTS[hw]


@pytest.mark.parametrize("name", STACKS)
def test_stack_loads_with_a_source_per_table_and_round_trips(name, tmp_path):
    st = load_stack(name)
    assert set(st.sources) - {"ranges"} == {f.metadata["section"] for f in spec_fields(Stack)} == {"kernel", "efficiency", "scheduler", "eplb", "interactivity", "serving", "fusion", "ep", "placement", "speculative", "aggregated", "attention", "collective"}
    assert all(len(s) > 20 for s in st.sources.values())
    p = tmp_path / f"{name}.toml"
    p.write_text(to_toml(st))
    assert load_stack(str(p)) == st


def test_hardware_and_stack_fields_are_disjoint_and_silicon_stays_in_hardware():
    hw = {f.name for f in spec_fields(Hardware)}
    st = {f.name for f in spec_fields(Stack)}
    assert not hw & st
    assert {f.name for f in spec_fields(Platform)} == hw | st
    # the kernel-library facts are the stack's; the silicon's are the hardware's
    assert {"mma_tile_rows", "mma_tile_cols", "split_k_max", "split_k_min_depth", "wave_quantization",
            "mma_bytes_in_flight_per_sm", "mma_prologue_cycles", "pdl_hidden_s", "fused_overlap_rows",
            "mma_compute_efficiency", "grouped_compute_efficiency", "attention_compute_efficiency",
            "grouped_hbm_efficiency", "collective_floor_s", "step_overhead_s", "dp_sync_per_rank_s",
            "eplb_target_balancedness", "eplb_draft_balancedness", "kernel_launch_cold_s", "host_dispatch_s",
            "tensor_core_dispatch_s"} <= st
    assert {"hbm_latency_s", "sm_count", "sm_clock_hz", "shared_memory_per_sm_bytes", "stream_bytes_in_flight_per_sm",
            "kernel_launch_graph_s", "kernel_launch_stream_s", "hbm_bandwidth_bytes_per_s", "nvlink_latency_s"} <= hw


def test_the_seed_posts_facts_are_in_the_stacks():
    oct_, nov = load_stack("vllm-gb300-oct2026"), load_stack("vllm-rubin-nov2026")
    assert oct_.split_k_max == 1 and nov.split_k_max == 4           # split-K came with the Rubin kernels
    stage = 256 * 1024 / 7 / 2                                      # one packed FP4 stage (November 2026 Rubin post)
    assert oct_.mma_bytes_in_flight_per_sm == pytest.approx(7 * stage, rel=1e-3)
    assert nov.mma_bytes_in_flight_per_sm == pytest.approx(11 * stage, rel=1e-3)
    for st in (oct_, nov):
        assert (st.eplb_target_balancedness, st.eplb_draft_balancedness) == (0.94, 0.89)   # the vLLM posts' EPLB figures
        assert (st.no_eplb_target_balancedness, st.no_eplb_draft_balancedness) == (0.35, 0.21)


# ---------------------------------------------------------------- the move changed no number

# Taken from `rubinperf estimate --json` at the commit before the move (hardware files held everything), with the
# fields changed since undone (below); re-taken 2026-12-02 when a kernel's fixed cost became its launch's start +
# (dependent loads + the drain of its stores) x HBM latency + its prologue cycles at the SM clock, less what PDL
# hides (roofline.launch_latency: the model, not a field that could be undone). Before that they were 263.870,
# 8.187, 3.364, 75.642, 4.024 and 2.081 ms.
BEFORE_STEP_MS = {
    ("gb300-nvl72", "dep2", "prefill"): 264.1222491113933,
    ("gb300-nvl72", "dep32", "decode"): 8.519768945022692,
    ("gb300-nvl72", "tp8", "decode"): 3.6948753526406595,
    ("vr-nvl72", "dep2", "prefill"): 75.8945668033208,
    ("vr-nvl72", "dep32", "decode"): 4.3575562179641425,
    ("vr-nvl72", "tp8", "decode"): 2.411760948785318,
}


def test_defaults_give_the_numbers_from_before_the_move(cli, monkeypatch):
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.specs.model import load_model
    from rubinperf.step.timing import step

    r = cli("estimate", "--json")
    assert r.code == 0, r
    got = {(x["hardware"], x["layout"], x["phase"]): x for x in r.json()}
    # Since then the model's indexer logits take their CUDA-core epilogue (3 FP32 operations per query, entry
    # and head), the stacks' TP paths fuse their all-reduces into the GEMM epilogues ([fusion]: time taken out),
    # their drafts exchange MoE tokens by all-gather + reduce-scatter ([ep]: every rank receives every token, more
    # bytes than a dispatch), their drafts' first decode forward runs over every verified token ([speculative]: 1 + k
    # rows per request, was one), Rubin reads interleaved HBM at 0.90 of its die-local rate (was 0.75) and the
    # November TP8 path runs mHC in its GEMM epilogues and the shared expert inside the routed GEMMs below 16 rows
    # ([fusion]: no kernels of their own), and a sparse decode CTA keeps its kernel's 128 top-k entries in flight
    # ([attention]; was the SM's whole cap, 64 KB on Rubin), and an unfused all-reduce picks its algorithm by message
    # size ([collective]; was two-shot at every size), and the indexer's top-k follows vLLM's top-k per row (one CTA
    # per query row, two reads of each row, the second from L2; was one read over every SM) and its logits' key
    # re-reads pass the L2 (kernels/attention.py), and the GB300 stack's dense GEMMs keep DeepGEMM's SM100 FP8 stages
    # in flight, one weight column's per column (dense_gemm_library; was every CTA's mma_bytes_in_flight_per_sm).
    # With those undone the step is the one from before the move, exactly.
    import rubinperf.kernels as K
    from rubinperf.kernels.attention import topk_select, visible_positions

    monkeypatch.setattr(K, "indexer_select", lambda tokens, q_per_seq, context, ratio, k, prefill:
                        topk_select(tokens, visible_positions(context, q_per_seq, prefill) / ratio, k))
    m = dataclasses.replace(load_model("deepseek-v4.1-flash"), indexer_epilogue_flops_per_head=0.0)
    since = {"vr-nvl72": dict(hbm_interleaved_bandwidth_factor=0.75, hbm_remote_bandwidth_factor=0.5)}
    for key, want in BEFORE_STEP_MS.items():
        if key[1].startswith("dep"):
            # MegaMoE's time now follows DeepGEMM's code (kernels/deepgemm.py: its blocks, stages, pulls and fixed
            # chain, fitted to DeepGEMM PR #316): a DEP step, one MegaMoE per MoE layer, no longer has the old figure
            continue
        if key[0] == "gb300-nvl72":  # silicon unchanged: the stack fields and the indexer's epilogue moved the steps
            assert (got[key]["step_time_ms"] < want) if key[1].startswith("tp") else (got[key]["step_time_ms"] > want), key
        lay = parse_layout(key[1])
        # ... and the host rule of before: step = max(GPU, CPU), DP sync by a linear all-reduce at 0.04 ms per rank
        # (now: recursive doubling at 0.3 ms a round; the host path, the slowest rank's work + the sync, exposed only past
        # the GPU step under async scheduling)
        plain = dataclasses.replace(load_platform(key[0]), tp_allreduce_fused=False, draft_ep_exchange="all-to-all",
                                    draft_first_pass="one-per-request", tp_mhc_in_epilogue=False,
                                    tp_shared_expert_fused_below_rows=0, dp_sync_algorithm="linear",
                                    sparse_entries_in_flight_per_cta=1 << 20, allreduce_algorithms=("two-shot",),
                                    allreduce_switch_bytes=(), dense_gemm_library="generic",
                                    dp_sync_per_rank_s=4e-5, l2_bytes_per_clock_per_sm=1e9,
                                    **since.get(key[0], {}))
        point = make_point(m, plain, lay)
        r = step(m, plain, lay, point)
        assert max(r.gpu_s, r.cpu_s) * 1e3 == pytest.approx(want, rel=1e-9), key
        assert got[key]["stack"] == DEFAULTS[key[0]]


# ---------------------------------------------------------------- swapping stacks

def _terms(hw, launch="graph"):
    k = gemm(16, 1024, 7168, weight="fp8", act="fp8", out="bf16")
    return kernel_time(k, hw, launch=launch)


def test_swapping_the_stack_changes_only_software_fields():
    gb = load_platform("gb300-nvl72")
    gb_nov = load_platform("gb300-nvl72", "vllm-rubin-nov2026")
    for f in spec_fields(Hardware):
        assert getattr(gb_nov, f.name) == getattr(gb, f.name), f.name
    nov = load_stack("vllm-rubin-nov2026")
    for f in spec_fields(Stack):
        assert getattr(gb_nov, f.name) == getattr(nov, f.name), f.name
    # and the reverse: another rack under one stack keeps every stack field
    vr_oct = load_platform("vr-nvl72", "vllm-gb300-oct2026")
    for f in spec_fields(Stack):
        assert getattr(vr_oct, f.name) == getattr(gb, f.name), f.name


def test_the_november_stack_on_gb300_splits_k_where_the_october_one_cannot():
    """Hand-derived: a 16 x 1024 x 7168 GEMM has ceil(16/32) x 1024/128 = 8 tiles on 160 SMs; the October
    stack runs 8 CTAs, the November one splits K by min(4, floor(160/8)=20, floor(7168/1280)=5) = 4: 32 CTAs.
    8 CTAs x 7 stages keep 8 x 131 kB in flight, 1.05 MB / 0.5 us = 2.1 TB/s: short of GB300's HBM rate, so
    the October stack pays a parallelism term that the November one does not."""
    from rubinperf.roofline import occupancy

    k = gemm(16, 1024, 7168, weight="fp8", act="fp8", out="bf16")
    ctas_oct, _, _ = occupancy(k, load_platform("gb300-nvl72"))
    ctas_nov, _, _ = occupancy(k, load_platform("gb300-nvl72", "vllm-rubin-nov2026"))
    assert (ctas_oct, ctas_nov) == (8, 32)
    t_oct, t_nov = _terms(load_platform("gb300-nvl72")), _terms(load_platform("gb300-nvl72", "vllm-rubin-nov2026"))
    assert t_nov.parallelism_s == 0.0 < t_oct.parallelism_s and t_nov.expected_s < t_oct.expected_s
    assert t_nov.sol_s == t_oct.sol_s          # the speed of light is the silicon's alone


def test_a_stack_whose_pipelines_do_not_fit_the_sm_is_refused(tmp_path):
    st = dataclasses.replace(load_stack("vllm-rubin-nov2026"), mma_bytes_in_flight_per_sm=1e6)
    p = tmp_path / "deep.toml"
    p.write_text(to_toml(st))
    with pytest.raises(SpecError) as info:
        load_platform("gb300-nvl72", str(p))
    msg = str(info.value)
    assert str(p) in msg and "kernel.mma_bytes_in_flight_per_sm" in msg and "shared_memory_per_sm_bytes" in msg
    assert "\n" not in msg


STACK_BAD = {
    "unknown-key": (lambda t: t.replace("[kernel]\n", "[kernel]\nsplit_k = 2\n", 1), ["kernel.split_k", "unknown"]),
    "hardware-key": (lambda t: t.replace("[kernel]\n", "[kernel]\nhbm_latency_s = 5e-7\n", 1), ["kernel.hbm_latency_s", "unknown"]),
    "missing-key": (lambda t: re.sub(r"^split_k_max = .*\n", "", t, flags=re.M), ["kernel.split_k_max", "missing"]),
    "missing-source": (lambda t: re.sub(r'^source = .*\n', "", t, count=1, flags=re.M), ["kernel.source", "missing"]),
    "float-for-int": (lambda t: re.sub(r"^split_k_max = .*$", "split_k_max = 2.5", t, flags=re.M), ["kernel.split_k_max", "integer"]),
    "efficiency-above-1": (lambda t: re.sub(r"^mma_compute_efficiency = .*$", "mma_compute_efficiency = 1.5", t, flags=re.M),
                           ["efficiency.mma_compute_efficiency", "at most"]),
    "eplb-worse-than-none": (lambda t: re.sub(r"^no_eplb_target_balancedness = .*$", "no_eplb_target_balancedness = 0.99", t, flags=re.M),
                             ["eplb.no_eplb_target_balancedness"]),
    "missing-table": (lambda t: t[: t.index("[eplb]")], ["[eplb]", "missing"]),
}


@pytest.mark.parametrize("case", sorted(STACK_BAD))
def test_bad_stack_spec_is_one_line_naming_file_and_key(case, tmp_path):
    edit, words = STACK_BAD[case]
    text = (REPO / "stacks" / "vllm-gb300-oct2026.toml").read_text()
    bad = edit(text)
    assert bad != text
    p = tmp_path / f"bad-{case}.toml"
    p.write_text(bad)
    with pytest.raises(SpecError) as info:
        load_stack(str(p))
    msg = str(info.value)
    assert str(p) in msg and "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_cli_bad_stack_is_one_line_and_exit_2(cli):
    for argv in (("estimate", "--stack", "vllm-gb301"), ("kernel", "copy", "--bytes", "1e9", "--stack", "nope.toml"),
                 ("estimate", "-H", "gb300-nvl72", "-H", "vr-nvl72", "--stack", "pytorch-2.11", "--stack",
                  "pytorch-2.11", "--stack", "pytorch-2.11")):
        r = cli(*argv)
        assert r.code == 2, (argv, r)
        assert r.err.count("\n") == 1 and "Traceback" not in r.err, r.err


# ---------------------------------------------------------------- --stack and --set reach the roofline

def test_stack_option_on_every_command(cli):
    r = cli("kernel", "gemm", "--m", "16", "--n", "1024", "--k", "7168", "--dtype", "fp8", "-H", "gb300-nvl72",
            "--launch", "graph", "--json")
    r2 = cli("kernel", "gemm", "--m", "16", "--n", "1024", "--k", "7168", "--dtype", "fp8", "-H", "gb300-nvl72",
             "--launch", "graph", "--stack", "vllm-rubin-nov2026", "--json")
    assert r.code == r2.code == 0
    assert r.json()["stack"] == "vllm-gb300-oct2026" and r2.json()["stack"] == "vllm-rubin-nov2026"
    assert r2.json()["time_ms"] < r.json()["time_ms"] and r2.json()["sol_time_ms"] == r.json()["sol_time_ms"]
    for argv in (("estimate", "-H", "gb300-nvl72", "-l", "dep32", "--stack", "vllm-rubin-nov2026", "--json"),
                 ("explain", "step", "-H", "gb300-nvl72", "-l", "tp8", "--stack", "vllm-rubin-nov2026", "--json"),
                 ("sensitivity", "-H", "gb300-nvl72", "-l", "tp8", "--stack", "vllm-rubin-nov2026", "--json")):
        r = cli(*argv)
        assert r.code == 0, (argv, r)
    est = cli("estimate", "-H", "gb300-nvl72", "-l", "dep32", "--stack", "vllm-rubin-nov2026", "--json").json()
    assert est[0]["stack"] == "vllm-rubin-nov2026"


def test_set_reaches_stack_fields_by_prefix_and_bare_name():
    gb = load_platform("gb300-nvl72")
    a = apply_overrides(["stack.split_k_max=4"], hardware=gb)["hardware"]
    b = apply_overrides(["split_k_max=4"], hardware=gb)["hardware"]
    assert a.split_k_max == b.split_k_max == 4 and a.hbm_latency_s == gb.hbm_latency_s
    with pytest.raises(SpecError, match="a stack field, not a hardware one"):
        apply_overrides(["hardware.split_k_max=4"], hardware=gb)
    with pytest.raises(SpecError, match="a hardware field, not a stack one"):
        apply_overrides(["stack.hbm_latency_s=1e-6"], hardware=gb)
    with pytest.raises(SpecError, match="shared_memory_per_sm_bytes"):
        apply_overrides(["stack.mma_bytes_in_flight_per_sm=1e7"], hardware=gb)


def test_eplb_balancedness_comes_from_the_stack(tmp_path):
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.specs.model import load_model

    m = load_model("deepseek-v4.1-flash")
    gb = apply_overrides(["stack.eplb_target_balancedness=0.8"], hardware=load_platform("gb300-nvl72"))["hardware"]
    p = make_point(m, gb, parse_layout("dep32"), phase="decode")
    assert (p.balancedness, p.draft_balancedness) == (0.8, 0.89)
    p = make_point(m, gb, parse_layout("dep32"), phase="decode", eplb=False)
    assert (p.balancedness, p.draft_balancedness) == (0.35, 0.21)


def test_stack_floats_are_symbols_in_the_symbolic_path():
    from rubinperf.analysis import symbolic as S

    fields = S.hardware_fields()
    for name in ("mma_compute_efficiency", "mma_prologue_cycles", "pdl_hidden_s", "dp_sync_per_rank_s"):
        assert name in fields
    assert not set(POINT_FIELDS) & set(fields)          # EPLB sets the point's default only
    assert "split_k_max" in S.structural_hardware_fields()
    gb = load_platform("gb300-nvl72", "vllm-rubin-nov2026")
    k = gemm(16, 4096, 7168, weight="fp8", act="fp8", out="bf16")
    sym = kernel_time(k, S.symbolic_hardware(gb), launch="graph").expected_s
    assert S.sym("mma_compute_efficiency") in sym.free_symbols or S.sym("mma_prologue_cycles") in sym.free_symbols
    assert float(sym.subs(S.hardware_values(gb))) == pytest.approx(float(kernel_time(k, gb, launch="graph").expected_s), rel=1e-12)


def test_list_stacks(cli):
    r = cli("list", "stacks", "--json")
    assert r.code == 0
    recs = {x["name"]: x for x in r.json()}
    assert set(STACKS) <= set(recs)
    assert recs["vllm-gb300-oct2026"]["default_for"] == ["b200", "b200-cluster", "b300", "gb200-nvl72", "gb300-nvl72"]
    assert recs["vllm-rubin-nov2026"]["default_for"] == ["vr-nvl72"]


# ---------------------------------------------------------------- silicon x software in compare

def test_compare_split_multiplies_to_the_whole_ratio(cli):
    r = cli("compare", "--json", "--kernels", "0", "--max-batch", "256")
    assert r.code == 0, r
    recs = [x for x in r.json() if x["hardware"] == "vr-nvl72" and x["ratio"] is not None]
    assert len(recs) == 4
    for x in recs:
        assert x["stack"] == "vllm-rubin-nov2026" and x["baseline_stack"] == "vllm-gb300-oct2026"
        assert x["ratio_hardware"] * x["ratio_software"] == pytest.approx(x["ratio"], rel=1e-12)
    # the software part is GB300 on the November stack over GB300 on its own: ask for it directly
    su = next(x for x in recs if x["metric"] == "single_user")
    own = cli("compare", "-H", "gb300-nvl72", "--json", "--kernels", "0", "--max-batch", "256").json()
    nov = cli("compare", "-H", "gb300-nvl72", "--stack", "vllm-rubin-nov2026", "--json", "--kernels", "0",
              "--max-batch", "256").json()
    pick = lambda rs: next(x for x in rs if x["metric"] == "single_user")["tokens_per_s_per_user"]  # noqa: E731
    assert su["ratio_software"] == pytest.approx(pick(nov) / pick(own), rel=1e-12)
    assert su["ratio_software"] > 1.0     # split-K, deeper pipelines: the November kernels are faster at batch 1


def test_compare_same_stack_puts_everything_on_silicon(cli):
    r = cli("compare", "--json", "--kernels", "0", "--max-batch", "64", "--stack", "vllm-rubin-nov2026")
    assert r.code == 0, r
    for x in r.json():
        if x["hardware"] == "vr-nvl72" and x["ratio"] is not None:
            assert x["ratio_software"] == 1.0 and x["ratio_hardware"] == x["ratio"]


def test_compare_table_fits_80_columns_and_names_stacks(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("compare", "--kernels", "0", "--max-batch", "64")
    assert r.code == 0, r
    assert "Silicon vs software" in r.out and "vllm-rubin-nov2026" in r.out and "vllm-gb300-oct2026" in r.out
    assert max(len(line) for line in r.out.splitlines()) <= 80


def test_validate_points_may_name_a_stack(tmp_path, cli):
    from rubinperf.analysis.validate import load_points, validate

    text = """
[[point]]
id = "gb300-tp8-oct"
source = "test"
metric = "tokens_per_s_per_user"
hardware = "gb300-nvl72"
layout = "tp8"
phase = "decode"
batch = 1
published = 1000.0
band = [0.1, 10.0]

[[point]]
id = "gb300-tp8-nov"
source = "test"
metric = "tokens_per_s_per_user"
hardware = "gb300-nvl72"
stack = "vllm-rubin-nov2026"
layout = "tp8"
phase = "decode"
batch = 1
published = 1000.0
band = [0.1, 10.0]
"""
    p = tmp_path / "points.toml"
    p.write_text(text)
    oct_, nov = validate(load_points(p))
    assert oct_["stack"] is None and nov["stack"] == "vllm-rubin-nov2026"
    assert nov["predicted"] > oct_["predicted"]                  # the November kernels on the same rack
    both = validate(load_points(p), stack="vllm-rubin-nov2026")
    assert both[0]["predicted"] == both[1]["predicted"] == nov["predicted"]
    r = cli("validate", "--points", str(p), "--stack", "vllm-gb300-oct2027")
    assert r.code == 2 and r.err.count("\n") == 1


def test_validate_single_user_points_at_p90(tmp_path):
    """A P90 point is the mean times the stack's P90 factor; with a fixed acceptance only the step spreads:
    exp(-1.2816 x 0.0145) = 0.9816 of the mean (the November post's single-user pair: 1,810 / 1,844 = 0.9816)."""
    from rubinperf.analysis.validate import load_points, validate

    base = """
[[point]]
id = "x"
source = "test"
metric = "tokens_per_s_per_user"
hardware = "vr-nvl72"
layout = "tp8"
phase = "decode"
batch = 1
context = 32768
acceptance = 3.51
published = 1000.0
band = [0.1, 10.0]
"""
    p = tmp_path / "p.toml"
    p.write_text(base + base.replace('id = "x"', 'id = "y"\ninteractivity_stat = "p90"\nfixed_acceptance = true')
                 + base.replace('id = "x"', 'id = "z"\ninteractivity_stat = "p90"'))
    mean, fixed, spread = validate(load_points(p))
    assert fixed["predicted"] / mean["predicted"] == pytest.approx(np.exp(-1.2816 * 0.0145), rel=2e-3)
    assert fixed["predicted"] / mean["predicted"] == pytest.approx(1810 / 1844, rel=5e-3)
    assert spread["predicted"] < fixed["predicted"] < mean["predicted"]
    p.write_text(base.replace('id = "x"', 'id = "x"\ninteractivity_stat = "p95"'))
    with pytest.raises(SpecError, match="interactivity_stat"):
        load_points(p)


def test_tp_allreduce_fusion_is_the_stack_s_and_only_changes_the_all_reduces():
    import dataclasses

    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.specs.model import load_model
    from rubinperf.step.timing import step

    m, lay = load_model("deepseek-v4.1-flash"), parse_layout("tp8")
    fused = load_platform("vr-nvl72")
    plain = dataclasses.replace(fused, tp_allreduce_fused=False)
    assert fused.tp_allreduce_fused and not load_platform("h200").tp_allreduce_fused
    a, b = (step(m, hw, lay, make_point(m, hw, lay)) for hw in (fused, plain))
    rows_a, rows_b = a.by_name(), b.by_name()
    assert rows_a.keys() == rows_b.keys()
    for name in rows_a:
        if "all-reduce" in name:
            assert rows_a[name]["expected_s"] < rows_b[name]["expected_s"]
        else:
            assert rows_a[name]["expected_s"] == rows_b[name]["expected_s"]


def test_die_local_expert_weights_are_the_stack_s():
    import dataclasses

    from rubinperf.kernels.cost import Cost, Kernel
    from rubinperf.roofline import kernel_time

    nov = load_platform("vr-nvl72")
    old = load_platform("vr-nvl72", "vllm-gb300-oct2026")
    assert nov.die_local_expert_weights and not old.die_local_expert_weights
    # 1 GB of expert weights streamed by a grouped GEMM with every SM busy: read at the local rate (x1.0) on the
    # November stack, at Rubin's interleaved rate (x0.75) on the October one.
    k = Kernel("grouped_gemm", Cost(weight_bytes=1e9, launches=1), groups=384, rows=64, n=4096, k=4096)
    same = dataclasses.replace(old, grouped_hbm_efficiency=nov.grouped_hbm_efficiency)
    t_nov, t_old = (kernel_time(k, hw, die_local_weights=True).memory_s for hw in (nov, same))
    assert t_old / t_nov == pytest.approx(nov.hbm_local_bandwidth_factor / nov.hbm_interleaved_bandwidth_factor)
