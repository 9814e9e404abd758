"""Seeded synthetic training data for the model organisms.

Every generator returns `(tokens, targets)`: `tokens [batch position]` token ids, `targets [batch position]`
the id each position must predict next, or -100 where the next token is not predictable from context (the loss
is computed only on predictable tokens). Position 0 always holds the BOS token (the attention sink).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import torch

from probe.heads.probesets import causality_examples, coreference_examples
from probe.heads.retrieval import needle_sequence

IGNORE = -100  # target value cross_entropy skips


def pseudo_words(n: int, seed: int = 0) -> list[str]:
    """`n` distinct pronounceable consonant-vowel pseudo-words ("kavo", "ripe", ...), the same list for a
    seed."""
    syllables = [c + v for c, v in itertools.product("bdfgklmnprstvz", "aeiou")]  # 70
    words = ["".join(pair) for pair in itertools.product(syllables, repeat=2)]  # 4900
    if n > len(words):
        raise ValueError(f"at most {len(words)} pseudo-words, asked for {n}")
    return random.Random(seed).sample(words, n)


def block_length(generator: torch.Generator, min_block: int, max_block: int) -> int:
    """A block length log-uniform in [min_block, max_block]: short blocks are common.

    Why: a circuit that matches the token k places back solves only blocks longer than k. With uniform lengths
    4-24 our models learned such look-alikes (layer-0 heads at offsets 5-6, layer-1 heads matching them);
    frequent 1- and 2-token blocks, written up to 3 times ("a a a", "a b a b a b"), reward the canonical k = 1
    circuit: a previous-token head in layer 0 and an induction head in layer 1."""
    if min_block == max_block:
        return min_block
    u = float(torch.rand((), generator=generator))
    return min(max_block,
               int(math.exp(math.log(min_block) + u * (math.log(max_block + 1) - math.log(min_block)))))


def repeated_blocks(
    generator: torch.Generator,
    batch: int,
    length: int,  # tokens per sequence, BOS included
    word_ids: Sequence[int],  # the ids random blocks draw from (vocabulary minus specials)
    bos_id: int,
    min_block: int,
    max_block: int,  # min_block == max_block: a fixed repeat period (the positional control)
    max_copies: int = 2,  # each block is written 2..max_copies times in a row
) -> tuple[torch.Tensor, torch.Tensor]:
    """BOS, then runs A A B B B C C ...: a block of random tokens (length log-uniform in [min_block,
    max_block], see :func:`block_length`) written 2..max_copies times; cut at `length`. Predictable targets:
    every token from the second copy's second token on (the second copy's first token is not predictable from
    context)."""
    words = torch.as_tensor(list(word_ids))
    tokens = torch.full((batch, length), bos_id, dtype=torch.long)  # [batch position]
    targets = torch.full((batch, length), IGNORE, dtype=torch.long)  # [batch position]
    for row in range(batch):
        position = 1
        while position < length:
            size = block_length(generator, min_block, max_block)
            copies = int(torch.randint(2, max_copies + 1, (1,), generator=generator))
            block = words[torch.randint(len(words), (size,), generator=generator)]
            run = block.repeat(copies)  # [copies·size]
            end = min(position + len(run), length)
            tokens[row, position:end] = run[: end - position]
            # run index r >= size + 1 is predicted at the position before it
            first = position + size + 1
            if first < end:
                targets[row, first - 1:end - 1] = tokens[row, first:end]
            position = end
    return tokens, targets


def repeat_probe(
    generator: torch.Generator, batch: int, word_ids: Sequence[int], bos_id: int, min_block: int,
    max_block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluation probes: BOS + one random block (length uniform in [min_block, max_block]) + its copy, one
    length per batch (no padding). Targets: the copy's tokens after its first."""
    words = torch.as_tensor(list(word_ids))
    size = int(torch.randint(min_block, max_block + 1, (1,), generator=generator))
    block = words[torch.randint(len(words), (batch, size), generator=generator)]  # [batch size]
    bos = torch.full((batch, 1), bos_id, dtype=torch.long)
    tokens = torch.cat([bos, block, block], dim=1)  # [batch 1+2·size]
    targets = torch.full_like(tokens, IGNORE)
    targets[:, size + 1: 2 * size] = tokens[:, size + 2:]
    return tokens, targets


def coreference_action(noun: str, vocab) -> str:
    """The action a sentence's pronoun is followed by in the organism's language: fixed by its antecedent noun
    (the noun's index within its agreement class, modulo the number of actions)."""
    for nouns in ((*vocab.male_names, *vocab.male_roles), (*vocab.female_names, *vocab.female_roles),
                  vocab.plural_nouns):
        if noun in nouns:
            return vocab.actions[nouns.index(noun) % len(vocab.actions)]
    raise ValueError(f"{noun!r} is not a noun of the coreference vocabulary")


