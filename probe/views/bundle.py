"""The view layer's clientside files, shipped as package data (probe/views/assets/): read for inlining into a
notebook output or a report, and served to the Dash app by a Flask route (no CDN, no network)."""

from __future__ import annotations

import json
import uuid
from functools import cache
from importlib import resources

from probe.errors import ProbeError

# every file the route may serve; 3Dmol-min.js: 3Dmol.js 2.5.5, vendored (3Dmol-NOTICE.md, 3Dmol-LICENSE.txt)
FILES = {"views.js": "text/javascript", "views.css": "text/css", "structure.js": "text/javascript",
         "3Dmol-min.js": "text/javascript"}
ROUTE = "/_probe/views/"  # where serve() answers (below the app's routes prefix)
SCRIPT_URL = "_probe/views/views.js"  # relative to the page, so a Jupyter proxy's path prefix is kept
# the 3D structure view's scripts, in load order (the app's external_scripts, after SCRIPT_URL), and the
# view layer's style sheet (the app's external_stylesheets: the 3D view's theme, the circuit panel's graph)
STRUCTURE_URLS = ("_probe/views/3Dmol-min.js", "_probe/views/structure.js")
STYLE_URL = "_probe/views/views.css"


@cache
def asset_text(name: str) -> str:
    """The text of one asset file (views.js, views.css)."""
    if name not in FILES:
        raise ProbeError(f"no view asset {name!r}: the assets are {', '.join(FILES)}")
    return resources.files("probe.views").joinpath("assets", name).read_text(encoding="utf-8")


def inline_script() -> str:
    """views.js as a <script> element (the JavaScript inlined: works offline, from file://)."""
    return "<script>\n" + asset_text("views.js").replace("</script", "<\\/script") + "\n</script>"


def inline_structure_script() -> str:
    """3Dmol.js and structure.js as <script> elements, for the 3D structure view (offline, from file://).

    3Dmol's UMD wrapper registers itself with an AMD loader where one is on the page (classic Jupyter's
    require.js), and then never defines ``window.$3Dmol``; it runs here with ``define``, ``exports`` and
    ``module`` hidden, once per page (a second output finds ``window.$3Dmol`` and skips it).
    """
    library = asset_text("3Dmol-min.js").replace("</script", "<\\/script")
    return ("<script>\nif (!window.$3Dmol) { (function (define, exports, module) {\n" + library
            + "\n}).call(window); }\n</script><script>\n"
            + asset_text("structure.js").replace("</script", "<\\/script") + "\n</script>")


def inline_style() -> str:
    """views.css as a <style> element."""
    return "<style>\n" + asset_text("views.css") + "\n</style>"


def mounting_html(kind: str, data: dict, scripts: str, mount: str, element_id: str | None = None) -> str:
    """HTML that mounts one view where it is placed (a notebook output, a report section, a saved page).

    The one shell of every view: the style, a placeholder ``<div class="probe-{kind}">`` that names its data
    (``data-probe-{kind}``) and says what to do where JavaScript does not run, the data as JSON in a
    ``<script type="application/json">`` (``<`` escaped, so no text of the data can end the element), the
    inlined `scripts` and the `mount` call (``window.probeViews.mountAll()``) that draws every such div.
    """
    element_id = element_id or f"probe-{kind}-" + uuid.uuid4().hex[:10]
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    what = {"view": "probe view", "circuit": "circuit view", "structure": "3D view"}.get(kind, f"{kind} view")
    return (f'{inline_style()}<div id="{element_id}" class="probe-{kind}" '
            f'data-probe-{kind}="{element_id}-data">the {what} needs JavaScript: in Jupyter, trust the '
            "notebook (File › Trust) or run the cell again"
            f'</div><script type="application/json" id="{element_id}-data">{text}</script>{scripts}'
            f"<script>{mount}</script>")


def serve(server, route: str = ROUTE) -> None:
    """Serve the view assets from a Flask `server` at `route` + file name (only the files in FILES)."""
    from flask import Response, abort  # the Dash app's Flask: only the app calls this

    def view_asset(name: str):
        if name not in FILES:
            abort(404)
        return Response(asset_text(name), mimetype=FILES[name], headers={"Cache-Control": "no-cache"})

    server.add_url_rule(route + "<name>", "probe_view_asset", view_asset)


__all__ = ["FILES", "ROUTE", "SCRIPT_URL", "STRUCTURE_URLS", "STYLE_URL", "asset_text", "inline_script",
           "inline_structure_script", "inline_style", "serve"]
