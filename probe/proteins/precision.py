"""Precision of a contact score map against a true map: the ranges, P@L/k, and the known-pair counts behind
them.

Pure functions of tensors (no model). Precision@L/k in a range (short 6–11, medium 12–23, long ≥ 24 residues
apart): among pairs i < j of that range whose true contact state is known (true map ≥ 0), the k = ⌊L/frac⌋
highest-scoring ones (L = sequence length), the fraction that are contacts. Where the range holds fewer than k
known pairs (short proteins, unresolved stretches), k is the number of known pairs: the precision is taken
over the pairs there are. ESM's ``compute_precisions`` instead fills the missing top-k slots with pairs from
outside the range ranked at −∞ (in arbitrary order) and pads with non-contacts beyond the upper triangle, so
its value there is lower and not well defined; we do not follow it. A range without a known pair gives NaN.
Ties at the cut are broken arbitrarily. Column names: ``p_at_{L|L2|L5}_{short|medium|long}``
(:func:`precision_columns`).

The maps scored are ESM's channel transform of attention, APC(sym(α)) (:func:`symmetrize`, :func:`apc`).
"""

from __future__ import annotations

import numpy as np
import torch

from probe.errors import ProbeError
from probe.proteins.features import MIN_ATTENTION

RANGES: dict[str, tuple[int, int | None]] = {"short": (6, 11), "medium": (12, 23), "long": (24, None)}
FRACTIONS: dict[str, int] = {"L": 1, "L2": 2, "L5": 5}  # P@L, P@L/2, P@L/5
# pairs closer in sequence are ignored by logit_share and the far_* measure (and the ranges)
MIN_SEPARATION = 6


def precision_columns() -> list[str]:
    """The nine precision column names, range-major: p_at_L_short, p_at_L2_short, ..., p_at_L5_long."""
    return [f"p_at_{label}_{name}" for name in RANGES for label in FRACTIONS]


def symmetrize(attention: torch.Tensor) -> torch.Tensor:
    """A + Aᵀ over the last two axes."""
    return attention + attention.transpose(-1, -2)


def apc(matrix: torch.Tensor) -> torch.Tensor:
    """Average product correction over the last two axes: S − (row sums ⊗ column sums) / total."""
    rows = matrix.sum(-1, keepdim=True)  # [... query 1]
    cols = matrix.sum(-2, keepdim=True)  # [... 1 key]
    total = matrix.sum((-1, -2), keepdim=True)  # [... 1 1]
    return matrix - rows * cols / total


class RangePairs:
    """For one true map: the known pairs i < j of every range, as flat indices, and whether each is a
    contact."""

    def __init__(self, true_map: torch.Tensor) -> None:  # [L L] int8
        length = true_map.shape[0]
        self.length = length
        i, j = torch.triu_indices(length, length, offset=1, device=true_map.device)
        separation = j - i
        truth = true_map[i, j]
        self.pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, (low, high) in RANGES.items():
            chosen = (truth >= 0) & (separation >= low)
            if high is not None:
                chosen &= separation <= high
            self.pairs[name] = ((i[chosen] * length + j[chosen]), (truth[chosen] == 1).float())

    def top_hits(self, scores: torch.Tensor) -> dict[str, tuple[int, int, int, int, torch.Tensor]]:
        """{range: (hits among the top k = min(L, known), k, known pairs, contacts, top)} for scores
        [L L]: the counts behind P@L and its base rate, and the top k as indices into the range's pairs
        (probe.proteins.significance)."""
        flat = scores.reshape(-1).float()
        result = {}
        for name, (index, is_contact) in self.pairs.items():
            values = flat[index]
            values = torch.where(torch.isfinite(values), values, torch.full_like(values, -torch.inf))
            k = min(max(1, self.length), values.numel())
            top = torch.topk(values, k).indices if k else torch.zeros(0, dtype=torch.long)
            hits = int(is_contact[top].sum()) if k else 0
            result[name] = (hits, k, int(values.numel()), int(is_contact.sum()), top)
        return result

    def precision(self, scores: torch.Tensor) -> dict[str, float]:  # scores [L L]
        flat = scores.reshape(-1).float()
        result = {}
        for name, (index, is_contact) in self.pairs.items():
            values = flat[index]
            values = torch.where(torch.isfinite(values), values, torch.full_like(values, -torch.inf))
            for label, fraction in FRACTIONS.items():
                # k = ⌊L/frac⌋, or every known pair of the range when it holds fewer (see the module
                # docstring)
                k = min(max(1, self.length // fraction), values.numel())
                column = f"p_at_{label}_{name}"
                if k == 0:
                    result[column] = float("nan")
                    continue
                top = torch.topk(values, k).indices
                result[column] = float(is_contact[top].mean())
        return result


def precision_by_range(scores, true_map) -> dict[str, float]:
    """Precision at L, L/2, L/5 in the short, medium and long ranges of a [L L] score map against a [L L] true
    map (1 contact, 0 not, -1 unknown: unknown pairs are skipped; NaN scores rank last). Keys:
    precision_columns()."""
    scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    true_map = torch.as_tensor(np.asarray(true_map, dtype=np.int8))
    if scores.shape != true_map.shape or scores.ndim != 2:
        raise ProbeError(f"scores {tuple(scores.shape)} and true map {tuple(true_map.shape)} must be the "
                         "same [L, L]")
    return RangePairs(true_map).precision(scores)


def known_pair_counts(true_map) -> dict[str, tuple[int, int]]:
    """{range: (known pairs i < j, contacts among them)} of a [L L] true map."""
    pairs = RangePairs(torch.as_tensor(np.asarray(true_map, dtype=np.int8)))
    return {name: (int(index.numel()), int(is_contact.sum())) for name,
            (index, is_contact) in pairs.pairs.items()}


def far_contact_counts(alpha: torch.Tensor, true_map: torch.Tensor, threshold: float = MIN_ATTENTION):
    """(high, on_contact): for α [... L L], how many weights ≥ threshold fall on known pairs |i−j| ≥ 6 and how
    many of those on contacts, each [...] (the per-sequence far_* measure)."""
    pairs, contacts = far_masks(true_map)
    high = alpha >= threshold
    return (high & pairs).sum((-1, -2)), (high & contacts).sum((-1, -2))


def far_masks(true_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pairs, contacts) [L L] bool: the known pairs |i − j| ≥ 6 of a true map, and the contacts among
    them."""
    length = true_map.shape[0]
    position = torch.arange(length, device=true_map.device)
    far = (position[:, None] - position[None, :]).abs() >= MIN_SEPARATION  # [L L]
    pairs = far & (true_map >= 0)
    return pairs, pairs & (true_map == 1)


def fraction_label(fraction: str) -> str:
    """"L" -> "L", "L2" -> "L/2"."""
    return "L" if fraction == "L" else f"L/{fraction[1:]}"


__all__ = ["FRACTIONS", "MIN_SEPARATION", "RANGES", "RangePairs", "apc", "far_contact_counts", "far_masks",
           "fraction_label", "known_pair_counts", "precision_by_range", "precision_columns", "symmetrize"]
