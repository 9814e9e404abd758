"""The attention explorer: one head's α on the user's input as a heatmap (fixed 0–1 colours, or the head's own max),
the text coloured by attention from/to a clicked token, a line view for short inputs, the head type's targets
outlined with the share of attention that lands on them, and full-resolution downloads."""

from __future__ import annotations

import hashlib
import io
import random

import numpy as np
from dash import Input, Output, State, ctx, dcc, html, no_update

from probe.errors import ProbeError
from probe.models import ModelKind
from probe.naming import head_name

from .. import figures, ids
from ..errors import guarded
from ..inputs import parse_fasta
from ..service import Service
from . import graph, radio

DEMO_TEXT = ("the cat saw the dog . the cat saw the dog . mary gave the book to john because he wanted it . "
             "one two three four five one two three four five")
DEMO_PROTEIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"  # ubiquitin
TOKEN_VIEW_MAX = 1024  # the token view shows inputs up to this many tokens


def layout(text: str, as_ids: bool) -> html.Div:
    return html.Div(className="panel explorer-panel", children=[
        html.H2("Attention explorer"),
        dcc.Textarea(id=ids.TEXT, value=text, rows=3,
                     placeholder="a prompt, a protein sequence, or token ids (tick 'token ids')"),
        html.Div([
            html.Button("Run", id=ids.RUN, title="Ctrl+Enter"),
            dcc.Checklist(id=ids.AS_IDS, options=[{"label": "token ids", "value": "ids"}],
                          value=["ids"] if as_ids else [], inline=True),
            dcc.Checklist(id=ids.OVERLAY, options=[{"label": "outline the head type's targets", "value": "on"}],
                          value=[], inline=True),
            dcc.Checklist(id=ids.ALPHA_SCALE, options=[{"label": "colour max = head's max", "value": "head"}],
                          value=[], inline=True),
            html.Span(id=ids.LIMITS, className="note"),
        ], className="controls"),
        html.Div(id=ids.EXPLORER_MESSAGE, className="message"),
        html.Div([
            html.Button("◀ layer", id=ids.LAYER_PREV, className="step", **{"data-step": "layer:-1"}),
            html.Button("layer ▶", id=ids.LAYER_NEXT, className="step", **{"data-step": "layer:1"}),
            html.Button("◀ head", id=ids.HEAD_PREV, className="step", **{"data-step": "head:-1"}),
            html.Button("head ▶", id=ids.HEAD_NEXT, className="step", **{"data-step": "head:1"}),
            html.Strong(id=ids.HEAD_LABEL), html.Span("keys: ←/→ head, ↑/↓ layer, Ctrl+Enter run", className="note"),
        ], className="controls"),
        html.Div(id=ids.EXPLORER_VIEW_MESSAGE, className="message"),
        html.Div(id=ids.OVERLAY_NOTE, className="note"),
        graph(ids.HEATMAP),
        html.Div(["token view — hover a token (click pins it), colour by attention ",
                  radio(ids.TOKEN_DIRECTION, [{"label": "from it", "value": "from"},
                                              {"label": "to it", "value": "to"}], "from")], className="controls"),
        html.Div(id=ids.TOKENS, className="token-view"),
        dcc.Store(id=ids.TOKEN_FOCUS), dcc.Store(id=ids.ZOOM),
        html.Div([html.Button("Download matrix (CSV)", id=ids.MATRIX_CSV_BUTTON),
                  html.Button("Download matrix (NPY)", id=ids.MATRIX_NPY_BUTTON),
                  html.Span(id=ids.DOWNLOAD_MESSAGE, className="message")], className="controls"),
        dcc.Download(id=ids.MATRIX_DOWNLOAD),
        graph(ids.LINES),
    ])


# --- the input -------------------------------------------------------------------------------------------------


def explorer_input(service: Service, spec: str, text: str, as_ids: bool, model_changed: bool = False):
    """(input store, message, text shown): tokenizes the explorer's input; on a model change, an example that fits.
    A ProbeError propagates (the callback shows it and keeps the previous input and figure)."""
    loaded = service.model(spec)
    if model_changed and not as_ids:
        text = example_for(loaded, text)
    encoded = service.encode(spec, text, as_ids)
    return {"model": spec, "ids": list(encoded.ids), "text": text, "as_ids": bool(as_ids)}, "", text


def example_for(loaded, text: str) -> str:
    """The text to show after switching to `loaded`: the user's text if this model can read it, else an example."""
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
    """A first input the model can read: the English demo; for the zoo's synthetic languages, two coreference
    template sentences or a repeated block of the model's own words (so induction heads have something to do)."""
    if loaded.kind == ModelKind.PROTEIN_MLM:
        return DEMO_PROTEIN
    if unknown_share(loaded, DEMO_TEXT) <= 0.2:
        return DEMO_TEXT
    from probe.heads.probesets import coreference_examples

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
    return store["model"], service.check_ids(store["model"], store.get("ids"))


