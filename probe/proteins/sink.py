"""ESM's contact regression streamed head by head: the capture sink behind every contact prediction.

The checkpoint's contact head (HF ``EsmContactPredictionHead``, Rao et al. 2020) computes, for the attention
α_c of every channel c = (layer, head) cropped to the residues (BOS and EOS dropped, EOS/padding rows and
columns zeroed)::

    logit = b + Σ_c w_c · APC(sym(α_c)),   sym(A) = A + Aᵀ,   APC(S) = S − r rᵀ / Σr  (r = row sums of S)
    contacts = sigmoid(logit)

Expanding the sum needs only per-channel row and column sums and ONE accumulator per sequence::

    Σ_c w_c·(A_c + A_cᵀ) = M + Mᵀ      with M = Σ_c w_c·A_c   (accumulated block of query rows by block)
    Σ_c w_c·r_c r_cᵀ/t_c = R·diag(w/t)·Rᵀ  with R [residue channel] (r_c = row sums + column sums of A_c)

so :class:`ContactSink` keeps, per sequence, M [L L] float32 plus row and column sums [layer head L]: O(L²)
memory, independent of layers × heads, while the capture engine streams α one block of query rows at a time.
Channels with a zero regression weight are not even requested from the engine (ESM's L1-fitted regression has
many).

Per-head analysis (``per_head=True``) needs each head's full APC-corrected map, so the sink then also keeps
the *current layer's* α of the residue block, [head L L] float32 per sequence (20 heads at L = 1000: 80 MB),
analyses every head of that layer when its last query block arrives (precision by range, the contact test's
counts and shift null of :mod:`probe.proteins.contact_null`, the ``far_*`` measure and Vig et al.'s sums),
and frees it: peak memory grows with heads per layer, never with layers × heads. The per-head columns are
those of :class:`probe.proteins.contacts.ContactResult`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from probe.engine import AttentionBlock, SinkNeeds
from probe.errors import ProbeError
from probe.naming import head_name
from probe.proteins import features as vig
from probe.proteins import significance
from probe.proteins.contact_null import RangeNull
from probe.proteins.features import MIN_ATTENTION, MIN_COUNT, MIN_TOTAL, ResidueFeatures
from probe.proteins.precision import (
    MIN_SEPARATION,
    RANGES,
    RangePairs,
    apc,
    far_masks,
    precision_columns,
    symmetrize,
)


def contact_regression(model: torch.nn.Module) -> tuple[torch.Tensor, float]:
    """The checkpoint's contact regression: weight [layer head] float32 and bias."""
    base = getattr(model, "esm", model)
    head = getattr(base, "contact_head", None)
    if head is None:
        raise ProbeError(f"{type(model).__name__} has no contact regression: predicted contacts need an ESM "
                         "checkpoint (per-head analysis works for every protein model)")
    config = model.config
    weight = head.regression.weight.detach().float().reshape(config.num_hidden_layers,
                                                             config.num_attention_heads)
    bias = float(head.regression.bias.detach()) if head.regression.bias is not None else 0.0
    return weight, bias  # [layer head]


@dataclass
class _SequenceState:
    """Accumulators of one sequence of the batch (L residues at tokens start .. start + L - 1)."""

    n_tokens: int  # special tokens + residues (unpadded)
    start: int  # token index of the first residue (1 after a BOS / [CLS], 0 without)
    length: int  # L residues
    # [L] 0 at EOS tokens inside the residue block (as the reference zeroes them), else None
    keep: torch.Tensor | None
    true_map: torch.Tensor | None  # [L L] int8
    features: ResidueFeatures | None = None  # binding sites, secondary structure (Vig et al.'s properties)
    residues: str | None = None  # the L residues (the test's residue strata); None: separation bins alone
    weighted: torch.Tensor | None = None  # [L L] M = Σ_c w_c·A_c
    row_sums: torch.Tensor | None = None  # [layer head L]
    col_sums: torch.Tensor | None = None  # [layer head L]
    token_weight: torch.Tensor | None = None  # [key] 1 at kept residue tokens, 0 at BOS / EOS / padding
    layer_alpha: torch.Tensor | None = None  # [head L L] current layer (per-head analysis only)
    # the true map's pairs by range (built once, per-head analysis only)
    range_pairs: RangePairs | None = None
    range_nulls: dict | None = None  # range -> RangeNull: strata and shifts of the test (built once)
    masks: dict | None = None  # Vig et al.'s property masks (built once, per-head analysis only)
    rows: list = field(default_factory=list)  # per-head table rows
    abs_logit: dict = field(default_factory=dict)  # (layer, head) -> Σ |w·APC(sym α)| over pairs |i−j| ≥ 6

    @property
    def stop(self) -> int:
        """Token index after the last residue."""
        return self.start + self.length


