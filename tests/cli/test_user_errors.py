"""Anything a user can type or point at ends in one line naming the input and exit status 2
(130/143 for Ctrl-C/SIGTERM), never a traceback or an 'internal error'."""

from __future__ import annotations

import errno
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def one_line(r, code=2, *needles):
    assert r.code == code, r
    assert r.err.count("\n") == 1 and r.err.endswith("\n"), r
    assert "internal error" not in r.err and "Traceback" not in r.err, r
    for n in needles:
        assert n in r.err, r


def run(*argv, env=None, cwd=None, stdout=subprocess.PIPE, timeout=120):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "rubinperf", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          env=full_env, cwd=cwd or REPO, timeout=timeout)


def test_huge_max_batch(cli):
    one_line(cli("pareto", "--max-batch", "99999999999999999999"), 2, "--max-batch", "1 to 1,048,576", "a 20-digit number")
    one_line(cli("compare", "--max-batch", "99999999999999999999", "-l", "dep0", "--json"), 2, "--max-batch")


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="without matplotlib --plot stops earlier")
def test_plot_of_a_sweep_without_feasible_points(cli, tmp_path):
    out = tmp_path / "f.svg"
    r = cli("pareto", "-H", "h200", "-l", "dep8", "--prefill-layout", "dep2", "--max-batch", "16", "--plot", str(out), "-q")
    one_line(r, 2, "--plot", "no feasible point")
    assert not out.exists()


@pytest.mark.parametrize("size", [300, 100_000])
def test_names_over_255_bytes(cli, size):
    name = "a" * size
    r = cli("estimate", "-H", name)
    one_line(r, 2, "unknown hardware", f"{size:,} bytes")
    assert len(r.err) < 400
    r = cli("estimate", "-m", "/tmp/" + name + ".toml")
    one_line(r, 2, "no such model spec file")
    assert len(r.err) < 400


def test_toml_nested_500_deep(cli, tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text('name = "x"\na = ' + "[" * 500 + "]" * 500 + "\n")
    one_line(cli("estimate", "-H", str(path)), 2, str(path), "nested too deeply")
    path.write_text('name = "x"\n' + "a = {b = " * 500 + "1" + "}" * 500 + "\n")
    one_line(cli("estimate", "-m", str(path)), 2, str(path))


def test_spec_in_a_directory_without_search_permission(cli, tmp_path, monkeypatch):
    spec = tmp_path / "locked" / "hw.toml"
    spec.parent.mkdir()
    spec.write_text((REPO / "hardware" / "h200.toml").read_text())
    real_stat = Path.stat

    def denied(self, *a, **k):  # what stat() says under a directory without x permission (root passes chmod)
        if str(self).startswith(str(spec.parent)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(Path, "stat", denied)
    one_line(cli("estimate", "-H", str(spec)), 2, str(spec), "Permission denied")
    one_line(cli("estimate", "-H", str(spec.parent / "hw")), 2, "Permission denied")


def test_spec_unreadable_file(cli, tmp_path, monkeypatch):
    spec = tmp_path / "hw.toml"
    spec.write_text((REPO / "hardware" / "h200.toml").read_text())
    import os

    real_open = os.open   # spec files are read through rubinperf.files.read_bounded's os.open (root reads any mode)

    def denied(file, *a, **k):
        if str(file) == str(spec):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(os, "open", denied)
    one_line(cli("estimate", "-H", str(spec)), 2, str(spec), "Permission denied")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["estimate", "--json"], ["estimate"], ["list", "models", "--json"], ["--version"]])
def test_output_to_a_full_disk(argv):
    with open("/dev/full", "w") as full:
        r = run(*argv, stdout=full)
    assert r.returncode == 2, r
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [["pareto", "--plot", "x.pgf"], ["sensitivity", "--plot", "x.pgf"],
                                  ["sensitivity", "--plot", "x.eps"], ["pareto", "--plot", "x.ps"]])
def test_plot_formats_that_start_external_programs_are_refused(cli, tmp_path, argv):
    argv = [a if not a.startswith("x.") else str(tmp_path / a) for a in argv]
    one_line(cli(*argv), 2, "--plot", ".png, .svg, .pdf")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"},
                                 {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}])