# --- the view ---------------------------------------------------------------------------------------------------


def target_share(alpha: np.ndarray, pattern: np.ndarray, causal: bool) -> tuple[float, float, int]:
    """(share, chance, rows): of the attention of the rows that have a target, the mean share on the targets, and
    what a uniform head would get (|T(i)| / (i + 1) causal, |T(i)| / n bidirectional); rows = how many rows."""
    rows = pattern.any(axis=1)  # [query]
    if not rows.any():
        return float("nan"), float("nan"), 0
    mass = (alpha * pattern).sum(axis=1)[rows]  # [row] α on the targets
    counts = pattern.sum(axis=1)[rows]
    visible = (np.arange(pattern.shape[0]) + 1)[rows] if causal else np.full(int(rows.sum()), pattern.shape[1])
    return float(mass.mean()), float((counts / visible).mean()), int(rows.sum())


def zoom_window(relayout, window, n: int, max_bins: int = figures.HEATMAP_BINS) -> dict | None:
    """The token window after a zoom on the heatmap (relayoutData in the current figure's cell units); None: the
    whole input. The figure shows `window` (or everything) in cells of `factor` tokens, so cell c covers tokens
    start + c·factor … start + (c + 1)·factor − 1."""
    current = checked_window(window, n) or (0, n, 0, n)
    if not isinstance(relayout, dict):
        return window
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


def explorer_view(service: Service, store: dict | None, selected, overlay: bool, head_type: str,
                  per_head_max: bool = False, zoom: dict | None = None):
    """(heatmap, line view, head caption, message, overlay note): one head's α for the current input; with a zoom
    window, that window at full resolution (pooled only if it is still larger than the heatmap's bins)."""
    if not store:
        empty = figures.empty_figure("type an input and press Run")
        return empty, empty, "", "", ""
    spec, token_ids = checked_input(service, store)
    layer, head = service.head_of(spec, selected)
    alpha = service.head_attention(spec, token_ids, layer, head)  # [query key]
    tokens = service.tokens(spec, token_ids)
    name = head_name(layer, head)
    title = f"{name} · {spec}"
    caption = f"{name} · {len(token_ids)} tokens"
    pattern, note = None, ""
    if overlay:
        try:
            pattern = service.target_pattern(spec, head_type, token_ids, layer, head)  # [query key]
        except ProbeError:
            note = (f"no outline: {head_type} targets need marked spans (a pronoun and its antecedent, as in a "
                    "--probe-file); typed text has none")
        if pattern is not None:
            share, chance, rows = target_share(alpha, pattern, service.model(spec).kind == ModelKind.CAUSAL_LM)
            note = (f"outlined: {head_type} targets · {share:.0%} of the attention of the {rows} rows with a target "
                    f"lands on them (a uniform head: {chance:.0%})" if rows else
                    f"this input has no {head_type} targets")
    window = checked_window(zoom, len(token_ids))
    revision = hashlib.sha1(f"{spec}|{token_ids}|{window}".encode()).hexdigest()[:12]  # same across head steps
    shown, shown_pattern = alpha, pattern
    if window is not None:
        q0, q1, k0, k1 = window
        shown = alpha[q0:q1, k0:k1]  # [query key] the zoomed window, full resolution
        shown_pattern = None if pattern is None else pattern[q0:q1, k0:k1]
    heatmap = figures.attention_heatmap(shown, tokens, title, shown_pattern, per_head_max=per_head_max,
                                        uirevision=revision, pattern_name=f"{head_type} targets", window=window)
    return heatmap, figures.line_view(alpha, tokens, title), caption, "", note


def token_view(service: Service, store, selected, focus, direction: str):
    """The input's tokens as spans, coloured by the selected head's α from (row) or to (column) the focused token."""
    if not store:
        return ""
    spec, token_ids = checked_input(service, store)
    tokens = service.tokens(spec, token_ids)
    if len(tokens) > TOKEN_VIEW_MAX:
        return html.Span(f"the token view shows up to {TOKEN_VIEW_MAX} tokens", className="note")
    index = focus.get("index") if isinstance(focus, dict) else None
    weights = np.zeros(len(tokens))
    if isinstance(index, int) and 0 <= index < len(tokens):
        layer, head = service.head_of(spec, selected)
        alpha = service.head_attention(spec, token_ids, layer, head)  # [query key]
        weights = alpha[index] if direction != "to" else alpha[:, index]
    else:
        index = None
    spans = []
    for position, (token, weight) in enumerate(zip(tokens, weights, strict=True)):
        style = {"backgroundColor": f"rgba(8, 81, 156, {float(weight):.3f})",
                 "color": "white" if weight > 0.5 else "inherit"}
        css = "token focus" if position == index else "token"
        spans.append(html.Span(token, className=css, style=style, title=f"{position} · α {float(weight):.3f}",
                               **{"data-index": str(position)}))
    return spans


