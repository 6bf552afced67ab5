#!/bin/bash
# One device call: build DeepGEMM (PR #323 fork, qiushixiaoyu/DeepGEMM @ 820861bd3) with the project's setup.py
# recipe (system g++, regex patch, pybind registration of the SM90 Mega MoE), JIT-compile the SM90 FP8 Mega MoE for
# DeepSeek-V4-Flash and V4.1-Flash on one rank (parallel processes, waves sized to GPU memory), check each case
# against a torch reference and time it.  Run from the repository root with .gpu_mega carried; writes under $OUT.
#   BUDGET_S: seconds this script may use (default 560);  PHASES: "build warm time ncu" (default all but ncu)
set -u
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
PHASES=${PHASES:-"build warm time ncu"}
G=$(pwd)/.gpu_mega
W=/tmp/dgbuild
OUT=${OUT:-/tmp/out}
rm -rf $W; mkdir -p $W $OUT
exec > >(tee -a $OUT/run.log) 2>&1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DG_REPO=github.com/qiushixiaoyu/DeepGEMM
export DG_COMMIT=820861bd3edb77c88d2e7d8d8030249afc1c6b5b
export CUTLASS_COMMIT=f3fde58372d33e9a5650ba7b80fc48b3b49d40c8
export FMT_COMMIT=553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28
export DG_JIT_CACHE_DIR=/tmp/dgjit DG_PRINT_CONFIGS=1
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
el() { echo $(( $(date +%s) - T0 )); }
echo "== start $(date -u) budget ${BUDGET_S}s phases: $PHASES"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,memory.used --format=csv
nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared"

if true; then
  tar -xzf $G/src.tar.gz -C $W || { echo "untar failed"; exit 1; }
  cd $W/DeepGEMM
  ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass
  ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
  python3 $G/patch_regex.py $W/DeepGEMM && python3 $G/patch_pybind.py $W/DeepGEMM || { echo "patch failed"; exit 1; }
fi
cd $W/DeepGEMM
if [ -f $G/artifacts_so.tar.gz ]; then echo "== carried _C.so"; tar -xzf $G/artifacts_so.tar.gz -C /; fi
if [ -f $G/artifacts_jit.tar.gz ]; then echo "== carried JIT cache"; tar -xzf $G/artifacts_jit.tar.gz -C /; fi
if ! ls deep_gemm/_C*.so >/dev/null 2>&1; then
  echo "== building host extension at $(el)s"
  t=$(date +%s)
  MAX_JOBS=16 python3 setup.py build > $OUT/build.log 2>&1
  echo "== setup.py build rc=$? in $(( $(date +%s) - t ))s"
  so=$(find build -name "_C*.so" -type f | head -n 1)
  if [ -z "$so" ]; then echo "no .so built"; grep -E "error" $OUT/build.log | head -40; tail -20 $OUT/build.log; exit 1; fi
  cp "$so" deep_gemm/
  [ -z "${SKIP_ARTIFACTS:-}" ] && (cd / && tar -czf $OUT/artifacts_so.tar.gz tmp/dgbuild/DeepGEMM/deep_gemm/_C*.so)
fi
echo "libstdc++ locale objects inside _C.so: $(nm -C deep_gemm/_C*.so 2>/dev/null | grep -c -E ' [tT] .*(codecvt|locale::)')"
export PYTHONPATH=$W/DeepGEMM
cd /tmp
timeout 120 python3 -X faulthandler -c 'import deep_gemm; from deep_gemm import _C; print("deep_gemm", deep_gemm.__file__, "sms", deep_gemm.get_num_sms(), "fp8_mega_moe" in dir(_C), "align", _C.get_token_alignment_for_mega_moe())' || { echo "import failed"; exit 1; }
B=$G/bench_mega.py

if [[ " $PHASES " == *" warm "* ]]; then
  echo "== warm-up wave 1 at $(el)s"
  PIDS=()
  warm() {  # model tokens...: start one compile process per token count (no subshell: wait needs the children)
    local m=$1; shift; local t
    for t in "$@"; do
      timeout 300 python3 -X faulthandler $B --mode warm --model $m --tokens $t > /tmp/warm_${m}_$t.log 2>&1 &
      PIDS+=($!)
    done
  }
  warm v4flash 1 64 128 512 8192; warm v41flash 1
  wait "${PIDS[@]}"; PIDS=()
  echo "== warm-up wave 2 at $(el)s"
  warm v41flash 64 128 512 8192
  wait "${PIDS[@]}"
  for f in /tmp/warm_*.log; do echo "--- $f"; grep -v "^\s*$" $f | tail -8; done > $OUT/warm.log
  grep -h -E "first call|Error|error|Traceback|Config\(" /tmp/warm_*.log | cut -c1-400
  echo "== warm-up done at $(el)s; JIT cache: $(ls $DG_JIT_CACHE_DIR/cache 2>/dev/null | wc -l) kernels"
  (cd / && tar -czf $OUT/artifacts_jit.tar.gz tmp/dgjit/cache) && ls -la $OUT/artifacts_jit.tar.gz
fi

