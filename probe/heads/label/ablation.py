"""Causal evidence for labels: each head type's own loss, and the ablation columns of a label table.

A type's spec names the positions whose loss its ablation measures (``loss_positions``):

* ``repeat`` (duplicate_token, induction): the second copy of the planted block — next-token loss on its
  tokens after the first (causal LMs), or the masked-token loss of 15 % of its tokens masked (masked / protein
  LMs);
* ``text`` (previous/next token, self, first token, fixed offset, delimiter): the probe text — next-token loss
  on every token (causal), masked-token loss on 15 % of the non-special tokens (masked);
* ``query`` (coreference): the pronoun resolution — the loss of the token after the pronoun (causal: the zoo's
  coreference task puts the antecedent's action there), or of the masked pronoun itself (masked LMs).

The effects are computed by :func:`probe.heads.ablation.ablation_effects` (heads zeroed inside the capture
engine's attention function, batched several heads per forward) against random unlabelled heads of the same
layer (of the whole model where a layer has fewer than two; see :func:`probe.heads.ablation.control_heads`).
Each (type, layer) with two or more labelled heads is also ablated as one group
(:func:`probe.heads.ablation.group_effects`: columns ``group_effect``, ``group_z``, ``group_size``,
``group_heads``), on the same probes and loss; and all labelled heads of a type together, across layers,
against random groups of the same layer histogram (:func:`probe.heads.ablation.layer_matched_groups`:
``type_group_effect``, ``type_group_z``, ``type_group_size``). Models whose checkpoint has no trained LM head
(a sentence-embedding BERT loaded with a fresh MLM head) get no ablation columns: their loss would measure a
random head.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd
import torch
from safetensors import safe_open

from probe.anatomy import body_prefix
from probe.heads.ablation import ablation_effects, group_effects
from probe.heads.probesets import pad_span_batch, special_frame
from probe.heads.registry import REGISTRY
from probe.heads.stage_times import StageTimes
from probe.heads.tables import labelled_mask
from probe.models import ModelKind, resolve
from probe.naming import head_name

MASK_SHARE = 0.15  # masked LMs: share of the measured positions that are masked


def lm_head_trained(loaded) -> bool:
    """False when the model has output-head parameters (not tied to the embeddings) that its checkpoint lacks,
    i.e. the head was freshly initialised at load time. True when it cannot be told (a hub model not cached
    locally)."""
    directory = Path(resolve(loaded.name)).expanduser()
    files = sorted(directory.glob("*.safetensors")) if directory.is_dir() else []
    if not files:
        return True

    keys: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            keys.update(handle.keys())
    prefix = body_prefix(loaded.model) + "."
    head = [name for name, _ in loaded.model.named_parameters() if not name.startswith(prefix)]
    return all(name in keys for name in head)


def _positions(spec_positions: str, input_ids: torch.Tensor, lengths: torch.Tensor, frame: tuple[int, int],
               repeat_start, repeat_len, spans, causal: bool) -> torch.Tensor:
    """[batch seq] bool: the positions whose loss is measured."""
    batch, n = input_ids.shape
    chosen = torch.zeros(batch, n, dtype=torch.bool)  # [batch seq]
    for row in range(batch):
        length = int(lengths[row])
        if spec_positions == "repeat" and repeat_start is not None:
            start, size = int(repeat_start[row]), int(repeat_len[row])
            chosen[row, start + size + (1 if causal else 0):start + 2 * size] = True
        elif spec_positions == "query" and spans:
            query = list(spans[row].query_tokens)
            if causal:
                after = max(query) + 1
                if after < length:
                    chosen[row, after] = True
            else:
                chosen[row, query] = True
        else:
            chosen[row, frame[0]:length - frame[1]] = True
    return chosen


def loss_batch(loaded, spec_name: str, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
               repeat_start=None, repeat_len=None, spans=(), seed: int = 0) -> dict[str, torch.Tensor] | None:
    """The ablation batch of one type: `input_ids` (masked where a masked LM is measured), `attention_mask`,
    and `labels` (−100 outside the measured positions). None when a masked LM has no mask token."""
    causal = loaded.kind == ModelKind.CAUSAL_LM
    lengths = attention_mask.sum(-1) if attention_mask is not None else torch.full((len(input_ids),),
                                                                                   input_ids.shape[1])
    prefix, suffix = special_frame(loaded.tokenizer)
    chosen = _positions(REGISTRY[spec_name].loss_positions, input_ids, lengths, (len(prefix), len(suffix)),
                        repeat_start, repeat_len, spans, causal)
    ids = input_ids.clone()
    if not causal:
        mask_id = getattr(loaded.tokenizer, "mask_token_id", None)
        if mask_id is None:
            return None
        generator = torch.Generator().manual_seed(seed)
        keep = torch.rand(chosen.shape, generator=generator) < MASK_SHARE  # [batch seq]
        if REGISTRY[spec_name].loss_positions != "query":
            first = chosen.float().argmax(-1)  # at least one masked position per row that has any
            keep[torch.arange(len(ids)), first] = True
            chosen &= keep
        ids[chosen] = mask_id
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    batch = {"input_ids": ids, "labels": labels}
    if attention_mask is not None:
        batch["attention_mask"] = attention_mask
    return batch


def ablation_columns(
    loaded,
    table: pd.DataFrame,  # the labelled table (label column set)
    # head type -> its probe set (TokenProbeSet, or a list of EncodedSpanExample)
    probes: Mapping[str, object],
    config,
    note: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    timings: StageTimes | None = None,  # per-head and group ablation seconds are added here
    memo=None,  # probe.heads.label.config.Memo: each type's ablation is the step f"ablation/{type}"
) -> pd.DataFrame:
    """`[head_type, layer, head, ablation_effect, ablation_z, group_effect, group_z, group_size, group_heads]`
    for the heads `config.ablate` selects (labelled or all): each type's heads ablated on that type's own
    probes and loss, against heads that carry no label (same layer where possible); and every (type, layer)
    with ≥ 2 labelled heads ablated together, against random groups of the same size (group columns on each
    member's row)."""
    timings = timings if timings is not None else StageTimes()
    columns = ["head_type", "layer", "head", "ablation_effect", "ablation_z", *GROUP_COLUMNS,
               *TYPE_GROUP_COLUMNS]
    labelled = table[labelled_mask(table["label"])]
    if config.ablate == "none" or (config.ablate == "labelled" and labelled.empty):
        return pd.DataFrame(columns=columns)
    if not lm_head_trained(loaded):
        if note is not None:
            note(f"{loaded.name} has no trained LM head in its checkpoint: no ablation columns (the loss "
                 "would measure a freshly initialised head)")
        return pd.DataFrame(columns=columns)
    exclude = sorted({(int(row.layer), int(row.head)) for row in labelled.itertuples()})
    chosen_rows = labelled if config.ablate == "labelled" else table
    out = []
    for head_type, rows in chosen_rows.groupby("head_type", sort=False):
        heads = sorted(
            {(int(layer), int(head)) for layer, head in zip(rows["layer"], rows["head"], strict=True)})
        probe = probes.get(head_type)
        if probe is None:
            continue
        n = config.ablation_examples
        batches = []
        for start in range(0, n, config.batch_size):
            stop = min(start + config.batch_size, n)
            if isinstance(probe, list):  # span examples
                if start >= len(probe):
                    break
                span_batch = pad_span_batch(probe[start:stop], loaded.tokenizer.pad_token_id or 0)
                batch = loss_batch(loaded, head_type, span_batch.input_ids, span_batch.attention_mask,
                                   spans=span_batch.examples, seed=config.seed + start)
            else:
                if start >= len(probe.input_ids):
                    break
                batch = loss_batch(loaded, head_type, probe.input_ids[start:stop], None,
                                   None if probe.repeat_start is None else probe.repeat_start[start:stop],
                                   None if probe.repeat_len is None else probe.repeat_len[start:stop],
                                   seed=config.seed + start)
            if batch is None:
                if note is not None:
                    note(f"{loaded.name}'s tokenizer has no mask token: no ablation columns")
                return pd.DataFrame(columns=columns)
            batches.append(batch)
        if not batches:
            continue

        def measure(head_type=head_type, heads=heads, batches=batches) -> pd.DataFrame:
            return _type_effects(loaded, head_type, heads, batches, labelled, exclude, config, timings,
                                 progress)

        effects = memo(f"ablation/{head_type}", measure) if memo is not None else measure()
        for line in effects.attrs.get("notes", []) if note is not None else ():
            note(line)
        out.append(effects[columns].reset_index(drop=True))
    if not out:
        return pd.DataFrame(columns=columns)
    return pd.concat(out, ignore_index=True)


def _type_effects(loaded, head_type: str, heads: list[tuple[int, int]], batches: list[dict],
                  labelled: pd.DataFrame, exclude: list[tuple[int, int]], config, timings: StageTimes,
                  progress) -> pd.DataFrame:
    """One type's ablation rows (``ablation_columns``' columns); its notes (groups whose controls may
    overlap them) in ``attrs["notes"]``, so that a journalled step says them again when read back."""
    notes: list[str] = []
    note = notes.append
    columns = ["head_type", "layer", "head", "ablation_effect", "ablation_z", *GROUP_COLUMNS,
               *TYPE_GROUP_COLUMNS]
    with timings.stage("per-head ablation"):
        effects = ablation_effects(loaded, batches, heads, controls=config.ablation_controls,
                                   exclude=exclude, seed=config.seed, progress=progress)
    effects.insert(0, "head_type", head_type)
    labelled_heads = sorted({(int(row.layer), int(row.head)) for row in labelled.itertuples()
                             if row.head_type == head_type})
    groups = _layer_groups(labelled_heads)
    with timings.stage("group ablation"):
        joint = group_effects(loaded, batches, groups, controls=config.ablation_controls,
                              seed=config.seed, progress=progress)
    for row in joint.itertuples():
        if row.overlapping_controls:
            note(f"{loaded.name} · {head_type}: the group {_names(row.group)} fills its layers, "
                 + controls_note(row.n_controls, "", "it", "group_z"))
    effects = effects.merge(_group_rows(joint), on=["layer", "head"], how="outer")
    with timings.stage("group ablation"):
        whole = group_effects(loaded, batches, [labelled_heads] if len(labelled_heads) >= 2 else [],
                              controls=config.ablation_controls, seed=config.seed, progress=progress,
                              layer_matched=True)
    for row in whole.itertuples():
        if row.overlapping_controls:
            note(f"{loaded.name} · {head_type}: its {row.group_size} labelled heads fill their layers, "
                 + controls_note(row.n_controls, "layer-matched ", "them", "type_group_z"))
    effects = effects.merge(_type_rows(whole), on=["layer", "head"], how="outer")
    effects["head_type"] = head_type
    effects = effects[columns]
    effects.attrs["notes"] = notes
    return effects


def controls_note(count: int, kind: str, whom: str, column: str) -> str:
    """The end of the note on a group that fills its layers: "so its 3 layer-matched control groups may share
    heads with them (type_group_z is conservative)"; none -> the z is unknown; one -> singular."""
    if count == 0:
        return f"so no {kind}control group could be drawn: {column} is unknown"
    groups = "group" if count == 1 else "groups"
    return f"so its {count} {kind}control {groups} may share heads with {whom} ({column} is conservative)"


GROUP_COLUMNS = ["group_effect", "group_z", "group_size", "group_heads"]
TYPE_GROUP_COLUMNS = ["type_group_effect", "type_group_z", "type_group_size"]


def _layer_groups(heads: list[tuple[int, int]]) -> list[tuple[tuple[int, int], ...]]:
    """The labelled heads of one type grouped by layer, groups of two or more."""
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append((layer, head))
    return [tuple(group) for _, group in sorted(by_layer.items()) if len(group) >= 2]


def _names(group) -> str:
    return " ".join(head_name(layer, head) for layer, head in group)


def _group_rows(joint: pd.DataFrame) -> pd.DataFrame:
    """One row per member head of each group: layer, head and the group columns."""
    records = [{"layer": layer, "head": head, "group_effect": row.group_effect, "group_z": row.group_z,
                "group_size": row.group_size, "group_heads": _names(row.group)}
               for row in joint.itertuples() for layer, head in row.group]
    return pd.DataFrame.from_records(records, columns=["layer", "head", *GROUP_COLUMNS])


def _type_rows(whole: pd.DataFrame) -> pd.DataFrame:
    """One row per labelled head of the type: layer, head and the type-group columns."""
    records = [{"layer": layer, "head": head, "type_group_effect": row.group_effect,
                "type_group_z": row.group_z, "type_group_size": row.group_size} for row in whole.itertuples()
                for layer, head in row.group]
    return pd.DataFrame.from_records(records, columns=["layer", "head", *TYPE_GROUP_COLUMNS])


def merge_ablation(table: pd.DataFrame, effects: pd.DataFrame) -> pd.DataFrame:
    """The table with the ablation and group columns filled from `effects` (every length's row of a head and
    type)."""
    filled = ["ablation_effect", "ablation_z", *GROUP_COLUMNS, *TYPE_GROUP_COLUMNS]
    out = table.drop(columns=filled, errors="ignore")
    if effects.empty:
        for column in filled:
            out[column] = math.nan
        return out
    effects = effects.astype({"layer": int, "head": int})
    out = out.merge(effects[["head_type", "layer", "head", *filled]],
                    on=["head_type", "layer", "head"], how="left")
    for column in filled:
        if column != "group_heads":
            out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    return out
