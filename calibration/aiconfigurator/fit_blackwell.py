"""Fit a serving framework's stack to aiconfigurator's tables of one system; predict the other systems with it.

    python calibration/aiconfigurator/fit_blackwell.py [--framework sglang|trtllm] [--system SYSTEM] [--write]

rubinperf's own fit (rubinperf.calibrate.fit.fit_kernels: least absolute log error, two-fold cross-validation)
on the framework's rows of one system (calibration/aiconfigurator/<system>-<framework>.csv, and for TensorRT-LLM
also <system>-trtllm-models.csv, the rows at the TensorRT-LLM validation rows' own models), on that system's
hardware with the framework's stack; then the fitted stack fields on the other systems' rows of the same framework
(systems the fit did not see). --write puts the fitted stack fields into the stack with this command as their source.

    --framework sglang  --system gb300     stacks/sglang-blackwell.toml (the default), checked on GB200 and B200
    --framework trtllm  --system gb200     stacks/trtllm-blackwell.toml, checked on B200 and GB300
    --framework trtllm  --system h200_sxm  stacks/trtllm-hopper.toml (no other Hopper system: the held-out half only)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rubinperf.calibrate import fit
from rubinperf.calibrate.plan import read_csv
from rubinperf.specs.stack import load_platform

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HARDWARE = {"gb300": "gb300-nvl72", "gb200": "gb200-nvl72", "b200_sxm": "b200", "h200_sxm": "h200"}
NAMES = {"gb300": "GB300", "gb200": "GB200", "b200_sxm": "B200", "h200_sxm": "H200"}
# (framework, system fitted): the stack written, the systems it is checked on, the tables' framework and version
FITS = {
    ("sglang", "gb300"): ("sglang-blackwell", ("gb200", "b200_sxm"), "SGLang 0.5.14"),
    ("trtllm", "gb200"): ("trtllm-blackwell", ("b200_sxm", "gb300"), "TensorRT-LLM 1.3.0rc20"),
    ("trtllm", "h200_sxm"): ("trtllm-hopper", (), "TensorRT-LLM 1.3.0rc20"),
}
DEFAULT_SYSTEM = {"sglang": "gb300", "trtllm": "gb200"}
# A precision's rate with no row of its own: the rule of rubinperf.calibrate.fit.TIED_TO.
TIED = ("a precision's rate with no row of its own is set by the fit to the rate those kernels ran at before rates "
        "per precision existed (ASSUMPTION): a dense GEMM's and the grouped W4A16 rate to mma_compute_efficiency, the "
        "grouped FP4 x FP4 rate to grouped_compute_efficiency")
KEPT = {"sglang": f"the October vLLM stack's values; {TIED} (no FP4 x FP4 or W4A16 MoE rows here)",
        "trtllm": "their sourced values (the [kernel] source); collective_floor_s 3 us is the October vLLM stack's "
                  f"ASSUMPTION (TensorRT-LLM's all-reduce tables are not fitted here); {TIED} (FP4 on Hopper, which "
                  "has no FP4 MMA); grouped_w4a16_compute_efficiency is fitted to the W4A16 MXFP4 MoE rows alone (their "
                  "in-kernel dequantisation is in it); BF16 experts run at mma_compute_efficiency (the tables have no "
                  "BF16 MoE rows)"}


def tables(framework: str, system: str) -> list[Path]:
    """The CSVs of one framework and system: the DeepSeek-V4.1 shapes, and for TensorRT-LLM its models' shapes."""
    out = [HERE / f"{system}-{framework}.csv"]
    if framework == "trtllm":
        out.append(HERE / f"{system}-trtllm-models.csv")
    return out


def read_rows(framework: str, system: str) -> list[dict]:
    rows = []
    for p in tables(framework, system):
        rows += read_csv(p)[1]
    return rows


def command(framework: str, system: str) -> str:
    if framework == "sglang":
        return "python calibration/aiconfigurator/fit_blackwell.py --write"
    return f"python calibration/aiconfigurator/fit_blackwell.py --framework {framework} --system {system} --write"


