"""The README's console examples run as printed, its set-up commands are the ones CI runs, and
every file it links to exists. scripts/readme_examples.py --write regenerates the examples."""
import importlib.util
import sys
import re

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("readme_examples", REPO / "scripts" / "readme_examples.py")
readme_examples = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = readme_examples   # dataclasses look their module up
_spec.loader.exec_module(readme_examples)

TEXT = (REPO / "README.md").read_text(encoding="utf-8")
EXAMPLES = readme_examples.examples(TEXT)


def test_the_readme_has_console_examples_each_with_its_output():
    assert 5 <= len(EXAMPLES) <= 12          # a modest number: the test stays well under 30 s
    for ex in EXAMPLES:
        assert ex.command.split()[0] in {"rubinperf"} or ex.command.startswith("COLUMNS="), ex.command
        assert ex.shown.strip(), f"$ {ex.command} shows no output"


@pytest.mark.parametrize("ex", EXAMPLES, ids=[ex.command for ex in EXAMPLES])
def test_console_example_prints_what_the_readme_shows(ex):
    now = readme_examples.run(ex.command)
    assert now == readme_examples.normalise(ex.shown), (
        f"$ {ex.command} prints something else than README.md shows; "
        "python scripts/readme_examples.py --write rewrites the examples")


def test_the_example_parser_splits_commands_and_outputs():
    text = "x\n```console\n$ rubinperf a\nout a\n  b  \n$ rubinperf b\nout b\n```\n```bash\n$ rubinperf c\n```\n"
    got = readme_examples.examples(text)
    assert [(e.command, e.shown) for e in got] == [("rubinperf a", "out a\n  b  \n"), ("rubinperf b", "out b\n")]
    assert text[got[0].start:got[0].end] == "out a\n  b  \n"
    assert readme_examples.normalise("a  \nb \n\n") == "a\nb\n"


def test_the_readme_test_command_is_the_one_ci_runs():
    ci_last = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert "pytest" in ci_last and "-e " not in ci_last
    assert ci_last.replace("pip install -q ", "pip install ") in TEXT   # CI keeps pip quiet
    setup = re.search(r"^python3 -m venv .*rubinperf estimate$", TEXT, re.M)
    assert setup and "-e " not in setup.group(0)


def test_every_file_the_readme_links_to_exists():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", TEXT)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing
