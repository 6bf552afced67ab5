"""Serving: speculative decoding, P/D pools over a workload, money and power, the interactivity
distribution, sweeps and the Pareto frontier. Each topic is one module:

- specdecode:    one decode engine (target + draft), acceptance at another draft length
- interactivity: tokens/s per user at P50 and P90, not only the mean
- prefill:       the prefill pool: chunked steps, prefix loads, KV transfer, TTFT
- pools:         the deployment (both pools sized to each other; whole instances), its records
- money:         $ per million tokens and tokens/s per kW
- sweeps:        the deployment over racks x layouts x batches; grids of one step over batch x context
- pareto:        the frontier, throughput at an interactivity, compare's records

Times, tokens/s and bounds come from the step model (rubinperf/step.py) and the roofline
(rubinperf/roofline.py); nothing here recomputes them. The names below are the package's
public interface (as the single module `rubinperf.serving` had them).
"""

from rubinperf.serving.interactivity import check_stat, speed_factors
from rubinperf.serving.money import SECONDS_PER_HOUR
from rubinperf.serving.pools import Serving, check_workload, serve
from rubinperf.serving.prefill import (PrefillPlan, default_prefill_layout, kv_transfer_link, kv_transfer_s,
                                       kv_transfer_time, prefill_plan, prefix_load_s)
from rubinperf.serving.specdecode import SpecDecode, accepted_tokens, acceptance_rate, decode_engine, default_acceptance
from rubinperf.serving.sweeps import (DEFAULT_DECODE_LAYOUTS, DEFAULT_MAX_BATCH, MAX_BATCH_LIMIT, Sweep, batch_grid,
                                      stack_decode_layouts, sweep, sweep_grid, sweep_grid_blocks)

__all__ = [
    "check_stat", "speed_factors", "SECONDS_PER_HOUR", "Serving", "check_workload", "serve", "PrefillPlan",
    "default_prefill_layout", "kv_transfer_link", "kv_transfer_s", "kv_transfer_time", "prefill_plan",
    "prefix_load_s", "SpecDecode", "accepted_tokens", "acceptance_rate", "decode_engine", "default_acceptance",
    "DEFAULT_DECODE_LAYOUTS", "DEFAULT_MAX_BATCH", "MAX_BATCH_LIMIT", "Sweep", "batch_grid", "stack_decode_layouts",
    "sweep", "sweep_grid", "sweep_grid_blocks",
]
