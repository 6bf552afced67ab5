"""Files written whole or not at all (calibrated specs, CSVs, plots): the core and the CLI both write through this."""

from __future__ import annotations

import os
import stat
from pathlib import Path

def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write a whole file or nothing: a temporary file beside it, then a rename.

    Only a regular file (or a new one) is written: a directory, device node, FIFO or socket
    at `path` is refused, never replaced. A symbolic link is followed: its target is
    written and the link stays. The file gets the permissions a plain open() would give it
    (umask), or keeps those of the file it replaces. An interrupt (SIGINT, SIGTERM through
    the CLI's handlers) or an error removes the temporary file. A path that cannot be
    written is a SpecError naming it.
    """
    from rubinperf.errors import SpecError, shorten

    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    tmp = None
    try:
        target = regular_target(path)
        import tempfile   # (here: a command that writes no file does not import it)

        blocked = _block_signals()
        try:  # the temporary file's name is known before any signal handler can run
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        finally:
            _unblock_signals(blocked)
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
        os.chmod(tmp, _file_mode(target))
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        _discard(tmp)
        raise SpecError(f"{shorten(str(path))}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        _discard(tmp)
        raise


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def regular_target(path: Path) -> Path:
    """The file to replace: `path`, or the target of the symbolic link(s) at `path`; refuse anything
    that exists and is not a regular file."""
    from rubinperf.errors import SpecError, shorten

    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        if not target.parent.is_dir():
            raise FileNotFoundError(2, f"no such directory {target.parent}") from None
        return target
    if not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        via = f" (the target of the link {shorten(str(path))})" if target != path else ""
        raise SpecError(f"{shorten(str(target))}{via}: is {what}, not a regular file; refusing to replace it")
    return target


# ---------------------------------------------------------------- files read: bounded before they are parsed

MiB = 2 ** 20
# The most bytes each kind of input file may hold. Each is checked on the open file before a byte is parsed,
# so a huge or endless file costs nothing. The bundled specs are 1-3 KB (validation/published.toml 40 KB); a
# Hugging Face config.json is a few KB and an hf_quant_config.json with its exclude list under 1 MB; the
# committed calibration CSVs are at most 1.5 MB.
READ_LIMIT_BYTES = {
    "spec": 1 * MiB,            # hardware, model, stack, workload and points TOML files
    "config": 4 * MiB,          # config.json, hf_quant_config.json
    "csv": 64 * MiB,            # measurement CSVs (calibrate --from-csv)
    "trace": 256 * MiB,         # request traces (serve --trace, JSONL)
}


def _size_text(n: int) -> str:
    return f"{n / MiB:.3g} MiB" if n >= MiB else f"{n:,} bytes"


def read_bounded(path: str | Path, kind: str, expected: str) -> bytes:
    """The bytes of a regular file (a link to one included) of at most READ_LIMIT_BYTES[kind].

    Refused, as a SpecError naming the path, before anything is parsed: a path that does not exist, a
    directory, FIFO, device or socket (opened without blocking and checked on the open descriptor, so a
    FIFO with no writer never waits), and a file over the limit (checked on its size and again while
    reading, for a file that grows). `expected` names what the file should be ("a .toml file")."""
    from rubinperf.errors import SpecError, shorten

    limit = READ_LIMIT_BYTES[kind]
    name = shorten(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SpecError(f"{name}: cannot read: no such file") from None
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): name what it is
            _refuse_irregular(name, os.stat(path).st_mode, expected)
        except OSError:
            pass
        raise SpecError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        _refuse_irregular(name, st.st_mode, expected)
        if st.st_size > limit:
            raise SpecError(f"{name}: {_size_text(st.st_size)}, over the {_size_text(limit)} limit for {expected}")
        chunks, size = [], 0
        while size <= limit:   # plain reads of the descriptor, at most limit + 1 bytes in all
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise SpecError(f"{name}: cannot read: {exc.strerror or exc}") from None
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > limit:
        raise SpecError(f"{name}: over the {_size_text(limit)} limit for {expected}")
    return data


def _refuse_irregular(name: str, mode: int, expected: str) -> None:
    from rubinperf.errors import SpecError

    if not stat.S_ISREG(mode):
        what = next((n for test, n in _KINDS if test(mode)), "something other than a file")
        raise SpecError(f"{name}: is {what}, not a regular file (expected {expected})")


def _block_signals():
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def _unblock_signals(old) -> None:
    import signal

    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _file_mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _discard(tmp) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# ---------------------------------------------------------------- tables that fit the console

# --wide (set by the commands that have it): every column, at its natural width.
