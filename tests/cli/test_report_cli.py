"""`rubinperf report`, the `--save-dir` bundle and `--csv` on every table command.

The report's figures are read back against the core's records (compare --json, validation/published.toml, the
spec files' sources), the bundle's files against the run (its CSV against its JSON, its TOML specs loaded again),
and the refusals (a FIFO, a file where the directory should be) leave nothing behind.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import os
import resource
import subprocess
import sys
import tomllib

import pytest

from conftest import REPO

FAST = ["-l", "tp8", "-l", "dep32", "--max-batch", "256"]


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    """The default report, written by a fresh process (its CPU time measured), and the bundle of the same run."""
    d = tmp_path_factory.mktemp("rep")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = subprocess.run([sys.executable, "-m", "rubinperf", "report", "-o", str(d / "r.html")],
                         capture_output=True, text=True, cwd=d)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert got.returncode == 0, got.stderr
    return d, got, cpu


def test_report_writes_one_file_within_two_seconds(report_run):
    d, got, cpu = report_run
    assert got.stdout == f"wrote {d / 'r.html'}\n"
    assert sorted(p.name for p in d.iterdir()) == ["r.html"]
    assert cpu <= 2.0, f"rubinperf report took {cpu:.2f} s of CPU"


def test_report_holds_the_compare_figures_published_points_targets_and_command(report_run, cli):
    from rubinperf import __version__
    from rubinperf.units import fmt_num

    d, _, _ = report_run
    text = (d / "r.html").read_text(encoding="utf-8")
    got = cli("compare", "--json")
    assert got.code == 0
    for r in json.loads(got.out):   # every compared figure, as the core computed it
        if r["reachable"]:
            assert f"<td>{fmt_num(r['tokens_per_s_per_gpu'])}</td>" in text, r["metric"]
    points = tomllib.loads((REPO / "validation" / "published.toml").read_text())["point"]
    shown = [p for p in points if p["metric"] in ("throughput_at_interactivity", "peak_throughput")
             and p["hardware"] in ("gb300-nvl72", "vr-nvl72") and p.get("workload") == "agentx"]
    assert len(shown) == 3
    for p in shown:
        assert html.escape(p["source"]) in text
    for t in ("196 tok/s/user", "387 tok/s/user"):
        assert t in text
    assert "rubinperf report -o r.html" in text and str(d) not in text    # the command, without this machine's folders
    assert f"rubinperf {__version__}" in text
    for section in ("headline", "ratios", "compare", "money", "serving", "validation", "frontier", "step",
                    "sensitivity", "sources", "run"):
        assert f'<section id="{section}">' in text
    assert 'id="preview"' in text and "vllm-rubin-nov2026: measured only in a preview post" in text


def test_report_headline_serving_and_validation_are_the_cores_records(report_run, cli):
    from rubinperf.units import fmt_num, fmt_time

    d, _, _ = report_run
    text = html.unescape((d / "r.html").read_text(encoding="utf-8"))
    head = text[text.index('<section id="headline">'):text.index("</section>", text.index('<section id="headline">'))]
    compared = json.loads(cli("compare", "--json").out)
    for r in compared:
        if r["hardware"] == "vr-nvl72" and r["ratio"] is not None:
            assert f'<span class="big">{r["ratio"]:.2f}×</span>' in head, r["metric"]
            key = "tokens_per_s_per_user" if r["metric"] == "single_user" else "tokens_per_s_per_gpu"
            assert f"vr-nvl72 {fmt_num(r[key])}" in head
    assert "gb300-nvl72's DEP layouts top out at" in head and re.search(r"so here it runs tp4 × \d+", head)
    for hw in ("gb300-nvl72", "vr-nvl72"):   # the aggregated engine's percentiles, as `rubinperf serve` prints them
        served = json.loads(cli("serve", "-H", hw, "-l", "tp2", "-c", "64", "--json").out)[0]
        for m in ("ttft", "tpot"):
            for stat in ("mean", "median", "p90", "p99"):
                assert fmt_time(served[f"{stat}_{m}_ms"] / 1e3) in text
    assert "Validation: not run for this report" in text        # validate takes seconds: on request only
    assert "$2.65 per GPU-hour" in text and "$3.90 per GPU-hour" in text and "GPU rent only" in text


def test_report_validate_counts_what_validate_counts(tmp_path, cli, predictions_reused):
    got = cli("validate", "--json")
    records = json.loads(got.out)
    out = tmp_path / "r.html"
    assert cli("report", "-o", str(out), "-q", *FAST, "--validate").code == 0
    text = out.read_text(encoding="utf-8")
    assert f"Validation: {sum(r['in_band'] for r in records)} of {len(records)} published points in band" in text
    for r in records:
        assert r["id"] in text


def test_report_summarises_validate_json_files(tmp_path, cli):
    points = tmp_path / "v.json"
    points.write_text(json.dumps([{"id": "p1", "hardware": "x", "published": 1.0, "predicted": 1.3, "ratio": 1.3,
                                   "band": [0.8, 1.2], "in_band": False},
                                  {"id": "p2", "hardware": "x", "published": 1.0, "predicted": 1.0, "ratio": 1.0,
                                   "band": [0.8, 1.2], "in_band": True}]))
    ledger = tmp_path / "l.json"
    ledger.write_text(json.dumps({"families": [{"family": "steps", "verdict": "tight: half of 9 rows within 3%"}],
                                  "coverage": []}))
    out = tmp_path / "r.html"
    got = cli("report", "-o", str(out), "-q", *FAST, "--validation", str(points), "--validation", str(ledger))
    assert got.code == 0, got.err
    text = out.read_text(encoding="utf-8")
    assert "Validation: 1 of 2 published points in band" in text and "<b>steps</b>: tight" in text
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    got = cli("report", "-o", str(out), "-q", "--validation", str(bad))
    assert got.code == 2 and got.err.count("\n") == 1 and "--validation" in got.err


def test_report_names_the_source_of_every_spec_table_it_read(report_run):
    d, _, _ = report_run
    text = (d / "r.html").read_text(encoding="utf-8")
    files = [REPO / "hardware" / "gb300-nvl72.toml", REPO / "hardware" / "vr-nvl72.toml",
             REPO / "stacks" / "vllm-gb300-oct2026.toml", REPO / "stacks" / "vllm-rubin-nov2026.toml",
             REPO / "models" / "deepseek-v4.1-flash.toml", REPO / "examples" / "agentx.toml"]
    checked = 0
    for f in files:
        for section, table in tomllib.loads(f.read_text()).items():
            if isinstance(table, dict) and "source" in table:
                assert html.escape(table["source"]) in text, (f.name, section)
                checked += 1
    assert checked >= 30


def test_save_dir_writes_the_bundle_and_its_specs_load_back(tmp_path, cli):
    from rubinperf.specs.hardware import load_hardware
    from rubinperf.specs.stack import load_platform

    out = tmp_path / "bundle"
    got = cli("report", "-o", str(tmp_path / "r.html"), "-q", "--save-dir", str(out),
              "--set", "vr-nvl72:hbm_bandwidth=30TB/s")
    assert got.code == 0, got.err
    names = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    for n in ("pareto.csv", "pareto.json", "compare.csv", "compare.json", "estimate.csv", "sensitivity.json",
              "frontier.svg", "report.html", "command.txt", "versions.json", "README.txt",
              "specs/hardware-vr-nvl72.toml", "specs/stack-vllm-rubin-nov2026.toml", "specs/workload-agentx.toml"):
        assert n in names, n
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary directory left
    assert (out / "command.txt").read_text().startswith("rubinperf report -o ")
    assert "vr-nvl72:hbm_bandwidth=30TB/s" in (out / "command.txt").read_text()
    rows = list(csv.DictReader(io.StringIO((out / "pareto.csv").read_text())))
    records = json.loads((out / "pareto.json").read_text())
    assert len(rows) == len(records) > 100
    expect = [r["tokens_per_s_per_gpu"] for r in records]
    assert [float(r["tokens_per_s_per_gpu"]) for r in rows] == pytest.approx(expect)
    vr = load_hardware(str(out / "specs" / "hardware-vr-nvl72.toml"))
    assert vr.hbm_bandwidth_bytes_per_s == 30e12                       # the --set, as the run used it
    import dataclasses

    bundled = load_platform("vr-nvl72").hardware_spec()
    assert dataclasses.replace(vr, hbm_bandwidth_bytes_per_s=bundled.hbm_bandwidth_bytes_per_s, path="") == \
        dataclasses.replace(bundled, path="")                          # and every other field as bundled
    assert json.loads((out / "versions.json").read_text())["rubinperf"]
    readme = (out / "README.txt").read_text()
    for n in names - {"README.txt"}:
        assert n in readme, n


def test_the_bundle_says_when_png_could_not_be_drawn(tmp_path, cli, monkeypatch):
    from rubinperf.render import plots

    monkeypatch.setattr(plots, "has_matplotlib", lambda: False)
    out = tmp_path / "b"
    assert cli("pareto", *FAST, "-q", "--save-dir", str(out)).code == 0
    assert not (out / "frontier.png").exists() and (out / "frontier.svg").exists()
    assert "frontier.png: not written, matplotlib is not installed" in (out / "README.txt").read_text()


@pytest.mark.parametrize("argv, table", [
    (["estimate", "-l", "dep32"], "estimate"),
    (["pareto", *FAST], "pareto"),
    (["compare", *FAST], "compare"),
    (["validate", "--points", str(REPO / "tests" / "cli" / "data" / "one-point.toml")], "validate"),
])
def test_save_dir_of_each_command(tmp_path, cli, argv, table):
    out = tmp_path / "b"
    got = cli(*argv, "-q", "--save-dir", str(out)) if argv[0] != "validate" else cli(*argv, "--save-dir", str(out))
    assert got.code in (0, 1), got.err
    for n in (f"{table}.csv", f"{table}.json", "report.html", "command.txt", "versions.json", "README.txt"):
        assert (out / n).is_file(), n
    assert (out / "command.txt").read_text() == "rubinperf " + " ".join(argv) + (
        " -q" if argv[0] != "validate" else "") + f" --save-dir {out}\n"
    assert list((out / "specs").glob("*.toml"))


def test_save_dir_of_sensitivity_holds_the_tornado(tmp_path, cli):
    out = tmp_path / "b"
    got = cli("sensitivity", "-l", "tp8", "--top", "6", "-q", "--save-dir", str(out))
    assert got.code == 0, got.err
    svg_text = (out / "tornado.svg").read_text()
    assert svg_text.count('class="bar"') == 12          # 6 parameters, two ends each
    records = json.loads((out / "sensitivity.json").read_text())
    assert "sympy's derivative" in (out / "report.html").read_text()
    assert len(records) > 40


def test_save_dir_refuses_what_is_not_a_directory_or_a_regular_file(tmp_path, cli):
    where = tmp_path / "file"
    where.write_text("keep")
    got = cli("estimate", "-q", "--save-dir", str(where))
    assert got.code == 2 and "exists and is not a directory" in got.err and where.read_text() == "keep"
    d = tmp_path / "dir"
    d.mkdir()
    os.mkfifo(d / "report.html")
    got = cli("estimate", "-l", "dep32", "-q", "--save-dir", str(d))
    assert got.code == 2 and "FIFO" in got.err
    assert sorted(p.name for p in d.iterdir()) == ["report.html"]     # refused before any file was written
    got = cli("estimate", "-q", "--save-dir", str(tmp_path / "no" / "such"))
    assert got.code == 2 and "no such directory" in got.err


def test_report_refuses_a_bad_output(tmp_path, cli):
    assert cli("report", "-o", str(tmp_path / "r.txt")).code == 2
    (tmp_path / "r.html").mkdir()
    got = cli("report", "-o", str(tmp_path / "r.html"))
    assert got.code == 2 and "directory" in got.err


TABLE_COMMANDS = [
    ["estimate", "-l", "dep32"], ["pareto", *FAST], ["compare", *FAST],
    ["validate", "--points", str(REPO / "tests" / "cli" / "data" / "one-point.toml")],
    ["list", "hardware"], ["list", "stacks"], ["list", "models"], ["list", "layouts"],
    ["kernel", "gemm", "--m", "16", "--n", "7168", "--k", "2048"], ["kernel", "copy", "--bytes", "4MB"],
]


@pytest.mark.parametrize("argv", TABLE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_csv_is_the_json_records_flat(cli, argv):
    j, c = cli(*argv, "--json"), cli(*argv, "--csv")
    assert j.code == c.code and c.code in (0, 1), c.err
    records = json.loads(j.out)
    records = records if isinstance(records, list) else [records]
    rows = list(csv.DictReader(io.StringIO(c.out)))
    assert len(rows) == len(records) > 0
    flat = list(dict.fromkeys(k for r in records for k, v in r.items() if not isinstance(v, (list, dict))))
    assert list(rows[0]) == flat
    for r, row in zip(records, rows):
        for k in flat:
            v = r.get(k)
            if k not in r:
                assert row[k] == "", k
            if isinstance(v, float):
                assert float(row[k]) == pytest.approx(v), k
            elif v is not None and not isinstance(v, bool):
                assert row[k] == str(v), k


@pytest.mark.parametrize("argv", TABLE_COMMANDS[:3], ids=lambda a: a[0])
def test_csv_and_json_together_is_one_line_error(cli, argv):
    got = cli(*argv, "--csv", "--json")
    assert got.code == 2 and got.err == "rubinperf: error: --json and --csv: choose one output format\n"
