"""Low/high bands on headline figures from the ranges of the assumed spec fields, and what the model leaves out.

Method: evaluation at the ends of the ranges (not a propagation of elasticities). Every field of the rack's
hardware and stack that states a range (`[ranges]` of its TOML, rubinperf.specs.loader.check_ranges) is set to its
low and to its high end, one field at a time, the others at their values, and the step is timed again: all
2 x n ends in one vectorised step (the platform's fields as numpy arrays, as `rubinperf.analysis.elasticity`
does). Each end's deviation of the figure is d = ln(figure at the end / best figure); the band is

    low  = best x exp(-sqrt(sum over fields of max(0, -d_low, -d_high)^2))
    high = best x exp(+sqrt(sum over fields of max(0,  d_low,  d_high)^2))

(independent assumptions add in quadrature). The fields with the largest deviations are named as the ones that
set the band (`drivers`). Preview datasheet figures and calibrated fields carry no range: the band is about the
assumptions only, and the accuracy ledger (`rubinperf validate`) says how far the model itself is off.

A serving figure (compare): the decode step of the compared point at each end gives a speed factor
f = step time / step time at the end; the rack's frontier (tokens/s per user and per GPU, both scaled by f: at a
fixed batch both follow the decode step) is read again at the same target. Across two racks (a ratio) a field of
the same name moves on both racks together (the same assumption: "large GEMMs reach 65-80% of peak").
"""

from __future__ import annotations

import dataclasses
import math

# What a step or serving figure leaves out, as the docs name it: (condition, text, where the docs say so).
NOT_MODELLED = (
    ("moe", "routing skew: tokens are routed to experts uniformly at random (no power-law skew), on TP paths too",
     "docs/aiconfigurator.md"),
    ("decode", "CUDA-graph batch padding: a decode step runs at its batch, not the next captured graph size",
     "docs/models.md"),
    ("always", "FP8 attention (FMHA FP8): attention computes in BF16; the KV precision sets the bytes read",
     "docs/models.md"),
    ("multi_domain", "DeepEP two-micro-batch overlap, its CPU wait for receive counts, and NIC congestion",
     "docs/model.md"),
    ("tp_mhc", "the side stream that runs the TP path's next mHC pre-norm beside the routed GEMMs (timed in series)",
     "docs/model.md"),
    ("parallel_draft", "the DSpark speculator's sequential Markov head", "docs/model.md"),
    ("dep", "attention-DP request balancing (an engine holding requests until every rank has one)", "docs/serving.md"),
)


def not_modelled(model, hw, layout, phase: str) -> list[str]:
    """The mechanisms of `NOT_MODELLED` that apply to this configuration, each with the doc that names it."""
    domains = getattr(layout, "ranks", 1) > getattr(hw, "nvlink_domain_size", 1 << 30)
    applies = {
        "always": True,
        "moe": bool(getattr(model, "num_routed_experts", 0)),
        "decode": phase == "decode",
        "multi_domain": domains,
        "tp_mhc": layout.kind == "tp" and bool(getattr(hw, "tp_mhc_in_epilogue", False)),
        "parallel_draft": phase == "decode" and getattr(hw, "draft_forwards", "") == "parallel-block",
        "dep": layout.kind == "dep",
    }
    return [f"{text} ({doc})" for cond, text, doc in NOT_MODELLED if applies.get(cond)]


# The field that sets each term of a kernel's time (rubinperf.roofline) and the spec table that holds it: a term is
# calibrated when that field was fitted to measurements (its table's source says so and, where the source lists the
# fitted fields, names it), assumed when the table says it assumes, else sourced (a datasheet or a publication).
TERM_FIELDS = {
    "compute": ("mma_compute_efficiency", "stack.efficiency"),
    "memory": ("hbm_stream_efficiency", "hardware.efficiency"),
    "parallelism": ("mma_bytes_in_flight_per_sm", "stack.kernel"),
    "comm": ("nvlink_efficiency", "hardware.efficiency"),
    "latency": ("mma_prologue_cycles", "stack.kernel"),
}


