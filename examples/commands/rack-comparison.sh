#!/usr/bin/env bash
# Rack comparison: DeepSeek-V4.1-Flash on GB300 NVL72 and Vera Rubin NVL72 in the three
# engine shapes (DEP2 prefill, DEP32 Wide-EP decode, TP8 low-latency decode) at 128K context.
# The table shows step time, speed of light, tokens/s per GPU and per user, and the bound.
set -euo pipefail

rubinperf estimate

# The same for the previous generation and the Rubin rack, decode only, with a larger batch.
rubinperf estimate -H gb200-nvl72 -H vr-nvl72 -l dep32 --batch 64
