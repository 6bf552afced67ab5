"""The one error type users see: every bad input becomes a SpecError (exit status 2)."""


class SpecError(ValueError):
    """A spec file, a name or an argument is wrong. The message is one line and names the culprit."""
