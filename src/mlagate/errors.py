"""The CLI process's one error for bad input."""


class UsageError(ValueError):
    """Bad input from the user or the matrix; one line, exit status 2."""
