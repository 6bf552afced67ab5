"""The kernel and step formulas over sympy symbols, for `explain` and `sensitivity`.

There is no second copy of any formula here. The numeric functions (`kernels`, `graph`,
`roofline.kernel_time`, `step.step`) accept numbers, numpy arrays or sympy symbols; this
module hands them symbols instead of numbers:

- a *symbolic hardware* record: the very `Hardware` class, with every float field
  replaced by a sympy Symbol named after the field (`hbm_bandwidth_bytes_per_s`, ...).
  Integer fields (`gpus_per_tray`, `nvlink_domain_size`, ...) stay numbers: they set the
  structure of the graph (which collectives cross a tray), not a rate;
- a *symbolic operating point*: `batch`, `context`, `new_tokens`, `draft_tokens`,
  `acceptance`, `balancedness` and `draft_balancedness` as symbols (the model's shapes
  stay numbers);
- *symbolic shapes* for the generic kernels (`m`, `n`, `k`, `tokens`, ...).

Substituting the real values into the resulting expressions gives back the numeric path's
numbers (tests/analysis/test_symbolic.py checks 1e-9 relative agreement). Importing this module
imports sympy; nothing on the `estimate` path imports it.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sympy
from sympy.printing.latex import LatexPrinter
from sympy.printing.pretty import pretty_symbology, stringpict
from sympy.printing.pretty.pretty import PrettyPrinter
from sympy.printing.pretty.stringpict import prettyForm
from sympy.printing.pycode import PythonCodePrinter
from sympy.printing.str import StrPrinter

from rubinperf.errors import SpecError
from rubinperf.kernels.cost import BYTE_KINDS, Kernel
from rubinperf.roofline import BOUNDS, binding_term, busiest_unit, kernel_time
from rubinperf.specs.hardware import Hardware
from rubinperf.specs.loader import numeric_fields
from rubinperf.step.point import Point

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

# ---------------------------------------------------------------- symbols

# Operating-point symbols and whether they may be zero.
POINT_FIELDS = ("batch", "context", "new_tokens", "draft_tokens", "acceptance", "balancedness", "draft_balancedness")
_MAY_BE_ZERO = {"context", "draft_tokens"}


@functools.lru_cache(maxsize=None)
def sym(name: str, nonnegative: bool = False) -> sympy.Symbol:
    """The one Symbol of a name: positive, or non-negative where zero is a valid value."""
    return sympy.Symbol(name, nonnegative=True) if nonnegative else sympy.Symbol(name, positive=True)


def hardware_fields() -> dict[str, bool]:
    """Float fields of a platform (hardware and stack) that become symbols -> whether each may be zero
    (cached: do not mutate): `rubinperf.analysis.elasticity.varied_fields`, the fields both paths vary."""
    from rubinperf.analysis.elasticity import varied_fields

    return varied_fields()


def structural_hardware_fields() -> list[str]:
    """Integer platform fields: they shape the graph (tray boundaries, domain size) or the kernel's tiling
    (tile sizes, split-K) and stay numbers."""
    from rubinperf.specs.stack import POINT_FIELDS as STACK_POINT_FIELDS
    from rubinperf.specs.stack import Platform

    floats = hardware_fields()
    return [f for f in numeric_fields(Platform) if f not in floats and f not in STACK_POINT_FIELDS]


def hardware_symbol(name: str) -> sympy.Symbol:
    fields = hardware_fields()
    if name not in fields:
        raise SpecError(f"'{name}' is not a float hardware or stack field")
    return sym(name, fields[name])


def point_symbol(name: str) -> sympy.Symbol:
    return sym(name, name in _MAY_BE_ZERO)


def symbolic_hardware(hw: Hardware) -> Hardware:
    """`hw` with every float field a Symbol named after the field (same class, same methods)."""
    return dataclasses.replace(hw, **{name: hardware_symbol(name) for name in hardware_fields()})


def hardware_values(hw: Hardware) -> dict:
    return {hardware_symbol(name): getattr(hw, name) for name in hardware_fields()}


def symbolic_point(point: Point, numbers: tuple = ()) -> Point:
    """`point` with its numeric fields as symbols; structural ones (phase, placements) kept. `numbers`: the values
    of those symbols (name, value) where a choice of the graph's structure depends on them (allreduce_numbers)."""
    return dataclasses.replace(point, symbol_values=numbers, **{name: point_symbol(name) for name in POINT_FIELDS})


