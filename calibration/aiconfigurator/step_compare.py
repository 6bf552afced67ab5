"""A whole decode step, rubinperf against aiconfigurator 0.12.0's step: recompute rubinperf's column.

    python calibration/aiconfigurator/step_compare.py [--write]

aiconfigurator's step times are the aiconfigurator_* columns of step_compare.csv, written by aic_steps.py in
aiconfigurator's own venv (step_compare.md, "Commands"); this recomputes rubinperf's side on the committed specs,
DeepSeek-V4-Flash rows only (the like-for-like ones): `rubinperf estimate -m deepseek-v4-flash -H <rack> --stack
sglang-blackwell -l <layout> --phase decode --batch B --context 8192 --draft-tokens 0`. aiconfigurator sums GPU time
of the ops alone (no host, no DP synchronisation), so the like-for-like figure is rubinperf's GPU time; the whole step
(GPU + exposed host work) is shown beside it. The ratio is taken against `aiconfigurator_balanced_kept_ms`:
aiconfigurator's step with balanced MoE routing (the routing of the MoE rows rubinperf's constants were fitted to) on
its tables with the rows this folder's outlier rules reject replaced by the rule's reference (the GB300 SGLang TP8
custom all-reduce rows by the same rows on B200). The other three columns are its step with its default power-law
routing (`aiconfigurator_ms` as shipped, `aiconfigurator_kept_ms` outlier-free) and with balanced routing as shipped
(`aiconfigurator_balanced_ms`). --write puts rubinperf's GPU time and the ratio into the CSV's rubinperf_ms / ratio
columns; the markdown tables of step_compare.md are printed either way.
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


def read_rows() -> list[dict]:
    """The rows of step_compare.csv (both scripts read and rewrite it: this one and aic_steps.py)."""
    with CSV.open() as f:
        return list(csv.DictReader(f))


def write_rows(rows: list[dict], fields: list[str]) -> None:
    with CSV.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
RACK = {"gb300": "gb300-nvl72", "gb200": "gb200-nvl72"}
LIKE = "aiconfigurator_balanced_kept_ms"
VARIANTS = ("aiconfigurator_ms", "aiconfigurator_kept_ms", "aiconfigurator_balanced_ms", LIKE)
ROUTED = ("routed experts", "MegaMoE")  # rubinperf's routed-expert rows (the dispatch / combine rows excluded)


def rubinperf(system: str, layout: str, batch: int, context: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "rubinperf.entry", "estimate", "-m", "deepseek-v4-flash", "-H",
                          RACK[system], "--stack", "sglang-blackwell", "-l", layout, "--phase", "decode", "--batch",
                          str(batch), "--context", str(context), "--draft-tokens", "0", "--breakdown", "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


def grid(title: str, cell) -> None:
    print(f"| system | layout | {title} |")
    print("|---|---|---|---|---|")
    for system in ("gb300", "gb200"):
        for layout in ("tp4", "tp8", "dep4"):
            print(f"| {system} | {layout} | " + " | ".join(cell(system, layout, b) for b in (1, 16, 64)) + " |")


def summary(ratios: list[float]) -> str:
    within = sum(1 for x in ratios if abs(x - 1) <= 0.2)
    return (f"median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}, within 20% at {within} "
            f"of {len(ratios)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    rows = read_rows()
    fields = list(rows[0])
    t = {}
    for r in rows:
        if r["model"] != "deepseek-v4-flash":
            continue
        res = rubinperf(r["system"], r["layout"], int(r["batch"]), int(r["context"]))
        gpu, whole = res["gpu_time_ms"], res["step_time_ms"]
        routed = sum(k["time_ms"] for k in res["breakdown"] if k["kernel"].startswith(ROUTED))
        r["rubinperf_ms"], r["ratio"] = f"{gpu:.4f}", f"{gpu / float(r[LIKE]):.3f}"
        t[(r["system"], r["layout"], int(r["batch"]))] = dict(
            gpu=gpu, whole=whole, routed=routed, **{v: float(r[v]) for v in VARIANTS},
            moe_pl=float(r["aiconfigurator_moe_power_law_ms"]), moe_bal=float(r["aiconfigurator_moe_balanced_ms"]))
    pts = list(t.values())

    print("Like for like: aiconfigurator with balanced routing on outlier-free tables / rubinperf GPU / ratio "
          "(whole step)\n")
    grid("batch 1 | batch 16 | batch 64", lambda s, l, b: (
        f"{t[s, l, b][LIKE]:.2f} / {t[s, l, b]['gpu']:.2f} / **{t[s, l, b]['gpu'] / t[s, l, b][LIKE]:.2f}** "
        f"({t[s, l, b]['whole'] / t[s, l, b][LIKE]:.2f})"))
    print(f"\nGPU time: {summary([p['gpu'] / p[LIKE] for p in pts])}; whole step: "
          f"{summary([p['whole'] / p[LIKE] for p in pts])}\n")

    print("Against aiconfigurator's default power-law routing on outlier-free tables: aiconfigurator / rubinperf GPU / "
          "ratio (whole step)\n")
    k = "aiconfigurator_kept_ms"
    grid("batch 1 | batch 16 | batch 64", lambda s, l, b: (
        f"{t[s, l, b][k]:.2f} / {t[s, l, b]['gpu']:.2f} / **{t[s, l, b]['gpu'] / t[s, l, b][k]:.2f}** "
        f"({t[s, l, b]['whole'] / t[s, l, b][k]:.2f})"))
    print(f"\nGPU time: {summary([p['gpu'] / p[k] for p in pts])}; whole step: "
          f"{summary([p['whole'] / p[k] for p in pts])}\n")

    print("rubinperf GPU time over each of aiconfigurator's four steps (routing: power law / balanced; tables: as "
          "shipped / outlier rows replaced):\n")
    print("| system | layout | batch | power law, shipped | power law, outlier-free | balanced, shipped "
          "| balanced, outlier-free |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (s, l, b), p in t.items():
        print(f"| {s} | {l} | {b} | " + " | ".join(f"{p['gpu'] / p[v]:.2f}" for v in VARIANTS) + " |")
    for v in VARIANTS:
        print(f"\n{v}: {summary([p['gpu'] / p[v] for p in pts])}", end="")
    print("\n")

    print("Routed experts, ms per step: aiconfigurator's routed-MoE op (power law / balanced), its step's difference "
          "balanced - power law, rubinperf's routed-expert rows:\n")
    print("| system | layout | batch | aiconfigurator MoE op: power law | balanced | step: balanced - power law "
          "| rubinperf routed experts | rubinperf / aiconfigurator balanced |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (s, l, b), p in t.items():
        print(f"| {s} | {l} | {b} | {p['moe_pl']:.2f} | {p['moe_bal']:.2f} | "
              f"{p[LIKE] - p['aiconfigurator_kept_ms']:+.2f} | {p['routed']:.2f} | {p['routed'] / p['moe_bal']:.2f} |")
    if a.write:
        write_rows(rows, fields)
        print(f"\nwrote {CSV}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
