"""Files written whole or not at all (calibrated specs, CSVs, plots): the core and the CLI both write through this."""

from __future__ import annotations

import os
import stat
import tempfile
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
