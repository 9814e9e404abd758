"""Per-head scores streamed from the capture engine, and their dense reference definitions.

:class:`ScoreSink` is a capture :class:`~probe.engine.Sink`: it receives α one block of query rows at a time
and keeps, per example, layer and head, only the attention mass on each type's targets — gathered at the
target keys (a few per row), so scoring costs O(query · targets) per head and never builds
`[layer, head, query, key]`.

Scores of one example (n real rows, V = rows that have at least one target, T(i) the targets of row i):

* valid-row score  = (1/|V|) Σ_{i∈V} Σ_{j∈T(i)} α(i, j)   — the mean mass on the targets over rows that have
  one;
* TL "mul" score   = Σ_ij α(i, j)·D(i, j) / Σ_ij α(i, j)  = (1/n) Σ_i Σ_j D(i, j) α(i, j) — TransformerLens'
  `detect_head` default: rows without a target stay in the denominator; D is TL's own detection pattern for
  the types it names (``tl_patterns``: every earlier copy, lower triangle) and the targets otherwise (not
  defined for span types: NaN);
* coreference accuracy: word-level attention of the attending word (sum over the pieces of each attended word,
  mean over the pieces of the attending word); the head's prediction is the most-attended candidate word — a
  word of a marked mention (antecedent or distractor) when the example marks distractors, else any word other
  than the attending word and special tokens; correct when it is an antecedent word. The restriction to marked
  mentions is ours (Clark et al. 2019 never released their coreference code; their released dependency
  evaluation takes the argmax over all words), so on GAP chance is 50 % (docs/labels.md);
* Clark et al.'s accuracy (``clark_correct``): the same word-level attention, the argmax over **every** word
  of the text but the attending word itself (special tokens left out), as their released evaluation
  (attention-analysis, Syntax_Analysis.ipynb ``attn_head_predictor``: self-attention zeroed, [CLS] and
  [SEP] cropped);

* output share (with ``output_projections``): per row Σ_{j∈T(i)} α_ij n_j / Σ_j α_ij n_j, n_j = ‖f_h(x_j)‖ the
  norm of what key j passes through the head (Kobayashi et al. 2020; :mod:`probe.engine.output_norms` computes
  n and the denominator inside the engine), averaged like the valid-row score over rows with a target (rows
  whose output is exactly zero are left out).

The dense functions :func:`valid_row_score`, :func:`tl_mul_score` and :func:`word_attention` define the same
numbers on a full α and are the references the tests compare the streamed values with. All are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from probe.engine import DEFAULT_BLOCK_BYTES, AttentionBlock, SinkNeeds, capture
from probe.engine.output_norms import OutputNorms, OutputProjections
from probe.heads.probesets import SpanBatch
from probe.heads.registry import target_slots
from probe.heads.targets import without_padding

# ------------------------------------------------------------------------------------------------------------
# Dense reference definitions
# ------------------------------------------------------------------------------------------------------------


def valid_row_score(alpha: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Mean over rows with a target of the mass on the targets: α `[... query key]`, pattern `[query key]`
    bool -> `[...]` (NaN when no row has a target)."""
    mass = (alpha * pattern.to(alpha.dtype)).sum(-1)  # [... query]
    valid = pattern.any(-1)  # [query]
    return mass[..., valid].mean(-1)


def tl_mul_score(
    alpha: torch.Tensor,  # [... query key]
    pattern: torch.Tensor,  # [query key] bool
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
) -> torch.Tensor:
    """TransformerLens' `detect_head` "mul" score: Σ α·D / Σ α over the whole pattern, `[...]`.

    The options zero key 0 / the diagonal of α before both sums, as TransformerLens does — but on a copy: the
    input is never changed (TransformerLens changes the cached pattern in place).
    """
    alpha = alpha.clone()
    if exclude_bos:
        alpha[..., :, 0] = 0
    if exclude_current_token:
        alpha.diagonal(dim1=-2, dim2=-1).zero_()
    detection = pattern.to(alpha.dtype).tril()  # TransformerLens keeps the lower triangle of D
    return (alpha * detection).sum((-2, -1)) / alpha.sum((-2, -1))


def word_attention(
    alpha: torch.Tensor,  # [... query key]
    word_ids: Sequence[int],  # word of each token, -1 for special tokens
    query_tokens: Sequence[int],
) -> torch.Tensor:
    """Word-level attention of the attending word: mean over its pieces (query_tokens) of α, summed over the
    pieces of each attended word -> `[... word]` (specials dropped)."""
    rows = alpha[..., list(query_tokens), :].mean(-2)  # [... key]
    n_words = max(word_ids) + 1
    index = torch.tensor(word_ids)
    keep = index >= 0
    out = torch.zeros(*rows.shape[:-1], n_words, dtype=rows.dtype)  # [... word]
    return out.index_add(-1, index[keep], rows[..., keep])