def allreduce_numbers(model, layout, point: Point) -> tuple:
    """The operating point's values, by symbol name, for a layout with TP all-reduces: the algorithm an all-reduce
    runs depends on its message size, which over symbols is no number (rubinperf.kernels.all_reduce_by_size
    evaluates it at these). Empty elsewhere, so that steps of other layouts stay keyed on their structure alone."""
    if layout.tp <= 1:
        return ()
    return tuple(sorted((s.name, v) for s, v in point_values(point, model).items()))


def point_values(point: Point, model) -> dict:
    values = {name: getattr(point, name) for name in POINT_FIELDS}
    values["draft_tokens"] = point.k(model)
    values["acceptance"] = point.accepted(model)
    return {point_symbol(name): v for name, v in values.items()}


def evaluate(expr, values: dict, memo: dict | None = None) -> float:
    """The number an expression takes at `values` (every free symbol must have one); `memo` (node -> its
    number) shares the work between the calls of one walk over sub-expressions of one expression."""
    if not isinstance(expr, sympy.Basic):
        return float(expr)
    return float(_Numbers(values, memo).of(expr))


class _Numbers:
    """`expr.xreplace({symbol: Float(value)})`, node by node from the leaves up, each node rebuilt from its
    arguments' numbers as sympy rebuilds it: a sum or product of numbers by sympy's number arithmetic in the
    order of its arguments (as Add and Mul fold their numbers), any other node by its own constructor (a
    power, max, ceiling). The same Float, without Add's and Mul's work on symbolic terms (ordering,
    assumption queries), which dominates when a step's expression is evaluated whole."""

    def __init__(self, values: dict, memo: dict | None = None):
        self.values = values
        self.memo = {} if memo is None else memo
        self.missing: set = set()

    def of(self, expr):
        out = self._walk(expr)
        if self.missing:
            raise SpecError(f"no value for symbol(s) {', '.join(sorted(s.name for s in self.missing))}")
        return out

    def _walk(self, e):
        if e.is_Number:
            return e
        if e.is_Symbol:
            if e not in self.values:
                self.missing.add(e)
                return e
            out = self.memo.get(e)
            if out is None:
                out = self.memo[e] = sympy.Float(float(self.values[e]))
            return out
        out = self.memo.get(e)
        if out is not None:
            return out
        args = [self._walk(a) for a in e.args]
        if all(a is b for a, b in zip(args, e.args)):   # no symbol below: left as it stands, as xreplace leaves it
            out = e
        elif (e.is_Add or e.is_Mul) and all(a.is_Number for a in args):
            out = sympy.S.Zero if e.is_Add else sympy.S.One
            for a in args:
                out = out + a if e.is_Add else out * a
        else:
            out = e.func(*args)
        self.memo[e] = out
        return out


def lambdify(expr, symbols: list):
    """A fast numeric function of `symbols` for the same expression (for repeated evaluation): the function
    `sympy.lambdify(symbols, expr, modules="math")` makes (the same source text, so the same float arithmetic),
    its text printed with each distinct sub-expression printed once (`_CodeText`): a step's expression shares
    its sub-expressions about ten times over, and lambdify prints and walks every copy. Made once for an
    expression and its symbols (the symbolic step is cached: a second sensitivity of the step reuses it)."""
    return _lambdified(expr, tuple(symbols))


@functools.lru_cache(maxsize=8)
def _lambdified(expr, symbols: tuple):
    text = _CodeText().doprint(expr)
    if "\n" in text:
        text = f"({text})"
    source = f"def _lambdifygenerated({', '.join(s.name for s in symbols)}):\n    return {text}\n"
    namespace = dict(_math_namespace())
    exec(compile(source, "<lambdified>", "exec"), namespace)
    return namespace["_lambdifygenerated"]


@functools.lru_cache(maxsize=1)
def _math_namespace() -> dict:
    """The names lambdify's generated code sees with modules="math"."""
    from sympy.utilities.lambdify import _get_namespace

    return {**_get_namespace("math"), "builtins": __import__("builtins"), "range": range}


