"""What-if overrides: `--set key=value` changes exactly the named field, understands units,
fails in one line (exit 2) naming close matches, and moves the results the way the
elasticity predicts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import get_type_hints

import pytest

from rubinperf.errors import SpecError
from rubinperf.specs.hardware import Hardware
from rubinperf.specs.stack import load_platform
from rubinperf.specs.loader import numeric_fields, spec_fields
from rubinperf.specs.model import load_model
from rubinperf.specs.overrides import apply_overrides

GB300 = load_platform("gb300-nvl72")
VR = load_platform("vr-nvl72")
V41 = load_model("deepseek-v4.1-flash")


def changed_fields(old, new) -> set[str]:
    """Every dataclass field (sources, path and name included) whose value differs; `ranges` aside (a field set by
    hand drops its stated range: test_set_changes_exactly_the_named_hardware_field)."""
    return {f.name for f in dataclasses.fields(old) if getattr(old, f.name) != getattr(new, f.name)
            and f.name != "ranges"}


def new_value(rec, name):
    """A valid different value for a numeric field: 10% more (within its limit) or one more."""
    f = next(f for f in spec_fields(type(rec)) if f.name == name)
    old = getattr(rec, name)
    if get_type_hints(type(rec))[name] is int:
        return old + 1 if old else 1
    cap = f.metadata["at_most"]
    v = old * 1.1 if old else 1e-6
    return cap * 0.95 if cap is not None and v > cap else v




@pytest.mark.parametrize("field", numeric_fields(Hardware))
def test_set_changes_exactly_the_named_hardware_field(field):
    v = new_value(VR, field)
    if field == "gpus_per_tray":
        v = VR.gpus_per_tray * 2          # still within the 72-GPU domain
    out = apply_overrides([f"hardware.{field}={v!r}"], hardware=VR, model=V41)
    # the field, and its stated range where it had one (a value set by hand is no longer the file's assumption)
    assert changed_fields(VR, out["hardware"]) == {field}
    assert field not in out["hardware"].ranges
    assert out["hardware"].ranges == {k: v for k, v in VR.ranges.items() if k != field}
    assert getattr(out["hardware"], field) == pytest.approx(v, rel=1e-15)
    assert out["model"] is V41


@pytest.mark.parametrize("field", ["mean_accepted_tokens", "draft_tokens", "hidden_size", "engram_row_bytes",
                                   "indexer_topk", "max_context_tokens", "engram_table_bytes"])
def test_set_changes_exactly_the_named_model_field(field):
    v = new_value(V41, field)
    if field == "mean_accepted_tokens":
        v = 3.0
    out = apply_overrides([f"model.{field}={v!r}"], hardware=GB300, model=V41)
    assert changed_fields(V41, out["model"]) == {field}
    assert out["hardware"] is GB300


@pytest.mark.parametrize("text, field, value", [
    ("hardware.hbm_bandwidth_bytes_per_s=30e12", "hbm_bandwidth_bytes_per_s", 30e12),
    ("hbm_bandwidth_bytes_per_s=30e12", "hbm_bandwidth_bytes_per_s", 30e12),
    ("hbm_bandwidth=30TB/s", "hbm_bandwidth_bytes_per_s", 30e12),
    ("hardware.hbm_bandwidth=30 TB/s", "hbm_bandwidth_bytes_per_s", 30e12),
    ("nvlink_bandwidth=3.6TB/s", "nvlink_bandwidth_bytes_per_s", 3.6e12),
    ("nvlink_latency=1.7us", "nvlink_latency_s", 1.7e-6),
    ("nvlink_latency=1700ns", "nvlink_latency_s", 1.7e-6),
    ("step_overhead=0.3ms", "step_overhead_s", 0.3e-3),
    ("hbm_capacity=288GB", "hbm_capacity_bytes", 288e9),
    ("host_memory_capacity=1TiB", "host_memory_capacity_bytes", 2.0**40),
    ("fp4_dense=50PFLOP/s", "fp4_dense_flops_per_s", 50e15),       # the unit suffix dropped whole
    ("fp8_dense_flops_per_s=20PFLOPS", "fp8_dense_flops_per_s", 20e15),
    ("gpu_power=1800W", "gpu_power_w", 1800.0),
    ("gpu_power=1.8kW", "gpu_power_w", 1800.0),
    ("price_usd_per_gpu_hour=$3.5", "price_usd_per_gpu_hour", 3.5),
    ("hbm_stream_efficiency=0.9", "hbm_stream_efficiency", 0.9),
])
def test_unit_aware_values(text, field, value):
    assert getattr(GB300, field) != pytest.approx(value)
    out = apply_overrides([text], hardware=GB300, model=V41)["hardware"]
    assert getattr(out, field) == pytest.approx(value, rel=1e-12)
    assert changed_fields(GB300, out) == {field}


def test_model_unit_forms_and_order():
    out = apply_overrides(["max_context_tokens=2Mtokens", "model.mean_accepted_tokens=3"], hardware=GB300, model=V41)
    # token counts take K = 1024 and M = 1024^2 everywhere (rubinperf.units): 2M tokens = 2,097,152
    assert out["model"].max_context_tokens == 2 * 1024 ** 2 and out["model"].mean_accepted_tokens == 3.0
    later = apply_overrides(["hbm_bandwidth=10TB/s", "hbm_bandwidth=12TB/s"], hardware=GB300)["hardware"]
    assert later.hbm_bandwidth_bytes_per_s == 12e12      # applied in order: the last one wins


@pytest.mark.parametrize("text, words", [
    ("hbm_bandwith=30TB/s", ["unknown field", "hbm_bandwidth_bytes_per_s"]),     # typo: close matches listed
    ("hardware.nvlink_bandwdth=1TB/s", ["unknown field", "nvlink_bandwidth_bytes_per_s"]),
    ("latency=1us", ["unknown field", "nvlink_latency_s"]),
    ("compute_efficiency=0.5", ["unknown field", "mma_compute_efficiency"]),
    ("hbm_bandwidth=30GHz", ["hbm_bandwidth_bytes_per_s", "GHz", "B/s"]),           # bad unit: the units it takes
    ("nvlink_latency=2TB/s", ["nvlink_latency_s", "TB/s", "expected s"]),
    ("hbm_capacity=288GB/s", ["hbm_capacity_bytes", "expected B"]),
    ("hbm_bandwidth=fast", ["hbm_bandwidth_bytes_per_s", "expected a number"]),     # wrong type
    ("gpus_per_tray=2.5", ["gpus_per_tray", "integer"]),
    ("preview=maybe", ["preview", "true or false"]),
    ("hbm_stream_efficiency=1.5", ["hbm_stream_efficiency", "at most 1.0"]),                       # out of range
    ("hbm_bandwidth=-1TB/s", ["hbm_bandwidth_bytes_per_s", "positive"]),
    ("gpus_per_tray=144", ["gpus_per_tray", "nvlink_domain_size"]),                  # cross-field check
    ("foo.hbm_bandwidth=1", ["unknown spec 'foo'", "hardware"]),
    ("hbm_bandwidth", ["expected key=value"]),
    ("dense_flops_per_s=1", ["unknown field", "close: ", "_dense_flops_per_s"]),
])
def test_bad_override_is_a_spec_error(text, words):
    with pytest.raises(SpecError) as err:
        apply_overrides([text], hardware=GB300, model=V41)
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


COMMANDS = [
    ("estimate", "-l", "dep32", "-H", "gb300-nvl72", "--json"),
    ("kernel", "gemm", "--m", "16", "--n", "4096", "--k", "4096", "--json"),
    ("explain", "gemm", "--m", "16", "--n", "4096", "--k", "4096", "--json"),
    ("explain", "megamoe", "--json"),
    ("sensitivity", "--json"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("text, culprit", [
    ("hbm_bandwith=30TB/s", "close: hbm_bandwidth_bytes_per_s"),
    ("hbm_bandwidth=30GHz", "B/s"),
    ("gpus_per_tray=2.5", "integer"),
])
def test_every_spec_command_fails_in_one_line(cli, command, text, culprit):
    r = cli(*command, "--set", text)
    assert r.code == 2, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0] and "Traceback" not in r.err, r.err


def test_set_moves_results_as_the_elasticity_predicts(cli):
    """A 2% change of a field moves the step time by (1.02)^elasticity, to second order."""
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.analysis.sensitivity import sensitivity

    pytest.importorskip("sympy")
    lay = parse_layout("dep32")
    el = {r["parameter"]: r["elasticity"] for r in sensitivity(V41, GB300, lay, make_point(V41, GB300, lay))}
    base = cli("estimate", "-l", "dep32", "-H", "gb300-nvl72", "--json").json()[0]["step_time_ms"]
    cases = [("hbm_bandwidth", "hbm_bandwidth_bytes_per_s", f"{GB300.hbm_bandwidth_bytes_per_s * 1.02 / 1e12!r}TB/s"),
             ("kernel_launch_graph_s", "kernel_launch_graph_s", repr(GB300.kernel_launch_graph_s * 1.02)),
             ("hardware.nvlink_latency", "nvlink_latency_s", f"{GB300.nvlink_latency_s * 1.02 * 1e6!r}us"),
             ("bf16_dense", "bf16_dense_flops_per_s", f"{GB300.bf16_dense_flops_per_s * 1.02 / 1e15!r}PFLOP/s")]
    for key, field, value in cases:
        r = cli("estimate", "-l", "dep32", "-H", "gb300-nvl72", "--json", "--set", f"{key}={value}")
        assert r.code == 0, r
        moved = r.json()[0]["step_time_ms"] / base
        predicted = 1.02 ** el[field]
        assert math.log(moved) == pytest.approx(math.log(predicted), rel=2e-2, abs=1e-6), (
            f"--set {key}: step time x{moved:.6f}, elasticity {el[field]:+.4f} predicts x{predicted:.6f}")
        if el[field]:
            assert (moved - 1) * el[field] > 0, f"--set {key} moved the step the wrong way"


def test_set_applies_to_explain_and_sensitivity(cli):
    base = cli("explain", "megamoe", "--json").json()
    # MegaMoE's memory term is its weight stream at the slower of the HBM rate and its Little's-law rate (bytes in
    # flight / megamoe_stream_latency_s): twice the one and half the other halve it
    half = GB300.megamoe_stream_latency_s / 2
    faster = cli("explain", "megamoe", "--json", "--set", "hbm_bandwidth=16TB/s", "--set",
                 f"megamoe_stream_latency_s={half!r}").json()
    assert faster["symbols"]["hbm_bandwidth_bytes_per_s"] == 16e12
    assert faster["terms"]["memory_s"]["value"] == pytest.approx(base["terms"]["memory_s"]["value"] / 2, rel=1e-12)
    assert faster["terms"]["flops"]["value"] == base["terms"]["flops"]["value"]
    sens = cli("sensitivity", "--json", "--set", "hardware.hbm_bandwidth_bytes_per_s=16e12").json()
    hbm = next(r for r in sens if r["parameter"] == "hbm_bandwidth_bytes_per_s")
    assert hbm["value"] == 16e12
    k = cli("kernel", "copy", "--bytes", "1e9", "--json", "--set", "hbm_bandwidth=16TB/s").json()
    k0 = cli("kernel", "copy", "--bytes", "1e9", "--json").json()
    assert k["memory_ms"] == pytest.approx(k0["memory_ms"] * GB300.hbm_bandwidth_bytes_per_s / 16e12, rel=1e-12)


def test_kv_cache_precision_sets_the_entry_and_the_capacity():
    from rubinperf.specs.model import load_model
    from rubinperf.step.capacity import kv_bytes_per_token

    v41 = load_model("deepseek-v4.1-flash")
    assert (v41.kv_cache_dtype, v41.cache_entry_bytes) == ("fp4", 288)
    # FP4: 3 x (288 + 68) / 2 + (288 + 68) = 890 B per token (the posts' figure); FP8: 3 x (528 + 68) / 2 + 596 = 1,490
    assert kv_bytes_per_token(v41) == 890
    fp8 = apply_overrides(["model.kv_cache_dtype=fp8"], model=v41)["model"]
    assert fp8.cache_entry_bytes == 528 and kv_bytes_per_token(fp8) == 1490
    # MLA and GQA caches: the values at the format's bits. DeepSeek-V3 FP8: 512 + 64 latent values at one byte;
    # Llama 3.1 70B FP8: K and V of 8 heads x 128 at one byte; FP4: half of that
    v3 = apply_overrides(["model.kv_cache_dtype=fp8"], model=load_model("deepseek-v3"))["model"]
    assert v3.cache_entry_bytes == 576 and kv_bytes_per_token(v3) == 61 * 576
    llama = load_model("llama-3.1-70b")
    assert llama.cache_entry_bytes == 4096   # as stated, BF16
    for fmt, want in (("fp8", 2048), ("fp4", 1024)):
        assert apply_overrides([f"model.kv_cache_dtype={fmt}"], model=llama)["model"].cache_entry_bytes == want


@pytest.mark.parametrize("setting, why", [
    ("model.kv_cache_dtype=bf16", "expected one of its listed kv_cache_formats (fp8, fp4)"),
    ("model.kv_cache_dtype=fp9", "expected one of fp4"),
    ("model.kv_entry_bytes=300", "set kv_cache_dtype empty to give kv_entry_bytes instead"),
    ("stack.attention_mma_dtype=int8", "attention.attention_mma_dtype: expected one of"),
])
def test_attention_precisions_reject_what_cannot_be_stored(setting, why):
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform

    with pytest.raises(SpecError, match=re.escape(why)):
        apply_overrides([setting], model=load_model("deepseek-v4.1-flash"), hardware=load_platform("gb300-nvl72"))
