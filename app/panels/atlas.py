"""The head atlas: a layer × head grid coloured by one head type's score (fixed 0–1, grey when not
labelled) or label, labelling on demand in a background thread, the labels table as CSV."""

from __future__ import annotations

from dash import Input, Output, State, ctx, dash_table, dcc, html, no_update

from probe.errors import ProbeError
from probe.naming import display_name, head_name
from probe.views import reading

from .. import atlas_figure, figures, ids
from ..errors import guarded
from ..inputs import row_head
from ..panel import TABLE_CELL, TABLE_HEADER, Panel, card_panel, graph, radio
from ..service import Service

LEGEND = [html.Span([html.Span(className="swatch viridis"), "score on the fixed 0–1 scale"]),
          html.Span([html.Span(className="swatch grey"), "grey: not labelled (hover: why)"]),
          html.Span([html.Span("0.90 ✓", className="badge labelled"),
                     "labelled: passed the label rule (glossary)"]),
          html.Span([html.Span(className="swatch empty"), "no score yet"])]


def layout(theme: str = "light") -> html.Div:
    # cells and headers wrap (an interval at its space, "output share" over two lines), so the columns fit
    # the atlas card's width (433 px at 1600 px, issue 44; 305 px at 1280 px, issue 55: 11 px type and 2 px
    # padding) instead of scrolling sideways; a narrower card still scrolls
    table_style = {"style_table": {"maxHeight": "260px", "overflowY": "auto", "overflowX": "auto"},
                   "style_cell": {**TABLE_CELL, "fontFamily": "ui-monospace, monospace", "fontSize": 11,
                                  "padding": "2px 2px", "whiteSpace": "normal", "height": "auto",
                                  "minWidth": 0},
                   "style_header": {**TABLE_HEADER, "fontWeight": 600, "textDecoration": "underline dotted",
                                    "whiteSpace": "normal"},
                   "tooltip_header": {column: tip for column, tip in HEADER_TIPS.items()},
                   "tooltip_delay": 0, "tooltip_duration": None}
    return card_panel("Head atlas", [
        html.Div(["colour by: ", radio(ids.COLOUR_BY, [{"label": "score", "value": "score"},
                                                      {"label": "label", "value": "label"}], "score")],
                 className="controls"),
        html.Div([html.Button("Label heads", id=ids.LABEL_BUTTON),
                  html.Span(id=ids.LABEL_PROGRESS, className="note"),
                  html.Button("Download labels (CSV)", id=ids.LABELS_DOWNLOAD_BUTTON)], className="controls"),
        html.Div(id=ids.ATLAS_MESSAGE, className="message"),
        html.Div(LEGEND, className="legend"),
        graph(ids.ATLAS, atlas=True, theme=theme),
        html.Div("Labelled heads of this type (click a row to select the head; click a header to sort)",
                 className="note"),
        html.Div(id=ids.LABELLED_MESSAGE, className="note"),
        dash_table.DataTable(id=ids.LABELLED, data=[], columns=[], sort_action="native", page_size=100,
                             **table_style),
        dcc.Interval(id=ids.LABEL_POLL, interval=500, disabled=True),
        dcc.Download(id=ids.LABELS_DOWNLOAD),
    ], className="atlas-panel")


# Columns of the labelled-heads table, in order, and their headers (only those the table has are shown): the
# role comes right after the score, so it is in view without scrolling.
LABELLED_COLUMNS = {"head_name": "head", "score": "score", "role": "role", "q_value": "q",
                    "output_share": "output share", "interval": "95 % interval", "chance": "chance",
                    "untrained_p99": "twins p99", "held_out": "held-out",
                    "offset": "offset", "ablation_z": "ablation z", "group_z": "group z"}
# What each header means (shown on hover; the glossary says more).
HEADER_TIPS = {
    "head_name": "the head: layer L, head H (click a row to select it)",
    "score": "mean share of the head's attention on its type's targets over the probe examples (0–1)",
    "role": "first-token / delimiter labels: sink when the output share < 0.1 (attention parked, little "
            "moved), else function; other types: function when the output share > chance, else inert; "
            "induction: copying / suppressing by the copying score; unknown without an output share",
    "q_value": "q: Benjamini–Hochberg q-value of the test that the effect exceeds the minimum effect, over "
               "every head and type of the model; a label needs q ≤ 0.05 and the rest of the rule (glossary)",
    "output_share": "output share: the share of the head's output norm ‖Σ α·v·W_O‖ that comes from its "
                    "targets (Kobayashi et al. 2020)",
    "interval": "95 % clustered bootstrap interval of the score",
    "chance": "the score a uniform head would get on the same examples",
    "untrained_p99": "the 99th percentile of the type's statistic over every head of K untrained twins "
                     "(random-weight copies of the model, probe label --control untrained:K); a label must "
                     "beat it too. 'not run': the labels were made without twins (--control none, or a table "
                     "from before they were on by default) and beat chance only",
    "held_out": "the statistic (accuracy for coreference, else score) and its 95 % interval on the held-out "
                "half of the documents, which the selection never saw: a label must be reproduced there "
                "(docs/labels.md, Held-out confirmation)",
    "offset": "fixed_offset heads: the relative position d attended to (j = i + d)",
    "ablation_z": "rise in loss when the head is zeroed, in standard deviations of random same-layer heads",
    "group_z": "the same for all labelled heads of the type ablated together, against random groups",
}



