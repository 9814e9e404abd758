"""Model organisms (probe.zoo, trained by probe.training): resolution, shipped files and label tables,
training data, and the labels on each card."""

from __future__ import annotations

import json
import socket

import pytest
import torch

from probe import zoo
from probe.errors import ProbeError
from probe.naming import parse_head_name
from probe.training import data
from probe.training import organisms as zoo_train
from probe.training import train as zoo_loop

TEXT_ORGANISMS = ["brackets", "coreference", "implicit-causality", "induction", "positional",
                  "retrieval", "sentences", "stdlib-code", "stdlib-code-1layer"]
ALL = ["brackets", "coreference", "esm-random", "implicit-causality", "induction", "positional", "retrieval",
       "sentences", "stdlib-code", "stdlib-code-1layer"]
ONE_LAYER = ("stdlib-code-1layer",)
# minutes one training took (its card's train_seconds): retrieval trains its last stages on 1-4K-token prompts
# (43 min on the shared 2-core machine); stdlib-code 31,330 steps of 1,024 tokens (issue 54 allows ~60)
TRAIN_MINUTES = {"retrieval": 45, "stdlib-code": 60, "stdlib-code-1layer": 60}
GPT2 = ("coreference", "implicit-causality")


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connection fails the test: zoo specs must resolve from the package alone."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


class FreshTables(dict):
    """Organism name -> a fresh relabel, computed on first use: label_model on the shipped weights with the
    LabelConfig the card records (probe.training.cards, the code `probe train NAME --relabel` runs)."""

    def __missing__(self, name: str):
        from probe.training import cards

        self[name] = cards.label_table(zoo.path(name), name, cards.card_label_config(zoo.card(name), None))
        return self[name]


@pytest.fixture(scope="module")
def label_tables():
    return FreshTables()


# the Python-source organisms take ~1-2 CPU-minutes each to relabel (width 128, every type, 3 twins): slow
SLOW_RELABEL = ("stdlib-code", "stdlib-code-1layer")


def relabelled(*more_marks: tuple[str, pytest.MarkDecorator]) -> list:
    """Every organism as a parameter, the slow relabels marked slow; `more_marks`: (name, mark) added."""
    extra = dict(more_marks)
    return [pytest.param(name, marks=[pytest.mark.slow, *([extra[name]] if name in extra else [])])
            if name in SLOW_RELABEL else name for name in ALL]


def labelled(table) -> dict[str, list[str]]:
    return {t: sorted(g.loc[g["label"], "head_name"]) for t, g in table.groupby("head_type", sort=False)}


# ------------------------------------------------------------------------------------------------------------
# Resolution and shipped files
# ------------------------------------------------------------------------------------------------------------


def test_names_lists_the_shipped_organisms():
    assert zoo.names() == ALL


def test_unknown_name_is_one_line_error_listing_known_names():
    with pytest.raises(ProbeError) as error:
        zoo.path("inducton")
    message = str(error.value)
    assert "zoo:inducton" in message and "\n" not in message
    for name in ALL:
        assert f"zoo:{name}" in message


def test_unknown_zoo_spec_through_models_load():
    from probe.models import load

    with pytest.raises(ProbeError, match="known: zoo:brackets, zoo:coreference"):
        load("zoo:nope")


@pytest.mark.parametrize("name", ALL)
def test_zoo_spec_loads_offline_from_the_package(name, no_network):
    from probe.models import load

    loaded = load(f"zoo:{name}")
    assert zoo.path(name).parent == zoo.ZOO_DIR
    assert loaded.name == f"zoo:{name}"
    assert loaded.kind == ("protein_mlm" if name == "esm-random" else "causal_lm")
    assert loaded.revision.startswith("sha256:")
    assert getattr(loaded.tokenizer, "is_fast", False) or name == "esm-random"
    assert loaded.n_layers == (1 if name in ONE_LAYER else 2) and loaded.n_heads == 4


def test_all_organisms_together_under_14_mb():
    """The zoo's bytes in the package, checkpoints included (stdlib-code's 2 x 12 checkpoints, float16: ~8 MB
    of it; docs/zoo.md states the sizes)."""
    total = sum(f.stat().st_size for name in ALL for f in zoo.path(name).rglob("*") if f.is_file())
    assert total < 14 * 2**20


