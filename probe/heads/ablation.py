"""Causal evidence for head labels: how much a probe's own loss changes when one head's output is zeroed.

For a head h, every probe batch is run twice — clean, and with h's attention output zeroed inside the capture
engine's attention function (:func:`probe.engine.capture` with ``ablate``; no model surgery). Per example,

    effect(h) = loss(h ablated) − loss(clean)        (positive: the head helps the probe's task)

and ``ablation_effect`` is its mean over examples. A raw effect says little on its own (zeroing almost any
head moves the loss a bit), so it is set against **control heads**: up to ``controls`` heads drawn at random
(seeded) from those not under test and not excluded (e.g. not labelled) — of the same layer; where that layer
has fewer than two such heads, of the whole model; where the whole model has fewer than two (every head
labelled, as on ``zoo:induction``), any head of the other layers, labelled or not. ``ablation_z`` = (effect −
mean of the control effects) / standard deviation of the control effects (NaN with fewer than two controls).

**Joint ablation** (:func:`group_effects`): a circuit's heads can back each other up, so that zeroing one
costs little and zeroing all of them a lot. A group of heads is ablated together (``group_effect``, the same
loss difference) and set against up to ``controls`` random groups of the same size: heads outside the group,
from the group's own layers first and, where those run short, from other layers; where fewer than two distinct
such groups exist (a small model whose group fills its layer), random groups of the model's heads that may
share heads with the tested group but are never the group itself. ``group_z`` is the z-score against those
control groups.

Batching: the ablations of several heads share one forward. The probe batch is copied along the batch axis,
one copy per head, each copy with its own head zeroed (an ``ablate`` mask ``[batch layer head]``), so a
forward of ``max_rows`` rows ablates ``max_rows // batch`` heads; the cost is one forward per such group of
heads, plus one clean forward per probe batch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from probe.engine import capture
from probe.errors import ProbeError
from probe.models import ModelKind

Head = tuple[int, int]  # (layer, head)
LossFn = Callable[[torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor]  # (logits, batch) -> [batch]
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
COLUMNS = ["layer", "head", "ablation_effect", "ablation_z", "n_controls"]


def example_loss(
    logits: torch.Tensor,  # [batch seq vocab]
    labels: torch.Tensor,  # [batch seq] long, -100 = not counted
    causal: bool,
) -> torch.Tensor:
    """Mean cross-entropy per example over its labelled positions `[batch]` (NaN where none is labelled).

    Causal LMs: the label at position t is the token at t, predicted from position t − 1 (the shift is done
    here)."""
    if causal:
        logits, labels = logits[:, :-1], labels[:, 1:]  # [batch seq-1 vocab], [batch seq-1]
    counted = labels != -100  # [batch seq]
    # [batch seq]
    loss = F.cross_entropy(logits.transpose(1, 2).float(), labels.clamp(min=0), reduction="none")
    total = (loss * counted).sum(-1)  # [batch]
    n = counted.sum(-1)  # [batch]
    return torch.where(n > 0, total / n.clamp(min=1), torch.nan)


def _repeat(batch: Mapping[str, torch.Tensor], copies: int) -> dict[str, torch.Tensor]:
    """Every batch-first tensor of `batch` stacked `copies` times along the batch axis (copy-major)."""
    return {name: value.repeat(copies, *([1] * (value.dim() - 1)))
            if isinstance(value, torch.Tensor) else value
            for name, value in batch.items()}


def _losses(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    ablate: torch.Tensor | None,  # [batch layer head] bool
    loss: LossFn,
) -> torch.Tensor:
    """Per-example loss `[batch]` of one forward, with the marked heads zeroed."""
    device = next(model.parameters()).device
    inputs = {name: batch[name].to(device) for name in MODEL_INPUTS if name in batch}
    with capture(model, (), ablate=ablate), torch.inference_mode():
        logits = model(**inputs).logits  # [batch seq vocab]
    return loss(logits, batch).float().cpu()


def control_heads(
    heads: Sequence[Head],
    n_heads: int,
    controls: int,
    exclude: Sequence[Head] = (),
    seed: int = 0,
    n_layers: int | None = None,
) -> dict[int, list[Head]]:
    """For each layer of `heads`: up to `controls` control heads `(layer, head)`, drawn at random (seeded)
    from the heads of that layer that are neither tested nor excluded.

    Parameters
    ----------
    heads : sequence of (layer, head)
        The tested heads.
    n_heads : int
        Heads per layer.
    controls : int
        Control heads to draw per layer (at most).
    exclude : sequence of (layer, head), default ()
        Heads never drawn as controls.
    seed : int, default 0
        Seeds the draw.
    n_layers : int, optional
        With it, a layer with fewer than two candidates draws from the whole model's untested, unexcluded
        heads instead, and where those are fewer than two too, from every head of the other layers (excluded
        ones included).

    Returns
    -------
    dict of int to list of (layer, head)
        Layer -> its control heads.
    """
    rng = random.Random(seed)
    taken = set(heads) | set(exclude)
    everything = [(layer, head) for layer in range(n_layers or 0) for head in range(n_heads)]
    out = {}
    for layer in sorted({layer for layer, _ in heads}):
        pool = [(layer, head) for head in range(n_heads) if (layer, head) not in taken]
        if len(pool) < 2 and n_layers is not None:
            pool = [head for head in everything if head not in taken]
            if len(pool) < 2:
                pool = [head for head in everything if head[0] != layer]
        out[layer] = sorted(rng.sample(pool, min(controls, len(pool))))
    return out


def control_groups(
    group: Sequence[Head],
    n_layers: int,
    n_heads: int,
    controls: int,
    seed: int = 0,
    attention_layers: Sequence[int] | None = None,  # the layers with α (a hybrid's softmax ones); None: all
) -> tuple[list[tuple[Head, ...]], bool]:
    """Up to `controls` distinct random groups of `len(group)` heads to compare a joint ablation with, and
    whether they may share heads with `group`.

    Drawn (seeded) from the heads of `group`'s own layers outside it, where those make two or more distinct
    groups; else from every head of the model outside `group`; where even those make fewer than two (a group
    that fills its layer of a two-layer model), groups of any of the model's heads (never `group` itself) are
    added, and the second value is True.
    """
    rng = random.Random(seed)
    tested = tuple(sorted(set(group)))
    size = len(tested)
    real = range(n_layers) if attention_layers is None else attention_layers
    everything = [(layer, head) for layer in real for head in range(n_heads)]
    layers = {layer for layer, _ in tested}
    same = [head for head in everything if head[0] in layers and head not in tested]
    outside = [head for head in everything if head not in tested]
    found: list[tuple[Head, ...]] = []

    def draw(pool: list[Head]) -> None:
        for _ in range(50 * controls):
            if len(found) >= controls:
                return
            candidate = tuple(sorted(rng.sample(pool, size)))
            if candidate != tested and candidate not in found:
                found.append(candidate)

    pools = [pool for pool in (same, outside) if math.comb(len(pool), size) >= 2]
    if pools:
        draw(pools[0])
    elif math.comb(len(outside), size) == 1:
        found.append(tuple(outside))  # the one disjoint group
    overlapping = len(found) < 2
    if overlapping and math.comb(len(everything), size) > 1:
        draw(everything)
    return found, overlapping


def layer_matched_groups(
    group: Sequence[Head],
    n_heads: int,
    controls: int,
    seed: int = 0,
) -> tuple[list[tuple[Head, ...]], bool]:
    """Up to `controls` distinct random groups with `group`'s layer histogram (as many heads from each layer
    as `group` has there), and whether they may share heads with `group`.

    Each layer's share is drawn (seeded) from that layer's heads outside `group`; where a layer has fewer such
    heads than `group` takes from it, or the draws make fewer than two distinct groups, that layer's heads of
    `group` join its pool (never the whole `group` itself), and the second value is True. For a type's
    labelled heads across layers (:func:`probe.heads.label.ablation.ablation_columns`).

    Parameters
    ----------
    group : sequence of (int, int)
        The heads (layer, head) whose layer histogram the controls keep.
    n_heads : int
        Heads per layer.
    controls : int
        Most control groups to draw.
    seed : int, default 0
        Seeds the draws.

    Returns
    -------
    groups : list of tuple of (int, int)
        The distinct control groups, each sorted.
    overlaps : bool
        Whether they may share heads with `group` (a layer had too few other heads).

    Examples
    --------
    >>> layer_matched_groups([(0, 1)], n_heads=4, controls=3, seed=1)  # one head of layer 0, from the others
    ([((0, 0),), ((0, 3),), ((0, 2),)], False)
    >>> layer_matched_groups([(1, 0), (1, 2)], n_heads=4, controls=3)  # 2 others only: the group's heads join
    ([((1, 1), (1, 3)), ((1, 0), (1, 3)), ((1, 0), (1, 1))], True)
    """
    rng = random.Random(seed)
    tested = tuple(sorted(set(group)))
    counts: dict[int, int] = {}
    for layer, _ in tested:
        counts[layer] = counts.get(layer, 0) + 1
    outside = {layer: [(layer, head) for head in range(n_heads) if (layer, head) not in tested]
               for layer in counts}
    everything = {layer: [(layer, head) for head in range(n_heads)] for layer in counts}
    found: list[tuple[Head, ...]] = []

    def draw(pools: dict[int, list[Head]]) -> None:
        for _ in range(50 * controls):
            if len(found) >= controls:
                return
            candidate = tuple(sorted(head for layer, count in counts.items()
                                     for head in rng.sample(pools[layer], count)))
            if candidate != tested and candidate not in found:
                found.append(candidate)

    disjoint = all(len(outside[layer]) >= count for layer, count in counts.items())
    if disjoint:
        draw(outside)
    overlapping = len(found) < 2
    if overlapping:
        draw(everything)
    return found, overlapping


def ablation_effects(
    loaded,
    batches: Sequence[Mapping[str, torch.Tensor]],
    heads: Sequence[Head],
    controls: int = 8,
    loss: LossFn | None = None,
    causal: bool | None = None,
    exclude: Sequence[Head] = (),
    seed: int = 0,
    max_rows: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Ablation effect and z-score against control heads (same layer where possible, see
    :func:`control_heads`), for each of `heads`.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model.
    batches : sequence of dict of str to Tensor
        Dicts with `input_ids` `[batch seq]`, optional `attention_mask`, and `labels` `[batch seq]` for the
        default loss (:func:`example_loss`).
    heads : sequence of (layer, head)
        The heads to ablate, one at a time.
    controls : int, default 8
        Control heads per layer (:func:`control_heads`).
    loss : callable, optional
        A custom `loss(logits, batch) -> [batch]`; it may read any other batch-first tensors of the dict.
    causal : bool, optional
        Whether the model is causal.
    exclude : sequence of (layer, head), default ()
        Heads never drawn as controls (the labelled ones).
    seed : int, default 0
        Seeds the controls.
    max_rows : int, default 64
        Rows per ablation forward: one forward ablates ``max_rows // batch`` heads (module docstring).
    progress : callable, optional
        Called as ``progress(done, total)``.

    Returns
    -------
    pandas.DataFrame
        One row per head, columns :data:`COLUMNS`.
    """
    heads = list(dict.fromkeys((int(layer), int(head)) for layer, head in heads))
    if not heads:
        return pd.DataFrame(columns=COLUMNS)
    if max_rows < 1:
        raise ProbeError("max_rows must be at least 1")
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    _check_heads(loaded, heads)
    loss = _default_loss(loaded, loss, causal)
    # a hybrid's layers without α (linear attention, state-space) have no heads to ablate: never controls
    no_alpha = [(layer, head) for layer in range(n_layers) if layer not in loaded.attention_layers
                for head in range(n_heads)]
    controls_of = control_heads(heads, n_heads, controls, [*exclude, *no_alpha], seed, n_layers=n_layers)
    ablated = list(dict.fromkeys([(head,) for head in heads] +
                                 [(control,) for chosen in controls_of.values() for control in chosen]))
    effect = set_effects(loaded, batches, ablated, loss, max_rows, progress)
    records = []
    for layer, head in heads:
        control = torch.tensor([effect[(other,)] for other in controls_of[layer] if other != (layer, head)],
                               dtype=torch.float64)
        records.append({"layer": layer, "head": head, "ablation_effect": effect[((layer, head),)],
                        "ablation_z": z_score(effect[((layer, head),)], control), "n_controls": len(control)})
    return pd.DataFrame.from_records(records, columns=COLUMNS)


