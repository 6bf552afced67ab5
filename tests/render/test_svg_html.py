"""The hand-written SVG charts and the HTML page (rubinperf.render.svg, html): ticks and positions derived by hand,
one mark per record, text escaped, and the page self-contained."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, strategies as st

from rubinperf.render import html, svg

NS = "{http://www.w3.org/2000/svg}"


def test_log_ticks_by_hand():
    assert svg.log_ticks(50, 2000) == [50, 100, 200, 500, 1000, 2000]
    assert svg.log_ticks(0.3, 4) == [0.5, 1, 2]
    assert svg.log_ticks(1, 1e6) == [1, 10, 100, 1000, 1e4, 1e5, 1e6]   # over 4 decades: powers of ten only


@given(st.floats(1e-6, 1e6), st.floats(1.01, 1e6), st.floats(0, 1))
def test_log_axes_map_the_range_onto_the_box(lo, ratio, f):
    ax = svg.LogAxes((lo, lo * ratio), (lo, lo * ratio), (10, 20, 110, 220))
    assert ax.x(lo) == pytest.approx(10) and ax.x(lo * ratio) == pytest.approx(110)
    assert ax.y(lo) == pytest.approx(220) and ax.y(lo * ratio) == pytest.approx(20)
    v = lo * ratio ** f        # a fraction f of the decades is a fraction f of the width
    assert ax.x(v) == pytest.approx(10 + 100 * f, abs=1e-6)


def _rec(hw, x, y, front=True, layout="dep32"):
    return {"hardware": hw, "tokens_per_s_per_user": x, "tokens_per_s_per_gpu": y, "feasible": True,
            "on_frontier": front, "decode_layout": layout, "batch_per_rank": 8}


def test_frontier_svg_draws_one_line_per_rack_through_its_frontier_points():
    recs = [_rec("a", 10, 1000), _rec("a", 100, 100), _rec("a", 50, 50, front=False),
            _rec("b <&>", 20, 3000), _rec("b <&>", 200, 300, layout="tp8")]
    published = [{"hardware": "a", "metric": "throughput_at_interactivity", "published": 500.0, "interactivity": 30.0,
                  "source": "a post"}, {"hardware": "b <&>", "metric": "peak_throughput", "published": 4000.0,
                                        "interactivity": None, "source": "another"}]
    def first_label(front, decades_per_char):
        return [("L", (front[0]["tokens_per_s_per_user"], front[0]["tokens_per_s_per_gpu"]))]

    text = svg.frontier_svg(recs, published, (40,), "x", "y", first_label)
    root = ET.fromstring(text)           # well-formed XML: the rack name is escaped
    lines = root.findall(f".//{NS}polyline")
    assert [len(p.get("points").split()) for p in lines] == [2, 2]
    assert len(root.findall(f".//{NS}polygon")) == 1                      # the star of the point with an interactivity
    assert len([e for e in root.iter(f"{NS}line") if e.get("class") == "published"]) == 1   # the peak: a level
    assert len([e for e in root.iter(f"{NS}line") if e.get("class") == "target"]) == 1
    # the first frontier point of rack a lies left of and above its second (log-log, y down)
    (x1, y1), (x2, y2) = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    assert x1 < x2 and y1 < y2


def test_tornado_svg_draws_two_bars_per_parameter_around_the_baseline():
    base = 1e-2
    recs = [{"parameter": f"p{i}", "elasticity": e, "metric_value": base, "metric_low": base * (1 - 0.1 * e),
             "metric_high": base * (1 + 0.1 * e), "metric_unit": "s", "metric_label": "step time"}
            for i, e in enumerate([-0.5, 0.3, 0.0, 0.1])]
    root = ET.fromstring(svg.tornado_svg(recs, 0.1, str, top=12))
    bars = [e for e in root.iter(f"{NS}rect") if e.get("class") == "bar"]
    assert len(bars) == 6          # the zero elasticity is not drawn
    # every bar touches the baseline: one of its edges is at the same x
    edges = [(float(b.get("x")), float(b.get("x")) + float(b.get("width"))) for b in bars]
    shared = set.intersection(*[{round(a, 1), round(b, 1)} for a, b in edges])
    assert len(shared) == 1


def test_kernel_bars_are_proportional_to_time():
    rec = {"hardware": "h", "layout": "dep32", "phase": "decode",
           "breakdown": [{"kernel": f"k{i}", "time_ms": t, "bound": "memory", "share_of_step": t / 10}
                         for i, t in enumerate([4.0, 2.0, 1.0])]}
    root = ET.fromstring(svg.kernel_bars_svg(rec))
    widths = [float(e.get("width")) for e in root.iter(f"{NS}rect") if e.get("class") == "bar"]
    assert widths[0] / widths[1] == pytest.approx(2.0, rel=1e-3)
    assert widths[1] / widths[2] == pytest.approx(2.0, rel=1e-3)


def test_the_page_is_self_contained_and_escapes_its_text():
    page = html.report_html("a <b> & c", "sub", {"run": html.run_section("rubinperf x '<y>'", {"rubinperf": "0"}, []),
                                                   "frontier": ""})
    assert page.startswith("<!DOCTYPE html>")
    assert "a &lt;b&gt; &amp; c" in page and "&lt;y&gt;" in page
    assert not re.search(r"<(script|link|img)\b|\bsrc=|url\(", page)
    assert 'href="#run"' in page and 'href="#frontier"' not in page     # an empty section is left out
