"""Run the GPU benchmarks from a shell: `python3 -m rubinperf.calibrate.measure --out FILE.csv [--suite shapes]`.

The kernel suite (bench) is what `rubinperf calibrate` fits; the shapes suite (shapes) measures
DeepSeek-V4.1-Flash's kernels at its own shapes. PyTorch and CUDA are needed to run either.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rubinperf.calibrate.measure import bench
from rubinperf.errors import SpecError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m rubinperf.calibrate.measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="CSV file to write (an .env.json file is written beside it)")
    ap.add_argument("--quick", action="store_true", help="a few shapes per family only")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting new kernels after this many seconds [360; shapes: 300]")
    ap.add_argument("--suite", choices=("kernels", "shapes"), default="kernels",
                    help="kernels: the default suite (fitted by `rubinperf calibrate`); shapes: DeepSeek-V4.1-Flash's "
                         "kernels at its own shapes, each in graph, eager (do_bench), stream and cold mode, plus the pointer-chase and "
                         "CTA-streaming probes (plan.shapes_plan; measured only, not fitted)")
    args = ap.parse_args(argv)
    command = "python3 -m rubinperf.calibrate.measure" + (" --quick" if args.quick else "")
    if args.suite == "shapes":
        from rubinperf.calibrate.measure import shapes

        command += " --suite shapes" + (f" --budget-s {args.budget_s:g}" if args.budget_s else "")
        try:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            rows, env = shapes.run(quick=args.quick, budget_s=args.budget_s or 300.0, command=command,
                                         partial_csv=Path(args.out))
        except SpecError as exc:
            print(f"rubinperf: error: {exc}", file=sys.stderr)
            return 2
        shapes.write_outputs(rows, Path(args.out), env)
        print(f"wrote {len(rows)} measurements to {args.out}", file=sys.stderr)
        shapes.print_summary(rows)
        return 0
    args.budget_s = 360.0 if args.budget_s is None else args.budget_s
    try:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        rows, env = bench.run(quick=args.quick, budget_s=args.budget_s, command=command, partial_csv=Path(args.out))
    except SpecError as exc:
        print(f"rubinperf: error: {exc}", file=sys.stderr)
        return 2
    bench.write_outputs(rows, Path(args.out), env)
    print(f"wrote {len(rows)} measurements to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