NOT_RUN = "untrained twins not run: these labels beat chance only (probe label --control untrained:K)"


def labelled_rows(table, head_type: str, name=head_name) -> tuple[list[dict], list[dict], str]:
    """(rows, columns, note) of the labelled heads of `head_type`, best score first; NaN is "unknown". The
    untrained twins' bar sits beside chance ("not run" without twins, and the note then says so). `name`
    writes a head's name from (layer, head) (an encoder–decoder's: "enc.L1H2")."""
    if table is None or table.empty:
        return [], [], "no labels yet: press 'Label heads'"
    rows = table[table["head_type"].astype(str) == head_type]
    if "label" in rows.columns:
        rows = rows[[reading.is_labelled(value) for value in rows["label"]]]
    if rows.empty:
        return [], [], f"no head is labelled {head_type}"
    rows = rows.sort_values("score", ascending=False)
    ran = reading.twins_ran(table)  # the untrained twins' bar beside chance, or "not run"
    out = []
    for row in rows.itertuples(index=False):
        record = {"head_name": name(int(row.layer), int(row.head)), "layer": int(row.layer),
                  "head": int(row.head), "score": round(float(row.score), 3)}
        low, high = reading.number(row, "ci_low"), reading.number(row, "ci_high")
        if low is not None and high is not None:
            record["interval"] = f"[{low:.3f}, {high:.3f}]"
        for column in ("chance", "output_share", "ablation_z", "group_z"):
            if column in rows.columns:
                value = reading.number(row, column)
                record[column] = round(value, 3) if value is not None else "unknown"
        record["untrained_p99"] = reading.twins_text(row, ran)
        if "selected" in rows.columns:
            record["held_out"] = reading.held_out_text(row) or "unknown"
        if "q_value" in rows.columns:
            q_text = reading.format_q(reading.number(row, "q_value"))
            record["q_value"] = q_text.replace(" ", "\u00a0")  # "< 0.001" on one line
        if "offset" in rows.columns:
            value = reading.number(row, "offset")
            record["offset"] = f"{int(value):+d}" if value is not None else ""
        if "role" in rows.columns:
            record["role"] = row.role if isinstance(row.role, str) else "unknown"
        out.append(record)
    present = [c for c in LABELLED_COLUMNS if any(c in record for record in out)]
    if "offset" in present and not any(record.get("offset") for record in out):
        present.remove("offset")
    # a column unknown for every row (all-MiniLM-L6-v2 has no LM head: no ablation) is said once in the note,
    # not drawn as a column of "unknown" that pushes the table wider than its card
    unknown = [c for c in present if all(record.get(c) == "unknown" for record in out)]
    # the twins' bar "not run" on every row: said once, by the note's NOT_RUN, not drawn as a column
    unrun = [c for c in present if c == "untrained_p99" and all(record.get(c) == "not run" for record in out)]
    # the bars one type shares (chance and the twins' p99 at one length): said once in the note, not as two
    # columns of one value that push the table wider than its card
    shared = [c for c in ("chance", "untrained_p99") if c in present and c not in unknown + unrun
              and len({str(record.get(c)) for record in out}) == 1]
    columns = [{"name": LABELLED_COLUMNS[c], "id": c} for c in present if c not in unknown + unrun + shared]
    note = f"{len(out)} labelled" + ("" if ran else f" · {NOT_RUN}")
    if shared:
        bars = ", ".join(f"{LABELLED_COLUMNS[c]} {_shown(out[0][c])}" for c in shared)
        note += f" · {bars} for every head"
    if unknown:
        note += f" · {', '.join(LABELLED_COLUMNS[c] for c in unknown)}: unknown for every head (not measured)"
    return out, columns, note


def _shown(value) -> str:
    """A bar of the note as the table writes it (3 decimals)."""
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def labelled_head(service: Service, spec: str, cell, rows) -> dict:
    """The head of a clicked labelled-heads row, checked."""
    return row_head(service, spec, cell, rows, "head")



def atlas_view(service: Service, spec: str, head_type: str, colour_by: str, selected: dict | None,
               theme: str = "light"):
    """The atlas figure of `spec` (the selected head marked)."""
    loaded = service.facts.model(spec)
    chosen = service.facts.head_of(spec, selected) if selected else None
    kinds = dict(loaded.plan.layer_kinds) if loaded.plan is not None else {}
    no_alpha = {layer: kinds.get(layer, "no softmax attention")
                for layer in range(loaded.n_layers) if layer not in loaded.attention_layers}
    refused = "no labels: probe label refuses encoder–decoder models; the views work"
    return atlas_figure.atlas_figure(service.labels.table(spec), loaded.n_layers, loaded.n_heads, head_type,
                                     colour_by,
                                chosen, theme, no_alpha, name=loaded.head_name,
                                layer_names=service.facts.layer_names(spec),
                                empty_title=refused if service.facts.label_refusal(spec) else None)


