"""`estimate` on a bundled TOML model loads none of the config.json machinery (JSON parsing, the families), and
starts within 1.5x a bare `import numpy`."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import REPO

RUN = ("import sys, io, contextlib\nfrom rubinperf.cli import main\n"
       "with contextlib.redirect_stdout(io.StringIO()):\n"
       "    main(['estimate', '-m', 'llama-3.1-70b', '-H', 'h200', '-l', 'tp8'])\n")


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_a_bundled_model_loads_no_config_machinery():
    r = _py(RUN + "print([m for m in ('json', 'rubinperf.specs.hfconfig') if m in sys.modules])")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _best(code: str, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        assert _py(code).returncode == 0
        best = min(best, time.perf_counter() - t)
    return best


def test_estimate_starts_within_one_and_a_half_numpy_imports():
    assert _best(RUN) <= 1.5 * _best("import numpy")
