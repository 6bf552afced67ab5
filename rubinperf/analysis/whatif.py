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
