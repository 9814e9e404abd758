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
    """A word tokenizer over the corpus' own words (lower-cased whitespace split), with [CLS]/[SEP] framing
    and the kinds of tokens that must never be drawn."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for text in corpus.passages() for w in text.lower().split()})[:30000]
    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[unused0]",
                                                         "<0x0A>", *words])}
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


# ------------------------------------------------------------------------------------------------------------
# GAP windows that fit a model: whole sentences around the pronoun and both names
# ------------------------------------------------------------------------------------------------------------


def test_sentence_spans_keep_abbreviations_initials_and_decimals_inside_a_sentence():
    text = ('He met J. Smith in the U.S. in 1990. Then Dr. Who came (he said "yes.") Later it was 3.5 m '
            'long! OK?')
    assert [text[s:e] for s, e in corpus.sentence_spans(text)] == [
        "He met J. Smith in the U.S. in 1990.", 'Then Dr. Who came (he said "yes.")',
        "Later it was 3.5 m long!", "OK?"]


def test_crop_keeps_the_whole_passage_when_it_fits_and_whole_sentences_when_not():
    from probe.heads.probesets import SpanExample

    text = "Ann sang. Bo met Cy. Then she left. It rained. The end came."
    example = SpanExample(text, (text.index("she"), text.index("she") + 3), ((10, 12),),
                          ((17, 19),), source="x")
    assert corpus.crop_example(example, lambda t: True) is example
    # fits at most 3 sentences: the shortest window (sentences 2-3) grows by one before, then nothing more
    # fits
    cropped = corpus.crop_example(example, lambda t: len(corpus.sentence_spans(t)) <= 3)
    assert cropped.text == "Ann sang. Bo met Cy. Then she left."
    for span, word in ((cropped.query, "she"), (cropped.targets[0], "Bo"), (cropped.distractors[0], "Cy")):
        assert cropped.text[span[0]:span[1]] == word
    only = corpus.crop_example(example, lambda t: len(corpus.sentence_spans(t)) <= 2)
    assert only.text == "Bo met Cy. Then she left."
    assert corpus.crop_example(example, lambda t: len(corpus.sentence_spans(t)) <= 1) is None


def test_fit_gap_examples_crops_to_the_positions_and_counts_what_it_dropped():
    # all unknown: 1/word
    tokenizer = word_tokenizer(sorted({w for p in corpus.passages()[:0] for w in p.split()}))
    fitted = corpus.fit_gap_examples(tokenizer, 64)
    assert fitted.total == 1799 and len(fitted.examples) + fitted.dropped == fitted.total
    assert fitted.cropped > 0 and fitted.dropped > 0 and len(fitted.examples) > 500
    for example in fitted.examples[:300]:
        assert len(tokenizer(example.text)["input_ids"]) <= 64
        for span in (example.query, *example.targets, *example.distractors):
            assert 0 <= span[0] < span[1] <= len(example.text)
    by_source = {e.source: e for e in corpus.gap_examples()}
    for example in fitted.examples[:300]:  # the mention strings are where they were
        original = by_source[example.source]
        for old, new in zip((original.query, *original.targets),
                            (example.query, *example.targets), strict=True):
            assert original.text[old[0]:old[1]] == example.text[new[0]:new[1]]


@pytest.fixture(scope="module")
def gpt2_128(tmp_path_factory):
    """A GPT-2-shaped model with 128 positions and a byte-level BPE tokenizer that reads English (trained here
    on the GAP development passages: no GPT-2 tokenizer is available offline)."""
    import transformers

    from probe.zoo.tiny import english_bpe_tokenizer

    tokenizer = english_bpe_tokenizer(corpus.passages("development"), 2000)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2,
                                     n_head=4, bos_token_id=tokenizer.bos_token_id,
                                     eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("gpt2-128")
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_probe_label_with_the_defaults_reads_gap_on_a_128_position_gpt2(gpt2_128, tmp_path, capsys):
    """The acceptance case: no --coref-set, no --examples; GAP passages (mostly longer than 128 BPE tokens)
    are cropped to sentence windows, and coreference is scored on every pair that fits."""
    import pandas as pd

    from probe.cli import main

    out = tmp_path / "labels.csv"
    assert main(["label", "--model", str(gpt2_128), "--out", str(out), "--ablate", "none"]) == 0
    err = capsys.readouterr().err
    assert "cropped to whole sentences" in err and "of 1799 development pairs fit" in err
    table = pd.read_csv(out)
    coref = table[table["head_type"] == "coreference"]
    # more than 1,000 pairs: n_examples counts the selection half's (the other half confirms, issue 57)
    assert set(coref["probe_set"]) == {"gap"} and (coref["n_examples"] > 500).all()
    assert {"sentence_start", "bracket"} <= set(table["head_type"])
    assert set(table.loc[table["head_type"] == "bracket", "probe_set"]) == {"brackets"}
    assert table.loc[table["head_type"] == "sentence_start", "score"].notna().all()


def test_auto_falls_back_to_the_templates_with_a_note_when_no_gap_pair_fits(gpt2_128, monkeypatch):
    """(The shortest GAP window is 16 BPE tokens and the longest template 22, so no real length makes GAP fail
    and the templates fit: the fitting step is replaced by one that keeps nothing.)"""
    from probe.heads.label import LabelConfig, ProbeSource
    from probe.models import load

    monkeypatch.setattr(corpus, "fit_gap_examples", lambda tokenizer, max_tokens: corpus.FittedExamples((),
        1799, 0,
                                                                                                        1799))
    loaded = load(str(gpt2_128))
    notes = []
    name, examples = ProbeSource(loaded, LabelConfig(types=("coreference",)), notes.append).span_probes()
    assert name == "templates" and len(examples) == 64
    assert any("coreference is scored on the templates" in n for n in notes)
    with pytest.raises(ProbeError, match="no GAP pair fits"):
        ProbeSource(loaded, LabelConfig(coref_set="gap")).span_probes()
