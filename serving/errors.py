"""The one exception type for input an operator must fix: the CLI prints its message and exits 2."""


class InputError(ValueError):
    """Bad input (a profile, a host name, a plan, settings); the message says what to do."""
