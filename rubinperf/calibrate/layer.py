"""A DeepSeek-V4.1-Flash decode layer at its own shapes, as one GPU (EP 1, TP 1) runs it in PyTorch.

No torch here: `layer_ops(rows)` lists the layer's operations as calibration rows (the families and shape
columns of `plan.SHAPES_COLUMNS`), in the order the layer runs them. The benchmark (`measure.layer`) builds
each with PyTorch, times the whole layer captured in one CUDA graph, each operation alone (chained in a graph
of its own), and the layer with each operation removed; `compare` gives the model's time of the same layer:
the sum of its operations' kernels inside a graph (`rows.row_kernels`), each paying its own fixed cost.

Shapes (models/deepseek-v4.1-flash.toml): hidden 5120, q rank 1280, 64 heads of 512 (MQA over one 512-wide
latent KV head), output projection in 8 groups of 4096 -> 1024 then 8192 -> 5120, router 384 experts top-6,
experts 2 x 2304 wide (FP8 here: Hopper has no FP4 MMA), one shared expert. Attention reads the 512 selected
entries plus the 128-token window (640 keys, contiguous: the gather is measured on its own, `gather` rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

HIDDEN, Q_RANK, HEADS, HEAD_DIM, KV_DIM = 5120, 1280, 64, 512, 512
O_GROUPS, O_RANK = 8, 1024
EXPERTS, TOP_K, EXPERT_WIDTH = 384, 6, 2304
ATTN_KEYS = 512 + 128
LAYER_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384)
# Sparse decode attention's gather: top-k entries per query row from a KV pool of this many entries (2.4 GB at 1152 B).
GATHER_POOL_ENTRIES = 1 << 21
GATHER_ENTRY_BYTES = (288, 1152)
GATHER_TOPK = 512


def _gemm(name, dtype, m, n, k):
    return {"op": name, "family": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "launches": 1}


def _norm(name, m, n):
    return {"op": name, "family": "elementwise", "dtype": "bf16", "m": m, "n": n, "nbytes": 2 * m * n * 2,
            "launches": 1}


def _pass(name, read_bytes, write_bytes):
    """A streaming pass (residual add, SwiGLU, combine), timed as a copy of the same bytes."""
    return {"op": name, "family": "copy", "dtype": "bf16", "nbytes": (read_bytes + write_bytes) // 2, "launches": 1}


def layer_ops(rows: int) -> list[dict]:
    """The operations of one decode layer at `rows` tokens, in order (each a calibration row with an `op` name)."""
    r, a = rows, rows * TOP_K
    return [
        _norm("attn_norm", r, HIDDEN),
        _gemm("q_down", "fp8", r, Q_RANK, HIDDEN),
        _norm("q_norm", r, Q_RANK),
        _gemm("q_up", "fp8", r, HEADS * HEAD_DIM, Q_RANK),
        _gemm("kv_proj", "fp8", r, KV_DIM, HIDDEN),
        _norm("kv_norm", r, KV_DIM),
        {"op": "attention", "family": "attention_decode", "dtype": "bf16", "impl": "bmm", "batch": r,
         "heads": HEADS, "kv_heads": 1, "q_len": 1, "kv_len": ATTN_KEYS, "head_dim": HEAD_DIM,
         "v_head_dim": HEAD_DIM, "shared_kv": 1, "causal": 0, "launches": 3},
        {"op": "o_down", "family": "grouped_gemm", "dtype": "bf16", "impl": "torch.bmm", "groups": O_GROUPS,
         "rows": O_GROUPS * r, "n": O_RANK, "k": HEADS // O_GROUPS * HEAD_DIM, "routing": "balanced",
         "touched": O_GROUPS, "launches": 1},
        _gemm("o_up", "fp8", r, HIDDEN, O_GROUPS * O_RANK),
        _pass("attn_residual", 2 * r * HIDDEN * 2, r * HIDDEN * 2),
        _norm("ffn_norm", r, HIDDEN),
        _gemm("router", "bf16", r, EXPERTS, HIDDEN),
        {"op": "topk", "family": "topk", "dtype": "bf16", "impl": "torch.topk", "m": r, "n": EXPERTS, "k": TOP_K,
         "launches": 2},
        {"op": "experts_up", "family": "grouped_gemm", "dtype": "fp8", "impl": "torch._scaled_grouped_mm",
         "groups": EXPERTS, "rows": a, "n": 2 * EXPERT_WIDTH, "k": HIDDEN, "routing": "uniform", "launches": 1},
        _pass("experts_act", a * 2 * EXPERT_WIDTH * 2, a * EXPERT_WIDTH * 2),
        {"op": "experts_down", "family": "grouped_gemm", "dtype": "fp8", "impl": "torch._scaled_grouped_mm",
         "groups": EXPERTS, "rows": a, "n": HIDDEN, "k": EXPERT_WIDTH, "routing": "uniform", "launches": 1},
        _gemm("shared_up", "fp8", r, 2 * EXPERT_WIDTH, HIDDEN),
        _pass("shared_act", r * 2 * EXPERT_WIDTH * 2, r * EXPERT_WIDTH * 2),
        _gemm("shared_down", "fp8", r, HIDDEN, EXPERT_WIDTH),
        _pass("combine", a * HIDDEN * 2 + r * HIDDEN * 2, r * HIDDEN * 2),
        _pass("ffn_residual", 2 * r * HIDDEN * 2, r * HIDDEN * 2),
    ]


def gather_rows() -> list[dict]:
    """Sparse attention's gather: `GATHER_TOPK` entries per query row at random places of a large KV pool."""
    return [{"op": "gather", "family": "gather", "dtype": "", "batch": r, "kv_len": GATHER_TOPK,
             "nbytes": e, "launches": 1} for e in GATHER_ENTRY_BYTES for r in LAYER_ROWS]


