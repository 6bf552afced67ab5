"""`rubinperf explain` and `rubinperf sensitivity`: formulas, numbers and elasticities.

Thin like cli.py: options in, records out. sympy is imported inside the commands only, so
`rubinperf --help` and `estimate` never load it.
"""

from __future__ import annotations

import difflib
import re
from typing import List, Optional

import typer

from rubinperf.cli.options import BYTES, STACK_ONE_OPT, STACK_OPT, TOKENS, WIDE_OPT, apply_wide

from rubinperf.render import tables as report
from rubinperf.errors import SpecError

from rubinperf.kernels.catalog import CATALOG  # noqa: E402  (no numpy or sympy behind it)

GENERIC = tuple(CATALOG)
SET_HELP = ("What-if override of a spec field, repeatable: --set hbm_bandwidth=30TB/s, "
            "--set hardware.nvlink_latency_s=2e-6, --set model.mean_accepted_tokens=3.")

MODEL_OPT = typer.Option("deepseek-v4.1-flash", "--model", "-m", help="Bundled model name or a path to a TOML file.")
HW_OPT = typer.Option("gb300-nvl72", "--hardware", "-H", help="Bundled hardware name or a path to a TOML file.")
LAYOUT_OPT = typer.Option("dep32", "--layout", "-l", help="dep<N> or tp<N>.")
PHASE_OPT = typer.Option(None, help="prefill or decode. Default: prefill for dep2 (and dep1), decode otherwise.")
BATCH_OPT = typer.Option(None, help="Step: requests (decode) or sequences (prefill) per rank; default 16 for dep32 decode, "
                         "else 1. attention: sequences.")
CONTEXT_OPT = typer.Option(None, click_type=TOKENS, help="Tokens already cached per request: 131072, 128K or 855000 (K = 1024). Default: 128K.")
NEW_TOKENS_OPT = typer.Option(None, click_type=TOKENS, help="Prefill: new tokens per rank (K = 1024). Default: 32K.")
DRAFT_OPT = typer.Option(None, help="Decode: drafted tokens verified per step (k). Default: the model's.")
ACCEPT_OPT = typer.Option(None, help="Decode: mean tokens emitted per verify step. Default: the model's.")
BAL_OPT = typer.Option(None, help="MoE mean/max rank load for DEP. Default: 0.94 with EPLB, 0.35 without.")
EPLB_OPT = typer.Option(True, "--eplb/--no-eplb", help="Expert load balancing on (default) or off.")
SET_OPT = typer.Option(None, "--set", "-s", help=SET_HELP)
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Print nothing but errors (exit status still tells).")
QUIET_PLOT_OPT = typer.Option(False, "--quiet", "-q", help="Print nothing but errors (exit status still tells; --plot still writes).")


def _step_setup(model, hardware, layout, sets, stack=None, **point):
    from rubinperf.engine import load_specs
    from rubinperf.layout import parse_layout
    from rubinperf.scenario import make_point

    from rubinperf.scenario import check_phase_options

    m, (hw,) = load_specs(model, [hardware], sets, [stack] if stack else None)
    lay = parse_layout(layout)
    check_phase_options(lay, point.get("phase"), point.get("new_tokens"), point.get("draft_tokens"), point.get("acceptance"))
    return m, hw, lay, make_point(m, hw, lay, **point)


def _width() -> int:
    import shutil

    return max(80, shutil.get_terminal_size((160, 40)).columns)


# ---------------------------------------------------------------- explain


