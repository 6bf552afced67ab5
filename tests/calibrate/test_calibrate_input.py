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
