"""Seeded probe inputs for head labelling.

Three sources, all reproducible from a seed:

* :func:`repeated_blocks` — random tokens in which one block of RANDOM length, at a RANDOM offset, is repeated once.
  Induction and duplicate-token targets exist only in the repeat, and because the block length changes from example
  to example, a head that attends by fixed position (i − P + 1) cannot pass as an induction head.
* :func:`coreference_examples` — sentences written from our own templates over :class:`CorefVocabulary`: a pronoun
  (he / she / they) whose antecedent is fixed by agreement (gender or number) with one earlier noun, next to one or
  more distractor nouns that disagree with it; both orders, singular and plural, names and role nouns.
* :func:`load_probe_file` — the user's own examples, one JSON object per line: text plus query and target character
  spans (see the function's doc).

Span examples (templates or file) are mapped onto tokens with the tokenizer's character offsets by
:func:`encode_span_example`. Everything here is pure: no global random state is touched.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from probe.errors import ProbeError

Span = tuple[int, int]  # [start, stop): word indices in a CorefExample, character offsets in a SpanExample


# ---------------------------------------------------------------------------------------------------------------
# Repeated random-token blocks
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepeatedBlocks:
    """A batch of repeated-block probes, all `seq_len` tokens long (special tokens included, no padding)."""

    input_ids: torch.Tensor  # [example seq] long
    block_len: torch.Tensor  # [example] length of the repeated block
    offset: torch.Tensor  # [example] position of the block's first copy among all tokens (specials included)


def special_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The special token ids the tokenizer puts before and after a text (e.g. [<bos>], [] or [CLS], [SEP])."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    framed = tokenizer("a")["input_ids"]
    for start in range(len(framed) - len(plain) + 1):
        if framed[start:start + len(plain)] == plain:
            return list(framed[:start]), list(framed[start + len(plain):])
    return [], []


def content_token_ids(tokenizer) -> torch.Tensor:
    """Every token id of the vocabulary except special ones (<bos>, <pad>, <unk>, [CLS], ...), unused slots
    ([unused17]) and byte-fallback pieces (<0x0A>)."""
    from probe.heads.vocab import excluded_token_ids

    special = excluded_token_ids(tokenizer)
    ids = [index for index in range(len(tokenizer)) if index not in special]
    if len(ids) < 2:
        raise ProbeError("the tokenizer has fewer than two non-special tokens; random-token probes need a vocabulary")
    return torch.tensor(ids, dtype=torch.long)


def repeated_blocks(
    tokenizer,
    n_examples: int,
    seq_len: int,
    seed: int,
    block_len: int | None = None,  # None: random per example; an int gives the fixed-period control
    weights: torch.Tensor | None = None,  # [vocab] token probabilities (probe.heads.corpus.token_weights); None: uniform
) -> RepeatedBlocks:
    """Random tokens with one block repeated once: prefix (random length) · block · block · suffix.

    Block lengths are drawn uniformly from [max(2, m // 8), m // 2] with m the non-special length, the offset
    uniformly from what is left; the tokens are drawn by `weights` (the corpus' token frequencies), or uniformly
    from the vocabulary without special, unused and byte-fallback tokens.
    """
    prefix, suffix = special_frame(tokenizer)
    m = seq_len - len(prefix) - len(suffix)
    if m < 4:
        raise ProbeError(f"--seq-len {seq_len} is too short for repeated-block probes: use at least "
                         f"{4 + len(prefix) + len(suffix)}")
    if weights is None:
        vocab = content_token_ids(tokenizer)
        weights = torch.zeros(int(vocab.max()) + 1, dtype=torch.float64)
        weights[vocab] = 1.0
    generator = torch.Generator().manual_seed(seed)
    low, high = max(2, m // 8), m // 2
    if block_len is not None and not 1 <= block_len <= high:
        raise ProbeError(f"block length {block_len} does not fit twice into {m} tokens")
    rows, lengths, offsets = [], [], []
    for _ in range(n_examples):
        length = block_len or int(torch.randint(low, high + 1, (1,), generator=generator))
        offset = int(torch.randint(0, m - 2 * length + 1, (1,), generator=generator))
        tokens = torch.multinomial(weights, m, replacement=True, generator=generator)  # [content]
        tokens[offset + length:offset + 2 * length] = tokens[offset:offset + length]
        rows.append(torch.cat([torch.tensor(prefix, dtype=torch.long), tokens, torch.tensor(suffix, dtype=torch.long)]))
        lengths.append(length)
        offsets.append(offset + len(prefix))
    return RepeatedBlocks(torch.stack(rows), torch.tensor(lengths), torch.tensor(offsets))  # [example seq]


def delimiter_ids(tokenizer) -> tuple[int, ...]:
    """Token ids the delimiter type targets: tokens made only of punctuation (".", ",", "Ġ;", "##-"), and the
    separator / end-of-sequence tokens ([SEP], </s>, <eos>)."""
    found = set()
    for token, index in tokenizer.get_vocab().items():
        text = token.replace("##", "").lstrip("Ġ▁ ")
        if text and all(not char.isalnum() and not char.isspace() and char.isprintable() for char in text) \
                and not (text.startswith("<") and text.endswith(">") and len(text) > 2) \
                and not (text.startswith("[") and text.endswith("]") and len(text) > 2):
            found.add(index)
    for name in ("sep_token_id", "eos_token_id"):
        index = getattr(tokenizer, name, None)
        if index is not None:
            found.add(int(index))
    return tuple(sorted(found))


# ---------------------------------------------------------------------------------------------------------------
# Coreference sentences from templates
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorefVocabulary:
    """Words and templates of the coreference probe sentences (all lower-case, one word per token of a word
    tokenizer). A pronoun agrees with exactly one earlier noun: he — a male singular, she — a female singular,
    they — a plural; the distractor nouns are of another class."""

    male_names: tuple[str, ...] = ("john", "bob", "tom", "sam", "paul")
    female_names: tuple[str, ...] = ("mary", "alice", "anna", "kate", "emma")
    male_roles: tuple[str, ...] = ("king", "father", "boy", "man", "waiter")  # written "the king"
    female_roles: tuple[str, ...] = ("queen", "mother", "girl", "woman", "waitress")
    plural_nouns: tuple[str, ...] = ("doctors", "nurses", "teachers", "pilots", "children")  # written "the doctors"
    male_pronoun: str = "he"
    female_pronoun: str = "she"
    plural_pronoun: str = "they"
    verbs: tuple[str, ...] = ("saw", "liked", "met", "called", "helped", "thanked")  # between the nouns
    actions: tuple[str, ...] = ("took", "found", "wanted", "opened", "sold")  # after the pronoun
    objects: tuple[str, ...] = ("book", "ball", "house", "garden", "box")
    determiner: str = "the"
    conjunction: str = "and"  # joins several distractors: "the king and the queen"
    # {a} {b}: the nouns in order (the antecedent is one of them); the other slots draw from the fields above.
    # Filler words are written literally; `words()` lists them too.
    templates: tuple[str, ...] = (
        "{a} {verb} {b} because {pronoun} {action} the {object} .",
        "{a} {verb} {b} and then {pronoun} {action} the {object} .",
        "when {a} {verb} {b} , {pronoun} {action} the {object} .",
        "after {a} {verb} {b} , {pronoun} {action} the {object} .",
    )

    def words(self) -> list[str]:
        """Every word a sentence can contain (for building a word-level tokenizer), without duplicates."""
        listed = [*self.male_names, *self.female_names, *self.male_roles, *self.female_roles, *self.plural_nouns,
                  self.male_pronoun, self.female_pronoun, self.plural_pronoun, *self.verbs, *self.actions,
                  *self.objects, self.determiner, self.conjunction]
        for template in self.templates:
            listed.extend(word for word in template.split() if not word.startswith("{"))
        return list(dict.fromkeys(listed))


@dataclass(frozen=True)
class CorefExample:
    """One template sentence as words, with the pronoun, its antecedent and the distractors as word spans."""

    words: tuple[str, ...]
    pronoun: int  # word index of the pronoun
    antecedent: Span  # word span of the antecedent's noun (the determiner is not part of it)
    distractors: tuple[Span, ...]  # word spans of the other nouns (disagreeing with the pronoun)
    number: str  # "singular" | "plural": the antecedent's number
    antecedent_first: bool  # the antecedent is the first noun of the sentence
    template: int = 0  # index of the template in CorefVocabulary.templates (the bootstrap cluster)
    agreement: bool | None = True  # an agreement rule picks the antecedent (None: every candidate agrees)
    cue: str = ""  # what picks the antecedent, when not agreement (implicit-causality verb class): the group

    @property
    def distractor(self) -> Span:
        """The first distractor's word span (there is always at least one)."""
        return self.distractors[0]

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def char_span(self, span: Span) -> Span:
        """Character offsets in `text` of a word span."""
        starts = [0]
        for word in self.words:
            starts.append(starts[-1] + len(word) + 1)
        return starts[span[0]], starts[span[1]] - 1

    def to_span_example(self) -> SpanExample:
        return SpanExample(self.text, self.char_span((self.pronoun, self.pronoun + 1)),
                           (self.char_span(self.antecedent),), tuple(self.char_span(s) for s in self.distractors),
                           source=f"template {self.template}", cluster=f"template {self.template}",
                           group=self.cue or ("antecedent first" if self.antecedent_first else "antecedent later"),
                           agreement=self.agreement)


def _noun_phrase(noun: str, bare: bool, vocab: CorefVocabulary) -> list[str]:
    return [noun] if bare else [vocab.determiner, noun]


def coreference_examples(
    n_examples: int,
    seed: int,
    vocab: CorefVocabulary = CorefVocabulary(),  # noqa: B008 - frozen, so a shared default is safe
    n_distractors: int = 1,
) -> list[CorefExample]:
    """Seeded template sentences: antecedent class (male / female / plural) uniform, names or role nouns for the
    singulars, the antecedent's place among the nouns uniform (both orders), distractors of other classes."""
    if n_distractors < 1:
        raise ProbeError("coreference examples need at least one distractor noun")
    rng = random.Random(seed)
    classes = {
        "male": (vocab.male_pronoun, [(w, True) for w in vocab.male_names] + [(w, False) for w in vocab.male_roles]),
        "female": (vocab.female_pronoun,
                   [(w, True) for w in vocab.female_names] + [(w, False) for w in vocab.female_roles]),
        "plural": (vocab.plural_pronoun, [(w, False) for w in vocab.plural_nouns]),
    }
    examples = []
    for _ in range(n_examples):
        kind = rng.choice(list(classes))
        pronoun, pool = classes[kind]
        antecedent = rng.choice(pool)
        others = [noun for other, (_, nouns) in classes.items() if other != kind for noun in nouns]
        distractors = rng.sample(others, n_distractors)
        nouns = [antecedent, *distractors]
        place = rng.randrange(len(nouns))
        nouns.insert(place, nouns.pop(0))  # the antecedent moves to `place`
        template_index = rng.randrange(len(vocab.templates))
        template = vocab.templates[template_index]
        words: list[str] = []
        noun_spans: list[Span] = []
        pronoun_index = -1
        for token in template.split():
            if token == "{a}" or token == "{b}":
                group = nouns[:1] if token == "{a}" else nouns[1:]
                for index, (noun, bare) in enumerate(group):
                    if index:
                        words.append(vocab.conjunction)
                    words.extend(_noun_phrase(noun, bare, vocab))
                    noun_spans.append((len(words) - 1, len(words)))
            elif token == "{pronoun}":
                pronoun_index = len(words)
                words.append(pronoun)
            elif token in ("{verb}", "{action}", "{object}"):
                words.append(rng.choice({"{verb}": vocab.verbs, "{action}": vocab.actions,
                                         "{object}": vocab.objects}[token]))
            else:
                words.append(token)
        examples.append(CorefExample(
            words=tuple(words), pronoun=pronoun_index, antecedent=noun_spans[place],
            distractors=tuple(span for index, span in enumerate(noun_spans) if index != place),
            number="plural" if kind == "plural" else "singular", antecedent_first=place == 0,
            template=template_index,
        ))
    return examples


# ---------------------------------------------------------------------------------------------------------------
# Span examples (templates or the user's file) on tokens
# ---------------------------------------------------------------------------------------------------------------


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
    baselines: tuple[tuple[str, bool], ...] = ()  # (baseline name, it picks a target): nearest, first, agreement
    candidate_words: tuple[int, ...] = ()  # words of the marked mentions (targets + distractors); () = every word
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
    """Nearest-mention baseline: of the marked mentions before the query (all mentions if none precede it), the
    one ending closest to the query's start; True when it is a target."""
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
    word_ids = tuple(-1 if is_special or word is None else int(word) for word, is_special in zip(words, special, strict=True))
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
        candidate_words=tuple(sorted(candidates | {word_ids[i] for i in target_tokens})) if candidates else (),
        source=example.source,
        cluster=example.cluster or example.source,
        group=example.group,
    )


def coreference_probes(n_examples: int, seed: int, tokenizer) -> list[EncodedSpanExample]:
    """The default coreference probe set on a tokenizer: template sentences with one distractor."""
    return [encode_span_example(example.to_span_example(), tokenizer)
            for example in coreference_examples(n_examples, seed)]


# ---------------------------------------------------------------------------------------------------------------
# The user's probe file
# ---------------------------------------------------------------------------------------------------------------


def _span(value, what: str, where: str, text: str) -> Span:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in value)):
        raise ProbeError(f"{where}: {what} must be [start, stop] character offsets, got {json.dumps(value)}")
    start, stop = value
    if not 0 <= start < stop <= len(text):
        raise ProbeError(f"{where}: {what} [{start}, {stop}] is not a non-empty span inside the text "
                         f"(0..{len(text)})")
    return start, stop


