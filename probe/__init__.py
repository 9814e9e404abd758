"""probe — flash-compatible attention capture, head labelling and protein-attention analysis.

The package is layered; imports only go down:

* :mod:`probe.engine` — the capture engine (attention function, :func:`capture`, sinks);
* :mod:`probe.heads` — head types, probe sets, scores, statistics, :func:`label_model`;
* :mod:`probe.proteins` — structures, contacts, Vig et al.'s feature shares, structure sets;
* :mod:`probe.circuits` — which heads feed which: composition scores, path patching, a head type's circuit;
* :mod:`probe.runs` — batch work: the one runner, its executors (in-process, Ray), journal, atomic writes,
  sweeps;
* :mod:`probe.views` — views for a notebook (:func:`show`, :func:`label_table`), the one-file report, and the
  clientside code the app shares; :mod:`probe.app` starts the dashboard from Python (``run``, Jupyter inline);
* :mod:`probe.commands` — the ``probe`` command line (argparse and printing only; nothing imports it).

Below them sit :mod:`probe.models` (loading), :mod:`probe.card`, :mod:`probe.naming` and :mod:`probe.errors`;
the model organisms live in :mod:`probe.zoo`. The names users reach for are re-exported here. Nothing heavy
happens at import: each re-export is loaded the first time it is used.

Examples
--------
>>> import probe
>>> loaded = probe.load("zoo:induction")  # a bundled model organism: 2 layers x 4 heads
>>> alpha = probe.capture_attention(loaded.model, probe.models.tokenize_text(loaded, "rada ruga buse rada"))
>>> alpha.shape  # [batch layer head query key]: <bos> and 4 pseudo-words
torch.Size([1, 2, 4, 5, 5])
>>> probe.head_name(1, 2), probe.parse_head_name("L1H2")
('L1H2', (1, 2))
"""

from __future__ import annotations

from probe.errors import ProbeError
from probe.lazy import lazy_exports
from probe.naming import head_name, parse_head_name

__version__ = "0.1.0"

# name -> module that defines it (loaded on first access, PEP 562)
_LAZY = {
    "capture": "probe.engine",
    "capture_attention": "probe.engine",
    "DenseSink": "probe.engine",
    "KeyMassSink": "probe.engine",
    "Sink": "probe.engine",
    "GatherSink": "probe.engine",
    "AttentionBlock": "probe.engine",
    "label_model": "probe.heads.label",
    "LabelConfig": "probe.heads.label",
    "HeadTypeSpec": "probe.heads.registry",
    "register": "probe.heads.registry",
    "retrieval_scores": "probe.heads.retrieval",
    "predict_contacts": "probe.proteins.contacts",
    "load": "probe.models",
    "show": "probe.views.view",  # the inline notebook view (docs/views.md)
    "show_circuit": "probe.views.circuit",  # a head type's circuit as a graph (docs/circuits.md)
    "show_structure": "probe.views.structure_view",  # a head's attention on the 3D structure (docs/views.md)
    "show_history": "probe.views.timeline",  # a training history as a timeline (docs/zoo.md)
    "label_table": "probe.views.tables",
}
_SUBMODULES = ("models", "card", "engine", "heads", "proteins", "circuits", "runs", "zoo", "views", "app")

__all__ = ["__version__", "ProbeError", "head_name", "parse_head_name", *_LAZY, *_SUBMODULES]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)
