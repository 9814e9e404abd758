"""Callbacks: each Dash callback is a few lines calling one plain function of this module (testable without Dash),
and those call `figures` (pure plotting) and the `Service` (models, captures, labels, proteins).

Errors never reach the page as a traceback: a ProbeError's one line is shown as is, anything else as a one-line
"internal error" (the traceback goes to the server log).
"""

from __future__ import annotations

import base64
import io
import logging
import random
from collections.abc import Sequence

import numpy as np
from dash import Input, Output, Patch, State, ctx, dcc, html, no_update

from app import figures, ids
from app.service import Service, parse_fasta
from probe.errors import ProbeError
from probe.heads import head_name

log = logging.getLogger("probe.app")

DEMO_TEXT = ("the cat saw the dog . the cat saw the dog . mary gave the book to john because he wanted it . "
             "one two three four five one two three four five")
DEMO_PROTEIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"  # ubiquitin
GRAPHS = (ids.ATLAS, ids.HEATMAP, ids.LINES, ids.CONTACTS, ids.HEAD_MAP)


def error_message(error: Exception) -> str:
    """The one line a user sees for an error."""
    if isinstance(error, ProbeError):
        return str(error)
    log.error("internal error in a callback", exc_info=error)
    return f"internal error: {type(error).__name__}: {error} (details in the server log)"


# --- plain functions (unit-tested) ---------------------------------------------------------------------------


def next_selection(trigger: str | None, selected: dict | None, n_layers: int, n_heads: int,
                   click: dict | None = None, row: dict | None = None) -> dict:
    """The selected head after an atlas click, a step button, a leaderboard row or a model change."""
    layer, head = (selected or {}).get("layer", 0), (selected or {}).get("head", 0)
    if trigger == ids.ATLAS and click and click.get("points"):
        point = click["points"][0]
        layer, head = int(point["y"]), int(point["x"])
    elif trigger == ids.LEADERBOARD and row:
        layer, head = int(row["layer"]), int(row["head_index"])
    elif trigger in (ids.LAYER_PREV, ids.LAYER_NEXT):
        layer += -1 if trigger == ids.LAYER_PREV else 1
    elif trigger in (ids.HEAD_PREV, ids.HEAD_NEXT):
        head += -1 if trigger == ids.HEAD_PREV else 1
    return {"layer": layer % n_layers, "head": head % n_heads}


def atlas_view(service: Service, spec: str, head_type: str, colour_by: str, selected: dict | None):
    """(atlas figure, message)."""
    try:
        loaded = service.model(spec)
        table = service.labels(spec)
        chosen = (selected["layer"], selected["head"]) if selected else None
        figure = figures.atlas_figure(table, loaded.n_layers, loaded.n_heads, head_type, colour_by, chosen)
        return figure, ""
    except Exception as error:  # noqa: BLE001
        return figures.empty_figure("the atlas could not be drawn"), error_message(error)


def label_status(service: Service, spec: str, start: bool = False):
    """(progress children, poll disabled, finished flag) for the labelling job of `spec`, starting it if asked."""
    try:
        job = service.start_labelling(spec) if start else service.job(spec)
    except Exception as error:  # noqa: BLE001
        return error_message(error), True, False
    if job is None:
        return "", True, False
    if job.state == "failed":
        return f"labelling failed: {job.error}", True, True
    if job.state == "done":
        return f"labelled every head of {spec}", True, True
    bar = html.Progress(value=str(job.done), max=str(max(job.total, 1)), style={"width": "220px"})
    return [bar, f" labelling {spec}: {job.done}/{job.total or '?'}"], False, False


def explorer_input(service: Service, spec: str, text: str, as_ids: bool, model_changed: bool = False):
    """(input store, message, text shown): tokenizes the explorer's input; on a model change, an example that fits."""
    try:
        loaded = service.model(spec)
        if model_changed and not as_ids:
            text = _example_for(loaded, text)
        encoded = service.encode(spec, text, as_ids)
        return {"model": spec, "ids": list(encoded.ids)}, "", text
    except Exception as error:  # noqa: BLE001
        return None, error_message(error), text


