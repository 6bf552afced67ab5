"""The own one-GPU runs of the SM90 FP8 Mega MoE (DeepGEMM PR #323's fork, calibration/hopper/megamoe_sm90/) in the
kernel evidence: they load as measured rows that the kernel section lists without a prediction, and they obey what
the kernel's memory traffic allows (no expert's weights faster than the card's datasheet HBM rate)."""

from __future__ import annotations

import statistics

from rubinperf.analysis import kernel_evidence as KE
from rubinperf.analysis.evidence import load_evidence, own_paths

ROWS = [r for r in KE.own_rows() if r.kernel == "mega_moe_sm90"]
H100_HBM_BPS = 3.35e12          # H100 SXM5 80 GB HBM3 datasheet


def test_rows_load_one_kineto_row_per_case():
    every = load_evidence(own_paths()[2], own_runs=True)
    assert len(every) == 3 * 96                         # kineto, CUDA events and graph per case
    # the first call's 66 cases (heuristic defaults), the second call's 26 with swapAB off and 4 probes (its two
    # 0-token probes stay in the raw file: the schema takes positive sizes only)
    assert len(ROWS) == 96 and {r.gpu for r in ROWS} == {"h100"}
    assert sum(":run2:noswap:" in r.id for r in ROWS) == 26 and sum(":run2:probe:" in r.id for r in ROWS) == 4
    # both models, one rank holding every expert
    assert {(r.shape["experts"], r.shape["hidden"], r.shape["intermediate"]) for r in ROWS} == {
        (256, 4096, 2048), (384, 5120, 2304)}
    assert {r.shape["ep"] for r in ROWS} == {1}


def test_rows_are_listed_but_not_predicted():
    recs = KE.kernel_records(ROWS)
    assert all(r["skipped"] and "SM100" in r["skipped"] for r in recs)


def _touch(model_experts):
    by = {}
    for r in ROWS:
        s = r.shape
        if s["experts"] == model_experts and s["tokens_per_rank"] <= 8 and "_touch_" in r.id:
            by.setdefault(int(s["experts_touched"]), []).append(r.measured_us)
    return {e: statistics.mean(v) for e, v in by.items()}


def test_no_expert_streams_faster_than_the_hbm():
    # each further expert's weights (3 x hidden x intermediate FP8 + FP32 128 x 128 block scales) cannot arrive faster
    # than the datasheet HBM rate: 25.17 MB a V4-Flash expert, 35.41 MB a V4.1-Flash one, 24 -> 48 experts
    for experts, hidden, inter in ((256, 4096, 2048), (384, 5120, 2304)):
        per = 3 * hidden * inter + 4 * (2 * inter // 128 * hidden // 128 + hidden // 128 * inter // 128)
        t = _touch(experts)
        assert (t[48] - t[24]) * 1e-6 >= 24 * per / H100_HBM_BPS


def test_time_set_by_experts_not_tokens():
    # at six experts the 1-8 tokens (6 to 48 token-expert pairs) move the time by under 5%
    for experts in (256, 384):
        six = [r.measured_us for r in ROWS if r.shape["experts"] == experts and r.shape["tokens_per_rank"] <= 8
               and "_touch_" in r.id and r.shape["experts_touched"] == 6 and ":run2:" not in r.id]
        assert len(six) == 4 and max(six) / min(six) < 1.05


def test_swap_ab_off_rows_passed_the_check_and_the_fixed_part_is_measured():
    noswap = [r for r in ROWS if ":run2:noswap:" in r.id]
    assert noswap and not any("CHECK FAILED" in r.notes for r in noswap)
    # 0 tokens (the raw probe file): the fixed part alone; one expert adds at least its weights (25.17 MB) at the
    # datasheet HBM rate
    import csv

    from rubinperf.bundled import folder

    path = folder("calibration") / "hopper" / "megamoe_sm90" / "h100_run2" / "megamoe_sm90_probe.csv"
    probe = {(r["case_id"], r["num_sms"]): float(r["kineto_us"]) for r in csv.DictReader(path.open())}
    zero, one = probe[("v4flash:t0:random", "132")], probe[("v4flash:t1:touch:e1", "132")]
    assert 0 < zero < one and (one - zero) * 1e-6 >= 25_170_000 / H100_HBM_BPS
    # halving the SMs (66) leaves the fixed part within 10%: it is not a per-SM cost
    assert abs(probe[("v4flash:t0:random", "66")] / zero - 1) < 0.1
