"""From a loaded model to a labelled table: probe sets, streamed scores, the label rule, ablations.

:func:`label_model` loops over the head-type specs of :mod:`probe.heads.registry` (never over type names):

1. **Probe sets** per length: natural text (GAP passages, :mod:`probe.heads.corpus`) for the "natural" and
   "sentences" types of a text model whose tokenizer reads the corpus — random-token probes otherwise
   (repeated blocks; random sentences; the zoo's toy vocabularies, protein models); natural text (or random
   tokens) with a seeded nested-bracket word for the "brackets" types; repeated random blocks, drawn by the
   corpus' token frequencies, for the "repeated" types; span examples for the span types, once: every GAP
   development pair that fits the model (cropped to whole sentences where needed) by default, else the
   templates (agreement, or implicit causality), or the user's file.
2. **Scores** streamed from the capture engine (:class:`probe.heads.scores.ScoreSink`), every type of a probe
   set in one forward. Generation-scored types (a spec with a ``scorer``, e.g. retrieval) build, decode and
   score their own probes per length and hand back per-example scores and chance
   (:class:`probe.heads.registry.GeneratedScores`).
3. **Statistics** (:mod:`probe.heads.stats`): chance, clustered bootstrap interval, a one-sided test of the
   effect over ``min_effect`` (mass types: score − chance; accuracy types: paired accuracy gain over the best
   baseline), Benjamini–Hochberg over all the model's head × type tests, on the selection half of each probe
   set's documents; ``selected`` = q ≤ ``fdr``, and ``label`` = selected and ``replicated`` (the same test on
   the held-out confirmation half: :func:`probe.heads.stats.confirmation_split`, docs/labels.md "Held-out
   confirmation"). Types with candidates (fixed_offset) choose each head's candidate on half of the examples
   and are tested on the other half. With ``twins`` (``--control untrained:K``), K untrained twins
   (:mod:`probe.untrained`) are scored on the same token and span probes after the model, one twin at a time
   (each built, run on every probe set and let go before the next: the run holds the model and one twin; a
   device-mapped model's twins are placed like it, :func:`probe.untrained.each_twin`); per type and length the
   99th percentile of their statistic over all their heads is ``untrained_p99``, and a label must also be
   above it (generated types are not run on the twins: a random model retrieves no needle, so its score is NaN
   by their own rule). A twin that cannot be built is skipped and the run's notes say so ("controls: untrained
   twins 1 of 3 …").
4. **Output share** (Kobayashi et al. 2020, streamed with the scores): the share of each head's output norm
   that comes from its targets (``output_share``); a label below :data:`SINK_SHARE` has ``role`` "sink",
   others "function".
5. **Ablation** (:mod:`probe.heads.ablation`): each labelled head's effect on its type's own loss, against
   random heads of the same layer where possible (``ablation_effect``, ``ablation_z``), and each (type, layer)
   with ≥ 2 labelled heads ablated together against random groups of the same size (``group_effect``,
   ``group_z``).

The table's schema is :data:`probe.heads.tables.COLUMNS` (docs/labels.md, "Labelling heads").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pandas as pd
import torch

from probe.anatomy import PROJECTION_NAMES
from probe.engine.output_norms import kept_projections
from probe.errors import ProbeError
from probe.heads.copying import CopyingScores, copying_scores
from probe.heads.direct_logit import InductionDLA, induction_dla
from probe.heads.label.ablation import ablation_columns, merge_ablation
from probe.heads.label.config import (
    ABLATE,
    COREF_SETS,
    DEFAULT_SEQ_LEN,
    MIN_TWIN_ACCURACY_PROBES,
    MIN_TWIN_PROBES,
    NOT_IDENTITY,
    RETRIEVAL_MASKS,
    LabelConfig,
    Memo,
    Note,
    Progress,
    config_identity,
    default_seq_len,
    is_text_model,
    resolve_lengths,
    resolve_types,
    twin_probes,
)
from probe.heads.label.probes import ProbeSource, TokenProbeSet, evenly_spaced, first_probes
from probe.heads.label.scoring import (
    Scored,
    batch_slices,
    score_generated,
    score_span_set,
    score_token_set,
    span_slices,
)
from probe.heads.label.summary import summarise
from probe.heads.label.table import (
    SINK_SHARE,
    assemble,
    decide,
    fill_copying,
    fill_verification,
    roles,
    summary_lines,
    untrained_bars,
    verified_scores,
)
from probe.heads.stage_times import StageTimes
from probe.heads.tables import COLUMNS
from probe.untrained import MAX_TWINS, SEED_BASE, each_twin, placement_text, twin_seed

TWIN_BOOTSTRAP = 50  # resamples of the twins' summaries: only their point statistics make the bar


def label_model(
    loaded,
    config: LabelConfig = LabelConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Progress | None = None,  # called with (batches done, batches in all)
    note: Note | None = None,  # one-line notes for the user (skipped types, probe fallbacks, ablation)
    timings: StageTimes | None = None,  # seconds per stage are added here (probe label's summary)
    copying_of: Callable[[object], CopyingScores] | None = None,  # the copying stage (a cache of it)
    memo: Memo | None = None,  # the resumable steps (probe batches, ablations) go through it
    plan: Note | None = None,  # called once, before the first forward, with the line saying what is to come
) -> pd.DataFrame:
    """Score every head of a loaded model on the probe sets and label it.

    Every type of a probe set is scored in the same forward passes (streamed by the capture engine, no
    ``[layer, head, N, N]`` tensor); chance, a clustered bootstrap interval, a one-sided test over
    `min_effect` and a Benjamini–Hochberg FDR control over all the model's head × type tests decide the label;
    then the selected heads are ablated (see :class:`LabelConfig`). What each step means: the *Labelling
    heads* page.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        What :func:`probe.models.load` returns (hub id, local directory or ``zoo:NAME``).
    config : LabelConfig, optional
        Probe sets, statistics and ablation; the defaults are ``probe label``'s.
    progress : callable, optional
        Called as ``progress(done, total)`` after each probe batch (ints).
    note : callable, optional
        Called with one-line notes for the user (skipped types, probe-set fallbacks, ablation left out).
    timings : StageTimes, optional
        Receives the wall-clock seconds of each stage (:mod:`probe.heads.stage_times`); they are also in the
        table's ``attrs["stage_seconds"]``.
    copying_of : callable, optional
        Gives the copying scores of a model (default :func:`probe.heads.copying.copying_scores`); ``probe
        label`` passes :func:`probe.runs.weight_cache.cached_copying_scores`, which keeps them across runs.
    memo : callable, optional
        ``memo(key, compute)`` (:data:`~probe.heads.label.config.Memo`): each probe batch's forward (of the
        model and of every twin), each generated type's run per length and each type's ablation is a step
        with a key; ``memo`` returns an earlier result of that key or ``compute()``. ``probe label`` passes
        :class:`probe.runs.steps.StepStore`'s, which journals each step so an interrupted run resumes there.
        Read-back steps equal computed ones, so the table is the same.
    plan : callable, optional
        Called once, before the first forward, with one line: the forward batches to come and what they
        are (``progress`` then counts them).

    Returns
    -------
    pandas.DataFrame
        The label table: one row per (seq_len, layer, head, head_type), columns
        :data:`probe.heads.tables.COLUMNS` in that order; span types (coreference) have one row per head
        (``seq_len`` NaN); accuracy columns are NaN except for accuracy types; unknown values are NaN, never
        0.

    Raises
    ------
    ProbeError
        One line naming the fix: `examples` < 1, an unknown `ablate`, type or coreference set, no asked type
        applies to the model's kind, a `seq_len` beyond the model's positions or too short for repeated
        blocks, a malformed probe file (with its line number).

    Examples
    --------
    >>> loaded = probe.models.load("zoo:induction")
    >>> table = label_model(loaded, LabelConfig(types=("previous_token", "induction")))
    >>> table.loc[table.label, ["head_name", "head_type"]].values.tolist()  # the labelled heads
    [['L0H1', 'previous_token'], ['L1H0', 'induction'], ['L1H1', 'induction'], ['L1H2', 'induction'], ['L1H3',
    'induction']]
    """
    if config.examples < 1:
        raise ProbeError("--examples must be at least 1")
    if config.ablate not in ABLATE:
        raise ProbeError(f"unknown --ablate {config.ablate!r}: choose from {', '.join(ABLATE)}")
    if not 0 <= config.twins <= MAX_TWINS:
        raise ProbeError(f"twins must be 0 to {MAX_TWINS} untrained twins (--control untrained:K or none)")
    if not 0 < config.twin_share <= config.twins + (config.twins == 0):
        raise ProbeError(f"twin_share {config.twin_share} must be above 0 and at most the number of twins "
                         "(each twin then runs every probe)")
    if config.retrieval_mask not in RETRIEVAL_MASKS:
        raise ProbeError(f"unknown --retrieval-mask {config.retrieval_mask!r}: choose from "
                         f"{', '.join(RETRIEVAL_MASKS)}")
    timings = timings if timings is not None else StageTimes()
    stage = timings.stage
    specs = resolve_types(loaded, config, note)
    token_specs = [spec for spec in specs if spec.probe != "spans" and spec.scorer is None]
    span_specs = [spec for spec in specs if spec.probe == "spans"]
    # they build and decode their own probes
    generated_specs = [spec for spec in specs if spec.scorer is not None]
    lengths = resolve_lengths(loaded, config) if token_specs or generated_specs else ()
    with stage("probe sets"):
        # generated: own probes
        source = ProbeSource(loaded, config, note) if token_specs or span_specs else None

    plans = []  # (probe set, seq_len, specs): types that share a probe set share its forwards
    sets = list(dict.fromkeys(source.resolve(spec.probe) for spec in token_specs))  # in registry order
    for seq_len in lengths:
        for probe in sets:
            plans.append(
                (probe, seq_len, [spec for spec in token_specs if source.resolve(spec.probe) == probe]))
    spans = None
    if span_specs:
        with stage("GAP pairs"):
            spans = source.span_probes()
    n_batches = len(batch_slices(config.examples, config.batch_size))
    # span sentences are short: a batch holds as many as the token probes' tokens (batch_size × seq_len)
    span_tokens = config.batch_size * max(lengths, default=0)
    n_span = len(span_slices(spans[1], config.batch_size, span_tokens)) if spans else 0
    total = n_batches * len(plans) + n_span
    # every twin runs a share of the token and span probe sets (LabelConfig.twin_share)
    span_floor = (MIN_TWIN_ACCURACY_PROBES if any(spec.statistic == "accuracy" for spec in span_specs)
                  else MIN_TWIN_PROBES)  # an accuracy needs more pairs than a mean attention
    twin_rows = twin_probes(config.examples, config)
    twin_spans = (evenly_spaced(spans[1], twin_probes(len(spans[1]), config, span_floor))
                  if spans and config.twins else [])
    twin_batches = (len(batch_slices(twin_rows, config.batch_size)) * len(plans)
                    + len(span_slices(twin_spans, config.batch_size, span_tokens)))
    total += config.twins * twin_batches
    total += n_batches * len(lengths) * len(generated_specs)
    done = 0
    with stage("probe sets"):  # all before the plan line: a length too short for a probe set is one line
        built = [source.token_probes(probe, seq_len) for probe, seq_len, _ in plans]
    if plan is not None:
        plan(plan_line(loaded.name, config, total, sets, lengths, n_batches, spans, n_span, config.twins,
                       [spec.name for spec in generated_specs], twin_batches, span_tokens))
    if progress:
        progress(0, total)  # the bar starts before the first forward: its first rate is a real one

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    scored: list[Scored] = []
    probes_used: dict[str, object] = {}  # head type -> its probes at the first length (for the ablation)
    projections = kept_projections(loaded.model) if config.output_share else None
    dla: dict[str, torch.Tensor] = {}  # copying type -> its direct logit attribution [layer head]
    for (probe, seq_len, chosen), probes in zip(plans, built, strict=True):
        for spec in chosen:
            probes_used.setdefault(spec.name, probes)
        # the copying types' attribution rides on these forwards (their probes at the first length)
        copies = [spec.name for spec in chosen if spec.copies and probes_used[spec.name] is probes]
        observer = InductionDLA(loaded) if copies and probes.repeat_start is not None else None
        with stage("forwards"):
            scored.extend(score_token_set(loaded, chosen, probes, source, seq_len, config, tick, projections,
                                          observer, memo, f"model/{probe}@{seq_len}"))
        if observer is not None:
            dla.update({name: observer.result() for name in copies})
    for seq_len in lengths:
        for spec in generated_specs:
            with stage("generation"):
                scored.append(score_generated(loaded, spec, seq_len, config, tick, note, memo,
                                              f"model/{spec.name}@{seq_len}"))
    if spans:
        with stage("forwards"):
            scored.extend(score_span_set(loaded, span_specs, spans[0], spans[1], config, tick, projections,
                                         memo, f"model/spans:{spans[0]}", span_tokens))
        for spec in span_specs:
            probes_used[spec.name] = spans[1]
    twin_scored = score_twins(loaded, config, plans, built, source, spans, twin_rows, twin_spans, span_tokens,
                              span_specs, tick, twin_batches, stage, note, memo)

    with stage("bootstrap"):
        # the bar is a quantile of the twins' point statistics: their intervals are not read (fewer resamples)
        twin_config = replace(config, n_bootstrap=min(config.n_bootstrap, TWIN_BOOTSTRAP))
        bars = untrained_bars([(loaded, found) for found in twin_scored], twin_config)  # same architecture
        table = decide(assemble(loaded, scored, config), config, bars)
    with stage("copying"):
        table = fill_copying(table, *copying_columns(loaded, specs, probes_used, config, note, dla,
                                                     copying_of))
    if projections is not None and projections.missing and note is not None:
        note(f"output_share is NaN for {loaded.name}: no output projection found for "
             f"{', '.join(sorted(projections.missing))} (known: {', '.join(PROJECTION_NAMES)}, or "
             "output.dense)")
    effects = ablation_columns(loaded, table, probes_used, config, note, timings=timings, memo=memo)
    table = merge_ablation(table, effects)
    for spec in generated_specs if config.ablate != "none" else ():
        for seq_len in lengths if spec.verifier is not None else ():
            scores = verified_scores(table, spec.name, float(seq_len), (loaded.n_layers, loaded.n_heads))
            with stage("retrieval ablation"):
                fill_verification(table, spec.name, float(seq_len),
                                  spec.verifier(loaded, seq_len, config, scores))
    table = table.reindex(columns=COLUMNS)
    table.attrs["stage_seconds"] = dict(timings.seconds)  # what probe label's summary line reads
    return table


def score_twins(loaded, config: LabelConfig, plans, built, source, spans, twin_rows: int, twin_spans,
                span_tokens: int, span_specs, tick: Callable[[], None], twin_batches: int, stage, note,
                memo) -> list[list[Scored]]:
    """Every twin's Scored items (as the model's, generated types left out), one twin at a time
    (:func:`probe.untrained.each_twin`: built, run on every probe set, let go); a twin that cannot be built is
    skipped (its batches still tick) and the notes say which controls ran."""
    found: list[list[Scored]] = []
    skipped: list[str] = []
    twins = each_twin(loaded, config.twins, skipped=skipped) if config.twins else iter(())
    while True:
        with stage("untrained twins"):  # building the next twin is part of the control's cost
            twin = next(twins, None)
        if twin is None:
            break
        index = twin_seed(twin) - SEED_BASE  # its seed names its journalled steps
        scored: list[Scored] = []
        with stage("untrained twins"):
            for (probe, seq_len, chosen), probes in zip(plans, built, strict=True):
                scored.extend(score_token_set(twin, chosen, first_probes(probes, twin_rows), source, seq_len,
                                              config, tick, memo=memo, step=f"twin{index}/{probe}@{seq_len}"))
            if spans:
                scored.extend(score_span_set(twin, span_specs, spans[0], twin_spans, config, tick, memo=memo,
                                             step=f"twin{index}/spans:{spans[0]}", tokens=span_tokens))
        found.append(scored)
        del twin
    for _ in range(len(skipped) * twin_batches):
        tick()
    if config.twins and note is not None:
        placed = placement_text(loaded.model)
        line = (f"controls: untrained twins {len(found)} of {config.twins}" + (f", {placed}" * bool(placed))
                if found else f"controls: untrained twins not run ({config.twins} asked)")
        note(line + (f"; not built: {'; '.join(skipped)}" if skipped else ""))
    return found


def plan_line(model: str, config: LabelConfig, total: int, sets, lengths, n_batches: int, spans, n_span: int,
              twins: int, generated: list[str], twin_batches: int = 0, span_tokens: int = 0) -> str:
    """What a labelling run is about to do, in one line: "zoo:x: 249 forward batches of up to 8 probes —
    24 on 3 token probe set(s) (natural, brackets, repeated) of 64 probes at 128 tokens; 225 on 1,799 gap span
    examples, short ones packed up to 1,024 tokens a batch"."""
    parts = []
    if sets and lengths:
        parts.append(f"{n_batches * len(sets) * len(lengths)} on {len(sets)} token probe set(s) "
                     f"({', '.join(sets)}) of {config.examples} probes at {', '.join(map(str, lengths))} "
                     "tokens")
    if spans:
        packed = f", short ones packed up to {span_tokens:,} tokens a batch" if span_tokens else ""
        parts.append(f"{n_span} on {len(spans[1]):,} {spans[0]} span examples{packed}")
    if generated:
        parts.append(f"{n_batches * len(lengths) * len(generated)} generating ({', '.join(generated)})")
    if twins:
        share = config.twin_share / twins
        parts.append(f"{twins * twin_batches} on {twins} untrained twin(s), each on {share:.0%} of the token "
                     "and span probes (at least 4 a set)")
    return f"{model}: {total} forward batches of up to {config.batch_size} probes — " + "; ".join(parts)


