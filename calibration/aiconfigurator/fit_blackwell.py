"""Fit sglang-blackwell's kernel fields to aiconfigurator's GB300 SGLang rows; predict GB200 and B200 with them.

    python calibration/aiconfigurator/fit_blackwell.py [--write]

rubinperf's own fit (rubinperf.calibrate.fit.fit_kernels: least absolute log error, two-fold cross-validation)
on calibration/aiconfigurator/gb300-sglang.csv against gb300-nvl72 with the stack sglang-blackwell; then the
fitted values on gb200-nvl72 and b200 against their own SGLang rows (systems the fit did not see). --write puts
the fitted stack fields into stacks/sglang-blackwell.toml with this command as their source.
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
STACK = ROOT / "stacks" / "sglang-blackwell.toml"
COMMAND = "python calibration/aiconfigurator/fit_blackwell.py --write"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    hw = load_platform("gb300-nvl72", str(STACK))
    _, rows = read_csv(HERE / "gb300-sglang.csv")
    res = fit.fit_kernels(rows, hw, fields=fit.FIT_FIELDS + fit.PRECISION_FIELDS)
    h = res.heldout
    print(f"GB300 SGLang rows: {res.n}; mean |ln| {res.loss_before:.3f} -> {res.loss_after:.3f}; held-out half: "
          f"median |ln| {h['median_abs_log']:.3f}, worst {h['worst_abs_log']:.3f} ({h['worst_row']})")
    for lab, s in h["families"].items():
        print(f"  held-out {lab}: n {s['n']}, median |ln| {s['median_abs_log']:.3f}, worst {s['worst_abs_log']:.3f}")
    _, stack_updates = fit.split_updates({f: res.after[f] for f in res.fitted})
    for f, v in fit.split_updates({f: res.after[f] for f in res.fitted})[0].items():
        print(f"  (hardware, not written) {f}: {res.before[f]!r} -> {v!r}")
    for f, v in stack_updates.items():
        print(f"  {f}: {res.before[f]!r} -> {v!r}")
    for system, name in (("gb200", "gb200-nvl72"), ("b200_sxm", "b200")):
        other = dataclasses.replace(load_platform(name, str(STACK)), **stack_updates)
        _, orow = read_csv(HERE / f"{system}-sglang.csv")
        p = fit.predict(orow, other)
        print(f"{system} SGLang rows with GB300's fitted values: n {p['n']}, median |ln| {p['median_abs_log']:.3f}, "
              f"worst {p['worst_abs_log']:.3f} ({p['worst_row']})")
    if a.write:
        source = (f"Fitted by `{COMMAND}` (rubinperf.calibrate.fit, least absolute log error) to {res.n} GB300 rows of "
                  f"SGLang 0.5.14 kernels measured by aiconfigurator 0.12.0 (calibration/aiconfigurator/gb300-sglang.csv, "
                  f"CUDA-graph timings): held-out median |ln(measured/expected)| {h['median_abs_log']:.3f}, worst "
                  f"{h['worst_abs_log']:.3f}; fields not constrained by those rows keep the October vLLM stack's values")
        text = fit.calibrated_toml(STACK, stack_updates, source, kind="stack")
        STACK.write_text(text)
        print(f"wrote {STACK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
