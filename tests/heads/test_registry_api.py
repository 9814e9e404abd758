"""probe.heads.register: a head type defined outside the package is scored and labelled like a built-in one,
and a duplicate name or a malformed spec is a one-line ProbeError."""

from __future__ import annotations

import io

import pandas as pd
import pytest
import torch

import probe.heads
from probe.cli import main
from probe.errors import ProbeError
from probe.heads import HeadTypeSpec, TargetContext
from probe.heads.label import LabelConfig, label_model

CONFIG = dict(examples=8, n_bootstrap=100, ablate="none")


def back(offset: int):
    """Targets j = i − offset (for i ≥ offset): written here, outside the package, as a user would."""

    def targets(ctx: TargetContext):
        batch, n = ctx.input_ids.shape
        pattern = torch.zeros(batch, n, n, dtype=torch.bool)  # [batch query key]
        rows = torch.arange(offset, n)
        pattern[:, rows, rows - offset] = True
        return {None: pattern}

    return targets


@pytest.fixture
def registered():
    names = []

    def add(spec):
        probe.heads.register(spec)
        names.append(spec.name)
        return spec

    yield add
    for name in names:
        probe.heads.unregister(name)


def test_a_registered_type_labels_like_a_built_in_one(planted, registered):
    registered(HeadTypeSpec("one_back", "attends to the token before (a user's copy of previous_token)",
                            back(1), "natural"))
    registered(HeadTypeSpec("two_back", "attends two tokens back", back(2), "natural"))
    table = label_model(planted, LabelConfig(types=("previous_token", "one_back", "two_back"), **CONFIG))
    ours, theirs = (table[table["head_type"] == name].reset_index(drop=True)
                    for name in ("one_back", "previous_token"))
    assert len(ours) == planted.n_layers * planted.n_heads
    columns = ["head_name", "score", "ci_low", "ci_high", "chance", "effect", "p_value"]
    pd.testing.assert_frame_equal(ours[columns], theirs[columns])  # the same targets give the same statistics
    assert ours.loc[ours["label"], "head_name"].tolist() == ["L0H0"]  # positive control: the planted head
    # negative
    assert not table.loc[(table["head_type"] == "two_back") & table["label"], "head_name"].tolist()


