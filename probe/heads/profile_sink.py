"""ProfileSink: per-head attention statistics reduced from streamed α blocks (distance, entropy, sink,
locality).

Each query row's statistics are computed inside the block that holds the row (a block has whole rows, so even
the weighted median of the attention distance is exact there) and only their sums per (input, layer, head) are
kept: memory O(inputs · layers · heads · offsets), never a [query, key] matrix beyond one block. With `rows`
set for an input the sink asks the engine for those query rows alone (`SinkNeeds.rows`), which keeps the fused
kernel running and rebuilds α of the sampled rows only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from probe.engine import AttentionBlock, SinkNeeds
from probe.errors import ProbeError

# Per-row statistics, in table order. Each is averaged over an input's (sampled) rows, then over inputs.
ROW_STATS = ("mean_distance", "median_distance", "entropy", "sink_mass", "local_mass", "streaming_mass",
             "beyond_mass", "max_alpha", "learned_sink_mass")


@dataclass(frozen=True)
class RowWindows:
    """The key sets the row statistics measure mass on."""

    sink_tokens: int = 4  # keys 0 .. k−1: the attention sink (StreamingLLM keeps 4)
    window: int = 256  # |query − key| < window: the local window (DuoAttention's recent tokens)
    max_offset: int = 64  # dominant offset searched among query − key in [−max_offset, max_offset]


def row_statistics(
    alpha: torch.Tensor,
    positions: torch.Tensor,
    windows: RowWindows,
    entropy: torch.Tensor | None = None,
    learned_sink_mass: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The statistics of every row of a block: ({name: [batch head row] float64}, offsets [batch head row
    offset]).

    Pure (α is not changed). Distances are |query − key|; `median_distance` is the lower weighted median, the
    smallest d with Σ_{|i−j|≤d} α_ij ≥ ½ Σ_j α_ij; `entropy` is −Σ α log α in nats; `sink_mass` is the mass on
    keys < sink_tokens, `local_mass` on |i−j| < window, `streaming_mass` on their union (what a sink +
    recent-window cache keeps), `beyond_mass` = Σ_j α_ij − streaming_mass (what it loses); `max_alpha` the
    row's largest α; `learned_sink_mass` the weight on the layer's learned attention sink (gpt-oss `s_aux`:
    the row's α sums to 1 − that; 0 for a layer without one). `offsets[..., m]` is α at key i − (m −
    max_offset) (0 where there is no such key).

    Parameters
    ----------
    alpha : torch.Tensor
        `[batch head row key]` (keys past alpha.shape[-1] have α = 0).
    positions : torch.Tensor
        `[row]` long: each row's absolute query position (its own key index).
    windows : RowWindows
        The sink, local-window and offset key sets.
    entropy : torch.Tensor, optional
        `[batch head row]`: −Σ α log α from the engine, else computed here.
    learned_sink_mass : torch.Tensor, optional
        `[batch head row]`: weight on an s_aux sink (None: no sink, 0).

    Returns
    -------
    tuple
        (dict of name to `[batch head row]` float64, offsets `[batch head row offset]`).
    """
    n_batch, n_heads, n_rows, n_key = alpha.shape
    positions = positions.to(alpha.device)
    if positions.shape != (n_rows,) or (n_rows and int(positions.max()) >= n_key):
        raise ProbeError(f"positions {tuple(positions.shape)} do not fit a block of {n_rows} rows × {n_key} "
                         "keys")
    alpha = alpha.float()
    cdf = alpha.cumsum(-1)  # [batch head row key]: mass on keys ≤ j
    total = cdf[..., -1]  # [batch head row], 1 up to rounding
    at_query = cdf.gather(-1, positions.view(1, 1, -1, 1).expand(n_batch, n_heads, n_rows, 1))[..., 0]
    if torch.equal(at_query, total):  # nothing after any query (causal): distances are query − key
        stats = _causal_distances(alpha, cdf, total, positions, windows)
    else:
        del cdf
        stats = _two_sided_distances(alpha, total, positions, windows)
    # the engine's entropy needs no logarithm (lse − scale·q·Σαk); here, α ≥ 1e-30 keeps log off denormals
    # (each clamped entry adds < 7e-29)
    stats["entropy"] = entropy.float() if entropy is not None else -torch.xlogy(alpha,
        alpha.clamp(min=1e-30)).sum(-1)
    sink = min(windows.sink_tokens, n_key)
    stats["sink_mass"] = alpha[..., :sink].sum(-1)
    near = (positions[:, None] - torch.arange(sink, device=alpha.device)[None, :]).abs() < windows.window
    overlap = (alpha[..., :sink] * near).sum(-1)  # sink keys that are also inside the window
    stats["streaming_mass"] = stats["sink_mass"] + stats["local_mass"] - overlap
    stats["beyond_mass"] = total - stats["streaming_mass"]
    stats["max_alpha"] = alpha.amax(-1)
    stats["learned_sink_mass"] = (torch.zeros_like(total) if learned_sink_mass is None
                                  else learned_sink_mass.float().to(alpha.device))
    offset = torch.arange(-windows.max_offset, windows.max_offset + 1, device=alpha.device)  # [offset]
    keys = positions[:, None] - offset[None, :]  # [row offset]
    present = (keys >= 0) & (keys < n_key)
    offsets = alpha.gather(-1,
                           keys.clamp(0, n_key - 1).expand(n_batch, n_heads, n_rows, len(offset))) * present
    return {name: value.double() for name, value in stats.items()}, offsets.double()


