"""`calibrate --from-csv` reads regular files only: a FIFO (which would wait forever for a writer),
a device, a socket or a directory is one line and exit 2, and nothing is read from it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rubinperf.calibrate.plan import read_csv
from rubinperf.errors import SpecError

REPO = Path(__file__).resolve().parent.parent.parent
CSV = REPO / "calibration" / "h200" / "measurements.csv"


def _calibrate(path, out_dir, timeout=60):
    return subprocess.run([sys.executable, "-m", "rubinperf", "calibrate", "--from-csv", str(path),
                           "--out-dir", str(out_dir)], capture_output=True, text=True, cwd=REPO, timeout=timeout)


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "m.csv"
    os.mkfifo(fifo)
    r = _calibrate(fifo, tmp_path / "out", timeout=60)   # before the fix: waits for a writer until the timeout
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and "m.csv" in r.stderr and "FIFO" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(SpecError, match="FIFO"):
        read_csv(fifo)


def test_a_link_to_a_device_a_directory_and_a_socket_are_refused(tmp_path):
    link = tmp_path / "null.csv"
    link.symlink_to("/dev/null")
    with pytest.raises(SpecError, match="character device"):
        read_csv(link)
    d = tmp_path / "d.csv"
    d.mkdir()
    with pytest.raises(SpecError, match="directory"):
        read_csv(d)
    sock = tmp_path / "s.csv"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock))
        with pytest.raises(SpecError, match="is a socket"):
            read_csv(sock)
    finally:
        s.close()


def test_regular_files_and_links_to_them_still_read(tmp_path):
    kind, rows = read_csv(CSV)
    link = tmp_path / "link.csv"
    link.symlink_to(CSV)
    assert read_csv(link) == (kind, rows) and kind == "kernels" and rows
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(CSV.read_bytes().replace(b"\n", b"\r\n"))
    assert read_csv(crlf) == (kind, rows)


def test_not_utf8_is_one_line(tmp_path):
    p = tmp_path / "latin.csv"
    shutil.copy(CSV, p)
    p.write_bytes(p.read_bytes() + b"\xff\xfe\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        read_csv(p)


def _row_by_row(path: Path, text: str):
    """What _parse_csv gives when every row is read by _typed (the path for a CSV with a fault)."""
    import csv
    import io

    from rubinperf.calibrate import plan

    header = csv.DictReader(io.StringIO(text)).fieldnames
    kind = "kernels" if "family" in header else "collectives"
    return kind, [plan._typed(raw, kind) for raw in csv.DictReader(io.StringIO(text))]


@pytest.mark.parametrize("path", sorted(p for p in (REPO / "calibration").rglob("*.csv") if "family" in
                                        p.read_text().split("\n", 1)[0] and "aiconfigurator/modules" not in str(p))[:12],
                         ids=lambda p: p.name)
def test_a_table_read_a_column_at_a_time_is_the_table_read_row_by_row(path):
    from rubinperf.calibrate import plan

    text = path.read_text()
    try:
        want = _row_by_row(path, text)
    except (ValueError, TypeError):
        pytest.skip("not a table of measurements")
    kind, rows = plan._parse_csv(path, text)
    assert kind == want[0] and len(rows) == len(want[1])
    for got, ref in zip(rows, want[1]):   # the same keys in the same order, the same values of the same types
        assert list(got.items()) == list(ref.items())
        assert [type(v) for v in got.values()] == [type(v) for v in ref.values()]


@pytest.mark.parametrize("cell, words", [("abc", "could not convert"), ("-3", "expected a count"),
                                         ("nan", "expected a count"), ("1e400", "expected a count")])
def test_a_table_with_a_bad_cell_names_its_line_as_the_row_reader_does(tmp_path, cell, words):
    lines = CSV.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[3].split(",")
    cells[header.index("k")] = cell
    lines[3] = ",".join(cells)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=f"line 4: k: .*{words}|line 4: .*{words}"):
        read_csv(bad)
