"""ESM contact prediction streamed head by head, and per-head contact analysis against a true map.

The checkpoint's contact head (HF ``EsmContactPredictionHead``, Rao et al. 2020) computes, for the attention α_c of
every channel c = (layer, head) cropped to the residues (BOS and EOS dropped, EOS/padding rows and columns zeroed)::

    logit = b + Σ_c w_c · APC(sym(α_c)),   sym(A) = A + Aᵀ,   APC(S) = S − r rᵀ / Σr  (r = row sums of S)
    contacts = sigmoid(logit)

Expanding the sum needs only per-channel row and column sums and ONE accumulator per sequence::

    Σ_c w_c·(A_c + A_cᵀ) = M + Mᵀ      with M = Σ_c w_c·A_c   (accumulated block of query rows by block)
    Σ_c w_c·r_c r_cᵀ/t_c = R·diag(w/t)·Rᵀ  with R [residue channel] (r_c = row sums + column sums of A_c)

so :class:`ContactSink` keeps, per sequence, M [L L] float32 plus row and column sums [layer head L]: O(L²) memory,
independent of layers × heads, while the capture engine streams α one block of query rows at a time. Channels with a
zero regression weight are not even requested from the engine (ESM's L1-fitted regression has many).

Per-head analysis (``per_head=True``, the default when a true map is given) needs each head's full APC-corrected
map, so the sink then also keeps the *current layer's* α of the residue block, [head L L] float32 per sequence
(20 heads at L = 1000: 80 MB), analyses every head of that layer when its last query block arrives, and frees it:
peak memory grows with heads per layer, never with layers × heads.

Every protein language model is analysed head by head (ESM, ProtBert-style BERTs, ProtT5 encoders: the residue
block is found from the tokenizer's special tokens); only checkpoints with a contact regression (ESM,
``loaded.has_contact_head``) also get predicted contacts — for the others ``ContactResult.contacts`` is None.

Public API (what the CLI, notebook and dashboard call)::

    predict_contacts(loaded, sequence, true_map=None, per_head=None, features=None, regression=None) -> ContactResult
    predict_contacts_batch(loaded, sequences, true_maps=None, per_head=None, features=None) -> list[ContactResult]
    predict_contacts_windowed(loaded, sequence, window, stride=None, true_map=None) -> ContactResult  # ESM only
    head_attention_map(loaded, sequence, layer, head) -> np.ndarray [L L]   # APC(sym(α)) of one head
    precision_by_range(scores, true_map) -> {"p_at_L_long": ..., ...}
    contact_regression(model) -> (weight [layer head], bias)

Precision@L/k in a range (short 6–11, medium 12–23, long ≥ 24 residues apart): among pairs i < j of that range
whose true contact state is known (true map ≥ 0), the k = ⌊L/frac⌋ highest-scoring ones (L = sequence length), the
fraction that are contacts. Where the range holds fewer than k known pairs (short proteins, unresolved stretches),
k is the number of known pairs: the precision is taken over the pairs there are. ESM's ``compute_precisions``
instead fills the missing top-k slots with pairs from outside the range ranked at −∞ (in arbitrary order) and pads
with non-contacts beyond the upper triangle, so its value there is lower and not well defined; we do not follow it.
A range without a known pair gives NaN. Ties at the cut are broken arbitrarily. Column names:
``p_at_{L|L2|L5}_{short|medium|long}``.

Per-head table columns (one row per layer × head): ``layer, head, name`` ("L3H7"), ``weight`` (the regression
weight w_c; NaN without a regression), ``logit_share`` (Σ over pairs |i−j| ≥ 6 of |w_c·APC(sym(α_c))|, divided by
the same sum over all heads: the share of the non-bias logit this head supplies; NaN without a regression), the
nine precision columns of its APC(sym(α_c)) map; per range the base-rate comparison of
:mod:`probe.proteins.significance` (``hits_L_{r}``, ``top_L_{r}``, ``n_known_{r}``, ``n_true_{r}``, ``base_rate_{r}``,
``enrichment_L_{r}``, ``p_value_L_{r}``, ``q_value_L_{r}``: BH over the heads of this sequence); then the
per-sequence measure that earlier versions called ``provis_share``: ``far_contact_share`` (of the weights
α_c(i, j) ≥ θ on *known* pairs |i−j| ≥ 6, both directions, the fraction on contacts; NaN when there is none — local
and unknown pairs are left out, so it is not Vig et al.'s share), ``far_high_count`` (how many such weights) and
``far_background`` (the contact rate among those pairs); then Vig et al.'s sums, shares and backgrounds of
:mod:`probe.proteins.features` for this one sequence (``w_high``, ``w_{f}``, ``{f}_share``: attention-weighted,
NaN where Σ α < min_total; ``n_high``, ``n_{f}``, ``{f}_count_share``: counts; ``{f}_background``; NaN where the
property is unknown).

A fitted regression (:mod:`probe.proteins.regression`, ``regression=(weight, bias)``) replaces or supplies the
checkpoint's: any protein model then gets predicted contacts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from probe.engine import AttentionBlock, DenseSink, SinkNeeds, capture
from probe.errors import ProbeError
from probe.models import LoadedModel
from probe.naming import head_name
from probe.proteins import features as vig
from probe.proteins import significance
from probe.proteins.features import MIN_ATTENTION, MIN_COUNT, MIN_TOTAL, ResidueFeatures

RANGES: dict[str, tuple[int, int | None]] = {"short": (6, 11), "medium": (12, 23), "long": (24, None)}
FRACTIONS: dict[str, int] = {"L": 1, "L2": 2, "L5": 5}  # P@L, P@L/2, P@L/5
MIN_SEPARATION = 6  # pairs closer in sequence are ignored by logit_share and the far_* measure (and the ranges)


def precision_columns() -> list[str]:
    """The nine precision column names, range-major: p_at_L_short, p_at_L2_short, ..., p_at_L5_long."""
    return [f"p_at_{label}_{name}" for name in RANGES for label in FRACTIONS]


# ---------------------------------------------------------------------------------------------------------------
# Pure scoring functions
# ---------------------------------------------------------------------------------------------------------------


def symmetrize(attention: torch.Tensor) -> torch.Tensor:
    """A + Aᵀ over the last two axes."""
    return attention + attention.transpose(-1, -2)


def apc(matrix: torch.Tensor) -> torch.Tensor:
    """Average product correction over the last two axes: S − (row sums ⊗ column sums) / total."""
    rows = matrix.sum(-1, keepdim=True)  # [... query 1]
    cols = matrix.sum(-2, keepdim=True)  # [... 1 key]
    total = matrix.sum((-1, -2), keepdim=True)  # [... 1 1]
    return matrix - rows * cols / total


class _RangePairs:
    """For one true map: the known pairs i < j of every range, as flat indices, and whether each is a contact."""

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

    def top_hits(self, scores: torch.Tensor) -> dict[str, tuple[int, int, int, int]]:  # scores [L L]
        """{range: (hits among the top k = min(L, known), k, known pairs, contacts)}: the counts behind P@L and its
        base rate (probe.proteins.significance)."""
        flat = scores.reshape(-1).float()
        result = {}
        for name, (index, is_contact) in self.pairs.items():
            values = flat[index]
            values = torch.where(torch.isfinite(values), values, torch.full_like(values, -torch.inf))
            k = min(max(1, self.length), values.numel())
            hits = int(is_contact[torch.topk(values, k).indices].sum()) if k else 0
            result[name] = (hits, k, int(values.numel()), int(is_contact.sum()))
        return result

    def precision(self, scores: torch.Tensor) -> dict[str, float]:  # scores [L L]
        flat = scores.reshape(-1).float()
        result = {}
        for name, (index, is_contact) in self.pairs.items():
            values = flat[index]
            values = torch.where(torch.isfinite(values), values, torch.full_like(values, -torch.inf))
            for label, fraction in FRACTIONS.items():
                # k = ⌊L/frac⌋, or every known pair of the range when it holds fewer (see the module docstring)
                k = min(max(1, self.length // fraction), values.numel())
                column = f"p_at_{label}_{name}"
                if k == 0:
                    result[column] = float("nan")
                    continue
                top = torch.topk(values, k).indices
                result[column] = float(is_contact[top].mean())
        return result


def precision_by_range(scores, true_map) -> dict[str, float]:
    """Precision at L, L/2, L/5 in the short, medium and long ranges of a [L L] score map against a [L L] true map
    (1 contact, 0 not, -1 unknown: unknown pairs are skipped; NaN scores rank last). Keys: precision_columns()."""
    scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    true_map = torch.as_tensor(np.asarray(true_map, dtype=np.int8))
    if scores.shape != true_map.shape or scores.ndim != 2:
        raise ProbeError(f"scores {tuple(scores.shape)} and true map {tuple(true_map.shape)} must be the same [L, L]")
    return _RangePairs(true_map).precision(scores)


def known_pair_counts(true_map) -> dict[str, tuple[int, int]]:
    """{range: (known pairs i < j, contacts among them)} of a [L L] true map."""
    pairs = _RangePairs(torch.as_tensor(np.asarray(true_map, dtype=np.int8)))
    return {name: (int(index.numel()), int(is_contact.sum())) for name, (index, is_contact) in pairs.pairs.items()}


def far_contact_counts(alpha: torch.Tensor, true_map: torch.Tensor, threshold: float = MIN_ATTENTION):
    """(high, on_contact): for α [... L L], how many weights ≥ threshold fall on known pairs |i−j| ≥ 6 and how many of
    those on contacts, each [...] (the per-sequence far_* measure)."""
    pairs, contacts = _far_masks(true_map)
    high = alpha >= threshold
    return (high & pairs).sum((-1, -2)), (high & contacts).sum((-1, -2))


def _far_masks(true_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    length = true_map.shape[0]
    position = torch.arange(length, device=true_map.device)
    far = (position[:, None] - position[None, :]).abs() >= MIN_SEPARATION  # [L L]
    pairs = far & (true_map >= 0)
    return pairs, pairs & (true_map == 1)


# ---------------------------------------------------------------------------------------------------------------
# The streaming sink
# ---------------------------------------------------------------------------------------------------------------


def contact_regression(model: torch.nn.Module) -> tuple[torch.Tensor, float]:
    """The checkpoint's contact regression: weight [layer head] float32 and bias."""
    base = getattr(model, "esm", model)
    head = getattr(base, "contact_head", None)
    if head is None:
        raise ProbeError(f"{type(model).__name__} has no contact regression: predicted contacts need an ESM checkpoint "
                         "(per-head analysis works for every protein model)")
    config = model.config
    weight = head.regression.weight.detach().float().reshape(config.num_hidden_layers, config.num_attention_heads)
    bias = float(head.regression.bias.detach()) if head.regression.bias is not None else 0.0
    return weight, bias  # [layer head]


