"""What a dashboard panel is, and the pieces every panel shares.

A panel is one module of ``app/panels/`` that ends with one :class:`Panel` object, ``PANEL``: its name,
where it sits on the page, its layout for one visit, its callbacks and the component ids it owns. The list of
panels is ``PANELS`` in ``app/panels/__init__.py``, the one place ``app/layout.py`` reads for both the page
and the callbacks. A panel's own data comes from the service: a job's method (``service.captures``,
``service.labels``, …) or, for data no job gives, :meth:`probe_app.service.Service.cached` (computed once per
key under the inference gate, kept in an LRU cache) — so a new panel edits neither ``app/service.py`` nor
``app/layout.py``.
See docs/howto/panel.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

import dash_mantine_components as dmc
from dash import dcc, html

from . import figures

# Where a panel sits (Panel.where), in page order. "" : callbacks only (the page frame, the glossary).
#   top       above the explorer section (the training history)
#   left      the left column of the explorer section, under each other (atlas, circuit, grid)
#   right     the right column of the explorer section (the attention explorer)
#   proteins  the protein section, shown for protein models only
#   bottom    below everything (the architecture card)
# The explorer section is hidden for a card-only model, the protein section for a model that is not a protein
# model.
PLACES = ("top", "left", "right", "proteins", "bottom")


@dataclass(frozen=True)
class Panel:
    """One panel of the dashboard: everything the page needs to place it and wire its callbacks.

    Attributes
    ----------
    name : str
        Unique among the panels (the module's name).
    register : callable
        ``register(app, service)`` adds the panel's callbacks (the app wraps model values as served names).
    layout : callable or None
        ``layout(service, state)`` returns the panel's components for one visit; ``state`` is the page's state
        from the URL (``app.panels.page.initial_state``: ``"model"``, ``"head_type"``, ``"layer"``,
        ``"head"``, ``"theme"``, …). None for a panel with callbacks only.
    where : str
        One of :data:`PLACES`, or ``""`` for callbacks only.
    ids : tuple of str
        Component ids the panel owns, kept in its module (not in ``app/ids.py``): no other panel may claim
        them (checked when the app is built).

    Examples
    --------
    >>> from dash import html
    >>> toy = Panel("toy", register=lambda app, service: None, where="bottom", ids=("toy-text",),
    ...             layout=lambda service, state: html.Div(id="toy-text", children=state["model"]))
    >>> toy.layout(None, {"model": "zoo:induction"}).children
    'zoo:induction'
    >>> Panel("bad", register=lambda app, service: None, where="middle")
    Traceback (most recent call last):
    ...
    ValueError: panel 'bad': where='middle' is none of top, left, right, proteins, bottom ('': callbacks only)
    """

    name: str
    register: Callable[[Any, Any], None]
    layout: Callable[[Any, dict], Any] | None = None
    where: str = ""
    ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.where not in ("", *PLACES):
            raise ValueError(f"panel {self.name!r}: where={self.where!r} is none of {', '.join(PLACES)} "
                             "('': callbacks only)")
        if (self.where == "") != (self.layout is None):
            raise ValueError(f"panel {self.name!r}: a layout needs a place (where=) and a place a layout")


def check_panels(panels: Iterable[Panel], shared_ids: Collection[str]) -> None:
    """Refuse a list of panels with a name twice, or an id owned twice or also one of ``app/ids.py``.

    Examples
    --------
    >>> one = Panel("one", register=print, ids=("one-text",))
    >>> check_panels([one, Panel("two", register=print, ids=("one-text",))], shared_ids=set())
    Traceback (most recent call last):
    ...
    ValueError: panel 'two': id 'one-text' belongs to panel 'one' already
    >>> check_panels([one], shared_ids={"one-text"})
    Traceback (most recent call last):
    ...
    ValueError: panel 'one': id 'one-text' is an id of app/ids.py already
    """
    names: set[str] = set()
    owner: dict[str, str] = {}
    for panel in panels:
        if panel.name in names:
            raise ValueError(f"two panels are named {panel.name!r}")
        names.add(panel.name)
        for component in panel.ids:
            if component in shared_ids:
                raise ValueError(f"panel {panel.name!r}: id {component!r} is an id of app/ids.py already")
            if component in owner:
                raise ValueError(f"panel {panel.name!r}: id {component!r} belongs to panel "
                                 f"{owner[component]!r} already")
            owner[component] = panel.name


# DataTable cells and headers in the page's theme (inline styles read the theme's CSS variables)
TABLE_CELL = {"backgroundColor": "var(--mantine-color-body)", "color": "var(--mantine-color-text)",
              "border": "1px solid var(--mantine-color-default-border)"}
TABLE_HEADER = {"backgroundColor": "var(--mantine-color-default-hover)", "color": "var(--mantine-color-text)"}


def card_panel(title, children, className: str = "", extra=None) -> dmc.Card:
    """One panel of the page: a card with a title row (and optional controls at its right)."""
    head = dmc.Group([dmc.Title(title, order=4), *(extra or [])], justify="space-between", mb="xs")
    return dmc.Card([head, html.Div(children)], withBorder=True, shadow="sm", radius="md", padding="md",
                    className=("panel-card " + className).strip())


def radio(component_id: str, options, value) -> dcc.RadioItems:
    return dcc.RadioItems(id=component_id, options=list(options), value=value, inline=True,
                          labelStyle={"marginRight": "12px"})


def graph(component_id: str, message: str = "loading…", atlas: bool = False,
          theme: str = "light") -> dcc.Graph:
    return dcc.Graph(id=component_id,
                     config=figures.graph_config("png", f"probe_{component_id}", atlas=atlas),
                     figure=figures.empty_figure(message, theme))


def head_or_default(selected) -> dict:
    """The selection store's value, or L0H0 (the service checks it against the model before use)."""
    return selected if isinstance(selected, dict) else {"layer": 0, "head": 0}
