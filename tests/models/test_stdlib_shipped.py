"""The shipped Python-source organism zoo:stdlib-code and its 1-layer control (issue 54): their checkpoints,
the phase change in their shipped history tables, and the ICL score recomputed with plain torch and
transformers from the shipped checkpoints on the held-out text their cards name."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import transformers

from probe import zoo
from probe.labelled import labelled_mask
from probe.runs.formation import formation
from probe.runs.history import read_history
from probe.training import text

TWO, ONE = "stdlib-code", "stdlib-code-1layer"
HISTORY = "history.csv"


def history_of(name: str) -> pd.DataFrame:
    return read_history(zoo.path(name) / HISTORY)


def checkpoint_steps(name: str) -> list[int]:
    return sorted(int(folder.name.split("-", 1)[1]) for folder in zoo.path(name).glob("step-*"))


@pytest.mark.parametrize("name", [TWO, ONE])
def test_the_recipes_checkpoints_are_shipped_and_measured(name):
    config = zoo.card(name)["config"]
    assert checkpoint_steps(name) == list(config["checkpoint_steps"])
    assert len(config["checkpoint_steps"]) >= 8 and config["checkpoint_steps"][-1] == config["steps"]
    table = history_of(name)
    assert sorted(table.loc[table["row"] == "checkpoint", "step"]) == checkpoint_steps(name)
    assert set(table["model"]) == {f"zoo:{name}"}


def test_the_history_shows_the_phase_change():
    """Olsson et al.'s picture: the ICL score drops by >= 0.3 nats across the checkpoints, and the best
    induction score reaches half its last value within one checkpoint of the steepest drop; a layer-0
    previous-token head is labelled at the last checkpoint and a layer-1 induction head at some checkpoint
    (the predicted point), none at step 0."""
    config = zoo.card(TWO)["config"]
    table = history_of(TWO)
    point = formation(table, config["batch"] * config["length"])
    assert point.icl_drop >= 0.3
    assert point.formation_step is not None and point.checkpoints_apart <= 1
    heads = table[table["row"] == "head"]
    last, first = heads[heads["step"] == heads["step"].max()], heads[heads["step"] == 0]
    assert labelled_mask(last.loc[last["layer"] == 0, "previous_token_label"]).any()
    assert labelled_mask(heads.loc[heads["layer"] == 1, "induction_label"]).any()
    assert not labelled_mask(first["previous_token_label"]).any()
    assert not labelled_mask(first["induction_label"]).any()  # negative control: the initial weights


def last_checkpoint_labels(name: str) -> pd.DataFrame:
    from probe.heads.tables import load_table

    return load_table(zoo.labels_path(name))


def test_the_last_checkpoints_heads_beat_their_untrained_twins():
    """labels.csv (the last checkpoint, 3 untrained twins): the best layer-0 previous-token head and the best
    layer-1 induction head score above the twins' 99th percentile; the previous-token head is labelled (the
    twins' own rows are the negative control: none labelled)."""
    table = last_checkpoint_labels(TWO)
    for head_type, layer in (("previous_token", 0), ("induction", 1)):
        rows = table[(table["head_type"] == head_type) & (table["layer"] == layer)]
        best = rows.loc[rows["score"].idxmax()]
        assert best["score"] > 5 * best["untrained_p99"], head_type
    prev = table[(table["head_type"] == "previous_token") & (table["layer"] == 0)]
    assert labelled_mask(prev["label"]).any()


def test_the_last_checkpoint_labels_an_induction_head_on_held_out_code():
    """Issue 54's first line: labels.csv (the final weights) and the history's last checkpoint (its float16
    copy) both label a layer-1 induction head, probed on the held-out modules (the card's label config)."""
    assert zoo.card(TWO)["label_table"]["label_config"]["text"] == text.CODE_HELD_OUT_SPLIT
    table = last_checkpoint_labels(TWO)
    rows = table[(table["head_type"] == "induction") & (table["layer"] == 1)]
    assert labelled_mask(rows["label"]).any()
    heads = history_of(TWO)
    heads = heads[(heads["row"] == "head") & (heads["step"] == heads["step"].max()) & (heads["layer"] == 1)]
    assert labelled_mask(heads["induction_label"]).any()


def test_the_control_never_has_an_induction_head_and_learns_less_in_context():
    control, organism = history_of(ONE), history_of(TWO)
    assert not labelled_mask(control.loc[control["row"] == "head", "induction_label"]).any()
    last = {name: table.loc[(table["row"] == "checkpoint") & (table["step"] == table["step"].max()),
                            "icl_score"].item() for name, table in ((ONE, control), (TWO, organism))}
    assert last[TWO] < last[ONE] - 0.1  # the second layer's induction heads: a lower ICL score


def plain_icl_scores(name: str) -> dict[int, float]:
    """Per checkpoint: loss at token 120 minus loss at token 12 of every held-out passage of >= 120 tokens,
    with transformers' model and tokenizer and torch's cross-entropy (nothing of probe's measurement code)."""
    held_out = text.held_out_split(zoo.card(name)["config"]["corpus_split"])
    passages = text.code_passages(held_out)
    scores = {}
    for step in checkpoint_steps(name):
        folder = zoo.path(name) / f"step-{step}"
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        ids = tokenizer(passages, add_special_tokens=False)["input_ids"]
        rows = torch.tensor([[tokenizer.bos_token_id, *row[:120]] for row in ids if len(row) >= 120])
        with torch.no_grad():
            logits = model(input_ids=rows[:, :-1]).logits  # [row position vocab]
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), rows[:, 1:],
                                                   reduction="none")  # [row position]
        scores[step] = float(losses[:, 119].mean() - losses[:, 11].mean())
    return scores


@pytest.mark.parametrize("name", [TWO, pytest.param(ONE, marks=pytest.mark.slow)])
def test_icl_score_recomputed_with_plain_torch_equals_the_table(name):
    table = history_of(name)
    shipped = table[table["row"] == "checkpoint"].set_index("step")
    assert set(shipped["icl_early"]) == {12} and set(shipped["icl_late"]) == {120}
    for step, score in plain_icl_scores(name).items():
        assert abs(score - shipped.loc[step, "icl_score"]) < 0.05, step


@pytest.mark.slow
@pytest.mark.parametrize("name", [TWO, ONE])
def test_the_shipped_history_is_what_probe_history_measures_now(name, tmp_path):
    """history.csv equals `probe history --model zoo:NAME` run now (on its card's held-out text): exact on
    names, steps and labels, allclose on numbers. When it fails, the measurement or the weights changed:
    rerun the command and ship its table."""
    import numpy as np

    from probe.runs.history import history

    keys = ["step", "row", "layer", "head", "position"]
    fresh = history(f"zoo:{name}", progress=False).table.sort_values(keys).reset_index(drop=True)
    shipped = history_of(name).sort_values(keys).reset_index(drop=True)
    assert list(fresh.columns) == list(shipped.columns) and len(fresh) == len(shipped)
    for column in shipped.columns:
        left, right = shipped[column], fresh[column]
        if pd.api.types.is_float_dtype(right):
            same = np.allclose(left.astype(float), right.astype(float), rtol=1e-5, atol=1e-6, equal_nan=True)
            assert same, column
        else:
            pd.testing.assert_series_equal(left, right, check_dtype=False, obj=column)
