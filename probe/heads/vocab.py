"""Facts about a tokenizer's vocabulary that probe sets and the corpus both need (kept apart so neither imports the
other's module for them)."""

from __future__ import annotations

import re

_UNUSED = re.compile(r"^(\[unused\d+\]|<unused\d+>|<extra_id_\d+>|\[UNUSED_?\d*\])$")
_BYTE_FALLBACK = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def excluded_token_ids(tokenizer) -> set[int]:
    """Special, unused and byte-fallback token ids: never drawn into probes."""
    excluded = set(tokenizer.all_special_ids)
    for token, index in tokenizer.get_vocab().items():
        if _UNUSED.match(token) or _BYTE_FALLBACK.match(token):
            excluded.add(index)
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    excluded.update(int(index) for index, token in added.items() if getattr(token, "special", False))
    return excluded
