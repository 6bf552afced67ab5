"""Check the MLA prefill form against aiconfigurator 0.12.0's measured H200 context-MLA tables (nothing fitted).

The tables (aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl, sha256
aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4, under
aiconfigurator_core/systems/data/h200_sxm/mla/<framework>/<version>/context_mla_perf.parquet): one causal prefill
of `isl` tokens per sequence, `batch_size` sequences, `num_heads` heads on the GPU (the model's heads / tp_size), no cached prefix.

- TensorRT-LLM 1.3.0rc20: its context MLA kernel. The script counts each row's FLOPs in both forms: the absorbed
  form (QK 576, PV 512) would need up to twice the H200's 989 TFLOPS BF16 peak, the decompressed form (QK 192,
  PV 128) 50-60% of it: TensorRT-LLM runs prefill decompressed.
- SGLang 0.5.14: aiconfigurator's collector (collector/sglang/collect_mla.py, ai-dynamo/aiconfigurator @
  046f0d64a5c929a26c8aca5a515c5013cf4a86e9) times FA3 on Hopper in the absorbed shapes (head_dim 576, v 512, one
  KV head), which is not what SGLang's model runs in prefill (deepseek_v2.py: MHA); it measures the absorbed form's
  cost on a flash kernel.

Each row is priced by rubinperf's attention kernel in the form it ran (trtllm-hopper and sglang-deepep-hopper on the
H200) and the median predicted / measured printed per table; the two tables' times at one shape give the measured
ratio of the two forms.

    pip install pyarrow; python scripts/check_mla_context_rows.py <unpacked>/aiconfigurator_core/systems/data
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rubinperf import kernels as K                    # noqa: E402
from rubinperf.roofline import kernel_time             # noqa: E402
from rubinperf.specs.stack import load_platform        # noqa: E402

BF16_PEAK = 989e12
TABLES = (("trtllm/1.3.0rc20", "trtllm-hopper", "decompressed"), ("sglang/0.5.14", "sglang-deepep-hopper", "absorbed"))


def flops(b, h, s, qk, v):
    return 2 * b * h * s * (s + 1) / 2 * (qk + v)


def kernel(form, b, h, s):
    if form == "decompressed":
        return K.attention(b, h, s, s, 192, kv_heads=h, causal=True, v_head_dim=128)
    return K.attention(b, h, s, s, 576, kv_heads=1, causal=True, v_head_dim=512, shared_kv=True)


def main(data: str) -> None:
    import pyarrow.parquet as pq

    times = {}
    for table, stack, form in TABLES:
        hw = load_platform("h200", stack)
        rows = pq.read_table(f"{data}/h200_sxm/mla/{table}/context_mla_perf.parquet").to_pylist()
        ratios, peak_mha, peak_abs = [], 0.0, 0.0
        for r in rows:
            if r["kv_cache_dtype"] != "bfloat16" or r["isl"] < 256:
                continue
            b, s, h = r["batch_size"], r["isl"], r["num_heads"]   # the heads on the GPU (the model's / tp_size)
            t = r["latency"] * 1e-3
            times[(table, b, s, h)] = t
            peak_mha = max(peak_mha, flops(b, h, s, 192, 128) / t)
            peak_abs = max(peak_abs, flops(b, h, s, 576, 512) / t)
            ratios.append(float(kernel_time(kernel(form, b, h, s), hw).expected_s) / t)
        print(f"{table} ({form} kernel priced on {stack}): {len(ratios)} rows, predicted / measured median "
              f"{statistics.median(ratios):.2f} (10-90%: {sorted(ratios)[len(ratios) // 10]:.2f}-"
              f"{sorted(ratios)[9 * len(ratios) // 10]:.2f}); highest rate counted as MHA {peak_mha / 1e12:.0f} TFLOPS, "
              f"counted absorbed {peak_abs / 1e12:.0f} TFLOPS (BF16 peak {BF16_PEAK / 1e12:.0f})")
    both = [(k[1:], times[k], times[("sglang/0.5.14",) + k[1:]]) for k in times
            if k[0].startswith("trtllm") and ("sglang/0.5.14",) + k[1:] in times and k[2] >= 4096]
    print(f"absorbed (FA3, SGLang table) / decompressed (TensorRT-LLM) time at the same shapes, isl >= 4096: median "
          f"{statistics.median(a / d for _, d, a in both):.2f} over {len(both)} shapes "
          f"(the head widths alone: {(576 + 512) / (192 + 128):.2f})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/check_mla_context_rows.py <unpacked>/aiconfigurator_core/systems/data")
    main(sys.argv[1])
