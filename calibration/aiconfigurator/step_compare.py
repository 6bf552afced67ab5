"""A whole decode step, rubinperf against aiconfigurator 0.12.0's step: recompute rubinperf's column.

    python calibration/aiconfigurator/step_compare.py [--write]

aiconfigurator's step times are the `aiconfigurator_ms` column of step_compare.csv (how they were taken:
step_compare.md, "Commands"); this recomputes rubinperf's side on the committed specs, DeepSeek-V4-Flash
rows only (the like-for-like ones): `rubinperf estimate -m deepseek-v4-flash -H <rack> --stack sglang-blackwell
-l <layout> --phase decode --batch B --context 8192 --draft-tokens 0`. aiconfigurator sums GPU time of the ops
alone (no host, no DP synchronisation), so the like-for-like figure is rubinperf's GPU time; the whole step
(GPU + exposed host work) is shown beside it. The ratio is taken against `aiconfigurator_kept_ms`: aiconfigurator's
step on its tables with the rows this folder's outlier rules reject replaced by the rule's reference (the GB300 SGLang
TP8 custom all-reduce rows by the same rows on B200; step_compare.md, "Commands"); `aiconfigurator_ms` is its step as
shipped, `aiconfigurator_balanced_ms` its step with balanced MoE routing (the routing of the MoE rows the fit uses).
--write puts rubinperf's GPU time and the ratio into the CSV's rubinperf_ms / ratio columns and prints the markdown
tables of step_compare.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSV = HERE / "step_compare.csv"
RACK = {"gb300": "gb300-nvl72", "gb200": "gb200-nvl72"}


def rubinperf(system: str, layout: str, batch: int, context: int) -> dict:
    out = subprocess.run(["rubinperf", "estimate", "-m", "deepseek-v4-flash", "-H", RACK[system], "--stack",
                          "sglang-blackwell", "-l", layout, "--phase", "decode", "--batch", str(batch), "--context",
                          str(context), "--draft-tokens", "0", "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    with CSV.open() as f:
        rows = list(csv.DictReader(f))
    fields = list(rows[0])
    table, others = {}, {}
    for r in rows:
        if r["model"] != "deepseek-v4-flash":
            continue
        res = rubinperf(r["system"], r["layout"], int(r["batch"]), int(r["context"]))
        aic = float(r["aiconfigurator_kept_ms"])
        gpu, whole = res["gpu_time_ms"], res["step_time_ms"]
        r["rubinperf_ms"], r["ratio"] = f"{gpu:.4f}", f"{gpu / aic:.3f}"
        table[(r["system"], r["layout"], int(r["batch"]))] = (aic, gpu, whole)
        others[(r["system"], r["layout"], int(r["batch"]))] = (float(r["aiconfigurator_ms"]),
                                                               float(r["aiconfigurator_balanced_ms"]))
    ratios = [g / a for a, g, _ in table.values()]
    whole_ratios = [w / a for a, _, w in table.values()]
    print("| system | layout | batch 1: aiconfigurator / rubinperf GPU / ratio (whole step) | batch 16 | batch 64 |")
    print("|---|---|---|---|---|")
    for system in ("gb300", "gb200"):
        for layout in ("tp4", "tp8", "dep4"):
            cells = []
            for b in (1, 16, 64):
                aic, gpu, whole = table[(system, layout, b)]
                cells.append(f"{aic:.2f} / {gpu:.2f} / **{gpu / aic:.2f}** ({whole / aic:.2f})")
            print(f"| {system} | {layout} | " + " | ".join(cells) + " |")
    within = sum(1 for x in ratios if abs(x - 1) <= 0.2)
    print(f"\nGPU time: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}, "
          f"within 20% at {within} of {len(ratios)}; whole step: median {statistics.median(whole_ratios):.2f}, "
          f"range {min(whole_ratios):.2f}-{max(whole_ratios):.2f}, within 20% at "
          f"{sum(1 for x in whole_ratios if abs(x - 1) <= 0.2)} of {len(whole_ratios)}")
    print("\nrubinperf GPU time over aiconfigurator's step as shipped (its power-law routing, every table row) / with "
          "balanced routing:\n")
    print("| system | layout | batch 1 | batch 16 | batch 64 |")
    print("|---|---|---|---|---|")
    for system in ("gb300", "gb200"):
        for layout in ("tp4", "tp8", "dep4"):
            cells = [f"{table[(system, layout, b)][1] / others[(system, layout, b)][0]:.2f} / "
                     f"{table[(system, layout, b)][1] / others[(system, layout, b)][1]:.2f}" for b in (1, 16, 64)]
            print(f"| {system} | {layout} | " + " | ".join(cells) + " |")
    if a.write:
        with CSV.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {CSV}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
