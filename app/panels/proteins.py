"""Proteins: predicted contacts (upper triangle) and true contacts from an uploaded structure (lower) beside
the selected head's APC-corrected attention; a clicked residue pair is marked in both until cleared, and both
maps zoom together; the per-head leaderboard selects heads. Uploads that are too large or of the wrong type
are refused in the browser with a message (assets/upload.js) and again on the server. The residue limit is
the model's own (app.facts), the chain menu lists the uploaded file's protein chains, unknown cells give their
reason on hover (probe.views.unknowns).

Longer than 450 lines because its callbacks (run, chain menu, maps, pair marks, shared zoom, unknowns,
structure set) share the panel's helpers and store checks; the 3D view lives in structure3d.py."""

from __future__ import annotations

import base64
import math

import numpy as np
from dash import Input, Output, Patch, State, ctx, dash_table, dcc, html, no_update

from probe.errors import ProbeError
from probe.models import ModelKind
from probe.naming import display_name
from probe.views.reading import format_q
from probe.views.unknowns import unknown_reason

from .. import figures, ids, protein_figures
from ..errors import guarded
from ..inputs import parse_fasta, row_head
from ..panel import TABLE_CELL, TABLE_HEADER, Panel, card_panel, graph
from ..protein_analysis import LEADERBOARD_COLUMNS
from ..service import Service
from . import structure3d
from .explorer import DEMO_PROTEIN

P_COLUMNS = ("p FWER long", "p_fwer_L_long", "q_value", "p_value")  # shown as format_q
STRUCTURE_EXTENSIONS = (".pdb", ".ent", ".cif", ".mmcif")
SEQUENCE_EXTENSIONS = (".fa", ".fasta", ".faa", ".txt", ".seq")


def upload_note(upload_bytes: int, upload_memory: int | None) -> str:
    """The upload box's tooltip: the largest file, and how much of them the server keeps (a shared dashboard's
    bound: the oldest are dropped first)."""
    kept = (f"; the server keeps {upload_memory / 2**20:g} MiB of uploaded files in all, the oldest dropped "
            "first (upload one again to choose another of its chains)") if upload_memory else ""
    return f"a structure (.pdb, .cif) or FASTA file, {upload_bytes / 2**20:g} MiB or less{kept}"


