"""The one exception type users see: a bad input, explained in one line that names the fix."""


class ProbeError(ValueError):
    """Bad input or an unsupported model. The CLI prints the message on one line and exits with code 2."""
