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


_INITS: dict = {}


def _init(self, *args, **kwargs):
    """The keyword-only __init__ of a wide class (made with init=False): each field from its keyword, else its
    default or default factory, in field order; the TypeErrors of dataclass's own __init__ for a positional
    argument, an unknown keyword or a missing one."""
    cls = self.__class__
    spec = _INITS.get(cls)
    if spec is None:
        fs = dataclasses.fields(cls)
        spec = _INITS[cls] = ([f.name for f in fs], {f.name: f.default for f in fs if f.default is not dataclasses.MISSING},
                              {f.name: f.default_factory for f in fs if f.default_factory is not dataclasses.MISSING})
    names, defaults, factories = spec
    if args:
        raise TypeError(f"{cls.__qualname__}.__init__() takes 1 positional argument but {len(args) + 1} were given")
    values, given, missing = {}, 0, []
    for n in names:
        if n in kwargs:
            values[n] = kwargs[n]
            given += 1
        elif n in defaults:
            values[n] = defaults[n]
        elif n in factories:
            values[n] = factories[n]()
        else:
            missing.append(n)
    if given < len(kwargs):
        unknown = next(k for k in kwargs if k not in values)
        raise TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword argument {unknown!r}")
    if missing:
        raise TypeError(f"{cls.__qualname__}.__init__() missing {len(missing)} required keyword-only argument"
                        f"{'s' if len(missing) > 1 else ''}: {', '.join(map(repr, missing))}")
    object.__setattr__(self, "__dict__", values)
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def wide(cls):
    """Give a frozen dataclass made with eq=False and repr=False the `==`, `hash` and `repr` it would have had; made
    with init=False as well (all its fields keyword-only), the __init__ too (_init: not compiled per class, which for
    a class of a hundred fields is most of its import)."""
    params = cls.__dataclass_params__
    if not params.frozen or params.eq or params.repr:
        raise TypeError(f"{cls.__name__}: @wide is for @dataclass(frozen=True, eq=False, repr=False)")
    cls.__eq__, cls.__hash__, cls.__repr__ = _eq, _hash, _repr
    if not params.init:
        if any(not f.init or not f.kw_only for f in dataclasses.fields(cls)):
            raise TypeError(f"{cls.__name__}: @wide's __init__ is for keyword-only fields, each set by __init__")
        cls.__init__ = _init
    return cls
