"""One error policy for every callback: a one-line message in the page, the rest of the page left as it was.

    @guarded(outputs=3, message=2)
    def _view(...):
        ...

Any exception becomes `no_update` for every output except the message slot, which gets one line: a
ProbeError's text as is, anything else "internal error: …" (the traceback goes to the server log). So a
crafted payload or a failing model never produces an HTTP 500, and an error never wipes the previous figure.
"""

from __future__ import annotations

import functools
import logging

from dash import no_update

from probe.errors import ProbeError

log = logging.getLogger("probe.app")


def error_message(error: BaseException) -> str:
    """The one line a user sees for an error."""
    if isinstance(error, ProbeError):
        return str(error)
    log.error("internal error in a callback", exc_info=error)
    return f"internal error: {type(error).__name__}: {error} (details in the server log)"


def guarded(outputs: int = 1, message: int = 0):
    """Decorate a callback with `outputs` outputs whose `message`-th output is a message line."""

    def wrap(function):
        @functools.wraps(function)
        def inner(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - the one place callback errors are turned into messages
                values = [no_update] * outputs
                values[message] = error_message(error)
                return values[0] if outputs == 1 else tuple(values)

        return inner

    return wrap
