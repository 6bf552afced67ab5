"""A seeded fuzz of the edges of every input: each command and option with out-of-range, denormal,
huge, negative, non-finite and malformed values, and --set on every numeric spec field.

Every run ends in exit 0 or 2 with one stderr line, never a traceback or an 'internal error', within
10 s of CPU; a --json run prints no absurd number (non-finite, denormal, or beyond 1e30 in magnitude,
and no zero or negative throughput). The cases are drawn from a fixed seed (RUBINPERF_EDGE_SEED changes
it, RUBINPERF_EDGE_CASES the count), so a failure reproduces.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from test_fuzz import check_clean, run_cli

SEED = int(os.environ.get("RUBINPERF_EDGE_SEED", "20261125"))
CASES = int(os.environ.get("RUBINPERF_EDGE_CASES", "90"))
CPU_LIMIT_S = 10.0

VALUES = ["0", "-1", "1e-320", "5e-324", "1e300", "1e308", "2147483648", "9" * 40, "nan", "inf", "-inf", "", " ",
          "1e", "12Q", "30", "20ms", "+20%", "x1e300", "-100%", "*0", "1K", "1M", "0.5", "1", "3", "ü", "$x^$",
          "1e-15", "0x10", "1_000"]
# (command argv, options that take a value) per command; sweeps are kept small so the fuzz stays fast.
COMMANDS = {
    ("estimate", "-H", "vr-nvl72"): ["--batch", "--context", "--new-tokens", "--draft-tokens", "--acceptance",
                                     "--balancedness", "--layout", "--phase"],
    ("pareto", "-H", "vr-nvl72", "-l", "dep32", "--max-batch", "8", "--no-chart"): [
        "--ttft", "--tpot", "--total-gpus", "--isl", "--osl", "--prefix-hit", "--draft-tokens", "--acceptance",
        "--rows", "--interactivity-stat"],
    ("compare", "-l", "dep32", "--max-batch", "8", "--kernels", "1"): [
        "--at-interactivity", "--ttft", "--tpot", "--total-gpus", "--isl", "--osl", "--prefix-hit"],
    ("explain", "megamoe"): ["--batch", "--context", "--acceptance"],
    ("kernel", "gemm", "--m", "16", "--n", "4096", "--k", "7168"): ["--m", "--n", "--k", "--dtype"],
    ("kernel", "copy"): ["--bytes"],
    ("serve", "-H", "vr-nvl72", "-l", "tp8"): ["--concurrency", "--isl", "--osl", "--random-range-ratio",
                                              "--prefix-hit", "--turn-gap", "--draft-tokens", "--acceptance",
                                              "--request-rate", "--burstiness", "--percentiles", "--goodput",
                                              "--prefill-layout", "--prefill-instances"],
    ("kernel", "attention", "--batch", "4", "--heads", "64", "--q-len", "1", "--kv-len", "4096",
     "--head-dim", "512"): ["--kv-len", "--heads", "--batch"],
}


def _set_fields() -> list[str]:
    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import numeric_fields
    from rubinperf.specs.model import Model
    from rubinperf.specs.stack import Stack

    return ([f"hardware.{n}" for n in numeric_fields(Hardware)] + [f"stack.{n}" for n in numeric_fields(Stack)]
            + [f"model.{n}" for n in numeric_fields(Model)])


def _cases() -> list[list[str]]:
    rng = random.Random(SEED)
    fields = _set_fields()
    out = []
    for _ in range(CASES):
        base, opts = rng.choice(list(COMMANDS.items()))
        argv = list(base)
        if rng.random() < 0.5:
            argv += [rng.choice(opts), rng.choice(VALUES)]
        else:
            field = rng.choice(fields)
            key = field if rng.random() < 0.5 else field.split(".", 1)[1]
            argv += ["--set", f"{key}={rng.choice(VALUES)}"]
        if rng.random() < 0.6:
            argv.append("--json")
        out.append(argv)
    return out


def absurd(value, key="") -> str:
    """Why a number in a --json record is absurd ('' when it is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return f"{key} = {v}"
    if v and abs(v) < 1e-200:
        return f"{key} = {v!r} (denormal)"
    if abs(v) > 1e30:
        return f"{key} = {v:g} (beyond 1e30)"
    if key.startswith("tokens_per_s") and v <= 0:
        return f"{key} = {v:g} (no throughput)"
    return ""


def _walk(obj, key=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v, key)
    else:
        yield key, obj


@pytest.mark.parametrize("argv", _cases(), ids=lambda a: " ".join(a)[:80])
def test_edge(capsys, argv):
    t = time.process_time()
    r = run_cli(capsys, argv)
    cpu = time.process_time() - t
    assert cpu <= CPU_LIMIT_S, f"{cpu:.1f} s of CPU: {r}"
    culprits = [a for a in argv if a.startswith("-")] + [a.split("=")[0].rpartition(".")[2] for a in argv if "=" in a]
    culprits += [a for a in argv if not a.startswith("-")]
    check_clean(r, culprits)
    if r.code == 0 and "--json" in argv:
        def refuse(constant):
            raise AssertionError(f"non-finite {constant} in JSON: {r}")

        data = json.loads(r.out, parse_constant=refuse)
        bad = [why for k, v in _walk(data) if (why := absurd(v, k))]
        if "eligible" in r.out:   # pareto: only points that fit and meet the limits carry figures to check
            data = [x for x in data if x.get("eligible", True)]
            bad = [why for k, v in _walk(data) if (why := absurd(v, k))]
        assert not bad, f"absurd numbers {bad[:5]}: {r}"
