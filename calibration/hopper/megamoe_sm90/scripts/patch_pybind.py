"""Let DeepGEMM's plain torch extension (setup.py, pybind11) expose the SM90 FP8 Mega MoE of the PR #323 fork.

The fork (github.com/qiushixiaoyu/DeepGEMM @ 820861bd3edb, rebased on deepseek-ai/DeepGEMM 54e2261) builds its host
side with tvm-ffi (sgl_deep_gemm/__init__.py, csrc/tvm_ffi_api.cpp) and wraps each csrc/apis/*.hpp `register_apis`
(pybind11) in `#if 0`; `fp8_mega_moe` has a pybind registration (`register_sm90_apis`, csrc/apis/sm90_mega.hpp) that
nothing calls. This build-time patch removes the seven `#if 0` guards and calls `register_sm90_apis` from
csrc/python_api.cpp, so the project's existing setup.py recipe (calibration/hopper/scripts/run.sh) builds the same
host functions and the same JIT kernels. Host glue only: no kernel source changes."""
import os
import re
import sys

root = sys.argv[1]
for name in ("attention", "einsum", "gemm", "hyperconnection", "layout", "mega", "runtime"):
    path = os.path.join(root, "csrc/apis", name + ".hpp")
    src = open(path).read()
    i = src.index("\n#if 0\n")
    j = src.index("\n#endif\n", src.index("static void register_apis", i))
    # the register_apis body ends with its own `}` then the guard's `#endif`
    src = src[:i] + "\n" + src[i + len("\n#if 0\n"):j] + "\n" + src[j + len("\n#endif\n"):]
    assert "#if 0" not in src, path
    open(path, "w").write(src)
    print("unguarded", path)
path = os.path.join(root, "csrc/python_api.cpp")
src = open(path).read()
src = src.replace('#include <pybind11/pybind11.h>\n', '#include <pybind11/pybind11.h>\n#include <pybind11/functional.h>\n#include <pybind11/stl.h>\n', 1)
src = src.replace('#include "apis/mega.hpp"\n', '#include "apis/mega.hpp"\n#include "apis/sm90_mega.hpp"\n', 1)
src = src.replace("    deep_gemm::mega::register_apis(m);\n",
                  "    deep_gemm::mega::register_apis(m);\n    deep_gemm::mega::register_sm90_apis(m);\n", 1)
assert "register_sm90_apis" in src and "sm90_mega.hpp" in src and "functional.h" in src
open(path, "w").write(src)
print("patched", path)

# Diagnostic switch (2026-12-07, second call): DG_SM90_MEGA_NO_SWAP_AB=1 makes should_use_swap_ab_for_mega_moe_sm90
# (heuristics/sm90_mega_moe.hpp, used by both the config and the launch) return false, i.e. the PR #323 kernel's
# non-swapAB decode path (block_m 64 x block_n 128, two math warpgroups splitting N) at 1-128 tokens. Unset: unchanged.
path = os.path.join(root, "csrc/jit_kernels/heuristics/sm90_mega_moe.hpp")
src = open(path).read()
old = "    const bool decode_split_n_path =\n        block_m == 64 and num_epilogue_threads == 256;\n    return decode_split_n_path and num_tokens <= 128"
assert old in src, "swap_ab heuristic not found"
src = src.replace(old, "    if (get_env<int>(\"DG_SM90_MEGA_NO_SWAP_AB\"))\n        return false;\n" + old, 1)
open(path, "w").write(src)
print("patched", path)