@dataclass
class _SequenceState:
    """Accumulators of one sequence of the batch (L residues at tokens start .. start + L - 1)."""

    n_tokens: int  # special tokens + residues (unpadded)
    start: int  # token index of the first residue (1 after a BOS / [CLS], 0 without)
    length: int  # L residues
    keep: torch.Tensor | None  # [L] 0 at EOS tokens inside the residue block (as the reference zeroes them), else None
    true_map: torch.Tensor | None  # [L L] int8
    features: ResidueFeatures | None = None  # binding sites, secondary structure (Vig et al.'s properties)
    weighted: torch.Tensor | None = None  # [L L] M = Σ_c w_c·A_c
    row_sums: torch.Tensor | None = None  # [layer head L]
    col_sums: torch.Tensor | None = None  # [layer head L]
    token_weight: torch.Tensor | None = None  # [key] 1 at kept residue tokens, 0 at BOS / EOS / padding
    layer_alpha: torch.Tensor | None = None  # [head L L] current layer (per-head analysis only)
    range_pairs: _RangePairs | None = None  # the true map's pairs by range (built once, per-head analysis only)
    masks: dict | None = None  # Vig et al.'s property masks (built once, per-head analysis only)
    rows: list = field(default_factory=list)  # per-head table rows
    abs_logit: dict = field(default_factory=dict)  # (layer, head) -> Σ |w·APC(sym α)| over pairs |i−j| ≥ 6

    @property
    def stop(self) -> int:
        """Token index after the last residue."""
        return self.start + self.length