def run(framework: str = "sglang", system: str | None = None, rows: list[dict] | None = None,
        others: dict | None = None, stack: Path | None = None) -> dict:
    """The fit and its checks: {'result': FitResult, 'updates': stack fields, 'others': {system: predict(...)}}.
    `rows` and `others` (system -> rows) replace the committed CSVs (a test passes small ones)."""
    system = system or DEFAULT_SYSTEM[framework]
    name, checked, _ = FITS[(framework, system)]
    stack = stack or ROOT / "stacks" / f"{name}.toml"
    hw = load_platform(HARDWARE[system], str(stack))
    rows = read_rows(framework, system) if rows is None else rows
    res = fit.fit_kernels(rows, hw, fields=fit.FIT_FIELDS + fit.PRECISION_FIELDS)
    _, updates = fit.split_updates({f: res.after[f] for f in res.fitted})
    if others is None:
        others = {s: read_rows(framework, s) for s in checked}
    checks = {}
    for s, orow in others.items():
        other = dataclasses.replace(load_platform(HARDWARE[s], str(stack)), **updates)
        checks[s] = fit.predict(orow, other)
    return {"result": res, "updates": updates, "others": checks, "stack": stack}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", choices=sorted({f for f, _ in FITS}), default="sglang")
    ap.add_argument("--system", choices=sorted(HARDWARE), help="the system fitted (default: gb300 for sglang, "
                    "gb200 for trtllm)")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    system = a.system or DEFAULT_SYSTEM[a.framework]
    if (a.framework, system) not in FITS:
        print(f"no stack is fitted to {a.framework} on {system} (known: "
              f"{', '.join(f'{f}/{s}' for f, s in FITS)})", file=sys.stderr)
        return 2
    _, _, label = FITS[(a.framework, system)]
    out = run(a.framework, system)
    res, updates, h = out["result"], out["updates"], out["result"].heldout
    print(f"{NAMES[system]} {label} rows: {res.n}; mean |ln| {res.loss_before:.3f} -> {res.loss_after:.3f}; held-out "
          f"half: median |ln| {h['median_abs_log']:.3f}, worst {h['worst_abs_log']:.3f} ({h['worst_row']})")
    for lab, s in h["families"].items():
        print(f"  held-out {lab}: n {s['n']}, median |ln| {s['median_abs_log']:.3f}, worst {s['worst_abs_log']:.3f}")
    for f, v in fit.split_updates({f: res.after[f] for f in res.fitted})[0].items():
        print(f"  (hardware, not written) {f}: {res.before[f]!r} -> {v!r}")
    for f, v in updates.items():
        print(f"  {f}: {res.before[f]!r} -> {v!r}")
    for s, p in out["others"].items():
        print(f"{s} {label} rows with {NAMES[system]}'s fitted values: n {p['n']}, median |ln| "
              f"{p['median_abs_log']:.3f}, worst {p['worst_abs_log']:.3f} ({p['worst_row']})")
        for lab, st in p["families"].items():
            print(f"  {s} {lab}: n {st['n']}, median |ln| {st['median_abs_log']:.3f}, worst {st['worst_abs_log']:.3f}")
    if a.write:
        csvs = ", ".join(f"calibration/aiconfigurator/{p.name}" for p in tables(a.framework, system))
        checked = "; ".join(f"{NAMES[s]} rows, not fitted: median {p['median_abs_log']:.3f}, worst "
                            f"{p['worst_abs_log']:.3f}" for s, p in out["others"].items())
        source = (f"Fitted by `{command(a.framework, system)}` (rubinperf.calibrate.fit, least absolute log error) to "
                  f"{res.n} {NAMES[system]} rows of {label} kernels measured by aiconfigurator 0.12.0 ({csvs}, "
                  f"CUDA-graph timings): held-out median |ln(measured/expected)| {h['median_abs_log']:.3f}, worst "
                  f"{h['worst_abs_log']:.3f}" + (f"; {checked}" if checked else "")
                  + f"; fields not constrained by those rows keep {KEPT[a.framework]}")
        text = fit.calibrated_toml(out["stack"], updates, source, kind="stack")
        out["stack"].write_text(text)
        print(f"wrote {out['stack']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
