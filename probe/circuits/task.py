"""A researcher's own task for circuit search: clean / corrupted prompt pairs, a correct and an incorrect
answer each, and a metric read at the last position.

A :class:`Task` holds token ids (texts are tokenized once, by :func:`make_task` or :func:`load_task`); the
clean and corrupted prompts of a pair have the same number of tokens, so every position of the clean run has a
counterpart, and each answer is one token. Metrics (per pair, at the last position; :func:`metric_values`):

* ``logit_diff``: logit(correct) − logit(incorrect);
* ``prob``: p(correct);
* ``kl``: KL(p_clean ‖ p_run) of the next-token distributions (0 on the clean run itself);
* ``loss``: −log p(correct) (cross-entropy of the correct answer).

A task's value is the mean over pairs. :func:`repeat_task` builds the induction organisms' task: a block of
random tokens repeated, the first copy resampled in the corrupted prompt.

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> _, tokenizer = build_tiny("llama")
>>> task = make_task(tokenizer, ["the cat went to the"], ["the dog went to the"], ["garden"], ["house"])
>>> len(task), task.metric, len(task.clean[0]) == len(task.corrupted[0])
(1, 'logit_diff', True)
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from probe.errors import ProbeError
from probe.heads.probesets.probe_file import json_objects, read_text

METRICS = ("logit_diff", "prob", "kl", "loss")
COLUMNS = ("clean", "corrupted", "correct", "incorrect")


@dataclass(frozen=True)
class Task:
    """Clean / corrupted prompt pairs with a correct and an incorrect answer each, and the metric.

    Attributes
    ----------
    clean, corrupted : tuple of tuple of int
        Token ids per pair (the same length within a pair).
    correct, incorrect : tuple of int
        The answer token per pair.
    metric : str
        One of :data:`METRICS`.
    corruption : str
        What the corrupted prompts change (stated in every table of scores).
    """

    clean: tuple[tuple[int, ...], ...]
    corrupted: tuple[tuple[int, ...], ...]
    correct: tuple[int, ...]
    incorrect: tuple[int, ...]
    metric: str = "logit_diff"
    corruption: str = "as given"

    def __post_init__(self) -> None:
        check_metric(self.metric)
        sizes = {len(self.clean), len(self.corrupted), len(self.correct), len(self.incorrect)}
        if len(sizes) != 1 or not self.clean:
            raise ProbeError("a task needs the same number (≥ 1) of clean prompts, corrupted prompts, "
                             "correct and incorrect answers")
        for index, (clean, corrupted) in enumerate(zip(self.clean, self.corrupted, strict=True)):
            if len(clean) != len(corrupted) or not clean:
                raise ProbeError(f"pair {index + 1}: clean has {len(clean)} tokens, corrupted "
                                 f"{len(corrupted)}: make them the same length (≥ 1)")

    def __len__(self) -> int:
        return len(self.clean)

    def batches(self, device=None) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(clean ids, corrupted ids, correct, incorrect) per group of pairs of one length: `[batch seq]`,
        `[batch seq]`, `[batch]`, `[batch]` (no padding needed)."""
        groups: dict[int, list[int]] = {}
        for index, ids in enumerate(self.clean):
            groups.setdefault(len(ids), []).append(index)
        for rows in groups.values():
            yield (torch.tensor([self.clean[row] for row in rows], device=device),
                   torch.tensor([self.corrupted[row] for row in rows], device=device),
                   torch.tensor([self.correct[row] for row in rows], device=device),
                   torch.tensor([self.incorrect[row] for row in rows], device=device))


def check_metric(metric: str) -> str:
    """`metric` if it is one of :data:`METRICS`, else a ProbeError naming them."""
    if metric not in METRICS:
        raise ProbeError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    return metric


