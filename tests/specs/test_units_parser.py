"""The one parser of numbers with units (rubinperf.units): K = 1000 for SI quantities, K = 1024 for token
counts, a bare number refused where a unit is needed, relative what-ifs; and every spec field's range."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rubinperf.errors import SpecError
from rubinperf.units import parse_quantity, parse_tokens, parse_value, relative_factor


@pytest.mark.parametrize("text,dim,value", [
    ("30TB/s", "B/s", 30e12), ("900 GB/s", "B/s", 900e9), ("288GB", "B", 288e9), ("192GiB", "B", 192 * 2 ** 30),
    ("4KiB", "B", 4096), ("4kB", "B", 4000), ("4KB", "B", 4000), ("20ms", "s", 0.02), ("1.5us", "s", 1.5e-6),
    ("1.5µs", "s", 1.5e-6), ("2s", "s", 2.0), ("50PFLOP/s", "FLOP/s", 5e16), ("1.4kW", "W", 1400.0),
    ("1.9GHz", "Hz", 1.9e9), ("$6/h", "USD/GPU-hour", 6.0),
    ("128K", "tokens", 131072), ("1M", "tokens", 1 << 20), ("32K tokens", "tokens", 32768), ("855000", "tokens", 855000),
])
def test_one_rule_for_k(text, dim, value):
    # SI quantities: k = K = 1000, Ki = 1024; token counts: K = 1024, M = 1024^2.
    assert parse_quantity(text, dim, "x", None) == pytest.approx(value, rel=1e-12)


def test_tokens_and_bytes_disagree_on_k_as_documented():
    assert parse_tokens("1K") == 1024 and parse_quantity("1KB", "B", "x") == 1000


@pytest.mark.parametrize("dim,example", [("B/s", "30TB/s"), ("s", "20ms"), ("B", "288GB"), ("FLOP/s", "5PFLOP/s"),
                                         ("W", "1400W")])
def test_a_bare_number_with_a_dimension_is_refused_showing_the_forms(dim, example):
    with pytest.raises(SpecError) as exc:
        parse_quantity("30", dim, "--x", None)
    assert "has no unit" in str(exc.value) and example in str(exc.value)


def test_a_bare_number_is_fine_where_the_unit_is_in_the_name():
    assert parse_value("3e13", "hbm_bandwidth_bytes_per_s", bare_ok=True) == 3e13
    with pytest.raises(SpecError, match="the unit in the name"):
        parse_value("30", "hbm_bandwidth_bytes_per_s", bare_ok=False)


@pytest.mark.parametrize("text,dim", [("30XB/s", "B/s"), ("20m", "s"), ("5GB", "B/s"), ("abc", "s"), ("20%", "s")])
def test_a_wrong_unit_is_refused(text, dim):
    with pytest.raises(SpecError):
        parse_quantity(text, dim, "--x", None)


@pytest.mark.parametrize("text,factor", [("+20%", 1.2), ("-10%", 0.9), ("x1.2", 1.2), ("*0.5", 0.5), ("×2", 2.0),
                                         ("+0%", 1.0), ("20%", None), ("1.2", None), ("x", None), ("+20", None)])
def test_relative_forms(text, factor):
    got = relative_factor(text)
    assert got == (None if factor is None else pytest.approx(factor))


# ---------------------------------------------------------------- --set: relative what-ifs and bare numbers


@pytest.fixture(scope="module")
def gb300():
    from rubinperf.specs.stack import load_platform

    return load_platform("gb300-nvl72")


def test_relative_set_scales_the_loaded_value(gb300):
    from rubinperf.specs.overrides import apply_overrides

    base = gb300.hbm_bandwidth_bytes_per_s
    for text, factor in (("+20%", 1.2), ("x1.2", 1.2), ("-25%", 0.75), ("*2", 2.0)):
        hw = apply_overrides([f"hbm_bandwidth={text}"], hardware=gb300)["hardware"]
        assert hw.hbm_bandwidth_bytes_per_s == pytest.approx(base * factor)


def test_relative_set_on_an_integer_field_must_land_on_an_integer(gb300):
    from rubinperf.specs.overrides import apply_overrides

    assert apply_overrides(["sm_count=x2"], hardware=gb300)["hardware"].sm_count == 2 * gb300.sm_count
    with pytest.raises(SpecError, match="not a whole number"):
        apply_overrides(["sm_count=x1.001"], hardware=gb300)


def test_bare_set_without_the_unit_in_the_key_is_refused(gb300):
    from rubinperf.specs.overrides import apply_overrides

    with pytest.raises(SpecError, match="30TB/s"):
        apply_overrides(["hbm_bandwidth=30"], hardware=gb300)
    hw = apply_overrides(["hbm_bandwidth_bytes_per_s=3e13"], hardware=gb300)["hardware"]
    assert hw.hbm_bandwidth_bytes_per_s == 3e13
    # A count or a fraction has no unit to forget.
    assert apply_overrides(["split_k_max=8"], hardware=gb300)["hardware"].split_k_max == 8


def test_a_value_far_outside_the_documented_range_is_refused_with_the_range(gb300):
    from rubinperf.specs.overrides import apply_overrides

    with pytest.raises(SpecError) as exc:
        apply_overrides(["hbm_bandwidth=30B/s"], hardware=gb300)   # 30 B/s: a unit mistake
    assert "documented range 1e+10 to 1e+14 B/s" in str(exc.value)
    # 100x outside is the limit: 1e8 B/s (the range's low end / 100) loads, less does not.
    assert apply_overrides(["hbm_bandwidth=100MB/s"], hardware=gb300)["hardware"].hbm_bandwidth_bytes_per_s == 1e8
    with pytest.raises(SpecError):
        apply_overrides(["hbm_bandwidth=99MB/s"], hardware=gb300)


# ---------------------------------------------------------------- every spec field: in range, or one line


def _numeric_fields():
    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import _type_hints, spec_fields
    from rubinperf.specs.model import Model
    from rubinperf.specs.stack import Stack
    from rubinperf.specs.workload import Workload

    out = []
    for kind, cls in (("hardware", Hardware), ("stack", Stack), ("model", Model), ("workload", Workload)):
        hints = _type_hints(cls)
        out += [(kind, f) for f in spec_fields(cls) if hints[f.name] in (int, float)]
    return out


FIELDS = _numeric_fields()
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e-300, max_value=1e-300),                       # denormals and tiny
    st.sampled_from([0.0, -0.0, 1e-320, 5e-324, 1e308, 2.0 ** 63, 2.0 ** 31, -1.0, 0.5, 1.0]),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
)


@pytest.fixture(scope="module")
def records():
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform
    from rubinperf.specs.workload import load_workload

    return {"hardware": load_platform("gb300-nvl72"), "model": load_model("deepseek-v4.1-flash"),
            "workload": load_workload("agentx")}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_every_field_loads_within_its_range_or_is_one_line(records, field, value):
    from rubinperf.specs.loader import RANGE_SLACK, documented_range
    from rubinperf.specs.overrides import apply_overrides

    kind, f = field
    spec = "stack" if f.metadata.get("spec") == "stack" else kind
    text = repr(float(value)) if isinstance(value, float) else str(value)
    try:
        out = apply_overrides([f"{spec}.{f.name}={text}"], **records)
    except SpecError as exc:
        assert "\n" not in str(exc) and f.name.split("_")[0] in str(exc)
        return
    got = getattr(out["hardware" if kind in ("hardware", "stack") else kind], f.name)
    assert math.isfinite(got)
    span = documented_range(f.metadata)
    if span is None:   # a fraction
        assert 0 <= got <= f.metadata["at_most"]
    elif got != 0:
        assert span[0] / RANGE_SLACK <= got <= span[1] * RANGE_SLACK
    if f.metadata["positive"]:
        assert got > 0


def test_every_bundled_spec_lies_within_its_documented_ranges():
    # The ranges document the bundled specs too: none is near the refusal edge (within 10x of it).
    from rubinperf.specs.loader import RANGE_SLACK, bundled_names, documented_range
    from rubinperf.specs.hardware import load_hardware
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_stack
    from rubinperf.specs.workload import load_workload

    loaders = {"hardware": load_hardware, "stack": load_stack, "model": load_model, "workload": load_workload}
    for kind, f in FIELDS:
        kinds = ["stack"] if f.metadata.get("spec") == "stack" else [kind]
        for k in kinds:
            for name in bundled_names(k):
                rec = loaders[k](name)
                if not hasattr(rec, f.name):
                    continue
                v, span = getattr(rec, f.name), documented_range(f.metadata)
                if span and v:
                    assert span[0] / (RANGE_SLACK / 10) <= v <= span[1] * RANGE_SLACK / 10, (name, f.name, v, span)