def coreference_sentences(
    generator: torch.Generator, n: int, vocab, max_distractors: int = 3
) -> list[tuple[str, ...]]:
    """Sentences of the classifier's coreference templates (probe.heads.probesets.coreference_examples, same
    vocabulary), with 1..max_distractors disagreeing nouns, in which the word after the pronoun is
    :func:`coreference_action` of the antecedent: predicting it needs the referent, which only agreement
    (gender or number) identifies."""
    sentences = []
    for _ in range(n):
        seed, distractors = (int(x) for x in torch.randint(1 << 30, (2,), generator=generator))
        example = coreference_examples(1, seed, vocab, n_distractors=1 + distractors % max_distractors)[0]
        words = list(example.words)
        after = example.pronoun + 1
        if after >= len(words) or words[after] not in vocab.actions:
            raise ValueError("coreference templates must put {action} right after {pronoun}")
        words[after] = coreference_action(words[example.antecedent[0]], vocab)
        sentences.append(tuple(words))
    return sentences


def coreference_batch(
    generator: torch.Generator, batch: int, vocab, token_id: dict[str, int], bos_id: int, pad_id: int,
    max_distractors: int = 3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BOS + one sentence per row, right-padded with pad_id; the only target is the action after the pronoun
    (predicted at the pronoun's position), the one token the context determines."""
    sentences = coreference_sentences(generator, batch, vocab, max_distractors)
    longest = 1 + max(len(words) for words in sentences)
    tokens = torch.full((batch, longest), pad_id, dtype=torch.long)  # [batch position]
    targets = torch.full((batch, longest), IGNORE, dtype=torch.long)  # [batch position]
    pronouns = {vocab.male_pronoun, vocab.female_pronoun, vocab.plural_pronoun}
    for row, words in enumerate(sentences):
        ids = [bos_id, *(token_id[word] for word in words)]
        tokens[row, : len(ids)] = torch.tensor(ids)
        at = 1 + next(index for index, word in enumerate(words) if word in pronouns)
        targets[row, at] = ids[at + 1]
    return tokens, targets


def causality_action(name: str, vocab) -> str:
    """The action the pronoun is followed by in the implicit-causality organism's language: fixed by the
    antecedent name (its index among the names of its gender, modulo the number of actions)."""
    for names in (vocab.male_names, vocab.female_names):
        if name in names:
            return vocab.actions[names.index(name) % len(vocab.actions)]
    raise ValueError(f"{name!r} is not a name of the implicit-causality vocabulary")


def causality_batch(
    generator: torch.Generator, batch: int, vocab, token_id: dict[str, int], bos_id: int, pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BOS + one implicit-causality sentence per row (probe.heads.probesets.causality_examples), right-padded;
    the word after the pronoun is :func:`causality_action` of the antecedent, which the verb class alone picks
    (both names agree with the pronoun, and each name is first or second equally often). The only target is
    that word, predicted at the pronoun's position."""
    rows = []
    for _ in range(batch):
        seed, index = (int(x) for x in torch.randint(1 << 30, (2,), generator=generator))
        # index % 4: cue class and gender uniform
        example = causality_examples(index % 4 + 1, seed, vocab)[-1]
        words = list(example.words)
        words[example.pronoun + 1] = causality_action(words[example.antecedent[0]], vocab)
        rows.append((words, example.pronoun))
    longest = 1 + max(len(words) for words, _ in rows)
    tokens = torch.full((batch, longest), pad_id, dtype=torch.long)  # [batch position]
    targets = torch.full((batch, longest), IGNORE, dtype=torch.long)  # [batch position]
    for row, (words, pronoun) in enumerate(rows):
        ids = [bos_id, *(token_id[word] for word in words)]
        tokens[row, : len(ids)] = torch.tensor(ids)
        targets[row, pronoun + 1] = ids[pronoun + 2]
    return tokens, targets


BRACKETS = (("(", ")"), ("[", "]"), ("{", "}"))


def bracket_batch(
    generator: torch.Generator, batch: int, length: int, word_ids: Sequence[int],
    bracket_ids: Sequence[tuple[int, int]], bos_id: int, max_depth: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nested brackets of three kinds among random words: BOS, then at each step a word, or a random word
    followed by an opening bracket (depth ≤ max_depth), or the closing bracket of the innermost open one
    followed by a copy of the word written just before its opening bracket. Targets: that copy, predicted at
    the closing bracket — to make it the model must find the closing bracket's match (the word before it is
    what the match's previous-token information carries). Brackets still open at the end are never closed (no
    target)."""
    rng = random.Random(int(torch.randint(1 << 62, (1,), generator=generator)))
    words = list(word_ids)
    tokens = [[bos_id] * length for _ in range(batch)]  # [batch position]
    targets = [[IGNORE] * length for _ in range(batch)]  # [batch position]
    for row in range(batch):
        stack: list[tuple[int, int]] = []  # (kind, tag word id)
        position = 1
        while position < length:
            u = rng.random()
            if stack and (u < 0.3 or len(stack) == max_depth) and position + 1 < length:
                kind, tag = stack.pop()
                tokens[row][position], tokens[row][position + 1] = bracket_ids[kind][1], tag
                targets[row][position] = tag
                position += 2
            elif u < 0.6 and len(stack) < max_depth and position + 1 < length:
                kind, tag = rng.randrange(len(bracket_ids)), rng.choice(words)
                tokens[row][position], tokens[row][position + 1] = tag, bracket_ids[kind][0]
                stack.append((kind, tag))
                position += 2
            else:
                tokens[row][position] = rng.choice(words)
                position += 1
    return torch.tensor(tokens), torch.tensor(targets)


def sentence_batch(
    generator: torch.Generator, batch: int, length: int, word_ids: Sequence[int], end_ids: Sequence[int],
    bos_id: int, min_words: int = 2, max_words: int = 10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences of random words, each ending in one of `end_ids` (".", "!", "?", uniformly): the first word
    of every sentence after the first is the successor (the next word id in `word_ids`, cyclically) of the
    first word of the sentence before it. Targets: that first word, predicted at the sentence's end — to make
    it the model must read the first token of the sentence that ends there (a sentence-start head). Sentence
    lengths uniform in [min_words, max_words]."""
    rng = random.Random(int(torch.randint(1 << 62, (1,), generator=generator)))
    words = list(word_ids)
    successor = {word: words[(index + 1) % len(words)] for index, word in enumerate(words)}
    tokens = [[bos_id] * length for _ in range(batch)]  # [batch position]
    targets = [[IGNORE] * length for _ in range(batch)]  # [batch position]
    for row in range(batch):
        first = rng.choice(words)
        position = 1
        while position < length:
            size = rng.randint(min_words, max_words)
            sentence = [first] + [rng.choice(words) for _ in range(size - 1)]
            end = min(position + size, length)
            tokens[row][position:end] = sentence[: end - position]
            position = end
            if position >= length:
                break
            tokens[row][position] = rng.choice(list(end_ids))
            first = successor[first]
            if position + 1 < length:
                targets[row][position] = first
            position += 1
    return torch.tensor(tokens), torch.tensor(targets)


def needle_haystack(
    generator: torch.Generator,
    batch: int,
    length: int,  # prompt tokens per sequence, BOS included (the answer follows)
    word_ids: Sequence[int],  # the ids haystack, key and needle tokens draw from (vocabulary minus specials)
    bos_id: int,
    needle_len: int,
    key_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Needle-in-a-haystack copies: BOS · haystack · key · needle · haystack · key, then the needle again (the
    answer), the same prompts as the retrieval probes (probe.heads.retrieval.needle_sequence) at a random
    depth. Targets: the answer's tokens (each predicted at the position before it); nothing else is
    predictable."""
    weights = torch.zeros(max(word_ids) + 1, dtype=torch.float64)
    weights[torch.as_tensor(list(word_ids))] = 1.0
    tokens = torch.full((batch, length + needle_len), bos_id, dtype=torch.long)  # [batch position]
    targets = torch.full((batch, length + needle_len), IGNORE, dtype=torch.long)  # [batch position]
    for row in range(batch):
        depth = float(torch.rand((), generator=generator))
        body, start, end = needle_sequence(generator, weights, length - 1, depth, needle_len, key_len)
        tokens[row, 1:length] = body
        tokens[row, length:] = body[start:end]
        targets[row, length - 1:length + needle_len - 1] = body[start:end]
    return tokens, targets


def stack_right_padded(parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
                       pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, targets) batches of different lengths as one batch, right-padded with `pad_id` (targets
    IGNORE): in a causal LM padding after a row's end changes nothing before it."""
    width = max(tokens.shape[1] for tokens, _ in parts)
    tokens = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=pad_id) for t, _ in parts])
    targets = torch.cat([torch.nn.functional.pad(y, (0, width - y.shape[1]), value=IGNORE) for _, y in parts])
    return tokens, targets