def fitted_fields(src: str):
    """The fields a calibrated table's source lists as fitted (`... of the roofline: a, b, c). The other fields were
    not measured`, or `(calibrated: a, b; ...)`), or None when it lists none."""
    import re

    for pat in (r"roofline: ([^)]*)\)", r"\(calibrated: ([^;)]*)"):
        m = re.search(pat, src)
        if m:
            return {x.strip() for x in m.group(1).split(",")}
    return None


def field_basis(hw, field: str, table: str) -> str:
    """calibrated, assumed or sourced: how one field's value was set. A field with a stated range is assumed;
    else calibrated when its table's source says it was calibrated or fitted (and, where it lists the fitted
    fields, lists it); else assumed when the source says it assumes; else sourced."""
    if field in getattr(hw, "ranges", {}):
        return "assumed"
    src = str(hw.sources.get(table, ""))
    if src.startswith(("Calibrated", "Fitted")) or "(calibrated:" in src:
        listed = fitted_fields(src)
        if listed is None or field in listed:
            return "calibrated"
    return "assumed" if "assum" in src.lower() else "sourced"


def term_basis(hw) -> dict:
    """{term: "calibrated" | "assumed" | "sourced"}: how the field that sets each term was set."""
    return {term: field_basis(hw, field, table) for term, (field, table) in TERM_FIELDS.items()}


def ranged_fields(hw) -> dict:
    """{field: (low, high)} of the platform's ranges that the step can take as arrays (float fields, not the
    operating point's)."""
    from rubinperf.analysis.elasticity import varied_fields

    floats = varied_fields()
    return {f: span for f, span in getattr(hw, "ranges", {}).items() if f in floats}


def ends_step(model, hw, layout, point, extra_cpu_s=0.0, shape=()):
    """(names, result): the step with each ranged field at its low and high end, one field at a time: row 0 the
    values, rows 1 + 2i and 2 + 2i field i's ends. `shape`: the point's own array shape (a swept batch), which the
    rows broadcast against (fields of shape (rows, 1, ...)); `extra_cpu_s`: the host work the step had (admission)."""
    import numpy as np

    from rubinperf.step.timing import step

    spans = ranged_fields(hw)
    names = list(spans)
    rows = 1 + 2 * len(names)
    cols = {}
    for i, f in enumerate(names):
        col = np.full((rows,) + (1,) * len(shape), float(getattr(hw, f)))
        col[1 + 2 * i], col[2 + 2 * i] = spans[f]
        cols[f] = col
    r = step(model, dataclasses.replace(hw, **cols), layout, point)
    if np.any(np.asarray(extra_cpu_s)):
        r = dataclasses.replace(r, extra_cpu_s=extra_cpu_s)
    return names, r


def step_ends(model, hw, layout, point, attrs=("expected_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user"),
              extra_cpu_s=0.0):
    """({attr: best}, {field: {attr: (at low end, at high end)}}): the step with each ranged field at its ends."""
    import numpy as np

    names, r = ends_step(model, hw, layout, point, extra_cpu_s)
    rows = 1 + 2 * len(names)
    got = {a: np.broadcast_to(np.asarray(getattr(r, a), dtype=float), (rows,)) for a in attrs}
    best = {a: float(got[a][0]) for a in attrs}
    ends = {f: {a: (float(got[a][1 + 2 * i]), float(got[a][2 + 2 * i])) for a in attrs} for i, f in enumerate(names)}
    return best, ends


def combine(best: float, ends: dict, top: int = 3) -> dict:
    """{low, high, drivers, method} from a figure's value at each field's two ends ({field: (lo_end, hi_end)})."""
    down, up, why = 0.0, 0.0, []
    if not (best and math.isfinite(best) and best > 0):
        return {"low": None, "high": None, "drivers": [], "band_method": "none"}
    for f, (a, b) in ends.items():
        d = [math.log(x / best) for x in (a, b) if x and math.isfinite(x) and x > 0]
        if not d:
            continue
        dn, dp = max(0.0, -min(d)), max(0.0, max(d))
        down += dn * dn
        up += dp * dp
        if dn or dp:
            why.append((max(dn, dp), f, dn, dp))
    why.sort(reverse=True)
    drivers = [f"{f} ({-100 * (1 - math.exp(-dn)):+.0f}%/{100 * (math.exp(dp) - 1):+.0f}%)"
               for _, f, dn, dp in why[:top]]
    return {"low": best * math.exp(-math.sqrt(down)), "high": best * math.exp(math.sqrt(up)), "drivers": drivers,
            "band_method": "ends of the assumed fields' ranges, combined in quadrature"}


