"""`rubinperf estimate` keeps its records between runs (rubinperf/kept.py: kept_of_call): a run that finds them prints
what the computing run printed, byte for byte, and imports none of the core; a change of an argument or of a file
of the working directory named as a bundled spec computes afresh; a path-named spec, an error and a warning are
never kept; the kept files are bounded."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings

import pytest

from conftest import REPO
from rubinperf import kept


@pytest.fixture
def kept_dir(tmp_path, monkeypatch):
    """An empty folder of kept results for this test (not the checkout's __pycache__)."""
    d = tmp_path / "kept"
    d.mkdir()
    monkeypatch.setattr(kept, "_DIR", d)
    return d


@pytest.fixture
def computed(monkeypatch):
    """The calls of run_estimates from here on (each still computes)."""
    import rubinperf.step.estimates as engine

    calls, real = [], engine.run_estimates

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "run_estimates", spy)
    return calls


def _records_kept(d) -> list:
    return sorted(p.name for p in d.glob("tree-call-estimate-records-*"))


@pytest.mark.parametrize("argv", [
    [],
    ["--json"],
    ["--csv"],
    ["-l", "dep32", "--batch", "64", "--breakdown"],
    ["-H", "vr-nvl72", "-l", "tp8", "--set", "hbm_bandwidth=+20%", "--set", "model.mean_accepted_tokens=3", "--json"],
    ["-H", "vr-nvl72", "-l", "dep32", "--set", "hbm_bandwidth=+20%", "--baseline"],
    ["-H", "gb300-nvl72", "-l", "dep32", "--band", "--json"],
    ["-m", "llama-3.1-70b", "-H", "b200"],            # a default row that does not fit: left out, said under the table
    ["-m", "llama-3.1-70b", "-H", "b200", "--json"],
    ["--context", "1M", "--dtype", "fp8", "--wide"],
])
def test_a_kept_run_prints_what_the_computing_run_printed(cli, kept_dir, monkeypatch, argv):
    first = cli("estimate", *argv)
    assert first.code == 0, first
    assert len(_records_kept(kept_dir)) == 1 + ("--baseline" in argv)   # (the steps before the what-if too)
    import rubinperf.step.estimates as engine

    def not_again(*args, **kwargs):
        raise AssertionError("computed again")

    monkeypatch.setattr(engine, "run_estimates", not_again)
    again = cli("estimate", *argv)
    assert (again.code, again.out, again.err) == (first.code, first.out, first.err)
    if argv[-2:] == ["-H", "b200"]:
        assert "left out: " in first.out


def test_a_kept_run_saves_the_same_bundle(cli, kept_dir, tmp_path, monkeypatch):
    where = tmp_path / "bundle"
    files = []
    for n in range(2):   # the same directory both times: the bundle records its command line
        r = cli("estimate", "-H", "vr-nvl72", "-l", "dep32", "-q", "--save-dir", str(where))
        assert r.code == 0 and r.out == "", r
        files.append({p.relative_to(where): p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file()})
        shutil.rmtree(where)
    assert len(_records_kept(kept_dir)) == 1
    assert files[0] == files[1] and len(files[0]) > 3


def test_an_error_is_never_kept(cli, kept_dir, computed):
    for _ in range(2):
        r = cli("estimate", "-m", "llama-3.1-70b", "-H", "b200", "-l", "dep2")   # one row, and it does not fit
        assert r.code == 2 and "does not fit in HBM" in r.err and r.err.count("\n") == 1, r
    assert len(computed) == 2 and _records_kept(kept_dir) == []


def test_another_argument_computes_afresh(cli, kept_dir, computed):
    base = ["estimate", "-H", "vr-nvl72", "-l", "dep32"]
    outs = {}
    for argv in (base, base + ["--batch", "32"], base + ["--batch", "32.0"], base + ["--json"], base,
                 base + ["--batch", "32"], base + ["--band"], base + ["--no-eplb"]):
        r = cli(*argv)
        assert r.code == 0, r
        outs.setdefault(tuple(argv), r.out)
        assert outs[tuple(argv)] == r.out
    # computed: the plain run, --batch 32 (32.0 is the same float: kept), --band, --no-eplb; --json is a format of
    # the same records
    assert len(computed) == 4 and len(_records_kept(kept_dir)) == 4
    assert outs[tuple(base + ["--batch", "32"])] != outs[tuple(base)]


def test_a_file_of_the_working_directory_named_as_a_bundled_spec_computes_afresh(cli, kept_dir, computed, tmp_path,
                                                                                 monkeypatch):
    from rubinperf.bundled import folder
    from rubinperf.specs.hardware import load_hardware

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = ("estimate", "-H", "vr-nvl72", "-l", "tp8")
    stack = load_hardware("vr-nvl72").default_stack   # read by its name, never named on the command line
    kept._tree_digest.cache_clear()
    try:
        plain = cli(*argv)
        assert cli(*argv).out == plain.out and len(computed) == 1
        (work / stack).write_bytes((folder("stacks") / f"{stack}.toml").read_bytes())   # now `stack` names this file
        kept._tree_digest.cache_clear()   # (a new run: the tree's digest is found once per process)
        assert cli(*argv).out == plain.out and len(computed) == 2
        assert cli(*argv).out == plain.out and len(computed) == 2   # (kept under the tree with that file)
        shutil.copy(folder("hardware") / "vr-nvl72.toml", work / "vr-nvl72")   # a name given, now a file here
        for _ in range(2):
            assert cli(*argv).out == plain.out
        assert len(computed) == 4 and len(_records_kept(kept_dir)) == 2
    finally:
        kept._tree_digest.cache_clear()