@pytest.mark.parametrize("name", ALL)
def test_shipped_files_are_package_data(name):
    """Every shipped file has an extension pyproject ships (*.json, *.safetensors, *.md, *.txt, *.csv)."""
    for file in zoo.path(name).iterdir():
        shipped = file.suffix in (".json", ".safetensors", ".md", ".txt", ".csv")
        assert shipped or file.name.startswith("step-"), file
    for folder in zoo.path(name).glob("step-*"):  # a checkpoint: what pyproject's */step-*/ globs ship
        assert {file.suffix for file in folder.iterdir()} <= {".json", ".safetensors"}, folder
    assert (zoo.path(name) / "MODEL_CARD.md").is_file() and (zoo.path(name) / "model.safetensors").is_file()
    assert zoo.card(name)["name"] == name


@pytest.mark.parametrize("name", TEXT_ORGANISMS)
def test_text_organisms_are_attention_only(name):
    from probe.models import load

    model = load(f"zoo:{name}").model
    mlps = [module for path, module in model.named_modules() if path.endswith(".mlp")]
    assert len(mlps) == model.config.num_hidden_layers == (1 if name in ONE_LAYER else 2)
    for mlp in mlps:
        assert all(torch.count_nonzero(p) == 0 for p in mlp.parameters())
    assert zoo.card(name)["config"]["arch"] == ("gpt2" if name in GPT2 else "llama")


def test_esm_random_card_says_untrained_and_contact_head_is_nonzero():
    from probe.models import load

    card = zoo.card("esm-random")
    assert "UNTRAINED" in card["task"] and card["steps"] == 0
    assert "UNTRAINED" in (zoo.path("esm-random") / "MODEL_CARD.md").read_text()
    head = load("zoo:esm-random").model.esm.contact_head.regression
    assert torch.count_nonzero(head.weight) == head.weight.numel()


# ------------------------------------------------------------------------------------------------------------
# Data generators
# ------------------------------------------------------------------------------------------------------------


def test_repeated_blocks_targets_are_the_copy_tokens():
    generator = torch.Generator().manual_seed(0)
    words = list(range(10, 60))
    tokens, targets = data.repeated_blocks(generator, 8, 64, words, bos_id=2, min_block=3, max_block=9)
    assert tokens.shape == targets.shape == (8, 64)
    assert (tokens[:, 0] == 2).all() and (tokens[:, 1:] >= 10).all()
    rows, positions = torch.nonzero(targets != data.IGNORE, as_tuple=True)
    assert len(rows) > 100
    for row, position in zip(rows.tolist(), positions.tolist(), strict=True):
        target = int(targets[row, position])
        assert target == tokens[row, position + 1]
        # the target repeats a token 3..9 places earlier (its first copy), and so does the query token
        lags = [lag for lag in range(3, 10) if tokens[row, position + 1 - lag] == target
                and tokens[row, position - lag] == tokens[row, position]]
        assert lags


def test_fixed_period_blocks_repeat_at_exactly_the_period():
    generator = torch.Generator().manual_seed(1)
    tokens, targets = data.repeated_blocks(generator, 4, 64, list(range(10, 200)), 2, 16, 16)
    rows, positions = torch.nonzero(targets != data.IGNORE, as_tuple=True)
    assert torch.equal(tokens[rows, positions + 1], tokens[rows, positions + 1 - 16])
    # predictable: copies 2 (positions 17..32) and 4 (49..64), all but their first token -> 15 per copy
    assert torch.equal((targets[0] != data.IGNORE).nonzero().flatten() + 1,
                       torch.tensor([*range(18, 33), *range(50, 64)]))


def test_runs_of_three_copies_are_predictable_from_the_second_copy_on():
    generator = torch.Generator().manual_seed(2)
    tokens, targets = data.repeated_blocks(generator, 16, 64, list(range(10, 200)), 2, 1, 6, max_copies=3)
    rows, positions = torch.nonzero(targets != data.IGNORE, as_tuple=True)
    assert torch.equal(targets[rows, positions], tokens[rows, positions + 1])
    # with 190 words, a predictable token almost always repeats the token one block earlier: find that block
    # length and check the query token repeats at the same lag (the induction pattern)
    hits = 0
    for row, position in zip(rows.tolist(), positions.tolist(), strict=True):
        lags = [lag for lag in range(1, 7) if position + 1 - lag >= 1 and tokens[row, position + 1 - lag]
                == tokens[row, position + 1] and tokens[row, position - lag] == tokens[row, position]]
        hits += bool(lags)
    assert hits == len(rows)
    lengths = [data.block_length(torch.Generator().manual_seed(s), 1, 24) for s in range(400)]
    assert min(lengths) == 1 and max(lengths) == 24 and lengths.count(1) > lengths.count(24)


