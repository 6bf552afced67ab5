// rubinperf calibration: FlashMLA's Python binding with only the sparse decode (SM90 path) bound.
// FlashMLA @ 9241ae3 csrc/api/api.cpp binds five interfaces; this file binds one of them, unchanged.
#include <pybind11/pybind11.h>

#include "sparse_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "FlashMLA (SM90 sparse decode only, built for rubinperf's calibration)";
    m.def("sparse_decode_fwd", &sparse_attn_decode_interface);
}
