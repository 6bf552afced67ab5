"""rubinperf calibration: build FlashMLA's SM90 sparse FP8 decode only (github deepseek-ai/FlashMLA @ 9241ae3).

Run from the FlashMLA source root with api_sm90.cpp copied into csrc/api/ and stubs_sm90.cu into csrc/rubinperf/. The nvcc and
g++ flags are FlashMLA's own setup.py's (@ 9241ae3), with one target, sm_90a. Sources: the binding (sparse decode
only), the decode scheduler-metadata kernel and the split-KV combine kernel that sparse_attn_decode_interface calls,
and the SM90 sparse decode instantiation for the MODEL1 (V4) cache format at 64 heads (128 heads too with
RUBINPERF_BUILD_H128=1).
"""
import os
from pathlib import Path

from setuptools import setup, find_packages
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

this_dir = Path(os.path.dirname(os.path.abspath(__file__)))
h128 = os.getenv("RUBINPERF_BUILD_H128", "0") == "1"
defines = ["-DRUBINPERF_BUILD_H128"] if h128 else []
sources = [
    "csrc/api/api_sm90.cpp",
    "csrc/rubinperf/stubs_sm90.cu",
    "csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
    "csrc/smxx/decode/combine/combine.cu",
    "csrc/sm90/decode/sparse_fp8/instantiations/model1_persistent_h64.cu",
] + (["csrc/sm90/decode/sparse_fp8/instantiations/model1_persistent_h128.cu"] if h128 else [])

setup(
    name="flash_mla",
    version="1.0.0+9241ae3.sm90sparse",
    packages=find_packages(include=["flash_mla"]),
    ext_modules=[CUDAExtension(
        name="flash_mla.cuda",
        sources=sources,
        extra_compile_args={
            "cxx": ["-O3", "-std=c++20", "-DNDEBUG", "-Wno-deprecated-declarations"] + defines,
            "nvcc": ["-O3", "-std=c++20", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
                     "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                     "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                     "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
                     "--ptxas-options=-v,--register-usage-level=10,--warn-on-spills,--warn-on-local-memory-usage",
                     "-lineinfo", "-gencode", "arch=compute_90a,code=sm_90a", "--threads", "4"] + defines,
        },
        include_dirs=[this_dir / "csrc", this_dir / "csrc" / "kerutils" / "include", this_dir / "csrc" / "sm90",
                      this_dir / "csrc" / "cutlass" / "include",
                      this_dir / "csrc" / "cutlass" / "tools" / "util" / "include"],
    )],
    cmdclass={"build_ext": BuildExtension},
)
