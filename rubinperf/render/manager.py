"""The report's sections for a reader who decides (presentation only): the headline (one sentence per question,
each with its ratio, its band and whether it rests on preview specs), where the ratios come from (the terms
`compare` prints and the silicon-vs-software split), cost and power with their basis, the aggregated engine's
latency percentiles (`rubinperf serve`), and the validation verdict (`rubinperf validate`).

Everything here reads records the core built (rubinperf.serving.pareto's compare records, rubinperf.serving.aggregated's
serve records, rubinperf.analysis.validate's point records and, where given, the accuracy ledger's families).
Nothing computes a formula: a band is printed when a record carries one, and said to be missing when it does not.
"""

from __future__ import annotations

import math
from html import escape

from rubinperf.render.html import band_of
from rubinperf.units import fmt_num, fmt_pct, fmt_time

NO_BAND = "band: not yet computed"

TERM_WORDS = {"requests_per_decode_gpu": "requests per decode GPU", "decode_step_speedup": "decode step speed",
              "acceptance": "accepted tokens per step", "decode_gpu_share": "share of GPUs in decode"}


def _e(x) -> str:
    return escape(str(x))


# ---------------------------------------------------------------- bands


def ratio_text(v) -> str:
    return "—" if v is None else f"{float(v):.2f}×"


def with_band(value_text: str, band, fmt) -> str:
    """'2.82× (2.52–3.00×)' or '2.82× (band: not yet computed)'."""
    if band is None:
        return f"{value_text} ({NO_BAND})"
    return f"{value_text} ({fmt(band[0])}–{fmt(band[1])})"


def _ratio_band(rec: dict) -> str:
    """The ratio and its band: '2.82× (2.52–3.00×)'."""
    return with_band(ratio_text(rec.get("ratio")), band_of(rec, "ratio"), ratio_text)


def _usd(v) -> str:
    from rubinperf.render.serving import _usd as usd

    return usd(v)


# ---------------------------------------------------------------- preview


def preview_reasons(platforms) -> dict[str, list[str]]:
    """{rack: [why its figures are previews]} from the specs' own flags (hardware `preview`, stack
    `preview_software`); racks with neither are left out."""
    out: dict[str, list[str]] = {}
    for hw in platforms:
        why = []
        if getattr(hw, "preview", False):
            why.append(f"hardware {hw.name}: NVIDIA's previewed figures")
        if getattr(hw, "preview_software", False):
            why.append(f"stack {hw.stack}: measured only in a preview post")
        if why:
            out[hw.name] = why
    return out


def preview_tag(racks, previews: dict) -> str:
    return '<span class="pv">preview</span>' if any(r in previews for r in racks) else ""


def preview_banner(previews: dict) -> str:
    if not previews:
        return ""
    items = "".join(f"<li>{_e(w)}</li>" for why in previews.values() for w in why)
    racks = ", ".join(previews)
    return (f'<div class="banner" role="note" id="preview"><b>Preview:</b> every figure of {_e(racks)}, and every '
            f"ratio against it, rests on preview specs, estimates of an unreleased system:<ul>{items}</ul></div>")


# ---------------------------------------------------------------- the headline


def _key(rec: dict) -> tuple:
    return rec["metric"], rec["target_tokens_per_s_per_user"]


def _question(rec: dict) -> str:
    stat = (rec.get("interactivity_stat") or "mean")
    stat = "" if stat == "mean" else stat.upper() + " "
    if rec["metric"] == "peak":
        return "Peak throughput"
    if rec["metric"] == "interactivity":
        return f"At {stat}≥ {fmt_num(rec['target_tokens_per_s_per_user'])} tok/s/user"
    return "One user alone"


def _config(r: dict) -> str:
    return f"{r['decode_layout']} × {fmt_num(r['batch_per_rank'])}"


def layout_reach(points: list[dict]) -> dict[str, dict[str, float]]:
    """{rack: {decode layout: the highest tok/s/user of its feasible swept points}} (a selection over the
    point records, for the headline's explanation)."""
    out: dict[str, dict[str, float]] = {}
    for p in points:
        if p.get("feasible") and p.get("tokens_per_s_per_user"):
            d = out.setdefault(p["hardware"], {})
            d[p["decode_layout"]] = max(d.get(p["decode_layout"], 0.0), float(p["tokens_per_s_per_user"]))
    return out


