"""A model's training history (`probe history`, probe.runs.history): the natural-text organisms' data and
tokenizer, the in-context-learning score on a hand-computed case and against the model's own loss, and the
history table of a short real training run — its rows, reproducibility, and resume after a SIGKILL.

The training here is a few steps of a narrow natural-text model (~2 s): the runner and the measurements are
under test, not the phase change (tests/models/test_text_organism.py, slow, trains the real recipes)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from probe.heads.label import LabelConfig
from probe.runs.checkpoints import make_checkpoint
from probe.runs.history import HEAD_TYPES, HISTORY_COLUMNS, HistoryConfig, history, step_revisions
from probe.training import incontext, text
from probe.training.train import TRAIN_LOSS_FILE, log_spaced_steps

REPO = Path(__file__).resolve().parents[2]
STEPS = (0, 3, 6)
TINY = {"n_embd": 32, "n_head": 2, "steps": 6, "batch": 4, "warmup": 2, "checkpoints": 0}
# small probe sets, few held-out passages: the table's mechanics are under test
CONFIG = HistoryConfig(label=LabelConfig(types=HEAD_TYPES, ablate="none", examples=8, n_bootstrap=100),
                       max_passages=16)
FLAGS = ["--examples", "8", "--bootstrap", "100", "--passages", "16"]  # = CONFIG


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """6 steps of the natural-text recipe at width 32, checkpoints after 0, 3 and 6 steps."""
    from probe.training.train import train

    out = tmp_path_factory.mktemp("natural-run")
    train("natural-text", 0, out, overrides=TINY, label=False, checkpoint_steps=STEPS)
    return out


# ------------------------------------------------------------------------------------------------------------
# The text, the tokenizer, the windows
# ------------------------------------------------------------------------------------------------------------


def test_training_text_and_held_out_text_share_no_passage():
    from probe.heads.corpus import PROBE_SPLIT, passages

    # probe label's natural-text probes come from the held-out split
    assert text.HELD_OUT_SPLIT == PROBE_SPLIT
    trained, held_out = set(passages(text.TRAIN_SPLIT)), set(passages(text.HELD_OUT_SPLIT))
    assert len(trained) == 454 and len(held_out) == 1999
    assert not trained & held_out


def test_the_tokenizer_is_learnt_deterministically_and_reads_english():
    from probe.heads.corpus import passages

    first = text.learn_tokenizer(passages(text.TRAIN_SPLIT), 1024)
    second = text.learn_tokenizer(passages(text.TRAIN_SPLIT), 1024)
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    assert len(first) == 1024
    ids = first("Mary went to the store.")["input_ids"]
    assert ids[0] == first.bos_token_id and first.decode(ids[1:]) == "Mary went to the store."
    assert first.unk_token_id not in first(list(passages(text.HELD_OUT_SPLIT))[:50])["input_ids"][0]


def test_windows_start_with_bos_and_target_the_next_token():
    stream = torch.tensor([2, 10, 11, 12, 2, 13, 14, 15, 16, 17])
    generator = torch.Generator().manual_seed(0)
    tokens, targets = text.text_windows(generator, stream, 8, 5, bos_id=2)
    assert tokens.shape == targets.shape == (8, 5)
    assert (tokens[:, 0] == 2).all()
    for row in range(8):
        # the window's tokens follow the stream; each target is the token after its position
        start = next(s for s in range(len(stream) - 4) if torch.equal(stream[s:s + 4], tokens[row, 1:]))
        expected = stream[start:start + 5].clone()
        expected[expected == 2] = text.IGNORE  # a passage's end (<bos>) is not scored
        assert torch.equal(targets[row], expected)


def test_held_out_rows_are_bos_and_the_first_tokens_of_long_enough_passages():
    tokenizer = text.corpus_tokenizer(text.TRAIN_SPLIT, 1024)
    rows = text.held_out_rows(tokenizer, 120)
    encoded = [ids for ids in text.encode_passages(tokenizer, text.HELD_OUT_SPLIT) if len(ids) >= 120]
    assert rows.shape == (len(encoded), 121)
    assert (rows[:, 0] == tokenizer.bos_token_id).all()
    assert rows[5, 1:].tolist() == encoded[5][:120]


def test_log_spaced_checkpoint_steps():
    assert log_spaced_steps(1500, 0) == ()
    steps = log_spaced_steps(1500, 24)
    assert steps[:4] == (0, 1, 2, 3) and steps[-1] == 1500 and list(steps) == sorted(set(steps))
    assert len(steps) <= 24
    later = [step for step in steps if step >= 10]
    assert max(b / a for a, b in zip(later, later[1:], strict=False)) < 1.5  # dense in log step


# ------------------------------------------------------------------------------------------------------------
# The ICL score
# ------------------------------------------------------------------------------------------------------------


def test_icl_score_on_a_hand_computed_case():
    # two rows, four positions; token 1 is column 0. Loss at token 4: (1.0 + 2.0) / 2 = 1.5; at token 2:
    # (3.0 + 4.0) / 2 = 3.5; ICL = 1.5 - 3.5 = -2.0
    losses = torch.tensor([[9.0, 3.0, 7.0, 1.0],
                           [8.0, 4.0, 6.0, 2.0]], dtype=torch.float64)
    assert incontext.icl_score(losses, early=2, late=4) == -2.0
    assert incontext.icl_score(losses, early=1, late=3) == pytest.approx(6.5 - 8.5)
    for early, late in ((3, 3), (4, 2), (0, 2), (2, 5)):
        with pytest.raises(ValueError):
            incontext.icl_score(losses, early, late)


def test_position_losses_are_the_models_own_loss(run_dir):
    from probe import models

    loaded = models.load(str(run_dir))
    rows = text.held_out_rows(loaded.tokenizer, 120, limit=6)
    losses = incontext.position_losses(loaded.model, rows, batch_size=4)  # [row position]
    assert losses.shape == (6, 120)
    with torch.no_grad():
        reference = loaded.model(input_ids=rows[:, :-1], labels=rows[:, :-1]).loss  # HF shifts: tokens 2..
        # HF's loss leaves out the last token's prediction; ours covers every token 1 .. 120
        logits = loaded.model(input_ids=rows[:, :-1]).logits
        last = torch.nn.functional.cross_entropy(logits[:, -1].double(), rows[:, -1])
    assert float(losses[:, :-1].mean()) == pytest.approx(float(reference), abs=1e-5)
    assert float(losses[:, -1].mean()) == pytest.approx(float(last), abs=1e-9)


# ------------------------------------------------------------------------------------------------------------
# Training writes what a history reads
# ------------------------------------------------------------------------------------------------------------


def test_training_logs_every_steps_loss_beside_its_checkpoints(run_dir):
    log = pd.read_csv(run_dir / TRAIN_LOSS_FILE)
    assert list(log["step"]) == list(range(6)) and log["loss"].gt(0).all()
    assert step_revisions(str(run_dir)) == ["step-0", "step-3", "step-6"]
    card = json.loads((run_dir / "step-3" / "card.json").read_text())
    assert card["step"] == 3 and card["train_loss"] is not None


def test_history_table_rows_and_columns(run_dir):
    report = history(str(run_dir), config=CONFIG, progress=False)
    table = report.table
    assert report.code == 0 and list(table.columns) == HISTORY_COLUMNS
    assert list(dict.fromkeys(table["checkpoint"])) == ["step-0", "step-3", "step-6"]
    for _checkpoint, rows in table.groupby("checkpoint"):
        kinds = rows["row"].value_counts()
        assert kinds["checkpoint"] == 1 and kinds["head"] == 2 * 2 and kinds["position"] == 120
        heads = rows[rows["row"] == "head"]
        assert heads["previous_token"].between(0, 1).all() and heads["induction"].between(0, 1).all()
        assert heads["copying"].between(-1, 1).all()
        # K-composition with a labelled previous-token head of an earlier layer; NaN (never 0) without one
        prev = heads[heads["previous_token_label"].fillna(False).astype(bool)]
        first = prev["layer"].min() if len(prev) else math.inf
        assert heads.loc[heads["layer"] <= first, "composition_prev_token"].isna().all()
        assert heads.loc[heads["layer"] > first, "composition_prev_token"].between(0, 1).all()
        summary = rows[rows["row"] == "checkpoint"].iloc[0]
        positions = rows[rows["row"] == "position"].set_index("position")["loss"]
        assert summary["icl_score"] == pytest.approx(positions[120] - positions[12])
        assert summary["n_passages"] == 16
    summary = table[table["row"] == "checkpoint"].set_index("step")
    assert math.isnan(summary.loc[0, "train_loss"])  # nothing trained before step 0
    card = json.loads((run_dir / "step-3" / "card.json").read_text())
    assert summary.loc[3, "train_loss"] == pytest.approx(card["train_loss"])


def test_composition_with_the_previous_token_head_on_the_induction_organism():
    """zoo:induction's shipped labels: L0H1 is its previous-token head, so each layer-1 head's value is its
    K-composition with L0H1 (TL's definition, probe.circuits) and layer 0 has none before it (NaN)."""
    from probe import models
    from probe.circuits.circuit import shipped_labels
    from probe.circuits.composition import composition_scores
    from probe.runs.history import composition_with_previous_token

    loaded = models.load("zoo:induction")
    labels = pd.read_csv(shipped_labels("zoo:induction"))
    values = composition_with_previous_token(loaded, labels)  # [layer head]
    assert values.shape == (2, 4) and pd.isna(values[0]).all()
    scores = composition_scores(loaded, [(1, h) for h in range(4)], [(0, 1)], modes=["K"])
    expected = scores.sort_values("receiver_head")["score"].tolist()
    assert values[1].tolist() == pytest.approx(expected, abs=1e-12)
    assert (values[1] > 0.31).all()
    assert pd.isna(composition_with_previous_token(loaded, labels.assign(label=False))).all()  # none labelled


def test_same_checkpoints_and_seed_give_the_same_table(run_dir, tmp_path):
    first = history(str(run_dir), config=CONFIG, out=tmp_path / "a.csv", progress=False).table
    second = history(str(run_dir), config=CONFIG, out=tmp_path / "b.csv", progress=False).table
    pd.testing.assert_frame_equal(first, second)
    from probe.runs.history import read_history

    pd.testing.assert_frame_equal(read_history(tmp_path / "a.csv"), first, check_exact=False, rtol=1e-9)


def test_history_resumes_after_sigkill(run_dir, tmp_path):
    """A `probe history` process killed (SIGKILL) after its first checkpoint is journalled: the rerun reuses
    what was finished, computes the rest, and the table equals an uninterrupted run's."""
    from probe.runs.journal import Journal

    out = tmp_path / "history.csv"
    argv = ["history", "--model", str(run_dir), "--out", str(out), *FLAGS]
    process = subprocess.Popen([sys.executable, "-m", "probe.cli", *argv], cwd=tmp_path,
                               env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = tmp_path / f".{out.name}.parts"
    deadline = time.monotonic() + 180
    while process.poll() is None and time.monotonic() < deadline:
        if parts.is_dir() and Journal(out).units():
            break
        time.sleep(0.02)
    killed = process.poll() is None
    if killed:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    finished = len(Journal(out).units())
    assert finished >= 1
    report = history(str(run_dir), config=CONFIG, out=out, progress=False)
    assert report.code == 0
    assert len(report.reused) == finished and len(report.reused) + len(report.computed) == 3
    if killed:
        assert report.computed  # the kill came before the last checkpoint
    fresh = history(str(run_dir), config=CONFIG, progress=False).table
    pd.testing.assert_frame_equal(report.table, fresh, check_exact=False, rtol=1e-9)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}.") and p.is_file()]
    assert not leftovers


def test_history_command_bad_input_is_one_line(tmp_path, capsys):
    from probe.cli import main

    assert main(["history", "--model", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["history", "--model", str(tmp_path)]) == 2
    assert "holds no checkpoint folders" in capsys.readouterr().err
    assert main(["history", "--model", str(tmp_path), "--icl-positions", "120,12"]) == 2
    assert "EARLY < LATE" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------------
# Refused before any measuring (issue 55 items 2-4): one model, positions and text that fit, one model's table
# ------------------------------------------------------------------------------------------------------------


def copied_run(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of the run to plant things in (the module's run stays as trained)."""
    import shutil

    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def refused(argv: list[str], capsys) -> str:
    """`probe argv` answers exit 2 with one stderr line and nothing on stdout; the line."""
    from probe.cli import main

    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    return captured.err


def outputs(folder: Path) -> list[str]:
    """Files a run would leave beside its --out: the table, its journal, its errors file."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("h.", ".h.")))


def test_history_refuses_a_checkpoint_of_another_model(run_dir, tiny_dir, tmp_path, capsys):
    """A tiny GPT-2 planted among the Llama-style run's step-N folders is refused in one line naming it,
    before anything is measured; the same run without it passes the check (the control)."""
    import shutil

    from probe.runs.history_inputs import check_one_model

    run = copied_run(run_dir, tmp_path)
    assert check_one_model(str(run), []) == run  # the control: the run's own checkpoints are one model
    shutil.copytree(tiny_dir("gpt2"), run / "step-9")
    err = refused(["history", "--model", str(run), "--out", str(tmp_path / "h.csv"), *FLAGS], capsys)
    assert "checkpoint step-9 is of another model than run: its config's model_type is 'gpt2', not 'llama'" \
        in err
    assert outputs(tmp_path) == []
    # named in --revisions: the same refusal
    err = refused(["history", "--model", str(run), "--revisions", "step-0,step-9", *FLAGS], capsys)
    assert "checkpoint step-9 is of another model" in err


def test_history_refuses_a_checkpoint_with_another_tokenizer(run_dir, tmp_path):
    """Same config, another vocabulary (two tokens' ids swapped in tokenizer.json): refused; a re-save with
    other padding settings (same vocabulary) is the same tokenizer."""
    import json as json_module
    import shutil

    from probe.errors import ProbeError
    from probe.runs.history_inputs import check_one_model

    run = copied_run(run_dir, tmp_path)
    shutil.copytree(run / "step-3", run / "step-9")
    path = run / "step-9" / "tokenizer.json"
    data = json_module.loads(path.read_text())
    data["padding"] = {"strategy": "BatchLongest"}  # not the vocabulary: still the same tokenizer
    path.write_text(json_module.dumps(data))
    checkpoints = [make_checkpoint(str(run), name) for name in ("step-0", "step-9")]
    assert check_one_model(str(run), checkpoints) == run
    vocab = data["model"]["vocab"]
    first, second = list(vocab)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json_module.dumps(data))
    with pytest.raises(ProbeError, match="checkpoint step-9 has another tokenizer than run"):
        check_one_model(str(run), checkpoints)


def test_history_revisions_outside_the_run_are_refused(run_dir, tmp_path, capsys):
    run = copied_run(run_dir, tmp_path)
    other = tmp_path / "other"
    import shutil

    shutil.copytree(run / "step-0", other / "step-0")
    err = refused(["history", "--model", str(run), "--revisions", "../other/step-0", "--out",
                   str(tmp_path / "h.csv")], capsys)
    assert "--revisions ../other/step-0 is outside" in err
    err = refused(["history", "--model", str(run), "--revisions", "step-0,step-77"], capsys)
    assert "has no checkpoint folder step-77" in err
    assert outputs(tmp_path) == []


def test_history_icl_positions_past_the_model_are_one_line_before_any_work(run_dir, tmp_path, capsys):
    """The run's model has 256 positions: LATE 255 fits, 256 does not — one line, no journal, no errors
    file (before: 43 s of failing checkpoints, 4 lines, both files left)."""
    from probe.runs.history_inputs import check_text_fits

    check_text_fits(run_dir, 12, 255, text.HELD_OUT_SPLIT, 4)  # the control: the last position that fits
    err = refused(["history", "--model", str(run_dir), "--icl-positions", "12,256", "--out",
                   str(tmp_path / "h.csv"), *FLAGS], capsys)
    assert "the model reads 256 positions, too few for the ICL score at token 256" in err
    assert "give LATE of at most 255" in err
    assert outputs(tmp_path) == []


def test_history_refuses_a_tokenizer_that_reads_the_text_as_unknown(tiny_dir, tmp_path, capsys):
    """The tiny GPT-2's word tokenizer reads GAP's held-out passages mostly as <unk>: the loss and the ICL
    score would measure predicting <unk>. Refused, with the share the tokenizer gives (computed here by
    hand); the natural-text run's byte-level tokenizer has no unknown token at all (control above)."""
    import shutil

    import transformers

    from probe.runs.history_inputs import MAX_UNKNOWN_SHARE

    run = tmp_path / "words"
    shutil.copytree(tiny_dir("gpt2"), run / "step-0")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(run / "step-0"))
    rows = text.held_out_rows(tokenizer, 120, text.HELD_OUT_SPLIT, 16)
    share = float((rows[:, 1:] == tokenizer.unk_token_id).float().mean())
    assert share > MAX_UNKNOWN_SHARE
    err = refused(["history", "--model", str(run), "--out", str(tmp_path / "h.csv"), *FLAGS], capsys)
    assert f"the tokenizer reads {share:.1%} of the held-out text as its unknown token '<unk>'" in err
    assert outputs(tmp_path) == []


def test_history_out_of_another_model_is_refused_unless_force(run_dir, tmp_path, capsys):
    """--out holding another model's history is not appended to (before: 294 rows of two models); --force
    replaces it with this model's rows only. Rows of this model (however its folder is written) are kept."""
    from probe.runs.history import read_own_history, same_model, tidy

    out = tmp_path / "h.csv"
    other = tidy(pd.DataFrame([{"model": "zoo:induction", "checkpoint": "step-0", "step": 0,
                                "row": "checkpoint", "icl_score": -1.0}]))
    mine = other.assign(model=str(run_dir), checkpoint="step-3", step=3)
    other.to_csv(out, index=False)
    before = out.read_bytes()
    err = refused(["history", "--model", str(run_dir), "--out", str(out), *FLAGS], capsys)
    assert f"{out} holds the history of another model (zoo:induction)" in err and "--force" in err
    assert out.read_bytes() == before and outputs(tmp_path) == ["h.csv"]
    pd.concat([other, mine]).to_csv(out, index=False)
    kept = read_own_history(out, str(run_dir) + "/", force=True)  # the same folder, written otherwise
    assert same_model(str(run_dir) + "/", str(run_dir)) and not same_model("zoo:induction", str(run_dir))
    assert kept["model"].tolist() == [str(run_dir)] and kept["checkpoint"].tolist() == ["step-3"]
