"""The process's standard streams, made safe for every terminal and every redirection.

- A stream whose encoding cannot carry the tables' characters (PYTHONIOENCODING=ascii, a
  Latin-1 terminal) gets them transliterated: µs -> us, box lines -> ASCII, others '?'.
- A write to standard output that fails (`> /dev/full`, a closed pipe) is reported as one
  line by the caller; `silence_stdout` then points the descriptor at /dev/null so that the
  interpreter's final flush cannot fail a second time with a traceback.
"""

from __future__ import annotations

import codecs
import os
import sys

_ASCII = {
    "µ": "u", "—": "-", "–": "-", "…": "...", "×": "x", "→": "->", "←": "<-", "↑": "^", "≥": ">=", "≤": "<=",
    "·": ".", "°": "deg", "±": "+/-", "≈": "~", "⋅": "*", "…": "...",
}
_BOX = str.maketrans({c: "-" for c in "─━═┄┅┈┉╌╍"} | {c: "|" for c in "│┃║┆┇┊┋╎╏"})


def _transliterate(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for ch in exc.object[exc.start:exc.end]:
        rep = _ASCII.get(ch)
        if rep is None:
            boxed = ch.translate(_BOX)
            rep = boxed if boxed != ch else ("+" if 0x2500 <= ord(ch) <= 0x257F else "?")
        out.append(rep)
    return "".join(out), exc.end


codecs.register_error("rubinperf-ascii", _transliterate)

_SAMPLE = "µ━┃…"


def make_streams_safe() -> None:
    """Transliterate what the standard streams' encodings cannot carry (instead of failing)."""
    for stream in (sys.stdout, sys.stderr):
        enc = getattr(stream, "encoding", None)
        if not enc or not hasattr(stream, "reconfigure"):
            continue
        try:
            _SAMPLE.encode(enc)
        except UnicodeEncodeError:
            try:
                stream.reconfigure(errors="rubinperf-ascii")
            except (ValueError, OSError):  # pragma: no cover - a detached or closed stream
                pass
        except LookupError:  # pragma: no cover - an unknown codec name
            pass


def silence_stdout() -> None:
    """After a failed write: later writes and the exit flush go to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # captured or replaced stdout (tests): nothing to protect
        pass
