"""The natural-text corpus shipped with the package: GAP (Wikipedia passages, Apache-2.0; see probe/data/gap).

* :func:`natural_text` — probes that look like a text model's inputs: GAP passages (development split) in a seeded
  order, concatenated up to the probe length, with the tokenizer's own framing ([CLS] … [SEP], <bos> …). Each
  probe starts at a passage boundary and no passage is used twice, so probes are independent clusters.
* :func:`token_weights` — the corpus' token frequencies on a tokenizer, for drawing repeated-block probes; never
  special, unused (``[unused17]``) or byte-fallback (``<0x0A>``) tokens.
* :func:`gap_examples` — the GAP coreference pairs as span examples (both candidate names have the pronoun's gender).
* :func:`covers` — whether a tokenizer reads the corpus (≤ :data:`MAX_UNKNOWN_SHARE` unknown tokens); models that do
  not (the zoo's word-level toys, protein models) get random-token probes instead.

The test split of GAP is not shipped and never used. The validation split is kept apart for tests that measure
attention on text the probes never saw.
"""

from __future__ import annotations

import csv
import gzip
import random
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import torch

from probe.errors import ProbeError
from probe.heads.probesets import SpanExample, special_frame
from probe.heads.vocab import excluded_token_ids  # noqa: F401 - re-exported (it lived here)

SPLITS = ("development", "validation")
PROBE_SPLIT = "development"  # probes are drawn from here; "validation" is for independent checks
SAMPLE_PASSAGES = 500  # passages tokenized to decide coverage and token frequencies (about 50,000 tokens)
MAX_UNKNOWN_SHARE = 0.05  # a tokenizer covers the corpus when at most this share of its tokens is unknown


@lru_cache(maxsize=4)
def gap_records(split: str = PROBE_SPLIT) -> tuple[dict[str, str], ...]:
    """The rows of one GAP split (dicts keyed by the TSV header)."""
    if split not in SPLITS:
        raise ProbeError(f"unknown GAP split {split!r}: choose from {', '.join(SPLITS)} (the test split is not shipped)")
    path = resources.files("probe.data").joinpath("gap", f"gap-{split}.tsv.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8", newline="") as handle:
        return tuple(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def passages(split: str = PROBE_SPLIT) -> tuple[str, ...]:
    """The distinct passages of a split, in file order."""
    return tuple(dict.fromkeys(record["Text"] for record in gap_records(split)))


@dataclass(frozen=True)
class CorpusTokens:
    """A split tokenized without special tokens: one id list per passage, and the share of unknown tokens."""

    passages: tuple[tuple[int, ...], ...]
    unknown_share: float


def tokenize_corpus(tokenizer, split: str = PROBE_SPLIT, limit: int | None = None) -> CorpusTokens:
    """The passages of `split` (the first `limit`, or all) as token ids (no special tokens)."""
    texts = list(passages(split))[:limit]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    total = sum(len(ids) for ids in encoded)
    unk = tokenizer.unk_token_id
    unknown = sum(ids.count(unk) for ids in encoded) if unk is not None else 0
    return CorpusTokens(tuple(tuple(ids) for ids in encoded), unknown / max(total, 1))


def covers(corpus: CorpusTokens) -> bool:
    """The tokenizer reads the corpus: at most MAX_UNKNOWN_SHARE of its tokens are unknown."""
    return corpus.unknown_share <= MAX_UNKNOWN_SHARE


def token_weights(tokenizer, corpus: CorpusTokens | None) -> torch.Tensor:
    """Probability of each token id `[vocab]` for drawing random probe tokens: the corpus' token frequencies when
    `corpus` is given, else uniform; zero for special, unused and byte-fallback tokens (and unknown ones)."""
    size = len(tokenizer)
    if corpus is None:
        weights = torch.ones(size, dtype=torch.float64)
    else:
        weights = torch.zeros(size, dtype=torch.float64)
        ids = torch.tensor([i for passage in corpus.passages for i in passage], dtype=torch.long)
        weights.index_add_(0, ids.clamp(0, size - 1), torch.ones(len(ids), dtype=torch.float64))
    excluded = sorted(excluded_token_ids(tokenizer))
    if tokenizer.unk_token_id is not None:
        excluded.append(tokenizer.unk_token_id)
    weights[torch.tensor(excluded, dtype=torch.long)] = 0.0
    if int((weights > 0).sum()) < 2:
        raise ProbeError("the tokenizer has fewer than two usable (non-special) tokens; random-token probes need a "
                         "vocabulary")
    return weights / weights.sum()


@dataclass(frozen=True)
class TokenProbes:
    """Probe sequences of equal length (no padding) with the cluster each belongs to (for the bootstrap)."""

    input_ids: torch.Tensor  # [example seq] long
    cluster: torch.Tensor  # [example] long


def natural_text(tokenizer, corpus: CorpusTokens, n_examples: int, seq_len: int, seed: int) -> TokenProbes:
    """`n_examples` probes of exactly `seq_len` tokens: framing + whole passages (seeded order) concatenated and cut
    at the length. Probes never share a passage; each is its own bootstrap cluster."""
    prefix, suffix = special_frame(tokenizer)
    room = seq_len - len(prefix) - len(suffix)
    if room < 4:
        raise ProbeError(f"--seq-len {seq_len} is too short for text probes: use at least "
                         f"{4 + len(prefix) + len(suffix)}")
    order = list(range(len(corpus.passages)))
    random.Random(seed).shuffle(order)
    rows, cursor = [], 0
    for _ in range(n_examples):
        tokens: list[int] = []
        while len(tokens) < room:
            if cursor == len(order):
                raise ProbeError(f"the natural-text corpus holds {sum(map(len, corpus.passages))} tokens: too few for "
                                 f"{n_examples} probes of {seq_len}; lower --examples or --seq-len")
            tokens.extend(corpus.passages[order[cursor]])
            cursor += 1
        rows.append(prefix + tokens[:room] + suffix)
    return TokenProbes(torch.tensor(rows, dtype=torch.long), torch.arange(n_examples))


def _span(record: dict[str, str], key: str) -> tuple[int, int]:
    """Character span of a GAP column (Pronoun, A or B) from its offset column."""
    start = int(record[f"{key}-offset"])
    return start, start + len(record[key])


def gap_examples(split: str = PROBE_SPLIT, n_examples: int | None = None, seed: int = 0) -> list[SpanExample]:
    """GAP pairs with exactly one coreferent candidate as span examples: query = the pronoun, target = that
    candidate's name, distractor = the other name (of the same gender, by GAP's design). Cluster = the source
    Wikipedia page; group = whether the antecedent is the first (A) or second (B) candidate. Seeded sample of
    `n_examples` (all when None)."""
    examples = []
    for record in gap_records(split):
        a_true, b_true = record["A-coref"] == "TRUE", record["B-coref"] == "TRUE"
        if a_true == b_true:
            continue
        text = record["Text"]

        pronoun, a, b = (_span(record, key) for key in ("Pronoun", "A", "B"))
        if any(text[s:e] != record[key] for (s, e), key in ((pronoun, "Pronoun"), (a, "A"), (b, "B"))):
            continue  # an offset that does not point at its string (rare in GAP): skip rather than guess
        target, other = (a, b) if a_true else (b, a)
        examples.append(SpanExample(text, pronoun, (target,), (other,), source=f"GAP {record['ID']}",
                                    cluster=record["URL"], group="antecedent A" if a_true else "antecedent B"))
    if n_examples is not None and n_examples < len(examples):
        examples = random.Random(seed).sample(examples, n_examples)
    return examples