def matrix_download(service: Service, store: dict | None, selected, fmt: str) -> dict:
    """dcc.Download data: the full-resolution matrix of the head shown, as CSV (with token labels) or NPY."""
    if not store:
        raise ProbeError("nothing to download yet: run an input first")
    spec, token_ids = checked_input(service, store)
    layer, head = service.head_of(spec, selected)
    alpha = service.head_attention(spec, token_ids, layer, head)  # [query key]
    name = f"attention_{head_name(layer, head)}"
    if fmt == "npy":
        buffer = io.BytesIO()
        np.save(buffer, alpha)
        return dcc.send_bytes(buffer.getvalue(), f"{name}.npy")
    labels = figures.token_labels(service.tokens(spec, token_ids))
    lines = ["query\\key," + ",".join(_csv_cell(label) for label in labels)]
    lines += [_csv_cell(label) + "," + ",".join(f"{value:.6g}" for value in row)
              for label, row in zip(labels, alpha, strict=True)]
    return dcc.send_string("\n".join(lines) + "\n", f"{name}.csv")


def _csv_cell(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def register(app, service: Service) -> None:
    @app.callback(Output(ids.INPUT, "data"), Output(ids.EXPLORER_MESSAGE, "children"), Output(ids.TEXT, "value"),
                  Input(ids.RUN, "n_clicks"), Input(ids.MODEL, "value"),
                  State(ids.TEXT, "value"), State(ids.AS_IDS, "value"))
    @guarded(outputs=3, message=1)
    def _input(_clicks, spec, text, as_ids):
        return explorer_input(service, spec, text, bool(as_ids), model_changed=ctx.triggered_id == ids.MODEL)

    @app.callback(Output(ids.HEATMAP, "figure"), Output(ids.LINES, "figure"), Output(ids.HEAD_LABEL, "children"),
                  Output(ids.EXPLORER_VIEW_MESSAGE, "children"), Output(ids.OVERLAY_NOTE, "children"),
                  Input(ids.INPUT, "data"), Input(ids.SELECTED, "data"), Input(ids.OVERLAY, "value"),
                  Input(ids.HEAD_TYPE, "value"), Input(ids.ALPHA_SCALE, "value"), Input(ids.LABEL_VERSION, "data"),
                  Input(ids.ZOOM, "data"))
    @guarded(outputs=5, message=3)
    def _explore(store, selected, overlay, head_type, scale, _version, zoom):
        return explorer_view(service, store, selected, bool(overlay), head_type, bool(scale), zoom)

    @app.callback(Output(ids.ZOOM, "data"), Input(ids.HEATMAP, "relayoutData"), Input(ids.INPUT, "data"),
                  State(ids.ZOOM, "data"), prevent_initial_call=True)
    def _zoom(relayout, store, window):
        if ctx.triggered_id == ids.INPUT or not isinstance(store, dict) or not isinstance(store.get("ids"), list):
            return None  # a new input starts unzoomed
        new = zoom_window(relayout, window, len(store["ids"]))
        return no_update if new == window else new

    @app.callback(Output(ids.TOKENS, "children"), Output(ids.EXPLORER_VIEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.TOKEN_FOCUS, "data"), Input(ids.TOKEN_DIRECTION, "value"), Input(ids.INPUT, "data"),
                  Input(ids.SELECTED, "data"), Input(ids.LABEL_VERSION, "data"), prevent_initial_call="initial_duplicate")
    @guarded(outputs=2, message=1)
    def _tokens(focus, direction, store, selected, _version):
        from dash import no_update

        return token_view(service, store, selected, focus, direction), no_update

    @app.callback(Output(ids.MATRIX_DOWNLOAD, "data"), Output(ids.DOWNLOAD_MESSAGE, "children"),
                  Input(ids.MATRIX_CSV_BUTTON, "n_clicks"), Input(ids.MATRIX_NPY_BUTTON, "n_clicks"),
                  State(ids.INPUT, "data"), State(ids.SELECTED, "data"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _download_matrix(_csv, _npy, store, selected):
        fmt = "npy" if ctx.triggered_id == ids.MATRIX_NPY_BUTTON else "csv"
        return matrix_download(service, store, selected, fmt), ""
