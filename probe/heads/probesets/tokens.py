"""Random-token probes: repeated blocks (random length, random offset), the special-token frame of a
tokenizer, its content tokens and delimiters."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from probe.errors import ProbeError
from probe.heads.vocab import excluded_token_ids

# ------------------------------------------------------------------------------------------------------------
# Repeated random-token blocks
# ------------------------------------------------------------------------------------------------------------


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
    special = excluded_token_ids(tokenizer)
    ids = [index for index in range(len(tokenizer)) if index not in special]
    if len(ids) < 2:
        raise ProbeError("the tokenizer has fewer than two non-special tokens; random-token probes need a "
                         "vocabulary")
    return torch.tensor(ids, dtype=torch.long)


def repeated_blocks(
    tokenizer,
    n_examples: int,
    seq_len: int,
    seed: int,
    block_len: int | None = None,  # None: random per example; an int gives the fixed-period control
    # [vocab] token probabilities (probe.heads.corpus.token_weights); None: uniform
    weights: torch.Tensor | None = None,
) -> RepeatedBlocks:
    """Random tokens with one block repeated once: prefix (random length) · block · block · suffix.

    Block lengths are drawn uniformly from [max(2, m // 8), m // 2] with m the non-special length, the offset
    uniformly from what is left; the tokens are drawn by `weights` (the corpus' token frequencies), or
    uniformly from the vocabulary without special, unused and byte-fallback tokens.
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
        rows.append(torch.cat([torch.tensor(prefix, dtype=torch.long), tokens,
                               torch.tensor(suffix, dtype=torch.long)]))
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

