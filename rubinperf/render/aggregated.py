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
        if r.get("low") is not None:
            rows.append(["  band (assumed ranges)", "", f"{fmt_num(r['low'])}-{fmt_num(r['high'])} tok/s/GPU"])
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
    cols = [col("concurrency", short="conc"), col("tok/s/GPU", short="tok/s/G"), col("band", drop=6),
            col("out tok/s/GPU", short="out/G", drop=4),
            col("tok/s/user", short="tok/s/u"), col("TTFT p50", short="TTFT"), col("TPOT p50", short="TPOT"),
            col("ITL p99", drop=3), col("E2E p50", short="E2E", drop=2), col("batch/rank", short="batch", drop=5),
            col("prefill steps", short="pf%", drop=1)]
    rows = [[fmt_num(r["concurrency"]), fmt_num(r["total_tokens_per_s_per_gpu"]),
             f"{fmt_num(r['low'])}-{fmt_num(r['high'])}" if r.get("low") is not None else "—",
             fmt_num(r["output_tokens_per_s_per_gpu"]),
             fmt_num(1e3 / r["median_tpot_ms"]), _ms(r["median_ttft_ms"]), _ms(r["median_tpot_ms"]), _ms(r["p99_itl_ms"]),
             _ms(r["median_e2e_ms"]), fmt_num(r["running_batch_per_rank"]),
             fmt_pct(r["prefill_step_share"]) + ("*" if r["limited_by"] else "")] for r in records]
    print_out(table(what, cols, rows, caption="tok/s/GPU counts input + output tokens (InferenceX's tput_per_gpu); "
                    "tok/s/user = 1 / median TPOT; * the running batch is held (by the prefill budget or the KV cache): "
                    "requests queue and TTFT grows; band: the assumed spec fields' ranges (--json: band_drivers)\n"
                    + engine))
