"""The explorer's contribution to the next token: for the head selected in the explorer (or the atlas), its
direct logit attribution to the model's own top predicted next token at the pinned token of the token view
(or the last position) of the current input, and the tokens whose logits it pushes up most — from
:func:`probe.circuits.attribution.next_token_heads` (one forward through the intervention layer per input
and position, cached; every head of the model comes from that one forward).

Only for causal LMs whose checkpoint holds their LM head (:func:`probe.heads.label.ablation.lm_head_trained`):
a freshly initialised unembedding would attribute noise, so other models get one line saying why, not 0."""

from __future__ import annotations

from dash import Input, Output, html

from probe.errors import ProbeError
from probe.heads.label.ablation import lm_head_trained
from probe.models import ModelKind
from probe.naming import display_name

from .. import ids
from ..errors import guarded
from ..panel import Panel, card_panel, head_or_default
from ..service import Service
from .explorer import checked_input

CONTRIBUTION = "next-token-contribution"  # Div: the selected head's contribution to the next token
CARD = "next-token-contribution-card"  # around the card: hidden for protein models (masked LMs)
TOP = 5  # tokens listed per head


def _style(service, spec) -> dict:
    """Hidden for a protein model: its maps sit below, and a card of one reason would only move them."""
    try:
        return {"display": "none"} if spec and service.facts.is_protein(spec) else {}
    except ProbeError:
        return {}


def layout(service, state) -> object:
    """The card under the explorer: one paragraph, filled by the callback."""
    return html.Div(card_panel("Contribution to the next token", [
        html.Div(id=CONTRIBUTION, className="note", children="run an input and click a head")]),
        id=CARD, style=_style(service, state.get("model")))


def _token(tokenizer, token: int) -> str:
    return repr(tokenizer.decode([token])) if tokenizer is not None else str(token)


def contribution_view(service: Service, store, selected, focus) -> list | str:
    """The selected head's direct contribution to the predicted next token at the pinned token (or the last
    position), and the tokens it pushes up; a one-line reason where it cannot be computed."""
    if not store:
        return "run an input and click a head: its direct contribution to the next token shows here"
    spec, token_ids = checked_input(service, store)
    loaded = service.facts.model(spec)
    name = display_name(spec)
    if loaded.kind != ModelKind.CAUSAL_LM:
        return (f"no contribution to the next token: {name} is not a causal LM (its output at a position is "
                "not a prediction of the next token)")
    if not lm_head_trained(loaded):
        return (f"no contribution to the next token: {name} has no trained LM head in its checkpoint (the "
                "unembedding was freshly initialised at load: its logits mean nothing)")
    layer, head = service.facts.head_of(spec, head_or_default(selected))
    index = focus.get("index") if isinstance(focus, dict) else None
    position = index if isinstance(index, int) and 0 <= index < len(token_ids) else len(token_ids) - 1

    def compute():
        from probe.circuits.attribution import next_token_heads

        return next_token_heads(loaded, list(token_ids), position=position, top=TOP)

    try:
        table = service.cached("contribution", (spec, tuple(token_ids), position), compute)
    except ProbeError as error:
        return f"no contribution to the next token: {error}"
    row = table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]
    rank = int((table["dla"] > row["dla"]).sum()) + 1
    tokenizer = loaded.tokenizer
    predicted = table.attrs["predicted"]
    last = position == len(token_ids) - 1
    where = "the last position" if last else f"the pinned token (position {position})"
    pushes = ", ".join(f"{_token(tokenizer, token)} {value:+.3f}"
                       for token, value in zip(row["pushes"], row["pushes_logits"], strict=True))
    here = _token(tokenizer, token_ids[position])
    return [html.Div([html.Strong(row["component"]), f" at {where} ({here}): "
                      f"the model predicts {_token(tokenizer, predicted)} (logit "
                      f"{table.attrs['predicted_logit']:.3f}); this head's direct contribution to it: ",
                      html.Strong(f"{row['dla']:+.3f}"), f" (rank {rank} of {len(table)} heads)."]),
            html.Div(f"It pushes up most: {pushes}.")]


def register(app, service: Service) -> None:
    @app.callback(Output(CARD, "style"), Input(ids.MODEL, "value"))
    def _shown(spec):
        return _style(service, spec)

    @app.callback(Output(CONTRIBUTION, "children"), Input(ids.INPUT, "data"), Input(ids.SELECTED, "data"),
                  Input(ids.TOKEN_FOCUS, "data"))
    @guarded(outputs=1, message=0)
    def _contribution(store, selected, focus):
        return contribution_view(service, store, selected, focus)


PANEL = Panel("contribution", register=register, where="right", layout=layout, ids=(CONTRIBUTION, CARD))
