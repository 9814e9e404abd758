"""Probe sets: seeded repeated blocks with random lengths and offsets, template coreference sentences mapped
onto tokens through character offsets, and the JSONL probe-file loader's errors."""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import ProbeError
from probe.heads.probesets import (
    CorefVocabulary,
    SpanExample,
    content_token_ids,
    coreference_examples,
    coreference_probes,
    encode_span_example,
    load_probe_file,
    pad_span_batch,
    repeated_blocks,
    special_frame,
)
from probe.zoo.tiny import DEMO_WORDS, build_tiny, word_tokenizer

VOCAB = CorefVocabulary()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(VOCAB.words(), bos_token="<bos>")


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """A byte-level BPE tokenizer (GPT-2 style) trained on a few sentences, so most words split into
    pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<pad>"])
    backend.train_from_iterator(["the cat sat on the mat"] * 5, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>")


# ---- repeated blocks ---------------------------------------------------------------------------------------


def test_repeated_blocks_repeat_a_random_block_at_a_random_offset(tokenizer):
    probes = repeated_blocks(tokenizer, 40, 64, seed=3)
    assert probes.input_ids.shape == (40, 64)
    prefix, suffix = special_frame(tokenizer)
    assert prefix == [tokenizer.bos_token_id] and suffix == []
    assert (probes.input_ids[:, 0] == tokenizer.bos_token_id).all()
    content = probes.input_ids[:, 1:]
    assert not torch.isin(content, torch.tensor(tokenizer.all_special_ids)).any()
    for row, length, offset in zip(probes.input_ids, probes.block_len, probes.offset, strict=True):
        first = row[offset:offset + length]
        assert torch.equal(first, row[offset + length:offset + 2 * length])
        assert 63 // 8 <= length <= 63 // 2
    assert len(set(probes.block_len.tolist())) >= 10  # the period changes from example to example
    assert len(set(probes.offset.tolist())) >= 10


def test_repeated_blocks_are_seeded(tokenizer):
    a = repeated_blocks(tokenizer, 5, 32, seed=0)
    b = repeated_blocks(tokenizer, 5, 32, seed=0)
    c = repeated_blocks(tokenizer, 5, 32, seed=1)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.block_len, b.block_len)
    assert not torch.equal(a.input_ids, c.input_ids)


def test_fixed_block_length_control(tokenizer):
    probes = repeated_blocks(tokenizer, 6, 40, seed=0, block_len=7)
    assert probes.block_len.tolist() == [7] * 6


def test_repeated_blocks_reject_too_short_sequences(tokenizer):
    with pytest.raises(ProbeError, match="too short"):
        repeated_blocks(tokenizer, 1, 3, seed=0)


def test_content_tokens_exclude_special_tokens():
    _, bert_tokenizer = build_tiny("bert")
    ids = content_token_ids(bert_tokenizer)
    assert not set(ids.tolist()) & set(bert_tokenizer.all_special_ids)
    assert len(ids) == len(bert_tokenizer) - len(set(bert_tokenizer.all_special_ids))


# ---- coreference templates ---------------------------------------------------------------------------------


def noun_class(word: str) -> str:
    if word in VOCAB.male_names + VOCAB.male_roles:
        return "he"
    if word in VOCAB.female_names + VOCAB.female_roles:
        return "she"
    assert word in VOCAB.plural_nouns
    return "they"


def test_coreference_sentences_agree_with_exactly_the_antecedent():
    examples = coreference_examples(200, seed=0)
    vocabulary = set(VOCAB.words())
    for example in examples:
        assert set(example.words) <= vocabulary
        assert all(word == word.lower() for word in example.words)
        pronoun = example.words[example.pronoun]
        start, stop = example.antecedent
        assert stop == start + 1 and noun_class(example.words[start]) == pronoun
        assert example.distractor == example.distractors[0]
        for d_start, _ in example.distractors:
            assert noun_class(example.words[d_start]) != pronoun
        assert example.antecedent[1] < example.pronoun  # never adjacent: "because"/"then"/"," sits between
        assert example.pronoun - example.antecedent[0] >= 2
    # both orders, both numbers, names and role nouns all occur
    assert {e.antecedent_first for e in examples} == {True, False}
    assert {e.number for e in examples} == {"singular", "plural"}
    antecedents = {e.words[e.antecedent[0]] for e in examples}
    assert antecedents & set(VOCAB.male_names + VOCAB.female_names)
    assert antecedents & set(VOCAB.male_roles + VOCAB.female_roles)
    assert coreference_examples(20, seed=0) == examples[:20]  # a prefix of the same seeded stream


def test_coreference_examples_are_seeded_and_take_more_distractors():
    assert coreference_examples(10, seed=4) == coreference_examples(10, seed=4)
    assert coreference_examples(10, seed=4) != coreference_examples(10, seed=5)
    for example in coreference_examples(30, seed=0, n_distractors=2):
        assert len(example.distractors) == 2
        assert "and" in example.words


def test_char_spans_point_at_the_words():
    example = coreference_examples(1, seed=2)[0]
    span = example.to_span_example()
    assert span.text[slice(*span.query)] == example.words[example.pronoun]
    assert span.text[slice(*span.targets[0])] == example.words[example.antecedent[0]]
    assert span.text[slice(*span.distractors[0])] == example.words[example.distractor[0]]


def test_encoding_maps_spans_to_tokens_with_a_word_tokenizer(tokenizer):
    for example in coreference_examples(20, seed=1):
        encoded = encode_span_example(example.to_span_example(), tokenizer)
        tokens = tokenizer.convert_ids_to_tokens(list(encoded.input_ids))
        assert tokens[0] == "<bos>" and encoded.word_ids[0] == -1
        assert [tokens[i] for i in encoded.query_tokens] == [example.words[example.pronoun]]
        assert [tokens[i] for i in encoded.target_tokens] == [example.words[example.antecedent[0]]]
        assert encoded.target_words == (example.antecedent[0],) and encoded.query_words == (example.pronoun,)
        nearest_first = example.distractor[0] > example.antecedent[0]  # the distractor is nearer the pronoun
        assert encoded.baseline_correct is (not nearest_first)


def test_encoding_maps_spans_to_all_pieces_with_a_bpe_tokenizer(bpe_tokenizer):
    text = "waitress helped the children because they opened the box"
    example = SpanExample(text, (37, 41), ((20, 28),), ((0, 8),))
    encoded = encode_span_example(example, bpe_tokenizer)
    pieces = bpe_tokenizer.convert_ids_to_tokens(list(encoded.input_ids))
    assert len(encoded.target_tokens) > 1  # "children" is several pieces here
    assert "".join(pieces[i] for i in encoded.target_tokens).replace("Ġ", "") == "children"
    assert "".join(pieces[i] for i in encoded.query_tokens).replace("Ġ", "") == "they"
    assert len(encoded.target_words) == 1 and len(encoded.query_words) == 1
    assert {encoded.word_ids[i] for i in encoded.target_tokens} == set(encoded.target_words)
    assert encoded.baseline_correct is True  # "children" is nearer "they" than "waitress"


def test_coreference_probes_on_the_demo_tokenizer_keep_their_spans():
    tokenizer = word_tokenizer(DEMO_WORDS, bos_token="<bos>")  # most template words are <unk> here
    probes = coreference_probes(10, 0, tokenizer)
    assert len(probes) == 10 and all(len(p.query_tokens) == 1 and len(p.target_tokens) == 1 for p in probes)


def test_pad_span_batch(tokenizer):
    probes = coreference_probes(4, 0, tokenizer)
    batch = pad_span_batch(probes, tokenizer.pad_token_id)
    lengths = [len(p.input_ids) for p in probes]
    assert batch.input_ids.shape == (4, max(lengths))
    assert batch.attention_mask.sum(-1).tolist() == lengths
    assert (batch.input_ids[batch.attention_mask == 0] == tokenizer.pad_token_id).all()


# ---- probe file --------------------------------------------------------------------------------------------


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_probe_file_round_trip(tmp_path, tokenizer):
    text = "mary saw the king because she took the book ."
    path = write_lines(tmp_path / "p.jsonl", [
        json.dumps({"text": text, "query": [26, 29], "target": [0, 4], "distractors": [[13, 17]]}),
        "",
        json.dumps({"text": text, "query": [26, 29], "target": [[0, 4]]}),
    ])
    examples = load_probe_file(path)
    assert len(examples) == 2 and examples[0].source.endswith(
        "line 1") and examples[1].source.endswith("line 3")
    encoded = encode_span_example(examples[0], tokenizer)
    assert tokenizer.convert_ids_to_tokens([encoded.input_ids[i] for i in encoded.query_tokens]) == ["she"]
    assert encoded.baseline_correct is False  # "king" is nearer
    assert encode_span_example(examples[1], tokenizer).baseline_correct is None


@pytest.mark.parametrize("line, message", [
    ('{"text": "a b", "query": [0, 1]', "line 2: not valid JSON"),
    ('{"text": "a b", "query": [0, 1]}', "line 2: missing target"),
    ('{"text": "a b", "query": [0, 9], "target": [2, 3]}', r"line 2: query \[0, 9\] is not a non-empty span"),
    ('{"text": "a b", "query": "a", "target": [2, 3]}', "line 2: query must be"),
    ('{"text": "", "query": [0, 1], "target": [2, 3]}', "line 2: text must be a non-empty string"),
    ('[1, 2]', "line 2: expected a JSON object"),
])
def test_probe_file_errors_name_the_line(tmp_path, line, message):
    good = json.dumps({"text": "a b", "query": [2, 3], "target": [0, 1]})
    path = write_lines(tmp_path / "bad.jsonl", [good, line])
    with pytest.raises(ProbeError, match=message):
        load_probe_file(path)


def test_empty_or_missing_probe_file(tmp_path):
    with pytest.raises(ProbeError, match="is empty"):
        load_probe_file(write_lines(tmp_path / "empty.jsonl", ["", "  "]))
    with pytest.raises(ProbeError, match="does not exist"):
        load_probe_file(tmp_path / "nope.jsonl")


def test_spans_that_cover_no_token_or_overlap_are_rejected(tokenizer):
    text = "mary saw the king"
    with pytest.raises(ProbeError, match="share a token"):
        encode_span_example(SpanExample(text, (0, 4), ((0, 2),), source="f line 1"), tokenizer)
    with pytest.raises(ProbeError, match="f line 1: the query span"):
        encode_span_example(SpanExample(text + "   ", (18, 20), ((0, 4),), source="f line 1"), tokenizer)


# ------------------------------------------------------------------------------------------------------------
# Implicit-causality sentences, random sentences and nested-bracket probes
# ------------------------------------------------------------------------------------------------------------


def test_causality_examples_put_every_baseline_at_one_half():
    from probe.heads.probesets import CausalityVocabulary, causality_examples, span_baselines

    vocab = CausalityVocabulary()
    examples = causality_examples(64, seed=0)
    assert examples == causality_examples(64, seed=0)  # seeded
    spans = [e.to_span_example() for e in examples]
    for name in ("nearest", "first"):
        assert sum(dict(span_baselines(s))[name] for s in spans) == 32
    assert all("agreement" not in dict(span_baselines(s)) for s in spans)  # both names agree: no rule
    assert {s.group for s in spans} == {"subject-biased verb", "object-biased verb"}
    for example, span in zip(examples, spans, strict=True):
        verb = next(w for w in example.words if w in (*vocab.subject_verbs, *vocab.object_verbs))
        antecedent = example.words[example.antecedent[0]]
        first_name = next(w for w in example.words if w in (*vocab.male_names, *vocab.female_names))
        assert (antecedent == first_name) == (verb in vocab.subject_verbs)
        assert span.text[span.targets[0][0]:span.targets[0][1]] == antecedent
    tokenizer = word_tokenizer(vocab.words(), bos_token="<bos>")
    encoded = encode_span_example(spans[0], tokenizer)
    assert len(encoded.candidate_words) == 2 and tokenizer.unk_token_id not in encoded.input_ids


def english_tokenizer():
    from probe.heads.probesets import token_classes

    tokenizer = word_tokenizer([*DEMO_WORDS, *"()[]{}"], bos_token="<bos>")
    return tokenizer, token_classes(tokenizer)


def test_random_sentences_end_every_few_tokens_and_never_elsewhere():
    from probe.heads.corpus import token_weights
    from probe.heads.probesets import random_sentences
    from probe.heads.registry import sentence_start_pairs

    tokenizer, classes = english_tokenizer()
    ids = random_sentences(tokenizer, classes, 8, 64, seed=1, weights=token_weights(tokenizer, None))
    assert ids.shape == (8, 64) and torch.equal(ids, random_sentences(tokenizer, classes, 8, 64, 1,
                                                                        token_weights(tokenizer, None)))
    ends = classes.period | classes.sentence_end
    for row in ids.tolist():
        assert row[0] == tokenizer.bos_token_id
        positions = [i for i, t in enumerate(row) if t in ends]
        gaps = [b - a for a, b in zip([0, *positions], positions, strict=False)]
        assert positions and all(4 <= gap <= 13 for gap in gaps)  # 3..12 words, then the end
        pairs = sentence_start_pairs(row, classes)
        assert [start for _, start in pairs] == [1] + [p + 1 for p in positions[:len(pairs) - 1]]


def test_bracket_probes_insert_a_balanced_nested_word_with_gaps():
    from probe.heads.corpus import token_weights
    from probe.heads.probesets import bracket_probes, without_tokens
    from probe.heads.registry import bracket_pairs

    tokenizer, classes = english_tokenizer()
    brackets = set().union(*classes.openers, *classes.closers)
    weights = without_tokens(token_weights(tokenizer, None), brackets)
    content = repeated_blocks(tokenizer, 16, 64, seed=0, weights=weights).input_ids
    ids = bracket_probes(tokenizer, classes, content, seed=0)
    nested = 0
    for row in ids.tolist():
        positions = [i for i, t in enumerate(row) if t in brackets]
        assert len(positions) == 2 * (63 // 6) and min(b - a for a,
                                                       b in zip(positions, positions[1:], strict=False)) >= 2
        pairs = bracket_pairs(row, classes)
        assert len(pairs) == len(positions) // 2  # balanced: every closing bracket is matched
        nested += any(a < c < b for b, a in pairs for d, c in pairs if (d, c) != (b, a))
    assert nested >= 8  # most probes nest
    plain = word_tokenizer(list(DEMO_WORDS), bos_token="<bos>")  # no brackets: unchanged content
    from probe.heads.probesets import token_classes

    same = repeated_blocks(plain, 2, 32, seed=0).input_ids
    assert torch.equal(bracket_probes(plain, token_classes(plain), same, seed=0), same)
