"""The HTML report: one self-contained file (inline CSS and SVG; no script, font or image fetched at view
time) that holds what a run found and where its inputs come from (presentation only).

`report_html(sections)` writes the sections it is given, in this order: the frontier (chart and table),
the compare table, the step (its table and kernel chart), the sensitivity tornado, validation, the
sources of every spec field the run read, and the run itself (the exact command line and the
versions). The records come from the core (`rubinperf.serving.pareto`, `rubinperf.step.records`,
`rubinperf.analysis`); the charts from `rubinperf.render.svg`. Nothing here computes a formula.

The page fits a phone: tables scroll inside their own box, charts scale to the width.
"""

from __future__ import annotations

import math
import re
from html import escape

from rubinperf.render import svg
from rubinperf.units import fmt_num, fmt_pct, fmt_time, fmt_tokens, si

CSS = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:#fff;color:#1b1b1b;font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
main{max-width:1120px;margin:0 auto;padding:12px 14px 40px}
h1{font-size:1.45em;margin:.4em 0 .1em}
.sub{margin:0 0 .3em;color:#333}
h2{font-size:1.2em;margin:1.6em 0 .4em;border-bottom:1px solid #ccc;padding-bottom:.15em}
h3{font-size:1.02em;margin:1.1em 0 .3em}
p,li{overflow-wrap:anywhere}
nav ul{padding-left:1.2em;margin:.3em 0}
figure{margin:.6em 0 1em}
figcaption{font-size:.86em;color:#444;margin-top:.3em;overflow-wrap:anywhere}
svg.chart{display:block;width:100%;height:auto;max-width:100%}
.scroll{overflow-x:auto;max-width:100%;margin:.4em 0 1em;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;font-size:.84em}
th,td{border-bottom:1px solid #e2e2e2;padding:3px 8px;text-align:right;vertical-align:top;white-space:nowrap}
th{background:#f3f3f3;font-weight:600}
td.l,th.l{text-align:left}
td.w{white-space:normal;min-width:14em;max-width:40em;text-align:left}
.legend{list-style:none;padding:0;margin:.3em 0;font-size:.86em}
.legend li{display:inline-block;margin:0 1em .2em 0}
.sw{display:inline-block;width:.9em;height:.9em;vertical-align:-.1em;margin-right:.3em;border-radius:2px}
pre,code{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere}
.note{color:#555;font-size:.88em}
.miss{color:#b00020;font-weight:600}
svg.chart.narrow{display:none}
@media (max-width:600px){svg.chart.wide{display:none}svg.chart.narrow{display:block}h1{font-size:1.2em}
body{font-size:14.5px}.fb{display:none}}
.banner{background:#fff4ce;border:1px solid #e0b400;border-radius:6px;padding:6px 10px;margin:.5em 0;font-size:.9em}
.banner ul{margin:.2em 0;padding-left:1.2em}
ul.head{list-style:none;padding:0;margin:.4em 0}
ul.head li{border-left:4px solid #1f77b4;padding:1px 0 1px 9px;margin:0 0 .45em}
ul.head p{margin:.1em 0}
.q{font-weight:600}
.big{font-size:1.4em;font-weight:700;margin:0 .15em}
.band{color:#333;white-space:nowrap}
.band.none,.why{color:#555;font-size:.88em}
.pv{background:#e0b400;color:#000;font-size:.72em;font-weight:700;border-radius:3px;padding:0 4px;text-transform:uppercase;vertical-align:.15em}
details{margin:.3em 0}
summary{cursor:pointer}
"""


def _e(x) -> str:
    return escape(str(x))


def table_html(headers: list, rows: list[list], left: int = 1, wrap: tuple = (), cls: str = "") -> str:
    """A table in its own scrolling box: the first `left` columns left-aligned, columns in `wrap` wrapped."""
    def cell(tag, k, x):
        c = "w" if k in wrap else "l" if k < left else ""
        return f'<{tag}{f" class={chr(34)}{c}{chr(34)}" if c else ""}>{_e(x)}</{tag}>'

    head = "<tr>" + "".join(cell("th", k, h) for k, h in enumerate(headers)) + "</tr>"
    body = "".join("<tr>" + "".join(cell("td", k, x) for k, x in enumerate(r)) + "</tr>" for r in rows)
    return f'<div class="scroll"><table{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>' \
           f"<thead>{head}</thead><tbody>{body}</tbody></table></div>"


def _usd(v) -> str:
    if v is None or not math.isfinite(float(v)):
        return "—"
    return f"${float(v):,.2f}" if float(v) >= 1 else f"${float(v):.3g}"


# ---------------------------------------------------------------- sections


def frontier_section(records: list[dict], published: list[dict], targets, rows: int = 14) -> str:
    from rubinperf.render import plots
    from rubinperf.render.serving import thin

    racks = list(dict.fromkeys(r["hardware"] for r in records))
    chart = "".join(svg.frontier_svg(records, published, targets, plots.X_LABEL, plots.Y_LABEL, plots.layout_labels,
                                     narrow=n).replace('class="chart"', 'class="chart wide"', 1)
                    for n in (False, True))
    legend = "".join(f'<li><span class="sw" style="background:{svg.colour(k)}"></span>{_e(hw)} frontier</li>'
                     for k, hw in enumerate(racks))
    legend += '<li>faint dots: feasible points off the frontier</li><li>dashed: interactivity targets</li>'
    if published:
        legend += "<li>stars and dotted levels: published figures</li>"
    notes = "".join(f"<li>[{n + 1}] {_e(p['hardware'])}: {_e(si(p['published']))} tok/s/GPU"
                    + (f" at {p['interactivity']:g} tok/s/user" if p.get("interactivity") else " (peak)")
                    + f" — {_e(p['source'])}</li>" for n, p in enumerate(published))
    caption = " ".join(plots.frontier_assumptions(records, targets))
    out = ['<section id="frontier"><h2>Pareto frontier</h2>',
           f'<figure>{chart}<figcaption><ul class="legend">{legend}</ul>{_e(caption)}'
           + (f"<ol class=\"note\" style=\"list-style:none;padding:0\">{notes}</ol>" if notes
              else "<p>No published point for this model, workload and these racks.</p>")
           + "</figcaption></figure>"]
    headers = ["decode × batch/rank", "tok/s/user", "tok/s/GPU", "out tok/s/GPU", "step", "bound",
               "prefill GPUs per decode GPU", "TTFT", "$/M in", "$/M out", "$/M all", "tok/s/kW"]
    for hw in racks:
        mine = [r for r in records if r["hardware"] == hw]
        front = [r for r in mine if r["on_frontier"]]
        shown = thin(front, rows)
        body = [[f"{r['decode_layout']} × {fmt_num(r['batch_per_rank'])}", fmt_num(r["tokens_per_s_per_user"]),
                 fmt_num(r["tokens_per_s_per_gpu"]), fmt_num(r.get("output_tokens_per_s_per_gpu")),
                 fmt_time(r["decode_step_ms"] / 1e3), r["decode_bound"], f"{r['prefill_gpus_per_decode_gpu']:.2f}",
                 fmt_time(r["ttft_ms"] / 1e3), _usd(r["usd_per_m_input"]), _usd(r["usd_per_m_output"]),
                 _usd(r["usd_per_m_tokens"]), fmt_num(r["tokens_per_s_per_kw"])] for r in shown]
        feasible = sum(bool(r["feasible"]) for r in mine)
        out.append(f"<h3>{_e(hw)}</h3><p class=\"note\">{len(mine)} points swept, {feasible} feasible, "
                   f"{len(front)} on the frontier" + (f" ({len(shown)} shown)" if len(shown) < len(front) else "")
                   + f"; interactivity statistic: {_e(plots.interactivity_basis(mine))}</p>")
        out.append(table_html(headers, body))
    out.append("</section>")
    return "".join(out)


def _metric_words(r: dict) -> str:
    if r["metric"] == "peak":
        return "peak throughput"
    if r["metric"] == "interactivity":
        return f"at ≥ {fmt_num(r['target_tokens_per_s_per_user'])} tok/s/user"
    return "best single-user speed"


def _band_words(r: dict) -> str:
    """' (2.52×–3.00×)' where the record carries the ratio's band, else ''."""
    from rubinperf.render.manager import band_of

    b = band_of(r, "ratio")
    return f" ({b[0]:.2f}×–{b[1]:.2f}×)" if b else ""


def compare_section(records: list[dict], note: str = "") -> str:
    racks = list(dict.fromkeys(r["hardware"] for r in records))
    if not racks:
        return ""
    headers = ["point", "rack", "stack", "config", "tok/s/GPU", "tok/s/user", "ratio", "$/M all", "tok/s/kW", "bound"]
    body = []
    for r in records:
        if not r["reachable"]:
            body.append([_metric_words(r), r["hardware"], r.get("stack") or "", "unreachable", "—",
                         f"max {fmt_num(r.get('max_tokens_per_s_per_user'))}", "—", "—", "—", "—"])
            continue
        ratio = r.get("ratio")
        body.append([_metric_words(r), r["hardware"], r.get("stack") or "",
                     f"{r['decode_layout']} × {fmt_num(r['batch_per_rank'])} (prefill {r['prefill_layout']})",
                     fmt_num(r["tokens_per_s_per_gpu"]), fmt_num(r["tokens_per_s_per_user"]),
                     "—" if ratio is None else f"{float(ratio):.2f}×" + _band_words(r), _usd(r.get("usd_per_m_tokens")),
                     fmt_num(r.get("tokens_per_s_per_kw")), r.get("decode_bound", "")])
    stat = records[0].get("interactivity_stat") or "mean"
    cap = (f"ratio: against {racks[0]} at the same point (tokens/s per GPU; the single-user row: tokens/s per user). "
           f"Interactivity statistic: {stat}." + (f" {note}" if note else ""))
    return (f'<section id="compare"><h2>Racks compared</h2>{table_html(headers, body, left=4)}'
            f'<p class="note">{_e(cap)}</p></section>')


def step_section(records: list[dict], top: int = 12) -> str:
    headers = ["rack", "layout", "phase", "batch/rank", "context", "step", "SOL", "% roofline", "tok/s/GPU",
               "tok/s/user", "bound"]
    body = [[r["hardware"], r["layout"], r["phase"], fmt_num(r["batch_per_rank"]), fmt_tokens(r["context_tokens"]),
             fmt_time(r["step_time_ms"] / 1e3), fmt_time(r["sol_step_time_ms"] / 1e3),
             fmt_pct(r["fraction_of_roofline"]), fmt_num(r["tokens_per_s_per_gpu"]),
             fmt_num(r["tokens_per_s_per_user"]), r["bound"]] for r in records]
    out = ['<section id="step"><h2>One engine step</h2>', table_html(headers, body, left=3),
           '<p class="note">step = GPU + exposed host; SOL = speed of light; '
           "decode tok/s = accepted tokens (batch × acceptance / step)</p>"]
    for i, r in enumerate(records):
        title = (f"{r['hardware']} {r['layout']} {r['phase']}: batch {fmt_num(r['batch_per_rank'])}/rank, context "
                 f"{fmt_tokens(r['context_tokens'])}, step {fmt_time(r['step_time_ms'] / 1e3)}")
        wide = svg.kernel_bars_svg(r, top=top, gid=f"kernels-{i}").replace('class="chart"', 'class="chart wide"', 1)
        added = sum(b["time_ms"] for b in svg.step_bars(r))
        out.append(f"<h3>{_e(title)}</h3><figure>{wide}{svg.kernel_bars_svg(r, top=top, gid=f'kernels-{i}', narrow=True)}"
                   "<figcaption>time of each op in one step (largest first), coloured by the term that bounds it; "
                   f"the bars add up to the step ({_e(fmt_time(added / 1e3))}): the GPU's ops and the host's time on "
                   "the critical path</figcaption></figure>")
        counted = {id(b) for b in svg.step_bars(r)}
        bh = ["op", "part", "time", "SOL", "% roofline", "share of step", "FLOPs", "bytes", "bound"]
        brows = [[b["kernel"] + ("" if id(b) in counted else " (host, overlaps the GPU: not added)"), b["part"],
                  fmt_time(b["time_ms"] / 1e3), fmt_time(b["sol_time_ms"] / 1e3), fmt_pct(b["fraction_of_roofline"]),
                  fmt_pct(b["share_of_step"]) if id(b) in counted else "—", si(b["flops"], "FLOP"),
                  si(b["bytes"], "B"), b["bound"]] for b in r["breakdown"]]
        out.append(f"<details><summary>every op ({len(brows)})</summary>{table_html(bh, brows, left=2)}</details>")
    out.append("</section>")
    return "".join(out)


def sensitivity_section(groups: list[list[dict]], swing: float, top: int = 12, method: str = "numeric") -> str:
    from rubinperf.render.plots import PARAMETER_LABELS, parameter_label

    def short(name):
        return PARAMETER_LABELS.get(name, name.replace("_", " "))

    out = ['<section id="sensitivity"><h2>Sensitivity</h2>']
    for i, records in enumerate(groups):
        if not records:
            continue
        r0 = records[0]
        value = (fmt_time(r0["metric_value"]) if r0["metric_unit"] == "s"
                 else f"{fmt_num(r0['metric_value'])} {r0['metric_unit']}")
        out.append(f"<h3>{_e(r0['metric_label'])} ({_e(value)}): {_e(r0['model'])} {_e(r0['layout'])} "
                   f"{_e(r0['phase'])} on {_e(r0['hardware'])}</h3>")
        wide = svg.tornado_svg(records, swing, short, top=top, gid=f"tornado-{i}").replace(
            'class="chart"', 'class="chart wide"', 1)
        out.append(f"<figure>{wide}{svg.tornado_svg(records, swing, short, top=top, gid=f'tornado-{i}', narrow=True)}"
                   "<figcaption>"
                   f"the metric with each parameter scaled by {1 - swing:g} and {1 + swing:g}, largest elasticity "
                   "d ln(metric) / d ln(parameter) on top</figcaption></figure>")
        fmt = fmt_time if r0["metric_unit"] == "s" else fmt_num
        rows = [[parameter_label(r["parameter"]), r["group"], value_with_unit(r["value"], r.get("unit", "")),
                 f"{r['elasticity']:+.4f}", fmt(r["metric_low"]), fmt(r["metric_high"]), r["note"] or r["doc"]]
                for r in records if r["elasticity"]][:top]
        out.append(table_html(["parameter", "group", "value", "elasticity (% per %)",
                               f"{r0['metric_label']} at x{1 - swing:g}", f"at x{1 + swing:g}", "note"],
                              rows, left=2, wrap=(6,)))
    how = ("sympy's derivative of the symbolic step" if method == "symbolic" else
           "central differences of the numeric step (whole counts: the arc over the swing); `rubinperf sensitivity` "
           "gives sympy's derivative")
    out.append(f'<p class="note">Elasticities by {how}.</p></section>')
    return "".join(out)


def validation_section(records: list[dict]) -> str:
    hits = sum(bool(r["in_band"]) for r in records)
    headers = ["point", "metric", "rack", "published", "predicted", "ratio", "band", "", "source"]
    body = [[r["id"] + (" (fitted)" if r.get("fitted") else ""), r["metric"], r["hardware"], fmt_num(r["published"]),
             fmt_num(r["predicted"]), "—" if r["ratio"] is None else f"{r['ratio']:.2f}",
             f"{r['band'][0]:.2f}-{r['band'][1]:.2f}", "in band" if r["in_band"] else "MISS",
             r.get("source", "")] for r in records]
    return (f'<section id="validation"><h2>Validation: {hits} of {len(records)} points in band</h2>'
            f"{table_html(headers, body, left=3, wrap=(8,))}"
            '<p class="note">ratio = predicted / published</p></section>')


def sources_section(specs: list[dict]) -> str:
    """`specs`: spec_sources() of each spec the run read."""
    out = ['<section id="sources"><h2>Sources of every spec field</h2>'
           '<p class="note">Each spec the run read, its tables, their fields as used (--set applied) and their '
           "source (open one to read it).</p>"]
    for s in specs:
        rows = [[sec["section"], ", ".join(f"{n} = {v}" for n, v in sec["fields"]), sec["source"]]
                for sec in s["sections"]]
        out.append(f"<details><summary>{_e(s['kind'])} {_e(s['name'])} <span class=\"note\">({_e(s['path'])})"
                   f"</span></summary>{table_html(['table', 'fields', 'source'], rows, left=1, wrap=(1, 2))}</details>")
    out.append("</section>")
    return "".join(out)


def spec_sources(record, kind: str) -> dict:
    """A spec record's tables: each with its fields (name, value as written) and its source."""
    from rubinperf.specs.loader import spec_fields

    sections: dict = {}
    for f in spec_fields(type(record)):
        key = f"{f.metadata['spec']}.{f.metadata['section']}" if "spec" in f.metadata else f.metadata["section"]
        value = getattr(record, f.name)
        text = f"{value:g}" if isinstance(value, float) else str(value)
        sections.setdefault(key, []).append((f.name, text))
    # Tables with a source but no fields of the record's own (a [ranges] table: each assumed field's range)
    ranges = getattr(record, "ranges", None) or {}
    for key in record.sources:
        if key in sections:
            continue
        spec = key.split(".", 1)[0] if "." in key else None
        names = {f.name for f in spec_fields(type(record)) if spec is None or f.metadata.get("spec") == spec}
        sections[key] = [(n, f"{lo:g} to {hi:g}") for n, (lo, hi) in ranges.items() if n in names]
    path = public_path(getattr(record, "path", "") or "")
    stack_path = public_path(getattr(record, "stack_path", "") or "")
    return {"kind": kind, "name": record.name + (f" on {record.stack}" if getattr(record, "stack", None) else ""),
            "path": path + (f"; stack: {stack_path}" if stack_path else ""),
            "sections": [{"section": k, "fields": v, "source": record.sources.get(k, "")} for k, v in sections.items()]}


def public_path(path: str) -> str:
    """A spec file as a reader of the page may name it: a bundled file by its place in rubinperf
    ('hardware/vr-nvl72.toml'), any other by its name alone ('my-rack.toml (a file of the user)'): no
    folder of the machine that wrote the page."""
    if not path:
        return ""
    from pathlib import Path

    from rubinperf.bundled import data_root

    p = Path(path)
    try:
        return str(p.resolve().relative_to(data_root().resolve()))
    except (ValueError, OSError):
        return f"{p.name} (a file of the user)"


_DIRS = re.compile(r"""(^|[\s='"(])(?:~|\.\.?)?/(?:[^\s/'"]+/)*""")


def strip_dirs(text: str) -> str:
    """`text` with the folders of every absolute or ./ path taken off ('-o /tmp/x/r.html' -> '-o r.html'); units
    such as TB/s and URLs are left alone."""
    return _DIRS.sub(lambda m: m.group(1), text)


def value_with_unit(value, unit: str) -> str:
    """A spec value with its unit ('8 TB/s', '300 µs', '0.89'): the unit of its field."""
    if unit == "s":
        return fmt_time(value)
    if unit in ("B/s", "bytes", "FLOP/s", "Hz", "W"):
        return si(value, "B" if unit == "bytes" else unit)
    return f"{fmt_num(value)} {unit}".strip()


def run_section(command: str, versions: dict, limits: list[str]) -> str:
    rows = [[k, v] for k, v in versions.items()]
    lim = "".join(f"<li>{_e(x)}</li>" for x in limits)
    return (f'<section id="run"><h2>This run</h2><p>The command (folders of local paths left out):</p>'
            f'<pre>{_e(strip_dirs(command))}</pre>'
            + (f"<p>Limits applied:</p><ul>{lim}</ul>" if lim else "")
            + f"{table_html(['package', 'version'], rows)}</section>")


SECTION_TITLES = {"headline": "", "ratios": "Where the ratios come from", "compare": "Racks compared",
                  "money": "Cost and power", "serving": "Aggregated serving", "validation": "Validation",
                  "frontier": "Pareto frontier", "step": "One engine step", "sensitivity": "Sensitivity",
                  "sources": "Sources", "run": "This run"}


def report_html(title: str, subtitle: str, parts: dict[str, str]) -> str:
    """The page: `parts` maps a section id (SECTION_TITLES) to its HTML, written in that order; part "banner"
    (the preview banner) and the headline come first, before the contents."""
    order = [k for k in SECTION_TITLES if parts.get(k)]
    nav = "".join(f'<li><a href="#{k}">{SECTION_TITLES[k]}</a></li>' for k in order if SECTION_TITLES[k])
    top = parts.get("banner", "") + parts.get("headline", "")
    head, _, rest = title.partition(": ")   # 'A against B: model, workload' -> the heading and a line under it
    sub = f'<p class="sub">{_e(rest)}</p>' if rest else ""
    body = "".join(parts[k] for k in order if k != "headline")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>{_e(head)}</h1>{sub}{top}"
            f"<p class=\"note\">{_e(strip_dirs(subtitle))}</p>"
            f"<nav><details><summary>Contents</summary><ul>{nav}</ul></details></nav>{body}"
            "</main></body></html>\n")
