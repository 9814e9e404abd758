"""Paired clean / corrupted probe sets for path patching, and each head type's own loss on the clean one.

A corruption changes what a head type's mechanism reads and keeps the input's length, so that every position
of the clean run has a counterpart (:data:`CORRUPTIONS`):

* ``induction``, ``duplicate_token`` (repeated random blocks, :func:`probe.heads.probesets.repeated_blocks`):
  the first copy's tokens resampled from the same token distribution (each differs from the token it
  replaces); the second copy is kept, so the loss on it loses only what the first copy told the model;
* ``previous_token`` (its probe set: natural text, or random tokens): every content token moved one position
  right (x′_i = x_{i−1}, the first kept), so a head that reads the previous token reads the one before it;
* ``coreference`` (GAP pairs, the templates, the implicit-causality sentences or a probe file): the
  antecedent's name swapped with the other candidate's (where both have the same number of tokens; other
  examples are dropped, and a note says how many).

The clean batches carry the type's loss labels from :func:`probe.heads.label.ablation.loss_batch` (the
positions each type's ablation measures); a masked LM's corrupted input is masked at the same positions. Types
without a corruption (first token, delimiter, …) have no pairs: their circuits are found by composition only.
Retrieval is scored by generation (needle recall), not by a per-token loss: not patched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from probe.errors import ProbeError
from probe.heads.label.ablation import lm_head_trained, loss_batch
from probe.heads.label.config import LabelConfig, resolve_lengths
from probe.heads.label.probes import ProbeSource, TokenProbeSet
from probe.heads.probesets import EncodedSpanExample, pad_span_batch, special_frame
from probe.heads.registry import REGISTRY

CORRUPTIONS = {
    "induction": "the first copy's tokens resampled",
    "duplicate_token": "the first copy's tokens resampled",
    "previous_token": "every token shifted one position right",
    "coreference": "the antecedent's name swapped with the other candidate's",
}


@dataclass(frozen=True)
class PairedBatch:
    """One batch: the clean input with the type's loss labels, and its corrupted twin of the same shape."""

    clean: dict[str, torch.Tensor]  # input_ids [batch seq], labels [batch seq], attention_mask (optional)
    corrupted: dict[str, torch.Tensor]  # input_ids [batch seq], attention_mask (optional)


@dataclass(frozen=True)
class Pairs:
    """A type's paired batches, or why there are none."""

    head_type: str
    batches: tuple[PairedBatch, ...]
    corruption: str | None  # what was corrupted (CORRUPTIONS), None without pairs
    probe_set: str | None
    note: str | None = None  # why there are no pairs, or what was dropped

    @property
    def examples(self) -> int:
        return sum(len(batch.clean["input_ids"]) for batch in self.batches)


def _resample_first_copy(probes: TokenProbeSet, weights: torch.Tensor, seed: int) -> torch.Tensor:
    """`input_ids` with each row's first copy of the block redrawn by `weights`, each token different from the
    one it replaces."""
    generator = torch.Generator().manual_seed(seed)
    out = probes.input_ids.clone()  # [example seq]
    for row in range(len(out)):
        start, size = int(probes.repeat_start[row]), int(probes.repeat_len[row])
        original = out[row, start:start + size].clone()
        drawn = torch.multinomial(weights, size, replacement=True, generator=generator)  # [size]
        for _ in range(16):
            same = drawn == original
            if not same.any():
                break
            drawn[same] = torch.multinomial(weights, int(same.sum()), replacement=True, generator=generator)
        out[row, start:start + size] = drawn
    return out


def _shift_right(input_ids: torch.Tensor, frame: tuple[int, int]) -> torch.Tensor:
    """Content tokens moved one position right within the special frame (x′_i = x_{i−1}, the first kept)."""
    out = input_ids.clone()  # [example seq]
    start, stop = frame[0], input_ids.shape[1] - frame[1]
    out[:, start + 1:stop] = input_ids[:, start:stop - 1]
    return out


def _swapped(example: EncodedSpanExample) -> tuple[int, ...] | None:
    """The example's ids with the antecedent's tokens exchanged with those of the nearest other candidate of
    the same token length; None when there is none."""
    ids = list(example.input_ids)
    target = sorted(example.target_tokens)
    targets = set(example.target_words)
    others: dict[int, list[int]] = {}
    for index, word in enumerate(example.word_ids):
        if word in example.candidate_words and word not in targets and word >= 0:
            others.setdefault(word, []).append(index)
    query = min(example.query_tokens)
    for word in sorted(others, key=lambda w: abs(min(others[w]) - query)):
        tokens = others[word]
        if len(tokens) == len(target) and [ids[i] for i in tokens] != [ids[i] for i in target]:
            for a, b in zip(target, tokens, strict=True):
                ids[a], ids[b] = ids[b], ids[a]
            return tuple(ids)
    return None