def test_stdout_that_is_not_utf8(env):
    r = run("estimate", "-H", "vr-nvl72", "-l", "dep32", "--breakdown", env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode("latin-1")
    assert "MegaMoE" in out and "us" in out and r.stderr == b""
    r = run("explain", "megamoe", env=env)
    assert r.returncode == 0, r.stderr


def test_install_completion_with_a_home_that_cannot_be_written(tmp_path):
    home = tmp_path / "home"
    home.write_text("a file, not a directory")  # as root, a read-only directory is still writable
    r = run("--install-completion", env={"HOME": str(home), "SHELL": "/bin/bash"})
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1, err
    assert "cannot install shell completion" in err and "Traceback" not in err


def _interrupting(target: str, signum: int) -> str:
    """Python code that runs the CLI and delivers `signum` from inside `target` (module:function)."""
    mod, fn = target.split(":")
    return (f"import signal, sys, importlib; m = importlib.import_module({mod!r}); orig = getattr(m, {fn!r})\n"
            f"def hit(*a, **k):\n    signal.raise_signal({int(signum)})\n    return orig(*a, **k)\n"
            f"setattr(m, {fn!r}, hit)\n"
            "from rubinperf.entry import main\nsys.exit(main())\n")


@pytest.mark.parametrize("signum,status,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
@pytest.mark.parametrize("target,argv", [
    ("rubinperf.step.estimates:run_estimates", ["estimate", "-H", "hardware/gb300-nvl72.toml"]),   # (a path: computed)
    ("rubinperf.serving:sweep", ["pareto"]),
    pytest.param("rubinperf.files:write_atomic", ["pareto", "--plot", "PLOT"],
                 marks=pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="a plot needs matplotlib")),
    ("rubinperf.specs.loader:read_toml", ["list", "hardware"]),
])
def test_interrupt_during_a_command(tmp_path, signum, status, word, target, argv):
    argv = [str(tmp_path / "f.svg") if a == "PLOT" else a for a in argv]
    r = subprocess.run([sys.executable, "-c", _interrupting(target, signum), *argv], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, cwd=REPO, timeout=120)
    err = r.stderr.decode()
    assert r.returncode == status, err
    assert err == f"rubinperf: {word}\n"
    assert not list(tmp_path.iterdir())  # no plot, no temporary file


def test_interrupt_while_the_cli_is_being_imported():
    code = ("import signal, sys, importlib.abc\n"
            "class Hit(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'rubinperf.cli':\n            signal.raise_signal(signal.SIGINT)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Hit())\nfrom rubinperf.entry import main\nsys.exit(main())\n")
    r = subprocess.run([sys.executable, "-c", code, "estimate"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=REPO, timeout=60)
    assert r.returncode == 130 and r.stderr == b"rubinperf: interrupted\n", r


def test_interrupt_in_process_is_130_and_one_line(cli, monkeypatch, tmp_path):
    import rubinperf.step.estimates as engine
    from rubinperf import kept

    monkeypatch.setattr(kept, "_DIR", tmp_path)   # no records kept: computed

    def hit(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "run_estimates", hit)
    one_line(cli("estimate"), 130, "rubinperf: interrupted")


def test_console_script_is_the_signal_safe_entry():
    text = (REPO / "pyproject.toml").read_text()
    assert 'rubinperf = "rubinperf.entry:main"' in text


def test_points_file_that_is_a_fifo_or_directory_does_not_block(cli, tmp_path):
    fifo = tmp_path / "points.toml"
    os.mkfifo(fifo)
    one_line(cli("validate", "--points", str(fifo)), 2, str(fifo), "not a regular file")
    one_line(cli("validate", "--points", str(tmp_path)), 2, str(tmp_path), "directory")
    one_line(cli("estimate", "-H", str(fifo)), 2, str(fifo), "not a regular file")
    one_line(cli("estimate", "-H", "/dev/null"), 2, "/dev/null", "not a regular file")


def test_huge_set_key_is_not_echoed(cli):
    r = cli("estimate", "--set", "a" * 100_000 + "=3")
    one_line(r, 2, "--set")
    assert len(r.err) < 300


def _as_nobody():
    """argv prefix that runs a command as an unprivileged user (root passes every permission check)."""
    import shutil

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop privileges")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run(prefix + [sys.executable, "-c", "import rubinperf.cli"], capture_output=True, cwd="/",
                           timeout=60)
    if probe.returncode != 0:  # the interpreter or the checkout is not readable by an unprivileged user here
        pytest.skip("an unprivileged user cannot run this interpreter or import this checkout")
    return prefix


def test_real_permission_errors_as_an_unprivileged_user():
    import shutil
    import tempfile

    prefix = _as_nobody()
    top = Path(tempfile.mkdtemp(prefix="rubinperf-perm-"))
    try:
        top.chmod(0o755)
        locked = top / "locked"
        locked.mkdir()
        (locked / "hw.toml").write_text((REPO / "hardware" / "h200.toml").read_text())
        unreadable = top / "unreadable.toml"
        unreadable.write_text((REPO / "hardware" / "h200.toml").read_text())
        unreadable.chmod(0o000)
        locked.chmod(0o000)  # no search permission
        home = top / "home"
        home.mkdir()
        home.chmod(0o555)    # read-only HOME
        env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash"}
        for argv, needle in ((["estimate", "-H", str(locked / "hw.toml")], "Permission denied"),
                             (["estimate", "-H", str(unreadable)], "Permission denied"),
                             (["--install-completion"], "cannot install shell completion")):
            r = subprocess.run(prefix + [sys.executable, "-m", "rubinperf", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=top, timeout=120)
            err = r.stderr.decode()
            assert r.returncode == 2 and err.count("\n") == 1 and needle in err, (argv, err)
            assert "Traceback" not in err and "internal error" not in err
    finally:
        for p in (top / "locked", top / "home"):
            if p.exists():
                p.chmod(0o755)
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("argv", [["pareto", "--json"], ["pareto", "--rows", "0", "--wide", "-l", "dep8", "-l", "dep16",
                                                        "-l", "dep32", "-l", "dep64"]])
def test_reader_closing_the_pipe_is_a_quiet_success(argv):
    p = subprocess.Popen([sys.executable, "-m", "rubinperf", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=REPO)
    p.stdout.readline()
    p.stdout.close()          # like `| head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0 and err == "", err