# ------------------------------------------------------------------------------------------------------------
# Streaming
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WordTargets:
    """What the coreference accuracy needs for one batch of span examples."""

    word_ids: torch.Tensor  # [batch key] long, -1 for special tokens and padding
    query_weight: torch.Tensor  # [batch query] float: 1/|pieces| on the attending word's pieces, else 0
    target_word: torch.Tensor  # [batch word] bool: antecedent words
    candidate_word: torch.Tensor  # [batch word] bool: words that may be predicted (not the attending word)
    # [batch word] bool: every word but the attending word (Clark et al.'s argmax set); None: candidate_word
    any_word: torch.Tensor | None = None


@dataclass(frozen=True)
class TypeScores:
    """Per-example scores of one head type."""

    head_type: str
    score: torch.Tensor  # [example layer head] valid-row score; NaN for an example without a target
    tl_score: torch.Tensor  # [example layer head] TransformerLens "mul" score; NaN for span types
    # [example layer head] 1.0 / 0.0: the argmax word among the marked mentions is an antecedent
    correct: torch.Tensor | None = None
    # [example layer head] mean over rows with a target of the targets' share of the output norm (module doc);
    # None when not measured, NaN where the head's output projection is unknown
    output_share: torch.Tensor | None = None
    # [example layer head] 1.0 / 0.0: the argmax over every word of the text is an antecedent (Clark et al.)
    clark_correct: torch.Tensor | None = None

    @staticmethod
    def concat(parts: Sequence[TypeScores]) -> TypeScores:
        def joined(name: str) -> torch.Tensor | None:
            first = getattr(parts[0], name)
            return None if first is None else torch.cat([getattr(p, name) for p in parts])

        return TypeScores(parts[0].head_type, joined("score"), joined("tl_score"), joined("correct"),
                          joined("output_share"), joined("clark_correct"))