def _spans(value, what: str, where: str, text: str) -> tuple[Span, ...]:
    """One span [s, e] or a list of spans [[s, e], ...]."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(x, (list, tuple)) for x in value):
        return tuple(_span(item, what, where, text) for item in value)
    return (_span(value, what, where, text),)


def load_probe_file(path: str | Path) -> list[SpanExample]:
    """Read a JSONL probe file: one object per line (blank lines skipped), e.g.

        {"text": "mary saw john because she was late", "query": [22, 25], "target": [0, 4],
         "distractors": [[9, 13]]}

    `query`: the attending word's character span [start, stop); `target`: one span or a list of spans (the
    antecedent mentions); `distractors` (optional): other candidate mentions, for the nearest-mention baseline.
    Every problem is a one-line ProbeError naming the file and line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProbeError(f"probe file {path} does not exist")
    examples = []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise ProbeError(f"probe file {path} line {line}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProbeError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            raise ProbeError(f"{where}: expected a JSON object with text, query and target")
        missing = [key for key in ("text", "query", "target") if key not in record]
        if missing:
            raise ProbeError(f"{where}: missing {', '.join(missing)} (each line needs text, query and target)")
        text = record["text"]
        if not isinstance(text, str) or not text.strip():
            raise ProbeError(f"{where}: text must be a non-empty string")
        query = _span(record["query"], "query", where, text)
        targets = _spans(record["target"], "target", where, text)
        distractors = _spans(record["distractors"], "distractors", where, text) if record.get("distractors") else ()
        examples.append(SpanExample(text, query, targets, distractors, source=where, group="file"))
    if not examples:
        raise ProbeError(f"probe file {path} is empty: write one JSON object per line with text, query and target")
    return examples


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


# ---------------------------------------------------------------------------------------------------------------
# Implicit-causality coreference sentences (two names of one gender; the verb picks the antecedent)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CausalityVocabulary:
    """Words and templates of the implicit-causality probe sentences (Garvey & Caramazza 1974; REFERENCE.md):
    "A thanked B because she …" → B, "A fascinated B because she …" → A. Both names have the pronoun's gender,
    so agreement cannot choose, and the verb class (subject- or object-biased) decides the antecedent. The verbs are
    single words so that both classes put the names at the same positions."""

    male_names: tuple[str, ...] = ("john", "bob", "tom", "sam", "paul", "mark", "luke", "adam")
    female_names: tuple[str, ...] = ("mary", "alice", "anna", "kate", "emma", "lucy", "rose", "jane")
    male_pronoun: str = "he"
    female_pronoun: str = "she"
    # the cause lies with the subject (NP1): "A fascinated B because she was clever" -> A
    subject_verbs: tuple[str, ...] = ("fascinated", "amused", "disappointed", "annoyed", "frightened", "charmed",
                                      "impressed", "inspired")
    # the cause lies with the object (NP2): "A thanked B because she had helped" -> B
    object_verbs: tuple[str, ...] = ("thanked", "praised", "blamed", "admired", "scolded", "punished",
                                     "congratulated", "envied")
    actions: tuple[str, ...] = ("took", "found", "wanted", "opened", "sold", "moved", "washed", "hid")
    objects: tuple[str, ...] = ("book", "ball", "house", "garden", "box", "car")
    templates: tuple[str, ...] = (
        "{a} {verb} {b} because {pronoun} {action} the {object} .",
        "{a} {verb} {b} since {pronoun} {action} the {object} .",
        "yesterday {a} {verb} {b} because {pronoun} {action} the {object} .",
        "{a} {verb} {b} at the party because {pronoun} {action} the {object} .",
        "{a} {verb} {b} , because {pronoun} {action} the {object} .",
        "{a} really {verb} {b} because {pronoun} {action} the {object} .",
    )

    def words(self) -> list[str]:
        """Every word a sentence can contain (for building a word-level tokenizer), without duplicates."""
        listed = [*self.male_names, *self.female_names, self.male_pronoun, self.female_pronoun, *self.subject_verbs,
                  *self.object_verbs, *self.actions, *self.objects]
        for template in self.templates:
            listed.extend(word for word in template.split() if not word.startswith("{"))
        return list(dict.fromkeys(listed))


def causality_examples(
    n_examples: int,
    seed: int,
    vocab: CausalityVocabulary = CausalityVocabulary(),  # noqa: B008 - frozen, so a shared default is safe
) -> list[CorefExample]:
    """Seeded implicit-causality sentences, balanced: example k has the subject-biased cue when k is even (the
    antecedent is the first name) and the object-biased cue when k is odd (the second name), and the male
    pronoun when k // 2 is even; so over every 4 examples nearest mention, first mention and agreement (both names
    agree) are each right exactly half of the time. Names (two distinct ones of the pronoun's gender), verb,
    template, action and object are drawn from `seed`. `group` is the cue class, `template` the bootstrap
    cluster."""
    rng = random.Random(seed)
    examples = []
    for index in range(n_examples):
        subject_cue = index % 2 == 0
        male = (index // 2) % 2 == 0
        names = vocab.male_names if male else vocab.female_names
        first, second = rng.sample(names, 2)
        verb = rng.choice(vocab.subject_verbs if subject_cue else vocab.object_verbs)
        template_index = rng.randrange(len(vocab.templates))
        words: list[str] = []
        spans: dict[str, Span] = {}
        pronoun_index = -1
        for token in vocab.templates[template_index].split():
            if token in ("{a}", "{b}"):
                spans[token] = (len(words), len(words) + 1)
                words.append(first if token == "{a}" else second)
            elif token == "{pronoun}":
                pronoun_index = len(words)
                words.append(vocab.male_pronoun if male else vocab.female_pronoun)
            elif token == "{verb}":
                words.append(verb)
            elif token in ("{action}", "{object}"):
                words.append(rng.choice(vocab.actions if token == "{action}" else vocab.objects))
            else:
                words.append(token)
        antecedent, other = (spans["{a}"], spans["{b}"]) if subject_cue else (spans["{b}"], spans["{a}"])
        examples.append(CorefExample(
            words=tuple(words), pronoun=pronoun_index, antecedent=antecedent, distractors=(other,),
            number="singular", antecedent_first=subject_cue, template=template_index, agreement=None,
            cue="subject-biased verb" if subject_cue else "object-biased verb",
        ))
    return examples


# ---------------------------------------------------------------------------------------------------------------
# Sentence ends and brackets: token classes, and seeded probes for tokenizers that do not read the corpus
# ---------------------------------------------------------------------------------------------------------------

# Before a ".", these make it an abbreviation rather than a sentence end (besides every single letter).
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "inc", "ltd", "co", "no",
                           "vol", "fig", "approx", "dept", "gen", "gov", "lt", "col", "sgt", "capt", "mt", "ft", "rev",
                           "ca", "cf", "al", "ed", "eds", "pp", "op", "cit"})
