"""Tables of the step-level commands: estimate, kernel and validate (presentation only)."""

from __future__ import annotations

from rubinperf.render.output import print_out
from rubinperf.render.tables import col, table
from rubinperf.units import fmt_num, fmt_pct, fmt_time, fmt_tokens, si


def estimate_tables(records: list[dict], breakdown: bool = False) -> None:
    cols = [col("hardware", "left"), col("layout", "left"), col("phase", "left"),
            col("batch/rank", short="batch", drop=3), col("context", short="ctx", drop=4),
            col("step"), col("SOL", drop=5), col("% roofline", short="%roof", drop=6),
            col("tok/s/GPU", short="t/s/GPU"), col("tok/s/user (mean)", short="t/s/user"), col("bound", "left"), col("largest kernel", "left", drop=7, min_width=12)]
    rows = []
    for r in records:
        top = r["breakdown"][0]
        top_name = top["kernel"].split(" (")[0]
        rows.append([r["hardware"], r["layout"], r["phase"], fmt_num(r["batch_per_rank"]),
                     fmt_tokens(r["context_tokens"]), fmt_time(r["step_time_ms"] / 1e3),
                     fmt_time(r["sol_step_time_ms"] / 1e3), fmt_pct(r["fraction_of_roofline"]),
                     fmt_num(r["tokens_per_s_per_gpu"]), fmt_num(r["tokens_per_s_per_user"]),
                     r["bound"], f"{top_name} {fmt_pct(top['share_of_step'])}"])
        if "low" in r:
            rows[-1].insert(9, "—" if r["low"] is None else f"{fmt_num(r['low'])}-{fmt_num(r['high'])}")
    if records and "low" in records[0]:
        cols.insert(9, col("tok/s/GPU band", short="band"))
    model = records[0]["model"] if records else ""
    if records and records[0].get("model_params"):
        r0 = records[0]
        model += f" ({si(r0['model_params'])} params, {si(r0['model_active_params'])} active)"
    caption = ("decode: tok/s = accepted tokens (batch x acceptance / step); prefill: new tokens. "
               "step = GPU + exposed host; SOL = speed of light"
               "\ntok/s/user: the mean over users")
    if records and "low" in records[0]:
        caption += ("\nband: the step at both ends of each assumed field's range, in quadrature; set by "
                    + "; ".join(f"{r['hardware']} {r['layout']}: {', '.join(r['band_drivers'][:2])}" for r in records
                                if r.get("band_drivers")))
    notes = list(dict.fromkeys([r["note"] for r in records if r.get("note")]
                               + [why for r in records for why in r.get("left_out", ())]))
    if notes:
        caption += "\n" + "\n".join(notes)
    print_out(table(f"{model}: one engine step", cols, rows, caption=caption))
    latency_table(records)
    if breakdown:
        for r in records:
            bcols = [col("kernel", "left", min_width=24), col("part", "left", drop=3), col("time"), col("SOL", drop=4),
                     col("% roofline", short="%roof", drop=2), col("share"), col("kernels", short="kern.", drop=7),
                     col("FLOPs", drop=6), col("bytes", drop=5), col("bound", "left")]
            brows = [[b["kernel"], b["part"], fmt_time(b["time_ms"] / 1e3), fmt_time(b["sol_time_ms"] / 1e3),
                      fmt_pct(b["fraction_of_roofline"]), fmt_pct(b["share_of_step"]), fmt_num(b.get("kernels", 0)),
                      si(b["flops"]), si(b["bytes"], "B"), b["bound"]] for b in r["breakdown"]]
            title = (f"{r['hardware']} {r['layout']} {r['phase']}: batch {fmt_num(r['batch_per_rank'])}/rank, "
                     f"context {fmt_tokens(r['context_tokens'])}, step {fmt_time(r['step_time_ms'] / 1e3)} "
                     f"(GPU {fmt_time(r['gpu_time_ms'] / 1e3)}, CPU {fmt_time(r['cpu_time_ms'] / 1e3)}, "
                     f"of it exposed {fmt_time(r['exposed_host_time_ms'] / 1e3)})"
                     + (f", {fmt_num(r['kernels_per_step'])} kernels" if "kernels_per_step" in r else ""))
            print_out(table(title, bcols, brows))


