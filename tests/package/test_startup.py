"""Start-up and output speed without changing what is printed: the CLI imports typer without
typer.rich_utils (rich.markdown, markdown_it, pygments), help and errors read as before, and
to_json's fast writer gives exactly json.dumps(indent=2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO
from rubinperf.render import output

HEAVY = ("typer.rich_utils", "rich.markdown", "markdown_it", "pygments", "rich.traceback", "rich.syntax")


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_cli_imports_no_rich_help_machinery():
    r = _py("import sys, rubinperf.cli\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
            "import rich, rich.console, typer\n"
            "print(type(sys.modules['rich']).__name__, typer.core.rich, typer.main.rich)")
    assert r.returncode == 0, r.stderr
    heavy, after = r.stdout.splitlines()
    assert heavy == "[]"
    assert after == "module None None"   # rich importable afterwards; typer treats it as absent


def test_an_estimate_imports_none_of_it_either():
    r = _py("import sys, io, contextlib\nfrom rubinperf.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    code = main(['estimate', '-H', 'vr-nvl72', '-l', 'dep32'])\n"
            f"print(code, 'dep32' in out.getvalue(), [m for m in {HEAVY!r} if m in sys.modules])")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0 True []"


def _help(pre: str) -> str:
    r = _py(pre + "import io, contextlib\nfrom rubinperf.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n        main(['pareto', '--help'])\n    except SystemExit:\n        pass\n"
            "print(out.getvalue())")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_help_is_the_same_whoever_imported_typer_first():
    plain = _help("")
    assert "[default: 1024]" in plain and "\\[default" not in plain and "--max-batch" in plain
    assert _help("import typer, typer.rich_utils\n") == plain


def test_usage_errors_stay_one_plain_line():
    r = subprocess.run([sys.executable, "-m", "rubinperf", "estimate", "--no-such-option"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "No such option: --no-such-option" in r.stderr, r.stderr
    assert "╭" not in r.stderr


# ---------------------------------------------------------------- to_json


def _reference(x) -> str:
    return json.dumps(output._finite(x), indent=2, default=output._jsonable, allow_nan=False)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.text(max_size=8),
                    st.floats(allow_nan=True, allow_infinity=True), st.floats(width=32),
                    st.floats(allow_nan=False).map(np.float64), st.integers(-5, 5).map(np.int64))
values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4), st.tuples(kids, kids),
                                                       st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                      max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(values)
def test_to_json_is_exactly_json_dumps_indent_2(x):
    assert output.to_json(x) == _reference(x)


def test_to_json_leaves_the_unusual_to_json_dumps():
    for x in ({1: 2.0, "a": float("nan")}, [{"k": {None: 1}}], {"p": ValueError("x")},
              [np.array([1.0, math.inf])], {"d": __import__("decimal").Decimal("1.5")}):
        assert output.to_json(x) == _reference(x)
    assert json.loads(output.to_json([{"ratio": math.inf, "x": -math.nan}])) == [{"ratio": None, "x": None}]


def test_to_json_of_real_records(cli):
    r = cli("estimate", "--json")
    assert r.code == 0, r
    recs = json.loads(r.out)
    assert r.out.rstrip("\n") == _reference(recs) and recs[0]["breakdown"]


# ---------------------------------------------------------------- one command built


def _through(command, argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = command.main(args=argv, prog_name="rubinperf", standalone_mode=False)
    except SystemExit as exc:
        code = exc.code
    except Exception as exc:  # click's usage errors: compare their text
        code = f"{type(exc).__name__}: {exc}"
    return code, capsys.readouterr().out


def test_only_the_invoked_command_is_built_and_it_behaves_the_same(capsys):
    import typer

    from rubinperf import cli

    full = typer.main.get_command(cli.app)
    names = sorted(full.commands)
    assert {"estimate", "pareto", "compare", "kernel", "list", "calibrate"} <= set(names)
    for name in names:
        lite = cli._click_command([name, "--help"])
        assert list(lite.commands) == [name]
        for argv in ([name, "--help"], [name, "--no-such-option"]):
            assert _through(lite, argv, capsys) == _through(full, argv, capsys), argv
    for argv in ([], ["--help"], ["-h", "estimate"], ["estimat"], ["--version"]):
        assert sorted(cli._click_command(argv).commands) == names, argv    # the whole group


def test_shell_completion_gets_the_whole_group(monkeypatch):
    import typer

    from rubinperf import cli

    monkeypatch.setenv("_RUBINPERF_COMPLETE", "complete_bash")
    assert sorted(cli._click_command(["estimate"]).commands) == sorted(typer.main.get_command(cli.app).commands)
