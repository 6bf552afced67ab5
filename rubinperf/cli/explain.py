"""`rubinperf explain` and `rubinperf sensitivity`: formulas, numbers and elasticities.

Thin: options in, the core's records out to rubinperf.render.explain. sympy is imported inside
the commands only, so `rubinperf --help` and `estimate` never load it.
"""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from rubinperf.cli.options import BYTES, BYTES_RANGE, Layout, QuietPlot, apply_wide, check_output_flags, ranged, shared_options
from rubinperf.errors import SpecError

DEFAULT_LAYOUT = "dep32"


def generic_kinds() -> tuple:
    """The generic kernels' names, from rubinperf.kernels.catalog (no numpy or sympy behind it; imported when explain
    runs: the kernels' modules are a sixth of every other command's start-up)."""
    from rubinperf.kernels.catalog import CATALOG

    return tuple(CATALOG)


def _step_setup(model, hardware, layout, sets, stack=None, **point):
    from rubinperf.specs.select import load_specs
    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point

    from rubinperf.step.point import check_phase_options

    m, (hw,) = load_specs(model, [hardware], sets, [stack] if stack else None)
    lay = parse_layout(layout)
    check_phase_options(lay, point.get("phase"), point.get("new_tokens"), point.get("draft_tokens"), point.get("acceptance"))
    p = make_point(m, hw, lay, **point)
    from rubinperf.step.estimates import check_fits

    check_fits(m, hw, lay, p)   # a point that does not fit HBM is an error, with the largest batch that fits
    return m, hw, lay, p


# ---------------------------------------------------------------- explain


