// rubinperf calibration: symbols that FlashMLA's sparse_decode.h (@ 9241ae3) dispatches to but this SM90-only build
// does not compile (the SM100 decode kernels, and the SM90 V3.2-format instantiations: only the MODEL1 / V4 format
// with 64 heads is built). Each throws if ever reached; on an SM90 GPU with MODEL1 inputs and 64 heads none is.
#include <stdexcept>
#include "params.h"
#include "sm90/decode/sparse_fp8/splitkv_mla.h"
#include "sm100/decode/head64/kernel.h"
#include "sm100/prefill/sparse/fwd_for_small_topk/head128/phase1.h"

namespace sm100::decode::head64 {
template<> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32>(const SparseAttnDecodeParams &) {
    throw std::runtime_error("rubinperf build: SM100 sparse decode not built"); }
template<> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::MODEL1>(const SparseAttnDecodeParams &) {
    throw std::runtime_error("rubinperf build: SM100 sparse decode not built"); }
}
namespace sm100::fwd_for_small_topk::head128 {
template<> void run_fwd_for_small_topk_phase1_kernel<SparseAttnFwdMode::DecodeWithSplitKV, 512>(
    const SparseFwdArgT<SparseAttnFwdMode::DecodeWithSplitKV> &) {
    throw std::runtime_error("rubinperf build: SM100 head128 decode not built"); }
}
namespace sm90::decode::sparse_fp8 {
template<> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32, 64>(const SparseAttnDecodeParams &) {
    throw std::runtime_error("rubinperf build: SM90 V3.2-format sparse decode not built"); }
template<> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32, 128>(const SparseAttnDecodeParams &) {
    throw std::runtime_error("rubinperf build: SM90 V3.2-format sparse decode not built"); }
#ifndef RUBINPERF_BUILD_H128
template<> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::MODEL1, 128>(const SparseAttnDecodeParams &) {
    throw std::runtime_error("rubinperf build: SM90 MODEL1 128-head sparse decode not built"); }
#endif
}
