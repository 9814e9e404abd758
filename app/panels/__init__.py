"""The dashboard's panels, and the one list of them: ``PANELS``, which ``app/layout.py`` reads to place every
panel on the page and to register its callbacks. Each module ends with its ``PANEL``
(:class:`probe_app.panel.Panel`: name, where it sits, ``layout(service, state)``, ``register(app, service)``,
the ids it owns); the shared pieces (``card_panel``, ``graph``, ``radio``, ``head_or_default``, the table
styles) are in ``app/panel.py``. A new panel is a module here and one line in ``PANELS``
(docs/howto/panel.md).

page      model choice, head type, image format, URL state, model facts (the page frame: header and sidebar)
history   a training history's timeline and a slider over its checkpoints (probe app --history)
atlas     the layer × head grid of scores or labels, labelling on demand
circuit   the head type's circuit (which earlier heads feed its labelled heads) as a graph
grid      every head's pattern on the current input as thumbnails
explorer  one head's attention: heatmap, token view, line view, overlay, downloads
contribution  the selected head's direct contribution to the next token (under the explorer)
proteins  predicted and true contacts beside one head's APC map, per-head leaderboard
card      the architecture card (MHA/GQA/MQA/MLA, KV-cache bytes) of the model
glossary  the glossary beside the head type (its button is in the sidebar)
"""

from __future__ import annotations

from . import atlas, card, circuit, contribution, explorer, glossary, grid, history, page, proteins

# The order callbacks are registered in; panels of one place (Panel.where) sit in this order on the page.
PANELS = (page.PANEL, atlas.PANEL, circuit.PANEL, grid.PANEL, explorer.PANEL, contribution.PANEL,
          proteins.PANEL, card.PANEL, glossary.PANEL, history.PANEL)
