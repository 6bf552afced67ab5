"""Money and power of a deployment, from the rack's $/GPU-hour and power per GPU.

    $ per million input tokens  = $/GPU-s x 1e6 / (prefill turns/s per prefill GPU x input tokens per turn)
    $ per million output tokens = $/GPU-s x 1e6 / output tokens/s per decode GPU
    $ per million tokens        = $/GPU-s x 1e6 / tokens/s per GPU of both pools
    tokens/s per kW             = tokens/s per GPU / (W per GPU / 1e3)

The prefill pool's GPU-hours are charged to input tokens (cached and uncached), the decode
pool's to output tokens; the blended figure charges every GPU-hour to every token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

SECONDS_PER_HOUR = 3600.0


def usd_per_gpu_s(hw: Platform) -> float:
    return hw.price_usd_per_gpu_hour / SECONDS_PER_HOUR


def usd_per_m_tokens(hw: Platform, tokens_per_s_per_gpu):
    """Dollars per million tokens made at `tokens_per_s_per_gpu` on every GPU charged."""
    return usd_per_gpu_s(hw) * 1e6 / tokens_per_s_per_gpu


def tokens_per_s_per_kw(hw: Platform, tokens_per_s_per_gpu):
    return tokens_per_s_per_gpu / (hw.gpu_power_w / 1e3)
