"""examples/commands/*.sh run as a user would run them: `rubinperf` on PATH, exit 0, some output."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = sorted((REPO / "examples" / "commands").glob("*.sh"))


@pytest.fixture(scope="module")
def shim_path(tmp_path_factory) -> str:
    """A directory whose `rubinperf` runs this interpreter's rubinperf (no install needed)."""
    d = tmp_path_factory.mktemp("bin")
    shim = d / "rubinperf"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rubinperf "$@"\n')
    shim.chmod(0o755)
    return str(d)


def test_there_are_examples():
    assert len(SCRIPTS) >= 4, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs(script, shim_path, tmp_path):
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n# "), f"{script.name}: start with a shebang and a comment saying what it shows"
    assert "set -euo pipefail" in text
    env = {**os.environ, "PATH": shim_path + os.pathsep + os.environ.get("PATH", ""), "PYTHON": sys.executable,
           "COLUMNS": "200"}
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{script.name}: exit {r.returncode}\n{r.stderr[-2000:]}"
    assert r.stdout.strip(), f"{script.name}: printed nothing"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
