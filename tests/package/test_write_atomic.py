"""write_atomic replaces regular files only, follows links, and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys

import importlib.util

import pytest

from conftest import REPO
from rubinperf.errors import SpecError
from rubinperf.files import write_atomic

needs_mpl = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                               reason="writing a plot needs matplotlib (the plot extra)")
PLOT = ["pareto", "-H", "vr-nvl72", "-l", "dep32", "--max-batch", "16", "-q", "--plot"]


def leftovers(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


def test_regular_file_written_whole(tmp_path):
    p = tmp_path / "a.txt"
    write_atomic(p, "one")
    write_atomic(p, b"two")
    assert p.read_bytes() == b"two" and leftovers(tmp_path) == []


def test_fifo_is_refused_not_replaced(tmp_path, cli):
    fifo = tmp_path / "f.svg"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="FIFO"):
        write_atomic(fifo, "x")
    r = cli(*PLOT, str(fifo))
    assert r.code == 2 and "FIFO" in r.err and r.err.count("\n") == 1, r
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and leftovers(tmp_path) == []


def test_socket_is_refused(tmp_path):
    path = tmp_path / "s.svg"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        with pytest.raises(SpecError, match="socket"):
            write_atomic(path, "x")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        s.close()


def test_device_node_is_refused(tmp_path, cli):
    dev = tmp_path / "null.svg"  # never /dev/null itself: a regression would replace it
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        dev = None
    if dev is not None:
        with pytest.raises(SpecError, match="character device"):
            write_atomic(dev, "x")
        r = cli(*PLOT, str(dev))
        assert r.code == 2 and "character device" in r.err, r
        assert stat.S_ISCHR(os.lstat(dev).st_mode)
    link = tmp_path / "to-null.svg"
    link.symlink_to("/dev/null")
    r = cli(*PLOT, str(link))
    assert r.code == 2 and "character device" in r.err and "link" in r.err, r
    assert os.path.islink(link) and os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_directory_is_refused(tmp_path):
    d = tmp_path / "d.svg"
    d.mkdir()
    with pytest.raises(SpecError, match="directory"):
        write_atomic(d, "x")
    assert d.is_dir()


@needs_mpl
def test_symlink_is_followed_and_kept(tmp_path, cli):
    target = tmp_path / "real" / "chart.svg"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "chart.svg"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    r = cli(*PLOT, str(link))
    assert r.code == 0, r
    assert link.is_symlink() and target.read_text().startswith("<?xml")
    assert leftovers(tmp_path) == [] and leftovers(target.parent) == []
    dangling = tmp_path / "new.svg"
    dangling.symlink_to(tmp_path / "real" / "fresh.svg")
    write_atomic(dangling, "made")
    assert (tmp_path / "real" / "fresh.svg").read_text() == "made" and dangling.is_symlink()


def test_error_mid_write_leaves_nothing(tmp_path, monkeypatch):
    p = tmp_path / "a.txt"
    p.write_text("kept")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(p, "new")
    assert p.read_text() == "kept" and leftovers(tmp_path) == []


@needs_mpl
def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path):
    """SIGTERM delivered while the data is being written: the CLI unwinds, the .tmp file goes."""
    out = tmp_path / "f.svg"
    code = ("import os, signal, sys, rubinperf.files as r\n"
            "real = os.fdopen\n"
            "class Slow:\n"
            "    def __init__(self, fh): self.fh = fh\n"
            "    def __enter__(self): return self\n"
            "    def __exit__(self, *e): self.fh.close()\n"
            "    def write(self, data):\n"
            "        self.fh.write(data[:10]); self.fh.flush()\n"
            "        signal.raise_signal(signal.SIGTERM)\n"
            "        self.fh.write(data[10:])\n"
            "os.fdopen = lambda fd, mode: Slow(real(fd, mode))\n"
            "from rubinperf.entry import main\nsys.exit(main())\n")
    r = subprocess.run([sys.executable, "-c", code, *PLOT, str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, cwd=REPO, timeout=120)
    assert r.returncode == 128 + signal.SIGTERM and r.stderr == b"rubinperf: terminated\n", r
    assert list(tmp_path.iterdir()) == []