python3 $B --mode env --out $OUT > /tmp/env.log 2>&1 || { echo "env failed"; tail -5 /tmp/env.log; }
if [[ " $PHASES " == *" call3 "* ]]; then
  # short third call: the fixed part alone (0 tokens) and on fewer SMs, then the swapAB-off path at 1-8 tokens (V4-Flash)
  echo "== v4flash probe (0 tokens; 132 / 66 / 32 SMs) at $(el)s"
  python3 -X faulthandler $B --mode probe --model v4flash --out $OUT --deadline $(( T0 + BUDGET_S * 60 / 100 )) 2>&1 | grep -v "^\s*$" | grep -v "^MegaMoESM90Config"
  echo "== v4flash swapAB off (DG_SM90_MEGA_NO_SWAP_AB=1) at $(el)s"
  DG_SM90_MEGA_NO_SWAP_AB=1 OUT_SUFFIX=_noswap python3 -X faulthandler $B --mode time --model v4flash --out $OUT --max-tokens 8 --deadline $(( T0 + BUDGET_S - 15 )) 2>&1 | grep -v "^\s*$" | grep -v "^MegaMoESM90Config"
fi
if [[ " $PHASES " == *" call2 "* ]]; then
  # second call: the swapAB-off path at 1-128 tokens (checked), the fixed part alone (0 tokens) and on fewer SMs,
  # then the default (swapAB) path again at 1-128 tokens on this card as the baseline
  for m in v4flash v41flash; do
    echo "== $m swapAB off (DG_SM90_MEGA_NO_SWAP_AB=1) at $(el)s"
    DG_SM90_MEGA_NO_SWAP_AB=1 OUT_SUFFIX=_noswap python3 -X faulthandler $B --mode time --model $m --out $OUT --max-tokens 128 --deadline $(( T0 + BUDGET_S * 50 / 100 )) 2>&1 | grep -v "^\s*$" | grep -v "^MegaMoESM90Config"
  done
  for m in v4flash v41flash; do
    echo "== $m probe (0 tokens; 132 / 66 / 32 SMs) at $(el)s"
    python3 -X faulthandler $B --mode probe --model $m --out $OUT --deadline $(( T0 + BUDGET_S * 80 / 100 )) 2>&1 | grep -v "^\s*$" | grep -v "^MegaMoESM90Config"
  done
  for m in v4flash v41flash; do
    echo "== $m default (swapAB) again at $(el)s"
    python3 -X faulthandler $B --mode time --model $m --out $OUT --max-tokens 128 --deadline $(( T0 + BUDGET_S - 20 )) 2>&1 | grep -v "^\s*$" | grep -v "^MegaMoESM90Config"
  done
fi
if [[ " $PHASES " == *" time "* ]]; then
  SKIP=$(ls $G/megamoe_sm90_raw_*.csv 2>/dev/null | tr '\n' ',')
  echo "== timing v4flash at $(el)s"
  python3 -X faulthandler $B --mode time --model v4flash --out $OUT --skip-csv "$SKIP" --deadline $(( T0 + BUDGET_S * 70 / 100 )) 2>&1 | grep -v "^\s*$"
  echo "== timing v41flash at $(el)s"
  python3 -X faulthandler $B --mode time --model v41flash --out $OUT --skip-csv "$SKIP" --deadline $(( T0 + BUDGET_S - 25 )) 2>&1 | grep -v "^\s*$"
  (cd / && tar -czf $OUT/artifacts_jit.tar.gz tmp/dgjit/cache)
fi
if [[ " $PHASES " == *" noswap "* ]]; then
  echo "== timing v4flash, swapAB off (DG_SM90_MEGA_NO_SWAP_AB=1), at $(el)s"
  DG_SM90_MEGA_NO_SWAP_AB=1 OUT_SUFFIX=_noswap python3 -X faulthandler $B --mode time --model v4flash --out $OUT --max-tokens 128 --deadline $(( T0 + BUDGET_S - 90 )) 2>&1 | grep -v "^\s*$" | grep -v "^MegaMoESM90Config(num_ranks=1, num_experts=256, hidden=4096, intermediate_hidden=2048, num_max_tokens_per_rank=8448, num_tokens=[0-9]*, num_topk=6, swap_ab=false): MegaMoESM90Config(block_m=64, block_n=128, block_k=128, cluster_size=1, num_max_pool_tokens=99840, num_padded_sf_pool_tokens=1597440, swizzle_acts_mode=128, swizzle_weights_mode=128, num_experts_per_wave=256,"
  echo "== timing v41flash, swapAB off, at $(el)s"
  DG_SM90_MEGA_NO_SWAP_AB=1 OUT_SUFFIX=_noswap python3 -X faulthandler $B --mode time --model v41flash --out $OUT --max-tokens 128 --deadline $(( T0 + BUDGET_S - 40 )) 2>&1 | grep -v "^\s*$"
  if which ncu >/dev/null; then
    echo "== ncu v4flash t1 swapAB off at $(el)s"
    DG_SM90_MEGA_NO_SWAP_AB=1 timeout 40 ncu -k regex:sm90_fp8_mega_moe -c 1 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum \
      python3 $B --mode ncu --model v4flash --tokens 1 2>&1 | grep -E "dram__|sm__thr|gpu__time|first call"
  fi
fi
if [[ " $PHASES " == *" ncu "* ]] && which ncu >/dev/null; then
  for t in 1 512; do
    left=$(( T0 + BUDGET_S + 25 - $(date +%s) ))
    [ $left -lt 50 ] && { echo "== ncu t$t skipped (${left}s left)"; continue; }
    echo "== ncu v4flash t$t at $(el)s"
    timeout $(( left - 10 )) ncu -k regex:sm90_fp8_mega_moe -c 1 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,gpc__cycles_elapsed.max \
      python3 $B --mode ncu --model v4flash --tokens $t 2>&1 | grep -v "^==PROF==" | grep -v "^\s*$" | tail -14
  done
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
echo "== end at $(el)s"
