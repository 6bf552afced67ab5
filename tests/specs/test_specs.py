"""Spec library: every bundled spec loads; every kind of bad spec is a SpecError naming file and key;
to_toml round-trips through build_spec."""

from __future__ import annotations

import math

import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import HARDWARE_NAMES, MODEL_NAMES, REPO
from rubinperf.errors import SpecError
from rubinperf.specs.hardware import Hardware, load_hardware
from rubinperf.specs.loader import RANGE_SLACK, documented_range
from rubinperf.specs.loader import build_spec, bundled_names, read_toml, spec_fields, to_toml
from rubinperf.specs.model import Model, load_model

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# ------------------------------------------------------------------ bundled specs


def test_bundled_names():
    assert sorted(bundled_names("hardware")) == sorted(HARDWARE_NAMES)
    assert sorted(bundled_names("model")) == sorted(MODEL_NAMES)


@pytest.mark.parametrize("name", HARDWARE_NAMES)
def test_bundled_hardware_loads(name):
    hw = load_hardware(name)
    assert hw.name == name
    # every table's source, and the [ranges] table's where the file states ranges of its assumed fields
    assert set(hw.sources) - {"ranges"} == {f.metadata["section"] for f in spec_fields(Hardware)}
    assert ("ranges" in hw.sources) == bool(hw.ranges)
    assert all(s.strip() for s in hw.sources.values())
    for f in spec_fields(Hardware):
        v = getattr(hw, f.name)
        if isinstance(v, float) and f.name.endswith("_efficiency"):
            assert 0 < v <= 1
    # loading by path gives the same record
    assert load_hardware(str(REPO / "hardware" / f"{name}.toml")) == hw


def test_vr_is_marked_preview(hardware_by_name):
    assert hardware_by_name["vr-nvl72"].preview is True
    assert hardware_by_name["h200"].preview is False


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_bundled_model_loads(name):
    m = load_model(name)
    assert m.name == name
    assert set(m.sources) == {f.metadata["section"] for f in spec_fields(Model)}
    assert load_model(str(REPO / "models" / f"{name}.toml")) == m


# ------------------------------------------------------------------ round trip


def _round_trip(rec):
    text = to_toml(rec)
    back = build_spec(type(rec), tomllib.loads(text), Path(rec.path))
    assert back == rec
    assert back.sources == rec.sources
    assert (back.name, back.description) == (rec.name, rec.description)
    return back


@pytest.mark.parametrize("name", HARDWARE_NAMES)
def test_hardware_round_trips(name):
    _round_trip(load_hardware(name))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_round_trips(name):
    _round_trip(load_model(name))


def test_round_trip_with_awkward_strings(tmp_path):
    """A source written with TOML escapes (newline, quote, backslash, control) loads, so it must round-trip."""
    text = (REPO / "hardware" / "h200.toml").read_text()
    text = _set_in_section(text, "memory", "source", r'"line one\nline two \"quoted\" back\\slash \u0001 tab\t end é"')
    text = text.replace('description = "', 'description = "multi\\nline ', 1)
    p = tmp_path / "awkward.toml"
    p.write_text(text)
    hw = load_hardware(str(p))
    assert "\n" in hw.sources["memory"] and "\x01" in hw.sources["memory"]
    _round_trip(hw)