class ContactSink:
    """Capture sink accumulating contact logits (and optionally per-head statistics) of a right-padded batch.

    `input_ids` / `attention_mask` [batch token] are the model inputs; `true_maps` gives a [L L] int8 true map (or
    None) per sequence, `features` Vig et al.'s other properties (binding sites, secondary structure) per sequence.
    Residues sit at tokens `starts[b]` .. `starts[b] + lengths[b] - 1` (default: between one BOS and one EOS).
    With `regression=False` (models without a contact head) only the per-head analysis runs. After the forward
    pass: `contacts(b)` [L L], `logits(b)`, `head_table(b)`.
    """

    def __init__(
        self,
        weight: torch.Tensor,  # [layer head] regression weights (zeros without a regression)
        bias: float,
        input_ids: torch.Tensor,  # [batch token]
        attention_mask: torch.Tensor,  # [batch token]
        eos_id: int | None,  # ESM's EOS id (zeroed inside the residue block, as the reference does); None: no such rule
        true_maps: Sequence[np.ndarray | None] | None = None,
        per_head: bool = False,
        starts: Sequence[int] | None = None,  # token index of each sequence's first residue (default 1)
        lengths: Sequence[int] | None = None,  # residues of each sequence (default: tokens − 2)
        features: Sequence[ResidueFeatures | None] | None = None,
        min_attention: float = MIN_ATTENTION,  # θ of Vig et al.'s counts and of the far_* measure
        regression: bool = True,
    ) -> None:
        self.weight = weight.float()
        self.bias = bias
        self.per_head = per_head
        self.regression = regression
        self.min_attention = float(min_attention)
        self.engaged = False  # set once the engine asks for heads (a forward pass ran inside `capture`)
        self.n_layers, self.n_heads = weight.shape
        token_counts = attention_mask.sum(-1).tolist()
        batch = len(token_counts)
        starts = list(starts) if starts is not None else [1] * batch
        lengths = list(lengths) if lengths is not None else [n - 2 for n in token_counts]
        true_maps = list(true_maps) if true_maps is not None else [None] * batch
        features = list(features) if features is not None else [None] * batch
        self.sequences: list[_SequenceState] = []
        for b, n_tokens in enumerate(token_counts):
            if not bool(attention_mask[b, :n_tokens].all()):
                raise ProbeError("contact prediction needs right-padded batches (padding after each sequence)")
            start, length = int(starts[b]), int(lengths[b])
            if start < 0 or start + length > n_tokens:
                raise ProbeError(f"sequence {b}: residues {start}..{start + length - 1} lie outside its {n_tokens} "
                                 "tokens")
            keep = None
            if eos_id is not None:
                keep = (input_ids[b, start:start + length] != eos_id).float()  # [L]
                keep = None if bool(keep.all()) else keep
            true_map = None
            if true_maps[b] is not None:
                true_map = torch.as_tensor(np.asarray(true_maps[b], dtype=np.int8))
                if tuple(true_map.shape) != (length, length):
                    raise ProbeError(f"the true map of sequence {b} is {tuple(true_map.shape)} but the sequence has "
                                     f"{length} residues")
            self.sequences.append(_SequenceState(n_tokens, start, length, keep, true_map, features[b]))

    # -- the Sink protocol ------------------------------------------------------------------------------------

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
                state.row_sums = torch.zeros(self.n_layers, self.n_heads, length, device=device)  # [layer head L]
                state.col_sums = torch.zeros(self.n_layers, self.n_heads, length, device=device)  # [layer head L]
                # 1 at the residue tokens the reference keeps, 0 at BOS, EOS and padding
                state.token_weight = torch.zeros(n_keys, device=device)  # [key]
                state.token_weight[state.start:state.stop] = 1.0 if state.keep is None else state.keep.to(device)
            low, high = max(first, state.start), min(first + n_rows, state.stop)  # token rows of residues in block
            if low < high:
                alpha = block.alpha[b, :, low - first:high - first]  # [head rows key], each head's rows contiguous
                rows, residues = slice(low - state.start, high - state.start), slice(state.start, state.stop)
                row_weight = state.token_weight[low:high]  # [rows]
                if self.regression:  # three matrix-vector passes over the block: no copy of α, no per-head loop
                    weighted = (weight @ alpha.reshape(len(block.heads), -1)).reshape(high - low, n_keys)  # [rows key]
                    if state.keep is not None:  # an EOS token inside the residues: zero its row and column
                        weighted = weighted * row_weight[:, None] * state.token_weight[None, :]
                    state.weighted[rows] += weighted[:, residues]  # [rows L]
                    if state.keep is None:  # every residue row and column counts: plain sums over the residue block
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

    # -- results ------------------------------------------------------------------------------------------------

    def logits(self, b: int = 0) -> torch.Tensor:
        """[L L] contact logits of sequence b (before the sigmoid)."""
        state = self.sequences[b]
        if not self.regression:
            raise ProbeError("this model has no contact regression: there are no predicted contacts, only per-head "
                             "statistics")
        if state.weighted is None and self.engaged:  # every regression weight is zero: the bias alone
            return torch.full((state.length, state.length), float(self.bias))
        if state.weighted is None:
            raise ProbeError("the contact sink received no attention: run the model inside `with capture(...)`")
        sums = (state.row_sums + state.col_sums).reshape(-1, state.length).double()  # [channel L] rows of sym(A)
        totals = sums.sum(-1)  # [channel]
        weight = self.weight.to(sums.device).reshape(-1).double()  # [channel]
        used = (weight != 0) & (totals > 0)
        scaled = sums[used] * (weight[used] / totals[used])[:, None]  # [channel L]
        correction = scaled.transpose(0, 1) @ sums[used]  # [L L] Σ_c w_c r_c r_cᵀ / t_c
        return self.bias + state.weighted + state.weighted.transpose(0, 1) - correction.float()

    def contacts(self, b: int = 0) -> torch.Tensor:
        """[L L] contact probabilities of sequence b."""
        return torch.sigmoid(self.logits(b))

    def head_table(self, b: int = 0, min_count: int = MIN_COUNT, *, min_total: float = MIN_TOTAL) -> pd.DataFrame:
        """Per-head statistics of sequence b (per_head mode), one row per layer × head (see the module docstring);
        Vig et al.'s shares need Σ α > θ of at least `min_total`, the count shares `min_count` weights ≥ θ."""
        state = self.sequences[b]
        if not self.per_head:
            raise ProbeError("per-head statistics were not collected: build the ContactSink with per_head=True")
        total = sum(state.abs_logit.values())
        table = pd.DataFrame(state.rows)
        table.insert(4, "logit_share", [state.abs_logit[(row["layer"], row["head"])] / total
                                        if total > 0 and self.regression else float("nan") for row in state.rows])
        table = vig.shares(table, min_total=min_total, min_count=min_count)
        for name, value in vig.backgrounds(self.background_counts(b)).items():
            table[name] = value
        return significance.with_q_values(table).sort_values(["layer", "head"], ignore_index=True)

    def background_counts(self, b: int = 0) -> dict[str, float]:
        """Counts behind Vig et al.'s background rates for sequence b (see :func:`probe.proteins.features.background_counts`)."""
        state = self.sequences[b]
        return vig.background_counts(_with_contacts(state.features, state.true_map), state.length)

    def _analyse_layer(self, state: _SequenceState, layer: int, heads: tuple[int, ...]) -> None:
        """Statistics of every head of one layer from its α [head L L], computed one head at a time."""
        device = state.layer_alpha.device
        if state.true_map is not None and state.range_pairs is None:
            state.range_pairs = _RangePairs(state.true_map.to(device))
        if state.masks is None:
            features = _with_contacts(state.features, state.true_map)
            state.masks = vig.feature_masks(features, state.length, device) if features is not None else {}
        pairs = state.range_pairs
        length = state.length
        position = torch.arange(length, device=device)
        far = (position[:, None] - position[None, :]).abs() >= MIN_SEPARATION  # [L L]
        if state.true_map is not None:
            far_pairs, far_contacts = _far_masks(state.true_map.to(device))
            background = float(far_contacts.sum() / far_pairs.sum()) if far_pairs.any() else float("nan")
        counts = vig.feature_counts(state.layer_alpha, state.masks, self.min_attention)  # name -> [head]
        for index, head in enumerate(heads):
            alpha = state.layer_alpha[index]  # [L L]
            corrected = apc(symmetrize(alpha))  # [L L]
            weight = float(self.weight[layer, head]) if self.regression else float("nan")
            state.abs_logit[(layer, head)] = float((weight * corrected).abs()[far].sum()) if self.regression else 0.0
            row = {"layer": layer, "head": head, "name": head_name(layer, head), "weight": weight}
            if pairs is not None:
                row.update(pairs.precision(corrected))
                for name, top in pairs.top_hits(corrected).items():
                    row.update(significance.head_row(*top, name=name))
                strong = alpha >= self.min_attention  # [L L]
                high, on_contact = (strong & far_pairs).sum(), (strong & far_contacts).sum()
                row["far_contact_share"] = float(on_contact / high) if int(high) else float("nan")
                row["far_high_count"] = int(high)
                row["far_background"] = background
            else:
                row.update(dict.fromkeys(precision_columns(), float("nan")))
                for name in RANGES:
                    row.update(dict.fromkeys(significance.range_columns(name), float("nan")))
                row.update(far_contact_share=float("nan"), far_high_count=0, far_background=float("nan"))
            for prefix in ("w", "n"):
                row[f"{prefix}_high"] = float(counts[f"{prefix}_high"][index])
                for name in vig.FEATURES:
                    key = f"{prefix}_{name}"
                    row[key] = float(counts[key][index]) if key in counts else float("nan")
            state.rows.append(row)