BRACKET_KINDS = (("(", ")"), ("[", "]"), ("{", "}"))
_MARKERS = ("Ġ", "▁", "##")


def _plain(token: str) -> tuple[str, bool]:
    """A vocabulary entry without its word-piece markers, and whether it carried a space marker (Ġ, ▁)."""
    spaced = token.startswith(("Ġ", "▁"))
    for marker in _MARKERS:
        if token.startswith(marker):
            return token[len(marker):], spaced
    return token, spaced


def token_classes(tokenizer):
    """The :class:`~probe.heads.registry.TokenClasses` of a tokenizer: which ids end sentences, are periods,
    abbreviations, digits, opening and closing brackets (what sentence_start and bracket targets need)."""
    from probe.heads.vocab import TokenClasses, excluded_token_ids

    special = set(excluded_token_ids(tokenizer))
    if tokenizer.pad_token_id is not None:
        special.add(int(tokenizer.pad_token_id))
    ends, periods, abbreviations, letters, digit_end, digit_start = set(), set(), set(), set(), set(), set()
    vocabulary = tokenizer.get_vocab()
    marked = any(token.startswith(("Ġ", "▁")) for token in vocabulary)  # byte-level BPE / SentencePiece: Ġ starts a word
    openers = [set() for _ in BRACKET_KINDS]
    closers = [set() for _ in BRACKET_KINDS]
    for token, index in vocabulary.items():
        if index in special:
            continue
        text, spaced = _plain(token)
        word_start = spaced if marked else not token.startswith("##")
        if text in ("!", "?"):
            ends.add(index)
        elif text == ".":
            periods.add(index)
        if len(text) == 1 and text.isalpha():
            letters.add(index)
        if word_start and ((len(text) == 1 and text.isalpha()) or text.lower() in ABBREVIATIONS):
            abbreviations.add(index)
        if text[-1:].isdigit():
            digit_end.add(index)
        if text[:1].isdigit() and not spaced:
            digit_start.add(index)
        for kind, (opening, closing) in enumerate(BRACKET_KINDS):
            if text == opening:
                openers[kind].add(index)
            elif text == closing:
                closers[kind].add(index)
    for name in ("sep_token_id", "eos_token_id"):
        index = getattr(tokenizer, name, None)
        if index is not None and index != tokenizer.bos_token_id:  # GPT-2's <|endoftext|> also opens texts
            ends.add(int(index))
    return TokenClasses(frozenset(special), frozenset(ends), frozenset(periods), frozenset(abbreviations),
                        frozenset(letters), frozenset(digit_end), frozenset(digit_start), tuple(map(frozenset, openers)),
                        tuple(map(frozenset, closers)))


