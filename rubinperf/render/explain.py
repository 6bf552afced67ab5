"""What `explain` and `sensitivity` print: formulas, with their numbers, as text or LaTeX; the elasticity table.

Presentation only: the formulas and their values come from `rubinperf.analysis.symbolic` (the same
definitions the numeric path uses) and `rubinperf.analysis.sensitivity`.
"""

from __future__ import annotations

from rubinperf.render.output import emit_text, print_out
from rubinperf.render.tables import col, table
from rubinperf.units import fmt_num, fmt_pct, fmt_time, si


class _Symbolic:
    """rubinperf.analysis.symbolic (it imports sympy), imported on first use: the sensitivity table needs none of it."""

    def __getattr__(self, name):
        from rubinperf.analysis import symbolic

        return getattr(symbolic, name)


S = _Symbolic()


def _width() -> int:
    import shutil

    return max(80, shutil.get_terminal_size((160, 40)).columns)


# ---------------------------------------------------------------- explain


_time = fmt_time
UNIT_FMT = {"FLOP": lambda v: si(v, "FLOP"), "B": lambda v: si(v, "B"), "s": _time}


def _header(ex) -> list[str]:
    c = ex.context
    if "layout" in c:
        lines = _wrap([f"{ex.kernel}: {c['model']} {c['layout']} {c['phase']} on {c['hardware']}, "
                       f"{c['occurrences']} occurrence(s) per step on one rank"])
        if "formats" in c:
            lines += _wrap([f"formats: {c['formats']}"])
    else:
        shape = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items() if k != "hardware")
        lines = _wrap([f"{ex.kernel} on {c['hardware']} ({shape})"])
    import textwrap

    syms = ", ".join(f"{k}={v:.6g}" for k, v in ex.symbols.items())
    lines += textwrap.wrap(f"symbols (spec fields and shapes) at this point: {syms}", _width(), subsequent_indent="  ")
    lines += textwrap.wrap(ex.rule, _width(), subsequent_indent="  ")
    return lines


def explanation_text(ex, latex: bool = False) -> None:
    """One kernel's or op's formulas (FLOPs, bytes, each time term), each with its numbers substituted."""
    out = ["% " + line for line in _header(ex)] if latex else _header(ex)
    width = _width()
    for key, label, unit in S.COST_TERMS + S.TIME_TERMS:
        if key not in ex.exprs or (ex.exprs[key] == 0 and key not in ("flops", "bytes", "sol_s", "expected_s")):
            continue
        e, v = ex.exprs[key], ex.numbers[key]
        value = UNIT_FMT[unit](v)
        if latex:
            out.append(f"% {label} = {value}")
            out.append(rf"\mathrm{{{key.replace('_', chr(92) + '_')}}} = {S.to_latex(e)} = "
                       rf"{S.to_latex(S.substitute(e, ex.values))} = {v:.6g}")
            continue
        out += ["", f"{label} ({key}) = {value}", _indent(S.to_pretty(e, width - 2))]
        if e.free_symbols:
            out += ["  with the numbers:", _indent(S.to_pretty(S.substitute(e, ex.values), width - 2))]
    n = ex.numbers
    if latex:
        out.append(f"% bound: {ex.bound}; busiest unit: {ex.busiest}")
    else:
        roof = (f"{100 * n['sol_s'] / n['expected_s']:.0f}% of roofline" if n["expected_s"]
                else "no work at this point: it runs no kernel")   # the draft's ops at --draft-tokens 0
        out += [""] + _wrap([f"speed of light {_time(n['sol_s'])}, expected {_time(n['expected_s'])} "
                             f"({roof}); bound: {ex.bound}"
                             + (f", busiest unit: {ex.busiest} " if ex.busiest != ex.bound else " ")
                             + f"(compute {_time(n['compute_s'])}, memory {_time(n['memory_s'])}, parallelism "
                             f"{_time(n['parallelism_s'])}, link {_time(n['comm_s'])}, latency {_time(n['latency_s'])})"])
    emit_text("\n".join(out))


def _wrap(lines: list[str]) -> list[str]:
    """Prose lines wrapped to the terminal at spaces, each continuation indented two more than its line."""
    import textwrap

    out = []
    for line in lines:
        lead = line[:len(line) - len(line.lstrip())]
        out += textwrap.wrap(line, _width(), subsequent_indent=lead + "  ", break_long_words=False,
                             break_on_hyphens=False) or [line]
    return out


