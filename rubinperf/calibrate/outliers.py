"""Rules that reject measured rows as artefacts of how they were measured, never by hand (no torch, no numpy).

Tables measured by other tools (aiconfigurator's per-op tables, calibration/aiconfigurator) hold rows that
time something besides the kernel: a collector that billed set-up work inside the timed call, a group of
GPUs that was not the one named. Two rules, each with its factor stated:

- **Envelope** (within one series: one table, system, framework version, implementation, dtype and every
  shape field but the work axes): a row is rejected when it is slower by more than ENVELOPE_FACTOR than
  another row of its series that does at least as much work (every work axis >= its own, e.g. a larger m
  at the same n, k). Doing more work never takes less time on one GPU with one kernel, so by more than a
  factor 2 the slower row timed something else; tile padding and kernel choice between neighbouring
  sizes move a time by well under 2x.
- **Cross-system** (one framework version, implementation and shape on sibling GPUs, SIBLINGS: one
  generation, the same NVLink 5 switch and HBM3e at 8 TB/s): a row is rejected when it is slower by more
  than CROSS_SYSTEM_FACTOR than the median of the same row on the other siblings. Their peaks differ by at
  most 1.5x (GB300's FP4 against B200's), so 3x is not the GPU.

- **Cross-backend** (one system and shape, the same dtype, other serving frameworks' kernels): a row is
  rejected when it is slower by more than CROSS_BACKEND_FACTOR than the median of the other frameworks'
  rows of that shape. Tuned libraries of one op on one GPU (cuBLAS, DeepGEMM, CUTLASS, FlashInfer) land
  within 2x of each other where both are fit for the shape; 4x slower is a collector that timed more
  than the op (the rule is applied to rows whose frameworks time the same op: the gemm tables).

All rules only reject the slower row: an artefact adds time, it does not remove it.
"""

from __future__ import annotations

from statistics import median

ENVELOPE_FACTOR = 2.0
CROSS_SYSTEM_FACTOR = 3.0
CROSS_BACKEND_FACTOR = 4.0
# Families whose rows from different frameworks time the same operation (a GEMM of one shape and format).
CROSS_BACKEND_FAMILIES = frozenset({"gemm"})
# Blackwell parts of one generation: NVLink 5 (1.8 TB/s per GPU) and 8 TB/s of HBM3e (docs/sources/hardware.md).
SIBLINGS = frozenset({"gb300", "gb200", "b200_sxm", "b300_sxm"})

# The axes along which a family's rows of one series grow in work.
WORK_AXES = {"gemm": ("m",), "grouped_gemm": ("rows",), "moe": ("m", "rows"), "mhc": ("m",),
             "attention_decode": ("batch", "kv_len"), "collective": ("nbytes",)}
# Columns that are results, not the row's identity.
RESULT_COLUMNS = frozenset({"measured_s", "flops", "bytes", "spread", "samples", "calls", "nvlink_bytes", "hops"})


def _family(row: dict) -> str:
    return row.get("family") or "collective"


def _axes(row: dict) -> tuple:
    return WORK_AXES.get(_family(row), ())


def series_key(row: dict) -> tuple:
    """Every identifying column but the work axes: the rows one envelope compares."""
    skip = RESULT_COLUMNS | set(_axes(row))
    return tuple(sorted((k, str(v)) for k, v in row.items() if k not in skip))


def shape_key(row: dict) -> tuple:
    """Every identifying column but the system: the rows one cross-system median compares."""
    skip = RESULT_COLUMNS | {"system", "source"}  # a row's source (its table's path) names its system
    return tuple(sorted((k, str(v)) for k, v in row.items() if k not in skip))


def envelope_rejects(rows: list[dict], factor: float = ENVELOPE_FACTOR) -> dict[int, str]:
    """Index -> reason for each row slower by more than `factor` than a row of its series with >= the work."""
    series: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if _axes(r):
            series.setdefault(series_key(r), []).append(i)
    out = {}
    for idx in series.values():
        for i in idx:
            axes, t = _axes(rows[i]), float(rows[i]["measured_s"])
            faster = [j for j in idx if j != i and all(_num(rows[j], a) >= _num(rows[i], a) for a in axes)]
            if not faster:
                continue
            j = min(faster, key=lambda j: float(rows[j]["measured_s"]))
            tj = float(rows[j]["measured_s"])
            if t > factor * tj:
                shape = ", ".join(f"{a}={rows[j].get(a)}" for a in axes)
                out[i] = f"envelope: {t * 1e6:.3g} us > {factor:g} x {tj * 1e6:.3g} us at {shape}"
    return out


def cross_system_rejects(rows: list[dict], factor: float = CROSS_SYSTEM_FACTOR, siblings=SIBLINGS) -> dict[int, str]:
    """Index -> reason for each sibling-system row slower by more than `factor` than the median of the same
    row (version, implementation, shape) on the other sibling systems."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if r.get("system") in siblings:
            groups.setdefault(shape_key(r), []).append(i)
    out = {}
    for idx in groups.values():
        for i in idx:
            others = [float(rows[j]["measured_s"]) for j in idx if rows[j]["system"] != rows[i]["system"]]
            if not others:
                continue
            m, t = median(others), float(rows[i]["measured_s"])
            if t > factor * m:
                out[i] = f"cross-system: {t * 1e6:.3g} us > {factor:g} x {m * 1e6:.3g} us (median of {len(others)} on " \
                         f"{', '.join(sorted({rows[j]['system'] for j in idx if rows[j]['system'] != rows[i]['system']}))})"
    return out


def backend_key(row: dict) -> tuple:
    """The system, family, dtype and shape: the rows one cross-backend median compares."""
    skip = RESULT_COLUMNS | {"backend", "impl", "source", "launches"}
    return tuple(sorted((k, str(v)) for k, v in row.items() if k not in skip))


def cross_backend_rejects(rows: list[dict], factor: float = CROSS_BACKEND_FACTOR,
                          families=CROSS_BACKEND_FAMILIES) -> dict[int, str]:
    """Index -> reason for each row slower by more than `factor` than the median of the same system's rows of
    that dtype and shape from other frameworks (`backend`)."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if _family(r) in families and r.get("backend"):
            groups.setdefault(backend_key(r), []).append(i)
    out = {}
    for idx in groups.values():
        for i in idx:
            others = [j for j in idx if rows[j]["backend"] != rows[i]["backend"]]
            if not others:
                continue
            m, t = median(float(rows[j]["measured_s"]) for j in others), float(rows[i]["measured_s"])
            if t > factor * m:
                out[i] = f"cross-backend: {t * 1e6:.3g} us > {factor:g} x {m * 1e6:.3g} us (median of {len(others)} " \
                         f"from {', '.join(sorted({rows[j]['backend'] for j in others}))})"
    return out


def reject(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(kept rows, rejected rows each with `rule` and `reason`): every rule on every row."""
    env, cross, back = envelope_rejects(rows), cross_system_rejects(rows), cross_backend_rejects(rows)
    kept, rejected = [], []
    for i, r in enumerate(rows):
        reasons = [x for x in (env.get(i), cross.get(i), back.get(i)) if x]
        if reasons:
            rule = "+".join(x.split(":", 1)[0] for x in reasons)
            rejected.append({**r, "rule": rule, "reason": "; ".join(reasons)})
        else:
            kept.append(r)
    return kept, rejected


def _num(row: dict, key: str) -> float:
    v = row.get(key)
    return float(v) if v not in (None, "") else 0.0
