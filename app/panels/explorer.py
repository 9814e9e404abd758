"""The attention explorer: one head's α on the user's input as a heatmap (fixed 0–1 colours, or the head's own
max), the text coloured by attention from/to a clicked token, a line view for short inputs, the head type's
targets outlined with the share of attention that lands on them, and full-resolution downloads."""

from __future__ import annotations

import hashlib
import io
import math
import random

import numpy as np
from dash import Input, Output, State, ctx, dcc, html, no_update

from probe.errors import ProbeError
from probe.heads.probesets import coreference_examples
from probe.models import ModelKind
from probe.naming import display_name

from .. import figures, ids
from ..errors import error_message, guarded
from ..inputs import parse_fasta
from ..panel import Panel, card_panel, graph, radio
from ..payload import display_tokens, layer_payload
from ..service import Service

DEMO_TEXT = ("the cat saw the dog . the cat saw the dog . mary gave the book to john because he wanted it . "
             "one two three four five one two three four five")
# short enough for every view of the first screen: 44 tokens on all-MiniLM-L6-v2 with [CLS] and [SEP], within
# figures.LINE_VIEW_TOKENS (48), so the line view draws it whole (issue 44: it was 66 and the view said so)
DEMO_PARAGRAPH = ("When Mary met John at the station, she gave him the old book she had promised him (a worn "
                  "copy of Moby Dick). He thanked her, and they walked to the café by the river.")
DEMO_PROTEIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"  # ubiquitin
TOKEN_VIEW_MAX = 1024  # the token view shows inputs up to this many tokens


def layout(state: dict):
    """The explorer card; `state` is the page's initial state (input, overlay, colour scale, zoom, pinned
    token)."""
    text = state.get("text")
    return card_panel("Attention explorer", [
        dcc.Textarea(id=ids.TEXT, value=text or "", rows=3,
                     placeholder="a prompt, a protein sequence, or token ids (tick 'token ids')"),
        html.Div([
            html.Button("Run", id=ids.RUN, title="Ctrl+Enter", className="primary"),
            dcc.Checklist(id=ids.AS_IDS, options=[{"label": "token ids", "value": "ids"}],
                          value=["ids"] if state.get("as_ids") else [], inline=True),
            dcc.Checklist(id=ids.OVERLAY, options=[{"label": html.Span(
                "outline the head type's targets",
                title="orange squares: the cells the head type says a head "
                "of this type attends to; the note gives the share of attention on them"), "value": "on"}],
                value=["on"] if state.get("overlay") else [], inline=True),
            dcc.Checklist(id=ids.ALPHA_SCALE, options=[{"label": html.Span(
                "colour max = head's max",
                title="colour scale up to the head's own largest α (causal models: "
                "over queries ≥ 1, since query 0 sees only itself and has α = 1)"), "value": "head"}],
                value=["head"] if state.get("scale") else [], inline=True),
            html.Span(id=ids.LIMITS, className="note"),
        ], className="controls"),
        html.Div(id=ids.EXPLORER_MESSAGE, className="message"),
        html.Div(id=ids.LABEL_WAIT, className="note label-wait"),
        html.Div([html.Strong(id=ids.HEAD_LABEL), html.Span(id=ids.OFFSET_NOTE, className="note")],
                 className="controls"),
        html.Div(id=ids.EXPLORER_VIEW_MESSAGE, className="message"),
        html.Div(id=ids.OVERLAY_NOTE, className="note"),
        graph(ids.HEATMAP, theme=state.get("theme", "light")),
        html.Div(["token view — hover a token (click pins it), colour by attention ",
                  radio(ids.TOKEN_DIRECTION, [{"label": "from it", "value": "from"},
                                              {"label": "to it", "value": "to"}],
                                              state.get("direction", "from"))],
                 className="controls"),
        html.Div(id=ids.TOKENS, className="token-view"),
        dcc.Store(id=ids.TOKEN_FOCUS,
                  data={"index": state["token"]} if state.get("token") is not None else None),
        dcc.Store(id=ids.ZOOM, data=state.get("zoom")),
        dcc.Store(id=ids.HEATMAP_VIEW),
        html.Div([html.Button("Download matrix (CSV)", id=ids.MATRIX_CSV_BUTTON),
                  html.Button("Download matrix (NPY)", id=ids.MATRIX_NPY_BUTTON),
                  html.Span(id=ids.DOWNLOAD_MESSAGE, className="message")], className="controls"),
        dcc.Download(id=ids.MATRIX_DOWNLOAD),
        graph(ids.LINES, theme=state.get("theme", "light")),
    ], className="explorer-panel")