def _family(layout: str) -> str:
    return "".join(c for c in layout if c.isalpha())


def why_line(a: dict, b: dict, reach: dict) -> str:
    """What sets the ratio of `b` over `a` (two reachable records of one point), in one sentence: its largest
    term, and, where the racks run different kinds of decode layout, how fast the other kind goes on the rack
    that left it."""
    if b["metric"] == "single_user":
        return (f"Each rack's fastest configuration for one request: {a['hardware']} {_config(a)}, "
                f"{b['hardware']} {_config(b)}.")
    f = b.get("ratio_terms")
    if not f:
        return ""
    term = max(f, key=lambda k: abs(math.log(f[k])) if f[k] and f[k] > 0 else 0.0)
    if term == "requests_per_decode_gpu":
        out = (f"Requests per decode GPU ×{f[term]:.2f}: {a['hardware']} {_config(a)}, {b['hardware']} {_config(b)}.")
    elif term == "decode_step_speedup":
        same = _config(a) == _config(b)
        out = (f"{'The same layout on both (' + _config(a) + '); the' if same else 'The'} decode step is "
               f"{f[term]:.2f}× faster ({fmt_time(a['decode_step_ms'] / 1e3)} → {fmt_time(b['decode_step_ms'] / 1e3)}).")
    else:
        out = f"{TERM_WORDS.get(term, term).capitalize()} ×{f[term]:.2f}."
    fa, fb = _family(a["decode_layout"]), _family(b["decode_layout"])
    if fa != fb and b["metric"] == "interactivity":
        for r, kind in ((a, fb), (b, fa)):   # the rack that left the other's kind of layout
            got = reach.get(r["hardware"], {})
            top = max((v for lay, v in got.items() if _family(lay) == kind), default=None)
            if top is not None and top < float(r["target_tokens_per_s_per_user"]):
                o = b if r is a else a
                out = (f"{r['hardware']}'s {kind.upper()} layouts top out at {fmt_num(top)} tok/s/user, so here it "
                       f"runs {_config(r)} ({fmt_num(r['requests_per_decode_gpu'])} requests per decode GPU) while "
                       f"{o['hardware']} runs {_config(o)} ({fmt_num(o['requests_per_decode_gpu'])})"
                       + (f": ×{f[term]:.2f} the requests per decode GPU." if term == "requests_per_decode_gpu"
                          else f"; {out[0].lower() + out[1:]}"))
    return out


def _compared(records: list[dict]):
    """(racks, the first rack (the base of ratios), the P/D records by (rack, question), the questions in order), or
    None with fewer than two racks."""
    racks = list(dict.fromkeys(r["hardware"] for r in records))
    if len(racks) < 2:
        return None
    by = {(r["hardware"], *_key(r)): r for r in records if r.get("serving", "disagg") == "disagg"}
    return racks, racks[0], by, list(dict.fromkeys(_key(r) for r in records))