def copying_columns(loaded, specs, probes_used: dict[str, object], config: LabelConfig,
                    note: Note | None = None, known: dict[str, torch.Tensor] | None = None,
                    copying_of: Callable[[object], CopyingScores] | None = None,
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Elhage et al.'s copying score of every head `[layer head]` (:mod:`probe.heads.copying`; NaN with a note
    where the weights are unknown) and, per copying type scored on repeated blocks, the direct logit
    attribution to its targets' tokens (:mod:`probe.heads.direct_logit`)."""
    copying = (copying_of or copying_scores)(loaded)  # a weight-only stage: probe label caches it
    if copying.note is not None and note is not None:
        note(copying.note)
    known = known or {}  # attributions already reduced from the scoring forwards
    dla = {spec.name: known[spec.name] if spec.name in known else
           induction_dla(loaded, probes_used[spec.name], config.batch_size)
           for spec in specs if spec.copies and spec.name in probes_used}
    return copying.scores, dla



__all__ = ["ABLATE", "COREF_SETS", "DEFAULT_SEQ_LEN", "NOT_IDENTITY", "SINK_SHARE", "LabelConfig", "Note",
           "Progress", "ProbeSource", "Scored", "TokenProbeSet", "config_identity", "default_seq_len",
           "is_text_model", "label_model", "resolve_lengths", "resolve_types", "roles", "score_generated",
           "score_span_set", "score_token_set", "StageTimes", "summarise", "summary_lines"]
