"""Bad input, everywhere: mutated spec files and odd command-line arguments.

Every case must end in exit status 0 (the input was odd but valid) or 2 with exactly one
line on stderr that names the culprit (the file, the key or the option), never a
traceback or an 'internal error', and with nothing written to an output path that was
asked for. Example counts are bounded (40 per test by default) so the file runs in CI in
about half a minute; the nightly run (`python -m pytest -m nightly`) fuzzes at 2,000 a test, and
RUBINPERF_FUZZ_EXAMPLES sets any other count.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import HARDWARE_NAMES, MODEL_NAMES, REPO
from rubinperf.specs.loader import _toml_string

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = int(os.environ.get("RUBINPERF_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FUZZ_MORE = settings(FUZZ, max_examples=EXAMPLES * 5 // 3)      # cheap cases: most bad specs fail at load
FUZZ_FEWER = settings(FUZZ, max_examples=max(EXAMPLES // 2, 1))  # costly ones (a fit, symbolic sensitivity)


def _commands() -> dict[str, set[str]]:
    """Top-level commands the CLI has now (others are added over time), with their option names."""
    import typer

    from rubinperf.cli import app

    out = {}
    for name, cmd in typer.main.get_command(app).commands.items():
        out[name] = {o for p in getattr(cmd, "params", []) for o in p.opts}
    return out


COMMANDS = _commands()
# What the fuzz drives: a command or option renamed makes test_the_fuzz_drives_what_the_cli_has fail (the fuzz
# cases themselves never skip; a missing command fails them too).
DRIVEN = {"estimate": {"--set", "--json"}, "explain": {"--json"}, "sensitivity": {"--json"},
          "pareto": {"--plot", "--workload"}, "compare": {"--workload"}, "validate": {"--points"},
          "calibrate": {"--from-csv"}, "kernel": set()}

SPEC_FILES = (sorted((REPO / "hardware").glob("*.toml")) + sorted((REPO / "models").glob("*.toml"))
              + sorted((REPO / "examples").glob("*.toml")))


def test_the_fuzz_drives_what_the_cli_has():
    missing = {c: sorted(opts - COMMANDS.get(c, set())) if c in COMMANDS else "the command"
               for c, opts in DRIVEN.items() if c not in COMMANDS or opts - COMMANDS[c]}
    assert not missing, f"the fuzz drives what the CLI no longer has: {missing}"


def spec_kind(path: Path) -> str:
    return {"hardware": "hardware", "models": "model", "examples": "workload"}[path.parent.name]


# ------------------------------------------------------------------ running the CLI


class Outcome:
    def __init__(self, argv, code, out, err):
        self.argv, self.code, self.out, self.err = argv, code, out, err

    def __repr__(self):
        return f"Outcome(argv={self.argv}, code={self.code}, err={self.err!r}, out={self.out[-300:]!r})"


def run_cli(capsys, argv: list[str]) -> Outcome:
    from rubinperf.cli import main

    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:  # a warning would be a stray stderr line for a user
        warnings.simplefilter("always")
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    cap = capsys.readouterr()
    err = cap.err + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    return Outcome(argv, code, cap.out, err)


def check_clean(r: Outcome, culprits: list[str]) -> None:
    """Exit 0, or exit 2 with one stderr line naming one of `culprits`; never a traceback."""
    assert r.code in (0, 2), r
    assert r.code != 0 or r.err == "", f"a successful run wrote to stderr: {r}"
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    assert "internal error" not in r.err, r
    if r.code == 2:
        lines = r.err.splitlines()
        assert len(lines) == 1, r
        low = lines[0].lower()
        named = [c for c in culprits if c and c.lower() in low]
        assert named, f"error line names none of {culprits}: {r}"


def check_strict_json(r: Outcome) -> None:
    """A successful --json run prints strict JSON: no NaN or Infinity, which JSON readers refuse."""
    if r.code == 0 and "--json" in r.argv:
        def refuse(constant):
            raise AssertionError(f"non-finite number {constant} in JSON: {r}")

        json.loads(r.out, parse_constant=refuse)


def assert_nothing_written(target: Path, before: set[str] | None = None) -> None:
    if target.is_dir():
        left = {str(p.relative_to(target)) for p in target.rglob("*")} - (before or set())
        assert not left, f"a failing run wrote {sorted(left)} under {target}"
    else:
        assert not target.exists(), f"a failing run wrote {target}"


# ------------------------------------------------------------------ writing (possibly bad) TOML


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def dump_toml(doc: dict) -> str:
    lines = [f"{k} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for section, table in doc.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ mutations

VALUE_OPS = ("drop", "add_key", "add_table", "retype", "negate", "zero", "nan", "inf", "ninf", "huge", "huge_int",
             "tiny", "unit_string", "wrong_units", "list_edit", "string_typo", "bump")
TEXT_OPS = ("unclosed_header", "duplicate_key", "duplicate_table", "unclosed_string", "truncate", "garbage_line",
            "bad_utf8", "empty", "binary")


def _retype(draw, v):
    choices = ["text", True, [1, 2], {"x": 1}, 1.5, 7, [], ""]
    return draw(st.sampled_from([c for c in choices if type(c) is not type(v)] or choices))


def _numeric(v, f):
    """Apply `f` to a number, keeping ints as ints (rounded)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        out = f(v)
        return int(out) if math.isfinite(out) and abs(out) < 2 ** 63 else out
    if isinstance(v, float):
        return float(f(v))
    if isinstance(v, list):
        return [_numeric(x, f) for x in v] if v else [f(1)]
    return v