def label_status(service: Service, spec: str, start: bool = False):
    """(progress children, poll disabled, finished-jobs counter, status line) for the labelling job of `spec`;
    the status line names whatever job runs (this model's or another's) with its estimate, for beside the
    explorer."""
    # probe label refuses encoder–decoders: one line, no failed job
    refusal = service.facts.label_refusal(spec)
    job = None if refusal else service.labels.start(spec) if start else service.labels.jobs.job(spec)
    pending = service.labels.jobs.running()
    poll_off = pending is None and not (job is not None and job.state in ("queued", "running"))
    finished = service.labels.jobs.finished()
    line = pending[1].describe(display_name(pending[0])) + " · the views stay usable" if pending else ""
    if job is None:
        return refusal or "", poll_off, finished, line
    text = job.describe(display_name(spec))
    if job.state != "running":
        return text, poll_off, finished, line
    bar = html.Progress(value=str(job.done), max=str(max(job.total, 1)), style={"width": "180px"})
    return [bar, " " + text], False, finished, line


def labels_download(service: Service, spec: str) -> dict:
    """dcc.Download data: the labels table of `spec` as CSV."""
    table = service.labels.table(spec)
    if table is None:
        raise ProbeError("no labels to download: press 'Label heads' first (or start the app with --labels "
                         "FILE)")
    if "model" in table.columns:  # the served name, never a path of the server (revision still identifies it)
        table = table.assign(model=[service.registry.name_of(value) if isinstance(value, str) else value
                                    for value in table["model"]])
    return dcc.send_string(table.to_csv(index=False),
                           f"labels_{display_name(spec).replace(':', '_').replace('/', '_')}.csv")


def register(app, service: Service) -> None:
    @app.callback(Output(ids.ATLAS, "figure"), Output(ids.ATLAS_MESSAGE, "children"),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.COLOUR_BY, "value"),
                  Input(ids.SELECTED, "data"), Input(ids.LABEL_VERSION, "data"), Input(ids.THEME, "checked"))
    @guarded(outputs=2, message=1)
    def _atlas(spec, head_type, colour_by, selected, _version, dark):
        theme = figures.theme_of(dark)
        if service.facts.unusable(spec):
            return figures.empty_figure("card only: this model has no capture views", theme), ""
        return atlas_view(service, spec, head_type, colour_by, selected, theme), ""

    app.clientside_callback(  # a single click selects; a double-click selects nothing (assets/keys.js)
        "function (click, shape) { return window.dash_clientside.probe.atlasClick(click, shape); }",
        Output(ids.SELECTED, "data", allow_duplicate=True), Input(ids.ATLAS, "clickData"),
        State(ids.SHAPE, "data"), prevent_initial_call=True)

    @app.callback(Output(ids.LABEL_PROGRESS, "children"), Output(ids.LABEL_POLL, "disabled"),
                  Output(ids.LABEL_VERSION, "data"), Output(ids.LABEL_WAIT, "children"),
                  Input(ids.LABEL_BUTTON, "n_clicks"), Input(ids.LABEL_POLL, "n_intervals"),
                  Input(ids.MODEL, "value"), State(ids.LABEL_VERSION, "data"))
    @guarded(outputs=4, message=0)
    def _label(_clicks, _ticks, spec, version):
        if service.facts.unusable(spec):
            return "", True, no_update, ""
        progress, disabled, finished, line = label_status(service, spec,
                                                          start=ctx.triggered_id == ids.LABEL_BUTTON)
        return progress, disabled, finished if finished != version else no_update, line

    @app.callback(Output(ids.LABELLED, "data"), Output(ids.LABELLED, "columns"),
                  Output(ids.LABELLED_MESSAGE, "children"),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.LABEL_VERSION, "data"))
    @guarded(outputs=3, message=2)
    def _labelled(spec, head_type, _version):
        if service.facts.unusable(spec):
            return [], [], ""
        if service.labels.table(spec) is None and service.facts.label_refusal(spec):
            return [], [], service.facts.label_refusal(spec)
        return labelled_rows(service.labels.table(spec), head_type, service.facts.model(spec).head_name)

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True),
                  Output(ids.LABELLED_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LABELLED, "active_cell"), State(ids.LABELLED, "derived_viewport_data"),
                  State(ids.MODEL, "value"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _select_labelled(cell, rows, spec):
        if not cell:
            return no_update, no_update
        return labelled_head(service, spec, cell, rows), no_update

    @app.callback(Output(ids.LABELS_DOWNLOAD, "data"),
                  Output(ids.ATLAS_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LABELS_DOWNLOAD_BUTTON, "n_clicks"), State(ids.MODEL, "value"),
                  prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _download_labels(_clicks, spec):
        return labels_download(service, spec), ""


PANEL = Panel("atlas", register=register, where="left", layout=lambda service, state: layout(state["theme"]))
