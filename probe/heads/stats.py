"""The statistics of head labels, as pure functions (no model, no table): chance, clustered bootstrap, tests,
FDR.

* **Chance** (analytic): the score a head with uniform attention would get — per row the share of the keys it
  may attend to that are targets, |T(i)| / (i + 1) for a causal row, |T(i)| / n for a bidirectional row of n
  real tokens — averaged exactly as the score is (over the rows with a target).
* **Clustered bootstrap**: resample whole clusters (a probe example, a GAP Wikipedia page, a template) with
  replacement; each resample's mean weights every example by how often its cluster was drawn. The same seeded
  resamples serve every head and type, so intervals of different heads are comparable.
* **Test**: one-sided, H0: effect ≤ `null` (effect = score − chance for mass types, paired accuracy gain over
  the best baseline for accuracy types), z = (estimate − null) / bootstrap standard error, p = 1 − Φ(z). A
  normal approximation rather than the bootstrap's own tail count, because a count cannot go below 1 /
  (resamples + 1), too coarse for a false discovery rate over hundreds of tests.
* **FDR**: Benjamini–Hochberg q-values over all head × type tests of a model (each test has its own null: the
  head's own effect distribution, shifted to the null); a head is selected when q ≤ the FDR level.
* **Held-out confirmation**: every probe set's clusters (a GAP page, a natural-text probe, a synthetic probe)
  are dealt into a selection half and a confirmation half (:func:`confirmation_split`); a head selected on
  the first is labelled only where the same test, on the second, rejects again.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from probe.heads.targets import without_padding


def uniform_chance(
    pattern: torch.Tensor,  # [batch query key] bool, or [batch query slot] long key slots (−1 = none)
    lengths: torch.Tensor,  # [batch] real tokens (right padding)
    causal: bool,
) -> torch.Tensor:
    """A uniform head's valid-row score per example `[batch]`: mean over rows with a target of |T(i)| /
    keys(i), keys(i) = i + 1 (causal) or the sequence's length (bidirectional). NaN where no row has a
    target. The targets come as a dense bool pattern, or as the key slots of
    :func:`probe.heads.registry.target_slots` of a pattern without padding (the same numbers, read from a few
    slots per row instead of every key)."""
    batch, n = pattern.shape[:2]
    position = torch.arange(n)
    if pattern.dtype == torch.bool:
        pattern = without_padding(pattern, lengths)  # right padding: its rows and keys are no targets
        # [batch query] rows with a target, as the score counts them (before causal masking)
        valid = pattern.any(-1)
        # keys a causal row can see (j ≤ i)
        counts = (pattern.tril() if causal else pattern).sum(-1)  # [batch query]
    else:
        named = pattern >= 0  # [batch query slot]
        valid = named.any(-1)  # [batch query]
        counts = (named & (pattern <= position[:, None]) if causal else named).sum(-1)  # [batch query]
    if causal:
        keys = (position + 1).expand(batch, n).float()  # [batch query]
    else:
        keys = lengths[:, None].expand(batch, n).float()  # [batch query]
    share = counts / keys  # [batch query]
    return torch.where(valid.sum(-1) > 0, (share * valid).sum(-1) / valid.sum(-1).clamp(min=1), torch.nan)


def cluster_index(labels: Sequence[Hashable]) -> torch.Tensor:
    """Cluster labels (any hashable, e.g. page URLs) -> `[example]` long ids 0..k−1 in order of first
    appearance."""
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(label, len(ids)) for label in labels], dtype=torch.long)


def resample_weights(
    clusters: torch.Tensor,  # [example] long cluster ids
    n_bootstrap: int,
    seed: int,
) -> torch.Tensor:
    """`[resample example]` float64: how many times each example's cluster was drawn in each clustered
    resample (clusters drawn uniformly with replacement, as many as there are)."""
    _, dense = torch.unique(clusters, return_inverse=True)
    k = int(dense.max()) + 1 if len(dense) else 0
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, max(k, 1), (n_bootstrap, k), generator=generator)  # [resample draw]
    counts = torch.zeros(n_bootstrap, max(k, 1), dtype=torch.float64)
    counts.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))  # [resample cluster]
    return counts[:, dense]  # [resample example]


def bootstrap_means(
    values: torch.Tensor,  # [example ...]
    weights: torch.Tensor,  # [resample example]
) -> torch.Tensor:
    """The resampled means `[resample ...]` (examples weighted by their cluster's draw count; NaN values are
    left out of their entry's mean, and a resample that drew none of an entry's examples gives NaN)."""
    flat = values.reshape(values.shape[0], -1).double()  # [example entry]
    present = ~torch.isnan(flat)
    total = weights @ present.double()  # [resample entry]
    sums = weights @ torch.where(present, flat, 0.0)  # [resample entry]
    means = torch.where(total > 0, sums / total.clamp(min=1e-12), torch.nan)
    return means.reshape(weights.shape[0], *values.shape[1:])


def percentile_interval(means: torch.Tensor, confidence: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile interval of resampled means `[resample ...]` -> (low, high), each `[...]`: the (1 −
    confidence)/2 and (1 + confidence)/2 quantiles over resamples, NaN resamples left out, linear
    interpolation — exactly ``torch.nanquantile``. Entries without NaN take their order statistics from two
    partial sorts (``topk`` of the few smallest and largest), which on CPU is several times faster than
    sorting every resample."""
    tail = (1 - confidence) / 2
    flat = means.reshape(means.shape[0], -1)  # [resample entry]
    n = flat.shape[0]
    low = torch.full(flat.shape[1:], math.nan, dtype=flat.dtype, device=flat.device)  # [entry]
    high = low.clone()
    complete = ~torch.isnan(flat).any(0)  # [entry]
    if n and bool(complete.any()):
        values = flat[:, complete]  # [resample entry]
        for out, q in ((low, tail), (high, 1 - tail)):
            position = (n - 1) * q
            below, fraction = math.floor(position), position - math.floor(position)
            above = min(below + 1, n - 1)
            if below + 1 <= n - below:  # the order statistics sit among the smallest values
                order = values.topk(above + 1, dim=0, largest=False).values  # [k entry] ascending
                at_below, at_above = order[below], order[above]
            else:  # among the largest: rank r from the bottom is rank n − 1 − r from the top
                order = values.topk(n - below, dim=0, largest=True).values  # [k entry] descending
                at_below, at_above = order[n - 1 - below], order[n - 1 - above]
            out[complete] = at_below + (at_above - at_below) * fraction
    if not bool(complete.all()):
        bounds = torch.nanquantile(flat[:, ~complete], torch.tensor([tail, 1 - tail], dtype=flat.dtype,
                                                                     device=flat.device), dim=0)
        low[~complete], high[~complete] = bounds[0], bounds[1]
    shape = means.shape[1:]
    return low.reshape(shape).float(), high.reshape(shape).float()


