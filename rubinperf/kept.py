"""Results of a few slow pure functions of numbers, kept between runs beside the bytecode.

The acceptance law's P90 factor (step/latency.py: time_per_token_factor, a root of a CDF summed over a few thousand
nodes) and E[max of n normals] (roofline.expected_max_normal, a trapezoid rule over 4,801 nodes) cost a plain
`rubinperf estimate` about a tenth of its time, and they are the same numbers on every run. Like the bundled specs'
parsed TOML (specs/loader.py), each result is kept in the package's `__pycache__` (ignored by git, left out of the
sdist and the wheel), in a file named by a digest of the function's module source, its name and its arguments: an
edited module computes afresh, and a kept result is the float the function returned (marshal keeps it bit for bit).
A folder that cannot be written (a read-only install) only means computing each time.
"""

from __future__ import annotations

import functools
import marshal
import os
import sys
from pathlib import Path

_DIR = Path(__file__).resolve().parent / "__pycache__"


@functools.cache
def _source(module_file: str) -> bytes:
    try:
        return Path(module_file).read_bytes()
    except OSError:   # pragma: no cover - a package without its sources: keyed by the name alone
        return module_file.encode()


def kept(module_file: str):
    """Decorator: keep fn(*args) (numbers in, a float out) between runs, as the module's source at `module_file`
    computes it."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args):
            try:
                from _blake2 import blake2b   # (hashlib's blake2b: hashlib itself takes longer to import)
            except ImportError:   # pragma: no cover - not CPython
                from hashlib import blake2b
            digest = blake2b(_source(module_file), digest_size=20)
            digest.update(f"{fn.__qualname__}{args!r}".encode())
            path = _DIR / f"kept-{digest.hexdigest()}.{sys.implementation.cache_tag}-m{marshal.version}"
            try:
                value = marshal.loads(path.read_bytes())
                if type(value) is float:
                    return value
            except (OSError, EOFError, ValueError, TypeError):
                pass
            value = fn(*args)
            if type(value) is float:
                try:
                    _DIR.mkdir(exist_ok=True)
                    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                    tmp.write_bytes(marshal.dumps(value))
                    os.replace(tmp, path)
                except OSError:
                    pass
            return value
        return call
    return wrap


# ---------------------------------------------------------------- results of the whole tree


@functools.cache
def _tree_digest() -> bytes:
    """A digest of everything a result computed from the bundled files could depend on: every file of the package
    (its sources, and an installed wheel's bundled data), the bundled folders beside it in a checkout, a file of the
    working directory named as a bundled spec, and the versions of Python and numpy. About 15 ms for the 8 MB of the
    tree."""
    try:
        from _blake2 import blake2b
    except ImportError:   # pragma: no cover - not CPython
        from hashlib import blake2b
    import numpy

    from rubinperf.bundled import SPEC_FOLDERS, data_root

    package = Path(__file__).resolve().parent
    roots = [package] + [data_root() / f for f in SPEC_FOLDERS if not (data_root() / f).is_relative_to(package)]
    digest = blake2b(f"{sys.version} numpy {numpy.__version__}".encode(), digest_size=20)
    # A bare name resolves to a file of that name in the working directory before the bundled spec
    # (specs/loader.py: resolve_path): such files are part of what a result read.
    from rubinperf.specs.loader import bundled_names

    names = {n for kind in ("hardware", "model", "stack", "workload") for n in bundled_names(kind)}
    try:
        shadows = sorted(n for n in os.listdir(".") if n in names and os.path.isfile(n))
    except OSError:
        shadows = []
    for n in shadows:
        with open(n, "rb") as f:
            digest.update(b"shadow\0" + n.encode() + b"\0" + f.read())
    for root in roots:
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files.extend(os.path.join(folder, n) for n in names)
        for path in sorted(files):
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.digest()


def kept_of_tree(name: str, compute, encode, decode):
    """decode(the kept encode(compute())) of result `name`, computed from the bundled files and the package alone
    (no argument, no option, no environment): kept beside the bytecode until any file of the tree changes
    (_tree_digest), when the new result replaces it. encode gives what marshal holds (numbers, strings, None,
    lists, tuples, dicts)."""
    try:
        from _blake2 import blake2b
    except ImportError:   # pragma: no cover - not CPython
        from hashlib import blake2b
    digest = blake2b(_tree_digest(), digest_size=20)
    digest.update(name.encode())
    slug = "-".join(name.split())
    path = _DIR / f"tree-{slug}-{digest.hexdigest()}.{sys.implementation.cache_tag}-m{marshal.version}"
    try:
        return decode(marshal.loads(path.read_bytes()))
    except (OSError, EOFError, ValueError, TypeError, KeyError):
        pass
    value = compute()
    try:
        blob = marshal.dumps(encode(value))
        _DIR.mkdir(exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
        for old in _DIR.glob(f"tree-{slug}-*"):   # the result of a tree before this one (a megabyte or two)
            if old.name != path.name and not old.name.endswith(".tmp"):
                old.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass
    return value
