#!/bin/bash
# Where DeepGEMM 2.6.1's SIGSEGV comes from (every tensor call of the 2026-12-07 calls): build once, then one call a
# process: no tensor, tensors without the JIT (cuBLASLt, a non-contiguous layout copy), the JIT (a transpose kernel),
# each with DG_JIT_DEBUG=1; ldd of the extension.
set -u
G=$(pwd)/.gpu; W=/tmp/dgdiag; OUT=${OUT:-/tmp/out}
rm -rf $W; mkdir -p $W $OUT
exec > >(tee -a $OUT/diag_run.log) 2>&1
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda DG_JIT_CACHE_DIR=/tmp/dgjit_diag DG_JIT_DEBUG=1
tar -xzf $G/src.tar.gz -C $W && cd $W/DeepGEMM
ln -sfn $W/DeepGEMM/third-party/cutlass/include/cutlass deep_gemm/include/cutlass
ln -sfn $W/DeepGEMM/third-party/cutlass/include/cute deep_gemm/include/cute
t=$(date +%s); python3 setup.py build > $OUT/diag_build.log 2>&1; echo "build rc=$? in $(( $(date +%s) - t ))s"
so=$(find build -name "_C*.so" -type f | head -n 1); cp "$so" deep_gemm/
ldd deep_gemm/_C*.so | grep -E "cuda|torch|c10|nvrtc|stdc|python" 
python3 -c 'import torch, os; print(torch.__file__); import glob; print(glob.glob(os.path.dirname(torch.__file__)+"/../nvidia/*/lib/libcudart*"))'
cd /tmp; export PYTHONPATH=$W/DeepGEMM
run() { echo "=== $1"; timeout 150 python3 -X faulthandler -c "import torch, deep_gemm; $2" 2>&1 | tail -25; echo "rc=${PIPESTATUS[0]}"; }
run "no tensor" 'print(deep_gemm.get_num_sms(), deep_gemm.get_tma_aligned_size(256, 4))'
run "cublaslt (tensors, no JIT)" 'a = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16); b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16); d = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16); deep_gemm.cublaslt_gemm_nt(a, b, d); torch.cuda.synchronize(); print("ok", float((d.float() - a.float() @ b.float().t()).abs().max()))'
run "layout copy (tensor, no JIT)" 'x = torch.randn(64, 256, device="cuda").t(); y = deep_gemm.get_mn_major_tma_aligned_tensor(x); print("ok", y.shape)'
run "JIT transpose" 'x = torch.randn(256, 64, device="cuda"); y = deep_gemm.get_mn_major_tma_aligned_tensor(x); torch.cuda.synchronize(); print("ok", y.shape)'
DG_JIT_USE_NVRTC=1 run "JIT transpose, NVRTC" 'x = torch.randn(256, 64, device="cuda"); y = deep_gemm.get_mn_major_tma_aligned_tensor(x); torch.cuda.synchronize(); print("ok", y.shape)'
ls -la /tmp/dgjit_diag/cache 2>/dev/null | head
