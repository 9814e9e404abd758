"""The `probe app` dashboard (Dash): head atlas, attention explorer, proteins next to contact maps.

    from app import create_app
    from app.service import AppConfig
    dash_app = create_app(AppConfig(models=("zoo:induction",)))
    dash_app.run(host="127.0.0.1", port=8050, threaded=True)
"""

from __future__ import annotations

from pathlib import Path

from app.service import AppConfig, Service

__all__ = ["AppConfig", "Service", "create_app"]

ASSETS = Path(__file__).resolve().parent / "assets"


def create_app(config: AppConfig | None = None, service: Service | None = None):
    """A new Dash app over `service` (built from `config` when not given): models loaded once, shared by sessions."""
    from dash import Dash

    from app import callbacks, layout
    from app.service import head_types

    service = service or Service(config or AppConfig())
    service.registry.load_all()
    dash_app = Dash(__name__, assets_folder=str(ASSETS), title="probe", update_title=None,
                    suppress_callback_exceptions=False)
    dash_app.layout = layout.page(service, head_types())
    callbacks.register(dash_app, service)
    dash_app.server.config["MAX_CONTENT_LENGTH"] = service.config.upload_bytes * 2 + 2**20  # base64 + JSON overhead
    dash_app.probe_service = service
    return dash_app