class _CodeText(PythonCodePrinter):
    """The printer lambdify uses for modules="math", printing each distinct sub-expression once (a printed
    node's text does not depend on where it stands: its parent adds any parentheses)."""

    def __init__(self):
        super().__init__({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                          "user_functions": {}})
        self._texts: dict = {}

    def _print(self, expr, **kwargs):
        if kwargs or not isinstance(expr, sympy.Basic):
            return super()._print(expr, **kwargs)
        text = self._texts.get(expr)
        if text is None:
            text = self._texts[expr] = super()._print(expr)
        return text


# ---------------------------------------------------------------- generic kernels

def _kernel_shapes() -> dict:
    from rubinperf.kernels.catalog import CATALOG

    return {name: kind.shapes for name, kind in CATALOG.items()}


# kind -> shape names that become symbols. Other options (dtype, causal, ranks) are structure.
KERNEL_SHAPES = _kernel_shapes()


def generic_kernel(kind: str, shape: dict, dtype: str | None = None, causal: bool = False, ranks: int = 8,
                   gpus_per_tray=None) -> Kernel:
    """A generic kernel, exactly as the `kernel` command builds it (`kernels.catalog`); shape values may be symbols."""
    from rubinperf.kernels.catalog import build

    return build(kind, shape, dtype=dtype, causal=causal, ranks=ranks, gpus_per_tray=gpus_per_tray)


def shape_symbols(kind: str) -> dict:
    return {name: sym(name) for name in KERNEL_SHAPES[kind]}


# ---------------------------------------------------------------- the step


@functools.lru_cache(maxsize=16)
def _symbolic_graph(model, layout, spoint: Point, gpus_per_tray):
    from rubinperf.step.timing import op_graph

    return op_graph(model, layout, spoint, gpus_per_tray)


@functools.lru_cache(maxsize=16)
def _symbolic_step(model, layout, spoint: Point, shw: Hardware, split: bool = False):
    """The StepResult over symbols; `split`: as two micro-batches (step.timing.two_micro_batches), as the numeric
    step is where the stack splits it (decided on the numeric point: step.timing.splits_in_two)."""
    from rubinperf.step.result import StepResult
    from rubinperf.step.timing import time_ops, two_micro_batches

    if split:
        return StepResult(model, shw, layout, spoint, two_micro_batches(model, shw, layout, spoint))
    return StepResult(model, shw, layout, spoint, time_ops(_symbolic_graph(model, layout, spoint, shw.gpus_per_tray), shw))


@dataclass(frozen=True)
class SymbolicStep:
    """A step built over symbols, with the values that give back the numeric step. The ops are built at once;
    their times (`result`, the whole step) when asked for, and those of the ops of one name alone (`timed`)."""

    ops: list               # the step's ops over symbols (rubinperf.step.graph.Op)
    values: dict            # Symbol -> number: the hardware's and the operating point's
    hw: Hardware            # the numeric hardware
    point: Point            # the numeric point
    model: object
    layout: object
    key: tuple              # (model, layout, symbolic point, symbolic hardware, split in two micro-batches)

    @property
    def result(self):
        """The StepResult over symbols: every op timed (cached)."""
        return _symbolic_step(*self.key)

    def timed(self, name: str) -> list:
        """OpTime of each op named `name`, over symbols (the whole step's, where it is built already)."""
        from rubinperf.step.result import OpTime
        from rubinperf.step.timing import op_time

        shw = self.key[3]
        return [OpTime(o, op_time(o, shw)) for o in self.ops if o.name == name]

    def metric(self, name: str):
        return metric_expr(self.result, name)


def symbolic_step(model, hw: Hardware, layout, point: Point) -> SymbolicStep:
    """The step of `model` on `hw` in `layout` at `point`, over hardware and point symbols (cached)."""
    # Keyed on the structure only (phase, placements, integer hardware fields): every value is a symbol.
    spoint = symbolic_point(point, allreduce_numbers(model, layout, point))
    shw = symbolic_hardware(hw)
    from rubinperf.step.timing import splits_in_two

    ops = _symbolic_graph(model, layout, spoint, shw.gpus_per_tray)
    values = {**hardware_values(hw), **point_values(point, model)}
    split = splits_in_two(hw, point, ops)   # the numeric point's tokens against the stack's threshold
    return SymbolicStep(ops, values, hw, point, model, layout, (model, layout, spoint, shw, split))


from rubinperf.analysis.elasticity import METRICS  # noqa: E402  (labels shared with the numeric path)


