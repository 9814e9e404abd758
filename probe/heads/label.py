"""From a loaded model to a labelled table: probe sets, streamed scores, the label rule, ablations.

:func:`label_model` loops over the head-type specs of :mod:`probe.heads.registry` (never over type names):

1. **Probe sets** per length: natural text (GAP passages, :mod:`probe.heads.corpus`) for the "natural" types of a text model
   whose tokenizer reads the corpus — random-token probes otherwise (the zoo's toy vocabularies, protein models);
   repeated random blocks, drawn by the corpus' token frequencies, for the "repeated" types; span examples (GAP by
   default, or the templates, or the user's probe file) for the span types, once.
2. **Scores** streamed from the capture engine (:class:`probe.heads.scores.ScoreSink`), every type of a probe set in one
   forward.
3. **Statistics** (:mod:`probe.heads.stats`): chance, clustered bootstrap interval, a one-sided test of the effect over
   ``min_effect`` (mass types: score − chance; accuracy types: paired accuracy gain over the best baseline),
   Benjamini–Hochberg over all the model's head × type tests; label = q ≤ ``fdr``. Types with candidates
   (fixed_offset) choose each head's candidate on half of the examples and are tested on the other half.
4. **Ablation** (:mod:`probe.heads.ablation`): each labelled head's effect on its type's own loss, against random heads of
   the same layer (``ablation_effect``, ``ablation_z``).

The table's schema is :data:`probe.heads.tables.COLUMNS` (README, "Labelling heads").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch

from probe.errors import ProbeError
from probe.heads import stats
from probe.heads.probesets import (
    EncodedSpanExample,
    coreference_examples,
    delimiter_ids,
    encode_span_example,
    load_probe_file,
    pad_span_batch,
    repeated_blocks,
)
from probe.heads.registry import (
    REGISTRY,
    SMALL_VOCABULARY,
    HeadType,
    HeadTypeSpec,
    TargetContext,
    types_for_kind,
)
from probe.heads.scores import ScoreSink, TypeScores, run_sink, span_words
from probe.heads.stats import uniform_chance
from probe.heads.tables import COLUMNS
from probe.models import ModelKind
from probe.naming import head_name

# Default probe length, capped by the model's positions: the length most pre-training and fine-tuning of
# encoder and decoder models used (BERT's 90 % phase, sentence-transformers' fine-tuning), and about one GAP passage.
# Labels measured beyond a model's training length describe its extrapolation, not its ordinary behaviour (README).
DEFAULT_SEQ_LEN = 128
COREF_SETS = ("auto", "gap", "templates")
ABLATE = ("labelled", "all", "none")


@dataclass(frozen=True)
class LabelConfig:
    """How heads are probed and labelled. The `probe label` flags mirror these fields."""

    types: tuple[HeadType, ...] | None = None  # head types to score; None: every type that applies to the model
    examples: int = 64  # probe examples per probe set (text / repeated-block probes; coreference examples)
    seq_len: int | tuple[int, ...] | None = None  # tokens per probe, one or several; None: min(128, positions)
    seed: int = 0  # seeds the probe sets, the bootstrap and the ablation controls
    probe_file: str | None = None  # JSONL of span examples scored as coreference instead of GAP / templates
    coref_set: str = "auto"  # auto (GAP when the tokenizer reads it, else templates) | gap | templates
    batch_size: int = 8  # probe examples per forward
    n_bootstrap: int = 1000  # clustered bootstrap resamples
    confidence: float = 0.95  # width of the interval [ci_low, ci_high]
    min_effect: float = 0.25  # mass types: H0 is score − chance ≤ min_effect
    min_accuracy_gain: float = 0.1  # accuracy types: H0 is accuracy − best baseline ≤ min_accuracy_gain (paired)
    fdr: float = 0.05  # label when the Benjamini–Hochberg q-value ≤ fdr
    ablate: str = "labelled"  # ablation column for: labelled heads | all heads | none
    ablation_examples: int = 16  # probe examples per type used for ablation
    ablation_controls: int = 8  # random same-layer heads each ablation is compared with
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
    asked = tuple(REGISTRY) if config.types is None else tuple(config.types)  # registered types too
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

    def resolve(self, probe: str) -> str:
        """The probe set a spec's probe kind gets on this model: natural text falls back to repeated blocks."""
        return "natural" if probe == "natural" and self.natural else "repeated"

    def token_probes(self, probe: str, seq_len: int) -> TokenProbeSet:
        """Natural text (when the tokenizer reads the corpus) or repeated blocks of `seq_len` tokens."""
        config = self.config
        if self.resolve(probe) == "natural":
            from probe.heads.corpus import natural_text, tokenize_corpus

            if self._passages is None:
                self._passages = tokenize_corpus(self.loaded.tokenizer)
            text = natural_text(self.loaded.tokenizer, self._passages, config.examples, seq_len, config.seed)
            return TokenProbeSet("natural", text.input_ids, text.cluster)
        blocks = repeated_blocks(self.loaded.tokenizer, config.examples, seq_len, config.seed, weights=self.weights)
        return TokenProbeSet("repeated", blocks.input_ids, torch.arange(config.examples), blocks.offset,
                             blocks.block_len)

    def span_probes(self) -> tuple[str, list[EncodedSpanExample]]:
        """The span probe set: the user's file, GAP (development split) or the templates."""
        config, loaded = self.config, self.loaded
        if config.coref_set not in COREF_SETS:
            raise ProbeError(f"unknown coreference set {config.coref_set!r}: choose from {', '.join(COREF_SETS)}")
        if config.probe_file is not None:
            name, examples = "file", load_probe_file(config.probe_file)
        elif config.coref_set == "gap" or (config.coref_set == "auto" and self.natural):
            from probe.heads.corpus import gap_examples

            name, examples = "gap", gap_examples(n_examples=config.examples, seed=config.seed)
        else:
            name = "templates"
            examples = [e.to_span_example() for e in coreference_examples(config.examples, config.seed)]
        encoded = [encode_span_example(example, loaded.tokenizer) for example in examples]
        if name == "gap":
            encoded = [e for e in encoded if len(e.input_ids) <= loaded.max_tokens]  # longer passages are left out
            if not encoded:
                raise ProbeError(f"every GAP example is longer than {loaded.name}'s {loaded.max_tokens} positions; "
                                 "use --coref-set templates")
        for example in encoded:
            loaded.check_length(len(example.input_ids), example.source or "a coreference probe")
        return name, encoded


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
                    seq_len: int, config: LabelConfig, tick: Callable[[], None]) -> list[Scored]:
    """Stream every spec's targets on one token probe set, one forward per batch."""
    causal = not _bidirectional(loaded)
    restrict = source.vocabulary < SMALL_VOCABULARY
    parts = {spec.name: {} for spec in specs}
    chances = {spec.name: {} for spec in specs}
    for rows in _batches(len(probes.input_ids), config.batch_size):
        input_ids = probes.input_ids[rows]  # [batch seq]
        lengths = torch.full((input_ids.shape[0],), input_ids.shape[1])
        ctx = TargetContext(input_ids, causal=causal, delimiter_ids=source.delimiters,
                            repeat_start=None if probes.repeat_start is None else probes.repeat_start[rows],
                            repeat_len=None if probes.repeat_len is None else probes.repeat_len[rows],
                            restrict_to_repeat=restrict and probes.repeat_start is not None)
        patterns = {}
        for spec in specs:
            for candidate, pattern in spec.targets(ctx).items():
                patterns[_key(spec, candidate)] = pattern
                chances[spec.name].setdefault(candidate, []).append(uniform_chance(pattern, lengths, causal))
        sink = ScoreSink(patterns, lengths, loaded.n_layers, loaded.n_heads, device=loaded.device)
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
                   config: LabelConfig, tick: Callable[[], None]) -> list[Scored]:
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
                         device=loaded.device)
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
    if scored.spec.candidate is not None:
        candidates = torch.tensor(scored.candidates, dtype=torch.float64)
        out[scored.spec.candidate] = candidates[choice]
    correct = scored.scores[scored.candidates[0]].correct
    if scored.spec.statistic == "accuracy" and correct is not None:
        out.update(_accuracy_summary(correct, scored, weights, config))
    return out


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


