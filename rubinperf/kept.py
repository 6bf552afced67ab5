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
