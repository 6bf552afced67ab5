"""Compare aiconfigurator's measured rows with our H200 measurements and with rubinperf's model (markdown).

    python calibration/aiconfigurator/compare.py h200      # their h200_sxm GEMMs / ours (calibration/h200)
    python calibration/aiconfigurator/compare.py model [--stack sglang-blackwell] [--backend sglang]
                                                           # measured / expected per system, family, M bucket

Reads only the CSVs in this folder (numpy + rubinperf; no pandas). Every row is timed as it ran: in a CUDA
graph (`--launch graph`), on the rack of its system with the stack given.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from rubinperf.calibrate.fit import Stacked, measured, timed_rows
from rubinperf.calibrate.plan import family_label, read_csv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HARDWARE = {"gb300": "gb300-nvl72", "gb200": "gb200-nvl72", "b200_sxm": "b200"}
BUCKETS = ((1, 16), (17, 128), (129, 1024), (1025, None))
# The H200 implementations of theirs that run the op ours ran: cuBLAS BF16 through torch, per-tensor FP8.
THEIRS_H200 = {"bf16": "sglang_torch_linear", "fp8": "sglang_sgl_kernel_fp8_scaled_mm"}
OURS_H200 = {"bf16": "torch.mm", "fp8": "torch._scaled_mm(per-tensor scales, fast accum)"}


def size_of(row: dict) -> int:
    """The M a row is bucketed by: GEMM rows, MoE and mHC tokens, decode batch."""
    return int(row.get("m") or row.get("batch") or 0)


def bucket(m: int) -> str:
    for lo, hi in BUCKETS:
        if m >= lo and (hi is None or m <= hi):
            return f"{lo}-{hi}" if hi else f">{lo - 1}"
    return "?"


def interpolate(table: dict, m: int, n: int, k: int):
    """Their time at (m, n, k) from the grid: exact m, bilinear in (ln n, ln k) of ln t; None off the grid."""
    ns = sorted({nn for (mm, nn, kk) in table if mm == m})
    ks = sorted({kk for (mm, nn, kk) in table if mm == m})
    lo_n, hi_n = [x for x in ns if x <= n], [x for x in ns if x >= n]
    lo_k, hi_k = [x for x in ks if x <= k], [x for x in ks if x >= k]
    if not (lo_n and hi_n and lo_k and hi_k):
        return None
    n0, n1, k0, k1 = lo_n[-1], hi_n[0], lo_k[-1], hi_k[0]
    try:
        c = {(a, b): math.log(table[(m, a, b)]) for a in (n0, n1) for b in (k0, k1)}
    except KeyError:
        return None
    u = 0.0 if n1 == n0 else (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
    v = 0.0 if k1 == k0 else (math.log(k) - math.log(k0)) / (math.log(k1) - math.log(k0))
    lt = ((1 - u) * (1 - v) * c[(n0, k0)] + u * (1 - v) * c[(n1, k0)] + (1 - u) * v * c[(n0, k1)]
          + u * v * c[(n1, k1)])
    return math.exp(lt), (n0, n1) == (n, n) and (k0, k1) == (k, k)


def h200(args) -> str:
    _, theirs = read_csv(HERE / "h200_sxm-sglang.csv")
    ours = []
    for name in ("shapes.csv", "measurements.csv"):
        _, rows = read_csv(ROOT / "calibration" / "h200" / name)
        ours += [r for r in rows if r["family"] == "gemm" and r["mode"] == "graph"]
    lines = ["| dtype | theirs (kernel_source) | ours (impl) | pairs | exact n,k | median theirs/ours | "
             "p10 | p90 | median \\|ln\\| |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    by_bucket = {}
    for dtype, impl in THEIRS_H200.items():
        table = {(r["m"], r["n"], r["k"]): r["measured_s"] for r in theirs
                 if r["family"] == "gemm" and r["impl"] == impl and r["dtype"] == dtype}
        ratios, exact = [], 0
        for r in ours:
            if r["dtype"] != dtype or r["impl"] != OURS_H200[dtype]:
                continue
            got = interpolate(table, r["m"], r["n"], r["k"])
            if got is None:
                continue
            ratios.append(got[0] / r["measured_s"])
            exact += got[1]
            by_bucket.setdefault((dtype, bucket(r["m"])), []).append(got[0] / r["measured_s"])
        x = np.array(ratios)
        lines.append(f"| {dtype} | {impl} | {OURS_H200[dtype]} | {len(x)} | {exact} | {np.median(x):.2f} | "
                     f"{np.percentile(x, 10):.2f} | {np.percentile(x, 90):.2f} | {np.median(np.abs(np.log(x))):.3f} |")
    lines += ["", "| dtype | M bucket | pairs | median theirs/ours |", "|---|---|---:|---:|"]
    for (dtype, b), v in by_bucket.items():
        lines.append(f"| {dtype} | {b} | {len(v)} | {np.median(v):.2f} |")
    return "\n".join(lines) + "\n"


def model(args) -> str:
    from rubinperf.specs.stack import load_platform

    lines = [f"| system | family | M 1-16 | M 17-128 | M 129-1024 | M >1024 |", "|---|---|---|---|---|---|"]
    for system, hw_name in HARDWARE.items():
        path = HERE / f"{system}-{args.backend}.csv"
        if not path.is_file():
            continue
        hw = load_platform(hw_name, args.stack)
        _, rows = read_csv(path)
        rows = timed_rows(rows)
        ratio = measured(rows) / Stacked(rows).times(hw)
        labels = [label(r) for r in rows]
        buckets = [bucket(size_of(r)) for r in rows]
        for lab in dict.fromkeys(labels):
            cells = []
            for lo, hi in BUCKETS:
                b = f"{lo}-{hi}" if hi else f">{lo - 1}"
                x = ratio[[i for i in range(len(rows)) if labels[i] == lab and buckets[i] == b]]
                cells.append(f"{np.median(x):.2f} / {np.median(np.abs(np.log(x))):.2f} ({len(x)})" if len(x) else "")
            lines.append(f"| {system} | {lab} | " + " | ".join(cells) + " |")
    lines += ["", "| system | collective (impl) | ranks | <= 64 KB | 64 KB-1 MB | 1-16 MB | > 16 MB |",
              "|---|---|---:|---|---|---|---|"]
    from rubinperf.calibrate.fit import collective_kernel
    from rubinperf.roofline import kernel_time

    for system, hw_name in HARDWARE.items():
        hw = load_platform(hw_name, args.stack)
        _, rows = read_csv(HERE / f"{system}-collectives.csv")
        for key in dict.fromkeys((r["collective"], r["impl"], r["ranks"]) for r in rows):
            sub = [r for r in rows if (r["collective"], r["impl"], r["ranks"]) == key]
            cells = []
            for lo, hi in COLL_BUCKETS:
                x = np.array([r["measured_s"] / float(kernel_time(collective_kernel(r), hw).expected_s) for r in sub
                              if lo < r["nbytes"] <= hi])
                cells.append(f"{np.median(x):.2f} ({len(x)})" if len(x) else "")
            lines.append(f"| {system} | {key[0]} ({key[1]}) | {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


COLL_BUCKETS = ((0, 2 ** 16), (2 ** 16, 2 ** 20), (2 ** 20, 2 ** 24), (2 ** 24, float("inf")))


def label(row: dict) -> str:
    """family_label, with FP8 GEMMs split into block-scaled (DeepGEMM) and per-tensor kernels."""
    lab = family_label(row)
    if lab == "gemm-fp8":
        lab += " block" if "deepgemm" in (row.get("impl") or "").lower() else " tensor"
    return lab


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("h200", "model"))
    ap.add_argument("--stack", default="sglang-blackwell", help="stack name or TOML path (model)")
    ap.add_argument("--backend", default="sglang", help="sglang or trtllm (model)")
    a = ap.parse_args(argv)
    print(h200(a) if a.what == "h200" else model(a), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
