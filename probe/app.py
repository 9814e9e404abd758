"""The dashboard from Python: ``probe.app.run(...)`` — in Jupyter, Dash's own inline mode (the app in an
iframe under the cell, served from a background thread: the kernel is never blocked).

The app itself is the ``probe_app`` package (the repository's app/ folder), imported here only when ``run`` is
called, so ``import probe`` stays light; nothing here imports the command line.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from collections.abc import Sequence

from probe.errors import ProbeError

JUPYTER_MODES = ("inline", "external", "tab", "jupyterlab", "_none")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "PROBE_APP_TOKEN"  # the token of a shared dashboard, when --token / token= is not given
TOKEN_MIN_CHARS = 16
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9._~-]+$")  # it travels in a URL: unreserved characters only


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, localhost), where the dashboard needs no token.

    >>> is_loopback("127.0.0.1"), is_loopback("127.0.0.2"), is_loopback("0.0.0.0"), is_loopback("10.1.2.3")
    (True, True, False, False)
    """
    if host.strip().lower() in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost: another machine may reach it
        return False


def serving_token(host: str, token: str | None = None) -> str | None:
    """The secret the dashboard is served with: `token`, else the environment's ``PROBE_APP_TOKEN``, else a
    new random one when `host` is beyond loopback; None (no token) on loopback when none is given.

    Parameters
    ----------
    host : str
        The address the server binds.
    token : str, optional
        A token the user chose (``--token``): at least 16 URL-safe characters (letters, digits, ``._~-``).

    Returns
    -------
    str or None

    Raises
    ------
    ProbeError
        A token too short or with characters a URL would change.

    Examples
    --------
    >>> serving_token("127.0.0.1") is None, len(serving_token("0.0.0.0")) >= 32
    (True, True)
    >>> serving_token("127.0.0.1", "correct-horse-battery-staple")
    'correct-horse-battery-staple'
    >>> serving_token("0.0.0.0", "short")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    probe.errors.ProbeError: the token (--token) is 5 characters: use at least 16 (e.g. python -c ...)
    """
    chosen = token if token is not None else os.environ.get(TOKEN_ENV) or None
    if chosen is None:
        return None if is_loopback(host) else secrets.token_urlsafe(32)
    if len(chosen) < TOKEN_MIN_CHARS:
        raise ProbeError(f"the token (--token) is {len(chosen)} characters: use at least {TOKEN_MIN_CHARS} "
                         '(e.g. python -c "import secrets; print(secrets.token_urlsafe())")')
    if not _TOKEN_CHARS.match(chosen):
        raise ProbeError("the token (--token) has characters a URL would change: use letters, digits and "
                         ". _ ~ - only")
    return chosen


def served_url(host: str, port: int, token: str | None) -> str:
    """The address to open: ``http://HOST:PORT`` (with ``/?token=...`` when served with a token).

    >>> served_url("0.0.0.0", 8050, "correct-horse-battery-staple")
    'http://0.0.0.0:8050/?token=correct-horse-battery-staple'
    """
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}" + (f"/?token={token}" if token else "")


def run(models: Sequence[str] | str = (), labels: str | None = None, jupyter_mode: str = "inline",
        host: str = "127.0.0.1", port: int = 8050, height: int = 900, width: str = "100%",
        token: str | None = None, **config):
    """Start the dashboard; in a notebook it is drawn under the cell and the call returns at once.

    Parameters
    ----------
    models : str or sequence of str, optional
        Hub ids, directories or ``zoo:NAME`` (default: the bundled model organisms).
    labels : str, optional
        A labels table written by ``probe label``.
    jupyter_mode : {"inline", "external", "tab", "jupyterlab"}, default "inline"
        Dash's Jupyter display mode: "inline" draws the app in an iframe under the cell. Outside Jupyter the
        app is served until Ctrl-C (as ``probe app``).
    host, port : str, int
        Where the app's server listens (default 127.0.0.1:8050, this machine only).
    height, width : int, str
        The iframe's size in inline mode.
    token : str, optional
        The secret a `host` beyond loopback is served with (default: ``PROBE_APP_TOKEN``, else a new one,
        printed in the URL); given on loopback, it is required there too. Jupyter's iframe cannot carry it:
        in a notebook, serve on loopback.
    **config
        Further :class:`probe_app.config.AppConfig` fields (``device``, ``max_tokens``, ...).

    Returns
    -------
    dash.Dash
        The app (``.probe_service`` holds its models).

    Raises
    ------
    ProbeError
        An unknown `jupyter_mode`, a port outside 1..65535, a bad `token`, a token in a notebook, or the
        dashboard not installed.

    Examples
    --------
    In a notebook, ``probe.app.run("zoo:induction")`` draws the dashboard under the cell. Bad arguments are
    refused before anything starts:

    >>> run("zoo:induction", jupyter_mode="window")
    Traceback (most recent call last):
    probe.errors.ProbeError: jupyter_mode='window': use one of inline, external, tab, jupyterlab

    The app it serves is :func:`probe_app.create_app`'s (models load when first shown):

    >>> from probe_app import create_app
    >>> from probe_app.config import AppConfig
    >>> dash_app = create_app(AppConfig(models=("zoo:induction",)))
    >>> dash_app.title, dash_app.probe_service.facts.specs
    ('probe', ('zoo:induction',))
    """
    if jupyter_mode not in JUPYTER_MODES:
        raise ProbeError(f"jupyter_mode={jupyter_mode!r}: use one of {', '.join(JUPYTER_MODES[:4])}")
    if not 0 < int(port) < 65536:
        raise ProbeError(f"port {port} is not a port number: use 1..65535")
    secret = serving_token(host, token)
    try:  # the dashboard is its own package; imported only here, so that `import probe` stays light
        from probe_app import create_app
        from probe_app.config import AppConfig
    except ImportError:
        raise ProbeError("the dashboard (probe_app) is not installed: pip install probe-attention") from None
    from dash import jupyter_dash  # the dashboard's dependency: imported with it, only here

    if jupyter_dash.active and secret is not None:
        if token is not None or not is_loopback(host):
            raise ProbeError(f"host={host!r} with a token: Jupyter's iframe cannot carry it; serve on "
                             "127.0.0.1 in a notebook, or share with `probe app --host` from a terminal")
        secret = None  # PROBE_APP_TOKEN is for shared servers: a notebook on loopback needs none
    models = (models,) if isinstance(models, str) else tuple(models)
    dash_app = create_app(AppConfig(models=models, labels=labels, token=secret, **config))
    if jupyter_dash.active:
        dash_app.run(jupyter_mode=jupyter_mode, host=host, port=int(port), jupyter_height=height,
                     jupyter_width=width)
    else:  # a script: serve until Ctrl-C, with waitress like `probe app`
        from waitress import serve  # the dashboard's server: only for a script

        specs = ', '.join(dash_app.probe_service.facts.specs)
        print(f"probe.app: serving {specs} at {served_url(host, int(port), secret)} (Ctrl-C stops)")
        serve(dash_app.server, host=host, port=int(port), threads=16)
    return dash_app


__all__ = ["JUPYTER_MODES", "LOOPBACK", "TOKEN_ENV", "is_loopback", "run", "served_url", "serving_token"]