@st.composite
def mutated_specs(draw):
    """(kind, original path, file bytes, culprit words, what was done)."""
    path = draw(st.sampled_from(SPEC_FILES))
    text = path.read_text()
    doc = tomllib.loads(text)
    op = draw(st.sampled_from(VALUE_OPS + TEXT_OPS))
    sections = [s for s, t in doc.items() if isinstance(t, dict)]
    keys = [(None, k) for k in doc if not isinstance(doc[k], dict)] + [(s, k) for s in sections for k in doc[s]]
    section, key = draw(st.sampled_from(keys))
    table = doc if section is None else doc[section]
    v = table[key]
    culprits = [key, section or key]
    if isinstance(doc.get("name"), str) and op not in ("drop", "retype"):
        culprits.append(doc["name"])  # e.g. "the b200 NVLink domain of 4 GPUs" after nvlink_domain_size shrank

    if op in TEXT_OPS:
        lines = text.splitlines()
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if op == "unclosed_header":
            lines.insert(i, f"[{draw(st.sampled_from(sections))}")
        elif op == "duplicate_key":
            dup = [j for j, ln in enumerate(lines) if "=" in ln and not ln.lstrip().startswith("#")]
            j = draw(st.sampled_from(dup))
            lines.insert(j + 1, lines[j])
        elif op == "duplicate_table":
            lines.append(f"[{draw(st.sampled_from(sections))}]")
        elif op == "unclosed_string":
            quoted = [j for j, ln in enumerate(lines) if ln.rstrip().endswith('"')]
            j = draw(st.sampled_from(quoted))
            lines[j] = lines[j].rstrip()[:-1]
        elif op == "truncate":
            cut = draw(st.integers(0, len(text)))
            return spec_kind(path), path, text[:cut].encode(), culprits, f"truncate at {cut}"
        elif op == "garbage_line":
            lines.insert(i, draw(st.sampled_from(["= 3", "[[]]", "key = ", "x = [1, 2", "}{", "a.b.c = {", "'''"])))
        elif op == "bad_utf8":
            return spec_kind(path), path, text.encode()[: 40] + b"\xff\xfe\x80" + text.encode()[40:], culprits, op
        elif op == "empty":
            return spec_kind(path), path, b"", culprits, op
        elif op == "binary":
            return spec_kind(path), path, bytes(range(256)), culprits, op
        return spec_kind(path), path, ("\n".join(lines) + "\n").encode(), culprits, f"{op} near line {i + 1}"

    if op == "drop":
        if draw(st.booleans()) and section is not None:
            del doc[section]
            culprits = [section]
        else:
            del table[key]
    elif op == "add_key":
        name = draw(st.sampled_from(["bogus_field", "hbm_bandwidth", "num_layer", "Source", "x"]))
        table[name] = draw(st.sampled_from([1, 1.0, "s", True, [1]]))
        culprits = [name]
    elif op == "add_table":
        doc["bogus_table"] = {"source": "s", "value": 1}
        culprits = ["bogus_table"]
    elif op == "retype":
        table[key] = _retype(draw, v)
    elif op == "negate":
        table[key] = _numeric(v, lambda x: -x) if not isinstance(v, str) else "-" + v
    elif op == "zero":
        table[key] = _numeric(v, lambda x: 0 * x) if not isinstance(v, str) else "0"
    elif op == "nan":
        table[key] = float("nan")
    elif op == "inf":
        table[key] = float("inf")
    elif op == "ninf":
        table[key] = float("-inf")
    elif op == "huge":
        table[key] = 1e308
    elif op == "huge_int":
        table[key] = draw(st.sampled_from([2 ** 63 - 1, 10 ** 12, 2 ** 31]))
    elif op == "tiny":
        table[key] = draw(st.sampled_from([5e-324, 1e-300, 1e-30]))
    elif op == "unit_string":
        table[key] = draw(st.sampled_from([f"{v}TB/s", "8TB/s", "1.5 us", "288 GB", f"{v} tokens"]))
    elif op == "wrong_units":  # a GB-minded user writes 279 instead of 279e9, or the reverse
        scale = draw(st.sampled_from([1e-9, 1e-6, 1e-3, 1e3, 1e6, 1e9, 1e12]))
        table[key] = _numeric(v, lambda x: x * scale)
    elif op == "list_edit":
        extra = draw(st.sampled_from([10 ** 6, -1, 0, 1, 40, 60, 61]))
        how = draw(st.sampled_from(["append", "duplicate", "empty", "single", "reverse"]))
        base = list(v) if isinstance(v, list) else [v]
        table[key] = {"append": base + [extra], "duplicate": base + base[:1], "empty": [], "single": [extra],
                      "reverse": base[::-1]}[how]
    elif op == "string_typo":
        table[key] = draw(st.sampled_from(["fp9", "", "FP8", "gqa", "dep0", "tp3", "hbm ", "disk", "nvlink", "mla"]))
    elif op == "bump":  # off by a little: breaks divisibility and cross-field rules
        table[key] = _numeric(v, lambda x: x + draw(st.sampled_from([1, -1, 3])))
    return spec_kind(path), path, dump_toml(doc).encode(), culprits, f"{op} {section}.{key}"


