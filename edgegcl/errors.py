"""The one exception type that means "the user gave us something we cannot use".

The CLI turns it into a single line on stderr and exit code 2; everything else is a bug
and keeps its traceback. It is a ``ValueError``, so library callers catch it as one.
"""


class UsageError(ValueError):
    """Bad input from the user: the message names the problem and the fix, in one line."""
