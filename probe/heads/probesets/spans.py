"""Span examples on tokens: a text with query and target character spans (:class:`SpanExample`), mapped onto a
tokenizer's tokens with its offsets (:func:`encode_span_example`), with the nearest / first / agreement
baselines, and padded into batches (:func:`pad_span_batch`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from probe.errors import ProbeError

Span = tuple[int, int]  # [start, stop): word indices in a CorefExample, character offsets in a SpanExample


# ------------------------------------------------------------------------------------------------------------
# Span examples (templates or the user's file) on tokens
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpanExample:
    """A text with a query span attending to target spans, in character offsets [start, stop)."""

    text: str
    query: Span
    targets: tuple[Span, ...]
    distractors: tuple[Span, ...] = ()  # other candidate mentions, for the baselines and the accuracy
    source: str = ""  # where it came from ("FILE line N"), for messages
    cluster: str = ""  # bootstrap cluster (GAP: the Wikipedia page; templates: the template); "" = its own
    group: str = ""  # reported group of the per-source accuracy ("antecedent A", "template 2", ...)
    agreement: bool | None = None  # templates: an agreement (gender/number) rule picks the antecedent


@dataclass(frozen=True)
class EncodedSpanExample:
    """A SpanExample on tokens: what the coreference scorer needs."""

    input_ids: tuple[int, ...]
    query_tokens: tuple[int, ...]  # token positions of the attending word(s)
    target_tokens: tuple[int, ...]  # token positions of the antecedent(s)
    word_ids: tuple[int, ...]  # word index of each token; -1 for special tokens
    target_words: tuple[int, ...]  # word indices overlapping a target span
    query_words: tuple[int, ...]  # word indices overlapping the query span
    # (baseline name, it picks a target): nearest, first, agreement
    baselines: tuple[tuple[str, bool], ...] = ()
    # words of the marked mentions (targets + distractors); () = every word
    candidate_words: tuple[int, ...] = ()
    source: str = ""
    cluster: str = ""
    group: str = ""

    @property
    def baseline_correct(self) -> bool | None:
        """The nearest-mention baseline picks a target (None without distractors)."""
        return dict(self.baselines).get("nearest")


def _tokens_in(span: Span, offsets: Sequence[tuple[int, int]], special: Sequence[bool]) -> list[int]:
    start, stop = span
    return [index for index, ((a, b), is_special) in enumerate(zip(offsets, special, strict=True))
            if not is_special and b > a and a < stop and b > start]


def _nearest_is_target(example: SpanExample) -> bool | None:
    """Nearest-mention baseline: of the marked mentions before the query (all mentions if none precede it),
    the one ending closest to the query's start; True when it is a target."""
    if not example.distractors:
        return None
    mentions = [(span, True) for span in example.targets] + [(span, False) for span in example.distractors]
    before = [(span, is_target) for span, is_target in mentions if span[1] <= example.query[0]] or mentions
    _, is_target = min(before, key=lambda item: abs(example.query[0] - item[0][1]))
    return is_target


def _first_is_target(example: SpanExample) -> bool | None:
    """First-mention baseline: the marked mention that starts first; True when it is a target."""
    if not example.distractors:
        return None
    mentions = [(span, True) for span in example.targets] + [(span, False) for span in example.distractors]
    return min(mentions, key=lambda item: item[0][0])[1]


def span_baselines(example: SpanExample) -> tuple[tuple[str, bool], ...]:
    """The baselines that apply to an example and whether each picks a target: nearest mention, first mention
    (both need distractors) and the agreement rule (templates)."""
    found = [("nearest", _nearest_is_target(example)), ("first", _first_is_target(example)),
             ("agreement", example.agreement)]
    return tuple((name, bool(value)) for name, value in found if value is not None)


def encode_span_example(example: SpanExample, tokenizer) -> EncodedSpanExample:
    """Tokenize the text and map the character spans to tokens and words with the tokenizer's offsets."""
    if not getattr(tokenizer, "is_fast", False):
        raise ProbeError("span probes need a fast tokenizer (one that reports character offsets); "
                         "save the model with its tokenizer.json")
    encoding = tokenizer(example.text, return_offsets_mapping=True, return_special_tokens_mask=True)
    offsets = encoding["offset_mapping"]
    special = [bool(flag) for flag in encoding["special_tokens_mask"]]
    words = encoding.word_ids()
    word_ids = tuple(-1 if is_special or word is None else int(word) for word,
                     is_special in zip(words, special, strict=True))
    where = f"{example.source}: " if example.source else ""
    query_tokens = _tokens_in(example.query, offsets, special)
    if not query_tokens:
        raise ProbeError(f"{where}the query span {list(example.query)} covers no token of the text")
    target_tokens: list[int] = []
    for span in example.targets:
        covered = _tokens_in(span, offsets, special)
        if not covered:
            raise ProbeError(f"{where}the target span {list(span)} covers no token of the text")
        target_tokens.extend(covered)
    if set(query_tokens) & set(target_tokens):
        raise ProbeError(f"{where}the query and a target span share a token; mark them on different words")
    candidates: set[int] = set()
    for span in example.distractors:
        covered = _tokens_in(span, offsets, special)
        if not covered:
            raise ProbeError(f"{where}the distractor span {list(span)} covers no token of the text")
        candidates.update(word_ids[i] for i in covered)
    return EncodedSpanExample(
        input_ids=tuple(int(i) for i in encoding["input_ids"]),
        query_tokens=tuple(query_tokens),
        target_tokens=tuple(sorted(set(target_tokens))),
        word_ids=word_ids,
        target_words=tuple(sorted({word_ids[i] for i in target_tokens})),
        query_words=tuple(sorted({word_ids[i] for i in query_tokens})),
        baselines=span_baselines(example),
        candidate_words=tuple(sorted(candidates | {word_ids[i] for i in target_tokens})) if candidates
        else (), source=example.source,
        cluster=example.cluster or example.source,
        group=example.group,
    )





@dataclass(frozen=True)
class SpanBatch:
    """Encoded span examples padded into one batch (right padding)."""

    examples: tuple[EncodedSpanExample, ...]
    input_ids: torch.Tensor  # [batch seq] long
    attention_mask: torch.Tensor  # [batch seq] long, 1 = real token


def pad_span_batch(examples: Sequence[EncodedSpanExample], pad_id: int) -> SpanBatch:
    """Right-pad encoded span examples to the longest one."""
    longest = max(len(e.input_ids) for e in examples)
    input_ids = torch.full((len(examples), longest), pad_id, dtype=torch.long)  # [batch seq]
    attention_mask = torch.zeros(len(examples), longest, dtype=torch.long)  # [batch seq]
    for row, example in enumerate(examples):
        input_ids[row, :len(example.input_ids)] = torch.tensor(example.input_ids)
        attention_mask[row, :len(example.input_ids)] = 1
    return SpanBatch(tuple(examples), input_ids, attention_mask)

