#!/bin/bash
# Device call part: DeepGEMM's SM90 FP8 GEMM at one token over K (probe2_sm90.py), with the sources, host extension
# and JIT cache that .gpu/ holds (run.sh's 05:56 call). Reads .gpu/ (carried), writes under $OUT/probe2.
set -u
DG=$(pwd)/.gpu; G=$(pwd)/.gpu_flashmla; W=/tmp/dgbuild; OUT=${OUT:-/tmp/out}
rm -rf $W; mkdir -p $W $OUT
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda DG_JIT_CACHE_DIR=/tmp/dgjit CC=/usr/bin/gcc CXX=/usr/bin/g++
export DG_BENCH_DIR=$DG
exec > >(tee -a $OUT/probe2.log) 2>&1
echo "== probe2 start $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
tar -xzf $DG/src.tar.gz -C $W && python3 $DG/patch_regex.py $W/DeepGEMM && tar -xzf $DG/artifacts.tar.gz -C /
cd $W/DeepGEMM && ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass && \
  ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
ls deep_gemm/_C*.so || { echo "no carried extension"; exit 1; }
export PYTHONPATH=$W/DeepGEMM:$W/DeepGEMM/tests
cd /tmp
P=()
for i in $(seq 0 11); do timeout 150 python3 $G/probe2_sm90.py warm $i 12 > /tmp/p2w_$i.log 2>&1 & P+=($!); done
wait "${P[@]}"; cat /tmp/p2w_*.log > $OUT/probe2_warm.log; grep -c diff $OUT/probe2_warm.log | sed 's/^/warm cases: /'
grep -h -i -E "error|Traceback" /tmp/p2w_*.log | head
echo "== probe2 timing $(date -u)"
timeout 120 python3 $G/probe2_sm90.py time $OUT/probe2_sm90.csv
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "== probe2 end $(date -u)"