def headline_section(records: list[dict], previews: dict, reach: dict) -> str:
    """One sentence per question and rack beyond the first: the ratio, its band, the figures, what sets it."""
    compared = _compared(records)
    if compared is None:
        return ""
    racks, base, by, keys = compared
    items = []
    for hw in racks[1:]:
        for k in keys:
            a, b = by.get((base, *k)), by.get((hw, *k))
            if a is None or b is None:
                continue
            q = _question(b)
            tag = preview_tag((base, hw), previews)
            if b.get("ratio") is None:
                who = [r for r in (a, b) if not r["reachable"]]
                text = "; ".join(f"{r['hardware']} {r.get('note') or 'cannot'}" for r in who)
                items.append(f'<li><span class="q">{_e(q)}</span> {tag}<p>{_e(text)}: no ratio.</p></li>')
                continue
            per_user = b["metric"] == "single_user"
            unit = "tok/s/user" if per_user else "tok/s/GPU"
            key = "tokens_per_s_per_user" if per_user else "tokens_per_s_per_gpu"
            what = "tokens/s per user" if per_user else "tokens/s per GPU"

            def fig(r):   # the figure, and its band where the record has one (left out on a phone's width)
                bd = band_of(r, key, key)
                return _e(fmt_num(r[key])) + (f' <span class="fb">({_e(fmt_num(bd[0]))}–{_e(fmt_num(bd[1]))})</span>'
                                              if bd else "")

            sentence = f"{_e(what[0].upper() + what[1:])}: {_e(hw)} {fig(b)} against {_e(base)} {fig(a)} {unit}."
            why = why_line(a, b, reach)
            rb = band_of(b, "ratio")
            band = (f'<span class="band">band {ratio_text(rb[0])}–{ratio_text(rb[1])}</span>' if rb
                    else f'<span class="band none">{NO_BAND}</span>')
            items.append(f'<li><span class="q">{_e(q)}</span> <span class="big">{ratio_text(b["ratio"])}</span> {band} '
                         f"{tag}<p>{sentence}</p>" + (f'<p class="why">{_e(why)}</p>' if why else "") + "</li>")
    drivers = [f"{_question(r)}: {', '.join(r['ratio_band_drivers'])}" for r in records
               if r.get("ratio_band_drivers") and band_of(r, "ratio")]
    method = next((r.get("band_method") for r in records if r.get("band_method") and band_of(r, "ratio")), "")
    stat = next((r.get("interactivity_stat") for r in records if r.get("interactivity_stat")), "mean")
    note = ("Ratio: the second rack over the first, each on its own stack and at its best configuration for the "
            "question; (low–high): the band the records carry")
    if not any(band_of(r, "ratio") for r in records):
        note += f" ({NO_BAND} for these records: the figures are the best estimate only)"
    note += (f". Throughput counts cached + uncached input + output tokens per GPU of both pools; tok/s/user is the "
             f"{'mean' if stat == 'mean' else stat.upper()} over users.")
    if drivers:
        note += (f" Each ratio's band{': ' + method if method else ''}; the assumed spec fields that move it most "
                 f"(their ends' effect on the ratio) — " + "; ".join(drivers) + ".")
    return (f'<section id="headline"><ul class="head">{"".join(items)}</ul><p class="note">{_e(note)}</p></section>')


# ---------------------------------------------------------------- where the ratios come from


def ratios_section(records: list[dict], previews: dict) -> str:
    from rubinperf.render.html import table_html

    compared = _compared(records)
    if compared is None:
        return ""
    racks, base, by, keys = compared
    out = ['<section id="ratios"><h2>Where the ratios come from</h2>']
    for hw in racks[1:]:
        rows = []
        for k in keys:
            if k[0] == "single_user":
                continue
            a, b = by.get((base, *k)), by.get((hw, *k))
            if a is None or b is None:
                continue
            label = _question(b)
            if not (a["reachable"] and b["reachable"]) or b.get("ratio_terms") is None:
                rows.append([label, "—", "—", "—", "—", "—", "unreachable on " + (base if not a["reachable"] else hw)])
                continue
            f = b["ratio_terms"]
            rows.append([label,
                         f"{fmt_num(a['requests_per_decode_gpu'])} → {fmt_num(b['requests_per_decode_gpu'])} "
                         f"(×{f['requests_per_decode_gpu']:.2f})",
                         f"{fmt_time(a['decode_step_ms'] / 1e3)} → {fmt_time(b['decode_step_ms'] / 1e3)} "
                         f"(×{f['decode_step_speedup']:.2f})",
                         f"×{f['acceptance']:.2f}",
                         f"{fmt_pct(a['decode_gpu_share'])} → {fmt_pct(b['decode_gpu_share'])} "
                         f"(×{f['decode_gpu_share']:.2f})",
                         _ratio_band(b), f"{a['decode_bound']} → {b['decode_bound']}"])
        tag = preview_tag((base, hw), previews)
        out.append(f"<h3>{_e(hw)} / {_e(base)} {tag}</h3>")
        out.append(table_html(["point", "requests per decode GPU", "decode step time", "acceptance",
                               "share of GPUs in decode", "= tok/s/GPU ratio", f"bound ({base} → {hw})"], rows))
        out.append('<p class="note">tok/s/GPU ratio = requests-per-GPU ratio × step speed-up × acceptance ratio × '
                   "decode-share ratio (the same workload); requests per decode GPU: the decode batch each GPU "
                   "holds; decode share: decode GPUs / all GPUs (the rest prefill)</p>")
        split = [r for r in (by.get((hw, *k)) for k in keys) if r is not None]
        first = split[0] if split else {}
        st, st0 = first.get("stack"), first.get("baseline_stack")
        if st and st0 and any("ratio_hardware" in r for r in split):
            srows = []
            for r in split:
                h, sw = r.get("ratio_hardware"), r.get("ratio_software")
                srows.append([_question(r), ratio_text(r.get("ratio")),
                              ratio_text(h) if h is not None else f"— ({base} on {st} cannot)",
                              ratio_text(sw) if sw is not None else "—"])
            out.append(f"<h3>Silicon vs software in {_e(hw)} / {_e(base)} {tag}</h3>")
            out.append(table_html(["point", "whole ratio", f"silicon: {hw} / {base}, both on {st}",
                                   f"software: {base} on {st} / on {st0}"], srows))
            out.append(f'<p class="note">whole = silicon × software: silicon compares the racks on the same stack '
                       f"({_e(st)}); software compares {_e(base)} on {_e(st)} with {_e(base)} on {_e(st0)}.</p>")
    out.append("</section>")
    return "".join(out)