# ---------------------------------------------------------------- estimate


def estimate_band(model, hw, layout, point) -> dict:
    """Band fields of one estimate record: step time, tokens/s per GPU and per user, each low/high."""
    best, ends = step_ends(model, hw, layout, point)
    out = {}
    for attr, key in (("expected_s", "step_time_ms"), ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu"),
                      ("tokens_per_s_per_user", "tokens_per_s_per_user")):
        c = combine(best[attr], {f: e[attr] for f, e in ends.items()})
        scale = 1e3 if attr == "expected_s" else 1.0
        out[f"{key}_low"] = None if c["low"] is None else c["low"] * scale
        out[f"{key}_high"] = None if c["high"] is None else c["high"] * scale
        if attr == "tokens_per_s_per_gpu":
            out["low"], out["high"] = out[f"{key}_low"], out[f"{key}_high"]
            out["band_drivers"], out["band_method"] = c["drivers"], c["band_method"]
    out["band_of"] = "tokens_per_s_per_gpu"
    return out


# ---------------------------------------------------------------- compare


def _speed_factors(pick) -> dict:
    """{field: (f at low end, f at high end)} of a swept point: decode step time / step time at the end."""
    r = pick.step_result()
    best, ends = step_ends(r.model, r.hw, r.layout, r.point, attrs=("expected_s",), extra_cpu_s=r.extra_cpu_s)
    t0 = best["expected_s"]
    return {f: tuple(t0 / t for t in e["expected_s"]) for f, e in ends.items()}


def _value_at(summary, metric: str, level, factor: float, value_key: str):
    """A compare figure of a rack whose frontier moved by `factor` (both axes)."""
    import numpy as np

    from rubinperf.serving.pareto import best_at

    x, y = summary.x * factor, summary.y * factor
    if metric == "peak":
        j = best_at(x, y, summary.feasible, -np.inf)
    elif metric == "interactivity":
        j = best_at(x, y, summary.feasible, level)
    else:
        top = float(np.max(x[summary.feasible])) if summary.feasible.any() else 0.0
        j = best_at(x, y, summary.feasible, top)
    if j is None:
        return None
    return float(x[j] if value_key == "tokens_per_s_per_user" else y[j])


def compare_bands(records: list[dict], summaries: list) -> list[dict]:
    """low/high (and the ratio's) on every compare record of a P/D deployment, in place."""
    from rubinperf.serving.pareto import Pick, _chosen

    by_rack = {s.hardware: s for s in summaries if getattr(s, "serving", "disagg") == "disagg"}
    cache: dict = {}

    def ends_of(rec):
        s = by_rack.get(rec["hardware"])
        if s is None or not rec.get("reachable"):
            return None
        key = (rec["hardware"], rec["metric"], rec["target_tokens_per_s_per_user"])
        if key not in cache:
            pick = _chosen(s, rec["metric"], rec["target_tokens_per_s_per_user"])
            if not isinstance(pick, Pick):
                cache[key] = None
            else:
                value_key = "tokens_per_s_per_user" if rec["metric"] == "single_user" else "tokens_per_s_per_gpu"
                factors = _speed_factors(pick)
                best = _value_at(s, rec["metric"], rec["target_tokens_per_s_per_user"], 1.0, value_key)
                ends = {f: tuple(_value_at(s, rec["metric"], rec["target_tokens_per_s_per_user"], x, value_key)
                                 for x in fs) for f, fs in factors.items()}
                cache[key] = (best, ends)
        return cache[key]

    for rec in records:
        got = ends_of(rec)
        rec.update(low=None, high=None, band_drivers=[], band_method="")
        if got is None:
            continue
        best, ends = got
        c = combine(best, {f: tuple(x if x is not None else 0.0 for x in e) for f, e in ends.items()})
        rec.update(low=c["low"], high=c["high"], band_drivers=c["drivers"], band_method=c["band_method"],
                   band_of="tokens_per_s_per_user" if rec["metric"] == "single_user" else "tokens_per_s_per_gpu")
        base = next((r for r in records if r["hardware"] == rec["baseline"] and r["metric"] == rec["metric"]
                     and r["target_tokens_per_s_per_user"] == rec["target_tokens_per_s_per_user"]
                     and r.get("serving") == rec.get("serving")), None)
        b = ends_of(base) if base is not None and rec.get("ratio") is not None else None
        if b is None or not b[0] or rec["hardware"] == rec["baseline"]:
            rec.update(ratio_low=None, ratio_high=None, ratio_band_drivers=[])
            continue
        fields = set(ends) | set(b[1])
        ratio0 = best / b[0]
        r_ends = {}
        for f in fields:
            top = ends.get(f, (best, best))
            bot = b[1].get(f, (b[0], b[0]))
            r_ends[f] = tuple((t / u) if t and u else 0.0 for t, u in zip(top, bot))
        rc = combine(ratio0, r_ends)
        scale = rec["ratio"] / ratio0 if ratio0 else 1.0   # the ratio as compare computed it (same picks: 1)
        rec.update(ratio_low=None if rc["low"] is None else rc["low"] * scale,
                   ratio_high=None if rc["high"] is None else rc["high"] * scale, ratio_band_drivers=rc["drivers"])
    return records