class ScoreSink:
    """Streams the target mass of every head for several head types over one batch (a capture Sink).

    After the forward, :meth:`result` gives per-example :class:`TypeScores`.

    Parameters
    ----------
    patterns : dict of str to Tensor
        Head type -> `[batch query key]` bool targets (turned into a few key indices per row and dropped), or
        those key indices already, `[batch query slot]` long (:func:`probe.heads.registry.target_slots` of
        the targets without padding; −1 = no target).
    lengths : torch.Tensor
        `[batch]` real tokens of each example (right padding).
    n_layers, n_heads : int
        The model's layers and heads per layer.
    words : WordTargets, optional
        For coreference accuracy.
    heads : sequence of int, optional
        The heads captured (None: every head).
    device : torch.device or str, default "cpu"
    output_projections : OutputProjections, optional
        Given: also the output share of every type.
    tl_patterns : dict of str to Tensor, optional
        Head type -> `[batch query key]` bool (or its key slots, as `patterns`): TransformerLens' detection
        pattern where it differs from the type's targets; ``tl_score`` is then the mass on it over all rows
        (else on the targets).
    """

    def __init__(
        self,
        patterns: Mapping[str, torch.Tensor],
        lengths: torch.Tensor,  # [batch]
        n_layers: int,
        n_heads: int,
        words: WordTargets | None = None,
        heads: Sequence[int] | None = None,  # None: every head
        device: torch.device | str = "cpu",
        output_projections: OutputProjections | None = None,  # given: also the output share of every type
        # head type -> TL's detection pattern [batch query key] where it differs from the targets
        tl_patterns: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.n_layers, self.n_heads = n_layers, n_heads
        self.output_projections = output_projections
        self.heads = None if heads is None else tuple(heads)
        self.lengths = lengths.cpu()
        self.slots: dict[str, torch.Tensor] = {}
        self.n_valid: dict[str, torch.Tensor] = {}
        valid_rows = []  # [batch query] per type
        for head_type, pattern in patterns.items():
            pattern = self._real_slots(pattern)  # [batch query slot]
            self.slots[head_type] = pattern.to(device)
            rows = (pattern >= 0).any(-1)  # [batch query]
            self.n_valid[head_type] = rows.sum(-1)  # [batch]
            valid_rows.append(rows.to(device))
        # Without word-level accuracy every score needs α only at the target keys: one slot tensor for all
        # types, gathered by the engine (GatherSink) — no block is handed to the sink at all. The engine
        # picks how: read from its single pass's blocks, rebuilt pair by pair, or (many targets per row:
        # fixed_offset's candidates, delimiters) read from dense blocks it rebuilds for the purpose.
        self.columns: dict[str, slice] = {}
        self.tl_columns: dict[str, slice] = {}  # TL's own detection patterns, after the targets' slots
        parts = []
        tl_slots = self._tl_slots(tl_patterns, device)
        for columns, named in ((self.columns, self.slots), (self.tl_columns, tl_slots)):
            for head_type, slots in named.items():
                first = sum(part.shape[-1] for part in parts)
                columns[head_type] = slice(first, first + slots.shape[-1])
                parts.append(slots)
        self.all_slots = torch.cat(parts, dim=-1)  # [batch query slot]
        self.dense = words is not None
        batch = len(self.lengths)
        # Every sum is kept for all columns at once (fixed_offset alone has up to 31 candidates): a slot's
        # column is its type's (targets first, then TL's patterns), `slot_column` [slot] long
        n_types = len(self.columns)
        owners = [index for index, part in enumerate(parts) for _ in range(part.shape[-1])]
        self.slot_column = torch.tensor(owners, dtype=torch.long, device=device)  # [slot]
        self.n_target_slots = sum(part.shape[-1] for part in parts[:n_types])
        # [column batch layer head]: the target mass per type, then TL's mass per TL pattern; the dicts are
        # views into it
        self._mass = torch.zeros(len(parts), batch, n_layers, n_heads, device=device)
        self.mass = {t: self._mass[index] for index, t in enumerate(self.columns)}
        self.tl_mass = {t: self._mass[n_types + index] for index, t in enumerate(self.tl_columns)}
        # [batch query type] bool: each type's valid rows side by side (types in the columns' order)
        self._valid_rows = torch.stack(valid_rows, dim=-1)
        # Output share: per type the sum over valid rows of Σ_{j∈T(i)} α_ij n_j / Σ_j α_ij n_j, and the
        # layer's norms
        self.share = None
        if output_projections is not None:
            self._share = torch.zeros(n_types, batch, n_layers, n_heads, device=device)  # [type b layer head]
            # rows counted per type: valid rows whose output norm is not 0 (a head with f_h ≡ 0 has no share)
            self._share_rows = torch.zeros(n_types, batch, n_layers, n_heads, device=device)
            self.share = {t: self._share[index] for index, t in enumerate(self.columns)}
            self.share_rows = {t: self._share_rows[index] for index, t in enumerate(self.columns)}
            self.share_known = torch.zeros(n_layers, dtype=torch.bool)  # layers whose projection was found
        self._norms: OutputNorms | None = None
        self.words = words
        self.query_rows = None
        if words is not None:
            any_word = words.candidate_word if words.any_word is None else words.any_word
            words = WordTargets(*(tensor.to(device) for tensor in (words.word_ids, words.query_weight,
                                                                   words.target_word, words.candidate_word,
                                                                   any_word)))
            self.words = words
            n_keys = words.word_ids.shape[1]
            # [batch layer head key]
            self.query_rows = torch.zeros(batch, n_layers, n_heads, n_keys, device=device)

    def _tl_slots(self, tl_patterns: Mapping[str, torch.Tensor] | None, device) -> dict[str, torch.Tensor]:
        """Head type -> the `[batch query slot]` key indices of TL's detection pattern (real tokens only)."""
        out = {}
        for head_type, pattern in (tl_patterns or {}).items():
            out[head_type] = self._real_slots(pattern).to(device)
        return out

    def _real_slots(self, pattern: torch.Tensor) -> torch.Tensor:
        """`[batch query slot]` key slots of a `[batch query key]` bool pattern without the padding's rows and
        keys (padding is no target); key slots are taken as they are (they name real tokens only)."""
        if pattern.dtype != torch.bool:
            return pattern
        return target_slots(without_padding(pattern, self.lengths))

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """Dense heads or gathered slots (see heads_for, gather_for), output norms when projections are given;
        under a causal mask the engine may drop the all-zero keys after a block's last row."""
        return SinkNeeds(heads=tuple(self.heads_for(layer, n_heads)), gather=self.gather_for(layer, n_heads),
                         output_projections=self.output_projections, causal_crop=True)

    def heads_for(self, layer: int, n_heads: int) -> Sequence[int]:
        """Dense blocks for word-level accuracy (whole rows of the attending word); else see gather_for."""
        if not self.dense:
            return ()
        return range(n_heads) if self.heads is None else self.heads

    def gather_for(self, layer: int, n_heads: int):
        """The target keys of every type at once, when no dense rows are needed."""
        if self.dense:
            return None
        return (range(n_heads) if self.heads is None else self.heads), self.all_slots

    def update_output_norms(self, layer: int, norms: OutputNorms | None) -> None:
        """‖f_h(x_j)‖ and Σ_j α_ij ‖f_h(x_j)‖ of `layer` (None: its output projection is unknown, shares
        NaN)."""
        self._norms = norms
        if self.share is not None:
            self.share_known[layer] = norms is not None

    def _add_share(self, layer: int, heads: list[int], rows: slice, alpha: torch.Tensor) -> None:
        """Add each type's per-row output share of query rows `rows` from α at the slots
        `[batch head row slot]`."""
        norms = self._norms
        if self.share is None or norms is None or norms.layer != layer:
            return
        index = self.all_slots[:, rows].clamp(min=0)  # [batch row slot]; α is 0 at the −1 slots
        batch, n_rows = index.shape[:2]
        targets = self.n_target_slots
        index = index[..., :targets]  # TL's own slots carry no share
        key_norms = norms.norms[:, heads]  # [batch head key]
        at_slots = key_norms.gather(-1, index.reshape(batch, 1, -1).expand(-1, len(heads), -1))
        # [batch head row slot]: α_ij n_j at each target slot
        weighted = alpha[..., :targets] * at_slots.view(batch, len(heads), n_rows, targets)
        total = norms.mixed[:, heads, rows]  # [batch head row]
        # A type's share at row i is Σ_{j∈T(i)} α_ij n_j / Σ_j α_ij n_j on the rows it counts: valid rows with
        # a nonzero denominator. Elsewhere the numerator is 0 too (no target: α is 0 at the −1 slots; a 0
        # denominator: every α_ij n_j ≥ 0 is 0), so each slot's ratio is summed over the rows first and the
        # slots into their types after.
        per_slot = (weighted / total.clamp(min=1e-30)[..., None]).sum(2)  # [batch head slot]
        n_types = len(self.columns)
        # [batch head type]
        shares = per_slot.new_zeros(batch, len(heads), n_types).index_add_(-1, self.slot_column[:targets],
                                                                            per_slot)
        self._share[:, :, layer, heads] += shares.permute(2, 0, 1)  # [type batch head]
        # [batch type head]: valid rows whose denominator is not 0
        counted = torch.bmm(self._valid_rows[:, rows].transpose(1, 2).to(total.dtype),
                            (total > 0).to(total.dtype).transpose(1, 2))
        self._share_rows[:, :, layer, heads] += counted.permute(1, 0, 2).to(self._share_rows.dtype)

    def update_gathered(self, layer: int, heads: tuple[int, ...], alpha: torch.Tensor) -> None:
        """α at the target slots, `[batch head query slot]`: add each type's target mass per head."""
        heads = list(heads)
        self._add_mass(layer, heads, alpha.sum(-2))
        self._add_share(layer, heads, slice(0, alpha.shape[2]), alpha)

    def _add_mass(self, layer: int, heads: list[int], per_slot: torch.Tensor) -> None:
        """Add α summed over rows at each slot, `[batch head slot]`, to every column's mass."""
        batch = per_slot.shape[0]
        # [batch head column]
        per_column = per_slot.new_zeros(batch, len(heads), len(self._mass)).index_add_(-1, self.slot_column,
                                                                                       per_slot)
        self._mass[:, :, layer, heads] += per_column.permute(2, 0, 1)

    def update(self, block: AttentionBlock) -> None:
        if block.query_offset != 0:
            raise ValueError("ScoreSink scores whole sequences; it does not support KV-cache decoding steps")
        alpha = block.alpha  # [batch head block key]; key may stop early (causal crop: the rest is zero)
        rows = slice(block.query_start, block.query_start + alpha.shape[2])
        width = alpha.shape[-1]
        heads = list(block.heads)
        index = self.all_slots[:, rows]  # [batch block slot]
        present = (index >= 0) & (index < width)  # [batch block slot]
        if bool(present.any()):
            safe = torch.where(present, index, 0)[:, None].expand(-1, alpha.shape[1], -1, -1)
            gathered = alpha.gather(-1, safe) * present[:, None]  # [batch head block slot]
            self._add_mass(block.layer, heads, gathered.sum(-2))
            self._add_share(block.layer, heads, rows, gathered)
        if self.query_rows is not None:
            weight = self.words.query_weight[:, rows]  # [batch block]
            if bool((weight > 0).any()):
                self.query_rows[:, block.layer, heads, :width] += torch.einsum("bhqk,bq->bhk", alpha, weight)

    def result(self) -> dict[str, TypeScores]:
        """Per-example scores of each head type: `[example layer head]`."""
        out = {}
        # span batches: the word-level accuracy, among the marked mentions and among every word
        correct = self._accuracy(self.words.candidate_word) if self.words is not None else None
        clark = self._accuracy(self.words.any_word) if self.words is not None else None
        for head_type, mass in self.mass.items():
            mass = mass.cpu()
            n_valid = self.n_valid[head_type].to(mass.dtype)[:, None, None]
            score = torch.where(n_valid > 0, mass / n_valid.clamp(min=1), torch.nan)
            tl_mass = self.tl_mass[head_type].cpu() if head_type in self.tl_mass else mass
            tl = tl_mass / self.lengths.to(mass.dtype)[:, None, None]
            if correct is not None:  # span types: TransformerLens' score is not defined for them
                tl = torch.full_like(tl, torch.nan)
            share = None
            if self.share is not None:
                known = self.share_known[None, :, None]  # [1 layer 1]
                rows = self.share_rows[head_type].cpu()  # [batch layer head]
                share = torch.where((rows > 0) & known,
                                    self.share[head_type].cpu() / rows.clamp(min=1), torch.nan)
            out[head_type] = TypeScores(head_type, score, tl, correct, share, clark)
        return out

    def _accuracy(self, candidates: torch.Tensor) -> torch.Tensor:
        """1.0 where the head's most-attended word among `candidates` `[batch word]` (word-level, see the
        module doc) is an antecedent word, `[batch layer head]`."""
        words = self.words
        n_words = words.target_word.shape[1]
        index = (words.word_ids + 1).clamp(min=0)  # [batch key]; slot 0 collects specials and padding
        # [batch layer head word+1]
        per_word = torch.zeros(*self.query_rows.shape[:3], n_words + 1, device=index.device)
        per_word.scatter_add_(-1, index[:, None, None].expand_as(self.query_rows), self.query_rows)
        # [batch layer head word]
        per_word = per_word[..., 1:].masked_fill(~candidates[:, None, None], -torch.inf)
        predicted = per_word.argmax(-1)  # [batch layer head]
        hit = words.target_word[:, None, None].expand_as(per_word).gather(-1, predicted[..., None])[..., 0]
        return hit.float().cpu()


def span_words(batch: SpanBatch) -> WordTargets:
    """The word-level inputs of the coreference accuracy for a padded batch of span examples."""
    n_batch, n_keys = batch.input_ids.shape
    n_words = max(max(e.word_ids) for e in batch.examples) + 1
    word_ids = torch.full((n_batch, n_keys), -1, dtype=torch.long)  # [batch key]
    query_weight = torch.zeros(n_batch, n_keys)  # [batch query]
    target_word = torch.zeros(n_batch, n_words, dtype=torch.bool)  # [batch word]
    candidate_word = torch.zeros(n_batch, n_words, dtype=torch.bool)  # [batch word]
    any_word = torch.zeros(n_batch, n_words, dtype=torch.bool)  # [batch word]
    for row, example in enumerate(batch.examples):
        word_ids[row, :len(example.word_ids)] = torch.tensor(example.word_ids)
        query_weight[row, list(example.query_tokens)] = 1.0 / len(example.query_tokens)
        target_word[row, list(example.target_words)] = True
        if example.candidate_words:  # the marked mentions (GAP's two names, a template's nouns)
            candidate_word[row, list(example.candidate_words)] = True
        else:  # no distractors marked: any word of the text
            candidate_word[row, :max(example.word_ids) + 1] = True
        candidate_word[row, list(example.query_words)] = False
        any_word[row, :max(example.word_ids) + 1] = True
        any_word[row, list(example.query_words)] = False
    return WordTargets(word_ids, query_weight, target_word, candidate_word, any_word)


def run_sink(
    model: torch.nn.Module,
    sink,
    input_ids: torch.Tensor,  # [batch seq]
    attention_mask: torch.Tensor | None = None,  # [batch seq]
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> None:
    """One forward of the model's body (no LM head: scores need no logits) on the capture engine."""
    body = getattr(model, "base_model", model)
    device = next(model.parameters()).device
    inputs = {"input_ids": input_ids.to(device)}
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask.to(device)
    with capture(body, sink, block_bytes=block_bytes), torch.inference_mode():
        body(**inputs)
