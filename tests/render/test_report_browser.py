"""The HTML report in a real headless browser (Debian's chromium): it loads with no console error, every chart
shown draws marks with a size (the desktop drawing at 1280 px, the phone's at 390 px), the first screen holds the
preview banner and every headline ratio with its band or the note that it is not computed, the page has no
horizontal overflow at 390 px wide, its screenshots at 1280 px and 390 px are not blank (not all one colour), and
it names no local folder.

Skipped only when no chromium can be found and CI is not set; in CI (.ci/run installs chromium) it runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--mute-audio", "--no-default-browser-check"]

# Measures the page once it has loaded: errors caught, the marks of each chart that have a size, and the
# widths. Written into the DOM, which --dump-dom prints.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || 'resource'));
}, true);
window.addEventListener('unhandledrejection', function (e) { window.__errors.push('rejection: ' + e.reason); });
(function () { var orig = console.error; console.error = function () {
  window.__errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); orig.apply(console, arguments);
}; })();
window.addEventListener('load', function () {
  var charts = Array.prototype.map.call(document.querySelectorAll('svg'), function (s) {
    var r = s.getBoundingClientRect(), drawn = 0;
    s.querySelectorAll('circle,rect,line,polyline,polygon,path,text').forEach(function (el) {
      var b = el.getBBox(); if (b.width > 0 || b.height > 0) { drawn += 1; }
    });
    return {id: s.id, width: r.width, height: r.height, drawn: drawn};
  });
  function bottoms(sel) {
    return Array.prototype.map.call(document.querySelectorAll(sel), function (el) {
      var r = el.getBoundingClientRect(); return {text: el.textContent, bottom: r.bottom, width: r.width};
    });
  }
  var first = {banner: bottoms('#preview'), ratios: bottoms('#headline .big'), bands: bottoms('#headline .band'),
               tags: bottoms('#headline .pv')};
  var out = {errors: window.__errors, charts: charts, scrollWidth: document.documentElement.scrollWidth,
             innerWidth: window.innerWidth, bodyHeight: document.body.scrollHeight, first: first};
  parent.postMessage(JSON.stringify(out), '*');
});
</script>"""

# chromium's headless window is at least 500 px wide: the page is measured in a frame of the width asked for,
# and posts what it measured to this wrapper, which writes it into its DOM (--dump-dom prints it).
WRAPPER = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:1200px;border:0;display:block"></iframe>
<script>window.addEventListener('message', function (e) {{
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = e.data; document.body.appendChild(pre);
}});</script></body></html>"""


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    path = find_browser()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no chromium is installed (.ci/run installs it: apt-get install chromium)")
        pytest.skip("no chromium found (apt-get install chromium); CI runs this test")
    return path


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    from rubinperf.cli import main

    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", "-o", str(out), "-q"]) == 0
    return out


def _run(browser, args, tmp_path, timeout=60):
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    cmd = [browser, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HOME": str(tmp_path)})


def _console_errors(stderr: str) -> list[str]:
    """Console messages of the page (chromium logs them as CONSOLE lines) that are errors."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line and re.search(r"error|uncaught", line, re.I)]


