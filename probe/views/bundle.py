"""The view layer's clientside files, shipped as package data (probe/views/assets/): read for inlining into a
notebook output or a report, and served to the Dash app by a Flask route (no CDN, no network)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from probe.errors import ProbeError

FILES = {"views.js": "text/javascript", "views.css": "text/css"}  # every file the route may serve
ROUTE = "/_probe/views/"  # where serve() answers (below the app's routes prefix)
SCRIPT_URL = "_probe/views/views.js"  # relative to the page, so a Jupyter proxy's path prefix is kept
STYLE_URL = "_probe/views/views.css"  # the views' styles (the app's circuit panel draws with them)


@cache
def asset_text(name: str) -> str:
    """The text of one asset file (views.js, views.css)."""
    if name not in FILES:
        raise ProbeError(f"no view asset {name!r}: the assets are {', '.join(FILES)}")
    return resources.files("probe.views").joinpath("assets", name).read_text(encoding="utf-8")


def inline_script() -> str:
    """views.js as a <script> element (the JavaScript inlined: works offline, from file://)."""
    return "<script>\n" + asset_text("views.js").replace("</script", "<\\/script") + "\n</script>"


def inline_style() -> str:
    """views.css as a <style> element."""
    return "<style>\n" + asset_text("views.css") + "\n</style>"


def serve(server, route: str = ROUTE) -> None:
    """Serve the view assets from a Flask `server` at `route` + file name (only the files in FILES)."""
    from flask import Response, abort  # the Dash app's Flask: only the app calls this

    def view_asset(name: str):
        if name not in FILES:
            abort(404)
        return Response(asset_text(name), mimetype=FILES[name], headers={"Cache-Control": "no-cache"})

    server.add_url_rule(route + "<name>", "probe_view_asset", view_asset)


__all__ = ["FILES", "ROUTE", "SCRIPT_URL", "STYLE_URL", "asset_text",
           "inline_script", "inline_style", "serve"]
