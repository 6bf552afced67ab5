"""`estimate` on a bundled TOML model loads none of the config.json machinery (JSON parsing, the families).
(Its start-up time against a bare `import numpy` is measured by benchmarks/bench.py, not by a timed test.)"""

from __future__ import annotations

import subprocess
import sys

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
