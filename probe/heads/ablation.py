"""Causal evidence for head labels: how much a probe's own loss changes when one head's output is zeroed.

For a head h, every probe batch is run twice — clean, and with h's attention output zeroed inside the capture
engine's attention function (:func:`probe.engine.capture` with ``ablate``; no model surgery). Per example,

    effect(h) = loss(h ablated) − loss(clean)        (positive: the head helps the probe's task)

and ``ablation_effect`` is its mean over examples. A raw effect says little on its own (zeroing almost any head moves
the loss a bit), so it is set against **control heads**: up to ``controls`` heads of the same layer drawn at random
(seeded) from those not under test and not excluded (e.g. not labelled). ``ablation_z`` = (effect − mean of the
control effects) / standard deviation of the control effects (NaN with fewer than two controls).

Batching: the ablations of several heads share one forward. The probe batch is copied along the batch axis, one copy
per head, each copy with its own head zeroed (an ``ablate`` mask ``[batch layer head]``), so a forward of
``max_rows`` rows ablates ``max_rows // batch`` heads; the cost is one forward per such group of heads, plus one
clean forward per probe batch.
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

    Causal LMs: the label at position t is the token at t, predicted from position t − 1 (the shift is done here)."""
    if causal:
        logits, labels = logits[:, :-1], labels[:, 1:]  # [batch seq-1 vocab], [batch seq-1]
    counted = labels != -100  # [batch seq]
    loss = F.cross_entropy(logits.transpose(1, 2).float(), labels.clamp(min=0), reduction="none")  # [batch seq]
    total = (loss * counted).sum(-1)  # [batch]
    n = counted.sum(-1)  # [batch]
    return torch.where(n > 0, total / n.clamp(min=1), torch.nan)


def _repeat(batch: Mapping[str, torch.Tensor], copies: int) -> dict[str, torch.Tensor]:
    """Every batch-first tensor of `batch` stacked `copies` times along the batch axis (copy-major)."""
    return {name: value.repeat(copies, *([1] * (value.dim() - 1))) if isinstance(value, torch.Tensor) else value
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
) -> dict[int, list[int]]:
    """For each layer of `heads`: up to `controls` heads of that layer, drawn at random (seeded), that are neither
    tested nor excluded."""
    rng = random.Random(seed)
    taken = set(heads) | set(exclude)
    out = {}
    for layer in sorted({layer for layer, _ in heads}):
        pool = [head for head in range(n_heads) if (layer, head) not in taken]
        out[layer] = sorted(rng.sample(pool, min(controls, len(pool))))
    return out


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
    """Ablation effect and z-score against same-layer control heads, for each of `heads`.

    `loaded`: a probe.models.LoadedModel. `batches`: dicts with `input_ids` `[batch seq]`, optional
    `attention_mask`, and `labels` `[batch seq]` for the default loss (:func:`example_loss`); a custom
    `loss(logits, batch) -> [batch]` may read any other batch-first tensors of the dict. `exclude`: heads never drawn
    as controls (the labelled ones). Returns one row per head, columns :data:`COLUMNS`.
    """
    heads = list(dict.fromkeys((int(layer), int(head)) for layer, head in heads))
    if not heads:
        return pd.DataFrame(columns=COLUMNS)
    if max_rows < 1:
        raise ProbeError("max_rows must be at least 1")
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    for layer, head in heads:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ProbeError(f"head L{layer}H{head} is not in this model ({n_layers} layers × {n_heads} heads)")
    if causal is None:
        causal = loaded.kind == ModelKind.CAUSAL_LM
    if loss is None:
        def loss(logits, batch):
            return example_loss(logits, batch["labels"].to(logits.device), causal)
    controls_of = control_heads(heads, n_heads, controls, exclude, seed)
    ablated = heads + [(layer, head) for layer, chosen in controls_of.items() for head in chosen]

    deltas: dict[Head, list[torch.Tensor]] = {head: [] for head in ablated}  # per batch: [batch] loss differences
    n_rows = max(len(batch["input_ids"]) for batch in batches) if batches else 1
    group = max(1, max_rows // n_rows)  # heads ablated per forward
    total = len(batches) * (1 + math.ceil(len(ablated) / group))
    done = 0
    for batch in batches:
        clean = _losses(loaded.model, batch, None, loss)  # [batch]
        rows = len(batch["input_ids"])
        done += 1
        for start in range(0, len(ablated), group):
            chosen = ablated[start:start + group]
            mask = torch.zeros(len(chosen), rows, n_layers, n_heads, dtype=torch.bool)  # [copy batch layer head]
            for copy, (layer, head) in enumerate(chosen):
                mask[copy, :, layer, head] = True
            losses = _losses(loaded.model, _repeat(batch, len(chosen)), mask.flatten(0, 1), loss)  # [copy·batch]
            for copy, head in enumerate(chosen):
                deltas[head].append(losses[copy * rows:(copy + 1) * rows] - clean)
            done += 1
            if progress:
                progress(done, total)

    effect = {head: float(torch.nanmean(torch.cat(values))) if values else math.nan
              for head, values in deltas.items()}
    records = []
    for layer, head in heads:
        control = torch.tensor([effect[(layer, other)] for other in controls_of[layer]], dtype=torch.float64)
        records.append({"layer": layer, "head": head, "ablation_effect": effect[(layer, head)],
                        "ablation_z": z_score(effect[(layer, head)], control), "n_controls": len(control)})
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def z_score(value: float, control: torch.Tensor) -> float:
    """(value − mean) / sd (ddof 1) of the control effects; NaN with fewer than two controls; ±inf when the controls
    do not vary and the value differs from them."""
    control = control[~torch.isnan(control)]
    if len(control) < 2 or math.isnan(value):
        return math.nan
    mean, sd = float(control.mean()), float(control.std())
    if sd == 0.0:
        return 0.0 if value == mean else math.copysign(math.inf, value - mean)
    return (value - mean) / sd
