"""From streamed scores to labels: chance level, bootstrap confidence interval, the label rule, one tidy table.

* **Chance** (analytic): the score a head with uniform attention would get — per row the share of the keys it may
  attend to that are targets, |T(i)| / (i + 1) for a causal row, |T(i)| / n for a bidirectional (masked LM) row of
  n real tokens — averaged exactly as the score is (over the rows with a target, then over examples).
* **Confidence interval**: percentile bootstrap over probe examples (seeded, the same resamples for every head).
* **Label** (:class:`LabelConfig`): ``ci_low > chance + margin`` and ``score >= min_score``; for coreference also
  ``accuracy_ci_low > baseline_accuracy + min_accuracy_gain`` (the nearest-mention baseline; skipped when the probe
  file marks no distractors). A head may carry several labels.

:func:`label_model` runs a loaded model over the probe sets and returns the table (schema in README, section
"Labelling heads").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch

from probe.errors import ProbeError
from probe.heads import head_name
from probe.patterns import HEAD_TYPES, REGISTRY, TOKEN_TYPES, HeadType, batch_pattern, target_pattern
from probe.probesets import (
    EncodedSpanExample,
    coreference_probes,
    encode_span_example,
    load_probe_file,
    pad_span_batch,
    repeated_blocks,
)
from probe.scores import ScoreSink, TypeScores, run_sink, span_words

DEFAULT_SEQ_LEN = 256  # tokens per repeated-block probe when LabelConfig.seq_len is None (capped by the model)

COLUMNS = ["model", "revision", "layer", "head", "head_name", "head_type", "score", "ci_low", "ci_high", "chance",
           "tl_score", "label", "n_examples", "seed", "accuracy", "accuracy_ci_low", "accuracy_ci_high",
           "baseline_accuracy"]


@dataclass(frozen=True)
class LabelConfig:
    """How heads are probed and labelled. The `probe label` flags mirror these fields."""

    types: tuple[HeadType, ...] | None = None  # head types to score; None: all (coreference only for text models)
    examples: int = 64  # probe examples per probe set (repeated blocks; coreference sentences)
    seq_len: int | None = None  # tokens per repeated-block probe; None: min(DEFAULT_SEQ_LEN, the model's positions)
    seed: int = 0  # seeds the probe sets and the bootstrap
    probe_file: str | None = None  # JSONL of span examples scored as coreference instead of our templates
    batch_size: int = 8  # probe examples per forward
    n_bootstrap: int = 1000  # bootstrap resamples of the probe examples
    confidence: float = 0.95  # width of the interval [ci_low, ci_high]
    margin: float = 0.1  # label only if ci_low > chance + margin ...
    min_score: float = 0.3  # ... and score >= min_score
    min_accuracy_gain: float = 0.1  # coreference: also accuracy_ci_low > nearest-mention baseline + this
    block_bytes: int = 8 * 2**20  # memory budget of one streamed α block (all heads of a layer)


# ---------------------------------------------------------------------------------------------------------------
# Chance and bootstrap
# ---------------------------------------------------------------------------------------------------------------


def uniform_chance(
    pattern: torch.Tensor,  # [batch query key] bool
    lengths: torch.Tensor,  # [batch] real tokens (right padding)
    causal: bool,
) -> torch.Tensor:
    """A uniform head's valid-row score per example `[batch]`: mean over rows with a target of |T(i)| / keys(i),
    keys(i) = i + 1 (causal) or the sequence's length (bidirectional). NaN where no row has a target."""
    batch, n, _ = pattern.shape
    position = torch.arange(n)
    real = position[None, :] < lengths[:, None]  # [batch seq]
    pattern = pattern & real[:, :, None] & real[:, None, :]
    valid = pattern.any(-1)  # [batch query] rows with a target, as the score counts them
    if causal:
        pattern = pattern & (position[None, :] <= position[:, None])  # keys a causal row can see
        keys = (position + 1).expand(batch, n).float()  # [batch query]
    else:
        keys = lengths[:, None].expand(batch, n).float()  # [batch query]
    share = pattern.sum(-1) / keys  # [batch query]
    return torch.where(valid.sum(-1) > 0, (share * valid).sum(-1) / valid.sum(-1).clamp(min=1), torch.nan)


