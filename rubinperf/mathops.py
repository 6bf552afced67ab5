"""max/min/where that work on numbers, numpy arrays and sympy expressions alike.

Formulas are written once with these, so the numeric path, the vectorised sweep and the
symbolic `explain` path evaluate the very same expression. numpy is imported only when
an array is seen, so a scalar `estimate` never pays for it.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import math


def _is_symbolic(values) -> bool:
    return any(hasattr(type(v), "free_symbols") for v in values)   # (the class: the property walks the tree)


def _is_array(values) -> bool:
    return any(type(v).__module__ == "numpy" for v in values)


def _symbolic_extreme(func, values):
    """sympy Max/Min left unevaluated: sympy's pairwise simplification costs seconds over a
    step graph. A literal 0 in a Max whose other terms are known non-negative is dropped
    (a kernel's absent link term). Substituting numbers evaluates the result as usual."""
    args = list(values)
    if any(type(v).__name__ == "NaN" for v in args):   # sympy's nan: a formula is 0/0 or inf - inf at these values
        from rubinperf.errors import SpecError

        raise SpecError("a formula of this step is not a number at these values (0/0 or inf - inf): a spec value or "
                        "an option is out of range")
    if func.__name__ == "Max":
        rest = [v for v in args if not (isinstance(v, (int, float)) or getattr(v, "is_number", False)) or v != 0]
        if rest and len(rest) < len(args) and all(_nonnegative(v) for v in rest):
            args = rest
    return args[0] if len(args) == 1 else func(*args, evaluate=False)


def _nonnegative(v) -> bool:
    return v >= 0 if type(v) in _PLAIN else _sign(v) > 0


_POSITIVE, _NONNEGATIVE, _UNKNOWN = 2, 1, 0


def _sign(v) -> int:
    """What the structure of a sympy expression tells of its sign: _POSITIVE, _NONNEGATIVE or _UNKNOWN,
    by sympy's own rules (a sum or product of non-negative terms is non-negative, and positive when every
    factor, or one term, is; a positive base to any power is positive; max is positive when one argument
    is, min when all are; ceiling keeps its argument's positivity, floor its non-negativity) read off the
    tree, so that sympy's assumption system is not asked about each term of a step, which costs seconds."""
    if type(v) in _PLAIN:
        return _POSITIVE if v > 0 else _NONNEGATIVE if v == 0 else _UNKNOWN
    if v.is_Number:
        return _POSITIVE if v.is_positive else _NONNEGATIVE if v.is_zero else _UNKNOWN
    if v.is_Symbol:
        return _POSITIVE if v.is_positive else _NONNEGATIVE if v.is_nonnegative else _UNKNOWN
    if v.is_Add or v.is_Mul:
        signs = [_sign(a) for a in v.args]
        if _UNKNOWN in signs:
            return _UNKNOWN
        if v.is_Add:
            return _POSITIVE if _POSITIVE in signs else _NONNEGATIVE
        return _NONNEGATIVE if _NONNEGATIVE in signs else _POSITIVE
    if v.is_Pow:
        base, exp = v.args
        if exp.is_Number and exp.is_real:
            b = _sign(base)
            if b == _POSITIVE or (b == _NONNEGATIVE and exp.is_positive):
                return b
        return _UNKNOWN
    kind = type(v).__name__
    if kind in ("Max", "Min"):
        signs = [_sign(a) for a in v.args]
        return max(signs) if kind == "Max" else min(signs)
    if kind == "ceiling":
        return _POSITIVE if _sign(v.args[0]) == _POSITIVE else _UNKNOWN
    if kind == "floor":
        return _NONNEGATIVE if _sign(v.args[0]) > _UNKNOWN else _UNKNOWN
    return _POSITIVE if v.is_positive else _NONNEGATIVE if v.is_nonnegative else _UNKNOWN


_PLAIN = (int, float)
_PLAIN_TYPES = frozenset(_PLAIN)


def _numpy_only(values) -> bool:
    """Plain numbers and at least one numpy array or scalar (no symbol): the array path, told cheaply."""
    seen = False
    for v in values:
        t = type(v)
        if t.__module__ == "numpy":
            seen = True
        elif t not in _PLAIN:
            return False
    return seen


def _extreme(values, pick, numpy_name: str, sympy_name: str):
    """max (min) of numbers, numpy arrays or sympy expressions: `pick` is the builtin, `numpy_name` the
    elementwise ufunc, `sympy_name` the sympy function (left unevaluated, see _symbolic_extreme)."""
    if _PLAIN_TYPES.issuperset(map(type, values)):  # the scalar path: no symbol or array to look for
        return pick(values)
    numpy_only = _numpy_only(values)
    if not numpy_only and any(type(v) is Outer or type(v) is Bands for v in values):
        return _outer_extreme(values, pick, numpy_name)
    if not numpy_only and _is_symbolic(values):
        import sympy

        return _symbolic_extreme(getattr(sympy, sympy_name), values)
    if numpy_only or _is_array(values):
        import numpy as np

        if len(values) == 2:
            one = _one_side(values, pick)
            if one is not None:
                return one
        return functools.reduce(getattr(np, numpy_name), values)
    return pick(values)


_SIDE_SIZE = 4096   # elements from which a two-operand max or min first looks for one side winning everywhere


def _one_side(values, pick):
    """max (min) of a float64 array and a plain number where one side wins at every element, strictly: the array
    itself, or the number as a float (a grid whose every element is past the bound carries no axis from it, as
    sstep's one regime). np.maximum gives these very values (it returns an operand's element; ties, where -0.0 and
    0.0 meet, and nan are left to it); its loop against a number is slow (measured 1.2-1.5 ns an element against
    0.16 for a min or a max over the array). None where neither side wins everywhere."""
    x, c = values
    if type(x) in _PLAIN:
        x, c = c, x
    if type(c) not in _PLAIN or getattr(x, "size", 0) < _SIDE_SIZE or x.dtype.char != "d":
        return None
    lo, hi = x.min(), x.max()
    low, high = (lo, hi) if pick is builtins.max else (-hi, -lo)
    bound = c if pick is builtins.max else -c
    if low > bound:   # (a nan fails both tests)
        return x
    if high < bound:
        return float(c)
    return None


def smax(*values):
    return _extreme(values, builtins.max, "maximum", "Max")


def smin(*values):
    return _extreme(values, builtins.min, "minimum", "Min")


def sexcess(a, b):
    """max(a - b, 0): smax(a - b, 0.0) for numbers, arrays and symbols. Where b is a numpy block (float64, at least
    _SIDE_SIZE elements) and a a plain number, or a numpy column of b's rows, a < b at every element is told from b's
    least element (in each row, for a column): one pass over b, no a - b made, and the plain 0.0 that smax gives there
    (an element of a - b is < 0 exactly where a < b)."""
    if type(b).__module__ == "numpy" and getattr(b, "size", 0) >= _SIDE_SIZE and b.dtype.char == "d":
        if type(a) in _PLAIN:
            if a < b.min():   # (a nan fails the test: left to smax)
                return 0.0
        elif (type(a).__module__ == "numpy" and getattr(a, "ndim", 0) == 2 and b.ndim == 2 and a.shape[1] == 1
              and b.shape[1] > 1 and a.shape[0] == b.shape[0] and a.dtype.char == "d"):
            if bool((a < b.min(axis=1, keepdims=True)).all()):
                return 0.0
    return smax(a - b, 0.0)


def scap(x, cap):
    """min(x, cap) for a count that saturates at a plain number `cap` (a top-k selection, a sliding window).
    Where every element of a numpy array x reaches cap, the result is cap itself (as a float, the value
    np.minimum gives at each element), so a grid of contexts all past saturation carries no context axis:
    an attention kernel that no longer grows with context is then timed once per batch, not per point."""
    if type(x) is Outer and x.col is None:   # a row alone: its cap, kept a row
        if _ONLY_FACTORED and type(cap) in _PLAIN:
            _note_cuts(x.row >= cap)
        return _as_row(scap(x.row, cap))
    if type(cap) in _PLAIN and cap != 0 and type(x).__module__ == "numpy" and getattr(x, "ndim", 0) > 0:
        import numpy as np

        if np.all(x >= cap):   # (a nan is not >= cap: it stays in an array; cap 0 would meet -0.0)
            return float(cap)
    return smin(cap, x)


# Rows of the numeric step whose roundings are held (held_roundings), or None.
_HELD_ROWS: int | None = None


@contextlib.contextmanager
def held_roundings(rows: int):
    """Inside: a ceil or floor of a numpy array of `rows` rows (its first axis) gives every row the rounding of
    row 0, the operating point. sympy's derivative of the symbolic step holds each rounding at its value there
    (d ceiling(x) / dx = 0); a central difference of the numeric step with its roundings so held measures the
    same slope, where a plain one would measure a jump (a batch of 16 is a tile boundary)."""
    global _HELD_ROWS
    before, _HELD_ROWS = _HELD_ROWS, rows
    try:
        yield
    finally:
        _HELD_ROWS = before


def _rounded(x, name: str, sympy_name: str):
    """math.`name` (ceil or floor) for numbers, as a float (inf and nan pass through, to be reported); numpy's for
    arrays (inside held_roundings: row 0's for every row); sympy's `sympy_name` for symbols."""
    if type(x) is Bands:
        return _rounded(x.full(), name, sympy_name)
    if type(x) is Outer:   # (a row alone: its rounding, kept a row)
        return _as_row(_rounded(x.row, name, sympy_name)) if x.col is None else _rounded(x.full(), name, sympy_name)
    if type(x).__module__ == "numpy":
        import numpy as np

        if _HELD_ROWS is not None and getattr(x, "ndim", 0) and x.shape[0] == _HELD_ROWS:
            return np.broadcast_to(getattr(np, name)(x[:1]), x.shape).copy()
        return getattr(np, name)(x)
    if type(x) not in _PLAIN and _is_symbolic((x,)):
        import sympy

        return getattr(sympy, sympy_name)(x)
    return float(getattr(math, name)(x)) if math.isfinite(x) else float(x)


def sceil(x):
    """Ceiling for numbers and arrays; sympy's ceiling for symbols."""
    return _rounded(x, "ceil", "ceiling")


def sfloor(x):
    """Floor for numbers and arrays; sympy's floor for symbols."""
    return _rounded(x, "floor", "floor")


def ssum(values):
    """Sum that adds small broadcastable arrays among themselves before touching the large ones.

    In a sweep over (batch x context), most op times vary with batch only: adding those
    first keeps the number of full-grid additions to the few ops that vary with both.
    """
    values = list(values)
    if any(type(v) is Outer or type(v) is Bands for v in values):
        return _outer_sum(values)
    if not _is_array(values):
        return sum(values, 0.0)
    import numpy as np

    groups: dict[tuple, object] = {}
    own: set = set()   # shapes whose partial sum is an array this sum made (added into in place)
    for v in values:
        shape = getattr(v, "shape", ())   # (np.shape, for numbers and numpy values)
        acc = groups.get(shape)
        if acc is None:
            groups[shape] = v
        elif shape in own and v.dtype == acc.dtype:
            np.add(acc, v, out=acc)
        else:
            groups[shape] = acc = acc + v
            if type(acc) is np.ndarray and acc.ndim:
                own.add(shape)
    return functools.reduce(lambda a, b: a + b, sorted(groups.values(), key=np.size))


def is_numpy(v) -> bool:
    """A numpy array or scalar (numpy is not imported to tell)."""
    return type(v).__module__ == "numpy"


def sadd(*terms):
    """terms[0] + terms[1] + ..., left to right, except that a term that is the plain number 0 (an
    absent cost) is not added to a numpy array, nor an array to it: x + 0.0 is x, and skipping it
    saves a pass over a sweep's arrays. Numbers and symbols are added exactly as written."""
    out = terms[0]
    for t in terms[1:]:
        if type(t) in _PLAIN:
            if t == 0 and type(out).__module__ == "numpy":
                continue
        elif type(out) in _PLAIN and out == 0 and type(t).__module__ == "numpy":
            out = t
            continue
        out = out + t
    return out


def stimes_max(*times):
    """smax of times (non-negative by construction); beside a numpy array, a time that is the plain
    number 0 (an absent term) is left out: it cannot be the largest."""
    for t in times:
        if type(t).__module__ == "numpy":
            kept = [x for x in times if not (type(x) in _PLAIN and x == 0)]
            return smax(*kept) if kept else smax(*times)
    return smax(*times)


def sscale(x, *factors):
    """x * f1 * f2 ..., left to right; a numpy array times the plain number 1 is left as it is (the same values)."""
    for f in factors:
        if type(f) in _PLAIN and f == 1 and type(x).__module__ == "numpy":
            continue
        x = x * f
    return x


def sper(x, d):
    """x / d, as x times 1 / d for numbers and numpy values (within two ulps of x / d: a multiplication runs at a third of
    a division's time an element, and an array's divisor that is a grid's column or row takes its reciprocals over
    that axis alone). Numbers and arrays take the same steps, so an element of an array path is the scalar path's
    number, bit for bit. Symbols: x / d."""
    if type(d) in _PLAIN or type(d).__module__ == "numpy":
        if type(x) in _PLAIN or type(x).__module__ == "numpy" or type(x) is Outer or type(x) is Bands:
            return x * (1.0 / d)
    return x / d


def sdiv(x, *divisors):
    """x / d1 / d2 ..., left to right; a numpy array over the plain number 1 is left as it is (the same values). A float
    array this made is divided by the next plain numbers in place (the same values, without a new array each)."""
    made = False
    for d in divisors:
        if type(d) in _PLAIN and type(x).__module__ == "numpy":
            if d == 1:
                continue
            if made and getattr(x, "ndim", 0) > 0 and x.dtype.char == "d":
                x /= d
                continue
        x = x / d
        made = True
    return x


def dict_init(cls):
    """Give a frozen dataclass made with init=False the __init__ dataclass(init=True) would have given it (the same
    parameters, defaults and field order in __dict__), setting __dict__ at once instead of one object.__setattr__ per
    field: half the time of making a record (Cost, Kernel, KernelTime are made by the ten thousand). For classes
    without __post_init__, default factories or keyword-only fields."""
    import dataclasses

    fields = dataclasses.fields(cls)
    if (not cls.__dataclass_params__.frozen or cls.__dataclass_params__.init or hasattr(cls, "__post_init__")
            or any(not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING for f in fields)):
        raise TypeError(f"{cls.__name__}: dict_init is for @dataclass(frozen=True, init=False) of plain fields")
    names = [f.name for f in fields]
    defaults = {f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING}
    params = ", ".join(n if f"_default_{n}" not in defaults else f"{n}=_default_{n}" for n in names)
    body = ", ".join(f"{n!r}: {n}" for n in names)
    namespace = {"_set": object.__setattr__, **defaults}
    exec(f"def __init__(self, {params}):\n    _set(self, '__dict__', {{{body}}})\n", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


class FieldArithmetic:
    """+ and scalar * field by field, for the records of one dataclass (Cost, KernelTime): sum() starts at 0, and a
    record times k scales every field. Each class makes its records itself (`_of_fields`, in its own module)."""

    def __add__(self, other):
        # __init__ sets __dict__ in field order; sadd beside an array, so an absent field (0.0) adds no pass over it
        return self._of_fields([x + y if type(x) is type(y) or type(x) in _PLAIN and type(y) in _PLAIN else sadd(x, y)
                                for x, y in zip(self.__dict__.values(), other.__dict__.values())])

    def __radd__(self, other):
        if other == 0:
            return self
        return NotImplemented

    def __mul__(self, k):
        return self._of_fields([v * k for v in self.__dict__.values()])

    __rmul__ = __mul__


_MIXED = object()


def _one_regime(lo, hi, bounds, values):
    """The value of sstep's one regime that every element between lo and hi (the least and the largest) falls in, or
    _MIXED where they span two or a bound is nan."""
    if lo != lo:
        return _MIXED
    for n, b in enumerate(bounds):
        if hi <= b:
            return values[n] if n == 0 or lo > bounds[n - 1] else _MIXED
        if lo <= b:
            return _MIXED
    return values[-1]


def sstep(x, bounds, values):
    """values[i] for the first i with x <= bounds[i], else values[-1] (len(values) = len(bounds) + 1): a heuristic's
    table of regimes (a kernel library picking its block size by tokens per expert). Numbers: the plain choice; numpy
    arrays: np.select's values element by element, or the plain value where every element is in one regime; sympy
    symbols: a Piecewise."""
    if type(x) in _PLAIN:
        return next((v for b, v in zip(bounds, values) if x <= b), values[-1])
    if type(x) is Bands:
        return sstep(x.full(), bounds, values)
    if type(x) is Outer:
        if x.col is None:   # a row alone: its regimes, kept a row
            return _as_row(sstep(x.row, bounds, values))
        one = _one_regime(*x.bounds(), bounds, values)   # every element in one regime: its plain value
        return sstep(x.full(), bounds, values) if one is _MIXED else one
    if type(x).__module__ == "numpy":
        import numpy as np

        lo, hi = (x.min(), x.max()) if x.size else (math.nan, math.nan)
        one = _one_regime(lo, hi, bounds, values)   # told from the least and the largest element
        if one is not _MIXED:
            return one
        picked = [x <= b for b in bounds]
        for c, v in zip(picked, values):   # every element in one regime (the first bound every element meets, none
            if c.all():                    # met before by any): that regime's plain value, as for a number, so a
                return v                   # grid of one regime carries no axis from it
            if c.any():
                break
        else:
            return values[-1]
        if _ONLY_FACTORED and x.ndim == 2 and x.shape[0] == 1:   # a row's regimes change at these columns
            _note_cuts(sum((x > b).astype(int) for b in bounds))
        # np.where from the last bound back (the first bound met wins, as np.select picks): the same values, in
        # np.select's dtype, without its full-size default array and its copy per condition
        chosen = [np.asarray(v) for v in values]
        dtype = np.result_type(*chosen)
        out = chosen[-1]
        for c, v in zip(reversed(picked), reversed(chosen[:-1])):
            out = np.where(c, v, out)
        return out.astype(dtype, copy=False)
    import sympy

    return sympy.Piecewise(*[(v, x <= b) for b, v in zip(bounds, values)], (values[-1], True))


# ---------------------------------------------------------------- rank-1 values of a grid's block


_KEEP = object()   # (Outer._with: a part left as it is)


class Unfactored(Exception):
    """A full block asked of an Outer or Bands inside only_factored()."""


_ONLY_FACTORED = False
_FULL_LIMIT = 0   # inside only_factored: the most elements a full block made may have
_ROW_CUTS: set = set()   # inside only_factored: columns where an sstep of a row changes regime


def _note_cuts(regime):
    """Inside only_factored: the columns at which a row's regime (an array of one row: which side of a bound each
    element is on) changes."""
    import numpy as np

    if getattr(regime, "ndim", 0) == 2 and regime.shape[0] == 1:
        _ROW_CUTS.update((np.flatnonzero(np.diff(regime.ravel().astype(int))) + 1).tolist())


def _refuse(size: int):
    """Inside only_factored: Unfactored where a full block of `size` elements is more than it allows."""
    if _ONLY_FACTORED and size > _FULL_LIMIT:
        raise Unfactored


@contextlib.contextmanager
def only_factored(limit: int = 0):
    """Inside: an Outer's or Bands' full block of more than `limit` elements is refused (Unfactored), so that values
    timed over a span of several blocks' columns (GridSteps.metrics) stay column x row factors, whose memory is that of
    a column and a row, and nothing as large as the span is made (a run of a few rows made in full, the top-k's rows
    whose parallelism term is not 0, holds at most `limit`). Yields a set, filled with the columns at which a row's
    regime changes (an sstep of a row, scap, a row's max or min against a number: the top-k's rows split over CTAs
    past a length, sparse attention stops reading the context past its top-k): on either side of them the step is
    one plain value."""
    global _ONLY_FACTORED, _ROW_CUTS, _FULL_LIMIT
    before, _ONLY_FACTORED, _FULL_LIMIT = (_ONLY_FACTORED, _ROW_CUTS, _FULL_LIMIT), True, limit
    _ROW_CUTS = set()
    try:
        yield _ROW_CUTS
    finally:
        _ONLY_FACTORED, _ROW_CUTS, _FULL_LIMIT = before


class Outer:
    """scale x col x row + add, kept as its factors: the value over a block of a grid (a batch column times a context
    row) of a kernel's cost field that is a column times a row (the indexer's FLOPs, bytes and L2 re-reads, its top-k's
    reads, sparse attention's gathers), so that kernel_time's terms are taken on the factors and a full block is made
    only where a formula leaves rank 1.

    col: None (the value is a row alone: `row` as it is, scale 1, add 0) or a numpy column (rows, 1); row: a numpy row
    (1, columns); both, where a column is present, over their first element (`_canon`: one array for equal shapes, so
    the columns of one block's values, all multiples of the batch, are one object, and the rows of one context
    expression too), their scale in `scale`; add: a number or a numpy row. cpos, rpos: every element of col (row) >= 0.
    Rounding: x * c * r taken as c * (r * x), within a few ulps of the same formula on the full block
    (tests/step/test_grid_steps.py holds GridSteps.metrics to step() within 1e-12).

    Only GridSteps.metrics makes them (step/grid.py: FACTORED kernels made on a block with the context row as
    Outer(None, row)); numpy defers to its operators (`__array_ufunc__ = None`); mathops' max, min, sstep, scap,
    ceil, floor and ssum take it apart; anything else makes the full block (`full`)."""

    __slots__ = ("col", "row", "scale", "add", "cpos", "rpos")
    __array_ufunc__ = None
    ndim = 2

    def __init__(self, col, row, scale=1.0, add=0.0, cpos=True, rpos=True):
        self.col, self.row, self.scale, self.add, self.cpos, self.rpos = col, row, scale, add, cpos, rpos

    @property
    def shape(self) -> tuple:
        cols = max(self.row.shape[-1], getattr(self.add, "shape", (1, 1))[-1])
        return (1 if self.col is None else self.col.shape[0], cols)

    @property
    def size(self) -> int:
        r, c = self.shape
        return r * c

    @property
    def dtype(self):
        return self.row.dtype

    def full(self):
        """The value over the block, as a numpy array (a new one where a column is present)."""
        if self.col is None:
            return self.row
        if _ONLY_FACTORED:
            _refuse(self.size)
        out = self.col * (self.row * self.scale if self.scale != 1 else self.row)
        if not _zero_add(self):
            import numpy as np

            if out.shape == np.broadcast_shapes(out.shape, getattr(self.add, "shape", ())):
                np.add(out, self.add, out=out)
            else:
                out = out + self.add
        return out

    def __array__(self, dtype=None, copy=None):
        import numpy as np

        out = np.asarray(self.full())
        return out if dtype is None else out.astype(dtype, copy=False)

    def bounds(self):
        """Bounds on the least and largest element (nan where an element may be nan)."""
        import numpy as np

        rlo, rhi = self.row.min(), self.row.max()
        if self.col is None:
            return rlo, rhi
        clo, chi = self.col.min(), self.col.max()
        ends = (clo * rlo * self.scale, clo * rhi * self.scale, chi * rlo * self.scale, chi * rhi * self.scale)
        if any(e != e for e in ends):
            return math.nan, math.nan
        lo, hi = min(ends), max(ends)
        a = self.add
        return (lo + a, hi + a) if type(a) in _PLAIN else (lo + np.min(a), hi + np.max(a))

    def min(self):
        return self.bounds()[0]

    def max(self):
        return self.bounds()[1]

    def _with(self, col=_KEEP, row=_KEEP, scale=_KEEP, add=_KEEP, cpos=_KEEP, rpos=_KEEP):
        """The same Outer with the given parts replaced."""
        return Outer(self.col if col is _KEEP else col, self.row if row is _KEEP else row,
                     self.scale if scale is _KEEP else scale, self.add if add is _KEEP else add,
                     self.cpos if cpos is _KEEP else cpos, self.rpos if rpos is _KEEP else rpos)

    def __neg__(self):
        if self.col is None:
            return Outer(None, -self.row)
        return self._with(scale=-self.scale, add=-self.add if not _zero_add(self) else 0.0)

    def __mul__(self, k):
        t = type(k)
        if self.col is None:   # a row alone: the plain product, kept a row where it is one
            if t is Outer:
                return k * self.row
            if t in _PLAIN or getattr(k, "ndim", 0) < 2 or k.shape[0] == 1:
                return Outer(None, self.row * k)
            if k.shape[1] == 1 and k.shape[0] > 1:   # a column times a row
                return outer(k, self.row)
            _refuse(k.size)
            return self.row * k
        if t in _PLAIN or (t.__module__ == "numpy" and getattr(k, "ndim", 0) == 0):
            if k == 1:
                return self
            return self._with(scale=self.scale * k, add=self.add * k if not _zero_add(self) else 0.0)
        if t is Outer:
            if k.col is None:
                return self * k.row
            return self.full() * k.full()
        shape = getattr(k, "shape", ())
        if len(shape) == 2 and shape[0] == 1:   # a row
            n, s, rpos = _canon(self.row * k, _ROWS)
            return self._with(row=n, scale=self.scale * s, rpos=rpos,
                              add=self.add * k if not _zero_add(self) else 0.0)
        if len(shape) == 2 and shape[1] == 1 and _zero_add(self):   # a column
            n, s, cpos = _canon(self.col * k, _COLS)
            return self._with(col=n, scale=self.scale * s, cpos=cpos)
        return self.full() * k

    __rmul__ = __mul__

    def __truediv__(self, k):
        t = type(k)
        if self.col is None:
            if t in _PLAIN or getattr(k, "ndim", 0) < 2 or k.shape[0] == 1:
                return Outer(None, self.row / k)
            _refuse(k.size)
            return self.row / _full(k)
        if t in _PLAIN or (t.__module__ == "numpy" and getattr(k, "ndim", 0) == 0):
            return self._with(scale=self.scale / k, add=self.add / k if not _zero_add(self) else 0.0)
        shape = getattr(k, "shape", ())
        if len(shape) == 2 and shape[0] == 1 and t is not Outer:
            n, s, rpos = _canon(self.row / k, _ROWS)
            return self._with(row=n, scale=self.scale * s, rpos=rpos,
                              add=self.add / k if not _zero_add(self) else 0.0)
        if len(shape) == 2 and shape[1] == 1 and t is not Outer and _zero_add(self):
            n, s, cpos = _canon(self.col / k, _COLS)
            return self._with(col=n, scale=self.scale * s, cpos=cpos)
        return self.full() / _full(k)

    def __rtruediv__(self, k):
        return k / self.full()

    def __add__(self, k):
        t = type(k)
        if self.col is None:   # a row alone
            if t is Outer:
                return k + self.row if k.col is not None else Outer(None, self.row + k.row)
            if t in _PLAIN or getattr(k, "ndim", 0) < 2 or k.shape[0] == 1:
                return Outer(None, self.row + k) if t not in _PLAIN or k != 0 else self
            _refuse(k.size)
            return self.row + k
        if t in _PLAIN:
            return self if k == 0 else self._with(add=self.add + k)
        if t is Outer:
            if k.col is None:
                return self + k.row
            if _zero_add(self) or _zero_add(k) or type(self.add) in _PLAIN and type(k.add) in _PLAIN:
                add = _sum2(self.add, k.add)
                if k.col is self.col and k.row is self.row:
                    return self._with(scale=self.scale + k.scale, add=add)
                if k.col is self.col:   # one column: the rows add
                    n, s, rpos = _canon(self.row * self.scale + k.row * k.scale, _ROWS)
                    return self._with(row=n, scale=s, rpos=rpos, add=add)
                if k.row is self.row:   # one row: the columns add
                    n, s, cpos = _canon(self.col * self.scale + k.col * k.scale, _COLS)
                    return self._with(col=n, scale=s, cpos=cpos, add=add)
            runs = _zero_run(self, k)
            if runs is not None:
                return runs
            return _add_into(self.full(), k.full())   # (full(): a new array where a column is present)
        shape = getattr(k, "shape", ())
        if len(shape) < 2 or shape[0] == 1:   # a row or a number of numpy's
            return self._with(add=_sum2(self.add, k))
        if shape[1] == 1:   # a column: a multiple of this one's adds to the row
            n, s, _ = _canon(k, _COLS)
            if n is self.col:
                r, t_, rpos = _canon(self.row * self.scale + s, _ROWS)
                return self._with(row=r, scale=t_, rpos=rpos)
        return _add_into(self.full(), k)

    __radd__ = __add__

    def __sub__(self, k):
        return self + (-k)

    def __rsub__(self, k):
        return (-self) + k


def _zero_run(x: Outer, y: Outer):
    """x + y as Bands where one of them is 0 on a run of first or last rows (its column 0 there: a parallelism term
    max(c, 0) x r, 0 where the CTAs fill the SMs): the other alone on that run, their sum made on the rest only; None
    where neither is."""
    import numpy as np

    rows = x.col.shape[0]
    if y.col.shape != x.col.shape:
        return None
    for a, b in ((x, y), (y, x)):
        if not _zero_add(b):
            continue
        nz = np.flatnonzero(b.col.ravel())
        if nz.size == 0 or (nz[0] == 0 and nz[-1] == rows - 1):
            continue
        i, j = int(nz[0]), int(nz[-1]) + 1
        parts = ([(0, i, _rows_of(a, 0, i))] if i else []) + [(i, j, _rows_of(a, i, j) + _rows_of(b, i, j))] \
            + ([(j, rows, _rows_of(a, j, rows))] if j < rows else [])
        return Bands(parts, np.broadcast_shapes(x.shape, y.shape))
    return None


def _zero_add(o: Outer) -> bool:
    return type(o.add) in _PLAIN and o.add == 0


def _sum2(a, b):
    if type(b) in _PLAIN and b == 0:
        return a
    if type(a) in _PLAIN and a == 0:
        return b
    return a + b


def _full(v):
    return v.full() if type(v) is Outer or type(v) is Bands else v


def _rows_of(v, a: int, b: int):
    """Rows a:b of a block's value: an Outer's column cut (and made canonical again), a row or a number as it is, an
    array's rows, Bands' parts within them."""
    t = type(v)
    if t in _PLAIN:
        return v
    if t is Outer:
        if v.col is None:
            return v
        n, s, cpos = _canon(v.col[a:b], _COLS)
        return v._with(col=n, scale=v.scale * s, cpos=cpos)
    if t is Bands:   # (the run that holds those rows, cut to them; rows over two runs: made)
        for start, stop, w in v.parts:
            if start <= a and b <= stop:
                return w if (start, stop) == (a, b) else _rows_of(w, a - start, b - start)
        return v.full()[a:b]
    shape = getattr(v, "shape", ())
    if len(shape) == 2 and shape[0] > 1:
        return v[a:b]
    return v


class Bands:
    """A block's value made of runs of rows, each its own value (an Outer, a number or an array of those rows): a max
    of two Outers where one wins on the first rows and the other on the rest (the indexer's top-k: its HBM time
    against its L2 time, whose rate follows the CTAs, a column). Arithmetic and mathops' max and min go run by run;
    `full` makes the block, each run from its own factors. Only made inside GridSteps.metrics (see Outer)."""

    __slots__ = ("parts", "shape")
    __array_ufunc__ = None
    ndim = 2

    def __init__(self, parts, shape):
        self.parts, self.shape = parts, tuple(shape)

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def dtype(self):
        import numpy as np

        return np.dtype(float)

    def full(self, out=None):
        """The value over the block, as a new numpy array (or added into `out`)."""
        import numpy as np

        if _ONLY_FACTORED:
            _refuse(self.size)
        if out is None:
            out = np.empty(self.shape)
            for a, b, v in self.parts:
                _write(out[a:b], v)
            return out
        for a, b, v in self.parts:
            if type(v) is Bands:
                v.full(out=out[a:b])
            else:
                np.add(out[a:b], _full(v), out=out[a:b])
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.full()
        return out if dtype is None else out.astype(dtype, copy=False)

    def bounds(self):
        ends = [(_bounds_of(v)) for _, _, v in self.parts]
        return min(e[0] for e in ends), max(e[1] for e in ends)

    def min(self):
        return self.bounds()[0]

    def max(self):
        return self.bounds()[1]

    def _each(self, fn, k=None):
        if type(k) is Bands:
            if [p[:2] for p in k.parts] != [p[:2] for p in self.parts]:
                return fn(self.full(), k.full())
            return Bands([(a, b, fn(v, w)) for (a, b, v), (_, _, w) in zip(self.parts, k.parts)], self.shape)
        return Bands([(a, b, fn(v, _rows_of(k, a, b))) for a, b, v in self.parts], self.shape)

    def __add__(self, k):
        if type(k) in _PLAIN and k == 0:
            return self
        return self._each(lambda v, w: v + w, k)

    __radd__ = __add__

    def __mul__(self, k):
        if type(k) in _PLAIN and k == 1:
            return self
        return self._each(lambda v, w: v * w, k)

    __rmul__ = __mul__

    def __truediv__(self, k):
        return self._each(lambda v, w: v / w, k)

    def __rtruediv__(self, k):
        return k / self.full()

    def __neg__(self):
        return Bands([(a, b, -v) for a, b, v in self.parts], self.shape)

    def __sub__(self, k):
        return self + (-k)

    def __rsub__(self, k):
        return (-self) + k


def _write(out, v):
    """out[...] = v, where v is an Outer (made from its factors straight into out), a number or an array."""
    import numpy as np

    if type(v) is Outer and v.col is not None:
        np.multiply(v.col, v.row * v.scale if v.scale != 1 else v.row, out=out)
        if not _zero_add(v):
            np.add(out, v.add, out=out)
    elif type(v) is Bands:
        for a, b, w in v.parts:
            _write(out[a:b], w)
    else:
        out[...] = _full(v)


def _bounds_of(v):
    if type(v) in _PLAIN:
        return v, v
    if type(v) is Outer or type(v) is Bands:
        return v.bounds()
    return v.min(), v.max()


# Recent canonical columns and rows (an array over its first element), with whether every element is >= 0: equal
# shapes are one array, so that one block's values share their factors by identity.
_COLS: list = []
_ROWS: list = []


def _canon(v, kept: list):
    """(v / s, s, every element >= 0), the first from `kept` where it holds an equal array. s is v[0] where that
    division is exact (v[0] a power of two, or v / v[0] whole numbers, each times v[0] giving v's); else, for a column
    of whole numbers, their greatest common divisor (_whole_divisor); else (v, 1, ...), v kept as it is, so that a
    block of whole numbers made from the factors stays whole and its ceiling is the plain path's (normalised by 3, a
    column 3, 4, 5 rounds)."""
    s = float(v.flat[0])
    if not (s != 0 and math.isfinite(s)):
        return v, 1.0, bool(v.min() >= 0)
    n = v / s
    if math.frexp(s)[0] not in (0.5, -0.5) and not bool((n == n.round()).all() and (n * s == v).all()):
        s = _whole_divisor(v, s) if kept is _COLS else None   # (a row: kept as it is)
        if s is None:
            return v, 1.0, bool(v.min() >= 0)
        n = v / s
    last = float(n.flat[-1])
    for c, pos, end in reversed(kept):   # (the newest first; the last element told before the whole array)
        if end == last and c.shape == n.shape and bool((c == n).all()):
            return c, s, pos
    pos = bool(n.min() >= 0)
    kept.append((n, pos, last))
    del kept[:-8]
    return n, s, pos


def _whole_divisor(v, first: float):
    """The greatest common divisor of v's elements, with the sign of `first` (v's first element), where every element is
    a whole number below 2**53 (v over it is whole numbers, each exact, whose products by it are v's elements); None
    otherwise.

    So the multiples of a grid's batch column (tokens, sequences, their bytes) are one object (`kept`) also where its
    first element divides none of the others (a graph part of batches 4097, 4098, ...: over 4097 they round), and the
    sums of Outers on them stay on their factors (the indexer's reads - once, its top-k's tokens x candidates + tokens x
    k, sparse attention's gathers + window: Outer.__add__ adds on one column by identity, else makes the full block).
    Columns only: the grids from batch 1 already share theirs, and a row taken over its divisor instead of as it is
    would move their numbers in the last bits."""
    import numpy as np

    if not first == math.floor(first) or v.dtype.char != "d":
        return None
    if not bool((np.abs(v) < 2.0 ** 53).all()) or not bool((v == np.floor(v)).all()):   # (nan fails both)
        return None
    return math.copysign(float(np.gcd.reduce(v.astype(np.int64), axis=None)), first)


def outer(col, row):
    """col x row as an Outer (col a numpy column, row a numpy row)."""
    c, s, cpos = _canon(col, _COLS)
    r, t, rpos = _canon(row, _ROWS)
    return Outer(c, r, s * t, 0.0, cpos, rpos)


def _as_row(v):
    """A numpy row as an Outer (a row alone), numbers as they are."""
    return Outer(None, v) if type(v).__module__ == "numpy" and getattr(v, "ndim", 0) == 2 else v


def _outer_extreme(values, pick, numpy_name: str):
    """max (min) of values among which an Outer, pair by pair: on the factors where they allow it, else on the full
    block."""
    out = values[0]
    for v in values[1:]:
        out = _outer_pair(out, v, pick, numpy_name)
    return out


def _outer_pair(x, y, pick, numpy_name):
    import numpy as np

    if type(x) is Bands or type(y) is Bands:   # run by run
        if type(x) is not Bands:
            x, y = y, x
        return x._each(lambda v, w: _outer_pair(v, w, pick, numpy_name) if type(v) is Outer or type(w) is Outer
                       else _extreme((v, w), pick, numpy_name, ""), y)
    if type(x) is not Outer:
        x, y = y, x
    if type(x) is not Outer:
        return _extreme((x, y), pick, numpy_name, "")
    f = getattr(np, numpy_name)
    if x.col is None:   # a row alone: the plain path, a row kept a row
        if type(y) is Outer:
            if y.col is not None:
                return _outer_pair(y, x, pick, numpy_name)
            y = y.row
        if getattr(y, "ndim", 0) == 2 and y.shape[0] > 1:
            _refuse(y.shape[0] * x.row.shape[1])
        if _ONLY_FACTORED and type(y) in _PLAIN:
            _note_cuts(x.row > y)
        return _as_row(_extreme((x.row, y), pick, numpy_name, ""))
    if type(y) is Outer and y.col is None:
        y = y.row
    if type(y) is Outer and y.scale == 0 and _zero_add(y):   # (a zero's factors tell nothing of it)
        y = 0.0
    if x.scale == 0 and _zero_add(x):
        return _outer_pair(y, 0.0, pick, numpy_name) if type(y) is Outer else _extreme((0.0, y), pick, numpy_name, "")
    if type(y) is Outer:
        if _same_add(x.add, y.add) and x.scale > 0 and y.scale > 0:
            if y.col is x.col and x.cpos:   # c max(r, s) where c >= 0
                n, s, rpos = _canon(f(x.row * x.scale, y.row * y.scale), _ROWS)
                return x._with(row=n, scale=s, rpos=rpos)
            if y.row is x.row and x.rpos:   # max(c, d) r where r >= 0
                n, s, cpos = _canon(f(x.col * x.scale, y.col * y.scale), _COLS)
                return x._with(col=n, scale=s, cpos=cpos)
            side = _wins(x, y)
            if side is not None:
                if type(side) is bool:
                    return (x if side else y) if pick is builtins.max else (y if side else x)
                # x wins on the rows before `side`, y after (or the other way): each part made from its own factors
                first, second = (x, y) if (side > 0) == (pick is builtins.max) else (y, x)
                k, rows = abs(side), x.col.shape[0]
                return Bands([(0, k, _rows_of(first, 0, k)), (k, rows, _rows_of(second, k, rows))],
                             np.broadcast_shapes(x.shape, y.shape))
        a = x.full()   # (a new array)
        return f(a, y.full(), out=a) if a.shape == np.broadcast_shapes(a.shape, y.shape) else f(a, y.full())
    if type(y) in _PLAIN:
        lo, hi = x.bounds()
        if pick is builtins.max:
            if lo > y:
                return x
            if hi < y:
                return float(y)
        else:
            if hi < y:
                return x
            if lo > y:
                return float(y)
        if y == 0 and _zero_add(x):
            if x.cpos:   # max(c r, 0) = c max(r, 0) where c >= 0
                n, s, rpos = _canon(f(x.row * x.scale, 0.0), _ROWS)
                return x._with(row=n, scale=s, rpos=rpos)
            if x.rpos:   # = max(c, 0) r where r >= 0
                n, s, cpos = _canon(f(x.col * x.scale, 0.0), _COLS)
                return x._with(col=n, scale=s, cpos=cpos)
    a, b = x.full(), _full(y)
    return f(a, b, out=a) if a.shape == np.broadcast_shapes(a.shape, np.shape(b)) else f(a, b)


def _same_add(a, b) -> bool:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return a == b
    return a is b


def _wins(x: Outer, y: Outer):
    """True where x >= y at every element, False where y >= x, None where the factors do not tell (columns and rows
    > 0, scales > 0): s c r >= t d q where (s c) / (t d) >= q / r, a column's ratios against a row's."""
    if not (x.cpos and y.cpos and x.rpos and y.rpos):
        return None
    if not (x.col.min() > 0 and y.col.min() > 0 and x.row.min() > 0 and y.row.min() > 0):
        return None
    c, r = (x.col * (x.scale / y.scale)) / y.col, y.row / x.row
    hi, lo = r.max(), r.min()
    if c.min() >= hi:
        return True
    if c.max() <= lo:
        return False
    # rows of one side's win each (x's where c >= every r, y's where c <= every r), in two runs: +k where x wins on
    # the first k rows and y on the rest, -k the other way round
    wins = (c >= hi).ravel()
    if not (wins | (c <= lo).ravel()).all():
        return None
    k = int(wins.argmin()) if wins[0] else int(wins.argmax())
    if wins[0] and not wins[k:].any():
        return k
    if not wins[0] and wins[k:].all():
        return -k
    return None


def _outer_sum(values):
    """ssum of values among which Outers: the Outers that share a column or a row added on their factors (each group
    one Outer), numbers and rows into the first group's `add`; then the block made once, as one matrix product a run
    of rows (_rank_sum), or where a part is not float64, that group's full block with the other groups, the columns
    (added among themselves first) and any full blocks added into it in place."""
    import numpy as np

    groups: list = []
    others: list = []
    for v in values:
        if type(v) is Outer:
            for n, g in enumerate(groups):
                if g.col is v.col or g.row is v.row:
                    s = g + v
                    if type(s) is Outer:
                        groups[n] = s
                        break
            else:
                groups.append(v)
        else:
            others.append(v)
    if not groups:   # (Bands and no Outer: the first Bands made, the rest added into it)
        first = next(n for n, v in enumerate(others) if type(v) is Bands)
        groups, others = [Outer(None, others[first].full())], others[:first] + others[first + 1:]
    rest = []
    for v in others:
        shape = getattr(v, "shape", ())
        if len(shape) < 2 or shape[0] == 1:
            groups[0] = groups[0] + v
        else:
            rest.append(v)
    if len(groups) == 1 and not rest:
        return groups[0]
    made = _rank_sum(groups, rest)
    if made is not None:
        return made
    cols = [v for v in rest if v.shape[1] == 1]
    if cols:   # the groups' added numbers go into the columns' sum (a column's pass, not the block's)
        for n, g in enumerate(groups):
            if g.col is not None and type(g.add) in _PLAIN and g.add != 0:
                cols.append(g.add)
                groups[n] = g._with(add=0.0)
    out = groups[0].full()
    if groups[0].col is None:
        out = out + 0.0   # (a new array: the row is another value's)
    for g in groups[1:]:
        out = _add_into(out, g.full())
    if cols:
        out = _add_into(out, ssum(cols))
    for v in rest:
        if v.shape[1] != 1:
            out = _add_into(out, v)
    return out


def _add_into(out, v):
    """out + v, into out where it has the sum's shape (out: an array this sum made)."""
    import numpy as np

    if type(v) is Bands:
        return v.full(out=out) if out.shape == v.shape else out + v.full()
    if out.shape == np.broadcast_shapes(out.shape, np.shape(v)):
        np.add(out, v, out=out)
        return out
    return out + v


def _leaves(v, base: int = 0):
    """Bands' runs as (first row, end row, value) over the block's rows, runs of runs taken apart."""
    for a, b, w in v.parts:
        if type(w) is Bands:
            yield from _leaves(w, base + a)
        else:
            yield base + a, base + b, w


_GEMM_ONE_THREAD = 65536 * 4 - 1


def _rank_sum(groups: list, rest: list):
    """_outer_sum's block made in one pass a run of rows: every term that is a column times a row (the groups'
    Outers, the Bands' runs on their factors, the columns' sum times ones, the rows' and numbers' sum times ones)
    stacked as the columns of C and the rows of R, and C @ R written into the block (one matrix product of inner
    dimension K a run: sum over k of C[i, k] R[k, j], the same terms' sum in another order, within a few ulps), where
    a sum of Outers made one block at a time took two passes and a temporary a term. Full blocks (and a Bands' run
    held as an array) are then added in place. None where a part is not float64 (the caller's path)."""
    import numpy as np

    if _ONLY_FACTORED:
        raise Unfactored
    f8 = np.dtype(float)
    bands, fulls, colacc, rowacc = [], [], 0.0, 0.0
    shapes = [g.shape for g in groups]
    for v in rest:
        shape = getattr(v, "shape", ())
        if type(v) is Bands:
            bands.append(v)
        elif v.dtype != f8:
            return None
        elif shape[1] == 1:
            colacc = colacc + v
        else:
            fulls.append(v)
        shapes.append(shape)
    cterms, rterms = [], []
    for g in groups:
        if g.row.dtype != f8 or (g.col is not None and g.col.dtype != f8):
            return None
        if g.col is None:
            rowacc = rowacc + g.row
        else:
            cterms.append(g.col)
            rterms.append(g.row * g.scale if g.scale != 1 else g.row)
        if not _zero_add(g):
            rowacc = rowacc + g.add
    rows, cols = np.broadcast_shapes(*shapes)
    cuts = {0, rows}
    leaves = [list(_leaves(b)) for b in bands]
    for runs in leaves:
        cuts.update(x for a, b, _ in runs for x in (a, b))
    cuts = sorted(cuts)
    like = next((v for v in (*cterms, *rterms, *rest) if type(v) is not Bands), None)   # (the block in its parts' type)
    out = np.empty((rows, cols)) if like is None else np.empty_like(like, shape=(rows, cols), dtype=f8)
    later = []   # (rows a:b, an array to add there)
    for a, b in zip(cuts, cuts[1:]):
        cs = [c[a:b] for c in cterms]
        rs = list(rterms)
        seg_row, seg_col = rowacc, (colacc[a:b] if type(colacc) is not float else colacc)
        for runs in leaves:
            la, lb, w = next(x for x in runs if x[0] <= a and b <= x[1])
            t = type(w)
            if t is Outer:
                if w.col is None:
                    seg_row = seg_row + w.row
                else:
                    cs.append(w.col[a - la:b - la])
                    rs.append(w.row * w.scale if w.scale != 1 else w.row)
                    if not _zero_add(w):
                        seg_row = seg_row + w.add
            elif t in _PLAIN or getattr(w, "ndim", 0) < 2:
                seg_row = seg_row + w
            elif w.shape[0] == 1:
                seg_row = seg_row + w
            elif w.shape[1] == 1:
                seg_col = seg_col + w[a - la:b - la]
            else:
                later.append((a, b, w[a - la:b - la]))
        if type(seg_col) is not float and getattr(seg_col, "ndim", 0) == 2:
            cs.append(seg_col)
            rs.append(None)
        elif seg_col != 0:
            seg_row = seg_row + seg_col
        if type(seg_row) is not float or seg_row != 0:
            cs.append(None)
            rs.append(seg_row)
        part = out[a:b]
        if len(cs) == 1:
            c, r = cs[0], rs[0]
            np.multiply(1.0 if c is None else c, 1.0 if r is None else r, out=part)
            continue
        C = np.empty((b - a, len(cs)))
        R = np.empty((len(cs), cols))
        for k, (c, r) in enumerate(zip(cs, rs)):
            C[:, k] = 1.0 if c is None else c[:, 0]
            R[k] = 1.0 if r is None else r
        step = max(1, _GEMM_ONE_THREAD // (cols * len(cs)))
        for i in range(0, b - a, step):
            np.matmul(C[i:i + step], R, out=part[i:i + step])
    for a, b, w in later:
        np.add(out[a:b], w, out=out[a:b])
    for v in fulls:
        np.add(out, v, out=out)
    return out