# --- the input ----------------------------------------------------------------------------------------------


def explorer_input(service: Service, spec: str, text: str, as_ids: bool, model_changed: bool = False):
    """(input store, message, text shown): tokenizes the explorer's input; on a model change, an example that
    fits. A ProbeError propagates (the callback shows it and keeps the previous input and figure)."""
    loaded = service.facts.model(spec)
    if model_changed and not as_ids:
        text = example_for(loaded, text)
    encoded = service.captures.encode(spec, text, as_ids)
    return {"model": spec, "ids": list(encoded.ids), "text": text, "as_ids": bool(as_ids)}, "", text


def example_for(loaded, text: str) -> str:
    """The text to show after switching to `loaded`: the user's text if this model can read it, else an
    example."""
    if loaded.kind == ModelKind.PROTEIN_MLM:
        return text if is_protein(text) else DEMO_PROTEIN
    if not text or is_protein(text) or unknown_share(loaded, text[:4000]) > 0.2:
        return example_text(loaded)
    return text


def unknown_share(loaded, text: str) -> float:
    """Share of the text's tokens that the model's tokenizer maps to its unknown token."""
    unk = loaded.tokenizer.unk_token_id
    token_ids = loaded.tokenizer(text)["input_ids"]
    return sum(token == unk for token in token_ids) / max(1, len(token_ids)) if unk is not None else 0.0


def example_text(loaded) -> str:
    """A first input the model can read: an English paragraph for a model that reads English
    (all-MiniLM-L6-v2), the demo sentences for a small word vocabulary; for the zoo's synthetic languages, two
    coreference template sentences or a repeated block of the model's own words (so induction heads have
    something to do)."""
    if loaded.kind == ModelKind.PROTEIN_MLM:
        return DEMO_PROTEIN
    if unknown_share(loaded, DEMO_PARAGRAPH) <= 0.05:
        return DEMO_PARAGRAPH
    if unknown_share(loaded, DEMO_TEXT) <= 0.2:
        return DEMO_TEXT

    sentences = " ".join(" ".join(example.words) for example in coreference_examples(2, seed=0))
    if unknown_share(loaded, sentences) <= 0.2:
        return sentences
    special = set(loaded.tokenizer.all_special_tokens)
    words = sorted(word for word in loaded.tokenizer.get_vocab() if word not in special and word.isalnum())
    rng = random.Random(0)
    block, filler = rng.sample(words, min(10, len(words))), rng.sample(words, min(6, len(words)))
    return " ".join(filler[:3] + block + filler[3:] + block)


def is_protein(text: str | None) -> bool:
    """An upper-case sequence or FASTA text (typed for a protein model)."""
    if not text or len(text) > 100_000:
        return False
    if not (text.lstrip().startswith(">") or (text == text.upper() and " " not in text.strip())):
        return False
    try:
        parse_fasta(text)
    except ProbeError:
        return False
    return True


def checked_input(service: Service, store) -> tuple[str, tuple[int, ...]]:
    """(model, token ids) of an input store from the browser, checked."""
    if not isinstance(store, dict) or not isinstance(store.get("model"), str):
        raise ProbeError("the input is not a model and token ids; press Run again")
    return store["model"], service.captures.check_ids(store["model"], store.get("ids"))


# --- the view -----------------------------------------------------------------------------------------------


def target_share(alpha: np.ndarray, pattern: np.ndarray, causal: bool) -> tuple[float, float, int]:
    """(share, chance, rows): of the attention of the rows that have a target, the mean share on the targets,
    and what a uniform head would get (|T(i)| / (i + 1) causal, |T(i)| / n bidirectional); rows = how many
    rows."""
    rows = pattern.any(axis=1)  # [query]
    if not rows.any():
        return float("nan"), float("nan"), 0
    mass = (alpha * pattern).sum(axis=1)[rows]  # [row] α on the targets
    counts = pattern.sum(axis=1)[rows]
    visible = ((np.arange(pattern.shape[0]) + 1)[rows] if causal
               else np.full(int(rows.sum()), pattern.shape[1]))
    return float(mass.mean()), float((counts / visible).mean()), int(rows.sum())