def layout(upload_bytes: int, theme: str = "light", upload_memory: int | None = None) -> html.Div:
    """The panel; its residue limit and chain menu are filled per model and per upload (callbacks below)."""
    table_style = {"style_table": {"maxHeight": "320px", "overflowY": "auto"},
                   # 13 columns after an upload fit the panel at 1600 px (issue 55): headers wrap at their
                   # spaces, 11 px type, 3 px padding, no minimum width
                   "style_cell": {**TABLE_CELL, "fontFamily": "ui-monospace, monospace", "fontSize": 11,
                                  "padding": "2px 3px", "minWidth": 0, "maxWidth": "90px",
                                  "whiteSpace": "normal"},
                   "style_header": {**TABLE_HEADER, "whiteSpace": "normal", "height": "auto"}}
    accept = ",".join(STRUCTURE_EXTENSIONS + SEQUENCE_EXTENSIONS)
    return card_panel("Proteins: attention next to contact maps", [
        dcc.Textarea(id=ids.SEQUENCE, value=DEMO_PROTEIN, rows=2, placeholder="protein sequence or FASTA"),
        html.Div([
            html.Button("Run sequence", id=ids.PROTEIN_RUN, title="Ctrl+Enter in the box"),
            html.Div(dcc.Upload(id=ids.UPLOAD, className="upload", max_size=upload_bytes, accept=accept,
                                children=html.Span(f"drop or click: structure (.pdb, .cif) or FASTA, ≤ "
                                                   f"{upload_bytes / 2**20:g} MiB")),
                     id=ids.UPLOAD_BOX, title=upload_note(upload_bytes, upload_memory),
                     **{"data-max-bytes": str(upload_bytes), "data-accept": accept}),
            html.Span("chain:"),
            dcc.Dropdown(id=ids.CHAIN, options=[], value=None, placeholder="first", clearable=False,
                         searchable=False, style={"width": "90px"}),
            html.Button("clear pair", id=ids.PAIR_CLEAR),
            html.Span(id=ids.PROTEIN_LIMIT, className="note"),
            html.Span("· click a residue pair to mark it in both maps", className="note"),
        ], className="controls"),
        html.Div(id=ids.PROTEIN_ERROR, className="message"),
        html.Div(id=ids.PROTEIN_MESSAGE, className="status"), dcc.Store(id=ids.PROTEIN_ZOOM),
        dcc.Store(id=ids.CONTACTS_VIEW), dcc.Store(id=ids.HEAD_MAP_VIEW),
        html.Div(id=ids.PROTEIN_VIEW_MESSAGE, className="message"),
        html.Div(className="row", children=[
            html.Div(graph(ids.CONTACTS, theme=theme), className="panel"),
            html.Div(graph(ids.HEAD_MAP, theme=theme), className="panel"),
        ]),
        html.Div([html.H2("The selected head on the structure (drag to turn; click an edge, or two residues, "
                          "to mark the pair in both maps)", id=ids.STRUCTURE3D_TITLE),
                  structure3d.layout()],
                 id=ids.STRUCTURE3D_BOX, className="panel", style={"display": "none"}),
        html.Div(className="row", children=[
            html.Div([html.H2("Per-head contact precision (click a row to select the head)"),
                      dash_table.DataTable(id=ids.LEADERBOARD, data=[], sort_action="native", page_size=200,
                                           tooltip_delay=300, tooltip_duration=None, **table_style)],
                     className="panel", style={"flex": "3 1 600px"}),  # the wide table gets the room
            html.Div([html.H2("Precision of the predicted contacts"),
                      dash_table.DataTable(id=ids.PRECISION, data=[], **table_style)], className="panel",
                     id=ids.PRECISION_BOX, style={"display": "none"}),
        ]),
        html.Div(className="structure-set", children=[
            html.H2(id=ids.STRUCTURE_SET_TITLE),
            dash_table.DataTable(id=ids.STRUCTURE_SET, data=[], sort_action="native", page_size=200,
                                 **table_style),
        ]),
    ], className="protein-panel")


# Columns of the structure-set summary shown in the page, and their short headers.
SET_COLUMNS = {"name": "head", "n_proteins": "proteins", "p_at_L_long": "P@L long", "p_at_L_long_low": "low",
               "p_at_L_long_high": "high", "base_rate_long": "base rate long",
               "enrichment_L_long": "enrichment long", "p_fwer_L_long": "p FWER long",
               "untrained_p99_L_long": "untrained p99 long", "significant_L_long": "significant long",
               "contact_share": "contact share", "contact_background": "contact bg",
               "binding_share": "binding share", "binding_background": "binding bg",
               "helix_share": "helix share", "strand_share": "strand share", "n_high": "α ≥ θ",
               "weight": "weight"}


def structure_set(service: Service, spec: str) -> tuple[list[dict], list[dict], str]:
    """(rows, columns, title) of the per-head summary over a structure set for `spec` (empty when none)."""
    summary = service.labels.heads_summary(spec)
    if summary is None:
        return [], [], ""
    # NaN: "unknown", not 0
    unknown_ok = {"binding_share", "binding_background", "helix_share", "strand_share"}
    keep = [c for c in SET_COLUMNS if c in summary.columns
            and (c in unknown_ok or not summary[c].isna().all())]
    table = summary.sort_values("p_at_L_long" if "p_at_L_long" in summary.columns else "layer",
                                ascending=False, na_position="last")
    if "significant_L_long" in table:  # nullable boolean -> text the table's JSON can carry
        table = table.assign(significant_L_long=table["significant_L_long"].map({True: "yes", False: "no"}))
    table = table[keep + ["layer", "head"]].rename(columns={**SET_COLUMNS, "head": "head_index"})
    table = table.round({column: 3 for column in table.columns if column not in P_COLUMNS})  # p: format_q
    columns = [{"name": name, "id": name} for name in table.columns if name not in ("layer", "head_index")]
    proteins = summary.attrs.get("proteins")
    count = len(proteins) if isinstance(proteins, (list, tuple)) else int(summary["n_proteins"].max())
    title = (f"Structure set: every head over {count} proteins (probe contacts --heads-summary; "
             "95 % bootstrap interval over proteins; click a row to select the head)")
    return unknown_as_text(as_read(table.to_dict("records"))), columns, title


