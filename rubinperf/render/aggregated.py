"""Tables of `rubinperf serve`: the closed-loop benchmark's metrics (presentation only)."""

from __future__ import annotations

from rubinperf.render.output import print_out
from rubinperf.render.tables import col, table
from rubinperf.units import fmt_num, fmt_pct, fmt_time


def _ms(v) -> str:
    return fmt_time(v / 1e3)


def serve_tables(records: list[dict]) -> None:
    """One concurrency: the benchmark's report (throughput, then TTFT/TPOT/ITL/E2E statistics); several: the curve."""
    if not records:
        return
    r0 = records[0]
    what = (f"{r0['model']} on {r0['hardware']} {r0['layout']} ({r0['stack']}), aggregated, ISL {fmt_num(r0['isl'])} / "
            f"OSL {fmt_num(r0['osl'])}")
    engine = (f"budget {fmt_num(r0['max_num_batched_tokens'])} tokens/step, chunked prefill "
              f"{'on' if r0['chunked_prefill'] else 'off'}, prefill {'in' if r0['mixed_prefill_decode'] else 'beside'} "
              f"the decode forward; mean lengths {fmt_num(r0['mean_input_tokens'])} in / "
              f"{fmt_num(r0['mean_output_tokens'])} out, prefix hit {fmt_pct(r0['prefix_hit_rate'])}")
    if len(records) == 1:
        r = records[0]
        g = r["gpus"]
        rows = [["request throughput", f"{r['request_throughput_per_s']:.3g} req/s", ""],
                ["output token throughput", f"{fmt_num(r['output_tokens_per_s'])} tok/s",
                 f"{fmt_num(r['output_tokens_per_s_per_gpu'])} tok/s/GPU"],
                ["total token throughput", f"{fmt_num(r['total_tokens_per_s'])} tok/s",
                 f"{fmt_num(r['total_tokens_per_s_per_gpu'])} tok/s/GPU"]]
        print_out(table(f"{what}, concurrency {fmt_num(r['concurrency'])}",
                        [col("", "left"), col(f"server ({g} GPUs)"), col("per GPU")], rows))
        lat = [[name.upper() if name != "e2e" else "E2E latency", _ms(r[f"mean_{name}_ms"]), _ms(r[f"median_{name}_ms"]),
                _ms(r[f"p90_{name}_ms"]), _ms(r[f"p99_{name}_ms"])] for name in ("ttft", "tpot", "itl", "e2e")]
        caption = (f"running batch {fmt_num(r['running_batch_per_rank'])}/rank, queued {fmt_num(r['queued_per_rank'])}"
                   f"/rank; {fmt_pct(r['prefill_step_share'])} of steps carry prefill ({_ms(r['prefill_step_ms'])} "
                   f"against {_ms(r['decode_step_ms'])} without)" + (f"; the running batch is held by the {r['limited_by']}: requests queue" if r["limited_by"] else "")
                   + f"\n{engine}")
        print_out(table("latency", [col("metric", "left"), col("mean"), col("median"), col("P90"), col("P99")], lat,
                        caption=caption))
        return
    cols = [col("concurrency", short="conc"), col("tok/s/GPU", short="tok/s/G"), col("out tok/s/GPU", short="out/G", drop=4),
            col("tok/s/user", short="tok/s/u"), col("TTFT p50", short="TTFT"), col("TPOT p50", short="TPOT"),
            col("ITL p99", drop=3), col("E2E p50", short="E2E", drop=2), col("batch/rank", short="batch", drop=5),
            col("prefill steps", short="pf%", drop=1)]
    rows = [[fmt_num(r["concurrency"]), fmt_num(r["total_tokens_per_s_per_gpu"]), fmt_num(r["output_tokens_per_s_per_gpu"]),
             fmt_num(1e3 / r["median_tpot_ms"]), _ms(r["median_ttft_ms"]), _ms(r["median_tpot_ms"]), _ms(r["p99_itl_ms"]),
             _ms(r["median_e2e_ms"]), fmt_num(r["running_batch_per_rank"]),
             fmt_pct(r["prefill_step_share"]) + ("*" if r["limited_by"] else "")] for r in records]
    print_out(table(what, cols, rows, caption="tok/s/GPU counts input + output tokens (InferenceX's tput_per_gpu); "
                    "tok/s/user = 1 / median TPOT; * the running batch is held (by the prefill budget or the KV cache): "
                    "requests queue and TTFT grows\n" + engine))