def metric_expr(result, name: str):
    if name == "step-time":
        return result.expected_s
    if name == "tokens-per-gpu":
        return result.tokens_per_s_per_gpu
    if name == "tokens-per-user":
        return result.tokens_per_s_per_user
    raise SpecError(f"--metric: expected one of {', '.join(METRICS)}, got {name!r}")


# ---------------------------------------------------------------- explanations

# (key, label, unit) of the expressions an explanation shows, in order.
COST_TERMS = [("flops", "FLOPs", "FLOP"), ("bytes", "bytes through memory (HBM + host)", "B")] + [
    (k, k.replace("_", " "), "B") for k in BYTE_KINDS] + [
    ("host_bytes", "host bytes (over C2C)", "B"), ("nvlink_bytes", "NVLink bytes sent", "B"),
    ("scale_out_bytes", "scale-out bytes sent", "B")]
TIME_TERMS = [("compute_s", "compute term (whole tiles and waves)", "s"),
              ("memory_s", "memory term (bytes at the streaming rate)", "s"),
              ("parallelism_s", "parallelism term (too few bytes in flight)", "s"), ("comm_s", "link term", "s"),
              ("latency_s", "latency term (launch, fill, collectives, host)", "s"), ("sol_s", "speed of light", "s"),
              ("expected_s", "expected", "s")]


@dataclass
class Explanation:
    """Named expressions of one kernel (or of all the ops of one name in a step), and the values to substitute."""

    kernel: str
    context: dict                       # what was explained: hardware, model, layout, shapes, ...
    exprs: dict                         # key -> sympy expression (see COST_TERMS, TIME_TERMS)
    values: dict                        # Symbol -> number
    rule: str = ""                      # how expected and SOL compose the terms
    numbers: dict = field(default_factory=dict)

    def __post_init__(self):
        memo: dict = {}   # the terms share sub-expressions (expected holds the others): each node worked out once
        self.numbers = {k: evaluate(e, self.values, memo) for k, e in self.exprs.items()}

    @property
    def bound(self) -> str:
        return binding_term(self._terms)

    @property
    def busiest(self) -> str:
        """The unit whose overlapping work is largest (roofline.busiest_unit)."""
        return busiest_unit(self._terms)

    @property
    def _terms(self) -> dict:
        return {b: self.numbers.get(f"{b}_s", 0.0) for b in BOUNDS}

    @property
    def symbols(self) -> dict:
        """The symbols the formulas use, with their values."""
        used = set().union(*(sympy.sympify(e).free_symbols for e in self.exprs.values()))
        return {s.name: float(v) for s, v in sorted(self.values.items(), key=lambda sv: sv[0].name) if s in used}

    def to_record(self) -> dict:
        rec = {"kernel": self.kernel, **self.context,
               "time_ms": self.numbers["expected_s"] * 1e3, "sol_time_ms": self.numbers["sol_s"] * 1e3,
               "bound": self.bound, "busiest_unit": self.busiest, "rule": self.rule, "symbols": self.symbols,
               "terms": {}}
        for key, label, unit in COST_TERMS + TIME_TERMS:
            if key in self.exprs:
                e = self.exprs[key]
                rec["terms"][key] = {"label": label, "unit": unit, "formula": to_str(e), "latex": to_latex(e),
                                     "substituted": to_str(substitute(e, self.values)), "value": self.numbers[key]}
        return rec


def _cost_exprs(items) -> dict:
    """items: (Cost, KernelTime, repeat, stretch) -> summed expressions (times weighted by repeat x stretch).

    Items with the same cost and stretch (layers of one shape built in different layer
    classes) are merged first, so the formula reads `40 x (...)`, not a sum of copies.
    """
    merged: dict = {}
    for cost, t, rep, st in items:
        key = (cost, t, st)
        merged[key] = merged.get(key, 0) + rep
    exprs = {}
    for key, _, _ in COST_TERMS:
        total = sum((getattr(c, key) * rep for (c, _, _), rep in merged.items()), sympy.Integer(0))
        if key in ("flops", "bytes") or total != 0:
            exprs[key] = total
    for key, _, _ in TIME_TERMS:
        exprs[key] = sum((getattr(t, key) * rep * st for (_, t, st), rep in merged.items()), sympy.Integer(0))
    return tidy_all(exprs)