def _with_layout(kind_argv, layout):
    return kind_argv + ["-l", layout]


def commands_for(kind: str, spec: str, out_dir: Path) -> list[tuple[list[str], Path | None]]:
    """Commands that read a spec of `kind` from `spec`, each with the output path it may write (or None)."""
    cmds: list[tuple[list[str], Path | None]] = []
    if kind == "hardware":
        cmds += [
            (["kernel", "gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8", "-H", spec, "--json"], None),
            (["kernel", "grouped-gemm", "--tokens", "768", "--groups", "256", "--n", "4096", "--k", "7168", "-H", spec], None),
            (["kernel", "attention", "--batch", "8", "--heads", "64", "--kv-heads", "8", "--q-len", "1",
              "--kv-len", "32768", "--head-dim", "128", "-H", spec, "--json"], None),
            (["kernel", "copy", "--bytes", "4e9", "-H", spec], None),
            (["estimate", "-H", spec, "-l", "dep8", "--json"], None),
            (["estimate", "-H", spec, "-l", "tp8", "--breakdown"], None),
            (["estimate", "-H", spec, "-l", "dep2", "--csv"], None),
        ]
    elif kind == "model":
        cmds += [(["estimate", "-m", spec, "-l", lay, "--json"], None) for lay in ("dep2", "dep32", "tp8", "tp4", "dep8")]
        cmds += [(["estimate", "-m", spec, "-H", "vr-nvl72", "-l", "dep32", "--breakdown"], None)]
    cmds += extra_commands(kind, spec, out_dir)
    return cmds