def explain(
    kernel: str = typer.Argument(..., help="gemm, grouped-gemm, attention, copy, all-reduce, all-to-all, all-gather; 'step'; "
                                 "or an op of the step as `estimate --breakdown` names it, or a prefix of it "
                                 "(case-insensitive): megamoe, 'mqa logits', 'draft: lm head'."),
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    stack: Optional[str] = STACK_ONE_OPT,
    layout: str = LAYOUT_OPT,
    phase: Optional[str] = PHASE_OPT,
    batch: Optional[float] = BATCH_OPT,
    context: Optional[float] = CONTEXT_OPT,
    new_tokens: Optional[float] = NEW_TOKENS_OPT,
    draft_tokens: Optional[int] = DRAFT_OPT,
    acceptance: Optional[float] = ACCEPT_OPT,
    balancedness: Optional[float] = BAL_OPT,
    eplb: bool = EPLB_OPT,
    m: Optional[float] = typer.Option(None, "--m", help="gemm: rows of the activations (tokens)."),
    n: Optional[float] = typer.Option(None, "--n", help="gemm, grouped-gemm: output width."),
    k: Optional[float] = typer.Option(None, "--k", help="gemm, grouped-gemm: reduction width."),
    tokens: Optional[float] = typer.Option(None, help="grouped-gemm: routed rows (tokens x top-k)."),
    groups: Optional[float] = typer.Option(None, help="grouped-gemm: experts the rows spread over."),
    heads: Optional[float] = typer.Option(None, help="attention: query heads."),
    kv_heads: Optional[float] = typer.Option(None, help="attention: KV heads (default: --heads)."),
    q_len: Optional[float] = typer.Option(None, help="attention: query tokens per sequence."),
    kv_len: Optional[float] = typer.Option(None, help="attention: KV tokens per sequence."),
    head_dim: Optional[float] = typer.Option(None, help="attention: head dimension."),
    causal: bool = typer.Option(False, "--causal/--no-causal", help="attention: causal mask."),
    dtype: Optional[str] = typer.Option(None, help="gemm (bf16), grouped-gemm (fp4), attention (bf16): fp4, fp8, bf16 or fp32."),
    nbytes: Optional[float] = typer.Option(None, "--bytes", click_type=BYTES, help="copy: bytes copied; all-reduce / all-to-all: bytes per rank (4e9, 4GB, 4GiB)."),
    ranks: Optional[int] = typer.Option(None, help="all-reduce, all-to-all, all-gather: ranks in the group (default 8)."),
    launch: str = typer.Option("eager", "--launch", help="A generic kernel launched alone (eager) or inside a CUDA "
                                                         "graph (graph); step ops are always timed as in a graph."),
    latex: bool = typer.Option(False, "--latex", help="Print the formulas as LaTeX."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON record (formulas as text and LaTeX, values)."),
    sets: Optional[List[str]] = SET_OPT,
    quiet: bool = QUIET_OPT,
):
    """Formulas of a kernel: FLOPs and bytes in symbols named after spec fields and shapes,
    the same with numbers substituted, speed of light, expected time and the binding term.

    Examples:

      rubinperf explain megamoe

      rubinperf explain "mqa logits" -H vr-nvl72 --context 1000000

      rubinperf explain step -l tp8

      rubinperf explain gemm --m 16 --n 4096 --k 4096 --latex
    """
    from rubinperf import symbolic as S
    from rubinperf.cli.options import check_output_flags

    check_output_flags(as_json, quiet=quiet)
    name = kernel.strip()
    shape_opts = {"m": m, "n": n, "k": k, "tokens": tokens, "groups": groups, "heads": heads, "kv_heads": kv_heads,
                  "q_len": q_len, "kv_len": kv_len, "head_dim": head_dim, "bytes": nbytes}
    if name.lower() in GENERIC:
        kind = name.lower()
        for opt, v in (("phase", phase), ("context", context), ("new-tokens", new_tokens), ("draft-tokens", draft_tokens),
                       ("acceptance", acceptance), ("balancedness", balancedness)):
            if v is not None:
                raise SpecError(f"--{opt}: applies to step ops, not to the generic kernel {kind}")
        from rubinperf.specs.stack import load_platform
        from rubinperf.specs.overrides import apply_overrides

        hw = apply_overrides(sets, hardware=load_platform(hardware, stack))["hardware"]
        shape = _generic_shape(kind, {**shape_opts, "batch": batch}, dtype, ranks)
        if launch not in ("eager", "graph"):
            raise SpecError(f"--launch: expected eager or graph, got {launch!r}")
        ex = S.explain_kernel(kind, shape, hw, dtype=_dtype(dtype), causal=causal, ranks=ranks or 8, launch=launch)
        if as_json or not quiet:
            _emit_explanation(ex, latex, as_json)
        return
    given = [o for o, v in shape_opts.items() if v is not None] + (["dtype"] if dtype else []) + (["ranks"] if ranks else [])
    if given:
        raise SpecError(f"--{given[0].replace('_', '-')}: a shape option of the generic kernels "
                        f"({', '.join(GENERIC)}); step ops take their shapes from the model")
    mod, hw, lay, point = _step_setup(model, hardware, layout, sets, stack, phase=phase, batch=batch, context=context,
                                      new_tokens=new_tokens, draft_tokens=draft_tokens, acceptance=acceptance,
                                      balancedness=balancedness, eplb=eplb)
    ss = S.symbolic_step(mod, hw, lay, point)
    if name.lower() == "step":
        st = S.explain_step(ss)
        if as_json:
            report.emit_text(report.to_json(_step_record(st)))
        elif quiet:
            pass
        elif latex:
            _print_step_latex(st)
        else:
            _print_step(st)
        return
    op = resolve_op(name, S.op_names(ss.result))
    ex = S.explain_op(ss, op)
    if as_json or not quiet:
        _emit_explanation(ex, latex, as_json)


def _dtype(value):
    if value is None:
        return None
    from rubinperf.precision import get_precision

    return get_precision(value.lower()).name


REQUIRED = {
    "gemm": ("m", "n", "k"),
    "grouped-gemm": ("tokens", "groups", "n", "k"),
    "attention": ("batch", "heads", "q_len", "kv_len", "head_dim"),
    "copy": ("bytes",),
    "all-reduce": ("bytes",),
    "all-to-all": ("bytes",),
    "all-gather": ("bytes",),
}


def _generic_shape(kind: str, opts: dict, dtype, ranks) -> dict:
    need = REQUIRED[kind]
    allowed = set(need) | ({"kv_heads"} if kind == "attention" else set())
    missing = [o for o in need if opts.get(o) is None]
    if missing:
        flags = " ".join(f"--{o.replace('_', '-')} N" for o in missing)
        raise SpecError(f"explain {kind}: missing {flags}")
    extra = [o for o, v in opts.items() if v is not None and o not in allowed]
    if extra:
        raise SpecError(f"--{extra[0].replace('_', '-')}: not a shape of {kind} (it takes "
                        f"{', '.join('--' + o.replace('_', '-') for o in sorted(allowed))})")
    from rubinperf.kernels.catalog import COLLECTIVES

    if ranks is not None and kind not in COLLECTIVES:
        raise SpecError(f"--ranks: not a shape of {kind}")
    if ranks is not None and ranks < 2:
        raise SpecError(f"--ranks: expected at least 2, got {ranks}")
    if dtype is not None and kind not in ("gemm", "grouped-gemm", "attention"):
        raise SpecError(f"--dtype: not an option of {kind}")
    shape = {}
    for o in allowed:
        v = opts.get(o)
        if v is None:
            continue
        if not v > 0 or v != v or v == float("inf"):
            raise SpecError(f"--{o.replace('_', '-')}: expected a positive finite number, got {v}")
        shape[o] = v
    if kind == "attention":
        h, kvh = shape["heads"], shape.get("kv_heads")
        if kvh is not None and (kvh > h or h % kvh):
            raise SpecError(f"--kv-heads: expected a divisor of --heads ({h:g}), got {kvh:g}")
        if shape["q_len"] > shape["kv_len"]:
            raise SpecError(f"--q-len: expected at most --kv-len ({shape['kv_len']:g}), got {shape['q_len']:g}")
    return shape


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _alnum(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def resolve_op(name: str, names: list[str]) -> str:
    """An op name from a case-insensitive prefix: 'megamoe' -> 'MegaMoE (dispatch + experts + combine)'."""
    want = _norm(name)
    exact = [x for x in names if _norm(x) == want]
    if exact:
        return exact[0]
    hits = [x for x in names if _norm(x).startswith(want)] or [x for x in names if _alnum(x).startswith(_alnum(want))]
    if _alnum(want) and len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise SpecError(f"explain {name!r}: ambiguous, say which: {'; '.join(hits)}")
    near = difflib.get_close_matches(want, [_norm(x) for x in names] + list(GENERIC) + ["step"], n=4, cutoff=0.4)
    by_norm = {_norm(x): x for x in names}
    hint = f" (close: {'; '.join(by_norm.get(x, x) for x in near)})" if near else ""
    raise SpecError(f"explain {name!r}: no such kernel or op in this step{hint}; "
                    f"generic kernels: {', '.join(GENERIC)}; or 'step'")


# ---------------------------------------------------------------- rendering explain

_time = report.fmt_time
UNIT_FMT = {"FLOP": lambda v: report.si(v, "FLOP"), "B": lambda v: report.si(v, "B"), "s": _time}


def _header(ex) -> list[str]:
    c = ex.context
    if "layout" in c:
        lines = [f"{ex.kernel}: {c['model']} {c['layout']} {c['phase']} on {c['hardware']}, "
                 f"{c['occurrences']} occurrence(s) per step on one rank"]
    else:
        shape = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items() if k != "hardware")
        lines = [f"{ex.kernel} on {c['hardware']} ({shape})"]
    import textwrap

    syms = ", ".join(f"{k}={v:.6g}" for k, v in ex.symbols.items())
    lines += textwrap.wrap(f"symbols (spec fields and shapes) at this point: {syms}", _width(), subsequent_indent="  ")
    lines += textwrap.wrap(ex.rule, _width(), subsequent_indent="  ")
    return lines


def _emit_explanation(ex, latex: bool, as_json: bool):
    from rubinperf import symbolic as S

    if as_json:
        report.emit_text(report.to_json(ex.to_record()))
        return
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
        out.append(f"% bound: {ex.bound}")
    else:
        out += ["", f"speed of light {_time(n['sol_s'])}, expected {_time(n['expected_s'])} "
                f"({100 * n['sol_s'] / n['expected_s']:.0f}% of roofline); bound: {ex.bound} "
                f"(compute {_time(n['compute_s'])}, memory {_time(n['memory_s'])}, parallelism "
                f"{_time(n['parallelism_s'])}, link {_time(n['comm_s'])}, latency {_time(n['latency_s'])})"]
    report.emit_text("\n".join(out))


def _indent(text: str, pad: str = "  ") -> str:
    return "\n".join(pad + line for line in text.splitlines())


TOP_LABELS = {
    "expected_s": ("step time = max(GPU, CPU)", "s"),
    "gpu_s": ("GPU time = sum over GPU ops of their expected time", "s"),
    "cpu_s": ("CPU time (scheduling + DP sync, overlapped with the GPU)", "s"),
    "sol_s": ("speed of light = sum over GPU ops of their SOL", "s"),
    "tokens_per_s_per_gpu": ("tokens/s per GPU", "tok/s"),
    "tokens_per_s_per_user": ("tokens/s per user", "tok/s"),
}


def _step_numbers(st) -> dict:
    from rubinperf import symbolic as S

    values = dict(st["ops"][0].values)
    t = S.evaluate(st["top"]["expected_s"], values)
    values[S.STEP_TIME] = t
    return {k: S.evaluate(e, values) for k, e in st["top"].items()}, values


def _step_record(st) -> dict:
    from rubinperf import symbolic as S

    nums, values = _step_numbers(st)
    top = {k: {"label": TOP_LABELS[k][0], "formula": S.to_str(S.tidy(e)), "latex": S.to_latex(S.tidy(e)),
               "value": nums[k]} for k, e in st["top"].items()}
    return {"kernel": "step", **st["context"], "step_time_ms": nums["expected_s"] * 1e3,
            "sol_step_time_ms": nums["sol_s"] * 1e3, "top": top, "ops": [ex.to_record() for ex in st["ops"]]}


def _fmt_top(k, v):

    return _time(v) if TOP_LABELS[k][1] == "s" else report.fmt_num(v)


def _print_step(st):
    from rubinperf import symbolic as S

    nums, _ = _step_numbers(st)
    c = st["context"]
    lines = [f"step: {c['model']} {c['layout']} {c['phase']} on {c['hardware']}, batch {c['batch_per_rank']:g}/rank, "
             f"context {c['context_tokens']:g}" + (f", draft tokens {c['draft_tokens']:g}, acceptance {c['acceptance']:g}"
                                                   if "draft_tokens" in c else f", new tokens {c['new_tokens_per_rank']:g}/rank")]
    cpu = S.to_short_str(S.tidy(st["top"]["cpu_s"]))
    lines += [
        f"  step time = max(GPU, CPU) = max({_time(nums['gpu_s'])}, {_time(nums['cpu_s'])}) = {_time(nums['expected_s'])}",
        f"  GPU = sum of the ops below = {_time(nums['gpu_s'])}; speed of light = sum of their SOL = {_time(nums['sol_s'])}",
        f"  CPU = {cpu} = {_time(nums['cpu_s'])} (scheduling and DP sync, overlapped with the GPU)",
    ]
    for k in ("tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        lines.append(f"  {TOP_LABELS[k][0]} = {S.to_short_str(S.tidy(st['top'][k]))} = {_fmt_top(k, nums[k])}")
    lines.append("  each kernel: expected = latency + max(compute, memory + parallelism, link) (fused: a share of the "
                 "smaller terms hides); SOL = max(FLOPs/peak, bytes/bandwidth, link bytes/bandwidth)")
    report.emit_text("\n".join(lines))
    col = report.col
    cols = [col("kernel", "left", min_width=14), col("×", drop=3), col("FLOPs per step", "left", min_width=16, fold=True),
            col("bytes per step", "left", min_width=16, fold=True), col("time"), col("SOL", drop=2),
            col("share", drop=1), col("bound", "left", wrap=False)]
    rows = []
    total = nums["expected_s"]
    for ex in sorted(st["ops"], key=lambda x: (x.context.get("part") == "cpu", -x.numbers["expected_s"])):
        n = ex.numbers
        rows.append([ex.kernel, str(ex.context["occurrences"]), S.to_short_str(ex.exprs["flops"]),
                     S.to_short_str(ex.exprs["bytes"]), _time(n["expected_s"]), _time(n["sol_s"]),
                     report.fmt_pct(n["expected_s"] / total), ex.bound])
    report.print_out(report.table("ops of one step on one rank (formulas in the operating-point symbols)", cols, rows,
                                  caption="rubinperf explain OP prints an op's time formulas in full"))


def _print_step_latex(st):
    from rubinperf import symbolic as S

    nums, _ = _step_numbers(st)
    out = [f"% step: {st['context']}"]
    for k, e in st["top"].items():
        out.append(f"% {TOP_LABELS[k][0]} = {nums[k]:.6g}")
        out.append(rf"\mathrm{{{k.replace('_', chr(92) + '_')}}} = {S.to_latex(S.tidy(e))}")
    for ex in st["ops"]:
        out.append(f"% {ex.kernel}: expected {ex.numbers['expected_s']:.6g} s, bound {ex.bound}")
        for key in ("flops", "bytes", "expected_s"):
            out.append(rf"\mathrm{{{key.replace('_', chr(92) + '_')}}} = {S.to_latex(ex.exprs[key])}")
    report.emit_text("\n".join(out))


# ---------------------------------------------------------------- sensitivity


def sensitivity(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    stack: Optional[str] = STACK_ONE_OPT,
    layout: str = LAYOUT_OPT,
    phase: Optional[str] = PHASE_OPT,
    batch: Optional[float] = typer.Option(None, help="Requests (decode) or sequences (prefill) per rank. Default: 16 for dep32 decode, else 1."),
    context: Optional[float] = CONTEXT_OPT,
    new_tokens: Optional[float] = NEW_TOKENS_OPT,
    draft_tokens: Optional[int] = DRAFT_OPT,
    acceptance: Optional[float] = ACCEPT_OPT,
    balancedness: Optional[float] = BAL_OPT,
    eplb: bool = EPLB_OPT,
    metric: str = typer.Option("step-time", "--metric", help="step-time, tokens-per-gpu or tokens-per-user."),
    show_all: bool = typer.Option(False, "--all", help="Also list parameters with zero elasticity and discrete ones."),
    top: Optional[int] = typer.Option(None, "--top", help="Show only the N largest."),
    swing: float = typer.Option(0.1, "--swing", help="Relative change for the low/high columns and the tornado bars."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write a tornado plot to this file (.png, .svg, .pdf; needs matplotlib)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records, one per parameter."),
    sets: Optional[List[str]] = SET_OPT,
    quiet: bool = QUIET_PLOT_OPT,
    wide: bool = WIDE_OPT,
):
    """Elasticity d ln(metric) / d ln(parameter) of a step metric to every hardware, stack and
    operating-point parameter, largest first: +1 means the metric moves 1% with a 1% rise.

    Examples:

      rubinperf sensitivity

      rubinperf sensitivity -H vr-nvl72 -l tp8 --metric tokens-per-user --top 10

      rubinperf sensitivity --set hbm_bandwidth=30TB/s --plot tornado.png
    """
    from rubinperf.render.plots import plot_tornado
    from rubinperf.sensitivity import sensitivity as run

    from rubinperf.cli.options import check_output_flags

    check_output_flags(as_json, quiet=quiet)
    apply_wide(wide)
    if top is not None and top < 1:
        raise SpecError(f"--top: expected a positive count, got {top}")
    if plot is not None:  # fail before the work: a format matplotlib is not tested with, or no matplotlib
        from rubinperf.render.serving import check_plot_path

        check_plot_path(plot)
    mod, hw, lay, point = _step_setup(model, hardware, layout, sets, stack, phase=phase, batch=batch, context=context,
                                      new_tokens=new_tokens, draft_tokens=draft_tokens, acceptance=acceptance,
                                      balancedness=balancedness, eplb=eplb)
    records = run(mod, hw, lay, point, metric=metric, swing=swing)
    shown = records if show_all else [r for r in records if r["elasticity"]]
    if top:
        shown = shown[:top]
    if plot:
        plot_tornado(records, plot, swing, top=top)
    if as_json:
        report.emit_text(report.to_json(shown))
        return
    if quiet:
        return
    r0 = records[0]
    value = _time(r0["metric_value"]) if r0["metric_unit"] == "s" else f"{report.fmt_num(r0['metric_value'])} {r0['metric_unit']}"
    col = report.col
    cols = [col("parameter", "left", wrap=False), col("group", "left", drop=3, wrap=False), col("value"),
            col("elasticity"), col(f"x{1 - swing:g}", drop=2), col(f"x{1 + swing:g}", drop=2),
            col("note", "left", drop=5, min_width=24)]
    fmt = _time if r0["metric_unit"] == "s" else report.fmt_num
    rows = []
    for r in shown:
        el = "—" if r["elasticity"] is None else f"{r['elasticity']:+.4f}"
        lo = "—" if r["metric_low"] is None else fmt(r["metric_low"])
        hi = "—" if r["metric_high"] is None else fmt(r["metric_high"])
        rows.append([r["parameter"], r["group"], report.fmt_num(r["value"]),
                     el, lo, hi, r["note"] or r["doc"]])
    hidden = len(records) - len([r for r in records if r["elasticity"]])
    caption = (f"elasticity = d ln({r0['metric_label']}) / d ln(parameter), from the symbolic step; "
               f"x{1 - swing:g} / x{1 + swing:g}: the metric with the parameter scaled so"
               + (f"; {hidden} zero or discrete parameter(s) hidden (--all shows them)" if hidden and not show_all else ""))
    title = (f"sensitivity of {r0['metric_label']} ({value}): {r0['model']} {r0['layout']} {r0['phase']} "
             f"on {r0['hardware']}")
    report.print_out(report.table(title, cols, rows, caption=caption))
    if plot:
        report.emit_text(f"wrote {plot}")
