"""Per-request latency at one step (`estimate`): TPOT and ITL with their P90, TTFT of a prefill point with its
KV transfer; the scalar time-per-token factor held to a finer quadrature and to a Monte Carlo."""

from __future__ import annotations

import math

import pytest

from rubinperf.step.estimates import run_estimates
from rubinperf.step.latency import time_per_token_factor

Z90 = 1.2815515655446004   # the standard normal's 90th percentile


def _one(layout, **kw):
    (rec,) = run_estimates("deepseek-v4.1-flash", ["gb300-nvl72"], [layout], **kw)
    return rec


def test_no_drafts_leaves_the_step_spread_alone():
    # k = 0: every request accepts 1 token per step; its time per token is the step's lognormal: exp(z90 sigma).
    assert time_per_token_factor(0, 1.0, 72.0, 0.0145, 90.0) == pytest.approx(math.exp(Z90 * 0.0145), rel=1e-12)
    assert time_per_token_factor(0, 1.0, 72.0, 0.0145, 90.0) == pytest.approx(1.018757, rel=1e-6)
    assert time_per_token_factor(3, 2.0, 72.0, 0.0, 50.0) == pytest.approx(1.0, abs=0.02)


def test_uniform_acceptance_by_hand():
    # k = 1, a = 1.5, nu = 2: f ~ Beta(1, 1), uniform on [0, 1], a_i = 1 + f. With no step spread the slowest
    # 10% of requests accept at most 1.1 tokens a step: P90 time per token = 1.5 / 1.1 of the mean.
    assert time_per_token_factor(1, 1.5, 2.0, 0.0, 90.0) == pytest.approx(1.5 / 1.1, rel=1e-9)
    assert time_per_token_factor(1, 1.5, 2.0, 0.0, 50.0) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("k,a,nu,sigma", [
    (5, 3.51, 72.0, 0.0145), (5, 3.51, 10.0, 0.05), (3, 2.0, 72.0, 0.2), (1, 1.3, 10.0, 0.05),
    (7, 5.5, 500.0, 0.0145), (5, 1.3, 10.0, 0.0145), (1, 2.0, 72.0, 0.0145), (5, 3.51, 5000.0, 0.01)])
def test_scalar_factor_is_the_limit_of_finer_quadrature(monkeypatch, k, a, nu, sigma):
    # The same percentiles with the trapezoid's step 10x finer and 16x the cells: the default rule has converged
    # (to 3e-5 where the law of f has its mass near 0 or 1 and its cells converge as 1 / cells; below 5e-7 elsewhere).
    from rubinperf.step import latency

    want = [time_per_token_factor(k, a, nu, sigma, p) for p in (50.0, 90.0, 99.0)]
    monkeypatch.setattr(latency, "Z_STEP", latency.Z_STEP / 10)
    monkeypatch.setattr(latency, "CELLS_NARROW", latency.CELLS_NARROW * 16)
    monkeypatch.setattr(latency, "CELLS_EDGE", latency.CELLS_EDGE * 16)
    finer = [latency.time_per_token_factor.__wrapped__(k, a, nu, sigma, p) for p in (50.0, 90.0, 99.0)]
    assert want == pytest.approx(finer, rel=5e-5)   # the cells at an end of [0, 1] converge as 1 / cells


def test_scalar_factor_agrees_with_a_monte_carlo():
    from rubinperf.serving.interactivity import sampled_speed_factors

    mc = sampled_speed_factors(5, 3.51, 72.0, 0.0145, n=2_000_000, seed=11)   # speed's P90 = time per token's P90
    assert time_per_token_factor(5, 3.51, 72.0, 0.0145, 90.0) == pytest.approx(1.0 / mc["p90"], rel=2e-3)


