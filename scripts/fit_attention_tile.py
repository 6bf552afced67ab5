"""Fit TensorRT-LLM's context (prefill) MLA kernel on Hopper to aiconfigurator 0.12.0's measured H200 rows.

The rows (aiconfigurator_core-0.12.0 wheel, sha256 aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4,
aiconfigurator_core/systems/data/h200_sxm/mla/trtllm/1.3.0rc20/context_mla_perf.parquet, BF16 KV, isl >= 256):
TensorRT-LLM 1.3.0rc20's context MLA kernel, one causal prefill of `isl` tokens per sequence, `batch_size`
sequences, `num_heads` heads on the GPU, timed in CUDA graphs. Each row is priced by rubinperf's attention kernel in
the decompressed form (QK 192, PV 128, one K/V per head) with the causal key blocks computed in full
(kernels.attention.computed_per_query, not fitted). Two parameters are fitted (least absolute log error, a grid):
the stack's attention_compute_efficiency (the kernel's MMA rate) and attention_tile_overhead_cycles (each query
tile's cycles beyond its MMAs). Two folds hold out whole head families (the per-GPU heads of the TP sizes):
fit on heads {128, 64, 32, 16}, report {8, 4, 2, 1}, and the reverse; then the fit on all rows.

    pip install pyarrow; python scripts/fit_attention_tile.py <unpacked>/aiconfigurator_core/systems/data
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rubinperf import kernels as K                    # noqa: E402
from rubinperf.roofline import kernel_time             # noqa: E402
from rubinperf.specs.stack import load_platform        # noqa: E402

TABLE = "h200_sxm/mla/trtllm/1.3.0rc20/context_mla_perf.parquet"
EFFS = [0.40 + 0.005 * i for i in range(81)]           # 0.40-0.80
CYCLES = [500.0 * i for i in range(61)]                # 0-30,000


def rows(data: str):
    import pyarrow.parquet as pq
    out = []
    for r in pq.read_table(f"{data}/{TABLE}").to_pylist():
        if r["kv_cache_dtype"] != "bfloat16" or r["isl"] < 256:
            continue
        out.append((r["batch_size"], r["isl"], r["num_heads"], r["latency"] * 1e-3))
    return out


def parts(rs, hw):
    """Each row's terms at rate 1 and no tile overhead: the model's time is then
    latency + max(compute_1 / eff + ctas x cycles / (clock x SMs), memory)."""
    one = dataclasses.replace(hw, attention_compute_efficiency=1.0, attention_tile_overhead_cycles=0.0)
    out = []
    for b, s, h, t in rs:
        kern = K.attention(b, h, s, s, 192, kv_heads=h, causal=True, v_head_dim=128)
        kt = kernel_time(kern, one)
        out.append((float(kt.latency_s), float(kt.compute_s), float(kt.memory_s + kt.parallelism_s),
                    kern.ctas / (hw.sm_clock_hz * hw.sm_count), t))
    return out


def errors(ps, eff, cyc):
    return [math.log(t / (lat + max(c1 / eff + per * cyc, mem))) for lat, c1, mem, per, t in ps]


def fit(ps):
    return min(((statistics.median(abs(e) for e in errors(ps, eff, cyc)), eff, cyc) for eff in EFFS for cyc in CYCLES))


def report(name, ps, eff, cyc):
    r = sorted(math.exp(-e) for e in errors(ps, eff, cyc))    # predicted / measured
    print(f"  {name}: {len(r)} rows, predicted/measured median {statistics.median(r):.2f} "
          f"(10-90%: {r[len(r) // 10]:.2f}-{r[9 * len(r) // 10]:.2f}), median |ln| "
          f"{statistics.median(abs(math.log(x)) for x in r):.3f}")


def main(data: str) -> None:
    hw = load_platform("h200", "trtllm-hopper")
    rs = rows(data)
    ps = dict(zip(rs, parts(rs, hw)))
    print(f"as the stack stands (attention_compute_efficiency {hw.attention_compute_efficiency}, "
          f"tile overhead {hw.attention_tile_overhead_cycles:.0f} cycles):")
    report("all", list(ps.values()), hw.attention_compute_efficiency, hw.attention_tile_overhead_cycles)
    big, small = {128, 64, 32, 16}, {8, 4, 2, 1}
    for train, test in ((big, small), (small, big)):
        tr = [p for r, p in ps.items() if r[2] in train]
        te = [p for r, p in ps.items() if r[2] in test]
        _, eff, cyc = fit(tr)
        print(f"fit on heads {sorted(train)}: efficiency {eff:.3f}, tile overhead {cyc:.0f} cycles")
        report(f"held out, heads {sorted(test)}", te, eff, cyc)
    _, eff, cyc = fit(list(ps.values()))
    print(f"fit on all rows: efficiency {eff:.3f}, tile overhead {cyc:.0f} cycles")
    report("all", list(ps.values()), eff, cyc)
    for lo, hi in ((256, 1024), (1536, 4096), (6144, 32768)):
        report(f"isl {lo}-{hi}", [p for r, p in ps.items() if lo <= r[1] <= hi], eff, cyc)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/fit_attention_tile.py <unpacked>/aiconfigurator_core/systems/data")
    main(sys.argv[1])
