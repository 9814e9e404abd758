"""Facts about a tokenizer's vocabulary that probe sets, the corpus and the registry all need (kept apart so
none of them imports another's module for them): excluded token ids, and the :class:`TokenClasses` of sentence
ends and brackets."""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

_UNUSED = re.compile(r"^(\[unused\d+\]|<unused\d+>|<extra_id_\d+>|\[UNUSED_?\d*\])$")
_BYTE_FALLBACK = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


_EXCLUDED_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def excluded_token_ids(tokenizer) -> set[int]:
    """Special, unused and byte-fallback token ids: never drawn into probes (cached per tokenizer; a copy)."""
    try:
        size, excluded = _EXCLUDED_CACHE.get(tokenizer, (None, None))
    except TypeError:  # a tokenizer that cannot be weakly referenced: no cache
        size, excluded = None, None
    if size != len(tokenizer):
        excluded = _excluded_token_ids(tokenizer)
        try:
            _EXCLUDED_CACHE[tokenizer] = (len(tokenizer), excluded)
        except TypeError:
            pass
    return set(excluded)


def _excluded_token_ids(tokenizer) -> set[int]:
    excluded = set(tokenizer.all_special_ids)
    for token, index in tokenizer.get_vocab().items():
        if _UNUSED.match(token) or _BYTE_FALLBACK.match(token):
            excluded.add(index)
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    excluded.update(int(index) for index, token in added.items() if getattr(token, "special", False))
    return excluded


@dataclass(frozen=True)
class TokenClasses:
    """Token ids by their role in sentences and brackets, read from a tokenizer's vocabulary by
    :func:`probe.heads.probesets.token_classes` (tokens are compared after dropping the "Ġ" / "▁" / "##"
    markers)."""

    special: frozenset[int] = frozenset()  # framing and padding tokens: never part of a sentence
    sentence_end: frozenset[int] = frozenset()  # always end a sentence: "!", "?", [SEP] / </s> / EOS
    # "." ends a sentence unless it closes an abbreviation or splits a decimal
    period: frozenset[int] = frozenset()
    # before a ".", these make it an abbreviation: a one-letter word, "mr"
    abbreviation: frozenset[int] = frozenset()
    # every one-letter token (word start or not: "U.S." -> "u", ".", "s", ".")
    letter: frozenset[int] = frozenset()
    digit_end: frozenset[int] = frozenset()  # tokens whose text ends in a digit ("3", "1990")
    # tokens that start with a digit and with no space marker ("5", "##5")
    digit_start: frozenset[int] = frozenset()
    openers: tuple[frozenset[int], ...] = ()  # per bracket kind, "(", "[", "{"
    closers: tuple[frozenset[int], ...] = ()  # per bracket kind, ")", "]", "}" (same order)
