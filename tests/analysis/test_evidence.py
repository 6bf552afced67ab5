"""The public kernel evidence table (calibration/public/kernels.csv): it loads strictly, it is broad
enough, and rows checked by hand equal their sources."""

from __future__ import annotations

import csv
import io
import math

import pytest

from rubinperf.analysis.evidence import COLUMNS, GPUS, KERNELS, load_evidence, select, source_key
from rubinperf.errors import SpecError

ROWS = load_evidence()
BY_ID = {r.id: r for r in ROWS}


def test_table_is_broad_enough():
    # at least 40 rows from at least four public sources (this table aims at 60 from 5)
    assert len(ROWS) >= 60
    assert len({r.source for r in ROWS}) >= 5
    assert len({r.kernel for r in ROWS}) >= 6 and len({r.gpu for r in ROWS}) >= 4


def test_every_row_names_its_source_and_method():
    for r in ROWS:
        assert r.gpu in GPUS and r.kernel in KERNELS
        assert r.source_url.startswith("https://github.com/") and r.source_detail and r.timing_method
        assert r.measured_s > 0 and r.shape
        if "time derived" in r.notes:
            assert r.reported_rate is not None  # a derived time comes from a published rate


def test_pr316_mega_moe_rows_equal_the_pr():
    # https://github.com/deepseek-ai/DeepGEMM/pull/316, description of 2026-04-24, both tables
    published = {  # (model, tokens per rank): (time us, TFLOPS, global memory GB/s, interconnect GB/s)
        ("flash", 1): (56.5, 5, 1311, 1), ("flash", 512): (146.5, 1056, 3192, 266),
        ("flash", 8192): (1283.1, 1928, 998, 499), ("flash", 32768): (4855.5, 2038, 794, 529),
        ("pro", 1): (108.1, 7, 1758, 1), ("pro", 512): (369.6, 1098, 4619, 182),
        ("pro", 8192): (2818.5, 2304, 1094, 393), ("pro", 32768): (10655.2, 2438, 692, 417),
    }
    rows = [r for r in ROWS if r.source == "deepseek-ai/DeepGEMM#316"]
    assert len(rows) == 8
    for (model, tokens), (us, tflops, hbm, nvl) in published.items():
        r = BY_ID[f"dg316-{model}-{tokens}"]
        assert (r.gpu, r.kernel, r.shape["tokens_per_rank"], r.shape["ep"]) == ("b200", "mega_moe", tokens, 8)
        assert r.measured_us == pytest.approx(us, rel=1e-12)
        assert (r.reported_rate, r.reported_rate_unit) == (tflops, "TFLOPS")
        assert dict(r.other_rates) == {"hbm_gbps": hbm, "nvlink_gbps": nvl}
        geometry = (r.shape["experts"], r.shape["top_k"], r.shape["hidden"], r.shape["intermediate"])
        assert geometry == ((256, 6, 4096, 2048) if model == "flash" else (384, 6, 7168, 3072))


def test_pr316_compute_rate_is_its_flops_over_its_time():
    # test_mega_moe.py prints 2 * recv_tokens * hidden * intermediate * 3 / t; at 512 tokens and
    # above each rank receives tokens * top_k rows on average (uniform routing), so the printed
    # TFLOPS follow from the shape and the time to within the rounding and the routing noise (2%)
    # (the H200 rows of DeepGEMM PR #352 print their TFLOPS the same way)
    checked = 0
    for r in select(ROWS, kernel="mega_moe"):
        if r.source not in ("deepseek-ai/DeepGEMM#316", "deepseek-ai/DeepGEMM#352") or r.shape["tokens_per_rank"] < 512:
            continue
        s = r.shape
        flops = 2 * s["tokens_per_rank"] * s["top_k"] * s["hidden"] * s["intermediate"] * 3
        assert flops / r.measured_s / 1e12 == pytest.approx(r.reported_rate, rel=0.02), r.id
        checked += 1
    assert checked == 6 + 6


def test_rates_derived_times_agree_with_the_bandwidth_the_same_row_publishes():
    # DeepGEMM's README rows give TFLOPS and GB/s; the time is derived from TFLOPS, and the bytes the
    # test counts (FP8 A and B, BF16 D) over that time must give back the published GB/s
    checked = 0
    for r in ROWS:
        if r.source != "deepseek-ai/DeepGEMM:README.md":
            continue
        s = r.shape
        g = s.get("groups", 1)
        m = s.get("m") or s.get("m_per_group") or s.get("expected_m")
        bytes_ = g * (m * s["k"] + s["k"] * s["n"] + m * s["n"] * 2)
        assert bytes_ / r.measured_s / 1e9 == pytest.approx(r.other_rates["hbm_gbps"], rel=0.01), r.id
        checked += 1
    assert checked == 28


