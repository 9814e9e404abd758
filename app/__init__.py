"""The `probe app` dashboard (Dash): head atlas, grid of every head, attention explorer, proteins next to
contact maps, architecture card. Installed as `probe_app` (the source folder is `app/`); inside, imports are
relative.

    from probe_app import create_app          # `from app import create_app` in a source checkout
    from probe_app.config import AppConfig
    dash_app = create_app(AppConfig(models=("zoo:induction",)))
    dash_app.run(host="127.0.0.1", port=8050, threaded=True)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

from dash import Dash
from dash.exceptions import DependencyException
from flask import has_request_context, request

from probe.views import bundle  # the explorer's clientside core, shared with notebook views and reports

from . import access, layout
from .config import AppConfig
from .service import Service

__all__ = ["AppConfig", "Service", "create_app"]

ASSETS = Path(__file__).resolve().parent / "assets"


def create_app(config: AppConfig | None = None, service: Service | None = None):
    """A new Dash app over `service` (built from `config` when not given): models loaded once, shared by
    sessions.

    The layout is built per page visit from the URL's query string, so a reload (or a shared link) restores
    the model, head type, selected head and a short input.
    """
    service = service or Service(config or AppConfig())
    service.registry.load_all()
    service.labels.check_file()  # another model's table is refused, never drawn
    dash_app = Dash(__name__, assets_folder=str(ASSETS), title="probe", update_title=None,
                    suppress_callback_exceptions=True,
                    # views.js, then the 3D view's 3Dmol.js and structure.js, all from the app's own route
                    external_scripts=[bundle.SCRIPT_URL, *bundle.STRUCTURE_URLS],
                    external_stylesheets=[bundle.STYLE_URL])
    bundle.serve(dash_app.server)  # probe/views/assets/views.js, loaded before assets/explorer.js

    def serve_layout():
        service.gate.touch()  # a page is loading: background labelling waits until its views are drawn
        return layout.page_layout(service, _page_query() if has_request_context() else {})

    def _page_query() -> dict:
        """The visited page's query: the renderer fetches the layout from /_dash-layout, the page's URL is the
        referrer."""
        if request.args:
            return request.args.to_dict()
        query = parse_qs(urlparse(request.referrer or "").query)
        return {key: values[0] for key, values in query.items() if values}

    dash_app.layout = serve_layout
    _not_found_for_unknown_assets(dash_app.server)
    if service.config.token is not None:  # shared beyond loopback: every request carries the secret
        access.require_token(dash_app.server, service.config.token)
    layout.register(dash_app, service)
    # base64 + JSON overhead
    dash_app.server.config["MAX_CONTENT_LENGTH"] = service.config.upload_bytes * 2 + 2**20
    dash_app.probe_service = service
    return dash_app


def _not_found_for_unknown_assets(server) -> None:
    """A component-suite path that is not a registered file (`../../etc/passwd`, a typo) is a plain 404: no
    traceback in the log, nothing read."""
    def not_found(_error):
        return "not found", 404

    server.register_error_handler(DependencyException, not_found)

    @server.before_request
    def _refuse_traversal():
        path = request.path
        if path.startswith("/_dash-component-suites/") and (".." in path.split("/") or "\\" in path):
            return "not found", 404
        return None
