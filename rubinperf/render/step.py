"""Tables for the step-level commands (presentation only)."""

from __future__ import annotations

from rubinperf.render import tables as report


def estimate_tables(records: list[dict], breakdown: bool = False) -> None:
    col = report.col
    cols = [col("hardware", "left"), col("layout", "left"), col("phase", "left"),
            col("batch/rank", short="batch", drop=4), col("context", short="ctx", drop=5),
            col("step"), col("SOL", drop=3), col("% roofline", short="%roof", drop=2), col("tok/s/GPU"),
            col("tok/s/user"), col("bound", "left"), col("largest kernel", "left", drop=6, min_width=12)]
    rows = []
    for r in records:
        top = r["breakdown"][0]
        top_name = top["kernel"].split(" (")[0]
        rows.append([r["hardware"], r["layout"], r["phase"], report.fmt_num(r["batch_per_rank"]),
                     report.fmt_tokens(r["context_tokens"]), report.fmt_time(r["step_time_ms"] / 1e3),
                     report.fmt_time(r["sol_step_time_ms"] / 1e3), report.fmt_pct(r["fraction_of_roofline"]),
                     report.fmt_num(r["tokens_per_s_per_gpu"]), report.fmt_num(r["tokens_per_s_per_user"]),
                     r["bound"], f"{top_name} {report.fmt_pct(top['share_of_step'])}"])
    model = records[0]["model"] if records else ""
    caption = ("decode: tok/s = accepted output tokens (batch x acceptance / step); prefill: new tokens. "
               "step = max(GPU, CPU); SOL = speed of light")
    notes = list(dict.fromkeys(r["note"] for r in records if r.get("note")))
    if notes:
        caption += "\n" + "\n".join(notes)
    report.print_out(report.table(f"{model}: one engine step", cols, rows, caption=caption))
    if breakdown:
        for r in records:
            bcols = [col("kernel", "left", min_width=24), col("part", "left", drop=3), col("time"), col("SOL", drop=4),
                     col("% roofline", short="%roof", drop=2), col("share"), col("FLOPs", drop=6), col("bytes", drop=5),
                     col("bound", "left")]
            brows = [[b["kernel"], b["part"], report.fmt_time(b["time_ms"] / 1e3), report.fmt_time(b["sol_time_ms"] / 1e3),
                      report.fmt_pct(b["fraction_of_roofline"]), report.fmt_pct(b["share_of_step"]),
                      report.si(b["flops"]), report.si(b["bytes"], "B"), b["bound"]] for b in r["breakdown"]]
            title = (f"{r['hardware']} {r['layout']} {r['phase']}: batch {report.fmt_num(r['batch_per_rank'])}/rank, "
                     f"context {report.fmt_tokens(r['context_tokens'])}, step {report.fmt_time(r['step_time_ms'] / 1e3)} "
                     f"(GPU {report.fmt_time(r['gpu_time_ms'] / 1e3)}, CPU {report.fmt_time(r['cpu_time_ms'] / 1e3)})")
            report.print_out(report.table(title, bcols, brows))


def validate_table(records: list[dict]) -> None:
    col = report.col
    cols = [col("point", "left", min_width=16), col("metric", "left", drop=6), col("hardware", "left", drop=4),
            col("layout", "left", drop=5), col("published", short="publ."), col("0.1.0", drop=7),
            col("predicted", short="pred."), col("ratio"), col("band", drop=2), col("", "left"),
            col("why", "left", drop=3, min_width=24)]
    rows = [[r["id"] + (" (fitted)" if r["fitted"] else ""), r["metric"], r["hardware"], r["layout"],
             report.fmt_num(r["published"]), report.fmt_num(r["previous"]) if r.get("previous") else "",
             report.fmt_num(r["predicted"]),
             "—" if r["ratio"] is None else f"{r['ratio']:.2f}",
             f"{r['band'][0]:.2f}-{r['band'][1]:.2f}",
             "in band" if r["in_band"] else "MISS" if r.get("reachable", True) else "unreachable", r["detail"]]
            for r in records]
    hits = sum(r["in_band"] for r in records)
    report.print_out(report.table(f"Validation: {hits} of {len(records)} points in band", cols, rows,
                                  caption="ratio = predicted / published; 0.1.0 = the prediction before the kernel "
                                          "model of issue 11; sources: validation/published.toml"))
