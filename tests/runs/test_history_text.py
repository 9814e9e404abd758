"""Which text a history is measured on (issue 54): the split held out from the text the model's card says it
was trained on (probe.runs.history_inputs.held_out_text), resolved once before anything is measured, so a
model trained on Python source is measured on held-out Python source, not on English; an explicit split wins;
a card that cannot be read is one line naming --text.

The run here is 6 steps of the natural-text recipe at width 32 trained on the standard library's source
(``--set corpus_split=stdlib``, ~3 s): its card.json is the one `probe train` writes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from probe.errors import ProbeError
from probe.heads.label import LabelConfig
from probe.runs.checkpoints import make_checkpoint
from probe.runs.history import HEAD_TYPES, HistoryConfig, history, history_identity
from probe.runs.history_inputs import TEXT_SPLITS, TRAINED_SPLITS, card_corpus, held_out_text
from probe.training import incontext, text

TINY = {"n_embd": 32, "n_head": 2, "steps": 6, "batch": 4, "warmup": 2, "checkpoints": 0,
        "corpus_split": text.CODE_SPLIT}
PASSAGES = 8
CONFIG = HistoryConfig(label=LabelConfig(types=HEAD_TYPES, ablate="none", examples=8, n_bootstrap=100),
                       max_passages=PASSAGES)
FLAGS = ["--examples", "8", "--bootstrap", "100", "--passages", str(PASSAGES)]  # = CONFIG


@pytest.fixture(scope="module")
def code_run(tmp_path_factory) -> Path:
    """6 steps of the natural-text recipe on Python source, checkpoints after 0 and 6 steps."""
    from probe.training.train import train

    out = tmp_path_factory.mktemp("code-run") / "run"
    train("natural-text", 0, out, overrides=TINY, label=False, checkpoint_steps=(0, 6))
    return out


def checkpoints(run: Path) -> list:
    return [make_checkpoint(str(run), name) for name in ("step-0", "step-6")]


def copied(run: Path, tmp_path: Path) -> Path:
    """A copy of the run to plant cards in (the module's run stays as trained)."""
    return Path(shutil.copytree(run, tmp_path / "run"))


def held_out_loss(run: Path, split: str) -> float:
    """The mean loss over tokens 1 … 120 of the first PASSAGES passages of `split` at step-6, by hand."""
    from probe import models

    loaded = models.load(str(run / "step-6"))
    rows = text.held_out_rows(loaded.tokenizer, incontext.ICL_LATE, split, PASSAGES)  # [row position]
    return float(incontext.position_losses(loaded.model, rows, 64).mean())


# ------------------------------------------------------------------------------------------------------------
# The card names the text
# ------------------------------------------------------------------------------------------------------------


def test_the_texts_written_out_are_the_librarys():
    from probe.heads.corpus import SPLITS, TEXTS

    assert TEXT_SPLITS == (*SPLITS, text.CODE_SPLIT, text.CODE_HELD_OUT_SPLIT) == TEXTS
    assert TRAINED_SPLITS == (text.TRAIN_SPLIT, text.CODE_SPLIT)
    assert [text.held_out_split(split) for split in TRAINED_SPLITS] == [text.HELD_OUT_SPLIT,
                                                                         text.CODE_HELD_OUT_SPLIT]


def test_a_run_trained_on_python_source_is_measured_on_the_held_out_modules(code_run):
    card = json.loads((code_run / "card.json").read_text())
    assert card["config"]["corpus_split"] == "stdlib"  # what `probe train` wrote
    assert held_out_text(str(code_run), checkpoints(code_run)) == (
        "stdlib-held-out", "from run/card.json: trained on stdlib")


def test_a_run_of_gap_or_of_generated_data_or_without_a_card_is_measured_on_gap(code_run, tmp_path):
    run = copied(code_run, tmp_path)
    card = json.loads((run / "card.json").read_text())

    def plant(**config):
        (run / "card.json").write_text(json.dumps({**card, "config": {**card["config"], **config}}))

    plant(corpus_split="validation")
    assert held_out_text(str(run), checkpoints(run)) == ("development",
                                                         "from run/card.json: trained on validation")
    # generated data (the induction organisms: their config's corpus_split is the unused default)
    plant(data="repeated_blocks")
    assert held_out_text(str(run), checkpoints(run))[0] == "development"
    # no card at all (another trainer's checkpoints, a hub model)
    for path in run.rglob("card.json"):
        path.unlink()
    assert held_out_text(str(run), checkpoints(run)) == (
        "development", "no card names the model's training text: GAP's")
    assert held_out_text("no-such/hub-model", [])[0] == "development"


def test_a_run_still_training_reads_its_first_checkpoints_card(code_run, tmp_path):
    """No run card.json yet (it is written at the end): the first checkpoint's card, which `probe train`
    writes with the training text; an older card naming a recipe that reads text but not the text is refused
    in one line (never guessed), one of generated data means GAP's."""
    run = copied(code_run, tmp_path)
    (run / "card.json").unlink()
    step = json.loads((run / "step-0" / "card.json").read_text())
    assert step["name"] == "natural-text"
    assert step["config"] == {"data": "natural_text", "corpus_split": "stdlib"}
    assert held_out_text(str(run), checkpoints(run)) == (
        "stdlib-held-out", "from run/step-0/card.json: trained on stdlib")
    # the first checkpoint in step order: step-6's card is not read
    (run / "step-6" / "card.json").write_text("{")
    assert held_out_text(str(run), checkpoints(run))[0] == "stdlib-held-out"
    # an older checkpoint card: the recipe, not its text
    older = {key: value for key, value in step.items() if key != "config"}
    (run / "step-0" / "card.json").write_text(json.dumps(older))
    with pytest.raises(ProbeError, match="names the recipe natural-text, which trains on a text, but not"):
        held_out_text(str(run), checkpoints(run))
    # a recipe of generated data: no text, GAP's
    (run / "step-0" / "card.json").write_text(json.dumps({**older, "name": "induction"}))
    assert held_out_text(str(run), checkpoints(run))[0] == "development"


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read"),
    ("[1, 2]", "is not a model card"),
    (json.dumps({"config": {"corpus_split": 7}}), "names the training text 7, not a split name"),
    (json.dumps({"config": {"corpus_split": "development"}}), "says the model was trained on 'development'"),
])
def test_a_card_that_cannot_be_read_or_names_an_unknown_text_is_one_line_naming_the_fix(code_run, tmp_path,
                                                                                          content, message):
    run = copied(code_run, tmp_path)
    (run / "card.json").write_text(content)
    with pytest.raises(ProbeError, match="--text") as error:
        held_out_text(str(run), checkpoints(run))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert card_corpus(code_run) == ("stdlib", "natural-text")  # the control: the run's own card


