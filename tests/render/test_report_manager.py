"""The report's manager sections (rubinperf.render.manager) on hand-made records: a band beside a figure is printed
as 'x (low-high)', a record without one says 'band: not yet computed'; the preview flags come from the specs; the
step bars add up to the step; the ratio explanation names the layouts each rack can run; no local folder is shown."""

from __future__ import annotations

import re
from html import unescape

import pytest

from rubinperf.render import manager as M

TERMS_PEAK = {"requests_per_decode_gpu": 1.0, "decode_step_speedup": 2.5, "acceptance": 1.0, "decode_gpu_share": 1.0}
TERMS_387 = {"requests_per_decode_gpu": 50.0, "decode_step_speedup": 0.96, "acceptance": 1.0, "decode_gpu_share": 0.8}


def rec(hw, metric, level, per_gpu, per_user, ratio, layout="dep16", batch=64.0, req=64.0, step_ms=10.0, **extra):
    return {"hardware": hw, "serving": "disagg", "metric": metric, "target_tokens_per_s_per_user": level,
            "reachable": True, "ratio": ratio, "tokens_per_s_per_gpu": per_gpu, "tokens_per_s_per_user": per_user,
            "decode_layout": layout, "batch_per_rank": batch, "requests_per_decode_gpu": req,
            "decode_step_ms": step_ms, "decode_gpu_share": 0.6, "decode_bound": "memory", "interactivity_stat": "p90",
            "prefill_layout": "dep2", **extra}


def records(banded: bool) -> list[dict]:
    """Two racks, peak and 387 tok/s/user; with `banded`, the bands the core's ledger branch writes (low/high of
    the figure named by band_of, ratio_low/ratio_high of the ratio)."""
    a_peak = rec("old", "peak", None, 1000.0, 60.0, 1.0, step_ms=20.0)
    b_peak = rec("new", "peak", None, 2500.0, 150.0, 2.5, step_ms=8.0, ratio_terms=TERMS_PEAK)
    a_387 = rec("old", "interactivity", 387.0, 100.0, 400.0, 1.0, layout="tp4", batch=6.0, req=1.5)
    b_387 = rec("new", "interactivity", 387.0, 5000.0, 390.0, 50.0, batch=75.0, req=75.0, ratio_terms=TERMS_387)
    if banded:
        for r, (lo, hi) in zip((a_peak, b_peak, a_387, b_387), ((900, 1100), (2000, 2700), (90, 110), (4000, 5500))):
            r.update(low=float(lo), high=float(hi), band_of="tokens_per_s_per_gpu")
        b_peak.update(ratio_low=2.1, ratio_high=2.9)
        b_387.update(ratio_low=40.0, ratio_high=61.0, ratio_band_drivers=["hbm_stream_efficiency (-9%/+4%)"],
                     band_method="ends of the assumed fields' ranges")
    return [a_peak, a_387, b_peak, b_387]


def test_band_of_reads_low_high_beside_a_figure_and_none_without():
    r = {"ratio": 2.5, "ratio_low": 2.1, "ratio_high": 2.9, "tokens_per_s_per_gpu": 10.0, "low": 8.0, "high": 12.0,
         "band_of": "tokens_per_s_per_gpu"}
    assert M.band_of(r, "ratio") == (2.1, 2.9)
    assert M.band_of(r, "tokens_per_s_per_gpu") == (8.0, 12.0)
    assert M.band_of(r, "tokens_per_s_per_user") is None                 # low/high belong to another figure
    assert M.band_of({"x": 1.0, "low": 0.5, "high": 2.0}, "x", main="x") == (0.5, 2.0)   # no band_of: the headline's
    assert M.band_of({"x": 1.0, "low": 0.5, "high": 2.0}, "x") is None
    assert M.band_of({"ratio": 2.0, "ratio_low": None, "ratio_high": 3.0}, "ratio") is None
    assert M.with_band("2.50×", (2.1, 2.9), M.ratio_text) == "2.50× (2.10×–2.90×)"
    assert M.with_band("2.50×", None, M.ratio_text) == "2.50× (band: not yet computed)"