class ContactSink:
    """Capture sink accumulating contact logits (and optionally per-head statistics) of a right-padded batch.

    Residues sit at tokens `starts[b]` .. `starts[b] + lengths[b] - 1` (default: between one BOS and one
    EOS). After the forward pass: `contacts(b)` [L L], `logits(b)`, `head_table(b)`.

    Parameters
    ----------
    weight : torch.Tensor
        `[layer head]` regression weights (zeros without a regression).
    bias : float
        The regression's bias.
    input_ids, attention_mask : torch.Tensor
        `[batch token]`: the model inputs.
    eos_id : int or None
        ESM's EOS id (zeroed inside the residue block, as the reference does); None: no such rule.
    true_maps : sequence of ndarray or None, optional
        A `[L L]` int8 true map (or None) per sequence.
    per_head : bool, default False
        Also the per-head statistics.
    starts : sequence of int, optional
        Token index of each sequence's first residue (default 1).
    lengths : sequence of int, optional
        Residues of each sequence (default: tokens − 2).
    features : sequence of ResidueFeatures or None, optional
        Vig et al.'s other properties (binding sites, secondary structure) per sequence.
    min_attention : float, default MIN_ATTENTION
        θ of Vig et al.'s counts and of the far_* measure.
    regression : bool, default True
        False (models without a contact head): only the per-head analysis runs.
    residues : sequence of str or None, optional
        The residues of each sequence (the contact test's residue-class strata); None: separation bins alone.
    twin : bool, default False
        An untrained twin's sink: per head and range only the top-L hits and P@L (``hits_L_r, top_L_r,
        p_at_L_r``; :meth:`rows`), no shift null, shares or ``far_*`` measure.
    """

    def __init__(
        self,
        weight: torch.Tensor,  # [layer head] regression weights (zeros without a regression)
        bias: float,
        input_ids: torch.Tensor,  # [batch token]
        attention_mask: torch.Tensor,  # [batch token]
        # ESM's EOS id (zeroed inside the residue block, as the reference does); None: no such rule
        eos_id: int | None,
        true_maps: Sequence[np.ndarray | None] | None = None,
        per_head: bool = False,
        starts: Sequence[int] | None = None,  # token index of each sequence's first residue (default 1)
        lengths: Sequence[int] | None = None,  # residues of each sequence (default: tokens − 2)
        features: Sequence[ResidueFeatures | None] | None = None,
        min_attention: float = MIN_ATTENTION,  # θ of Vig et al.'s counts and of the far_* measure
        regression: bool = True,
        residues: Sequence[str | None] | None = None,
        twin: bool = False,
    ) -> None:
        self.weight = weight.float()
        self.bias = bias
        self.per_head = per_head
        self.regression = regression
        self.twin = twin
        self.min_attention = float(min_attention)
        self.engaged = False  # set once the engine asks for heads (a forward pass ran inside `capture`)
        self.n_layers, self.n_heads = weight.shape
        token_counts = attention_mask.sum(-1).tolist()
        batch = len(token_counts)
        starts = list(starts) if starts is not None else [1] * batch
        lengths = list(lengths) if lengths is not None else [n - 2 for n in token_counts]
        true_maps = list(true_maps) if true_maps is not None else [None] * batch
        features = list(features) if features is not None else [None] * batch
        residues = list(residues) if residues is not None else [None] * batch
        self.sequences: list[_SequenceState] = []
        for b, n_tokens in enumerate(token_counts):
            if not bool(attention_mask[b, :n_tokens].all()):
                raise ProbeError(
                    "contact prediction needs right-padded batches (padding after each sequence)")
            start, length = int(starts[b]), int(lengths[b])
            if start < 0 or start + length > n_tokens:
                raise ProbeError(f"sequence {b}: residues {start}..{start + length - 1} lie outside its "
                                 f"{n_tokens} tokens")
            keep = None
            if eos_id is not None:
                keep = (input_ids[b, start:start + length] != eos_id).float()  # [L]
                keep = None if bool(keep.all()) else keep
            true_map = None
            if true_maps[b] is not None:
                true_map = torch.as_tensor(np.asarray(true_maps[b], dtype=np.int8))
                if tuple(true_map.shape) != (length, length):
                    raise ProbeError(f"the true map of sequence {b} is {tuple(true_map.shape)} but the "
                                     f"sequence has {length} residues")
            if residues[b] is not None and len(residues[b]) != length:
                raise ProbeError(f"sequence {b}: {len(residues[b])} residues given for {length} positions")
            self.sequences.append(_SequenceState(n_tokens, start, length, keep, true_map, features[b],
                                                 residues[b]))

    # -- the Sink protocol -----------------------------------------------------------------------------------

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        return SinkNeeds(heads=tuple(self.heads_for(layer, n_heads)))

    def heads_for(self, layer: int, n_heads: int) -> Sequence[int]:
        self.engaged = True
        if self.per_head:
            return range(n_heads)
        return [head for head in range(n_heads) if float(self.weight[layer, head]) != 0.0]

    def update(self, block: AttentionBlock) -> None:
        device = block.alpha.device
        heads = torch.tensor(block.heads, device=device)
        weight = self.weight.to(device)[block.layer, heads]  # [head]
        first, n_rows, n_keys = block.query_start, block.alpha.shape[2], block.alpha.shape[3]
        for b, state in enumerate(self.sequences):
            length = state.length
            if state.weighted is None:
                state.weighted = torch.zeros(length, length, device=device)  # [L L]
                # [layer head L]
                state.row_sums = torch.zeros(self.n_layers, self.n_heads, length, device=device)
                # [layer head L]
                state.col_sums = torch.zeros(self.n_layers, self.n_heads, length, device=device)
                # 1 at the residue tokens the reference keeps, 0 at BOS, EOS and padding
                state.token_weight = torch.zeros(n_keys, device=device)  # [key]
                state.token_weight[state.start:state.stop] = (1.0 if state.keep is None
                                                              else state.keep.to(device))
            # token rows of residues in block
            low, high = max(first, state.start), min(first + n_rows, state.stop)
            if low < high:
                # [head rows key], each head's rows contiguous
                alpha = block.alpha[b, :, low - first:high - first]
                rows, residues = slice(low - state.start, high - state.start), slice(state.start, state.stop)
                row_weight = state.token_weight[low:high]  # [rows]
                # three matrix-vector passes over the block: no copy of α, no per-head loop
                if self.regression:
                    # [rows key]
                    weighted = (weight @ alpha.reshape(len(block.heads), -1)).reshape(high - low, n_keys)
                    if state.keep is not None:  # an EOS token inside the residues: zero its row and column
                        weighted = weighted * row_weight[:, None] * state.token_weight[None, :]
                    state.weighted[rows] += weighted[:, residues]  # [rows L]
                    # every residue row and column counts: plain sums over the residue block
                    if state.keep is None:
                        block_residues = alpha[:, :, residues]  # [head rows L]
                        state.row_sums[block.layer, heads, rows] = block_residues.sum(-1)  # [head rows]
                        state.col_sums[block.layer, heads] += block_residues.sum(1)  # [head L]
                    else:
                        state.row_sums[block.layer, heads, rows] = (alpha @ state.token_weight) * row_weight
                        column_sums = (row_weight @ alpha) * state.token_weight  # [head key]
                        state.col_sums[block.layer, heads] += column_sums[:, residues]  # [head L]
                if self.per_head:
                    if state.layer_alpha is None:
                        state.layer_alpha = torch.zeros(len(block.heads), length, length, device=device)
                    kept = alpha[:, :, residues] * row_weight[:, None] * state.token_weight[None, residues]
                    state.layer_alpha[:, rows] = kept  # [head rows L]
            if self.per_head and first + n_rows == block.n_query and state.layer_alpha is not None:
                self._analyse_layer(state, block.layer, block.heads)
                state.layer_alpha = None

    # -- results ---------------------------------------------------------------------------------------------

    def logits(self, b: int = 0) -> torch.Tensor:
        """[L L] contact logits of sequence b (before the sigmoid)."""
        state = self.sequences[b]
        if not self.regression:
            raise ProbeError("this model has no contact regression: there are no predicted contacts, only "
                             "per-head statistics")
        if state.weighted is None and self.engaged:  # every regression weight is zero: the bias alone
            return torch.full((state.length, state.length), float(self.bias))
        if state.weighted is None:
            raise ProbeError("the contact sink received no attention: run the model inside `with "
                             "capture(...)`")
        # [channel L] rows of sym(A)
        sums = (state.row_sums + state.col_sums).reshape(-1, state.length).double()
        totals = sums.sum(-1)  # [channel]
        weight = self.weight.to(sums.device).reshape(-1).double()  # [channel]
        used = (weight != 0) & (totals > 0)
        scaled = sums[used] * (weight[used] / totals[used])[:, None]  # [channel L]
        correction = scaled.transpose(0, 1) @ sums[used]  # [L L] Σ_c w_c r_c r_cᵀ / t_c
        return self.bias + state.weighted + state.weighted.transpose(0, 1) - correction.float()

    def contacts(self, b: int = 0) -> torch.Tensor:
        """[L L] contact probabilities of sequence b."""
        return torch.sigmoid(self.logits(b))

    def head_table(self, b: int = 0, min_count: int = MIN_COUNT, *, min_total: float = MIN_TOTAL,
                   control: pd.DataFrame | None = None) -> pd.DataFrame:
        """Per-head statistics of sequence b (per_head mode), one row per layer × head (see the module
        docstring); Vig et al.'s shares need Σ α > θ of at least `min_total`, the count shares `min_count`
        weights ≥ θ; `control`, the untrained twins' heads (``p_at_L_r``), sets ``untrained_p99``."""
        state = self.sequences[b]
        if not self.per_head:
            raise ProbeError("per-head statistics were not collected: build the ContactSink with "
                             "per_head=True")
        total = sum(state.abs_logit.values())
        table = pd.DataFrame(state.rows)
        table.insert(4, "logit_share", [state.abs_logit[(row["layer"], row["head"])] / total
                                        if total > 0 and self.regression else float("nan")
                                        for row in state.rows])
        table = vig.shares(table, min_total=min_total, min_count=min_count)
        for name, value in vig.backgrounds(self.background_counts(b)).items():
            table[name] = value
        table = table.sort_values(["layer", "head"], ignore_index=True)
        return significance.with_tests(table, control)

    def rows(self, b: int = 0) -> list[dict]:
        """The raw per-head rows of sequence b (per_head mode), in the order the layers arrived: no shares, no
        table-wide columns (what an untrained twin's P@L needs)."""
        return list(self.sequences[b].rows)

    def background_counts(self, b: int = 0) -> dict[str, float]:
        """Counts behind Vig et al.'s background rates for sequence b (see
        :func:`probe.proteins.features.background_counts`)."""
        state = self.sequences[b]
        return vig.background_counts(with_contacts(state.features, state.true_map), state.length)

    def _analyse_layer(self, state: _SequenceState, layer: int, heads: tuple[int, ...]) -> None:
        """Statistics of every head of one layer from its α [head L L], computed one head at a time."""
        device = state.layer_alpha.device
        if state.true_map is not None and state.range_pairs is None:
            state.range_pairs = RangePairs(state.true_map.to(device))
            if not self.twin:
                state.range_nulls = {name: RangeNull(state.true_map.to(device), index, state.residues)
                                     for name, (index, _) in state.range_pairs.pairs.items()}
        if self.twin:
            self._twin_layer(state, layer, heads)
            return
        if state.masks is None:
            features = with_contacts(state.features, state.true_map)
            state.masks = vig.feature_masks(features, state.length, device) if features is not None else {}
        pairs = state.range_pairs
        length = state.length
        position = torch.arange(length, device=device)
        far = (position[:, None] - position[None, :]).abs() >= MIN_SEPARATION  # [L L]
        if state.true_map is not None:
            far_pairs, far_contacts = far_masks(state.true_map.to(device))
            background = float(far_contacts.sum() / far_pairs.sum()) if far_pairs.any() else float("nan")
        counts = vig.feature_counts(state.layer_alpha, state.masks, self.min_attention)  # name -> [head]
        tops: dict[str, list[torch.Tensor]] = {}  # range -> each head's top-k pairs
        first = len(state.rows)
        for index, head in enumerate(heads):
            alpha = state.layer_alpha[index]  # [L L]
            corrected = apc(symmetrize(alpha))  # [L L]
            weight = float(self.weight[layer, head]) if self.regression else float("nan")
            state.abs_logit[(layer, head)] = float(
                (weight * corrected).abs()[far].sum()) if self.regression else 0.0
            row = {"layer": layer, "head": head, "name": head_name(layer, head), "weight": weight}
            if pairs is not None:
                row.update(pairs.precision(corrected))
                for name, (hits, drawn, known, contacts, top) in pairs.top_hits(corrected).items():
                    row.update(significance.head_row(hits, drawn, known, contacts, name))
                    tops.setdefault(name, []).append(top)
                strong = alpha >= self.min_attention  # [L L]
                high, on_contact = (strong & far_pairs).sum(), (strong & far_contacts).sum()
                row["far_contact_share"] = float(on_contact / high) if int(high) else float("nan")
                row["far_high_count"] = int(high)
                row["far_background"] = background
            else:
                row.update(dict.fromkeys(precision_columns(), float("nan")))
                for name in RANGES:
                    row.update(significance.head_row(0, 0, 0, 0, name))
                    row.update({f"hits_L_{name}": float("nan"), f"top_L_{name}": float("nan"),
                                f"n_known_{name}": float("nan"), f"n_true_{name}": float("nan")})
                row.update(far_contact_share=float("nan"), far_high_count=0, far_background=float("nan"))
            for prefix in ("w", "n"):
                row[f"{prefix}_high"] = float(counts[f"{prefix}_high"][index])
                for name in vig.FEATURES:
                    key = f"{prefix}_{name}"
                    row[key] = float(counts[key][index]) if key in counts else float("nan")
            state.rows.append(row)
        for name, top in tops.items():  # the shift null of every head of the layer at once
            if state.range_nulls:
                hits, expected = state.range_nulls[name].excess_batch(torch.stack(top))  # [head shift]
                for row, head_hits, head_expected in zip(state.rows[first:], hits.cpu().numpy(),
                                                         expected.cpu().numpy(), strict=True):
                    row.update(significance.null_columns(head_hits, head_expected, name,
                                                         row[f"top_L_{name}"]))

    def _twin_layer(self, state: _SequenceState, layer: int, heads: tuple[int, ...]) -> None:
        """An untrained twin's rows: per head and range, the top-L hits and P@L of its APC(sym(α))."""
        for index, head in enumerate(heads):
            row = {"layer": layer, "head": head, "name": head_name(layer, head)}
            if state.range_pairs is not None:
                corrected = apc(symmetrize(state.layer_alpha[index]))  # [L L]
                for name, (hits, drawn, _, _, _) in state.range_pairs.top_hits(corrected).items():
                    row.update({f"hits_L_{name}": float(hits), f"top_L_{name}": float(drawn),
                                f"p_at_L_{name}": hits / drawn if drawn else float("nan")})
            state.rows.append(row)


def with_contacts(features: ResidueFeatures | None, true_map: torch.Tensor | None) -> ResidueFeatures | None:
    """The sequence's properties with its true map as the contact property."""
    if true_map is None and features is None:
        return None
    contacts = None if true_map is None else true_map.cpu().numpy()
    if features is None:
        return ResidueFeatures(contacts=contacts)
    return dataclasses.replace(features, contacts=contacts)  # every other property kept as it is


__all__ = ["ContactSink", "contact_regression", "with_contacts"]
