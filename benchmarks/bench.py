"""Speed benchmark (not a test): start-up, `estimate`, `explain`, `sensitivity`, `pareto`, and the grid sweep.

Run: python benchmarks/bench.py [--quick] [--no-compile] [--sweep] [--only WORD]
(--sweep: only the sweep's lines. --only WORD: only the command lines whose name holds WORD, as `--only validate`,
and with `--only estimate` the start-up and estimate lines; no calibrate, sweep or serve lines.)

Targets, each line CPU time beside wall time: `estimate` (and `--json`) within 1.3x a bare
`import numpy` of the same interpreter (timed in alternating pairs), as a user runs it again (its records kept from a
run before; its first run after a change of the tree, when nothing is kept, is shown beside, without a target);
`explain` of a kernel and of the whole step (`explain step -l tp8`) and `sensitivity` <= 1 s; `validate`, `report`,
`compare` and `pareto` <= 2 s (`validate` also on its first run after a change of the tree, when rubinperf/kept.py
keeps no result of this tree, and after an install, when it keeps nothing: no parsed spec or CSV either);
`calibrate --from-csv` (the README's H200 refit) <= 20 s; a simulated 10,000-request run of one engine
(serve --request-rate) <= 2 s of CPU; the sweep >= 0.5 of the same-process numpy yardstick on a first run, with
peak memory flat in the number of points.

The sweep is the one a user runs: `estimate`'s own decode point (make_point from the rack's stack, as
`rubinperf estimate -H RACK -l LAYOUT --phase decode` builds it) for DEP16, DEP32 and TP8, over batches
1..1024 x contexts from 1 to 1M (1,000 of them), one rack per process (no graph of another rack to
reuse), streamed a block at a time (serving.sweep_grid_blocks) and reduced to each layout's best
tokens/s per GPU; its peak memory again at 16x the batches (blocks of the same size, in four graphs of
GRID_ROWS batches). Every figure is given as CPU time beside wall time. The machine is shared: wall time moves with
its load, CPU time much less; a same-process numpy yardstick (a fused expression with the sweep's own count of array
operations per point, over arrays of one block) gives a ratio that holds on a noisy machine. A few grid points are
checked against `rubinperf estimate --batch B --context C --json`.

The first line names the host (CPU, Python, numpy and the SIMD levels its loops run at, the load): the
yardstick's speed follows the host's vector units, the sweep's Python its scalar speed, so the sweep's ratio moves
with the host (docs/performance.md). First runs are timed FIRST_RUNS times and their median given: validate's each
after forgetting what is kept, the sweep's each in a process of its own.

The package is byte-compiled first (as `pip install` does): with PYTHONDONTWRITEBYTECODE=1 and no
__pycache__ beside an editable checkout, every run would compile rubinperf from source, which no
installed copy does. `--no-compile` measures as found. `--sweep` runs the sweep's lines alone.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 5
FIRST_RUNS = 3   # first runs timed (validate's after forgetting what is kept, the sweep's in processes of their own)
RACKS = ("gb300-nvl72", "vr-nvl72")
LAYOUTS = ("dep16", "dep32", "tp8")
# Every other command, as a user runs it: (line, arguments, target). `validate` exits 1 where a point is out of its band.
COMMANDS = (("rubinperf explain megamoe", ["explain", "megamoe"], "<= 1 s CPU"),
            ("rubinperf explain step -l tp8", ["explain", "step", "-l", "tp8"], "<= 1 s CPU"),
            ("rubinperf sensitivity", ["sensitivity"], "<= 1 s CPU"),
            ("rubinperf validate", ["validate"], "<= 2 s CPU"),
            ("rubinperf report", ["report", "-o", os.path.join(tempfile.gettempdir(), "rubinperf-bench-report.html")],
             "<= 2 s CPU"),   # (the report written outside the checkout)
            ("rubinperf compare", ["compare"], "<= 2 s CPU"),
            ("rubinperf compare --json", ["compare", "--json"], "<= 2 s CPU"),
            ("rubinperf pareto", ["pareto"], "<= 2 s CPU"),
            ("rubinperf pareto --json", ["pareto", "--json"], "<= 2 s CPU"))


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], runs: int = RUNS, ok: tuple = (0,), before=None) -> tuple[float, float, float]:
    """Median wall seconds, median CPU seconds and max peak RSS (MB) of a command run `runs` times (`ok`: the exit
    statuses that are no failure; `before`, where given, is called before each run, untimed)."""
    walls, cpus, rss = [], [], []
    for _ in range(runs):
        if before is not None:
            before()
        c, t = _children_cpu(), time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
        walls.append(time.perf_counter() - t)
        cpus.append(_children_cpu() - c)
        if proc.returncode not in ok:
            raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
        rss.append(int(proc.stderr.strip().splitlines()[-1]) / 1024)
    return statistics.median(walls), statistics.median(cpus), max(rss)


def pairs(a: list[str], b: list[str], runs: int = 2 * RUNS, before_b=None) -> tuple[float, float, float, float]:
    """Median wall and CPU seconds of two commands run in alternation (a, b, a, b, ...): the machine's
    state drifts alike for both. `before_b`, where given, is called before each run of b, untimed. Returns (wall a,
    wall b, cpu a, cpu b)."""
    wa, wb, ca, cb = [], [], [], []
    for _ in range(runs):
        for cmd, w, c in ((a, wa, ca), (b, wb, cb)):
            if cmd is b and before_b is not None:
                before_b()
            c0, t = _children_cpu(), time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            w.append(time.perf_counter() - t)
            c.append(_children_cpu() - c0)
    return statistics.median(wa), statistics.median(wb), statistics.median(ca), statistics.median(cb)


# One rack's sweep, in a process of its own. argv: rack, batches, contexts, runs. Prints JSON.
SWEEP = r"""
import json, resource, sys, time
import numpy as np
from rubinperf.serving.sweeps import sweep_grid_blocks
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.defaults import DEFAULT_MODEL
from rubinperf.specs.select import load_specs
from rubinperf.step.grid import forget_graphs
from rubinperf.step.point import make_point

