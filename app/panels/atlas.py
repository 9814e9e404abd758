"""The head atlas: a layer × head grid coloured by one head type's score (fixed 0–1, grey when not above chance) or
label, labelling on demand in a background thread, the labels table as CSV."""

from __future__ import annotations

from dash import Input, Output, State, ctx, dash_table, dcc, html, no_update

from probe.naming import head_name

from .. import figures, ids
from ..errors import guarded
from ..inputs import row_head
from ..service import Service
from . import card_panel, graph, radio

LEGEND = [html.Span([html.Span(className="swatch viridis"), "score on the fixed 0–1 scale"]),
          html.Span([html.Span(className="swatch grey"), "grey: not clearly above chance"]),
          html.Span([html.Span("0.90 ✓", className="badge labelled"), "labelled (q ≤ 0.05)"]),
          html.Span([html.Span(className="swatch empty"), "no score yet"])]


def layout() -> html.Div:
    table_style = {"style_table": {"maxHeight": "260px", "overflowY": "auto"},
                   "style_cell": {"fontFamily": "ui-monospace, monospace", "fontSize": 12, "padding": "2px 6px"},
                   "style_header": {"fontWeight": 600}}
    return card_panel("Head atlas", [
        html.Div(["colour by: ", radio(ids.COLOUR_BY, [{"label": "score", "value": "score"},
                                                      {"label": "label", "value": "label"}], "score")],
                 className="controls"),
        html.Div([html.Button("Label heads", id=ids.LABEL_BUTTON),
                  html.Span(id=ids.LABEL_PROGRESS, className="note"),
                  html.Button("Download labels (CSV)", id=ids.LABELS_DOWNLOAD_BUTTON)], className="controls"),
        html.Div(id=ids.ATLAS_MESSAGE, className="message"),
        html.Div(LEGEND, className="legend"),
        graph(ids.ATLAS, atlas=True),
        html.Div("Labelled heads of this type (click a row to select the head; click a header to sort)",
                 className="note"),
        html.Div(id=ids.LABELLED_MESSAGE, className="note"),
        dash_table.DataTable(id=ids.LABELLED, data=[], columns=[], sort_action="native", page_size=100,
                             **table_style),
        dcc.Interval(id=ids.LABEL_POLL, interval=500, disabled=True),
        dcc.Download(id=ids.LABELS_DOWNLOAD),
    ], className="atlas-panel")


# Columns of the labelled-heads table, in order, and their headers (only those the table has are shown).
LABELLED_COLUMNS = {"head_name": "head", "score": "score", "interval": "95 % interval", "chance": "chance",
                    "q_value": "q", "offset": "offset", "output_share": "output share", "role": "role",
                    "ablation_z": "ablation z", "group_z": "group z"}


def labelled_rows(table, head_type: str) -> tuple[list[dict], list[dict], str]:
    """(rows, columns, note) of the labelled heads of `head_type`, best score first; NaN is "unknown"."""
    if table is None or table.empty:
        return [], [], "no labels yet: press 'Label heads'"
    rows = table[table["head_type"].astype(str) == head_type]
    if "label" in rows.columns:
        rows = rows[[figures._is_labelled(value) for value in rows["label"]]]
    if rows.empty:
        return [], [], f"no head is labelled {head_type}"
    rows = rows.sort_values("score", ascending=False)
    out = []
    for row in rows.itertuples(index=False):
        record = {"head_name": head_name(int(row.layer), int(row.head)), "layer": int(row.layer),
                  "head": int(row.head), "score": round(float(row.score), 3)}
        low, high = figures._number(row, "ci_low"), figures._number(row, "ci_high")
        if low is not None and high is not None:
            record["interval"] = f"[{low:.3f}, {high:.3f}]"
        for column in ("chance", "output_share", "ablation_z", "group_z"):
            if column in rows.columns:
                value = figures._number(row, column)
                record[column] = round(value, 3) if value is not None else "unknown"
        if "q_value" in rows.columns:
            record["q_value"] = figures.format_q(figures._number(row, "q_value"))
        if "offset" in rows.columns:
            value = figures._number(row, "offset")
            record["offset"] = f"{int(value):+d}" if value is not None else ""
        if "role" in rows.columns:
            record["role"] = row.role if isinstance(row.role, str) else "unknown"
        out.append(record)
    present = [c for c in LABELLED_COLUMNS if any(c in record for record in out)]
    if "offset" in present and not any(record.get("offset") for record in out):
        present.remove("offset")
    columns = [{"name": LABELLED_COLUMNS[c], "id": c} for c in present]
    return out, columns, f"{len(out)} labelled"


def labelled_head(service: Service, spec: str, cell, rows) -> dict:
    """The head of a clicked labelled-heads row, checked."""
    return row_head(service, spec, cell, rows, "head")



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
        if service.unusable(spec):
            return figures.empty_figure("card only: " + service.unusable(spec)[:80]), ""
        return atlas_view(service, spec, head_type, colour_by, selected), ""

    app.clientside_callback(  # a single click selects; a double-click selects nothing (assets/keys.js)
        "function (click, shape) { return window.dash_clientside.probe.atlasClick(click, shape); }",
        Output(ids.SELECTED, "data", allow_duplicate=True), Input(ids.ATLAS, "clickData"), State(ids.SHAPE, "data"),
        prevent_initial_call=True)

    @app.callback(Output(ids.LABEL_PROGRESS, "children"), Output(ids.LABEL_POLL, "disabled"),
                  Output(ids.LABEL_VERSION, "data"),
                  Input(ids.LABEL_BUTTON, "n_clicks"), Input(ids.LABEL_POLL, "n_intervals"), Input(ids.MODEL, "value"),
                  State(ids.LABEL_VERSION, "data"))
    @guarded(outputs=3, message=0)
    def _label(_clicks, _ticks, spec, version):
        if service.unusable(spec):
            return "", True, no_update
        progress, disabled, finished = label_status(service, spec, start=ctx.triggered_id == ids.LABEL_BUTTON)
        return progress, disabled, finished if finished != version else no_update

    @app.callback(Output(ids.LABELLED, "data"), Output(ids.LABELLED, "columns"),
                  Output(ids.LABELLED_MESSAGE, "children"),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.LABEL_VERSION, "data"))
    @guarded(outputs=3, message=2)
    def _labelled(spec, head_type, _version):
        if service.unusable(spec):
            return [], [], ""
        return labelled_rows(service.labels(spec), head_type)

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True),
                  Output(ids.LABELLED_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LABELLED, "active_cell"), State(ids.LABELLED, "derived_viewport_data"),
                  State(ids.MODEL, "value"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _select_labelled(cell, rows, spec):
        if not cell:
            return no_update, no_update
        return labelled_head(service, spec, cell, rows), no_update

    @app.callback(Output(ids.LABELS_DOWNLOAD, "data"), Output(ids.ATLAS_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LABELS_DOWNLOAD_BUTTON, "n_clicks"), State(ids.MODEL, "value"),
                  prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _download_labels(_clicks, spec):
        return labels_download(service, spec), ""
