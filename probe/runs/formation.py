"""When the induction heads of a training run formed, read from its history table (:mod:`probe.runs.history`),
beside the point Aoyama, Wilcox & Schneider (2025) predict (issue 54).

Olsson et al. (2022) see induction heads form as a phase change: the heads' prefix-matching score rises and,
at the same time, the in-context-learning (ICL) score — loss late in a passage minus loss early in it —
drops. Two points of one history measure it:

* the **formation checkpoint**: the first checkpoint where the best induction score (the largest over all
  heads) reaches half its value at the last checkpoint;
* the **steepest ICL drop**: the consecutive pair of checkpoints whose ICL score falls the most (reported by
  its later checkpoint).

Aoyama et al. fit the formation point, in training tokens, as ``N ≈ 10^5.7 · √(B · C)`` (B the batch in
sequences, C the context in tokens), whatever the model's size (:func:`predicted_tokens`).

Examples
--------
>>> import pandas as pd
>>> from probe.runs.formation import formation
>>> rows = [dict(row="checkpoint", step=s, icl_score=icl) for s, icl in
...         [(0, 0.0), (100, -0.05), (200, -0.40), (300, -0.45)]]
>>> rows += [dict(row="head", step=s, induction=v) for s, v in [(0, 0.01), (100, 0.05), (200, 0.30),
...                                                               (300, 0.40)]]
>>> point = formation(pd.DataFrame(rows), tokens_per_step=1024)
>>> point.formation_step, point.steepest_drop_step, round(point.icl_drop, 2)
(200, 200, 0.45)
>>> point.formation_tokens
204800
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from probe.errors import ProbeError

LAW_T = 10 ** 5.7  # Aoyama, Wilcox & Schneider (2025): formation after T * sqrt(B * C) training tokens


def predicted_tokens(batch: int, context: int) -> float:
    """The formation point Aoyama et al. (2025) predict, in training tokens: ``10^5.7 · √(batch · context)``.

    Examples
    --------
    >>> round(predicted_tokens(4, 256) / 1e6, 2)  # million tokens
    16.04
    """
    return LAW_T * math.sqrt(batch * context)


@dataclass(frozen=True)
class Formation:
    """When one run's induction heads formed (steps; tokens = steps × tokens per step).

    Attributes
    ----------
    formation_step : int or None
        The first checkpoint where the best induction score reaches half its last value (None where the first
        checkpoint already does: nothing rose from below half, e.g. a score at chance throughout).
    steepest_drop_step : int
        The later checkpoint of the consecutive pair whose ICL score falls the most.
    steepest_drop : float
        That fall, in nats (positive: the score dropped).
    icl_drop : float
        The ICL score at the first checkpoint minus its lowest value (nats).
    final_induction : float
        The best induction score at the last checkpoint.
    checkpoints_apart : int or None
        How many checkpoints separate the two points (0: the same checkpoint).
    tokens_per_step : int
        Training tokens per optimizer step (batch × context).
    """

    formation_step: int | None
    steepest_drop_step: int
    steepest_drop: float
    icl_drop: float
    final_induction: float
    checkpoints_apart: int | None
    tokens_per_step: int

    @property
    def formation_tokens(self) -> int | None:
        """The formation checkpoint in training tokens."""
        return None if self.formation_step is None else self.formation_step * self.tokens_per_step

    @property
    def steepest_drop_tokens(self) -> int:
        """The steepest ICL drop's later checkpoint in training tokens."""
        return self.steepest_drop_step * self.tokens_per_step


def formation(table: pd.DataFrame, tokens_per_step: int) -> Formation:
    """The formation checkpoint and the steepest ICL drop of one model's history `table`.

    Parameters
    ----------
    table
        A history (:data:`probe.runs.history.HISTORY_COLUMNS`; only ``row``, ``step``, ``icl_score`` and
        ``induction`` are read) of one model, at least two checkpoints.
    tokens_per_step
        Training tokens per optimizer step (batch × context), for the points in tokens.

    Returns
    -------
    Formation
    """
    checkpoints = table[table["row"] == "checkpoint"].sort_values("step")
    heads = table[table["row"] == "head"]
    if len(checkpoints) < 2:
        raise ProbeError("a formation point needs a history of at least two checkpoints")
    steps = [int(step) for step in checkpoints["step"]]
    icl = checkpoints["icl_score"].to_numpy(float)  # [checkpoint]
    best = heads.groupby("step")["induction"].max().reindex(steps).to_numpy(float)  # [checkpoint]
    falls = icl[:-1] - icl[1:]  # [checkpoint - 1], positive where the score dropped
    steepest = int(falls.argmax()) + 1
    final = float(best[-1])
    first = next(index for index, value in enumerate(best) if value >= final / 2)
    first = first or None  # reached at the first checkpoint: no rise to date
    return Formation(formation_step=None if first is None else steps[first],
                     steepest_drop_step=steps[steepest], steepest_drop=float(falls.max()),
                     icl_drop=float(icl[0] - icl.min()), final_induction=final,
                     checkpoints_apart=None if first is None else abs(first - steepest),
                     tokens_per_step=tokens_per_step)


__all__ = ["LAW_T", "Formation", "formation", "predicted_tokens"]