def tidy(expr):
    """Whole-number floats (2.0 launches) as integers: the same value, a shorter formula."""
    expr = sympy.sympify(expr)
    whole = {f: sympy.Integer(int(f)) for f in expr.atoms(sympy.Float) if float(f).is_integer()}
    return replace(expr, whole) if whole else expr


def tidy_all(exprs: dict) -> dict:
    """{key: tidy(expr)} for expressions that share sub-expressions (an op's expected time holds its terms; the
    step time holds every op's), each shared one rebuilt once: one mapping for the whole floats of them all (an
    expression without a float of the mapping comes back as it stands, as tidy leaves it) and one walk's memo."""
    exprs = {k: sympy.sympify(e) for k, e in exprs.items()}
    whole = {f: sympy.Integer(int(f)) for e in exprs.values() for f in e.atoms(sympy.Float) if float(f).is_integer()}
    if not whole:
        return exprs
    memo: dict = {}
    return {k: replace(e, whole, memo) for k, e in exprs.items()}


def replace(expr, mapping: dict, memo: dict | None = None):
    """`expr.xreplace(mapping)` that rebuilds Max/Min unevaluated: sympy's simplification of
    a Max over symbolic terms costs seconds on a step graph, and changes nothing here. `memo`
    (node -> its replacement) may be shared by calls with the same mapping."""
    memo = {} if memo is None else memo

    def walk(e):
        if e in mapping:
            return mapping[e]
        if not e.args:
            return e
        if e in memo:
            return memo[e]
        args = tuple(walk(a) for a in e.args)
        if args == e.args:
            out = e
        elif isinstance(e, (sympy.Max, sympy.Min)):
            out = e.func(*args, evaluate=False)
        else:
            out = e.func(*args)
        memo[e] = out
        return out

    return walk(sympy.sympify(expr))


def active_branch(expr, values: dict, numbers: dict | None = None):
    """The smooth piece of a piecewise expression that holds at `values`: every Max (Min) is
    replaced by its argument that is largest (smallest) there, and every ceiling or floor (whole
    tiles, waves, K splits) by its value there. Same value at `values`, and the same derivatives
    away from a kink or a step (at a tie the first tied term is taken: one-sided). `numbers`: an
    `evaluate` memo at these values, to share."""
    memo: dict = {}
    numbers = {} if numbers is None else numbers   # node -> its number at `values` (shared by the evaluations below)

    def walk(e):
        if not e.args:
            return e
        if e in memo:
            return memo[e]
        if isinstance(e, (sympy.ceiling, sympy.floor)):  # whole tiles, waves, splits: constant between steps
            out = sympy.Float(evaluate(e, values, numbers))
            memo[e] = out
            return out
        args = [walk(a) for a in e.args]
        if isinstance(e, (sympy.Max, sympy.Min)):
            nums = [evaluate(a, values, numbers) for a in args]
            best = max(nums) if isinstance(e, sympy.Max) else min(nums)
            out = args[nums.index(best)]
        elif tuple(args) == e.args:
            out = e
        else:
            out = e.func(*args)
        memo[e] = out
        return out

    return walk(sympy.sympify(expr))


KERNEL_RULE = ("expected = latency + max(compute, memory + parallelism, link) (a fused kernel hides only a share of the "
               "smaller terms); SOL = max(FLOPs/peak, bytes/bandwidth, link bytes/bandwidth)")


def explain_kernel(kind: str, shape: dict, hw: Hardware, dtype: str | None = None, causal: bool = False,
                   ranks: int = 8, launch: str = "eager") -> Explanation:
    """A generic kernel over shape and hardware symbols; `shape` holds the numbers to substitute."""
    names = KERNEL_SHAPES[kind]
    symbolic = {n: sym(n) for n in names}
    if kind == "attention" and shape.get("kv_heads") is None:
        shape = {**shape, "kv_heads": shape["heads"]}
    kern = generic_kernel(kind, symbolic, dtype=dtype, causal=causal, ranks=ranks, gpus_per_tray=hw.gpus_per_tray)
    t = kernel_time(kern, symbolic_hardware(hw), launch=launch)
    values = {**hardware_values(hw), **{symbolic[n]: shape[n] for n in names}}
    ctx = {"hardware": hw.name, "launch": launch, **{n: shape[n] for n in names}}
    if dtype:
        ctx["dtype"] = dtype
    if kind == "attention":
        ctx["causal"] = causal
    if kind in ("all-reduce", "all-to-all", "all-gather"):
        ctx["ranks"] = ranks
    return Explanation(kind, ctx, _cost_exprs([(kern.cost, t, 1, 1)]), values, KERNEL_RULE)