def test_coreference_sentences_put_the_antecedents_action_after_the_pronoun():
    from probe.heads.probesets import CorefVocabulary

    vocab = CorefVocabulary()
    assert data.coreference_action("john", vocab) == vocab.actions[0]
    assert data.coreference_action("emma", vocab) == vocab.actions[4]
    assert data.coreference_action("queen", vocab) == vocab.actions[0]  # index 5 among the female nouns
    tokenizer = zoo_train.build_tokenizer(zoo_train.ORGANISMS["coreference"])
    vocabulary = tokenizer.get_vocab()
    generator = torch.Generator().manual_seed(0)
    tokens, targets = data.coreference_batch(generator, 32, vocab, vocabulary, tokenizer.bos_token_id,
                                             tokenizer.pad_token_id)
    inverse = {index: word for word, index in vocabulary.items()}
    pronouns = {"he": "male", "she": "female", "they": "plural"}
    classes = {"male": {*vocab.male_names, *vocab.male_roles},
               "female": {*vocab.female_names, *vocab.female_roles}, "plural": set(vocab.plural_nouns)}
    for row in range(32):
        (position,) = (targets[row] != data.IGNORE).nonzero().flatten().tolist()
        words = [inverse[int(i)] for i in tokens[row]]
        assert words[position] in pronouns
        nouns = [w for w in words[:position] if w in set().union(*classes.values())]
        agreeing = [w for w in nouns if w in classes[pronouns[words[position]]]]
        assert len(agreeing) == 1 and 2 <= len(nouns) <= 4
        assert inverse[int(targets[row, position])] == data.coreference_action(agreeing[0], vocab)
        assert words[position + 1] == inverse[int(targets[row, position])]


def test_causality_batches_are_balanced_and_the_target_is_the_antecedents_action():
    """Both names agree with the pronoun; the verb class picks the antecedent; over a batch the antecedent is
    the first name half of the time (nearest- and first-mention baselines at 0.5)."""
    from probe.heads.probesets import CausalityVocabulary, causality_examples

    vocab = CausalityVocabulary()
    examples = causality_examples(400, seed=3)
    assert sum(e.antecedent_first for e in examples) == 200
    for example in examples[:40]:
        names = [example.words[s] for s in (example.antecedent, *example.distractors) for s in [s[0]]]
        gender = vocab.male_names if example.words[example.pronoun] == "he" else vocab.female_names
        assert len(set(names)) == 2 and all(name in gender for name in names)
        verb = next(w for w in example.words if w in (*vocab.subject_verbs, *vocab.object_verbs))
        assert example.antecedent_first == (verb in vocab.subject_verbs)
        assert example.agreement is None  # agreement cannot choose
    tokenizer = zoo_train.build_tokenizer(zoo_train.ORGANISMS["implicit-causality"])
    vocabulary = tokenizer.get_vocab()
    inverse = {index: word for word, index in vocabulary.items()}
    tokens, targets = data.causality_batch(torch.Generator().manual_seed(0), 64, vocab, vocabulary,
                                           tokenizer.bos_token_id, tokenizer.pad_token_id)
    firsts = 0
    for row in range(64):
        (position,) = (targets[row] != data.IGNORE).nonzero().flatten().tolist()
        words = [inverse[int(i)] for i in tokens[row]]
        assert words[position] in ("he", "she")
        names = [w for w in words[:position] if w in (*vocab.male_names, *vocab.female_names)]
        verb = next(w for w in words if w in (*vocab.subject_verbs, *vocab.object_verbs))
        antecedent = names[0] if verb in vocab.subject_verbs else names[1]
        firsts += antecedent == names[0]
        assert inverse[int(targets[row, position])] == data.causality_action(antecedent, vocab)
    assert 16 <= firsts <= 48