# ------------------------------------------------------------------------------------------------------------
# The history is measured on the resolved text; an explicit text wins
# ------------------------------------------------------------------------------------------------------------


def test_history_measures_the_cards_held_out_text_and_an_explicit_split_wins(code_run, tmp_path):
    """The default (None) resolves to stdlib-held-out: the table's held-out loss is the model's loss on the
    held-out modules computed by hand, not on GAP; its identity is that of the explicit stdlib-held-out
    split (so the journal reuses it), and an explicit development split recomputes it on GAP."""
    notes: list[str] = []
    out = tmp_path / "h.csv"
    auto = history(str(code_run), ["step-6"], CONFIG, out, progress=False, note=notes.append)
    assert notes == ["held-out text: stdlib-held-out (from run/card.json: trained on stdlib)"]
    summary = auto.table[auto.table["row"] == "checkpoint"].iloc[0]
    code, gap = held_out_loss(code_run, "stdlib-held-out"), held_out_loss(code_run, "development")
    assert summary["held_out_loss"] == pytest.approx(code, rel=1e-6)
    assert abs(code - gap) > 0.05  # the negative control: the two texts give other losses
    assert summary["n_passages"] == PASSAGES

    checkpoint = make_checkpoint(str(code_run), "step-6")
    from probe.runs.checkpoints import checkpoint_revision

    revision = checkpoint_revision(checkpoint)
    code_config, gap_config = replace(CONFIG, split="stdlib-held-out"), replace(CONFIG, split="development")
    assert history_identity(code_config, checkpoint.spec, revision) != history_identity(
        gap_config, checkpoint.spec, revision)
    same = history(str(code_run), ["step-6"], code_config, out, progress=False, note=notes.append)
    assert same.reused == auto.computed and not same.computed and notes[-1].endswith("(as given)")

    given = history(str(code_run), ["step-6"], gap_config, out, progress=False)
    assert given.computed and not given.reused
    row = given.table[given.table["row"] == "checkpoint"].iloc[0]
    assert row["held_out_loss"] == pytest.approx(gap, rel=1e-6)

    # the heads are probed on the same text: the label table of LabelConfig(text=...) for each split
    from probe import models
    from probe.heads.label import label_model

    loaded = models.load(str(code_run / "step-6"))
    for table, split in ((auto.table, "stdlib-held-out"), (given.table, "development")):
        heads = table[table["row"] == "head"].set_index("head_name")
        labels = label_model(loaded, replace(CONFIG.label, text=split))
        for head_type in HEAD_TYPES:
            scores = labels[labels["head_type"] == head_type].set_index("head_name")["score"]
            assert heads[head_type].to_numpy() == pytest.approx(scores[heads.index].to_numpy(), abs=1e-9)
    auto_heads = auto.table[auto.table["row"] == "head"]["previous_token"].to_numpy()
    gap_heads = given.table[given.table["row"] == "head"]["previous_token"].to_numpy()
    assert abs(auto_heads - gap_heads).max() > 1e-4  # the negative control: other probes, other scores


