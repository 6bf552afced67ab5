"""Draw the README's figures (docs/*.png) and write beside each the data it plots (docs/*.json).

    python scripts/make_docs_figures.py          # needs the plot extra: pip install '.[plot]'

Each figure is one rubinperf command with `--plot`. The JSON beside it holds what that figure
draws, read from the same command's `--json` records (rounded to 6 significant digits), and the
SHA-256 of the PNG written with it. tests/package/test_docs_figures.py recomputes the data without
matplotlib and fails when a figure is stale: when the model, a spec or the command moved its points.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

# name -> the command that draws it (without --plot / --json)
FIGURES = {
    "frontier": ["pareto"],
    "tornado": ["sensitivity", "--top", "12"],
}


def _round(x):
    """6 significant digits: the figures' data, robust to the last bits of another libm."""
    return float(f"{x:.6g}") if isinstance(x, float) else x


def run_json(args: list[str]) -> list[dict]:
    """The command's --json records, from a fresh process (as a user runs it)."""
    out = subprocess.run([sys.executable, "-m", "rubinperf", *args, "--json"], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    return json.loads(out)


def frontier_data(records: list[dict]) -> dict:
    """What the frontier figure draws: each rack's frontier (tok/s/user, tok/s/GPU, decode layout),
    the count of points off it, the published points and the caption's assumptions."""
    from rubinperf.render import plots   # no matplotlib at import

    racks = {}
    for hw in plots._racks(records):
        rest, front = plots._series(records, hw)
        racks[hw] = {"off_frontier_points": len(rest),
                     "frontier": [[_round(r["tokens_per_s_per_user"]), _round(r["tokens_per_s_per_gpu"]),
                                   r["decode_layout"]] for r in front]}
    published = [{k: _round(p[k]) for k in ("id", "hardware", "metric", "published", "interactivity")}
                 for p in plots.published_points(records)]
    return {"racks": racks, "published": published, "caption": plots.frontier_assumptions(records)}


def tornado_data(records: list[dict]) -> dict:
    """What the tornado draws: the baseline and, per parameter, the metric at x0.9 and x1.1."""
    first = records[0]
    return {"point": {k: first[k] for k in ("hardware", "model", "layout", "phase", "metric")},
            "baseline": _round(first["metric_value"]),
            "bars": [[r["parameter"], r["group"], _round(r["value"]), _round(r["elasticity"]),
                      _round(r["metric_low"]), _round(r["metric_high"])] for r in records]}


DATA = {"frontier": frontier_data, "tornado": tornado_data}


def dumps(obj, indent: int = 0) -> str:
    """JSON with one line per row: a list of scalars stays on one line (readable diffs)."""
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()) + f"\n{pad}}}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(inner + dumps(v, indent + 1) for v in obj) + f"\n{pad}]"
    return json.dumps(obj, ensure_ascii=False)


def plotted_data(name: str) -> dict:
    """The data figure `name` plots, computed now (no matplotlib needed)."""
    args = FIGURES[name]
    return {"command": "rubinperf " + " ".join(args), "data": DATA[name](run_json(args))}


def main() -> None:
    for name, args in FIGURES.items():
        png = DOCS / f"{name}.png"
        subprocess.run([sys.executable, "-m", "rubinperf", *args, "--plot", str(png), "--quiet"],
                       check=True, cwd=REPO)
        record = plotted_data(name)
        record["png_sha256"] = hashlib.sha256(png.read_bytes()).hexdigest()
        (DOCS / f"{name}.json").write_text(dumps(record) + "\n")
        print(f"wrote {png.relative_to(REPO)} and docs/{name}.json")


if __name__ == "__main__":
    main()