def bootstrap_ci(
    values: torch.Tensor,  # [example ...]
    n_bootstrap: int,
    confidence: float,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile bootstrap of the mean over examples: (low, high), each `[...]`. The same seeded resamples are used
    for every trailing entry (every head)."""
    n = values.shape[0]
    flat = values.reshape(n, -1).double()  # [example entry]
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, n, (n_bootstrap, n), generator=generator)  # [resample example]
    counts = torch.zeros(n_bootstrap, n, dtype=torch.float64).scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
    means = counts @ flat / n  # [resample entry]
    tail = (1 - confidence) / 2
    low = torch.quantile(means, tail, dim=0).float().reshape(values.shape[1:])
    high = torch.quantile(means, 1 - tail, dim=0).float().reshape(values.shape[1:])
    return low, high


def apply_rule(table: pd.DataFrame, config: LabelConfig) -> pd.Series:
    """The label rule (see the module doc) on a table with score, ci_low, chance, accuracy_ci_low and
    baseline_accuracy columns."""
    label = (table["ci_low"] > table["chance"] + config.margin) & (table["score"] >= config.min_score)
    gain_ok = table["accuracy_ci_low"] > table["baseline_accuracy"] + config.min_accuracy_gain
    needs_gain = (table["head_type"] == "coreference") & table["baseline_accuracy"].notna()
    return label & (gain_ok | ~needs_gain)


# ---------------------------------------------------------------------------------------------------------------
# Running the probes
# ---------------------------------------------------------------------------------------------------------------


def resolve_types(loaded, config: LabelConfig) -> tuple[HeadType, ...]:
    """The types to score on this model: protein models have no coreference probes."""
    if config.types is None:
        return TOKEN_TYPES if loaded.kind == "protein_mlm" else HEAD_TYPES
    for name in config.types:
        if name not in REGISTRY:
            raise ProbeError(f"unknown head type {name!r}: choose from {', '.join(HEAD_TYPES)}")
    if "coreference" in config.types and loaded.kind == "protein_mlm":
        raise ProbeError(f"{loaded.name} is a protein model: coreference probes are sentences; drop coreference "
                         "from --types")
    return tuple(config.types)


def resolve_seq_len(loaded, config: LabelConfig) -> int:
    """config.seq_len checked against the model's positions, or min(DEFAULT_SEQ_LEN, positions)."""
    if config.seq_len is None:
        return min(DEFAULT_SEQ_LEN, loaded.max_tokens)
    if config.seq_len > loaded.max_tokens:
        raise ProbeError(f"--seq-len {config.seq_len} is beyond {loaded.name}'s {loaded.max_tokens} positions; "
                         f"use --seq-len {loaded.max_tokens} or less")
    return config.seq_len


def span_probes(loaded, config: LabelConfig) -> list[EncodedSpanExample]:
    """The coreference probe set: the user's probe file, or our template sentences."""
    if config.probe_file is not None:
        encoded = [encode_span_example(example, loaded.tokenizer) for example in load_probe_file(config.probe_file)]
    else:
        encoded = coreference_probes(config.examples, config.seed, loaded.tokenizer)
    for example in encoded:
        loaded.check_length(len(example.input_ids), example.source or "a coreference probe sentence")
    return encoded


def _batches(total: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


def _summarise(
    scores: TypeScores,
    chance: torch.Tensor,  # [example]
    baseline: torch.Tensor | None,  # [example] 1/0/NaN
    config: LabelConfig,
) -> dict[str, torch.Tensor | float | int]:
    """Means, bootstrap CIs and chance over the examples that have a target, for one type: `[layer head]` each."""
    keep = ~torch.isnan(scores.score).any(-1).any(-1)  # [example]
    n = int(keep.sum())
    shape = scores.score.shape[1:]
    if n == 0:
        nan = torch.full(shape, math.nan)
        return dict(score=nan, ci_low=nan, ci_high=nan, chance=math.nan, tl_score=nan, n_examples=0,
                    accuracy=nan, accuracy_ci_low=nan, accuracy_ci_high=nan, baseline_accuracy=math.nan)
    score = scores.score[keep]  # [example layer head]
    low, high = bootstrap_ci(score, config.n_bootstrap, config.confidence, config.seed)
    out = dict(score=score.mean(0), ci_low=low, ci_high=high, chance=float(chance[keep].mean()),
               tl_score=scores.tl_score[keep].mean(0), n_examples=n)
    nan = torch.full(shape, math.nan)
    out.update(accuracy=nan, accuracy_ci_low=nan, accuracy_ci_high=nan, baseline_accuracy=math.nan)
    if scores.correct is not None:
        correct = scores.correct[keep]
        acc_low, acc_high = bootstrap_ci(correct, config.n_bootstrap, config.confidence, config.seed)
        out.update(accuracy=correct.mean(0), accuracy_ci_low=acc_low, accuracy_ci_high=acc_high)
        if baseline is not None and not torch.isnan(baseline[keep]).all():
            out["baseline_accuracy"] = float(torch.nanmean(baseline[keep]))
    return out


def label_model(
    loaded,
    config: LabelConfig = LabelConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Callable[[int, int], None] | None = None,  # called with (batches done, batches in all)
) -> pd.DataFrame:
    """Score every head of a loaded model (probe.models.LoadedModel) on the probe sets and label it.

    One row per (layer, head, head_type), columns :data:`COLUMNS`; accuracy columns are NaN except for coreference.
    """
    if config.examples < 1:
        raise ProbeError("--examples must be at least 1")
    types = resolve_types(loaded, config)
    token_types = [t for t in types if t != "coreference"]
    causal = loaded.kind == "causal_lm"
    n_layers, n_heads = loaded.n_layers, loaded.n_heads

    blocks = None
    if token_types:
        seq_len = resolve_seq_len(loaded, config)
        blocks = repeated_blocks(loaded.tokenizer, config.examples, seq_len, config.seed)
    spans = span_probes(loaded, config) if "coreference" in types else []
    token_batches = _batches(config.examples, config.batch_size) if blocks is not None else []
    span_batches = _batches(len(spans), config.batch_size)
    total, done = len(token_batches) + len(span_batches), 0

    parts: dict[str, list[TypeScores]] = {t: [] for t in types}
    chances: dict[str, list[torch.Tensor]] = {t: [] for t in types}
    for rows in token_batches:
        input_ids = blocks.input_ids[rows]  # [batch seq]
        lengths = torch.full((input_ids.shape[0],), input_ids.shape[1])
        patterns = {t: batch_pattern(t, input_ids) for t in token_types}  # [batch query key] each
        for t in token_types:
            chances[t].append(uniform_chance(patterns[t], lengths, causal))
        sink = ScoreSink(patterns, lengths, n_layers, n_heads, device=loaded.device)
        del patterns
        run_sink(loaded.model, sink, input_ids, block_bytes=config.block_bytes)
        for t, scores in sink.result().items():
            parts[t].append(scores)
        done += 1
        if progress:
            progress(done, total)
    for rows in span_batches:
        batch = pad_span_batch(spans[rows], loaded.tokenizer.pad_token_id or 0)
        lengths = batch.attention_mask.sum(-1)  # [batch]
        n = batch.input_ids.shape[1]
        pattern = torch.zeros(len(batch.examples), n, n, dtype=torch.bool)  # [batch query key]
        for row, example in enumerate(batch.examples):
            size = len(example.input_ids)
            pattern[row, :size, :size] = target_pattern("coreference", example)
        chances["coreference"].append(uniform_chance(pattern, lengths, causal))
        sink = ScoreSink({"coreference": pattern}, lengths, n_layers, n_heads, words=span_words(batch),
                         device=loaded.device)
        run_sink(loaded.model, sink, batch.input_ids, batch.attention_mask, block_bytes=config.block_bytes)
        parts["coreference"].append(sink.result()["coreference"])
        done += 1
        if progress:
            progress(done, total)

    baseline = None
    if spans:
        baseline = torch.tensor([math.nan if e.baseline_correct is None else float(e.baseline_correct) for e in spans])
    records = []
    for head_type in types:
        summary = _summarise(TypeScores.concat(parts[head_type]), torch.cat(chances[head_type]),
                             baseline if head_type == "coreference" else None, config)
        for layer in range(n_layers):
            for head in range(n_heads):
                record = {"model": loaded.name, "revision": loaded.revision, "layer": layer, "head": head,
                          "head_name": head_name(layer, head), "head_type": head_type, "seed": config.seed}
                for key, value in summary.items():
                    record[key] = float(value[layer, head]) if isinstance(value, torch.Tensor) else value
                records.append(record)
    table = pd.DataFrame.from_records(records)
    table["label"] = apply_rule(table, config)
    return table[COLUMNS]


def summary_lines(table: pd.DataFrame) -> list[str]:
    """"model · type: N heads (L0H1, ...)" for every model and type of a table (for stderr)."""
    lines = []
    for model, rows in table.groupby("model", sort=False):
        for head_type, group in rows.groupby("head_type", sort=False):
            labelled = group[group["label"]]
            names = ", ".join(labelled["head_name"].head(12))
            more = " ..." if len(labelled) > 12 else ""
            lines.append(f"{model} · {head_type}: {len(labelled)} of {len(group)} heads"
                         + (f" ({names}{more})" if len(labelled) else ""))
    return lines


# ---------------------------------------------------------------------------------------------------------------
# Table files
# ---------------------------------------------------------------------------------------------------------------

TABLE_EXTENSIONS = (".parquet", ".csv", ".json")


def save_table(table: pd.DataFrame, path) -> None:
    """Write a label table by the path's extension: .parquet, .csv or .json (a list of records)."""
    suffix = str(path).lower().rsplit(".", 1)[-1]
    if suffix == "parquet":
        table.to_parquet(path, index=False)
    elif suffix == "csv":
        table.to_csv(path, index=False)
    elif suffix == "json":
        table.to_json(path, orient="records", indent=1)
    else:
        raise ProbeError(f"{path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")


def read_table_file(path) -> pd.DataFrame:
    """A table file by its extension (.parquet, .csv, .json records), as written by :func:`save_table`; one-line
    ProbeError when it cannot be read. No check of its columns (see :func:`load_table`)."""
    suffix = str(path).lower().rsplit(".", 1)[-1]
    try:
        if suffix == "parquet":
            return pd.read_parquet(path)
        if suffix == "csv":
            return pd.read_csv(path, dtype={"model": str, "revision": str})
        if suffix == "json":
            return pd.read_json(path, orient="records", dtype={"model": str, "revision": str})
    except (OSError, ValueError) as error:
        raise ProbeError(f"cannot read the label table {path}: {str(error).splitlines()[0]}") from None
    raise ProbeError(f"{path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")


def load_table(path) -> pd.DataFrame:
    """Read a label table written by :func:`save_table`; one-line ProbeError when it is not one."""
    table = read_table_file(path)
    missing = [column for column in COLUMNS if column not in table.columns]
    if missing and len(table):
        raise ProbeError(f"{path} is not a probe label table (no {', '.join(missing[:3])} column); "
                         "pass another --out or --force to overwrite it")
    return table.reindex(columns=COLUMNS)