def _pct_keys(r: dict) -> list[tuple[str, str]]:
    """(record key prefix, column label) of each reported percentile."""
    out = []
    for p in r.get("percentiles", [50.0, 90.0, 99.0]):
        key = "median" if p == 50 else "p" + f"{p:g}".replace(".", "_")
        out.append((key, "median" if p == 50 else f"P{p:g}"))
    return out


def _source(r: dict) -> str:
    if r["mode"] == "request-rate":
        rate = r["request_rate"]
        how = "all at once" if rate == float("inf") else (
            f"{fmt_num(rate)} req/s, " + ("Poisson" if r["burstiness"] == 1 else f"gamma bursts (shape {r['burstiness']:g})"))
        return f"open loop, {how}"
    if r["mode"] == "trace":
        return f"trace {r['trace']}"
    gap = f", {fmt_time(r['turn_gap_s'])} between turns" if r.get("turn_gap_s") else ""
    return f"closed loop, {fmt_num(r['concurrency'])} clients{gap}"


def _short(r: dict) -> str:
    """A curve row's traffic: the rate, the clients or the trace."""
    if r["mode"] == "request-rate":
        return "all at once" if r["request_rate"] == float("inf") else f"{fmt_num(r['request_rate'])}/s"
    if r["mode"] == "trace":
        return "trace"
    return f"{fmt_num(r['concurrency'])} clients"