rack, nb, nc, runs, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
m, (hw,) = load_specs(DEFAULT_MODEL, [rack])


def yardstick(points):
    # CPU seconds of a fused numpy expression of `ops` array operations per point over `points` points, in
    # arrays of one block (a column times a row, then multiply-adds, two operations each, then a max).
    from rubinperf.serving.sweeps import CHUNK_POINTS
    a = np.random.default_rng(0).uniform(1, 2, (CHUNK_POINTS // 64, 1))
    c = np.random.default_rng(1).uniform(1, 2, (1, 64))
    done, t = 0, time.process_time()
    while done < points:
        x = a * c
        for _ in range(max(0, round(ops / 2) - 1)):
            x = x * 1.000001 + c
        x.max()
        done += x.size
    return time.process_time() - t

batch = np.arange(1.0, nb + 1)
context = np.round(np.linspace(1, 1 << 20, nc))
shapes = [(lay, make_point(m, hw, lay, phase="decode")) for lay in map(parse_layout, ("dep16", "dep32", "tp8"))]
out = {"points": 3 * batch.size * context.size, "wall": [], "cpu": [], "yardstick_cpu": [], "best": {}}
for run in range(runs):   # the first as a user's first sweep; later ones build their graphs again
    forget_graphs()
    w, c = time.perf_counter(), time.process_time()
    for lay, p in shapes:
        best = 0.0
        for rows, cols, v in sweep_grid_blocks(m, hw, lay, p, batch, context):
            best = max(best, float(v["tokens_per_s_per_gpu"].max()))
        out["best"][lay.name] = best
    out["wall"].append(time.perf_counter() - w)
    out["cpu"].append(time.process_time() - c)
    if ops:
        out["yardstick_cpu"].append(yardstick(out["points"]))
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if "--check" in sys.argv:   # the sweep's values at a few grid points, for `estimate` to give again
    picks = [(0, 0), (batch.size - 1, 0), (15, context.size // 2), (batch.size - 1, context.size // 16),
             (batch.size - 1, context.size - 1), (6, 3)]
    out["check"] = []
    for lay, p in shapes:
        for rows, cols, v in sweep_grid_blocks(m, hw, lay, p, batch, context):
            for i, j in picks:
                if rows.start <= i < rows.stop and cols.start <= j < cols.stop:
                    out["check"].append({"layout": lay.name, "batch": batch[i], "context": context[j],
                                         **{k: float(v[k][i - rows.start, j - cols.start]) for k in v}})
print(json.dumps(out))
"""

# The yardstick's operation count: the sweep's array operations per point, counted over the sweep's own grid (so its
# own blocks) by a numpy subclass that counts the element operations of every ufunc call over a block. The
# sweep's process then times a fused expression of that many operations per point after each run. (Until 2026-12-07
# it counted over an eighth of the batches: other blocks, 10% more operations a point than the sweep ran then; with
# the indexer's kernels timed on their factors, twice as many, from one block of each row whose top-k splits part of
# it, wider there than the sweep's. A matrix product (the block's sums, since 2026-12-07's fourth pass) counts its
# multiplications and additions an element, not one operation.)
YARDSTICK = r"""
import json, sys
import numpy as np
from rubinperf.serving.sweeps import sweep_grid_blocks
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.defaults import DEFAULT_MODEL
from rubinperf.specs.select import load_specs
from rubinperf.step.point import make_point

def products(c, r):
    # the element operations of a matrix product C @ R of inner dimension k (mathops._rank_sum: a block's sum of k
    # terms, each a column times a row, or a column or a row alone where the other factor is ones): k - 1 additions and
    # a multiplication for each term that is a product, as the yardstick's multiply-adds count them
    ones = sum(bool((c[:, j] == 1).all() or (r[j] == 1).all()) for j in range(c.shape[1]))
    return 2 * c.shape[1] - 1 - ones


class Counted(np.ndarray):
    __module__ = "numpy"   # rubinperf tells numpy values by their module
    elements = 0
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.view(np.ndarray) if isinstance(x, Counted) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, Counted) else x for x in kwargs["out"])
        r = getattr(ufunc, method)(*plain, **kwargs)
        if isinstance(r, np.ndarray) and r.ndim == 2 and min(r.shape) > 1:
            Counted.elements += r.size * (products(*plain[:2]) if ufunc is np.matmul else 1)
        return r.view(Counted) if isinstance(r, np.ndarray) else r

rack, nb, nc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m, (hw,) = load_specs(DEFAULT_MODEL, [rack])
batch, context = np.arange(1.0, nb + 1), np.round(np.linspace(1, 1 << 20, nc))
for lay in map(parse_layout, ("dep16", "dep32", "tp8")):
    p = make_point(m, hw, lay, phase="decode")
    for _ in sweep_grid_blocks(m, hw, lay, p, batch.reshape(-1, 1).view(Counted), context.reshape(1, -1).view(Counted)):
        pass
print(json.dumps({"ops_per_point": Counted.elements / (3 * batch.size * context.size)}))
"""


def sweep(rack: str, batches: int, contexts: int, runs: int, check: bool = False, ops: float = 0.0) -> dict:
    args = [sys.executable, "-c", SWEEP, rack, str(batches), str(contexts), str(runs), str(ops)] + (["--check"] if check else [])
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def check_against_estimate(rack: str, rows: list[dict]) -> tuple[float, int, int]:
    """Largest relative difference between the sweep and `rubinperf estimate --json` at the checked points,
    the number of points compared and the number `estimate` refuses because their KV cache exceeds HBM (the
    sweep prices every grid point; `estimate` checks capacity first)."""
    keys = {"step_s": ("step_time_ms", 1e3), "sol_s": ("sol_step_time_ms", 1e3),
            "tokens_per_s_per_gpu": ("tokens_per_s_per_gpu", 1), "tokens_per_s_per_user": ("tokens_per_s_per_user", 1)}
    worst, compared, beyond = 0.0, 0, 0
    for row in rows:
        cmd = [sys.executable, "-m", "rubinperf", "estimate", "-H", rack, "-l", row["layout"], "--phase", "decode",
               "--batch", f"{row['batch']:g}", "--context", f"{row['context']:.0f}", "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 2 and "does not fit in HBM" in proc.stderr:
            beyond += 1
            continue
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        rec, compared = json.loads(proc.stdout)[0], compared + 1
        for key, (field, scale) in keys.items():
            worst = max(worst, abs(row[key] * scale - rec[field]) / abs(rec[field]))
    return worst, compared, beyond


def package_dir() -> str:
    """The folder of the rubinperf that `python -m rubinperf` imports from here: a checkout's own folder before an
    installed copy (this script's sys.path starts at benchmarks/, so it would find the installed one)."""
    out = subprocess.run([sys.executable, "-c", "import os, rubinperf; print(os.path.dirname(rubinperf.__file__))"],
                         capture_output=True, text=True)
    if out.returncode or not out.stdout.strip():
        raise SystemExit("rubinperf is not importable from this interpreter")
    return out.stdout.strip()


def forget_kept(install: bool = False) -> None:
    """Remove the results rubinperf keeps between runs (rubinperf/kept.py: kept-* and tree-* in the package's
    __pycache__), as a first run after a change of the tree finds them; with `install`, the parsed specs and CSVs too
    (spec-*, csv-*: kept by their files' bytes, so a change of other files keeps them), as a first run after an
    install finds nothing."""
    cache = os.path.join(package_dir(), "__pycache__")
    kinds = ("kept-", "tree-") + (("spec-", "csv-") if install else ())
    for name in os.listdir(cache) if os.path.isdir(cache) else ():
        if name.startswith(kinds):
            os.remove(os.path.join(cache, name))


def compile_package() -> None:
    """Write rubinperf's bytecode (__pycache__, ignored by git) where the package is imported from."""
    import compileall

    compileall.compile_dir(package_dir(), quiet=1)


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

# One aggregated engine (GB300 TP2, 8K/1K) simulated over 10,000 Poisson requests at 80% of its capacity, in-process
# after the imports: the step tables, the event loop and the summary, in CPU seconds.
SERVE_SIMULATE = """
import time
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.select import load_specs
from rubinperf.serving.aggregated import RequestMix, engine
from rubinperf.serving import simulate as S
m, (hw,) = load_specs("deepseek-v4.1-flash", ["gb300-nvl72"])
mix = RequestMix(8192, 1024)
t = time.process_time()
e = engine(m, hw, parse_layout("tp2"), mix)
S.summary(S.run_engine(S.sim_engine(e, 9216), S.synthetic(mix, 10_000, seed=0, rate=7.5)))
print(time.process_time() - t)
"""


def main() -> None:
    py, quick = sys.executable, "--quick" in sys.argv[1:]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv[1:-1] else None
    if "--no-compile" not in sys.argv[1:]:
        compile_package()
    rp = [py, "-m", "rubinperf"]
    rows = []
    print(f"host: {host()}")

    def row(name, wall_s=None, cpu_s=None, value="", target=""):
        shown = value or f"{wall_s * 1e3:,.0f} ms wall, {cpu_s * 1e3:,.0f} ms CPU"
        rows.append((name, shown, target))

    if "--sweep" in sys.argv[1:]:   # the sweep's lines alone
        sweep_lines(row, py, quick)
        return show(rows)
    if only is not None:
        if only in "rubinperf estimate":
            estimate_lines(rp, py, row)
        commands(rp, quick, row, only)
        show(rows)
        return
    estimate_lines(rp, py, row)
    commands(rp, quick, row)
    import tempfile

    with tempfile.TemporaryDirectory() as out:   # the README's refit of the committed H200 measurements
        csv = os.path.join(os.path.dirname(HERE), "calibration", "h200", "shapes.csv")
        w, c, _ = timed(rp + ["calibrate", "-H", "h200", "--from-csv", csv, "--out-dir", out, "--quiet"], runs=1)
        row("rubinperf calibrate -H h200 --from-csv calibration/h200/shapes.csv", w, c, target="<= 20 s CPU")

    sweep_lines(row, py, quick)
    serve64 = float(subprocess.run([py, "-c", SERVE_SWEEP], capture_output=True, text=True, check=True).stdout)
    row("serve: 64-point concurrency sweep, one engine", value=f"{serve64 * 1e3:.0f} ms", target="<= 500 ms")
    sim10k = float(subprocess.run([py, "-c", SERVE_SIMULATE], capture_output=True, text=True, check=True).stdout)
    row("serve --request-rate: 10,000 requests, one engine", value=f"{sim10k * 1e3:.0f} ms CPU", target="<= 2 s CPU")
    show(rows)


def estimate_lines(rp: list[str], py: str, row) -> None:
    """Start-up and `estimate` against a bare `import numpy`, in alternating pairs: as a user runs it again (its
    records kept from a run before: rubinperf/kept.py, kept_of_call), and its first run after a change of the tree
    (nothing kept: the records computed, the tree's files read whole)."""
    imp = timed([py, "-c", "import rubinperf.cli"])
    base = timed([py, "-c", "pass"])
    row("import rubinperf.cli (minus bare python)", imp[0] - base[0], imp[1] - base[1])
    for argv in (["estimate"], ["estimate", "--json"]):   # (a run before: the records a user's run keeps)
        subprocess.run(rp + argv, stdout=subprocess.DEVNULL, check=True)
    est = timed(rp + ["estimate"])
    row("rubinperf estimate", est[0], est[1])
    nw, ew, nc, ec = pairs([py, "-c", "import numpy"], rp + ["estimate"])
    row("bare python -c 'import numpy'", nw, nc)
    row("rubinperf estimate / import numpy (pairs)", value=f"{ew / nw:.2f}x wall, {ec / nc:.2f}x CPU", target="<= 1.3x")
    nw, ew, nc, ec = pairs([py, "-c", "import numpy"], rp + ["estimate", "--json"])
    row("rubinperf estimate --json / import numpy", value=f"{ew / nw:.2f}x wall, {ec / nc:.2f}x CPU", target="<= 1.3x")
    row("rubinperf estimate, peak RSS", value=f"{est[2]:.0f} MB", target="< 150 MB")
    nw, ew, nc, ec = pairs([py, "-c", "import numpy"], rp + ["estimate"], runs=RUNS, before_b=forget_kept)
    row("rubinperf estimate, first run after a change of the tree / import numpy",
        value=f"{ew / nw:.2f}x wall, {ec / nc:.2f}x CPU ({ew * 1e3:,.0f} ms wall)")


def sweep_lines(row, py: str, quick: bool) -> None:
    """The sweep's lines: its rate on a first run and later, against `estimate --json`, the yardstick, peak RSS. A
    first run happens once a process, so the sweep runs in FIRST_RUNS processes and each line gives their median."""
    nb, nc = (256, 500) if quick else (1024, 1000)
    for rack in RACKS:
        ops = json.loads(subprocess.run([py, "-c", YARDSTICK, rack, str(nb), str(nc)], capture_output=True,
                                        text=True, check=True).stdout)["ops_per_point"]
        runs = [sweep(rack, nb, nc, runs=2 if quick else 3, check=rack == RACKS[0] and not k, ops=ops)
                for k in range(1 if quick else FIRST_RUNS)]
        s, med = runs[0], statistics.median
        first = med(s["points"] / r["cpu"][0] for r in runs)
        again = med(s["points"] / min(r["cpu"][1:]) for r in runs)
        row(f"sweep {rack}: {s['points']:,} points, first run", value=f"{first / 1e6:.2f} M points/s CPU "
            f"({med(s['points'] / r['wall'][0] for r in runs) / 1e6:.2f} M/s wall)")
        row(f"sweep {rack}: again (best of the later runs)", value=f"{again / 1e6:.2f} M points/s CPU")
        if "check" in s:
            worst, compared, beyond = check_against_estimate(rack, s["check"])
            row(f"sweep {rack} vs `estimate --json` at {compared} points ({beyond} beyond HBM)",
                value=f"{worst:.1e} max rel. difference", target="<= 1e-12")
        yard = s["points"] / med(y for r in runs for y in r["yardstick_cpu"])
        firsts = [r["yardstick_cpu"][0] / r["cpu"][0] for r in runs]
        later = [y / c for r in runs for c, y in zip(r["cpu"][1:], r["yardstick_cpu"][1:])]
        row(f"sweep {rack}: numpy yardstick, {ops:.0f} array ops/point", value=f"{yard / 1e6:.2f} M points/s CPU")
        row(f"sweep {rack}: sweep / yardstick, first run of {len(runs)} processes",
            value=f"{med(firsts):.2f} ({', '.join(f'{x:.2f}' for x in firsts)}); later runs {med(later):.2f}",
            target=">= 0.5 (first run)")
        big = sweep(rack, 16 * nb, nc, runs=1)   # blocks of the same size (about CHUNK_POINTS); in full, four graphs
        growth = (big["rss_mb"] - s["rss_mb"]) * 2**20 / (big["points"] - s["points"])
        row(f"sweep {rack}: peak RSS at {s['points']:,} / {big['points']:,} points",
            value=f"{s['rss_mb']:.0f} / {big['rss_mb']:.0f} MB ({growth:.1f} B per point more)", target="flat")


def commands(rp: list[str], quick: bool, row, only: str | None = None) -> None:
    """The COMMANDS lines (those whose name holds `only`, where given); `validate` also on its first runs
    (rubinperf/kept.py): after a change of the tree (no result of this tree kept) and after an install (nothing kept)."""
    for name, cmd, target in COMMANDS:
        if only is not None and only not in name:
            continue
        if cmd[0] == "validate":
            for install, when in ((False, "after a change of the tree"), (True, "after an install")):
                w, c, _ = timed(rp + cmd, runs=1 if quick else FIRST_RUNS, ok=(0, 1),
                                before=lambda install=install: forget_kept(install))
                row(f"{name}, first run {when}", w, c, target=target)
        w, c, _ = timed(rp + cmd, runs=1 if quick else 3, ok=(0, 1) if cmd[0] == "validate" else (0,))
        row(name, w, c, target=target)


def host() -> str:
    """The machine the lines were measured on: its CPU and their count, Python, numpy and the SIMD levels numpy's
    loops are dispatched to on it (the yardstick's speed follows them; the sweep's Python does not), and the load."""
    import platform

    import numpy

    cpu = platform.processor() or platform.machine()
    try:   # (a virtual machine may name its CPU no more than "AMD EPYC": its family and model say which)
        with open("/proc/cpuinfo") as f:
            info = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
        info = {k.strip(): v.strip() for k, v in info.items()}
        cpu = f"{info.get('model name', cpu)} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"
    except (OSError, ValueError):
        pass
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:   # (numpy 1.x)
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    simd = ", ".join(k for k in __cpu_dispatch__ if __cpu_features__.get(k)) or "baseline only"
    return (f"{cpu}, {os.cpu_count()} CPUs; Python {platform.python_version()}, numpy {numpy.__version__} (SIMD "
            f"{simd}); load {os.getloadavg()[0]:.2f} at {time.strftime('%H:%M UTC', time.gmtime())}")


def show(rows: list[tuple]) -> None:
    width = max((len(r[0]) for r in rows), default=0)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>44}  {target}")


if __name__ == "__main__":
    main()