def test_headline_with_bands_shows_each_ratio_and_its_band():
    html = M.headline_section(records(banded=True), {}, {})
    assert html.count('class="big"') == 2                               # one ratio per question, rack beyond the first
    assert "2.50×" in html and "band 2.10×–2.90×" in html
    assert "50.00×" in html and "40.00×–61.00×" in html
    text = re.sub(r"<[^>]+>", "", html)
    assert "new 2,500 (2,000–2,700) against old 1,000 (900–1,100) tok/s/GPU" in text   # the figures, their bands
    assert html.count('<span class="fb">') == 4                        # (left out on a phone's width)
    assert M.NO_BAND not in html and "PREVIEW" not in html.upper()
    assert "At P90 ≥ 387 tok/s/user: hbm_stream_efficiency (-9%/+4%)" in unescape(html)   # what sets the band


def test_headline_without_bands_says_they_are_not_computed():
    html = M.headline_section(records(banded=False), {}, {})
    assert html.count(f'<span class="band none">{M.NO_BAND}</span>') == 2
    assert not re.search(r"\d×–\d", html)                              # no band invented


def test_headline_marks_a_preview_rack_and_explains_the_big_ratio():
    reach = {"old": {"dep16": 300.0, "dep32": 357.0, "tp4": 782.0}, "new": {"dep16": 520.0}}
    html = unescape(M.headline_section(records(banded=False), {"new": ["hardware new: previewed"]}, reach))
    assert html.count('<span class="pv">preview</span>') == 2
    # what sets the 50x: the old rack's DEP layouts stop below 387 tok/s/user, so it runs TP4 with 1.5 requests
    assert ("old's DEP layouts top out at 357 tok/s/user, so here it runs tp4 × 6 (1.5 requests per decode GPU) "
            "while new runs dep16 × 75 (75): ×50.00 the requests per decode GPU.") in html
    assert "decode step is 2.50× faster (20 ms → 8 ms)" in html       # the peak: the step sets it


def test_preview_reasons_come_from_the_specs():
    from rubinperf.specs.stack import load_platform

    vr, gb = load_platform("vr-nvl72"), load_platform("gb300-nvl72")
    swapped = load_platform("gb300-nvl72", "vllm-rubin-nov2026")
    got = M.preview_reasons([gb, vr, swapped])
    assert list(got) == ["vr-nvl72", "gb300-nvl72"]
    assert got["vr-nvl72"] == ["hardware vr-nvl72: NVIDIA's previewed figures",
                               "stack vllm-rubin-nov2026: measured only in a preview post"]
    assert got["gb300-nvl72"] == ["stack vllm-rubin-nov2026: measured only in a preview post"]   # the stack only
    assert M.preview_reasons([gb]) == {} and M.preview_banner({}) == ""
    assert 'id="preview"' in M.preview_banner(got)


def test_step_bars_add_up_to_the_step():
    from rubinperf.render import svg
    from rubinperf.cli.report import step_records
    from rubinperf.specs.select import serving_setups

    for r in step_records(serving_setups("deepseek-v4.1-flash", ["gb300-nvl72", "vr-nvl72"], "agentx", []),
                          "dep32")[0]:
        bars = svg.step_bars(r)
        assert sum(b["time_ms"] for b in bars) == pytest.approx(r["step_time_ms"], rel=1e-9)
        host = [b for b in r["breakdown"] if b["part"] == "cpu"]
        assert len(host) == 3 and sum(b["time_ms"] for b in r["breakdown"]) > r["step_time_ms"] * 1.1   # all: twice
        drawn = re.findall(r'<rect class="bar"[^>]*><title>([^<]*)</title>', svg.kernel_bars_svg(r, top=100))
        assert len(drawn) == len(bars)