def simulated_tables(records: list[dict]) -> None:
    """Simulated runs (serve --request-rate, --trace, --simulate): one run as vllm bench serve reports it; several
    as a curve, one row each."""
    if not records:
        return
    r0 = records[0]
    if r0.get("serving") == "disagg":
        what = (f"{r0['model']} on {r0['hardware']} ({r0['stack']}), P/D: prefill {r0['prefill_instances']} × "
                f"{r0['prefill_layout']}, decode {r0['layout']}, simulated")
    else:
        what = f"{r0['model']} on {r0['hardware']} {r0['layout']} ({r0['stack']}), aggregated, simulated"
    engine = (f"budget {fmt_num(r0['max_num_batched_tokens'])} tokens/step, chunked prefill "
              f"{'on' if r0['chunked_prefill'] else 'off'}, prefill {'in' if r0['mixed_prefill_decode'] else 'beside'} "
              f"the decode forward; at most {fmt_num(r0['max_running_requests_per_rank'])} running requests and "
              f"{fmt_num(r0['kv_capacity_tokens_per_rank'])} KV tokens per scheduler; step times from the step model's "
              "tables, built once")
    if len(records) == 1:
        r = records[0]
        g = r["gpus"]
        mix = (f"{fmt_num(r['completed'])} requests, mean {fmt_num(r['mean_input_tokens'])} in / "
               f"{fmt_num(r['mean_output_tokens'])} out, over {fmt_time(r['duration_s'])}")
        rows = [["request throughput", f"{r['request_throughput_per_s']:.3g} req/s", ""]]
        if "request_goodput_per_s" in r:
            lim = ", ".join(f"{k.upper()} ≤ {fmt_time(v)}" for k, v in r["goodput_limits_s"].items())
            rows.append([f"request goodput ({lim})", f"{r['request_goodput_per_s']:.3g} req/s",
                         f"{fmt_pct(r['good_requests'] / max(r['completed'], 1))} of requests"])
        rows += [["output token throughput", f"{fmt_num(r['output_tokens_per_s'])} tok/s",
                  f"{fmt_num(r['output_tokens_per_s_per_gpu'])} tok/s/GPU"],
                 ["total token throughput", f"{fmt_num(r['total_tokens_per_s'])} tok/s",
                  f"{fmt_num(r['total_tokens_per_s_per_gpu'])} tok/s/GPU"],
                 ["requests queued / preempted", f"{fmt_num(r['requests_queued'])} / {fmt_num(r['requests_preempted'])}",
                  f"{fmt_pct(r['requests_queued'] / max(r['completed'], 1))} / "
                  f"{fmt_pct(r['requests_preempted'] / max(r['completed'], 1))}"]]
        print_out(table(f"{what}, {_source(r)}", [col("", "left"), col(f"server ({g} GPUs)"), col("per GPU or share")],
                        rows, caption=mix))
        pk = _pct_keys(r)
        lat = [[name.upper() if name != "e2e" else "E2E latency", _ms(r[f"mean_{name}_ms"])]
               + [_ms(r[f"{key}_{name}_ms"]) for key, _ in pk] for name in ("ttft", "tpot", "itl", "e2e")]
        caption = (f"mean running batch {fmt_num(r['mean_running_batch_per_rank'])}/rank, "
                   f"{fmt_num(r['mean_in_system'])} requests in the system; {fmt_num(r['steps_per_scheduler'])} "
                   f"{'decode-engine ' if r.get('serving') == 'disagg' else ''}steps "
                   f"{'per rank ' if r['layout'].startswith('dep') else ''}of "
                   f"{_ms(r['mean_step_ms'])} mean, {fmt_pct(r['prefill_step_share'])} with "
                   f"{'an admission (KV loaded)' if r.get('serving') == 'disagg' else 'prefill'}; ITL: every "
                   f"decoding request's wait between its steps\n{engine}")
        print_out(table("latency", [col("metric", "left"), col("mean")] + [col(label) for _, label in pk], lat,
                        caption=caption))
        return
    last = _pct_keys(r0)[-1]
    cols = [col("rate" if r0["mode"] == "request-rate" else "traffic", "left"), col("req/s"), col("tok/s/GPU", short="tok/s/G"),
            col("out tok/s/GPU", short="out/G", drop=4), col("TTFT median", short="TTFT"),
            col(f"TTFT {last[1]}", short=f"TTFT {last[1]}"), col("TPOT median", short="TPOT"),
            col(f"ITL {last[1]}", drop=3), col("E2E median", short="E2E", drop=2),
            col("queued", drop=5), col("preempted", short="preempt", drop=5)]
    if "request_goodput_per_s" in r0:
        cols.insert(2, col("goodput req/s", short="good"))
    rows = []
    for r in records:
        row = [_short(r), f"{r['request_throughput_per_s']:.3g}", fmt_num(r["total_tokens_per_s_per_gpu"]),
               fmt_num(r["output_tokens_per_s_per_gpu"]), _ms(r["median_ttft_ms"]), _ms(r[f"{last[0]}_ttft_ms"]),
               _ms(r["median_tpot_ms"]), _ms(r[f"{last[0]}_itl_ms"]), _ms(r["median_e2e_ms"]),
               fmt_num(r["requests_queued"]), fmt_num(r["requests_preempted"])]
        if "request_goodput_per_s" in r0:
            row.insert(2, f"{r['request_goodput_per_s']:.3g}")
        rows.append(row)
    kinds = ", ".join(dict.fromkeys(_source(r).split(",")[0] + (", " + _source(r).split(", ")[-1]
                                                                if r["mode"] == "request-rate" and r["request_rate"] != float("inf")
                                                                else "") for r in records))
    print_out(table(f"{what}: {kinds}", cols, rows,
                    caption="req/s: completed requests over the run; good: those within every --goodput limit; "
                            "tok/s/GPU counts input + output tokens; queued: requests not admitted at the first step "
                            "after they arrived; preempt: requests preempted (recomputed)\n" + engine))