def decode_upload(contents: str | None, filename: str | None, max_bytes: int) -> bytes | None:
    """The bytes of a dcc.Upload ('data:...;base64,...'), size-checked; None when nothing was uploaded."""
    if not contents:
        return None
    if not isinstance(contents, str):
        raise ProbeError("the upload is not a file; upload it again")
    _, _, payload = contents.partition(",")
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise ProbeError(f"{filename or 'the upload'} is larger than the {max_bytes // 1024} KiB limit")
    try:
        return base64.b64decode(payload, validate=False)
    except ValueError:
        raise ProbeError(f"{filename or 'the upload'} could not be decoded; upload the file again") from None


def protein_run(service: Service, spec: str, sequence: str | None, contents: str | None, filename: str | None,
                chain: str | None, upload: str | None = None):
    """(protein store, message): contacts for the typed sequence, an uploaded FASTA or an uploaded
    structure; `upload` (the key of a structure uploaded before, :meth:`ProteinStore.keep_upload`) with
    `filename` reruns that file on another `chain`. The store names the file's protein chains and the one
    used (the chain menu)."""
    loaded = service.facts.model(spec)
    if loaded.kind != ModelKind.PROTEIN_MLM:
        kind = getattr(loaded.kind, "value", loaded.kind)
        return None, f"{display_name(spec)} is a {kind}: choose a protein model (ESM) above for contact maps"
    data = decode_upload(contents, filename, service.config.upload_bytes)
    if data is None and upload is not None:
        data = service.proteins.upload(upload)
    structure = None
    name = str(filename or "")  # as uploaded: the note names the file as the user wrote it
    if data is not None and (name.lower().endswith(SEQUENCE_EXTENSIONS) or data.lstrip()[:1] == b">"):
        sequence, data = data.decode("latin-1"), None
    elif data is not None and not name.lower().endswith(STRUCTURE_EXTENSIONS):
        raise ProbeError(f"{filename}: upload a structure (.pdb, .cif) or a FASTA file (.fasta, .fa)")
    else:
        structure = data
    if structure is None:
        text = sequence or ""
        cap = service.facts.residue_cap(spec)
        if len(text) > 4 * cap + 4096:
            raise ProbeError(f"the sequence text is {len(text):,} characters; the app runs at most {cap} "
                             "residues")
        sequence = parse_fasta(text)
    try:
        key, result = service.proteins.analyse(spec, sequence if structure is None else None, structure, name,
                                      (chain or "").strip() or None)
    except ProbeError as error:
        if structure is None or str(error).startswith(name):
            raise
        raise ProbeError(f"{name}: {error}") from None  # say which upload was refused
    store = {"key": key, "model": spec, "length": len(result.sequence),
             "has_structure": result.true is not None}
    if result.structure is not None:
        store.update(chains=list(result.structure.chains), chain=result.structure.chain, filename=name,
                     upload=service.proteins.keep_upload(structure))
    return store, result.note


def chain_menu(store: dict | None) -> tuple[list[dict], str | None, bool]:
    """(options, value, disabled) of the chain menu: the uploaded file's protein chains, the one used
    selected; empty and disabled for a typed sequence."""
    chains = store.get("chains") if isinstance(store, dict) else None
    if not isinstance(chains, list) or not chains:
        return [], None, True
    return [{"label": str(c), "value": str(c)} for c in chains], store.get("chain"), len(chains) < 2


