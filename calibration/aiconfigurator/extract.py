"""Select DeepSeek-V4.1-Flash's ops from aiconfigurator 0.12.0's measured per-op tables (a dev script).

    python calibration/aiconfigurator/extract.py /path/to/aiconfigurator_core/systems/data [--out DIR]

Reads the parquet tables (pandas + pyarrow: needed here only, not by rubinperf), maps each selected row onto
rubinperf's calibration CSV format (rubinperf/calibrate/plan.py; every row `mode` graph, `impl` the table's
kernel_source, `source` the table it came from), applies the outlier rules of rubinperf/calibrate/outliers.py
and writes, into DIR (default: this script's folder):

    <system>-<backend>.csv       kernel rows that pass the rules (gemm, moe, mhc, attention_decode)
    <system>-collectives.csv     all-reduce / all-gather rows that pass (rubinperf's collectives CSV)
    rejected.csv                 every rejected row with its rule and reason
    modules.csv                  DSv4 sparse-attention and MegaMoE module rows (whole modules: not mapped)
    rejections.md                rows selected and rejected per table and rule (pasted into README.md)

With --models it writes instead, for the TensorRT-LLM validation rows' own models (validation/published.toml,
rows trtllm-*), <system>-trtllm-models.csv (and rejected-models.csv, rejections-models.md): TensorRT-LLM
1.3.0rc20 GEMM rows next to the dense GEMMs of Llama-3.1-70B (TP1, TP2), Llama-3.1-405B (TP8), Qwen3-235B-A22B
and gpt-oss-120b attention (TP1), and MoE rows at Qwen3-235B-A22B's and gpt-oss-120b's expert shapes.

The tables' latencies are milliseconds; the CSVs hold seconds. Only figures are taken from the tables.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import pandas as pd

from rubinperf.calibrate.outliers import reject
from rubinperf.calibrate.plan import COLLECTIVE_COLUMNS, SHAPE_GEMMS, row_cost

SYSTEMS = ("gb300", "gb200", "b200_sxm", "h200_sxm")
VERSIONS = {"sglang": "0.5.14", "trtllm": "1.3.0rc20", "vllm": "0.24.0", "nccl": "2.29.2"}
DSV4_TRTLLM = "1.3.0rc23"
GEMM_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4"}
MOE_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "nvfp4", "w4a8_mxfp4_mxfp8": "fp4"}
MOE_HIDDEN, MOE_INTER, MOE_TOPK, MOE_EXPERTS, MOE_EP = (4096, 5120), (2048,), 6, (256, 384), (1, 8, 16, 32)
MLA_HEADS = (8, 64)            # V4's 64 query heads on a DEP rank, 8 under TP8
MLA_STEPS = (127, 1023, 4095, 16383, 65535, 131071)
MHC_HIDDEN = 4096              # DeepSeek-V4-Flash's hidden size (the tables have 4096 and 7168)
MHC_MAX_TOKENS = 65536
COMM_BYTES_PER_ELEMENT = 2     # message_size counts half / bfloat16 elements (aiconfigurator's comm shims)
COMM_GPUS = (2, 4, 8)

# The TensorRT-LLM validation rows' models (their config.json, models/*.toml): dense GEMMs (name, n, k) per rank
# at the layouts the rows run (LM heads are wider than the tables' grid of n, 65,536 at most: left out).
MODEL_GEMMS = (
    ("llama70b_qkv_tp1", 10240, 8192), ("llama70b_o_tp1", 8192, 8192), ("llama70b_gate_up_tp1", 57344, 8192),
    ("llama70b_down_tp1", 8192, 28672), ("llama70b_qkv_tp2", 5120, 8192), ("llama70b_o_tp2", 8192, 4096),
    ("llama70b_gate_up_tp2", 28672, 8192), ("llama70b_down_tp2", 8192, 14336),
    ("llama405b_qkv_tp8", 2304, 16384), ("llama405b_o_tp8", 16384, 2048), ("llama405b_gate_up_tp8", 13312, 16384),
    ("llama405b_down_tp8", 16384, 6656),
    ("qwen3_qkv", 9216, 4096), ("qwen3_o", 4096, 8192),
    ("gptoss_qkv", 5120, 2880), ("gptoss_o", 2880, 4096),
)
MODEL_GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4"}   # ModelOpt FP8 is per-tensor
# MoE (hidden, intermediate, top-k, experts) and the formats the rows run: Qwen3-235B-A22B (NVFP4 on Blackwell;
# FP8 128x128 blocks, Qwen's own FP8 checkpoint, on H200), gpt-oss-120b (MXFP4 experts: W4A16 on Hopper, W4A8
# with MXFP8 activations on Blackwell). min-latency kernels (TensorRT-LLM's trtllm-gen low-latency path) left out:
# the engine's default MoE backend is CUTLASS.
MODEL_MOE = ((4096, 1536, 8, 128, ("nvfp4", "fp8_block")), (2880, 2880, 4, 128, ("w4a16_mxfp4", "w4a8_mxfp4_mxfp8")))
MODEL_MOE_DTYPES = {"nvfp4": "nvfp4", "fp8_block": "fp8", "w4a8_mxfp4_mxfp8": "fp4", "w4a16_mxfp4": "fp4"}
MODEL_MOE_EP = (1, 2, 4, 8)
MODEL_MOE_IMPLS = ("moe_torch_flow", "moe_torch_flow_cutlass", "deepgemm")

COLUMNS = ("family", "mode", "impl", "dtype", "m", "n", "k", "groups", "rows", "touched", "batch", "heads",
           "kv_heads", "q_len", "kv_len", "head_dim", "nbytes", "launches", "v_head_dim", "causal", "shared_kv",
           "measured_s", "flops", "bytes", "source")


def grid_bracket(x: int, grid) -> tuple:
    """The grid values next to x (x itself when on the grid)."""
    grid = sorted(grid)
    lo = [g for g in grid if g <= x]
    hi = [g for g in grid if g >= x]
    return tuple(sorted({*(lo[-1:]), *(hi[:1])}))


def table(data: Path, system: str, op: str, backend: str, version: str, name: str):
    p = data / system / op / backend / version / name
    return (pd.read_parquet(p), f"{system}/{op}/{backend}/{version}/{name}") if p.is_file() else (None, None)


def gemm_rows(data, system, backend):
    df, src = table(data, system, "gemm", backend, VERSIONS[backend], "gemm_perf.parquet")
    if df is None:
        return []
    pairs = {(n, k) for _, n0, k0 in SHAPE_GEMMS for n in grid_bracket(n0, df.n.unique())
             for k in grid_bracket(k0, df.k.unique())}
    sel = df[df.m.isin(GEMM_M) & df.gemm_dtype.isin(GEMM_DTYPES)]
    if backend == "vllm":  # vLLM: its DeepGEMM FP8 block rows only (where its table shows artefacts)
        sel = sel[sel.gemm_dtype == "fp8_block"]
    sel = sel[[(n, k) in pairs for n, k in zip(sel.n, sel.k)]]
    return [{"family": "gemm", "impl": r.kernel_source, "dtype": GEMM_DTYPES[r.gemm_dtype], "m": r.m, "n": r.n,
             "k": r.k, "launches": 1, "measured_s": r.latency * 1e-3, "source": src} for r in sel.itertuples()]


def model_gemm_rows(data, system):
    df, src = table(data, system, "gemm", "trtllm", VERSIONS["trtllm"], "gemm_perf.parquet")
    if df is None:
        return []
    pairs = {(n, k) for _, n0, k0 in MODEL_GEMMS for n in grid_bracket(n0, df.n.unique())
             for k in grid_bracket(k0, df.k.unique())}
    sel = df[df.m.isin(GEMM_M) & df.gemm_dtype.isin(MODEL_GEMM_DTYPES)]
    sel = sel[[(n, k) in pairs for n, k in zip(sel.n, sel.k)]]
    return [{"family": "gemm", "impl": r.kernel_source, "dtype": MODEL_GEMM_DTYPES[r.gemm_dtype], "m": r.m,
             "n": r.n, "k": r.k, "launches": 1, "measured_s": r.latency * 1e-3, "source": src}
            for r in sel.itertuples()]


def model_moe_rows(data, system):
    """MoE rows at the validated models' expert shapes. A W4A16 row's impl is the table's kernel_source with
    ' w4a16' appended: its weights are the model's fp4 (MXFP4), its activations BF16 (rubinperf.calibrate.rows)."""
    df, src = table(data, system, "moe", "trtllm", VERSIONS["trtllm"], "moe_perf.parquet")
    if df is None:
        return []
    out = []
    for hidden, inter, topk, experts, dtypes in MODEL_MOE:
        sel = df[(df.hidden_size == hidden) & (df.inter_size == inter) & (df.topk == topk)
                 & (df.num_experts == experts) & df.moe_dtype.isin(dtypes) & (df.moe_tp_size == 1)
                 & df.moe_ep_size.isin(MODEL_MOE_EP) & (df.distribution == "balanced")
                 & df.kernel_source.isin(MODEL_MOE_IMPLS)]
        for r in sel.itertuples():
            routed = r.num_tokens * r.topk
            if routed % r.moe_ep_size:
                continue
            rows, groups = routed // r.moe_ep_size, r.num_experts // r.moe_ep_size
            impl = r.kernel_source + (" w4a16" if r.moe_dtype == "w4a16_mxfp4" else "")
            out.append({"family": "moe", "impl": impl, "dtype": MODEL_MOE_DTYPES[r.moe_dtype], "m": r.num_tokens,
                        "n": r.hidden_size, "k": r.inter_size, "groups": groups, "rows": rows,
                        "touched": min(groups, rows), "launches": 2, "measured_s": r.latency * 1e-3, "source": src})
    return out


