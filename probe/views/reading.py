"""How a label table is read, in one place for every view: the app's atlas and grid, the labelled-heads table,
notebook views and the report.

* a cell is a number only when it is finite (:func:`number`: NaN, a missing column, text are unknown);
* a head is *labelled* when its ``label`` cell says so (:func:`is_labelled`, probe.heads.tables' one rule);
* a head is *clearly above chance* when its q-value is below the FDR level, else (a table without q-values)
  when its interval's low end is above chance (:func:`is_significant`);
* a cell is **grey** when its head is *not labelled* (:func:`is_grey`; a table without a ``label`` column:
  not clearly above chance), and :func:`label_reason` says why in one phrase — no score, untestable, below
  the untrained twins, attention to the targets not above chance (span types), below the minimum effect,
  q above the FDR level, or not replicated on the held-out half (``selected`` but not ``replicated``).
  ✓ marks a label; chance is the ``chance`` column (a uniform head's score);
* a q- or p-value reads with 3 significant digits, ``< 0.001`` below that and ``unknown`` for NaN
  (:func:`format_q`);
* the controls a label beat: chance always (the minimum effect over a uniform head, at the FDR), and the
  untrained twins' bar ``untrained_p99`` where ``probe label --control untrained:K`` ran them — shown beside
  chance as "twins p99" (:func:`twins_text`), "not run" where the run had no twins (``--control none``, or
  a table from before they were on by default), and one line per table saying which (:func:`controls_line`).

Example
-------
>>> import pandas as pd
>>> row = next(pd.DataFrame({"q_value": [0.0002], "label": [True], "score": [0.9]}).itertuples())
>>> is_labelled(row.label), is_significant(row), format_q(number(row, "q_value"))
(True, True, '< 0.001')
"""

from __future__ import annotations

import math

from probe.heads.tables import is_labelled  # the one rule of "labelled" (the views and the app read it here)

# probe.heads.label.LabelConfig's defaults (a table does not carry its rule's numbers; tests check these)
FDR_LEVEL = 0.05  # fdr: a q-value below it is clearly above chance
MIN_EFFECT = 0.25  # min_effect: mass types need score − chance significantly above it
MIN_ACCURACY_GAIN = 0.1  # min_accuracy_gain: accuracy types need the gain over the best baseline above it


def number(row, column: str) -> float | None:
    """A finite number from a table row (a namedtuple of ``itertuples``), None when the column is missing or
    the cell is NaN or not a number (unknown)."""
    value = getattr(row, column, None)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def twins_ran(table) -> bool:
    """Whether the label table's run had untrained twins: some row has a finite ``untrained_p99`` (a type the
    twins are not run on, retrieval, has NaN even then)."""
    if table is None or "untrained_p99" not in getattr(table, "columns", ()):
        return False
    values = [number(row, "untrained_p99") for row in table.itertuples(index=False)]
    return any(value is not None for value in values)


def twins_text(row, ran: bool) -> str:
    """The twins' bar of a row for reading beside chance: "0.031"; "not run" when the table's run had no
    twins (:func:`twins_ran` False); "not for this type" when it had twins but not on this row's type."""
    bar = number(row, "untrained_p99")
    if bar is not None:
        return f"{bar:.3f}"
    return "not for this type" if ran else "not run"


def controls_line(table) -> str:
    """One line for a label table: the controls its labels beat, and whether the untrained twins ran.

    Examples
    --------
    >>> import pandas as pd
    >>> print(controls_line(pd.DataFrame({"untrained_p99": [float("nan")]})))  # doctest: +ELLIPSIS
    controls a label beat: chance (...); untrained twins: not run (...)
    >>> print(controls_line(pd.DataFrame({"untrained_p99": [0.03]})))  # doctest: +ELLIPSIS
    controls a label beat: chance (...) and the untrained twins (...)
    """
    chance = ("chance (score − chance significantly above the minimum effect at the FDR; coreference: "
              "accuracy above the best baseline's and attention to the antecedent above chance)")
    if twins_ran(table):
        return (f"controls a label beat: {chance} and the untrained twins (its statistic above their 99th "
                "percentile, 'twins p99': random-weight copies of the model on the same probes)")
    return (f"controls a label beat: {chance}; untrained twins: not run (probe label --control untrained:K "
            "adds random-weight copies of the model as a second bar: probe label's default, ≈ 1.2× the run)")


def is_significant(row) -> bool:
    """Clearly above chance: the q-value below :data:`FDR_LEVEL` where the table has one, else the interval's
    low end above chance; True when there is nothing to test against (the score is shown as it is)."""
    q_value = number(row, "q_value")
    if q_value is not None:
        return q_value < FDR_LEVEL
    low, chance = number(row, "ci_low"), number(row, "chance")
    if low is None or chance is None:
        return True
    return low > chance


def format_q(value: float | None) -> str:
    """A q- or p-value for reading: 3 significant digits, '< 0.001' below; 'unknown' for None or NaN."""
    if value is None or not math.isfinite(value):
        return "unknown"
    return "< 0.001" if value < 0.001 else f"{value:.3g}"


