"""`probe circuit --task FILE`: bad input answers in one line before torch; on zoo:induction with its
repeated-block task it prints the top edges (L0H1 into the induction heads' keys among them), the
faithfulness curve and the circuit, and writes every edge with --out."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from probe.cli import main
from tests.commands.test_cli_fast import heavy_after


@pytest.mark.parametrize("argv, message", [
    (["circuit", "--model", "zoo:induction"], "give one of --type TYPE"),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--task", "t.csv"], "give one of --type"),
    (["circuit", "--model", "zoo:induction", "--task", "/no/such.csv"], "--task /no/such.csv: give a CSV"),
    (["circuit", "--model", "zoo:induction", "--task", "/no/such.csv", "--metric", "acc"], "invalid choice"),
])
def test_bad_task_input_answers_without_torch(argv, message):
    found = heavy_after(f"from probe.cli import main\ncode = main({argv!r})")
    assert found["heavy"] == [], f"probe {' '.join(argv)} imported {found['heavy']}"
    assert message in found["err"]


@pytest.mark.slow
def test_circuit_task_on_the_induction_organism(tmp_path, capsys):
    import probe
    from probe.circuits.task import repeat_task

    task = repeat_task(probe.load("zoo:induction").tokenizer, pairs=6, block=10, seed=3)
    path = tmp_path / "task.jsonl"
    path.write_text("".join(json.dumps({"clean": list(clean), "corrupted": list(bad), "correct": good,
                                        "incorrect": wrong, "corruption": task.corruption}) + "\n"
                            for clean, bad, good, wrong in zip(task.clean, task.corrupted, task.correct,
                                                               task.incorrect, strict=True)))
    out = tmp_path / "edges.csv"
    assert main(["circuit", "--model", "zoo:induction", "--task", str(path), "--method", "eap",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "110 edges by eap on logit_diff; corruption: the first copy of the repeated block resampled" \
        in printed.out
    assert "circuit: the top" in printed.out and "wrote" in printed.err
    table = pd.read_csv(out)
    assert len(table) == 110 and set(table["input"]) == {"q", "k", "v", "mlp", "logits"}
    keys = table[(table["input"] == "k") & (table["receiver_layer"] == 1)]
    top = keys.loc[keys.groupby("receiver")["score"].apply(lambda s: s.abs().idxmax())]
    assert set(top["sender"]) == {"L0H1"}
    assert table["in_circuit"].sum() >= 1


def test_task_types_are_the_librarys():
    """--task TYPE's list, written out so that checking needs no torch, is the library's CORRUPTIONS."""
    from probe.circuits.corruption import CORRUPTIONS
    from probe.commands.circuit_task import TASK_TYPES

    assert TASK_TYPES == tuple(CORRUPTIONS)


@pytest.mark.parametrize("argv, message", [
    (["circuit", "--model", "zoo:induction", "--task", "first_token"],
     "--task first_token: first_token has no corruption to pair its probes with; --task TYPE takes "
     "induction, duplicate_token, previous_token, coreference"),
    (["circuit", "--model", "zoo:induction", "--task", "inducton"],
     "--task inducton: give a CSV/JSONL file, or a head type with paired probes (induction,"),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--control", "untrained:2"],
     "--control applies to --task; --type induction's circuit has its own controls (--controls N random "
     "sender-receiver pairs): drop --control"),
])
def test_task_type_refusals_answer_without_torch(argv, message):
    found = heavy_after(f"from probe.cli import main\ncode = main({argv!r})\nassert code == 2, code")
    assert found["heavy"] == [], f"probe {' '.join(argv)} imported {found['heavy']}"
    assert message in found["err"]


@pytest.mark.slow
def test_circuit_task_type_on_the_induction_organism(capsys):
    """--task induction: the type's own probes and loss; exit 0, the edges, the curve, the direct logit
    attribution with the induction heads first."""
    assert main(["circuit", "--model", "zoo:induction", "--task", "induction", "--examples", "4",
                 "--method", "eap", "--control", "none"]) == 0
    printed = capsys.readouterr()
    assert "edges by eap on loss; corruption: induction: the first copy's tokens resampled" in printed.out
    assert "induction's paired probes:" in printed.err
    lines = printed.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("direct logit attribution"))
    assert {line.split()[0] for line in lines[start + 1:start + 5]} == {"L1H0", "L1H1", "L1H2", "L1H3"}
    assert lines[start + 9].startswith("logit lens:")
