"""Tables of `pareto` and `compare` (presentation only); their terminal chart is rubinperf.render.chart, the
--plot figures rubinperf.render.plots.

Everything here reads records built by `rubinperf.serving` (pareto, pools); nothing
computes a formula.
"""

from __future__ import annotations

import math

from rubinperf.render.output import print_out
from rubinperf.render.tables import col, table
from rubinperf.units import fmt_num, fmt_pct, fmt_time


def _usd(v) -> str:
    if v is None or not math.isfinite(float(v)):
        return "—"
    v = float(v)
    if v >= 1 or v == 0:
        return f"${v:,.2f}"
    return f"${v:.{2 - math.floor(math.log10(v))}f}"     # three significant digits, no exponent


def _ratio(v) -> str:
    return "—" if v is None else f"{float(v):.2f}×"


def _config(r: dict, prefill: bool = False) -> str:
    if r.get("serving") == "agg":   # an aggregated engine at a concurrency: its running batch per rank
        return f"{r['decode_layout']} × {fmt_num(r['batch_per_rank'])} (c {fmt_num(r['concurrency'])})"
    text = f"{r['decode_layout']} × {fmt_num(r['batch_per_rank'])}"
    if r.get("pools"):
        text = f"{r['pools']} {text}"
    return f"{text} (prefill {r['prefill_layout']})" if prefill else text


# ---------------------------------------------------------------- pareto


def thin(records: list[dict], n: int) -> list[dict]:
    """At most `n` records spread evenly over log interactivity, keeping both ends."""
    recs = sorted(records, key=lambda r: r["tokens_per_s_per_user"])
    if n <= 0 or len(recs) <= n:
        return recs
    if n == 1:
        return [max(recs, key=lambda r: r["tokens_per_s_per_gpu"])]
    lo, hi = math.log(recs[0]["tokens_per_s_per_user"]), math.log(recs[-1]["tokens_per_s_per_user"])
    chosen = []
    for k in range(n):
        target = lo + (hi - lo) * k / (n - 1)
        best = min(recs, key=lambda r: abs(math.log(r["tokens_per_s_per_user"]) - target))
        if best not in chosen:
            chosen.append(best)
    return sorted(chosen, key=lambda r: r["tokens_per_s_per_user"])


