"""Results of a few slow pure functions of numbers, kept between runs beside the bytecode.

The acceptance law's P90 factor (step/latency.py: time_per_token_factor, a root of a CDF summed over a few thousand
nodes) and E[max of n normals] (roofline.expected_max_normal, a trapezoid rule over 4,801 nodes) cost a plain
`rubinperf estimate` about a tenth of its time, and they are the same numbers on every run. Like the bundled specs'
parsed TOML (specs/loader.py), each result is kept in the package's `__pycache__` (ignored by git, left out of the
sdist and the wheel), in a file named by a digest of the function's module source, its name and its arguments: an
edited module computes afresh, and a kept result is the float the function returned (marshal keeps it bit for bit).
A folder that cannot be written (a read-only install) only means computing each time.

Results computed from the bundled files are kept the same way, under a digest of the whole tree (kept_of_tree:
`validate`'s records, the ledger's evidence), and results of a call computed from the bundled files and its arguments
under a digest of the tree and the arguments (kept_of_call: `estimate`'s records).
"""

from __future__ import annotations

import functools
import marshal
import os
import sys
import time
from pathlib import Path

_DIR = Path(__file__).resolve().parent / "__pycache__"


# ---------------------------------------------------------------- the kept files themselves (specs' parses too)


def _blake2b():
    """A new 20-byte BLAKE2b digest (from _blake2: hashlib itself takes longer to import than a parse)."""
    try:
        from _blake2 import blake2b
    except ImportError:   # pragma: no cover - not CPython
        from hashlib import blake2b
    return blake2b(digest_size=20)


def kept_file(prefix: str, *parts: bytes) -> Path:
    """The file in the package's __pycache__ that keeps a result named by `prefix` and a digest of `parts` (for the
    Python and marshal that write it)."""
    digest = _blake2b()
    for part in parts:
        digest.update(part)
    return _DIR / f"{prefix}-{digest.hexdigest()}.{sys.implementation.cache_tag}-m{marshal.version}"


