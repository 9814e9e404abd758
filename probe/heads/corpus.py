"""The natural texts every install has, by name (:data:`TEXTS`, :func:`passages`): GAP (Wikipedia passages,
Apache-2.0, shipped in probe/data/gap; its development and validation splits) and the Python standard
library's own source (PSF licence; :func:`code_passages`: the modules trained on and those held out).

* :func:`natural_text` — probes that look like a text model's inputs: passages of a text (GAP's development
  split by default; a code model's held-out modules with ``LabelConfig(text="stdlib-held-out")``) in a
  seeded order, concatenated up to the probe length, with the tokenizer's own framing ([CLS] … [SEP], <bos>
  …). Each probe starts at a passage boundary and no passage is used twice, so probes are independent
  clusters.
* :func:`token_weights` — the corpus' token frequencies on a tokenizer, for drawing repeated-block probes;
  never special, unused (``[unused17]``) or byte-fallback (``<0x0A>``) tokens.
* :func:`gap_examples` — the GAP coreference pairs as span examples (both candidate names have the pronoun's
  gender).
* :func:`covers` — whether a tokenizer reads the corpus (≤ :data:`MAX_UNKNOWN_SHARE` unknown tokens); models
  that do not (the zoo's word-level toys, protein models) get random-token probes instead.

The test split of GAP is not shipped and never used. The validation split is kept apart for tests that measure
attention on text the probes never saw.
"""

from __future__ import annotations

import csv
import gzip
import random
import re
import sysconfig
import weakref
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import torch

from probe.errors import ProbeError
from probe.heads.probesets import ABBREVIATIONS, SpanExample, special_frame
from probe.heads.vocab import excluded_token_ids  # noqa: F401 - re-exported (it lived here)

SPLITS = ("development", "validation")  # GAP's shipped splits
# The Python standard library's own source (PSF licence; on every Python install, its bytes those of the
# Python that runs it): its top-level modules in name order, every CODE_HELD_OUT_EVERY-th held out
CODE_SPLIT = "stdlib"
CODE_HELD_OUT_SPLIT = "stdlib-held-out"
CODE_HELD_OUT_EVERY = 8
CODE_MAX_BYTES = 400_000  # a larger module (none in 3.11's top level; a guard against generated tables)
CODE_PASSAGE_LINES = 40  # held-out modules are cut into passages of this many lines (ICL rows)
# every named text :func:`passages` reads: GAP's splits and the Python source's
TEXTS = (*SPLITS, CODE_SPLIT, CODE_HELD_OUT_SPLIT)
PROBE_SPLIT = "development"  # probes are drawn from here; "validation" is for independent checks
SAMPLE_PASSAGES = 500  # passages tokenized to decide coverage and token frequencies (about 50,000 tokens)
MAX_UNKNOWN_SHARE = 0.05  # a tokenizer covers the corpus when at most this share of its tokens is unknown