def extra_commands(kind: str, spec: str, out_dir: Path) -> list[tuple[list[str], Path | None]]:
    """Spec-taking commands that other parts of the project add, when they exist (kept small: quick runs)."""
    cmds: list[tuple[list[str], Path | None]] = []
    flag = {"hardware": "-H", "model": "-m", "workload": "-w"}[kind]
    if kind == "hardware":
        out = out_dir / "calibrated"
        csv = calibration_csv(out_dir / "measurements.csv")
        cmds.append((["calibrate", "-H", spec, "--from-csv", str(csv), "--out-dir", str(out), "--json"], out))
    if kind in ("hardware", "model"):
        cmds.append((["explain", "lm head", flag, spec, "-l", "dep8", "--json"], None))
        if kind == "hardware":
            cmds.append((["explain", "gemm", "--m", "16", "--n", "4096", "--k", "4096", flag, spec], None))
    if kind in ("hardware", "model"):
        plot = out_dir / "tornado.svg"
        cmds.append((["sensitivity", flag, spec, "-l", "dep8", "--top", "3", "--plot", str(plot)], plot))
    for command in ("pareto", "compare"):
        if command in COMMANDS:
            argv = [command, flag, spec, "-l", "dep8", "--max-batch", "16", "--json"]
            if kind != "hardware":
                argv += ["-H", "gb300-nvl72"]
            if command == "pareto" and "--plot" in COMMANDS[command]:
                plot = out_dir / "frontier.svg"
                cmds.append((argv + ["--plot", str(plot)], plot))
            else:
                cmds.append((argv, None))
    return cmds


def calibration_csv(path: Path) -> Path:
    """A small synthetic kernel-measurements CSV for `calibrate --from-csv` (no GPU needed):
    the quick plan's shapes, 'measured' at 1.3x the bundled H200's expected times."""
    from rubinperf.calibrate.fit import expected
    from rubinperf.calibrate.plan import KERNEL_COLUMNS, kernel_plan, row_cost, rows_to_csv
    from rubinperf.specs.stack import load_platform

    hw = load_platform("h200")
    plan = kernel_plan(quick=True)
    times = expected(plan, hw)
    rows = []
    for row, t in zip(plan, times):
        cost = row_cost(row)
        rows.append({**row, "measured_s": float(t) * 1.3, "spread": 0.01,
                     "samples": 10, "calls": 1, "impl": "synthetic", "flops": float(cost.flops),
                     "bytes": float(cost.hbm_bytes)})
    path.write_text(rows_to_csv(rows, KERNEL_COLUMNS))
    return path


# ------------------------------------------------------------------ the fuzz tests


@FUZZ_MORE
@given(case=mutated_specs(), pick=st.integers(0, 10 ** 6))
def test_mutated_spec_files(capsys, tmp_path_factory, case, pick):
    kind, original, content, culprits, what = case
    d = tmp_path_factory.mktemp("spec")
    path = d / original.name
    path.write_bytes(content)
    cmds = commands_for(kind, str(path), d)
    argv, target = cmds[pick % len(cmds)]
    r = run_cli(capsys, argv)
    check_clean(r, [str(path), path.name, *culprits, *(["--plot", "matplotlib"] if "--plot" in argv else [])])
    check_strict_json(r)
    if r.code != 0 and target is not None:
        assert_nothing_written(target)


POINTS_FILE = REPO / "validation" / "published.toml"


@st.composite
def mutated_points(draw):
    """validation/published.toml with one [[point]] value (or the file) broken."""
    text = POINTS_FILE.read_text()
    doc = tomllib.loads(text)
    op = draw(st.sampled_from(VALUE_OPS + ("text",)))
    if op == "text":
        cut = draw(st.integers(0, len(text)))
        extra = draw(st.sampled_from(["", "[[point]]\n", "[point]\n", "x = 1\n", "[[point]]\nid = 3\n"]))
        return (text[:cut] + "\n" + extra).encode(), ["point", "published.toml"], f"text cut at {cut} + {extra!r}"
    points = doc["point"]
    i = draw(st.integers(0, len(points) - 1))
    table = points[i]
    key = draw(st.sampled_from(sorted(table)))
    v = table[key]
    culprits = [key, str(table.get("id")), "point"]
    if op == "drop":
        del table[key]
    elif op in ("add_key", "add_table"):
        table["bogus"] = 1
        culprits = ["bogus"]
    elif op == "retype":
        table[key] = _retype(draw, v)
    elif op in ("negate", "zero", "wrong_units", "bump"):
        f = {"negate": lambda x: -x, "zero": lambda x: 0 * x, "wrong_units": lambda x: x * 1e9, "bump": lambda x: x + 1}[op]
        table[key] = _numeric(v, f) if not isinstance(v, str) else v + "x"
    elif op in ("nan", "inf", "ninf", "huge", "huge_int", "tiny"):
        table[key] = {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "huge": 1e308,
                      "huge_int": 2 ** 63 - 1, "tiny": 5e-324}[op]
    elif op == "unit_string":
        table[key] = "8TB/s"
    elif op == "list_edit":
        table[key] = draw(st.sampled_from([[], [1], [1, 2, 3], [2, 1], [0, 1], ["a", "b"]]))
    elif op == "string_typo":
        table[key] = draw(st.sampled_from(["", "nope", "dep5", "tp3", "h100", "serving", "sweep", "agentx", "prefill"]))
    lines = [f"[[point]]\n" + "".join(f"{k} = {toml_value(x)}\n" for k, x in pt.items()) for pt in points]
    return "\n".join(lines).encode(), culprits, f"{op} point {i} {key}"


