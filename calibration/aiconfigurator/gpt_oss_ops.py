"""aiconfigurator 0.12.0's gpt-oss-120b decode step (static_gen, ISL/OSL 1000/1000), op by op, at the three
TensorRT-LLM perf-overview rows' batches.

    /work/venvs/aiconf/bin/python calibration/aiconfigurator/gpt_oss_ops.py [--distribution balanced]

Runs ONLY in aiconfigurator's own virtualenv: it calls aiconfigurator's public API (`cli_estimate`) as a tool, the
same as `aiconfigurator cli estimate --backend trtllm --estimate-mode static_gen --isl 1000 --osl 1000
--batch-size B ...`, and prints `summary.get_generation_latency_dict()` (ms per decode step, summed over layers).
`--distribution balanced` wraps `aiconfigurator.sdk.models.get_model` so the MoE rows looked up are the balanced
ones (its default is power law, alpha 1.2 for this model family), as aic_steps.py does. aiconfigurator's gpt-oss graph
(aiconfigurator_core/sdk/models/moe.py, GptOssForCausalLM) has two ops both named generation_attention: layers/2 with
window_size 128 and layers/2 with no window; `--split-attention` times each alone, each in a process of its own (the
compiled engine is cached per configuration within a process), by dropping the other from the op list.
`--moe-rows` prints the H200 W4A16 MXFP4 MoE rows (128 experts, TP1 EP1) the H200 step interpolates.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

ROWS = {  # name: (system, batch per rank, layout, quant)
    "h200-tp1": ("h200_sxm", 788, dict(tp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1),
                 dict(moe_quant_mode="w4a16_mxfp4", gemm_quant_mode="bfloat16", kvcache_quant_mode="bfloat16")),
    "b200-dep2": ("b200_sxm", 1498, dict(tp_size=1, attention_dp_size=2, moe_tp_size=1, moe_ep_size=2),
                  dict(moe_quant_mode="w4a8_mxfp4_mxfp8", gemm_quant_mode="bfloat16", kvcache_quant_mode="fp8")),
    "gb200-tp1": ("gb200", 2048, dict(tp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1),
                  dict(moe_quant_mode="w4a8_mxfp4_mxfp8", gemm_quant_mode="bfloat16", kvcache_quant_mode="fp8")),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--distribution", default=None, help="balanced, or leave out for aiconfigurator's default")
    ap.add_argument("--rows", nargs="*", default=list(ROWS))
    ap.add_argument("--batch", type=int, default=None, help="override every row's batch")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--split-attention", action="store_true")
    ap.add_argument("--moe-rows", action="store_true")
    ap.add_argument("--keep-window", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    import aiconfigurator.sdk.models as models
    from aiconfigurator.cli.api import cli_estimate

    if a.moe_rows:
        return moe_rows()
    if a.split_attention:
        return split_attention(a)
    build = models.get_model

    def get_model(model_path, model_config, backend_name):
        if a.distribution:
            model_config.workload_distribution = a.distribution
        m = build(model_path, model_config, backend_name)
        if a.keep_window is not None:
            m.generation_ops = [op for op in m.generation_ops if type(op).__name__ != "GenerationAttention"
                                or op._window_size == a.keep_window]
        return m

    models.get_model = get_model
    out = {}
    for name in a.rows:
        system, batch, layout, quant = ROWS[name]
        batch = a.batch or batch
        r = cli_estimate("openai/gpt-oss-120b", system, mode="static_gen", backend_name="trtllm", isl=1000,
                         osl=1000, batch_size=batch, **layout, **quant)
        ops = r.summary.get_generation_latency_dict()
        out[name] = {"batch": batch, "tpot": r.tpot, "ops": ops}
        if not a.json:   # the latency dict sums each op over the decode steps: divided back to one step
            steps = sum(ops.values()) / r.tpot
            print(f"{name} ({system}, batch {batch}/rank): TPOT {r.tpot:.2f} ms; ms per step:")
            for k, v in sorted(ops.items(), key=lambda kv: -kv[1]):
                if v:
                    print(f"  {k:40s} {v / steps:8.3f}")
    if a.json:
        json.dump(out, sys.stdout, indent=1)
    return 0


def split_attention(a) -> int:
    import subprocess

    for name in a.rows:
        parts = {}
        for window in (128, 0):
            cmd = [sys.executable, __file__, "--json", "--rows", name, "--keep-window", str(window)]
            cmd += ["--batch", str(a.batch)] if a.batch else []
            out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)[name]
            steps = sum(out["ops"].values()) / out["tpot"]   # the ops dict sums over the decode steps
            parts[window] = out["ops"]["generation_attention"] / steps
        print(f"{name}: generation_attention per step: window-128 layers {parts[128]:.2f} ms, "
              f"full layers {parts[0]:.2f} ms")
    return 0


def moe_rows() -> int:
    import glob
    from pathlib import Path

    import aiconfigurator_core
    import pandas as pd

    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / "h200_sxm" / "moe" / "trtllm"
    for f in sorted(glob.glob(str(root / "*" / "moe_perf.parquet"))):
        df = pd.read_parquet(f)
        d = df[(df.moe_dtype == "w4a16_mxfp4") & (df.num_experts == 128) & (df.moe_tp_size == 1) & (df.moe_ep_size == 1)]
        if len(d):
            print(f, sorted(d.kernel_source.unique()))
            print(d.pivot_table(index="num_tokens", columns="distribution", values="latency").round(4).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