@lru_cache(maxsize=4)
def gap_records(split: str = PROBE_SPLIT) -> tuple[dict[str, str], ...]:
    """The rows of one GAP split (dicts keyed by the TSV header)."""
    if split not in SPLITS:
        raise ProbeError(f"unknown GAP split {split!r}: choose from {', '.join(SPLITS)} (the test split is "
                         "not shipped)")
    path = resources.files("probe.data").joinpath("gap", f"gap-{split}.tsv.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8", newline="") as handle:
        return tuple(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def stdlib_modules() -> list[Path]:
    """The standard library's top-level ``*.py`` modules (the directory ``sysconfig`` names ``stdlib``) of at
    most :data:`CODE_MAX_BYTES`, sorted by name.

    Returns
    -------
    list of pathlib.Path
        The modules' files (those of the Python that runs this).

    Examples
    --------
    >>> from probe.heads.corpus import stdlib_modules
    >>> "os.py" in {path.name for path in stdlib_modules()}
    True
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted((path for path in root.glob("*.py") if path.stat().st_size <= CODE_MAX_BYTES),
                  key=lambda path: path.name)


@lru_cache(maxsize=2)
def code_passages(split: str) -> tuple[str, ...]:
    """The Python source splits: :data:`CODE_SPLIT`, every module but each :data:`CODE_HELD_OUT_EVERY`-th
    (counting from 1), one passage per module; :data:`CODE_HELD_OUT_SPLIT`, those held-out modules cut into
    passages of :data:`CODE_PASSAGE_LINES` lines (blank-only passages dropped).

    Parameters
    ----------
    split : {"stdlib", "stdlib-held-out"}
        :data:`CODE_SPLIT` or :data:`CODE_HELD_OUT_SPLIT`.

    Returns
    -------
    tuple of str
        The passages, in module order.

    Examples
    --------
    >>> from probe.heads.corpus import CODE_HELD_OUT_SPLIT, CODE_PASSAGE_LINES, code_passages
    >>> max(passage.count("\\n") for passage in code_passages(CODE_HELD_OUT_SPLIT)) <= CODE_PASSAGE_LINES
    True
    """
    if split not in (CODE_SPLIT, CODE_HELD_OUT_SPLIT):
        raise ProbeError(f"{split!r} is not a Python source split: give {CODE_SPLIT!r} or "
                         f"{CODE_HELD_OUT_SPLIT!r}")
    modules = stdlib_modules()
    held = [(number + 1) % CODE_HELD_OUT_EVERY == 0 for number in range(len(modules))]
    if split == CODE_SPLIT:
        return tuple(path.read_text(encoding="utf-8") for path, out in zip(modules, held, strict=True)
                     if not out)
    found = []
    for path in (path for path, out in zip(modules, held, strict=True) if out):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        found += ["".join(lines[k:k + CODE_PASSAGE_LINES]) for k in range(0, len(lines), CODE_PASSAGE_LINES)]
    return tuple(passage for passage in found if passage.strip())


def passages(split: str = PROBE_SPLIT) -> tuple[str, ...]:
    """The distinct passages of a named text (:data:`TEXTS`), in file order: a GAP split, or a Python source
    split (:func:`code_passages`).

    Examples
    --------
    >>> from probe.heads.corpus import passages
    >>> len(passages("validation")), passages("stdlib-held-out") == code_passages("stdlib-held-out")
    (454, True)
    """
    if split not in TEXTS:
        raise ProbeError(f"unknown text {split!r}: choose from {', '.join(TEXTS)} (GAP's two shipped splits, "
                         "the Python standard library's source and its held-out modules)")
    if split in (CODE_SPLIT, CODE_HELD_OUT_SPLIT):
        return code_passages(split)
    return tuple(dict.fromkeys(record["Text"] for record in gap_records(split)))


@dataclass(frozen=True)
class CorpusTokens:
    """A split tokenized without special tokens: one id list per passage, and the share of unknown tokens."""

    passages: tuple[tuple[int, ...], ...]
    unknown_share: float


# Per-tokenizer results (a label run tokenizes the same corpus sample for every call on one model): kept as
# long as the tokenizer object lives, so repeated `label_model` calls pay the tokenization once.
_CORPUS_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenize_corpus(tokenizer, split: str = PROBE_SPLIT, limit: int | None = None) -> CorpusTokens:
    """The passages of `split` (the first `limit`, or all) as token ids (no special tokens); cached per
    tokenizer."""
    try:
        cached = _CORPUS_CACHE.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced: no cache
        cached = {}
    key = (split, limit, len(tokenizer))
    if key not in cached:
        cached[key] = _tokenize_corpus(tokenizer, split, limit)
    return cached[key]


def _tokenize_corpus(tokenizer, split: str, limit: int | None) -> CorpusTokens:
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
    """Probability of each token id `[vocab]` for drawing random probe tokens: the corpus' token frequencies
    when `corpus` is given, else uniform; zero for special, unused and byte-fallback tokens (and unknown
    ones)."""
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
        raise ProbeError("the tokenizer has fewer than two usable (non-special) tokens; random-token probes "
                         "need a vocabulary")
    return weights / weights.sum()


@dataclass(frozen=True)
class TokenProbes:
    """Probe sequences of equal length (no padding) with the cluster each belongs to (for the bootstrap)."""

    input_ids: torch.Tensor  # [example seq] long
    cluster: torch.Tensor  # [example] long


def natural_text(tokenizer, corpus: CorpusTokens, n_examples: int, seq_len: int, seed: int) -> TokenProbes:
    """`n_examples` probes of exactly `seq_len` tokens: framing + whole passages (seeded order) concatenated
    and cut at the length. Probes never share a passage; each is its own bootstrap cluster."""
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
                raise ProbeError(f"the natural-text corpus holds {sum(map(len, corpus.passages))} tokens: "
                                 f"too few for {n_examples} probes of {seq_len}; lower --examples or "
                                 "--seq-len")
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
                                    cluster=record["URL"],
                                    group="antecedent A" if a_true else "antecedent B"))
    if n_examples is not None and n_examples < len(examples):
        examples = random.Random(seed).sample(examples, n_examples)
    return examples


# A sentence ends at ".", "!" or "?" (and any closing quotes or brackets after it) followed by white space and
# an upper-case letter, a digit, or an opening quote or bracket; a "." after a single letter or a listed
# abbreviation ("J. Smith", "Dr. Who") does not end one.
_SENTENCE_END = re.compile(r"""[.!?]["'”’)\]]*(?=\s+["'“‘(\[]?[A-Z0-9])""")
_LAST_WORD = re.compile(r"([A-Za-z]+)\.$")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans [start, stop) of the sentences of a text (white space between sentences belongs to
    none)."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if text[match.start()] == ".":
            word = _LAST_WORD.search(text[start:match.start() + 1])
            if word and (len(word.group(1)) == 1 or word.group(1).lower() in ABBREVIATIONS):
                continue
        spans.append((start, match.end()))
        start = match.end()
        while start < len(text) and text[start].isspace():
            start += 1
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _shift(span: tuple[int, int], by: int) -> tuple[int, int]:
    return span[0] - by, span[1] - by


def crop_example(example: SpanExample, fits) -> SpanExample | None:
    """The example itself when `fits(text)`; else its text cropped to the shortest run of whole sentences
    holding the query and every target and distractor span, grown by whole sentences (alternately before and
    after) while it still fits, with the spans shifted; None when even the shortest run does not fit."""
    if fits(example.text):
        return example
    mentions = [example.query, *example.targets, *example.distractors]
    low, high = min(s for s, _ in mentions), max(e for _, e in mentions)
    sentences = sentence_spans(example.text)
    first = next(k for k, (_, stop) in enumerate(sentences) if stop > low)
    last = next(k for k, (_, stop) in enumerate(sentences) if stop >= high)

    def text_of(a: int, b: int) -> str:
        return example.text[sentences[a][0]:sentences[b][1]]

    if not fits(text_of(first, last)):
        return None
    grown = True
    while grown:
        grown = False
        if first > 0 and fits(text_of(first - 1, last)):
            first, grown = first - 1, True
        if last < len(sentences) - 1 and fits(text_of(first, last + 1)):
            last, grown = last + 1, True
    by = sentences[first][0]
    return SpanExample(text_of(first, last), _shift(example.query, by),
                       tuple(_shift(s, by) for s in example.targets),
                       tuple(_shift(s, by) for s in example.distractors), source=example.source,
                       cluster=example.cluster, group=example.group, agreement=example.agreement)


@dataclass(frozen=True)
class FittedExamples:
    """GAP pairs that fit a model: the examples, how many there were, how many were cropped and dropped."""

    examples: tuple[SpanExample, ...]
    total: int
    cropped: int
    dropped: int


def fit_gap_examples(tokenizer, max_tokens: int, split: str = PROBE_SPLIT) -> FittedExamples:
    """Every GAP pair of `split` (:func:`gap_examples`) that fits `max_tokens` tokens (framing included), each
    cropped by :func:`crop_example` to whole sentences where the passage is longer."""

    def fits(text: str) -> bool:
        return len(tokenizer(text)["input_ids"]) <= max_tokens

    examples = gap_examples(split)
    kept, cropped = [], 0
    for example in examples:
        fitted = crop_example(example, fits)
        if fitted is not None:
            kept.append(fitted)
            cropped += fitted is not example
    return FittedExamples(tuple(kept), len(examples), cropped, len(examples) - len(kept))
