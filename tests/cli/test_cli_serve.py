"""`rubinperf serve`: the benchmark's table and JSON on every bundled rack and stack, and its errors."""

from __future__ import annotations

import json

import pytest

from conftest import invoke
from rubinperf.specs.loader import bundled_names as names


@pytest.fixture
def engine_built_once(monkeypatch):
    """rubinperf.serving.aggregated.engine answering a call equal to the test's first one (model, hardware, layout,
    mix and options) with the engine that call built: the table run of a rack and stack times the same engine as its
    --json run did (its records, bands and table are still made afresh)."""
    from rubinperf.serving import aggregated

    real, built = aggregated.engine, []

    def engine(*args, **kwargs):
        for a, k, e in built:
            if len(a) == len(args) and all(x == y for x, y in zip(a, args)) and k == kwargs:
                return e
        e = real(*args, **kwargs)
        built.append((args, kwargs, e))
        return e

    monkeypatch.setattr(aggregated, "engine", engine)
    return built


@pytest.mark.parametrize("stack", names("stack"))
@pytest.mark.parametrize("rack", names("hardware"))
def test_serve_table_and_json_on_every_rack_and_stack(engine_built_once, rack, stack):
    layout = "dep16" if rack.endswith("-cluster") else "tp8"   # 80 GB GPUs hold DeepSeek-V3 over two nodes
    args = ["serve", "-H", rack, "--stack", stack, "-l", layout, "-c", "64", "--isl", "8K", "--osl", "1K"]
    model = ["-m", "deepseek-v3"] if rack.startswith(("h100", "h200", "h800")) else []
    got = invoke(args + model + ["--json"])
    assert got.exit_code == 0, got.output
    (rec,) = json.loads(got.output)
    for key in ("request_throughput_per_s", "output_tokens_per_s", "total_tokens_per_s", "output_tokens_per_s_per_gpu",
                "total_tokens_per_s_per_gpu", *(f"{s}_{m}_ms" for s in ("mean", "median", "p90", "p99")
                                                for m in ("ttft", "tpot", "itl", "e2e"))):
        assert rec[key] > 0
    assert rec["hardware"] == rack and rec["stack"] == stack
    table = invoke(args + model)
    assert table.exit_code == 0, table.output
    assert len(engine_built_once) == 1   # one engine for both runs
    assert "TTFT" in table.output and "E2E latency" in table.output and "req/s" in table.output


def test_serve_curve_prints_one_row_per_concurrency():
    got = invoke(["serve", "-c", "1,2,...,16", "--json"])
    assert got.exit_code == 0, got.output
    assert [r["concurrency"] for r in json.loads(got.output)] == [1, 2, 4, 8, 16]
    table = invoke(["serve", "-c", "1,2,...,16"])
    assert table.exit_code == 0 and "concurrency" in table.output


SERVE_BAD_INPUTS = [["-c", "0"], ["--isl", "0"], ["--random-range-ratio", "2"], ["-l", "tp3"],
                    ["--range-convention", "other"], ["--prefix-hit", "1"], ["-s", "chunked_prefill=3"]]


@pytest.mark.parametrize("args", SERVE_BAD_INPUTS)
def test_serve_bad_input_is_one_line_and_status_2(cli, args):
    r = cli("serve", *args)
    assert r.code == 2, r
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err and r.out == "", r


def test_serve_bad_input_through_the_process_boundary():
    """One bad input through `python -m rubinperf` (the entry point's exit status and stderr): the others run
    in-process, through the same main()."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rubinperf", "serve", *SERVE_BAD_INPUTS[0]], capture_output=True,
                          text=True)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_serve_takes_csv_and_save_dir_like_the_other_table_commands(cli, tmp_path):
    import csv
    import io
    import json

    r = cli("serve", "-c", "16,64", "--csv")
    assert r.code == 0, r
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert [float(x["concurrency"]) for x in rows] == [16.0, 64.0]
    recs = cli("serve", "-c", "16,64", "--json").json()
    assert float(rows[1]["output_tokens_per_s_per_gpu"]) == recs[1]["output_tokens_per_s_per_gpu"]
    out = tmp_path / "run"
    r = cli("serve", "-c", "64", "--save-dir", str(out), "-q")
    assert r.code == 0 and r.out == "", r
    assert json.loads((out / "serve.json").read_text())[0]["concurrency"] == 64
    assert (out / "serve.csv").is_file() and (out / "README.txt").is_file() and (out / "command.txt").is_file()
    assert cli("serve", "--csv", "--json").code == 2
