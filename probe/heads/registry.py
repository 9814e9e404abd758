"""Head types as data: one :class:`HeadTypeSpec` per type, one registry, one list of names.

A spec says everything `probe label` needs to know about a type — its targets, the probe set it is scored on,
which model kinds it applies to, the statistic its label rests on, and the positions whose loss its ablation
measures — so the scorer, the label rule, the CLI's ``--types`` and the dashboard loop over :data:`REGISTRY`
and never branch on a type's name. Adding a type is one new spec (docs/howto/head-type.md: "Add a head type").

Targets of query i (key j, tokens t, n real tokens; where each comes from: docs/labels.md, "Labelling heads"),
each type's defined once — as key slots where it has a few keys per row (:mod:`probe.heads.targets`):

=================  ======================================================================================
previous_token     j = i − 1
next_token         j = i + 1  (bidirectional models only: a causal row cannot see it)
self               j = i, for i ≥ 1  (row 0 left out: a causal row 0 can only attend to itself)
first_token        j = 0, for i ≥ 1  (the attention sink: <bos> / [CLS] / the first token)
fixed_offset       j = i + d ≥ 1 for one relative offset d ∉ {−1, 0, +1}, |d| ≤ min(:data:`MAX_OFFSET`, n/2)
                   (d < 0 in a causal model); every d is a candidate and each head's own d is chosen on
                   held-out examples (column ``offset``)
delimiter          keys j ≥ 1, j ≠ i, holding a delimiter: punctuation, [SEP] / EOS-type tokens (j < i when
                   causal)
sentence_start     from a sentence's final token (".", "!", "?", [SEP] / EOS) to the first token of the same
                   sentence (see :func:`sentence_start_pairs` for abbreviations and decimals)
bracket            from a closing bracket ")", "]", "}" to its matching opening bracket (see
                   :func:`bracket_pairs`)
duplicate_token    t_j = t_i, j < i (causal) or j ≠ i (bidirectional: the earlier copy attends to the later
                   one too)
induction          t_{j−1} = t_i, j ≤ i  (the token after an earlier occurrence of the current token)
coreference        the attending word's pieces × the antecedent's pieces (a span type: from span examples)
retrieval          no target pattern: scored while the model generates (Wu et al. 2024's retrieval score,
                   probe.heads.retrieval) — a generation-scored type, opt-in (not in the default types)
=================  ======================================================================================

Small vocabularies (fewer than :data:`SMALL_VOCABULARY` content tokens, e.g. 20 amino acids): coincidental
repeats swamp the planted one, so duplicate-token and induction targets are restricted to the planted repeat
of the repeated-block probes (query i in the second copy: j = i − L for duplicate, j = i − L + 1 for
induction; and the mirror pairs for bidirectional duplicate). A head that attends to every earlier token of
the same residue type then scores at chance.

Longer than 450 lines because every spec carries its running example (run by
tests/project/test_doctests.py) beside its definition; the specs are data and read best in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch

from probe.errors import ProbeError
from probe.heads.generated import GeneratedScores
from probe.heads.pairs import bracket_pairs, sentence_start_pairs
from probe.heads.retrieval import label_scores
from probe.heads.retrieval_ablation import label_verification
from probe.heads.targets import (  # the slots, and the names callers import from here
    MAX_OFFSET,
    SMALL_VOCABULARY,
    VOCABULARY_FIELDS,
    FromSlots,
    Slots,
    TargetContext,
    Targets,
    bracket_slots,
    coreference_targets,
    delimiter_slots,
    duplicate_token_slots,
    first_token_slots,
    fixed_offset_slots,
    induction_slots,
    next_token_slots,
    no_targets,
    offsets_for,
    previous_token_slots,
    self_slots,
    sentence_start_slots,
    slots_pattern,
    tl_duplicate_slots,
    tl_induction_slots,
    tl_previous_slots,
)
from probe.heads.vocab import TokenClasses
from probe.models import ModelKind

HeadType = Literal["previous_token", "next_token", "self", "first_token", "fixed_offset", "delimiter",
                   "sentence_start", "bracket", "duplicate_token", "induction", "coreference", "retrieval"]
HEAD_TYPES: tuple[HeadType, ...] = get_args(HeadType)
# natural text, repeated random blocks, span examples; "sentences": natural text, or random tokens with seeded
# sentence ends where the tokenizer does not read the corpus; "brackets": text (or random tokens) with seeded
# nested brackets; "generation": probes the type's own scorer builds and decodes (generation-scored types)
ProbeKind = Literal["natural", "repeated", "spans", "sentences", "brackets", "generation"]
# the label tests mass over chance, or accuracy over the best baseline
Statistic = Literal["mass", "accuracy"]
LossPositions = Literal["text", "repeat", "query"]  # which positions' loss an ablation of the type measures

CAUSAL, MASKED, PROTEIN = ModelKind.CAUSAL_LM, ModelKind.MASKED_LM, ModelKind.PROTEIN_MLM
ALL_KINDS = frozenset({CAUSAL, MASKED, PROTEIN})
TEXT_KINDS = frozenset({CAUSAL, MASKED})
BIDIRECTIONAL_KINDS = frozenset({MASKED, PROTEIN})
NO_VOCABULARY: frozenset[str] = frozenset()  # a type whose targets read no vocabulary field

Scorer = Callable[..., GeneratedScores]
Verifier = Callable[..., dict]


def _retrieval_scorer(loaded, seq_len: int, config, tick) -> GeneratedScores:
    return label_scores(loaded, seq_len, config, tick)


def _retrieval_verifier(loaded, seq_len: int, config, scores: torch.Tensor) -> dict:
    return label_verification(loaded, seq_len, config, scores)


@dataclass(frozen=True)
class HeadTypeSpec:
    """One head type: what it means, its targets, and how it is probed, tested and ablated (frozen).

    The scorer, the statistics, the ablation, ``--types``, the label table and the dashboard all loop over the
    registered specs, so a new type needs no other code (see the *Add a head type* how-to).

    Attributes
    ----------
    name : str
        The type's name, as in ``--types`` and the table's ``head_type`` column.
    description : str
        One line for ``--help`` and the dashboard.
    targets : callable or None
        ``targets(ctx: TargetContext) -> {candidate: pattern}``: each pattern a torch.Tensor, shape
        (batch, query, key), bool — True where key j is a target of query i. One candidate (key None) for most
        types; several (fixed_offset: one per offset d) when each head picks its own on held-out examples.
        None where ``slots`` is given: derived from them (:class:`probe.heads.targets.FromSlots`), as for
        every built-in type that has slots.
    probe : {"natural", "repeated", "spans", "sentences", "brackets", "generation"}
        The probe set it is scored on: natural text (random tokens without a usable corpus), repeated random
        blocks, span examples, natural text with seeded sentence ends or nested brackets where the tokenizer
        does not read the corpus, or probes the type's own ``scorer`` builds and decodes.
    kinds : frozenset of str, default every kind
        Model kinds (:class:`probe.models.ModelKind` values) it applies to; others skip it with a note.
    statistic : {"mass", "accuracy"}, default "mass"
        What the label tests: attention mass on the targets over chance, or (span types) accuracy over the
        best baseline.
    candidate : str or None
        Name of the table column holding each head's chosen candidate (fixed_offset: ``"offset"``) when the
        type has several; None otherwise.
    loss_positions : {"text", "repeat", "query"}, default "text"
        Whose loss its ablation measures: the probe text, the repeated half, or the query span's (causal LMs:
        the token after it; masked LMs: the span itself, masked).
    scorer : callable or None, default None
        Generation-scored types (retrieval): ``scorer(loaded, seq_len, config, tick) -> GeneratedScores``
        builds, decodes and scores its own probes; ``targets`` is then unused.
    default : bool, default True
        Scored when no types are asked for; False makes the type opt-in (``--types retrieval``).
    verifier : callable or None, default None
        Causal evidence a type measures itself: ``verifier(loaded, seq_len, config, scores) -> {column:
        value}`` with the heads' mean scores ``[layer head]`` at that length; the columns go on its rows of
        that length (retrieval: Wu et al.'s masking of the top-K heads against K random ones). Skipped with
        ``--ablate none``.
    copies : bool, default False
        Its heads are expected to copy the token they attend to (Olsson et al. 2022's induction head): its
        labels get the role ``copying`` or ``suppressing`` from the sign of the ``copying`` score, and its
        rows the ``copying_dla`` column (direct logit attribution to the induction target's token).
    sink : bool, default False
        Its targets are where a head parks attention it does not use (the first token, [SEP] and
        punctuation: Clark et al. 2019's no-op reading, Kobayashi et al. 2020): a label whose output share
        is below :data:`probe.heads.label.table.SINK_SHARE` gets the role ``sink``. Other types' roles are
        measured against their own chance level (docs/labels.md, "Role").
    tl_targets : callable or None, default None
        ``tl_targets(ctx) -> [batch query key] bool``: TransformerLens' own detection pattern for the types
        its ``detect_head`` names (previous, duplicate and induction heads), which ``tl_score`` uses; derived
        from ``tl_slots`` where only those are given; None (and no ``tl_slots``): the type's targets as a
        custom detection pattern (``tl_score`` NaN on a probe where they are not lower triangular, which
        ``detect_head`` refuses).
    slots : callable or None, default None
        ``slots(ctx) -> {candidate: key slots}``: the same targets as ``targets``, each candidate's as a
        torch.Tensor of shape (batch, query, slot), long — the keys of each query's targets, −1 for none — for
        types with a few targets per row that are known without the ``[batch query key]`` pattern (diagonals,
        the first token, delimiters, pairs). The label scorer then never builds the pattern (at 1,024 tokens
        fixed_offset's 31 candidates are 31 patterns of a million entries per probe). None: the slots are read
        from ``targets`` (:func:`target_slots`). A type gives either, or both naming the same keys (the
        scorer reads the slots, a view the pattern); the built-in types give only slots.
    tl_slots : callable or None, default None
        ``tl_slots(ctx) -> [batch query slot] long``: TransformerLens' pattern as key slots, read by the label
        scorer of a type that gives ``slots`` (so neither pattern is built); ``tl_targets`` is derived from
        them where not given.
    reads : frozenset of str, default every vocabulary field
        The :class:`TargetContext` fields built from the tokenizer's vocabulary its targets read
        (:data:`VOCABULARY_FIELDS`: ``"delimiter_ids"``, ``"classes"``). A labelling run scans the vocabulary
        for a field only when a type it scores reads it (a scan of GPT-2's 50,257 tokens costs about 0.25 s);
        a type that reads none declares ``frozenset()``. The default (both) suits a registered type that does
        not say.

    Examples
    --------
    >>> spec = REGISTRY["induction"]
    >>> spec.probe, spec.statistic, spec.loss_positions, spec.copies
    ('repeated', 'mass', 'repeat', True)
    >>> REGISTRY["fixed_offset"].candidate  # one candidate per offset d; each head picks its own
    'offset'
    """

    name: HeadType
    description: str
    # candidate -> [batch query key] bool; None: derived from slots
    targets: Callable[[TargetContext], Targets] | None
    # the probe set it is scored on; without a usable corpus "natural" falls back to repeated
    probe: ProbeKind
    # blocks, "sentences" and "brackets" to random tokens with seeded sentence ends / brackets
    # (ProbeSource.resolve)
    kinds: frozenset[str] = field(default=ALL_KINDS)  # model kinds it applies to
    statistic: Statistic = "mass"
    # name of the column holding the chosen candidate ("offset"), if it has several
    candidate: str | None = None
    loss_positions: LossPositions = "text"  # ablation: the loss of these positions of its own probes
    # generation-scored types: (loaded, seq_len, LabelConfig, tick) -> GeneratedScores
    scorer: Scorer | None = None
    # scored when no types are asked for (False: only when asked, e.g. --types retrieval)
    default: bool = True
    verifier: Verifier | None = None  # (loaded, seq_len, LabelConfig, scores [layer head]) -> {column: value}
    copies: bool = False  # labels get a copying / suppressing role and rows a copying_dla (induction)
    sink: bool = False  # no-op sink targets (first token, delimiters): "sink" role below SINK_SHARE
    # TransformerLens' own detection pattern of the type (previous / duplicate / induction); None: targets
    tl_targets: Callable[[TargetContext], torch.Tensor] | None = None
    # TargetContext fields from the tokenizer's vocabulary its targets read (the scans run only when read)
    reads: frozenset[str] = VOCABULARY_FIELDS
    # the targets as key slots [batch query slot] long, without the dense pattern; None: from targets
    slots: Callable[[TargetContext], Slots] | None = None
    # TransformerLens' detection pattern as key slots (read with `slots`)
    tl_slots: Callable[[TargetContext], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        # a type given as slots only: its dense patterns (views, target_pattern) derived from them
        for dense, sparse in (("targets", self.slots), ("tl_targets", self.tl_slots)):
            if getattr(self, dense) is None and callable(sparse):
                object.__setattr__(self, dense, FromSlots(sparse))

    @property
    def text_only(self) -> bool:
        """Meaningless on protein sequences (skipped there with a note)."""
        return PROTEIN not in self.kinds


# Each type with key slots is defined by them alone (targets None: its dense pattern derived from the slots).
REGISTRY: dict[HeadType, HeadTypeSpec] = {
    spec.name: spec for spec in (
        HeadTypeSpec("previous_token", "attends to the token just before (j = i − 1)", None, "natural",
                     reads=NO_VOCABULARY, slots=previous_token_slots, tl_slots=tl_previous_slots),
        HeadTypeSpec("next_token", "attends to the token just after (j = i + 1; bidirectional models)", None,
                     "natural", kinds=BIDIRECTIONAL_KINDS, reads=NO_VOCABULARY, slots=next_token_slots),
        HeadTypeSpec("self", "attends to the current token", None, "natural", reads=NO_VOCABULARY,
                     slots=self_slots),
        HeadTypeSpec("first_token", "attends to the first token (attention sink)", None, "natural", sink=True,
                     reads=NO_VOCABULARY, slots=first_token_slots),
        HeadTypeSpec("fixed_offset", "attends at one relative offset d other than −1, 0, +1 (column offset)",
                     None, "natural", candidate="offset", reads=NO_VOCABULARY, slots=fixed_offset_slots),
        HeadTypeSpec("delimiter", "attends to punctuation and [SEP] / EOS-type tokens", None, "natural",
                     kinds=TEXT_KINDS, sink=True, reads=frozenset({"delimiter_ids"}), slots=delimiter_slots),
        HeadTypeSpec("sentence_start", "attends from a sentence's final token to the sentence's first token",
                     None, "sentences", kinds=TEXT_KINDS, reads=frozenset({"classes"}),
                     slots=sentence_start_slots),
        HeadTypeSpec("bracket", "attends from a closing bracket to its matching opening bracket", None,
                     "brackets", kinds=TEXT_KINDS, reads=frozenset({"classes"}), slots=bracket_slots),
        HeadTypeSpec("duplicate_token",
                     "attends to other copies of the current token (earlier ones when causal)", None,
                     "repeated", loss_positions="repeat", reads=NO_VOCABULARY, slots=duplicate_token_slots,
                     tl_slots=tl_duplicate_slots),
        HeadTypeSpec("induction", "attends to the token after an earlier copy of the current token", None,
                     "repeated", loss_positions="repeat", copies=True, reads=NO_VOCABULARY,
                     slots=induction_slots, tl_slots=tl_induction_slots),
        HeadTypeSpec("coreference", "attends from a pronoun to its antecedent", coreference_targets, "spans",
                     kinds=TEXT_KINDS, statistic="accuracy", loss_positions="query", reads=NO_VOCABULARY),
        HeadTypeSpec("retrieval",
                     "copies the needle token it attends to while generating it (Wu et al. 2024)",
                     no_targets, "generation", kinds=frozenset({CAUSAL}), scorer=_retrieval_scorer,
                     default=False, verifier=_retrieval_verifier, reads=NO_VOCABULARY),
    )
}
assert tuple(REGISTRY) == HEAD_TYPES  # one list of names

# Types whose targets come from the token ids alone (not span examples).
TOKEN_TYPES: tuple[HeadType, ...] = tuple(name for name in HEAD_TYPES
                                          if REGISTRY[name].probe not in ("spans", "generation"))
# Types scored when none are asked for (generation-scored types are opt-in: they decode, and need long
# probes).
DEFAULT_TYPES: tuple[HeadType, ...] = tuple(name for name in HEAD_TYPES if REGISTRY[name].default)


def names() -> tuple[str, ...]:
    """Every head type's name, built in and registered (:func:`register`), in registry order."""
    return tuple(REGISTRY)


def parse_head_types(text: str | None) -> tuple[HeadType, ...]:
    """"previous_token,induction" -> ("previous_token", "induction"); None/"all" -> every type (registered
    ones too)."""
    if text is None or text.strip() in ("", "all"):
        return names()  # type: ignore[return-value]
    names_given = [part.strip() for part in text.split(",") if part.strip()]
    for name in names_given:
        if name not in REGISTRY:
            raise ProbeError(f"unknown head type {name!r}: choose from {', '.join(names())}")
    return tuple(dict.fromkeys(names_given))  # type: ignore[return-value]


def types_for_kind(kind: str, types: tuple[HeadType, ...] | None = None) -> tuple[HeadType, ...]:
    """The types (all, or `types`) that apply to a model kind, in registry order."""
    chosen = names() if types is None else types
    return tuple(name for name in chosen if kind in REGISTRY[name].kinds)


def batch_pattern(
    head_type: HeadType,
    input_ids: torch.Tensor,  # [batch seq]
    causal: bool = True,
    delimiter_ids: tuple[int, ...] = (),
    candidate: int | None = None,  # fixed_offset: one offset d (a table's `offset`); None: every candidate
    classes: TokenClasses | None = None,  # sentence ends and brackets (probe.heads.probesets.token_classes)
) -> torch.Tensor:
    """Target pattern of a token type for a batch: `[batch query key]` bool (a new tensor). For a type with
    candidates (fixed_offset) the union of all of them, or the one `candidate`."""
    if head_type not in REGISTRY:
        raise ProbeError(f"unknown head type {head_type!r}: choose from {', '.join(HEAD_TYPES)}")
    spec = REGISTRY[head_type]
    if spec.probe == "spans":
        raise ProbeError(f"{head_type} targets need spans: pass an encoded span example, not token ids")
    ctx = TargetContext(input_ids.detach().cpu().long(), causal=causal, delimiter_ids=tuple(delimiter_ids),
                        classes=classes or TokenClasses())
    targets = spec.targets(ctx)
    if candidate is not None:
        if candidate not in targets:
            raise ProbeError(f"{head_type} has no candidate {candidate} here: choose from {sorted(targets)}")
        return targets[candidate].clone()
    patterns = list(targets.values())
    union = patterns[0].clone()
    for pattern in patterns[1:]:
        union |= pattern
    return union


def target_pattern(head_type: HeadType, token_ids, causal: bool = True, delimiter_ids: tuple[int, ...] = (),
                   candidate: int | None = None, classes: TokenClasses | None = None) -> torch.Tensor:
    """The target keys of each query: bool `[query key]`.

    Parameters
    ----------
    head_type : str
        A registered head type.
    token_ids : sequence of int or EncodedSpanExample
        A 1-D sequence of token ids `[token]` for the token types; for a span type (coreference) an
        :class:`~probe.heads.probesets.EncodedSpanExample`.
    causal : bool, default True
        Whether the model is causal.
    delimiter_ids : tuple of int, default ()
        :func:`probe.heads.probesets.delimiter_ids` of the model's tokenizer (the delimiter type).
    candidate : int, optional
        fixed_offset's offset (the table's `offset` column).
    classes : TokenClasses, optional
        :func:`probe.heads.probesets.token_classes` of the tokenizer (sentence_start, bracket; without them
        those types have no targets).

    Returns
    -------
    torch.Tensor
        bool `[query key]`.
    """
    if head_type not in REGISTRY:
        raise ProbeError(f"unknown head type {head_type!r}: choose from {', '.join(HEAD_TYPES)}")
    if REGISTRY[head_type].probe == "spans":
        example = token_ids
        if not hasattr(example, "query_tokens"):
            raise ProbeError(f"{head_type} targets need spans: pass an EncodedSpanExample "
                             "(probe.heads.probesets)")
        ids = torch.tensor(example.input_ids)[None]
        return REGISTRY[head_type].targets(TargetContext(ids, spans=(example,)))[None][0]
    ids = torch.as_tensor(token_ids).long()
    if ids.dim() != 1:
        raise ProbeError(f"target_pattern takes one sequence of token ids, got shape {tuple(ids.shape)}")
    return batch_pattern(head_type, ids[None], causal, delimiter_ids, candidate, classes)[0]  # [query key]


def target_slots(pattern: torch.Tensor) -> torch.Tensor:
    """A sparse form of a pattern: [batch query key] bool -> [batch query slot] long key indices, -1 = no
    target (long key slots, as :attr:`HeadTypeSpec.slots` gives them, are returned as they are).

    Slot count = the most targets any row has (1 for previous/first/self; small for duplicate/induction on a
    large vocabulary), so gathering α at the slots costs O(query · slot) instead of O(query · key).
    """
    if pattern.dtype != torch.bool:
        return pattern
    batch, n_query, _ = pattern.shape
    counts = pattern.sum(-1)  # [batch query]
    n_slots = max(1, int(counts.max()) if counts.numel() else 1)
    if n_slots == 1:  # at most one target per row (diagonals, the first token): its index, without nonzero()
        first = pattern.to(torch.uint8).argmax(-1)  # [batch query] the first True key (0 in an empty row)
        return torch.where(counts > 0, first, -1)[..., None]  # [batch query 1]
    slots = torch.full((batch, n_query, n_slots), -1, dtype=torch.long)  # [batch query slot]
    b, q, k = pattern.nonzero(as_tuple=True)  # row-major: the keys of one row are consecutive
    first = (counts.flatten().cumsum(0) - counts.flatten())  # [batch·query] index of each row's first entry
    rank = torch.arange(len(k)) - first[b * n_query + q]
    slots[b, q, rank] = k
    return slots


# ------------------------------------------------------------------------------------------------------------
# Users' own head types
# ------------------------------------------------------------------------------------------------------------

BUILT_IN: tuple[HeadType, ...] = HEAD_TYPES  # the types above; the ones users add come after them
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register(spec: HeadTypeSpec) -> HeadTypeSpec:
    """Add a head type, as transformers' ``AttentionInterface.register`` adds an attention function.

    After ``probe.heads.register(HeadTypeSpec("my_type", ...))`` the type is scored and labelled like a
    built-in one: ``label_model(loaded, LabelConfig(types=("my_type",)))``, ``probe label --types my_type``
    (and by default, with every type) in this process.

    Parameters
    ----------
    spec
        The type: a snake_case ``name`` not yet registered, a ``description``, ``targets`` (a function of a
        :class:`TargetContext` returning ``{candidate: bool tensor [batch query key]}``, candidate None for a
        type with one target pattern; or None with ``slots=``, the keys as ``[batch query slot]`` long), the
        ``probe`` set it is scored on ("natural", "repeated", "spans",
        "sentences", "brackets", or "generation" with a ``scorer``), the model
        ``kinds`` it applies to, its ``statistic`` ("mass"; "accuracy" needs span probes) and the
        ``loss_positions`` its ablation measures.

    Returns
    -------
    HeadTypeSpec
        `spec`, so ``register`` can decorate a module-level constant.

    Raises
    ------
    ProbeError
        One line naming what to fix: a duplicate or malformed name, or a field outside its allowed values.

    Examples
    --------
    >>> from probe.heads.label import LabelConfig, label_model
    >>> def two_back(ctx):  # key j = i − 2: one candidate (None), a bool pattern [batch query key]
    ...     batch, n = ctx.input_ids.shape
    ...     return {None: torch.ones(n, n, dtype=torch.bool).tril(-2).triu(-2).expand(batch, n, n)}
    >>> spec = register(HeadTypeSpec("two_back", "attends two tokens back", two_back, "natural"))
    >>> fast = LabelConfig(types=("two_back", "previous_token"), examples=8, n_bootstrap=100, ablate="none",
    ...                    output_share=False)
    >>> table = label_model(loaded, fast)  # zoo:induction, scored and tested like a built-in type
    >>> table.loc[table["label"], ["head_name", "head_type"]].values.tolist()
    [['L0H3', 'two_back'], ['L0H1', 'previous_token']]
    >>> unregister("two_back")
    """
    if not isinstance(spec, HeadTypeSpec):
        raise ProbeError(f"register takes a probe.heads.HeadTypeSpec, not {type(spec).__name__}")
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        raise ProbeError(f"head type name {spec.name!r} must be snake_case (letters, digits, _; a letter "
                         "first)")
    if spec.name in REGISTRY:
        raise ProbeError(f"head type {spec.name!r} is already registered; choose another name")
    if not isinstance(spec.description, str) or not spec.description.strip():
        raise ProbeError(f"head type {spec.name!r} needs a description (one line saying what it attends to)")
    if spec.targets is None:
        raise ProbeError(f"head type {spec.name!r} needs targets or slots (a function of a TargetContext)")
    if not callable(spec.targets):
        raise ProbeError(f"head type {spec.name!r}: targets must be a function of a TargetContext")
    for field_name, allowed in (("probe", ProbeKind), ("statistic", Statistic),
                                ("loss_positions", LossPositions)):
        value = getattr(spec, field_name)
        if value not in get_args(allowed):
            raise ProbeError(f"head type {spec.name!r}: {field_name} {value!r} must be one of "
                             f"{', '.join(get_args(allowed))}")
    kinds = frozenset(spec.kinds) if isinstance(spec.kinds, (set, frozenset, tuple, list)) else frozenset()
    if not kinds or not kinds <= ALL_KINDS:
        raise ProbeError(f"head type {spec.name!r}: kinds must be a non-empty set of "
                         f"{', '.join(sorted(str(kind) for kind in ALL_KINDS))}")
    if spec.statistic == "accuracy" and spec.probe != "spans":
        raise ProbeError(f"head type {spec.name!r}: the accuracy statistic needs span probes (probe='spans')")
    if spec.tl_targets is not None and not callable(spec.tl_targets):
        raise ProbeError(f"head type {spec.name!r}: tl_targets must be a function of a TargetContext or None")
    for field_name in ("slots", "tl_slots"):
        if getattr(spec, field_name) is not None and not callable(getattr(spec, field_name)):
            raise ProbeError(f"head type {spec.name!r}: {field_name} must be a function of a "
                             "TargetContext or None")
    if spec.candidate is not None and not isinstance(spec.candidate, str):
        raise ProbeError(f"head type {spec.name!r}: candidate must be a column name or None")
    if not isinstance(spec.reads, frozenset) or not spec.reads <= VOCABULARY_FIELDS:
        raise ProbeError(f"head type {spec.name!r}: reads must be a frozenset of "
                         f"{', '.join(sorted(VOCABULARY_FIELDS))}")
    REGISTRY[spec.name] = spec  # type: ignore[index]
    return spec


def unregister(name: str) -> None:
    """Remove a type added with :func:`register` (built-in types stay).

    Parameters
    ----------
    name : str
        The registered type's name.

    Raises
    ------
    ProbeError
        `name` is a built-in type, or not registered.

    Examples
    --------
    >>> targets = REGISTRY["previous_token"].targets
    >>> spec = register(HeadTypeSpec("one_back", "a copy of previous_token", targets, "natural"))
    >>> "one_back" in REGISTRY
    True
    >>> unregister("one_back")
    >>> "one_back" in REGISTRY
    False
    >>> unregister("induction")
    Traceback (most recent call last):
    probe.errors.ProbeError: 'induction' is a built-in head type and cannot be removed
    """
    if name in BUILT_IN:
        raise ProbeError(f"{name!r} is a built-in head type and cannot be removed")
    if name not in REGISTRY:
        raise ProbeError(f"head type {name!r} is not registered")
    del REGISTRY[name]  # type: ignore[arg-type]


__all__ = ["ALL_KINDS", "BIDIRECTIONAL_KINDS", "BUILT_IN", "DEFAULT_TYPES", "HEAD_TYPES", "MAX_OFFSET",
           "REGISTRY", "SMALL_VOCABULARY", "TEXT_KINDS", "TOKEN_TYPES", "HeadType", "HeadTypeSpec",
           "Slots", "TargetContext", "Targets", "TokenClasses", "batch_pattern", "bracket_pairs", "names",
           "offsets_for", "parse_head_types", "register", "sentence_start_pairs", "slots_pattern",
           "target_pattern", "target_slots", "types_for_kind", "unregister"]
