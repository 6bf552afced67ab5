"""The command line of `rubinperf kernel ...`, `rubinperf list ...` and `--version`.

Numbers are checked against hand derivations on the pinned GB300 (see conftest.PINNED_GB300),
passed to the CLI as a spec file path.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import FP8_B, HARDWARE_NAMES, MODEL_NAMES, REPO

KERNEL_KEYS = {"time_ms", "sol_time_ms", "compute_ms", "memory_ms", "floor_ms", "bound", "flops", "bytes"}


def approx(x):
    return pytest.approx(x, rel=1e-9)


def kernel_json(cli, *argv):
    r = cli("kernel", *argv, "--json")
    assert r.code == 0, r
    assert r.err == ""
    rec = r.json()
    assert isinstance(rec, dict)
    assert KERNEL_KEYS <= set(rec), KERNEL_KEYS - set(rec)
    return rec


# ------------------------------------------------------------------ kernel records against hand numbers


# A lone tensor-core kernel (the default --launch eager) on the pinned GPU pays 4 us of host launch, 2 us of the
# library call's host set-up, 1 us of prologue and one 0.8 us HBM round trip before its work streams: 7.8 us.
# A tensor-core kernel behind others in a stream (do_bench, the default launch) on the pinned GB300: the 2 us stream
# boundary, then (1 load + 1 drain) x 0.8 us of HBM latency and 2000 prologue cycles at 2 GHz
EAGER_US = 2 + 2 * 0.8 + 1


def test_kernel_gemm_json(cli, pinned_gb300_path):
    rec = kernel_json(cli, "gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8",
                      "--hardware", pinned_gb300_path)
    # flops 2 * 16 * 7168 * 2048 = 469,762,048; bytes 14,683,648 weights + 262,152 activations
    assert rec["flops"] == 469_762_048
    assert rec["bytes"] == approx(14_945_800)
    assert rec["launch"] == "eager"
    # SOL: max(469,762,048 / 5e15 = 0.094 us, 14,945,800 / 8e12 = 1.868225 us)
    assert rec["sol_time_ms"] == approx(1.868225e-3)
    # tiles: 16 rows pad to one 32-row tile (x2 the MMA work) x 7168 / 128 = 56 column tiles: 56 CTAs of 160
    # SMs, so compute = 0.0939524 us x 2 / 0.72 / (56 / 160) = 0.745654 us
    assert rec["compute_ms"] == approx(469_762_048 / 5e15 * 2 / 0.72 / (56 / 160) * 1e3)
    # memory 14,945,800 / (8e12 x 0.88) = 2.122983 us; 56 x 131,072 B in flight / 0.8 us = 9.2 TB/s: enough
    assert rec["memory_ms"] == approx(2.12298295454545e-3)
    assert rec["parallelism_ms"] == 0
    assert rec["latency_ms"] == approx(EAGER_US * 1e-3) == approx(rec["floor_ms"])
    assert rec["time_ms"] == approx(2.12298295454545e-3 + EAGER_US * 1e-3)
    assert rec["bound"] == "latency"
    assert rec["hardware"] == "gb300-pinned"
    assert (rec["m"], rec["n"], rec["k"], rec["dtype"]) == (16, 7168, 2048, "fp8")
    # inside a CUDA graph: the 0.5 us boundary less 0.25 us started under the previous kernel (PDL) + 2.6 us of fill
    graph = kernel_json(cli, "gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8",
                        "--hardware", pinned_gb300_path, "--launch", "graph")
    assert graph["latency_ms"] == approx(2.85e-3)
    assert graph["time_ms"] == approx(2.12298295454545e-3 + 2.85e-3)
    # alone after a synchronisation: 4 us + 2 us of the library call's host set-up + 2.6 us
    cold = kernel_json(cli, "gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8",
                       "--hardware", pinned_gb300_path, "--launch", "cold")
    assert cold["latency_ms"] == approx(8.6e-3)
    # back to back from the host: 3 + 2 us of host dispatch per call, under the 6.7 us the GPU takes
    stream = kernel_json(cli, "gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8",
                         "--hardware", pinned_gb300_path, "--launch", "stream")
    assert stream["time_ms"] == approx(rec["time_ms"])


def test_kernel_gemm_compute_bound_bf16(cli, pinned_gb300_path):
    rec = kernel_json(cli, "gemm", "--m", "4096", "--n", "4096", "--k", "4096", "-H", pinned_gb300_path)
    assert rec["flops"] == 137_438_953_472          # 2 * 4096^3, default dtype bf16
    assert rec["bytes"] == 100_663_296              # 3 * 4096^2 * 2
    assert rec["sol_time_ms"] == approx(137_438_953_472 / 2.5e15 * 1e3)   # 54.976 us
    # 4096 CTAs in 26 waves of 160 SMs: busy 4096 / 4160 of the time
    assert rec["time_ms"] == approx((137_438_953_472 / 2.5e15 / 0.72 * 4160 / 4096 + EAGER_US * 1e-6) * 1e3)
    assert rec["bound"] == "compute"


def test_kernel_grouped_gemm_json(cli, pinned_gb300_path):
    rec = kernel_json(cli, "grouped-gemm", "--tokens", "768", "--groups", "256", "--n", "4096", "--k", "7168",
                      "--dtype", "fp8", "--hardware", pinned_gb300_path)
    # touched = 256 (1 - (255/256)^768) = 256 * (1 - 0.0494954428) = 243.3291666
    touched = 243.3291666475
    assert rec["experts_touched"] == approx(touched)
    assert rec["flops"] == 45_097_156_608          # 2 * 768 * 4096 * 7168
    # weights 243.329 experts * 29,360,128 * (1 + 1/4096); in 768*7168 FP8 = 5,506,368; out 768*4096*2 = 6,291,456
    nbytes = touched * 29_360_128 * FP8_B + 5_506_368 + 6_291_456
    assert rec["bytes"] == approx(nbytes)
    assert rec["sol_time_ms"] == approx(nbytes / 8e12 * 1e3)              # memory bound: 0.8947 ms
    assert rec["memory_ms"] == approx(nbytes / 8e12 / 0.88 * 1e3)
    assert rec["time_ms"] == approx(nbytes / 8e12 / 0.88 * 1e3 + EAGER_US * 1e-3)
    assert rec["bound"] == "memory"
    # 768 / 243.33 = 3.156 rows per expert pad to 32 (x 10.14 the MMA work); 243.33 x 32 = 7786.5 CTAs
    # in 49 waves of 160 SMs
    ctas = touched * 32
    assert rec["compute_ms"] == approx(45_097_156_608 / 5e15 * (32 / (768 / touched)) / 0.72
                                       / (ctas / (49 * 160)) * 1e3)


def test_kernel_grouped_gemm_fp4_default_one_row(cli, pinned_gb300_path):
    rec = kernel_json(cli, "grouped-gemm", "--tokens", "1", "--groups", "3", "--n", "64", "--k", "32",
                      "-H", pinned_gb300_path)
    assert rec["dtype"] == "fp4"
    assert rec["experts_touched"] == 1.0
    # one expert of 64*32 FP4 values = 2048 * 0.53125 = 1088 B; in 32 FP8 = 32.0078125 B; out 64*2 = 128 B
    assert rec["weight_bytes"] == approx(1088)
    assert rec["bytes"] == approx(1088 + 32 * FP8_B + 128)
    assert rec["flops"] == 2 * 64 * 32
    assert rec["bound"] == "latency"


def test_kernel_attention_decode_gqa(cli, pinned_gb300_path):
    rec = kernel_json(cli, "attention", "--batch", "8", "--heads", "64", "--kv-heads", "8", "--q-len", "1",
                      "--kv-len", "32768", "--head-dim", "128", "--hardware", pinned_gb300_path)
    # flops 2 * 8 * 64 * 32768 * 256 = 8,589,934,592; KV 8 * 8 * 32768 * 256 * 2 = 1 GiB; Q + O 262,144 B
    assert rec["flops"] == 8_589_934_592
    assert rec["kv_bytes"] == 1_073_741_824
    assert rec["bytes"] == 1_073_741_824 + 262_144
    assert rec["sol_time_ms"] == approx(1_074_003_968 / 8e12 * 1e3)       # 134.25 us
    assert rec["compute_ms"] == approx(8_589_934_592 / 2.5e15 / 0.6 * 1e3)  # attention at 0.6 of BF16
    # 8 sequences x 8 KV heads = 64 (sequence, KV head) groups on 160 SMs: the KV is split over CTAs and a reduction
    # kernel follows, enqueued by the library: a 2 us stream boundary + (2 loads + 1 drain) x 0.8 us = 4.4 us
    assert rec["time_ms"] == approx(1_074_003_968 / 8e12 / 0.88 * 1e3 + (EAGER_US + 4.4) * 1e-3)
    assert rec["bound"] == "memory"
    assert rec["kv_heads"] == 8


def test_kernel_attention_gqa_flag_cuts_kv(cli, pinned_gb300_path):
    base = ["--batch", "2", "--heads", "32", "--q-len", "1", "--kv-len", "4096", "--head-dim", "128", "-H", pinned_gb300_path]
    mha = kernel_json(cli, "attention", *base)
    gqa = kernel_json(cli, "attention", *base, "--kv-heads", "4")
    assert mha["kv_bytes"] == 8 * gqa["kv_bytes"] == 8 * (2 * 4 * 4096 * 256 * 2)
    assert mha["flops"] == gqa["flops"]


def test_kernel_attention_causal_prefill(cli, pinned_gb300_path):
    rec = kernel_json(cli, "attention", "--batch", "1", "--heads", "16", "--q-len", "4096", "--kv-len", "4096",
                      "--head-dim", "128", "--causal", "-H", pinned_gb300_path)
    # mean attended (4096 + 1) / 2 = 2048.5: flops 2 * 16 * 4096 * 2048.5 * 256 = 68,736,253,952
    assert rec["flops"] == approx(68_736_253_952)
    assert rec["bytes"] == 67_108_864
    assert rec["sol_time_ms"] == approx(68_736_253_952 / 2.5e15 * 1e3)
    # The kernel computes 2048.5 + 127 / 2 = 2112 keys a query (its diagonal's key blocks in full): its compute is
    # that of 2 * 16 * 4096 * 2112 * 256 = 70,866,960,384 FLOPs.
    # Causal tiles: 16 heads x 4096 / 128 = 512 CTAs on 160 SMs; the last tile of a head computes 128 x 4096
    # of the 16 x 4096 x 2112 query-key pairs (share c = 0.003788); more CTAs than SMs,
    # so the time is max(160 c, 1 + wave_quantization (1.0 pinned) x 160 c) = 1.606 x the evenly spread work.
    c = 128 * 4096 / (16 * 4096 * 2112)
    assert rec["compute_ms"] == approx(70_866_960_384 / 2.5e15 / 0.6 * (1 + 160 * c) * 1e3)
    assert rec["bound"] == "compute"
    assert rec["causal"] is True
    no_mask = kernel_json(cli, "attention", "--batch", "1", "--heads", "16", "--q-len", "4096", "--kv-len", "4096",
                          "--head-dim", "128", "-H", pinned_gb300_path)
    assert no_mask["flops"] == 2 * 16 * 4096 * 4096 * 256


def test_kernel_copy_json(cli, pinned_gb300_path):
    rec = kernel_json(cli, "copy", "--bytes", "1e9", "--hardware", pinned_gb300_path)
    assert rec["flops"] == 0
    assert rec["bytes"] == 2e9                       # read once + written once
    assert rec["sol_time_ms"] == approx(0.25)        # 2e9 / 8e12 s
    assert rec["memory_ms"] == approx(0.25 / 0.88)
    assert rec["time_ms"] == approx(0.25 / 0.88 + (EAGER_US - 1) * 1e-3)  # no tensor-core prologue
    assert rec["bound"] == "memory"


def test_kernel_launch_mode_is_checked(cli):
    r = cli("kernel", "copy", "--bytes", "1e6", "--launch", "async")
    assert r.code == 2 and r.err.count("\n") == 1 and "--launch" in r.err


@pytest.mark.parametrize("hw", HARDWARE_NAMES)
def test_kernel_on_every_bundled_hardware(cli, hw, hardware_by_name):
    rec = kernel_json(cli, "copy", "--bytes", "4e9", "--hardware", hw)
    spec = hardware_by_name[hw]
    assert rec["hardware"] == hw
    assert rec["sol_time_ms"] == approx(8e9 / spec.hbm_bandwidth_bytes_per_s * 1e3)
    assert rec["time_ms"] >= rec["sol_time_ms"]


def test_kernel_default_hardware_is_gb300(cli):
    rec = kernel_json(cli, "gemm", "--m", "1", "--n", "1", "--k", "1")
    assert rec["hardware"] == "gb300-nvl72"


@pytest.mark.parametrize("argv", [
    ["gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8"],
    ["grouped-gemm", "--tokens", "768", "--groups", "256", "--n", "4096", "--k", "7168"],
    ["attention", "--batch", "8", "--heads", "64", "--kv-heads", "8", "--q-len", "1", "--kv-len", "32768", "--head-dim", "128"],
    ["copy", "--bytes", "4e9"],
])
def test_kernel_table_output(cli, argv):
    r = cli("kernel", *argv, "--hardware", "h200")
    assert r.code == 0, r
    assert "speed of light" in r.out and "bound" in r.out and "h200" in r.out
    assert r.err == ""


# ------------------------------------------------------------------ list, version, help


def test_list_hardware(cli):
    r = cli("list", "hardware", "--json")
    assert r.code == 0, r
    recs = r.json()
    assert sorted(x["name"] for x in recs) == sorted(HARDWARE_NAMES)
    vr = next(x for x in recs if x["name"] == "vr-nvl72")
    assert vr["preview"] is True
    table = cli("list", "hardware")
    assert table.code == 0 and all(n in table.out for n in HARDWARE_NAMES)


def test_list_models(cli):
    r = cli("list", "models", "--json")
    assert r.code == 0, r
    recs = r.json()
    assert sorted(x["name"] for x in recs) == sorted(MODEL_NAMES)
    for x in recs:
        assert x["total_params"] > x["active_params"] > 0
    table = cli("list", "models")
    assert table.code == 0 and all(n in table.out for n in MODEL_NAMES)


def test_list_layouts(cli):
    r = cli("list", "layouts", "--json")
    assert r.code == 0, r
    names = [x["name"] for x in r.json()]
    assert {"dep2", "dep32", "tp8"} <= set(names)
    table = cli("list", "layouts")
    assert table.code == 0 and "dep32" in table.out


def test_version(cli):
    from rubinperf import __version__

    r = cli("--version")
    assert r.code == 0
    assert r.out.strip() == f"rubinperf {__version__}"


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["kernel", "--help"], ["kernel", "gemm", "--help"], ["kernel", "grouped-gemm", "--help"],
    ["kernel", "attention", "--help"], ["kernel", "copy", "--help"], ["list", "--help"],
    ["list", "hardware", "--help"], ["list", "models", "--help"], ["list", "layouts", "--help"],
])
def test_help_everywhere(cli, argv):
    r = cli(*argv)
    assert r.code == 0, r
    assert "Usage" in r.out


# ------------------------------------------------------------------ bad input: exit 2, one line, no traceback

GEMM = ["kernel", "gemm", "--m", "16", "--n", "7168", "--k", "2048"]
ATT = ["kernel", "attention", "--batch", "1", "--heads", "8", "--q-len", "1", "--kv-len", "16", "--head-dim", "64"]


def _bad_spec_file(tmp_path, name, edit):
    text = (REPO / "hardware" / "b200.toml").read_text()
    new = edit(text)
    assert new != text
    p = tmp_path / name
    p.write_text(new)
    return str(p)


BAD = {
    "unknown-hardware": lambda tmp: GEMM + ["--hardware", "gb400"],
    "missing-spec-file": lambda tmp: GEMM + ["--hardware", str(tmp / "missing.toml")],
    "spec-dir": lambda tmp: GEMM + ["--hardware", str(tmp) + "/"],
    "malformed-toml": lambda tmp: GEMM + ["--hardware", _bad_spec_file(tmp, "m.toml", lambda t: t.replace("[memory]", "[memory", 1))],
    "zero-rate-spec": lambda tmp: GEMM + ["--hardware", _bad_spec_file(
        tmp, "z.toml", lambda t: t.replace("hbm_stream_efficiency = ", "hbm_stream_efficiency = 0.0 #", 1))],
    "nan-spec": lambda tmp: GEMM + ["--hardware", _bad_spec_file(
        tmp, "n.toml", lambda t: t.replace("hbm_bandwidth_bytes_per_s = ", "hbm_bandwidth_bytes_per_s = nan #", 1))],
    "zero-m": lambda tmp: ["kernel", "gemm", "--m", "0", "--n", "1", "--k", "1"],
    "negative-n": lambda tmp: ["kernel", "gemm", "--m", "1", "--n", "-5", "--k", "1"],
    "negative-k-eq": lambda tmp: ["kernel", "gemm", "--m", "1", "--n", "1", "--k=-3"],
    "zero-tokens": lambda tmp: ["kernel", "grouped-gemm", "--tokens", "0", "--groups", "8", "--n", "1", "--k", "1"],
    "zero-groups": lambda tmp: ["kernel", "grouped-gemm", "--tokens", "8", "--groups", "0", "--n", "1", "--k", "1"],
    "zero-batch": lambda tmp: ["kernel", "attention", "--batch", "0", "--heads", "8", "--q-len", "1", "--kv-len", "16", "--head-dim", "64"],
    "negative-head-dim": lambda tmp: ATT[:-1] + ["-64"],
    "zero-kv-heads": lambda tmp: ATT + ["--kv-heads", "0"],
    "kv-heads-not-divisor": lambda tmp: ATT + ["--kv-heads", "3"],
    "kv-heads-above-heads": lambda tmp: ATT + ["--kv-heads", "16"],
    "q-len-above-kv-len": lambda tmp: ["kernel", "attention", "--batch", "1", "--heads", "8", "--q-len", "17", "--kv-len", "16", "--head-dim", "64"],
    "zero-bytes": lambda tmp: ["kernel", "copy", "--bytes", "0"],
    "negative-bytes": lambda tmp: ["kernel", "copy", "--bytes=-1e9"],
    "nan-bytes": lambda tmp: ["kernel", "copy", "--bytes", "nan"],
    "inf-bytes": lambda tmp: ["kernel", "copy", "--bytes", "inf"],
    "overflow-bytes": lambda tmp: ["kernel", "copy", "--bytes", "1e400"],
    "unknown-dtype": lambda tmp: GEMM + ["--dtype", "fp6"],
    "unknown-dtype-grouped": lambda tmp: ["kernel", "grouped-gemm", "--tokens", "8", "--groups", "8", "--n", "1", "--k", "1", "--dtype", "int8"],
    "missing-option": lambda tmp: ["kernel", "gemm", "--n", "1", "--k", "1"],
    "missing-bytes": lambda tmp: ["kernel", "copy"],
    "non-integer-float": lambda tmp: ["kernel", "gemm", "--m", "1.5", "--n", "1", "--k", "1"],
    "non-integer-word": lambda tmp: ["kernel", "gemm", "--m", "sixteen", "--n", "1", "--k", "1"],
    "non-number-bytes": lambda tmp: ["kernel", "copy", "--bytes", "lots"],
    "option-without-value": lambda tmp: ["kernel", "gemm", "--m", "1", "--n", "1", "--k"],
    "unknown-option": lambda tmp: GEMM + ["--bogus"],
    "unknown-kernel": lambda tmp: ["kernel", "conv2d"],
    "unknown-list": lambda tmp: ["list", "gpus"],
    "unknown-command": lambda tmp: ["frobnicate"],
    "kernel-without-kind": lambda tmp: ["kernel"],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line(cli, tmp_path, case):
    r = cli(*BAD[case](tmp_path))
    assert r.code == 2, r
    assert "Traceback" not in r.err + r.out
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), r
    assert "error" in lines[0]
    assert r.out == ""


def test_bad_spec_file_error_names_file_and_key(cli, tmp_path):
    path = _bad_spec_file(tmp_path, "neg.toml", lambda t: t.replace(
        "nvlink_bandwidth_bytes_per_s = ", "nvlink_bandwidth_bytes_per_s = -1.0 #", 1))
    r = cli(*GEMM, "--hardware", path)
    assert r.code == 2
    assert path in r.err and "nvlink.nvlink_bandwidth_bytes_per_s" in r.err


def test_unknown_hardware_message_lists_names(cli):
    r = cli(*GEMM, "--hardware", "gb400")
    assert "gb400" in r.err and "vr-nvl72" in r.err


# ------------------------------------------------------------------ a real process


def _run(*argv):
    return subprocess.run([sys.executable, "-m", "rubinperf", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_subprocess_kernel_and_errors(pinned_gb300_path):
    p = _run("kernel", "gemm", "--m", "16", "--n", "7168", "--k", "2048", "--dtype", "fp8",
             "--hardware", pinned_gb300_path, "--json")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert KERNEL_KEYS <= set(rec)
    assert rec["flops"] == 469_762_048
    assert rec["time_ms"] == approx(2.12298295454545e-3 + EAGER_US * 1e-3)

    p = _run("kernel", "gemm", "--m", "0", "--n", "1", "--k", "1")
    assert p.returncode == 2
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr

    p = _run("kernel", "copy", "--bytes", "1e9", "--hardware", str(REPO / "no" / "such.toml"))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr

    p = _run("--version")
    assert p.returncode == 0 and p.stdout.startswith("rubinperf ")


def test_subprocess_list_models_json():
    p = _run("list", "models", "--json")
    assert p.returncode == 0, p.stderr
    recs = json.loads(p.stdout)
    assert {r["name"] for r in recs} == set(MODEL_NAMES)
    assert all(isinstance(r["total_params"], int) and isinstance(r["active_params"], int) for r in recs)