def _causal_distances(alpha, cdf, total, positions, windows: RowWindows) -> dict[str, torch.Tensor]:
    """Rows with no key after the query: mean = i − Σ α_j j; the lower weighted median i − c with c the number
    of keys whose prefix mass is ≤ half (so the keys at distance ≤ i − c hold at least half); window mass from
    the prefix sums at i and i − window."""
    n_batch, n_heads, n_rows, n_key = alpha.shape
    keys = torch.arange(n_key, device=alpha.device, dtype=alpha.dtype)
    mean = positions.to(alpha.dtype) * total - alpha @ keys  # [batch head row] Σ α (i − j)
    # [batch head row]
    count = torch.searchsorted(cdf, (0.5 * total)[..., None].contiguous(), right=True)[..., 0]
    median = (positions - count).clamp(min=0)
    edge = positions - windows.window  # the last key outside the window, −1 or less: none
    outside = cdf.gather(-1, edge.clamp(min=0).view(1, 1, -1, 1).expand(n_batch, n_heads, n_rows, 1))[..., 0]
    local = total - torch.where(edge >= 0, outside, torch.zeros_like(outside))
    return {"mean_distance": mean / total, "median_distance": median.to(alpha.dtype), "local_mass": local}


def _two_sided_distances(alpha, total, positions, windows: RowWindows) -> dict[str, torch.Tensor]:
    """Any rows: the mass at each distance |i − j| (both sides gathered), its prefix sums give the median and
    the window mass."""
    n_batch, n_heads, n_rows, n_key = alpha.shape
    expand = (n_batch, n_heads, n_rows, n_key)
    distance = torch.arange(n_key, device=alpha.device)  # [distance]
    left = positions[:, None] - distance[None, :]  # [row distance]: the key at distance d before the query
    right = positions[:, None] + distance[None, :]  # [row distance]: the key at distance d after it
    # [batch head row d]
    by_distance = alpha.gather(-1, left.clamp(0, n_key - 1).expand(expand)) * (left >= 0)
    by_distance += alpha.gather(-1,
        right.clamp(max=n_key - 1).expand(expand)) * ((right < n_key) & (distance > 0))
    mean = (by_distance @ distance.to(alpha.dtype)) / total
    cdf = by_distance.cumsum_(-1)  # [batch head row distance]: mass within distance ≤ d
    median = torch.searchsorted(cdf, (0.5 * total)[..., None].contiguous())[..., 0]  # first d with cdf ≥ half
    window = min(windows.window, n_key)
    local = cdf[..., window - 1] if window > 0 else torch.zeros_like(total)
    return {"mean_distance": mean, "median_distance": median.clamp(max=n_key - 1).to(alpha.dtype),
            "local_mass": local}


class ProfileSink:
    """Streams every head's row statistics into per-(input, layer, head) sums.

    Call :meth:`begin_input` before each forward (one input per forward, batch 1), optionally with the query
    rows to sample; afterwards :attr:`sums` holds `{stat: [input layer head] float64}` (sums over rows),
    :attr:`offsets` `[input layer head offset]` and :attr:`rows` `[input layer head]` (rows counted).
    """

    def __init__(self, n_inputs: int, n_layers: int, n_heads: int, windows: RowWindows = RowWindows(),  # noqa: B008
                 heads: Sequence[int] | None = None) -> None:
        self.windows = windows
        self.heads = None if heads is None else tuple(heads)
        shape = (n_inputs, n_layers, n_heads)
        self.sums = {name: torch.zeros(shape, dtype=torch.float64) for name in ROW_STATS}
        self.offsets = torch.zeros(*shape, 2 * windows.max_offset + 1, dtype=torch.float64)
        self.rows = torch.zeros(shape, dtype=torch.float64)
        self._input: int | None = None
        self._sample: torch.Tensor | None = None

    def begin_input(self, index: int, rows: torch.Tensor | None = None) -> None:
        """The next forward is input `index`; `rows` (`[row]` long) samples its query rows (None: every
        row)."""
        if not 0 <= index < self.rows.shape[0]:
            raise ProbeError(f"input {index} is out of range: the sink was made for {self.rows.shape[0]} "
                             "inputs")
        self._input, self._sample = index, rows

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        # α beyond a causal block's last key is zero (the statistics never need it); the engine computes each
        # row's entropy from lse' and α·K (no logarithm of α)
        heads = self.heads if self.heads is not None else tuple(range(n_heads))
        return SinkNeeds(heads=heads, rows=self._sample, entropy=True, causal_crop=True)

    def update(self, block: AttentionBlock) -> None:
        if self._input is None:
            raise ProbeError("ProfileSink.begin_input(index) must be called before each forward")
        if block.alpha.shape[0] != 1:
            raise ProbeError("ProfileSink takes one input per forward (batch 1), so no row is padding")
        size = block.alpha.shape[2]
        rows = (block.rows if block.rows is not None
                else torch.arange(block.query_start, block.query_start + size))
        positions = rows.to(block.alpha.device) + block.query_offset  # [row]
        stats, offsets = row_statistics(block.alpha, positions, self.windows, block.entropy,
                                        block.learned_sink_mass)
        heads = list(block.heads)
        for name in ROW_STATS:
            self.sums[name][self._input, block.layer, heads] += stats[name][0].sum(-1).cpu()
        self.offsets[self._input, block.layer, heads] += offsets[0].sum(-2).cpu()
        self.rows[self._input, block.layer, heads] += size
