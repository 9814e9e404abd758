"""The null of the contact test: strata that separation and residue types fix, and diagonal shifts of the map.

Two things make a head's top-L pairs look like contacts without any knowledge of the structure: contacts
depend on sequence separation and on residue types (hydrophobic pairs, Cys–Cys), and so does the attention of
an untrained head (position terms; identical tokens have identical embeddings); and both maps are clumped
(a contact comes with its neighbours along a strand pairing, and a head that picks one pair picks its
neighbours), so hits are not independent draws. The test of :mod:`probe.proteins.significance` removes the
first with **strata** and the second with **diagonal shifts**; this module computes both for one protein and
one sequence-separation range.

**Strata.** A known pair (i, j) of the range falls in one stratum per (separation bin, residue-class pair,
identical residues or not): bins :data:`SEPARATION_EDGES` (6–7, 8–9, 10–11 | 12–14, 15–18, 19–23 | 24–31,
32–47, 48–71, 72–107, ≥ 108), classes :data:`RESIDUE_CLASSES` (aliphatic AVILM, aromatic FWY, polar STNQ,
positive KRH, negative DE, G, P, C; other letters one class), the class pair unordered. Without a sequence the
strata are the bins alone. A predictor that knows only separation and residue types gets, among k pairs of
which k_σ lie in stratum σ, Σ_σ k_σ·C_σ/N_σ contacts (C_σ of the N_σ known pairs of σ are contacts): the
head's **excess** is its hits minus that expectation — exactly the statistic of the Mantel–Haenszel test,
Σ_σ (h_σ − k_σ C_σ/N_σ) (Mantel & Haenszel 1959; its exact conditional form is Birch 1964's, R's
``mantelhaen.test(exact = TRUE)``), whose hypergeometric null treats the pairs of a stratum as exchangeable.

**Shifts.** They are not (measured: that null gives a random-weight ESM-2 8M-shaped model 2–4× its nominal
false positives), so the null distribution of the excess comes from the map itself: the contact map is moved
along the sequence, every diagonal (pairs of one separation d, i = 0 … L − d − 1) rotated by the same s,
(i, i + d) → ((i + s) mod (L − d), ((i + s) mod (L − d)) + d) — a one-dimensional torus translation (the
torus-translation test of Harms et al. 2001, for maps whose neighbours are alike). A shift keeps the
separation of every pair, the number of contacts of every diagonal and the contact map's clumps; it breaks
only the alignment of the map with the sequence the head read. Under each shift the excess is recomputed
against the shifted map, the strata's contact rates included (so residue types stay accounted for). Shifts
0 … L − 1 for L ≤ :data:`MAX_SHIFTS`, else :data:`MAX_SHIFTS` evenly spaced ones (shift 0 is the map as it
is). Pairs whose contact state is unknown (−1) count as non-contacts under a shift, in the hits and in the
strata's rates alike.
"""

from __future__ import annotations

import numpy as np
import torch

# separation bins: edges[b] <= |i − j| < edges[b + 1] (the last open); the ranges' edges 6, 12, 24 among them
SEPARATION_EDGES: tuple[int, ...] = (6, 8, 10, 12, 15, 19, 24, 32, 48, 72, 108)
RESIDUE_CLASSES: dict[str, str] = {"aliphatic": "AVILM", "aromatic": "FWY", "polar": "STNQ",
                                   "positive": "KRH", "negative": "DE", "glycine": "G", "proline": "P",
                                   "cysteine": "C"}
_CLASS_OF = {letter: index for index, letters in enumerate(RESIDUE_CLASSES.values()) for letter in letters}
_OTHER = len(RESIDUE_CLASSES)  # X, B, Z, U, O and anything else
MAX_SHIFTS = 256
_CHUNK = 1 << 22  # pairs × shifts per step when the strata's rates are computed


def residue_classes(sequence: str) -> np.ndarray:
    """[L] int: the class index of every residue (:data:`RESIDUE_CLASSES` order; other letters last)."""
    return np.array([_CLASS_OF.get(letter, _OTHER) for letter in sequence.upper()], dtype=np.int64)


def pair_strata(i: torch.Tensor, j: torch.Tensor, sequence: str | None = None) -> torch.Tensor:
    """[pair] int64 stratum of each pair (i, j) (i < j), numbered 0 … n − 1 in order of first code: separation
    bin × unordered residue-class pair × identical residues; the bin alone without a sequence.

    Parameters
    ----------
    i, j : torch.Tensor
        [pair] residue indices, i < j.
    sequence : str, optional
        The L residues the indices point into.

    Returns
    -------
    torch.Tensor
        [pair] int64, consecutive from 0.

    Examples
    --------
    >>> from probe.proteins.contact_null import pair_strata
    >>> i, j = torch.tensor([0, 0, 1, 2]), torch.tensor([1, 6, 7, 30])
    >>> pair_strata(i, j)  # separation bins alone: 1 | 6, 6 | 28
    tensor([0, 1, 1, 2])
    >>> pair_strata(i, j, "CCAAAAACAAAAAAAAAAAAAAAAAAAAAAAC")  # residue classes split (0, 6) from (1, 7)
    tensor([0, 1, 2, 3])
    """
    edges = torch.tensor(SEPARATION_EDGES, device=i.device)
    code = torch.bucketize(j - i, edges, right=True)  # [pair] separation bin
    if sequence is not None:
        classes = torch.as_tensor(residue_classes(sequence), device=i.device)  # [L]
        codes = np.frombuffer(sequence.upper().encode("ascii", "replace"), dtype=np.uint8)
        letters = torch.as_tensor(codes.astype(np.int64), device=i.device)  # [L]
        n = _OTHER + 1
        low = torch.minimum(classes[i], classes[j])
        high = torch.maximum(classes[i], classes[j])
        same = (letters[i] == letters[j]).long()
        code = ((code * n + low) * n + high) * 2 + same
    return torch.unique(code, return_inverse=True)[1]