# ---------------------------------------------------------------- cost and power


def money_section(records: list[dict], basis: dict, previews: dict) -> str:
    """$/M tokens and tokens/s per kW at each compared point; `basis`: {rack: {price_usd_per_gpu_hour,
    gpu_power_w, source}} (the hardware's [economics] table)."""
    from rubinperf.render.html import table_html

    rows = []
    for r in records:
        if not r.get("reachable") or r["metric"] == "single_user":
            continue
        rows.append([_question(r), r["hardware"] + (" (preview)" if r["hardware"] in previews else ""),
                     _config(r), _usd(r.get("usd_per_m_tokens")), _usd(r.get("usd_per_m_output")),
                     _usd(r.get("usd_per_m_input")), f"{fmt_num(r.get('tokens_per_s_per_kw'))} tok/s/kW"])
    if not rows:
        return ""
    lines = "".join(
        f"<li><b>{_e(hw)}</b>: GPU rent only, at ${b['price_usd_per_gpu_hour']:.2f} per GPU-hour; power: the GPU "
        f"only, {fmt_num(b['gpu_power_w'])} W per GPU. Source: {_e(b['source'])}</li>" for hw, b in basis.items())
    return ('<section id="money"><h2>Cost and power</h2>'
            "<p>Basis: GPU rent only (no host, network, facility or staff), cached tokens counted in throughput: "
            "$/M tok charges every GPU-hour of both pools to every token (cached + uncached input + output), "
            "$/M out the decode pool's to output tokens, $/M in the prefill pool's to input tokens; tok/s/kW "
            f"divides all tokens/s per GPU by the GPU's power.</p><ul>{lines}</ul>"
            + table_html(["point", "rack", "decode × batch/rank", "$ per million tokens", "$ per million output",
                          "$ per million input", "tokens/s per kW"], rows, left=3)
            + "</section>")


# ---------------------------------------------------------------- aggregated serving


