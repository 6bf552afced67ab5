"""What `rubinperf calibrate` measures, the CSV it writes, and each row's Cost.

No torch here: the plan, the CSV schema and `row_cost` are shared by the benchmark (which
fills `flops` and `bytes` from them), by the fit (which rebuilds each row's Cost from its
shape columns) and by the tests (which make synthetic measurements from the same plan).
A row's Cost always comes from the very kernel functions the model uses
(`rubinperf.kernels.gemm`, `grouped_gemm`, `attention`, `copy`), so the calibration fits
the formulas that `estimate` evaluates.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from rubinperf.cost import Cost
from rubinperf.errors import SpecError
from rubinperf.precision import PRECISIONS

FAMILIES = ("copy", "gemm", "grouped_gemm", "attention_decode", "attention_prefill", "launch")

# Shape columns; a row leaves the ones its family does not use empty.
INT_COLUMNS = ("m", "n", "k", "groups", "rows", "touched", "batch", "heads", "kv_heads", "q_len", "kv_len",
               "head_dim", "nbytes", "launches")
KERNEL_COLUMNS = (
    "family", "impl", "dtype", *INT_COLUMNS, "causal",
    "measured_s",   # median seconds of one kernel call
    "spread",       # (p75 - p25) / median over the timed samples
    "samples",      # timed samples (graph replays) behind the median
    "calls",        # kernel calls per sample
    "flops",        # from rubinperf.kernels, the same function the model uses
    "bytes",        # HBM bytes from rubinperf.kernels
)

# Message sizes and ranks of the collectives benchmark (issue 8).
COLLECTIVES = ("all_reduce", "all_to_all")
COLLECTIVE_COLUMNS = ("collective", "ranks", "nbytes", "dtype", "measured_s", "spread", "samples",
                      "nvlink_bytes", "hops")

# (n, k) weight shapes of dense GEMMs: square, MLA/attention projections, a wide MLP.
GEMM_SHAPES = ((4096, 4096), (7168, 2048), (2048, 7168), (18432, 7168))
GEMM_M = (1, 8, 32, 128, 512, 1024, 2048, 4096, 16384)
# (n, k) of one expert: fused gate+up (2 x 2048 wide, 7168 in) and down (7168 out, 2048 in).
EXPERT_SHAPES = ((4096, 7168), (7168, 2048))
EXPERT_GROUPS = (8, 128)
EXPERT_ROWS = (16, 128, 1024, 8192)
COPY_BYTES = tuple(m * 2 ** 20 for m in (1, 4, 16, 64, 256, 768, 1024, 1536, 2048))
# (batch, kv_len) for decode (q_len 1) and prefill (q_len = kv_len, causal); 32 query heads, 8 KV heads, d 128.
DECODE_POINTS = tuple((b, l) for b in (1, 8, 64) for l in (1024, 8192, 32768))
PREFILL_POINTS = ((1, 1024), (1, 4096), (1, 16384), (4, 4096))
ATTN_HEADS, ATTN_KV_HEADS, ATTN_HEAD_DIM = 32, 8, 128

QUICK = {
    "copy": (2 ** 22, 2 ** 26, 2 ** 30),
    "gemm_m": (1, 128, 4096),
    "gemm_shapes": ((4096, 4096), (18432, 7168)),
    "expert_shapes": ((4096, 7168),),
    "expert_rows": (128, 4096),
    "decode": ((8, 8192), (64, 1024)),
    "prefill": ((1, 4096),),
}


def kernel_plan(quick: bool = False, dtypes=("bf16", "fp8")) -> list[dict]:
    """The shapes to measure, one dict per row (shape columns only; the benchmark adds the rest)."""
    q = QUICK if quick else {}
    rows: list[dict] = [{"family": "launch", "dtype": "", "launches": 1}]
    for nbytes in q.get("copy", COPY_BYTES):
        rows.append({"family": "copy", "dtype": "bf16", "nbytes": nbytes, "launches": 1})
    for dtype in dtypes:
        for n, k in q.get("gemm_shapes", GEMM_SHAPES):
            for m in q.get("gemm_m", GEMM_M):
                rows.append({"family": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "launches": 1})
    for dtype in dtypes:
        for groups in EXPERT_GROUPS:
            for n, k in q.get("expert_shapes", EXPERT_SHAPES):
                for r in q.get("expert_rows", EXPERT_ROWS):
                    rows.append({"family": "grouped_gemm", "dtype": dtype, "groups": groups, "n": n, "k": k,
                                 "rows": r, "launches": 1})
    for batch, kv_len in q.get("decode", DECODE_POINTS):
        rows.append({"family": "attention_decode", "dtype": "bf16", "batch": batch, "heads": ATTN_HEADS,
                     "kv_heads": ATTN_KV_HEADS, "q_len": 1, "kv_len": kv_len, "head_dim": ATTN_HEAD_DIM,
                     "causal": False, "launches": 1})
    for batch, kv_len in q.get("prefill", PREFILL_POINTS):
        rows.append({"family": "attention_prefill", "dtype": "bf16", "batch": batch, "heads": ATTN_HEADS,
                     "kv_heads": ATTN_KV_HEADS, "q_len": kv_len, "kv_len": kv_len, "head_dim": ATTN_HEAD_DIM,
                     "causal": True, "launches": 1})
    return rows


def row_cost(row: dict) -> Cost:
    """The Cost of one measured kernel, from the model's own kernel functions (`rows.row_kernel`)."""
    from rubinperf.calibrate.rows import row_kernel

    return row_kernel(row).cost