def test_hand_checked_rows():
    # DeepGEMM README at 327ec92 (H800): M=4096 N=7168 K=16384 at 1520 TFLOPS -> 2*M*N*K/1520e12 s
    r = BY_ID["dgreadme-gemm-4096x7168x16384"]
    assert r.measured_s == pytest.approx(2 * 4096 * 7168 * 16384 / 1520e12, rel=1e-3)
    # DeepEP README (H800, pure RDMA): low-latency dispatch at EP8 77 us, combine at EP256 360 us
    assert BY_ID["deepep-ll-dispatch-ep8"].measured_us == pytest.approx(77)
    assert BY_ID["deepep-ll-combine-ep256"].measured_us == pytest.approx(360)
    assert BY_ID["deepep-ll-combine-ep256"].shape["ep"] == 256
    # DeepGEMM PR #323: SM90 FP8 Mega MoE on 8x H20 at batch 1, 188.0 us
    r = BY_ID["dg323-flash-1"]
    assert (r.gpu, r.precision, r.measured_us) == ("h20", "fp8", pytest.approx(188.0))
    # DeepGEMM PR #383's merged SM90 Mega MoE on 8x H20 (comment of 2026-08-17): V4-Pro at 8192, 24777.0 us
    r = BY_ID["dg383-pro-8192"]
    assert (r.gpu, r.shape["hidden"], r.shape["experts"], r.measured_us) == ("h20", 7168, 384, pytest.approx(24777.0))
    # vLLM #49636's companion benchmark: V4-Pro at 8192 tokens per rank, 3144.2 us (B200, EP8)
    assert BY_ID["moeep-deepseek_v4_pro-8192"].measured_us == pytest.approx(3144.2)


def test_source_key_names_a_pull_request_or_a_file():
    assert source_key("https://github.com/deepseek-ai/DeepGEMM/pull/316") == "deepseek-ai/DeepGEMM#316"
    assert source_key("https://github.com/a/b/blob/0123abc/docs/x.md") == "a/b:docs/x.md"
    assert source_key("https://example.org/page#frag") == "example.org/page"


def _write(tmp_path, rows, header=COLUMNS):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    path = tmp_path / "kernels.csv"
    path.write_text(buf.getvalue())
    return path


GOOD = ["x1", "https://github.com/a/b/pull/1", "table 1", "b200", "mega_moe", "fp8xfp4",
        "tokens_per_rank=1;ep=8", "56.5", "5", "TFLOPS", "bench_kineto", "note [other_rates hbm_gbps=1311]"]


def test_a_good_file_loads(tmp_path):
    (row,) = load_evidence(_write(tmp_path, [GOOD]))
    assert row.measured_s == pytest.approx(56.5e-6) and dict(row.shape) == {"tokens_per_rank": 1, "ep": 8}
    assert row.other_rates == {"hbm_gbps": 1311.0}
    assert math.isclose(row.measured_us, 56.5)


@pytest.mark.parametrize("column, value, message", [
    ("gpu", "a100", "gpu"),
    ("kernel", "flash_attention", "kernel"),
    ("measured_us", "0", "positive"),
    ("measured_us", "-3", "positive"),
    ("measured_us", "", "measured_us is empty"),
    ("measured_us", "fast", "number"),
    ("measured_us", "nan", "finite"),
    ("shape", "m:64", "key=value"),
    ("shape", "m=big", "number"),
    ("reported_rate_unit", "", "unit"),
    ("source_url", "github.com/a/b", "https"),
])
def test_bad_rows_are_spec_errors_naming_file_and_row(tmp_path, column, value, message):
    bad = list(GOOD)
    bad[COLUMNS.index(column)] = value
    path = _write(tmp_path, [GOOD[:1] + ["https://github.com/a/b/pull/2"] + GOOD[2:], ["x2"] + bad[1:]])
    with pytest.raises(SpecError) as err:
        load_evidence(path)
    text = str(err.value)
    assert str(path) in text and "row 3 (x2)" in text and message in text and "\n" not in text


def test_unknown_or_missing_column_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match=r"row 1 \(header\): unknown column 'measured_ms'"):
        load_evidence(_write(tmp_path, [GOOD], header=[c if c != "measured_us" else "measured_ms" for c in COLUMNS]))
    with pytest.raises(SpecError, match="missing column 'notes'"):
        load_evidence(_write(tmp_path, [GOOD[:-1]], header=COLUMNS[:-1]))


def test_repeated_id_and_short_row_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="repeats"):
        load_evidence(_write(tmp_path, [GOOD, GOOD]))
    with pytest.raises(SpecError, match="fields"):
        load_evidence(_write(tmp_path, [GOOD[:5]]))
    with pytest.raises(SpecError, match="cannot read"):
        load_evidence(tmp_path / "absent.csv")