def protein_view(service: Service, store: dict | None, selected, pair: dict | None, zoom: dict | None = None,
                 theme: str = "light"):
    """(contact figure, head map figure, leaderboard rows, P@L table, message); both maps drawn at the shared
    zoom."""
    if not store:
        empty = figures.empty_figure(
            "choose a protein model, then type a sequence or upload a structure", theme)
        return empty, empty, [], [], [], ""
    if not isinstance(store, dict) or not isinstance(store.get("key"), str):
        raise ProbeError("the protein result is not valid; press Run again")
    result = service.proteins.result(store["key"])
    layer, head = service.facts.head_of(result.model, selected)
    chosen = checked_pair(pair, len(result.sequence))
    contacts = protein_figures.contact_figure(result.predicted, result.true, chosen, contact_title(result),
                                              uirevision=store["key"], theme=theme)
    apc = service.proteins.head_map(store["key"], layer, head)  # [residue residue]
    name = service.facts.head_label(result.model, layer, head)
    title = f"{name} APC attention · {display_name(result.model)}"  # a saved figure names the head and model
    head_map = protein_figures.head_map_figure(apc, chosen, title, uirevision=store["key"], theme=theme)
    figures.apply_zoom(contacts, zoom)
    figures.apply_zoom(head_map, zoom)
    rows = [] if result.heads is None else unknown_as_text(as_read(result.heads.to_dict("records")))
    precision = [] if result.precision is None else unknown_as_text(result.precision.to_dict("records"))
    columns = [] if result.heads is None else [{"name": c, "id": c} for c in result.heads.columns
                                               if c not in ("layer", "head_index")]
    return contacts, head_map, rows, columns, precision, ""


def structure_view(service: Service, store: dict | None) -> tuple[dict | None, dict, str]:
    """(3D payload, its box's style, message): the uploaded structure with the heads' attention, or nothing
    (hidden) for a typed sequence."""
    hidden = {"display": "none"}
    if not isinstance(store, dict) or not isinstance(store.get("key"), str) or not store.get("has_structure"):
        return None, hidden, no_update
    payload = service.proteins.structure_payload(store["key"])
    return payload, ({} if payload else hidden), no_update


def contact_title(result) -> str:
    """The contact map's title, by what it shows: "predicted ↗ · true ↙", "predicted", "true contacts ↙", or
    that nothing is predicted (a model without a contact regression, a typed sequence)."""
    shown = []
    if not np.isnan(result.predicted).all():
        shown.append("predicted ↗")
    if result.true is not None:
        shown.append("true contacts ↙")
    what = " · ".join(shown) or (f"no contacts to show: {display_name(result.model)} has no contact "
                                  "regression; upload a structure for true contacts")
    return f"{display_name(result.model)} · {len(result.sequence)} residues: {what}"


def as_read(records: list[dict]) -> list[dict]:
    """p- and q-value columns as the label tables print them (probe.views.reading.format_q: '< 0.001', 3
    significant digits), not rounded to 0; NaN stays NaN (shown "unknown")."""
    return [{key: (format_q(value) if key in P_COLUMNS and isinstance(value, float) and math.isfinite(value)
                   else value) for key, value in record.items()} for record in records]


def leaderboard_tooltips(service: Service, store: dict | None) -> list[dict]:
    """The leaderboard's hover text, row by row (DataTable tooltip_data): every unknown cell with its reason
    (probe.views.unknowns)."""
    if not isinstance(store, dict) or not isinstance(store.get("key"), str):
        return []
    result = service.proteins.result(store["key"])
    if result.heads is None:
        return []
    ligands = result.structure.ligands if result.structure is not None else None
    return unknown_tooltips(unknown_as_text(result.heads.to_dict("records")), LEADERBOARD_COLUMNS, ligands,
                            result.true is not None)


def unknown_tooltips(rows: list[dict], names: dict[str, str], ligands: tuple[str, ...] | None = None,
                     has_structure: bool = True) -> list[dict]:
    """DataTable tooltip_data for table rows whose NaN cells read "unknown": each with its reason
    (probe.views.unknowns); `names` maps the table's columns to the headers shown."""
    columns = {shown: column for column, shown in names.items()}
    return [{shown: {"value": "unknown: " + unknown_reason(columns.get(shown, shown), ligands=ligands,
                                                          has_structure=has_structure), "type": "text"}
             for shown, value in row.items() if value == "unknown"} for row in rows]


