"""Head labelling: which heads are previous-token, induction, coreference, … heads, and what a label is worth.

What belongs here: the head-type registry (:mod:`~probe.heads.registry`, one :class:`HeadTypeSpec` per type),
the seeded probe sets and the vendored corpus (:mod:`~probe.heads.probesets`, :mod:`~probe.heads.corpus`), the
streamed score sink (:mod:`~probe.heads.scores`), pure statistics (:mod:`~probe.heads.stats`), ablation
effects (:mod:`~probe.heads.ablation`, :mod:`~probe.heads.label.ablation`), the labelling pipeline
(:mod:`~probe.heads.label`) and the label table's schema and I/O (:mod:`~probe.heads.tables`). It is built on
:mod:`probe.engine` and :mod:`probe.models`; it never imports :mod:`probe.proteins`, :mod:`probe.runs` or
:mod:`probe.commands`.

Examples
--------
>>> from probe.heads.registry import REGISTRY
>>> sorted(REGISTRY)  # the built-in head types (probe.heads.register adds yours)
['bracket', 'coreference', 'delimiter', 'duplicate_token', 'first_token', 'fixed_offset', 'induction',
 'next_token', 'previous_token', 'retrieval', 'self', 'sentence_start']
"""

from __future__ import annotations

from probe.lazy import lazy_exports

# name -> module that defines it (loaded on first access, PEP 562): the registry API users extend
_LAZY = {"register": "probe.heads.registry", "unregister": "probe.heads.registry",
         "HeadTypeSpec": "probe.heads.registry", "TargetContext": "probe.heads.registry",
         "REGISTRY": "probe.heads.registry", "label_model": "probe.heads.label",
         "LabelConfig": "probe.heads.label"}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