LAYER_CSV = "h200/layer/decode_layer.csv"   # under the bundled calibration folder


def read_layer_csv(path=None) -> list[dict]:
    """The committed (or a given) decode-layer measurement: rows, kind, op, measured_s, launches."""
    import csv

    from rubinperf.bundled import folder

    p = path or folder("calibration") / LAYER_CSV
    with open(p, newline="") as f:
        return [{**r, "rows": int(r["rows"]), "measured_s": float(r["measured_s"]),
                 "launches": int(r["launches"]) if r.get("launches") else None} for r in csv.DictReader(f)]


def layer_rows_as_run(rows: int, measured: list[dict]) -> list[dict]:
    """The layer's operations at `rows`, each in a graph, with the kernels PyTorch ran for it (graph nodes counted
    when the operation was timed alone)."""
    ops = layer_ops(rows)
    counts = {m["op"]: m["launches"] for m in measured if m["rows"] == rows and m["kind"] == "alone"}
    return [{**o, "mode": "graph", "launches": counts.get(o["op"]) or o["launches"]} for o in ops]


def compare(hw: Platform, measured: list[dict]) -> list[dict]:
    """Per row count: the layer measured in one graph against the model (the sum of its operations' kernels, each
    timed inside a graph), and the sum of the operations measured alone."""
    from rubinperf.calibrate.fit import expected

    out = []
    for r in sorted({m["rows"] for m in measured if m["kind"] == "layer"}):
        at = {(m["kind"], m["op"]): m["measured_s"] for m in measured if m["rows"] == r}
        ops = layer_rows_as_run(r, measured)
        model = expected(ops, hw)
        out.append({"rows": r, "measured_s": at[("layer", "")], "expected_s": float(model.sum()),
                    "alone_sum_s": sum(at.get(("alone", o["op"]), float("nan")) for o in ops),
                    "ops": {o["op"]: {"expected_s": float(e), "alone_s": at.get(("alone", o["op"])),
                                      "share_s": at[("layer", "")] - at.get(("without", o["op"]), float("nan"))}
                            for o, e in zip(ops, model)}})
    return out


def main(argv=None) -> int:
    """Print the decode layer's measured time against the model's, per row count."""
    import argparse

    from rubinperf.specs.stack import load_platform

    ap = argparse.ArgumentParser(prog="python3 -m rubinperf.calibrate.layer", description=main.__doc__)
    ap.add_argument("--hardware", "-H", default="h200")
    ap.add_argument("--csv", default=None, help="a decode_layer.csv (default: the committed H200 measurement)")
    args = ap.parse_args(argv)
    rows = compare(load_platform(args.hardware), read_layer_csv(args.csv))
    print(f"{'rows':>5} {'measured':>10} {'model':>10} {'meas/model':>10} {'ops alone':>10}")
    for r in rows:
        print(f"{r['rows']:5d} {r['measured_s'] * 1e6:8.1f}us {r['expected_s'] * 1e6:8.1f}us "
              f"{r['measured_s'] / r['expected_s']:10.2f} {r['alone_sum_s'] * 1e6:8.1f}us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
