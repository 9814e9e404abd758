"""Streaming the scores of :func:`probe.heads.label.label_model` (step 2): every type of a probe set in one
forward per batch through :class:`probe.heads.scores.ScoreSink` (with output shares where asked), span sets
with their word-level accuracy, generation-scored types through their spec's scorer. Each gives a
:class:`Scored`."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from probe.engine.output_norms import OutputProjections
from probe.heads import stats
from probe.heads.direct_logit import InductionDLA
from probe.heads.generated import GeneratedScores
from probe.heads.label.config import LabelConfig, Memo, Note
from probe.heads.label.probes import ProbeSource, TokenProbeSet
from probe.heads.probesets import EncodedSpanExample, pad_span_batch
from probe.heads.registry import SMALL_VOCABULARY, HeadTypeSpec, TargetContext, target_slots
from probe.heads.scores import ScoreSink, TypeScores, run_sink, span_words
from probe.heads.stats import uniform_chance
from probe.models import ModelKind


def batch_slices(total: int, size: int) -> list[slice]:
    """Consecutive slices of at most `size` covering ``range(total)`` (the probe batches of a set)."""
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


def span_slices(examples: Sequence[EncodedSpanExample], size: int, tokens: int = 0) -> list[slice]:
    """Consecutive batches of span examples: `size` examples each (the last may hold fewer), and more while
    the padded batch (its examples × the longest of them) stays within `tokens` — the token probes' budget,
    ``batch_size × seq_len``, so that short sentences do not each pay a forward's fixed cost.

    Examples
    --------
    >>> from probe.heads.probesets import EncodedSpanExample
    >>> def sentence(n):  # n tokens
    ...     return EncodedSpanExample((1,) * n, (0,), (1,), (0,) * n, (0,), (0,))
    >>> span_slices([sentence(10)] * 20, 4)  # no budget: `size` a batch
    [slice(0, 4, None), slice(4, 8, None), slice(8, 12, None), slice(12, 16, None), slice(16, 20, None)]
    >>> span_slices([sentence(10)] * 20, 4, tokens=4 * 32)  # 12 sentences of 10 tokens fit in 4 × 32
    [slice(0, 12, None), slice(12, 20, None)]
    >>> span_slices([sentence(10)] * 6 + [sentence(100)] * 6, 4, tokens=4 * 32)  # never fewer than `size`
    [slice(0, 6, None), slice(6, 10, None), slice(10, 12, None)]
    """
    batches, start = [], 0
    while start < len(examples):
        stop, longest = start, 0
        while stop < len(examples):
            wider = max(longest, len(examples[stop].input_ids))
            if stop - start >= size and (stop - start + 1) * wider > tokens:
                break
            longest, stop = wider, stop + 1
        batches.append(slice(start, stop))
        start = stop
    return batches


def _key(spec: HeadTypeSpec, candidate) -> str:
    return spec.name if candidate is None else f"{spec.name}@{candidate}"



@dataclass
class Scored:
    """Per-example scores of one type on one probe set: per candidate, and the bootstrap clusters."""

    spec: HeadTypeSpec
    probe_set: str
    seq_len: float  # NaN for span sets
    candidates: list  # [None] or fixed_offset's offsets
    scores: dict  # candidate -> TypeScores [example layer head]
    chance: dict  # candidate -> [example]
    cluster: torch.Tensor  # [example]
    baselines: dict[str, torch.Tensor] | None = None  # name -> [example] 1/0 (span sets)
    groups: list[str] | None = None  # per example (span sets)


_FIELDS = ("score", "tl_score", "correct", "output_share", "clark_correct")  # TypeScores' tensors
_DLA_TOTAL, _DLA_COUNTED = "dla:total", "dla:counted"


def flat_scores(result: dict[str, TypeScores]) -> dict[str, torch.Tensor]:
    """One forward's scores as a flat dict of tensors (``"KEY/FIELD"``; fields that are None left out): what
    a :data:`~probe.heads.label.config.Memo` keeps of a probe batch."""
    return {f"{key}/{name}": getattr(scores, name) for key, scores in result.items() for name in _FIELDS
            if getattr(scores, name) is not None}


def unflat_scores(flat: dict[str, torch.Tensor]) -> dict[str, TypeScores]:
    """The inverse of :func:`flat_scores` (other entries, such as the attribution's, are skipped)."""
    fields: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in flat.items():
        key, _, field = name.rpartition("/")
        if field in _FIELDS:
            fields.setdefault(key, {})[field] = tensor
    return {key: TypeScores(key, **found) for key, found in fields.items()}


def _forward(memo: Memo | None, step: str, compute: Callable[[], dict[str, torch.Tensor]]
             ) -> dict[str, torch.Tensor]:
    """One probe batch's forward, through `memo` when given (a resumed run reads it back)."""
    return compute() if memo is None else memo(step, compute)


def score_token_set(loaded, specs: Sequence[HeadTypeSpec], probes: TokenProbeSet, source: ProbeSource,
                    seq_len: int, config: LabelConfig, tick: Callable[[], None],
                    projections: OutputProjections | None = None,
                    dla: InductionDLA | None = None, memo: Memo | None = None,
                    step: str = "") -> list[Scored]:
    """Stream every spec's targets on one token probe set, one forward per batch (with `projections`: also the
    output shares; with `dla`: the direct logit attribution reduced from the same forwards). With `memo`, each
    batch's forward is the step ``f"{step}/rows{start}-{stop}"`` (its scores and attribution)."""
    causal = not _bidirectional(loaded)
    restrict = source.vocabulary < SMALL_VOCABULARY
    parts = {spec.name: {} for spec in specs}
    chances = {spec.name: {} for spec in specs}
    reads = frozenset().union(*(spec.reads for spec in specs))  # the vocabulary scans these targets need
    vocabulary = {"delimiter_ids": source.delimiters} if "delimiter_ids" in reads else {}
    if "classes" in reads:
        vocabulary["classes"] = source.classes
    for rows in batch_slices(len(probes.input_ids), config.batch_size):
        input_ids = probes.input_ids[rows]  # [batch seq]
        lengths = torch.full((input_ids.shape[0],), input_ids.shape[1])
        ctx = TargetContext(input_ids, causal=causal, **vocabulary,
                            repeat_start=None if probes.repeat_start is None else probes.repeat_start[rows],
                            repeat_len=None if probes.repeat_len is None else probes.repeat_len[rows],
                            restrict_to_repeat=restrict and probes.repeat_start is not None)
        # each type's targets as key slots [batch query slot] (no padding here): the sink, the chance level
        # and TL's triangle check read these few slots per row instead of the [batch query key] pattern
        patterns, tl_patterns, tl_defined = {}, {}, {}
        for spec in specs:
            # a type with spec.slots gives them directly: its [batch query key] pattern is never built
            made = spec.targets(ctx) if spec.slots is None else spec.slots(ctx)
            for candidate, targets in made.items():
                key = _key(spec, candidate)
                pattern = targets if spec.slots is None else None  # [batch query key] bool
                slots = target_slots(targets)  # [batch query slot]
                patterns[key] = slots
                tl, tl_defined[key] = tl_detection(spec, ctx, pattern, slots)
                if not _same_targets(tl, pattern, slots):
                    tl_patterns[key] = tl
                chances[spec.name].setdefault(candidate, []).append(uniform_chance(slots, lengths, causal))

        def forward(patterns=patterns, tl_patterns=tl_patterns, input_ids=input_ids, lengths=lengths,
                    rows=rows) -> dict[str, torch.Tensor]:
            sink = ScoreSink(patterns, lengths, loaded.n_layers, loaded.n_heads, device=loaded.device,
                             output_projections=projections, tl_patterns=tl_patterns)
            with dla.watching() if dla is not None else contextlib.nullcontext():
                if dla is not None:  # its terms are reduced in the forward's hooks
                    dla.expect(input_ids, probes.repeat_start[rows], probes.repeat_len[rows])
                run_sink(loaded.model, sink, input_ids, block_bytes=config.block_bytes)
                reduced = {}
                if dla is not None:
                    total, counted = dla.reduce()
                    reduced = {_DLA_TOTAL: total, _DLA_COUNTED: torch.tensor(counted)}
            return {**flat_scores(sink.result()), **reduced}

        found = _forward(memo, f"{step}/rows{rows.start}-{rows.stop}", forward)
        del patterns, tl_patterns
        if dla is not None:
            dla.accumulate(found[_DLA_TOTAL], int(found[_DLA_COUNTED]))
        result = unflat_scores(found)
        for key, defined in tl_defined.items():  # TL refuses a detection pattern that is not lower triangular
            result[key].tl_score[~defined] = torch.nan
        for spec in specs:
            for candidate in chances[spec.name]:
                parts[spec.name].setdefault(candidate, []).append(result[_key(spec, candidate)])
        tick()
    out = []
    for spec in specs:
        candidates = list(chances[spec.name])
        out.append(Scored(spec, probes.name, float(seq_len), candidates,
                          {c: TypeScores.concat(parts[spec.name][c]) for c in candidates},
                          {c: torch.cat(chances[spec.name][c]) for c in candidates}, probes.cluster))
    return out


def tl_detection(spec: HeadTypeSpec, ctx: TargetContext, pattern: torch.Tensor | None,
                 slots: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The detection pattern TransformerLens' ``detect_head`` would score a type with on this batch, and
    where its score is defined: (`[batch query key]` bool — or key slots, see below — and `[batch]` bool).

    For the types TL names (``spec.tl_targets``: previous, duplicate, induction heads) TL's own pattern from
    the token ids (as ``spec.tl_slots`` where no pattern is given and the type has them), defined
    everywhere; for the others the type's targets as a custom detection pattern (`pattern`, or its key
    `slots` `[batch query slot]` when no pattern is given), defined on the probes where it is lower
    triangular (``detect_head`` asserts that; read from the slots when given)."""
    if spec.tl_targets is not None:  # as key slots where the targets came as slots and the type has them
        tl = spec.tl_slots(ctx) if pattern is None and spec.tl_slots is not None else spec.tl_targets(ctx)
        return tl, torch.ones(len(tl), dtype=torch.bool)
    if slots is not None:  # a key after its row
        upper = (slots > torch.arange(slots.shape[1])[:, None]).flatten(1).any(1)  # [batch]
    else:
        upper = pattern.triu(1).flatten(1).any(1)  # [batch]
    return (slots if pattern is None else pattern), ~upper


def _same_targets(tl: torch.Tensor, pattern: torch.Tensor | None, slots: torch.Tensor) -> bool:
    """TL's detection pattern `tl` (bool `[batch query key]` or key slots) names the same keys as a type's
    targets (`pattern` `[batch query key]` bool, None where only their `slots` were built)."""
    if tl is pattern or tl is slots:
        return True
    if pattern is not None and tl.dtype == torch.bool:
        return torch.equal(tl, pattern)
    return torch.equal(target_slots(tl), slots)


def score_span_set(loaded, specs: Sequence[HeadTypeSpec], name: str, examples: list[EncodedSpanExample],
                   config: LabelConfig, tick: Callable[[], None],
                   projections: OutputProjections | None = None, memo: Memo | None = None,
                   step: str = "", tokens: int = 0) -> list[Scored]:
    """Stream every span spec's targets and the word-level accuracy on the span examples, in the batches of
    :func:`span_slices` (`tokens`: the token probes' ``batch_size × seq_len``; with `memo`: each batch's
    forward is the step ``f"{step}/rows{start}-{stop}"``)."""
    causal = not _bidirectional(loaded)
    parts = {spec.name: [] for spec in specs}
    chances = {spec.name: [] for spec in specs}
    for rows in span_slices(examples, config.batch_size, tokens):
        batch = pad_span_batch(examples[rows], loaded.tokenizer.pad_token_id or 0)
        lengths = batch.attention_mask.sum(-1)  # [batch]
        ctx = TargetContext(batch.input_ids, causal=causal, spans=batch.examples)
        patterns = {spec.name: spec.targets(ctx)[None] for spec in specs}
        for spec in specs:
            chances[spec.name].append(uniform_chance(patterns[spec.name], lengths, causal))

        def forward(patterns=patterns, lengths=lengths, batch=batch) -> dict[str, torch.Tensor]:
            sink = ScoreSink(patterns, lengths, loaded.n_layers, loaded.n_heads, words=span_words(batch),
                             device=loaded.device, output_projections=projections)
            run_sink(loaded.model, sink, batch.input_ids, batch.attention_mask,
                     block_bytes=config.block_bytes)
            return flat_scores(sink.result())

        found = _forward(memo, f"{step}/rows{rows.start}-{rows.stop}", forward)
        for spec_name, scores in unflat_scores(found).items():
            parts[spec_name].append(scores)
        tick()
    names = [baseline for baseline, _ in examples[0].baselines]
    baselines = {baseline: torch.tensor([float(dict(e.baselines).get(baseline, math.nan)) for e in examples])
                 for baseline in names}
    cluster = stats.cluster_index([e.cluster for e in examples])
    groups = [e.group for e in examples]
    return [Scored(spec, name, math.nan, [None], {None: TypeScores.concat(parts[spec.name])},
                   {None: torch.cat(chances[spec.name])}, cluster, baselines, groups) for spec in specs]


def score_generated(loaded, spec: HeadTypeSpec, seq_len: int, config: LabelConfig, tick: Callable[[], None],
                    note: Note | None = None, memo: Memo | None = None, step: str = "") -> Scored:
    """A generation-scored type (spec.scorer) on its own probes of `seq_len` tokens, as a mass type's
    Scored (with `memo`: the scorer's whole run is the step `step`; read back, it ticks its batches at
    once)."""

    def scorer() -> dict[str, torch.Tensor]:
        found = spec.scorer(loaded, seq_len, config, tick)
        kept = {"score": found.score, "chance": found.chance, "cluster": found.cluster,
                "probe_set": torch.tensor(list(found.probe_set.encode("utf-8")), dtype=torch.uint8)}
        return kept if found.recall is None else {**kept, "recall": found.recall}

    computed = []
    kept = memo(step, lambda: computed.append(True) or scorer()) if memo is not None else scorer()
    if memo is not None and not computed:  # read back: its batches are done
        for _ in batch_slices(config.examples, config.batch_size):
            tick()
    result = GeneratedScores(bytes(kept["probe_set"].tolist()).decode("utf-8"), kept["score"], kept["chance"],
                             kept["cluster"], kept.get("recall"))
    counted = int((~torch.isnan(result.chance)).sum())
    if note is not None and counted < len(result.chance):
        task = "" if result.recall is None else f", mean task recall {float(result.recall.mean()):.2f}"
        note(f"{loaded.name} · {spec.name} @{seq_len}: {counted} of {len(result.chance)} probes count{task}; "
             "the rest are left out" + (" — no score" if counted == 0 else ""))
    tl = torch.full_like(result.score, math.nan)  # TransformerLens' score is not defined for it
    return Scored(spec, result.probe_set, float(seq_len), [None],
                  {None: TypeScores(spec.name, result.score, tl)}, {None: result.chance}, result.cluster)


def _bidirectional(loaded) -> bool:
    return loaded.kind != ModelKind.CAUSAL_LM

