"""The one rule of "this head is labelled": a label table's ``label`` (``selected``, ``replicated``) cell
read as yes or no. At the base, so that the zoo's catalogue (its organisms' requirements) and every layer
above read the same rule; :mod:`probe.heads.tables` re-exports it beside the table it reads.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

# a label, selected or replicated cell that says "no" (compared lower-cased, stripped); other text says yes
# (an older table's label held the head type's name)
NOT_LABELLED = ("", "none", "nan", "<na>", "false", "0", "0.0", "no", "unlabelled", "-")


def is_labelled(value) -> bool:
    """Whether a label table's ``label`` cell (or ``selected`` / ``replicated``) says yes: the one rule of
    "this head is labelled", for the label pipeline, the circuits, the cards, the views and the app.

    A bool is itself; a missing cell (None, NaN, ``pd.NA``: unknown) is not labelled, never True; a number
    is labelled when it is not 0; text unless it is one of :data:`NOT_LABELLED` ("True" from a csv is, "false"
    and "unlabelled" are not).

    Parameters
    ----------
    value : object
        One cell.

    Returns
    -------
    bool

    Examples
    --------
    >>> [is_labelled(v) for v in (True, "True", "induction", 1.0)]
    [True, True, True, True]
    >>> [is_labelled(v) for v in (False, "false", float("nan"), None, pd.NA, 0.0, "unlabelled")]
    [False, False, False, False, False, False, False]
    """
    if value is None or value is pd.NA:
        return False
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Number):
        return bool(value == value and value != 0)  # NaN: unknown, not labelled
    return str(value).strip().lower() not in NOT_LABELLED


def labelled_mask(column: pd.Series) -> pd.Series:
    """:func:`is_labelled` of every cell of `column`: a bool Series on its index (unknown cells False, where
    ``astype(bool)`` would make NaN True).

    Parameters
    ----------
    column : pandas.Series, shape=(row,)
        A ``label`` (``selected``, ``replicated``) column.

    Returns
    -------
    pandas.Series of bool, shape=(row,)

    Examples
    --------
    >>> labelled_mask(pd.Series([True, False, float("nan"), "True"])).tolist()
    [True, False, False, True]
    """
    return pd.Series([is_labelled(value) for value in column], index=column.index, dtype=bool)


__all__ = ["NOT_LABELLED", "is_labelled", "labelled_mask"]
