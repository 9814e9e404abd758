"""Seeded probe inputs for head labelling.

Three sources, all reproducible from a seed:

* :func:`repeated_blocks` — random tokens in which one block of RANDOM length, at a RANDOM offset, is repeated
  once. Induction and duplicate-token targets exist only in the repeat, and because the block length changes
  from example to example, a head that attends by fixed position (i − P + 1) cannot pass as an induction head.
* :func:`coreference_examples` — sentences written from our own templates over :class:`CorefVocabulary`: a
  pronoun (he / she / they) whose antecedent is fixed by agreement (gender or number) with one earlier noun,
  next to one or more distractor nouns that disagree with it; both orders, singular and plural, names and role
  nouns.
* :func:`load_probe_file` — the user's own examples, one JSON object per line: text plus query and target
  character spans (see the function's doc).

Span examples (templates or file) are mapped onto tokens with the tokenizer's character offsets by
:func:`encode_span_example`. Everything here is pure: no global random state is touched.

One module per family: ``tokens`` (random tokens, repeated blocks, the special frame), ``spans`` (span
examples on tokens, batches), ``templates`` (agreement coreference), ``causality`` (implicit causality),
``probe_file`` (the user's file), ``brackets`` (sentence ends, brackets, random sentences); every public name
is importable from ``probe.heads.probesets``.
"""

from __future__ import annotations

from probe.heads.probesets.brackets import (
    ABBREVIATIONS,
    BRACKET_KINDS,
    bracket_probes,
    dyck_word,
    random_sentences,
    token_classes,
    without_tokens,
)
from probe.heads.probesets.causality import (
    CausalityVocabulary,
    causality_examples,
)
from probe.heads.probesets.probe_file import (
    load_probe_file,
)
from probe.heads.probesets.spans import (
    EncodedSpanExample,
    Span,
    SpanBatch,
    SpanExample,
    encode_span_example,
    pad_span_batch,
    span_baselines,
)
from probe.heads.probesets.templates import (
    CorefExample,
    CorefVocabulary,
    coreference_examples,
    coreference_probes,
)
from probe.heads.probesets.tokens import (
    RepeatedBlocks,
    content_token_ids,
    delimiter_ids,
    repeated_blocks,
    special_frame,
)

__all__ = ["ABBREVIATIONS", "BRACKET_KINDS", "CausalityVocabulary", "CorefExample", "CorefVocabulary",
    "EncodedSpanExample", "RepeatedBlocks", "Span", "SpanBatch", "SpanExample", "bracket_probes",
    "causality_examples", "content_token_ids", "coreference_examples", "coreference_probes", "delimiter_ids",
    "dyck_word", "encode_span_example", "load_probe_file", "pad_span_batch", "random_sentences",
    "repeated_blocks", "span_baselines", "special_frame", "token_classes", "without_tokens"]