def latency_table(records: list[dict]) -> None:
    """What one request sees at each step: TPOT and ITL (mean, P90) of a decode point, TTFT of a prefill one."""
    recs = [r for r in records if "mean_tpot_ms" in r]
    if not recs:
        return
    cols = [col("hardware", "left"), col("layout", "left"), col("phase", "left"),
            col("TPOT (mean)", short="TPOT mean"), col("TPOT P90"), col("ITL (mean)", short="ITL mean"),
            col("ITL P90"), col("GPU/ITL", drop=2), col("TTFT"), col("KV transfer", short="KV", drop=1)]
    rows = [[r["hardware"], r["layout"], r["phase"],
             *(_ms(r.get(key)) for key in ("mean_tpot_ms", "p90_tpot_ms", "mean_itl_ms", "p90_itl_ms")),
             "" if r.get("itl_gpu_share") is None else fmt_pct(r["itl_gpu_share"]),
             _ms(r.get("mean_ttft_ms")), _ms(r.get("kv_transfer_ms"))] for r in recs]
    used = [i for i in range(len(cols)) if any(row[i] for row in rows)]   # a phase's columns where it has rows
    cols, rows = [cols[i] for i in used], [[row[i] for i in used] for row in rows]
    phases = {r["phase"] for r in recs}
    lines = []
    if "decode" in phases:
        lines += ["TPOT = step / acceptance, its P90 over requests' acceptance and the step's spread",
                  "ITL = the decode step (an aggregated engine's prefill chunks add to it: `serve`)",
                  "GPU/ITL = GPU time / step"]
    if "prefill" in phases:
        links = sorted({"NVLink" if r["kv_transfer_link"] == "nvlink" else "the NIC" for r in recs
                        if r.get("kv_transfer_link")})
        lines += [f"TTFT = the prefill step + its KV sent to the decode pool (over {' or '.join(links)})"]
    print_out(table("per-request latency at each step", cols, rows, caption="\n".join(lines)))


def _ms(value) -> str:
    return "" if value is None else fmt_time(value / 1e3)


def validate_table(records: list[dict]) -> None:
    cols = [col("point", "left", min_width=16), col("metric", "left", drop=6), col("hardware", "left", drop=4),
            col("layout", "left", drop=5), col("published", short="publ."), col("0.1.0", drop=7),
            col("predicted", short="pred."), col("ratio"), col("band", drop=2), col("", "left"),
            col("why", "left", drop=3, min_width=24), col("changed since 0.1.0", "left", drop=8, min_width=24)]
    rows = [[r["id"] + (" (fitted)" if r["fitted"] else ""), r["metric"], r["hardware"], r["layout"],
             fmt_num(r["published"]), fmt_num(r["previous"]) if r.get("previous") else "",
             fmt_num(r["predicted"]),
             "—" if r["ratio"] is None else f"{r['ratio']:.2f}",
             f"{r['band'][0]:.2f}-{r['band'][1]:.2f}",
             "in band" if r["in_band"] else "MISS" if r.get("reachable", True) else "unreachable", r["detail"],
             r.get("changed", "")]
            for r in records]
    hits = sum(r["in_band"] for r in records)
    print_out(table(f"Validation: {hits} of {len(records)} points in band", cols, rows,
                                  caption="ratio = predicted / published; 0.1.0 = what rubinperf 0.1.0 "
                                          "predicted; band: what the held-out error of the evidence beneath the "
                                          "point allows (ledger below; --json: band_from), never wider than the "
                                          "file's; sources: validation/published.toml"))


def kernel_table(rec: dict) -> None:
    """One kernel's record (`rubinperf kernel KIND`): its times, terms, bound, FLOPs and bytes."""
    shape = ", ".join(f"{k}={v}" for k, v in rec.items() if k not in {"kernel", "hardware", "launch"} and not k.endswith(("_ms", "_bytes")) and k not in {"bound", "flops", "bytes", "fraction_of_roofline"})
    rows = [
        ["expected time", fmt_time(rec["time_ms"] / 1e3)],
        ["speed of light", fmt_time(rec["sol_time_ms"] / 1e3)],
        ["% of roofline", fmt_pct(rec["fraction_of_roofline"])],
        ["bound", rec["bound"]],
        ["compute term", fmt_time(rec["compute_ms"] / 1e3)],
        ["memory term", fmt_time(rec["memory_ms"] / 1e3)],
        ["parallelism term", fmt_time(rec["parallelism_ms"] / 1e3)],
        ["link term", fmt_time(rec["comm_ms"] / 1e3)],
        ["latency term", fmt_time(rec["latency_ms"] / 1e3)],
        ["FLOPs", si(rec["flops"], "FLOP")],
        ["bytes", si(rec["bytes"], "B")],
    ]
    if rec.get("nvlink_bytes") or rec.get("scale_out_bytes"):
        rows += [["NVLink bytes sent", si(rec["nvlink_bytes"], "B")],
                 ["NIC bytes sent", si(rec["scale_out_bytes"], "B")],
                 ["NIC time (of link)", fmt_time(rec["scale_out_ms"] / 1e3)]]
    print_out(table(f"{rec['kernel']} on {rec['hardware']}, {rec['launch']} launch  ({shape})", [("", "left"), ("", "right")], rows))


def _signed_time(ms: float) -> str:
    return ("+" if ms > 0 else "−" if ms < 0 else "") + fmt_time(abs(ms) / 1e3) if ms else "0"


