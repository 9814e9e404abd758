"""The page: model choice on top, head atlas beside the attention explorer, the protein view below."""

from __future__ import annotations

from pathlib import Path

from dash import dash_table, dcc, html

from app import callbacks, figures, ids
from app.service import Service


def _radio(component_id: str, options, value) -> dcc.RadioItems:
    return dcc.RadioItems(id=component_id, options=list(options), value=value, inline=True,
                          labelStyle={"marginRight": "12px"})


def _graph(component_id: str) -> dcc.Graph:
    return dcc.Graph(id=component_id, config=figures.graph_config("png", f"probe_{component_id}"),
                     figure=figures.empty_figure("loading…"))


def model_label(spec: str) -> str:
    """A local directory is shown by its name; hub ids and zoo:NAME as given."""
    path = Path(spec)
    return path.name if path.is_absolute() or spec.startswith(".") else spec


def header(service: Service, head_types) -> html.Div:
    specs = service.specs
    options = [{"label": model_label(spec), "value": spec} for spec in specs]
    return html.Div([
        html.H1("probe — what each attention head does"),
        html.Div(["model: ", _radio(ids.MODEL, options, specs[0])], className="controls"),
        html.Div(id=ids.MODEL_INFO, className="note"),
        html.Div(["head type: ", _radio(ids.HEAD_TYPE, head_types, head_types[0])], className="controls"),
        html.Div(["toolbar camera saves: ", _radio(ids.IMAGE_FORMAT, [
            {"label": "PNG", "value": "png"}, {"label": "SVG", "value": "svg"}], "png")], className="controls"),
    ])


def atlas_panel() -> html.Div:
    return html.Div(className="panel", style={"flex": "1 1 380px"}, children=[
        html.H2("Head atlas"),
        html.Div(["colour by: ", _radio(ids.COLOUR_BY, [{"label": "score", "value": "score"},
                                                       {"label": "label", "value": "label"}], "score")],
                 className="controls"),
        html.Div([html.Button("Label heads", id=ids.LABEL_BUTTON),
                  html.Span(id=ids.LABEL_PROGRESS, className="note"),
                  html.Button("Download labels (CSV)", id=ids.LABELS_DOWNLOAD_BUTTON)], className="controls"),
        html.Div(id=ids.ATLAS_MESSAGE, className="message"),
        _graph(ids.ATLAS),
        dcc.Interval(id=ids.LABEL_POLL, interval=500, disabled=True),
        dcc.Download(id=ids.LABELS_DOWNLOAD),
    ])


def explorer_panel(max_tokens: int, text: str = "") -> html.Div:
    return html.Div(className="panel", style={"flex": "2 1 560px"}, children=[
        html.H2("Attention explorer"),
        dcc.Textarea(id=ids.TEXT, value=text or callbacks.DEMO_TEXT, rows=3,
                     placeholder="a prompt, a protein sequence, or token ids (tick 'token ids')"),
        html.Div([
            html.Button("Run", id=ids.RUN),
            dcc.Checklist(id=ids.AS_IDS, options=[{"label": "token ids", "value": "ids"}], value=[], inline=True),
            dcc.Checklist(id=ids.OVERLAY, options=[{"label": "overlay the head type's targets", "value": "on"}],
                          value=[], inline=True),
            html.Span(f"at most {max_tokens} tokens", className="note"),
        ], className="controls"),
        html.Div(id=ids.EXPLORER_MESSAGE, className="message"),
        html.Div([
            html.Button("◀ layer", id=ids.LAYER_PREV), html.Button("layer ▶", id=ids.LAYER_NEXT),
            html.Button("◀ head", id=ids.HEAD_PREV), html.Button("head ▶", id=ids.HEAD_NEXT),
            html.Strong(id=ids.HEAD_LABEL), html.Span("keys: ←/→ head, ↑/↓ layer", className="note"),
        ], className="controls"),
        html.Div(id=ids.EXPLORER_VIEW_MESSAGE, className="message"),
        _graph(ids.HEATMAP),
        html.Div([html.Button("Download matrix (CSV)", id=ids.MATRIX_CSV_BUTTON),
                  html.Button("Download matrix (NPY)", id=ids.MATRIX_NPY_BUTTON),
                  html.Span(id=ids.DOWNLOAD_MESSAGE, className="message")], className="controls"),
        dcc.Download(id=ids.MATRIX_DOWNLOAD),
        _graph(ids.LINES),
    ])


def protein_panel(upload_bytes: int, max_residues: int) -> html.Div:
    table_style = {"style_table": {"maxHeight": "320px", "overflowY": "auto"},
                   "style_cell": {"fontFamily": "ui-monospace, monospace", "fontSize": 13, "padding": "2px 8px"}}
    return html.Div([
        html.H2("Proteins: attention next to contact maps"),
        dcc.Textarea(id=ids.SEQUENCE, value=callbacks.DEMO_PROTEIN, rows=2,
                     placeholder="protein sequence or FASTA"),
        html.Div([
            html.Button("Run sequence", id=ids.PROTEIN_RUN),
            dcc.Upload(id=ids.UPLOAD, className="upload", max_size=upload_bytes,
                       accept=".pdb,.ent,.cif,.mmcif,.fasta,.fa,.faa,.txt",
                       children=html.Span(f"drop or click: structure (.pdb, .cif) or FASTA, ≤ "
                                          f"{upload_bytes // 2**20} MiB")),
            html.Span("chain:"), dcc.Input(id=ids.CHAIN, value="", placeholder="first", style={"width": "60px"}),
            html.Span(f"at most {max_residues} residues · hover or click a residue pair to mark it in both maps",
                      className="note"),
        ], className="controls"),
        html.Div(id=ids.PROTEIN_MESSAGE, className="status"),
        html.Div(id=ids.PROTEIN_VIEW_MESSAGE, className="message"),
        html.Div(className="row", children=[
            html.Div(_graph(ids.CONTACTS), className="panel"),
            html.Div(_graph(ids.HEAD_MAP), className="panel"),
        ]),
        html.Div(className="row", children=[
            html.Div([html.H2("Per-head contact precision (click a row to select the head)"),
                      dash_table.DataTable(id=ids.LEADERBOARD, data=[], sort_action="native", page_size=200,
                                           **table_style)], className="panel"),
            html.Div([html.H2("Precision of the predicted contacts"),
                      dash_table.DataTable(id=ids.PRECISION, data=[], **table_style)], className="panel"),
        ]),
    ])


def page(service: Service, head_types) -> html.Div:
    config = service.config
    return html.Div([
        dcc.Store(id=ids.SELECTED, data={"layer": 0, "head": 0}),
        dcc.Store(id=ids.INPUT), dcc.Store(id=ids.LABEL_VERSION, data=0),
        dcc.Store(id=ids.PROTEIN), dcc.Store(id=ids.PAIR),
        header(service, head_types),
        html.Div([atlas_panel(), explorer_panel(config.max_tokens, callbacks.example_text(service.model(service.specs[0])))],
                 className="row"),
        protein_panel(config.upload_bytes, config.max_residues),
    ])