def is_grey(row) -> bool:
    """Drawn grey: the head is not labelled (a row without a ``label`` field: not clearly above chance,
    :func:`is_significant`). A row without a score is "no data", not grey."""
    if number(row, "score") is None and number(row, "accuracy") is None:
        return False
    if hasattr(row, "label"):
        return not is_labelled(row.label)
    return not is_significant(row)


def label_reason(row, fdr: float = FDR_LEVEL, min_effect: float = MIN_EFFECT,
                 min_accuracy_gain: float = MIN_ACCURACY_GAIN) -> str:
    """Why a row is not labelled, in one phrase for a hover ("" for a labelled row), checked in this order:
    no score; untestable (NaN q: its examples come from one cluster); below the untrained twins (the score —
    the accuracy for accuracy types — at or below ``untrained_p99``); span types: attention to the targets
    not above chance (``p_above_chance`` decides the combined test); below the minimum effect (the effect
    estimate at or below `min_effect`, or the accuracy gain at or below `min_accuracy_gain`); q above the FDR
    level (`fdr`); selected on the selection half but not replicated on the confirmation half (its
    ``confirm_score`` at or below the twins' bar, or ``confirm_q`` above `fdr`). A row without a ``label``
    field (a table that labels nothing) gets "" when it is clearly above chance, else "not clearly above
    chance"."""
    if not hasattr(row, "label"):
        return "" if is_significant(row) else "not clearly above chance"
    if is_labelled(row.label):
        return ""
    score, accuracy = number(row, "score"), number(row, "accuracy")
    if score is None and accuracy is None:
        return "no score (no probe had a target)"
    statistic, name = (accuracy, "accuracy") if accuracy is not None else (score, "score")
    twins = number(row, "untrained_p99")
    if twins is not None and statistic is not None and statistic <= twins:
        return f"below the untrained twins ({name} {statistic:.3f} ≤ their 99th percentile {twins:.3f})"
    q_value, p_value = number(row, "q_value"), number(row, "p_value")
    if q_value is None:
        return "untestable (its examples come from one bootstrap cluster)"
    above, chance = number(row, "p_above_chance"), number(row, "chance")
    if above is not None and p_value is not None and above >= p_value and q_value > fdr:
        versus = f" ({score:.3f} vs chance {chance:.3f})" if score is not None and chance is not None else ""
        return f"attention to the targets not above chance{versus}"
    effect = number(row, "effect")
    if effect is not None:
        floor, what = (min_accuracy_gain, "accuracy gain over the best baseline") if accuracy is not None \
            else (min_effect, "score − chance")
        if effect <= floor:
            return f"below the minimum effect ({what} {effect:.3f} ≤ {floor:g})"
    if q_value > fdr:
        return f"q {format_q(q_value)} above the FDR {fdr:g} (effect not clearly above the minimum)"
    if is_labelled(getattr(row, "selected", None)) and not is_labelled(getattr(row, "replicated", None)):
        return _not_replicated(row, name, twins, fdr)
    return "not labelled"


def held_out_text(row) -> str:
    """The held-out confirmation of a row as the views show it: the confirmation half's statistic and
    interval ("0.918 [0.894, 0.943]", the accuracy for accuracy types), "… not replicated" for a head
    selected but not reproduced there, "" for a head not selected (nothing to confirm) or a table from
    before the confirmation (docs/labels.md, "Held-out confirmation").

    Examples
    --------
    >>> import pandas as pd
    >>> rows = pd.DataFrame({"selected": [True, True, False], "replicated": [True, False, math.nan],
    ...                      "confirm_score": [0.9184, 0.12, 0.3], "confirm_ci_low": [0.894, 0.05, 0.2],
    ...                      "confirm_ci_high": [0.943, 0.19, 0.4]})
    >>> [held_out_text(row) for row in rows.itertuples()]
    ['0.918 [0.894, 0.943]', '0.120 [0.050, 0.190] not replicated', '']
    """
    if not is_labelled(getattr(row, "selected", None)):
        return ""
    score, low, high = (number(row, name) for name in ("confirm_score", "confirm_ci_low", "confirm_ci_high"))
    text = ("unknown" if score is None else f"{score:.3f}") + (
        "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]")
    return text + ("" if is_labelled(getattr(row, "replicated", None)) else " not replicated")


def _not_replicated(row, name: str, twins: float | None, fdr: float) -> str:
    """"not replicated on the held-out half (score 0.120, q 0.31 above the FDR 0.05)" for a row selected on
    the selection half whose confirmation half did not reproduce it (docs/labels.md, "Held-out
    confirmation")."""
    score, q_value = number(row, "confirm_score"), number(row, "confirm_q")
    shown = f"{name} {score:.3f}, " if score is not None else ""
    if score is not None and twins is not None and score <= twins:
        why = f"at or below the untrained twins' {twins:.3f}"
    elif q_value is None:
        why = "untestable: too few documents"
    else:
        why = f"q {format_q(q_value)} above the FDR {fdr:g}"
    return f"not replicated on the held-out half ({shown}{why})"
