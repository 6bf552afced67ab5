#!/bin/bash
# One device call: build DeepGEMM's host extension (or reuse a carried build), warm its JIT cache on many
# cores, then time the SM90 kernels at DeepSeek-V4.1-Flash shapes.  Run from the repository root with
# .gpu/ carried; writes under $OUT.
#   BUDGET_S: seconds this script may use in all (default 540)
#   NSHARDS: parallel warm-up processes (default 14)
#   EXTRA:   extra arguments for the timing pass (e.g. "--only mqa_logits")
set -u
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
NSHARDS=${NSHARDS:-14}
G=$(pwd)/.gpu
W=/tmp/dgbuild
OUT=${OUT:-/tmp/out}
mkdir -p $W $OUT
exec > >(tee -a $OUT/run.log) 2>&1
export PYTHONUNBUFFERED=1
export DG_COMMIT=54e22612409371d6364144b69086735beb54e98b
export CUTLASS_COMMIT=f3fde58372d33e9a5650ba7b80fc48b3b49d40c8
export FMT_COMMIT=553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28
export DG_JIT_CACHE_DIR=/tmp/dgjit
el() { echo $(( $(date +%s) - T0 )); }
echo "== start $(date -u) budget ${BUDGET_S}s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv
which nvcc python3; nvcc --version | tail -1; gcc --version | head -1
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'

tar -xzf $G/src.tar.gz -C $W || { echo "untar failed"; exit 1; }
cd $W/DeepGEMM
ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass
ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
if [ -f $G/artifacts.tar.gz ]; then
  echo "== reusing carried build + JIT cache"
  tar -xzf $G/artifacts.tar.gz -C / || echo "artifact untar failed"
fi
if ! ls deep_gemm/_C*.so >/dev/null 2>&1; then
  echo "== building host extension at $(el)s"
  t=$(date +%s)
  python3 setup.py build > $OUT/build.log 2>&1
  rc=$?
  echo "== setup.py build rc=$rc in $(( $(date +%s) - t ))s"
  so=$(find build -name "_C*.so" -type f | head -n 1)
  if [ -z "$so" ]; then echo "no .so built"; tail -50 $OUT/build.log; exit 1; fi
  cp "$so" deep_gemm/
fi
export PYTHONPATH=$W/DeepGEMM:$W/DeepGEMM/tests
python3 -c 'import deep_gemm; print("deep_gemm", deep_gemm.__version__, deep_gemm.__file__, "sms", deep_gemm.get_num_sms())' || exit 1

B=$G/bench_deepgemm.py
python3 $B --mode env --out $OUT > /dev/null 2>&1 || echo "env failed"
SKIP=""; [ -f $G/done.csv ] && SKIP="--skip-csv $G/done.csv"
python3 $B --mode list $SKIP ${EXTRA:-} | tail -1

echo "== warm-up ($NSHARDS processes) at $(el)s"
WD=$(( T0 + BUDGET_S * 55 / 100 ))
# one case first, in this process's view, with a Python traceback on a crash (all 14 warm-up processes of the
# 2026-12-07 call died of SIGSEGV within a minute and their logs stayed on the device)
python3 -X faulthandler $B --mode warm --shard 0 --nshards $(( NSHARDS * 12 )) --deadline $(( T0 + BUDGET_S * 25 / 100 )) \
  $SKIP ${EXTRA:-} > $OUT/warm_first.log 2>&1 || { echo "first warm-up case failed: rc=$?"; tail -40 $OUT/warm_first.log; }
PIDS=()
for i in $(seq 0 $((NSHARDS - 1))); do
  python3 -X faulthandler $B --mode warm --shard $i --nshards $NSHARDS --deadline $WD $SKIP ${EXTRA:-} > /tmp/warm_$i.log 2>&1 &
  PIDS+=($!)
done
# wait for the warm-up processes only: a bare `wait` (bash >= 5.1) also waits for the `tee` of the process
# substitution above, which never ends: the 2026-12-07 call hung here until its limit
wait "${PIDS[@]}"
cat /tmp/warm_*.log > $OUT/warm.log
grep -c "diff" $OUT/warm.log | sed 's/^/warm cases checked: /'
grep -E "FAILED|deadline" $OUT/warm.log | head -20
echo "== warm-up done at $(el)s; JIT cache: $(ls $DG_JIT_CACHE_DIR/cache 2>/dev/null | wc -l) kernels"

# keep the build and JIT cache for the next call
(cd / && tar -czf $OUT/artifacts.tar.gz tmp/dgbuild/DeepGEMM/deep_gemm/_C*.so tmp/dgjit/cache)
ls -la $OUT/artifacts.tar.gz

echo "== timing at $(el)s"
python3 $B --mode time --out $OUT --deadline $(( T0 + BUDGET_S - 15 )) $SKIP ${EXTRA:-}
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
# the cache again, with anything the timing pass compiled
(cd / && tar -czf $OUT/artifacts.tar.gz tmp/dgbuild/DeepGEMM/deep_gemm/_C*.so tmp/dgjit/cache)
echo "== end at $(el)s"