def family_label(row: dict) -> str:
    """The group a row is reported under: gemm and grouped GEMM split by dtype."""
    if row["family"] in ("gemm", "grouped_gemm"):
        return f"{row['family']}-{row['dtype']}"
    return row["family"]


# ---------------------------------------------------------------- CSV


def rows_to_csv(rows: list[dict], columns=KERNEL_COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _fmt(r.get(c)) for c in columns})
    return buf.getvalue()


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def read_csv(path: str | Path) -> tuple[str, list[dict]]:
    """Read a calibration CSV: ('kernels' | 'collectives', typed rows). Bad files are a SpecError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    if "family" in header:
        kind, need = "kernels", ("family", "dtype", "measured_s", *INT_COLUMNS, "causal")
    elif "collective" in header:
        kind, need = "collectives", COLLECTIVE_COLUMNS
    else:
        raise SpecError(f"{path}: not a calibration CSV (expected a 'family' or 'collective' column)")
    missing = [c for c in need if c not in header]
    if missing:
        raise SpecError(f"{path}: missing column(s) {', '.join(missing)}")
    rows = []
    for i, raw in enumerate(reader, start=2):
        try:
            rows.append(_typed(raw, kind))
        except (ValueError, TypeError) as exc:
            raise SpecError(f"{path}: line {i}: {exc}") from None
    if not rows:
        raise SpecError(f"{path}: no measurements")
    return kind, rows


# The shape columns each family's Cost needs (row_cost), which must be positive.
SHAPE_COLUMNS = {"launch": (), "copy": ("nbytes",), "gemm": ("m", "n", "k"), "grouped_gemm": ("rows", "groups", "n", "k"),
                 "attention_decode": ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim"),
                 "attention_prefill": ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim"),
                 "collective": ("ranks", "nbytes")}
MAX_COUNT = 1e15  # shapes, byte counts and calls: far beyond any benchmark, keeps products finite


def _typed(raw: dict, kind: str) -> dict:
    row: dict = {}
    for key, val in raw.items():
        if key is None or not isinstance(val, (str, type(None))):
            raise ValueError("more fields than the header has columns")
        val = (val or "").strip()
        if key in INT_COLUMNS or key in ("ranks", "hops", "samples", "calls"):
            number = float(val) if val else None
            if number is not None and not (math.isfinite(number) and 0 <= number <= MAX_COUNT):
                raise ValueError(f"{key}: expected a count between 0 and {MAX_COUNT:g}, got {val!r}")
            row[key] = int(number) if number is not None else None
        elif key == "causal":
            row[key] = val.lower() in ("true", "1", "yes")
        elif key in ("measured_s", "spread", "flops", "bytes", "nvlink_bytes"):
            row[key] = float(val) if val else None
            if row[key] is not None and not math.isfinite(row[key]):
                raise ValueError(f"{key}: expected a finite number, got {val!r}")
        else:
            row[key] = val
    t = row.get("measured_s")
    if t is None or not math.isfinite(t) or not 1e-12 <= t <= 1e6:
        raise ValueError(f"measured_s: expected a positive number of seconds (1e-12 to 1e6), got {raw.get('measured_s')!r}")
    if kind == "kernels" and row["family"] not in FAMILIES:
        raise ValueError(f"family: unknown '{row['family']}' (known: {', '.join(FAMILIES)})")
    for key in SHAPE_COLUMNS[row["family"] if kind == "kernels" else "collective"]:
        if not row.get(key):
            raise ValueError(f"{key}: a {row.get('family') or row.get('collective')} row needs a positive {key}, "
                             f"got {raw.get(key)!r}")
    if kind == "kernels" and row["family"].startswith("attention") and row["q_len"] > row["kv_len"]:
        raise ValueError(f"q_len: expected at most kv_len ({row['kv_len']}), got {row['q_len']}")
    if row.get("dtype") and row["dtype"] not in PRECISIONS or kind == "kernels" and row["family"] != "launch" \
            and not row.get("dtype"):
        raise ValueError(f"dtype: expected one of {', '.join(PRECISIONS)}, got {row.get('dtype')!r}")
    if kind == "collectives" and row["collective"] not in COLLECTIVES:
        raise ValueError(f"collective: unknown '{row['collective']}' (known: {', '.join(COLLECTIVES)})")
    return row