def test_bracket_batches_repeat_the_word_before_the_matching_bracket():
    from probe.heads.probesets import token_classes
    from probe.heads.registry import bracket_pairs

    tokenizer = zoo_train.build_tokenizer(zoo_train.ORGANISMS["brackets"])
    config = zoo_train.ORGANISMS["brackets"]
    tokens, targets = zoo_train.make_batch(config, tokenizer, torch.Generator().manual_seed(0), 16)
    classes = token_classes(tokenizer)
    checked = 0
    for row in range(16):
        ids = tokens[row].tolist()
        matches = dict(bracket_pairs(ids, classes))
        for position in (targets[row] != data.IGNORE).nonzero().flatten().tolist():
            assert position in matches  # every target sits on a matched closing bracket
            assert int(targets[row, position]) == ids[matches[position] - 1] == ids[position + 1]
            checked += 1
    assert checked > 50


def test_sentence_batches_start_with_the_successor_of_the_previous_first_word():
    from probe.heads.probesets import token_classes
    from probe.heads.registry import sentence_start_pairs

    config = zoo_train.ORGANISMS["sentences"]
    tokenizer = zoo_train.build_tokenizer(config)
    words = zoo_train.word_ids(tokenizer)
    successor = {w: words[(i + 1) % len(words)] for i, w in enumerate(words)}
    tokens, targets = zoo_train.make_batch(config, tokenizer, torch.Generator().manual_seed(0), 16)
    classes = token_classes(tokenizer)
    checked = 0
    for row in range(16):
        ids = tokens[row].tolist()
        starts = dict(sentence_start_pairs(ids, classes))
        for position in (targets[row] != data.IGNORE).nonzero().flatten().tolist():
            assert int(targets[row, position]) == successor[ids[starts[position]]] == ids[position + 1]
            checked += 1
    assert checked > 50


# ------------------------------------------------------------------------------------------------------------
# Cards: measured numbers and the classifier's labels
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEXT_ORGANISMS)
def test_card_evaluation_reproduces_on_the_shipped_weights(name):
    from probe.models import load

    card = zoo.card(name)
    loaded = load(f"zoo:{name}")
    config = zoo_train.ORGANISMS[name]
    measured = zoo_loop.evaluate(loaded.model, config, loaded.tokenizer, card["seed"])
    for key, value in card["evaluation"].items():
        if isinstance(value, float):
            assert measured[key] == pytest.approx(value, abs=2e-3), key
    assert card["train_seconds"] <= TRAIN_MINUTES.get(name, 15) * 60


def test_induction_in_context_loss_is_below_0_3_nats():
    assert zoo.card("induction")["evaluation"]["in_context_loss"] < 0.3


def test_positional_control_fails_on_random_lengths_but_not_on_its_period():
    evaluation = zoo.card("positional")["evaluation"]
    assert evaluation["in_context_loss_fixed_period"] < 0.3
    assert evaluation["in_context_loss"] > 1.0


@pytest.mark.parametrize("name", relabelled())
def test_shipped_label_table_equals_a_fresh_relabel(label_tables, name):
    """probe/zoo/NAME/labels.csv (what the app reads at start-up) is what labelling the shipped weights with
    the card's LabelConfig gives now: exact on names and labels, allclose on numbers. When it fails, the
    classifier or the weights changed: `probe train NAME --relabel` rewrites the table and the cards."""
    import numpy as np
    import pandas as pd

    from probe.heads.tables import load_table

    card = zoo.card(name)
    assert card["label_table"]["file"] == "labels.csv"
    assert zoo.labels_path(name) == zoo.path(name) / "labels.csv"
    shipped = load_table(zoo.labels_path(name))
    fresh = label_tables[name].reset_index(drop=True)
    assert list(shipped.columns) == list(fresh.columns)
    assert len(shipped) == len(fresh) > 0
    for column in shipped.columns:
        left, right = shipped[column], fresh[column]
        if pd.api.types.is_numeric_dtype(right) and not pd.api.types.is_bool_dtype(right):
            assert np.allclose(left.astype(float), right.astype(float), rtol=1e-5, atol=1e-6,
                               equal_nan=True), column
        else:
            same = (left.astype(str) == right.astype(str)) | (left.isna() & right.isna())
            assert same.all(), (column, left[~same].head(3).tolist(), right[~same].head(3).tolist())
    assert (shipped["model"] == f"zoo:{name}").all()


