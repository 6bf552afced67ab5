"""The one error type users see: every bad input becomes a SpecError (exit status 2); and how a signal ends a run."""

import signal

# A run a signal stops prints one line and exits 128 + the signal number.
MESSAGES = {signal.SIGINT: "rubinperf: interrupted", signal.SIGTERM: "rubinperf: terminated"}


class SpecError(ValueError):
    """A spec file, a name or an argument is wrong. The message is one line and names the culprit."""


class DoesNotFit(SpecError):
    """A valid operating point that this deployment cannot hold: its weights, KV and activations overflow a
    rank's HBM, or its context the model's window. Where a run has several rows, the others still print."""


def shorten(text: str, limit: int = 80) -> str:
    """A name or message as shown in a one-line error: at most about `limit` characters."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 10)
    return f"{text[:keep]}... ({len(text.encode('utf-8', 'replace')):,} bytes)"


def number_text(value) -> str:
    """A number as an error message echoes it: an integer of more than 15 digits as "a 400-digit number"
    (never its digits: a pasted 10**400 would fill the line), anything else as repr() would, shortened."""
    import math

    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 15:
        digits = int(math.log10(abs(value))) + 1
        if abs(value) < 10 ** (digits - 1):   # log10 rounded up at a power of ten
            digits -= 1
        elif abs(value) >= 10 ** digits:
            digits += 1
        return f"a {digits:,}-digit {'negative ' if value < 0 else ''}number"
    return shorten(repr(value))


def exit_status(signum: int) -> int:
    return 128 + int(signum)
