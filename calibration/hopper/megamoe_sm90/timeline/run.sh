#!/bin/bash
# One device call: a per-CTA timeline of DeepGEMM's SM90 FP8 Mega MoE (PR #323's fork, qiushixiaoyu/DeepGEMM @
# 820861bd3) on one GPU, one rank, V4-Flash shapes, swapAB off.  Run from the repository root with .gpu_megatl carried
# (src.tar.gz, bench_mega.py, patch_pybind.py, patch_regex.py from .gpu_mega; bench_tl.py, patch_timeline.py from
# here; artifacts_so.tar.gz if a previous call returned one).  Writes under $OUT.
#   build  : the host extension as calibration/hopper/megamoe_sm90/scripts/run.sh builds it (or the carried _C.so)
#   plain  : a copy of the package with the fork's header: check + time each case
#   inst   : the package with the header patched by patch_timeline.py: check + time + timeline of each case
#   plain2 : the plain package again (drift)
#   PHASES (default "plain inst plain2": the first call) also takes "v41" (V4.1-Flash, 0 / 1 / 6 experts, plain and
#   instrumented) and "sms66" (V4-Flash on 66 SMs, 0, 1 and 6 experts): the second call ran PHASES="v41 sms66"
set -u
T0=$(date +%s)
G=$(pwd)/.gpu_megatl
W=/tmp/dgbuild
P=/tmp/dgplain
OUT=${OUT:-/tmp/out}
REPS=${REPS:-11}
PHASES=${PHASES:-"plain inst plain2"}
rm -rf $W $P; mkdir -p $W $P $OUT
exec > >(tee -a $OUT/run.log) 2>&1
export PYTHONUNBUFFERED=1
export DG_REPO=github.com/qiushixiaoyu/DeepGEMM
export DG_COMMIT=820861bd3edb77c88d2e7d8d8030249afc1c6b5b
export CUTLASS_COMMIT=f3fde58372d33e9a5650ba7b80fc48b3b49d40c8
export FMT_COMMIT=553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28
export DG_PRINT_CONFIGS=1 DG_JIT_PTXAS_VERBOSE=1
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
el() { echo $(( $(date +%s) - T0 )); }
ph() { echo "== $1 at $(el)s"; }
echo "== start $(date -u)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,memory.used --format=csv
nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared"

ph "untar + host patches"
tar -xzf $G/src.tar.gz -C $W || { echo "untar failed"; exit 1; }
cd $W/DeepGEMM
ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass
ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
python3 $G/patch_regex.py $W/DeepGEMM && python3 $G/patch_pybind.py $W/DeepGEMM || { echo "patch failed"; exit 1; }
if [ -f $G/artifacts_so.tar.gz ]; then ph "carried _C.so"; tar -xzf $G/artifacts_so.tar.gz -C /; fi
if ! ls deep_gemm/_C*.so >/dev/null 2>&1; then
  ph "building host extension"
  t=$(date +%s)
  MAX_JOBS=16 python3 setup.py build > $OUT/build.log 2>&1
  echo "== setup.py build rc=$? in $(( $(date +%s) - t ))s"
  so=$(find build -name "_C*.so" -type f | head -n 1)
  if [ -z "$so" ]; then echo "no .so built"; grep -E "error" $OUT/build.log | head -40; tail -20 $OUT/build.log; exit 1; fi
  cp "$so" deep_gemm/
  (cd / && tar -czf $OUT/artifacts_so.tar.gz tmp/dgbuild/DeepGEMM/deep_gemm/_C*.so)
fi
ph "build done"
# the plain package: a copy before the header is patched (the include symlinks point at $W's third-party)
cp -a $W/DeepGEMM/deep_gemm $P/ || { echo "plain copy failed"; exit 1; }
python3 $G/patch_timeline.py $W/DeepGEMM || { echo "timeline patch failed"; exit 1; }
diff <(cd $P && sha1sum deep_gemm/include/deep_gemm/impls/sm90_fp8_mega_moe.cuh) <(cd $W/DeepGEMM && sha1sum deep_gemm/include/deep_gemm/impls/sm90_fp8_mega_moe.cuh) && { echo "headers identical?"; exit 1; }
cd /tmp
PYTHONPATH=$W/DeepGEMM timeout 60 python3 -c 'import deep_gemm; from deep_gemm import _C; print("deep_gemm", deep_gemm.__file__, "sms", deep_gemm.get_num_sms(), "fp8_mega_moe" in dir(_C))' || { echo "import failed"; exit 1; }
PYTHONPATH=$W/DeepGEMM python3 $G/bench_mega.py --mode env --out $OUT > /tmp/env.log 2>&1 || { echo "env failed"; tail -5 /tmp/env.log; }
grep -E "gpu_name|copy_read|nvidia_smi" $OUT/env.json | cut -c1-300

run_variant() {  # label variant pythonpath cache [bench_tl.py arguments]
  ph "$1"
  local label=$1 variant=$2 pp=$3 cache=$4; shift 4
  DG_SM90_MEGA_NO_SWAP_AB=1 PYTHONPATH=$pp DG_JIT_CACHE_DIR=$cache timeout 200 python3 -X faulthandler $G/bench_tl.py \
    --variant $variant --label $label --reps $REPS --out $OUT "$@" 2>&1 | grep -v "^\s*$" | grep -v "UserWarning\|_warn_once" \
    | sed -E 's/(MegaMoESM90Config\(num_ranks.{0,200}).*(num_stages=[0-9]+, smem_size=[0-9]+).*/\1 ... \2/'
  echo "-- $1 rc=${PIPESTATUS[0]}"
}
on() { [[ " $PHASES " == *" $1 "* ]]; }
on plain && run_variant plain plain $P /tmp/dgjit_plain
on inst && run_variant inst inst $W/DeepGEMM /tmp/dgjit_inst
on plain2 && run_variant plain2 plain $P /tmp/dgjit_plain
if on v41; then
  run_variant plain_v41 plain $P /tmp/dgjit_plain --model v41flash --only t0,t1_e1,t1_e6
  run_variant inst_v41 inst $W/DeepGEMM /tmp/dgjit_inst --model v41flash --only t0,t1_e1,t1_e6 --raw-suffix _v41
fi
if on sms66; then
  run_variant plain_sms66 plain $P /tmp/dgjit_plain --num-sms 66 --only t0,t1_e1,t1_e6
  run_variant inst_sms66 inst $W/DeepGEMM /tmp/dgjit_inst --num-sms 66 --only t0,t1_e1,t1_e6 --raw-suffix _sms66
fi
ph "results"
cat $OUT/tl_kineto.csv | cut -d, -f1-17
ls -la $OUT
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
echo "== end at $(el)s"
