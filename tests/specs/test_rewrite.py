"""rubinperf.specs.rewrite: values rewritten through a TOML library, everything else kept."""

from __future__ import annotations

import sys

import pytest

from conftest import REPO
from rubinperf.errors import SpecError
from rubinperf.specs.rewrite import rewrite_efficiency, rewrite_tables

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MULTILINE = '''name = "x"  # the name
description = "d"

[efficiency]
# measured on one GPU
source = """first line
hbm_efficiency = 0.1
last line"""
hbm_efficiency = 0.5   # guessed; = not measured
kernel_launch_floor_s = 2.5e-6

[nvlink]
source = 'literal = string'
nvlink_latency_s = 2e-6
'''


def test_source_strings_that_span_lines():
    out = rewrite_tables(MULTILINE, {("efficiency", "hbm_efficiency"): 0.71234, ("nvlink", "nvlink_latency_s"): 1.5e-6},
                         {"efficiency": 'new\nsource with "quotes" and = signs'})
    data = tomllib.loads(out)
    assert data["efficiency"] == {"source": 'new\nsource with "quotes" and = signs', "hbm_efficiency": 0.712,
                                  "kernel_launch_floor_s": 2.5e-6}
    assert data["nvlink"] == {"source": "literal = string", "nvlink_latency_s": 1.5e-6}
    # comments and untouched lines are kept byte for byte
    for kept in ('name = "x"  # the name', "# measured on one GPU", "   # guessed; = not measured",
                 "kernel_launch_floor_s = 2.5e-6", "source = 'literal = string'"):
        assert kept in out


def test_the_multiline_value_inside_a_string_is_not_a_key():
    out = rewrite_efficiency(MULTILINE, {"hbm_efficiency": 0.8}, "s")
    assert tomllib.loads(out)["efficiency"]["hbm_efficiency"] == 0.8
    assert "hbm_efficiency = 0.1" not in out  # the old multi-line source was replaced whole


def test_bundled_hardware_round_trips_unchanged_when_nothing_changes():
    for path in sorted((REPO / "hardware").glob("*.toml")):
        text = path.read_text()
        src = tomllib.loads(text)["efficiency"]["source"]
        assert tomllib.loads(rewrite_tables(text, {}, {"efficiency": src})) == tomllib.loads(text)


def test_missing_key_or_table_and_broken_toml_are_spec_errors():
    with pytest.raises(SpecError, match=r"no line for \[efficiency\] nope"):
        rewrite_tables(MULTILINE, {("efficiency", "nope"): 1.0}, {})
    with pytest.raises(SpecError, match=r"no line for \[absent\] source"):
        rewrite_tables(MULTILINE, {}, {"absent": "s"})
    with pytest.raises(SpecError, match="malformed"):
        rewrite_tables("a = [", {}, {})
    with pytest.raises(SpecError, match="non-finite"):
        rewrite_tables(MULTILINE, {("efficiency", "hbm_efficiency"): float("nan")}, {})


def _multiline_h200(tmp_path):
    text = (REPO / "hardware" / "h200.toml").read_text()
    head, _, rest = text.partition('[efficiency]\nsource = "')
    old_source, _, tail = rest.partition('"\n')
    path = tmp_path / "h200-multiline.toml"
    path.write_text(f'{head}[efficiency]\n# a comment that stays\nsource = """first line\n'
                    f'hbm_efficiency = 0.1\n{old_source}"""\n{tail}')
    assert tomllib.loads(path.read_text())["efficiency"]["source"].startswith("first line\nhbm_efficiency = 0.1")
    return path


CALIBRATE = ["calibrate", "--from-csv", str(REPO / "calibration" / "h200" / "measurements.csv"), "-q"]


def test_calibrate_keeps_multiline_sources_and_comments(cli, tmp_path):
    """End to end: `rubinperf calibrate --from-csv` on a spec whose source spans lines."""
    spec = _multiline_h200(tmp_path)
    r = cli(*CALIBRATE, "--hardware", str(spec), "--out-dir", str(tmp_path / "out"))
    assert r.code == 0 and "internal error" not in r.err, r
    written = (tmp_path / "out" / "h200.toml").read_text()
    assert "# a comment that stays" in written
    data = tomllib.loads(written)
    assert data["efficiency"]["source"].startswith("Calibrated")
    assert data["compute"] == tomllib.loads(spec.read_text())["compute"]
    assert isinstance(data["kernel"]["stream_bytes_in_flight_per_sm"], float)
    stack = tomllib.loads((tmp_path / "out" / "pytorch-2.11.toml").read_text())
    assert isinstance(stack["kernel"]["split_k_max"], int)   # counts stay integers in the stack file too