@FUZZ
@given(case=mutated_points())
def test_mutated_validation_points(capsys, tmp_path_factory, predictions_reused, case):
    """A point file with one value (or the text) broken: the points left as they were are predicted once
    (predictions_reused), the changed one afresh."""
    content, culprits, what = case
    path = tmp_path_factory.mktemp("points") / "points.toml"
    path.write_bytes(content)
    argv = ["validate", "--points", str(path), "--json"]
    r = run_cli(capsys, argv)
    if r.code == 1:  # a point out of its band: a result, not an error
        assert r.err == "" and r.out.strip(), r
        r.code = 0
    check_clean(r, [str(path), path.name, *culprits])
    check_strict_json(r)


CSV_VALUES = ["nan", "inf", "-1", "0", "", "abc", "1e308", "1e-320", "1e400", "9" * 25, "1.5", "fp9", "gemm", "launch"]


@FUZZ_FEWER
@given(data=st.data())
def test_mutated_calibration_csv(capsys, tmp_path_factory, data):
    """calibrate --from-csv on a measurements CSV with broken cells, columns or lines."""
    d = tmp_path_factory.mktemp("csv")
    lines = calibration_csv(d / "base.csv").read_text().splitlines()
    header = lines[0].split(",")
    op = data.draw(st.sampled_from(["cell", "column", "truncate", "extra_field", "header_only"]))
    if op == "cell":
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(1, len(lines) - 1))
            cells = lines[i].split(",")
            cells[data.draw(st.integers(0, len(header) - 1))] = data.draw(st.sampled_from(CSV_VALUES))
            lines[i] = ",".join(cells)
    elif op == "column":
        j = data.draw(st.integers(0, len(header) - 1))
        lines = [",".join(c for k, c in enumerate(ln.split(",")) if k != j) for ln in lines]
    elif op == "truncate":
        lines = lines[: data.draw(st.integers(0, len(lines)))]
    elif op == "extra_field":
        i = data.draw(st.integers(1, len(lines) - 1))
        lines[i] += ",1"
    else:
        lines = lines[:1]
    path = d / "m.csv"
    path.write_text("\n".join(lines) + "\n")
    out = d / "out"
    r = run_cli(capsys, ["calibrate", "-H", "h200", "--from-csv", str(path), "--out-dir", str(out), "--json"])
    check_clean(r, [str(path), path.name])
    check_strict_json(r)
    if r.code != 0:
        assert_nothing_written(out)


NUMBERS = ["0", "-1", "-0.5", "nan", "-nan", "inf", "-inf", "1e308", "1e400", "1" + "0" * 40, "1" + "0" * 400, "abc", "", " 3",
           "0x10", "1_000"]
OPTION_VALUES = {
    "--batch": NUMBERS + ["1", "16", "0.5", "300000"],
    "--context": NUMBERS + ["855000", "1048576", "1048577", "2000000", "1e12"],
    "--new-tokens": NUMBERS + ["1", "8192", "1048576"],
    "--acceptance": NUMBERS + ["1", "3.51", "6", "6.01", "7"],
    "--balancedness": NUMBERS + ["1", "0.94", "1.01", "1e-300"],
    "--draft-tokens": NUMBERS + ["5", "100", "1000000", "2147483648"],
    "--phase": ["prefill", "decode", "train", "", "PREFILL"],
    "--engram-placement": ["hbm", "host", "peer-hbm", "disk", "", "model"],
}
LAYOUTS = ["dep0", "dep1", "dep5", "dep7", "dep64", "dep72", "dep128", "dep384", "tp1", "tp3", "tp5", "tp64", "tp128",
           "garbage", "", "dep-1", "DEP32", " tp8", "dep32 ", "dep" + "9" * 30, "tp08", "dep32,tp8"]