def op_names(step) -> list[str]:
    """Op names of a step (a SymbolicStep or a StepResult) in breakdown order (first appearance)."""
    if isinstance(step, SymbolicStep):
        return list(dict.fromkeys(o.name for o in step.ops))
    return list(dict.fromkeys(o.op.name for o in step.ops))


def explain_op(ss: SymbolicStep, name: str, timed: list | None = None) -> Explanation:
    """Every op of `name` in the step, summed over layers and passes, over symbols (`timed`: their OpTimes,
    where the caller has them)."""
    timed = ss.timed(name) if timed is None else timed
    items = [(o.op.cost, o.time, o.op.repeat, o.op.stretch) for o in timed]
    if not items:
        raise SpecError(f"no op named {name!r} in this step")
    ctx = _step_context(ss)
    ctx["part"] = timed[0].op.part
    ctx["occurrences"] = round(evaluate(sympy.sympify(sum(rep for _, _, rep, _ in items)), ss.values))
    if _attends_kv(timed[0].op):
        m = ss.model
        ctx["formats"] = (f"KV cache {m.kv_cache_dtype or 'as stated'} ({m.cache_entry_bytes:g} B per entry), "
                          f"attention MMA {ss.point.attention_mma_dtype}")
    stretched = any(st != 1 for *_, st in items)
    rule = ("expected = sum over its kernels and layers of latency + max(compute, memory + parallelism, link)"
            + (", stretched by 1/balancedness (the busiest rank sets the pace)" if stretched else "")
            + "; SOL = sum of max(FLOPs/peak, bytes/bandwidth, link bytes/bandwidth)")
    return Explanation(name, ctx, _cost_exprs(items), ss.values, rule)


def _attends_kv(op) -> bool:
    """An attention op over the KV cache (not the indexer's logits over its keys)."""
    return any(k.family == "attention" for k in op.kernels) and "logits" not in op.name.lower()


def _step_context(ss: SymbolicStep) -> dict:
    m, p = ss.model, ss.point
    decode = p.phase == "decode"
    return {"hardware": ss.hw.name, "model": m.name, "layout": ss.layout.name, "phase": p.phase,
            "batch_per_rank": float(p.batch), "context_tokens": float(p.context),
            **({"draft_tokens": float(p.k(m)), "acceptance": float(p.accepted(m))} if decode
               else {"new_tokens_per_rank": float(p.new_tokens)})}


STEP_TIME = sympy.Symbol("step_time_s", positive=True)


def explain_step(ss: SymbolicStep) -> dict:
    """The step's decomposition: its top-level formulas and one explanation per op name."""
    r = ss.result
    ops = [explain_op(ss, name, [o for o in r.ops if o.op.name == name]) for name in op_names(r)]
    top = {
        "expected_s": r.expected_s,
        "gpu_s": r.gpu_s,
        "cpu_s": r.cpu_s,
        "exposed_s": r.exposed_s,
        "sol_s": r.sol_s,
        "tokens_per_s_per_gpu": r.tokens_per_step / STEP_TIME / r.layout.ranks,
        "tokens_per_s_per_user": r.tokens_per_s_per_user * r.expected_s / STEP_TIME,
    }
    context = _step_context(ss)
    out = {"context": context, "top": top, "ops": ops}
    if ss.point.phase == "decode":
        out["interactivity"] = interactivity_spreads(ss.hw, context["draft_tokens"], context["acceptance"])
    return out


P90_TABLE_NU = (5.0, 10.0, 20.0, 40.0, 72.0, 125.0)
P90_TABLE_SIGMA = (0.0145, 0.05)


