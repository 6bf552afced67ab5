"""Tables for the step-level commands (presentation only)."""

from __future__ import annotations

from rubinperf import report


def estimate_tables(records: list[dict], breakdown: bool = False) -> None:
    cols = [("hardware", "left"), ("layout", "left"), ("phase", "left"), ("batch/rank", "right"), ("context", "right"),
            ("step", "right"), ("SOL", "right"), ("% roofline", "right"), ("tok/s/GPU", "right"),
            ("tok/s/user", "right"), ("bound", "left"), ("largest kernel", "left")]
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
    report.print_out(report.table(f"{model}: one engine step", cols, rows, caption=caption))
    if breakdown:
        for r in records:
            bcols = [("kernel", "left"), ("part", "left"), ("time", "right"), ("SOL", "right"), ("% roofline", "right"),
                     ("share", "right"), ("FLOPs", "right"), ("bytes", "right"), ("bound", "left")]
            brows = [[b["kernel"], b["part"], report.fmt_time(b["time_ms"] / 1e3), report.fmt_time(b["sol_time_ms"] / 1e3),
                      report.fmt_pct(b["fraction_of_roofline"]), report.fmt_pct(b["share_of_step"]),
                      report.si(b["flops"]), report.si(b["bytes"], "B"), b["bound"]] for b in r["breakdown"]]
            title = (f"{r['hardware']} {r['layout']} {r['phase']}: batch {report.fmt_num(r['batch_per_rank'])}/rank, "
                     f"context {report.fmt_tokens(r['context_tokens'])}, step {report.fmt_time(r['step_time_ms'] / 1e3)} "
                     f"(GPU {report.fmt_time(r['gpu_time_ms'] / 1e3)}, CPU {report.fmt_time(r['cpu_time_ms'] / 1e3)})")
            report.print_out(report.table(title, bcols, brows))


def validate_table(records: list[dict]) -> None:
    cols = [("point", "left"), ("metric", "left"), ("hardware", "left"), ("layout", "left"), ("published", "right"),
            ("predicted", "right"), ("ratio", "right"), ("band", "right"), ("", "left"), ("why", "left")]
    rows = [[r["id"] + (" (fitted)" if r["fitted"] else ""), r["metric"], r["hardware"], r["layout"],
             report.fmt_num(r["published"]), report.fmt_num(r["predicted"]),
             "—" if r["ratio"] is None else f"{r['ratio']:.2f}",
             f"{r['band'][0]:.2f}-{r['band'][1]:.2f}",
             "in band" if r["in_band"] else "MISS" if r.get("reachable", True) else "unreachable", r["detail"]]
            for r in records]
    hits = sum(r["in_band"] for r in records)
    report.print_out(report.table(f"Validation: {hits} of {len(records)} points in band", cols, rows,
                                  caption="ratio = predicted / published; sources: validation/published.toml"))