def test_money_states_its_basis_and_serving_its_percentiles():
    recs = records(banded=False)
    for r in recs:
        r.update(usd_per_m_tokens=0.000563, usd_per_m_output=0.0296, usd_per_m_input=0.000241,
                 tokens_per_s_per_kw=934e3)
    html = M.money_section(recs, {"old": {"price_usd_per_gpu_hour": 2.65, "gpu_power_w": 1400.0, "source": "S1"}}, {})
    assert "GPU rent only" in html and "cached tokens counted in throughput" in html
    assert "$2.65 per GPU-hour" in html and "1,400 W per GPU" in html and "Source: S1" in html
    assert "$0.000563" in html and "$0.0296" in html and "934 k tok/s/kW" in html
    serve = {"hardware": "old", "layout": "tp2", "gpus": 2, "concurrency": 64.0, "total_tokens_per_s_per_gpu": 24700.0,
             "output_tokens_per_s_per_gpu": 2744.0, "tokens_per_s_per_user": 87.0, "request_throughput_per_s": 5.36,
             "isl": 8192.0, "osl": 1024.0, "prefix_hit_rate": 0.0,
             **{f"{s}_{m}_ms": v for m, base in (("ttft", 186.0), ("tpot", 10.0))
                for s, v in zip(("mean", "median", "p90", "p99"), (base, base, base * 1.1, base * 1.2))}}
    html = M.serving_section([serve], "rubinperf serve -H RACK -l tp2 -c 64", {})
    for text in ("186 ms", "205 ms", "223 ms", "10 ms", "11 ms", "12 ms", "24.7 k tok/s/GPU", "P99"):
        assert text in html, text


def test_ledger_section_counts_points_and_prints_family_verdicts():
    pts = [{"id": "a", "hardware": "x", "published": 1.0, "predicted": 1.1, "ratio": 1.1, "band": [0.9, 1.2],
            "in_band": True}, {"id": "b", "hardware": "x", "published": 1.0, "predicted": 2.0, "ratio": 2.0,
                               "band": [0.9, 1.2], "in_band": False}]
    html = M.ledger_section(pts, None)
    assert "1 of 2 published points in band" in html and "Misses: b (2.00× the published figure)" in html
    assert "MISS" in html and "Per-family verdicts" in html
    fams = [{"family": "kernels X", "verdict": "usable: half of 9 held-out rows within 5%"}]
    html = M.ledger_section(pts, fams)
    assert "<b>kernels X</b>: usable: half of 9 held-out rows within 5%" in html and "Per-family" not in html
    assert "Validation: the accuracy ledger" in M.ledger_section(None, fams)
    html = M.ledger_section(None, None)                              # not run: says how, claims nothing
    assert "not run for this report" in html and "rubinperf report --validate" in html and "in band" not in html


@pytest.mark.parametrize("text, want", [
    ("rubinperf report -o /tmp/a/b/r.html -q", "rubinperf report -o r.html -q"),
    ("--output=/home/me/x.html -H ./racks/my.toml", "--output=x.html -H my.toml"),
    ("--set vr-nvl72:hbm_bandwidth=30TB/s see https://github.com/a/b", "--set vr-nvl72:hbm_bandwidth=30TB/s see "
     "https://github.com/a/b"),
])
def test_strip_dirs_takes_folders_off_paths_only(text, want):
    from rubinperf.render.html import strip_dirs

    assert strip_dirs(text) == want


def test_public_path_names_bundled_files_by_their_place_and_others_by_name(tmp_path):
    from rubinperf.bundled import folder
    from rubinperf.render.html import public_path

    assert public_path(str(folder("hardware") / "vr-nvl72.toml")) == "hardware/vr-nvl72.toml"
    assert public_path(str(tmp_path / "mine.toml")) == "mine.toml (a file of the user)"
