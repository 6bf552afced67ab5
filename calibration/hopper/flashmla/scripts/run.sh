#!/bin/bash
# One device call: build FlashMLA's SM90 sparse decode (own setup_sm90.py; or reuse a carried build), check it
# against a torch reference, then time it at DeepSeek-V4.1-Flash shapes. Run from the repository root with
# .gpu_flashmla/ carried; writes under $OUT.
#   BUDGET_S: seconds this script may use in all (default 540)
#   SET:      small = six cases then the rest; full = every case (default small, which goes on to the rest)
set -u
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
G=$(pwd)/.gpu_flashmla
W=/tmp/fmbuild
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
exec > >(tee -a $OUT/run.log) 2>&1
export PYTHONUNBUFFERED=1
export FLASHMLA_COMMIT=9241ae3ef9bac614dd25e45e507e089f888280e0
export CUTLASS_COMMIT=147f5673d0c1c3dcf66f78d677fd647e4a020219
el() { echo $(( $(date +%s) - T0 )); }
echo "== start $(date -u) budget ${BUDGET_S}s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv
which nvcc python3; nvcc --version | tail -1; /usr/bin/g++ --version | head -1
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'

rm -rf $W; mkdir -p $W
tar -xzf $G/src.tar.gz -C $W || { echo "untar failed"; exit 1; }
cd $W/FlashMLA
mkdir -p csrc/rubinperf
cp $G/stubs_sm90.cu csrc/rubinperf/; cp $G/api_sm90.cpp csrc/api/
cp $G/setup_sm90.py .
export FLASHMLA_SRC=$W/FlashMLA
# the system g++ (the /opt/gcc/bin/g++ wrapper links libstdc++'s locale code into extensions: calibration/hopper/README)
export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared" MAX_JOBS=16
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -f $G/flash_mla_so.tar.gz ]; then
  echo "== reusing the carried build"
  tar -xzf $G/flash_mla_so.tar.gz -C $W/FlashMLA/flash_mla/ || echo "so untar failed"
fi
if ! ls flash_mla/cuda*.so >/dev/null 2>&1; then
  echo "== building at $(el)s"
  t=$(date +%s)
  python3 setup_sm90.py build_ext --inplace > $OUT/build.log 2>&1
  echo "== build rc=$? in $(( $(date +%s) - t ))s"
  ls flash_mla/cuda*.so || { echo "no .so built"; grep -n -i -E "error|fatal" $OUT/build.log | head -40; tail -30 $OUT/build.log; exit 1; }
  (cd flash_mla && tar -czf $OUT/flash_mla_so.tar.gz cuda*.so)
fi
grep -E "registers|spill" $OUT/build.log 2>/dev/null | grep -v "0 bytes spill" | head -5
echo "libstdc++ locale objects inside the .so: $(nm -C flash_mla/cuda*.so 2>/dev/null | grep -c -E ' [tT] .*(codecvt|locale::)')"
export PYTHONPATH=$W/FlashMLA
cd /tmp
python3 -c 'import flash_mla, flash_mla.cuda as c; print("flash_mla", flash_mla.__file__, [n for n in dir(c) if not n.startswith("_")])' || exit 1
B=$G/bench_flashmla.py
echo "== env at $(el)s"
python3 $B --mode env --out $OUT > /dev/null 2>&1 || echo "env failed"
echo "== check at $(el)s"
timeout 150 python3 -X faulthandler $B --mode check --out $OUT; echo "check rc=$?"
SKIP=""; [ -f $G/done.csv ] && SKIP="--skip-csv $G/done.csv"
if [ "${SET:-small}" = "small" ]; then
  echo "== timing the small set at $(el)s"
  timeout 200 python3 -X faulthandler $B --mode time --set small --out $OUT $SKIP; echo "small rc=$?"
fi
echo "== timing the full set at $(el)s"
LEFT=$(( T0 + BUDGET_S - $(date +%s) - 20 ))
timeout $LEFT python3 -X faulthandler $B --mode time --set full --out $OUT --deadline $(( T0 + BUDGET_S - 45 )) $SKIP
echo "full rc=$?"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
echo "rows ok: $(grep -c ',ok$' $OUT/flashmla_sm90_raw.csv 2>/dev/null)"
echo "== end at $(el)s"