GROUP_COLUMNS = ["group", "group_size", "group_effect", "group_z", "n_controls", "overlapping_controls"]


def group_effects(
    loaded,
    batches: Sequence[Mapping[str, torch.Tensor]],
    groups: Sequence[Sequence[Head]],
    controls: int = 8,
    loss: LossFn | None = None,
    causal: bool | None = None,
    seed: int = 0,
    max_rows: int = 64,
    progress: Callable[[int, int], None] | None = None,
    layer_matched: bool = False,
) -> pd.DataFrame:
    """Joint ablation: each group of heads zeroed together, against random groups of the same size
    (:func:`control_groups`; with `layer_matched`, of the same layer histogram: :func:`layer_matched_groups`).

    Parameters
    ----------
    loaded, batches, loss, causal, seed, max_rows, progress
        As for :func:`ablation_effects`.
    groups : sequence of sequence of (layer, head)
        The groups, each ablated as a whole.
    controls : int, default 8
        Random control groups per group.
    layer_matched : bool, default False
        Controls with the group's layer histogram (:func:`layer_matched_groups`) instead of any heads
        (:func:`control_groups`).

    Returns
    -------
    pandas.DataFrame
        One row per group, columns :data:`GROUP_COLUMNS`: ``group`` (the sorted heads), ``group_effect``
        (mean loss difference, ablated − clean), ``group_z`` (against the control groups),
        ``overlapping_controls`` (True when the controls may share heads with the group: too few disjoint
        ones exist).
    """
    groups = [tuple(sorted({(int(layer), int(head)) for layer, head in group})) for group in groups]
    groups = [group for group in dict.fromkeys(groups) if group]
    if not groups:
        return pd.DataFrame(columns=GROUP_COLUMNS)
    loss = _default_loss(loaded, loss, causal)
    for group in groups:
        _check_heads(loaded, group)
    drawn = {group: layer_matched_groups(group, loaded.n_heads, controls, seed) if layer_matched
             else control_groups(group, loaded.n_layers, loaded.n_heads, controls, seed,
                                 loaded.attention_layers)
             for group in groups}
    ablated = list(dict.fromkeys(groups + [control for chosen, _ in drawn.values() for control in chosen]))
    effect = set_effects(loaded, batches, ablated, loss, max_rows, progress)
    records = []
    for group in groups:
        chosen, overlapping = drawn[group]
        control = torch.tensor([effect[other] for other in chosen], dtype=torch.float64)
        records.append({"group": group, "group_size": len(group), "group_effect": effect[group],
                        "group_z": z_score(effect[group], control), "n_controls": len(chosen),
                        "overlapping_controls": overlapping})
    return pd.DataFrame.from_records(records, columns=GROUP_COLUMNS)


