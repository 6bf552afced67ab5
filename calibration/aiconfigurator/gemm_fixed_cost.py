"""What aiconfigurator 0.12.0's GB300 DeepGEMM FP8 GEMM rows can say about the GEMM's fixed cost per call (a dev script).

    PYTHONPATH=. python calibration/aiconfigurator/gemm_fixed_cost.py [--stack vllm-gb300-oct2026]
        [--quantize DIR]   # DIR: aiconfigurator_core/systems/data/gb300/quantize (needs pyarrow)

Per M bucket, fits time = intercept + weight MB / rate to the measured rows (SGLang 0.5.14's
`sglang_deepgemm_gemm_nt_f8f8bf16`, TensorRT-LLM 1.3.0rc20's `deepgemm`: each op is the activation quantisation
+ DeepGEMM's SM100 FP8 GEMM, in a CUDA graph) and to rubinperf's prediction of the same rows, and prints the
excess per call (measured - predicted). With --quantize it prints the quantisation tables' per-call times
(`scale_matrix_perf` = static quantisation alone; `computescale_perf` = dynamic - static, clipped at 0).
Numbers only; nothing is fitted into a stack.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from rubinperf.calibrate.fit import Stacked, measured, timed_rows
from rubinperf.calibrate.plan import read_csv

HERE = Path(__file__).resolve().parent
IMPLS = {"sglang": "sglang_deepgemm_gemm_nt_f8f8bf16", "trtllm": "deepgemm"}
BUCKETS = ((1, 16), (17, 128), (129, 1024))
QUANT_K = (1024, 1280, 1536, 2048, 4096, 5120, 8192)


def gemm_rows(args) -> list[str]:
    from rubinperf.specs.stack import load_platform

    hw = load_platform("gb300-nvl72", args.stack)
    out = []
    for backend, impl in IMPLS.items():
        _, rows = read_csv(HERE / f"gb300-{backend}.csv")
        rows = [r for r in timed_rows(rows) if r.get("impl") == impl and r.get("family") == "gemm"]
        meas, pred = measured(rows), Stacked(rows).times(hw)
        for lo, hi in BUCKETS:
            idx = [i for i, r in enumerate(rows) if lo <= int(r["m"]) <= hi]
            x = np.array([[1.0, int(rows[i]["n"]) * int(rows[i]["k"]) / 1e6] for i in idx])  # FP8 weight MB
            cm = np.linalg.lstsq(x, meas[idx] * 1e6, rcond=None)[0]
            cp = np.linalg.lstsq(x, pred[idx] * 1e6, rcond=None)[0]
            ex = (meas[idx] - pred[idx]) * 1e6
            out.append(f"{backend} M {lo}-{hi} ({len(idx)} rows): intercept measured {cm[0]:.2f} us / model "
                       f"{cp[0]:.2f} us; rate {1 / cm[1]:.2f} / {1 / cp[1]:.2f} TB/s; excess per call median "
                       f"{np.median(ex):.2f} us (p10 {np.percentile(ex, 10):.2f}, p90 {np.percentile(ex, 90):.2f}); "
                       f"measured/predicted {np.median(meas[idx] / pred[idx]):.2f}")
    return out


def quant_rows(folder: Path) -> list[str]:
    import pyarrow.parquet as pq

    out = []
    for fw in sorted(p for p in folder.glob("*/*") if (p / "computescale_perf.parquet").is_file()):
        load = lambda t: {(r["m"], r["k"]): r["latency"] * 1e3 for r in pq.read_table(fw / t).to_pylist()}  # noqa: E731
        scale, static = load("computescale_perf.parquet"), load("scale_matrix_perf.parquet")
        zero = sum(v == 0 for v in scale.values())
        for lo, hi in BUCKETS:
            keys = [key for key in scale if lo <= key[0] <= hi and key[1] in QUANT_K]
            dyn = [scale[key] + static[key] for key in keys]
            st = [static[key] for key in keys]
            out.append(f"{fw.parent.name} {fw.name} M {lo}-{hi} ({len(keys)} rows): static median {statistics.median(st):.2f} us; "
                       f"static + compute_scale median {statistics.median(dyn):.2f} us ({min(dyn):.2f}-{max(dyn):.2f}); "
                       f"compute_scale clipped to 0 in {zero} of {len(scale)} rows")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stack", default="vllm-gb300-oct2026")
    ap.add_argument("--quantize", type=Path, help="aiconfigurator_core/systems/data/gb300/quantize")
    args = ap.parse_args()
    print("\n".join(gemm_rows(args)))
    if args.quantize:
        print("\n".join(quant_rows(args.quantize)))


if __name__ == "__main__":
    main()
