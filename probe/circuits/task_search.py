"""A researcher's own task, end to end: the task read with the model's tokenizer, every edge scored
(:mod:`probe.circuits.edges`), the faithfulness curve drawn (:mod:`probe.circuits.faithfulness`) and the
circuit marked — the smallest top-|score| edge set on the curve whose share of the clean − corrupted gap
reaches a stated share. What ``probe circuit --task FILE`` runs and :func:`probe.show_circuit` draws.

Example
-------
>>> import probe
>>> from probe.circuits.task import repeat_task
>>> loaded = probe.models.load("zoo:induction")
>>> found = task_circuit(loaded, repeat_task(loaded.tokenizer, pairs=4))  # EAP-IG, 5 steps
>>> found.size, len(found.table)  # the top 20 of 110 edges keep >= 80 % of the logit difference
(20, 110)
>>> found.found.iloc[0][["sender", "receiver", "input"]].tolist()
['embed', 'L0H1', 'v']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from probe.circuits.edges import edge_scores
from probe.circuits.faithfulness import faithfulness_curve, smallest_circuit
from probe.circuits.task import Task, load_task
from probe.models import LoadedModel


@dataclass(frozen=True, eq=False)
class TaskCircuit:
    """A task's scored edges, faithfulness curve and circuit (what :func:`task_circuit` returns).

    Attributes
    ----------
    model : str
        The model's name.
    table : pandas.DataFrame
        One row per edge (:func:`~probe.circuits.edges.edge_scores`' columns plus ``in_circuit`` and
        ``model``); ``attrs``: ``clean_metric``, ``corrupted_metric``.
    curve : pandas.DataFrame
        :func:`~probe.circuits.faithfulness.faithfulness_curve` (``edges``, ``share``, ``random_share``, …).
    share : float
        The share of the gap the circuit must keep.
    size : int or None
        The circuit's number of edges (the fewest on the curve reaching `share`); None where none does.
    """

    model: str
    table: pd.DataFrame
    curve: pd.DataFrame
    share: float
    size: int | None

    @property
    def found(self) -> pd.DataFrame:
        """The circuit's edges, strongest first."""
        return self.table[self.table["in_circuit"]].sort_values("abs_rank")

    def lines(self, top: int = 15) -> list[str]:
        """What ``probe circuit --task`` prints: the top edges, the curve and the circuit's size."""
        return summary(self.table, self.curve, top).splitlines()


def task_circuit(loaded: LoadedModel, task: Task | str | Path, metric: str = "logit_diff",
                 method: str = "eap-ig", steps: int = 5, share: float = 0.8, random: int = 5) -> TaskCircuit:
    """``probe circuit --task FILE``: the task (a :class:`~probe.circuits.task.Task`, or a CSV/JSONL file read
    with the model's tokenizer and `metric`), every edge scored by `method`, the faithfulness curve drawn with
    `random` random circuits per size, and the circuit marked.

    Returns
    -------
    TaskCircuit
    """
    if not isinstance(task, Task):
        task = load_task(task, loaded.tokenizer, metric)
    table = edge_scores(loaded, task, method=method, steps=steps)
    curve = faithfulness_curve(loaded, task, table, random=random)
    size = smallest_circuit(curve, share)
    curve.attrs.update(circuit_edges=size, circuit_share=share)
    kept = table["abs_rank"] <= (size if size is not None else -1)
    return TaskCircuit(loaded.name, table.assign(in_circuit=kept, model=loaded.name), curve, share, size)


def summary(table: pd.DataFrame, curve: pd.DataFrame | None = None, top: int = 15) -> str:
    """The top edges by |score| to read, and the faithfulness curve's points (what ``probe circuit --task``
    prints).

    Examples
    --------
    >>> table = pd.DataFrame({"sender": ["L0H1"], "receiver": ["L1H0"], "input": ["k"], "score": [-1.5],
    ...                       "abs_rank": [1], "method": ["eap-ig"], "metric": ["logit_diff"],
    ...                       "corruption": ["resampled"]})
    >>> print(summary(table))  # doctest: +NORMALIZE_WHITESPACE
    1 edges by eap-ig on logit_diff; corruption: resampled
     rank sender receiver input  score
        1   L0H1     L1H0     k -1.500
    """
    first = table.iloc[0]
    shown = table.sort_values("abs_rank").head(top)[["abs_rank", "sender", "receiver", "input", "score"]]
    shown = shown.rename(columns={"abs_rank": "rank"})
    lines = [f"{len(table)} edges by {first['method']} on {first['metric']}; corruption: "
             f"{first['corruption']}",
             shown.to_string(index=False, float_format=lambda value: f"{value:.3f}")]
    if curve is not None:
        lines.append("faithfulness (share of the clean − corrupted gap kept by the top-n edges; random "
                     "circuits):")
        lines += [f"  {int(row.edges):>5} edges: {row.share:6.3f}   random {row.random_share:6.3f}"
                  for row in curve.itertuples()]
        if "circuit_edges" in curve.attrs:
            size = curve.attrs["circuit_edges"]
            wanted = f"{curve.attrs['circuit_share']:.0%} of the gap"
            lines.append(f"circuit: the top {size} edges, the fewest on the curve keeping ≥ {wanted}"
                         if size is not None else f"circuit: no top-n set on the curve keeps {wanted}")
    return "\n".join(lines)


__all__ = ["TaskCircuit", "summary", "task_circuit"]
