"""The probe sets of one model for :func:`probe.heads.label.label_model` (step 1): natural text, repeated
blocks, brackets and random sentences per length (:class:`TokenProbeSet`), and the span set (the user's file,
GAP or the templates). The corpus is tokenized once per model (:class:`ProbeSource`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from probe.errors import ProbeError
from probe.heads import corpus
from probe.heads.label.config import COREF_SETS, LabelConfig, Note, is_text_model
from probe.heads.probesets import (
    CausalityVocabulary,
    CorefVocabulary,
    EncodedSpanExample,
    bracket_probes,
    causality_examples,
    coreference_examples,
    delimiter_ids,
    encode_span_example,
    load_probe_file,
    random_sentences,
    repeated_blocks,
    token_classes,
    without_tokens,
)
from probe.heads.registry import TokenClasses


@dataclass(frozen=True)
class TokenProbeSet:
    """One batch-able set of token probes with what the targets and the bootstrap need."""

    name: str  # "natural" | "repeated": the probe_set column
    input_ids: torch.Tensor  # [example seq]
    cluster: torch.Tensor  # [example]
    repeat_start: torch.Tensor | None = None  # [example]
    repeat_len: torch.Tensor | None = None  # [example]


def first_probes(probes: TokenProbeSet, count: int) -> TokenProbeSet:
    """The first `count` examples of `probes` (the probes are drawn independently: any prefix is a sample)."""
    if count >= len(probes.input_ids):
        return probes
    return replace(probes, input_ids=probes.input_ids[:count],  # [count seq]
                   cluster=probes.cluster[:count],
                   repeat_start=None if probes.repeat_start is None else probes.repeat_start[:count],
                   repeat_len=None if probes.repeat_len is None else probes.repeat_len[:count])


def evenly_spaced(items: list, count: int) -> list:
    """`count` of `items` spread evenly over the list (span pairs come grouped by source: a prefix would not
    be a sample), in order."""
    if count >= len(items):
        return items
    step = len(items) / count
    return [items[int(k * step)] for k in range(count)]


class ProbeSource:
    """Builds a model's probe sets (the corpus is tokenized once per model)."""

    def __init__(self, loaded, config: LabelConfig, note: Note | None = None) -> None:
        self.loaded, self.config = loaded, config
        self.sample = None  # the first SAMPLE_PASSAGES passages: coverage and token frequencies
        self._passages = None  # every passage, tokenized when natural-text probes are first needed
        self.natural = False
        if is_text_model(loaded):
            tokens = corpus.tokenize_corpus(loaded.tokenizer, config.text, limit=corpus.SAMPLE_PASSAGES)
            if corpus.covers(tokens):
                self.sample, self.natural = tokens, True
            elif note is not None:
                note(f"{loaded.name}'s tokenizer reads {tokens.unknown_share:.0%} of the natural text "
                     f"({config.text}) "
                     "as unknown: natural-text types are scored on random-token probes, coreference on the "
                     "templates")
        self.weights = corpus.token_weights(loaded.tokenizer, self.sample)
        self.vocabulary = int((self.weights > 0).sum())
        self.note = note

    @functools.cached_property
    def delimiters(self) -> tuple[int, ...]:
        """The tokenizer's delimiter ids (a scan of the vocabulary, run when a scored type reads them)."""
        return delimiter_ids(self.loaded.tokenizer)

    @functools.cached_property
    def classes(self) -> TokenClasses:
        """The tokenizer's sentence ends and brackets (a scan of the vocabulary, run when first read)."""
        return token_classes(self.loaded.tokenizer) if is_text_model(self.loaded) else TokenClasses()

    def resolve(self, probe: str) -> str:
        """The probe set a spec's probe kind gets on this model. Where the tokenizer reads the corpus: natural
        text ("natural", "sentences") and natural text with seeded brackets ("brackets"); elsewhere random
        tokens: repeated blocks, random sentences, random tokens with seeded brackets."""
        if probe in ("natural", "sentences"):
            return "natural" if self.natural else ("repeated" if probe == "natural" else "random-sentences")
        if probe == "brackets":
            return "brackets" if self.natural else "random-brackets"
        return probe

    def _natural(self, seq_len: int):
        if self._passages is None:
            self._passages = corpus.tokenize_corpus(self.loaded.tokenizer, self.config.text)
        return corpus.natural_text(self.loaded.tokenizer, self._passages, self.config.examples, seq_len,
                                   self.config.seed)

    def token_probes(self, probe: str, seq_len: int) -> TokenProbeSet:
        """The probe set `probe` (a name :meth:`resolve` returns) of `seq_len` tokens."""
        config, tokenizer = self.config, self.loaded.tokenizer
        n = config.examples
        if probe == "natural":
            text = self._natural(seq_len)
            return TokenProbeSet("natural", text.input_ids, text.cluster)
        if probe == "brackets":
            text = self._natural(seq_len)
            ids = bracket_probes(tokenizer, self.classes, text.input_ids, config.seed)
            return TokenProbeSet("brackets", ids, text.cluster)
        if probe == "random-brackets":
            weights = without_tokens(self.weights, set().union(*self.classes.openers, *self.classes.closers))
            content = repeated_blocks(tokenizer, n, seq_len, config.seed, weights=weights).input_ids
            ids = bracket_probes(tokenizer, self.classes, content, config.seed)
            return TokenProbeSet("random-brackets", ids, torch.arange(n))
        if probe == "random-sentences":
            ids = random_sentences(tokenizer, self.classes, n, seq_len, config.seed, self.weights)
            return TokenProbeSet("random-sentences", ids, torch.arange(n))
        blocks = repeated_blocks(tokenizer, n, seq_len, config.seed, weights=self.weights)
        return TokenProbeSet("repeated", blocks.input_ids, torch.arange(n), blocks.offset, blocks.block_len)

    def span_probes(self) -> tuple[str, list[EncodedSpanExample]]:
        """The span probe set: the user's file, GAP (every development pair that fits the model, cropped to
        whole sentences where needed), or a template set; notes say what was cropped, dropped or fallen back
        to."""
        config, loaded = self.config, self.loaded
        if config.coref_set not in COREF_SETS:
            raise ProbeError(f"unknown coreference set {config.coref_set!r}: choose from "
                             f"{', '.join(COREF_SETS)}")
        if config.probe_file is not None:
            encoded = [encode_span_example(example, loaded.tokenizer)
                       for example in load_probe_file(config.probe_file)]
            for example in encoded:
                loaded.check_length(len(example.input_ids), example.source or "a coreference probe")
            return "file", encoded
        if config.coref_set == "gap" or (config.coref_set == "auto" and self.natural):
            found = self._gap()
            if found is not None:
                return "gap", found
        name = config.coref_set if config.coref_set in ("templates", "causality") else self._template_set()
        make = causality_examples if name == "causality" else coreference_examples
        encoded = [encode_span_example(e.to_span_example(), loaded.tokenizer)
                   for e in make(config.examples, config.seed)]
        for example in encoded:
            loaded.check_length(len(example.input_ids), example.source or "a coreference probe")
        return name, encoded

    def _gap(self) -> list[EncodedSpanExample] | None:
        """Every GAP development pair that fits the model (cropped where needed); None (auto: with a note)
        when none fits; ProbeError for an explicit --coref-set gap."""
        loaded = self.loaded
        fitted = corpus.fit_gap_examples(loaded.tokenizer, loaded.max_tokens)
        encoded = [encode_span_example(example, loaded.tokenizer) for example in fitted.examples]
        if self.note is not None and (fitted.cropped or fitted.dropped):
            self.note(f"GAP: {len(encoded)} of {fitted.total} development pairs fit {loaded.name}'s "
                      f"{loaded.max_tokens} positions ({fitted.cropped} cropped to whole sentences around "
                      f"the pronoun and both names, {fitted.dropped} dropped: no such window fits)")
        if encoded:
            # batches of similar length: little padding
            return sorted(encoded, key=lambda e: len(e.input_ids))
        if self.config.coref_set == "gap":
            raise ProbeError(f"no GAP pair fits {loaded.name}'s {loaded.max_tokens} positions, not even "
                             "cropped to the sentences around its pronoun and names; use --coref-set "
                             "templates")
        if self.note is not None:
            self.note(f"no GAP pair fits {loaded.name}'s {loaded.max_tokens} positions: coreference is "
                      "scored on the templates")
        return None

    def _template_set(self) -> str:
        """auto without GAP: the agreement templates, unless the tokenizer reads the implicit-causality
        vocabulary but not theirs (the implicit-causality organism)."""
        unknown = self.loaded.tokenizer.unk_token_id

        def reads(words: list[str]) -> bool:
            ids = self.loaded.tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
            return unknown is None or unknown not in ids

        if not reads(CorefVocabulary().words()) and reads(CausalityVocabulary().words()):
            return "causality"
        return "templates"

