"""max/min/where that work on numbers, numpy arrays and sympy expressions alike.

Formulas are written once with these, so the numeric path, the vectorised sweep and the
symbolic `explain` path evaluate the very same expression.
"""

from __future__ import annotations

import builtins

import numpy as np


def _is_symbolic(values) -> bool:
    return any(hasattr(v, "free_symbols") for v in values)


def _is_array(values) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def smax(*values):
    if _is_symbolic(values):
        import sympy

        return sympy.Max(*values)
    if _is_array(values):
        return np.maximum.reduce(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))
    return builtins.max(values)


def smin(*values):
    if _is_symbolic(values):
        import sympy

        return sympy.Min(*values)
    if _is_array(values):
        return np.minimum.reduce(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))
    return builtins.min(values)


def sceil(x):
    """Ceiling for numbers and arrays; sympy's ceiling for symbols."""
    if _is_symbolic((x,)):
        import sympy

        return sympy.ceiling(x)
    return np.ceil(x) if isinstance(x, np.ndarray) else float(np.ceil(x))
