"""The one exception type users see: a bad input, explained in one line that names the fix."""


class ProbeError(ValueError):
    """Bad input or an unsupported model. The CLI prints the message on one line and exits with code 2."""


class NoTokenizerError(ProbeError):
    """A model whose weights and config are fine but that has no usable tokenizer: it cannot be given inputs,
    yet its architecture can still be described (the dashboard shows its card)."""


def first_line(error: BaseException) -> str:
    """The first non-empty line of an error's message (its type name when it has none), for one-line errors
    that quote a library's own message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
