"""The one error type users see: every bad input becomes a SpecError (exit status 2); and how a signal ends a run."""

import signal

# A run a signal stops prints one line and exits 128 + the signal number.
MESSAGES = {signal.SIGINT: "rubinperf: interrupted", signal.SIGTERM: "rubinperf: terminated"}


class SpecError(ValueError):
    """A spec file, a name or an argument is wrong. The message is one line and names the culprit."""


def shorten(text: str, limit: int = 80) -> str:
    """A name or message as shown in a one-line error: at most about `limit` characters."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 10)
    return f"{text[:keep]}... ({len(text.encode('utf-8', 'replace')):,} bytes)"


def exit_status(signum: int) -> int:
    return 128 + int(signum)