def moe_rows(data, system, backend):
    df, src = table(data, system, "moe", backend, VERSIONS[backend], "moe_perf.parquet")
    if df is None:
        return []
    sel = df[df.moe_dtype.isin(MOE_DTYPES) & df.hidden_size.isin(MOE_HIDDEN) & df.inter_size.isin(MOE_INTER)
             & (df.topk == MOE_TOPK) & df.num_experts.isin(MOE_EXPERTS) & (df.moe_tp_size == 1)
             & df.moe_ep_size.isin(MOE_EP) & (df.distribution == "balanced")]
    out = []
    for r in sel.itertuples():
        routed = r.num_tokens * r.topk
        if routed % r.moe_ep_size:
            continue  # a fractional share of rows per rank
        rows, groups = routed // r.moe_ep_size, r.num_experts // r.moe_ep_size
        out.append({"family": "moe", "impl": r.kernel_source, "dtype": MOE_DTYPES[r.moe_dtype], "m": r.num_tokens,
                    "n": r.hidden_size, "k": r.inter_size // r.moe_tp_size, "groups": groups, "rows": rows,
                    "touched": min(groups, rows), "launches": 2, "measured_s": r.latency * 1e-3, "source": src})
    return out


def mhc_rows(data, system, backend):
    df, src = table(data, system, "mhc", backend, VERSIONS[backend], "mhc_module_perf.parquet")
    if df is None:
        return []
    sel = df[(df.hidden_size == MHC_HIDDEN) & (df.num_tokens <= MHC_MAX_TOKENS)]
    return [{"family": "mhc", "impl": r.kernel_source, "dtype": "fp32", "m": r.num_tokens, "n": r.hidden_size,
             "groups": r.hc_mult, "launches": 1, "measured_s": r.latency * 1e-3, "source": src}
            for r in sel.itertuples()]