def _with_contacts(features: ResidueFeatures | None, true_map: torch.Tensor | None) -> ResidueFeatures | None:
    """The sequence's properties with its true map as the contact property."""
    if true_map is None and features is None:
        return None
    contacts = None if true_map is None else true_map.cpu().numpy()
    if features is None:
        return ResidueFeatures(contacts=contacts)
    return ResidueFeatures(contacts=contacts, binding=features.binding, secondary=features.secondary)


# ---------------------------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ContactResult:
    """Contacts of one sequence, and (when a true map was given) how good they are (frozen).

    Attributes
    ----------
    sequence : str
        The cleaned sequence, L residues.
    contacts : numpy.ndarray or None, shape=(L, L), float32
        Contact probabilities from the checkpoint's contact regression (NaN: pairs no window covered, windowed
        mode); None for a model without a contact head.
    true_contacts : numpy.ndarray or None, shape=(L, L), int8
        The true map given: 1 contact, 0 not, −1 unknown.
    precision : dict of str to float, or None
        Precision of `contacts` against the true map, keys :func:`precision_columns`
        (``p_at_{L|L2|L5}_{short|medium|long}``; NaN for a range without a known pair).
    heads : pandas.DataFrame or None
        The per-head table (per-head mode), one row per layer × head, with these columns:

        | column | dtype | meaning |
        |---|---|---|
        | `layer`, `head` | int | 0-based |
        | `name` | str | `L{layer}H{head}` |
        | `weight` | float | the head's contact-regression weight w_c; NaN without a regression |
        | `logit_share` | float | the head's share of the non-bias logit, Σ of abs(w_c·APC(sym(α_c))) over pairs at least 6 apart, over the same sum for all heads; NaN without a regression |
        | `p_at_{L,L2,L5}_{short,medium,long}` | float | the nine precisions of the head's APC(sym(α)) map (:func:`precision_columns`) |
        | `far_contact_share` | float | of the weights α ≥ θ on known pairs at least 6 apart, the fraction on contacts; NaN when there is none |
        | `far_high_count` | int | how many such weights |
        | `far_background` | float | the contact rate among those pairs |
        | `{hits_L,top_L,n_known,n_true}_{short,medium,long}` | int | the head's top-L pairs that are contacts, the top-L pairs with a known state, the known pairs and the contacts of the range |
        | `base_rate_{short,medium,long}` | float | n_true / n_known: the contact rate of the pairs considered |
        | `enrichment_L_{short,medium,long}` | float | P@L / base rate |
        | `p_value_L_{short,medium,long}`, `q_value_L_{short,medium,long}` | float | hypergeometric p-value of the top-L hits against the base rate; Benjamini–Hochberg over the heads |
        | `w_high` | float | Vig et al.'s Σα over the weights α > θ (provis b23402d) |
        | `w_{contact,binding,helix,strand,coil}` | float | Σα·f over those weights (NaN: property unknown) |
        | `{contact,binding,helix,strand,coil}_share` | float | w_f / w_high, attention-weighted; NaN where w_high < min_total or unknown |
        | `n_high` | float | the count variant: weights α ≥ θ (provis 946e9b4) |
        | `n_{contact,binding,helix,strand,coil}` | float | of those, on the property (NaN: property unknown) |
        | `{contact,binding,helix,strand,coil}_count_share` | float | n_f / n_high; NaN where n_high < min_count or unknown |
        | `{contact,binding,helix,strand,coil}_background` | float | the property's rate in this sequence; NaN where unknown |

    background : dict of str to float, or None
        Per-head mode: the counts behind the background rates (``n_pairs``, ``n_residues``, ``n_contact_pairs``,
        ``n_{binding|helix|strand|coil}_residues``; NaN where unknown).
    """

    sequence: str
    contacts: np.ndarray | None  # [L L] float32 probabilities (NaN: pairs no window covered); None: no contact head
    true_contacts: np.ndarray | None = None  # [L L] int8: 1 contact, 0 not, -1 unknown
    precision: dict[str, float] | None = None  # of `contacts`, keys precision_columns()
    heads: pd.DataFrame | None = None  # per-head table (see the module docstring)
    background: dict[str, float] | None = None  # counts behind Vig et al.'s background rates (per-head mode)


