"""`rubinperf calibrate` at the command line, without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rubinperf.cli import main

REPO = Path(__file__).resolve().parent.parent.parent
CSV = REPO / "calibration" / "h200" / "measurements.csv"
SHAPES = REPO / "calibration" / "h200" / "shapes_dobench.csv"
NO_TORCH = "import sys; sys.modules['torch'] = None; from rubinperf.cli import main; raise SystemExit(main(sys.argv[1:]))"


def run(capsys, *argv):
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("extra", [[], ["--collectives"], ["--quick"]])
def test_without_torch_exits_2_with_one_line(tmp_path, extra):
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, "calibrate", "--out-dir", str(out_dir), *extra],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rubinperf: error:") and "PyTorch" in lines[0] and "not installed" in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not out_dir.exists()  # nothing written when nothing was measured


def test_help_lists_calibrate_and_its_options(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "calibrate" in out
    code, out, _ = run(capsys, "calibrate", "--help")
    for opt in ("--hardware", "--out-dir", "--quick", "--from-csv", "--collectives", "--json"):
        assert opt in out


def test_from_csv_fits_and_writes_a_calibrated_spec(tmp_path, capsys, committed_fit_reused):
    # the fit of these two CSVs is the committed fit (tests/calibrate/conftest.py): made once, shared with
    # test_calibration.py, which checks it against the committed files field by field
    code, out, err = run(capsys, "calibrate", "--hardware", "h200", "--from-csv", str(SHAPES), "--from-csv", str(CSV),
                         "--out-dir", str(tmp_path), "--json")
    assert code == 0, err
    assert len(committed_fit_reused) == 1
    rec = json.loads(out)
    assert rec["kind"] == "kernels" and rec["gpu"] == "NVIDIA H200"
    fitted = {f["field"]: f["after"] for f in rec["fit"] if f["fitted"]}
    from rubinperf.calibrate.fit import KERNEL_FIELDS

    assert set(fitted) == set(KERNEL_FIELDS)
    assert rec["objective_after"] <= rec["objective_before"] + 1e-12
    assert {f["family"] for f in rec["families_after"]} >= {"gemm-bf16", "grouped_gemm-fp8", "attention_decode",
                                                              "stream_ctas", "all"}
    assert set(rec["heldout"]["modes"]) == {"graph", "eager", "stream", "cold"}

    from rubinperf.specs.stack import load_platform

    hw = load_platform(str(tmp_path / "h200.toml"))  # the strict loader accepts it
    for field, value in fitted.items():
        assert getattr(hw, field) == value
    assert hw.stack_path == str(tmp_path / "pytorch-2.11.toml")   # the stack written beside it, not the bundled one
    assert hw.sources["hardware.efficiency"].startswith("Calibrated 2026-12-02 on NVIDIA H200")
    assert hw.sources["stack.efficiency"].startswith("Calibrated 2026-12-02 on NVIDIA H200")
    bundled = load_platform("h200")
    assert hw.sources["hardware.compute"] == bundled.sources["hardware.compute"] and hw.hbm_bandwidth_bytes_per_s == 4.8e12
    assert rec["stack_toml"] == str(tmp_path / "pytorch-2.11.toml") and rec["toml"] == str(tmp_path / "h200.toml")
    # the committed files are this fit, both of them (every value; sources aside)
    from rubinperf.specs.hardware import load_hardware
    from rubinperf.specs.stack import load_stack

    assert load_stack(str(tmp_path / "pytorch-2.11.toml")) == load_stack("pytorch-2.11")
    assert load_hardware(str(tmp_path / "h200.toml")) == load_hardware("h200")


def test_from_csv_table_output(tmp_path, capsys):
    code, out, err = run(capsys, "calibrate", "--from-csv", str(CSV), "--out-dir", str(tmp_path))
    assert code == 0, err
    assert "hbm_stream_efficiency" in out and "grouped_gemm-bf16" in out and "did not see" in out


def test_mixed_kernel_and_collective_csvs_are_refused(tmp_path, capsys):
    from rubinperf.calibrate.plan import COLLECTIVE_COLUMNS, rows_to_csv

    p = tmp_path / "collectives.csv"
    p.write_text(rows_to_csv([{"collective": "all_reduce", "ranks": 2, "nbytes": 8, "dtype": "bf16", "measured_s": 1e-5,
                               "nvlink_bytes": 8, "hops": 2}], COLLECTIVE_COLUMNS))
    code, out, err = run(capsys, "calibrate", "--from-csv", str(CSV), "--from-csv", str(p), "--out-dir", str(tmp_path))
    assert code == 2 and len(err.splitlines()) == 1 and "mix kernel and collective" in err


def test_from_csv_collectives(tmp_path, capsys):
    from rubinperf.calibrate.measure.collectives import model_row
    from rubinperf.calibrate.plan import COLLECTIVE_COLUMNS, rows_to_csv

    rows = []
    for coll in ("all_reduce", "all_to_all"):
        for nbytes in (8, 4096, 2 ** 20, 2 ** 26):
            m = model_row(coll, 8, nbytes)
            t = 8e-6 + m["hops"] * 2e-6 + m["nvlink_bytes"] / 350e9
            rows.append({"collective": coll, "ranks": 8, "nbytes": nbytes, "dtype": "bf16", "measured_s": t,
                         "spread": 0.01, "samples": 10, **m})
    p = tmp_path / "collectives.csv"
    p.write_text(rows_to_csv(rows, COLLECTIVE_COLUMNS))
    code, out, err = run(capsys, "calibrate", "--collectives", "--from-csv", str(p), "--out-dir", str(tmp_path), "--json")
    assert code == 0, err
    rec = json.loads(out)
    after = {f["field"]: f["after"] for f in rec["fit"]}
    assert after["nvlink_efficiency"] == pytest.approx(350 / 450, rel=0.01)
    assert after["collective_floor_s"] == pytest.approx(8e-6, rel=0.02)
    assert after["nvlink_latency_s"] == pytest.approx(2e-6, rel=0.05)
    assert len(rec["groups"]) == 2


@pytest.mark.parametrize("argv, fragment", [
    (["--from-csv", "no/such.csv"], "cannot read"),
    (["--from-csv", str(CSV), "--collectives"], "--collectives given"),
    (["--hardware", "no-such-gpu", "--from-csv", str(CSV)], "unknown hardware"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, fragment):
    code, out, err = run(capsys, "calibrate", *argv, "--out-dir", str(tmp_path))
    assert code == 2 and len(err.splitlines()) == 1 and fragment in err, err


def test_measured_pytorch_kernels_are_written_under_pytorchs_name_not_the_racks_stack(tmp_path, capsys):
    # H100 cluster's default stack is SGLang's DeepEP stack; the suite measured PyTorch's kernels: the stack written
    # is named after them, and the calibrated rack runs on it
    import shutil

    csv = tmp_path / "m.csv"
    shutil.copy(CSV, csv)
    shutil.copy(CSV.with_name("measurements.env.json"), tmp_path / "m.env.json")
    out = tmp_path / "out"
    code, text, err = run(capsys, "calibrate", "-H", "h100-cluster", "--from-csv", str(csv), "--out-dir", str(out),
                          "--json")
    assert code == 0, err
    rec = json.loads(text)
    assert rec["stack"] == "pytorch-2.11" and rec["hardware_default_stack"] == "sglang-deepep-hopper"
    assert rec["stack_toml"] == str(out / "pytorch-2.11.toml") and not (out / "sglang-deepep-hopper.toml").exists()
    from rubinperf.specs.stack import load_platform

    hw = load_platform(str(out / "h100-cluster.toml"))
    assert hw.stack == "pytorch-2.11" and hw.stack_path == str(out / "pytorch-2.11.toml")
    assert rec["heldout"]["held_out"] == "whole shape families"
