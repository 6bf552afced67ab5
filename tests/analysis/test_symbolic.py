"""One source of truth: the sympy formulas of `explain` are the numeric path's own functions
evaluated over symbols, so substituting numbers into them gives the numeric path's result.

Hypothesis draws shapes and spec values; the symbolic expression, evaluated at those values,
must equal the numeric path to 1e-9 relative, for the generic kernels and whole decode steps.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sympy = pytest.importorskip("sympy")

from rubinperf.analysis import symbolic as S  # noqa: E402
from rubinperf.roofline import BOUNDS, KernelTime
from rubinperf.kernels.cost import Cost  # noqa: E402
from rubinperf.specs.layout import parse_layout  # noqa: E402
from rubinperf.roofline import kernel_time  # noqa: E402
from rubinperf.step.point import _STACK_POINT_FIELDS, make_point  # noqa: E402
from rubinperf.specs.stack import load_platform  # noqa: E402
from rubinperf.specs.model import load_model  # noqa: E402
from rubinperf.step.timing import step  # noqa: E402

REL = 1e-9
V41 = load_model("deepseek-v4.1-flash")
GB300 = load_platform("gb300-nvl72")
VR = load_platform("vr-nvl72")
H200 = load_platform("h200")
FLOAT_FIELDS = sorted(S.hardware_fields())
COST_KEYS = [f.name for f in dataclasses.fields(Cost)] + ["flops", "bytes", "hbm_bytes"]
TIME_KEYS = [f.name for f in dataclasses.fields(KernelTime)]


def close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b)) or abs(a - b) < 1e-300


# Spec values: every float field of a bundled GPU (but `fixed`), each scaled by its own factor in [1/4, 4].
def scaled_hardware(choices, fixed=()):
    names = [f for f in FLOAT_FIELDS if f not in fixed]
    return st.tuples(
        st.sampled_from(choices),
        st.lists(st.floats(0.25, 4.0), min_size=len(names), max_size=len(names)),
    ).map(lambda t: dataclasses.replace(t[0], **{f: getattr(t[0], f) * k for f, k in zip(names, t[1])}))


hardware_values = scaled_hardware([GB300, VR, H200])
# Random values on GB300's structure: one symbolic build per layout (and per set of all-reduce algorithms). The
# stack fields a Point carries as numbers (MegaMoE's shared memory) stay GB300's: they are the point's structure.
rack_values = scaled_hardware([GB300], fixed=_STACK_POINT_FIELDS)


@functools.lru_cache(maxsize=None)
def symbolic_kernel(kind: str, dtype, causal: bool, ranks: int, hw_name: str, launch: str):
    """Cost and KernelTime of a generic kernel over shape and hardware symbols (built once per structure:
    the integer fields of the hardware, such as SMs and tile sizes, stay numbers)."""
    hw = {h.name: h for h in (GB300, VR, H200)}[hw_name]
    names = S.KERNEL_SHAPES[kind]
    kern = S.generic_kernel(kind, {n: S.sym(n) for n in names}, dtype=dtype, causal=causal, ranks=ranks,
                            gpus_per_tray=hw.gpus_per_tray)
    return kern.cost, kernel_time(kern, S.symbolic_hardware(hw), launch=launch)


def check_kernel(kind: str, shape: dict, hw, dtype=None, causal=False, ranks=8, launch="graph"):
    cost, t = symbolic_kernel(kind, dtype, causal, ranks, hw.name, launch)
    values = {**S.hardware_values(hw), **{S.sym(n): v for n, v in shape.items()}}
    num_kern = S.generic_kernel(kind, shape, dtype=dtype, causal=causal, ranks=ranks, gpus_per_tray=hw.gpus_per_tray)
    num_cost = num_kern.cost
    num_t = kernel_time(num_kern, hw, launch=launch)
    for key in COST_KEYS:
        sym_v, num_v = S.evaluate(getattr(cost, key), values), float(getattr(num_cost, key))
        assert close(sym_v, num_v), f"{kind} {key}: symbolic {sym_v!r} != numeric {num_v!r} at {shape}"
    for key in TIME_KEYS:
        sym_v, num_v = S.evaluate(getattr(t, key), values), float(getattr(num_t, key))
        assert close(sym_v, num_v), f"{kind} {key}: symbolic {sym_v!r} != numeric {num_v!r} at {shape}"


dims = st.integers(1, 65536)
DTYPES = st.sampled_from(["fp4", "fp8", "bf16", "fp32"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hw=hardware_values, m=dims, n=dims, k=dims, dtype=DTYPES, launch=st.sampled_from(["graph", "eager"]))
def test_gemm_symbolic_equals_numeric(hw, m, n, k, dtype, launch):
    check_kernel("gemm", {"m": m, "n": n, "k": k}, hw, dtype=dtype, launch=launch)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hw=hardware_values, tokens=st.integers(1, 100_000), groups=st.integers(1, 1024), n=dims, k=dims, dtype=DTYPES)
def test_grouped_gemm_symbolic_equals_numeric(hw, tokens, groups, n, k, dtype):
    check_kernel("grouped-gemm", {"tokens": tokens, "groups": groups, "n": n, "k": k}, hw, dtype=dtype)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hw=hardware_values, batch=st.integers(1, 512), kv_heads=st.integers(1, 16), group=st.integers(1, 16),
       q_len=st.integers(1, 4096), extra=st.integers(0, 1_000_000), head_dim=st.sampled_from([64, 128, 192, 512]),
       dtype=DTYPES, causal=st.booleans())
def test_attention_symbolic_equals_numeric(hw, batch, kv_heads, group, q_len, extra, head_dim, dtype, causal):
    shape = {"batch": batch, "heads": kv_heads * group, "kv_heads": kv_heads, "q_len": q_len,
             "kv_len": q_len + extra, "head_dim": head_dim}
    check_kernel("attention", shape, hw, dtype=dtype, causal=causal)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hw=hardware_values, nbytes=st.floats(1.0, 1e12), kind=st.sampled_from(["copy", "all-reduce", "all-to-all"]),
       ranks=st.sampled_from([2, 4, 8, 16, 72]))
def test_streaming_and_collectives_symbolic_equals_numeric(hw, nbytes, kind, ranks):
    check_kernel(kind, {"bytes": nbytes}, hw, ranks=ranks)


# ---------------------------------------------------------------- whole decode steps

STEP_METRICS = ("expected_s", "sol_s", "gpu_s", "cpu_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hw=rack_values, layout=st.sampled_from(["dep32", "tp8"]), batch=st.floats(1, 256),
       context=st.floats(0, 1_000_000), k=st.integers(0, 7), accept=st.floats(0, 1), bal=st.floats(0.3, 1.0))
def test_decode_step_symbolic_equals_numeric(hw, layout, batch, context, k, accept, bal):
    lay = parse_layout(layout)
    base = make_point(V41, hw, lay, phase="decode")
    point = dataclasses.replace(base, batch=batch, context=context, draft_tokens=k, acceptance=1 + accept * k,
                                balancedness=bal if lay.kind == "dep" else 1.0)
    ss = S.symbolic_step(V41, hw, lay, point)          # cached: one build per layout
    numeric = step(V41, hw, lay, point)
    memo: dict = {}   # the metrics share their sub-expressions: each node's number is worked out once
    for key in STEP_METRICS:
        sym_v, num_v = S.evaluate(getattr(ss.result, key), ss.values, memo), float(getattr(numeric, key))
        assert close(sym_v, num_v), f"{layout} {key}: symbolic {sym_v!r} != numeric {num_v!r}"


def test_every_op_of_the_step_explains_to_its_breakdown_row():
    """explain OP is the estimate breakdown's row, for every op of a decode and a prefill step."""
    for layout, phase in (("dep32", "decode"), ("dep2", "prefill")):
        lay = parse_layout(layout)
        point = make_point(V41, GB300, lay, phase=phase)
        ss = S.symbolic_step(V41, GB300, lay, point)
        rows = step(V41, GB300, lay, point).by_name()
        assert S.op_names(ss.result) == list(rows)
        for name, row in rows.items():
            ex = S.explain_op(ss, name)
            assert close(ex.numbers["expected_s"], float(row["expected_s"])), name
            assert close(ex.numbers["sol_s"], float(row["sol_s"])), name
            assert close(ex.numbers["flops"], float(row["flops"])), name
            assert close(ex.numbers["bytes"], float(row["bytes"])), name
            for term in BOUNDS:
                assert close(ex.numbers[f"{term}_s"], float(row["terms"][term])), (name, term)