def test_a_registered_type_is_a_choice_of_the_command(planted, registered, capsys):
    registered(HeadTypeSpec("one_back", "attends to the token before", back(1), "natural"))
    code = main(["label", "--model", planted.name, "--types", "one_back", "--examples", "8", "--bootstrap",
                 "50", "--ablate", "none"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    table = pd.read_csv(io.StringIO(captured.out))
    assert (set(table["head_type"]) == {"one_back"}
            and table.loc[table["label"], "head_name"].tolist() == ["L0H0"])


def back_slots(offset: int):
    """The same targets as key slots `[batch query 1]`: key i − offset, −1 before row `offset`."""

    def slots(ctx: TargetContext):
        batch, n = ctx.input_ids.shape
        key = torch.arange(n) - offset  # [query]
        return {None: torch.where(key >= 0, key, -1)[None, :, None].expand(batch, n, 1)}

    return slots


def test_a_type_given_as_slots_or_as_a_dense_target_labels_the_same(planted, registered):
    """A user's type may give its targets as a dense pattern or as key slots (or both): each labels exactly
    like the other, and a slots-only type's dense pattern (views, target_pattern) is derived from the
    slots."""
    from probe.heads.registry import target_pattern

    registered(HeadTypeSpec("dense_back", "one back, as a pattern", back(1), "natural"))
    registered(HeadTypeSpec("slots_back", "one back, as key slots", None, "natural", slots=back_slots(1)))
    registered(HeadTypeSpec("both_back", "one back, both", back(1), "natural", slots=back_slots(1)))
    registered(HeadTypeSpec("slots_two", "two back, as key slots", None, "natural", slots=back_slots(2)))
    tokens = torch.tensor([4, 9, 4, 7, 2])
    assert torch.equal(target_pattern("slots_back", tokens), target_pattern("previous_token", tokens))
    assert target_pattern("slots_two", tokens).nonzero().tolist() == [[2, 0], [3, 1], [4, 2]]
    table = label_model(planted, LabelConfig(types=("dense_back", "slots_back", "both_back", "slots_two"),
                                             **CONFIG, output_share=False))
    dense, *others = (table[table["head_type"] == name].reset_index(drop=True)
                      for name in ("dense_back", "slots_back", "both_back"))
    columns = ["head_name", "score", "ci_low", "ci_high", "chance", "effect", "p_value", "label"]
    for other in others:
        pd.testing.assert_frame_equal(other[columns], dense[columns])
    assert dense.loc[dense["label"], "head_name"].tolist() == ["L0H0"]  # positive control: the planted head
    # negative control: nothing attends two back
    assert not table.loc[(table["head_type"] == "slots_two") & table["label"], "head_name"].tolist()


def test_a_type_needs_targets_or_slots():
    with pytest.raises(ProbeError, match="'no_keys' needs targets or slots") as raised:
        probe.heads.register(HeadTypeSpec("no_keys", "attends nowhere", None, "natural"))
    assert "\n" not in str(raised.value) and "no_keys" not in probe.heads.REGISTRY


@pytest.mark.parametrize("spec, message", [
    (HeadTypeSpec("previous_token", "again", back(1), "natural"), "'previous_token' is already registered"),
    (HeadTypeSpec("Two Back", "x", back(2), "natural"), "must be snake_case"),
    (HeadTypeSpec("two_back", "", back(2), "natural"), "needs a description"),
    (HeadTypeSpec("two_back", "x", "not a function", "natural"), "targets must be a function"),
    (HeadTypeSpec("two_back", "x", back(2), "pictures"), "probe 'pictures' must be one of natural, repeated"),
    (HeadTypeSpec("two_back", "x", back(2), "natural", kinds=frozenset({"vision"})), "kinds must be"),
    (HeadTypeSpec("two_back", "x", back(2), "natural", statistic="accuracy"),
     "accuracy statistic needs span"),
    (HeadTypeSpec("two_back", "x", back(2), "natural", loss_positions="all"), "loss_positions 'all'"),
    (HeadTypeSpec("two_back", "x", back(2), "natural", reads=frozenset({"spans"})), "reads must be"),
    ("two_back", "takes a probe.heads.HeadTypeSpec"),
])
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(ProbeError, match=message) as raised:
        probe.heads.register(spec)
    assert "\n" not in str(raised.value)
    assert "two_back" not in probe.heads.REGISTRY


def test_duplicate_registration_and_built_ins_cannot_be_removed(registered):
    spec = registered(HeadTypeSpec("one_back", "attends to the token before", back(1), "natural"))
    with pytest.raises(ProbeError, match="already registered"):
        probe.heads.register(spec)
    with pytest.raises(ProbeError, match="built-in"):
        probe.heads.unregister("induction")


def test_the_vocabulary_is_scanned_only_for_the_types_that_read_it(planted, registered, monkeypatch):
    """HeadTypeSpec.reads: the delimiter and sentence/bracket scans of the vocabulary run only when a scored
    type's targets read them (positional and repeat types read neither); a registered type that declares
    nothing gets both fields filled, one that declares frozenset() gets the empty defaults."""
    import probe.heads.label.probes as probes_module
    from probe.heads.probesets import delimiter_ids, token_classes

    scans = []
    monkeypatch.setattr(probes_module, "delimiter_ids", lambda tokenizer: scans.append("delimiters")
                        or delimiter_ids(tokenizer))
    monkeypatch.setattr(probes_module, "token_classes", lambda tokenizer: scans.append("classes")
                        or token_classes(tokenizer))
    seen = {}

    def recording(name):
        def targets(ctx: TargetContext):
            seen[name] = (ctx.delimiter_ids, ctx.classes)
            return back(1)(ctx)
        return targets

    config = dict(CONFIG, n_bootstrap=20, output_share=False)
    label_model(planted, LabelConfig(types=("previous_token", "duplicate_token", "induction"), **config))
    assert scans == []
    label_model(planted, LabelConfig(types=("delimiter",), **config))
    assert scans == ["delimiters"]
    scans.clear()
    registered(HeadTypeSpec("reads_all", "one back, reading every field", recording("reads_all"), "natural"))
    registered(HeadTypeSpec("reads_none", "one back, reading none", recording("reads_none"), "natural",
                            reads=frozenset()))
    label_model(planted, LabelConfig(types=("reads_none",), **config))
    assert scans == [] and seen["reads_none"] == ((), TargetContext(torch.zeros(1, 1)).classes)
    label_model(planted, LabelConfig(types=("reads_all",), **config))
    assert sorted(scans) == ["classes", "delimiters"]
    assert seen["reads_all"] == (delimiter_ids(planted.tokenizer), token_classes(planted.tokenizer))
    assert seen["reads_all"][0]  # the planted GPT-2's vocabulary has delimiters: the field is filled