def test_labels_path_of_an_unknown_organism_or_a_missing_table_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(ProbeError, match="unknown model organism"):
        zoo.labels_path("nope")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text("{}")
    monkeypatch.setattr(zoo, "ZOO_DIR", tmp_path)
    with pytest.raises(ProbeError, match="ships no label table"):
        zoo.labels_path("bare")


def test_the_shipped_table_check_sees_a_changed_label(label_tables):
    """Negative control: a table with one label flipped, or one score moved, is not the fresh relabel."""
    import numpy as np

    from probe.heads.tables import load_table

    shipped = load_table(zoo.path("induction") / "labels.csv")
    fresh = label_tables["induction"].reset_index(drop=True)
    flipped = shipped["label"].astype(bool).copy()
    flipped.iloc[0] = not flipped.iloc[0]
    assert not (flipped == fresh["label"].astype(bool)).all()
    assert not np.allclose(shipped["score"] + 1e-3, fresh["score"], rtol=1e-5, atol=1e-6, equal_nan=True)


def test_the_card_records_the_full_label_config():
    """Every LabelConfig field is in the card, so the shipped table can be recomputed; the retrieval
    organism's overrides are kept."""
    import dataclasses

    from probe.heads.label import LabelConfig

    fields = {field.name for field in dataclasses.fields(LabelConfig)}
    for name in ALL:
        recorded = zoo.card(name)["label_table"]["label_config"]
        # text came later (a card without it was labelled on GAP's development split, its default); twin_share
        # too, and it changes nothing without twins, as these tables were made
        later = {"text"} if "text" not in recorded else set()
        assert set(recorded) == fields - later or (set(recorded) == fields - later - {"twin_share"}
                                                   and not recorded["twins"]), name
    retrieval = zoo.card("retrieval")["label_table"]["label_config"]
    assert retrieval["types"] == [
        "retrieval"] and retrieval["seq_len"] == 4096 and retrieval["examples"] == 16


def test_relabel_rewrites_the_table_and_the_cards_without_touching_the_weights(tmp_path):
    """`probe train NAME --relabel --out DIR` on a copy of a shipped organism: labels.csv written again, equal
    to the shipped one; the weights' bytes unchanged."""
    import shutil

    from probe.cli import main
    from probe.heads.tables import load_table

    copy = tmp_path / "induction"
    shutil.copytree(zoo.path("induction"), copy)
    (copy / "labels.csv").unlink()
    weights = (copy / "model.safetensors").read_bytes()
    assert main(["train", "induction", "--relabel", "--out", str(copy)]) == 0
    assert (copy / "model.safetensors").read_bytes() == weights
    again, shipped = load_table(copy / "labels.csv"), load_table(zoo.path("induction") / "labels.csv")
    assert list(again["head_name"]) == list(shipped["head_name"])
    assert list(again["label"]) == list(shipped["label"])
    assert json.loads((copy / "card.json").read_text())["labels"] == zoo.card("induction")["labels"]


def test_train_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    from probe.cli import main

    assert main(["train", "induction"]) == 2  # no --out: the shipped weights are never the default target
    assert "give --out DIR" in capsys.readouterr().err
    assert main(["train", "induction", "--relabel", "--out", str(tmp_path)]) == 2  # nothing trained there
    assert "no card.json" in capsys.readouterr().err
    assert main(["train", "nope", "--out", str(tmp_path)]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["train", "induction", "--out", str(tmp_path), "--set", "steps=many"]) == 2
    assert "steps takes a whole number" in capsys.readouterr().err


@pytest.mark.parametrize("name", relabelled())
def test_labels_meet_the_cards_requirements(label_tables, name):
    card = zoo.card(name)
    assert "requirements" in card
    assert zoo.check_requirements(label_tables[name], card["requirements"]) == []


def test_induction_has_previous_token_heads_in_layer_0_and_induction_heads_in_layer_1(label_tables):
    labels = labelled(label_tables["induction"])
    assert any(parse_head_name(h)[0] == 0 for h in labels["previous_token"])
    assert any(parse_head_name(h)[0] == 1 for h in labels["induction"])


