"""`rubinperf calibrate`: measure kernels (or collectives) on this host's GPUs and fit the spec.

Kept light at import time (typer only), so registering it leaves `rubinperf --help` fast;
numpy, torch and the fit are imported inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rubinperf.errors import SpecError


def calibrate(
    hardware: str = typer.Option("h200", "--hardware", "-H",
                                 help="Hardware spec to start from: a bundled name or a path to a TOML file."),
    out_dir: Optional[str] = typer.Option(None, "--out-dir",
                                          help="Where the measurements CSV and the calibrated TOML go "
                                               "[default: calibration/<hardware>]."),
    quick: bool = typer.Option(False, "--quick", help="A few shapes per kernel family (about a minute)."),
    from_csv: Optional[str] = typer.Option(None, "--from-csv", metavar="FILE",
                                           help="Fit an existing measurements CSV (kernels or collectives); no GPU needed."),
    collectives: bool = typer.Option(False, "--collectives",
                                     help="Measure all-reduce and all-to-all over every local GPU (needs 2 or more) "
                                          "and fit nvlink_latency_s, nvlink_efficiency and collective_floor_s."),
    suite: str = typer.Option("kernels", "--suite", metavar="kernels|shapes",
                              help="kernels: the default suite, measured and fitted. shapes: DeepSeek-V4.1-Flash's "
                                   "kernels at its own shapes, each in graph and eager mode, plus the pointer-chase "
                                   "and CTA-streaming probes; writes shapes.csv and prints a summary, no fit "
                                   "(with --from-csv: the summary of that file, no GPU)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON record."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no result table (files are still written; errors still print)."),
):
    """Measure kernels on the local GPU and fit the hardware spec's efficiencies and floors.

    Kernels (default): copy bandwidth, BF16/FP8 GEMMs, grouped (MoE) GEMMs, decode and
    prefill attention, an empty kernel. The fit sets bf16/fp8 compute efficiency,
    hbm_efficiency and kernel_launch_floor_s so that the roofline's expected times match
    the measurements (least absolute log error); other fields are kept. Writes
    measurements.csv (or collectives.csv) and <hardware>.toml into --out-dir. Needs
    PyTorch with CUDA, except with --from-csv.

    Example: rubinperf calibrate --hardware h200 --out-dir calibration/h200
    """
    from rubinperf.calibrate import fit
    from rubinperf.calibrate.plan import read_csv
    from rubinperf.report import write_atomic
    from rubinperf.specs.hardware import load_hardware

    hw = load_hardware(hardware)
    out = Path(out_dir) if out_dir else Path("calibration") / hw.name
    if suite not in ("kernels", "shapes"):
        raise SpecError(f"--suite: expected 'kernels' or 'shapes', got {suite!r}")
    if suite == "shapes":
        if collectives:
            raise SpecError("--suite shapes measures kernels on one GPU; it does not take --collectives")
        _shapes(hw, out, quick, from_csv, as_json)
        return
    command = f"rubinperf calibrate --hardware {hw.name}" + (" --collectives" if collectives else "") + (" --quick" if quick else "")

    if from_csv:
        kind, rows = read_csv(from_csv)
        if collectives and kind != "collectives":
            raise SpecError(f"{from_csv}: --collectives given, but this is a kernel measurements CSV")
        env = _read_env(Path(from_csv))
        fit_command = f"rubinperf calibrate --hardware {hw.name} --from-csv {from_csv}"
        command = env.get("command") or fit_command
        csv_path = Path(from_csv)
    else:
        fit_command = command
        from rubinperf.calibrate.bench import environment, require_torch_cuda

        torch = require_torch_cuda(min_gpus=2 if collectives else 1)  # one line and exit 2 when missing
        _make_dir(out)
        if collectives:
            from rubinperf.calibrate import collectives as coll

            rows, kind = coll.run(quick=quick), "collectives"
            env = environment(torch, command)
            csv_path = out / "collectives.csv"
            coll.write_csv(rows, csv_path)
        else:
            from rubinperf.calibrate import bench

            rows, env = bench.run(quick=quick, command=command, partial_csv=out / "measurements.csv")
            kind = "kernels"
            if not rows:
                raise SpecError("calibrate: no kernel could be measured (see the log above)")
            csv_path = out / "measurements.csv"
            bench.write_outputs(rows, csv_path, env)
        if kind == "collectives":
            write_atomic(csv_path.with_name(csv_path.stem + ".env.json"), json.dumps(env, indent=2) + "\n")

    try:
        result = fit.fit_kernels(rows, hw) if kind == "kernels" else fit.fit_collectives(rows, hw)
    except SpecError as exc:  # nothing fittable in these measurements: name the file
        raise SpecError(f"{csv_path}: {exc}") from None
    source = fit.efficiency_source(env, command, result, hw.sources.get("efficiency", ""), fit_command)
    try:
        text = fit.calibrated_toml(hw.path, {f: result.after[f] for f in result.fitted}, source)
    except SpecError as exc:
        raise SpecError(f"{hw.path}: {exc}") from None
    _make_dir(out)
    toml_path = out / f"{hw.name}.toml"
    write_atomic(toml_path, text)

    rec = {
        "hardware": hw.name, "kind": kind, "measurements": result.n, "csv": str(csv_path), "toml": str(toml_path),
        "gpu": env.get("gpu"), "fit": [{"field": f, "before": result.before[f], "after": result.after[f],
                                        "fitted": f in result.fitted} for f in result.after],
        "method": result.method, "objective": result.objective, "objective_before": result.loss_before,
        "objective_after": result.loss_after,
        "notes": result.notes,
    }
    after_hw = result.hardware(hw)
    if kind == "kernels":
        rec["families_before"] = fit.family_stats(rows, hw)
        rec["families_after"] = fit.family_stats(rows, after_hw)
    else:
        rec["groups"] = fit.collective_groups(rows, after_hw)

    if as_json:
        from rubinperf import report

        report.emit_text(report.to_json(rec))
    elif not quiet:
        _render(rec)


def _shapes(hw, out: Path, quick: bool, from_csv: Optional[str], as_json: bool) -> None:
    """`--suite shapes`: measure the model-shape suite into <out>/shapes.csv (or read FILE) and summarise it."""
    from rubinperf.calibrate import shapes_bench
    from rubinperf.calibrate.plan import read_csv

    if from_csv:
        kind, rows = read_csv(from_csv)
        if kind != "kernels":
            raise SpecError(f"{from_csv}: --suite shapes needs a kernel measurements CSV, and this is a {kind} CSV")
        csv_path = Path(from_csv)
    else:
        from rubinperf.calibrate.bench import require_torch_cuda

        require_torch_cuda()
        _make_dir(out)
        csv_path = out / "shapes.csv"
        command = f"rubinperf calibrate --hardware {hw.name} --suite shapes" + (" --quick" if quick else "")
        rows, env = shapes_bench.run(quick=quick, command=command, partial_csv=csv_path)
        if not rows:
            raise SpecError("calibrate --suite shapes: no kernel could be measured (see the log above)")
        shapes_bench.write_outputs(rows, csv_path, env)
    if as_json:
        from rubinperf import report

        report.emit_text(report.to_json({"csv": str(csv_path), "measurements": len(rows),
                                         "summary": [{"what": a, "value": b} for a, b in shapes_bench.summary(rows)]}))
    else:
        shapes_bench.print_summary(rows)


def _read_env(csv_path: Path) -> dict:
    p = csv_path.with_name(csv_path.stem + ".env.json")
    try:
        return json.loads(p.read_text()) if p.is_file() else {}
    except (OSError, ValueError):
        return {}


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"--out-dir {path}: cannot create: {exc.strerror or exc}") from None


def _render(rec: dict) -> None:
    from rubinperf import report

    def val(field: str, v: float) -> str:
        return report.fmt_time(v) if field.endswith("_s") else f"{v:.3g}"

    rows = [[f["field"], val(f["field"], f["before"]), val(f["field"], f["after"]), "fitted" if f["fitted"] else "kept"]
            for f in rec["fit"]]
    caption = (f"{rec['measurements']} measurements on {rec['gpu'] or 'an unknown GPU'}; {rec['method']}; "
               f"{rec['objective']} {rec['objective_before']:.4f} -> {rec['objective_after']:.4f}\n"
               f"wrote {rec['toml']}" + ("" if rec["csv"] == "" else f"; measurements in {rec['csv']}")
               + "".join(f"\nnote: {n}" for n in rec["notes"]))
    report.print_out(report.table(f"Calibrated efficiency table of {rec['hardware']} ({rec['kind']})",
                                  [("field", "left"), ("before", "right"), ("after", "right"), ("", "left")], rows,
                                  caption=caption))
    if rec["kind"] == "kernels":
        fam = [[b["family"], str(b["n"]), f"{b['median_ratio']:.2f}", f"{b['worst_ratio']:.2f}",
                f"{a['median_ratio']:.2f}", f"{a['worst_ratio']:.2f}", f"{a['max_sol_over_measured']:.2f}"]
               for b, a in zip(rec["families_before"], rec["families_after"])]
        cols = [("family", "left"), ("rows", "right"), ("before median", "right"), ("before worst", "right"),
                ("after median", "right"), ("after worst", "right"), ("max SOL/measured", "right")]
        report.print_out(report.table("measured / expected time per kernel family", cols, fam))
    else:
        grp = [[g["collective"], str(g["ranks"]), str(g["points"]), report.fmt_time(g["intercept_s"]),
                f"{g['nvlink_efficiency']:.2f}", report.si(g["busbw_bytes_per_s"], "B/s")] for g in rec["groups"]]
        cols = [("collective", "left"), ("ranks", "right"), ("sizes", "right"), ("floor + hops x latency", "right"),
                ("link efficiency", "right"), ("bandwidth", "right")]
        report.print_out(report.table("per collective and rank count (fitted separately)", cols, grp))