def mla_rows(data, system, backend):
    df, src = table(data, system, "mla", backend, VERSIONS[backend], "generation_mla_perf.parquet")
    if df is None:
        return []
    sel = df[(df.kv_cache_dtype == "bfloat16") & df.num_heads.isin(MLA_HEADS) & df.step.isin(MLA_STEPS)]
    # the same per-rank shape measured under several tp_size labels: their median
    agg = sel.groupby(["kernel_source", "num_heads", "batch_size", "isl", "step"], as_index=False).latency.median()
    return [{"family": "attention_decode", "impl": r.kernel_source, "dtype": "bf16", "batch": r.batch_size,
             "heads": r.num_heads, "kv_heads": 1, "q_len": 1, "kv_len": r.isl + r.step, "head_dim": 576,
             "v_head_dim": 512, "shared_kv": True, "causal": False, "launches": 1,
             "measured_s": r.latency * 1e-3, "source": src} for r in agg.itertuples()]


def comm_rows(data, system):
    out = []
    df, src = table(data, system, "comm", "nccl", VERSIONS["nccl"], "nccl_perf.parquet")
    if df is not None:
        sel = df[df.op_name.isin(("all_reduce", "all_gather")) & df.num_gpus.isin(COMM_GPUS)
                 & (df.nccl_dtype == "half")]
        out += [_coll(r, r.op_name, "NCCL " + VERSIONS["nccl"], src) for r in sel.itertuples()]
    for backend in ("sglang", "trtllm"):
        df, src = table(data, system, "comm", backend, VERSIONS[backend], "custom_allreduce_perf.parquet")
        if df is None:
            continue
        sel = df[(df.op_name == "all_reduce") & df.num_gpus.isin(COMM_GPUS) & ~df.kernel_source.str.contains("eager")
                 & (df.allreduce_dtype == "bfloat16")]
        out += [_coll(r, "all_reduce", r.kernel_source, src) for r in sel.itertuples()]
    return out


