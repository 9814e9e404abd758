"""The sentence and bracket pairs of one sequence of token ids, from the tokenizer's :class:`TokenClasses`:
the (query, key) pairs of the sentence_start and bracket head types (:mod:`probe.heads.targets` makes them
key slots). Pure functions of token ids."""

from __future__ import annotations

from probe.heads.vocab import TokenClasses


def sentence_start_pairs(ids: list[int], classes: TokenClasses) -> list[tuple[int, int]]:
    """(final token, first token) of every sentence of one sequence of token ids.

    A sentence ends at a "!", "?" or separator / EOS token, and at a "." except when (abbreviations) the token
    before it is a one-letter word or a listed abbreviation ("J. Smith", "Mr.", "etc."), or a letter that
    follows another "." or starts the sentence ("e.g.", "i.e.", "U.S." — a letter piece after a word, as in
    "cat" "s" ".", is not an abbreviation), or (decimals) it stands between a token ending in a digit and one
    starting with a digit without a space ("3.5"; WordPiece drops spaces, so there "3. 5" reads as a decimal
    too). The sentence's first token is the first non-special token after the previous sentence end (after the
    framing at the start); a sentence of one token (the end itself, e.g. "..." or "[SEP]" right after ".") has
    no pair. Known misses, by design of a token-only rule: a sentence ending in "U.S." or "etc." runs on into
    the next one.
    """
    pairs, start, n = [], None, len(ids)
    for i, token in enumerate(ids):
        end = token in classes.sentence_end
        if token in classes.period:
            abbreviation = i > 0 and (ids[i - 1] in classes.abbreviation or ids[i - 1] in classes.letter and (
                start == i - 1 or (i > 1 and ids[i - 2] in classes.period)))
            decimal = 0 < i < n - 1 and ids[i - 1] in classes.digit_end and ids[i + 1] in classes.digit_start
            end = not (abbreviation or decimal)
        if end:
            if start is not None and start < i:
                pairs.append((i, start))
            start = None
        elif start is None and token not in classes.special:
            start = i
    return pairs


def bracket_pairs(ids: list[int], classes: TokenClasses) -> list[tuple[int, int]]:
    """(closing bracket, its matching opening bracket) of one sequence of token ids: one stack over all kinds,
    so nesting is respected across kinds; a closing bracket matches the innermost open bracket when that is of
    its kind, and otherwise (or with none open) it is unmatched — no pair, and the stack is left as it was.
    Opening brackets never closed have no pair either."""
    pairs: list[tuple[int, int]] = []
    stack: list[tuple[int, int]] = []  # (kind, position)
    for i, token in enumerate(ids):
        for kind, (openers, closers) in enumerate(zip(classes.openers, classes.closers, strict=True)):
            if token in openers:
                stack.append((kind, i))
            elif token in closers:
                if stack and stack[-1][0] == kind:
                    pairs.append((i, stack.pop()[1]))
            else:
                continue
            break
    return pairs
