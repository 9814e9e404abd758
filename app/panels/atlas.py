"""The head atlas: a layer × head grid coloured by one head type's score (fixed 0–1, grey when not above chance) or
label, labelling on demand in a background thread, the labels table as CSV."""

from __future__ import annotations

from dash import Input, Output, State, ctx, dcc, html, no_update

from .. import figures, ids
from ..errors import guarded
from ..service import Service
from . import graph, radio


def layout() -> html.Div:
    return html.Div(className="panel atlas-panel", children=[
        html.H2("Head atlas"),
        html.Div(["colour by: ", radio(ids.COLOUR_BY, [{"label": "score", "value": "score"},
                                                      {"label": "label", "value": "label"}], "score")],
                 className="controls"),
        html.Div([html.Button("Label heads", id=ids.LABEL_BUTTON),
                  html.Span(id=ids.LABEL_PROGRESS, className="note"),
                  html.Button("Download labels (CSV)", id=ids.LABELS_DOWNLOAD_BUTTON)], className="controls"),
        html.Div(id=ids.ATLAS_MESSAGE, className="message"),
        graph(ids.ATLAS),
        dcc.Interval(id=ids.LABEL_POLL, interval=500, disabled=True),
        dcc.Download(id=ids.LABELS_DOWNLOAD),
    ])


def atlas_view(service: Service, spec: str, head_type: str, colour_by: str, selected: dict | None):
    """The atlas figure of `spec` (the selected head marked)."""
    loaded = service.model(spec)
    chosen = service.head_of(spec, selected) if selected else None
    return figures.atlas_figure(service.labels(spec), loaded.n_layers, loaded.n_heads, head_type, colour_by, chosen)


def clicked_head(service: Service, spec: str, click) -> dict:
    """An atlas clickData payload -> the selected-head store, checked (a crafted payload is a ProbeError)."""
    try:
        point = click["points"][0]
        selected = {"layer": point["y"], "head": point["x"]}
    except (TypeError, KeyError, IndexError):
        from probe.errors import ProbeError

        raise ProbeError("the click did not name a head; click a cell of the atlas") from None
    layer, head = service.head_of(spec, selected)
    return {"layer": layer, "head": head}


def label_status(service: Service, spec: str, start: bool = False):
    """(progress children, poll disabled, finished-jobs counter) for the labelling job of `spec`."""
    job = service.start_labelling(spec) if start else service.job(spec)
    poll_off = service.running_job() is None and not (job is not None and job.state == "running")
    finished = service.finished_jobs()
    if job is None:
        return "", poll_off, finished
    if job.state == "failed":
        return f"labelling failed: {job.error}", poll_off, finished
    if job.state == "done":
        return f"labelled every head of {spec}", poll_off, finished
    bar = html.Progress(value=str(job.done), max=str(max(job.total, 1)), style={"width": "180px"})
    return [bar, f" labelling {spec}: {job.done}/{job.total or '?'}"], False, finished


def labels_download(service: Service, spec: str) -> dict:
    """dcc.Download data: the labels table of `spec` as CSV."""
    from probe.errors import ProbeError

    table = service.labels(spec)
    if table is None:
        raise ProbeError("no labels to download: press 'Label heads' first (or start the app with --labels FILE)")
    return dcc.send_string(table.to_csv(index=False), f"labels_{spec.replace(':', '_').replace('/', '_')}.csv")


def register(app, service: Service) -> None:
    @app.callback(Output(ids.ATLAS, "figure"), Output(ids.ATLAS_MESSAGE, "children"),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.COLOUR_BY, "value"),
                  Input(ids.SELECTED, "data"), Input(ids.LABEL_VERSION, "data"))
    @guarded(outputs=2, message=1)
    def _atlas(spec, head_type, colour_by, selected, _version):
        return atlas_view(service, spec, head_type, colour_by, selected), ""

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True),
                  Output(ids.ATLAS_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.ATLAS, "clickData"), State(ids.MODEL, "value"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _select(click, spec):
        return clicked_head(service, spec, click), ""

    @app.callback(Output(ids.LABEL_PROGRESS, "children"), Output(ids.LABEL_POLL, "disabled"),
                  Output(ids.LABEL_VERSION, "data"),
                  Input(ids.LABEL_BUTTON, "n_clicks"), Input(ids.LABEL_POLL, "n_intervals"), Input(ids.MODEL, "value"),
                  State(ids.LABEL_VERSION, "data"))
    @guarded(outputs=3, message=0)
    def _label(_clicks, _ticks, spec, version):
        progress, disabled, finished = label_status(service, spec, start=ctx.triggered_id == ids.LABEL_BUTTON)
        return progress, disabled, finished if finished != version else no_update

    @app.callback(Output(ids.LABELS_DOWNLOAD, "data"), Output(ids.ATLAS_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LABELS_DOWNLOAD_BUTTON, "n_clicks"), State(ids.MODEL, "value"),
                  prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _download_labels(_clicks, spec):
        return labels_download(service, spec), ""