def _signed_pct(frac) -> str:
    return "" if frac is None else ("+" if frac > 0 else "−" if frac < 0 else "") + fmt_pct(abs(frac))


def whatif_tables(diffs: list[dict]) -> None:
    """`estimate --set ... --baseline`: per step, the step's fields before / after / change, then the kernels that
    moved, largest change first, with the roofline term that moved the most."""
    for d in diffs:
        step = d["step"]
        srows = []
        for key, label, fmt in (("step_time_ms", "step", "t"), ("gpu_time_ms", "GPU time", "t"),
                                ("exposed_host_time_ms", "exposed host", "t"), ("cpu_time_ms", "CPU time", "t"),
                                ("tokens_per_s_per_gpu", "tok/s/GPU", "n"), ("tokens_per_s_per_user", "tok/s/user", "n")):
            if key not in step:
                continue
            f = step[key]
            if fmt == "t":
                srows.append([label, fmt_time(f["before"] / 1e3), fmt_time(f["after"] / 1e3), _signed_time(f["delta"]),
                              _signed_pct(f["delta_frac"])])
            else:
                sign = "+" if f["delta"] > 0 else "−" if f["delta"] < 0 else ""
                srows.append([label, fmt_num(f["before"]), fmt_num(f["after"]), sign + fmt_num(abs(f["delta"])),
                              _signed_pct(f["delta_frac"])])
        title = f"{d['hardware']} {d['layout']} {d['phase']}: before and after"
        print_out(table(title, [col("", "left"), col("before"), col("after"), col("Δ"), col("Δ %")], srows,
                        caption="what-if: " + " ".join("--set " + s for s in d["sets"])))
        # (a change within rounding, 1e-12 of the time, is none: a term's x * (1 / d) against its sum's last bit)
        moved = [k for k in d["kernels"] if abs(k["delta_ms"]) > 1e-12 * abs(k["before_ms"])]
        kcols = [col("kernel", "left", min_width=24), col("part", "left", drop=3), col("before"), col("after"),
                 col("Δ"), col("Δ %", drop=2), col("term moved", "left", drop=1), col("bound", "left", drop=4)]
        krows = [[k["kernel"], k["part"], fmt_time(k["before_ms"] / 1e3), fmt_time(k["after_ms"] / 1e3),
                  _signed_time(k["delta_ms"]), _signed_pct(k["delta_frac"]),
                  f"{k['term']} {_signed_time(k['term_delta_ms'])}" if k["term"] else "",
                  k["bound_after"] if k["bound_before"] == k["bound_after"]
                  else f"{k['bound_before']} → {k['bound_after']}"] for k in moved]
        unchanged = len(d["kernels"]) - len(moved)
        caption = ("term moved: the roofline term of the kernel whose time changed the most"
                   + (f"\n{unchanged} kernel(s) unchanged" if unchanged else ""))
        print_out(table("kernels that moved, largest change first", kcols, krows, caption=caption))


def kernel_evidence_table(section: dict) -> None:
    """The kernel section of `rubinperf validate --kernels`: every evidence row, measured against predicted, then the
    median and worst |ln(measured / predicted)| per kernel family, GPU and split."""
    cols = [col("row", "left", min_width=16), col("kernel", "left", drop=3), col("GPU", "left"),
            col("split", "left", drop=2), col("measured"), col("predicted", short="pred."), col("meas/pred"),
            col("bound", "left", drop=1), col("source", "left", drop=4, min_width=12)]
    rows = [[r["id"], r["kernel"], r["gpu"], r["split"], fmt_time(r["measured_us"] / 1e6),
             "—" if r["predicted_us"] is None else fmt_time(r["predicted_us"] / 1e6),
             "—" if r["predicted_us"] is None else f"{r['ratio']:.2f}", r["bound"] or f"skipped: {r['skipped']}",
             r["source"]] for r in section["rows"]]
    print_out(table(f"Kernel evidence: {sum(r['predicted_us'] is not None for r in section['rows'])} of "
                    f"{len(section['rows'])} rows predicted", cols, rows,
                    caption="meas/pred = measured / predicted, each row through the kernel functions the step uses on "
                            "its GPU's spec; sources: calibration/public/kernels.csv; split: " + section["split"]))
    cols = [col("kernel", "left"), col("GPU", "left"), col("split", "left"), col("rows"), col("median |ln|"),
            col("worst |ln|"), col("worst row", "left", drop=1)]
    rows = [[s["kernel"], s["gpu"], s["split"], str(s["rows"]), f"{s['median_abs_log']:.3f}",
             f"{s['worst_abs_log']:.3f}", s["worst_row"]] for s in section["summary"]]
    print_out(table("Kernel evidence: error per kernel family, GPU and split", cols, rows,
                    caption="|ln(measured / predicted)|; rows with no predictor are left out (their reason is in the "
                            "table above)"))