def test_symbols_are_named_after_spec_fields_and_shapes():
    ex = S.explain_kernel("gemm", {"m": 16, "n": 4096, "k": 4096}, GB300)
    assert {"m", "n", "k", "hbm_bandwidth_bytes_per_s", "bf16_dense_flops_per_s", "kernel_launch_stream_s",
            "hbm_latency_s"} <= set(ex.symbols)
    # GB300's dense GEMMs keep DeepGEMM's pipeline stages in flight (a number of its code); a generic library the field
    assert "mma_bytes_in_flight_per_sm" not in ex.symbols
    assert "mma_bytes_in_flight_per_sm" in S.explain_kernel("gemm", {"m": 16, "n": 4096, "k": 4096}, VR).symbols
    assert S.to_str(ex.exprs["flops"]) == "2*k*m*n"
    assert ex.numbers["flops"] == 2 * 16 * 4096 * 4096
    lay = parse_layout("dep32")
    ss = S.symbolic_step(V41, GB300, lay, make_point(V41, GB300, lay))
    moe = S.explain_op(ss, "MegaMoE (dispatch + experts + combine)")
    assert {"batch", "draft_tokens", "balancedness", "hbm_bandwidth_bytes_per_s", "nvlink_bandwidth_bytes_per_s",
            "fp8_fp4_dense_flops_per_s"} <= set(moe.symbols)
    # 96 tokens per rank: all 12 local experts' weights stream at the rate their bytes in flight allow (memory, with
    # no parallelism term of its own for MegaMoE), beside MegaMoE's fixed chain of syncs and NVLink barriers (latency,
    # megamoe_sync_s + megamoe_setup_s per layer): memory binds, the chain comes second
    terms = sorted(("compute", "memory", "parallelism", "comm", "latency"), key=lambda t: -moe.numbers[f"{t}_s"])
    assert terms[:2] == ["memory", "latency"] and moe.bound == "memory"
    assert moe.numbers["parallelism_s"] == 0


