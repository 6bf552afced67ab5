"""DeepGEMM's SM90 FP8 GEMM at decode sizes: the per-CTA chain of K blocks its code runs, against the effective
bytes-in-flight figure the stack uses, on the own kernel evidence (calibration/hopper). Prints two tables:

1. The H100 one-token probe's K slopes (calibration/hopper/probe_sm90_h100.csv, least squares over K = 1024-8192 per
   N, and the 4096 x 4096 rows on 8-66 SMs) beside the chain (roofline.sm90_gemm_chain) with its fixed part taken from
   the N = 128 slope alone: the chain's cycles per K block from the code (the WGMMAs' and the promotion's FLOPs at one
   SM's peaks, kernels.deepgemm.sm90_fp8_gemm_kblock_flops) and the GPU-wide rate each row reaches.
2. Candidate models fitted (kernel_evidence.fit_family) on the same stated half as the stack's figure
   (kernel_evidence.FIT_ROWS: the own H200 rows of wq_a, wq_b, idx_wq_b, shared_w13), with median / worst
   |ln(measured / predicted)| on the fit rows and on every held-out FP8 GEMM row: the other four H200 linears, the
   H800 rows of DeepGEMM's README and the 23 H100 probe rows.

Source of the structure: github.com/deepseek-ai/DeepGEMM @ 54e22612409371d6364144b69086735beb54e98b,
deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh lines 283-348 (the math warpgroup's K loop) and
csrc/jit_kernels/heuristics/sm90.hpp (blocks, stages). docs/deepseek-kernels.md says what was found.

Usage: python scripts/sm90_gemm_chain.py   (about a minute: each candidate's fit predicts the rows a few hundred times)
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rubinperf.analysis import kernel_evidence as KE  # noqa: E402
from rubinperf.kernels.deepgemm import sm90_fp8_gemm_blocks, sm90_fp8_gemm_kblock_flops, sm90_fp8_gemm_pipeline  # noqa: E402
from rubinperf.specs.stack import load_platform  # noqa: E402

# The candidates: fields fitted together (the stack's other fields as they are). The GPU-wide share of the HBM rate is
# the hardware's hbm_stream_efficiency (here it sets the FP8 GEMM rows' weight stream, and their small activations);
# mma_prologue_cycles is the stack's prologue of every tensor-core kernel: both fitted on these rows alone, as
# candidates of this kernel's, not as the platform's values.
MODELS = {
    "stack: bytes in flight per CTA (11,100 B, fitted)": ("deepgemm_sm90_bytes_in_flight_per_sm",),
    "chain of K blocks (code's stages in flight)": ("deepgemm_sm90_kblock_cycles",),
    "chain + GPU-wide share of the HBM rate": ("deepgemm_sm90_kblock_cycles", "hbm_stream_efficiency"),
    "chain + the stack's prologue (information)": ("deepgemm_sm90_kblock_cycles", "mma_prologue_cycles"),
}
EXTRA_RANGES = {"mma_prologue_cycles": (500.0, 8000.0)}


def probe_slopes():
    h100 = load_platform("h100-cluster", "sglang-deepep-hopper")
    rows = list(csv.DictReader(open(ROOT / "calibration/hopper/probe_sm90_h100.csv")))
    by_n: dict = {}
    for r in rows:
        if r["m"] == "1" and r["sms"] == "132":
            by_n.setdefault(int(r["n"]), []).append((int(r["k"]) / 128, float(r["kineto_us"])))

    def step_ns(block_m, block_n, cycles):
        mma, promotion = sm90_fp8_gemm_kblock_flops(block_m, block_n)
        sms = h100.sm_count
        return 1e9 * (cycles / h100.sm_clock_hz + mma * sms / h100.peak_flops("fp8")
                      + promotion * sms / h100.peak_flops("fp32"))

    fixed = None
    print("H100 probe, m = 1: time per K block (128 values) of each CTA")
    print(f"{'N':>6} {'SMs':>4} {'block':>7} {'CTAs':>5} {'stages':>6} {'measured ns':>11} {'chain ns':>9} "
          f"{'GPU TB/s':>9} {'CTA GB/s':>9}")
    for n in sorted(by_n):
        pts = sorted(by_n[n])
        mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts) * 1e3   # ns
        bm, bn = sm90_fp8_gemm_blocks(1, n, h100.sm_count)
        ctas = math.ceil(n / bn)
        if fixed is None:   # the chain's fixed cycles from the N = 128 slope (8 CTAs: no GPU-wide limit near)
            fixed = (slope - step_ns(bm, bn, 0.0)) * 1e-9 * h100.sm_clock_hz
        stages, stage_bytes = sm90_fp8_gemm_pipeline(bm, bn, 8192)
        print(f"{n:>6} {132:>4} {int(bm):>3}x{int(bn):<3} {ctas:>5} {int(stages):>6} {slope:>11.0f} "
              f"{step_ns(bm, bn, fixed):>9.0f} {ctas * stage_bytes / slope / 1e3:>9.2f} {stage_bytes / slope:>9.1f}")
    for r in rows:
        if r["sms"] != "132":
            sms = int(r["sms"])
            bm, bn = sm90_fp8_gemm_blocks(1, 4096, sms)
            blocks = math.ceil(4096 / bn)
            per_cta = math.ceil(blocks / sms)
            # the 2.5 us intercept of the N >= 2048 rows above taken off, then per K block of each CTA
            ns = (float(r["kineto_us"]) - 2.5) * 1e3 / (per_cta * 32)
            print(f"{4096:>6} {sms:>4} {int(bm):>3}x{int(bn):<3} {min(blocks, sms):>5} "
                  f"{int(sm90_fp8_gemm_pipeline(bm, bn, 4096)[0]):>6} {ns:>11.0f} {step_ns(bm, bn, fixed):>9.0f} "
                  f"{min(blocks, sms) * bn * 128 / ns / 1e3:>9.2f} {bn * 128 / ns:>9.1f}")
    print(f"chain's fixed part from N = 128: {fixed:.0f} cycles a K block (4096 x 4096 rows: 2.5 us intercept taken off)")


def candidates():
    rows = [r for r in KE.evidence_rows() if r.kernel == "fp8_gemm"]
    KE.FIT_RANGES.update(EXTRA_RANGES)
    platforms = {}

    def groups(values):
        out: dict = {}
        for r in rows:
            if r.gpu not in platforms:
                platforms[r.gpu] = KE.platform_of(r)
            t, _, _ = KE.predict(r, dataclasses.replace(platforms[r.gpu], **values))
            key = "fit h200" if KE.is_fit_row(r) else f"held {r.gpu}"
            out.setdefault(key, []).append(abs(math.log(r.measured_s / t)))
            if key != "fit h200":
                out.setdefault("held all", []).append(abs(math.log(r.measured_s / t)))
        return out

    print()
    print("FP8 GEMM rows, median / worst |ln(measured / predicted)| (fit: the own H200 rows of wq_a, wq_b, idx_wq_b, "
          "shared_w13)")
    cols = ("fit h200", "held h200", "held h800", "held h100", "held all")
    print(f"{'model':52s} {'fitted':44s} " + " ".join(f"{c:>13s}" for c in cols))
    for name, fields in MODELS.items():
        start = {"deepgemm_sm90_kblock_cycles": 200.0} if "deepgemm_sm90_kblock_cycles" in fields else None
        found, _ = KE.fit_family(rows, "fp8_gemm", "sm90", start=start, fields=fields)
        g = groups(found)
        fitted = ", ".join(f"{f.replace('deepgemm_sm90_', '')} {v:.3g}" for f, v in found.items())
        print(f"{name:52s} {fitted:44s} " + " ".join(
            f"{statistics.median(g[c]):.3f}/{max(g[c]):.3f}".rjust(13) for c in cols))


if __name__ == "__main__":
    probe_slopes()
    candidates()