def metric_values(metric: str, logits: torch.Tensor, correct: torch.Tensor, incorrect: torch.Tensor,
                  clean_logits: torch.Tensor | None = None) -> torch.Tensor:
    """The metric per pair from the last position's logits.

    Parameters
    ----------
    metric : str
        One of :data:`METRICS`.
    logits : torch.Tensor
        `[batch vocab]`: the run's logits at the last position.
    correct, incorrect : torch.Tensor
        `[batch]` answer token ids.
    clean_logits : torch.Tensor, optional
        `[batch vocab]`: the clean run's (needed for ``kl``).

    Returns
    -------
    torch.Tensor
        `[batch]` float.

    Examples
    --------
    >>> logits = torch.tensor([[0.0, 2.0, 1.0]])
    >>> metric_values("logit_diff", logits, torch.tensor([1]), torch.tensor([2])).tolist()
    [1.0]
    >>> float(metric_values("kl", logits, torch.tensor([1]), torch.tensor([2]), clean_logits=logits))
    0.0
    """
    check_metric(metric)
    rows = torch.arange(len(logits), device=logits.device)
    if metric == "logit_diff":
        return logits[rows, correct] - logits[rows, incorrect]
    work = torch.promote_types(logits.dtype, torch.float32)
    logp = torch.log_softmax(logits.to(work), -1)  # [batch vocab]
    if metric == "prob":
        return logp[rows, correct].exp()
    if metric == "loss":
        return -logp[rows, correct]
    if clean_logits is None:
        raise ProbeError("metric kl needs the clean run's logits")
    clean = torch.log_softmax(clean_logits.to(work), -1)  # [batch vocab]
    return (clean.exp() * (clean - logp)).sum(-1)


