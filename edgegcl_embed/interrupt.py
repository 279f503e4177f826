"""A Ctrl-C the command line handled must end the process with the exit code it returns."""


def forget_handled_interrupt() -> None:
    """Clear CPython's record of an unhandled KeyboardInterrupt after the CLI handled one.

    A KeyboardInterrupt that passes through ``exec`` of a string (a dataclass or namedtuple
    being built while a module imports) sets that record even when the CLI catches it later,
    and ``python -m`` then kills itself with SIGINT instead of exiting with the code (130)
    ``main`` returned. The record is reset whenever an ``exec`` of a string finishes cleanly.
    """
    exec("pass")  # noqa: S102 - a constant: see above
