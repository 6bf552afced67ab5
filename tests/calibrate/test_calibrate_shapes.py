"""The model-shape suite (`calibrate --suite shapes`) without a GPU: plan, costs, CSV schema, committed data."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from rubinperf.calibrate.measure import shapes
from rubinperf.calibrate.plan import (
    CHASE_BYTES,
    KERNEL_COLUMNS,
    SHAPE_EXPERT_GROUPS,
    SHAPE_ROWS_PER_EXPERT,
    SHAPES_COLUMNS,
    STREAM_CTAS,
    read_csv,
    row_cost,
    rows_to_csv,
    shapes_plan,
)
from rubinperf.cli import main
from rubinperf.errors import SpecError
from rubinperf.kernels import attention, copy, elementwise, gemm, grouped_gemm

REPO = Path(__file__).resolve().parent.parent.parent
SHAPES_CSV = REPO / "calibration" / "h200" / "shapes.csv"
L2 = 60 * 2 ** 20
KERNEL_FAMILIES = {"launch", "copy", "elementwise", "gemm", "grouped_gemm", "attention_decode", "stream_ctas"}
ALL_FAMILIES = KERNEL_FAMILIES | {"pointer_chase"}
V4_GEMMS = {(1280, 5120), (32768, 1280), (4096, 1280), (576, 5120), (5120, 8192), (4608, 5120), (5120, 2304),
            (129280, 5120), (16160, 5120)}


def _measured(plan):
    """Synthetic rows as the benchmark writes them: each kernel row in both modes, the chase eager only."""
    out = []
    for i, r in enumerate(plan):
        for mode in (("eager",) if r["family"] == "pointer_chase" else ("graph", "eager")):
            x = dict(r, mode=mode, impl="synthetic", measured_s=1e-6 * (1 + i), spread=0.01, samples=15, calls=4,
                     launches_source="nominal")
            if r["family"] == "attention_decode":
                x["check_rel_err"] = 0.003
            out.append(shapes._with_cost(x))
    return out


def test_plan_has_every_family_at_the_model_shapes():
    plan = shapes_plan()
    assert {r["family"] for r in plan} == ALL_FAMILIES
    gemms = {(r["n"], r["k"]) for r in plan if r["family"] == "gemm"}
    assert gemms == V4_GEMMS
    assert {r["m"] for r in plan if r["family"] == "gemm"} == {2 ** i for i in range(16)}
    assert max(r["m"] for r in plan if r["family"] == "gemm" and r["n"] == 129280) <= 8192
    assert {r["dtype"] for r in plan if r["family"] == "gemm" and r["n"] == 129280} == {"bf16"}
    fp8 = {(r["n"], r["k"]) for r in plan if r["family"] == "gemm" and r["dtype"] == "fp8"}
    assert fp8 == V4_GEMMS - {(129280, 5120), (16160, 5120)}
    balanced = [r for r in plan if r["family"] == "grouped_gemm" and r["routing"] == "balanced" and r["dtype"] == "fp8"]
    assert {r["groups"] for r in balanced} == set(SHAPE_EXPERT_GROUPS) == {12, 24, 48, 96}
    assert {(r["n"], r["k"]) for r in balanced} == {(4608, 5120), (5120, 2304)}
    assert {r["rows"] // r["groups"] for r in balanced} == set(SHAPE_ROWS_PER_EXPERT)
    assert all(r["rows"] % r["groups"] == 0 and r["touched"] == r["groups"] for r in balanced)
    assert any(r["routing"] == "uniform" and "touched" not in r for r in plan if r["family"] == "grouped_gemm")
    assert any(r["dtype"] == "bf16" for r in plan if r["family"] == "grouped_gemm")
    attn = [r for r in plan if r["family"] == "attention_decode"]
    assert {(r["head_dim"], r["v_head_dim"], r["kv_heads"], r["shared_kv"]) for r in attn} == {(576, 512, 1, True)}
    assert {r["heads"] for r in attn} == {64, 8} and {r["q_len"] for r in attn} == {1, 6}
    assert {r["kv_len"] for r in attn} == {128, 640, 2048, 8192, 32768, 131072}
    assert {r["batch"] for r in attn} == {1, 8, 32, 64}
    assert all(r["batch"] * r["kv_len"] <= 2 ** 21 for r in attn)
    stream = [r for r in plan if r["family"] == "stream_ctas"]
    assert {r["ctas"] for r in stream} == set(STREAM_CTAS) and 132 in STREAM_CTAS
    assert {r["inflight_bytes"] for r in stream} == {4096, 16384, 65536}
    assert all(r["nbytes"] >= 256 * 2 ** 20 for r in stream)
    chase = [r for r in plan if r["family"] == "pointer_chase"]
    assert min(CHASE_BYTES) < L2 / 2 and max(CHASE_BYTES) >= 2 ** 31  # an L2 point and an HBM point
    assert all(r["stride_bytes"] >= 128 and r["steps"] >= 100_000 for r in chase)
    ew = [r for r in plan if r["family"] == "elementwise"]
    assert {r["m"] for r in ew} == {1, 8, 64, 512, 4096, 32768} and {r["n"] for r in ew} == {4 * 5120}
    assert all(r["nbytes"] == 2 * r["m"] * r["n"] * 4 for r in ew)


def test_quick_plan_is_small_and_covers_every_family():
    quick = shapes_plan(quick=True)
    assert {r["family"] for r in quick} == ALL_FAMILIES
    assert len(quick) < len(shapes_plan()) / 5


def test_row_cost_of_the_new_rows_is_the_models_kernel_functions():
    assert row_cost({"family": "attention_decode", "dtype": "bf16", "batch": 8, "heads": 64, "kv_heads": 1, "q_len": 6,
                     "kv_len": 8192, "head_dim": 576, "v_head_dim": 512, "shared_kv": True, "causal": False}) == \
        attention(8, 64, 6, 8192, 576, dtype="bf16", kv_heads=1, v_head_dim=512, shared_kv=True).cost
    c = row_cost({"family": "attention_decode", "dtype": "bf16", "batch": 1, "heads": 64, "kv_heads": 1, "q_len": 1,
                  "kv_len": 1000, "head_dim": 576, "v_head_dim": 512, "shared_kv": True, "causal": False})
    assert c.kv_bytes == 1000 * 576 * 2  # the one latent, read once
    assert c.flops == 2 * 64 * 1000 * (576 + 512)
    assert row_cost({"family": "stream_ctas", "dtype": "", "ctas": 4, "inflight_bytes": 4096, "nbytes": 1 << 28}) == \
        elementwise(1 << 28, 0).cost
    assert row_cost({"family": "elementwise", "dtype": "fp32", "m": 8, "n": 20480, "nbytes": 2 * 8 * 20480 * 4}) == \
        elementwise(8 * 20480 * 4, 8 * 20480 * 4).cost
    chase = row_cost({"family": "pointer_chase", "dtype": "", "nbytes": 1 << 30, "stride_bytes": 128, "steps": 10})
    assert chase.bytes == 0 and chase.flops == 0 and chase.launches == 1
    assert row_cost({"family": "gemm", "dtype": "fp8", "m": 64, "n": 32768, "k": 1280}) == \
        gemm(64, 32768, 1280, weight="fp8", act="fp8", out="bf16").cost
    assert row_cost({"family": "grouped_gemm", "dtype": "fp8", "rows": 192, "groups": 12, "n": 4608, "k": 5120,
                     "touched": 12}) == grouped_gemm(192, 12, 4608, 5120, weight="fp8", act="fp8", out="bf16", touched=12).cost
    assert row_cost({"family": "copy", "dtype": "bf16", "nbytes": 1 << 20}) == copy(1 << 20).cost


def test_shapes_csv_round_trip(tmp_path):
    rows = _measured(shapes_plan())
    p = tmp_path / "shapes.csv"
    p.write_text(rows_to_csv(rows, SHAPES_COLUMNS))
    assert p.read_text().splitlines()[0] == ",".join(SHAPES_COLUMNS)
    kind, back = read_csv(p)
    assert kind == "kernels" and len(back) == len(rows)
    for a, b in zip(rows, back):
        assert b["mode"] == a["mode"] and b["measured_s"] == a["measured_s"] and b["impl"] == a["impl"]
        assert row_cost(b) == row_cost(a)
        for col in ("ctas", "inflight_bytes", "stride_bytes", "steps", "v_head_dim", "routing"):
            assert b.get(col) == a.get(col) or (b.get(col) in (None, "") and a.get(col) is None)
        assert b["shared_kv"] is bool(a.get("shared_kv", False))


def test_default_suite_csv_reads_as_graph_rows():
    kind, rows = read_csv(REPO / "calibration" / "h200" / "measurements.csv")
    assert kind == "kernels" and rows and {r["mode"] for r in rows} == {"graph"}
    assert KERNEL_COLUMNS == tuple(c for c in SHAPES_COLUMNS if c in KERNEL_COLUMNS)  # same order, a superset


@pytest.mark.parametrize("edit, fragment", [
    ({"mode": "warm"}, "mode"),
    ({"ctas": ""}, "ctas"),
    ({"stride_bytes": "0"}, "stride_bytes"),
])
def test_bad_shapes_rows_are_spec_errors(tmp_path, edit, fragment):
    plan = shapes_plan(quick=True)
    row = next(r for r in _measured(plan) if r["family"] == ("pointer_chase" if "stride" in next(iter(edit))
                                                                 else "stream_ctas"))
    text = rows_to_csv([row], SHAPES_COLUMNS)
    header, line = text.splitlines()
    cells = dict(zip(header.split(","), line.split(",")))
    cells.update(edit)
    p = tmp_path / "bad.csv"
    p.write_text(header + "\n" + ",".join(cells[c] for c in header.split(",")) + "\n")
    with pytest.raises(SpecError, match=fragment):
        read_csv(p)


# ---------------------------------------------------------------- the committed measurements


@pytest.fixture(scope="module")
def measured():
    kind, rows = read_csv(SHAPES_CSV)
    assert kind == "kernels"
    return rows


def test_committed_csv_has_the_schema_and_every_planned_shape(measured):
    assert SHAPES_CSV.read_text().splitlines()[0] == ",".join(SHAPES_COLUMNS)
    env = json.loads(SHAPES_CSV.with_name("shapes.env.json").read_text())
    assert env["gpu"] == "NVIDIA H200" and env["suite"] == "shapes" and env["skipped_shapes"] == 0
    planned = Counter(r["family"] for r in shapes_plan())
    for fam, n in planned.items():
        modes = Counter(r["mode"] for r in measured if r["family"] == fam)
        impls = len({r["impl"] for r in measured if r["family"] == fam}) if fam == "attention_decode" else 1
        if fam == "pointer_chase":
            assert modes == {"eager": n}
        elif fam == "attention_decode":  # each implementation that ran correctly, in both modes
            assert modes["graph"] == modes["cold"] >= n and impls >= 2
        else:
            assert modes == {"graph": n, "cold": n}, fam


def test_the_do_bench_run_has_every_planned_shape_in_four_modes():
    """The 2026-12-02 run: every kernel row chained in a graph, by do_bench's method (eager), alone (cold) and, where
    16 calls fit the time budget, back to back (stream)."""
    from rubinperf.calibrate.plan import read_csv

    _, rows = read_csv(SHAPES_CSV.with_name("shapes_dobench.csv"))
    planned = Counter(r["family"] for r in shapes_plan())
    for fam, n in planned.items():
        modes = Counter(r["mode"] for r in rows if r["family"] == fam)
        if fam == "pointer_chase":
            assert modes == {"eager": n}
        elif fam != "attention_decode":
            assert modes["graph"] == modes["eager"] == modes["cold"] == n >= modes["stream"] > 0, fam
    launch = {r["mode"]: r["measured_s"] for r in rows if r["family"] == "launch"}
    assert launch["graph"] < 1e-6 < launch["eager"] < launch["stream"] < launch["cold"]


def test_committed_rows_carry_the_models_costs_and_pass_their_checks(measured):
    for r in measured:
        c = row_cost(r)
        assert math.isclose(r["flops"], float(c.flops), rel_tol=1e-12, abs_tol=0)
        assert math.isclose(r["bytes"], float(c.bytes), rel_tol=1e-12, abs_tol=0)
        assert r["launches"] >= 1 and r["launches_source"] in ("graph nodes", "nominal")
        if r["family"] == "attention_decode":
            assert 0 <= r["check_rel_err"] <= shapes.CHECK_TOLERANCE
        if r["family"] in ("gemm", "grouped_gemm", "copy", "elementwise", "attention_decode") and r["mode"] == "graph":
            assert r["bytes"] / r["measured_s"] < 4.8e12  # nothing beats the HBM datasheet: inputs came from HBM


def test_committed_probes_look_physical(measured):
    chase = {r["nbytes"]: r["measured_s"] for r in measured if r["family"] == "pointer_chase"}
    assert 80e-9 < chase[min(chase)] < 300e-9 < chase[max(chase)] < 1e-6  # L2 hit < HBM load, both sub-microsecond
    stream = {(r["ctas"], r["inflight_bytes"]): r["bytes"] / r["measured_s"] for r in measured
              if r["family"] == "stream_ctas" and r["mode"] == "graph"}
    for u in (4096, 16384, 65536):
        bw = [stream[(g, u)] for g in STREAM_CTAS]
        assert all(b2 >= 0.97 * b1 for b1, b2 in zip(bw, bw[1:]))  # more CTAs never stream (much) slower
    assert stream[(1056, 65536)] > 4e12


def test_cli_fits_a_shapes_csv_without_a_gpu(capsys, tmp_path):
    # every probe and bandwidth row of the committed shapes suite and a third of its kernel rows (the fit's time
    # grows with the rows; the committed calibration's whole fit is held in test_calibrate_cli)
    from rubinperf.calibrate.rows import PROBES

    lines = SHAPES_CSV.read_text().splitlines()
    kept = [line for i, line in enumerate(lines[1:])
            if line.split(",")[0] in (*PROBES, "stream_ctas", "copy") or i % 3 == 0]
    csv = tmp_path / "shapes.csv"
    csv.write_text("\n".join([lines[0], *kept]) + "\n")
    capsys.readouterr()
    try:
        code = main(["calibrate", "--from-csv", str(csv), "--out-dir", str(tmp_path), "--json"])
    except SystemExit as exc:
        code = exc.code
    rec = json.loads(capsys.readouterr().out)
    assert code in (0, None) and (tmp_path / "h200.toml").is_file()
    fitted = {f["field"] for f in rec["fit"] if f["fitted"]}
    assert {"hbm_latency_s", "mma_bytes_in_flight_per_sm", "kernel_launch_graph_s", "kernel_launch_cold_s"} <= fitted
    assert rec["heldout"]["modes"]["graph"]["n"] > 100 and rec["heldout"]["modes"]["cold"]["n"] > 100


def test_cli_rejects_an_unknown_suite(capsys):
    capsys.readouterr()
    try:
        code = main(["calibrate", "--suite", "bogus", "--from-csv", str(SHAPES_CSV)])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "--suite" in err


def test_measuring_without_torch_exits_2_with_one_line(tmp_path):
    import subprocess
    import sys

    no_torch = ("import sys; sys.modules['torch'] = None; from rubinperf.cli import main; "
                "raise SystemExit(main(sys.argv[1:]))")
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", no_torch, "calibrate", "--suite", "shapes", "--out-dir", str(out_dir)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc
    assert len(proc.stderr.splitlines()) == 1 and "PyTorch" in proc.stderr and "Traceback" not in proc.stderr
    assert not out_dir.exists()
