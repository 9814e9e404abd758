"""How a label table is read, in one place for every view: the app's atlas and grid, the labelled-heads table,
notebook views and the report.

* a cell is a number only when it is finite (:func:`number`: NaN, a missing column, text are unknown);
* a head is *labelled* when its ``label`` cell says so (:func:`is_labelled`);
* a head is *clearly above chance* when its q-value is below the FDR level, else (a table without q-values)
  when its interval's low end is above chance (:func:`is_significant`);
* a q- or p-value reads with 3 significant digits, ``< 0.001`` below that and ``unknown`` for NaN
  (:func:`format_q`).

Example
-------
>>> import pandas as pd
>>> row = next(pd.DataFrame({"q_value": [0.0002], "label": [True], "score": [0.9]}).itertuples())
>>> is_labelled(row.label), is_significant(row), format_q(number(row, "q_value"))
(True, True, '< 0.001')
"""

from __future__ import annotations

import math

FDR_LEVEL = 0.05  # probe.heads.label.LabelConfig's default fdr: a q-value below it is clearly above chance


def number(row, column: str) -> float | None:
    """A finite number from a table row (a namedtuple of ``itertuples``), None when the column is missing or
    the cell is NaN or not a number (unknown)."""
    value = getattr(row, column, None)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def is_labelled(value) -> bool:
    """The ``label`` column's value as a bool (NaN, "", "none", "false", "0", "unlabelled", "-" are not
    labelled)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip().lower() not in ("", "none", "nan", "false", "0", "unlabelled", "-")


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
