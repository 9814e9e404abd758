"""From a loaded model to a labelled table: probe sets, streamed scores, the label rule, ablations.

:func:`label_model` loops over the head-type specs of :mod:`probe.heads.registry` (never over type names):

1. **Probe sets** per length: natural text (GAP passages, :mod:`probe.heads.corpus`) for the "natural" and "sentences"
   types of a text model whose tokenizer reads the corpus — random-token probes otherwise (repeated blocks; random
   sentences; the zoo's toy vocabularies, protein models); natural text (or random tokens) with a seeded nested-bracket
   word for the "brackets" types; repeated random blocks, drawn by the corpus' token frequencies, for the "repeated"
   types; span examples for the span types, once: every GAP development pair that fits the model (cropped to whole
   sentences where needed) by default, else the templates (agreement, or implicit causality), or the user's file.
2. **Scores** streamed from the capture engine (:class:`probe.heads.scores.ScoreSink`), every type of a probe set in one
   forward. Generation-scored types (a spec with a ``scorer``, e.g. retrieval) build, decode and score their own probes
   per length and hand back per-example scores and chance (:class:`probe.heads.registry.GeneratedScores`).
3. **Statistics** (:mod:`probe.heads.stats`): chance, clustered bootstrap interval, a one-sided test of the effect over
   ``min_effect`` (mass types: score − chance; accuracy types: paired accuracy gain over the best baseline),
   Benjamini–Hochberg over all the model's head × type tests; label = q ≤ ``fdr``. Types with candidates
   (fixed_offset) choose each head's candidate on half of the examples and are tested on the other half.
4. **Output share** (Kobayashi et al. 2020, streamed with the scores): the share of each head's output norm that comes
   from its targets (``output_share``); a label below :data:`SINK_SHARE` has ``role`` "sink", others "function".
5. **Ablation** (:mod:`probe.heads.ablation`): each labelled head's effect on its type's own loss, against random heads of
   the same layer where possible (``ablation_effect``, ``ablation_z``), and each (type, layer) with ≥ 2 labelled
   heads ablated together against random groups of the same size (``group_effect``, ``group_z``).

The table's schema is :data:`probe.heads.tables.COLUMNS` (docs/labels.md, "Labelling heads").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch

from probe.engine.output_norms import PROJECTION_NAMES, OutputProjections
from probe.errors import ProbeError
from probe.heads import stats
from probe.heads.probesets import (
    CausalityVocabulary,
    CorefVocabulary,
    EncodedSpanExample,
    bracket_probes,
    causality_examples,
    coreference_examples,
    delimiter_ids,
    encode_span_example,
    load_probe_file,
    pad_span_batch,
    random_sentences,
    repeated_blocks,
    token_classes,
    without_tokens,
)
from probe.heads.registry import (
    REGISTRY,
    SMALL_VOCABULARY,
    HeadType,
    HeadTypeSpec,
    TargetContext,
    TokenClasses,
    types_for_kind,
)
from probe.heads.scores import ScoreSink, TypeScores, run_sink, span_words
from probe.heads.stats import uniform_chance
from probe.heads.tables import COLUMNS
from probe.models import ModelKind

# Default probe length, capped by the model's positions: the length most pre-training and fine-tuning of
# encoder and decoder models used (BERT's 90 % phase, sentence-transformers' fine-tuning), and about one GAP passage.
# Labels measured beyond a model's training length describe its extrapolation, not its ordinary behaviour (docs/labels.md).
DEFAULT_SEQ_LEN = 128
COREF_SETS = ("auto", "gap", "templates", "causality")
ABLATE = ("labelled", "all", "none")


@dataclass(frozen=True)
class LabelConfig:
    """How heads are probed and labelled (frozen). The ``probe label`` flags mirror these fields.

    Attributes
    ----------
    types : tuple of str, or None
        Head types to score (names in :data:`probe.heads.registry.REGISTRY`); None: every type that applies to the
        model's kind (``--types``).
    examples : int, default 64
        Probe examples per probe set: natural-text and repeated-block probes, coreference examples (``--examples``).
    seq_len : int, tuple of int, or None
        Tokens per probe, one length or several (one row per length, and ``stable`` compares them); None:
        min(128, the model's positions) (``--seq-len``).
    seed : int, default 0
        Seeds the probe sets, the bootstrap and the ablation controls (``--seed``).
    probe_file : str or None
        JSONL file of span examples scored as coreference instead of GAP / the templates (``--probe-file``).
    coref_set : {"auto", "gap", "templates"}, default "auto"
        Coreference examples: GAP when the tokenizer reads English, else the templates (``--coref-set``).
    batch_size : int, default 8
        Probe examples per forward pass (``--batch-size``; not part of a run's identity).
    n_bootstrap : int, default 1000
        Clustered bootstrap resamples (``--bootstrap``).
    confidence : float, default 0.95
        Coverage of the interval ``[ci_low, ci_high]``.
    min_effect : float, default 0.25
        Mass types: H0 is score − chance ≤ `min_effect` (``--min-effect``).
    min_accuracy_gain : float, default 0.1
        Accuracy types: H0 is the paired accuracy gain over the best baseline ≤ `min_accuracy_gain`
        (``--min-accuracy-gain``).
    fdr : float, default 0.05
        A head is labelled when its Benjamini–Hochberg q-value ≤ `fdr` (``--fdr``).
    ablate : {"labelled", "all", "none"}, default "labelled"
        Heads that get the ``ablation_effect`` / ``ablation_z`` columns (``--ablate``).
    ablation_examples : int, default 16
        Probe examples per type used for the ablation.
    ablation_controls : int, default 8
        Random same-layer heads each ablation is compared with.
    block_bytes : int, default 8 MiB
        Memory budget of one streamed α block, all heads of a layer (not part of a run's identity).
    """

    types: tuple[HeadType, ...] | None = None  # head types to score; None: every type that applies to the model
    examples: int = 64  # probe examples per token probe set and per template set (GAP: every pair that fits)
    seq_len: int | tuple[int, ...] | None = None  # tokens per probe, one or several; None: min(128, positions)
    seed: int = 0  # seeds the probe sets, the bootstrap and the ablation controls
    probe_file: str | None = None  # JSONL of span examples scored as coreference instead of GAP / templates
    coref_set: str = "auto"  # auto (GAP when the tokenizer reads it and a pair fits, else templates) | gap | templates
    # | causality (implicit-causality templates; auto picks them for a tokenizer that reads them but not the others)
    batch_size: int = 8  # probe examples per forward
    n_bootstrap: int = 1000  # clustered bootstrap resamples
    confidence: float = 0.95  # width of the interval [ci_low, ci_high]
    min_effect: float = 0.25  # mass types: H0 is score − chance ≤ min_effect
    min_accuracy_gain: float = 0.1  # accuracy types: H0 is accuracy − best baseline ≤ min_accuracy_gain (paired)
    fdr: float = 0.05  # label when the Benjamini–Hochberg q-value ≤ fdr
    ablate: str = "labelled"  # ablation column for: labelled heads | all heads | none
    ablation_examples: int = 16  # probe examples per type used for ablation
    ablation_controls: int = 8  # random control heads (same layer where possible) / control groups per ablation
    output_share: bool = True  # also measure each head's output share (Kobayashi et al. 2020) and its role
    block_bytes: int = 8 * 2**20  # memory budget of one streamed α block (all heads of a layer)

    @property
    def lengths(self) -> tuple[int, ...] | None:
        if self.seq_len is None:
            return None
        return (self.seq_len,) if isinstance(self.seq_len, int) else tuple(self.seq_len)


# LabelConfig fields that do not change the rows (so they are not part of a run's identity)
NOT_IDENTITY = ("batch_size", "block_bytes")


def config_identity(config: LabelConfig) -> dict[str, object]:
    """The fields of `config` that determine the label rows, with the probe file by its content hash (for
    probe.runs.journal identities: a rerun reuses rows only when this and the model's revision are the same)."""
    from probe.hashing import file_hash

    options = {key: value for key, value in asdict(config).items() if key not in NOT_IDENTITY}
    options["probe_file"] = file_hash(config.probe_file) if config.probe_file else None
    return options


Note = Callable[[str], None]
Progress = Callable[[int, int], None]


# ---------------------------------------------------------------------------------------------------------------
# Which types, which lengths, which probes
# ---------------------------------------------------------------------------------------------------------------


def resolve_types(loaded, config: LabelConfig, note: Note | None = None) -> tuple[HeadTypeSpec, ...]:
    """The specs to score on this model: the asked types (all by default) that apply to its kind; the others are
    skipped with one note."""
    if config.types is not None:
        for name in config.types:
            if name not in REGISTRY:
                raise ProbeError(f"unknown head type {name!r}: choose from {', '.join(REGISTRY)}")
    # registered types too; opt-in types (spec.default False, e.g. retrieval) only when asked for
    asked = tuple(name for name, spec in REGISTRY.items() if spec.default) if config.types is None else tuple(config.types)
    kept = types_for_kind(loaded.kind, asked)
    skipped = [name for name in asked if name not in kept]
    explicit = config.types is not None or not is_text_model(loaded)  # by default a causal LM just has no next_token
    if skipped and explicit and note is not None:
        note(f"{loaded.name} is a {loaded.kind.description}: skipped {', '.join(skipped)} (not defined for it)")
    if not kept:
        raise ProbeError(f"none of the types {', '.join(asked)} applies to {loaded.name} ({loaded.kind.description})")
    return tuple(REGISTRY[name] for name in kept)


def default_seq_len(loaded) -> int:
    """min(DEFAULT_SEQ_LEN, the model's positions)."""
    return min(DEFAULT_SEQ_LEN, loaded.max_tokens)


def resolve_lengths(loaded, config: LabelConfig) -> tuple[int, ...]:
    """The probe lengths (config.seq_len checked against the model's positions, or the default)."""
    lengths = config.lengths or (default_seq_len(loaded),)
    for length in lengths:
        if length < 1:
            raise ProbeError("--seq-len must be a positive number of tokens")
        if length > loaded.max_tokens:
            raise ProbeError(f"--seq-len {length} is beyond {loaded.name}'s {loaded.max_tokens} positions; "
                             f"use --seq-len {loaded.max_tokens} or less")
    return tuple(dict.fromkeys(lengths))


def is_text_model(loaded) -> bool:
    return loaded.kind != ModelKind.PROTEIN_MLM


@dataclass(frozen=True)
class TokenProbeSet:
    """One batch-able set of token probes with what the targets and the bootstrap need."""

    name: str  # "natural" | "repeated": the probe_set column
    input_ids: torch.Tensor  # [example seq]
    cluster: torch.Tensor  # [example]
    repeat_start: torch.Tensor | None = None  # [example]
    repeat_len: torch.Tensor | None = None  # [example]


class ProbeSource:
    """Builds a model's probe sets (the corpus is tokenized once per model)."""

    def __init__(self, loaded, config: LabelConfig, note: Note | None = None) -> None:
        from probe.heads import corpus

        self.loaded, self.config = loaded, config
        self.sample = None  # the first SAMPLE_PASSAGES passages: coverage and token frequencies
        self._passages = None  # every passage, tokenized when natural-text probes are first needed
        self.natural = False
        if is_text_model(loaded):
            tokens = corpus.tokenize_corpus(loaded.tokenizer, limit=corpus.SAMPLE_PASSAGES)
            if corpus.covers(tokens):
                self.sample, self.natural = tokens, True
            elif note is not None:
                note(f"{loaded.name}'s tokenizer reads {tokens.unknown_share:.0%} of the natural-text corpus as "
                     "unknown: natural-text types are scored on random-token probes, coreference on the templates")
        from probe.heads.corpus import token_weights

        self.weights = token_weights(loaded.tokenizer, self.sample)
        self.vocabulary = int((self.weights > 0).sum())
        self.delimiters = delimiter_ids(loaded.tokenizer)
        self.classes = token_classes(loaded.tokenizer) if is_text_model(loaded) else TokenClasses()
        self.note = note

    def resolve(self, probe: str) -> str:
        """The probe set a spec's probe kind gets on this model. Where the tokenizer reads the corpus: natural text
        ("natural", "sentences") and natural text with seeded brackets ("brackets"); elsewhere random tokens:
        repeated blocks, random sentences, random tokens with seeded brackets."""
        if probe in ("natural", "sentences"):
            return "natural" if self.natural else ("repeated" if probe == "natural" else "random-sentences")
        if probe == "brackets":
            return "brackets" if self.natural else "random-brackets"
        return probe

    def _natural(self, seq_len: int):
        from probe.heads.corpus import natural_text, tokenize_corpus

        if self._passages is None:
            self._passages = tokenize_corpus(self.loaded.tokenizer)
        return natural_text(self.loaded.tokenizer, self._passages, self.config.examples, seq_len, self.config.seed)

    def token_probes(self, probe: str, seq_len: int) -> TokenProbeSet:
        """The probe set `probe` (a name :meth:`resolve` returns) of `seq_len` tokens."""
        config, tokenizer = self.config, self.loaded.tokenizer
        n = config.examples
        if probe == "natural":
            text = self._natural(seq_len)
            return TokenProbeSet("natural", text.input_ids, text.cluster)
        if probe == "brackets":
            text = self._natural(seq_len)
            ids = bracket_probes(tokenizer, self.classes, text.input_ids, config.seed)
            return TokenProbeSet("brackets", ids, text.cluster)
        if probe == "random-brackets":
            weights = without_tokens(self.weights, set().union(*self.classes.openers, *self.classes.closers))
            content = repeated_blocks(tokenizer, n, seq_len, config.seed, weights=weights).input_ids
            ids = bracket_probes(tokenizer, self.classes, content, config.seed)
            return TokenProbeSet("random-brackets", ids, torch.arange(n))
        if probe == "random-sentences":
            ids = random_sentences(tokenizer, self.classes, n, seq_len, config.seed, self.weights)
            return TokenProbeSet("random-sentences", ids, torch.arange(n))
        blocks = repeated_blocks(tokenizer, n, seq_len, config.seed, weights=self.weights)
        return TokenProbeSet("repeated", blocks.input_ids, torch.arange(n), blocks.offset, blocks.block_len)

    def span_probes(self) -> tuple[str, list[EncodedSpanExample]]:
        """The span probe set: the user's file, GAP (every development pair that fits the model, cropped to whole
        sentences where needed), or a template set; notes say what was cropped, dropped or fallen back to."""
        config, loaded = self.config, self.loaded
        if config.coref_set not in COREF_SETS:
            raise ProbeError(f"unknown coreference set {config.coref_set!r}: choose from {', '.join(COREF_SETS)}")
        if config.probe_file is not None:
            encoded = [encode_span_example(example, loaded.tokenizer) for example in load_probe_file(config.probe_file)]
            for example in encoded:
                loaded.check_length(len(example.input_ids), example.source or "a coreference probe")
            return "file", encoded
        if config.coref_set == "gap" or (config.coref_set == "auto" and self.natural):
            found = self._gap()
            if found is not None:
                return "gap", found
        name = config.coref_set if config.coref_set in ("templates", "causality") else self._template_set()
        make = causality_examples if name == "causality" else coreference_examples
        encoded = [encode_span_example(e.to_span_example(), loaded.tokenizer) for e in make(config.examples, config.seed)]
        for example in encoded:
            loaded.check_length(len(example.input_ids), example.source or "a coreference probe")
        return name, encoded

    def _gap(self) -> list[EncodedSpanExample] | None:
        """Every GAP development pair that fits the model (cropped where needed); None (auto: with a note) when none
        fits; ProbeError for an explicit --coref-set gap."""
        from probe.heads.corpus import fit_gap_examples

        loaded = self.loaded
        fitted = fit_gap_examples(loaded.tokenizer, loaded.max_tokens)
        encoded = [encode_span_example(example, loaded.tokenizer) for example in fitted.examples]
        if self.note is not None and (fitted.cropped or fitted.dropped):
            self.note(f"GAP: {len(encoded)} of {fitted.total} development pairs fit {loaded.name}'s "
                      f"{loaded.max_tokens} positions ({fitted.cropped} cropped to whole sentences around the pronoun "
                      f"and both names, {fitted.dropped} dropped: no such window fits)")
        if encoded:
            return sorted(encoded, key=lambda e: len(e.input_ids))  # batches of similar length: little padding
        if self.config.coref_set == "gap":
            raise ProbeError(f"no GAP pair fits {loaded.name}'s {loaded.max_tokens} positions, not even cropped to the "
                             "sentences around its pronoun and names; use --coref-set templates")
        if self.note is not None:
            self.note(f"no GAP pair fits {loaded.name}'s {loaded.max_tokens} positions: coreference is scored on the "
                      "templates")
        return None

    def _template_set(self) -> str:
        """auto without GAP: the agreement templates, unless the tokenizer reads the implicit-causality vocabulary
        but not theirs (the implicit-causality organism)."""
        unknown = self.loaded.tokenizer.unk_token_id

        def reads(words: list[str]) -> bool:
            ids = self.loaded.tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
            return unknown is None or unknown not in ids

        if not reads(CorefVocabulary().words()) and reads(CausalityVocabulary().words()):
            return "causality"
        return "templates"


def _batches(total: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


def _key(spec: HeadTypeSpec, candidate) -> str:
    return spec.name if candidate is None else f"{spec.name}@{candidate}"


# ---------------------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------------------


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


def score_token_set(loaded, specs: Sequence[HeadTypeSpec], probes: TokenProbeSet, source: ProbeSource,
                    seq_len: int, config: LabelConfig, tick: Callable[[], None],
                    projections: OutputProjections | None = None) -> list[Scored]:
    """Stream every spec's targets on one token probe set, one forward per batch (with `projections`: also the
    output shares)."""
    causal = not _bidirectional(loaded)
    restrict = source.vocabulary < SMALL_VOCABULARY
    parts = {spec.name: {} for spec in specs}
    chances = {spec.name: {} for spec in specs}
    for rows in _batches(len(probes.input_ids), config.batch_size):
        input_ids = probes.input_ids[rows]  # [batch seq]
        lengths = torch.full((input_ids.shape[0],), input_ids.shape[1])
        ctx = TargetContext(input_ids, causal=causal, delimiter_ids=source.delimiters, classes=source.classes,
                            repeat_start=None if probes.repeat_start is None else probes.repeat_start[rows],
                            repeat_len=None if probes.repeat_len is None else probes.repeat_len[rows],
                            restrict_to_repeat=restrict and probes.repeat_start is not None)
        patterns = {}
        for spec in specs:
            for candidate, pattern in spec.targets(ctx).items():
                patterns[_key(spec, candidate)] = pattern
                chances[spec.name].setdefault(candidate, []).append(uniform_chance(pattern, lengths, causal))
        sink = ScoreSink(patterns, lengths, loaded.n_layers, loaded.n_heads, device=loaded.device,
                         output_projections=projections)
        del patterns
        run_sink(loaded.model, sink, input_ids, block_bytes=config.block_bytes)
        result = sink.result()
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


def score_span_set(loaded, specs: Sequence[HeadTypeSpec], name: str, examples: list[EncodedSpanExample],
                   config: LabelConfig, tick: Callable[[], None],
                   projections: OutputProjections | None = None) -> list[Scored]:
    """Stream every span spec's targets and the word-level accuracy on the span examples."""
    causal = not _bidirectional(loaded)
    parts = {spec.name: [] for spec in specs}
    chances = {spec.name: [] for spec in specs}
    for rows in _batches(len(examples), config.batch_size):
        batch = pad_span_batch(examples[rows], loaded.tokenizer.pad_token_id or 0)
        lengths = batch.attention_mask.sum(-1)  # [batch]
        ctx = TargetContext(batch.input_ids, causal=causal, spans=batch.examples)
        patterns = {spec.name: spec.targets(ctx)[None] for spec in specs}
        for spec in specs:
            chances[spec.name].append(uniform_chance(patterns[spec.name], lengths, causal))
        sink = ScoreSink(patterns, lengths, loaded.n_layers, loaded.n_heads, words=span_words(batch),
                         device=loaded.device, output_projections=projections)
        run_sink(loaded.model, sink, batch.input_ids, batch.attention_mask, block_bytes=config.block_bytes)
        for spec_name, scores in sink.result().items():
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
                    note: Note | None = None) -> Scored:
    """A generation-scored type (spec.scorer) on its own probes of `seq_len` tokens, as a mass type's Scored."""
    result = spec.scorer(loaded, seq_len, config, tick)
    counted = int((~torch.isnan(result.chance)).sum())
    if note is not None and counted < len(result.chance):
        task = "" if result.recall is None else f", mean task recall {float(result.recall.mean()):.2f}"
        note(f"{loaded.name} · {spec.name} @{seq_len}: {counted} of {len(result.chance)} probes count{task}; the rest "
             "are left out" + (" — no score" if counted == 0 else ""))
    tl = torch.full_like(result.score, math.nan)  # TransformerLens' score is not defined for it
    return Scored(spec, result.probe_set, float(seq_len), [None], {None: TypeScores(spec.name, result.score, tl)},
                  {None: result.chance}, result.cluster)


def _bidirectional(loaded) -> bool:
    return loaded.kind != ModelKind.CAUSAL_LM


# ---------------------------------------------------------------------------------------------------------------
# Statistics per type (pure: tensors in, per-head summaries out)
# ---------------------------------------------------------------------------------------------------------------


def summarise(scored: Scored, config: LabelConfig) -> dict[str, torch.Tensor | float | str | list]:
    """Score, interval, chance, effect and p-value per head `[layer head]` for one type on one probe set."""
    n_examples = len(scored.cluster)
    select, test = (stats.selection_split(n_examples) if len(scored.candidates) > 1
                    else (torch.ones(n_examples, dtype=torch.bool),) * 2)
    score_all = torch.stack([scored.scores[c].score for c in scored.candidates])  # [candidate example layer head]
    chance_all = torch.stack([scored.chance[c] for c in scored.candidates])  # [candidate example]
    effects = score_all - chance_all[:, :, None, None]  # [candidate example layer head]
    choice = stats.choose_candidate(effects[:, select])  # [layer head]
    pick = choice[None, None].expand(1, n_examples, *choice.shape)  # [1 example layer head]
    score = score_all.gather(0, pick)[0][test]  # [example layer head]
    chance = chance_all[:, :, None, None].expand_as(score_all).gather(0, pick)[0][test]  # [example layer head]
    tl = torch.stack([scored.scores[c].tl_score for c in scored.candidates]).gather(0, pick)[0][test]
    cluster = scored.cluster[test]
    weights = stats.resample_weights(cluster, config.n_bootstrap, config.seed)  # [resample example]
    low, high = stats.percentile_interval(stats.bootstrap_means(score, weights), config.confidence)
    effect = score - chance  # [example layer head]
    effect_means = stats.bootstrap_means(effect, weights)  # [resample layer head]
    out = dict(score=torch.nanmean(score, 0), ci_low=low, ci_high=high, chance=torch.nanmean(chance, 0),
               effect=torch.nanmean(effect, 0), tl_score=torch.nanmean(tl, 0),
               n_examples=int((~torch.isnan(score[:, 0, 0])).sum()), n_clusters=int(len(torch.unique(cluster))))
    out["p_value"] = stats.p_greater(out["effect"], _std(effect_means), config.min_effect)
    if scored.scores[scored.candidates[0]].output_share is not None:
        out.update(_share_summary(scored, pick, test, weights, config))
    if scored.spec.candidate is not None:
        candidates = torch.tensor(scored.candidates, dtype=torch.float64)
        out[scored.spec.candidate] = candidates[choice]
    correct = scored.scores[scored.candidates[0]].correct
    if scored.spec.statistic == "accuracy" and correct is not None:
        out.update(_accuracy_summary(correct, scored, weights, config))
    # Untestable where the examples with a value come from a single cluster: the bootstrap has no spread, and
    # p_greater would let the estimate decide alone (p = 0). NaN p -> NaN q -> no label.
    testable = stats.clusters_present(effect, cluster) >= stats.MIN_CLUSTERS  # [layer head]
    out["p_value"] = torch.where(testable, out["p_value"], torch.nan)
    return out


def _share_summary(scored: Scored, pick: torch.Tensor, test: torch.Tensor, weights: torch.Tensor,
                   config: LabelConfig) -> dict[str, torch.Tensor]:
    """output_share of the chosen candidate, averaged like the score (same test examples), with its clustered
    bootstrap interval (the same resamples)."""
    shares = torch.stack([scored.scores[c].output_share for c in scored.candidates])  # [candidate example layer head]
    share = shares.gather(0, pick)[0][test]  # [example layer head]
    low, high = stats.percentile_interval(stats.bootstrap_means(share, weights), config.confidence)
    return dict(output_share=torch.nanmean(share, 0), output_share_low=low, output_share_high=high)


def _std(means: torch.Tensor) -> torch.Tensor:
    """Standard deviation over resamples (NaN resamples left out)."""
    centred = means - torch.nanmean(means, 0, keepdim=True)
    return torch.sqrt(torch.nanmean(centred**2, 0))


def _accuracy_summary(correct: torch.Tensor, scored: Scored, weights: torch.Tensor, config: LabelConfig) -> dict:
    """Accuracy with its interval, the best baseline, the paired test of the gain over it, per-source accuracy."""
    low, high = stats.percentile_interval(stats.bootstrap_means(correct, weights), config.confidence)
    out = dict(accuracy=correct.mean(0), accuracy_ci_low=low, accuracy_ci_high=high)
    out["_groups"] = list(dict.fromkeys(scored.groups or []))
    complete = {name: values for name, values in (scored.baselines or {}).items() if not torch.isnan(values).any()}
    if complete:
        best = max(complete, key=lambda name: float(complete[name].mean()))
        baseline = complete[best]  # [example]
        gain = correct - baseline[:, None, None]  # [example layer head] paired on the same examples
        out.update(baseline=best, baseline_accuracy=float(baseline.mean()), effect=gain.mean(0))
        out["p_value"] = stats.p_greater(gain.mean(0), _std(stats.bootstrap_means(gain, weights)),
                                         config.min_accuracy_gain)
    return out


def _per_group(correct: torch.Tensor, groups: list[str], order: list[str]) -> list[str]:
    """Per head, "group: accuracy; …" over the example groups in `order` (correct [example layer head]): one
    string per (layer, head), row-major."""
    labels = torch.tensor([order.index(group) for group in groups])  # [example]
    means = [correct[labels == index].mean(0).reshape(-1).tolist() for index in range(len(order))]  # [group][row]
    return ["; ".join(f"{group}: {float(values[row]):.2f}" for group, values in zip(order, means, strict=True))
            for row in range(correct[0].numel())]


# ---------------------------------------------------------------------------------------------------------------
# label_model
# ---------------------------------------------------------------------------------------------------------------


def label_model(
    loaded,
    config: LabelConfig = LabelConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Progress | None = None,  # called with (batches done, batches in all)
    note: Note | None = None,  # one-line notes for the user (skipped types, probe fallbacks, ablation)
) -> pd.DataFrame:
    """Score every head of a loaded model on the probe sets and label it.

    Every type of a probe set is scored in the same forward passes (streamed by the capture engine, no
    ``[layer, head, N, N]`` tensor); chance, a clustered bootstrap interval, a one-sided test over `min_effect`
    and a Benjamini–Hochberg FDR control over all the model's head × type tests decide the label; then the
    selected heads are ablated (see :class:`LabelConfig`). What each step means: the *Labelling heads* page.

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

    Returns
    -------
    pandas.DataFrame
        The label table: one row per (seq_len, layer, head, head_type), columns
        :data:`probe.heads.tables.COLUMNS` in that order; span types (coreference) have one row per head
        (``seq_len`` NaN); accuracy columns are NaN except for accuracy types; unknown values are NaN, never 0.

    Raises
    ------
    ProbeError
        One line naming the fix: `examples` < 1, an unknown `ablate`, type or coreference set, no asked type
        applies to the model's kind, a `seq_len` beyond the model's positions or too short for repeated blocks, a
        malformed probe file (with its line number).

    Examples
    --------
    >>> loaded = probe.models.load("zoo:induction")
    >>> table = label_model(loaded, LabelConfig(types=("previous_token", "induction")))
    >>> table.loc[table.label, ["head_name", "head_type"]].values.tolist()  # the labelled heads
    [['L0H1', 'previous_token'], ['L1H0', 'induction'], ['L1H1', 'induction'], ['L1H2', 'induction'], ['L1H3', 'induction']]
    """
    if config.examples < 1:
        raise ProbeError("--examples must be at least 1")
    if config.ablate not in ABLATE:
        raise ProbeError(f"unknown --ablate {config.ablate!r}: choose from {', '.join(ABLATE)}")
    specs = resolve_types(loaded, config, note)
    token_specs = [spec for spec in specs if spec.probe != "spans" and spec.scorer is None]
    span_specs = [spec for spec in specs if spec.probe == "spans"]
    generated_specs = [spec for spec in specs if spec.scorer is not None]  # they build and decode their own probes
    lengths = resolve_lengths(loaded, config) if token_specs or generated_specs else ()
    source = ProbeSource(loaded, config, note) if token_specs or span_specs else None  # generated: their own probes

    plans = []  # (probe set, seq_len, specs): types that share a probe set share its forwards
    sets = list(dict.fromkeys(source.resolve(spec.probe) for spec in token_specs))  # in registry order
    for seq_len in lengths:
        for probe in sets:
            plans.append((probe, seq_len, [spec for spec in token_specs if source.resolve(spec.probe) == probe]))
    spans = source.span_probes() if span_specs else None
    n_batches = len(_batches(config.examples, config.batch_size))
    total = n_batches * len(plans) + (len(_batches(len(spans[1]), config.batch_size)) if spans else 0)
    total += n_batches * len(lengths) * len(generated_specs)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    scored: list[Scored] = []
    probes_used: dict[str, object] = {}  # head type -> its probes at the first length (for the ablation)
    projections = OutputProjections(loaded.model) if config.output_share else None
    for probe, seq_len, chosen in plans:
        probes = source.token_probes(probe, seq_len)
        for spec in chosen:
            probes_used.setdefault(spec.name, probes)
        scored.extend(score_token_set(loaded, chosen, probes, source, seq_len, config, tick, projections))
    for seq_len in lengths:
        for spec in generated_specs:
            scored.append(score_generated(loaded, spec, seq_len, config, tick, note))
    if spans:
        scored.extend(score_span_set(loaded, span_specs, spans[0], spans[1], config, tick, projections))
        for spec in span_specs:
            probes_used[spec.name] = spans[1]

    table = _table(loaded, scored, config)
    table["q_value"] = stats.benjamini_hochberg(torch.tensor(table["p_value"].to_numpy(dtype=float))).numpy()
    table["label"] = (table["q_value"] <= config.fdr).fillna(False).astype(bool)
    agree = table.groupby(["layer", "head", "head_type"])["label"].transform("nunique")
    table["stable"] = agree.eq(1)
    table["role"] = roles(table)
    if projections is not None and projections.missing and note is not None:
        note(f"output_share is NaN for {loaded.name}: no output projection found for "
             f"{', '.join(sorted(projections.missing))} (known: {', '.join(PROJECTION_NAMES)}, or output.dense)")
    from probe.heads.label_ablation import ablation_columns, merge_ablation

    effects = ablation_columns(loaded, table, probes_used, config, note)
    return merge_ablation(table, effects).reindex(columns=COLUMNS)


SINK_SHARE = 0.1  # a label whose output share is below this is a "sink": attended to, but it adds almost nothing


def roles(table: pd.DataFrame) -> pd.Series:
    """Per row: "sink" for a label whose output_share < SINK_SHARE, "function" for the other labels, NaN for
    unlabelled rows and where output_share is NaN (not measured, or the output projection is unknown)."""
    if "output_share" not in table:
        return pd.Series([math.nan] * len(table), index=table.index)
    share = pd.to_numeric(table["output_share"], errors="coerce")
    labelled = table["label"].astype(bool)
    values = ["sink" if is_label and value < SINK_SHARE else "function" if is_label and value >= SINK_SHARE
              else math.nan for is_label, value in zip(labelled, share, strict=True)]
    return pd.Series(values, index=table.index)  # float NaN when no row has a role, else object


def _table(loaded, scored: list[Scored], config: LabelConfig) -> pd.DataFrame:
    """One row per (layer, head) of every scored type, built column by column (a [layer head] tensor becomes one
    column, row-major: layer 0's heads first), in :data:`COLUMNS` order."""
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    n_rows = n_layers * n_heads
    layers = np.repeat(np.arange(n_layers), n_heads)  # [row]
    heads = np.tile(np.arange(n_heads), n_layers)  # [row]
    names = [loaded.head_name(layer, head) for layer, head in zip(layers.tolist(), heads.tolist(), strict=True)]
    parts = []
    for item in scored:
        summary = summarise(item, config)
        groups = summary.pop("_groups", [])
        columns: dict[str, object] = {"model": loaded.name, "revision": loaded.revision, "layer": layers,
                                      "head": heads, "head_name": names, "head_type": item.spec.name,
                                      "probe_set": item.probe_set,
                                      "seq_len": math.nan if item.seq_len is None else item.seq_len,
                                      "seed": config.seed}
        for key, value in summary.items():
            if isinstance(value, torch.Tensor):  # [layer head] -> [row]
                columns[key] = value.reshape(n_rows).double().numpy()
            else:
                columns[key] = [value] * n_rows
        correct = item.scores[None].correct if item.spec.statistic == "accuracy" and None in item.scores else None
        if correct is not None and groups:
            columns["accuracy_by_source"] = _per_group(correct, item.groups, groups)
        parts.append(pd.DataFrame(columns, index=range(n_rows)))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(table) and len(loaded.attention_layers) < n_layers:  # a hybrid: only the layers with α have real heads
        table = table[table["layer"].isin(loaded.attention_layers)].reset_index(drop=True)
    later = ("q_value", "label", "stable", "role")
    return table.reindex(columns=[c for c in COLUMNS if c not in later] + list(later))


def summary_lines(table: pd.DataFrame) -> list[str]:
    """"model · type: N of M heads (L0H1, ...)" for every model, length and type of a table (for stderr); fixed-offset
    heads show their offset, heads whose label flips between lengths are marked "(unstable)", labels whose
    output share is below SINK_SHARE "(sink)"; "N sinks" counts them, and each ablated group adds
    "together L1H0 L1H1 …: +6.39 nats (z 1.2)"."""
    lines = []
    lengths = table["seq_len"].dropna().unique()
    for model, rows in table.groupby("model", sort=False):
        for (seq_len, head_type), group in rows.groupby([rows["seq_len"].fillna(-1), "head_type"], sort=False):
            labelled = group[group["label"].astype(bool)]
            roles_of = labelled["role"] if "role" in labelled else pd.Series([math.nan] * len(labelled))
            names = [name + (f"({int(offset):+d})" if offset == offset else "") +
                     ("" if bool(stable) else " (unstable)") + (" (sink)" if kind == "sink" else "")
                     for name, offset, stable, kind in zip(labelled["head_name"], labelled["offset"],
                                                           labelled["stable"].fillna(True), roles_of, strict=True)]
            more = " ..." if len(names) > 12 else ""
            at = f" @{int(seq_len)}" if len(lengths) > 1 and seq_len >= 0 else ""
            sinks = int((roles_of == "sink").sum())
            line = (f"{model} · {head_type}{at}: {len(labelled)} of {len(group)} heads"
                    + (f" ({', '.join(names[:12])}{more})" if names else "")
                    + (f"; {sinks} sink{'s' if sinks != 1 else ''} (output share < {SINK_SHARE})" if sinks else ""))
            if "group_heads" in labelled:
                joint = labelled.dropna(subset=["group_heads"]).drop_duplicates("group_heads")
                for heads, effect, z in zip(joint["group_heads"], joint["group_effect"], joint["group_z"],
                                            strict=True):
                    line += f"; together {heads}: {float(effect):+.2f} nats (z {float(z):.1f})"
            lines.append(line)
    return lines
