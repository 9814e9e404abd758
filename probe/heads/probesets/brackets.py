"""Sentence ends and brackets: a tokenizer's token classes, and seeded probes (random sentences,
nested-bracket Dyck words) for the sentence_start and bracket types."""

from __future__ import annotations

import random

import torch

from probe.errors import ProbeError
from probe.heads.probesets.tokens import special_frame
from probe.heads.vocab import TokenClasses, excluded_token_ids

# ------------------------------------------------------------------------------------------------------------
# Sentence ends and brackets: token classes, and seeded probes for tokenizers that do not read the corpus
# ------------------------------------------------------------------------------------------------------------

# Before a ".", these make it an abbreviation rather than a sentence end (besides every single letter).
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "inc", "ltd", "co",
                           "no", "vol", "fig", "approx", "dept", "gen", "gov", "lt", "col", "sgt", "capt",
                           "mt", "ft", "rev", "ca", "cf", "al", "ed", "eds", "pp", "op", "cit"})
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
    special = set(excluded_token_ids(tokenizer))
    if tokenizer.pad_token_id is not None:
        special.add(int(tokenizer.pad_token_id))
    ends, periods, abbreviations, letters, digit_end, digit_start = set(), set(), set(), set(), set(), set()
    vocabulary = tokenizer.get_vocab()
    # byte-level BPE / SentencePiece: Ġ starts a word
    marked = any(token.startswith(("Ġ", "▁")) for token in vocabulary)
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
                        frozenset(letters), frozenset(digit_end), frozenset(digit_start),
                        tuple(map(frozenset, openers)), tuple(map(frozenset, closers)))


def _canonical(tokenizer, ids: frozenset[int], text: str) -> int | None:
    """The id a tokenizer writes for `text` on its own, if it is one of `ids`; else the smallest of `ids`."""
    if not ids:
        return None
    written = tokenizer(text, add_special_tokens=False)["input_ids"]
    return written[0] if len(written) == 1 and written[0] in ids else min(ids)


def without_tokens(weights: torch.Tensor, excluded: set[int]) -> torch.Tensor:
    """`weights` [vocab] (token probabilities) with the ids of `excluded` (sentence ends, brackets) set to
    zero."""
    weights = weights.clone()
    index = torch.tensor(sorted(i for i in excluded if i < len(weights)), dtype=torch.long)
    weights[index] = 0.0
    if int((weights > 0).sum()) < 2:
        raise ProbeError("the tokenizer has fewer than two content tokens besides its sentence ends and "
                         "brackets")
    return weights


def random_sentences(tokenizer, classes, n_examples: int, seq_len: int, seed: int, weights: torch.Tensor,
                     min_words: int = 3, max_words: int = 12) -> torch.Tensor:
    """`[example seq]` probes for sentence_start on tokenizers that do not read the corpus: random tokens (by
    `weights`, never a sentence end) in sentences of min_words..max_words tokens, each closed by one of the
    tokenizer's ".", "!", "?" (uniformly), inside the tokenizer's framing. No sentence-end token: no
    sentences, so every score is NaN (unknown)."""
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
    """A random balanced bracket word of `n_pairs` pairs (depth ≤ max_depth), as (kind, is_opening) per
    bracket."""
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
    """Seeded nested-bracket (Dyck-style) probes `[example seq]` for the bracket type: into each row of
    `content` (`[example seq]` token ids, framing included: natural text or random tokens) one balanced word
    of (content length) // spacing bracket pairs of the tokenizer's kinds, depth ≤ max_depth, replaces tokens
    at seeded positions with at least one content token between any two brackets (so a matching bracket is
    never simply the previous token). The content's own brackets stay and count too. A tokenizer without
    brackets gets its content back unchanged (every score NaN)."""
    prefix, suffix = special_frame(tokenizer)
    kinds = [(o, c) for o, c in ((_canonical(tokenizer, opening, text_o),
                                  _canonical(tokenizer, closing, text_c))
                                 for opening, closing, (text_o, text_c)
                                 in zip(classes.openers, classes.closers, BRACKET_KINDS, strict=True))
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
        # len(word) positions among m with gaps >= 1: sorted distinct draws from m - len(word) + 1, plus their
        # rank
        draws = sorted(rng.sample(range(m - len(word) + 1), len(word)))
        for rank, ((kind, opening), draw) in enumerate(zip(word, draws, strict=True)):
            out[row, start + draw + rank] = kinds[kind][0 if opening else 1]
    return out