def _example_for(loaded, text: str) -> str:
    """The text to show after switching to `loaded`: the user's text if this model can read it, else an example."""
    if loaded.kind == "protein_mlm":
        return text if _is_protein(text) else DEMO_PROTEIN
    if not text or _is_protein(text) or unknown_share(loaded, text) > 0.2:
        return example_text(loaded)
    return text


def unknown_share(loaded, text: str) -> float:
    """Share of the text's tokens that the model's tokenizer maps to its unknown token."""
    unk = loaded.tokenizer.unk_token_id
    token_ids = loaded.tokenizer(text)["input_ids"]
    return sum(token == unk for token in token_ids) / max(1, len(token_ids)) if unk is not None else 0.0


def example_text(loaded) -> str:
    """A first input the model can read: the English demo; for the zoo's synthetic languages, two coreference
    template sentences or a repeated block of the model's own words (so induction heads have something to do)."""
    if loaded.kind == "protein_mlm":
        return DEMO_PROTEIN
    if unknown_share(loaded, DEMO_TEXT) <= 0.2:
        return DEMO_TEXT
    from probe.probesets import coreference_examples

    sentences = " ".join(" ".join(example.words) for example in coreference_examples(2, seed=0))
    if unknown_share(loaded, sentences) <= 0.2:
        return sentences
    special = set(loaded.tokenizer.all_special_tokens)
    words = sorted(word for word in loaded.tokenizer.get_vocab() if word not in special and word.isalnum())
    rng = random.Random(0)
    block, filler = rng.sample(words, min(10, len(words))), rng.sample(words, min(6, len(words)))
    return " ".join(filler[:3] + block + filler[3:] + block)


def _is_protein(text: str | None) -> bool:
    """An upper-case sequence or FASTA text (typed for a protein model)."""
    if not text or not (text.lstrip().startswith(">") or (text == text.upper() and " " not in text.strip())):
        return False
    try:
        parse_fasta(text)
    except ProbeError:
        return False
    return True


def explorer_view(service: Service, store: dict | None, selected: dict | None, overlay: bool, head_type: str):
    """(heatmap, line view, head caption, message): one head's α for the current input, nothing more."""
    if not store:
        empty = figures.empty_figure("type an input and press Run")
        return empty, empty, "", ""
    try:
        spec, token_ids = store["model"], store["ids"]
        layer, head = (selected or {}).get("layer", 0), (selected or {}).get("head", 0)
        alpha = service.head_attention(spec, token_ids, layer, head)  # [query key]
        tokens = service.tokens(spec, token_ids)
        title = f"{head_name(layer, head)} · {spec}"
        caption = f"{head_name(layer, head)} · {len(token_ids)} tokens"
        pattern = None
        if overlay:
            try:
                pattern = service.target_pattern(head_type, token_ids)  # [query key]
                caption += f" · shaded: {head_type} targets"
            except ProbeError as error:
                caption += f" · no overlay: {error}"
        heatmap = figures.attention_heatmap(alpha, tokens, title, pattern)
        return heatmap, figures.line_view(alpha, tokens, title), caption, ""
    except Exception as error:  # noqa: BLE001
        empty = figures.empty_figure("nothing to show")
        return empty, empty, "", error_message(error)


def matrix_download(service: Service, store: dict | None, selected: dict | None, fmt: str) -> dict:
    """dcc.Download data: the full-resolution matrix of the head shown, as CSV (with token labels) or NPY."""
    if not store:
        raise ProbeError("nothing to download yet: run an input first")
    layer, head = selected.get("layer", 0), selected.get("head", 0)
    alpha = service.head_attention(store["model"], store["ids"], layer, head)  # [query key]
    name = f"attention_{head_name(layer, head)}"
    if fmt == "npy":
        buffer = io.BytesIO()
        np.save(buffer, alpha)
        return dcc.send_bytes(buffer.getvalue(), f"{name}.npy")
    labels = figures.token_labels(service.tokens(store["model"], store["ids"]))
    lines = ["query\\key," + ",".join(_csv_cell(label) for label in labels)]
    lines += [_csv_cell(label) + "," + ",".join(f"{value:.6g}" for value in row) for label, row in zip(labels, alpha,
                                                                                                        strict=True)]
    return dcc.send_string("\n".join(lines) + "\n", f"{name}.csv")