def zoom_window(relayout, window, n: int, max_bins: int = figures.HEATMAP_BINS) -> dict | None:
    """The token window after a zoom on the heatmap (relayoutData in the current figure's cell units); None:
    the whole input. The figure shows `window` (or everything) in cells of `factor` tokens, so cell c covers
    tokens start + c·factor … start + (c + 1)·factor − 1."""
    current = checked_window(window, n) or (0, n, 0, n)
    if not isinstance(relayout, dict):
        return window
    check_relayout(relayout)
    if relayout.get("xaxis.autorange") or relayout.get("yaxis.autorange"):
        return None
    q0, q1, k0, k1 = current
    factor = max(1, -(-max(q1 - q0, k1 - k0) // max_bins))

    def cells(axis: str, start: int, stop: int) -> tuple[int, int]:
        low, high = relayout.get(f"{axis}.range[0]"), relayout.get(f"{axis}.range[1]")
        if isinstance(relayout.get(f"{axis}.range"), list) and len(relayout[f"{axis}.range"]) == 2:
            low, high = relayout[f"{axis}.range"]
        if not (isinstance(low, (int, float)) and isinstance(high, (int, float))):
            return start, stop
        low, high = sorted((float(low), float(high)))
        count = -(-(stop - start) // factor)
        first, last = max(0, int(np.floor(low + 0.5))), min(count - 1, int(np.ceil(high - 0.5)))
        if last < first:
            return start, stop
        return start + first * factor, min(stop, start + (last + 1) * factor)

    q0, q1 = cells("yaxis", q0, q1)
    k0, k1 = cells("xaxis", k0, k1)
    if (q0, q1, k0, k1) == (0, n, 0, n):
        return None
    return {"q0": q0, "q1": q1, "k0": k0, "k1": k1}


RELAYOUT_KEYS = ("xaxis.range[0]", "xaxis.range[1]", "yaxis.range[0]", "yaxis.range[1]", "xaxis.range",
                 "yaxis.range", "xaxis.autorange", "yaxis.autorange")


def check_relayout(relayout: dict) -> None:
    """A zoom payload's ranges must be finite numbers (NaN, ±Infinity or a string is a one-line
    ProbeError)."""
    for key in RELAYOUT_KEYS:
        if key not in relayout:
            continue
        value = relayout[key]
        values = value if isinstance(value, list) else [value]
        if key.endswith("autorange"):
            if not isinstance(value, (bool, str)):
                raise ProbeError(f"the zoom's {key} is {value!r}, not true/false; double-click the heatmap "
                                 "to reset")
            continue
        if (key.endswith("range") and len(values) != 2) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise ProbeError(f"the zoom's {key} is {value!r}, not a finite number; zoom again (double-click "
                             "resets)")


def checked_window(window, n: int) -> tuple[int, int, int, int] | None:
    """A zoom store -> (q0, q1, k0, k1) inside an input of n tokens, else None (the whole input)."""
    if not isinstance(window, dict):
        return None
    try:
        q0, q1, k0, k1 = (int(window[key]) for key in ("q0", "q1", "k0", "k1"))
    except (KeyError, TypeError, ValueError):
        return None
    if 0 <= q0 < q1 <= n and 0 <= k0 < k1 <= n:
        return q0, q1, k0, k1
    return None


def layer_view(service: Service, store: dict | None, layer_store) -> tuple[dict | None, str]:
    """(layer payload, message): one layer's α of every head for the current input, sent to the browser once
    (assets/explorer.js draws the heatmap, token view and head steps from it). A failed capture is a payload
    with an `error`, so the browser clears the previous model's figures and says why."""
    if not store:
        return None, ""
    spec, token_ids = checked_input(service, store)
    layer = layer_store.get("layer") if isinstance(layer_store, dict) else 0
    layer, _ = service.facts.head_of(spec, {"layer": layer, "head": 0})
    try:
        alpha = service.captures.layer_attention(spec, token_ids, layer)  # [head query key]
    except Exception as error:  # noqa: BLE001 - shown in the page, the figures cleared

        message = error_message(error)
        return {"error": f"{display_name(spec)}: {message}", "model": spec}, message
    loaded = service.facts.model(spec)
    queries, keys, axes = stack_tokens(service, spec, token_ids, layer)
    key = hashlib.sha1(f"{spec}|{token_ids}".encode()).hexdigest()[:12]
    causal = loaded.kind == ModelKind.CAUSAL_LM or service.facts.stack_of(spec, layer) == "dec"
    return layer_payload(spec, token_ids, keys, layer, alpha, causal, key,
                         name=service.facts.layer_label(spec, layer),
                         query_tokens=None if queries == keys else queries, axes=axes), ""


STACK_AXES = {"enc": ("encoder query", "encoder key"), "dec": ("decoder query", "decoder key"),
              "cross": ("decoder query", "encoder key")}  # cross-attention: [decoder query × encoder key]


def stack_tokens(service: Service, spec: str, token_ids, layer: int):
    """(query tokens, key tokens, axis titles or None) of one layer, as displayed: an encoder–decoder's
    decoder reads its own tokens (the input shifted right after the start token: teacher forcing), so its
    queries — and its self-attention's keys — show those; cross-attention's keys are the encoder's (the
    input's) tokens."""
    tokenizer = service.facts.model(spec).tokenizer
    tokens = display_tokens(tokenizer, service.captures.tokens(spec, token_ids))
    stack = service.facts.stack_of(spec, layer)
    if not stack:
        return tokens, tokens, None
    decoder = tokens if stack == "enc" else display_tokens(
        tokenizer, service.captures.tokens(spec, service.captures.decoder_ids(spec, token_ids)))
    return decoder, (tokens if stack == "cross" else decoder), STACK_AXES[stack]


def pattern_view(service: Service, store: dict | None, layer_store, head_type: str,
                 overlay: bool) -> dict | None:
    """The head type's target cells of the current input for each head of the layer ({"heads": [[queries,
    keys],
    ...]}: one entry when every head has the same targets), or a note why there is no outline."""
    if not overlay or not store:
        return None
    spec, token_ids = checked_input(service, store)
    layer = layer_store.get("layer") if isinstance(layer_store, dict) else 0
    layer, _ = service.facts.head_of(spec, {"layer": layer, "head": 0})
    heads = []
    try:
        for head in range(service.facts.model(spec).n_heads):
            # [query key] bool
            pattern = service.captures.target_pattern(spec, head_type, token_ids, layer, head)
            queries, keys = np.nonzero(pattern)
            heads.append([queries.tolist(), keys.tolist()])
    except ProbeError:
        return {"heads": None, "note": f"no outline: {head_type} targets need marked spans (a pronoun and "
                                       "its antecedent, as in a --probe-file); typed text has none"}
    if all(entry == heads[0] for entry in heads):
        heads = heads[:1]
    return {"heads": heads, "note": ""}


def line_figure(service: Service, store: dict | None, selected, theme: str = "light"):
    """The line view of the selected head (short inputs); its title names the head."""
    if not store:
        return figures.empty_figure("type an input and press Run", theme)
    spec, token_ids = checked_input(service, store)
    layer, head = service.facts.head_of(spec, selected)
    alpha = service.captures.head_attention(spec, token_ids, layer, head)  # [query key]
    queries, keys, _ = stack_tokens(service, spec, token_ids, layer)
    title = f"{service.facts.head_label(spec, layer, head)} · {display_name(spec)}"
    return figures.line_view(alpha, [t.strip() or t for t in keys], title, theme=theme,
                             query_tokens=[t.strip() or t for t in queries])


def matrix_download(service: Service, store: dict | None, selected, fmt: str) -> dict:
    """dcc.Download data: the full-resolution matrix of the head shown, as CSV (with token labels) or NPY."""
    if not store:
        raise ProbeError("nothing to download yet: run an input first")
    spec, token_ids = checked_input(service, store)
    layer, head = service.facts.head_of(spec, selected)
    alpha = service.captures.head_attention(spec, token_ids, layer, head)  # [query key]
    name = f"attention_{service.facts.head_label(spec, layer, head)}"
    if fmt == "npy":
        buffer = io.BytesIO()
        np.save(buffer, alpha)
        return dcc.send_bytes(buffer.getvalue(), f"{name}.npy")
    # keys: the input's (encoder's) tokens
    labels = figures.token_labels(service.captures.tokens(spec, token_ids))
    rows = labels  # queries: an encoder–decoder's decoder reads its own tokens (dec and cross layers)
    if service.facts.stack_of(spec, layer) in ("dec", "cross"):
        decoder = service.captures.decoder_ids(spec, token_ids)
        rows = figures.token_labels(service.captures.tokens(spec, decoder))
        labels = rows if service.facts.stack_of(spec, layer) == "dec" else labels
    lines = ["query\\key," + ",".join(_csv_cell(label) for label in labels)]
    lines += [_csv_cell(label) + "," + ",".join(f"{value:.6g}" for value in row)
              for label, row in zip(rows, alpha, strict=True)]
    return dcc.send_string("\n".join(lines) + "\n", f"{name}.csv")


def _csv_cell(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def register(app, service: Service) -> None:
    @app.callback(Output(ids.INPUT, "data"), Output(ids.EXPLORER_MESSAGE, "children"),
                  Output(ids.TEXT, "value"), Output(ids.ZOOM, "data", allow_duplicate=True),
                  Input(ids.RUN, "n_clicks"), Input(ids.MODEL, "value"),
                  State(ids.TEXT, "value"), State(ids.AS_IDS, "value"),
                  prevent_initial_call="initial_duplicate")
    def _input(_clicks, spec, text, as_ids):
        model_changed = ctx.triggered_id == ids.MODEL
        # a new input starts unzoomed; the page's first input keeps the zoom its link named
        zoom = no_update if ctx.triggered_id is None else None
        try:
            return (*explorer_input(service, spec, text, bool(as_ids), model_changed=model_changed), zoom)
        except Exception as error:  # noqa: BLE001 - a message; after a model change the old input is dropped

            return (None if model_changed else no_update), error_message(error), no_update, no_update

    app.clientside_callback("function (s, c) { return window.dash_clientside.probe.layerOf(s, c); }",
                            Output(ids.LAYER, "data"), Input(ids.SELECTED, "data"), State(ids.LAYER, "data"))

    @app.callback(Output(ids.LAYER_DATA, "data"), Output(ids.EXPLORER_VIEW_MESSAGE, "children"),
                  Input(ids.INPUT, "data"), Input(ids.LAYER, "data"))
    @guarded(outputs=2, message=1)
    def _layer(store, layer):
        return layer_view(service, store, layer)

    @app.callback(Output(ids.PATTERN, "data"),
                  Output(ids.EXPLORER_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.INPUT, "data"), Input(ids.LAYER, "data"), Input(ids.HEAD_TYPE, "value"),
                  Input(ids.OVERLAY, "value"), Input(ids.LABEL_VERSION, "data"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _pattern(store, layer, head_type, overlay, _version):
        return pattern_view(service, store, layer, head_type, bool(overlay)), no_update

    # the heatmap in the page's theme (the same plotly templates as the server's figures)
    app.clientside_callback(
        "function (d, s, sc, z, p, dark, t, templates) {"
        " return window.dash_clientside.probe.heatmap(d, s, sc, z, p, t, dark, templates); }",
        Output(ids.HEATMAP, "figure"), Output(ids.HEAD_LABEL, "children"),
        Output(ids.OVERLAY_NOTE, "children"), Output(ids.OFFSET_NOTE, "children"),
        Input(ids.LAYER_DATA, "data"), Input(ids.SELECTED, "data"), Input(ids.ALPHA_SCALE, "value"),
        Input(ids.ZOOM, "data"), Input(ids.PATTERN, "data"), Input(ids.THEME, "checked"),
        State(ids.HEAD_TYPE, "value"), State(ids.TEMPLATES, "data"))

    app.clientside_callback("function (d, f) { return window.dash_clientside.probe.tokenState(d, f); }",
                            Output(ids.TOKENS_SINK, "data"), Input(ids.TOKEN_DIRECTION, "value"),
                            Input(ids.TOKEN_FOCUS, "data"))

    @app.callback(Output(ids.LINES, "figure"),
                  Output(ids.EXPLORER_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.INPUT, "data"), Input(ids.SELECTED, "data"), Input(ids.THEME, "checked"),
                  prevent_initial_call="initial_duplicate")
    @guarded(outputs=2, message=1)
    def _lines(store, selected, dark):
        return line_figure(service, store, selected, figures.theme_of(dark)), no_update

    # the zoom's axis keys of each relayout event, kept when plotly's {"autosize": true} follows (explorer.js)
    app.clientside_callback(
        "function (r) { return window.dash_clientside.probe.viewOf(r); }",
        Output(ids.HEATMAP_VIEW, "data"), Input(ids.HEATMAP, "relayoutData"), prevent_initial_call=True)

    @app.callback(Output(ids.ZOOM, "data"),
                  Output(ids.EXPLORER_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.HEATMAP_VIEW, "data"), State(ids.INPUT, "data"), State(ids.ZOOM, "data"),
                  prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _zoom(relayout, store, window):
        if not isinstance(store, dict) or not isinstance(store.get("ids"), list):
            return no_update, no_update
        new = zoom_window(relayout, window, len(store["ids"]))
        return (no_update if new == window else new), ""

    @app.callback(Output(ids.MATRIX_DOWNLOAD, "data"), Output(ids.DOWNLOAD_MESSAGE, "children"),
                  Input(ids.MATRIX_CSV_BUTTON, "n_clicks"), Input(ids.MATRIX_NPY_BUTTON, "n_clicks"),
                  State(ids.INPUT, "data"), State(ids.SELECTED, "data"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _download_matrix(_csv, _npy, store, selected):
        fmt = "npy" if ctx.triggered_id == ids.MATRIX_NPY_BUTTON else "csv"
        return matrix_download(service, store, selected, fmt), ""


PANEL = Panel("explorer", register=register, where="right", layout=lambda service, state: layout(state))