def read_kept(path: Path | None):
    """What is kept at `path`, or None where nothing can be read there."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()   # (marshal.load of a file object reads it a few bytes at a time: many times slower)
        return marshal.loads(blob)
    except (OSError, EOFError, ValueError, TypeError):
        return None


def write_kept(path: Path, value) -> bool:
    """Keep `value` (what marshal holds) at `path`, whole or not at all (a process's own file, then renamed); False
    where it cannot be (a value marshal cannot hold, a folder that cannot be written)."""
    try:
        blob = marshal.dumps(value)
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
        return True
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------- slow pure functions of numbers


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
            path = kept_file("kept", _source(module_file), f"{fn.__qualname__}{args!r}".encode())
            value = read_kept(path)
            if type(value) is float:
                return value
            value = fn(*args)
            if type(value) is float:
                write_kept(path, value)
            return value
        return call
    return wrap


# ---------------------------------------------------------------- results of the whole tree


# A file changed within this many seconds of a run may change again within its file system's timestamp granularity
# (a second on some, ten milliseconds on Linux's) with its stamps unchanged: its tree is read whole (git's "racy" rule).
RACY_S = 10
TREE_STAMPS_KEPT = 8   # the content digests of the trees last seen, by their files' stamps


@functools.cache
def _tree_digest() -> bytes:
    """A digest of everything a result computed from the bundled files could depend on: every file of the package
    (its sources, and an installed wheel's bundled data), the bundled folders beside it in a checkout (raw device dumps
    left out: bundled.NOT_SHIPPED), a file of the working directory named as a bundled spec, and the versions of
    Python and numpy (numpy's by its version.py: a run that finds its results kept imports no numpy, 0.1 s of a later
    `validate`). The digest is of the files' bytes (about 20 ms for the 10 MB of the tree); it is kept under a digest
    of the files' names and stamps (size, modification and change times in nanoseconds, inode: a write to a file
    changes its change time, which no program can set), about 3 ms, unless a file changed within RACY_S seconds."""
    walked, shadows = _tree_files()
    head = f"{sys.version} numpy {_numpy_version()}".encode()
    stamps, recent = _blake2b(), time.time_ns() - RACY_S * 10 ** 9
    stamps.update(head)
    racy = False
    try:
        for root, files in [(".", shadows)] + walked:
            stamps.update(f"{root}\0{len(files)}\0".encode())
            for path in files:
                st = os.stat(os.path.join(root, path))
                stamps.update(f"{path}\0{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} "
                              f"{st.st_ino} {st.st_dev}\0".encode())
                racy = racy or max(st.st_mtime_ns, st.st_ctime_ns) > recent
    except OSError:
        racy = True
    memo = None if racy else kept_file("tree-stamps", stamps.digest())
    value = read_kept(memo)
    if type(value) is bytes and len(value) == 20:
        return value
    digest = _blake2b()
    digest.update(head)
    for n in shadows:
        with open(n, "rb") as f:
            digest.update(b"shadow\0" + n.encode() + b"\0" + f.read())
    for root, files in walked:
        for path in files:
            digest.update(path.encode() + b"\0")
            with open(os.path.join(root, path), "rb") as f:
                digest.update(f.read())
    value = digest.digest()
    if memo is not None and write_kept(memo, value):
        _keep_latest("tree-stamps-", TREE_STAMPS_KEPT)
    return value


def _tree_files() -> tuple[list, list]:
    """The files _tree_digest reads: [(root, its files' paths relative to it, sorted)] for the package and the
    bundled folders beside it, and the names of the files of the working directory named as a bundled spec
    (sorted)."""
    import re
    from fnmatch import translate

    from rubinperf.bundled import NOT_SHIPPED, SPEC_FOLDERS, data_root

    package = Path(__file__).resolve().parent
    roots = [package] + [data_root() / f for f in SPEC_FOLDERS if not (data_root() / f).is_relative_to(package)]
    skip = re.compile("|".join(map(translate, NOT_SHIPPED))).match
    walked = []
    for root in map(str, roots):
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            folder = folder[len(root) + 1:]
            files.extend(os.path.join(folder, n) if folder else n for n in names if not skip(n))
        walked.append((root, sorted(files)))
    # A bare name resolves to a file of that name in the working directory before the bundled spec
    # (specs/loader.py: resolve_path): such files are part of what a result read (any bundled .toml's name counts).
    specs = {os.path.basename(path)[:-5] for _, files in walked for path in files if path.endswith(".toml")}
    try:
        shadows = sorted(n for n in os.listdir(".") if n in specs and os.path.isfile(n))
    except OSError:
        shadows = []
    return walked, shadows


def _numpy_version() -> str:
    """The numpy a run imports, by its numpy/version.py (its version and the git revision it was built from), found
    without importing numpy (imported already or not: the same text); numpy.__version__ where it has no such file."""
    from importlib.util import find_spec

    try:
        spec = find_spec("numpy")   # (numpy.__spec__ where numpy is imported)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            with open(os.path.join(folder, "version.py"), "rb") as f:
                return "version.py " + f.read().decode("utf-8", "replace")
    except (OSError, ImportError, ValueError):
        pass
    import numpy

    return numpy.__version__


def kept_of_tree(name: str, compute, encode, decode):
    """decode(the kept encode(compute())) of result `name`, computed from the bundled files and the package alone
    (no argument, no option, no environment): kept beside the bytecode until any file of the tree changes
    (_tree_digest), when the new result replaces it. encode gives what marshal holds (numbers, strings, None,
    lists, tuples, dicts)."""
    slug = "-".join(name.split())
    path = kept_file(f"tree-{slug}", _tree_digest(), name.encode())
    value = _without_collector(lambda: _decoded(read_kept(path), decode))   # (as long-lived as a computed result)
    if value is not _NOT_KEPT:
        return value
    value = _without_collector(compute)
    if write_kept(path, encode(value)):
        for old in _DIR.glob(f"tree-{slug}-*"):   # the result of a tree before this one (a megabyte or two)
            if old.name != path.name and not old.name.endswith(".tmp"):
                old.unlink(missing_ok=True)
    return value


_NOT_KEPT = object()


def _decoded(value, decode):
    """decode(value), or _NOT_KEPT where nothing was kept or what was kept does not decode."""
    if value is None:
        return _NOT_KEPT
    try:
        return decode(value)
    except (KeyError, ValueError, TypeError):
        return _NOT_KEPT


def _without_collector(compute):
    """compute() with Python's cyclic garbage collector paused: a result of the tree is built of tens of thousands of
    small dicts and lists that all live on (the ledger's rows, the points' records), and the collector would walk
    them again and again as they age (about a tenth of a first `validate`). What is alive when it is done is then
    moved out of the collector's generations (gc.freeze, as tests/conftest.py does after collection): made while the
    collector was paused, all of it sat in the youngest generation, and the first collections after (the bands, the
    tables) walked it whole, then again in each older generation (0.08 s of a first `validate`). Objects freed by
    their reference count are freed as before; a cycle made meanwhile and dropped is kept to the end of the process."""
    import gc

    if not gc.isenabled():
        return compute()
    gc.disable()
    try:
        return compute()
    finally:
        gc.freeze()
        gc.enable()


# ---------------------------------------------------------------- results of the tree and a call's arguments

CALLS_KEPT = 64   # the most recently used results of one kind of call kept (a script of 10,000 calls keeps 64 files)


def kept_of_call(name: str, args: tuple, compute):
    """compute() (a list marshal holds) of a call whose result is a pure function of the tree's files (as
    kept_of_tree's) and of its arguments `args` (plain values: strings, ints, bools, None, finite floats, and lists,
    tuples and dicts of them; otherwise it is computed each time): kept beside the bytecode under a digest of both
    (the arguments by their repr, which tells apart every value that can differ, 1 and 1.0 and -0.0 included), so a
    later call with the same arguments on the same tree reads it back. An error raised is never kept (it is raised
    again on every call), nor a result marshal cannot hold, nor one whose computation issued a warning (it is issued
    again, as it would have been, where a kept result would print nothing). The CALLS_KEPT results of `name` used
    last are kept; older ones are removed as new ones are written."""
    if not _plain(args):
        return compute()
    slug = "-".join(name.split())
    path = kept_file(f"tree-call-{slug}", _tree_digest(), name.encode(), b"\0", repr(args).encode())
    value = read_kept(path)
    if type(value) is list:
        try:
            os.utime(path)   # (used now: the last to be removed)
        except OSError:
            pass
        return value
    import warnings

    with warnings.catch_warnings(record=True) as caught:   # (under the filters as they were; shown below)
        value = compute()
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    if not caught and type(value) is list and _plain(value, finite=False) and write_kept(path, value):
        _keep_latest(f"tree-call-{slug}-", CALLS_KEPT)
    return value


def _plain(value, finite: bool = True) -> bool:
    """Whether `value` is made of exact strings, ints, bools, None, floats (`finite`: finite ones only), lists, tuples
    and dicts of them: the values marshal reads back as they were, and whose repr tells them apart (a finite float's
    repr reads back bit for bit). A subclass may repr alike for different values, and marshal writes some objects it
    does not know as their bytes (a numpy float64 reads back as 8 bytes)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return not finite or value - value == 0   # (nan and inf are not finite)
    if t is list or t is tuple:
        return all(_plain(v, finite) for v in value)
    if t is dict:
        return all(_plain(k, finite) and _plain(v, finite) for k, v in value.items())
    return False


def _keep_latest(prefix: str, count: int) -> None:
    """Remove all but the `count` files of _DIR named `prefix`... last written or read (by their mtime)."""
    try:
        with os.scandir(_DIR) as entries:
            files = [(e.stat().st_mtime_ns, e.name) for e in entries
                     if e.name.startswith(prefix) and not e.name.endswith(".tmp")]
    except OSError:
        return
    for _, old in sorted(files)[:-count]:
        try:
            os.unlink(_DIR / old)
        except OSError:
            pass
