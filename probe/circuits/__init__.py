"""Circuits: which heads feed which — pairs of heads measured from the weights and by path patching, and the
circuit of a head type as a graph.

What belongs here (above :mod:`probe.heads`, whose labels, probe sets and losses it reads; below
:mod:`probe.runs` and :mod:`probe.views`, which run and draw it):

* :mod:`~probe.circuits.factors` — each head's query, key, value and output maps read through
  :mod:`probe.anatomy`, norm gains folded, grouped-query sharing resolved, MLA refused;
* :mod:`~probe.circuits.composition` — Elhage et al.'s Q-, K- and V-composition scores from d_head-sized
  factors,
  against random matrices of the same shapes;
* :mod:`~probe.circuits.corruption` — paired clean / corrupted probe sets of the head types where a corruption
  is
  defined, with the type's own loss;
* :mod:`~probe.circuits.patching` — path patching (Wang et al. 2022) of sender → receiver edges on those
  pairs,
  exact, through :mod:`probe.engine.paths`, against random sender–receiver pairs;
* :mod:`~probe.circuits.task`, :mod:`~probe.circuits.edges`, :mod:`~probe.circuits.faithfulness`,
  :mod:`~probe.circuits.task_search` — a researcher's own task (clean / corrupted pairs, answers, a
  metric), every edge of the model scored by EAP, EAP-IG or exact patching, the faithfulness curve against
  random circuits, and the circuit (:func:`task_circuit`);
* :mod:`~probe.circuits.attribution` — why this prediction, for any prompt: per-head direct logit attribution
  and the logit lens per layer (TransformerLens 4.3's ``logit_attrs`` / ``logit_lens`` rules);
* :mod:`~probe.circuits.circuit` — :func:`find_circuit`: from a type's labelled heads, the upstream heads
  whose
  composition and patching effects beat their controls, as a graph; the label table's ``fed_by`` columns.

The patching mechanism itself (hooks that record and splice, the model keeps its fused attention kernel) is in
the engine (:mod:`probe.engine.paths`); nothing here knows about files, commands or views.

Example
-------
>>> import probe
>>> from probe.circuits import composition_scores
>>> loaded = probe.models.load("zoo:induction")
>>> scores = composition_scores(loaded, receivers=[(1, 0)], modes=["K"])
>>> top = scores.sort_values("score").iloc[-1]
>>> top["sender"], top["mode"], bool(top["beats_random"])
('L0H1', 'K', True)
"""

from __future__ import annotations

from probe.lazy import lazy_exports

_LAZY = {
    "composition_scores": ".composition",
    "composition_cost": ".composition",
    "composition_score": ".composition",
    "model_factors": ".factors",
    "corrupted_pairs": ".corruption",
    "CORRUPTIONS": ".corruption",
    "path_patching": ".patching",
    "patch_edges": ".patching",
    "find_circuit": ".circuit",
    "Circuit": ".circuit",
    "CircuitConfig": ".circuit",
    "fed_by_columns": ".circuit",
    "Task": ".task",
    "load_task": ".task",
    "make_task": ".task",
    "repeat_task": ".task",
    "edge_scores": ".edges",
    "faithfulness_curve": ".faithfulness",
    "task_circuit": ".task_search",
    "TaskCircuit": ".task_search",
    "direct_logit_attribution": ".attribution",
    "logit_lens": ".attribution",
    "next_token_heads": ".attribution",
    "task_attribution": ".attribution",
    "type_task": ".type_tasks",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)  # PEP 562