def pareto_tables(records: list[dict], notes: dict, rows: int = 14, wins: dict | None = None) -> None:
    """One frontier table per rack: each row a non-dominated configuration. With aggregated engines among the
    records, a column says which serving each row is (both servings: each frontier thinned on its own), and
    `wins` ({rack: [(serving, from, to)]}) gives the line under the table that says which wins where."""
    hardware = list(dict.fromkeys(r["hardware"] for r in records))
    servings = list(dict.fromkeys(r.get("serving", "disagg") for r in records))
    both = len(servings) > 1
    stat = stat_label(records[0] if records else {})
    cols = [col(f"tok/s/user ({stat})", short="tok/s/user"), col("tok/s/GPU"), col("tok/s/GPU band", short="band", drop=1),
            col("out tok/s/GPU", short="out/GPU", drop=3)]
    if both:
        cols.append(col("serving", "left", short="srv", wrap=False))
    cols += [col("decode × batch/rank", "left", short="decode×batch", wrap=False), col("step", drop=5),
             col("bound", "left", drop=4), col("prefill:decode GPUs", short="P:D GPUs", drop=6), col("TTFT", drop=7),
             col("$/M in", drop=9), col("$/M out", drop=8), col("$/M all", drop=2), col("tok/s/kW", drop=10)]
    for hw in hardware:
        mine = [r for r in records if r["hardware"] == hw]
        pools = [r for r in mine if r.get("serving", "disagg") == "disagg"]
        front = [r for r in mine if r["on_frontier"]]
        shown = sorted((r for sv in servings for r in thin([r for r in front if r.get("serving", "disagg") == sv], rows)),
                       key=lambda r: r["tokens_per_s_per_user"])
        several = len({r["prefill_layout"] for r in pools}) > 1
        body = []
        for r in shown:
            agg = r.get("serving") == "agg"
            config = _config(r, several)
            band = (f"{fmt_num(r['low'])}-{fmt_num(r['high'])}" if r.get("low") is not None
                    and r.get("high") is not None else "—")
            body.append([fmt_num(r["tokens_per_s_per_user"]), fmt_num(r["tokens_per_s_per_gpu"]), band,
                         fmt_num(r.get("output_tokens_per_s_per_gpu"))] + ([r.get("serving", "disagg")] if both else [])
                        + [config, fmt_time(r["decode_step_ms"] / 1e3), r["decode_bound"],
                           "agg" if agg else f"{r['prefill_gpus_per_decode_gpu']:.2f}", fmt_time(r["ttft_ms"] / 1e3),
                           _usd(r["usd_per_m_input"]), _usd(r["usd_per_m_output"]), _usd(r["usd_per_m_tokens"]),
                           fmt_num(r["tokens_per_s_per_kw"])])
        feasible = sum(r["feasible"] for r in mine)
        first = mine[0] if mine else {}
        prefill = ", ".join(dict.fromkeys(r["prefill_layout"] for r in pools))
        shape = {"disagg": f"prefill {prefill}", "agg": "aggregated engines"}
        how = "; ".join(shape[sv] if sv != "disagg" or prefill else "disaggregated" for sv in servings)
        title = (f"{hw}: Pareto frontier of {first.get('model', '')} on workload {first.get('workload', '')} "
                 f"({how}, k = {first.get('draft_tokens', '')}, acceptance {fmt_num(first.get('acceptance', 0))})")
        caption = [f"{len(mine)} points swept, {feasible} feasible, {len(front)} on the frontier"
                   + (" of its serving" if both else "")
                   + (f" ({len(shown)} shown; --json for all)" if len(shown) < len(front) else "")]
        caption += notes.get(hw, [])
        if any(r.get("low") is not None for r in shown):
            caption.append("band: the point at both ends of each assumed spec field's range (the decode step's "
                           "speed), in quadrature; --json: band_drivers")
        if pools:
            caption.append("tok/s/GPU = cached + uncached input + output tokens over prefill and decode GPUs; "
                           "$/M in: prefill-pool GPU-hours per input token, $/M out: decode-pool GPU-hours per output token")
        if len(pools) < len(mine):
            caption.append("agg: one engine prefills and decodes (within the stack's aggregated token budget), closed loop at "
                           "c clients (rubinperf serve); tok/s/GPU over the engine's GPUs; step: its mean step; "
                           "TTFT: mean, queueing included")
        print_out(table(title, cols, body, caption="\n".join(caption)))
        if wins and wins.get(hw):
            print_out(wins_line(hw, wins[hw]))
    for line in notes.get("", []):
        print_out(line)


def wins_line(hw: str, runs: list) -> str:
    """'gb300-nvl72: agg wins up to 57 tok/s/user, disagg above' from (serving, from, to) runs."""
    if len(runs) == 1:
        return f"{hw}: {runs[0][0]} wins at every interactivity (up to {fmt_num(runs[0][2])} tok/s/user)"
    parts = []
    for k, (who, lo, hi) in enumerate(runs):
        if k == 0:
            parts.append(f"{who} wins up to {fmt_num(hi)} tok/s/user")
        elif k == len(runs) - 1:
            parts.append(f"{who} above {fmt_num(lo)} (to {fmt_num(hi)})")
        else:
            parts.append(f"{who} from {fmt_num(lo)} to {fmt_num(hi)}")
    return f"{hw}: " + ", ".join(parts)


# ---------------------------------------------------------------- compare


def stat_label(r: dict) -> str:
    """'P90', 'P50' or 'mean': the statistic of tokens/s per user a record's figures are."""
    stat = r.get("interactivity_stat") or "mean"
    return stat if stat == "mean" else stat.upper()


def _stat_words(r: dict) -> str:
    stat = r.get("interactivity_stat") or "mean"
    return {"p90": "P90: the speed 90% of users reach", "p50": "P50, the median user", "mean": "mean"}[stat]


def _metric_label(r: dict) -> str:
    if r["metric"] == "peak":
        return "peak throughput"
    if r["metric"] == "interactivity":
        stat = r.get("interactivity_stat") or ""
        return f"at {stat.upper() + ' ' if stat and stat != 'mean' else ''}≥ {fmt_num(r['target_tokens_per_s_per_user'])} tok/s/user"
    return "best single-user speed"


def _word(number_text: str) -> str:
    """A formatted number as one word ("19.8 k" -> "19.8k"): table cells wrap at spaces."""
    return number_text.replace(" ", "")


