"""`==`, `hash` and `repr` of the wide frozen dataclasses (a platform has ~190 fields, a model ~80) without the
methods `dataclasses` compiles for each class at import (compiling them is a fifth of the import of the specs, on
every command's start-up). Same semantics as dataclass(eq=True, frozen=True, repr=True):

- `==`: the compared fields (compare=True) as tuples, for two instances of the same class; else NotImplemented;
- `hash`: of the tuple of the fields with hash=True, or hash=None and compare=True;
- `repr`: `Class(name=value!r, ...)` over the fields with repr=True, `...` for a value that contains itself.

Use: `@wide` above `@dataclass(frozen=True, eq=False, repr=False, ...)`.
"""

from __future__ import annotations

import dataclasses
import reprlib

_NAMES: dict = {}


def _names(cls) -> tuple:
    got = _NAMES.get(cls)
    if got is None:
        fs = dataclasses.fields(cls)
        got = _NAMES[cls] = (tuple(f.name for f in fs if f.compare),
                             tuple(f.name for f in fs if (f.compare if f.hash is None else f.hash)),
                             tuple(f.name for f in fs if f.repr))
    return got


def _eq(self, other):
    if other.__class__ is self.__class__:
        names = _names(self.__class__)[0]
        return tuple([getattr(self, n) for n in names]) == tuple([getattr(other, n) for n in names])
    return NotImplemented


def _hash(self):
    return hash(tuple([getattr(self, n) for n in _names(self.__class__)[1]]))


@reprlib.recursive_repr()
def _repr(self):
    return (self.__class__.__qualname__ + "("
            + ", ".join(f"{n}={getattr(self, n)!r}" for n in _names(self.__class__)[2]) + ")")


def wide(cls):
    """Give a frozen dataclass made with eq=False and repr=False the `==`, `hash` and `repr` it would have had."""
    params = cls.__dataclass_params__
    if not params.frozen or params.eq or params.repr:
        raise TypeError(f"{cls.__name__}: @wide is for @dataclass(frozen=True, eq=False, repr=False)")
    cls.__eq__, cls.__hash__, cls.__repr__ = _eq, _hash, _repr
    return cls
