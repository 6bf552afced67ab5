"""`rubinperf calibrate`: measure kernels (or collectives) on this host's GPUs and fit the spec.

Kept light at import time (typer only), so registering it leaves `rubinperf --help` fast;
numpy, torch and the fit are imported inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from rubinperf.errors import SpecError


def calibrate(
    hardware: str = typer.Option("h200", "--hardware", "-H",
                                 help="Hardware spec to start from: a bundled name or a path to a TOML file."),
    out_dir: Optional[str] = typer.Option(None, "--out-dir",
                                          help="Where the measurements CSV and the calibrated TOML go "
                                               "[default: calibration/<hardware>]."),
    quick: bool = typer.Option(False, "--quick", help="A few shapes per kernel family (about a minute)."),
    from_csv: Optional[List[str]] = typer.Option(None, "--from-csv", metavar="FILE",
                                                 help="Fit existing measurements (repeatable: kernel CSVs are fitted "
                                                      "together); no GPU needed."),
    collectives: bool = typer.Option(False, "--collectives",
                                     help="Measure all-reduce and all-to-all over every local GPU (needs 2 or more) "
                                          "and fit nvlink_latency_s, nvlink_efficiency and collective_floor_s."),
    suite: str = typer.Option("kernels", "--suite", metavar="kernels|shapes",
                              help="kernels: generic shapes of every family. shapes: DeepSeek-V4.1-Flash's kernels "
                                   "at its own shapes, each launched alone (eager) and chained in a CUDA graph, plus "
                                   "the pointer-chase and CTA-streaming probes (writes shapes.csv)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON record."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no result table (files are still written; errors still print)."),
):
    """Measure kernels on the local GPU and fit the kernel model's physical parameters.

    The fit reads the graph launch off an empty kernel, then sets HBM latency under load, bytes
    in flight per SM (ordinary loads and GEMM pipelines), HBM streaming efficiency, the
    tensor-core prologue, MMA, grouped-GEMM and attention efficiencies, split-K and wave
    quantization, and the host launch of a lone kernel, so that the roofline's expected times
    match the measurements (least absolute log error). It reports the error on rows each fit
    did not see (two-fold cross-validation), per launch mode. Writes the measurements CSV and
    <hardware>.toml (silicon fields) and <stack>.toml (kernel-library fields) into --out-dir. Needs PyTorch with CUDA, except with --from-csv.

    Examples:

      rubinperf calibrate --hardware h200 --suite shapes --out-dir calibration/h200

      rubinperf calibrate -H h200 --from-csv calibration/h200/shapes.csv --from-csv calibration/h200/measurements.csv
    """
    from rubinperf.calibrate import fit
    from rubinperf.calibrate.plan import read_csv
    from rubinperf.files import write_atomic
    from rubinperf.specs.stack import load_platform

    hw = load_platform(hardware)
    out = Path(out_dir) if out_dir else Path("calibration") / hw.name
    if suite not in ("kernels", "shapes"):
        raise SpecError(f"--suite: expected 'kernels' or 'shapes', got {suite!r}")
    if suite == "shapes" and collectives:
        raise SpecError("--suite shapes measures kernels on one GPU; it does not take --collectives")
    command = (f"rubinperf calibrate --hardware {hw.name}" + (" --collectives" if collectives else "")
               + (" --suite shapes" if suite == "shapes" else "") + (" --quick" if quick else ""))

    if from_csv:
        read = [(path, *read_csv(path)) for path in from_csv]
        kinds = {kind for _, kind, _ in read}
        if len(kinds) > 1:
            raise SpecError(f"--from-csv: {', '.join(from_csv)} mix kernel and collective measurements; fit them apart")
        kind = kinds.pop()
        if collectives and kind != "collectives":
            raise SpecError(f"{from_csv[0]}: --collectives given, but this is a kernel measurements CSV")
        rows = [r for _, _, rs in read for r in rs]
        env = _read_env(Path(from_csv[0]))
        fit_command = f"rubinperf calibrate --hardware {hw.name}" + "".join(f" --from-csv {p}" for p in from_csv)
        command = env.get("command") or fit_command
        csv_path = ", ".join(from_csv)
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
            write_atomic(csv_path.with_name(csv_path.stem + ".env.json"), json.dumps(env, indent=2) + "\n")
        else:
            from rubinperf.calibrate import bench, shapes_bench

            runner, name = (shapes_bench, "shapes.csv") if suite == "shapes" else (bench, "measurements.csv")
            rows, env = runner.run(quick=quick, command=command, partial_csv=out / name)
            kind = "kernels"
            if not rows:
                raise SpecError("calibrate: no kernel could be measured (see the log above)")
            csv_path = out / name
            runner.write_outputs(rows, csv_path, env)

    try:
        result = fit.fit_kernels(rows, hw) if kind == "kernels" else fit.fit_collectives(rows, hw)
    except SpecError as exc:  # nothing fittable in these measurements: name the file
        raise SpecError(f"{csv_path}: {exc}") from None
    hw_updates, stack_updates = fit.split_updates({f: result.after[f] for f in result.fitted})
    _make_dir(out)
    toml_path = out / f"{hw.name}.toml"
    texts = []
    for spec, path, updates, target in (("hardware", hw.path, hw_updates, toml_path),
                                        ("stack", hw.stack_path, stack_updates, out / f"{hw.stack}.toml")):
        if not updates:
            continue
        old = hw.sources.get(f"{spec}.efficiency", "")
        source = fit.efficiency_source(env, command, result, old, fit_command)
        try:
            texts.append((target, fit.calibrated_toml(path, updates, source, kind=spec)))
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None
    for target, text in texts:
        write_atomic(target, text)
    stack_toml = str(out / f"{hw.stack}.toml") if stack_updates else ""

    rec = {
        "hardware": hw.name, "stack": hw.stack, "kind": kind, "measurements": result.n, "csv": str(csv_path),
        "toml": str(toml_path) if hw_updates else "", "stack_toml": stack_toml,
        "gpu": env.get("gpu"), "fit": [{"field": f, "before": result.before[f], "after": result.after[f],
                                        "fitted": f in result.fitted} for f in result.after],
        "method": result.method, "objective": result.objective, "objective_before": result.loss_before,
        "objective_after": result.loss_after, "heldout": result.heldout,
        "notes": result.notes,
    }
    after_hw = result.hardware(hw)
    if kind == "kernels":
        rec["families_before"] = fit.family_stats(rows, hw)
        rec["families_after"] = fit.family_stats(rows, after_hw)
    else:
        rec["groups"] = fit.collective_groups(rows, after_hw)

    if as_json:
        from rubinperf.render import tables as report

        report.emit_text(report.to_json(rec))
    elif not quiet:
        _render(rec)


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
    from rubinperf.render import tables as report

    def val(field: str, v: float) -> str:
        return report.fmt_time(v) if field.endswith("_s") else f"{v:.3g}"

    rows = [[f["field"], val(f["field"], f["before"]), val(f["field"], f["after"]), "fitted" if f["fitted"] else "kept"]
            for f in rec["fit"]]
    caption = (f"{rec['measurements']} measurements on {rec['gpu'] or 'an unknown GPU'}; {rec['method']}; "
               f"{rec['objective']} {rec['objective_before']:.4f} -> {rec['objective_after']:.4f}\n"
               "wrote " + " and ".join(p for p in (rec["toml"], rec["stack_toml"]) if p) + ("" if rec["csv"] == "" else f"; measurements in {rec['csv']}")
               + "".join(f"\nnote: {n}" for n in rec["notes"]))
    report.print_out(report.table(f"Calibrated efficiency table of {rec['hardware']} ({rec['kind']})",
                                  [("field", "left"), ("before", "right"), ("after", "right"), ("", "left")], rows,
                                  caption=caption))
    if rec["kind"] == "kernels":
        fam = [[b["family"], str(b["n"]), f"{b['median_ratio']:.2f}", f"{b['worst_ratio']:.2f}",
                f"{a['median_ratio']:.2f}", f"{a['worst_ratio']:.2f}", f"{a['max_sol_over_measured']:.2f}"]
               for b, a in zip(rec["families_before"], rec["families_after"])]
        col = report.col
        cols = [col("family", "left", min_width=17, wrap=False), col("rows"),
                col("before median", short="bef. med.", drop=2), col("before worst", short="bef. worst", drop=3),
                col("after median", short="median"), col("after worst", short="worst"),
                col("max SOL/measured", short="SOL/meas", drop=1)]
        report.print_out(report.table("measured / expected time per kernel family", cols, fam))
        ho = rec.get("heldout") or {}
        if ho:
            rows_ = [[m, str(v["n"]), f"{v['median_abs_log']:.3f}", f"{v['worst_abs_log']:.3f}",
                      f"{v['max_sol_over_measured']:.2f}", v["worst_row"]] for m, v in ho["modes"].items()]
            rows_.append(["all", str(ho["n"]), f"{ho['median_abs_log']:.3f}", f"{ho['worst_abs_log']:.3f}",
                          f"{ho['max_sol_over_measured']:.2f}", ho["worst_row"]])
            col = report.col
            cols = [col("launch", "left", wrap=False), col("rows"), col("median |ln|", short="median"),
                    col("worst |ln|", short="worst"), col("max SOL/meas", short="SOL/meas", drop=1),
                    col("worst row", "left", min_width=20)]
            report.print_out(report.table(f"error on rows the fit did not see ({ho['folds']}-fold cross-validation)",
                                          cols, rows_))
    else:
        grp = [[g["collective"], str(g["ranks"]), str(g["points"]), report.fmt_time(g["intercept_s"]),
                f"{g['nvlink_efficiency']:.2f}", report.si(g["busbw_bytes_per_s"], "B/s")] for g in rec["groups"]]
        cols = [("collective", "left"), ("ranks", "right"), ("sizes", "right"), ("floor + hops x latency", "right"),
                ("link efficiency", "right"), ("bandwidth", "right")]
        report.print_out(report.table("per collective and rank count (fitted separately)", cols, grp))
