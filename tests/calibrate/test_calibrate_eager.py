"""The interleaved eager method (stub torch: a fake clock) and the torch-implementation geometry of rows.py."""

from __future__ import annotations

import types

import pytest

from rubinperf.calibrate import rows as rows_mod
from rubinperf.calibrate.measure import shapes as sb
from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.roofline import occupancy
from rubinperf.specs.stack import load_platform


class FakeTorch:
    """CUDA events read a fake clock that each call advances by its kernel time."""

    def __init__(self):
        self.now = 0.0
        self.log = []
        fake = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = fake.now

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3

        class Buffer:  # do_bench's flush: zeroing it takes GPU time before the timed call
            def zero_(self):
                fake.now += 60e-6

        self.int32 = "int32"
        self.empty = lambda *shape, dtype=None, device=None: Buffer()
        self.cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None, _sleep=lambda n: None)

    def kernel(self, name, seconds):
        def call():
            self.now += seconds
            self.log.append(name)
        return call


def _row(nbytes):
    return {"family": "copy", "dtype": "bf16", "nbytes": nbytes, "launches": 1, "impl": "stub"}


def test_eager_rows_are_the_median_of_interleaved_lone_launches():
    t = FakeTorch()
    a = sb.EagerEntry(_row(1 << 20), [t.kernel("a", 10e-6)], 10e-6)
    b = sb.EagerEntry(_row(1 << 22), [t.kernel("b0", 30e-6), t.kernel("b1", 30e-6)], 30e-6)
    out = sb.eager_interleaved(t, [a, b], rounds=4, samples=16, seed=1)
    # each entry's rows: do_bench's (eager), lone launches (cold) and back to back (stream)
    assert [[r["mode"] for r in rs] for rs in out] == [["eager", "cold", "stream"]] * 2
    (a_eager, a_cold, a_stream), (b_eager, b_cold, b_stream) = out
    # the flush before each do_bench call is outside its events: the kernel's own time
    assert a_eager["measured_s"] == pytest.approx(10e-6) and b_eager["measured_s"] == pytest.approx(30e-6)
    assert a_cold["measured_s"] == pytest.approx(10e-6) and b_cold["measured_s"] == pytest.approx(30e-6)
    assert a_stream["measured_s"] == pytest.approx(10e-6) and a_stream["calls"] == sb.STREAM_CALLS
    assert a_stream["samples"] == 4   # one back-to-back sample a round
    out = [a_cold, b_cold]
    assert out[0]["samples"] == out[1]["samples"] == 16 and out[0]["calls"] == 1
    assert out[0]["bytes"] == 2 * (1 << 20)  # the row's cost from the model's kernel functions
    assert out[0]["host_s"] is not None and out[0]["host_s"] >= 0
    # interleaved: the timed launches of a and b alternate in blocks of one visit (4 each), not all of a first
    timed = [n[0] for n in t.log]
    first_b = timed.index("b")
    assert "a" in timed[first_b:]
    assert {"b0", "b1"} <= set(t.log)  # the input sets rotate


def test_a_long_kernel_takes_fewer_lone_launches_but_one_a_round():
    t = FakeTorch()
    long = sb.EagerEntry(_row(1 << 30), [t.kernel("l", 0.05)], 0.05)
    ((eager, row),) = sb.eager_interleaved(t, [long], rounds=4, samples=64, max_s=0.1)
    assert (eager["mode"], row["mode"]) == ("eager", "cold")   # no back-to-back rows: 16 calls outlast the budget
    assert row["samples"] == 4 and row["host_s"] is None  # 4 x 0.05 s > max_s: one a round; no host reading
    assert eager["samples"] == 4 and eager["measured_s"] == pytest.approx(0.05)


def test_no_entries_no_rows():
    assert sb.eager_interleaved(FakeTorch(), []) == []


@pytest.mark.parametrize("dtype, rpe, n, tile", [
    ("fp8", 128, 4608, (64, 128)),   # small: M <= 128
    ("fp8", 129, 4608, (256, 128)),  # large with fast accumulation: K, N >= 2048
    ("fp8", 200, 128, (64, 128)),    # small: N <= 128
    ("bf16", 200, 4608, (128, 256)),
    ("bf16", 16, 4608, (64, 128)),
])
def test_torch_grouped_dispatch_picks_the_tile_of_pytorchs_source(dtype, rpe, n, tile):
    g = rows_mod.torch_grouped_geometry({"dtype": dtype, "rows": 12 * rpe, "groups": 12, "n": n, "k": 5120})
    assert (g["tile_rows"], g["tile_cols"]) == tile and g["m_tile_multiple"] == 2
    assert g["max_ctas"] == (116 if dtype == "fp8" else 132)


def test_cluster_rounding_pads_200_rows_to_512_and_a_persistent_grid_uses_its_ctas():
    hw = load_platform("h200")
    # 12 experts x 200 rows of FP8, 4608 x 5120: 256-row tiles, 1 per expert rounded up to 2 (cluster), 36 N tiles
    k = Kernel("grouped_gemm", Cost(launches=1), groups=12, rows=200, n=4608, k=5120, tile_rows=256, tile_cols=128,
               m_tile_multiple=2, max_ctas=116)
    ctas, share, padding = occupancy(k, hw)
    assert padding == pytest.approx(512 / 200)
    assert ctas == 116
    tiles = 12 * 2 * 36
    exact = tiles / 116
    waves = exact + hw.wave_quantization * (8 - exact)
    assert share == pytest.approx(116 / 132 * exact / waves)
    # 128 rows: two 64-row tiles, already even: no padding
    k128 = Kernel("grouped_gemm", Cost(launches=1), groups=12, rows=128, n=4608, k=5120, tile_rows=64, tile_cols=128,
                  m_tile_multiple=2, max_ctas=116)
    assert occupancy(k128, hw)[2] == pytest.approx(1.0)


def test_rms_norm_rows_keep_the_kernels_bytes_in_flight():
    row = {"family": "elementwise", "dtype": "fp32", "m": 8, "n": 20480, "nbytes": 2 * 8 * 20480 * 4, "launches": 1,
           "impl": "torch.nn.functional.rms_norm fp32"}
    (kern, by_host), = rows_mod.row_kernels(row)
    assert by_host and kern.ctas == 8 and kern.in_flight_bytes_per_cta == 128 * 4 * 16 == 8192
    assert kern.dependent_loads == 2
    assert float(kern.cost.hbm_bytes) == 3 * 8 * 20480 * 4  # read twice, written once
