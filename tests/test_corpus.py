"""The shipped natural-text corpus (GAP): splits, probes, token weights, coreference examples."""

from __future__ import annotations

from importlib import resources

import pytest
import torch

from probe.errors import ProbeError
from probe.heads import corpus
from probe.heads.probesets import encode_span_example, repeated_blocks
from probe.zoo.tiny import word_tokenizer


def test_only_development_and_validation_are_shipped_with_their_licence():
    folder = resources.files("probe.data").joinpath("gap")
    names = {entry.name for entry in folder.iterdir()}
    assert names >= {"gap-development.tsv.gz", "gap-validation.tsv.gz", "LICENSE", "NOTICE.md"}
    assert not any("test" in name for name in names)
    assert "Apache License" in folder.joinpath("LICENSE").read_text()
    assert len(corpus.gap_records("development")) == 2000 and len(corpus.gap_records("validation")) == 454
    with pytest.raises(ProbeError, match="test split is not shipped"):
        corpus.gap_records("test")


def test_gap_examples_are_two_same_gender_names_and_one_antecedent():
    examples = corpus.gap_examples("development")
    assert len(examples) == 925 + 874  # exactly one of A / B is coreferent
    for example in examples[:200]:
        (target,), (other,) = example.targets, example.distractors
        assert example.text[example.query[0]:example.query[1]].lower() in {
            "he", "she", "his", "her", "him", "hers", "himself", "herself"}
        assert target != other and example.cluster.startswith("http")
        assert example.group in ("antecedent A", "antecedent B")
    sample = corpus.gap_examples(n_examples=10, seed=3)
    assert sample == corpus.gap_examples(n_examples=10, seed=3) and len(sample) == 10


@pytest.fixture(scope="module")
def english():
    """A word tokenizer over the corpus' own words (lower-cased whitespace split), with [CLS]/[SEP] framing and the
    kinds of tokens that must never be drawn."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for text in corpus.passages() for w in text.lower().split()})[:30000]
    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[unused0]", "<0x0A>",
                                                         *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                           special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]")


def test_natural_text_probes_keep_the_framing_and_never_share_a_passage(english):
    tokens = corpus.tokenize_corpus(english)
    assert corpus.covers(tokens)
    probes = corpus.natural_text(english, tokens, 6, 40, seed=0)
    assert probes.input_ids.shape == (6, 40) and probes.cluster.tolist() == list(range(6))
    assert (probes.input_ids[:, 0] == 2).all() and (probes.input_ids[:, -1] == 3).all()
    starts = [tuple(row[1:6].tolist()) for row in probes.input_ids]
    passages = {tuple(p[:5]) for p in tokens.passages}
    assert all(start in passages for start in starts) and len(set(starts)) == 6
    assert torch.equal(probes.input_ids, corpus.natural_text(english, tokens, 6, 40, seed=0).input_ids)
    with pytest.raises(ProbeError, match="too few"):
        corpus.natural_text(english, tokens, 10**5, 40, seed=0)


def test_token_weights_follow_the_corpus_and_skip_special_unused_and_byte_tokens(english):
    tokens = corpus.tokenize_corpus(english)
    weights = corpus.token_weights(english, tokens)
    for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[unused0]", "<0x0A>"):
        assert weights[english.convert_tokens_to_ids(token)] == 0
    the = english.convert_tokens_to_ids("the")
    assert weights[the] > 1000 * weights[weights > 0].min()  # frequencies, not uniform
    probes = repeated_blocks(english, 32, 64, seed=0, weights=weights).input_ids
    assert not torch.isin(probes[:, 1:-1], torch.tensor([0, 1, 2, 3, 4, 5])).any()
    drawn = (probes == the).float().mean().item()
    assert drawn == pytest.approx(float(weights[the]), abs=0.03)  # "the" as often as in the corpus


def test_a_toy_tokenizer_does_not_cover_the_corpus():
    toy = word_tokenizer(["a", "b", "c"], bos_token="<bos>")
    assert not corpus.covers(corpus.tokenize_corpus(toy))
    uniform = corpus.token_weights(toy, None)
    assert set(uniform[uniform > 0].tolist()) == {1 / 3}


def test_gap_examples_encode_on_a_real_tokenizer(english):
    example = corpus.gap_examples(n_examples=1, seed=0)[0]
    encoded = encode_span_example(example, english)
    assert encoded.cluster == example.cluster and dict(encoded.baselines).keys() == {"nearest", "first"}
    assert set(encoded.target_words) <= set(encoded.candidate_words)
