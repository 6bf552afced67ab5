"""`rubinperf serve`: one aggregated engine driven closed loop, as `vllm bench serve --max-concurrency N` drives it
(thin: rubinperf.serving.aggregated's records out to rubinperf.render.aggregated)."""

from __future__ import annotations

from typing import Annotated

import typer

from rubinperf.cli.options import Layout, apply_wide, check_output_flags, emit, precision_sets, ranged, shared_options
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
        "--random-range-ratio", **ranged("Lengths uniform around the nominal ones: [L(1-R), L(1+R)] (vllm bench "
                                         "serve; R at most 0.999), or [L R, L] with --range-convention inferencex.",
                                         0.0, 1.0, integer=False))] = 0.0,
    range_convention: Annotated[str, typer.Option(
        "--range-convention", help="vllm (current vllm bench serve) or inferencex (older benchmark_serving, "
                                   "InferenceMAX).")] = "vllm",
    prefix_hit,
    turn_gap: Annotated[float, typer.Option(
        "--turn-gap", **ranged("Seconds a client waits between a reply and its next request (agentic sessions; 0: "
                               "none).", 0.0, 3600.0, integer=False))] = 0.0,
    model, stack, draft_tokens, acceptance, eplb, sets, dtype, kv_dtype, as_json, as_csv, quiet, wide, save_dir,
):
    """Closed-loop benchmark of one aggregated engine: throughput and TTFT/TPOT/ITL/E2E statistics.

    The engine mixes each step's decode rows with a chunk of pending prefill up to the stack's
    token budget ([aggregated] max_num_batched_tokens, chunked_prefill, mixed_prefill_decode;
    change them with --set). The steady state follows from Little's law at each concurrency;
    past the point where prefill saturates, requests queue and TTFT grows. Percentiles use the
    spreads P90 uses and the request mix's length range.

    Examples:

      rubinperf serve -H gb300-nvl72 -l tp2 --concurrency 64 --isl 8K --osl 1K

      rubinperf serve -m deepseek-v3 -H h200 -l tp8 -c 1,2,...,256 --random-range-ratio 0.8 --range-convention inferencex

      rubinperf serve -H b200 -l dep8 -c 256 --set max_num_batched_tokens=16384 --json

      rubinperf serve -c 1,2,...,256 --csv > curve.csv
    """
    from rubinperf.serving.aggregated import RequestMix, closed_loop, engine, parse_concurrency
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.select import load_specs

    check_output_flags(as_json, as_csv, quiet)
    sets = precision_sets(dtype, kv_dtype, sets)
    apply_wide(wide)
    if save_dir is not None:
        from rubinperf.cli.bundles import check_save_dir

        check_save_dir(save_dir)
    levels = parse_concurrency(concurrency)
    from rubinperf.cli.serving import parse_prefix_hit

    mix = RequestMix(isl=8192.0 if isl is None else isl, osl=1024.0 if osl is None else osl,
                     range_ratio=random_range_ratio, convention=range_convention,
                     prefix_hit=0.0 if prefix_hit is None else parse_prefix_hit(prefix_hit), turn_gap_s=turn_gap)
    m, (hw,) = load_specs(model, [hardware], sets, stacks=[stack] if stack else None)
    lay = parse_layout(layout)
    from rubinperf.specs.layout import check_layout

    check_layout(lay, m, hw)
    if draft_tokens is not None and draft_tokens < 0:
        raise SpecError(f"--draft-tokens: expected 0 or more, got {draft_tokens}")
    e = engine(m, hw, lay, mix, draft_tokens=draft_tokens, acceptance=acceptance, eplb=eplb, suggest=True)
    records = closed_loop(e, levels).records()
    from rubinperf.render.aggregated import serve_tables

    if save_dir is not None:
        from rubinperf.cli.bundles import save_serve

        save_serve(save_dir, records, m, hw)
    emit(records, as_json, serve_tables, as_csv=as_csv, quiet=quiet)
