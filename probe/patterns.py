"""Head types: for a token sequence, the target keys of each query.

One registry (:data:`REGISTRY`), one list of names (:data:`HEAD_TYPES`, the :data:`HeadType` Literal), shared by the
scorer, the CLI's ``--types`` and the dashboard. Definitions (query i, key j, tokens t; see REFERENCE.md):

=================  ===================================================================================
previous_token     j = i − 1
duplicate_token    j < i and t_j = t_i
induction          j ≤ i and t_{j−1} = t_i  (the token after an earlier occurrence of the current token)
first_token        j = 0, for i ≥ 1  (the attention sink; row 0 can only attend to itself in a causal model)
self               j = i, for i ≥ 1  (row 0 left out for the same reason)
coreference        query = the pieces of a pronoun (or any query span), targets = the antecedent's pieces;
                   needs spans, so its pattern is built from an :class:`~probe.probesets.EncodedSpanExample`
=================  ===================================================================================

All targets lie at or before the query, as in TransformerLens' detection patterns; for masked LMs the same
definitions are used (a bidirectional head only changes the chance level, see :mod:`probe.classify`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from probe.errors import ProbeError

HeadType = Literal["previous_token", "duplicate_token", "induction", "coreference", "first_token", "self"]
HEAD_TYPES: tuple[HeadType, ...] = get_args(HeadType)


def _previous_token(ids: torch.Tensor) -> torch.Tensor:
    n = ids.shape[-1]
    return torch.ones(n, n, dtype=torch.bool).tril(-1).triu(-1).expand(ids.shape[0], n, n)  # [batch query key]


def _duplicate_token(ids: torch.Tensor) -> torch.Tensor:
    same = ids[:, :, None] == ids[:, None, :]  # [batch query key]
    return same.tril(-1)


def _induction(ids: torch.Tensor) -> torch.Tensor:
    n = ids.shape[-1]
    pattern = torch.zeros(ids.shape[0], n, n, dtype=torch.bool)  # [batch query key]
    pattern[:, :, 1:] = ids[:, :, None] == ids[:, None, :-1]  # key j holds t_{j-1}
    return pattern.tril(0)


def _first_token(ids: torch.Tensor) -> torch.Tensor:
    n = ids.shape[-1]
    pattern = torch.zeros(ids.shape[0], n, n, dtype=torch.bool)  # [batch query key]
    pattern[:, 1:, 0] = True
    return pattern


def _self(ids: torch.Tensor) -> torch.Tensor:
    n = ids.shape[-1]
    eye = torch.eye(n, dtype=torch.bool)
    eye[0, 0] = False
    return eye.expand(ids.shape[0], n, n)  # [batch query key]


@dataclass(frozen=True)
class HeadTypeSpec:
    """One head type: what it means and how to build its target pattern from token ids."""

    name: HeadType
    description: str
    # [batch seq] token ids -> [batch query key] bool; None when the type needs spans (coreference)
    pattern: Callable[[torch.Tensor], torch.Tensor] | None


REGISTRY: dict[HeadType, HeadTypeSpec] = {
    spec.name: spec for spec in (
        HeadTypeSpec("previous_token", "attends to the token just before (j = i − 1)", _previous_token),
        HeadTypeSpec("duplicate_token", "attends to earlier copies of the current token", _duplicate_token),
        HeadTypeSpec("induction", "attends to the token after an earlier copy of the current token", _induction),
        HeadTypeSpec("coreference", "attends from a pronoun to its antecedent", None),
        HeadTypeSpec("first_token", "attends to the first token (attention sink)", _first_token),
        HeadTypeSpec("self", "attends to the current token", _self),
    )
}
assert tuple(REGISTRY) == HEAD_TYPES  # one list of names

# Types defined by the token ids alone (scored on the repeated-block probes).
TOKEN_TYPES: tuple[HeadType, ...] = tuple(name for name in HEAD_TYPES if REGISTRY[name].pattern is not None)


def parse_head_types(text: str | None) -> tuple[HeadType, ...]:
    """"previous_token,induction" -> ("previous_token", "induction"); None/"all" -> every type."""
    if text is None or text.strip() in ("", "all"):
        return HEAD_TYPES
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if name not in REGISTRY:
            raise ProbeError(f"unknown head type {name!r}: choose from {', '.join(HEAD_TYPES)}")
    return tuple(dict.fromkeys(names))  # type: ignore[return-value]


def batch_pattern(head_type: HeadType, input_ids: torch.Tensor) -> torch.Tensor:
    """Target pattern of a token type for a batch: [batch seq] ids -> [batch query key] bool (a new tensor)."""
    spec = REGISTRY[head_type]
    if spec.pattern is None:
        raise ProbeError(f"{head_type} targets need spans: pass an encoded span example, not token ids")
    return spec.pattern(input_ids.detach().cpu().long()).clone()


def target_pattern(head_type: HeadType, token_ids) -> torch.Tensor:
    """The target keys of each query: bool `[query key]`.

    `token_ids`: a 1-D sequence of token ids for the token types; for ``coreference`` an
    :class:`~probe.probesets.EncodedSpanExample` (its query pieces × its antecedent pieces).
    """
    if head_type not in REGISTRY:
        raise ProbeError(f"unknown head type {head_type!r}: choose from {', '.join(HEAD_TYPES)}")
    if head_type == "coreference":
        example = token_ids
        if not hasattr(example, "query_tokens"):
            raise ProbeError("coreference targets need spans: pass an EncodedSpanExample (probe.probesets)")
        n = len(example.input_ids)
        pattern = torch.zeros(n, n, dtype=torch.bool)  # [query key]
        pattern[torch.tensor(example.query_tokens)[:, None], torch.tensor(example.target_tokens)[None, :]] = True
        return pattern
    ids = torch.as_tensor(token_ids).long()
    if ids.dim() != 1:
        raise ProbeError(f"target_pattern takes one sequence of token ids, got shape {tuple(ids.shape)}")
    return batch_pattern(head_type, ids[None])[0]  # [query key]


def target_slots(pattern: torch.Tensor) -> torch.Tensor:
    """A sparse form of a pattern: [batch query key] bool -> [batch query slot] long key indices, -1 = no target.

    Slot count = the most targets any row has (1 for previous/first/self; small for duplicate/induction on a large
    vocabulary), so gathering α at the slots costs O(query · slot) instead of O(query · key).
    """
    batch, n_query, _ = pattern.shape
    counts = pattern.sum(-1)  # [batch query]
    n_slots = max(1, int(counts.max()) if counts.numel() else 1)
    slots = torch.full((batch, n_query, n_slots), -1, dtype=torch.long)  # [batch query slot]
    b, q, k = pattern.nonzero(as_tuple=True)  # row-major: the keys of one row are consecutive
    first = (counts.flatten().cumsum(0) - counts.flatten())  # [batch·query] index of each row's first entry
    rank = torch.arange(len(k)) - first[b * n_query + q]
    slots[b, q, rank] = k
    return slots