NAMES_HW = HARDWARE_NAMES + ["nope", "", "GB300-NVL72", "/nonexistent.toml", "hardware", "models/deepseek-v3.toml",
                             "examples", "x.toml", "../hardware/h200.toml"]
NAMES_MODEL = MODEL_NAMES + ["nope", "", "deepseek", "hardware/h200.toml", "/dev/null", "models", "deepseek-v3.TOML"]
SETS = ["", "=", "hbm_bandwidth", "hbm_bandwidth=", "=3", "hbm_bandwidth=30TB/s", "hbm_bandwidth=30TB",
        "hbm_bandwidth=-1", "hbm_bandwidth=nan", "hbm_bandwidth=inf", "hbm_bandwidth=1e400", "hbm_bandwidth=1e308",
        "nvlink_latency=1.5us", "nvlink_latency=1.5 parsecs", "model.num_layers=0", "model.num_layers=2.5",
        "model.num_layers=100000000000", "model.compress_ratios=[1,2]", "model.compress_ratios=[a]",
        "model.attention_kind=gqa", "foo.bar=1", "hardware.preview=maybe", "mean_accepted_tokens=99",
        "hbm_stream_efficiency=1.5", "memory_domains=1", "hardware.name=x", "model.kv_source_layers=[-1]",
        "model.engram_layers=[1,1,1]", "num_layers=1e308", "model.num_routed_experts=383", "model.num_heads=63",
        "model.draft_layers=0", "model.draft_tokens=0", "model.vocab_size=1", "model.max_context_tokens=1",
        "hardware.nvlink_domain_size=1", "hardware.gpus_per_tray=100", "model.hc_routes=1", "model.o_groups=7",
        "model.replay_tokens=0", "model.draft_passes=0", "model.indexer_topk=0", "model.engram_tables=0",
        "hardware.hbm_capacity=1B", "price_usd_per_gpu_hour=$3", "hardware.fp4_dense_flops_per_s=1e-300",
        "model.experts_per_token=384", "model.hidden_size=1", "model.mean_accepted_tokens=1e-9",
        "model.expert_dtype=fp4 ", "step_overhead=-1us", "hbm_bandwidth=8TB/s=9"]


def _culprits_for(argv: list[str]) -> list[str]:
    """Every option name and value given: one of them must appear in an error line."""
    long = {"-H": "hardware", "-m": "model", "-l": "layout", "-s": "set", "-w": "workload", "-q": "quiet"}
    words = []
    for a in argv:
        words.append(a)
        if a.startswith("--"):
            words.append(a.lstrip("-"))
        if a in long:
            words.append(long[a])
        if "=" in a:
            words += [p for p in a.split("=") if p]
    return [w.strip() for w in words if w.strip()] + ["layout", "rubinperf estimate", "rubinperf kernel"]


@FUZZ
@given(data=st.data())
def test_estimate_arguments(capsys, data):
    argv = ["estimate"]
    for opt in data.draw(st.lists(st.sampled_from(sorted(OPTION_VALUES)), max_size=4, unique=True)):
        argv += [opt, data.draw(st.sampled_from(OPTION_VALUES[opt]))]
    if data.draw(st.booleans()):
        argv += ["-l", data.draw(st.sampled_from(LAYOUTS + ["dep2", "dep32", "tp8"]))]
    else:
        argv += ["-l", "dep32"]
    if data.draw(st.booleans()):
        argv += ["-H", data.draw(st.sampled_from(NAMES_HW))]
    else:
        argv += ["-H", "gb300-nvl72"]
    if data.draw(st.booleans()):
        argv += ["-m", data.draw(st.sampled_from(NAMES_MODEL))]
    for s in data.draw(st.lists(st.sampled_from(SETS) | st.text(max_size=12), max_size=2)):
        argv += ["--set", s]
    argv += [data.draw(st.sampled_from(["--json", "--csv", "--breakdown", "--quiet", "--no-eplb"]))]
    r = run_cli(capsys, argv)
    check_clean(r, _culprits_for(argv))
    check_strict_json(r)


