"""Tasks (probe.circuits.task): files read, bad rows refused with their number, metrics as defined."""

from __future__ import annotations

import json

import pytest
import torch

from probe.circuits.task import Task, load_task, make_task, metric_values, repeat_task
from probe.errors import ProbeError
from probe.zoo.tiny import build_tiny


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny("llama")[1]


def _write_csv(path, rows):
    lines = ["clean,corrupted,correct,incorrect"] + [",".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_csv_and_jsonl_give_the_same_task(tmp_path, tokenizer):
    rows = [("the cat went to the", "the dog went to the", "garden", "house"),
            ("mary gave the book to", "john gave the book to", "john", "mary")]
    from_csv = load_task(_write_csv(tmp_path / "task.csv", rows), tokenizer, metric="prob")
    jsonl = tmp_path / "task.jsonl"
    jsonl.write_text("".join(json.dumps(dict(zip(("clean", "corrupted", "correct", "incorrect"), row,
                                                 strict=True))) + "\n" for row in rows), encoding="utf-8")
    from_jsonl = load_task(jsonl, tokenizer, metric="prob")
    assert from_csv.clean == from_jsonl.clean and from_csv.correct == from_jsonl.correct
    assert from_csv.correct[0] == tokenizer("garden", add_special_tokens=False)["input_ids"][0]
    assert from_csv.clean[0] == tuple(tokenizer("the cat went to the")["input_ids"])
    assert from_csv.metric == "prob" and from_csv.corruption == "as given in task.csv"
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"clean": [2, 5, 6], "corrupted": [2, 7, 6], "correct": 5, "incorrect": 7, '
                   '"corruption": "second token swapped"}\n', encoding="utf-8")
    task = load_task(ids)
    assert task.clean == ((2, 5, 6),) and task.incorrect == (7,) and task.corruption == "second token swapped"


def test_bad_rows_are_refused_with_their_number(tmp_path, tokenizer):
    good = ("the cat went to the", "the dog went to the", "garden", "house")
    short = ("the cat went to the", "the dog went", "garden", "house")
    path = _write_csv(tmp_path / "short.csv", [good, short])
    with pytest.raises(ProbeError, match=r"row 3: clean is \d+ tokens, corrupted \d+: make them the same"):
        load_task(path, tokenizer)
    path = _write_csv(tmp_path / "answer.csv", [good, ("the cat went to the", "the dog went to the",
                                                        "the garden", "house")])
    with pytest.raises(ProbeError, match="row 3: correct 'the garden' is 2 tokens, not one"):
        load_task(path, tokenizer)
    path = tmp_path / "missing.csv"
    path.write_text("clean,corrupted,correct,incorrect\nthe cat,the dog,cat,\n", encoding="utf-8")
    with pytest.raises(ProbeError, match="row 2: no incorrect"):
        load_task(path, tokenizer)
    path = tmp_path / "bad.jsonl"
    path.write_text('{"clean": [1, 2], "corrupted": [1, 3], "correct": 2, "incorrect": 3}\n{oops\n')
    with pytest.raises(ProbeError, match="row 2: not valid JSON"):
        load_task(path)
    with pytest.raises(ProbeError, match="unknown metric 'acc'"):
        load_task(path, metric="acc")
    with pytest.raises(ProbeError, match=r"is not \.csv or \.jsonl"):
        load_task(tmp_path / "task.txt")
    with pytest.raises(ProbeError, match="row 1: clean is 2 tokens, corrupted 3"):
        make_task(None, [[1, 2]], [[1, 2, 3]], [2], [3])
    with pytest.raises(ProbeError, match="pair 1: clean has 2 tokens, corrupted 3"):
        Task(((1, 2),), ((1, 2, 3),), (2,), (3,))


def test_metrics_by_their_definitions():
    logits = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.5]])
    clean = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.5]])
    correct, incorrect = torch.tensor([1, 0]), torch.tensor([2, 2])
    logp = torch.log_softmax(logits, -1)
    assert metric_values("logit_diff", logits, correct, incorrect).tolist() == [3.0, 1.5]
    assert torch.allclose(metric_values("prob", logits, correct, incorrect), logp[[0, 1], [1, 0]].exp())
    assert torch.allclose(metric_values("loss", logits, correct, incorrect), -logp[[0, 1], [1, 0]])
    kl = metric_values("kl", logits, correct, incorrect, clean_logits=clean)
    expected = (torch.full((3,), 1 / 3) * (torch.full((3,), 1 / 3).log() - logp[0])).sum()
    assert torch.allclose(kl[0], expected) and kl[1].abs() < 1e-7 and kl[0] > 0.1
    with pytest.raises(ProbeError, match="needs the clean run"):
        metric_values("kl", logits, correct, incorrect)


def test_repeat_task_is_the_induction_task(tokenizer):
    task = repeat_task(tokenizer, pairs=4, block=6, seed=2)
    for clean, corrupted, correct, incorrect in zip(task.clean, task.corrupted, task.correct, task.incorrect,
                                                    strict=True):
        first, second = clean[1:7], clean[7:]
        assert second == first[:-1] and correct == first[-1] and incorrect not in first
        assert corrupted[7:] == second and all(a != b for a, b in zip(corrupted[1:7], first, strict=True))
    assert repeat_task(tokenizer, pairs=4, block=6, seed=2) == task
