"""Path patching on a type's paired probes: the change of the type's loss when a sender's corrupted output
reaches only chosen receivers (Wang et al. 2022), against random sender–receiver pairs.

:func:`patch_effects` runs, per paired batch, one clean forward (the clean loss; the senders' outputs and the
receivers' residual recorded), one corrupted forward (the senders' outputs on the corrupted input) and the
patched forwards: the clean batch repeated once per patch, ``max_rows`` rows per forward, each copy with its
own edge spliced in by :mod:`probe.engine.paths` (the model keeps the engine's fused attention kernel). An
effect is the mean over examples of loss(patched) − loss(clean), in nats (positive: the edge carries what the
type's task needs). Cost: 2 + P forwards' worth of rows per batch for P patches — a patch costs one forward of
its probes, the clean and corrupted forwards are shared (``benchmarks/circuits.py`` measures it).

:func:`control_patches` draws the controls: random sender–receiver pairs of the same shape — a random sender
of an earlier layer, random receivers with the tested receivers' layer histogram (any heads, so a layer that
the type's heads fill is drawn whole), a random mode — never the tested edge itself. :func:`z_and_beats` sets
an effect against them: z = (effect − mean) / sd, and whether it is above every control.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from probe.circuits.corruption import Pairs
from probe.engine import capture
from probe.engine.paths import RECEIVER_MODES, PathPatch, PathPlan, patch, record
from probe.errors import ProbeError
from probe.heads.ablation import example_loss
from probe.models import ModelKind

Head = tuple[int, int]
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class Measured:
    """What :func:`patch_effects` measured."""

    effects: tuple[float, ...]  # per patch: mean loss(patched) − loss(clean), nats
    clean_loss: float  # mean clean loss per example
    corrupted_loss: float  # mean loss of the whole corrupted input, on the clean labels
    forwards: int  # forward passes run
    rows: int  # batch rows forwarded in all (a patched forward of c copies of b rows: c·b)
    examples: int


def _inputs(batch: dict, device, copies: int = 1) -> dict[str, torch.Tensor]:
    return {name: batch[name].to(device).repeat(copies, *([1] * (batch[name].dim() - 1)))
            for name in MODEL_INPUTS if name in batch}


def patch_effects(
    loaded,
    pairs: Pairs,
    patches: Sequence[PathPatch],
    zero: bool = False,
    max_rows: int = 64,
    progress: Callable[[int, int], None] | None = None,
    memo: Callable[[str, Callable[[], dict]], dict] | None = None,
    step: str = "patch/",
) -> Measured:
    """The effect of each patch on the type's loss over every paired batch of `pairs` (module doc).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A pre-norm model (:class:`probe.engine.paths.PathPlan` refuses post-norm ones).
    pairs : Pairs
        The paired batches (:func:`probe.circuits.corruption.corrupted_pairs`).
    patches : sequence of PathPatch
        The edges, one per patched copy.
    zero : bool, default False
        Zero patching: the senders' output set to 0 instead of taken from the corrupted run (with
        ``downstream`` patches: the engine's ablation).
    max_rows : int, default 64
        Rows per patched forward (copies × batch).
    progress : callable, optional
        Called as ``progress(forwards done, forwards)``.
    memo : callable, optional
        ``memo(key, compute)`` (:data:`probe.heads.label.config.Memo`): each paired batch's clean and
        corrupted losses (``{step}b{i}``) and each patched forward's losses
        (``{step}b{i}/{first}-{last}:{digest}``) are resumable steps; ``probe circuit --out`` journals them
        (:class:`probe.runs.steps.StepStore`), so a killed run's rerun reads them back and runs only the
        rest. ``forwards`` counts the steps read back too.
    step : str, default "patch/"
        The steps' key prefix.

    Returns
    -------
    Measured

    Examples
    --------
    >>> from probe.circuits.corruption import corrupted_pairs
    >>> from probe.engine.paths import PathPatch
    >>> pairs = corrupted_pairs(loaded, "induction", examples=8)  # the first copy's tokens resampled
    >>> into_keys = [PathPatch(((0, head),), tuple((1, r, "K") for r in range(4))) for head in (1, 2)]
    >>> measured = patch_effects(loaded, pairs, into_keys)  # L0H1, then L0H2, into the induction heads' K
    >>> [round(effect, 1) for effect in measured.effects], measured.forwards
    ([9.6, -0.0], 3)
    """
    patches = list(patches)
    if not pairs.batches:
        raise ProbeError(f"no paired probes for {pairs.head_type}: {pairs.note or 'nothing to patch'}")
    if max_rows < 1:
        raise ProbeError("max_rows must be at least 1")
    model = loaded.model
    plan = PathPlan(model, loaded.attention_layers, loaded.n_heads)
    plan.check(patches)
    causal = loaded.kind == ModelKind.CAUSAL_LM
    device = next(model.parameters()).device
    senders = sorted({layer for p in patches for layer, _ in p.senders})
    receivers = sorted({layer for p in patches for layer, _, _ in p.receivers})
    final = any(p.logits for p in patches)
    deltas: list[list[torch.Tensor]] = [[] for _ in patches]
    clean_losses, corrupted_losses = [], []
    rows_per = max(len(b.clean["input_ids"]) for b in pairs.batches)
    per_forward = max(1, max_rows // rows_per)
    total = len(pairs.batches) * (2 + math.ceil(len(patches) / per_forward))
    forwards = rows = 0

    def loss_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return example_loss(logits, labels.to(logits.device), causal).float().cpu()  # [rows]

    for index, batch in enumerate(pairs.batches):
        labels = batch.clean["labels"]
        n = len(labels)
        recorded: dict = {}

        def recorded_runs(batch=batch, labels=labels, recorded=recorded) -> dict:
            """The clean and corrupted forwards of the batch (run once, when a step needs them)."""
            if not recorded:
                with record(plan, senders, receivers, final) as clean, capture(model, ()), \
                        torch.inference_mode():
                    clean_loss = loss_of(model(**_inputs(batch.clean, device)).logits, labels)  # [batch]
                with record(plan, senders) as corrupted, capture(model, ()), torch.inference_mode():
                    corrupted_loss = loss_of(model(**_inputs(batch.corrupted, device)).logits, labels)
                recorded.update(clean=clean, corrupted=corrupted,
                                losses={"clean": clean_loss, "corrupted": corrupted_loss})
            return recorded

        base = _step(memo, f"{step}b{index}", lambda: recorded_runs()["losses"])
        clean_loss = base["clean"]  # [batch]
        corrupted_losses.append(base["corrupted"])
        clean_losses.append(clean_loss)
        forwards, rows = forwards + 2, rows + 2 * n
        if progress:
            progress(forwards, total)
        for start in range(0, len(patches), per_forward):
            chunk = patches[start:start + per_forward]

            def patched(chunk=chunk, batch=batch, labels=labels) -> dict:
                runs = recorded_runs()
                with patch(plan, chunk, runs["clean"], None if zero else runs["corrupted"]), \
                        capture(model, ()), torch.inference_mode():
                    return {"losses": loss_of(model(**_inputs(batch.clean, device, len(chunk))).logits,
                                              labels.repeat(len(chunk), 1))}  # [copy·batch]

            key = f"{step}b{index}/{start}-{start + len(chunk) - 1}:{_digest(chunk, zero)}"
            losses = _step(memo, key, patched)["losses"]
            for copy in range(len(chunk)):
                deltas[start + copy].append(losses[copy * n:(copy + 1) * n] - clean_loss)
            forwards, rows = forwards + 1, rows + len(chunk) * n
            if progress:
                progress(forwards, total)
    effects = tuple(float(torch.nanmean(torch.cat(values))) if values else math.nan for values in deltas)
    return Measured(effects, float(torch.nanmean(torch.cat(clean_losses))),
                    float(torch.nanmean(torch.cat(corrupted_losses))), forwards, rows, pairs.examples)


def _step(memo, key: str, compute: Callable[[], dict]) -> dict:
    """compute(), through `memo` when given (a resumed run reads the step back)."""
    return compute() if memo is None else memo(key, compute)


def _digest(chunk: Sequence[PathPatch], zero: bool) -> str:
    """A short digest of a patched forward's patches (a step is never read back for other patches)."""
    return hashlib.sha256(repr((zero, list(chunk))).encode("utf-8")).hexdigest()[:12]


