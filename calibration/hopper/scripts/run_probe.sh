#!/bin/bash
# One device call: DeepGEMM's SM90 FP8 GEMM at one token over K, N and the SMs it may use (probe_sm90.py), with the
# host extension and JIT cache of the 05:56 call carried in artifacts.tar.gz (built by run.sh with the system g++).
set -u
G=$(pwd)/.gpu; W=/tmp/dgbuild; OUT=${OUT:-/tmp/out}
rm -rf $W; mkdir -p $W $OUT
exec > >(tee -a $OUT/probe.log) 2>&1
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda DG_JIT_CACHE_DIR=/tmp/dgjit CC=/usr/bin/gcc CXX=/usr/bin/g++
echo "== start $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
tar -xzf $G/src.tar.gz -C $W && python3 $G/patch_regex.py $W/DeepGEMM && tar -xzf $G/artifacts.tar.gz -C /
cd $W/DeepGEMM && ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass && \
  ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
ls deep_gemm/_C*.so || { echo "no carried extension"; exit 1; }
export PYTHONPATH=$W/DeepGEMM:$W/DeepGEMM/tests
cd /tmp
P=()
for i in $(seq 0 13); do python3 $G/probe_sm90.py warm $i 14 > /tmp/pw_$i.log 2>&1 & P+=($!); done
wait "${P[@]}"; cat /tmp/pw_*.log | grep -c diff | sed 's/^/warm cases: /'; grep -h -i -E "error|Traceback" /tmp/pw_*.log | head
echo "== timing $(date -u)"
python3 $G/probe_sm90.py time $OUT/probe_sm90.csv
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "== end $(date -u)"
