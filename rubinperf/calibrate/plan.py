"""What `rubinperf calibrate` measures, the CSV it writes, and each row's Cost.

No torch here: the plan, the CSV schema and `row_cost` are shared by the benchmark (which
fills `flops` and `bytes` from them), by the fit (which rebuilds each row's Cost from its
shape columns) and by the tests (which make synthetic measurements from the same plan).
A row's Cost always comes from the very kernel functions the model uses
(`rubinperf.kernels.gemm`, `grouped_gemm`, `attention`, `copy`), so the calibration fits
the formulas that `estimate` evaluates.

`shapes_plan` is the model-shape suite (`--suite shapes`, `measure.shapes`): DeepSeek-V4.1-Flash's
kernels at its own shapes plus two probes, written with `SHAPES_COLUMNS` (a superset of
`KERNEL_COLUMNS`: `mode`, probe and MQA columns); calibration/h200/README.md documents them.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import operator
import os
from pathlib import Path
from typing import Callable, NamedTuple

from rubinperf.kernels.cost import Cost
from rubinperf.errors import SpecError, shorten
from rubinperf.specs.precision import PRECISIONS

FAMILIES = ("copy", "gemm", "grouped_gemm", "attention_decode", "attention_prefill", "launch",
            "pointer_chase", "stream_ctas", "elementwise", "moe", "mhc", "topk")
# Families with no dtype (an empty kernel and the two physical probes).
NO_DTYPE_FAMILIES = ("launch", "pointer_chase", "stream_ctas")
MODES = ("graph", "eager", "stream", "cold")

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

# The model-shape suite (`shapes_plan`, `--suite shapes`) writes these further columns; a CSV
# without them (the default suite's) reads with mode "graph" and the rest empty.
SHAPES_INT_COLUMNS = ("v_head_dim", "ctas", "inflight_bytes", "stride_bytes", "steps", "regs")
SHAPES_COLUMNS = (
    "family", "mode", "impl", "dtype", *INT_COLUMNS, *SHAPES_INT_COLUMNS, "causal", "shared_kv", "routing",
    "measured_s", "spread", "samples", "calls", "flops", "bytes",
    "launches_source",  # "profiler": kernels counted with torch.profiler; "nominal": as designed
    "check_rel_err",    # attention: ||out - ref|| / ||ref|| against a float32 reference (batch 0)
    "host_s",           # eager: host seconds to issue one call with the GPU busy (median); empty if not read
)

# Message sizes and ranks of the collectives benchmark (`rubinperf calibrate --collectives`).
COLLECTIVES = ("all_reduce", "all_to_all")
# Collectives a CSV may hold (the benchmark measures COLLECTIVES; tables of other tools also give all-gathers).
READ_COLLECTIVES = COLLECTIVES + ("all_gather",)
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


# ---------------------------------------------------------------- model-shape suite (DeepSeek-V4.1-Flash)

V4_HIDDEN, V4_Q_LORA, V4_HEADS, V4_O_LORA, V4_O_GROUPS = 5120, 1280, 64, 1024, 8
V4_QK_DIM, V4_V_DIM = 576, 512  # MQA over a 512-dim latent + 64 RoPE dims; one KV head
V4_INTER, V4_VOCAB = 2304, 129280
# (name, n, k) of the dense GEMMs, weights [N, K].
SHAPE_GEMMS = (
    ("q_down", V4_Q_LORA, V4_HIDDEN),
    ("q_up", V4_HEADS * V4_V_DIM, V4_Q_LORA),
    ("q_up_tp8", V4_HEADS * V4_V_DIM // 8, V4_Q_LORA),
    ("kv", V4_QK_DIM, V4_HIDDEN),
    ("o_up", V4_HIDDEN, V4_O_GROUPS * V4_O_LORA),
    ("shared_gate_up", 2 * V4_INTER, V4_HIDDEN),
    ("shared_down", V4_HIDDEN, V4_INTER),
    ("lm_head", V4_VOCAB, V4_HIDDEN),
    ("lm_head_tp8", V4_VOCAB // 8, V4_HIDDEN),
)
SHAPE_GEMM_M = tuple(2 ** i for i in range(16))  # 1 ... 32768
SHAPE_FP8_GEMMS = ("q_down", "q_up", "q_up_tp8", "kv", "o_up", "shared_gate_up", "shared_down")
SHAPE_BF16_GEMMS = ("lm_head", "lm_head_tp8", "q_up", "shared_gate_up", "kv")
LM_HEAD_MAX_M = 8192  # 129280 x 16384 BF16 output would be 4 GiB per call
SHAPE_EXPERTS = (("gate_up", 2 * V4_INTER, V4_HIDDEN), ("down", V4_HIDDEN, V4_INTER))
SHAPE_EXPERT_GROUPS = (12, 24, 48, 96)  # local experts per rank: DEP32, DEP16, DEP8, DEP4 of 384
SHAPE_ROWS_PER_EXPERT = (1, 2, 4, 8, 16, 32, 64, 128, 200, 256, 512)
SHAPE_BF16_GROUPED = ((12, (1, 16, 200)), (96, (1, 16, 200)))  # (groups, rows per expert) in BF16 too
SHAPE_RANDOM_GROUPED = ((12, 96), (48, 384), (96, 768), (96, 6144))  # (groups, rows) routed uniformly at random
SHAPE_ATTN_HEADS = (64, 8)  # DEP (all heads on a rank) and TP8
SHAPE_ATTN_Q_LEN = (6, 1)   # 1 + 5 draft tokens, and plain decode
SHAPE_ATTN_KV = (128, 640, 2048, 8192, 32768, 131072)
SHAPE_ATTN_BATCH = (1, 8, 32, 64)
SHAPE_ATTN_MAX_TOKENS = 2 ** 21  # batch x kv_len at most this (2M cached tokens, 2.4 GB of latent)
SHAPE_ELEMENTWISE_TOKENS = (1, 8, 64, 512, 4096, 32768)
SHAPE_ELEMENTWISE_WIDTH = 4 * V4_HIDDEN  # the mHC residual: 4 routes x hidden, FP32
CHASE_BYTES = (8 * 2 ** 20, 32 * 2 ** 20, 256 * 2 ** 20, 2 * 2 ** 30, 4 * 2 ** 30)
CHASE_STRIDE, CHASE_STEPS = 128, 200_000
STREAM_CTAS = (1, 2, 4, 8, 16, 33, 66, 99, 132, 264, 528, 1056)
STREAM_UNROLL = (1, 4, 16)      # independent 16-byte loads per thread per iteration
STREAM_THREADS = 256
STREAM_BYTES = 512 * 2 ** 20

SHAPES_QUICK = {
    "gemm_m": (1, 64, 4096), "fp8": ("q_up", "shared_gate_up"), "bf16": ("lm_head_tp8",),
    "groups": (12, 96), "rpe": (1, 200), "bf16_grouped": ((12, (16,)),), "random_grouped": ((48, 384),),
    "attn": ((64, 6, 8, 8192), (8, 1, 1, 131072)), "tokens": (64, 32768), "copy": (2 ** 22, 2 ** 30),
    "chase": (8 * 2 ** 20, 2 * 2 ** 30), "chase_steps": 20_000, "ctas": (1, 33, 132, 1056), "unroll": (1, 16),
}


def shapes_plan(quick: bool = False) -> list[dict]:
    """The model-shape suite: DeepSeek-V4.1-Flash's kernels at its own shapes, plus two physical probes.

    Shape columns only; the benchmark measures each kernel row in every mode (graph, eager, stream, cold)
    and adds `mode`. Ordered so the probes and the most used rows come first (a run that hits
    its time budget drops the tail).
    """
    q = SHAPES_QUICK if quick else {}
    rows: list[dict] = [{"family": "launch", "dtype": "", "launches": 1}]
    for nbytes in q.get("chase", CHASE_BYTES):
        rows.append({"family": "pointer_chase", "dtype": "", "nbytes": nbytes, "stride_bytes": CHASE_STRIDE,
                     "steps": q.get("chase_steps", CHASE_STEPS), "launches": 1})
    for u in q.get("unroll", STREAM_UNROLL):
        for g in q.get("ctas", STREAM_CTAS):
            rows.append({"family": "stream_ctas", "dtype": "", "ctas": g, "inflight_bytes": STREAM_THREADS * u * 16,
                         "nbytes": STREAM_BYTES, "launches": 1})
    for nbytes in q.get("copy", COPY_BYTES):
        rows.append({"family": "copy", "dtype": "bf16", "nbytes": nbytes, "launches": 1})
    for t in q.get("tokens", SHAPE_ELEMENTWISE_TOKENS):
        rows.append({"family": "elementwise", "dtype": "fp32", "m": t, "n": SHAPE_ELEMENTWISE_WIDTH,
                     "nbytes": 2 * t * SHAPE_ELEMENTWISE_WIDTH * 4, "launches": 1})
    gemms = {name: (n, k) for name, n, k in SHAPE_GEMMS}
    for dtype, names in (("fp8", q.get("fp8", SHAPE_FP8_GEMMS)), ("bf16", q.get("bf16", SHAPE_BF16_GEMMS))):
        for name in names:
            n, k = gemms[name]
            for m in q.get("gemm_m", SHAPE_GEMM_M):
                if name == "lm_head" and m > LM_HEAD_MAX_M:
                    continue
                rows.append({"family": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "launches": 1})
        if dtype == "fp8":  # grouped FP8 right after the dense FP8 GEMMs, before attention and BF16
            for groups in q.get("groups", SHAPE_EXPERT_GROUPS):
                for _, n, k in SHAPE_EXPERTS:
                    for rpe in q.get("rpe", SHAPE_ROWS_PER_EXPERT):
                        rows.append(_grouped_row("fp8", groups, n, k, groups * rpe, "balanced"))
            for groups, r in q.get("random_grouped", SHAPE_RANDOM_GROUPED):
                for _, n, k in SHAPE_EXPERTS:
                    rows.append(_grouped_row("fp8", groups, n, k, r, "uniform"))
            rows.extend(_attention_rows(q.get("attn")))
    for groups, rpes in q.get("bf16_grouped", SHAPE_BF16_GROUPED):
        for _, n, k in SHAPE_EXPERTS:
            for rpe in rpes:
                rows.append(_grouped_row("bf16", groups, n, k, groups * rpe, "balanced"))
    return rows


def _grouped_row(dtype, groups, n, k, rows, routing):
    row = {"family": "grouped_gemm", "dtype": dtype, "groups": groups, "n": n, "k": k, "rows": rows,
           "routing": routing, "launches": 1}
    if routing == "balanced":
        row["touched"] = groups
    return row


def _attention_rows(points=None) -> list[dict]:
    if points is None:
        points = [(h, lq, b, l) for h in SHAPE_ATTN_HEADS for lq in SHAPE_ATTN_Q_LEN for l in SHAPE_ATTN_KV
                  for b in SHAPE_ATTN_BATCH if b * l <= SHAPE_ATTN_MAX_TOKENS]
    return [{"family": "attention_decode", "dtype": "bf16", "batch": b, "heads": h, "kv_heads": 1, "q_len": lq,
             "kv_len": l, "head_dim": V4_QK_DIM, "v_head_dim": V4_V_DIM, "shared_kv": True, "causal": False,
             "launches": 1} for h, lq, b, l in points]


def row_cost(row: dict) -> Cost:
    """The Cost of one measured call's work, from the model's own kernel functions (`rows.row_kernel`; a MoE
    layer's two grouped GEMMs together)."""
    from rubinperf.calibrate.rows import moe_kernels, row_kernel

    if row["family"] == "moe":
        gate_up, down = moe_kernels(row)
        return gate_up.cost + down.cost
    return row_kernel(row).cost


def family_label(row: dict) -> str:
    """The group a row is reported under: gemm and grouped GEMM split by dtype."""
    if row["family"] == "moe":
        from rubinperf.calibrate.rows import moe_formats
        from rubinperf.kernels.moe import dequantises

        w, act = moe_formats(row)
        return f"moe-{w}" + ("-a16" if dequantises(w, act) else "")
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


def _decoded(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{shorten(str(path))}: not UTF-8 text (byte {exc.start})") from None


def read_csv(path: str | Path) -> tuple[str, list[dict]]:
    """Read a calibration CSV: ('kernels' | 'collectives', typed rows). Bad files are a SpecError. The file is a
    regular file (a link to one included) of at most 64 MiB (rubinperf.files.read_bounded: a FIFO, device, socket or
    directory is refused before anything is read from it)."""
    from rubinperf.files import read_bounded
    from rubinperf.kept import read_kept, write_kept
    from rubinperf.specs.loader import _parsed_cache

    path = Path(path)
    data = read_bounded(path, "csv", "a CSV file for --from-csv")
    cache = _parsed_cache(path, data, "csv", _reader_version())   # a bundled CSV's typed rows, kept as its specs' are
    kept = read_kept(cache)
    if type(kept) is list and len(kept) == 2 and type(kept[1]) is list:
        return kept[0], kept[1]
    kind, rows = _parse_csv(path, _decoded(path, data))
    if cache is not None:
        # Kept as the rows themselves: marshal reads a list of dicts back in C, where building each row's dict from
        # kept columns took as long again. _parse_csv gives equal strings as one object, which marshal writes once and
        # refers to after (and reads back as one object).
        write_kept(cache, [kind, rows])
    return kind, rows


@functools.cache
def _reader_version() -> bytes:
    """This module's source: a kept parse of a CSV (read_csv) is one this reader made."""
    try:
        return Path(__file__).read_bytes()
    except OSError:   # pragma: no cover - a package without its sources
        return b"?"


def _parse_csv(path: Path, text: str) -> tuple[str, list[dict]]:
    """(kind, typed rows) of a calibration CSV's text; a column of strings read a column at a time gives equal strings
    as one object."""
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
    rows = _typed_by_column(header, text, kind)
    if rows is None:   # a row with a fault: read row by row, for the error's line and words
        rows = []
        for i, raw in enumerate(reader, start=2):
            try:
                rows.append(_typed(raw, kind))
            except (ValueError, TypeError) as exc:
                raise SpecError(f"{path}: line {i}: {exc}") from None
        share = {}.setdefault   # (equal strings as one object, as read a column at a time: read_csv keeps each once)
        rows = [{share(k, k): share(v, v) if type(v) is str else v for k, v in r.items()} for r in rows]
    if not rows:
        raise SpecError(f"{path}: no measurements")
    return kind, rows


# The shape columns each family's Cost needs (row_cost), which must be positive.
SHAPE_COLUMNS = {"launch": (), "copy": ("nbytes",), "gemm": ("m", "n", "k"), "grouped_gemm": ("rows", "groups", "n", "k"),
                 "attention_decode": ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim"),
                 "attention_prefill": ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim"),
                 "pointer_chase": ("nbytes", "stride_bytes", "steps"), "stream_ctas": ("ctas", "inflight_bytes", "nbytes"),
                 "elementwise": ("m", "n", "nbytes"), "collective": ("ranks", "nbytes"),
                 "moe": ("rows", "groups", "n", "k"), "mhc": ("m", "n", "groups"), "topk": ("m", "n", "k")}
MAX_COUNT = 1e15  # shapes, byte counts and calls: far beyond any benchmark, keeps products finite


# How _typed reads each column: a count (a whole number), yes/no, a number; any other column is text.
_COUNT, _YES_NO, _NUMBER = 1, 2, 3
_COLUMN_KIND = {**{c: _NUMBER for c in ("measured_s", "spread", "flops", "bytes", "nvlink_bytes", "check_rel_err",
                                        "host_s")},
                "causal": _YES_NO, "shared_kv": _YES_NO,
                **{c: _COUNT for c in (*INT_COLUMNS, *SHAPES_INT_COLUMNS, "ranks", "hops", "samples", "calls")}}


def _typed(raw: dict, kind: str) -> dict:
    row: dict = {}
    column_kind = _COLUMN_KIND.get
    for key, val in raw.items():
        if key is None or not isinstance(val, (str, type(None))):
            raise ValueError("more fields than the header has columns")
        val = (val or "").strip()
        how = column_kind(key)
        if how is None:
            row[key] = val
        elif how == _COUNT:
            number = float(val) if val else None
            if number is not None and not (math.isfinite(number) and 0 <= number <= MAX_COUNT):
                raise ValueError(f"{key}: expected a count between 0 and {MAX_COUNT:g}, got {val!r}")
            row[key] = int(number) if number is not None else None
        elif how == _YES_NO:
            row[key] = val.lower() in ("true", "1", "yes")
        else:
            row[key] = float(val) if val else None
            if row[key] is not None and not math.isfinite(row[key]):
                raise ValueError(f"{key}: expected a finite number, got {val!r}")
    return _checked(row, raw, kind)


def _typed_by_column(header: list, text: str, kind: str) -> list[dict] | None:
    """The rows _typed gives, read a column at a time (the same conversions: a few times faster than cell by cell over
    the bundled tables' tens of thousands of rows); None where any row is not plain (fields other than the header's,
    a name twice in the header, a value _typed or _checked refuses): _typed then reads row by row, to say where."""
    try:
        table = list(csv.reader(io.StringIO(text)))
    except csv.Error:
        return None
    if not table or table[0] != header or len(set(header)) != len(header):
        return None
    body = [r for r in table[1:] if r != []]   # (csv.DictReader skips empty rows)
    width = len(header)
    if any(len(r) != width for r in body):
        return None
    # No cell starts or ends in white space where the text has none but line ends (and no quoted cell holds one).
    plain = text.isascii() and not any(c in text for c in ' \t\r\x0b\x0c\x1c\x1d\x1e\x1f"')
    columns = []
    share = {}.setdefault
    try:
        for j, key in enumerate(header):
            cells = [r[j] for r in body] if plain else [r[j].strip() for r in body]
            how = _COLUMN_KIND.get(key)
            if how is None:   # (equal strings as one object: read_csv keeps each once)
                columns.append(list(map(share, cells, cells)))
            elif how == _YES_NO:
                columns.append([c.lower() in ("true", "1", "yes") for c in cells])
            else:
                empty = "" in cells
                numbers = [float(c) if c else None for c in cells] if empty else list(map(float, cells))
                given = list(filter(None, numbers))   # (None and zeros left out: a zero is a finite count)
                # every number finite (a nan or an infinity makes the sum one; a sum that overflows: row by row)
                if not math.isfinite(sum(given)):
                    return None
                if how == _COUNT:
                    if given and not (min(given) >= 0 and max(given) <= MAX_COUNT):
                        return None
                    numbers = [int(x) if x is not None else None for x in numbers] if empty else list(map(int, numbers))
                columns.append(numbers)
        return _checked_by_column(header, columns, kind)
    except (ValueError, TypeError):
        return None


# ---------------------------------------------------------------- the rows' checks, each stated once


class _Rule(NamedTuple):
    """One check of a typed row: a row of a table of `kind` ("kernels", "collectives"; None: either) whose family is
    one of `families` (None: any; a collectives row's family is "collective", as in SHAPE_COLUMNS) passes where
    `holds(*its values of columns)` (a column the table lacks gives None); else `says(row, raw)` is its error.
    _checked applies the rules to one row, in this order, and raises the first failing rule's words; _checked_by_column
    applies each to a table's columns. `holds` may take for granted that the row passes the rules before it.
    `interval`: `holds` (of one column) is true of any number between two it is true of, so that a column of numbers
    passes where its least and greatest do."""
    kind: str | None
    families: frozenset | None
    columns: tuple
    holds: Callable[..., bool]
    says: Callable[[dict, dict], str]
    interval: bool = False

    def applies(self, kind: str, family: str) -> bool:
        """Whether the rule checks a row of `family` in a table of `kind`."""
        return (self.kind is None or self.kind == kind) and (self.families is None or family in self.families)


_DEFAULT_MODE = "graph"   # a kernels row without a mode (the default suite's CSV has none): all graph replays
_COLLECTIVE = "collective"   # the family of a collectives table's rows, to the rules
_ATTENTION = frozenset(f for f in FAMILIES if f.startswith("attention"))


def _positive_says(key: str, row: dict, raw: dict) -> str:
    return f"{key}: a {row.get('family') or row.get('collective')} row needs a positive {key}, got {raw.get(key)!r}"


def _dtype_says(row: dict, raw: dict) -> str:
    return f"dtype: expected one of {', '.join(PRECISIONS)}, got {row.get('dtype')!r}"


_RULES = (
    _Rule(None, None, ("measured_s",), lambda t: t is not None and 1e-12 <= t <= 1e6,
          lambda row, raw: "measured_s: expected a positive number of seconds (1e-12 to 1e6), "
                           f"got {raw.get('measured_s')!r}", interval=True),
    _Rule("kernels", None, ("family",), FAMILIES.__contains__,
          lambda row, raw: f"family: unknown '{row['family']}' (known: {', '.join(FAMILIES)})"),
    _Rule("kernels", None, ("mode",), MODES.__contains__,   # (the mode given or _DEFAULT_MODE)
          lambda row, raw: f"mode: expected one of {', '.join(MODES)}, got {row['mode']!r}"),
    # each family's shape columns (SHAPE_COLUMNS), in its order: a count, so positive is not zero and not missing
    *(_Rule("collectives" if family == _COLLECTIVE else "kernels", frozenset((family,)), (key,), bool,
            functools.partial(_positive_says, key)) for family, keys in SHAPE_COLUMNS.items() for key in keys),
    _Rule("kernels", _ATTENTION, ("q_len", "kv_len"), operator.le,
          lambda row, raw: f"q_len: expected at most kv_len ({row['kv_len']}), got {row['q_len']}"),
    # a dtype given is a known one, in either table; a kernels row has one unless its family has none
    _Rule(None, None, ("dtype",), lambda dtype: not dtype or dtype in PRECISIONS, _dtype_says),
    _Rule("kernels", frozenset(FAMILIES).difference(NO_DTYPE_FAMILIES), ("dtype",), bool, _dtype_says),
    _Rule("collectives", None, ("collective",), READ_COLLECTIVES.__contains__,
          lambda row, raw: f"collective: unknown '{row['collective']}' (known: {', '.join(READ_COLLECTIVES)})"),
)


def _checked(row: dict, raw: dict, kind: str) -> dict:
    """A typed row, checked as a whole by _RULES (`raw`: its text, for the error's words): the first rule it fails is a
    ValueError. A kernels row gets its mode (_DEFAULT_MODE where it has none)."""
    if kind == "kernels":
        row["mode"] = row.get("mode") or _DEFAULT_MODE
    rule = _failing_rule(row, kind)
    if rule is not None:
        raise ValueError(rule.says(row, raw))
    return row


def _failing_rule(row: dict, kind: str) -> _Rule | None:
    """The first of _RULES that applies to a typed row of a table of `kind` and that it fails; None if it passes all."""
    for n in _applying(kind, row["family"] if kind == "kernels" else _COLLECTIVE):
        rule = _RULES[n]
        if not rule.holds(*map(row.get, rule.columns)):
            return rule
    return None


@functools.lru_cache(maxsize=64)
def _applying(kind: str, family: str) -> tuple[int, ...]:
    """The places in _RULES of the rules that apply to a row of `family` in a table of `kind`, in order (kept: a row is
    told only these, a few of the dozens, and a table's families are asked once each)."""
    return tuple(n for n, rule in enumerate(_RULES) if rule.applies(kind, family))


def _checked_by_column(header: list, columns: list, kind: str) -> list[dict] | None:
    """The rows _checked gives a table's typed columns (one list per name of `header`), where every row passes every
    rule of _RULES that applies to it; None where a row fails one: _checked then reads row by row (and says which).
    A rule applies to all of a family's rows or to none, so each is told over its columns' values a family's rows at a
    time (the whole columns where it applies to every row); the rules in order, so that a rule sees only rows that
    passed those before it, as in _checked."""
    col = dict(zip(header, columns))
    count = len(columns[0]) if columns else 0
    if kind == "kernels":
        col["mode"] = [m or _DEFAULT_MODE for m in col["mode"]] if "mode" in col else [_DEFAULT_MODE] * count
    rows_of: dict = {}   # family -> its rows' indices
    for i, family in enumerate(col["family"] if kind == "kernels" else [_COLLECTIVE] * count):
        rows_of.setdefault(family, []).append(i)
    pick_of = {family: operator.itemgetter(*idx) if len(idx) > 1 else (lambda c, i=idx[0]: (c[i],))
               for family, idx in rows_of.items()}   # family -> its rows' values of a column
    picks_of = [[] for _ in _RULES]   # each rule's picks: of the families it applies to
    for family, pick in pick_of.items():
        for n in _applying(kind, family):
            picks_of[n].append(pick)
    nones = [None] * count
    for rule, picks in zip(_RULES, picks_of):
        values = [col.get(key, nones) for key in rule.columns]
        for pick in [None] if len(picks) == len(pick_of) else picks:   # (None: every row)
            if not _holds_for_all(rule, values if pick is None else [pick(v) for v in values]):
                return None
    keys = (*header, "mode") if kind == "kernels" and "mode" not in header else header
    return [dict(zip(keys, values)) for values in zip(*[col[key] for key in keys])]


def _holds_for_all(rule: _Rule, values: list) -> bool:
    """Whether `rule.holds` is true of each row's values (`values`: a sequence per column, a row's values at one index
    of each). A rule of one column is told each distinct value once (equal values pass or fail alike), an interval's
    only the least and greatest (where no cell is empty; a column's numbers are finite: _typed_by_column)."""
    if len(values) > 1:
        return all(map(rule.holds, *values))
    column = values[0]
    if rule.holds is bool:   # (truth itself: all() tells it, a few times faster than the distinct values' set)
        return all(column)
    if rule.interval and column and None not in column:
        column = (min(column), max(column))
    return all(map(rule.holds, set(column)))