def _coll(r, op, impl, src):
    return {"collective": op, "ranks": r.num_gpus, "nbytes": r.message_size * COMM_BYTES_PER_ELEMENT, "dtype": "bf16",
            "impl": impl, "measured_s": r.latency * 1e-3, "source": src}


def module_rows(data, system):
    out = []
    for backend, version in (("sglang", VERSIONS["sglang"]), ("trtllm", DSV4_TRTLLM)):
        for name in ("dsv4_csa_generation_module_perf.parquet", "dsv4_hca_generation_module_perf.parquet"):
            df, src = table(data, system, "sparse_attention", backend, version, name)
            if df is None:
                continue
            sel = df[df.model.str.contains("V4-Flash") & (df.gemm_type == "fp8_block") & df.num_heads.isin(MLA_HEADS)
                     & df.step.isin((127, 1024, 4096, 16384, 65536, 131072, 1048575))]
            out += [{"system": system, "op": r.op_name, "impl": r.kernel_source, "num_heads": r.num_heads,
                     "tp_size": r.tp_size, "batch_size": r.batch_size, "isl": r.isl, "step": r.step,
                     "compress_ratio": r.compress_ratio, "kv_cache_dtype": r.kv_cache_dtype,
                     "measured_s": r.latency * 1e-3, "source": src} for r in sel.itertuples()]
    return out


def _clean(row: dict) -> dict:
    return {k: (int(v) if hasattr(v, "item") and float(v).is_integer() and k != "measured_s" else
                (float(v) if hasattr(v, "item") else v)) for k, v in row.items()}


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.5g}"
    return str(v)


