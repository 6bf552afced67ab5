"""Speed benchmark (not a test): import time, `estimate` wall time, sweep throughput, peak memory.

Run: python benchmarks/bench.py            (targets: estimate < 0.5 s and within 1.5x a bare
                                            `import numpy` of the same interpreter, timed in
                                            alternating pairs; sweep: aim 10M points/s on one
                                            core; peak RSS < 150 MB for estimate and for a
                                            1M-point sweep; pareto and compare --json wall time)

The package is byte-compiled first (as `pip install` does, and as Python does on a first run
where it may write __pycache__): with PYTHONDONTWRITEBYTECODE=1 (set on this project's machine)
and no __pycache__ beside an editable checkout, every run would compile rubinperf's ~12K lines
from source (~60 ms), which no installed copy does. `--no-compile` measures as found.

The ratios move with the machine's state: when the 2 shared cores are busy, numpy's import (a
dozen shared libraries) slows more than rubinperf's pure-Python start-up, and the ratios look
better than on an idle machine. Compare runs made together, and quote the idle ones.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 5


def wall(cmd: list[str]) -> tuple[float, float]:
    """Median wall seconds and max peak RSS (MB) of a command run RUNS times."""
    times, rss = [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
        rss.append(int(proc.stderr.strip().splitlines()[-1]) / 1024)
    return statistics.median(times), max(rss)


def pairs(a: list[str], b: list[str], runs: int = 2 * RUNS) -> tuple[float, float]:
    """Median wall seconds of two commands run in alternation (a, b, a, b, ...): the machine's
    state drifts alike for both."""
    ta, tb = [], []
    for _ in range(runs):
        for cmd, out in ((a, ta), (b, tb)):
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            out.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


SWEEP = r"""
import time, numpy as np
from rubinperf.step.point import Point
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.stack import load_platform
from rubinperf.specs.model import load_model
from rubinperf.serving.sweeps import sweep_grid
from rubinperf.step.grid import forget_graphs
m = load_model("deepseek-v4.1-flash")
batch = np.linspace(1, 256, 500)
context = np.linspace(1024, 1_000_000, 350)
seconds = []
for run in range(3):  # the first run as a user's first sweep (loading the racks, memory new to the process)
    forget_graphs()   # each run builds its graphs (the second rack reuses the first's, as within any run)
    t = time.perf_counter(); points = 0
    for hw in ("gb300-nvl72", "vr-nvl72"):
        h = load_platform(hw)  # the hardware with its default stack
        for lay in ("dep16", "dep32", "tp8"):
            out = sweep_grid(m, h, parse_layout(lay), Point("decode"), batch, context)
            points += out["step_s"].size
    seconds.append(time.perf_counter() - t)
print(points, seconds[0], min(seconds[1:]))
"""


def compile_package() -> None:
    """Write rubinperf's bytecode (__pycache__, ignored by git) where the package is imported from."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("rubinperf")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("rubinperf is not importable from this interpreter")
    for where in spec.submodule_search_locations:
        compileall.compile_dir(where, quiet=1)


# One aggregated engine (GB300 TP2, 8K/1K) timed and solved at 64 concurrencies, in-process after the imports.
SERVE_SWEEP = """
import time
import numpy as np
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.select import load_specs
from rubinperf.serving.aggregated import RequestMix, closed_loop, engine
m, (hw,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"])
t = time.perf_counter()
closed_loop(engine(m, hw, parse_layout("tp2"), RequestMix(8192, 1024)), np.arange(1, 65) * 4).records()
print(time.perf_counter() - t)
"""


def main() -> None:
    py = sys.executable
    if "--no-compile" not in sys.argv[1:]:
        compile_package()
    imp, _ = wall([py, "-c", "import rubinperf.cli"])
    base, _ = wall([py, "-c", "pass"])
    est, est_rss = wall([py, "-m", "rubinperf", "estimate"])
    numpy_s, est_pair = pairs([py, "-c", "import numpy"], [py, "-m", "rubinperf", "estimate"])
    numpy_j, est_json = pairs([py, "-c", "import numpy"], [py, "-m", "rubinperf", "estimate", "--json"])
    numpy_l, list_hw = pairs([py, "-c", "import numpy"], [py, "-m", "rubinperf", "list", "hardware"])
    pareto_s, _ = wall([py, "-m", "rubinperf", "pareto", "--json"])
    serve64 = float(subprocess.run([py, "-c", SERVE_SWEEP], capture_output=True, text=True, check=True).stdout)
    compare_s, _ = wall([py, "-m", "rubinperf", "compare", "--json"])
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", py, "-c", SWEEP], capture_output=True, text=True, check=True)
    points, seconds, warm_seconds = proc.stdout.split()
    sweep_rss = int(proc.stderr.strip().splitlines()[-1]) / 1024
    rate = float(points) / float(seconds)
    warm_rate = float(points) / float(warm_seconds)
    rows = [
        ("import rubinperf.cli (minus bare python)", f"{(imp - base) * 1e3:.0f} ms", ""),
        ("rubinperf estimate, wall incl. start-up", f"{est * 1e3:.0f} ms", "target < 500 ms"),
        ("bare python -c 'import numpy'", f"{numpy_s * 1e3:.0f} ms", ""),
        ("rubinperf estimate / import numpy (pairs)", f"{est_pair / numpy_s:.2f}x", "target <= 1.5x"),
        ("rubinperf estimate --json / import numpy", f"{est_json / numpy_j:.2f}x", "target <= 1.5x"),
        ("rubinperf list hardware / import numpy", f"{list_hw / numpy_l:.2f}x", "target <= 1.5x"),
        ("rubinperf estimate, peak RSS", f"{est_rss:.0f} MB", "target < 150 MB"),
        ("rubinperf pareto --json, wall", f"{pareto_s * 1e3:.0f} ms", ""),
        ("rubinperf compare --json, wall", f"{compare_s * 1e3:.0f} ms", ""),
        ("serve: 64-point concurrency sweep, one engine", f"{serve64 * 1e3:.0f} ms", "target <= 500 ms"),
        (f"vectorised sweep, {int(points):,} points", f"{rate / 1e6:.2f} M points/s", "aim >= 10 M/s"),
        ("vectorised sweep, again (best of 2 more)", f"{warm_rate / 1e6:.2f} M points/s", ""),
        ("vectorised sweep, peak RSS", f"{sweep_rss:.0f} MB", "target < 150 MB"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>18}  {target}")


if __name__ == "__main__":
    main()