def probe(browser, html_path, width, tmp_path) -> dict:
    text = html_path.read_text(encoding="utf-8")
    probed = tmp_path / f"probed-{width}.html"
    probed.write_text(text.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    wrapper = tmp_path / f"wrapper-{width}.html"
    wrapper.write_text(WRAPPER.format(src=probed.name, width=width), encoding="utf-8")
    got = _run(browser, [f"--window-size={max(width, 500) + 40},1300", "--virtual-time-budget=10000", "--dump-dom",
                         wrapper.as_uri()], tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', got.stdout, re.S)
    assert m, "the page did not finish loading (no probe output)\n" + got.stderr[-2000:]
    import html

    data = json.loads(html.unescape(m.group(1)))
    data["console"] = _console_errors(got.stderr)
    return data


def screenshot(browser, html_path, width, scale, tmp_path):
    shot = tmp_path / f"shot-{width}.png"
    got = _run(browser, [f"--window-size={width},1600", f"--force-device-scale-factor={scale}",
                         f"--screenshot={shot}", html_path.as_uri()], tmp_path)
    assert got.returncode == 0 and shot.exists(), got.stderr[-2000:]
    return shot


def png_pixels(path):
    """(width, height, channels, rows as a numpy uint8 array) of an 8-bit non-interlaced PNG."""
    import numpy as np

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = head
    assert depth == 8 and interlace == 0 and ctype in (0, 2, 4, 6), head
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(h, 1 + w * ch)
    out = np.zeros((h, w * ch), dtype=np.uint8)
    prev = np.zeros(w * ch, dtype=np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 1:   # Sub: a running sum per channel
            cur = (np.cumsum(line.reshape(w, ch), axis=0) % 256).reshape(-1)
        elif f == 2:   # Up
            cur = (line + prev) % 256
        else:          # Average, Paeth: pixel by pixel
            cur = np.zeros_like(line)
            for i in range(w * ch):
                a = cur[i - ch] if i >= ch else 0
                b = prev[i]
                if f == 3:
                    cur[i] = (line[i] + (a + b) // 2) % 256
                else:
                    c = prev[i - ch] if i >= ch else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    cur[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) % 256
        out[y] = cur
        prev = cur
    return w, h, ch, out.reshape(h, w, ch)


def test_the_report_loads_draws_and_fits_1280_and_390(browser, report_file, tmp_path):
    import numpy as np

    text = report_file.read_text(encoding="utf-8")
    # nothing fetched at view time: no script, stylesheet, image or frame from anywhere
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b", text, re.I)
    assert not re.search(r"\b(src|srcset)\s*=|@import|url\(", text, re.I)
    for width in (1280, 390):
        got = probe(browser, report_file, width, tmp_path)
        assert got["errors"] == [] and got["console"] == [], (width, got["errors"], got["console"])
        assert got["innerWidth"] == width, got
        shown = [c for c in got["charts"] if c["width"] > 0]     # each chart is drawn twice: one shows per width
        ids = {c["id"] for c in shown}
        want = {"frontier", "tornado-0", "tornado-1", "kernels-0", "kernels-1"}
        assert ids == (want if width > 600 else {f"{i}-narrow" for i in want}), ids
        for c in shown:
            assert c["width"] > 100 and c["height"] > 30, (width, c)
            assert c["drawn"] >= 10, (width, c)         # marks with a size: the chart has drawn
            assert c["width"] <= width, (width, c)
        assert got["scrollWidth"] <= got["innerWidth"], f"horizontal overflow at {width} px: {got}"
        assert got["bodyHeight"] > 1000
        # the first screen (800 px of a desktop, 844 px of a phone) holds the preview banner and every headline
        # ratio with its band (or the note that it is not yet computed) and its preview tag
        screen = 800 if width == 1280 else 844
        first = got["first"]
        assert len(first["banner"]) == 1 and first["banner"][0]["bottom"] <= screen, (width, first["banner"])
        assert len(first["ratios"]) == 4 and len(first["bands"]) == 4 and len(first["tags"]) == 4, first
        for el in first["ratios"] + first["bands"] + first["tags"]:
            assert 0 < el["bottom"] <= screen, (width, el)
            assert el["width"] > 0, (width, el)
        assert [e["text"] for e in first["ratios"]][2] == "38.05×"      # the 387 tok/s/user ratio is on it
    for width, scale in ((1280, 0.5), (390, 0.5)):
        shot = screenshot(browser, report_file, width, scale, tmp_path)
        w, h, ch, px = png_pixels(shot)
        assert w == round(width * scale), (w, width, scale)
        rgb = px[:, :, :3].reshape(-1, 3)
        colours = np.unique(rgb, axis=0)
        assert len(colours) > 20, f"the {width} px screenshot is (nearly) one colour: {len(colours)} colours"
        ink = np.mean(np.any(rgb < 200, axis=1))
        assert 0.01 < ink < 0.9, f"the {width} px screenshot is blank or filled: {ink:.3f} of its pixels are ink"
        # the right-hand tenth of the 390 px shot is not cut-off content: the page ends within the window
        assert np.mean(np.any(px[:, -max(1, w // 10):, :3] < 200, axis=2)) < 0.5


def test_the_report_names_no_local_folder(report_file):
    text = report_file.read_text(encoding="utf-8")
    assert str(report_file.parent) not in text
    assert not re.search(r"(?<![\w.])/(work|home|tmp|root|Users|var/folders)/", text), \
        re.search(r".{60}(?<![\w.])/(work|home|tmp|root|Users)/.{60}", text)


def test_the_probe_sees_an_overflowing_page_and_a_console_error(browser, report_file, tmp_path):
    """The checks above can fail: the same report with a 900 px wide block and a console.error is caught."""
    broken = tmp_path / "broken.html"
    broken.write_text(report_file.read_text(encoding="utf-8").replace(
        "<main>", '<main><div style="width:900px;height:10px;background:#000"></div>'
                  "<script>console.error('deliberate')</script>", 1), encoding="utf-8")
    got = probe(browser, broken, 390, tmp_path)
    assert got["scrollWidth"] > got["innerWidth"] == 390
    assert any("deliberate" in e for e in got["errors"])