def write(path: Path, rows: list[dict], columns) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: _fmt(r.get(c)) for c in columns})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="aiconfigurator_core/systems/data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--models", action="store_true", help="the TensorRT-LLM validation rows' models instead")
    a = ap.parse_args(argv)
    if not a.data.is_dir():
        print(f"{a.data}: not a directory", file=sys.stderr)
        return 2
    if a.models:
        return models_main(a.data, a.out)
    kernels, colls, modules = [], [], []
    for system in SYSTEMS:
        for backend in ("sglang", "trtllm", "vllm"):
            rows = gemm_rows(a.data, system, backend)
            if backend != "vllm":
                rows += moe_rows(a.data, system, backend) + mla_rows(a.data, system, backend)
            rows += mhc_rows(a.data, system, backend)
            for r in rows:
                r.update(system=system, backend=backend, mode="graph")
            kernels += [_clean(r) for r in rows]
        colls += [_clean({**r, "system": system}) for r in comm_rows(a.data, system)]
        modules += [_clean(r) for r in module_rows(a.data, system)]
    for r in kernels:  # FLOPs and HBM bytes from rubinperf's kernel functions (the fit recomputes them)
        c = row_cost(r)
        r["flops"] = float(c.flops)
        r["bytes"] = float(c.hbm_bytes)
    kept_k, rej_k = reject(kernels)
    kept_c, rej_c = reject(colls)
    a.out.mkdir(parents=True, exist_ok=True)
    for system in SYSTEMS:
        for backend in ("sglang", "trtllm", "vllm"):
            rows = [r for r in kept_k if r["system"] == system and r["backend"] == backend]
            if rows:
                write(a.out / f"{system}-{backend}.csv", rows, COLUMNS)
        rows = [r for r in kept_c if r["system"] == system]
        if rows:
            write(a.out / f"{system}-collectives.csv", rows, (*COLLECTIVE_COLUMNS, "impl", "source"))
    write(a.out / "rejected.csv", rej_k + rej_c, ("system", "backend", "source", "rule", "reason", *COLUMNS[:-1],
                                                   "collective", "ranks"))
    write(a.out / "modules.csv", modules, list(modules[0]) if modules else ["system"])
    (a.out / "rejections.md").write_text(summary(kernels + colls, rej_k + rej_c))
    print(summary(kernels + colls, rej_k + rej_c))
    return 0


def models_main(data: Path, out: Path) -> int:
    kernels = []
    for system in SYSTEMS:
        rows = model_gemm_rows(data, system) + model_moe_rows(data, system)
        for r in rows:
            r.update(system=system, backend="trtllm", mode="graph")
        kernels += [_clean(r) for r in rows]
    for r in kernels:
        c = row_cost(r)
        r["flops"] = float(c.flops)
        r["bytes"] = float(c.hbm_bytes)
    kept, rejected = reject(kernels)
    out.mkdir(parents=True, exist_ok=True)
    for system in SYSTEMS:
        rows = [r for r in kept if r["system"] == system]
        if rows:
            write(out / f"{system}-trtllm-models.csv", rows, COLUMNS)
    write(out / "rejected-models.csv", rejected, ("system", "backend", "source", "rule", "reason", *COLUMNS[:-1]))
    text = summary(kernels, rejected)
    (out / "rejections-models.md").write_text(text)
    print(text)
    return 0


def summary(rows, rejected) -> str:
    """Rows selected and rejected per table (source) and rule."""
    lines = ["| table | rows | envelope | cross-system | cross-backend | more than one | kept |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for src in sorted({r["source"] for r in rows}):
        n = sum(1 for r in rows if r["source"] == src)
        rej = [r for r in rejected if r["source"] == src]
        env = sum(1 for r in rej if r["rule"] == "envelope")
        cross = sum(1 for r in rej if r["rule"] == "cross-system")
        back = sum(1 for r in rej if r["rule"] == "cross-backend")
        more = sum(1 for r in rej if "+" in r["rule"])
        lines.append(f"| {src} | {n} | {env} | {cross} | {back} | {more} | {n - len(rej)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
