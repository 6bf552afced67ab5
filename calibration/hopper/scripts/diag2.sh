#!/bin/bash
# A C backtrace of the JIT call's SIGSEGV (LD_PRELOAD of .gpu/segv.c), frames resolved with addr2line.
set -u
G=$(pwd)/.gpu; W=${W:-/tmp/dgdiag}; OUT=${OUT:-/tmp/out}
exec > >(tee -a $OUT/diag2.log) 2>&1
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda DG_JIT_CACHE_DIR=/tmp/dgjit_diag DG_JIT_DEBUG=1
if ! ls $W/DeepGEMM/deep_gemm/_C*.so >/dev/null 2>&1; then
  rm -rf $W; mkdir -p $W; tar -xzf $G/src.tar.gz -C $W && cd $W/DeepGEMM
  ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass
  ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
  t=$(date +%s); python3 setup.py build > /dev/null 2>&1; echo "build rc=$? in $(( $(date +%s) - t ))s"
  cp $(find build -name "_C*.so" -type f | head -n 1) deep_gemm/
else echo "reusing the warm machine's build"; fi
gcc -shared -fPIC -o /tmp/segv.so $G/segv.c -ldl && echo "segv.so built"
cd /tmp; export PYTHONPATH=$W/DeepGEMM
LD_PRELOAD=/tmp/segv.so timeout 150 python3 -c 'import torch, deep_gemm; x = torch.randn(256, 64, device="cuda"); y = deep_gemm.get_mn_major_tma_aligned_tensor(x); torch.cuda.synchronize(); print("ok")' > /tmp/bt.txt 2>&1
echo "rc=$?"; grep -v FRAME /tmp/bt.txt | tail -20
grep FRAME /tmp/bt.txt | head -40 | while read -r _ i obj off sym; do
  loc=""; case "$obj" in *_C*.so) loc=$(addr2line -C -f -i -e "$obj" "$off" 2>/dev/null | paste -sd' ' | cut -c1-300);; esac
  echo "#$i $(basename $obj) $off $sym $loc"
done
ls $DG_JIT_CACHE_DIR 2>/dev/null | head; find $DG_JIT_CACHE_DIR -maxdepth 3 2>/dev/null | head