def serving_section(records: list[dict], command: str, previews: dict) -> str:
    """`rubinperf serve`'s records (one aggregated engine per rack and concurrency): throughput, and TTFT and TPOT
    as mean, median, P90 and P99."""
    from rubinperf.render.html import table_html

    if not records:
        return ""
    rows, lat = [], []
    for r in records:
        who = r["hardware"] + (" (preview)" if r["hardware"] in previews else "")
        rows.append([who, f"{r['layout']} ({r['gpus']} GPUs)", fmt_num(r["concurrency"]),
                     f"{fmt_num(r['total_tokens_per_s_per_gpu'])} tok/s/GPU",
                     f"{fmt_num(r['output_tokens_per_s_per_gpu'])} tok/s/GPU",
                     f"{fmt_num(r['tokens_per_s_per_user'])} tok/s/user", f"{fmt_num(r['request_throughput_per_s'])} req/s"])
        for m in ("ttft", "tpot"):
            lat.append([who, fmt_num(r["concurrency"]), m.upper()]
                       + [fmt_time(r[f"{s}_{m}_ms"] / 1e3) for s in ("mean", "median", "p90", "p99")])
    first = records[0]
    basis = (f"One aggregated engine per rack (prefill and decode in the same engine, its token budget per step), "
             f"driven closed loop as vllm bench serve --max-concurrency does: ISL {fmt_num(first['isl'])} / OSL "
             f"{fmt_num(first['osl'])} tokens, prefix hit {fmt_pct(first['prefix_hit_rate'])}. The same as: {command}")
    return ('<section id="serving"><h2>Aggregated serving: latency percentiles</h2>'
            f'<p class="note">{_e(basis)}</p>'
            + table_html(["rack", "layout", "clients", "total throughput", "output throughput", "per user",
                          "requests"], rows)
            + table_html(["rack", "clients", "latency", "mean", "median", "P90", "P99"], lat, left=3)
            + '<p class="note">TTFT: time to first token (queueing included); TPOT: time per output token after '
              "the first.</p></section>")


# ---------------------------------------------------------------- validation


def _miss(r: dict) -> str:
    return f"{r['id']} (" + ("unreachable" if r.get("ratio") is None else f"{r['ratio']:.2f}× the published figure") + ")"


def ledger_section(points: list[dict] | None, families: list[dict] | None) -> str:
    """`rubinperf validate`'s summary: published points in band of all (the misses listed); one verdict line per
    family of evidence where the accuracy ledger's families are given. Neither given: how to add them."""
    from rubinperf.render.html import table_html

    if points is None and not families:
        return ('<section id="validation"><h2>Validation: not run for this report</h2><p>How far to trust these '
                "figures: <code>rubinperf validate</code> checks every published point against its band and prints "
                "the accuracy ledger (held-out error of kernels, steps and serving points, one verdict per family). "
                "<code>rubinperf report --validate</code> adds its summary here (seconds more), "
                "<code>--validation FILE</code> reads it from <code>rubinperf validate --json</code>.</p></section>")
    points = points or []
    hits = sum(bool(r.get("in_band")) for r in points)
    head = f"{hits} of {len(points)} published points in band" if points else "the accuracy ledger"
    out = [f'<section id="validation"><h2>Validation: {_e(head)}</h2>']
    if points:
        missed = [r for r in points if not r.get("in_band")]
        out.append("<p>Each published point (validation/published.toml) predicted and checked against its band, "
                   "as <code>rubinperf validate</code> does."
                   + (" Misses: " + _e(", ".join(_miss(r) for r in missed)) + "." if missed else "") + "</p>")
    if families:
        items = "".join(f"<li><b>{_e(f['family'])}</b>: {_e(f.get('verdict', ''))}</li>" for f in families)
        out.append(f"<p>The accuracy ledger, one verdict per family of evidence (error on rows no fit saw):</p>"
                   f"<ul class=\"verdicts\">{items}</ul>")
    elif points:
        out.append('<p class="note">Per-family verdicts (held-out error of kernels, steps and serving points): '
                   "<code>rubinperf validate</code> prints them where the core keeps an accuracy ledger.</p>")
    rows = [[r["id"] + (" (fitted)" if r.get("fitted") else ""), r["hardware"], fmt_num(r["published"]),
             fmt_num(r.get("predicted")), "—" if r.get("ratio") is None else f"{r['ratio']:.2f}",
             f"{r['band'][0]:.2f}–{r['band'][1]:.2f}", "in band" if r.get("in_band") else "MISS"] for r in points]
    if rows:
        out.append("<details><summary>every point</summary>"
                   + table_html(["point", "rack", "published", "predicted", "predicted / published", "band", ""],
                                rows, left=2)
                   + '<p class="note">band: the predicted / published ratios the point accepts; published and '
                     "predicted in the point's own unit (validation/published.toml)</p></details>")
    out.append("</section>")
    return "".join(out)