# a test needs examples from at least this many bootstrap clusters (one cluster: no spread at all)
MIN_CLUSTERS = 2


def clusters_present(
    values: torch.Tensor,  # [example ...] NaN where an example has no value
    cluster: torch.Tensor,  # [example] long: bootstrap cluster of each example
) -> torch.Tensor:
    """How many distinct clusters have at least one non-NaN value, per entry: `[...]` long."""
    present = ~torch.isnan(values.reshape(values.shape[0], -1))  # [example entry]
    _, index = torch.unique(cluster, return_inverse=True)
    one_hot = torch.zeros(int(index.max()) + 1 if len(index) else 0, len(index), dtype=torch.float64)
    one_hot[index, torch.arange(len(index))] = 1.0  # [cluster example]
    counts = ((one_hot @ present.double()) > 0).sum(0)  # [entry]
    return counts.reshape(values.shape[1:])


def p_greater(estimate: torch.Tensor, se: torch.Tensor, null: float) -> torch.Tensor:
    """One-sided p-value of H0: effect ≤ `null`, z = (estimate − null) / se (normal). With se = 0 the estimate
    decides alone: p = 0 above the null, 1 at or below it."""
    estimate, se = estimate.double(), se.double()
    z = (estimate - null) / se.clamp(min=1e-300)
    p = 0.5 * torch.erfc(z / math.sqrt(2))
    p = torch.where(se > 0, p, (estimate <= null).double())
    return torch.where(torch.isnan(estimate), torch.nan, p)


def benjamini_hochberg(p: torch.Tensor) -> torch.Tensor:
    """Benjamini–Hochberg adjusted p-values (q-values) of any shape; NaN entries are left out of the
    family."""
    flat = p.double().flatten()
    present = ~torch.isnan(flat)
    values = flat[present]
    m = len(values)
    q = torch.full_like(flat, torch.nan)
    if m == 0:
        return q.reshape(p.shape)
    order = torch.argsort(values)
    ranked = values[order] * m / torch.arange(1, m + 1, dtype=torch.float64)
    ranked = torch.flip(torch.cummin(torch.flip(ranked, [0]), 0).values, [0]).clamp(max=1.0)
    adjusted = torch.empty_like(values)
    adjusted[order] = ranked
    q[present] = adjusted
    return q.reshape(p.shape)


def choose_candidate(
    # [candidate example layer head] score − chance, NaN where an example has no target
    effects: torch.Tensor,
) -> torch.Tensor:
    """Each head's candidate (e.g. fixed_offset's d) with the largest mean effect: `[layer head]` long
    index."""
    mean = torch.nanmean(effects, dim=1)  # [candidate layer head]
    return torch.nan_to_num(mean, nan=-math.inf).argmax(0)


def selection_split(n_examples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(select, test) example masks for a type with candidates: even-numbered examples choose, odd ones test,
    so the reported score of the chosen candidate is not inflated by the choice. One example: it does both."""
    index = torch.arange(n_examples)
    if n_examples < 2:
        return torch.ones(n_examples, dtype=torch.bool), torch.ones(n_examples, dtype=torch.bool)
    return index % 2 == 0, index % 2 == 1


def confirmation_split(cluster: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(select, confirm) example masks `[example]` bool: the distinct bootstrap clusters (a GAP Wikipedia
    page, a natural-text probe, a seeded synthetic probe, a template) in a seeded random order, the first
    ceil(k / 2) of the k clusters the selection half and the rest the confirmation half. A cluster is never
    cut: all its examples fall in one half. One cluster: selection only (an empty confirmation half: nothing
    can replicate).

    Examples
    --------
    >>> cluster = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4])  # 5 documents, some with several examples
    >>> select, confirm = confirmation_split(cluster, seed=0)
    >>> halves = (cluster[select].unique().tolist(), cluster[confirm].unique().tolist())
    >>> (select ^ confirm).all().item(), len(halves[0]), len(halves[1])  # 3 and 2 of the 5 documents
    (True, 3, 2)
    >>> set(cluster[select].tolist()) & set(cluster[confirm].tolist())  # no document on both sides
    set()
    """
    unique, dense = torch.unique(cluster, return_inverse=True)
    order = torch.randperm(len(unique), generator=torch.Generator().manual_seed(seed))  # [cluster]
    chosen = torch.zeros(len(unique), dtype=torch.bool)
    chosen[order[:(len(unique) + 1) // 2]] = True  # the selection half's clusters
    select = chosen[dense]  # [example]
    return select, ~select