def compare_tables(records: list[dict], kernels: int = 6, note: str = "", wins: dict | None = None) -> None:
    """The racks (each rack and serving where the records hold more than one) side by side; `wins`: the line
    under the table per rack that says which serving wins where."""
    from rubinperf.render.chart import series_names, series_name

    hardware, servings = series_names(records)

    def who(r):
        return series_name(r, servings)

    if not hardware:
        return
    base = hardware[0]
    others = hardware[1:]
    by = {(who(r), r["metric"], r["target_tokens_per_s_per_user"]): r for r in records}
    keys = list(dict.fromkeys((r["metric"], r["target_tokens_per_s_per_user"]) for r in records))
    first = next((r for r in records if r.get("model")), records[0])

    stack_of = {who(r): r.get("stack") for r in records}
    cols = ([col("", "left", min_width=20)]
            + [col(f"{hw} ({stack_of[hw]})" if stack_of.get(hw) else hw, short=hw, wrap=True, min_width=16)
               for hw in hardware]
            + [col(f"{hw} / {base}", wrap=True, min_width=8) for hw in others])
    rows = []
    for metric, level in keys:
        recs = [by[(hw, metric, level)] for hw in hardware]
        label = _metric_label(recs[0])
        unit = "tok/s/user" if metric == "single_user" else "tok/s/GPU"
        cells = []
        for r in recs:
            if not r["reachable"]:
                cells.append(r["note"])
                continue
            main = r["tokens_per_s_per_user"] if metric == "single_user" else r["tokens_per_s_per_gpu"]
            # Two lines: the figure, its band and its unit, then the configuration and the other axis, each number one
            # word ("1.19M (1.13M-1.34M)", "at 65.5/user"), so that a narrow column breaks between words, never
            # inside a number.
            side = (f"{_word(fmt_num(r['tokens_per_s_per_gpu']))}/GPU" if metric == "single_user"
                    else f"{_word(fmt_num(r['tokens_per_s_per_user']))}/user")
            several = r["prefill_layout"] != recs[0].get("prefill_layout", r["prefill_layout"])
            band = (f" ({_word(fmt_num(r['low']))}-{_word(fmt_num(r['high']))})" if r.get("low") is not None
                    and r.get("high") is not None else "")
            cells.append(f"{_word(fmt_num(main))}{band} {unit}\n{_config(r, several)} at {side}")
        ratios = []
        for r in recs[1:]:
            if r["ratio"] is not None:
                band = (f" ({r['ratio_low']:.3g}-{r['ratio_high']:.3g})" if r.get("ratio_low") is not None
                        and r.get("ratio_high") is not None else "")
                ratios.append(_ratio(r["ratio"]) + band)
            elif not r["reachable"] and not recs[0]["reachable"]:
                ratios.append("— (neither can)")
            elif not r["reachable"]:
                ratios.append(f"— ({who(r)} cannot)")
            else:
                ratios.append(f"— ({base} cannot)")
        rows.append([label] + cells + ratios)
    # Money and power at the peak.
    peak = [by.get((hw, "peak", None)) for hw in hardware]
    if all(p and p["reachable"] for p in peak):
        def figure(v):
            return _word(fmt_num(v))

        for label, key, fmt in (("output tok/s/GPU at peak", "output_tokens_per_s_per_gpu", figure),
                                ("$/M input tokens at peak", "usd_per_m_input", _usd),
                                ("$/M output tokens at peak", "usd_per_m_output", _usd),
                                ("$/M tokens (all) at peak", "usd_per_m_tokens", _usd),
                                ("tok/s per kW at peak", "tokens_per_s_per_kw", figure),
                                ("TTFT (prefill + KV moves)", "ttft_ms", None)):
            vals = [p[key] for p in peak]
            if fmt is None:
                cells = [fmt_time(v / 1e3) for v in vals]
            else:
                cells = [fmt(v) for v in vals]
            rows.append([label] + cells + [_ratio(v / vals[0]) if vals[0] and v is not None else "—" for v in vals[1:]])
    title = (f"{first.get('model', '')} on workload {first.get('workload', '')}: "
             + " vs ".join(hardware))
    caption = ("throughput = cached + uncached input + output tokens per second over every prefill and decode GPU; "
               f"interactivity = decode tokens/s per user ({_stat_words(first)}, speculative decoding included); "
               "at ≥ X: the best configuration whose users all get at least X; (low-high): the band the assumed "
               "spec fields' ranges give (ends of each range, in quadrature; --json: band_drivers names them)"
               + (f"; {note}" if note else "")
               + ("; stacks: " + ", ".join(f"{hw} on {stack_of[hw]}" for hw in hardware) if all(stack_of.values()) else ""))
    print_out(table(title, cols, rows, caption=caption))
    for rack, runs in (wins or {}).items():
        if runs:
            print_out(wins_line(rack, runs))

    # Where the throughput ratios come from (between two P/D deployments).
    for hw in others:
        if not any("ratio_terms" in by[(hw, m, lv)] for m, lv in keys if by[(hw, m, lv)]["reachable"]):
            continue
        tcols = [col("point", "left", min_width=10), col("requests per decode GPU", short="req/GPU", wrap=True, min_width=9),
                 col("decode step", short="step", wrap=True, min_width=10), col("acceptance", short="accept."),
                 col("decode share of GPUs", short="decode share", wrap=True, min_width=9),
                 col("= tok/s/GPU ratio", short="= ratio"), col(f"bound ({base} → {hw})", "left", short="bound", drop=1)]
        trows = []
        for metric, level in keys:
            if metric == "single_user":
                continue
            a, b = by[(base, metric, level)], by[(hw, metric, level)]
            label = _metric_label(a)
            if not (a["reachable"] and b["reachable"]):
                trows.append([label, "—", "—", "—", "—", "—", "unreachable on " + (base if not a["reachable"] else hw)])
                continue
            f = b.get("ratio_terms")
            if f is None:
                continue
            a_req, b_req = a["requests_per_decode_gpu"], b["requests_per_decode_gpu"]
            a_sh, b_sh = a["decode_gpu_share"], b["decode_gpu_share"]
            trows.append([
                label,
                f"{fmt_num(a_req)} → {fmt_num(b_req)}  ×{f['requests_per_decode_gpu']:.2f}",
                f"{fmt_time(a['decode_step_ms'] / 1e3)} → {fmt_time(b['decode_step_ms'] / 1e3)}  "
                f"×{f['decode_step_speedup']:.2f}",
                f"×{f['acceptance']:.2f}",
                f"{fmt_pct(a_sh)} → {fmt_pct(b_sh)}  ×{f['decode_gpu_share']:.2f}",
                _ratio(b["ratio"]),
                f"{a['decode_bound']} → {b['decode_bound']}",
            ])
        cap = ("tok/s/GPU ratio = requests-per-GPU ratio × step speed-up × acceptance ratio × decode-share ratio "
               "(× tokens per output token, the same workload); decode share = decode GPUs / all GPUs")
        print_out(table(f"Where the {hw} / {base} throughput ratios come from", tcols, trows, caption=cap))
        if any("ratio_hardware" in by[(hw, m, lv)] for m, lv in keys):
            _split_table(by, keys, base, hw)

    if kernels > 0:
        for metric, level in keys:
            recs = [by[(hw, metric, level)] for hw in hardware]
            if not all(r["reachable"] and r["kernels"] for r in recs):
                continue
            print_out(_kernel_table(recs, kernels))