def test_decode_record_by_hand():
    rec = _one("dep32", batch=16)
    step_ms, a = rec["step_time_ms"], rec["acceptance"]
    assert rec["mean_tpot_ms"] == pytest.approx(step_ms / a, rel=1e-12)
    assert rec["mean_tpot_ms"] == pytest.approx(1e3 / rec["tokens_per_s_per_user"], rel=1e-12)
    assert rec["mean_itl_ms"] == pytest.approx(step_ms, rel=1e-12)
    assert rec["p90_itl_ms"] == pytest.approx(step_ms * math.exp(Z90 * 0.0145), rel=1e-9)   # the stack's sigma
    assert rec["itl_gpu_share"] == pytest.approx(rec["gpu_time_ms"] / step_ms, rel=1e-12)
    assert rec["p90_tpot_ms"] == pytest.approx(rec["mean_tpot_ms"] * time_per_token_factor(
        rec["draft_tokens"], a, 21.5, 0.0145, 90.0), rel=1e-12)   # the stack's nu (per-request data) and sigma
    assert rec["p90_tpot_ms"] > rec["mean_tpot_ms"] and rec["p90_itl_ms"] > rec["mean_itl_ms"]
    assert rec["mean_ttft_ms"] is None


def test_prefill_ttft_is_the_step_and_the_kv_transfer():
    from rubinperf.serving.prefill import kv_transfer_time
    from rubinperf.specs.select import load_specs
    from rubinperf.step.capacity import kv_bytes_per_request

    rec = _one("dep2", phase="prefill", batch=1, new_tokens=32768, context=131072)
    m, (hw,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"])
    sent = float(kv_bytes_per_request(m, 131072 + 32768))   # one sequence per DEP rank, one GPU each
    transfer_ms = kv_transfer_time(hw, sent, "nvlink") * 1e3
    assert rec["kv_transfer_link"] == "nvlink"
    assert rec["kv_transfer_ms"] == pytest.approx(transfer_ms, rel=1e-12)
    assert rec["mean_ttft_ms"] == pytest.approx(rec["step_time_ms"] + transfer_ms, rel=1e-12)
    assert rec["mean_tpot_ms"] is None and rec["p90_itl_ms"] is None


def test_ttft_grows_with_the_prompt():
    ttft = [_one("dep2", phase="prefill", batch=1, new_tokens=n, context=0)["mean_ttft_ms"]
            for n in (1024, 4096, 16384, 65536)]
    assert all(x < y for x, y in zip(ttft, ttft[1:]))
    longer = [_one("dep2", phase="prefill", batch=1, new_tokens=8192, context=c)["mean_ttft_ms"]
              for c in (0, 32768, 131072)]
    assert all(x < y for x, y in zip(longer, longer[1:]))


def test_tpot_falls_with_acceptance():
    recs = [_one("tp8", acceptance=a) for a in (1.5, 2.5, 3.5, 4.5)]
    for key in ("mean_tpot_ms", "p90_tpot_ms"):
        values = [r[key] for r in recs]
        assert all(x > y for x, y in zip(values, values[1:])), key
    assert all(r["p90_tpot_ms"] >= r["mean_tpot_ms"] for r in recs)


def test_the_factor_loads_no_numpy():
    from conftest import heavy_modules_after

    assert heavy_modules_after("from rubinperf.step.latency import time_per_token_factor as f\n"
                               "v = [f(5, 3.51, 72.0, 0.0145, 90.0), f(5, 3.51, 10.0, 0.05, 90.0), "
                               "f(5, 1.3, 10.0, 0.05, 90.0)]") == []


def test_a_prefill_instance_wider_than_the_nvlink_domain_sends_its_kv_over_the_nic():
    from rubinperf.serving.prefill import kv_transfer_time
    from rubinperf.specs.select import load_specs
    from rubinperf.step.capacity import kv_bytes_per_request

    (rec,) = run_estimates("deepseek-v4.1-flash", ["b200-cluster"], ["dep16"], phase="prefill", batch=1)
    m, (hw,) = load_specs("deepseek-v4.1-flash", ["b200-cluster"])
    sent = float(kv_bytes_per_request(m, rec["context_tokens"] + rec["new_tokens_per_rank"]))
    assert rec["kv_transfer_link"] == "scale-out"
    assert rec["kv_transfer_ms"] == pytest.approx(kv_transfer_time(hw, sent, "scale-out") * 1e3, rel=1e-12)
    assert rec["kv_transfer_ms"] > kv_transfer_time(hw, sent, "nvlink") * 1e3
