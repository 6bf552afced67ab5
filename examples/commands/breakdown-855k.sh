#!/usr/bin/env bash
# Breakdown at 855K context: per-kernel time, speed of light, % of roofline, share of the
# step and bound for Wide-EP (DEP32) decode with 855,000 cached tokens per request, on
# Vera Rubin NVL72 and on GB300 NVL72.
set -euo pipefail

rubinperf estimate -H vr-nvl72 -H gb300-nvl72 -l dep32 --context 855000 --breakdown
