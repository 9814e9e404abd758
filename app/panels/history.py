"""The history panel (`probe app --history FILE`, issue 42): the model's training timeline — ICL score,
losses, every head's previous-token and induction scores against the step (probe.views.timeline, the same SVG
as the notebook and the report) — and a slider over its checkpoints that moves the whole page to one: the
slider sets the page's model to that checkpoint, and choosing a checkpoint in the model list moves the slider.
The checkpoint shown is marked by a dashed line on every panel of the timeline."""

from __future__ import annotations

from dash import Input, Output, ctx, dcc, html, no_update

from probe.errors import ProbeError
from probe.naming import display_name
from probe.views.html_view import standalone_page

from .. import ids
from ..errors import guarded
from ..panel import Panel, card_panel
from ..service import Service


def layout(service: Service, spec: str, theme: str) -> html.Div:
    """The panel, or an empty hidden box when the app has no history."""
    store = service.history
    if store.view is None:
        return html.Div(id=ids.HISTORY_BOX, style={"display": "none"})
    index = store.index_of(spec)
    marks = {i: {"label": f"{step:,}"} for i, step in enumerate(store.view.steps)}
    return html.Div(id=ids.HISTORY_BOX, children=card_panel("Training history", [
        html.Div(_note(service, index), id=ids.HISTORY_NOTE, className="note"),
        html.Iframe(id=ids.HISTORY_TIMELINE, srcDoc=_page(service, index, theme), className="history-frame",
                    title="training timeline",  # as tall as the SVG: two or three rows of panels
                    style={"width": "100%", "height": f"{store.view.size[1] + 30}px", "border": "0"}),
        # step 1: a mark at every index, and the arrow keys move the handle (step=None gives them no step)
        html.Div(dcc.Slider(id=ids.HISTORY_SLIDER, min=0, max=len(store.specs) - 1, step=1, marks=marks,
                            value=index if index is not None else len(store.specs) - 1, included=False),
                 title="training step: moves the page to that checkpoint"),
    ], className="history-panel"))


def _page(service: Service, index: int | None, theme: str) -> str:
    return standalone_page(service.history.timeline(index, theme), f"{service.history.view.model} timeline")


def _note(service: Service, index: int | None) -> str:
    view = service.history.view
    held = len(service.history.served)
    where = (f"the page shows {view.checkpoints[index]} (step {int(view.steps[index]):,}, dashed line)"
             if index is not None else "the page shows a model outside this history")
    missing = "" if held == len(view.steps) else (
        f" · {len(view.steps) - held} checkpoint(s) not on this machine: their scores are drawn, the page "
        "cannot open them")
    return (f"{display_name(view.model)}: {len(view.steps)} checkpoints · {where} · move the slider to open "
            "a checkpoint" + missing)


def slider_position(service: Service, value) -> int:
    """The slider's value as a checkpoint index; a crafted one (a string, a fraction, NaN, out of range) is
    refused in one line."""
    count = len(service.history.specs)
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value
            or not 0 <= value < count or value != int(value)):
        shown = repr(value)[:40]
        raise ProbeError(f"the history slider's value {shown} is not a checkpoint (0..{count - 1}): move the "
                         "slider")
    return int(value)


def register(app, service: Service) -> None:
    if service.history.view is None:
        return

    @app.callback(Output(ids.MODEL, "value", allow_duplicate=True),
                  Output(ids.HISTORY_SLIDER, "value"), Output(ids.HISTORY_TIMELINE, "srcDoc"),
                  Output(ids.HISTORY_NOTE, "children"),
                  Input(ids.HISTORY_SLIDER, "value"), Input(ids.MODEL, "value"), Input(ids.THEME, "checked"),
                  prevent_initial_call=True)
    @guarded(outputs=4, message=3)
    def _move(position, spec, dark):
        theme = "dark" if dark else "light"
        if ctx.triggered_id == ids.HISTORY_SLIDER:  # the slider moves the page to that checkpoint
            position = slider_position(service, position)
            target = service.history.spec_at(position)
            return (target if target != spec else no_update, no_update,
                    _page(service, position, theme), _note(service, position))
        index = service.history.index_of(spec)  # the model (or the theme) changed: follow it
        return (no_update, index if index is not None else no_update, _page(service, index, theme),
                _note(service, index))


PANEL = Panel("history", register=register, where="top",
              layout=lambda service, state: layout(service, state["model"], state["theme"]))