@shared_options()
def explain(
    kernel: Annotated[str, typer.Argument(help="gemm, grouped-gemm, attention, copy, all-reduce, all-to-all, all-gather; "
                                          "'step'; "
                                          "or an op of the step as `estimate --breakdown` names it, or a prefix of it "
                                          "(case-insensitive): megamoe, 'mqa logits', 'draft: lm head'.")],
    *, model, hardware, stack,
    layout: Layout = DEFAULT_LAYOUT,
    phase,
    batch: Annotated[Optional[float], typer.Option(
        **ranged("Step: requests (decode) or sequences (prefill) per rank; default 16 for dep32 decode, else 1. "
                 "attention: sequences.", 1, 2 ** 20, integer=False))] = None,
    context, new_tokens, draft_tokens, acceptance, balancedness, eplb,
    m: Annotated[Optional[float], typer.Option("--m", **ranged("gemm: rows of the activations (tokens).", 1, 1e15, integer=False))] = None,
    n: Annotated[Optional[float], typer.Option("--n", **ranged("gemm, grouped-gemm: output width.", 1, 1e15, integer=False))] = None,
    k: Annotated[Optional[float], typer.Option("--k", **ranged("gemm, grouped-gemm: reduction width.", 1, 1e15, integer=False))] = None,
    tokens: Annotated[Optional[float], typer.Option(**ranged("grouped-gemm: routed rows (tokens x top-k).", 1, 1e15, integer=False))] = None,
    groups: Annotated[Optional[float], typer.Option(**ranged("grouped-gemm: experts the rows spread over.", 1, 1e15, integer=False))] = None,
    heads: Annotated[Optional[float], typer.Option(**ranged("attention: query heads.", 1, 1e15, integer=False))] = None,
    kv_heads: Annotated[Optional[float], typer.Option(**ranged("attention: KV heads (default: --heads).", 1, 1e15, integer=False))] = None,
    q_len: Annotated[Optional[float], typer.Option(**ranged("attention: query tokens per sequence.", 1, 1e15, integer=False))] = None,
    kv_len: Annotated[Optional[float], typer.Option(**ranged("attention: KV tokens per sequence.", 1, 1e15, integer=False))] = None,
    head_dim: Annotated[Optional[float], typer.Option(**ranged("attention: head dimension.", 1, 1e15, integer=False))] = None,
    causal: Annotated[bool, typer.Option("--causal/--no-causal", help="attention: causal mask.")] = False,
    dtype: Annotated[Optional[str], typer.Option(
        help="gemm (bf16), grouped-gemm (fp4), attention (bf16): fp4, fp8, bf16 or fp32.")] = None,
    nbytes: Annotated[Optional[float], typer.Option(
        "--bytes", click_type=BYTES,
        help="copy: bytes copied; all-reduce / all-to-all: bytes per rank (4e9, 4GB, 4GiB). " + BYTES_RANGE)] = None,
    ranks: Annotated[Optional[int], typer.Option(
        **ranged("all-reduce, all-to-all, all-gather: ranks in the group (default 8).", 1, 2 ** 20))] = None,
    launch: Annotated[str, typer.Option(
        "--launch", help="A generic kernel: eager (behind others in a stream, as do_bench times it), stream (the "
                         "host issuing every call: at least its dispatch), cold (alone after a synchronisation) or "
                         "graph (inside a CUDA graph); step ops are always timed as in a graph.")] = "eager",
    formulas: Annotated[bool, typer.Option(
        "--formulas", help="After the plain lines, the full formulas: FLOPs, bytes and every term in symbols named "
                           "after spec fields and shapes, then with the numbers.")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Print the formulas as LaTeX (implies --formulas).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON record (formulas as text and LaTeX, values).")] = False,
    sets, quiet,
):
    """A kernel's time in plain words: one line per term (compute, memory, parallelism, link,
    latency) with its numbers and the spec fields behind it, then how they compose. --formulas
    adds the full formulas: FLOPs and bytes in symbols named after spec fields and shapes, the
    same with numbers substituted, speed of light, expected time and the binding term. Where
    the binding term is latency (fixed waits, no unit's work), the first line also names the
    busiest unit: the one of compute, memory and link that the rest keeps busiest, as a
    profiler's throughput counters would read it.

    Examples:

      rubinperf explain megamoe

      rubinperf explain megamoe --formulas

      rubinperf explain "mqa logits" -H vr-nvl72 --context 1000000

      rubinperf explain step -l tp8

      rubinperf explain gemm --m 16 --n 4096 --k 4096 --latex
    """
    check_output_flags(as_json, quiet=quiet)
    formulas = formulas or latex or as_json
    name = kernel.strip()
    shape_opts = {"m": m, "n": n, "k": k, "tokens": tokens, "groups": groups, "heads": heads, "kv_heads": kv_heads,
                  "q_len": q_len, "kv_len": kv_len, "head_dim": head_dim, "bytes": nbytes}
    if name.lower() in generic_kinds():
        kind = name.lower()
        for opt, v in (("phase", phase), ("context", context), ("new-tokens", new_tokens), ("draft-tokens", draft_tokens),
                       ("acceptance", acceptance), ("balancedness", balancedness)):
            if v is not None:
                raise SpecError(f"--{opt}: applies to step ops, not to the generic kernel {kind}")
        from rubinperf.specs.stack import load_platform
        from rubinperf.specs.overrides import apply_overrides

        hw = apply_overrides(sets, hardware=load_platform(hardware, stack))["hardware"]
        shape = _generic_shape(kind, {**shape_opts, "batch": batch}, dtype, ranks)
        from rubinperf.roofline import LAUNCH_MODES

        if launch not in LAUNCH_MODES:
            raise SpecError(f"--launch: expected one of {', '.join(LAUNCH_MODES)}, got {launch!r}")
        ex = None
        if formulas:   # (its errors before any output)
            from rubinperf.analysis import symbolic as S

            ex = S.explain_kernel(kind, shape, hw, dtype=_dtype(dtype), causal=causal, ranks=ranks or 8, launch=launch)
        if not quiet and not as_json:
            from rubinperf.analysis.plain import op_lines
            from rubinperf.kernels.catalog import build
            from rubinperf.step.graph import Op

            kern = build(kind, shape, dtype=_dtype(dtype), causal=causal, ranks=ranks or 8)
            _plain(op_lines([Op(kind, (kern,))], hw, launch=launch), formulas)
        if ex is not None:
            _show(ex, latex, as_json, quiet)
        return
    given = [o for o, v in shape_opts.items() if v is not None] + (["dtype"] if dtype else []) + (["ranks"] if ranks else [])
    if given:
        raise SpecError(f"--{given[0].replace('_', '-')}: a shape option of the generic kernels "
                        f"({', '.join(generic_kinds())}); step ops take their shapes from the model")
    mod, hw, lay, point = _step_setup(model, hardware, layout, sets, stack, phase=phase, batch=batch, context=context,
                                      new_tokens=new_tokens, draft_tokens=draft_tokens, acceptance=acceptance,
                                      balancedness=balancedness, eplb=eplb)
    symbolic = _symbolic_explanation(name, mod, hw, lay, point) if formulas else None   # its errors before output
    if not quiet and not as_json:
        from rubinperf.analysis.plain import op_lines, step_lines
        from rubinperf.step.records import step_record
        from rubinperf.step.timing import op_graph, step

        result = step(mod, hw, lay, point)
        if name.lower() == "step":
            rec = step_record(result)
            head = (f"{mod.name} {lay.name} {point.phase} on {hw.name}: batch {rec['batch_per_rank']:g}/rank, "
                    f"context {rec['context_tokens']:,.0f} tokens"
                    + (f", {rec['draft_tokens']:g} draft tokens, acceptance {rec['acceptance']:.2f} tokens a step"
                       if point.phase == "decode" else f", {rec['new_tokens_per_rank']:,.0f} new tokens a rank"))
            _plain([head, *step_lines(rec)], formulas)
        else:
            ops = op_graph(mod, lay, point, hw.gpus_per_tray)
            op = resolve_op(name, list(dict.fromkeys(o.name for o in ops)))
            _plain(op_lines([o for o in ops if o.name == op], hw, float(result.expected_s)), formulas)
    if symbolic is None:
        return
    kind, ex = symbolic
    if kind == "step":
        if as_json:
            from rubinperf.analysis.symbolic import step_record as symbolic_step_record

            _json(symbolic_step_record(ex))
        elif quiet:
            pass
        elif latex:
            from rubinperf.render.explain import step_latex

            step_latex(ex)
        else:
            from rubinperf.render.explain import step_text

            step_text(ex)
        return
    _show(ex, latex, as_json, quiet)


def _symbolic_explanation(name, mod, hw, lay, point):
    """("step", the step's decomposition) or ("op", the op's Explanation), over symbols (sympy)."""
    from rubinperf.analysis import symbolic as S

    ss = S.symbolic_step(mod, hw, lay, point)
    if name.lower() == "step":
        return "step", S.explain_step(ss)
    return "op", S.explain_op(ss, resolve_op(name, S.op_names(ss)))


def _plain(lines: list[str], formulas: bool) -> None:
    from rubinperf.render.explain import plain_text

    plain_text(lines, formulas)


def _json(record) -> None:
    from rubinperf.render.output import emit_text, to_json

    emit_text(to_json(record))


def _show(ex, latex: bool, as_json: bool, quiet: bool) -> None:
    """An explanation as JSON, as text or LaTeX, or nothing (--quiet)."""
    if as_json:
        _json(ex.to_record())
    elif not quiet:
        from rubinperf.render.explain import explanation_text

        explanation_text(ex, latex)


def _dtype(value):
    if value is None:
        return None
    from rubinperf.specs.precision import get_precision

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
    import difflib

    near = difflib.get_close_matches(want, [_norm(x) for x in names] + list(generic_kinds()) + ["step"], n=4,
                                     cutoff=0.4)
    by_norm = {_norm(x): x for x in names}
    hint = f" (close: {'; '.join(by_norm.get(x, x) for x in near)})" if near else ""
    raise SpecError(f"explain {name!r}: no such kernel or op in this step{hint}; "
                    f"generic kernels: {', '.join(generic_kinds())}; or 'step'")


# ---------------------------------------------------------------- sensitivity


@shared_options()
def sensitivity(
    *, model, hardware, stack,
    layout: Layout = DEFAULT_LAYOUT,
    phase, batch, context, new_tokens, draft_tokens, acceptance, balancedness, eplb,
    metric: Annotated[str, typer.Option("--metric", help="step-time, tokens-per-gpu, tokens-per-user (the mean) or "
                                                         "tokens-per-user-p90 (the mean x the P90 factor: also ranks the "
                                                         "acceptance and step-time spreads).")] = "step-time",
    show_all: Annotated[bool, typer.Option(
        "--all", help="Also list parameters with zero elasticity and discrete ones.")] = False,
    top: Annotated[Optional[int], typer.Option("--top", **ranged("Show only the N largest.", 1, 10_000))] = None,
    swing: Annotated[float, typer.Option(
        "--swing", **ranged("Relative change for the low/high columns and the tornado bars.", 1e-6, 0.999,
                            integer=False))] = 0.1,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", help="Write a tornado plot to this file (.png, .svg, .pdf; needs matplotlib).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON records, one per parameter.")] = False,
    symbolic: Annotated[bool, typer.Option(
        "--symbolic", help="Differentiate the symbolic step with sympy (seconds) instead of the numeric step with "
                           "its roundings held (the same elasticities to the four decimals shown).")] = False,
    sets,
    quiet: QuietPlot = False,
    wide, as_csv, save_dir,
):
    """Elasticity d ln(metric) / d ln(parameter) of a step metric to every hardware, stack and
    operating-point parameter, largest first: +1 means the metric moves 1% with a 1% rise.

    Examples:

      rubinperf sensitivity

      rubinperf sensitivity -H vr-nvl72 -l tp8 --metric tokens-per-user --top 10

      rubinperf sensitivity --set hbm_bandwidth=30TB/s --plot tornado.png
    """
    from rubinperf.render import plots
    from rubinperf.analysis.elasticity import sensitivity_records

    check_output_flags(as_json, as_csv, quiet)
    apply_wide(wide)
    if top is not None and top < 1:
        raise SpecError(f"--top: expected a positive count, got {top}")
    if plot is not None:  # fail before the work: a format matplotlib is not tested with, or no matplotlib
        plots.check_plot_path(plot)
    if save_dir is not None:
        from rubinperf.cli.bundles import check_save_dir

        check_save_dir(save_dir)
    mod, hw, lay, point = _step_setup(model, hardware, layout, sets, stack, phase=phase, batch=batch, context=context,
                                      new_tokens=new_tokens, draft_tokens=draft_tokens, acceptance=acceptance,
                                      balancedness=balancedness, eplb=eplb)
    if symbolic:
        from rubinperf.analysis.sensitivity import sensitivity as symbolic_records

        records = symbolic_records(mod, hw, lay, point, metric=metric, swing=swing)
    else:
        records = sensitivity_records(mod, hw, lay, point, metric=metric, swing=swing)
    shown = records if show_all else [r for r in records if r["elasticity"]]
    if top:
        shown = shown[:top]
    if plot:
        plots.plot_tornado(records, plot, swing, top=top)
    if save_dir is not None:
        from rubinperf.cli.bundles import save_sensitivity

        save_sensitivity(save_dir, records, swing, top, mod, hw)
    if as_json or as_csv:
        from rubinperf.render.output import emit_text, to_csv

        emit_text(to_csv(shown)) if as_csv else _json(shown)
        return
    if quiet:
        return
    from rubinperf.render.explain import sensitivity_table
    from rubinperf.render.output import emit_text

    sensitivity_table(records, shown, swing, show_all, symbolic=symbolic)
    if plot:
        emit_text(f"wrote {plot}")
    if save_dir is not None:
        emit_text(f"wrote {save_dir}/")