def precision_style(service: Service, store: dict | None) -> dict:
    """The P@L table's box: shown only when the model predicted contacts against a structure."""
    if not isinstance(store, dict) or not isinstance(store.get("key"), str):
        return {"display": "none"}
    return {} if service.proteins.result(store["key"]).precision is not None else {"display": "none"}


def unknown_as_text(records: list[dict]) -> list[dict]:
    """Table records with NaN shown as "unknown" (a feature share with no ligand is not 0)."""
    return [{key: ("unknown" if isinstance(value, float) and math.isnan(value) else value)
             for key, value in record.items()} for record in records]


def checked_pair(pair, length: int) -> tuple[int, int] | None:
    """A pair store {"i", "j"} -> (i, j) within the protein, else None."""
    if not isinstance(pair, dict):
        return None
    i, j = pair.get("i"), pair.get("j")
    if isinstance(i, int) and isinstance(j, int) and 0 <= i < length and 0 <= j < length:
        return (i, j)
    return None


def mark_pair(store: dict | None, click: dict | None):
    """(pair store, contacts patch, head map patch, message): mark the clicked residue pair in both maps."""
    if not isinstance(store, dict) or not isinstance(store.get("length"), int):
        raise ProbeError("no protein is shown (its length is unknown); run a sequence first")
    point = click["points"][0] if isinstance(click, dict) and click.get("points") else None
    pair = protein_figures.pair_from_point(point, store["length"]) if isinstance(point, dict) else None
    if pair is None:
        return no_update, no_update, no_update, ""
    contacts, head_map = protein_figures.pair_patches(pair)
    return {"i": pair[0], "j": pair[1]}, contacts, head_map, ""


def leaderboard_head(service: Service, spec: str, cell, rows) -> dict:
    """The head of a clicked leaderboard row, checked (the head index is in `head_index`; `head` is its
    name)."""
    return row_head(service, spec, cell, rows, "head_index")