def interactivity_spreads(hw: Platform, k: float, acceptance: float) -> dict:
    """The P90 (and P50, P10) factors over the mean at the stack's spreads, their sources, and the P90 factor at
    other concentrations nu and step spreads sigma (serving/interactivity.py)."""
    from rubinperf.serving.interactivity import speed_factor, speed_factors

    nu, sigma = float(hw.acceptance_concentration), float(hw.step_time_spread)
    f = speed_factors(int(k), float(acceptance), nu, sigma)
    # the table's P90 alone (speed_factors' own p90: the same function of the same arguments)
    table = {f"{s:g}": {f"{n:g}": speed_factor(int(k), float(acceptance), n, s, "p90") for n in P90_TABLE_NU}
             for s in sorted({*P90_TABLE_SIGMA, sigma})}
    lo, hi = float(hw.acceptance_concentration_low), float(hw.acceptance_concentration_high)
    return {"acceptance_concentration": nu, "acceptance_concentration_range": [lo, hi],
            "p90_over_the_range": [speed_factors(int(k), float(acceptance), n, sigma)["p90"] for n in (lo, hi)],
            "step_time_spread": sigma, "p90": f["p90"], "p50": f["p50"],
            "p10": f["p10"], "source": hw.sources.get("stack.interactivity", ""),
            "p90_by_sigma_and_nu": table}


# The step's top-level quantities (explain_step's "top"), named, with their unit.
STEP_LABELS = {
    "expected_s": ("step time = GPU + exposed host work", "s"),
    "gpu_s": ("GPU time = sum over GPU ops of their expected time", "s"),
    "cpu_s": ("host path (the slowest rank's scheduling + DP sync)", "s"),
    "exposed_s": ("exposed host work = max(0, host path - GPU) under async scheduling, else the host path", "s"),
    "sol_s": ("speed of light = sum over GPU ops of their SOL", "s"),
    "tokens_per_s_per_gpu": ("tokens/s per GPU", "tok/s"),
    "tokens_per_s_per_user": ("tokens/s per user", "tok/s"),
}


def step_numbers(st) -> tuple[dict, dict]:
    """The values of explain_step's top-level formulas, and the symbol values they were evaluated at."""
    values = dict(st["ops"][0].values)
    memo: dict = {}   # shared by the formulas (each holds the step's ops); a node without step_time_s has the same
    t = evaluate(st["top"]["expected_s"], values, memo)   # number before and after step_time_s gets its value
    values[STEP_TIME] = t
    return {k: evaluate(e, values, memo) for k, e in st["top"].items()}, values


def step_record(st) -> dict:
    """`explain step --json`: the step's formulas (text and LaTeX) and values, and each op's record."""
    nums, values = step_numbers(st)
    top = {k: {"label": STEP_LABELS[k][0], "formula": to_str(e), "latex": to_latex(e), "value": nums[k]}
           for k, e in tidy_all(st["top"]).items()}
    return {"kernel": "step", **st["context"], "step_time_ms": nums["expected_s"] * 1e3,
            "sol_step_time_ms": nums["sol_s"] * 1e3, "top": top, "ops": [ex.to_record() for ex in st["ops"]],
            **({"interactivity": st["interactivity"]} if "interactivity" in st else {})}


# ---------------------------------------------------------------- printing


def _number_name(v: float) -> str:
    v = float(v)
    if v == int(v) and abs(v) < 1e7:
        return str(int(v))
    return f"{v:.4g}"


def substitute(expr, values: dict):
    """The expression with every symbol replaced by a symbol *named* after its value: the
    structure stays visible (2·16·4096·4096), nothing is evaluated."""
    expr = sympy.sympify(expr)
    # Dummies made in name order: their order (and so the printed order of terms) then does not follow the
    # set order of free_symbols, which changes with Python's hash seed from run to run. One Dummy per symbol of
    # `values`, made in name order, for every expression substituted at these values: any two of them stand in
    # the order they would have been made in for one expression alone (sympy orders Dummies by name, then by
    # the order they were made in), so each text is the same, and the formulas of one step (which share their
    # op's terms) share their substituted sub-expressions too, rebuilt once.
    key = frozenset(values.items())
    shared = _SUBSTITUTIONS.get(key)
    if shared is None:
        if len(_SUBSTITUTIONS) >= 8:
            _SUBSTITUTIONS.clear()
        dummies = {s: sympy.Dummy(_number_name(values[s])) for s in sorted(values, key=lambda x: x.name)}
        shared = _SUBSTITUTIONS[key] = (dummies, {})
    return replace(expr, *shared)


_SUBSTITUTIONS: dict = {}   # the items of a values dict -> (symbol -> its Dummy, replace's memo)