def test_positional_control_is_a_fixed_offset_layer_and_has_no_induction_head(label_tables):
    table = label_tables["positional"]
    assert labelled(table)["induction"] == []
    induction = table[table["head_type"] == "induction"]
    assert (induction["score"] < 0.3).all()
    fixed = table[(table["head_type"] == "fixed_offset") & table["label"]]
    assert set(fixed["layer"]) == {1} and len(fixed) == 4 and (fixed["offset"] == -15).all()


def test_requirements_checker_reports_failures(label_tables):
    table = label_tables["positional"]
    assert zoo.check_requirements(table, {"present": [{"layer": 0, "head_type": "fixed_offset"}]})
    assert zoo.check_requirements(table,
                                  {"present": [{"layer": 1, "head_type": "fixed_offset", "offset": -14}]})
    assert zoo.check_requirements(table, {"absent": [{"head_type": "fixed_offset"}]})
    assert zoo.check_requirements(label_tables["coreference"],
                                  {"measured": [{"head_type": "coreference", "min_accuracy": 1.01}]})
    assert zoo.check_requirements(label_tables["implicit-causality"],
                                  {"present": [{"head_type": "coreference", "min_accuracy": 1.01}]})
    assert not zoo.check_requirements(label_tables["implicit-causality"],
                                      {"present": [{"head_type": "coreference", "min_accuracy": 0.9}]})


def induction_scores(name: str, block_len: int | None) -> torch.Tensor:
    """Valid-row induction scores `[layer head]` on 32 repeated-block probes (random or fixed block
    length)."""
    from probe.heads.probesets import repeated_blocks
    from probe.heads.registry import batch_pattern
    from probe.heads.scores import ScoreSink, run_sink
    from probe.models import load

    loaded = load(f"zoo:{name}")
    probes = repeated_blocks(loaded.tokenizer, 32, 64, seed=0, block_len=block_len).input_ids  # [example seq]
    lengths = torch.full((probes.shape[0],), probes.shape[1])
    sink = ScoreSink({"induction": batch_pattern("induction", probes)}, lengths, loaded.n_layers,
                     loaded.n_heads)
    run_sink(loaded.model, sink, probes)
    return sink.result()["induction"].score.nanmean(0)  # [layer head]


def test_positional_control_looks_like_induction_only_at_its_own_period():
    """The shortcut the control exists for: at its training period (16) its layer-1 heads pass for induction
    heads; on random block lengths they do not. The induction organism scores high on both."""
    assert induction_scores("positional", 16)[1].min() > 0.5
    assert induction_scores("positional", None)[1].max() < 0.2
    assert induction_scores("induction", 16)[1].min() > 0.8
    assert induction_scores("induction", None)[1].min() > 0.8


def test_coreference_organism_resolves_templates_but_only_as_well_as_agreement(label_tables):
    """Its heads pick the antecedent every time — and so does the agreement rule, so no label (the card says
    why)."""
    table = label_tables["coreference"]
    coref = table[table["head_type"] == "coreference"]
    assert coref["accuracy"].max() >= 0.9 and not coref["label"].any()
    assert set(coref["baseline"]) == {"agreement"} and (coref["baseline_accuracy"] == 1.0).all()
    assert (coref["probe_set"] == "templates").all()


def test_implicit_causality_organism_is_the_coreference_positive_control(label_tables):
    """Labelled coreference heads with accuracy >= 0.9 where nearest and first mention are at 0.5 and
    agreement cannot choose — the one organism whose coreference label the templates' agreement cannot
    explain."""
    table = label_tables["implicit-causality"]
    coref = table[table["head_type"] == "coreference"]
    assert (coref["probe_set"] == "causality").all()
    # balanced over the whole probe set (0.5 exactly); the selection half's documents hold about half of each
    # case (docs/labels.md, held-out confirmation)
    assert set(coref["baseline"]) <= {"nearest", "first"}
    assert ((coref["baseline_accuracy"] - 0.5).abs() <= 0.05).all()
    labelled = coref[coref["label"]]
    assert len(labelled) >= 1 and (labelled["accuracy"] >= 0.9).all()
    assert (labelled["layer"] == 1).all()  # layer 0 reads the verb; layer 1 attends to the antecedent


