"""The runtime's one exception for input it cannot use (model file, graph file, arrays)."""


class InputError(Exception):
    """Bad input: the message names the problem and the fix in one line; the CLI exits with 2."""