def _require_protein(loaded: LoadedModel) -> None:
    from probe.models import require_protein

    require_protein(loaded, "contact analysis")


def _require_contact_head(loaded: LoadedModel, what: str) -> None:
    _require_protein(loaded)
    if not loaded.has_contact_head:
        raise ProbeError(f"{what} needs a contact regression, which {loaded.name} does not have (ESM checkpoints do); "
                         "per-head analysis against a structure works for every protein model")


def _eos_id(loaded: LoadedModel) -> int | None:
    if not loaded.has_contact_head:
        return None
    return getattr(getattr(loaded.model, "esm", loaded.model).contact_head, "eos_idx", 2)


def predict_contacts_batch(
    loaded: LoadedModel,
    sequences: Sequence[str],
    true_maps: Sequence[np.ndarray | None] | None = None,
    per_head: bool | None = None,  # None: when a true map is given
    features: Sequence[ResidueFeatures | None] | None = None,  # binding sites, secondary structure per sequence
    min_attention: float = MIN_ATTENTION,
    min_count: int = MIN_COUNT,
    regression: tuple[torch.Tensor, float] | None = None,
    *,
    min_total: float = MIN_TOTAL,
) -> list[ContactResult]:
    """Contacts of several sequences in one padded forward pass, each cropped to its own length; with per_head, the
    per-head table of each. `regression` (weight [layer head], bias), e.g. a fitted
    :class:`probe.proteins.regression.ContactRegression`, replaces the checkpoint's own; models without either get
    `contacts=None` and per-head statistics."""
    from probe.models import encode_proteins

    _require_protein(loaded)
    if not sequences:
        raise ProbeError("no sequences given")
    cleaned, inputs = encode_proteins(loaded, list(sequences))
    true_maps = list(true_maps) if true_maps is not None else [None] * len(cleaned)
    features = list(features) if features is not None else [None] * len(cleaned)
    predicts = regression is not None or loaded.has_contact_head
    if per_head is None:
        per_head = any(true_map is not None for true_map in true_maps) or not predicts
    if regression is not None:
        weight, bias = torch.as_tensor(regression[0], dtype=torch.float32), float(regression[1])  # [layer head]
        if tuple(weight.shape) != (loaded.n_layers, loaded.n_heads):
            raise ProbeError(f"the contact regression has {tuple(weight.shape)} layers × heads but {loaded.name} has "
                             f"({loaded.n_layers}, {loaded.n_heads}): fit one for this model (--fit)")
    elif loaded.has_contact_head:
        weight, bias = contact_regression(loaded.model)
    else:
        weight, bias = torch.zeros(loaded.n_layers, loaded.n_heads), 0.0  # [layer head]
    offset = loaded.residue_offset
    sink = ContactSink(weight, bias, inputs["input_ids"], inputs["attention_mask"], _eos_id(loaded), true_maps,
                       per_head, starts=[offset] * len(cleaned), lengths=[len(s) for s in cleaned],
                       features=features, min_attention=min_attention, regression=predicts)
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    results = []
    for b, sequence in enumerate(cleaned):
        contacts = sink.contacts(b).float().cpu().numpy() if predicts else None  # [L L]
        true_map = None if true_maps[b] is None else np.asarray(true_maps[b], dtype=np.int8)
        precision = None if true_map is None or contacts is None else precision_by_range(contacts, true_map)
        heads = sink.head_table(b, min_count, min_total=min_total) if per_head else None
        background = sink.background_counts(b) if per_head else None
        results.append(ContactResult(sequence, contacts, true_map, precision, heads, background))
    return results


