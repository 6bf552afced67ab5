"""FlashMLA's SM90 sparse FP8 decode, built from source and timed on an H100 at DeepSeek-V4.1-Flash shapes
(calibration/hopper/flashmla/): the rows load and are predicted through the step's sparse attention on
h100-cluster / sglang-deepep-hopper, the split between fit and held-out rows is the stated one, the held-out error stays
under its bound, and the kernel's persistent split-KV schedule (flashmla_sm90_schedule) is FlashMLA's own."""

from __future__ import annotations

import statistics

import pytest

from rubinperf.analysis import kernel_evidence as KE
from rubinperf.analysis.evidence import load_evidence, own_paths
from rubinperf.kernels.attention import flashmla_sm90_schedule, sparse_attention
from rubinperf.roofline import serial_chain
from rubinperf.specs.stack import load_platform

ROWS = [r for r in KE.own_rows() if r.kernel == "sparse_mla_decode"]
RECORDS = KE.kernel_records(ROWS)
H100 = load_platform("h100-cluster", "sglang-deepep-hopper")


def test_rows_load_one_kineto_row_per_case():
    every = load_evidence(own_paths()[1], own_runs=True)
    # kineto, flushed CUDA events and graph per case: the first call's 80 cases, the second call's 12 of top-k 256-2048
    assert len(every) == 3 * 92
    assert sum(":run2:" in r.id for r in ROWS) == 12
    assert len(ROWS) == 92 and {r.gpu for r in ROWS} == {"h100"} and {r.source for r in ROWS} == {"own run"}
    assert all(r.id.endswith(":kineto") for r in ROWS)
    assert all({"batch", "heads", "seq_q", "topk_tokens", "context", "head_dim", "head_dim_v"} <= set(r.shape)
               for r in ROWS)
    assert {r.shape["heads"] for r in ROWS} == {64} and {r.shape["head_dim"] for r in ROWS} == {512}


def test_rows_are_predicted_on_the_hopper_stack_and_held_out_as_stated():
    assert all(r["skipped"] is None and r["predicted_us"] > 0 for r in RECORDS)
    fit = {r["id"] for r in RECORDS if r["split"] == "fit"}
    # fit: the first call's batch 1, 4, 16 and 64 (38 rows); held out: its batch 2, 8, 32 and 128 (42 rows) and the
    # second call's top-k rows (12), timed after the fit
    assert len(fit) == 38 and len(RECORDS) - len(fit) == 54
    assert all(r.shape["batch"] in (1, 4, 16, 64) and ":run2:" not in r.id for r in ROWS if r.id in fit)
    assert all(r.shape["batch"] in (2, 8, 32, 128) or ":run2:" in r.id for r in ROWS if r.id not in fit)


def test_held_out_error_stays_under_its_bound():
    """As committed: held-out median |ln| 0.043, worst 0.305 (batch 1-2 at one block a CTA, predicted long: the
    combine's fixed part; worst at top-k 2048, batch 1); the top-k rows alone 0.091 / 0.305; the project's bar is
    0.15 / 0.5."""
    held = sorted(r["abs_log"] for r in RECORDS if r["split"] == "held-out")
    assert statistics.median(held) <= 0.06 and held[-1] <= 0.35
    topk = sorted(r["abs_log"] for r in RECORDS if ":run2:" in r["id"])
    assert len(topk) == 12 and statistics.median(topk) <= 0.12


