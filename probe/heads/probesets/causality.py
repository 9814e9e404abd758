"""Implicit-causality coreference sentences: two names of one gender, and the verb's class picks the
antecedent (Garvey & Caramazza 1974)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from probe.heads.probesets.spans import Span
from probe.heads.probesets.templates import CorefExample

# ------------------------------------------------------------------------------------------------------------
# Implicit-causality coreference sentences (two names of one gender; the verb picks the antecedent)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CausalityVocabulary:
    """Words and templates of the implicit-causality probe sentences (Garvey & Caramazza 1974; REFERENCE.md):
    "A thanked B because she …" → B, "A fascinated B because she …" → A. Both names have the pronoun's gender,
    so agreement cannot choose, and the verb class (subject- or object-biased) decides the antecedent. The
    verbs are single words so that both classes put the names at the same positions."""

    male_names: tuple[str, ...] = ("john", "bob", "tom", "sam", "paul", "mark", "luke", "adam")
    female_names: tuple[str, ...] = ("mary", "alice", "anna", "kate", "emma", "lucy", "rose", "jane")
    male_pronoun: str = "he"
    female_pronoun: str = "she"
    # the cause lies with the subject (NP1): "A fascinated B because she was clever" -> A
    subject_verbs: tuple[str, ...] = ("fascinated", "amused", "disappointed", "annoyed", "frightened",
                                      "charmed", "impressed", "inspired")
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
        listed = [*self.male_names, *self.female_names, self.male_pronoun, self.female_pronoun,
                  *self.subject_verbs, *self.object_verbs, *self.actions, *self.objects]
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
    pronoun when k // 2 is even; so over every 4 examples nearest mention, first mention and agreement (both
    names agree) are each right exactly half of the time. Names (two distinct ones of the pronoun's gender),
    verb, template, action and object are drawn from `seed`. `group` is the cue class, `template` the
    bootstrap cluster."""
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