def serving_not_modelled(records: list[dict], setups) -> list[dict]:
    """`not_modelled` and `terms_basis` on each compare record (its rack's decode engine), in place."""
    from rubinperf.specs.layout import parse_layout

    racks = {hw.name: (m, hw) for m, hw, _ in setups}
    for rec in records:
        got = racks.get(rec["hardware"])
        if got is None or not rec.get("reachable") or not rec.get("decode_layout"):
            rec.setdefault("not_modelled", [])
            continue
        m, hw = got
        lay = parse_layout(rec["decode_layout"])
        rec["not_modelled"] = not_modelled(m, hw, lay, "decode") + [
            "the prefill pool's busiest-rank term in disaggregated serving (docs/serving.md)"]
        rec["terms_basis"] = term_basis(hw)
    return records


# ---------------------------------------------------------------- pareto


def pareto_bands(summary, frontier_only: bool = True) -> list:
    """Per swept point of a rack (in the order of summary.picks): {low, high, tokens_per_s_per_user_low, ...} of
    the point as configured (its layout and batch), or None (off the frontier, or an aggregated engine's point).
    One vectorised step per decode run over its frontier batches x the ranged fields' ends: the decode step's speed
    factor at each end scales both tokens/s per GPU and per user (at a fixed batch both follow the decode step)."""
    import numpy as np

    from rubinperf.serving.pareto import Pick

    out: list = [None] * len(summary.picks)
    by_run: dict = {}
    for j, (p, front) in enumerate(zip(summary.picks, summary.on_frontier)):
        if isinstance(p, Pick) and (front or not frontier_only) and summary.feasible[j]:
            by_run.setdefault(p.run, []).append((j, p.i))
    for run, items in by_run.items():
        r = run.decode.result
        idx = np.array([i for _, i in items])
        b = np.asarray(run.decode.batch)[idx]
        point = dataclasses.replace(r.point, batch=b)
        extra = np.broadcast_to(np.asarray(r.extra_cpu_s, dtype=float), np.shape(run.decode.batch))[idx] \
            if np.ndim(r.extra_cpu_s) else r.extra_cpu_s
        names, rr = ends_step(r.model, r.hw, r.layout, point, extra, shape=b.shape)
        nm, basis = not_modelled(r.model, r.hw, r.layout, "decode"), term_basis(r.hw)
        t = np.broadcast_to(np.asarray(rr.expected_s, dtype=float), (1 + 2 * len(names),) + b.shape)
        for col, (j, _) in enumerate(items):
            rec = summary.picks[j].record
            factors = {f: (t[0, col] / t[1 + 2 * k, col], t[0, col] / t[2 + 2 * k, col]) for k, f in enumerate(names)}
            y, x = rec["tokens_per_s_per_gpu"], rec["tokens_per_s_per_user"]
            c = combine(y, {f: (y * a, y * z) for f, (a, z) in factors.items()})
            cu = combine(x, {f: (x * a, x * z) for f, (a, z) in factors.items()})
            out[j] = {"low": c["low"], "high": c["high"], "tokens_per_s_per_user_low": cu["low"],
                      "not_modelled": nm, "terms_basis": basis,
                      "tokens_per_s_per_user_high": cu["high"], "band_of": "tokens_per_s_per_gpu",
                      "band_drivers": c["drivers"], "band_method": c["band_method"] + " (the decode step's speed)"}
    return out