def _split_table(by: dict, keys: list, base: str, hw: str) -> None:
    """Silicon vs software: each ratio of `hw` (its stack) over `base` (its stack) as hardware x software."""
    first = by[(hw, keys[0][0], keys[0][1])]
    st, st0 = first.get("stack"), first.get("baseline_stack")
    if not st or not st0:
        return
    cols = [col("point", "left", min_width=10), col("whole ratio", short="whole"),
            col(f"silicon: {hw} / {base}, both on {st}", short="silicon", wrap=True, min_width=10),
            col(f"software: {base} on {st} / on {st0}", short="software", wrap=True, min_width=10)]
    rows = []
    for metric, level in keys:
        r = by[(hw, metric, level)]
        label = _metric_label(r)
        if r.get("ratio") is None:
            rows.append([label, "—", "—", "—"])
            continue
        h, sw = r.get("ratio_hardware"), r.get("ratio_software")
        rows.append([label, _ratio(r["ratio"]), _ratio(h) if h is not None else f"— ({base} on {st} cannot)",
                     _ratio(sw) if sw is not None else "—"])
    cap = (f"whole = {hw} on {st} / {base} on {st0} = silicon × software: silicon compares the racks on the same "
           f"stack ({st}), software compares {base} on {st} with {base} on {st0}; ask for {base} with another "
           f"stack with -H {first.get('baseline', base)} --stack NAME")
    print_out(table(f"Silicon vs software in {hw} / {base}", cols, rows, caption=cap))


