"""`rubinperf calibrate`: measure kernels (or collectives) on this host's GPUs and fit the spec.

Kept light at import time (typer only), so registering it leaves `rubinperf --help` fast;
numpy, torch and the fit are imported inside the command; its tables are rubinperf.render.calibrate.
"""

from __future__ import annotations

import sys

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from rubinperf.cli.options import JsonRecord, complete_names
from rubinperf.errors import SpecError


def calibrate(
    hardware: Annotated[str, typer.Option(
        "--hardware", "-H", help="Hardware spec to start from: a bundled name or a path to a TOML file.",
        autocompletion=complete_names("hardware"))] = "h200",
    out_dir: Annotated[Optional[str], typer.Option(
        "--out-dir", help="Where the measurements CSV and the calibrated TOML go [default: calibration/<hardware>].")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few shapes per kernel family (about a minute).")] = False,
    from_csv: Annotated[Optional[List[str]], typer.Option(
        "--from-csv", metavar="FILE",
        help="Fit existing measurements (repeatable: kernel CSVs are fitted together); no GPU needed.")] = None,
    collectives: Annotated[bool, typer.Option(
        "--collectives", help="Measure all-reduce and all-to-all over every local GPU (needs 2 or more) and fit "
                              "nvlink_latency_s, nvlink_efficiency and collective_floor_s.")] = False,
    suite: Annotated[str, typer.Option(
        "--suite", metavar="kernels|shapes",
        help="kernels: generic shapes of every family. shapes: DeepSeek-V4.1-Flash's kernels at its own shapes, each "
             "chained in a CUDA graph, timed as do_bench times it (eager), back to back from the host (stream) and alone "
             "after a synchronisation (cold), plus the pointer-chase and CTA-streaming probes "
             "(writes shapes.csv).")] = "kernels",
    as_json: JsonRecord = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print no result table (files are still written; errors still print).")] = False,
):
    """Measure kernels on the local GPU and fit the kernel model's physical parameters.

    The fit reads the graph launch off an empty kernel, then sets HBM latency under load, bytes
    in flight per SM (ordinary loads and GEMM pipelines), HBM streaming efficiency, the
    tensor-core prologue, MMA, grouped-GEMM and attention efficiencies, split-K and wave
    quantization, and the host launch of a lone kernel (the graph and stream boundaries and the host's dispatch
    are read off the probes), so that the roofline's expected times
    match the measurements (least absolute log error). It reports the error on rows each fit
    did not see (two-fold cross-validation over whole shape families: a
    shape is never fitted at one size and scored at another), per launch mode. Writes the measurements CSV and
    <hardware>.toml (silicon fields) and <stack>.toml (kernel-library fields) into --out-dir, the stack
    named after what was measured: pytorch-X.Y for kernels the suite ran through PyTorch (whatever the
    hardware's default stack). Needs PyTorch with CUDA, except with --from-csv.

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
    _check_out_dir(out)
    if suite not in ("kernels", "shapes"):
        raise SpecError(f"--suite: expected 'kernels' or 'shapes', got {suite!r}")
    if suite == "shapes" and collectives:
        raise SpecError("--suite shapes measures kernels on one GPU; it does not take --collectives")
    command = (f"rubinperf calibrate --hardware {hw.name}" + (" --collectives" if collectives else "")
               + (" --suite shapes" if suite == "shapes" else "") + (" --quick" if quick else ""))

    if from_csv:
        from rubinperf.bundled import resolve_bundled

        from_csv = [resolve_bundled(path) for path in from_csv]   # the README's calibration/... from any directory
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
        from rubinperf.calibrate.measure.bench import environment, require_torch_cuda

        torch = require_torch_cuda(min_gpus=2 if collectives else 1)  # one line and exit 2 when missing
        _make_dir(out)
        if collectives:
            from rubinperf.calibrate.measure import collectives as coll

            rows, kind = coll.run(quick=quick), "collectives"
            env = environment(torch, command)
            csv_path = out / "collectives.csv"
            coll.write_csv(rows, csv_path)
            import json

            write_atomic(csv_path.with_name(csv_path.stem + ".env.json"), json.dumps(env, indent=2) + "\n")
        else:
            from rubinperf.calibrate.measure import bench, shapes

            runner, name = (shapes, "shapes.csv") if suite == "shapes" else (bench, "measurements.csv")
            rows, env = runner.run(quick=quick, command=command, partial_csv=out / name)
            kind = "kernels"
            if not rows:
                raise SpecError("calibrate: no kernel could be measured (see the log above)")
            csv_path = out / name
            runner.write_outputs(rows, csv_path, env)

    measured_stack = measured_stack_name(env) if kind == "kernels" else None
    base_stack = hw.stack
    if measured_stack and measured_stack != hw.stack:
        from rubinperf.specs.loader import bundled_names

        if measured_stack in bundled_names("stack"):   # start from the measured library's own stack
            hw = load_platform(hardware, measured_stack)
    try:
        if kind != "kernels":
            result = fit.fit_collectives(rows, hw)
        elif quiet or not sys.stderr.isatty():
            result = fit.fit_kernels(rows, hw)
        else:   # a transient progress bar on a terminal: the search's rounds, of the fit and its held-out folds
            from rubinperf.render.progress import progress_bar

            with progress_bar("fitting") as tick:
                result = fit.fit_kernels(rows, hw, progress=tick)
    except SpecError as exc:  # nothing fittable in these measurements: name the file
        raise SpecError(f"{csv_path}: {exc}") from None
    hw_updates, stack_updates = fit.split_updates({f: result.after[f] for f in result.fitted})
    _make_dir(out)
    toml_path = out / f"{hw.name}.toml"
    texts = []
    # The kernel-library fields are written under the name of what was measured (PyTorch X.Y when the suite ran
    # through torch), never under the name of a stack whose kernels were not measured (SGLang's DeepEP stack).
    stack_name = measured_stack or hw.stack
    for spec, path, updates, target in (("hardware", hw.path, hw_updates, toml_path),
                                        ("stack", hw.stack_path, stack_updates, out / f"{stack_name}.toml")):
        if not updates:
            continue
        old = hw.sources.get(f"{spec}.efficiency", "")
        source = fit.efficiency_source(env, command, result, old, fit_command)
        try:
            text = fit.calibrated_toml(path, updates, source, kind=spec)
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None
        if spec == "stack" and stack_name != hw.stack:
            text = renamed_stack(text, stack_name, hw.stack, env)
        if spec == "hardware" and stack_updates and stack_name != hw.default_stack:
            import json as _json
            import re

            # the calibrated rack runs on the stack written beside it
            text = re.sub(r'(?m)^default_stack = .*$', lambda _: f"default_stack = {_json.dumps(stack_name)}", text,
                          count=1)
        texts.append((target, text))
    for target, text in texts:
        write_atomic(target, text)
    stack_toml = str(out / f"{stack_name}.toml") if stack_updates else ""

    rec = {
        "hardware": hw.name, "stack": stack_name, "stack_started_from": hw.stack, "hardware_default_stack": base_stack,
        "kind": kind, "measurements": result.n, "csv": str(csv_path),
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
        from rubinperf.render.output import emit_text, to_json

        emit_text(to_json(rec))
    elif not quiet:
        from rubinperf.render.calibrate import calibration_tables

        calibration_tables(rec)


def measured_stack_name(env: dict) -> str | None:
    """The stack the measured kernels are: `pytorch-X.Y` when the suite ran them through torch (the env's torch
    version), else None (tables of another tool: the hardware's stack)."""
    import re

    ver = re.match(r"(\d+)\.(\d+)", str(env.get("torch") or ""))
    return f"pytorch-{ver.group(1)}.{ver.group(2)}" if ver else None


def renamed_stack(text: str, name: str, started_from: str, env: dict) -> str:
    """A calibrated stack TOML under the name of what was measured: its `name` and `description` lines rewritten."""
    import json
    import re

    gpu = env.get("gpu") or "the local GPU"
    desc = (f"PyTorch {env.get('torch', '')} kernels (cuBLAS, cuDNN, torch ops) as measured on {gpu} by rubinperf "
            f"calibrate; fields no measurement constrains are those of {started_from}")
    text = re.sub(r'(?m)^name = .*$', lambda _: f"name = {json.dumps(name)}", text, count=1)
    return re.sub(r'(?m)^description = .*$', lambda _: f"description = {json.dumps(desc)}", text, count=1)


def _read_env(csv_path: Path) -> dict:
    p = csv_path.with_name(csv_path.stem + ".env.json")
    try:
        import json

        return json.loads(p.read_text()) if p.is_file() else {}
    except (OSError, ValueError):
        return {}


def _make_dir(path: Path) -> None:
    _check_out_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"--out-dir {path}: cannot create: {exc.strerror or exc}") from None


def _check_out_dir(path: Path) -> None:
    """--out-dir can be a directory: checked before any measurement or fit (a dangling link, a file there)."""
    import os

    from rubinperf.errors import shorten

    if path.is_symlink() and not path.exists():
        raise SpecError(f"--out-dir {shorten(str(path))}: a symbolic link to {shorten(os.readlink(path))}, which does "
                        "not exist (a dangling link); create its target or give another directory")
    if path.exists() and not path.is_dir():
        raise SpecError(f"--out-dir {shorten(str(path))}: exists and is not a directory")