def test_symbolic_hardware_is_a_hardware_record():
    shw = S.symbolic_hardware(VR)
    assert type(shw) is type(VR)
    assert shw.peak_flops("fp4") == sympy.Symbol("fp4_dense_flops_per_s", positive=True)
    assert shw.mma_compute_efficiency.name == "mma_compute_efficiency"
    assert shw.sm_count == VR.sm_count and shw.mma_tile_rows == VR.mma_tile_rows  # integer fields (SMs, tiles) stay numbers: they shape the formulas
    assert shw.gpus_per_tray == VR.gpus_per_tray     # integer structure stays a number


# ---------------------------------------------------------------- the commands


def test_explain_kernel_matches_the_kernel_command(cli):
    k = cli("kernel", "gemm", "--m", "16", "--n", "4096", "--k", "4096", "--json")
    e = cli("explain", "gemm", "--m", "16", "--n", "4096", "--k", "4096", "--json")
    assert k.code == 0 and e.code == 0, (k, e)
    kr, er = k.json(), e.json()
    for key in ("time_ms", "sol_time_ms", "bound"):
        assert er[key] == pytest.approx(kr[key], rel=REL) if key != "bound" else er[key] == kr[key]
    assert er["terms"]["flops"]["formula"] == "2*k*m*n"
    assert er["terms"]["flops"]["substituted"] == "2*16*4096*4096"


def test_explain_megamoe_text_latex_and_json(cli):
    r = cli("explain", "megamoe", "--formulas")
    assert r.code == 0, r
    assert "MegaMoE (dispatch + experts + combine)" in r.out
    assert "hbm_bandwidth_bytes_per_s" in r.out and "with the numbers" in r.out and "bound: memory (compute" in r.out   # MegaMoE's weight stream at its in-flight rate (test above)
    r = cli("explain", "megamoe", "--latex")
    assert r.code == 0 and r"\mathrm{hbm\_bandwidth\_bytes\_per\_s}" in r.out and r"\frac" in r.out
    est = cli("estimate", "-H", "gb300-nvl72", "-l", "dep32", "--json").json()[0]
    row = next(b for b in est["breakdown"] if b["kernel"].startswith("MegaMoE"))
    rec = cli("explain", "MEGAMOE", "--json").json()
    assert rec["time_ms"] == pytest.approx(row["time_ms"], rel=REL)
    assert rec["sol_time_ms"] == pytest.approx(row["sol_time_ms"], rel=REL)


@pytest.mark.parametrize("name, op", [("mqa logits", "MQA logits (indexer)"), ("mqa-logits", "MQA logits (indexer)"),
                                      ("Draft: LM", "draft: LM head"), ("cpu", "CPU overhead (scheduler, sampling)"), ("dp s", "DP sync")])
def test_explain_accepts_case_insensitive_prefixes(cli, name, op):
    r = cli("explain", name, "--json")
    assert r.code == 0, r
    assert r.json()["kernel"] == op


