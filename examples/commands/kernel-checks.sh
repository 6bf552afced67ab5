#!/usr/bin/env bash
# Kernel checks: single kernels on one GPU against the roofline. A small-M FP8 GEMM is
# memory- or floor-bound; a large BF16 GEMM is compute-bound; decode attention with GQA
# reads the KV cache once per KV head. --json gives the raw SI record for scripts.
set -euo pipefail

rubinperf kernel gemm --m 16 --n 7168 --k 2048 --dtype fp8 --hardware b200
rubinperf kernel attention --batch 8 --heads 64 --kv-heads 8 --q-len 1 --kv-len 32768 --head-dim 128 \
    --hardware vr-nvl72 --json