def control_patches(
    receivers: Sequence[Head],
    tested: Sequence[tuple[Head, str]],
    layers: Sequence[int],
    n_heads: int,
    controls: int = 8,
    seed: int = 0,
    modes: Sequence[str] = RECEIVER_MODES,
) -> list[PathPatch]:
    """Up to `controls` distinct random sender → receivers patches shaped like the tested ones (module doc):
    receivers with the layer histogram of `receivers` (drawn from every head of those layers), a sender drawn
    from the heads of earlier layers than the first of them, a mode from `modes`; never a (sender, mode) of
    `tested` into `receivers` itself."""
    rng = random.Random(seed)
    receivers = sorted({(int(a), int(b)) for a, b in receivers})
    if not receivers:
        return []
    counts: dict[int, int] = {}
    for layer, _ in receivers:
        counts[layer] = counts.get(layer, 0) + 1
    first = min(counts)
    senders = [(layer, head) for layer in layers if layer < first for head in range(n_heads)]
    if not senders:
        return []
    banned = {(sender, mode, tuple(receivers)) for sender, mode in tested}
    found: list[PathPatch] = []
    seen = set()
    for _ in range(50 * controls):
        if len(found) >= controls:
            break
        group = tuple(sorted(head for layer, count in counts.items()
                             for head in rng.sample([(layer, h) for h in range(n_heads)], count)))
        sender, mode = rng.choice(senders), rng.choice(list(modes))
        key = (sender, mode, group)
        if key in banned or key in seen:
            continue
        seen.add(key)
        found.append(PathPatch((sender,), tuple((layer, head, mode) for layer, head in group)))
    return found


def z_and_beats(effect: float, controls: Sequence[float]) -> tuple[float, bool]:
    """(z against the control effects, effect above every control); NaN and False with fewer than two."""
    values = torch.tensor([value for value in controls if not math.isnan(value)], dtype=torch.float64)
    if len(values) < 2 or math.isnan(effect):
        return math.nan, False
    mean, sd = float(values.mean()), float(values.std())
    if sd > 0:
        z = (effect - mean) / sd
    else:
        z = 0.0 if effect == mean else math.copysign(math.inf, effect - mean)
    return z, effect > float(values.max())


__all__ = ["Measured", "control_patches", "patch_effects", "z_and_beats"]