def predict_contacts(
    loaded: LoadedModel,
    sequence: str,
    true_map: np.ndarray | None = None,  # [L L] int8 (probe.proteins.structure.contact_map(structure, sequence=...))
    per_head: bool | None = None,  # None: when a true map is given (always for models without a contact head)
    features: ResidueFeatures | None = None,  # binding sites, secondary structure (aligned to the sequence)
    min_attention: float = MIN_ATTENTION,
    min_count: int = MIN_COUNT,
    regression: tuple[torch.Tensor, float] | None = None,
    *,
    min_total: float = MIN_TOTAL,
) -> ContactResult:
    """Contacts of one protein sequence from the checkpoint's own contact head, and a per-head analysis.

    One forward pass on the capture engine: the contact logits are accumulated head by head (equal to HF
    ``EsmForMaskedLM.predict_contacts`` with eager attention within 1e-5), and with `per_head` every head's
    APC-corrected attention is scored against the true map, one layer at a time.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A protein model (``loaded.kind == "protein_mlm"``: ESM, ProtBert-style, ProtT5 encoder).
    sequence : str
        One-letter amino acids (L residues; checked, non-amino-acid letters are an error naming their positions).
    true_map : numpy.ndarray, optional, shape=(L, L), int8
        True contacts: 1 contact, 0 not, −1 unknown, aligned to `sequence`
        (:func:`probe.proteins.structure.contact_map` with ``sequence=``).
    per_head : bool, optional
        Compute the per-head table. None: when `true_map` is given, and always for a model without a contact head.
    features : probe.proteins.features.ResidueFeatures, optional
        Binding sites and secondary structure aligned to `sequence`, for Vig et al.'s shares.
    min_attention : float, default 0.3
        θ of Vig et al.'s shares: weights above it are summed (``{f}_share``), weights at least this high are
        counted (``{f}_count_share`` and the ``far_*`` measure).
    min_count : int, default 100
        Heads with fewer weights ≥ θ get NaN count shares.
    regression : tuple of (torch.Tensor, float), optional
        A contact regression (weights shape=(layer * head,), bias) to use instead of the checkpoint's contact head,
        e.g. one fitted by ``probe contacts --fit`` (:mod:`probe.proteins.regression`).
    min_total : float, default 100
        Heads whose Σα over the weights > θ is below this get NaN attention-weighted shares (provis' ``min_total``).

    Returns
    -------
    ContactResult
        ``contacts`` shape (L, L) float32 probabilities (None without a contact head), ``precision`` and the
        per-head table ``heads`` when asked for.

    Raises
    ------
    ProbeError
        The model is not a protein model; the sequence holds letters that are not amino acids, or is longer than
        the model takes (use :func:`predict_contacts_windowed`).

    Examples
    --------
    >>> loaded = probe.models.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> structure = read_structure("tests/data/pdb1ubi.pdb", chain="A")
    >>> true_map = contact_map(structure, sequence=structure.sequence)  # [L L] int8
    >>> result = predict_contacts(loaded, structure.sequence, true_map=true_map)
    >>> result.contacts.shape, result.heads.shape  # 76 residues; 2 layers x 4 heads, 33 columns
    ((76, 76), (8, 33))
    """
    return predict_contacts_batch(loaded, [sequence], [true_map], per_head, [features], min_attention, min_count,
                                  regression, min_total=min_total)[0]