def test_a_path_named_spec_is_never_kept(cli, kept_dir, computed, tmp_path):
    from rubinperf.bundled import folder

    own = tmp_path / "rack.toml"
    own.write_bytes((folder("hardware") / "vr-nvl72.toml").read_bytes())
    for argv in (["-H", str(own)], ["-H", str(folder("hardware") / "vr-nvl72.toml")],
                 ["-H", "vr-nvl72", "-m", str(folder("models") / "deepseek-v4.1-flash.toml")],
                 ["-H", "vr-nvl72", "--stack", str(folder("stacks") / f"{_default_stack()}.toml")]):
        for _ in range(2):
            r = cli("estimate", "-l", "dep32", *argv)
            assert r.code == 0, r
    assert len(computed) == 8 and _records_kept(kept_dir) == []


def _default_stack() -> str:
    from rubinperf.specs.hardware import load_hardware

    return load_hardware("vr-nvl72").default_stack


def test_only_bundled_names(tmp_path, monkeypatch):
    from rubinperf.bundled import only_bundled

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_text("")
    (tmp_path / "hf").mkdir()
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert only_bundled("vr-nvl72") and only_bundled("no-such-rack")   # (an unknown name is an error: computed)
    for name in ("", "a/b", "x.toml", "config.json", "a\\b", "a\0b", ".", "..", "mine", "hf", "gone"):
        assert not only_bundled(name), name


def test_a_kept_run_imports_none_of_the_core(tmp_path):
    code = ("import sys, io, contextlib\nfrom pathlib import Path\nfrom rubinperf import kept\n"
            f"kept._DIR = Path({str(tmp_path)!r})\n"
            "from rubinperf.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    code = main(['estimate', '-l', 'dep32', '--json'])\n"
            "core = ('numpy', 'sympy', 'rubinperf.step', 'rubinperf.kernels', 'rubinperf.roofline', "
            "'rubinperf.serving', 'rubinperf.specs.loader')\n"
            "print(code, len(out.getvalue()), sorted({m.split('.')[1] if m.startswith('rubinperf.') else m\n"
            "                                          for m in sys.modules if m.startswith(core)}))\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, again = (r.stdout.split(" ", 2) for r in runs)
    assert first[:2] == again[:2] and first[0] == "0"
    assert "step" in first[2] and "kernels" in first[2]   # the computing run (the test sees what a run imports)
    assert again[2].strip() == "[]"


def test_a_warning_while_computing_is_shown_every_time_and_nothing_kept(kept_dir):
    calls = []

    def compute():
        calls.append(1)
        warnings.warn("a step in doubt", UserWarning)
        return [1.0]

    for _ in range(2):
        with pytest.warns(UserWarning, match="a step in doubt"):
            assert kept.kept_of_call("w", ("a",), compute) == [1.0]
    assert len(calls) == 2 and list(kept_dir.glob("tree-call-*")) == []


def test_what_marshal_would_not_give_back_is_not_kept(kept_dir):
    import numpy as np

    calls = []
    for value in ([np.float64(1.5)], [{"x": np.int64(2)}], ["a", (1, [True, None])], [float("inf"), -0.0]):
        for _ in range(2):
            got = kept.kept_of_call("m", (repr(value),), lambda: calls.append(1) or value)
            assert got == value and [type(x) for x in got] == [type(x) for x in value]
    assert len(calls) == 2 + 2 + 1 + 1   # the numpy scalars computed each time (marshal would write their bytes)
    for args in ((float("nan"),), (object(),), (np.float64(1.0),)):   # arguments that do not name one call
        kept.kept_of_call("m", args, lambda: calls.append(1) or [0])
    assert len(calls) == 9 and len(list(kept_dir.glob("tree-call-m-*"))) == 2


def test_the_kept_files_are_bounded_and_the_last_used_stay(kept_dir, monkeypatch):
    import os

    monkeypatch.setattr(kept, "CALLS_KEPT", 3)
    calls = []

    def run(i):
        return kept.kept_of_call("b", (i,), lambda: calls.append(i) or [i])

    for i in range(3):
        run(i)
        for p in kept_dir.glob("tree-call-b-*"):   # (in order, a second apart: timestamps may be coarser than calls)
            if p.stat().st_mtime_ns > 10 ** 9 * (i + 1):
                os.utime(p, ns=(10 ** 9 * (i + 1),) * 2)
    assert run(0) == [0] and calls == [0, 1, 2]   # read back, and used now
    run(3)   # the fourth: the one used longest ago (1) is removed
    assert len(list(kept_dir.glob("tree-call-b-*"))) == 3
    assert [run(i) for i in (0, 2, 3)] == [[0], [2], [3]] and calls == [0, 1, 2, 3]
    run(1)
    assert calls == [0, 1, 2, 3, 1]
    for i in range(10, 30):
        run(i)
    assert len(list(kept_dir.glob("tree-call-b-*"))) == 3
