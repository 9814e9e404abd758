"""The dashboard from Python: ``probe.app.run(...)`` — in Jupyter, Dash's own inline mode (the app in an
iframe under the cell, served from a background thread: the kernel is never blocked).

The app itself is the ``probe_app`` package (the repository's app/ folder), imported here only when ``run`` is
called, so ``import probe`` stays light; nothing here imports the command line.
"""

from __future__ import annotations

from collections.abc import Sequence

from probe.errors import ProbeError

JUPYTER_MODES = ("inline", "external", "tab", "jupyterlab", "_none")


def run(models: Sequence[str] | str = (), labels: str | None = None, jupyter_mode: str = "inline",
        host: str = "127.0.0.1", port: int = 8050, height: int = 900, width: str = "100%", **config):
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
    **config
        Further :class:`probe_app.config.AppConfig` fields (``device``, ``max_tokens``, ...).

    Returns
    -------
    dash.Dash
        The app (``.probe_service`` holds its models).

    Raises
    ------
    ProbeError
        An unknown `jupyter_mode`, a port outside 1..65535, or the dashboard not installed.

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
    try:  # the dashboard is its own package; imported only here, so that `import probe` stays light
        from probe_app import create_app
        from probe_app.config import AppConfig
    except ImportError:
        raise ProbeError("the dashboard (probe_app) is not installed: pip install probe-attention") from None
    models = (models,) if isinstance(models, str) else tuple(models)
    dash_app = create_app(AppConfig(models=models, labels=labels, **config))
    from dash import jupyter_dash  # the dashboard's dependency: imported with it, only here

    if jupyter_dash.active:
        dash_app.run(jupyter_mode=jupyter_mode, host=host, port=int(port), jupyter_height=height,
                     jupyter_width=width)
    else:  # a script: serve until Ctrl-C, with waitress like `probe app`
        from waitress import serve  # the dashboard's server: only for a script

        specs = ', '.join(dash_app.probe_service.facts.specs)
        print(f"probe.app: serving {specs} at http://{host}:{port} (Ctrl-C "
              "stops)")
        serve(dash_app.server, host=host, port=int(port), threads=16)
    return dash_app


__all__ = ["JUPYTER_MODES", "run"]