# Generated specs: perturb a bundled document's numbers and strings; whatever loads must round-trip.

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
def _documents(cls, name):
    path = REPO / ("hardware" if cls is Hardware else "models") / f"{name}.toml"
    base = read_toml(path)
    hints = {f.name: f for f in spec_fields(cls)}

    @st.composite
    def doc(draw):
        d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
        d["description"] = draw(_text)
        for section, table in d.items():
            if not isinstance(table, dict):
                continue
            if draw(st.booleans()):
                table["source"] = draw(_text.filter(str.strip))
            # models: perturb only float fields (ints there are tied together by cross-field checks)
            numeric = (int, float) if cls is Hardware else (float,)
            keys = [k for k, v in table.items() if k in hints and isinstance(v, numeric) and not isinstance(v, bool)]
            for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)) if keys else []:
                meta = hints[key].metadata
                span = documented_range(meta)   # values the loader takes: within 100x of the documented range
                lo, hi = (span[0] / RANGE_SLACK, span[1] * RANGE_SLACK) if span else (1e-12, 1e18)
                if isinstance(base[section][key], int):
                    v = draw(st.integers(min_value=max(1, math.ceil(lo)) if meta["positive"] else 0,
                                         max_value=int(min(10**6, hi))))
                elif meta["at_most"] is not None:
                    v = draw(st.floats(min_value=1e-6, max_value=meta["at_most"]))
                else:
                    v = draw(st.floats(min_value=lo, max_value=hi) if meta["positive"] else
                             st.one_of(st.just(0.0), st.floats(min_value=lo, max_value=hi)))
                table[key] = v
                if isinstance(d.get("ranges"), dict):   # a value moved off its stated range: the range goes with it
                    d["ranges"].pop(key, None)
        return d

    return doc()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_hardware_spec_that_loads_round_trips(data):
    name = data.draw(st.sampled_from(HARDWARE_NAMES))
    doc = data.draw(_documents(Hardware, name))
    try:
        hw = build_spec(Hardware, doc, Path(f"{name}.toml"))
    except SpecError:
        assume(False)
    _round_trip(hw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_model_spec_that_loads_round_trips(data):
    name = data.draw(st.sampled_from(MODEL_NAMES))
    doc = data.draw(_documents(Model, name))
    try:
        m = build_spec(Model, doc, Path(f"{name}.toml"))
    except SpecError:
        assume(False)
    _round_trip(m)


# ------------------------------------------------------------------ bad specs


def _sections(text: str) -> list[tuple[str, list[str]]]:
    out, name = [("", [])], ""
    for line in text.splitlines():
        m = re.fullmatch(r"\[(\w+)\]\s*", line)
        if m:
            out.append((m.group(1), []))
        out[-1][1].append(line)
    return out


def _edit_in_section(text: str, section: str, key: str, fn) -> str:
    """Apply fn(line) to the one `key = ...` line of [section] (fn returns a replacement or None to drop)."""
    parts, hits = [], 0
    for name, lines in _sections(text):
        if name == section:
            new = []
            for line in lines:
                if re.match(rf"{re.escape(key)}\s*=", line):
                    hits += 1
                    line = fn(line)
                if line is not None:
                    new.append(line)
            lines = new
        parts.extend(lines)
    assert hits == 1, f"{section}.{key}: {hits} lines"
    return "\n".join(parts) + "\n"


def _set_in_section(text, section, key, value):
    return _edit_in_section(text, section, key, lambda line: f"{key} = {value}")


def _drop_in_section(text, section, key):
    return _edit_in_section(text, section, key, lambda line: None)


def _add_to_section(text, section, line):
    return re.sub(rf"^\[{section}\]\n", f"[{section}]\n{line}\n", text, count=1, flags=re.M)


def _hw_text():
    return (REPO / "hardware" / "gb300-nvl72.toml").read_text()


def _model_text():
    return (REPO / "models" / "deepseek-v3.toml").read_text()


HW_BAD = {
    # case id: (edit, words the message must contain)
    "missing-key": (lambda t: _drop_in_section(t, "efficiency", "hbm_stream_efficiency"), ["efficiency.hbm_stream_efficiency", "missing"]),
    "missing-table": (
        lambda t: re.sub(r"\[economics\]\n(.*\n)*?\n", "", t, count=1), ["[economics]", "missing"]),
    "unknown-key": (lambda t: _add_to_section(t, "memory", "hbm_speed_bytes_per_s = 1.0"), ["memory.hbm_speed_bytes_per_s", "unknown"]),
    "typo-suggests": (lambda t: _add_to_section(t, "memory", "hbm_bandwidth_byte_per_s = 1.0"), ["hbm_bandwidth_bytes_per_s"]),
    "unknown-table": (lambda t: t + '\n[bogus]\nsource = "x"\n', ["bogus", "unknown"]),
    "string-for-number": (lambda t: _set_in_section(t, "memory", "hbm_bandwidth_bytes_per_s", '"8 TB/s"'), ["memory.hbm_bandwidth_bytes_per_s", "number"]),
    "float-for-int": (lambda t: _set_in_section(t, "compute", "sm_count", "160.5"), ["compute.sm_count", "integer"]),
    "bool-for-number": (lambda t: _set_in_section(t, "compute", "fp8_dense_flops_per_s", "true"), ["compute.fp8_dense_flops_per_s"]),
    "int-for-bool": (lambda t: _set_in_section(t, "compute", "preview", "1"), ["compute.preview", "true or false"]),
    "table-for-number": (lambda t: _set_in_section(t, "nvlink", "nvlink_latency_s", "{ value = 1 }"), ["nvlink.nvlink_latency_s"]),
    "negative-rate": (lambda t: _set_in_section(t, "memory", "hbm_bandwidth_bytes_per_s", "-8.0e12"), ["memory.hbm_bandwidth_bytes_per_s", "positive"]),
    "zero-rate": (lambda t: _set_in_section(t, "compute", "fp8_dense_flops_per_s", "0.0"), ["compute.fp8_dense_flops_per_s", "positive"]),
    "zero-int": (lambda t: _set_in_section(t, "nvlink", "nvlink_domain_size", "0"), ["nvlink.nvlink_domain_size", "positive"]),
    "negative-latency": (lambda t: _set_in_section(t, "nvlink", "cross_tray_latency_s", "-1e-6"), ["nvlink.cross_tray_latency_s", "non-negative"]),
    "efficiency-above-1": (lambda t: _set_in_section(t, "efficiency", "hbm_stream_efficiency", "1.2"), ["efficiency.hbm_stream_efficiency", "at most 1"]),
    "factor-above-1": (lambda t: _set_in_section(t, "memory", "hbm_local_bandwidth_factor", "1.5"), ["memory.hbm_local_bandwidth_factor", "at most"]),
    "nan": (lambda t: _set_in_section(t, "memory", "hbm_bandwidth_bytes_per_s", "nan"), ["memory.hbm_bandwidth_bytes_per_s", "finite"]),
    "inf": (lambda t: _set_in_section(t, "compute", "fp4_dense_flops_per_s", "inf"), ["compute.fp4_dense_flops_per_s", "finite"]),
    "minus-inf": (lambda t: _set_in_section(t, "nvlink", "cross_tray_latency_s", "-inf"), ["nvlink.cross_tray_latency_s", "finite"]),
    "nan-efficiency": (lambda t: _set_in_section(t, "efficiency", "vector_compute_efficiency", "nan"), ["efficiency.vector_compute_efficiency"]),
    "stack-field-in-hardware": (lambda t: _add_to_section(t, "kernel", "split_k_max = 4"), ["kernel.split_k_max", "unknown"]),
    "missing-default-stack": (lambda t: re.sub(r'^default_stack = .*\n', "", t, count=1, flags=re.M), ["default_stack", "missing"]),
    "missing-source": (lambda t: _drop_in_section(t, "memory", "source"), ["memory.source", "missing"]),
    "empty-source": (lambda t: _set_in_section(t, "host", "source", '"  "'), ["host.source"]),
    "number-source": (lambda t: _set_in_section(t, "host", "source", "3"), ["host.source"]),
    "missing-name": (lambda t: re.sub(r'^name = .*\n', "", t, count=1, flags=re.M), ["name", "missing"]),
    "number-name": (lambda t: re.sub(r'^name = .*$', "name = 5", t, count=1, flags=re.M), ["name"]),
    "section-not-table": (lambda t: 'memory_extra = 1\n' + t, ["memory_extra"]),
    "tray-wider-than-domain": (lambda t: _set_in_section(t, "nvlink", "gpus_per_tray", "80"), ["nvlink.gpus_per_tray"]),
    "malformed-header": (lambda t: t.replace("[memory]", "[memory", 1), ["malformed TOML"]),
    "malformed-value": (lambda t: _set_in_section(t, "memory", "hbm_bandwidth_bytes_per_s", "8 TB/s"), ["malformed TOML"]),
    "duplicate-key": (lambda t: _add_to_section(t, "memory", "memory_domains = 2"), ["malformed TOML"]),
}


@pytest.mark.parametrize("case", sorted(HW_BAD))
def test_bad_hardware_spec(case, tmp_path):
    edit, words = HW_BAD[case]
    text = _hw_text()
    bad = edit(text)
    assert bad != text, "the edit did not change the file"
    path = tmp_path / f"bad-{case}.toml"
    path.write_text(bad)
    with pytest.raises(SpecError) as info:
        load_hardware(str(path))
    msg = str(info.value)
    assert str(path) in msg, msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert "\n" not in msg.strip() or case.startswith("malformed") or case == "duplicate-key"


MODEL_BAD = {
    "negative-list-entry": (lambda t: _set_in_section(t, "attention", "kv_source_layers", "[1, -2]"), ["attention.kv_source_layers", "non-negative"]),
    "list-of-strings": (lambda t: _set_in_section(t, "attention", "compress_ratios", '["a"]'), ["attention.compress_ratios", "list of integers"]),
    "list-for-int": (lambda t: _set_in_section(t, "moe", "num_routed_experts", "[256]"), ["moe.num_routed_experts", "integer"]),
    "zero-experts": (lambda t: _set_in_section(t, "moe", "num_routed_experts", "0"), ["moe.num_routed_experts", "positive"]),
    "unknown-dtype": (lambda t: _set_in_section(t, "moe", "expert_dtype", '"fp6"'), ["expert_dtype", "fp6"]),
    "unknown-attention-kind": (lambda t: _set_in_section(t, "attention", "attention_kind", '"linear"'), ["attention.attention_kind"]),
    "topk-above-experts": (lambda t: _set_in_section(t, "moe", "experts_per_token", "300"), ["moe.experts_per_token"]),
    "layer-beyond-model": (lambda t: _set_in_section(t, "attention", "kv_source_layers", "[99]"), ["kv_source_layers", "99"]),
    "acceptance-above-k": (lambda t: _set_in_section(t, "draft", "mean_accepted_tokens", "9.0"), ["draft.mean_accepted_tokens"]),
    "missing-key": (lambda t: _drop_in_section(t, "architecture", "hidden_size"), ["architecture.hidden_size", "missing"]),
    "nan": (lambda t: _set_in_section(t, "draft", "mean_accepted_tokens", "nan"), ["draft.mean_accepted_tokens", "finite"]),
    "missing-source": (lambda t: _drop_in_section(t, "engram", "source"), ["engram.source"]),
}


@pytest.mark.parametrize("case", sorted(MODEL_BAD))
def test_bad_model_spec(case, tmp_path):
    edit, words = MODEL_BAD[case]
    text = _model_text()
    bad = edit(text)
    assert bad != text
    path = tmp_path / f"bad-{case}.toml"
    path.write_text(bad)
    with pytest.raises(SpecError) as info:
        load_model(str(path))
    msg = str(info.value)
    assert str(path) in msg, msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_edits_of_a_good_file_still_load(tmp_path):
    """The helpers themselves: an edit that keeps the value valid loads fine (ints are fine for floats)."""
    path = tmp_path / "ok.toml"
    path.write_text(_set_in_section(_hw_text(), "memory", "hbm_bandwidth_bytes_per_s", "8000000000000"))
    assert load_hardware(str(path)).hbm_bandwidth_bytes_per_s == 8e12


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(SpecError, match=re.escape(str(missing))):
        load_hardware(str(missing))
    with pytest.raises(SpecError, match="no such file"):
        read_toml(missing)


def test_directory_is_not_a_spec(tmp_path):
    with pytest.raises(SpecError, match=re.escape(str(tmp_path))):
        load_hardware(str(tmp_path) + "/")


def test_unknown_bundled_name_lists_known():
    with pytest.raises(SpecError) as info:
        load_hardware("gb400")
    assert "gb400" in str(info.value) and "vr-nvl72" in str(info.value)
    with pytest.raises(SpecError, match="deepseek-v3"):
        load_model("llama")


def test_undecodable_file(tmp_path):
    p = tmp_path / "binary.toml"
    p.write_bytes(b"name = \"\xff\xfe\"\n")
    with pytest.raises(SpecError, match=re.escape(str(p))):
        load_hardware(str(p))