# ---------------------------------------------------------------- serve


def serve_bands(records: list[dict], e) -> list[dict]:
    """low/high of a closed-loop engine's figures (rubinperf serve), in place. The engine's decode step (at each
    record's busiest rank's batch) and its prefill step (the record's chunk) at each field's ends give speed
    factors fd and fp; the mean step (1 - s) d + s p (s: the share of steps with prefill) moves with them, and so
    do throughput (x mean step / mean step at the end), TPOT (x the inverse) and TTFT (x 1 / fp)."""
    import numpy as np

    from rubinperf.step.point import make_point

    if not records:
        return records
    m, hw, lay, mix = e.model, e.hw, e.layout, e.mix
    b = np.array([max(float(r["busiest_rank_batch"]), 1.0) for r in records])
    chunk = np.array([max(float(r["prefill_chunk_tokens"]), 1.0) for r in records])
    d_point = make_point(m, hw, lay, phase="decode", batch=1, context=mix.mean_input + mix.mean_output / 2,
                         draft_tokens=e.draft_tokens, acceptance=e.acceptance, engram_placement=m.engram_placement)
    p_point = make_point(m, hw, lay, phase="prefill", batch=1, context=mix.mean_input * mix.prefix_hit,
                         new_tokens=float(chunk[0]), engram_placement=m.engram_placement)
    names, rd = ends_step(m, hw, lay, dataclasses.replace(d_point, batch=b), shape=b.shape)
    _, rp = ends_step(m, hw, lay, dataclasses.replace(p_point, new_tokens=chunk), shape=chunk.shape)
    rows = 1 + 2 * len(names)
    td = np.broadcast_to(np.asarray(rd.expected_s, dtype=float), (rows,) + b.shape)
    tp = np.broadcast_to(np.asarray(rp.expected_s, dtype=float), (rows,) + b.shape)
    for c, r in enumerate(records):
        s_ = float(r["prefill_step_share"])
        d, p = float(r["decode_step_ms"]), float(r["prefill_step_ms"])
        mean0 = (1 - s_) * d + s_ * p
        ends_tp, ends_tpot, ends_ttft = {}, {}, {}
        for k, f in enumerate(names):
            means, ttfts = [], []
            for row in (1 + 2 * k, 2 + 2 * k):
                fd, fp = td[0, c] / td[row, c], tp[0, c] / tp[row, c]
                means.append((1 - s_) * d / fd + s_ * p / fp)
                ttfts.append(float(r["mean_ttft_ms"]) / fp)
            ends_tp[f] = tuple(float(r["total_tokens_per_s_per_gpu"]) * mean0 / x for x in means)
            ends_tpot[f] = tuple(float(r["median_tpot_ms"]) * x / mean0 for x in means)
            ends_ttft[f] = tuple(ttfts)
        c1 = combine(float(r["total_tokens_per_s_per_gpu"]), ends_tp)
        c2 = combine(float(r["median_tpot_ms"]), ends_tpot)
        c3 = combine(float(r["mean_ttft_ms"]), ends_ttft)
        r.update(low=c1["low"], high=c1["high"], band_of="total_tokens_per_s_per_gpu", band_drivers=c1["drivers"],
                 band_method=c1["band_method"] + " (the engine's decode and prefill steps)",
                 median_tpot_ms_low=c2["low"], median_tpot_ms_high=c2["high"],
                 mean_ttft_ms_low=c3["low"], mean_ttft_ms_high=c3["high"],
                 not_modelled=not_modelled(m, hw, lay, "decode") + [
                     "a prefix load from host memory (cached prefixes are taken as resident) (docs/serving.md)"],
                 terms_basis=term_basis(hw))
    return records