STEP_COMMANDS = [["explain", "megamoe"], ["explain", "lm head", "--json"], ["explain", "mqa logits"],
                 ["sensitivity", "--top", "3"], ["sensitivity", "--metric", "tokens-per-user", "--json"]]


@FUZZ_FEWER
@given(data=st.data())
def test_step_command_arguments(capsys, data):
    """explain and sensitivity take estimate's operating-point options."""
    argv = list(data.draw(st.sampled_from(STEP_COMMANDS)))
    for opt in data.draw(st.lists(st.sampled_from(sorted(set(OPTION_VALUES) - {"--engram-placement"})), max_size=3,
                                  unique=True)):
        argv += [opt, data.draw(st.sampled_from(OPTION_VALUES[opt]))]
    argv += ["-l", data.draw(st.sampled_from(LAYOUTS + ["dep8", "dep32", "tp8", "dep2"]))]
    if data.draw(st.booleans()):
        argv += ["-H", data.draw(st.sampled_from(NAMES_HW))]
    if data.draw(st.booleans()):
        argv += ["-m", data.draw(st.sampled_from(NAMES_MODEL))]
    for s_ in data.draw(st.lists(st.sampled_from(SETS), max_size=2)):
        argv += ["--set", s_]
    r = run_cli(capsys, argv)
    check_clean(r, _culprits_for(argv) + [argv[1]])
    check_strict_json(r)


SERVING_COMMANDS = ["pareto", "compare"]
SERVING_VALUES = {
    "--max-batch": ["0", "-1", "1", "2", "16", "1000000000", "1e3", "abc", "99999999999999999999"],
    "--draft-tokens": ["0", "-1", "1", "5", "9", "100", "nan"],
    "--acceptance": ["0", "0.5", "1", "3.51", "6", "7", "nan", "inf", "-1"],
    "--prefill-layout": LAYOUTS + ["dep2", "dep8"],
    "-w": ["agentx", "chat-8k1k", "nope", "", "models/deepseek-v3.toml", "hardware/h200.toml", "examples"],
    "--at-interactivity": ["196,387", "", "0", "-5", "nan", "1e9", "a,b", ",,", "100,inf", "5e-324"],
    "--rows": ["0", "-1", "3", "x"],
    "--kernels": ["0", "-1", "2", "x"],
}
SERVING_SETS = SETS + ["workload.prefix_hit_rate=1", "workload.prefix_hit_rate=1.5", "workload.prefix_hit_rate=-0.1",
                       "workload.input_tokens_per_turn=0", "workload.input_tokens_per_turn=2000000",
                       "workload.output_tokens_per_turn=0.5", "workload.prefill_layout=tp3",
                       "workload.prefill_tokens_per_rank=1", "workload.runtime_reserve_bytes=1TB",
                       "workload.kv_transfer_link=carrier-pigeon", "workload.engram_peer_gpus=0",
                       "gb300-nvl72:hbm_bandwidth=1TB/s", "nope:hbm_bandwidth=1TB/s", "vr-nvl72:=3",
                       "workload.prefix_pool=disk", "workload.prefill_engram_placement=peer-hbm"]


@FUZZ
@given(data=st.data())
def test_serving_command_arguments(capsys, tmp_path_factory, data):
    command = data.draw(st.sampled_from(SERVING_COMMANDS))
    argv = [command, "--max-batch", "16"]
    for opt in data.draw(st.lists(st.sampled_from(sorted(SERVING_VALUES)), max_size=3, unique=True)):
        if opt in COMMANDS[command]:
            argv += [opt, data.draw(st.sampled_from(SERVING_VALUES[opt]))]
    argv += ["-l", data.draw(st.sampled_from(LAYOUTS + ["dep8", "dep32", "tp8"]))]
    for hw in data.draw(st.lists(st.sampled_from(NAMES_HW), min_size=0, max_size=2)):
        argv += ["-H", hw]
    if data.draw(st.booleans()):
        argv += ["-m", data.draw(st.sampled_from(NAMES_MODEL))]
    for s_ in data.draw(st.lists(st.sampled_from(SERVING_SETS), max_size=2)):
        argv += ["--set", s_]
    target = None
    if "--plot" in COMMANDS[command] and data.draw(st.booleans()):
        d = tmp_path_factory.mktemp("plot")
        target = d / data.draw(st.sampled_from(["f.svg", "f.txt", "f", "sub/f.svg", "f.png"]))
        argv += ["--plot", str(target)]
    argv.append(data.draw(st.sampled_from(["--json", "--no-chart", "--quiet", "--eplb"])) if command == "pareto"
                else data.draw(st.sampled_from(["--json", "--quiet", "--no-eplb"])))
    r = run_cli(capsys, argv)
    check_clean(r, _culprits_for(argv) + ["workload", "matplotlib", "plot"])
    check_strict_json(r)
    if r.code != 0 and target is not None:
        assert_nothing_written(target)


