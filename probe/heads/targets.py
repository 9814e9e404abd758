"""Targets of the built-in head types: for each query i, the keys j a head of the type attends to (the table
in :mod:`probe.heads.registry`'s doc), from a :class:`TargetContext` (the sentence and bracket pairs from
:mod:`probe.heads.pairs`). Pure functions of token ids; the registry names them.

Each type with a few targets per row is defined once, as key slots (``{candidate: [batch query slot] long}``,
−1 = none, :attr:`probe.heads.registry.HeadTypeSpec.slots`); its dense ``[batch query key]`` pattern, which a
view or a caller of :func:`probe.heads.registry.target_pattern` reads, is derived from the slots by the one
function :func:`slots_pattern` (through :class:`FromSlots`). The span type (coreference) gives the dense
pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from probe.errors import ProbeError
from probe.heads.pairs import bracket_pairs, sentence_start_pairs
from probe.heads.vocab import TokenClasses

MAX_OFFSET = 32  # fixed_offset candidates: 2 ≤ |d| ≤ MAX_OFFSET
SMALL_VOCABULARY = 1000  # below this many content tokens, repeat targets are restricted to the planted repeat
# the TargetContext fields built by scanning the tokenizer's vocabulary (HeadTypeSpec.reads names those a
# type's targets read)
VOCABULARY_FIELDS: frozenset[str] = frozenset({"delimiter_ids", "classes"})


@dataclass(frozen=True)
class TargetContext:
    """What a type's targets may depend on, for one batch of probes (right padding is masked by the scorer).

    Attributes
    ----------
    input_ids : torch.Tensor, shape=(batch, seq), long
        The probes' token ids (on the CPU).
    causal : bool
        The model is causal (a query sees only keys j ≤ i).
    delimiter_ids : tuple of int
        Token ids that count as delimiters (:func:`probe.heads.probesets.delimiter_ids`).
    repeat_start : torch.Tensor or None, shape=(batch,), long
        Repeated-block probes: position of the planted block's first copy.
    repeat_len : torch.Tensor or None, shape=(batch,), long
        Repeated-block probes: the planted block's length.
    restrict_to_repeat : bool
        Small vocabulary: repeat targets only inside the planted repeat.
    spans : tuple
        Span types: one :class:`probe.heads.probesets.EncodedSpanExample` per row.
    classes : TokenClasses
        The tokenizer's sentence ends and brackets (``sentence_start``, ``bracket``).

    Examples
    --------
    >>> from probe.heads.registry import REGISTRY
    >>> ctx = TargetContext(torch.tensor([[2, 7, 9, 7]]))  # one probe of 4 tokens; token 7 repeats
    >>> REGISTRY["previous_token"].targets(ctx)[None][0].int()  # [query key]: key j = i − 1
    tensor([[0, 0, 0, 0],
            [1, 0, 0, 0],
            [0, 1, 0, 0],
            [0, 0, 1, 0]], dtype=torch.int32)
    >>> REGISTRY["duplicate_token"].targets(ctx)[None][0].nonzero().tolist()  # the second 7 -> the first
    [[3, 1]]
    """

    input_ids: torch.Tensor  # [batch seq] long
    causal: bool = True
    delimiter_ids: tuple[int, ...] = ()  # token ids that count as delimiters
    # [batch] position of the planted block's first copy (repeated probes)
    repeat_start: torch.Tensor | None = None
    repeat_len: torch.Tensor | None = None  # [batch] the planted block's length
    restrict_to_repeat: bool = False  # small vocabulary: repeat targets only inside the planted repeat
    spans: tuple = ()  # one probe.heads.probesets.EncodedSpanExample per row (span types)
    classes: TokenClasses = TokenClasses()  # sentence ends and brackets (sentence_start, bracket)


Targets = Mapping[int | None, torch.Tensor]  # candidate (None, or fixed_offset's d) -> [batch query key] bool
# the same targets as key slots (HeadTypeSpec.slots): candidate -> [batch query slot] long keys, −1 = none
Slots = Mapping[int | None, torch.Tensor]


def slots_pattern(slots: torch.Tensor, n_key: int) -> torch.Tensor:
    """The dense form of key slots — the one place a ``[batch query key]`` target is derived from them.

    Parameters
    ----------
    slots : torch.Tensor, shape=(batch, query, slot), long
        The keys of each query's targets, −1 for none (a key may repeat).
    n_key : int
        Keys per row (the sequence length).

    Returns
    -------
    torch.Tensor, shape=(batch, query, key), bool
        True at every named key, a new contiguous tensor (the inverse of
        :func:`probe.heads.registry.target_slots`).

    Examples
    --------
    >>> slots_pattern(torch.tensor([[[-1], [0], [1]]]), 3).int()[0]  # previous-token slots of 3 tokens
    tensor([[0, 0, 0],
            [1, 0, 0],
            [0, 1, 0]], dtype=torch.int32)
    """
    if slots.dim() != 3 or slots.dtype == torch.bool or slots.is_floating_point():
        raise ProbeError(f"key slots must be a [batch query slot] long tensor (−1 = none), not "
                         f"{slots.dtype} of shape {tuple(slots.shape)}: give a dense pattern as targets=")
    batch, n_query, _ = slots.shape
    pattern = torch.zeros(batch, n_query, n_key, dtype=torch.bool, device=slots.device)  # [batch query key]
    row, query, slot = (slots >= 0).nonzero(as_tuple=True)  # [named] where a slot names a key
    pattern[row, query, slots[row, query, slot]] = True
    return pattern


@dataclass(frozen=True)
class FromSlots:
    """A type's dense targets derived from its key slots (what :class:`probe.heads.registry.HeadTypeSpec`
    makes its ``targets`` / ``tl_targets`` when only ``slots`` / ``tl_slots`` are given).

    Attributes
    ----------
    slots : callable
        ``slots(ctx)``: ``{candidate: [batch query slot] long}`` (a type's slots), or one ``[batch query
        slot]`` tensor (TransformerLens' pattern); called with the same context, each turned into
        ``[batch query key]`` bool by :func:`slots_pattern`.

    Examples
    --------
    >>> ctx = TargetContext(torch.tensor([[2, 7, 9, 7]]))
    >>> FromSlots(previous_token_slots)(ctx)[None][0].nonzero().tolist()  # [query key] pairs: j = i − 1
    [[1, 0], [2, 1], [3, 2]]
    >>> FromSlots(tl_duplicate_slots)(ctx)[0].nonzero().tolist()  # one pattern: the second 7 -> the first
    [[3, 1]]
    """

    slots: Callable[[TargetContext], Slots | torch.Tensor]

    def __call__(self, ctx: TargetContext) -> Targets | torch.Tensor:
        made, n = self.slots(ctx), ctx.input_ids.shape[1]
        if isinstance(made, torch.Tensor):  # one [batch query slot] (tl_slots)
            return slots_pattern(made, n)  # [batch query key]
        return {candidate: slots_pattern(slots, n) for candidate, slots in made.items()}


def without_padding(pattern: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`pattern` `[batch query key]` bool with the right padding's rows and keys (positions ≥ `lengths`
    `[batch]`) cleared: a new tensor where any probe is padded, `pattern` itself where none is."""
    n = pattern.shape[-1]
    if not bool((lengths < n).any()):
        return pattern
    real = torch.arange(n)[None, :] < lengths[:, None]  # [batch seq]
    return pattern & real[:, :, None] & real[:, None, :]


def _diagonal_slots(ctx: TargetContext, offset: int, first_row: int = 0,
                    first_key: bool = True) -> torch.Tensor:
    """A diagonal's targets as key slots `[batch query 1]` long: key = query + offset, −1 where that is
    outside the sequence, before `first_row`, or (``first_key=False``) key 0."""
    batch, n = ctx.input_ids.shape
    query = torch.arange(n)  # [query]
    key = query + offset  # [query]
    present = (key >= 0) & (key < n) & (query >= first_row)  # [query]
    if not first_key:
        present &= key != 0
    return torch.where(present, key, -1)[None, :, None].expand(batch, n, 1).clone()  # [batch query 1]


def previous_token_slots(ctx: TargetContext) -> Slots:
    return {None: _diagonal_slots(ctx, -1)}


def next_token_slots(ctx: TargetContext) -> Slots:
    return {None: _diagonal_slots(ctx, 1)}


def self_slots(ctx: TargetContext) -> Slots:
    return {None: _diagonal_slots(ctx, 0, first_row=1)}


def first_token_slots(ctx: TargetContext) -> Slots:
    batch, n = ctx.input_ids.shape
    slots = torch.zeros(batch, n, 1, dtype=torch.long)  # [batch query 1]: key 0
    slots[:, 0] = -1
    return {None: slots}


def offsets_for(n: int, causal: bool) -> list[int]:
    """fixed_offset's candidate offsets d for sequences of n tokens: −2 … −min(MAX_OFFSET, n/2) (and +2 … when
    bidirectional). At most n/2, so every candidate has targets in at least half of the rows."""
    reach = min(MAX_OFFSET, n // 2)
    negative = [-d for d in range(2, reach + 1)]
    return negative if causal else negative + [d for d in range(2, reach + 1)]


def fixed_offset_slots(ctx: TargetContext) -> Slots:
    n = ctx.input_ids.shape[1]
    # position 0 is the first-token type's: a sink is not an offset head
    return {d: _diagonal_slots(ctx, d, first_key=False) for d in offsets_for(n, ctx.causal)}


def delimiter_slots(ctx: TargetContext) -> Slots:
    ids = ctx.input_ids
    batch, n = ids.shape
    is_delimiter = torch.isin(ids, torch.tensor(ctx.delimiter_ids, dtype=ids.dtype))  # [batch key]
    is_delimiter[:, 0] = False  # position 0 is the first-token type's
    counts = is_delimiter.sum(-1)  # [batch]
    width = max(1, int(counts.max()) if batch else 1)
    # [batch delimiter]: each probe's delimiter positions in order, n after its last
    positions = torch.full((batch, width), n, dtype=torch.long)
    row, key = is_delimiter.nonzero(as_tuple=True)
    positions[row, torch.arange(len(key)) - (counts.cumsum(0) - counts)[row]] = key
    query = torch.arange(n)[None, :, None]  # [1 query 1]
    # every delimiter before the query (causal; a bidirectional model's: every other one)
    if ctx.causal:
        present = positions[:, None, :] < query  # [batch query delimiter]
    else:
        present = (positions[:, None, :] < n) & (positions[:, None, :] != query)  # [batch query delimiter]
    return {None: torch.where(present, positions[:, None, :], -1)}  # [batch query delimiter]


def _pairs_slots(ctx: TargetContext, find) -> torch.Tensor:
    """The (query, key) pairs `find` gives each probe as key slots `[batch query 1]` (each query has at most
    one key)."""
    batch, n = ctx.input_ids.shape
    slots = torch.full((batch, n, 1), -1, dtype=torch.long)  # [batch query 1]
    for row in range(batch):
        pairs = find(ctx.input_ids[row].tolist(), ctx.classes)
        if pairs:
            query, key = torch.tensor(pairs).T
            slots[row, query, 0] = key
    return slots


def sentence_start_slots(ctx: TargetContext) -> Slots:
    return {None: _pairs_slots(ctx, sentence_start_pairs)}


def bracket_slots(ctx: TargetContext) -> Slots:
    return {None: _pairs_slots(ctx, bracket_pairs)}


def _repeat_slots(ctx: TargetContext, shift: int, mirror: bool) -> torch.Tensor:
    """Only the planted repeat, as key slots `[batch query 1]`: query i in the second copy -> key
    i − L + shift (and, mirrored, the first copy's query i -> key i + L)."""
    if ctx.repeat_start is None or ctx.repeat_len is None:
        raise ProbeError(
            "restricted repeat targets need the planted block's position (repeated-block probes)")
    batch, n = ctx.input_ids.shape
    position = torch.arange(n)[None]  # [1 query]
    start, length = ctx.repeat_start[:, None], ctx.repeat_len[:, None]  # [batch 1]
    second = (position >= start + length) & (position < start + 2 * length)  # [batch query]
    slots = torch.where(second, position - length + shift, -1)  # [batch query]
    if mirror:
        first = (position >= start) & (position < start + length)  # [batch query]
        slots = torch.where(first, position + length, slots)
    return slots[..., None]  # [batch query 1]


def same_token_slots(ids: torch.Tensor, earlier: bool) -> torch.Tensor:
    """The other positions of each position's token, as key slots `[batch query slot]` long, ascending, −1
    after the last: only the earlier ones p < i (`earlier`), else every p ≠ i. The slot axis is as wide as
    the most any row has (at least 1) — what :func:`probe.heads.registry.target_slots` makes of the
    ``t_p = t_i`` pattern, without building it (one stable sort per probe).

    Examples
    --------
    >>> same_token_slots(torch.tensor([[5, 7, 5, 5]]), earlier=True)[0].tolist()
    [[-1, -1], [-1, -1], [0, -1], [0, 2]]
    >>> same_token_slots(torch.tensor([[5, 7, 5, 5]]), earlier=False)[0].tolist()
    [[2, 3], [-1, -1], [0, 3], [0, 2]]
    """
    batch, n = ids.shape
    order = ids.argsort(dim=-1, stable=True)  # [batch seq]: positions grouped by token, ascending in a group
    grouped = ids.gather(-1, order)  # [batch seq]
    index = torch.arange(n).expand(batch, n)  # [batch seq]
    opens = torch.ones(batch, n, dtype=torch.bool)  # [batch seq]: a group starts here (sorted order)
    opens[:, 1:] = grouped[:, 1:] != grouped[:, :-1]
    first = torch.where(opens, index, 0).cummax(-1).values  # [batch seq] its group's first sorted index
    group = opens.cumsum(-1) - 1  # [batch seq] group number
    size = torch.zeros(batch, n, dtype=torch.long).scatter_add_(-1, group, torch.ones_like(group))
    size = size.gather(-1, group)  # [batch seq] its group's size
    # back from sorted order to positions: [batch query]
    first_at = torch.empty_like(first).scatter_(-1, order, first)
    rank_at = torch.empty_like(first).scatter_(-1, order, index - first)  # earlier copies of the token
    size_at = torch.empty_like(first).scatter_(-1, order, size)
    count = rank_at if earlier else size_at - 1  # [batch query] slots each row fills
    width = max(1, int(count.max()) if count.numel() else 1)
    slot = torch.arange(width)  # [slot]
    # the k-th other copy: sorted index first + k (skipping the row's own rank when every copy counts)
    source = first_at[..., None] + slot + (0 if earlier else (slot >= rank_at[..., None]).long())
    keys = order.gather(-1, source.clamp(max=n - 1).view(batch, -1)).view(batch, n, width)
    return torch.where(slot < count[..., None], keys, -1)  # [batch query slot]


def duplicate_token_slots(ctx: TargetContext) -> Slots:
    if ctx.restrict_to_repeat:
        return {None: _repeat_slots(ctx, 0, mirror=not ctx.causal)}
    return {None: same_token_slots(ctx.input_ids, earlier=ctx.causal)}


def _induction_slots(ids: torch.Tensor) -> torch.Tensor:
    """Key j = p + 1 for every earlier copy p < i of t_i (so 1 ≤ j ≤ i): `[batch query slot]`."""
    earlier = same_token_slots(ids, earlier=True)  # [batch query slot]
    return torch.where(earlier >= 0, earlier + 1, -1)


def induction_slots(ctx: TargetContext) -> Slots:
    if ctx.restrict_to_repeat:
        return {None: _repeat_slots(ctx, 1, mirror=False)}
    return {None: _induction_slots(ctx.input_ids)}


def coreference_targets(ctx: TargetContext) -> Targets:
    batch, n = ctx.input_ids.shape
    if len(ctx.spans) != batch:
        raise ProbeError("coreference targets need spans: pass encoded span examples (probe.heads.probesets)")
    pattern = torch.zeros(batch, n, n, dtype=torch.bool)  # [batch query key]
    for row, example in enumerate(ctx.spans):
        pattern[row, torch.tensor(example.query_tokens)[:, None],
                torch.tensor(example.target_tokens)[None, :]] = True
    return {None: pattern}



# TransformerLens' own detection patterns (transformer_lens/head_detector.py, get_*_detection_pattern), for
# the types it names, as key slots `[batch query slot]` (HeadTypeSpec.tl_slots; the dense pattern derived by
# slots_pattern): built from the token ids alone, every earlier copy counts (never restricted to the planted
# repeat), and only the lower triangle (TL's detect_head refuses any other detection pattern).


def tl_duplicate_slots(ctx: TargetContext) -> torch.Tensor:
    """TL's duplicate-token detection pattern: D(i, j) = 1 for j < i with t_j = t_i."""
    return same_token_slots(ctx.input_ids, earlier=True)


def tl_induction_slots(ctx: TargetContext) -> torch.Tensor:
    """TL's induction detection pattern: its duplicate pattern shifted one key to the right, key 0 cleared,
    lower triangle — D(i, j) = 1 for 1 ≤ j ≤ i with t_{j−1} = t_i."""
    return _induction_slots(ctx.input_ids)


def tl_previous_slots(ctx: TargetContext) -> torch.Tensor:
    """TL's previous-token detection pattern: D(i, i − 1) = 1."""
    return _diagonal_slots(ctx, -1)


def no_targets(ctx: TargetContext) -> Targets:
    raise ProbeError("retrieval heads have no target pattern: they are scored while the model generates "
                     "(probe.heads.retrieval.retrieval_scores)")