def _per_group(correct: torch.Tensor, groups: list[str], order: list[str], layer: int, head: int) -> str:
    parts = []
    for group in order:
        rows = torch.tensor([g == group for g in groups])
        parts.append(f"{group}: {float(correct[rows, layer, head].mean()):.2f}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# label_model
# ---------------------------------------------------------------------------------------------------------------


def label_model(
    loaded,
    config: LabelConfig = LabelConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Progress | None = None,  # called with (batches done, batches in all)
    note: Note | None = None,  # one-line notes for the user (skipped types, probe fallbacks, ablation)
) -> pd.DataFrame:
    """Score every head of a loaded model (probe.models.LoadedModel) on the probe sets and label it.

    One row per (seq_len, layer, head, head_type), columns :data:`probe.heads.tables.COLUMNS`; span types have one row
    per head (seq_len NaN). Accuracy columns are NaN except for accuracy types.
    """
    if config.examples < 1:
        raise ProbeError("--examples must be at least 1")
    if config.ablate not in ABLATE:
        raise ProbeError(f"unknown --ablate {config.ablate!r}: choose from {', '.join(ABLATE)}")
    specs = resolve_types(loaded, config, note)
    token_specs = [spec for spec in specs if spec.probe != "spans"]
    span_specs = [spec for spec in specs if spec.probe == "spans"]
    lengths = resolve_lengths(loaded, config) if token_specs else ()
    source = ProbeSource(loaded, config, note)

    plans = []  # (probe set, seq_len, specs): types that share a probe set share its forwards
    for seq_len in lengths:
        for probe in ("natural", "repeated"):
            chosen = [spec for spec in token_specs if source.resolve(spec.probe) == probe]
            if chosen:
                plans.append((probe, seq_len, chosen))
    spans = source.span_probes() if span_specs else None
    n_batches = len(_batches(config.examples, config.batch_size))
    total = n_batches * len(plans) + (len(_batches(len(spans[1]), config.batch_size)) if spans else 0)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    scored: list[Scored] = []
    probes_used: dict[str, object] = {}  # head type -> its probes at the first length (for the ablation)
    for probe, seq_len, chosen in plans:
        probes = source.token_probes(probe, seq_len)
        for spec in chosen:
            probes_used.setdefault(spec.name, probes)
        scored.extend(score_token_set(loaded, chosen, probes, source, seq_len, config, tick))
    if spans:
        scored.extend(score_span_set(loaded, span_specs, spans[0], spans[1], config, tick))
        for spec in span_specs:
            probes_used[spec.name] = spans[1]

    table = _table(loaded, scored, config)
    table["q_value"] = stats.benjamini_hochberg(torch.tensor(table["p_value"].to_numpy(dtype=float))).numpy()
    table["label"] = (table["q_value"] <= config.fdr).fillna(False).astype(bool)
    agree = table.groupby(["layer", "head", "head_type"])["label"].transform("nunique")
    table["stable"] = agree.eq(1)
    from probe.heads.label_ablation import ablation_columns, merge_ablation

    effects = ablation_columns(loaded, table, probes_used, config, note)
    return merge_ablation(table, effects).reindex(columns=COLUMNS)


def _table(loaded, scored: list[Scored], config: LabelConfig) -> pd.DataFrame:
    records = []
    for item in scored:
        summary = summarise(item, config)
        groups = summary.pop("_groups", [])
        correct = item.scores[None].correct if item.spec.statistic == "accuracy" and None in item.scores else None
        for layer in range(loaded.n_layers):
            for head in range(loaded.n_heads):
                record = {"model": loaded.name, "revision": loaded.revision, "layer": layer, "head": head,
                          "head_name": head_name(layer, head), "head_type": item.spec.name,
                          "probe_set": item.probe_set, "seq_len": item.seq_len, "seed": config.seed}
                for key, value in summary.items():
                    record[key] = float(value[layer, head]) if isinstance(value, torch.Tensor) else value
                if correct is not None and groups:
                    record["accuracy_by_source"] = _per_group(correct, item.groups, groups, layer, head)
                records.append(record)
    table = pd.DataFrame.from_records(records)
    return table.reindex(columns=[c for c in COLUMNS if c not in ("q_value", "label", "stable")] +
                         ["q_value", "label", "stable"])


def summary_lines(table: pd.DataFrame) -> list[str]:
    """"model · type: N of M heads (L0H1, ...)" for every model, length and type of a table (for stderr); fixed-offset
    heads show their offset, heads whose label flips between lengths are marked "(unstable)"."""
    lines = []
    lengths = table["seq_len"].dropna().unique()
    for model, rows in table.groupby("model", sort=False):
        for (seq_len, head_type), group in rows.groupby([rows["seq_len"].fillna(-1), "head_type"], sort=False):
            labelled = group[group["label"].astype(bool)]
            names = [name + (f"({int(offset):+d})" if offset == offset else "") +
                     ("" if bool(stable) else " (unstable)")
                     for name, offset, stable in zip(labelled["head_name"], labelled["offset"],
                                                     labelled["stable"].fillna(True), strict=True)]
            more = " ..." if len(names) > 12 else ""
            at = f" @{int(seq_len)}" if len(lengths) > 1 and seq_len >= 0 else ""
            lines.append(f"{model} · {head_type}{at}: {len(labelled)} of {len(group)} heads"
                         + (f" ({', '.join(names[:12])}{more})" if names else ""))
    return lines