def register(app, service: Service) -> None:
    # The chain menu is an input and an output of the same callback (Dash allows that one loop): a separate
    # callback filling it from the protein store made a cycle (store -> menu -> store) that stalled the page's
    # callbacks after the first upload (tests/app/test_app_browser.py, uploads then a typed sequence).
    @app.callback(Output(ids.PROTEIN, "data"), Output(ids.PROTEIN_ERROR, "children"),
                  Output(ids.PROTEIN_MESSAGE, "children"),
                  Output(ids.UPLOAD, "contents"), Output(ids.PAIR, "data"), Output(ids.PROTEIN_ZOOM, "data"),
                  Output(ids.CHAIN, "options"), Output(ids.CHAIN, "value"), Output(ids.CHAIN, "disabled"),
                  Input(ids.PROTEIN_RUN, "n_clicks"), Input(ids.UPLOAD, "contents"),
                  Input(ids.MODEL, "value"), Input(ids.CHAIN, "value"), State(ids.UPLOAD, "filename"),
                  State(ids.SEQUENCE, "value"), State(ids.PROTEIN, "data"))
    # a refusal goes to the error line; the line naming the shown protein stays
    @guarded(outputs=9, message=1)
    def _protein(_clicks, contents, spec, chain, filename, sequence, shown_store):
        upload = None
        if ctx.triggered_id == ids.UPLOAD and not contents:
            return (no_update,) * 9  # our own reset below
        if ctx.triggered_id == ids.CHAIN:  # another chain of the uploaded file: rerun the server's copy
            if not isinstance(shown_store, dict) or not chain or chain == shown_store.get("chain"):
                return (no_update,) * 9
            upload, filename = shown_store.get("upload"), shown_store.get("filename")
        elif ctx.triggered_id == ids.UPLOAD:
            chain = None  # a new file starts on its first chain; the menu then lists the others
        if ctx.triggered_id != ids.UPLOAD:
            contents = None  # Run uses the typed sequence; an upload runs itself
            filename = filename if upload else None
        store, message = protein_run(service, spec, sequence, contents, filename, chain if upload else None,
                                     upload)
        if store is None:  # not a protein model: nothing is shown
            return (None, "", message, None, None, None, *chain_menu(None))
        shown = message or f"the maps show the typed sequence ({store['length']} residues)"
        # contents reset: the same file can be uploaded again
        return (store, "", shown, None, None, None, *chain_menu(store))

    @app.callback(Output(ids.PROTEIN_LIMIT, "children"), Input(ids.MODEL, "value"))
    @guarded(outputs=1, message=0)
    def _limit(spec):
        return service.facts.residue_limit(spec)

    @app.callback(Output(ids.LEADERBOARD, "tooltip_data"), Output(ids.PRECISION_BOX, "style"),
                  Output(ids.PROTEIN_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.PROTEIN, "data"), prevent_initial_call=True)
    @guarded(outputs=3, message=2)
    def _unknowns(store):
        return leaderboard_tooltips(service, store), precision_style(service, store), no_update

    structure3d.register(app)

    @app.callback(Output(structure3d.PAYLOAD, "data"), Output(ids.STRUCTURE3D_BOX, "style"),
                  Output(ids.PROTEIN_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.PROTEIN, "data"), prevent_initial_call=True)
    @guarded(outputs=3, message=2)
    def _structure3d(store):
        return structure_view(service, store)

    @app.callback(Output(ids.CONTACTS, "figure", allow_duplicate=True),
                  Output(ids.HEAD_MAP, "figure", allow_duplicate=True),
                  Input(ids.PAIR, "data"), State(ids.PROTEIN, "data"), prevent_initial_call=True)
    def _follow_pair(pair, store):  # a pair picked in 3D is marked in both 2D maps
        chosen = checked_pair(pair, store["length"]) if isinstance(store, dict) and isinstance(
            store.get("length"), int) else None
        if chosen is None:  # a new protein resets the pair while its maps are redrawn: nothing to patch
            return no_update, no_update
        return protein_figures.pair_patches(chosen)

    @app.callback(Output(ids.CONTACTS, "figure"), Output(ids.HEAD_MAP, "figure"),
                  Output(ids.LEADERBOARD, "data"), Output(ids.LEADERBOARD, "columns"),
                  Output(ids.PRECISION, "data"), Output(ids.PROTEIN_VIEW_MESSAGE, "children"),
                  Input(ids.PROTEIN, "data"), Input(ids.SELECTED, "data"), Input(ids.LABEL_VERSION, "data"),
                  Input(ids.THEME, "checked"), State(ids.PAIR, "data"), State(ids.PROTEIN_ZOOM, "data"))
    @guarded(outputs=6, message=5)
    def _protein_view(store, selected, _version, dark, pair, zoom):
        return protein_view(service, store, selected, pair, zoom, figures.theme_of(dark))

    @app.callback(Output(ids.PAIR, "data", allow_duplicate=True),
                  Output(ids.CONTACTS, "figure", allow_duplicate=True),
                  Output(ids.HEAD_MAP, "figure", allow_duplicate=True),
                  Output(ids.PROTEIN_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.CONTACTS, "clickData"), Input(ids.HEAD_MAP, "clickData"),
                  Input(ids.PAIR_CLEAR, "n_clicks"), State(ids.PROTEIN, "data"), prevent_initial_call=True)
    @guarded(outputs=4, message=3)
    def _mark(contacts_click, map_click, _clear, store):
        if not isinstance(store, dict) or not isinstance(store.get("key"), str):
            return no_update, no_update, no_update, ""  # no protein maps drawn: nothing to mark or clear
        if ctx.triggered_id == ids.PAIR_CLEAR:
            contacts, head_map = protein_figures.pair_patches(None)
            return None, contacts, head_map, ""
        return mark_pair(store, contacts_click if ctx.triggered_id == ids.CONTACTS else map_click)

    # each map's zoom as axis keys, kept when plotly's {"autosize": true} follows it (explorer.js viewOf)
    for shown, view in ((ids.CONTACTS, ids.CONTACTS_VIEW), (ids.HEAD_MAP, ids.HEAD_MAP_VIEW)):
        app.clientside_callback("function (r) { return window.dash_clientside.probe.viewOf(r); }",
                                Output(view, "data"), Input(shown, "relayoutData"), prevent_initial_call=True)

    @app.callback(Output(ids.HEAD_MAP, "figure", allow_duplicate=True),
                  Output(ids.PROTEIN_ZOOM, "data", allow_duplicate=True), Input(ids.CONTACTS_VIEW, "data"),
                  State(ids.PROTEIN, "data"), prevent_initial_call=True)
    def _zoom_head_map(relayout, store):
        return shared_zoom(relayout, store) if isinstance(store, dict) else (no_update, no_update)

    @app.callback(Output(ids.CONTACTS, "figure", allow_duplicate=True),
                  Output(ids.PROTEIN_ZOOM, "data", allow_duplicate=True), Input(ids.HEAD_MAP_VIEW, "data"),
                  State(ids.PROTEIN, "data"), prevent_initial_call=True)
    def _zoom_contacts(relayout, store):
        return shared_zoom(relayout, store) if isinstance(store, dict) else (no_update, no_update)

    @app.callback(Output(ids.STRUCTURE_SET, "data"), Output(ids.STRUCTURE_SET, "columns"),
                  Output(ids.STRUCTURE_SET_TITLE, "children"), Output(ids.STRUCTURE_SET, "tooltip_data"),
                  Input(ids.MODEL, "value"))
    @guarded(outputs=4, message=2)
    def _structure_set(spec):
        rows, columns, title = structure_set(service, spec)
        return rows, columns, title, unknown_tooltips(rows, SET_COLUMNS)

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True),
                  Output(ids.PROTEIN_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.STRUCTURE_SET, "active_cell"), State(ids.STRUCTURE_SET, "derived_viewport_data"),
                  State(ids.MODEL, "value"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _select_from_set(cell, rows, spec):
        if not cell:
            return no_update, no_update
        return leaderboard_head(service, spec, cell, rows), ""

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True),
                  Output(ids.PROTEIN_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LEADERBOARD, "active_cell"), State(ids.LEADERBOARD, "derived_viewport_data"),
                  State(ids.PROTEIN, "data"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _select(cell, rows, store):
        if not cell:
            return no_update, no_update
        spec = store.get("model") if isinstance(store, dict) else None
        return leaderboard_head(service, spec, cell, rows), ""


def shared_zoom(relayout, store):
    """(layout patch for the other residue map, shared zoom store): the same window, or the whole protein
    after a double-click; (no_update, no_update) when the event zoomed nothing. Ranges are clipped to the
    protein (plotly echoes the ranges its aspect constraint widened, which would otherwise leave a blank band
    on the next map)."""
    ranges = figures.zoom_ranges(relayout)
    length = store.get("length") if isinstance(store, dict) else None
    if ranges is None or not isinstance(length, int):
        return no_update, no_update
    full = {"xaxis": [0.5, length + 0.5], "yaxis": [length + 0.5, 0.5]}
    if ranges == "reset":
        ranges, stored = full, None
    else:
        clipped = {}
        for axis, values in ranges.items():
            low, high = sorted(min(max(float(v), 0.5), length + 0.5) for v in values)
            if high - low <= 0:
                return no_update, no_update
            clipped[axis] = [high, low] if axis == "yaxis" else [low, high]
        ranges = clipped
        stored = None if all(ranges.get(axis, full[axis]) == full[axis] for axis in full) else ranges

    patch = Patch()
    for axis, values in ranges.items():
        patch["layout"][axis]["range"] = values
    return patch, stored


PANEL = Panel("proteins", register=register, where="proteins",
              layout=lambda service, state: layout(service.config.upload_bytes, state["theme"],
                                                   service.config.upload_memory_bytes))