def answer_token(tokenizer, value, what: str) -> int:
    """One token id from an answer: an id (an int, a one-element tensor, or digits when there is no
    tokenizer, as a CSV cell gives it) or a string the tokenizer reads as exactly one token; anything else is
    one line naming `what` (the task's and the attribution's answers: one rule)."""
    if isinstance(value, (int, torch.Tensor)) or (isinstance(value, str) and value.strip().isdigit()
                                                   and tokenizer is None):
        return int(value)
    if tokenizer is None:
        raise ProbeError(f"{what} {value!r} is text: give a tokenizer, or its token id")
    ids = tokenizer(str(value), add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ProbeError(f"{what} {value!r} is {len(ids)} tokens, not one: give an answer that is a single "
                         "token (often with its leading space) or its token id")
    return int(ids[0])


def _prompt(tokenizer, value) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(int(item) for item in value)
    if tokenizer is None:
        raise ProbeError(f"prompt {value!r} is text: give a tokenizer, or token ids")
    return tuple(int(item) for item in tokenizer(str(value))["input_ids"])


def make_task(tokenizer, clean: Sequence, corrupted: Sequence, correct: Sequence, incorrect: Sequence,
              metric: str = "logit_diff", corruption: str = "as given", first_row: int = 1) -> Task:
    """A :class:`Task` from texts (tokenized with `tokenizer`, its special tokens added) or token id lists.

    Parameters
    ----------
    tokenizer : transformers tokenizer or None
        None: every prompt and answer is already token ids.
    clean, corrupted : sequence of str or of sequence of int
        The prompts, pair by pair.
    correct, incorrect : sequence of str or int
        One answer each: a string that is one token, or a token id.
    metric : str, default "logit_diff"
        One of :data:`METRICS`.
    corruption : str, default "as given"
        What the corruption changes, for the tables.
    first_row : int, default 1
        The number the first pair has in messages (a file's row number).

    Returns
    -------
    Task

    Examples
    --------
    >>> task = make_task(None, [[2, 5, 6]], [[2, 7, 6]], [5], [7])
    >>> task.clean, task.correct
    (((2, 5, 6),), (5,))
    """
    check_metric(metric)
    rows = []
    for index, values in enumerate(zip(clean, corrupted, correct, incorrect, strict=True)):
        try:
            a, b = _prompt(tokenizer, values[0]), _prompt(tokenizer, values[1])
            good = answer_token(tokenizer, values[2], "correct")
            bad = answer_token(tokenizer, values[3], "incorrect")
        except ProbeError as error:
            raise ProbeError(f"row {first_row + index}: {error}") from None
        if len(a) != len(b):
            raise ProbeError(f"row {first_row + index}: clean is {len(a)} tokens, corrupted {len(b)}: make "
                             "them the same length")
        rows.append((a, b, good, bad))
    if not rows:
        raise ProbeError("the task has no pairs")
    return Task(*(tuple(column) for column in zip(*rows, strict=True)), metric=metric, corruption=corruption)


def load_task(path: str | Path, tokenizer=None, metric: str = "logit_diff",
              corruption: str | None = None) -> Task:
    """Read a task from CSV or JSONL (columns ``clean``, ``corrupted``, ``correct``, ``incorrect``; an
    optional ``corruption`` column describes it). Prompts: texts, or (JSONL) lists of token ids; answers:
    one-token strings or token ids.

    Parameters
    ----------
    path : str or Path
        A ``.csv`` or ``.jsonl`` file.
    tokenizer : transformers tokenizer, optional
        Needed where the file has texts.
    metric : str, default "logit_diff"
        One of :data:`METRICS` (checked before the file is read).
    corruption : str, optional
        Overrides the file's description.

    Returns
    -------
    Task

    Raises
    ------
    ProbeError
        Unknown metric, unreadable file, a missing column, or a bad row (its number, counting the header of a
        CSV as row 1 and the first JSONL line as row 1).

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "task.jsonl")
    >>> row = '{"clean": [2, 5, 6], "corrupted": [2, 7, 6], "correct": 5, "incorrect": 7}'
    >>> _ = open(path, "w").write(row + "\\n")
    >>> load_task(path).clean
    ((2, 5, 6),)
    """
    check_metric(metric)
    path = Path(path)
    if path.suffix not in (".csv", ".jsonl"):
        raise ProbeError(f"task file {path} is not .csv or .jsonl")
    text = read_text(path, "task file")
    if path.suffix == ".csv":
        records = list(csv.DictReader(text.splitlines()))
        first = 2
    else:
        records = [record for _, record in json_objects(text, path, COLUMNS, unit="row")]
        first = 1
    for number, record in enumerate(records, first):
        missing = [column for column in COLUMNS if record.get(column) in (None, "")]
        if missing:
            raise ProbeError(f"{path} row {number}: no {', '.join(missing)} (columns: {', '.join(COLUMNS)})")
    if not records:
        raise ProbeError(f"task file {path} has no rows")
    given = [str(record["corruption"]) for record in records if record.get("corruption")]
    described = corruption or (given[0] if given else f"as given in {path.name}")
    try:
        return make_task(tokenizer, *([record[column] for record in records] for column in COLUMNS),
                         metric=metric, corruption=described, first_row=first)
    except ProbeError as error:
        raise ProbeError(f"{path} {error}") from None


def repeat_task(tokenizer, pairs: int = 16, block: int = 12, seed: int = 0, metric: str = "logit_diff",
                bos: int | None = None) -> Task:
    """The induction task: clean = BOS + a block of random tokens + the block again but its last token; the
    correct answer is that last token (what an induction head predicts), the incorrect one another token of
    the block's vocabulary; corrupted = the first copy resampled (each token differs from the one it
    replaces), the second copy kept.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        Its non-special ids are drawn; its BOS (if any) starts each prompt.
    pairs, block, seed : int
        Number of pairs, block length, the generator's seed.
    metric : str, default "logit_diff"
    bos : int, optional
        Overrides the tokenizer's BOS id.

    Returns
    -------
    Task

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> task = repeat_task(build_tiny("llama")[1], pairs=2, block=4)
    >>> len(task.clean[0]), task.clean[0][1:4] == task.clean[0][5:8], task.corruption
    (8, True, 'the first copy of the repeated block resampled')
    """
    if pairs < 1 or block < 2:
        raise ProbeError("repeat_task needs pairs ≥ 1 and block ≥ 2")
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    vocab = torch.tensor([index for index in range(len(tokenizer)) if index not in special])
    if len(vocab) < block + 2:
        raise ProbeError(f"the tokenizer has {len(vocab)} ordinary tokens: too few for blocks of {block}")
    bos = bos if bos is not None else getattr(tokenizer, "bos_token_id", None)
    head = () if bos is None else (int(bos),)
    generator = torch.Generator().manual_seed(seed)
    clean, corrupted, correct, incorrect = [], [], [], []
    for _ in range(pairs):
        drawn = vocab[torch.randperm(len(vocab), generator=generator)[:block + 1]].tolist()
        tokens, other = drawn[:block], drawn[block]
        fresh = vocab[torch.randint(len(vocab), (block,), generator=generator)].tolist()
        fresh = [token if token != old else int(vocab[(vocab == token).nonzero()[0, 0] - 1])
                 for token, old in zip(fresh, tokens, strict=True)]
        clean.append((*head, *tokens, *tokens[:-1]))
        corrupted.append((*head, *fresh, *tokens[:-1]))
        correct.append(tokens[-1])
        incorrect.append(other)
    return Task(tuple(clean), tuple(corrupted), tuple(correct), tuple(incorrect), metric=metric,
                corruption="the first copy of the repeated block resampled")


__all__ = ["COLUMNS", "METRICS", "Task", "answer_token", "check_metric", "load_task", "make_task",
           "metric_values", "repeat_task"]