def _canonical(tokenizer, ids: frozenset[int], text: str) -> int | None:
    """The id a tokenizer writes for `text` on its own, if it is one of `ids`; else the smallest of `ids`."""
    if not ids:
        return None
    written = tokenizer(text, add_special_tokens=False)["input_ids"]
    return written[0] if len(written) == 1 and written[0] in ids else min(ids)


def without_tokens(weights: torch.Tensor, excluded: set[int]) -> torch.Tensor:
    """`weights` [vocab] (token probabilities) with the ids of `excluded` (sentence ends, brackets) set to zero."""
    weights = weights.clone()
    index = torch.tensor(sorted(i for i in excluded if i < len(weights)), dtype=torch.long)
    weights[index] = 0.0
    if int((weights > 0).sum()) < 2:
        raise ProbeError("the tokenizer has fewer than two content tokens besides its sentence ends and brackets")
    return weights


def random_sentences(tokenizer, classes, n_examples: int, seq_len: int, seed: int, weights: torch.Tensor,
                     min_words: int = 3, max_words: int = 12) -> torch.Tensor:
    """`[example seq]` probes for sentence_start on tokenizers that do not read the corpus: random tokens (by
    `weights`, never a sentence end) in sentences of min_words..max_words tokens, each closed by one of the
    tokenizer's ".", "!", "?" (uniformly), inside the tokenizer's framing. No sentence-end token: no sentences,
    so every score is NaN (unknown)."""
    prefix, suffix = special_frame(tokenizer)
    m = seq_len - len(prefix) - len(suffix)
    ends = [i for i in (_canonical(tokenizer, classes.period, "."),
                        *(_canonical(tokenizer, frozenset(classes.sentence_end - classes.special), mark)
                          for mark in ("!", "?"))) if i is not None]
    content = without_tokens(weights, set(classes.period | classes.sentence_end))
    generator = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    rows = []
    for _ in range(n_examples):
        tokens = torch.multinomial(content, m, replacement=True, generator=generator).tolist()  # [content]
        if ends:
            position = rng.randint(min_words, max_words)
            while position < m:
                tokens[position] = rng.choice(ends)
                position += 1 + rng.randint(min_words, max_words)
        rows.append(prefix + tokens + suffix)
    return torch.tensor(rows, dtype=torch.long)


