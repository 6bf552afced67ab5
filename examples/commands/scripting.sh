#!/usr/bin/env bash
# Scripting against rubinperf: --quiet prints nothing and the exit status says whether the
# input was valid (2 = bad input, with one line on stderr); --json prints raw SI numbers
# (plus the *_ms fields) that any JSON tool can read.
set -euo pipefail

if rubinperf estimate -l dep5 --quiet 2>/dev/null; then
    echo "unexpected: dep5 does not divide 384 experts" >&2
    exit 1
fi
echo "dep5 rejected, as expected"

rubinperf estimate -H vr-nvl72 -l dep32 --json \
    | "${PYTHON:-python3}" -c 'import json, sys; r = json.load(sys.stdin)[0]; print(r["layout"], r["step_time_ms"], "ms per step,", round(r["tokens_per_s_per_gpu"]), "tok/s/GPU")'