def _fast_line_width(line: str, _width=pretty_symbology.line_width) -> int:
    """sympy's line_width (the characters of a line of a pretty picture, combining marks not counted), without
    translating a line that has no character beyond ASCII (no combining mark) and once for the others: sympy
    measures every line of every sub-picture again as it stacks them (about 200,000 times for one kernel's
    explanation), and the same lines recur. The same widths, so the same pictures."""
    if line.isascii():
        return len(line)
    width = _WIDTHS.get(line)
    if width is None:
        width = _WIDTHS[line] = _width(line)
    return width


_WIDTHS: dict = {}
stringpict.line_width = pretty_symbology.line_width = _fast_line_width


_UNITS = "sympy.physics.units"
_NO_UNITS = types.ModuleType(_UNITS)
_NO_UNITS.Quantity = type("Quantity", (), {})


class _Pretty(PrettyPrinter):
    def _print_Symbol(self, e, bold_name=False):  # field names verbatim: fp4_dense..., not fp_4
        return prettyForm(e.name)

    _print_Dummy = _print_Symbol  # substituted numbers (see `substitute`)

    def _print_Max(self, e):
        return self._helper_print_function(e.func, e.args, func_name="max")

    def _print_Min(self, e):
        return self._helper_print_function(e.func, e.args, func_name="min")

    def _print_Mul(self, product):
        """sympy's own, without importing sympy.physics.units (0.1-0.16 s of CPU) only to ask whether a factor is
        a unit Quantity, which no rubinperf formula holds: while the product prints, that module is a stand-in whose
        Quantity nothing is an instance of (the same picture), removed afterwards."""
        if _UNITS in sys.modules:
            return super()._print_Mul(product)
        sys.modules[_UNITS] = _NO_UNITS
        try:
            return super()._print_Mul(product)
        finally:
            del sys.modules[_UNITS]

    def _print_ceiling(self, e):  # as a named function: sympy's ASCII form of the brackets fails
        return self._helper_print_function(e.func, e.args, func_name="ceil")

    def _print_floor(self, e):
        return self._helper_print_function(e.func, e.args, func_name="floor")


_PRINTED: dict = {}   # printer class -> {id(node): (node, its text)}
_PRINTED_MAX = 200_000


class _PrintOnce:
    """A printer (default settings) that prints each sub-expression object once: a step's formulas hold the same
    op sub-expressions many times over (the step time holds every op's; the op's expected time holds its terms),
    and sympy prints, orders and parenthesises every copy again. A node's text does not depend on where it
    stands (its parent adds any parentheses; the Float printers here do not look at the depth), so the texts are
    the same. Keyed on the node object itself (held, so its id is not reused), not on equality: sympy before 1.13
    counts 2 and 2.0 equal."""

    def _print(self, expr, **kwargs):
        if kwargs or not isinstance(expr, sympy.Basic) or not expr.args:
            return super()._print(expr, **kwargs)
        texts = _PRINTED.setdefault(type(self), {})
        hit = texts.get(id(expr))
        if hit is not None and hit[0] is expr:
            return hit[1]
        text = super()._print(expr)
        if len(texts) >= _PRINTED_MAX:
            texts.clear()
        texts[id(expr)] = (expr, text)
        return text


class _Latex(_PrintOnce, LatexPrinter):
    def _print_Symbol(self, expr, style="plain"):
        name = expr.name
        try:
            v = float(name)
        except ValueError:
            return r"\mathrm{" + name.replace("_", r"\_") + "}"
        mant, _, exp = f"{v:.4g}".partition("e")
        return mant + (rf" \times 10^{{{int(exp)}}}" if exp else "")

    _print_Dummy = _print_Symbol


class _Str(_PrintOnce, StrPrinter):
    def _print_Dummy(self, e):
        return e.name

    def _print_Max(self, e):
        return "max(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Min(self, e):
        return "min(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Float(self, e):
        return repr(float(e))


def to_pretty(expr, width: int = 160) -> str:
    return _Pretty({"num_columns": width, "use_unicode": True}).doprint(sympy.sympify(expr))


def to_latex(expr) -> str:
    return _Latex().doprint(sympy.sympify(expr))


class _ShortStr(_Str):
    def _print_Float(self, e):
        return _number_name(float(e))


def to_str(expr) -> str:
    """One line, full precision: the formula as data (JSON)."""
    return _Str().doprint(sympy.sympify(expr))


def to_short_str(expr) -> str:
    """One line, numbers to 4 significant digits: the formula in a table."""
    return _ShortStr().doprint(sympy.sympify(expr))
