"""The own H200 measurements of DeepGEMM's SM90 kernels (calibration/hopper/deepgemm_sm90_evidence.csv) in the kernel
evidence: they load, one primary (kineto) row per case is predicted through the step's kernel functions on h200 /
sglang-deepep-hopper, each family's held-out error stays under a stated bound, and the SM90 pre-norm GEMM's chain of
K blocks (the one mechanism fitted to these rows) has its hand-derived value."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest

from rubinperf.analysis import kernel_evidence as KE
from rubinperf.analysis.evidence import load_evidence, own_path
from rubinperf.errors import SpecError
from rubinperf.kernels import hc_prenorm_gemm
from rubinperf.roofline import kernel_time, serial_chain
from rubinperf.specs.stack import load_platform

OWN = KE.own_rows()
H200 = load_platform("h200", "sglang-deepep-hopper")
RECORDS = KE.kernel_records(OWN)


def test_own_rows_load_one_primary_row_per_case():
    every = load_evidence(own_path(), own_runs=True)
    assert len(every) == 3 * 153 + 23                  # H200: flushed, graph and kineto per case; H100 probe: kineto
    # ... FlashMLA's SM90 sparse decode on an H100 (calibration/hopper/flashmla/): 92 cases, one kineto row each, and
    # the SM90 FP8 Mega MoE of PR #323's fork on one H100 (calibration/hopper/megamoe_sm90/): 66 + 26 + 4 cases
    assert len(OWN) == 153 + 23 + 92 + 96 and all(r.id.endswith(":kineto") for r in OWN)
    assert {r.gpu for r in OWN} == {"h200", "h100"} and {r.source for r in OWN} == {"own run"}
    assert {r.kernel for r in OWN if r.gpu == "h100"} == {"fp8_gemm", "sparse_mla_decode", "mega_moe_sm90"}
    assert {r.kernel for r in OWN} == {"fp8_gemm", "grouped_gemm_masked", "grouped_gemm_contiguous", "mqa_logits",
                                       "mqa_logits_paged", "hc_prenorm_gemm", "sparse_mla_decode", "mega_moe_sm90"}


def test_own_source_only_where_the_loader_is_told(tmp_path):
    # the public table keeps its rule: an own run's row there is an error
    text = own_path().read_text().splitlines()
    path = tmp_path / "k.csv"
    path.write_text("\n".join(text[:2]) + "\n")
    with pytest.raises(SpecError, match="source_url"):
        load_evidence(path)
    assert len(load_evidence(path, own_runs=True)) == 1


def test_every_own_row_is_predicted_on_the_hopper_stack():
    # ... but the SM90 Mega MoE's, which are measured, not predicted (rubinperf models the SM100 kernel)
    mega = [r for r in RECORDS if r["kernel"] == "mega_moe_sm90"]
    assert len(mega) == 96 and all(r["skipped"] and "SM90 FP8 Mega MoE" in r["skipped"] for r in mega)
    assert all(r["skipped"] is None and r["predicted_us"] > 0 for r in RECORDS if r["kernel"] != "mega_moe_sm90")
    plat = KE.platform_of(OWN[0])
    assert (plat.name, plat.stack) == ("h200", "sglang-deepep-hopper")
    plat = KE.platform_of(next(r for r in OWN if r.kernel == "sparse_mla_decode"))
    assert (plat.name, plat.stack) == ("h100-cluster", "sglang-deepep-hopper")


def test_the_h100_probe_rows_are_held_out_and_near():
    """The one-token probe on an H100 (calibration/hopper/probe_sm90_h100.csv: K 1024-8192 x N 128-16384 at m = 1,
    and m = 16-64), none seen by a fit: median |ln| 0.124 as committed (the model's floor long at K 1024, its K slope
    short at K 8192), under the project's bar of 0.15; every row within 0.5."""
    probe = [r for r in RECORDS if r["gpu"] == "h100" and r["kernel"] == "fp8_gemm"]
    assert len(probe) == 23 and {r["split"] for r in probe} == {"held-out"}
    errors = sorted(r["abs_log"] for r in probe)
    assert errors[len(errors) // 2] <= 0.15 and errors[-1] <= 0.5


# Held-out median |ln(measured / predicted)| per family: at most these (the model as committed: 0.064, 0.040, 0.055,
# 0.127, 0.080 and 0.152); the project's bar is 0.15 (kernel_evidence.HELD_OUT_MEDIAN_MAX), the pre-norm GEMM's 16-split
# rows just miss it (their CTAs' pipeline fill, a wave at a time, is not modelled: docs/deepseek-kernels.md)
BOUNDS = {"fp8_gemm": 0.1, "grouped_gemm_masked": 0.08, "grouped_gemm_contiguous": 0.1, "mqa_logits": 0.15,
          "mqa_logits_paged": 0.12, "hc_prenorm_gemm": 0.2}


@pytest.mark.parametrize("kernel", sorted(BOUNDS))
def test_held_out_error_per_family_stays_under_its_bound(kernel):
    held = [r["abs_log"] for r in RECORDS if r["kernel"] == kernel and r["split"] == "held-out"]
    assert len(held) >= 5
    assert statistics.median(held) <= BOUNDS[kernel]


def test_prenorm_split_rows_are_held_out_and_the_others_fitted():
    hc = [r for r in RECORDS if r["kernel"] == "hc_prenorm_gemm"]
    assert {r["split"] for r in hc if "num_splits=16" in r["id"]} == {"held-out"}
    assert {r["split"] for r in hc if "num_splits=0" in r["id"]} == {"fit"}


def test_prenorm_chain_by_hand():
    # one token, no split: one CTA runs all 20480 / 64 = 320 K blocks, 445 cycles each at 1.98 GHz: 71.9 us
    k = hc_prenorm_gemm(1, 20480, 24, splits=1)
    assert k.ctas == 1 and k.serial_steps == 320
    assert serial_chain(k, H200, 1) == pytest.approx(320 * 445 / 1.98e9)
    assert kernel_time(k, H200).compute_s == pytest.approx(320 * 445 / 1.98e9)
    # 16 splits: 20 K blocks a CTA; 16384 tokens, no split: 256 CTAs, two waves over 132 SMs
    assert hc_prenorm_gemm(1, 20480, 24, splits=16).serial_steps == 20
    big = hc_prenorm_gemm(16384, 20480, 24, splits=1)
    assert serial_chain(big, H200, big.ctas) == pytest.approx(2 * 320 * 445 / 1.98e9)
    # a stack without the chain (0 cycles: the Blackwell stacks, whose SM100 kernel is another) keeps the old time
    off = dataclasses.replace(H200, hc_prenorm_step_cycles=0.0)
    assert kernel_time(k, off).compute_s < 0.5 * 320 * 445 / 1.98e9   # its MMAs and squares on one SM: 31 us


def test_prenorm_stages_in_flight_by_hand():
    from rubinperf.roofline import bytes_in_flight

    # 12 stages of a 64 x 64 BF16 A tile (8 KB) and a 32 x 64 FP32 B tile (8 KB): 196,608 B a CTA
    k = hc_prenorm_gemm(128, 20480, 24, splits=1)
    assert k.in_flight_bytes_per_cta == 12 * (64 * 64 * 2 + 32 * 64 * 4)
    assert bytes_in_flight(k, H200, 2) == pytest.approx(2 * 196608)
    # on a stack that does not price the SM90 main loop the loads stay capped as ordinary loads
    off = dataclasses.replace(H200, hc_prenorm_step_cycles=0.0)
    assert bytes_in_flight(k, off, 2) == pytest.approx(2 * off.stream_bytes_in_flight_per_sm)


def test_prenorm_fit_gives_the_stack_value_back():
    found, err = KE.fit_family(OWN, "hc_prenorm_gemm", "sm90")
    assert found["hc_prenorm_step_cycles"] == pytest.approx(H200.hc_prenorm_step_cycles, rel=0.01)
    assert err < 0.15


@pytest.mark.parametrize("m, n, block", [
    # the blocks the SM90 heuristic's comparator picks (sm90.hpp @ 54e2261, get_layout_candidates / get_layout_info,
    # evaluated at these shapes on 132 SMs): one token, n = 5120: 16 x 48, 107 blocks in one wave
    (1, 5120, (16, 48)), (1, 4096, (16, 32)), (1, 1280, (16, 16)), (1, 128, (16, 16)), (32, 4608, (32, 48)),
    (64, 512, (64, 16)), (128, 1280, (64, 32)), (128, 4096, (64, 64)), (128, 5120, (64, 80)), (256, 4608, (64, 144)),
    # 32768 columns: two waves of 16 x 128
    (1, 32768, (16, 128))])
def test_sm90_blocks_as_the_heuristic_picks_them(m, n, block):
    from rubinperf.kernels.deepgemm import sm90_fp8_gemm_blocks

    assert sm90_fp8_gemm_blocks(m, n, 132) == block


def test_sm90_blocks_by_hand_and_in_flight():
    from rubinperf.kernels import gemm
    from rubinperf.roofline import bytes_in_flight, occupancy

    # one token x 5120 x 8192 (wo_b): 1 x ceil(5120 / 48) = 107 CTAs, each keeping 11,100 B in flight
    k = gemm(1, 5120, 8192, weight="fp8", act="fp8")
    ctas, share, pad = occupancy(k, H200)
    assert ctas == 107 and pad == 16
    assert bytes_in_flight(k, H200, ctas) == pytest.approx(107 * H200.deepgemm_sm90_bytes_in_flight_per_sm)
    # a BF16 GEMM on the same stack keeps the stack's tile (64 x 128: 40 CTAs) and the calibrated 54.5 KB
    b = gemm(1, 5120, 8192, weight="bf16", act="bf16")
    ctas, _, _ = occupancy(b, H200)
    assert ctas == 40 and bytes_in_flight(b, H200, ctas) == pytest.approx(40 * 54500.0)


def test_sm90_gemm_fit_gives_the_stack_value_back():
    found, err = KE.fit_family(OWN, "fp8_gemm", "sm90")
    assert found["deepgemm_sm90_bytes_in_flight_per_sm"] == pytest.approx(H200.deepgemm_sm90_bytes_in_flight_per_sm,
                                                                          rel=0.01)
    assert err < 0.1


# DeepGEMM's SM90 FP8 GEMM at decode sizes from its code (deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh and
# csrc/jit_kernels/heuristics/sm90.hpp @ 54e2261): the per-CTA chain of K blocks and the stages, a candidate that was
# fitted and not adopted (docs/deepseek-kernels.md, "The SM90 FP8 GEMM's chain of K blocks")


@pytest.mark.parametrize("m, n, k, stages, stage_bytes", [
    # 16 x 16 at k 5120: a stage of 16 x 128 A + 16 x 128 B + 128 B of A scales = 4,224 B; besides the stages 1,024 B of
    # output tile, 256 B of barriers, 40 B scales (one a K block: 16 divides 128) = 1,440 B; 231,008 / 4,224 = 54 > 16
    (1, 128, 5120, 16, 2048),
    # 16 x 128 at k 8192: 2,048 + 16,384 + 128 = 18,560 B a stage; 4,096 + 256 + 256 B besides; 227,840 / 18,560 = 12
    (1, 16384, 8192, 12, 16384),
    # 64 x 112 at k 2048 (two B scales a K block): 8,192 + 14,336 + 256 = 22,784; 14,336 + 256 + 128; 217,728 / 22,784 = 9
    (128, 7168, 2048, 9, 14336)])
def test_sm90_stages_by_hand(m, n, k, stages, stage_bytes):
    from rubinperf.kernels.deepgemm import sm90_fp8_gemm_blocks, sm90_fp8_gemm_pipeline

    assert sm90_fp8_gemm_pipeline(*sm90_fp8_gemm_blocks(m, n, 132), k) == (stages, stage_bytes)


def test_sm90_chain_by_hand():
    from rubinperf.kernels import gemm
    from rubinperf.roofline import sm90_gemm_chain

    hw = dataclasses.replace(H200, deepgemm_sm90_kblock_cycles=229)
    # one token x 128 columns x 8192: 8 CTAs of 16 x 16, one block each, 64 K blocks; a K block: 229 cycles at 1.98 GHz
    # + four WGMMAs m64 n16 k32 (2 x 64 x 16 x 128 = 262,144 FLOP at one SM's FP8 peak, 1979e12 / 132) + one FMA per
    # accumulator (2 x 64 x 16 = 2,048 FLOP at one SM's FP32 peak, 67e12 / 132): 115.7 + 17.5 + 4.0 = 137.2 ns
    step = 229 / 1.98e9 + 262144 / (1979e12 / 132) + 2048 / (67e12 / 132)
    assert step == pytest.approx(137.2e-9, rel=1e-3)
    k = gemm(1, 128, 8192, weight="fp8", act="fp8")
    assert sm90_gemm_chain(k, hw) == pytest.approx(64 * step)
    assert kernel_time(k, hw).compute_s == pytest.approx(64 * step)
    # 32768 columns x 1280: 256 blocks of 16 x 128, two a CTA (the persistent grid's blocks i and i + 132), 10 K blocks
    # each, and the second block's B scales loaded from global memory before its K loop (one HBM latency)
    wide = gemm(1, 32768, 1280, weight="fp8", act="fp8")
    step = 229 / 1.98e9 + 2 * 64 * 128 * 128 / (1979e12 / 132) + 2 * 64 * 128 / (67e12 / 132)
    assert sm90_gemm_chain(wide, hw) == pytest.approx(2 * 10 * step + H200.hbm_latency_s)
    # with the chain on, each CTA keeps its heuristic's stages in flight (16 x 2,048 B), not the fitted figure
    from rubinperf.roofline import bytes_in_flight

    assert bytes_in_flight(k, hw, 8) == pytest.approx(8 * 16 * 2048)
    # no stack turns it on: the stack's FP8 GEMM keeps the fitted bytes in flight and no chain
    assert H200.deepgemm_sm90_kblock_cycles == 0
    assert bytes_in_flight(k, H200, 8) == pytest.approx(8 * H200.deepgemm_sm90_bytes_in_flight_per_sm)


FP8_RECORDS = [r for r in KE.kernel_records(KE.evidence_rows()) if r["kernel"] == "fp8_gemm"]


@pytest.mark.parametrize("gpu, median, worst", [
    # the held-out FP8 GEMM rows as committed: H200 (wkv, wo_b, idx_wk, shared_w2) 0.064 / 0.333; H800 (DeepGEMM's
    # README) 0.088 / 0.408; H100 (the one-token probe) 0.124 / 0.386
    ("h200", 0.07, 0.34), ("h800", 0.095, 0.41), ("h100", 0.13, 0.39)])
def test_sm90_gemm_held_out_error_per_gpu(gpu, median, worst):
    held = [r["abs_log"] for r in FP8_RECORDS if r["gpu"] == gpu and r["split"] == "held-out"]
    assert len(held) >= 18 and statistics.median(held) <= median and max(held) <= worst


def test_sm90_chain_alone_is_no_better_on_held_out_rows():
    """The chain of K blocks alone, fitted to the stack's fit rows (scripts/sm90_gemm_chain.py: 167 cycles), against
    the fitted bytes in flight: every held-out FP8 GEMM row (H200, H800, H100) lands worse in the median (0.099 against
    0.081) and the worst (0.433 against 0.408): the many-CTA rows stream below what the chain allows. Not adopted."""
    rows = [r for r in KE.evidence_rows() if r.kernel == "fp8_gemm" and not KE.is_fit_row(r)]
    platforms = {gpu: KE.platform_of(next(r for r in rows if r.gpu == gpu)) for gpu in {r.gpu for r in rows}}

    def errors(values):
        out = [abs(math.log(r.measured_s / KE.predict(r, dataclasses.replace(platforms[r.gpu], **values))[0]))
               for r in rows]
        return statistics.median(out), max(out)

    stack, candidate = errors({}), errors({"deepgemm_sm90_kblock_cycles": 167})
    assert candidate[0] > stack[0] and candidate[1] > stack[1]