def _kernel_table(recs: list[dict], n: int):
    base = recs[0]
    names = [k["kernel"] for k in base["kernels"]][:n]
    for r in recs[1:]:
        for k in r["kernels"][:n]:
            if k["kernel"] not in names:
                names.append(k["kernel"])
    cols = [col("decode kernel", "left", min_width=18)] + \
        [col(f"{r['hardware']} per token", short=r["hardware"], wrap=True, min_width=8) for r in recs] + \
        [col(f"{r['hardware']} / {base['hardware']}", short="ratio" if len(recs) == 2 else None) for r in recs[1:]]
    rows = []
    lookup = [{k["kernel"]: k for k in r["kernels"]} for r in recs]
    for name in names:
        cells, vals = [], []
        for look in lookup:
            k = look.get(name)
            vals.append(k["us_per_token"] if k else 0.0)
            cells.append(f"{fmt_time(k['us_per_token'] * 1e-6)} ({k['bound']})" if k else "—")
        rows.append([name] + cells + [(f"{v / vals[0]:.2f}×" if vals[0] else "—") for v in vals[1:]])
    rest = [sum(k["us_per_token"] for k in r["kernels"] if k["kernel"] not in names) for r in recs]
    tot = [sum(k["us_per_token"] for k in r["kernels"]) for r in recs]
    rows.append(["other kernels"] + [fmt_time(v * 1e-6) for v in rest] + [(f"{v / rest[0]:.2f}×" if rest[0] else "—") for v in rest[1:]])
    rows.append(["GPU time per output token"] + [fmt_time(v * 1e-6) for v in tot] + [f"{v / tot[0]:.2f}×" for v in tot[1:]])
    title = (f"{_metric_label(base)}: decode GPU time per output token per GPU "
             + ", ".join(f"{r['hardware']} {_config(r)}" for r in recs))
    return table(title, cols, rows,
                        caption="time of one decode GPU per emitted token (kernel time × GPUs / tokens per step); "
                                "ratios below 1× mean the other rack spends less time on that kernel")


def _delta(f: dict, fmt) -> list[str]:
    sign = "+" if f["delta"] > 0 else "−" if f["delta"] < 0 else ""
    pct = "" if f["delta_frac"] is None else f"{sign}{fmt_pct(abs(f['delta_frac']))}"
    return [fmt(f["before"]), fmt(f["after"]), sign + fmt(abs(f["delta"])) if f["delta"] else "0", pct]


def compare_whatif_tables(diffs: list[dict], kernels: int = 6) -> None:
    """`compare --set ... --baseline`: per rack, each compared point before and after the what-if, then (up to
    `kernels` per point) the decode kernels whose time at the point moved most."""
    what = " ".join("--set " + s for s in diffs[0]["sets"]) if diffs else ""
    for hw in dict.fromkeys(d["hardware"] for d in diffs):
        rows = []
        for d in (x for x in diffs if x["hardware"] == hw):
            label = _metric_label({**d, "interactivity_stat": None})
            if not d["point"]:
                rows.append([label, "", "", "", "",
                             "unreachable " + ("before" if not d["reachable_before"] else "after")])
                continue
            p = d["point"]
            lay = d["decode_layout_before"] if d["decode_layout_before"] == d["decode_layout_after"] \
                else f"{d['decode_layout_before']} → {d['decode_layout_after']}"
            rows.append([label, *_delta(p["tokens_per_s_per_gpu"], fmt_num),
                         f"{lay}, batch {fmt_num(p['batch_per_rank']['before'])} → {fmt_num(p['batch_per_rank']['after'])}"])
        print_out(table(f"{hw}: tok/s/GPU before and after", [col("point", "left"), col("before"), col("after"),
                                                                  col("Δ"), col("Δ %"), col("decode", "left", drop=1)],
                        rows, caption=f"what-if: {what}"))
        if kernels <= 0:
            continue
        for d in (x for x in diffs if x["hardware"] == hw):
            moved = [k for k in d["kernels"] if k["delta_ms"]][:kernels]
            if not moved:
                continue
            krows = [[k["kernel"], fmt_time(k["before_ms"] / 1e3), fmt_time(k["after_ms"] / 1e3),
                      ("+" if k["delta_ms"] > 0 else "−") + fmt_time(abs(k["delta_ms"]) / 1e3)] for k in moved]
            print_out(table(f"{hw} {_metric_label({**d, 'interactivity_stat': None})}: kernels",
                            [col("decode kernel (per step)", "left", min_width=24), col("before"), col("after"),
                             col("Δ")], krows, caption="the largest changes"))
