"""`rubinperf serve`: one aggregated engine driven closed loop, as `vllm bench serve --max-concurrency N` drives it
(thin: rubinperf.serving.aggregated's records out to rubinperf.render.aggregated)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rubinperf.cli.options import Layout, apply_wide, check_output_flags, emit, shared_options
from rubinperf.errors import SpecError


@shared_options()
def serve(
    *, hardware,
    layout: Layout = "tp2",
    concurrency: Annotated[str, typer.Option(
        "--concurrency", "-c", help="Clients, each sending its next request when the last one ends: 64, 4,16,64 or a "
                                    "series a,b,...,z (1,2,...,256 doubles).")] = "64",
    isl, osl,
    random_range_ratio: Annotated[float, typer.Option(
        "--random-range-ratio", help="Lengths uniform around the nominal ones: [L(1-R), L(1+R)] (vllm bench serve), or "
                                     "[L R, L] with --range-convention inferencex.")] = 0.0,
    range_convention: Annotated[str, typer.Option(
        "--range-convention", help="vllm (current vllm bench serve) or inferencex (older benchmark_serving, "
                                   "InferenceMAX).")] = "vllm",
    prefix_hit,
    turn_gap: Annotated[float, typer.Option(
        "--turn-gap", help="Seconds a client waits between a reply and its next request (agentic sessions; 0: none).")] = 0.0,
    request_rate: Annotated[Optional[str], typer.Option(
        "--request-rate", help="Open loop, simulated step by step: requests per second (4, or 1,2,4,8; inf: all at "
                               "once), arriving as vllm bench serve sends them (Poisson; see --burstiness).")] = None,
    burstiness: Annotated[float, typer.Option(
        "--burstiness", help="With --request-rate: the gamma shape of the gaps between arrivals (1: Poisson; below 1: "
                             "burstier), as vllm bench serve's.")] = 1.0,
    trace: Annotated[Optional[str], typer.Option(
        "--trace", help="Simulate a JSONL trace, one request a line: {\"arrival_s\", \"input_tokens\", "
                        "\"output_tokens\"[, \"session\", \"prefix_tokens\"]}; a session's later turn may give "
                        "\"turn_gap_s\" (after its previous turn ends) instead of \"arrival_s\".")] = None,
    simulate: Annotated[bool, typer.Option(
        "--simulate", help="Simulate the closed loop step by step (-c clients) instead of its steady state.")] = False,
    num_requests: Annotated[Optional[int], typer.Option(
        "--num-requests", "-n", help="Simulated requests per rate or concurrency (default 1,000; a trace: its first N, "
                                     "default all).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the simulated arrivals and lengths.")] = 0,
    percentiles: Annotated[Optional[str], typer.Option(
        "--percentiles", help="Simulated runs: the percentiles reported, such as 50,90,99 (default).")] = None,
    goodput: Annotated[Optional[str], typer.Option(
        "--goodput", help="Simulated runs: the limits a good request meets, such as 'ttft:2s tpot:50ms' (also itl, "
                          "e2el).")] = None,
    prefill_layout: Annotated[Optional[str], typer.Option(
        "--prefill-layout", help="Simulated open loop: P/D, the prompts on engines of this shape (dep2, tp4, ...), "
                                 "their KV sent to the -l engine, which decodes. Default: aggregated.")] = None,
    prefill_instances: Annotated[int, typer.Option(
        "--prefill-instances", help="With --prefill-layout: prefill engines feeding the decode engine.")] = 1,
    model, stack, draft_tokens, acceptance, eplb, sets, as_json, as_csv, quiet, wide,
):
    """Closed-loop benchmark of one aggregated engine: throughput and TTFT/TPOT/ITL/E2E statistics.

    The engine mixes each step's decode rows with a chunk of pending prefill up to the stack's
    token budget ([aggregated] max_num_batched_tokens, chunked_prefill, mixed_prefill_decode;
    change them with --set). The steady state follows from Little's law at each concurrency;
    past the point where prefill saturates, requests queue and TTFT grows. Percentiles use the
    spreads P90 uses and the request mix's length range.

    --request-rate (open loop, Poisson or --burstiness gamma bursts), --trace (a JSONL replay)
    and --simulate (the -c clients) run the engine step by step instead: continuous batching,
    chunked prefill, KV capacity with queueing and preemption, the prefix cache by session; TTFT,
    TPOT, ITL and E2E at --percentiles, goodput under --goodput, queued and preempted requests.
    --prefill-layout makes it P/D: prompts on prefill engines, KV sent to the -l engine.

    Examples:

      rubinperf serve -H gb300-nvl72 -l tp2 --concurrency 64 --isl 8K --osl 1K

      rubinperf serve -m deepseek-v3 -H h200 -l tp8 -c 1,2,...,256 --random-range-ratio 0.8 --range-convention inferencex

      rubinperf serve -H b200 -l dep8 -c 256 --set max_num_batched_tokens=16384 --json

      rubinperf serve -H gb300-nvl72 -l tp2 --request-rate 2,4,6 --num-requests 2000 --goodput 'ttft:2s tpot:50ms'

      rubinperf serve -H gb300-nvl72 -l tp2 --trace requests.jsonl --percentiles 50,90,99,99.9

      rubinperf serve -H gb300-nvl72 -l dep8 --prefill-layout dep2 --prefill-instances 2 --request-rate 20
    """
    from rubinperf.serving.aggregated import RequestMix, closed_loop, engine, parse_concurrency
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.select import load_specs

    check_output_flags(as_json, as_csv, quiet)
    apply_wide(wide)
    levels = parse_concurrency(concurrency)
    simulated = simulate or request_rate is not None or trace is not None
    if request_rate is not None and trace is not None:
        raise SpecError("--request-rate and --trace: choose one source of requests")
    if prefill_layout is None and prefill_instances != 1:
        raise SpecError("--prefill-instances: with --prefill-layout (P/D)")
    if not 1 <= prefill_instances <= 1024:
        raise SpecError(f"--prefill-instances: expected 1 to 1,024 prefill engines, got {prefill_instances}")
    if prefill_layout is not None and not (request_rate is not None or trace is not None):
        raise SpecError("--prefill-layout: P/D is simulated open loop: give --request-rate or --trace")
    if not simulated:
        for name, given in (("--percentiles", percentiles), ("--goodput", goodput)):
            if given is not None:
                raise SpecError(f"{name}: with a simulated run (--request-rate, --trace or --simulate)")
    from rubinperf.serving import simulate as sim

    if num_requests is not None and not 1 <= num_requests <= sim.MAX_REQUESTS:
        raise SpecError(f"--num-requests: expected 1 to {sim.MAX_REQUESTS:,} requests, got {num_requests}")
    if not 0 <= seed < 2**63:
        raise SpecError(f"--seed: expected 0 to 2^63 - 1, got {seed}")
    pcts = sim.parse_percentiles(percentiles or "50,90,99")
    limits = sim.parse_goodput(goodput)
    rates = sim.parse_rates(request_rate) if request_rate is not None else []
    traffic = None
    if trace is not None:
        for name, given in (("--isl", isl), ("--osl", osl), ("--prefix-hit", prefix_hit)):
            if given is not None:
                raise SpecError(f"{name}: the trace gives each request's lengths and prefix; not with --trace")
        traffic = sim.read_trace(trace, limit=num_requests)
        share = float(((traffic.cached_tokens + traffic.prefix_tokens) / traffic.input_tokens).mean())
        isl, osl = float(traffic.input_tokens.mean()), max(float(traffic.output_tokens.mean()), 2.0)
        prefix_hit = str(min(share, 0.99))
    from rubinperf.cli.serving import parse_prefix_hit

    mix = RequestMix(isl=8192.0 if isl is None else isl, osl=1024.0 if osl is None else osl,
                     range_ratio=random_range_ratio, convention=range_convention,
                     prefix_hit=0.0 if prefix_hit is None else parse_prefix_hit(prefix_hit), turn_gap_s=turn_gap)
    m, (hw,) = load_specs(model, [hardware], sets, stacks=[stack] if stack else None)
    if traffic is not None:
        sim.check_context(traffic, m, f"--trace {trace}: request")
    lay = parse_layout(layout)
    from rubinperf.specs.layout import check_layout

    check_layout(lay, m, hw)
    if draft_tokens is not None and draft_tokens < 0:
        raise SpecError(f"--draft-tokens: expected 0 or more, got {draft_tokens}")
    e = engine(m, hw, lay, mix, draft_tokens=draft_tokens, acceptance=acceptance, eplb=eplb, suggest=True)
    if simulated:
        pre = None
        if prefill_layout is not None:
            pl = parse_layout(prefill_layout)
            check_layout(pl, m, hw)
            pre = engine(m, hw, pl, mix, draft_tokens=draft_tokens, acceptance=acceptance, eplb=eplb, suggest=True)
        records = sim.serve_records(e, rates=rates, trace=traffic, trace_path=trace or "",
                                    clients=levels if simulate and not rates and traffic is None else (),
                                    num_requests=1000 if num_requests is None else num_requests, seed=seed, burstiness=burstiness, think_s=turn_gap,
                                    percentiles=pcts, goodput=limits, prefill=pre,
                                    prefill_instances=prefill_instances)
        from rubinperf.render.aggregated import simulated_tables

        emit(records, as_json, simulated_tables, as_csv=as_csv, quiet=quiet)
        return
    records = closed_loop(e, levels).records()
    from rubinperf.render.aggregated import serve_tables

    emit(records, as_json, serve_tables, as_csv=as_csv, quiet=quiet)
