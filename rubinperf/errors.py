"""The one error type users see: every bad input becomes a SpecError (exit status 2)."""


class SpecError(ValueError):
    """A spec file, a name or an argument is wrong. The message is one line and names the culprit."""


def shorten(text: str, limit: int = 80) -> str:
    """A name or message as shown in a one-line error: at most about `limit` characters."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 10)
    return f"{text[:keep]}... ({len(text.encode('utf-8', 'replace')):,} bytes)"
