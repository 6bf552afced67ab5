"""A what-if as a difference: the records of a run with `--set` overrides beside the same run without them.

`diff_step` pairs two step records (the same rack, layout and phase) kernel by kernel and says, for each kernel,
its time before and after, the change, and which of the roofline's terms (compute, memory, parallelism, comm,
latency: `terms_ms` of each breakdown row) moved the most. Pure record arithmetic: no formula is evaluated here.
"""

from __future__ import annotations

TERMS = ("compute", "memory", "parallelism", "comm", "latency")


def term_moved(before: dict, after: dict) -> tuple[str, float]:
    """(term, change in ms) of the roofline term whose time changed the most in absolute value between two
    breakdown rows (`terms_ms`), or ("", 0.0) where none changed."""
    tb, ta = before.get("terms_ms") or {}, after.get("terms_ms") or {}
    changes = {t: ta.get(t, 0.0) - tb.get(t, 0.0) for t in TERMS}
    name = max(changes, key=lambda t: abs(changes[t]))
    return (name, changes[name]) if changes[name] != 0 else ("", 0.0)


def diff_kernels(before: list[dict], after: list[dict]) -> list[dict]:
    """Per kernel (breakdown rows matched by kernel name and part): before_ms, after_ms, delta_ms, delta_frac, term,
    term_delta_ms. A kernel present on one side only (a what-if that adds or removes an op) has 0 on the other.
    Ordered by the size of the change, largest first."""
    key = lambda b: (b["kernel"], b.get("part", ""))   # noqa: E731
    old, new = {key(b): b for b in before}, {key(b): b for b in after}
    rows = []
    for k in list(old) + [k for k in new if k not in old]:
        b, a = old.get(k, {}), new.get(k, {})
        t0, t1 = b.get("time_ms", 0.0), a.get("time_ms", 0.0)
        term, dterm = term_moved(b, a)
        rows.append({"kernel": k[0], "part": k[1], "before_ms": t0, "after_ms": t1, "delta_ms": t1 - t0,
                     "delta_frac": (t1 - t0) / t0 if t0 else None, "term": term, "term_delta_ms": dterm,
                     "bound_before": b.get("bound", ""), "bound_after": a.get("bound", "")})
    rows.sort(key=lambda r: -abs(r["delta_ms"]))
    return rows


# Step-level fields compared (record key -> label), besides the kernels.
STEP_FIELDS = ("step_time_ms", "gpu_time_ms", "cpu_time_ms", "exposed_host_time_ms", "tokens_per_s_per_gpu",
               "tokens_per_s_per_user")


def diff_step(base: dict, whatif: dict) -> dict:
    """One step record's what-if against its baseline: the step fields before / after / change, and the kernels'
    differences (`diff_kernels`)."""
    for k in ("hardware", "layout", "phase"):
        if base.get(k) != whatif.get(k):   # pragma: no cover - the caller pairs records of the same shape
            raise ValueError(f"diff_step: {k} differs ({base.get(k)} vs {whatif.get(k)})")
    fields = {f: {"before": base[f], "after": whatif[f], "delta": whatif[f] - base[f],
                  "delta_frac": (whatif[f] - base[f]) / base[f] if base[f] else None}
              for f in STEP_FIELDS if f in base and f in whatif}
    return {"hardware": whatif["hardware"], "layout": whatif["layout"], "phase": whatif["phase"],
            "step": fields, "kernels": diff_kernels(base["breakdown"], whatif["breakdown"])}


# A compared point's fields compared (`rubinperf compare` records), besides its decode kernels.
POINT_FIELDS = ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "decode_step_ms", "batch_per_rank")


def diff_compare(before: list[dict], after: list[dict]) -> list[dict]:
    """`compare --baseline`: each rack's compared points (peak, at each interactivity, single user) before and after
    the what-if, matched by rack, serving and metric: the point's figures before / after / change, the decode layout
    on each side, and its decode kernels' differences (`diff_kernels`; at the point each side reaches, which may be
    another batch: the table says so)."""
    key = lambda r: (r["hardware"], r.get("serving", ""), r["metric"], r.get("target_tokens_per_s_per_user"))  # noqa: E731
    old = {key(r): r for r in before}
    out = []
    for a in after:
        b = old.get(key(a))
        if b is None:   # pragma: no cover - the same racks and levels on both sides
            continue
        reach = b.get("reachable", True) and a.get("reachable", True)
        fields = {}
        for f in POINT_FIELDS:
            x, y = b.get(f), a.get(f)
            if reach and isinstance(x, (int, float)) and isinstance(y, (int, float)):
                fields[f] = {"before": x, "after": y, "delta": y - x, "delta_frac": (y - x) / x if x else None}
        out.append({"hardware": a["hardware"], "serving": a.get("serving", ""), "metric": a["metric"],
                    "target_tokens_per_s_per_user": a.get("target_tokens_per_s_per_user"),
                    "reachable_before": b.get("reachable", True), "reachable_after": a.get("reachable", True),
                    "decode_layout_before": b.get("decode_layout"), "decode_layout_after": a.get("decode_layout"),
                    "point": fields,
                    "kernels": diff_kernels(b.get("kernels") or [], a.get("kernels") or []) if reach else []})
    return out