def _schedule_loop(seqs, n, parts, fixed=5):
    """FlashMLA's scheduler as its code runs it (csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu
    @ 9241ae3, the loop over num_sm_parts): the blocks each part runs and the splits of each request."""
    payload = -(-seqs * (n + fixed) // parts) + fixed
    blocks, splits, req, blk = [], [0] * seqs, 0, 0
    for _ in range(parts):
        rem, mine = payload, 0
        while req < seqs:
            left = n - blk
            if rem >= left + fixed:
                mine += left
                splits[req] += 1
                rem -= left + fixed
                req, blk = req + 1, 0
            else:
                if rem - fixed > 0:
                    blk += rem - fixed
                    mine += rem - fixed
                    splits[req] += 1
                break
        blocks.append(mine)
    return blocks, splits


@pytest.mark.parametrize("seqs", [1, 2, 5, 13, 32, 64, 100, 128, 200, 257])
@pytest.mark.parametrize("q_per_seq", [1, 2, 3, 6])
@pytest.mark.parametrize("topk, window", [(512, 128), (512, 0), (2048, 0), (128, 0), (1024, 128)])
def test_schedule_closed_form_is_the_schedulers_loop(seqs, q_per_seq, topk, window):
    ctas, longest, splits, split = flashmla_sm90_schedule(seqs, q_per_seq, 64, topk, window, 132)
    parts = max(132 // q_per_seq, 1)
    n = -(-window // 64) + -(-topk // 64)
    blocks, per_request = _schedule_loop(seqs, n, parts)
    assert ctas == q_per_seq * parts
    assert longest == max(blocks)
    # the combine's chain: the most splits of a request (1 where none splits), exact or one over
    assert max(per_request) <= splits <= max(per_request) + 1
    assert split == (max(per_request) > 1)


def test_chain_by_hand():
    # 128 sequences x 6 tokens (the MTP verify), top-k 512 + window 128: 22 parts a position, 10 blocks a request,
    # payload ceil(128 x 15 / 22) + 5 = 93 units: 6 whole requests, 60 blocks; no request splits, so each CTA's last
    # tile is a BF16 output, 64 heads x 512 x 2 B, 132 CTAs at once
    k = sparse_attention(768, 128, 6, 32768, 64, 1, 512, 128, 584, 512, 512, False, "bf16", 19, 2, 25.0, 448,
                         persistent_sms=132, block_cycles=8570.0)
    assert (k.ctas, k.serial_steps, k.reduce_loads) == (132, 60, 3)
    assert k.tail_store_bytes == 132 * 64 * 512 * 2
    rate = H100.hbm_bandwidth_bytes_per_s * H100.hbm_stream_efficiency * H100.hbm_interleaved_bandwidth_factor
    assert serial_chain(k, H100, k.ctas) == pytest.approx(60 * 8570 / 1.98e9 + 132 * 64 * 512 * 2 / rate)
    # one sequence, one token: 132 parts, the 10 blocks over 10 CTAs of one block each; the request splits 10 ways,
    # so the tiles are FP32 partial outputs and the combine loads 2 + 11 (one over the loop's 10) one after another
    one = sparse_attention(1, 1, 1, 32768, 64, 1, 512, 128, 584, 512, 512, False, "bf16", 19, 2, 25.0, 448,
                           persistent_sms=132, block_cycles=8570.0)
    assert (one.serial_steps, one.reduce_loads, one.tail_store_bytes) == (1, 13, 132 * 64 * 512 * 4)


def test_other_stacks_keep_megaattn():
    # no block cycles (the Blackwell stacks): one or two tokens per CTA, no chain, as before
    k = sparse_attention(768, 128, 6, 32768, 64, 1, 512, 128, 584, 512, 512, False, "bf16", 19, 2, 25.0, 448)
    assert k.serial_steps is None and k.ctas == 384
    # 128 heads (V3.2 on a 2-CTA cluster, whose CTAs share each block): not this chain either
    k = sparse_attention(256, 128, 2, 8192, 128, 1, 2048, 0, 656, 576, 512, False, "bf16", 19, 1, 25.0, 512,
                         persistent_sms=132, block_cycles=8570.0)
    assert k.serial_steps is None


def test_the_step_uses_the_chain_on_the_hopper_stack():
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.model import load_model
    from rubinperf.step.point import make_point

    m = load_model("deepseek-v4.1-flash")
    lay = parse_layout("dep8")
    assert make_point(m, H100, lay, batch=32).sparse_decode_sms == 132
    assert make_point(m, H100, lay, batch=32).sparse_decode_block_cycles == H100.sparse_decode_block_cycles
    gb300 = load_platform("gb300-nvl72", "vllm-gb300-oct2026")
    assert make_point(m, gb300, lay, batch=32).sparse_decode_sms is None


def test_fit_gives_the_stack_value_back():
    found, err = KE.fit_family(KE.own_rows(), "sparse_mla_decode", "sm90")
    assert found["sparse_decode_block_cycles"] == pytest.approx(H100.sparse_decode_block_cycles, rel=0.01)
    assert err < 0.08
