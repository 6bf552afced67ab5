"""aiconfigurator 0.12.0's decode step at the 18 points of step_compare.csv, in four variants.

    /work/venvs/aiconf/bin/python calibration/aiconfigurator/aic_steps.py [--write]

Runs ONLY in aiconfigurator's own virtualenv (`python3 -m venv /work/venvs/aiconf && /work/venvs/aiconf/bin/pip
install aiconfigurator==0.12.0`; wheels and sha256 in this folder's README.md), not in rubinperf's: it calls
aiconfigurator's public API (`aiconfigurator.cli.api.cli_estimate`) as a tool and holds none of its code.

Each point is DeepSeek-V4-Flash on SGLang 0.5.14's tables, `static_gen`, isl 8192, osl 2, no MTP: the one decode step
after an 8192-token prompt (the same as `aiconfigurator cli estimate ... --estimate-mode static_gen --isl 8192 --osl 2
--batch-size B --tp N --etp N --ep 1`, DEP4: `--tp 1 --dp 4 --etp 1 --ep 4`). Four variants:

- MoE routing: `power_law` (aiconfigurator's default, its MoE rows measured at a power-law token distribution with
  alpha 1.01) or `balanced` (the rows measured with every expert given the same number of tokens, the rows
  rubinperf's MoE constants were fitted to). The routing is `ModelConfig.workload_distribution`, which its CLI does
  not expose: here `aiconfigurator.sdk.models.get_model` is wrapped so that the config it receives says `balanced`.
- Tables: as shipped, or with the rows `rejected.csv` rejects by the cross-system rule replaced by the rule's
  reference row (the GB300 SGLang TP8 custom all-reduce rows by the same rows on B200). The replacement is made in a
  copy of aiconfigurator's systems folder (every file a symlink to the installed one but the edited table) that
  `cli_estimate(systems_paths=...)` reads; the installed package is not touched.

Each variant runs in a process of its own (the compiled engine is cached per configuration within a process). A
second pass per variant costs the two groups of aiconfigurator's `generation_moe_overlap` (router + dispatch + routed
MoE + combine on one stream, the shared expert on the other) op by op, for the routed-MoE op's own time
(`generation_moe`); it checks that max(group A, group B) equals the overlap op.

--write puts the four step times into step_compare.csv (aiconfigurator_ms: power law, shipped;
aiconfigurator_kept_ms: power law, outlier rows replaced; aiconfigurator_balanced_ms: balanced, shipped;
aiconfigurator_balanced_kept_ms: balanced, outlier rows replaced) and the routed-MoE op's time per step under each
routing (aiconfigurator_moe_power_law_ms, aiconfigurator_moe_balanced_ms). `--experts` prints the distinct experts a
layer's batch touches: uniform routing (rubinperf's expectation), aiconfigurator's balanced generator, and its power-law
generator simulated with numpy (`distinct_experts_power_law`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from step_compare import CSV, read_rows, write_rows  # noqa: E402  (stdlib only: runs in aiconfigurator's venv)
REJECTED = HERE / "rejected.csv"
MODEL = "deepseek-ai/DeepSeek-V4-Flash"
LAYOUT = {"tp4": dict(tp_size=4, attention_dp_size=1, moe_tp_size=4, moe_ep_size=1),
          "tp8": dict(tp_size=8, attention_dp_size=1, moe_tp_size=8, moe_ep_size=1),
          "dep4": dict(tp_size=1, attention_dp_size=4, moe_tp_size=1, moe_ep_size=4)}
VARIANTS = {("power_law", "shipped"): "aiconfigurator_ms", ("power_law", "kept"): "aiconfigurator_kept_ms",
            ("balanced", "shipped"): "aiconfigurator_balanced_ms",
            ("balanced", "kept"): "aiconfigurator_balanced_kept_ms"}
MOE_COLUMNS = {"power_law": "aiconfigurator_moe_power_law_ms", "balanced": "aiconfigurator_moe_balanced_ms"}
EXPERTS, TOP_K, ALPHA = 256, 6, 1.01  # DeepSeek-V4-Flash's routed experts and top-k; aiconfigurator's default alpha


def points() -> list[tuple[str, str, int]]:
    return [(r["system"], r["layout"], int(r["batch"])) for r in read_rows() if r["model"] == "deepseek-v4-flash"]


def kept_tables(data: Path, out: Path) -> int:
    """A copy of the systems folder at `out` (symlinks) with the cross-system rejects replaced; returns rows replaced."""
    import pandas as pd

    for dirpath, _, files in os.walk(data):
        rel = Path(dirpath).relative_to(data)
        (out / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            os.symlink(Path(dirpath) / name, out / rel / name)
    with REJECTED.open() as f:
        rejects = [r for r in csv.DictReader(f)
                   if r["rule"] == "cross-system" and r["source"].endswith("custom_allreduce_perf.parquet")]
    replaced = 0
    for source in sorted({r["source"] for r in rejects}):
        table = out / "data" / source
        df = pd.read_parquet(data / "data" / source)
        for r in (r for r in rejects if r["source"] == source):
            ref_system = r["reason"].rsplit(" on ", 1)[1].rstrip(")")
            ref = pd.read_parquet(data / "data" / source.replace(r["system"], ref_system, 1))
            # rejected.csv counts bytes; the tables count bf16 elements
            key = lambda d: ((d.kernel_source == r["impl"]) & (d.num_gpus == int(r["ranks"]))  # noqa: E731
                             & (d.message_size == int(r["nbytes"]) // 2) & (d.allreduce_dtype == "bfloat16"))
            hit, ref_hit = key(df), key(ref)
            assert hit.sum() == 1 and ref_hit.sum() == 1, (source, r["nbytes"])
            assert math.isclose(float(df.loc[hit, "latency"].iloc[0]) * 1e-3, float(r["measured_s"]), rel_tol=1e-3)
            df.loc[hit, "latency"] = float(ref.loc[ref_hit, "latency"].iloc[0])
            replaced += 1
        table.unlink()
        df.to_parquet(table, index=False)
    return replaced


def worker(distribution: str, tables: str, split: bool) -> None:
    import logging

    logging.disable(logging.WARNING)
    import aiconfigurator.sdk.models as models
    import aiconfigurator_core
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_core.sdk.operations.overlap import OverlapOp

    build = models.get_model

    def get_model(model_path, model_config, backend_name):
        model_config.workload_distribution = distribution
        model = build(model_path, model_config, backend_name)
        if split:  # the overlap's two groups as plain ops, each costed alone
            flat = []
            for op in model.generation_ops:
                flat += [*op._group_a, *op._group_b] if isinstance(op, OverlapOp) else [op]
            model.generation_ops = flat
        return model

    models.get_model = get_model
    extra = {}
    tmp = None
    if tables == "kept":
        tmp = Path(tempfile.mkdtemp(prefix="aic-kept-"))
        n = kept_tables(Path(aiconfigurator_core.__file__).parent / "systems", tmp / "systems")
        print(f"replaced {n} rows", file=sys.stderr)
        extra["systems_paths"] = str(tmp / "systems")
    out = {}
    try:
        for system, layout, batch in points():
            r = cli_estimate(MODEL, system, mode="static_gen", backend_name="sglang", backend_version="0.5.14",
                             isl=8192, osl=2, batch_size=batch, **LAYOUT[layout], **extra)
            ops = r.summary.get_generation_latency_dict()
            out[f"{system},{layout},{batch}"] = {"ops": ops, "tpot": r.tpot}
    finally:
        if tmp is not None:
            shutil.rmtree(tmp)
    json.dump(out, sys.stdout)


def run_worker(distribution: str, tables: str, split: bool) -> dict:
    cmd = [sys.executable, __file__, "--worker", distribution, tables] + (["--split"] if split else [])
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def distinct_experts_power_law(tokens: int, ep: int, trials: int = 20000, seed: int = 0,
                               random_ties: bool = False) -> tuple[float, float]:
    """Mean distinct experts with tokens, and token-rows, on the busiest EP group of aiconfigurator's power-law generator.

    Its collector's documented algorithm (collector/helper.py, `_generate_power_law_distribution`, used by
    sglang/collect_moe.py): sample one load per expert from a power law p(x) ~ x^-alpha on [x_min, x_max] by inverse
    CDF ([1, 0.8 x tokens] when tokens x top-k > experts, else [0.01, 2]), scale the loads to sum to tokens x top-k,
    round (the rounding remainder goes one by one to the largest loads), and with EP measure the EP group of
    experts / ep consecutive experts with the most tokens. Re-implemented here with numpy, not its code.
    When tokens x top-k is small against the experts most scaled loads round to 0 and the remainder goes one row
    at a time in sort order, so the result depends on how the sort breaks ties between equal loads: by expert
    index (a stable sort) by default, at random with `random_ties`.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    total = tokens * TOP_K
    lo, hi = (1.0, tokens * 0.8) if total > EXPERTS else (0.01, 2.0)
    u = rng.random((trials, EXPERTS))
    a = 1 - ALPHA
    x = ((hi ** a - lo ** a) * u + lo ** a) ** (1 / a)
    loads = np.rint(x / x.sum(1, keepdims=True) * total).astype(np.int64)
    key = -loads + (rng.random(loads.shape) * 0.5 if random_ties else 0)
    order = np.argsort(key, axis=1, kind="stable")
    for t in range(trials):
        delta = total - loads[t].sum()
        idx = order[t]
        for i in range(abs(delta)):
            if delta > 0:
                loads[t, idx[i % EXPERTS]] += 1
            else:
                j = idx[-(i % EXPERTS) - 1]
                loads[t, j if loads[t, j] > 0 else np.argmax(loads[t])] -= 1
    groups = loads.reshape(trials, ep, EXPERTS // ep)
    busiest = groups[np.arange(trials), groups.sum(2).argmax(1)]
    return float((busiest > 0).sum(1).mean()), float(busiest.sum(1).mean())


def distinct_experts_balanced(tokens: int, ep: int) -> tuple[int, int]:
    """Distinct experts, and token-rows, on the busiest EP group of aiconfigurator's balanced generator.

    Its documented rule (collector `balanced_logits`): with stride = ceil(experts / top-k), token i's j-th expert is
    (i + j x stride) mod experts when tokens >= stride, else floor(i x stride / tokens + j x stride) mod experts.
    """
    stride = math.ceil(EXPERTS / TOP_K)
    loads = [0] * EXPERTS
    for i in range(tokens):
        for j in range(TOP_K):
            e = (i + j * stride) if tokens >= stride else int(i * stride / tokens + j * stride)
            loads[e % EXPERTS] += 1
    size = EXPERTS // ep
    groups = [loads[g * size:(g + 1) * size] for g in range(ep)]
    busiest = max(groups, key=sum)
    return sum(1 for v in busiest if v), sum(busiest)


def distinct_experts_uniform(tokens: int, ep: int) -> float:
    """rubinperf's expectation (rubinperf/kernels/moe.py, `experts_touched_topk`): L(1 - (1 - k/E)^tokens)."""
    return EXPERTS / ep * (1 - (1 - TOP_K / EXPERTS) ** tokens)


def experts_table() -> None:
    print("| layout | batch | tokens at the MoE | distinct experts: uniform (rubinperf) | aiconfigurator balanced "
          "| aiconfigurator power law | token-rows: balanced | power law |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for layout, ep, dp in (("TP4 / TP8 (256 experts)", 1, 1), ("DEP4 (busiest rank's 64 experts)", 4, 4)):
        for batch in (1, 16, 64):
            tokens = batch * dp
            pl, rows = distinct_experts_power_law(tokens, ep)
            bal, bal_rows = distinct_experts_balanced(tokens, ep)
            print(f"| {layout} | {batch} | {tokens} | {distinct_experts_uniform(tokens, ep):.1f} | {bal} | {pl:.1f} "
                  f"| {bal_rows} | {rows:.1f} |")
    pl, rows = distinct_experts_power_law(4, 4, random_ties=True)
    print(f"\nDEP4 batch 1 with ties broken at random: {pl:.1f} experts, {rows:.1f} token-rows on the busiest rank")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--experts", action="store_true", help="print the distinct-experts table and stop")
    ap.add_argument("--worker", nargs=2, metavar=("DISTRIBUTION", "TABLES"), help=argparse.SUPPRESS)
    ap.add_argument("--split", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(*a.worker, a.split)
        return 0
    if a.experts:
        experts_table()
        return 0
    steps, moe = {}, {}
    for (dist, tables), column in VARIANTS.items():
        whole, split = run_worker(dist, tables, False), run_worker(dist, tables, True)
        for key, res in whole.items():
            ops = res["ops"]
            total = sum(ops.values())
            assert math.isclose(total, res["tpot"], rel_tol=1e-6), (key, total, res["tpot"])
            parts = split[key]["ops"]
            group_b = sum(v for k, v in parts.items() if "_shared_" in k)
            group_a = sum(v for k, v in parts.items() if k not in ops and "_shared_" not in k)
            assert math.isclose(max(group_a, group_b), ops["generation_moe_overlap"], rel_tol=1e-6), key
            steps.setdefault(key, {})[column] = total
            if tables == "shipped":
                moe.setdefault(key, {})[MOE_COLUMNS[dist]] = parts["generation_moe"]
    print("| system | layout | batch | power law, shipped | power law, kept | balanced, shipped | balanced, kept "
          "| routed MoE op: power law / balanced |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for key in steps:
        s, m = steps[key], moe[key]
        print(f"| {' | '.join(key.split(','))} | " + " | ".join(f"{s[c]:.3f}" for c in VARIANTS.values())
              + f" | {m[MOE_COLUMNS['power_law']]:.3f} / {m[MOE_COLUMNS['balanced']]:.3f} |")
    if a.write:
        rows = read_rows()
        fields = list(rows[0])
        for column in [*VARIANTS.values(), *MOE_COLUMNS.values()]:
            if column not in fields:
                fields.insert(fields.index("rubinperf_ms"), column)
        for r in rows:
            key = f"{r['system']},{r['layout']},{r['batch']}"
            for column in fields:
                if column in VARIANTS.values():
                    r[column] = f"{steps[key][column]:.4f}"
                elif column in MOE_COLUMNS.values():
                    r[column] = f"{moe[key][column]:.4f}" if r["model"] == "deepseek-v4-flash" else ""
        write_rows(rows, fields)
        print(f"wrote {CSV}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
