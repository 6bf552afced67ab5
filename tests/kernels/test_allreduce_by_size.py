"""The TP all-reduce by message size: the algorithm a library picks, its bytes and rounds, hand-derived."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubinperf.kernels.collectives import (all_reduce_algorithm, all_reduce_as, all_reduce_by_size,
                                           all_reduce_multicast, all_reduce_one_shot, all_reduce_ring)
from rubinperf.roofline import kernel_time
from rubinperf.specs.stack import load_platform, load_stack

MiB = 1 << 20
TRT = (("one-shot", "two-shot", "ring"), (4 * MiB, 8 * MiB))   # TensorRT-LLM on SM100 at TP8 (stacks/trtllm-blackwell)
VLLM = (("one-shot", "two-shot", "multicast", "ring"), (2 * MiB, 4 * MiB, 128 * MiB))


@pytest.mark.parametrize("nbytes, want", [(1, "one-shot"), (4 * MiB - 1, "one-shot"), (4 * MiB, "two-shot"),
                                          (8 * MiB - 1, "two-shot"), (8 * MiB, "ring"), (1 << 40, "ring")])
def test_the_algorithm_below_and_above_each_switch_point(nbytes, want):
    assert all_reduce_algorithm(nbytes, *TRT) == want


def test_a_rack_without_multicast_falls_to_the_next_algorithm():
    assert all_reduce_algorithm(64 * MiB, *VLLM) == "multicast"
    assert all_reduce_algorithm(64 * MiB, *VLLM, multicast=False) == "ring"
    assert all_reduce_algorithm(1 * MiB, *VLLM, multicast=False) == "one-shot"   # the others need no switch


def test_bytes_and_rounds_of_each_algorithm_at_eight_ranks():
    b, n = 64 * MiB, 8
    one = all_reduce_one_shot(b, n, fused=False).cost
    assert (one.nvlink_bytes, one.nvlink_hops, one.collectives) == (7 * b, 1, 1)   # every other rank's partial, whole
    assert all_reduce_one_shot(b, n).cost.collectives == 0                         # in a GEMM epilogue: no set-up
    two = all_reduce_as("two-shot", b, n).cost
    assert (two.nvlink_bytes, two.nvlink_hops) == (pytest.approx(2 * 7 / 8 * b), 2)   # reduce-scatter + all-gather
    ring = all_reduce_ring(b, n).cost
    assert (ring.nvlink_bytes, ring.nvlink_hops) == (pytest.approx(2 * 7 / 8 * b), 14)  # 2 (n - 1) ring steps
    mc = all_reduce_multicast(b, n).cost
    assert (mc.nvlink_bytes, mc.nvlink_hops) == (pytest.approx(9 / 8 * b), 2)       # b + b/n each way through the switch


def test_a_64_mib_prefill_message_is_no_one_shot_and_a_decode_message_is():
    # Llama-3.1-70B TP8 prefill of 4K tokens: 4096 x 8192 x 2 B = 64 MiB; a decode step of 6 tokens: 96 KiB.
    hw = load_platform("b200")   # vLLM's stack: one-shot in the GEMM epilogue below 2 MiB
    kernel, name = all_reduce_by_size(64 * MiB, 8, hw.allreduce_algorithms, hw.allreduce_switch_bytes,
                                      multicast=hw.nvlink_multicast, fused_one_shot=hw.tp_allreduce_fused,
                                      switch_ranks=hw.allreduce_switch_ranks)
    assert name == "multicast"
    one_shot = all_reduce_one_shot(64 * MiB, 8)
    assert kernel_time(kernel, hw).expected_s < kernel_time(one_shot, hw).expected_s / 4   # 9/8 against 7 x the bytes
    assert all_reduce_by_size(6 * 8192 * 2, 8, hw.allreduce_algorithms, hw.allreduce_switch_bytes,
                              switch_ranks=hw.allreduce_switch_ranks)[1] == "one-shot"


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 1 << 31), min_size=2, max_size=12), multicast=st.booleans())
def test_an_array_of_sizes_picks_each_elements_own_algorithm(sizes, multicast):
    arr = np.array(sizes, dtype=float)
    kernel, _ = all_reduce_by_size(arr, 8, *VLLM, multicast=multicast)
    for i, b in enumerate(sizes):
        one, name = all_reduce_by_size(float(b), 8, *VLLM, multicast=multicast)
        assert name == all_reduce_algorithm(float(b), *VLLM, multicast=multicast)
        for field in ("nvlink_bytes", "nvlink_hops", "collectives"):
            assert float(np.broadcast_to(getattr(kernel.cost, field), arr.shape)[i]) == pytest.approx(float(getattr(one.cost, field)))


@pytest.mark.parametrize("name", ["trtllm-blackwell", "trtllm-hopper", "sglang-blackwell", "sglang-deepep-hopper",
                                  "pytorch-2.11", "vllm-gb300-oct2026", "vllm-gb300-oct2026-unoptimised",
                                  "vllm-rubin-nov2026"])
def test_every_stack_lists_its_algorithms_with_one_switch_point_fewer_per_row(name):
    st_ = load_stack(name)
    per = len(st_.allreduce_algorithms) - 1
    assert len(st_.allreduce_switch_bytes) == per * max(1, len(st_.allreduce_switch_ranks))
    for i in range(max(1, len(st_.allreduce_switch_ranks))):
        row = st_.allreduce_switch_bytes[i * per:(i + 1) * per]
        assert list(row) == sorted(row)
    assert st_.sources["collective"]


def test_llama_70b_tp8_prefill_is_faster_on_b200_than_on_h200_and_says_its_all_reduce(cli):
    def step(hw):
        r = cli("estimate", "-m", "llama-3.1-70b", "-H", hw, "-l", "tp8", "--phase", "prefill", "--json")
        assert r.code == 0, r
        (rec,) = r.json()
        return rec["step_time_ms"], [b["kernel"] for b in rec["breakdown"] if b["kernel"].startswith("all-reduce")]

    b200, names = step("b200")
    h200, _ = step("h200")
    assert b200 < h200
    # 32K new tokens x 8192 x 2 B = 512 MiB per message: past vLLM's 128 MiB multicast limit, NCCL's ring
    assert set(names) == {"all-reduce (attention, ring)", "all-reduce (FFN, ring)"}


def test_a_tp_size_takes_its_own_row_of_switch_points():
    # TensorRT-LLM on SM100 (stacks/trtllm-blackwell): one-shot below 16 MiB at TP2, below 8 MiB at TP4, below 4 MiB
    # at TP8 (then two-shot to 8 MiB); a 6 MiB message is one-shot at TP2 and TP4, two-shot at TP8.
    st_ = load_stack("trtllm-blackwell")
    assert st_.allreduce_switch_ranks == (2, 4, 8)
    args = (st_.allreduce_algorithms, st_.allreduce_switch_bytes)
    names = {n: all_reduce_by_size(6 * MiB, n, *args, switch_ranks=st_.allreduce_switch_ranks)[1] for n in (2, 4, 8)}
    assert names == {2: "one-shot", 4: "one-shot", 8: "two-shot"}
    assert all_reduce_by_size(12 * MiB, 2, *args, switch_ranks=(2, 4, 8))[1] == "one-shot"
    assert all_reduce_by_size(12 * MiB, 4, *args, switch_ranks=(2, 4, 8))[1] == "ring"    # no two-shot zone at TP4
    assert all_reduce_by_size(12 * MiB, 16, *args, switch_ranks=(2, 4, 8))[1] == "ring"   # past the last row: TP8's
