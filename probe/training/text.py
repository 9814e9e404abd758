"""Natural text for the natural-text organisms: which text they read, the tokenizer learnt from it, their
training windows and the held-out rows their in-context learning is measured on.

The text is the GAP corpus the package already ships (``probe/data/gap``: Wikipedia passages, Apache-2.0;
:mod:`probe.heads.corpus`). The split matters:

* **trained on: the validation split** (:data:`TRAIN_SPLIT`, 454 passages, 32,213 words); the tokenizer is
  learnt from it too;
* **held out: the development split** (:data:`HELD_OUT_SPLIT`, 1,999 passages), the text ``probe label``
  draws its natural-text probes, its repeated-block token frequencies and its GAP coreference pairs from, and
  the text the in-context-learning score is measured on (:mod:`probe.training.incontext`). So every label and
  every score of these organisms is measured on text they never read.

The Python-source organisms (``stdlib-code``, issue 54) read **the standard library's own source** instead
(:func:`code_passages`): its top-level modules in name order, every 8th held out (:data:`CODE_HELD_OUT_SPLIT`,
cut into 40-line passages for the ICL score), the rest trained on (:data:`CODE_SPLIT`, one passage a module).
Its bigrams repeat 3–5× more often than GAP's (docs/zoo.md); its bytes are those of the Python that runs it.

The tokenizer is a byte-level BPE learnt by the ``tokenizers`` library (deterministic: the same text and
vocabulary size give the same merges; checked in tests/training/test_text_organism.py), with ``<unk>``,
``<pad>`` and ``<bos>``; every encoded text starts with ``<bos>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from probe.heads.corpus import (  # noqa: F401 - the Python source splits are re-exported (they lived here)
    CODE_HELD_OUT_EVERY,
    CODE_HELD_OUT_SPLIT,
    CODE_MAX_BYTES,
    CODE_PASSAGE_LINES,
    CODE_SPLIT,
    code_passages,
    passages,
    stdlib_modules,
)

TRAIN_SPLIT = "validation"
HELD_OUT_SPLIT = "development"
BOS, UNK, PAD = "<bos>", "<unk>", "<pad>"
IGNORE = -100  # target value cross_entropy skips (as probe.training.data.IGNORE)


def held_out_split(split: str) -> str:
    """The split held out from training split `split` (what a model trained on it is measured on).

    Examples
    --------
    >>> from probe.training.text import held_out_split
    >>> held_out_split("stdlib"), held_out_split("validation")
    ('stdlib-held-out', 'development')
    """
    return CODE_HELD_OUT_SPLIT if split == CODE_SPLIT else HELD_OUT_SPLIT


def learn_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer learnt from `texts` (`vocab_size` tokens, the three specials included):
    GPT-2's pre-tokenisation (words with their leading space), no unknown tokens (every byte is in the
    alphabet), ``<bos>`` before every text."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[UNK, PAD, BOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(list(texts), trainer)
    bos = backend.token_to_id(BOS)
    backend.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=UNK, pad_token=PAD, bos_token=BOS)


@lru_cache(maxsize=4)
def corpus_tokenizer(split: str, vocab_size: int) -> PreTrainedTokenizerFast:
    """:func:`learn_tokenizer` on the passages of one split (:func:`probe.heads.corpus.passages`; cached:
    training and evaluation share it)."""
    return learn_tokenizer(passages(split), vocab_size)


_ENCODED: dict[tuple[str, str], list[list[int]]] = {}  # (tokenizer's content hash, split) -> passages
_ENCODED_KEEP = 4


def encode_passages(tokenizer, split: str) -> list[list[int]]:
    """Every passage of a GAP split as token ids, without ``<bos>``, in file order. Cached by the tokenizer's
    content (a fast tokenizer's JSON): the checkpoints of one run share one tokenizer, so a history encodes
    the split once, not once per checkpoint."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    key = None if backend is None else (hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest(), split)
    if key is not None and key in _ENCODED:
        return _ENCODED[key]
    encoded = tokenizer(list(passages(split)), add_special_tokens=False)["input_ids"]
    if key is not None:
        while len(_ENCODED) >= _ENCODED_KEEP:
            _ENCODED.pop(next(iter(_ENCODED)))
        _ENCODED[key] = encoded
    return encoded


@lru_cache(maxsize=4)
def token_stream(tokenizer, split: str) -> torch.Tensor:
    """The split as one stream `[token]`: each passage preceded by ``<bos>`` (the document separator), in
    file order (cached per tokenizer: training draws every batch from it)."""
    bos = tokenizer.bos_token_id
    return torch.tensor([token for ids in encode_passages(tokenizer, split) for token in (bos, *ids)],
                        dtype=torch.long)


def text_windows(generator: torch.Generator, stream: torch.Tensor, batch: int, length: int,
                 bos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Training rows: ``<bos>`` + a window of ``length − 1`` tokens of the stream at a random offset
    (uniform), and the next-token targets `[batch position]`; a target that is ``<bos>`` (the end of a
    passage) is not scored."""
    width = length - 1
    starts = torch.randint(len(stream) - width, (batch,), generator=generator)  # [batch]
    offsets = torch.arange(width + 1)  # [position]
    windows = stream[starts[:, None] + offsets]  # [batch width+1]
    bos = torch.full((batch, 1), bos_id, dtype=torch.long)
    tokens = torch.cat([bos, windows[:, :-1]], dim=1)  # [batch length]
    targets = windows.clone()  # [batch length]: position i predicts the window's token i
    targets[targets == bos_id] = IGNORE
    return tokens, targets


def held_out_rows(tokenizer, length: int, split: str = HELD_OUT_SPLIT,
                  limit: int | None = None) -> torch.Tensor:
    """Evaluation rows `[row position]`: ``<bos>`` + the first `length` tokens of every passage of `split`
    that has at least `length` (the first `limit` such passages, or all), in file order. Column k holds the
    context for predicting the passage's token k + 1 (1-based), so the loss at token k is read from column k −
    1."""
    rows = [[tokenizer.bos_token_id, *ids[:length]] for ids in encode_passages(tokenizer, split)
            if len(ids) >= length]
    return torch.tensor(rows[:limit], dtype=torch.long).reshape(-1, length + 1)


__all__ = ["BOS", "CODE_HELD_OUT_SPLIT", "CODE_SPLIT", "HELD_OUT_SPLIT", "TRAIN_SPLIT", "code_passages",
           "corpus_tokenizer", "encode_passages", "held_out_rows", "held_out_split",
           "learn_tokenizer", "stdlib_modules", "text_windows", "token_stream"]
