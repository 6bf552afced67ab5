"""Shared fixtures for the rubinperf test suite."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import os

import pytest
from hypothesis import HealthCheck, settings

# Every run checks every property on the same examples: derandomized (the examples follow from each test's
# source), no example database carried between runs, no deadline (a busy 2-core machine is slow, not wrong),
# a fixed default example count. This "fixed" profile is the default, so `python -m pytest` on a fresh clone
# passes or fails the same way every time; tests that pin their own max_examples keep them. Random exploration
# is opt-in: HYPOTHESIS_PROFILE=explore draws new examples each run (`--hypothesis-seed=N` replays one seed),
# and `python -m pytest -m nightly` runs the fuzz at length.
_FIXED = dict(derandomize=True, database=None, deadline=None, max_examples=100, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fixed", **_FIXED)
settings.register_profile("ci", **_FIXED)  # the former name, kept for scripts that set it
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=100, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fixed")
if _PROFILE not in ("fixed", "ci", "explore"):
    raise pytest.UsageError(f"HYPOTHESIS_PROFILE={_PROFILE!r}: expected fixed (the default) or explore")
settings.load_profile(_PROFILE)

REPO = Path(__file__).resolve().parent.parent


def _bytecode_for_the_checkout() -> None:
    """The checkout's rubinperf compiled once into its __pycache__ folders (ignored by git: where Python keeps a
    module's bytecode, and rubinperf its parsed specs) when PYTHONDONTWRITEBYTECODE keeps Python from writing them:
    the suite starts about a hundred Python processes that import rubinperf from the checkout, and each would
    compile every module it imports from source again (about 0.1 s of CPU a process; compiling them all once costs
    about half a second). Python reads bytecode whatever that setting says; a module edited since is compiled
    again (its timestamp differs), and a tree that cannot be written is left as it is."""
    if not sys.dont_write_bytecode:
        return   # Python writes it itself
    import compileall

    try:
        compileall.compile_dir(str(REPO / "rubinperf"), quiet=2)
    except OSError:
        pass


_bytecode_for_the_checkout()

HARDWARE_NAMES = ["h200", "b200", "gb200-nvl72", "b300", "gb300-nvl72", "vr-nvl72",
                  "h800-cluster", "h100-cluster", "h200-cluster", "b200-cluster"]
MODEL_NAMES = ["deepseek-v4.1-flash", "deepseek-v4-flash", "deepseek-v3",
               "deepseek-r1", "gpt-oss-120b", "kimi-k2", "llama-3.1-405b", "llama-3.1-70b",
               "llama-3.1-8b", "qwen3-235b-a22b"]

# Bytes per element, derived by hand from the formats (value bits / 8 + scale bytes / block):
FP4_B = 0.5 + 1 / 32          # e2m1 (4 bits) + one 1-byte ue8m0 scale per 32 values = 0.53125
FP8_B = 1 + 4 / 16384         # e4m3 (8 bits) + one 4-byte FP32 scale per 128x128 block = 1.000244140625
BF16_B = 2.0
FP32_B = 4.0


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def hardware_by_name():
    from rubinperf.specs.stack import load_platform

    return {name: load_platform(name) for name in HARDWARE_NAMES}


# A GB300 NVL72 with the numbers the hand-derived cases use pinned, so that calibrating the
# bundled spec cannot move them.
PINNED_GB300 = dict(
    bf16_dense_flops_per_s=2.5e15, fp8_dense_flops_per_s=5e15, fp8_fp4_dense_flops_per_s=5e15,
    mma_compute_efficiency=0.72, attention_compute_efficiency=0.6, vector_compute_efficiency=0.8,
    hbm_bandwidth_bytes_per_s=8e12, hbm_stream_efficiency=0.88, hbm_latency_s=0.8e-6,
    hbm_local_bandwidth_factor=1.0, hbm_interleaved_bandwidth_factor=1.0, hbm_remote_bandwidth_factor=1.0,
    sm_count=160, mma_tile_rows=32, mma_tile_cols=128, split_k_max=1, split_k_min_depth=1024, wave_quantization=1.0,
    grouped_compute_efficiency=0.72, grouped_fp4_compute_efficiency=0.72, grouped_w4a16_compute_efficiency=0.72,
    grouped_hbm_efficiency=0.88,
    mma_bytes_in_flight_per_sm=131072.0, stream_bytes_in_flight_per_sm=65536.0,
    kernel_launch_cold_s=4e-6, host_dispatch_s=3e-6, tensor_core_dispatch_s=2e-6, kernel_launch_graph_s=0.5e-6,
    kernel_launch_stream_s=2e-6, sm_clock_hz=2e9, mma_prologue_cycles=2000.0, pdl_hidden_s=0.25e-6,
    fused_overlap_rows=16384.0, collective_floor_s=3e-6,
    nvlink_bandwidth_bytes_per_s=900e9, nvlink_efficiency=0.80, nvlink_latency_s=1.5e-6, cross_tray_latency_s=0.3e-6,
    host_memory_bandwidth_bytes_per_s=256e9, c2c_bandwidth_bytes_per_s=450e9, host_efficiency=0.80,
    scale_out_bandwidth_bytes_per_s=100e9, scale_out_efficiency=0.85, scale_out_latency_s=5e-6,
)


@pytest.fixture
def pinned_gb300(hardware_by_name):
    import dataclasses

    base = hardware_by_name["gb300-nvl72"]
    # a pinned field is no longer the file's assumption: its stated range goes with it (as --set drops it)
    ranges = {k: v for k, v in base.ranges.items() if k not in PINNED_GB300}
    return dataclasses.replace(base, name="gb300-pinned", ranges=ranges, **PINNED_GB300)


@pytest.fixture
def pinned_gb300_path(pinned_gb300, tmp_path) -> str:
    """The pinned GPU written as a hardware spec file naming its own stack file by path (exercises to_toml,
    loading by path and a default_stack given as a path)."""
    import dataclasses

    from rubinperf.specs.loader import to_toml

    stack_path = tmp_path / "gb300-pinned-stack.toml"
    stack = dataclasses.replace(pinned_gb300.stack_spec(), name="gb300-pinned-stack", description="pinned for tests")
    stack_path.write_text(to_toml(stack))
    path = tmp_path / "gb300-pinned.toml"
    path.write_text(to_toml(dataclasses.replace(pinned_gb300.hardware_spec(), default_stack=str(stack_path))))
    return str(path)


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)

    def __repr__(self):  # shown by pytest on failure
        return f"CliResult(code={self.code}, out={self.out[-400:]!r}, err={self.err!r})"


@pytest.fixture
def cli(capsys):
    """Run rubinperf.cli.main(argv) in-process; returns exit code, stdout and stderr."""
    from rubinperf.cli import main

    def run(*argv: str) -> CliResult:
        capsys.readouterr()  # drop anything printed before
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def python() -> str:
    return sys.executable


_APP_COMMAND = []


def app_command():
    """The click command typer builds from rubinperf's app: typer's CliRunner builds it again from every function's
    signature on each invoke (about 50 ms of CPU for all of rubinperf's commands); the tests that drive the app
    through CliRunner share this one build (click makes a fresh context for each run)."""
    if not _APP_COMMAND:
        import typer

        from rubinperf.cli import app

        _APP_COMMAND.append(typer.main.get_command(app))
    return _APP_COMMAND[0]


def invoke(args, **kwargs):
    """`typer.testing.CliRunner().invoke(app, args, **kwargs)` on the shared build of the app (app_command)."""
    from click.testing import CliRunner

    return CliRunner().invoke(app_command(), args, **kwargs)


HEAVY_MODULES = ("numpy", "sympy", "matplotlib")


def heavy_modules_after(statements: str) -> list[str]:
    """Which of numpy, sympy and matplotlib a fresh interpreter holds after running `statements` (which must not
    raise): what a command or function pulls in at start-up."""
    import subprocess

    code = f"{statements}\nimport sys\nprint('loaded:', *(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[-1].split()[1:]


# The calibration tests' fit of the committed H200 measurements, made once per session.
CALIBRATION_H200 = Path(__file__).resolve().parent.parent / "calibration" / "h200"
# the committed fit's inputs, in the order of the fit command (calibration/h200/README.md)
COMMITTED_CSVS = [CALIBRATION_H200 / "shapes_dobench.csv", CALIBRATION_H200 / "measurements.csv"]


@pytest.fixture(scope="session")
def committed_rows():
    """The rows of COMMITTED_CSVS, in order."""
    from rubinperf.calibrate.plan import read_csv

    rows = []
    for path in COMMITTED_CSVS:
        kind, rs = read_csv(path)
        assert kind == "kernels"
        rows += rs
    return rows


@pytest.fixture(scope="session")
def committed_fit(committed_rows):
    """(rows, platform, result): the committed rows, the bundled h200 platform and `fit.fit_kernels` of them
    with its default options, the fit that hardware/h200.toml and stacks/pytorch-2.11.toml hold. About 20 s
    of CPU: made once for the tests that check it."""
    from rubinperf.calibrate import fit
    from rubinperf.specs.stack import load_platform

    hw = load_platform("h200")
    return committed_rows, hw, fit.fit_kernels(committed_rows, hw)


@pytest.fixture
def committed_fit_reused(monkeypatch, committed_fit):
    """`fit.fit_kernels` answering `committed_fit`'s result when asked for that very fit (rows and platform equal,
    default options), as the `calibrate` command does on the committed CSVs; any other fit is run. Returns the
    list of the calls it answered so."""
    from rubinperf.calibrate import fit

    rows, hw, result = committed_fit
    real = fit.fit_kernels
    answered = []

    def fit_kernels(rs, platform, *args, **options):
        if not args and not options and platform == hw and rs == rows:
            answered.append(len(rs))
            return result
        return real(rs, platform, *args, **options)

    monkeypatch.setattr(fit, "fit_kernels", fit_kernels)
    return answered


# validate's prediction of each published point, by the point (all its fields: its repr), made once per session.
_PREDICTIONS: dict = {}


@contextlib.contextmanager
def reusing_predictions():
    """While it lasts, `rubinperf validate`'s per-point predictions (rubinperf.analysis.validate.METRICS) come from
    one session-wide memo keyed on the whole point (its repr: a point changed in any field, or run on another
    --stack, is predicted afresh). For the tests that run validate over the bundled points to check what it does
    with them (tables, widths, --quiet, the bands, the ledger, the report's counts, fuzzed point files): each point
    is predicted once a session, not again in every such test (about 1 s of CPU a run). A prediction that fails
    is not kept: it fails again."""
    from rubinperf.analysis import validate as V

    with pytest.MonkeyPatch.context() as mp:
        for name, predict in list(V.METRICS.items()):
            def reused(p, predict=predict, name=name):
                key = (name, repr(p))
                if key not in _PREDICTIONS:
                    _PREDICTIONS[key] = predict(p)
                return _PREDICTIONS[key]

            mp.setitem(V.METRICS, name, reused)
        yield _PREDICTIONS


@pytest.fixture
def predictions_reused():
    """reusing_predictions() for the test."""
    with reusing_predictions() as memo:
        yield memo


def _click_commands_built_once() -> None:
    """`rubinperf.cli.main` in-process answered with one click command per choice of command: the product builds
    the command for each run from every function's signature (`rubinperf.cli._click_command`, 5-15 ms of CPU for
    one command, about 90 ms for the whole group), which a process does once and the suite about 1,400 times over
    (about 15 s of CPU). The first build for a choice (`rubinperf.cli._command_named`: one command, or the whole
    group) is the product's own and is kept, keyed also by what else a build reads: typer's switch of shell
    detection (the whole group's completion options). click makes a fresh context for each run, as for
    `app_command`. Installed after collection where the test modules imported rubinperf.cli."""
    cli = sys.modules.get("rubinperf.cli")
    if cli is None or getattr(cli._click_command, "_built", None) is not None:
        return
    build, built = cli._click_command, {}

    def click_command(argv):
        key = (cli._command_named(argv), os.environ.get("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"))
        if key not in built:
            built[key] = build(argv)
        return built[key]

    click_command._built = built
    cli._click_command = click_command


def pytest_collection_finish(session):
    """The garbage collector after collection: what is loaded by then (the test modules, rubinperf, numpy, sympy,
    typer) lives to the end, so it is moved out of the collector's generations (gc.freeze) and not scanned again by
    each full collection; and a young generation of 10,000 objects instead of 700 (sympy and the step graphs make
    many short-lived ones), so full collections come about 14 times less often. Only when the collector runs
    changes (about half of its CPU time on the symbolic tests): what the tests make and drop is freed as before."""
    import gc

    _click_commands_built_once()
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