def dyck_word(n_pairs: int, n_kinds: int, max_depth: int, rng: random.Random) -> list[tuple[int, bool]]:
    """A random balanced bracket word of `n_pairs` pairs (depth ≤ max_depth), as (kind, is_opening) per bracket."""
    word, stack, opened = [], [], 0
    while opened < n_pairs or stack:
        can_open = opened < n_pairs and len(stack) < max_depth
        if can_open and (not stack or rng.random() < 0.5):
            kind = rng.randrange(n_kinds)
            stack.append(kind)
            word.append((kind, True))
            opened += 1
        else:
            word.append((stack.pop(), False))
    return word


def bracket_probes(tokenizer, classes, content: torch.Tensor, seed: int, max_depth: int = 4,
                   spacing: int = 6) -> torch.Tensor:
    """Seeded nested-bracket (Dyck-style) probes `[example seq]` for the bracket type: into each row of `content`
    (`[example seq]` token ids, framing included: natural text or random tokens) one balanced word of
    (content length) // spacing bracket pairs of the tokenizer's kinds, depth ≤ max_depth, replaces tokens at
    seeded positions with at least one content token between any two brackets (so a matching bracket is never
    simply the previous token). The content's own brackets stay and count too. A tokenizer without brackets gets
    its content back unchanged (every score NaN)."""
    prefix, suffix = special_frame(tokenizer)
    kinds = [(o, c) for o, c in ((_canonical(tokenizer, opening, text_o), _canonical(tokenizer, closing, text_c))
                                 for opening, closing, (text_o, text_c) in zip(classes.openers, classes.closers,
                                                                             BRACKET_KINDS, strict=True))
             if o is not None and c is not None]
    out = content.clone()
    if not kinds:
        return out
    rng = random.Random(seed)
    start, stop = len(prefix), content.shape[1] - len(suffix)
    m = stop - start
    n_pairs = max(1, m // spacing)
    if 4 * n_pairs > m:
        raise ProbeError(f"--seq-len {content.shape[1]} is too short for bracket probes: use at least "
                         f"{4 + len(prefix) + len(suffix)}")
    for row in range(len(out)):
        word = dyck_word(n_pairs, len(kinds), max_depth, rng)
        # len(word) positions among m with gaps >= 1: sorted distinct draws from m - len(word) + 1, plus their rank
        draws = sorted(rng.sample(range(m - len(word) + 1), len(word)))
        for rank, ((kind, opening), draw) in enumerate(zip(word, draws, strict=True)):
            out[row, start + draw + rank] = kinds[kind][0 if opening else 1]
    return out