KERNEL_SHAPES = {
    "gemm": ["--m", "--n", "--k"],
    "grouped-gemm": ["--tokens", "--groups", "--n", "--k"],
    "attention": ["--batch", "--heads", "--q-len", "--kv-len", "--head-dim", "--kv-heads"],
    "copy": ["--bytes"],
}
KERNEL_NUMBERS = NUMBERS + ["1", "2", "3", "7", "64", "4096", "2147483648", "9" * 25, "1e3", "1.5"]


@FUZZ
@given(data=st.data())
def test_kernel_arguments(capsys, data):
    kind = data.draw(st.sampled_from(sorted(KERNEL_SHAPES)))
    argv = ["kernel", kind]
    for opt in KERNEL_SHAPES[kind]:
        if opt == "--kv-heads" and data.draw(st.booleans()):
            continue
        argv += [opt, data.draw(st.sampled_from(KERNEL_NUMBERS))]
    if kind != "copy" and data.draw(st.booleans()):
        argv += ["--dtype", data.draw(st.sampled_from(["fp4", "fp8", "bf16", "fp32", "fp16", "", "FP8", "int8"]))]
    if data.draw(st.booleans()):
        argv += ["-H", data.draw(st.sampled_from(NAMES_HW))]
    for s in data.draw(st.lists(st.sampled_from(SETS), max_size=2)):
        argv += ["--set", s]
    if data.draw(st.booleans()):
        argv.append(data.draw(st.sampled_from(["--json", "--quiet", "--causal", "--bogus"])))
    r = run_cli(capsys, argv)
    check_clean(r, _culprits_for(argv) + ["rubinperf kernel"])
    check_strict_json(r)


@FUZZ
@given(argv=st.lists(st.sampled_from(["estimate", "kernel", "list", "gemm", "hardware", "models", "layouts", "--json",
                                      "--help", "-q", "--version", "--bogus", "-x", "nope", "--m", "3", "--set",
                                      "--hardware", "vr-nvl72", "--model", "--layout", "dep32", "--", "-"]),
                     max_size=6))
def test_random_argument_lists(capsys, argv):
    r = run_cli(capsys, argv)
    check_clean(r, _culprits_for(argv) + ["rubinperf"])


# ------------------------------------------------------------------ hand-picked cases the fuzzer found or should find


@pytest.mark.parametrize("argv", [
    ["estimate", "-l", "dep32", "--batch", "nan"],
    ["estimate", "-l", "dep32", "--context", "nan"],
    ["estimate", "-l", "dep2", "--new-tokens", "nan"],
    ["estimate", "-l", "dep32", "--batch", "inf"],
    ["estimate", "-l", "dep32", "--batch", "1e308"],
    ["estimate", "-l", "dep2", "--new-tokens", "inf"],
    ["estimate", "-l", "dep32", "--context", "-inf"],
    ["kernel", "gemm", "--m", "1" + "0" * 400, "--n", "1", "--k", "1"],
    ["kernel", "copy", "--bytes", "1e308"],
    ["estimate", "-l", "dep32", "--set", "hbm_bandwidth=1e-300"],
])
def test_non_finite_arguments_fail_cleanly(cli, argv):
    r = cli(*argv)
    assert r.code == 2, r
    assert len(r.err.splitlines()) == 1 and "internal error" not in r.err, r


@pytest.mark.nightly
def test_the_fuzz_at_length():
    """This file again at 2,000 examples a test: the nightly run, never the default one."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", __file__, "-m", "not nightly"],
                       env={**os.environ, "RUBINPERF_FUZZ_EXAMPLES": "2000"}, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