def set_effects(
    loaded,
    batches: Sequence[Mapping[str, torch.Tensor]],
    sets: Sequence[tuple[Head, ...]],
    loss: LossFn,
    max_rows: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> dict[tuple[Head, ...], float]:
    """Mean loss difference (ablated − clean, over every example of `batches`) of each set of heads zeroed
    together.

    Several sets share a forward: the batch is copied once per set along the batch axis, each copy with its
    own set zeroed (`max_rows` rows per forward); one clean forward per batch."""
    if max_rows < 1:
        raise ProbeError("max_rows must be at least 1")
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    deltas: dict[tuple[Head, ...], list[torch.Tensor]] = {chosen: [] for chosen in sets}  # per batch: [batch]
    n_rows = max(len(batch["input_ids"]) for batch in batches) if batches else 1
    per_forward = max(1, max_rows // n_rows)  # sets ablated per forward
    total = len(batches) * (1 + math.ceil(len(sets) / per_forward))
    done = 0
    for batch in batches:
        clean = _losses(loaded.model, batch, None, loss)  # [batch]
        rows = len(batch["input_ids"])
        done += 1
        for start in range(0, len(sets), per_forward):
            chosen = sets[start:start + per_forward]
            # [copy batch layer head]
            mask = torch.zeros(len(chosen), rows, n_layers, n_heads, dtype=torch.bool)
            for copy, heads in enumerate(chosen):
                for layer, head in heads:
                    mask[copy, :, layer, head] = True
            # [copy·batch]
            losses = _losses(loaded.model, _repeat(batch, len(chosen)), mask.flatten(0, 1), loss)
            for copy, heads in enumerate(chosen):
                deltas[heads].append(losses[copy * rows:(copy + 1) * rows] - clean)
            done += 1
            if progress:
                progress(done, total)
    return {chosen: float(torch.nanmean(torch.cat(values))) if values else math.nan
            for chosen, values in deltas.items()}


def _default_loss(loaded, loss: LossFn | None, causal: bool | None) -> LossFn:
    if loss is not None:
        return loss
    if causal is None:
        causal = loaded.kind == ModelKind.CAUSAL_LM

    def default(logits, batch):
        return example_loss(logits, batch["labels"].to(logits.device), causal)
    return default


def _check_heads(loaded, heads: Sequence[Head]) -> None:
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    for layer, head in heads:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ProbeError(f"head L{layer}H{head} is not in this model ({n_layers} layers × {n_heads} "
                             "heads)")


def z_score(value: float, control: torch.Tensor) -> float:
    """(value − mean) / sd (ddof 1) of the control effects; NaN with fewer than two controls; ±inf when the
    controls do not vary and the value differs from them."""
    control = control[~torch.isnan(control)]
    if len(control) < 2 or math.isnan(value):
        return math.nan
    mean, sd = float(control.mean()), float(control.std())
    if sd == 0.0:
        return 0.0 if value == mean else math.copysign(math.inf, value - mean)
    return (value - mean) / sd