def _masked_like(clean: dict[str, torch.Tensor], raw: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """A masked LM's corrupted ids masked where `loss_batch` masked the clean ones."""
    masked = clean["input_ids"] != raw  # [batch seq]
    return torch.where(masked, clean["input_ids"], corrupted)


def corrupted_pairs(
    loaded,
    head_type: str,
    config: LabelConfig = LabelConfig(),  # noqa: B008 - frozen
    examples: int = 16,
    note: Callable[[str], None] | None = None,
) -> Pairs:
    """The paired clean / corrupted batches of `head_type` on `loaded` (module doc), `examples` at most, in
    batches of ``config.batch_size``; the probe sets are those ``probe label`` uses with `config` (its seed
    and first probe length).

    Returns
    -------
    Pairs
        ``batches`` empty with a ``note`` where no corruption is defined for the type, the model has no
        trained LM head (the loss would measure a fresh one), or no example could be corrupted.
    """
    if head_type not in REGISTRY:
        raise ProbeError(f"unknown head type {head_type!r}: choose from {', '.join(REGISTRY)}")
    if examples < 1:
        raise ProbeError("examples must be at least 1")
    if head_type not in CORRUPTIONS:
        return Pairs(head_type, (), None, None, f"no corruption is defined for {head_type} (defined for "
                     f"{', '.join(CORRUPTIONS)}): no path patching, composition only")
    if not lm_head_trained(loaded):
        return Pairs(head_type, (), None, None, f"{loaded.name} has no trained LM head in its checkpoint: "
                     "the type's loss would measure a fresh one; no path patching, composition only")
    source = ProbeSource(loaded, config, note)
    spec = REGISTRY[head_type]
    if spec.probe == "spans":
        return _span_pairs(loaded, head_type, source, config, examples)
    probe = source.resolve(spec.probe)
    probes = source.token_probes(probe, resolve_lengths(loaded, config)[0])
    n = min(examples, len(probes.input_ids))
    if head_type in ("induction", "duplicate_token"):
        if probes.repeat_start is None:
            return Pairs(head_type, (), None, probe, f"{head_type} is scored on {probe} probes here, not on "
                         "repeated blocks: no corruption, composition only")
        corrupted = _resample_first_copy(probes, source.weights, config.seed + 1)
    else:
        corrupted = _shift_right(probes.input_ids, tuple(map(len, special_frame(loaded.tokenizer))))
    batches = []
    for start in range(0, n, config.batch_size):
        stop = min(start + config.batch_size, n)
        raw = probes.input_ids[start:stop]
        clean = loss_batch(loaded, head_type, raw, None,
                           None if probes.repeat_start is None else probes.repeat_start[start:stop],
                           None if probes.repeat_len is None else probes.repeat_len[start:stop],
                           seed=config.seed + start)
        if clean is None:
            return Pairs(head_type, (), None, probe, f"{loaded.name}'s tokenizer has no mask token: no path "
                         "patching")
        batches.append(PairedBatch(clean, {"input_ids": _masked_like(clean, raw, corrupted[start:stop])}))
    return Pairs(head_type, tuple(batches), CORRUPTIONS[head_type], probe)


def _span_pairs(loaded, head_type: str, source: ProbeSource, config: LabelConfig, examples: int) -> Pairs:
    name, encoded = source.span_probes()
    kept = [(example, swapped) for example in encoded if (swapped := _swapped(example)) is not None]
    dropped = len(encoded) - len(kept)
    kept = kept[:examples]
    if not kept:
        return Pairs(head_type, (), None, name, f"no {name} example has another candidate with as many "
                     "tokens as its antecedent: no name swap, composition only")
    pad = loaded.tokenizer.pad_token_id or 0
    batches = []
    for start in range(0, len(kept), config.batch_size):
        chunk = kept[start:start + config.batch_size]
        span_batch = pad_span_batch([example for example, _ in chunk], pad)
        clean = loss_batch(loaded, head_type, span_batch.input_ids, span_batch.attention_mask,
                           spans=span_batch.examples, seed=config.seed + start)
        if clean is None:
            return Pairs(head_type, (), None, name, f"{loaded.name}'s tokenizer has no mask token: no path "
                         "patching")
        corrupted = span_batch.input_ids.clone()  # [batch seq]
        for row, (_, swapped) in enumerate(chunk):
            corrupted[row, :len(swapped)] = torch.tensor(swapped)
        batches.append(PairedBatch(clean, {"input_ids": _masked_like(clean, span_batch.input_ids, corrupted),
                                           "attention_mask": span_batch.attention_mask}))
    message = (f"{dropped} of {len(encoded)} {name} examples have no other candidate with as many tokens as "
               "the antecedent: not used") if dropped else None
    return Pairs(head_type, tuple(batches), CORRUPTIONS[head_type], name, message)


__all__ = ["CORRUPTIONS", "PairedBatch", "Pairs", "corrupted_pairs"]