def _csv_cell(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def labels_download(service: Service, spec: str) -> dict:
    """dcc.Download data: the labels table of `spec` as CSV."""
    table = service.labels(spec)
    if table is None:
        raise ProbeError("no labels to download: press 'Label heads' first (or start the app with --labels FILE)")
    return dcc.send_string(table.to_csv(index=False), f"labels_{spec.replace(':', '_').replace('/', '_')}.csv")


def decode_upload(contents: str | None, filename: str | None, max_bytes: int) -> bytes | None:
    """The bytes of a dcc.Upload ('data:...;base64,...'), size-checked; None when nothing was uploaded."""
    if not contents:
        return None
    _, _, payload = contents.partition(",")
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise ProbeError(f"{filename or 'the upload'} is larger than the {max_bytes // 1024} KiB limit")
    try:
        return base64.b64decode(payload, validate=False)
    except ValueError:
        raise ProbeError(f"{filename or 'the upload'} could not be decoded; upload the file again") from None


STRUCTURE_EXTENSIONS = (".pdb", ".ent", ".cif", ".mmcif")
SEQUENCE_EXTENSIONS = (".fa", ".fasta", ".faa", ".txt", ".seq")


def protein_run(service: Service, spec: str, sequence: str | None, contents: str | None, filename: str | None,
                chain: str | None):
    """(protein store, message): contacts for the typed sequence, an uploaded FASTA or an uploaded structure."""
    try:
        loaded = service.model(spec)
        if loaded.kind != "protein_mlm":
            return None, f"{spec} is a {loaded.kind}: choose a protein model (ESM) above for contact maps"
        data = decode_upload(contents, filename, service.config.upload_bytes)
        structure = None
        name = (filename or "").lower()
        if data is not None and (name.endswith(SEQUENCE_EXTENSIONS) or data.lstrip()[:1] == b">"):
            sequence, data = data.decode("latin-1"), None
        elif data is not None and not name.endswith(STRUCTURE_EXTENSIONS):
            raise ProbeError(f"{filename}: upload a structure (.pdb, .cif) or a FASTA file (.fasta, .fa)")
        else:
            structure = data
        if structure is None:
            sequence = parse_fasta(sequence or "")
        key, result = service.protein(spec, sequence if structure is None else None, structure, name,
                                      (chain or "").strip() or None)
        store = {"key": key, "model": spec, "length": len(result.sequence), "has_structure": result.true is not None}
        return store, result.note
    except Exception as error:  # noqa: BLE001
        return None, error_message(error)


def protein_view(service: Service, store: dict | None, selected: dict | None, pair: dict | None):
    """(contact figure, head map figure, leaderboard rows, P@L table, message)."""
    if not store:
        empty = figures.empty_figure("choose a protein model, then type a sequence or upload a structure")
        return empty, empty, [], [], ""
    try:
        result = service.protein_result(store["key"])
        layer, head = (selected or {}).get("layer", 0), (selected or {}).get("head", 0)
        chosen = (pair["i"], pair["j"]) if pair else None
        n = len(result.sequence)
        contacts = figures.contact_figure(result.predicted, result.true, chosen,
                                          f"{store['model']} · {n} residues: predicted ↗ · true ↙")
        apc = service.protein_head_map(store["key"], layer, head)  # [residue residue]
        head_map = figures.head_map_figure(apc, chosen, f"{head_name(layer, head)} APC attention")
        rows = [] if result.heads is None else result.heads.to_dict("records")
        precision = [] if result.precision is None else result.precision.to_dict("records")
        return contacts, head_map, rows, precision, ""
    except Exception as error:  # noqa: BLE001
        empty = figures.empty_figure("nothing to show")
        return empty, empty, [], [], error_message(error)


def mark_pair(store: dict | None, points: Sequence[dict | None]):
    """(pair store, contacts patch, head map patch): mark the residue pair under the pointer in both maps."""
    point = next((p["points"][0] for p in points if p and p.get("points")), None)
    pair = figures.pair_from_point(point, store["length"]) if store else None
    if pair is None:
        return no_update, no_update, no_update
    xs, ys = figures._pair_marks(pair)
    contacts, head_map = Patch(), Patch()
    contacts["data"][2]["x"], contacts["data"][2]["y"] = xs, ys
    head_map["data"][1]["x"], head_map["data"][1]["y"] = xs, ys
    return {"i": pair[0], "j": pair[1]}, contacts, head_map


# --- wiring ----------------------------------------------------------------------------------------------------


def register(app, service: Service) -> None:  # noqa: C901 - one short closure per callback
    """Attach every callback to `app`."""

    @app.callback(Output(ids.SELECTED, "data"),
                  Input(ids.ATLAS, "clickData"), Input(ids.LAYER_PREV, "n_clicks"), Input(ids.LAYER_NEXT, "n_clicks"),
                  Input(ids.HEAD_PREV, "n_clicks"), Input(ids.HEAD_NEXT, "n_clicks"),
                  Input(ids.LEADERBOARD, "active_cell"), Input(ids.MODEL, "value"),
                  State(ids.SELECTED, "data"), State(ids.LEADERBOARD, "derived_viewport_data"),
                  prevent_initial_call=True)
    def _select(click, _lp, _ln, _hp, _hn, cell, spec, selected, rows):
        loaded = service.model(spec)
        row = rows[cell["row"]] if cell and rows and cell["row"] < len(rows) else None
        selected = None if ctx.triggered_id == ids.MODEL else selected
        return next_selection(ctx.triggered_id, selected, loaded.n_layers, loaded.n_heads, click, row)

    @app.callback(Output(ids.MODEL_INFO, "children"), Input(ids.MODEL, "value"))
    def _info(spec):
        try:
            return service.describe(spec)
        except Exception as error:  # noqa: BLE001
            return error_message(error)

    @app.callback(Output(ids.ATLAS, "figure"), Output(ids.ATLAS_MESSAGE, "children"),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.COLOUR_BY, "value"),
                  Input(ids.SELECTED, "data"), Input(ids.LABEL_VERSION, "data"))
    def _atlas(spec, head_type, colour_by, selected, _version):
        return atlas_view(service, spec, head_type, colour_by, selected)

    @app.callback(Output(ids.LABEL_PROGRESS, "children"), Output(ids.LABEL_POLL, "disabled"),
                  Output(ids.LABEL_VERSION, "data"),
                  Input(ids.LABEL_BUTTON, "n_clicks"), Input(ids.LABEL_POLL, "n_intervals"),
                  State(ids.MODEL, "value"), State(ids.LABEL_VERSION, "data"), prevent_initial_call=True)
    def _label(_clicks, _ticks, spec, version):
        progress, disabled, finished = label_status(service, spec, start=ctx.triggered_id == ids.LABEL_BUTTON)
        return progress, disabled, (version or 0) + 1 if finished else no_update

    @app.callback(Output(ids.INPUT, "data"), Output(ids.EXPLORER_MESSAGE, "children"), Output(ids.TEXT, "value"),
                  Input(ids.RUN, "n_clicks"), Input(ids.MODEL, "value"),
                  State(ids.TEXT, "value"), State(ids.AS_IDS, "value"))
    def _input(_clicks, spec, text, as_ids):
        return explorer_input(service, spec, text, bool(as_ids), model_changed=ctx.triggered_id == ids.MODEL)

    @app.callback(Output(ids.HEATMAP, "figure"), Output(ids.LINES, "figure"), Output(ids.HEAD_LABEL, "children"),
                  Output(ids.EXPLORER_VIEW_MESSAGE, "children"),
                  Input(ids.INPUT, "data"), Input(ids.SELECTED, "data"), Input(ids.OVERLAY, "value"),
                  Input(ids.HEAD_TYPE, "value"))
    def _explore(store, selected, overlay, head_type):
        return explorer_view(service, store, selected, bool(overlay), head_type)

    @app.callback(Output(ids.MATRIX_DOWNLOAD, "data"), Output(ids.DOWNLOAD_MESSAGE, "children"),
                  Input(ids.MATRIX_CSV_BUTTON, "n_clicks"), Input(ids.MATRIX_NPY_BUTTON, "n_clicks"),
                  State(ids.INPUT, "data"), State(ids.SELECTED, "data"), prevent_initial_call=True)
    def _download_matrix(_csv, _npy, store, selected):
        try:
            fmt = "npy" if ctx.triggered_id == ids.MATRIX_NPY_BUTTON else "csv"
            return matrix_download(service, store, selected or {}, fmt), ""
        except Exception as error:  # noqa: BLE001
            return no_update, error_message(error)

    @app.callback(Output(ids.LABELS_DOWNLOAD, "data"), Output(ids.ATLAS_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.LABELS_DOWNLOAD_BUTTON, "n_clicks"), State(ids.MODEL, "value"),
                  prevent_initial_call=True)
    def _download_labels(_clicks, spec):
        try:
            return labels_download(service, spec), ""
        except Exception as error:  # noqa: BLE001
            return no_update, error_message(error)

    @app.callback([Output(graph, "config") for graph in GRAPHS], Input(ids.IMAGE_FORMAT, "value"))
    def _configs(image_format):
        return [figures.graph_config(image_format, f"probe_{graph}") for graph in GRAPHS]

    @app.callback(Output(ids.PROTEIN, "data"), Output(ids.PROTEIN_MESSAGE, "children"),
                  Input(ids.PROTEIN_RUN, "n_clicks"), Input(ids.UPLOAD, "contents"), Input(ids.MODEL, "value"),
                  State(ids.UPLOAD, "filename"), State(ids.SEQUENCE, "value"), State(ids.CHAIN, "value"))
    def _protein(_clicks, contents, spec, filename, sequence, chain):
        if ctx.triggered_id != ids.UPLOAD:
            contents = filename = None  # Run uses the typed sequence; an upload runs itself
        return protein_run(service, spec, sequence, contents, filename, chain)

    @app.callback(Output(ids.CONTACTS, "figure"), Output(ids.HEAD_MAP, "figure"), Output(ids.LEADERBOARD, "data"),
                  Output(ids.PRECISION, "data"), Output(ids.PROTEIN_VIEW_MESSAGE, "children"),
                  Input(ids.PROTEIN, "data"), Input(ids.SELECTED, "data"), State(ids.PAIR, "data"))
    def _protein_view(store, selected, pair):
        return protein_view(service, store, selected, pair)

    @app.callback(Output(ids.PAIR, "data"), Output(ids.CONTACTS, "figure", allow_duplicate=True),
                  Output(ids.HEAD_MAP, "figure", allow_duplicate=True),
                  Input(ids.CONTACTS, "clickData"), Input(ids.HEAD_MAP, "clickData"),
                  Input(ids.CONTACTS, "hoverData"), Input(ids.HEAD_MAP, "hoverData"), State(ids.PROTEIN, "data"),
                  prevent_initial_call=True)
    def _mark(contacts_click, map_click, contacts_hover, map_hover, store):
        trigger = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
        by_trigger = {f"{ids.CONTACTS}.clickData": contacts_click, f"{ids.HEAD_MAP}.clickData": map_click,
                      f"{ids.CONTACTS}.hoverData": contacts_hover, f"{ids.HEAD_MAP}.hoverData": map_hover}
        return mark_pair(store, [by_trigger.get(trigger)])