def _indent(text: str, pad: str = "  ") -> str:
    return "\n".join(pad + line for line in text.splitlines())


def _fmt_top(k, v):

    return _time(v) if S.STEP_LABELS[k][1] == "s" else fmt_num(v)


def step_text(st) -> None:
    """The step's top-level formulas and a table of its ops' formulas and times."""
    nums, _ = S.step_numbers(st)
    c = st["context"]
    lines = [f"step: {c['model']} {c['layout']} {c['phase']} on {c['hardware']}, batch {c['batch_per_rank']:g}/rank, "
             f"context {c['context_tokens']:g}" + (f", draft tokens {c['draft_tokens']:g}, acceptance {c['acceptance']:g}"
                                                   if "draft_tokens" in c else f", new tokens {c['new_tokens_per_rank']:g}/rank")]
    tidied = S.tidy_all({k: st["top"][k] for k in ("cpu_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user")})
    cpu = S.to_short_str(tidied["cpu_s"])
    lines += [
        f"  step time = GPU + exposed = {_time(nums['gpu_s'])} + {_time(nums['exposed_s'])} = {_time(nums['expected_s'])}",
        f"  GPU = sum of the ops below = {_time(nums['gpu_s'])}; speed of light = sum of their SOL = {_time(nums['sol_s'])}",
        f"  host path = {cpu} = {_time(nums['cpu_s'])} (the slowest rank's scheduler work, then the DP sync, a host "
        "barrier)",
        f"  exposed = max(0, host path - GPU) = {_time(nums['exposed_s'])} under async scheduling (what of the host path "
        "outlasts the GPU step); without it the host path itself",
    ]
    for k in ("tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        lines.append(f"  {S.STEP_LABELS[k][0]} = {S.to_short_str(tidied[k])} = {_fmt_top(k, nums[k])}")
    lines.append("  each kernel: expected = latency + max(compute, memory + parallelism, link) (fused: a share of the "
                 "smaller terms hides); SOL = max(FLOPs/peak, bytes/bandwidth, link bytes/bandwidth)")
    emit_text("\n".join(_wrap(lines)))
    cols = [col("kernel", "left", min_width=14), col("×", drop=3), col("FLOPs per step", "left", min_width=16, fold=True),
            col("bytes per step", "left", min_width=16, fold=True), col("time"), col("SOL", drop=2),
            col("share", drop=1), col("bound", "left", wrap=False)]
    rows = []
    total = nums["expected_s"]
    for ex in sorted(st["ops"], key=lambda x: (x.context.get("part") == "cpu", -x.numbers["expected_s"])):
        n = ex.numbers
        rows.append([ex.kernel, str(ex.context["occurrences"]), S.to_short_str(ex.exprs["flops"]),
                     S.to_short_str(ex.exprs["bytes"]), _time(n["expected_s"]), _time(n["sol_s"]),
                     fmt_pct(n["expected_s"] / total), ex.bound])
    print_out(table("ops of one step on one rank (formulas in the operating-point symbols)", cols, rows,
                                  caption="rubinperf explain OP prints an op's time formulas in full"))
    if "interactivity" in st:
        interactivity_text(st["interactivity"], c)


def interactivity_text(it: dict, c: dict) -> None:
    """The P90 factor over the mean interactivity at the stack's spreads, and at others (nu across, sigma down)."""
    import textwrap

    lines = [f"interactivity per user: mean = acceptance / step; P90 = {it['p90']:.3f} x the mean, P50 = {it['p50']:.3f}, "
             f"P10 = {it['p10']:.3f} (k = {c['draft_tokens']:g}, acceptance {c['acceptance']:g}: a request's tokens per "
             f"step 1 + k f, f ~ Beta with concentration nu = {it['acceptance_concentration']:g}; its step time lognormal "
             f"with log-sd sigma = {it['step_time_spread']:g}); over nu's sourced range "
             f"{it['acceptance_concentration_range'][0]:g}-{it['acceptance_concentration_range'][1]:g} the P90 factor is "
             f"{it['p90_over_the_range'][0]:.3f}-{it['p90_over_the_range'][1]:.3f}"]
    lines = _wrap(lines)
    lines += textwrap.wrap("sources: " + it["source"], _width(), initial_indent="  ", subsequent_indent="    ")
    emit_text("\n".join(lines))
    table_ = it["p90_by_sigma_and_nu"]
    nus = list(next(iter(table_.values())))
    cols = [col("sigma", "left")] + [col(f"nu = {n}") for n in nus]
    rows = [[s] + [f"{v:.3f}" for v in row.values()] for s, row in table_.items()]
    print_out(table("P90 / mean interactivity by the two spreads (this k and acceptance)", cols, rows,
                    caption="rubinperf sensitivity --metric tokens-per-user-p90 ranks them with the step's parameters; "
                            "--set stack.acceptance_concentration=... / stack.step_time_spread=... moves them"))


def step_latex(st) -> None:
    nums, _ = S.step_numbers(st)
    out = [f"% step: {st['context']}"]
    for k, e in S.tidy_all(st["top"]).items():
        out.append(f"% {S.STEP_LABELS[k][0]} = {nums[k]:.6g}")
        out.append(rf"\mathrm{{{k.replace('_', chr(92) + '_')}}} = {S.to_latex(e)}")
    for ex in st["ops"]:
        out.append(f"% {ex.kernel}: expected {ex.numbers['expected_s']:.6g} s, bound {ex.bound}")
        for key in ("flops", "bytes", "expected_s"):
            out.append(rf"\mathrm{{{key.replace('_', chr(92) + '_')}}} = {S.to_latex(ex.exprs[key])}")
    emit_text("\n".join(out))


# ---------------------------------------------------------------- sensitivity


def sensitivity_table(records: list[dict], shown: list[dict], swing: float, show_all: bool, symbolic: bool = False) -> None:
    """The elasticities `shown` (of all `records`), largest first, with the metric at each end of the swing; `symbolic`:
    sympy's derivatives of the symbolic step (else the numeric step's, its roundings held)."""
    r0 = records[0]
    value = _time(r0["metric_value"]) if r0["metric_unit"] == "s" else f"{fmt_num(r0['metric_value'])} {r0['metric_unit']}"
    cols = [col("parameter", "left", wrap=False), col("group", "left", drop=3, wrap=False), col("value"),
            col("elasticity"), col(f"x{1 - swing:g}", drop=2), col(f"x{1 + swing:g}", drop=2),
            col("note", "left", drop=5, min_width=24)]
    fmt = _time if r0["metric_unit"] == "s" else fmt_num
    rows = []
    for r in shown:
        el = "—" if r["elasticity"] is None else f"{r['elasticity']:+.4f}"
        lo = "—" if r["metric_low"] is None else fmt(r["metric_low"])
        hi = "—" if r["metric_high"] is None else fmt(r["metric_high"])
        rows.append([r["parameter"], r["group"], fmt_num(r["value"]),
                     el, lo, hi, r["note"] or r["doc"]])
    hidden = len(records) - len([r for r in records if r["elasticity"]])
    how = "the symbolic step" if symbolic else "the step, its roundings held"
    caption = (f"elasticity = d ln({r0['metric_label']}) / d ln(parameter), from {how}; "
               f"x{1 - swing:g} / x{1 + swing:g}: the metric with the parameter scaled so"
               + (f"; {hidden} zero or discrete parameter(s) hidden (--all shows them)" if hidden and not show_all else ""))
    title = (f"sensitivity of {r0['metric_label']} ({value}): {r0['model']} {r0['layout']} {r0['phase']} "
             f"on {r0['hardware']}")
    print_out(table(title, cols, rows, caption=caption))


def plain_text(lines: list[str], formulas: bool) -> None:
    """`explain`'s plain lines (rubinperf.analysis.plain), each wrapped to the terminal with its continuation
    indented, then a pointer to the formulas (or a blank line before them)."""
    import textwrap

    from rubinperf.render.output import console_width, emit_text

    import re

    width = max(40, console_width())
    glue = re.compile(r"(?<=\d) (?=[a-zA-Zµ%])")   # a number stays on the line of its unit (no-break space)
    out = [textwrap.fill(glue.sub("\xa0", line), width=width, subsequent_indent="    ",
                         break_on_hyphens=False).replace("\xa0", " ") for line in lines]
    emit_text("\n".join(out) + ("\n" if formulas else "\n(the formulas: --formulas)"))
