"""Seeded synthetic training data for the model organisms.

Every generator returns `(tokens, targets)`: `tokens [batch position]` token ids, `targets [batch position]` the
id each position must predict next, or -100 where the next token is not predictable from context (the loss is
computed only on predictable tokens). Position 0 always holds the BOS token (the attention sink).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import torch

IGNORE = -100  # target value cross_entropy skips


def pseudo_words(n: int, seed: int = 0) -> list[str]:
    """`n` distinct pronounceable consonant-vowel pseudo-words ("kavo", "ripe", ...), the same list for a seed."""
    syllables = [c + v for c, v in itertools.product("bdfgklmnprstvz", "aeiou")]  # 70
    words = ["".join(pair) for pair in itertools.product(syllables, repeat=2)]  # 4900
    if n > len(words):
        raise ValueError(f"at most {len(words)} pseudo-words, asked for {n}")
    return random.Random(seed).sample(words, n)


def block_length(generator: torch.Generator, min_block: int, max_block: int) -> int:
    """A block length log-uniform in [min_block, max_block]: short blocks are common.

    Why: a circuit that matches the token k places back solves only blocks longer than k. With uniform lengths
    4-24 our models learned such look-alikes (layer-0 heads at offsets 5-6, layer-1 heads matching them); frequent
    1- and 2-token blocks, written up to 3 times ("a a a", "a b a b a b"), reward the canonical k = 1 circuit:
    a previous-token head in layer 0 and an induction head in layer 1."""
    if min_block == max_block:
        return min_block
    u = float(torch.rand((), generator=generator))
    return min(max_block, int(math.exp(math.log(min_block) + u * (math.log(max_block + 1) - math.log(min_block)))))


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
    """BOS, then runs A A B B B C C ...: a block of random tokens (length log-uniform in [min_block, max_block],
    see :func:`block_length`) written 2..max_copies times; cut at `length`. Predictable targets: every token
    from the second copy's second token on (the second copy's first token is not predictable from context)."""
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
    generator: torch.Generator, batch: int, word_ids: Sequence[int], bos_id: int, min_block: int, max_block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluation probes: BOS + one random block (length uniform in [min_block, max_block]) + its copy, one length
    per batch (no padding). Targets: the copy's tokens after its first."""
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
    """Sentences of the classifier's coreference templates (probe.heads.probesets.coreference_examples, same vocabulary),
    with 1..max_distractors disagreeing nouns, in which the word after the pronoun is
    :func:`coreference_action` of the antecedent: predicting it needs the referent, which only agreement
    (gender or number) identifies."""
    from probe.heads.probesets import coreference_examples

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
    answer), the same prompts as the retrieval probes (probe.heads.retrieval.needle_sequence) at a random depth.
    Targets: the answer's tokens (each predicted at the position before it); nothing else is predictable."""
    from probe.heads.retrieval import needle_sequence

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


def stack_right_padded(parts: Sequence[tuple[torch.Tensor, torch.Tensor]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, targets) batches of different lengths as one batch, right-padded with `pad_id` (targets IGNORE):
    in a causal LM padding after a row's end changes nothing before it."""
    width = max(tokens.shape[1] for tokens, _ in parts)
    tokens = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=pad_id) for t, _ in parts])
    targets = torch.cat([torch.nn.functional.pad(y, (0, width - y.shape[1]), value=IGNORE) for _, y in parts])
    return tokens, targets
