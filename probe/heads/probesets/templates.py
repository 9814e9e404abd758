"""Coreference sentences from our own templates over :class:`CorefVocabulary`: a pronoun whose antecedent is
fixed by agreement (gender or number) with one earlier noun, beside distractor nouns that disagree with it."""

from __future__ import annotations

import random
from dataclasses import dataclass

from probe.errors import ProbeError
from probe.heads.probesets.spans import EncodedSpanExample, Span, SpanExample, encode_span_example

# ------------------------------------------------------------------------------------------------------------
# Coreference sentences from templates
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorefVocabulary:
    """Words and templates of the coreference probe sentences (all lower-case, one word per token of a word
    tokenizer). A pronoun agrees with exactly one earlier noun: he — a male singular, she — a female singular,
    they — a plural; the distractor nouns are of another class."""

    male_names: tuple[str, ...] = ("john", "bob", "tom", "sam", "paul")
    female_names: tuple[str, ...] = ("mary", "alice", "anna", "kate", "emma")
    male_roles: tuple[str, ...] = ("king", "father", "boy", "man", "waiter")  # written "the king"
    female_roles: tuple[str, ...] = ("queen", "mother", "girl", "woman", "waitress")
    # written "the doctors"
    plural_nouns: tuple[str, ...] = ("doctors", "nurses", "teachers", "pilots", "children")
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
        listed = [*self.male_names, *self.female_names, *self.male_roles, *self.female_roles,
                  *self.plural_nouns, self.male_pronoun, self.female_pronoun, self.plural_pronoun,
                  *self.verbs, *self.actions, *self.objects, self.determiner, self.conjunction]
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
                           (self.char_span(self.antecedent),),
                           tuple(self.char_span(s) for s in self.distractors),
                           source=f"template {self.template}", cluster=f"template {self.template}",
                           group=self.cue
                           or ("antecedent first" if self.antecedent_first else "antecedent later"),
                           agreement=self.agreement)


def _noun_phrase(noun: str, bare: bool, vocab: CorefVocabulary) -> list[str]:
    return [noun] if bare else [vocab.determiner, noun]


def coreference_examples(
    n_examples: int,
    seed: int,
    vocab: CorefVocabulary = CorefVocabulary(),  # noqa: B008 - frozen, so a shared default is safe
    n_distractors: int = 1,
) -> list[CorefExample]:
    """Seeded template sentences: antecedent class (male / female / plural) uniform, names or role nouns for
    the singulars, the antecedent's place among the nouns uniform (both orders), distractors of other
    classes."""
    if n_distractors < 1:
        raise ProbeError("coreference examples need at least one distractor noun")
    rng = random.Random(seed)
    classes = {
        "male": (vocab.male_pronoun,
                 [(w, True) for w in vocab.male_names] + [(w, False) for w in vocab.male_roles]),
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



def coreference_probes(n_examples: int, seed: int, tokenizer) -> list[EncodedSpanExample]:
    """The default coreference probe set on a tokenizer: template sentences with one distractor."""
    return [encode_span_example(example.to_span_example(), tokenizer)
            for example in coreference_examples(n_examples, seed)]

