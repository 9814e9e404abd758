"""The dashboard's service: the server-side work shared by every session and thread, one object per job.

A panel's callback reaches the job it needs through the :class:`Service`:

* ``service.facts`` (:class:`~probe_app.facts.ModelFacts`): what a model is — kind, limits, layer and head
  names, why it is card-only or not labelled;
* ``service.texts`` (:class:`~probe_app.text_store.TextStore`): long inputs kept under a short key for links;
* ``service.captures`` (:class:`~probe_app.captures.Captures`): tokenized inputs, α of a layer, the grid's
  thumbnails, target patterns — cached, one forward pass at a time through the inference gate;
* ``service.labels`` (:class:`~probe_app.label_store.LabelStore`): each model's label table (computed,
  --labels, shipped) and ``service.labels.jobs`` (:class:`~probe_app.jobs.LabelQueue`), the background
  labelling that steps aside for every view between its probe batches;
* ``service.proteins`` (:class:`~probe_app.protein_store.ProteinStore`): contacts and head maps of a protein;
* ``service.circuits`` (:class:`~probe_app.circuits.CircuitStore`): a head type's circuit (composition and
  path patching) on the model's label table, kept in its own LRU cache;
* ``service.history`` (:class:`~probe_app.history_store.HistoryStore`): a training history (``--history``),
  its timeline and its checkpoints, which are served as models.

Big arrays live here and go to the browser one layer at a time (or as the pooled thumbnails of every head).
Everything a user can get wrong raises a one-line :class:`~probe.errors.ProbeError`. A new panel's data is a
method of the job it belongs to, or — data no job gives — :meth:`Service.cached` from the panel's own module
(docs/howto/panel.md): never a new method of this class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

import pandas as pd

from .cache import LRUCache
from .captures import Captures
from .circuits import CircuitStore
from .config import AppConfig
from .facts import ModelFacts
from .gate import InferenceGate
from .history_store import HistoryStore
from .jobs import JobSlots, LabelQueue
from .label_store import LabelStore
from .protein_store import ProteinStore
from .registry import ModelRegistry, default_models
from .text_store import TextStore


class Service:
    """All server-side work of the dashboard, by job (see the module doc); shared by every session and
    thread."""

    def __init__(self, config: AppConfig, registry: ModelRegistry | None = None,
                 labels: pd.DataFrame | None = None) -> None:
        self.config = config
        # its checkpoints are served after the --model ones; the control's are only drawn
        self.history = HistoryStore(config.history, config.history_control)
        specs = config.models or (() if self.history.served else default_models())
        self.registry = registry or ModelRegistry(tuple(dict.fromkeys((*specs, *self.history.served[::-1]))),
                                                  config.device)
        self.gate = InferenceGate()  # one forward pass at a time in the whole process, views before labelling
        # the bound on queued work: labelling jobs and circuit searches together (AppConfig.max_jobs)
        self.slots = JobSlots(config.max_jobs)
        self.facts = ModelFacts(self.registry, config)
        self.labels = LabelStore(self.facts, config, functools.partial(LabelQueue, self.registry, self.gate,
                                                                       slots=self.slots), labels)
        self.captures = Captures(self.facts, self.gate, LRUCache(config.cache_entries, config.cache_bytes),
                                 self.labels.table)
        self.texts = TextStore(self.captures.text_entry_bytes())
        self.proteins = ProteinStore(self.facts, self.gate, config)
        self.circuits = CircuitStore(self.facts, self.gate, self.labels.table, slots=self.slots)
        # what panels compute for themselves (Service.cached), bounded like the captures
        self.panel_data = LRUCache(config.cache_entries, config.cache_bytes)

    def cached(self, panel: str, key: Hashable, compute: Callable[[], object]) -> object:
        """A panel's own data: ``compute()`` run once per ``(panel, key)`` and kept in an LRU cache.

        The generic way a panel gets data no job gives (a new panel needs no method here). The computation
        runs inside the inference gate's foreground (views before background labelling, one forward pass at a
        time), after a look without it, as every cached computation of the dashboard
        (:meth:`~probe_app.cache.LRUCache.get_or_compute`).

        Parameters
        ----------
        panel : str
            The panel's name (``Panel.name``): panels never read each other's entries.
        key : hashable
            Everything the value depends on — the model spec first, then the inputs (a head, a text's token
            ids, the label table's version, …); two calls with equal keys get the same object.
        compute : callable
            Called with no argument on a miss; must not return None (None is "not cached"). A
            :class:`~probe.errors.ProbeError` it raises reaches the callback (and its message slot) uncached.

        Returns
        -------
        object
            The cached or computed value. Arrays count by their bytes against the bound, other values by their
            ``nbytes`` or 1 KiB.

        Examples
        --------
        >>> service = Service(AppConfig(models=("zoo:induction",)))  # loads nothing yet
        >>> calls = []
        >>> def compute():
        ...     calls.append("computed")
        ...     return len(calls)
        >>> first = service.cached("toy", ("zoo:induction", 3), compute)
        >>> first, service.cached("toy", ("zoo:induction", 3), compute)  # the second call: from the cache
        (1, 1)
        >>> service.cached("toy", ("zoo:induction", 4), compute)  # another key: computed
        2
        """
        return self.panel_data.get_or_compute((panel, key), compute, self.gate.foreground)