def test_bracket_and_sentence_organisms_carry_their_labels(label_tables):
    brackets, sentences = label_tables["brackets"], label_tables["sentences"]
    bracket = brackets[(brackets["head_type"] == "bracket") & brackets["label"]]
    assert len(bracket) >= 1 and set(bracket["probe_set"]) == {"random-brackets"}
    start = sentences[(sentences["head_type"] == "sentence_start") & sentences["label"]]
    assert (len(start) >= 1 and (start["score"] >= 0.9).all()
            and set(start["probe_set"]) == {"random-sentences"})
    # no previous-token head passes for a bracket head: the probes keep a token between any two brackets
    assert not brackets[(brackets["head_type"] == "previous_token") & brackets["label"]].size


@pytest.mark.parametrize(("name", "head_type"), [("brackets", "bracket"), ("sentences", "sentence_start")])
def test_untrained_weights_of_the_same_architecture_get_no_label(tmp_path, name, head_type):
    """The negative control: the organism's architecture and tokenizer with its initial (seed 0) weights."""
    from probe.heads.label import LabelConfig, label_model
    from probe.models import load

    config = zoo_train.ORGANISMS[name]
    tokenizer = zoo_train.build_tokenizer(config)
    model = zoo_train.build_model(config, tokenizer, seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    table = label_model(load(str(tmp_path)), LabelConfig(types=(head_type,), ablate="none"))
    assert table["score"].notna().all() and not table["label"].any()


def test_probe_label_cli_on_the_positional_control(tmp_path):
    from probe.cli import main

    out = tmp_path / "labels.csv"
    code = main(["label", "--model", "zoo:positional", "--out", str(out)])
    assert code == 0
    import pandas as pd

    table = pd.read_csv(out)
    fixed = table[(table["head_type"] == "fixed_offset") & table["label"]]
    assert set(fixed["layer"]) == {1} and set(fixed["offset"]) == {-15}
    assert not table.loc[table["head_type"] == "induction", "label"].any()


# ------------------------------------------------------------------------------------------------------------
# Retraining (slow)
# ------------------------------------------------------------------------------------------------------------


CIRCUIT = ("previous_token", "induction")  # the heads of the induction mechanism


def kinds_by_layer(labels: dict[str, list[str]]) -> set[tuple[int, str]]:
    """{(layer, head_type)} of the circuit's labelled heads. First-token and self heads (parking spots for
    heads that the circuit does not use) vary from seed to seed and are not compared."""
    return {(parse_head_name(h)[0], head_type) for head_type, heads in labels.items() if head_type in CIRCUIT
            for h in heads}


@pytest.mark.slow
def test_retraining_induction_with_another_seed_gives_the_same_kinds_of_heads_per_layer(tmp_path):
    card = zoo_loop.train("induction", seed=1, out=tmp_path / "induction-seed1")
    shipped = zoo.card("induction")
    assert card["requirements_failed"] == []
    assert card["evaluation"]["in_context_loss"] < 0.3
    assert kinds_by_layer(card["labels"]) == kinds_by_layer(shipped["labels"]) == {(0, "previous_token"),
                                                                                  (1, "induction")}
    assert json.loads((tmp_path / "induction-seed1" / "card.json").read_text())["seed"] == 1


@pytest.mark.parametrize("name", ALL)
def test_cards_are_strict_json(name):
    """card.json parses without NaN or Infinity (which are not JSON): unknown numbers are null."""

    def refuse(constant):
        raise ValueError(f"{constant} in card.json of {name}")

    json.loads((zoo.path(name) / "card.json").read_text(), parse_constant=refuse)


def test_requirements_read_the_one_labelled_rule():
    """An unknown label (NaN, as a table read back from csv holds it) is not a labelled head — under
    ``astype(bool)`` it was, and a card's `present` requirement passed on it; "True" from a csv is
    labelled."""
    import math

    import pandas as pd

    from probe.zoo import check_requirements

    need = {"present": [{"head_type": "induction", "layer": 1}], "absent": [{"head_type": "induction"}]}
    unknown = pd.DataFrame({"head_type": ["induction"], "layer": [1], "head_name": ["L1H0"],
                            "label": [math.nan]})
    assert check_requirements(unknown, need) == [
        "no labelled head for {'head_type': 'induction', 'layer': 1}"]
    read_back = unknown.assign(label=["True"])
    assert check_requirements(read_back, need) == ["induction heads present: ['L1H0']"]