def shift_values(length: int) -> torch.Tensor:
    """[shift] the shifts used for a protein of `length` residues: 0 … L − 1, or MAX_SHIFTS evenly spaced
    (0 first) for longer ones."""
    if length <= MAX_SHIFTS:
        return torch.arange(max(length, 1))
    return torch.unique(torch.round(torch.arange(MAX_SHIFTS) * (length / MAX_SHIFTS)).long())


class RangeNull:
    """The strata and shifts of one range of one protein: what every head's excess is computed against.

    Parameters
    ----------
    true_map : torch.Tensor
        [L L] int8: 1 contact, 0 not, −1 unknown.
    flat : torch.Tensor
        [pair] int64 flat indices i·L + j (i < j) of the range's known pairs
        (:class:`probe.proteins.precision.RangePairs`).
    sequence : str, optional
        The L residues (strata by residue class); None: separation bins alone.

    Examples
    --------
    >>> from probe.proteins.contact_null import RangeNull
    >>> true_map = torch.zeros(6, 6, dtype=torch.int8)
    >>> true_map[0, 3] = true_map[3, 0] = true_map[1, 5] = true_map[5, 1] = 1
    >>> i, j = torch.triu_indices(6, 6, offset=3)  # the pairs at separation >= 3
    >>> null = RangeNull(true_map, i * 6 + j, sequence="CAACAA")
    >>> null.n_strata, null.shifts.tolist()
    (3, [0, 1, 2, 3, 4, 5])
    >>> hits, expected = null.excess(torch.tensor([0, 4]))  # a head whose top pairs are (0, 3) and (1, 5)
    >>> hits.tolist()  # shift 0 (observed) first: both are contacts
    [2.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    """

    def __init__(self, true_map: torch.Tensor, flat: torch.Tensor, sequence: str | None = None) -> None:
        length = true_map.shape[0]
        device = true_map.device
        self.length = length
        self.i, self.j = flat // length, flat % length  # [pair]
        self.separation = self.j - self.i  # [pair]
        self.strata = pair_strata(self.i, self.j, sequence)  # [pair]
        self.n_strata = int(self.strata.max()) + 1 if self.strata.numel() else 0
        self.shifts = shift_values(length).to(device)  # [shift]
        self.truth = (true_map.reshape(-1) == 1)  # [L·L] bool
        self.rates = self._stratum_rates()  # [stratum shift]

    def _shifted(self, index: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
        """[... pair shift] bool: whether each pair of `index` [... pair] is a contact under each shift."""
        i, d = self.i[index].unsqueeze(-1), self.separation[index].unsqueeze(-1)  # [... pair 1]
        moved = (i + shifts) % (self.length - d)  # [... pair shift]
        return self.truth[moved * self.length + moved + d]

    def _stratum_rates(self) -> torch.Tensor:
        """[stratum shift] float64 contact rate of each stratum under each shift."""
        n_pairs, n_shifts = self.strata.numel(), self.shifts.numel()
        rates = torch.zeros(self.n_strata, n_shifts, dtype=torch.float64, device=self.strata.device)
        if n_pairs == 0:
            return rates
        counts = torch.bincount(self.strata, minlength=self.n_strata).double()  # [stratum]
        step = max(1, _CHUNK // n_pairs)
        every = torch.arange(n_pairs, device=self.strata.device)
        for start in range(0, n_shifts, step):
            shifted = self._shifted(every, self.shifts[start:start + step]).double()  # [pair chunk]
            rates[:, start:start + step].index_add_(0, self.strata, shifted)  # [stratum chunk]
        return rates / counts[:, None]

    def excess(self, top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(hits, expected), each [shift] float64, of the k pairs `top` (indices into the range's pairs): hits
        under every shift and what the strata's rates predict there; excess = hits − expected, shift 0 first.
        """
        hits, expected = self.excess_batch(top[None])
        return hits[0], expected[0]

    def excess_batch(self, tops: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`excess` of several heads at once: `tops` [head k] → (hits, expected), each [head shift]
        float64."""
        heads, n_shifts = tops.shape[0], self.shifts.numel()
        if tops.numel() == 0:
            zero = torch.zeros(heads, n_shifts, dtype=torch.float64, device=self.strata.device)
            return zero, zero.clone()
        hits = self._shifted(tops, self.shifts).sum(1, dtype=torch.float64)  # [head shift]
        drawn = torch.zeros(heads, self.n_strata, dtype=torch.float64, device=tops.device)  # [head stratum]
        ones = torch.ones(tops.shape, dtype=torch.float64, device=tops.device)
        drawn.scatter_add_(1, self.strata[tops], ones)
        return hits, drawn @ self.rates


__all__ = ["MAX_SHIFTS", "RESIDUE_CLASSES", "SEPARATION_EDGES", "RangeNull", "pair_strata", "residue_classes",
           "shift_values"]
