#!/usr/bin/env bash
# TP8 single-user what-if: one request on a TP8 Rubin engine, then the same with faster
# HBM and a lower NVLink message latency (--set takes values with units). The bound column
# says whether memory, links or fixed floors set the pace.
set -euo pipefail

rubinperf estimate -H vr-nvl72 -l tp8 --batch 1

rubinperf estimate -H vr-nvl72 -l tp8 --batch 1 --set hbm_bandwidth=30TB/s --set nvlink_latency=1us
