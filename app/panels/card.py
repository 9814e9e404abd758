"""The architecture card panel: the selected model's attention variant, heads, positions and KV-cache size at
the model's own maximum length (and at 128K only as "if extended"), each row with what it means."""

from __future__ import annotations

from dash import Input, Output, html

from probe.card import BYTES_PER_VALUE, CONTEXTS, architecture_card, format_bytes

from .. import ids
from ..errors import guarded
from ..panel import Panel, card_panel
from ..service import Service

EXPLAIN = {
    "model type": "the config's model_type (the transformers architecture)",
    "attention": "MHA: one key/value head per query head · GQA: query heads share key/value heads · MQA: one "
                 "shared key/value head · MLA: keys and values up-projected from a small cached latent",
    "layers": "transformer blocks, each with one attention layer",
    "hidden size": "width of the residual stream",
    "heads": "query heads per layer, and the key/value heads the cache holds",
    "head dim": "dimension of each head's queries/keys (and values)",
    "positions": "how positions enter attention, and the longest input the model was built for",
    "sliding window": "layers that attend only to the last W tokens (their cache stops growing at W)",
    "parameters in attention": "weights and biases of the Q, K, V and output projections of all layers",
    "KV cache values per token": "numbers cached per token over all layers (keys + values; MLA: latent + "
                                 "rope key)",
}


def layout() -> html.Div:
    return card_panel("Architecture card", [html.Div(id=ids.CARD_MESSAGE, className="message"),
                                            html.Div(id=ids.CARD)], className="card-panel")


def card_rows(config) -> list[tuple[str, str, str]]:
    """(field, value, explanation) rows: the card's rows with the KV cache at the model's own maximum
    length."""
    card = architecture_card(config)
    rows = [(name, value, EXPLAIN.get(name, "")) for name,
            value in card.rows() if not name.startswith("KV cache ")]
    length = card.max_positions
    for dtype in BYTES_PER_VALUE:
        per_token = format_bytes(card.kv_cache_bytes(dtype, 1))
        if length:
            value = (f"{per_token} per token · {format_bytes(card.kv_cache_bytes(dtype, length))} at its "
                     f"{length:,} positions")
            longest = max(CONTEXTS.values())
            if longest > length:
                value += f" (at 128K if extended: {format_bytes(card.kv_cache_bytes(dtype, longest))})"
        else:
            value = f"{per_token} per token · " + " · ".join(
                f"{name}: {format_bytes(card.kv_cache_bytes(dtype, tokens))}" for name,
                tokens in CONTEXTS.items())
        rows.append((f"KV cache {dtype}", value, "bytes of keys and values cached for one sequence in "
                                                 f"{dtype}"))
    return rows


def card_table(service: Service, spec: str) -> html.Table:
    """The card of `spec` (from its config; card-only models too) as a table; each field's meaning on hover
    and in the third column."""
    rows = card_rows(service.registry.config(spec))
    return html.Table(className="card", children=[html.Tbody([
        html.Tr([html.Th(name, title=why), html.Td(value), html.Td(why, className="explain")])
        for name, value, why in rows])])


def register(app, service: Service) -> None:
    @app.callback(Output(ids.CARD, "children"), Output(ids.CARD_MESSAGE, "children"),
                  Input(ids.MODEL, "value"))
    @guarded(outputs=2, message=1)
    def _card(spec):
        return card_table(service, spec), ""


PANEL = Panel("card", register=register, where="bottom", layout=lambda service, state: layout())
