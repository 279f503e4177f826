"""The one exception type that means "the user gave us something we cannot use".

The CLI turns it into a single line on stderr and exit code 2; everything else is a bug
and keeps its traceback. It is a ``ValueError``, so library callers catch it as one.
"""


class UsageError(ValueError):
    """Bad input from the user: the message names the problem and the fix, in one line."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none), for
    embedding in a one-line UsageError."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
