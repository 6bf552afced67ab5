"""Roofline: Cost x Hardware -> speed-of-light and expected times, by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import HARDWARE_NAMES
from rubinperf.cost import Cost, KernelTime
from rubinperf.kernels import all_reduce, copy, gemm
from rubinperf.roofline import kernel_time

# Hand cases run on a pinned GPU: GB300 NVL72 with the numbers below fixed, so that calibration
# of the bundled spec cannot move them. BF16 2.5e15 FLOP/s at 0.75, FP8 5e15 at 0.72,
# HBM 8e12 B/s at 0.88 with every die factor 1, launch floor 2.5 us, collective floor 3 us,
# NVLink 900e9 B/s at 0.80 with 1.5 us per message and 0.3 us per cross-tray message,
# host min(256e9 LPDDR, 450e9 C2C) = 256e9 B/s at 0.80, scale-out 100e9 B/s at 0.85 + 5 us.
@pytest.fixture
def gb300(pinned_gb300):
    return pinned_gb300


def test_compute_bound_gemm(gb300):
    t = kernel_time(gemm(4096, 4096, 4096, weight="bf16"), gb300)
    # flops 137,438,953,472 / 2.5e15 = 54.9756 us;  bytes 100,663,296 / 8e12 = 12.5829 us
    sol_compute, sol_memory = 137_438_953_472 / 2.5e15, 100_663_296 / 8e12
    assert t.sol_compute_s == pytest.approx(54.9755813888e-6, rel=1e-12) == pytest.approx(sol_compute)
    assert t.sol_memory_s == pytest.approx(12.582912e-6, rel=1e-12) == pytest.approx(sol_memory)
    assert t.sol_s == pytest.approx(max(sol_compute, sol_memory), rel=1e-12)
    # expected: 54.9756 / 0.75 = 73.3008 us compute, 12.5829 / 0.88 = 14.2988 us memory, + 2.5 us floor
    assert t.compute_s == pytest.approx(73.3007751851e-6, rel=1e-9)
    assert t.memory_s == pytest.approx(14.2987636364e-6, rel=1e-9)
    assert t.floor_s == pytest.approx(2.5e-6)
    assert t.comm_s == 0
    assert t.expected_s == pytest.approx(75.8007751851e-6, rel=1e-9)
    assert t.bound == "compute"
    assert t.fraction_of_roofline == pytest.approx(54.9755813888 / 75.8007751851, rel=1e-9)


def test_memory_bound_copy(gb300):
    t = kernel_time(copy(1e9), gb300)
    # 2e9 B / 8e12 B/s = 250 us at the speed of light; / 0.88 = 284.0909 us, + 2.5 us floor
    assert t.sol_s == pytest.approx(250e-6, rel=1e-12)
    assert t.memory_s == pytest.approx(284.0909090909e-6, rel=1e-9)
    assert t.expected_s == pytest.approx(286.5909090909e-6, rel=1e-9)
    assert t.compute_s == 0 and t.sol_compute_s == 0
    assert t.bound == "memory"


def test_floor_bound_small_copy(gb300):
    t = kernel_time(copy(1024), gb300)
    # 2048 B / (8e12 * 0.88) = 0.29 ns: the 2.5 us launch floor dominates
    assert t.memory_s == pytest.approx(2048 / 7.04e12, rel=1e-12)
    assert t.sol_s == pytest.approx(2048 / 8e12, rel=1e-12)
    assert t.expected_s == pytest.approx(2.5e-6 + 2048 / 7.04e12, rel=1e-12)
    assert t.bound == "floor"


def test_launches_multiply_the_floor(gb300):
    t = kernel_time(copy(1024, launches=3), gb300)
    assert t.floor_s == pytest.approx(3 * 2.5e-6)


def test_comm_bound_all_reduce(gb300):
    t = kernel_time(all_reduce(1_000_000, 8, gpus_per_tray=4), gb300)
    # 1.75e6 B sent; SOL 1.75e6 / 900e9 = 1.9444 us
    assert t.sol_comm_s == pytest.approx(1.75e6 / 900e9, rel=1e-12)
    assert t.sol_s == pytest.approx(1.944444444e-6, rel=1e-9)
    # expected: 1.75e6 / 720e9 = 2.4306 us + 2 rounds * (1.5 + 0.3) us = 6.0306 us; + 3 us collective floor
    assert t.comm_s == pytest.approx(2.430555556e-6 + 3.6e-6, rel=1e-9)
    assert t.floor_s == pytest.approx(3e-6)
    assert t.expected_s == pytest.approx(9.030555556e-6, rel=1e-9)
    assert t.bound == "comm"


def test_mixed_peaks_add_their_times(gb300):
    cost = Cost.of_flops("fp8", 5e12) + Cost.of_flops("bf16", 2.5e12)
    t = kernel_time(cost, gb300)
    # 5e12 / 5e15 + 2.5e12 / 2.5e15 = 1 ms + 1 ms
    assert t.sol_compute_s == pytest.approx(2e-3)
    # 1 ms / 0.72 + 1 ms / 0.75 = 1.38889 + 1.33333 ms
    assert t.compute_s == pytest.approx(1e-3 / 0.72 + 1e-3 / 0.75)
    assert t.floor_s == 0  # no launches in a bare Cost


def test_host_and_scale_out_terms(gb300):
    t = kernel_time(Cost(host_bytes=1e9), gb300)
    # host rate = min(256e9 LPDDR5X, 450e9 C2C) = 256e9 B/s
    assert t.sol_memory_s == pytest.approx(1e9 / 256e9)             # 3.90625 ms
    assert t.memory_s == pytest.approx(1e9 / (256e9 * 0.80))        # 4.8828 ms
    t = kernel_time(Cost(scale_out_bytes=1e9, scale_out_hops=1), gb300)
    assert t.sol_comm_s == pytest.approx(1e9 / 100e9)               # 10 ms
    assert t.comm_s == pytest.approx(1e9 / 85e9 + 5e-6)
    assert t.bound == "comm"


def test_vr_die_local_weights(hardware_by_name):
    vr = dataclasses.replace(hardware_by_name["vr-nvl72"], hbm_bandwidth_bytes_per_s=22e12, hbm_efficiency=0.88,
                             hbm_local_bandwidth_factor=1.0, hbm_interleaved_bandwidth_factor=0.75)
    c = gemm(16, 7168, 2048, weight="fp8")   # weights 14,683,648 B, activations 262,152 B
    hbm = 22e12 * 0.88
    inter = kernel_time(c, vr)
    local = kernel_time(c, vr, die_local_weights=True)
    assert inter.memory_s == pytest.approx((14_683_648 + 262_152) / (hbm * 0.75), rel=1e-9)
    assert local.memory_s == pytest.approx(14_683_648 / hbm + 262_152 / (hbm * 0.75), rel=1e-9)
    # the speed of light ignores die placement
    assert inter.sol_s == local.sol_s == pytest.approx(14_945_800 / 22e12, rel=1e-9)


@pytest.mark.parametrize("name", HARDWARE_NAMES)
def test_roofline_formula_on_every_hardware(name, hardware_by_name):
    hw = hardware_by_name[name]
    c = gemm(256, 7168, 2048, weight="fp8")
    flops, nbytes = 2 * 256 * 7168 * 2048, c.bytes
    t = kernel_time(c, hw)
    sol = max(flops / hw.fp8_dense_flops_per_s, nbytes / hw.hbm_bandwidth_bytes_per_s)
    assert t.sol_s == pytest.approx(sol, rel=1e-12)
    hbm = hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency * hw.hbm_interleaved_bandwidth_factor
    compute = flops / (hw.fp8_dense_flops_per_s * hw.fp8_compute_efficiency)
    assert t.expected_s == pytest.approx(max(compute, nbytes / hbm) + hw.kernel_launch_floor_s, rel=1e-12)
    assert t.bound in ("compute", "memory", "floor")
    assert t.expected_s >= t.sol_s


def test_roofline_vectorises_over_numpy(gb300):
    m = np.array([1, 16, 256, 4096])
    t = kernel_time(gemm(m, 7168, 2048, weight="fp8"), gb300)
    for i, mi in enumerate(m):
        ti = kernel_time(gemm(int(mi), 7168, 2048, weight="fp8"), gb300)
        assert t.expected_s[i] == pytest.approx(ti.expected_s)
        assert t.sol_s[i] == pytest.approx(ti.sol_s)


def test_kernel_time_add_and_scale(gb300):
    a = kernel_time(copy(1e6), gb300)
    b = kernel_time(gemm(64, 64, 64), gb300)
    s = a + b
    for f in dataclasses.fields(KernelTime):
        assert getattr(s, f.name) == pytest.approx(getattr(a, f.name) + getattr(b, f.name))
        assert getattr(3 * a, f.name) == pytest.approx(3 * getattr(a, f.name))
