"""The runtime's one exception for input it cannot use (model file, graph file, arrays)."""


class InputError(Exception):
    """Bad input: the message names the problem and the fix in one line; the CLI exits with 2."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name when it has none), cut at
    ``limit`` characters, for embedding in a one-line InputError."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def shown(name: str, limit: int = 60) -> str:
    """A name from a file as a message shows it: control characters escaped (a newline would
    split the one-line error), cut at ``limit`` characters."""
    text = name if name.isprintable() else repr(name)
    return text if len(text) <= limit else text[:limit] + "..."


MESSAGE_LIMIT = 1000
"""The most characters an error line prints (a name or value from a file may be any length)."""


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """A message as one printed line: control and format characters (a newline, a terminal
    escape or a right-to-left mark in a file's name) escaped, at most ``limit`` characters
    with the middle left out, so that its start and its fix both show."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > limit:
        head = limit // 2
        text = f"{text[:head]}...[{len(text) - 2 * head} characters]...{text[-head:]}"
    return text