def predict_contacts_windowed(
    loaded: LoadedModel,
    sequence: str,
    window: int,  # residues per window (at most the model's limit)
    stride: int | None = None,  # default window // 2
    true_map: np.ndarray | None = None,
) -> ContactResult:
    """Crop-and-average for sequences longer than the model takes: predict overlapping windows of `window` residues,
    `stride` apart (the last one ends at the sequence's end), and average the probabilities of each pair over the
    windows that hold both residues. Pairs farther apart than any window covers are NaN. No per-head table."""
    from probe.models import clean_protein, protein_alphabet

    _require_contact_head(loaded, "--window (crop-and-average contact prediction)")
    sequence = clean_protein(sequence, protein_alphabet(loaded))
    limit = loaded.max_tokens - 2
    if not 1 <= window <= limit:
        raise ProbeError(f"--window {window} must be between 1 and {limit} (the model's residue limit)")
    stride = stride or max(1, window // 2)
    length = len(sequence)
    starts = list(range(0, max(1, length - window + 1), stride))
    if starts[-1] + window < length:
        starts.append(length - window)
    total = np.zeros((length, length), dtype=np.float64)  # [L L]
    count = np.zeros((length, length), dtype=np.int32)  # [L L]
    for start in starts:
        stop = min(length, start + window)
        part = predict_contacts(loaded, sequence[start:stop], per_head=False).contacts  # [window window]
        total[start:stop, start:stop] += part
        count[start:stop, start:stop] += 1
    with np.errstate(invalid="ignore"):
        contacts = np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)
    true_map = None if true_map is None else np.asarray(true_map, dtype=np.int8)
    precision = None if true_map is None else precision_by_range(contacts, true_map)
    return ContactResult(sequence, contacts, true_map, precision, None)


def head_attention_map(loaded: LoadedModel, sequence: str, layer: int, head: int) -> np.ndarray:
    """[L L] APC-corrected symmetrized attention of one head on the residues (BOS/EOS dropped)."""
    from probe.models import encode_proteins

    _require_protein(loaded)
    if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
        raise ProbeError(f"head L{layer}H{head} does not exist: the model has layers 0..{loaded.n_layers - 1} and "
                         f"heads 0..{loaded.n_heads - 1}")
    cleaned, inputs = encode_proteins(loaded, [sequence])
    sink = DenseSink([layer], [head])
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    start, length = loaded.residue_offset, len(cleaned[0])
    alpha = sink.attention(0)[0, 0, 0, start:start + length, start:start + length]  # [L L]
    return apc(symmetrize(alpha)).numpy()
