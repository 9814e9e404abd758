"""The labelling pipeline: from a loaded model to a labelled table, one stage per module.

What belongs here, in the order a run goes through it:

* :mod:`~probe.heads.label.config` — :class:`LabelConfig` (frozen) and what it resolves to: the head types
  that apply to a model kind, the probe lengths, the identity of a run's options;
* :mod:`~probe.heads.label.probes` — the probe sets of a run (natural text, repeated blocks, sentences,
  brackets, span examples) as token tensors;
* :mod:`~probe.heads.label.scoring` — scores streamed from the capture engine, one forward per probe batch
  for every type of a probe set;
* :mod:`~probe.heads.label.summary` — per head × type: the score, its interval, chance and the one-sided test;
* :mod:`~probe.heads.label.table` — the label rule (FDR on the selection half of each probe set's documents,
  replicated on the held-out confirmation half), roles and copying, the rows, the summary lines;
* :mod:`~probe.heads.label.ablation` — ablation columns of labelled heads (single and joint, against random
  heads);
* :mod:`~probe.heads.label.pipeline` — :func:`label_model`, which runs the stages in order.

The head types themselves are data in :mod:`probe.heads.registry`; the statistics are pure functions in
:mod:`probe.heads.stats`; the table's schema and I/O are :mod:`probe.heads.tables`.

Example
-------
>>> import probe
>>> from probe.heads.label import LabelConfig, label_model
>>> loaded = probe.models.load("zoo:induction")
>>> table = label_model(loaded, LabelConfig(types=("previous_token",), examples=8, ablate="none",
...                                         output_share=False, n_bootstrap=100))
>>> table.loc[table["label"], "head_name"].tolist()
['L0H1']
"""

from __future__ import annotations

from probe.lazy import lazy_exports

# name -> the module of this package that defines it (loaded on first access, PEP 562: importing
# probe.heads.label.config needs none of the pipeline)
_LAZY = {
    "label_model": ".pipeline",
    "LabelConfig": ".config",
    "ABLATE": ".config",
    "COREF_SETS": ".config",
    "config_identity": ".config",
    "ProbeSource": ".probes",
    "Scored": ".scoring",
    "summarise": ".summary",
    "roles": ".table",
    "summary_lines": ".table",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)  # PEP 562