@pytest.mark.parametrize("args, culprit", [
    (("mega",), "ambiguous"),
    (("deepselect",), "DeepSelect (sampler)"),
    (("megamo3",), "close"),
    (("gemm", "--m", "16"), "--n"),
    (("gemm", "--m", "16", "--n", "1", "--k", "1", "--heads", "4"), "--heads"),
    (("megamoe", "--m", "16"), "--m"),
    (("step", "-l", "dep7"), "dep7"),
    (("step", "-H", "b9000"), "b9000"),
    (("gemm", "--m", "16", "--n", "1", "--k", "1", "--dtype", "fp6"), "fp6"),
])
def test_explain_bad_input_is_one_line_exit_2(cli, args, culprit):
    r = cli("explain", *args)
    assert r.code == 2, r
    assert culprit in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_explain_step_decomposition(cli):
    r = cli("explain", "step", "-l", "tp8", "--formulas")
    assert r.code == 0, r
    assert "step time = GPU + exposed" in r.out and "acceptance/step_time_s" in r.out and "MegaMoE (experts)" in r.out
    assert "host path = step_overhead_s" in r.out and "max(0, host path - GPU)" in r.out and "P90 / mean interactivity" in r.out   # the host and P90 terms
    rec = cli("explain", "step", "-l", "tp8", "--json").json()
    it = rec["interactivity"]
    assert (it["acceptance_concentration"], it["step_time_spread"]) == (21.5, 0.0145) and "2601.11580" in it["source"]
    assert it["p90_by_sigma_and_nu"]["0.05"]["10"] == pytest.approx(0.712, abs=2e-3)   # the former assumed spreads
    assert rec["top"]["cpu_s"]["value"] == pytest.approx(0.2e-3)   # TP: no DP sync, one scheduler: its 0.2 ms
    assert rec["top"]["exposed_s"]["value"] == 0.0                   # shorter than the GPU step: hidden (async)
    est = cli("estimate", "-H", "gb300-nvl72", "-l", "tp8", "--json").json()[0]
    assert rec["step_time_ms"] == pytest.approx(est["step_time_ms"], rel=REL)
    assert rec["top"]["tokens_per_s_per_user"]["value"] == pytest.approx(est["tokens_per_s_per_user"], rel=REL)
    assert sum(op["time_ms"] for op in rec["ops"] if op["part"] != "cpu") == pytest.approx(est["gpu_time_ms"], rel=REL)


def test_sympy_stays_out_of_import_and_estimate():
    code = ("import sys; from rubinperf.cli import main; "
            "rc = main(['estimate', '--quiet']); "
            "print(rc, 'sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "False"], out


def test_explain_prints_the_same_text_whatever_the_hash_seed():
    # Substituted formulas used to list their terms in set order, which follows PYTHONHASHSEED.
    import os

    def run(seed):
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "COLUMNS": "100"}
        out = subprocess.run([sys.executable, "-m", "rubinperf", "explain", "megamoe", "--json"], env=env,
                             capture_output=True, text=True, check=True)
        return out.stdout

    assert run(1) == run(2)


def test_a_formula_that_is_not_a_number_at_the_point_is_one_line(cli):
    """A vocabulary of 3 split over TP8 makes the LM head's tiles 0/0 in the symbolic path (found by the edges fuzz):
    an error naming the cause, exit 2, not an internal error."""
    r = cli("explain", "lm head", "-H", "vr-nvl72", "-l", "tp8", "--set", "vocab_size=3", "--formulas")
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and "not a number at these values" in r.err and "internal" not in r.err


def test_explain_names_the_attention_precisions_and_fp8_mma_halves_the_compute_term():
    import dataclasses

    lay = parse_layout("dep32")
    name = "MegaAttn (sparse attention)"
    ss = S.symbolic_step(V41, GB300, lay, make_point(V41, GB300, lay))
    ex = S.explain_op(ss, name)
    assert ex.context["formats"] == "KV cache fp4 (288 B per entry), attention MMA bf16"
    assert "bf16_dense_flops_per_s" in ex.symbols and "fp8_dense_flops_per_s" not in ex.symbols
    assert "formats" not in S.explain_op(ss, "MQA logits (indexer)").context
    fp8 = dataclasses.replace(GB300, attention_mma_dtype="fp8")
    v41_fp8 = dataclasses.replace(V41, kv_cache_dtype="fp8")
    ex8 = S.explain_op(S.symbolic_step(v41_fp8, fp8, lay, make_point(v41_fp8, fp8, lay)), name)
    assert ex8.context["formats"] == "KV cache fp8 (528 B per entry), attention MMA fp8"
    assert ex8.numbers["compute_s"] == pytest.approx(ex.numbers["compute_s"] / 2, rel=1e-9)
    assert ex8.numbers["kv_bytes"] > ex.numbers["kv_bytes"]


def test_pretty_products_print_without_loading_sympy_s_units():
    """A product prints as sympy prints it, with sympy.physics.units neither loaded nor left behind as a stand-in
    (in a fresh interpreter: another test may have imported it), and the real module still imports afterwards."""
    code = ("import sys, sympy\nfrom sympy.printing.pretty.pretty import PrettyPrinter\n"
            "from rubinperf.analysis.symbolic import to_pretty\n"
            "a, b, c = sympy.symbols('a b c')\ne = 2 * a * b / c + sympy.Max(a * c, b)\n"
            "ours = to_pretty(e)\nassert 'sympy.physics.units' not in sys.modules\n"
            "from sympy.physics.units import Quantity\n"
            "assert Quantity.__module__.startswith('sympy.physics.units')\n"
            "assert to_pretty(e) == ours and 'a*b' not in ours\nprint(ours)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "max(" in out.stdout