def test_history_refuses_an_unknown_split_and_measure_an_unresolved_one(code_run):
    with pytest.raises(ProbeError, match="'test' is not a text probe knows: give one of development"):
        history(str(code_run), ["step-6"], HistoryConfig(split="test"), progress=False)
    from probe import models
    from probe.runs.history import measure

    loaded = models.load(str(code_run / "step-6"))
    with pytest.raises(ProbeError, match="HistoryConfig.split is None here"):
        measure(loaded, make_checkpoint(str(code_run), "step-6"), HistoryConfig())


def test_the_command_says_which_text_once_and_takes_text(code_run, tmp_path, capsys):
    from probe.cli import main

    out = tmp_path / "h.csv"
    argv = ["history", "--model", str(code_run), "--revisions", "step-6", "--out", str(out), *FLAGS]
    assert main(argv) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "held-out text" in line]
    assert lines == ["probe history: held-out text: stdlib-held-out (from run/card.json: trained on stdlib)"]
    assert main([*argv, "--text", "stdlib-held-out"]) == 0
    err = capsys.readouterr().err
    assert "probe history: held-out text: stdlib-held-out (as given)" in err and "nothing to do" in err


def test_a_bad_card_stops_the_command_in_one_line_before_any_work(code_run, tmp_path, capsys):
    run = copied(code_run, tmp_path)
    (run / "card.json").write_text("{not json")
    from probe.cli import main

    capsys.readouterr()
    assert main(["history", "--model", str(run), "--out", str(tmp_path / "h.csv"), *FLAGS]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "run/card.json" in captured.err and "pass --text SPLIT" in captured.err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("h.", ".h."))]
    # --text given: the card is not read
    assert main(["history", "--model", str(run), "--revisions", "step-6", "--text", "development",
                 "--out", str(tmp_path / "h.csv"), *FLAGS]) == 0

