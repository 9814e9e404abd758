"""A head type's own paired probes as a :class:`~probe.circuits.task.Task` (``probe circuit --task TYPE``).

:func:`~probe.circuits.corruption.corrupted_pairs` gives a type's clean probes with its loss labels (the
positions its ablation measures: every position of the second copy for induction, every content token for
previous-token heads, …) and their corrupted twins. A Task reads its metric at the last position, so each
measured position becomes one row: for a clean probe x, corrupted probe x′ and a measured position t (the
model predicts x_t from x_0 … x_{t−1}),

* clean = x_0 … x_{t−1}, corrupted = x′_0 … x′_{t−1} (the same length);
* correct = x_t (the type's loss label there);
* incorrect = x′_t, the corrupted prompt's own next token, where it differs from x_t; otherwise (a corruption
  that keeps the answer's position, such as induction's: the second copy is kept) the token the corruption
  put at the answer's latest earlier occurrence — for induction, the resampled first-copy token the
  induction head would have copied from. A row with neither is dropped under ``logit_diff`` (the note
  counts them) and kept, with incorrect = correct, unused, under the other metrics.

Each distinct prompt length is one batch of every edge search and curve point, so by default the rows are
kept only at the 4 measured positions that most probes share (``positions``; None keeps every one). With
``metric="loss"`` (the default) and every position kept, the task's clean value (the mean over rows) is the
type's own loss on its clean probes — the token mean of the cross-entropy at the measured positions, what
``probe circuit --type`` patches. Causal LMs only (the rows are prefixes; a masked LM's loss reads masked
positions).

Example
-------
>>> import probe
>>> loaded = probe.models.load("zoo:induction")
>>> task = type_task(loaded, "induction", examples=2, positions=None)  # 25 + 24 measured positions
>>> len(task), task.corruption
(49, "induction: the first copy's tokens resampled")
>>> len(type_task(loaded, "induction", examples=2)), task.metric  # 4 lengths, 2 probes each
(8, 'loss')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from probe.circuits.corruption import CORRUPTIONS, corrupted_pairs
from probe.circuits.task import Task, check_metric
from probe.errors import ProbeError
from probe.heads.label.config import LabelConfig
from probe.models import ModelKind


def _incorrect(clean: list[int], corrupted: list[int], t: int) -> int | None:
    """The row's incorrect answer at measured position t (module doc); None where there is none."""
    answer = clean[t]
    if corrupted[t] != answer:
        return corrupted[t]
    for earlier in range(t - 1, -1, -1):
        if clean[earlier] == answer and corrupted[earlier] != answer:
            return corrupted[earlier]
    return None


def type_task(loaded, head_type: str, examples: int = 16, metric: str = "loss", seed: int = 0,
              positions: int | None = 4, note: Callable[[str], None] | None = None) -> Task:
    """A head type's own paired probes as a Task: one row per measured position of each of `examples`
    clean / corrupted probes (module doc).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A causal LM with a trained LM head.
    head_type : str
        A type with a corruption (:data:`probe.circuits.corruption.CORRUPTIONS`).
    examples : int, default 16
        Paired probes (each gives one row per measured position).
    metric : str, default "loss"
        One of :data:`probe.circuits.task.METRICS`; ``loss`` is the type's own loss (what
        ``probe circuit --type`` patches).
    seed : int, default 0
        The probe sets' and the corruption's seed (``probe circuit --type``'s probes with the same seed).
    positions : int or None, default 4
        Rows only at the `positions` measured positions that most probes share (ties: the later), so that the
        rows fall into that many lengths, each one batch of every edge search and curve point; None: every
        measured position (the type's loss exactly, at one batch per distinct length).
    note : callable, optional
        Told what was dropped (and the probe sources' notes).

    Returns
    -------
    Task
        ``corruption``: "{type}: {what the corruption changes}".

    Raises
    ------
    ProbeError
        A type without a corruption (naming those with one), a model that is not a causal LM, or no pairs
        (the reason :func:`corrupted_pairs` gives).

    Examples
    --------
    >>> import probe
    >>> task = type_task(probe.models.load("zoo:induction"), "induction", examples=1, metric="loss")
    >>> task.metric, len(task.clean[0]) == len(task.corrupted[0])
    ('loss', True)
    """
    check_metric(metric)
    if positions is not None and positions < 1:
        raise ProbeError("positions must be at least 1 (or None: every measured position)")
    if head_type not in CORRUPTIONS:
        raise ProbeError(f"{head_type} has no corruption to pair its probes with: --task TYPE takes "
                         f"{', '.join(CORRUPTIONS)}, or give a task file")
    if loaded.kind != ModelKind.CAUSAL_LM:
        raise ProbeError(f"{loaded.name} is not a causal LM: a task's metric reads the next token at the "
                         "last position; give a decoder-only model")
    pairs = corrupted_pairs(loaded, head_type, LabelConfig(seed=seed), examples, note=note)
    if not pairs.batches:
        raise ProbeError(f"{head_type} on {loaded.name}: {pairs.note}")
    rows, dropped = [], 0
    for batch in pairs.batches:
        labels = batch.clean["labels"].tolist()  # [batch seq]
        mask = batch.clean.get("attention_mask")
        for row, (clean, corrupted) in enumerate(zip(batch.clean["input_ids"].tolist(),
                                                     batch.corrupted["input_ids"].tolist(), strict=True)):
            length = len(clean) if mask is None else int(mask[row].sum())
            for t in range(1, length):
                if labels[row][t] == -100:
                    continue
                wrong = _incorrect(clean, corrupted, t)
                if wrong is None and metric == "logit_diff":
                    dropped += 1
                    continue
                rows.append((tuple(clean[:t]), tuple(corrupted[:t]), clean[t],
                             clean[t] if wrong is None else wrong))
    if positions is not None:
        counts = Counter(len(row[0]) for row in rows)
        kept = set(sorted(counts, key=lambda length: (counts[length], length))[-positions:])
        rows = [row for row in rows if len(row[0]) in kept]
    if dropped and note is not None:
        note(f"{dropped} measured positions have no incorrect answer (the corruption changes neither the "
             "next token nor an earlier copy of it): dropped under logit_diff")
    if not rows:
        raise ProbeError(f"{head_type} on {loaded.name}: no measured position has an incorrect answer; use "
                         "--metric loss, prob or kl")
    return Task(*(tuple(column) for column in zip(*rows, strict=True)), metric=metric,
                corruption=f"{head_type}: {pairs.corruption}")


__all__ = ["type_task"]
