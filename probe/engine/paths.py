"""Path patching inside the engine: a sender head's output from a corrupted run reaches only chosen receivers.

An edge sender → receiver (Wang et al. 2022, "Interpretability in the Wild"; the freeze recipe of Hanna et al.
2023) is measured on a clean input x and a corrupted input x′ of the same length. With z_s the sender's
attention output (its slice of the output projection's input) and W_O^s its rows of the output projection, the
sender changes the residual stream by

    Δ_s = (z_s(x′) − z_s(x)) W_O^s          (``zero`` patching: z_s(x′) = 0, the engine's ablation)

and the patched forward runs x with every path frozen at its clean value except sender → receiver: a receiver
(layer l, head h, mode Q | K | V) gets as its projection input its own pre-attention norm of ``resid_l(x) +
Σ_s Δ_s`` (the senders of earlier layers than l), and only its own slice of the q, k or v projection's output
is replaced; ``logits`` gets the final norm of ``resid_final(x) + Σ_s Δ_s``. ``resid`` are the clean run's
values (recorded), so a receiver's input never includes another receiver's change (as in Wang et al.'s step
5). Everything downstream of a receiver is recomputed. The receiver's norm is applied to the patched residual
— the exact edge, as TransformerLens 4.3's ``transformer_lens.patching.get_act_patch_direct_path`` computes it
(its earlier releases divided Δ by the clean run's norm scale); the two agree to 4.8e-7 (docs/circuits.md).

How: through the intervention layer (:mod:`probe.engine.interventions`). :func:`record` watches
``L{l}.head_out`` (z, the sender layers), ``L{l}.attn_in`` (the pre-attention norm's input, the receiver
layers) and ``resid_final``; :func:`patch` edits, per receiver, the ``L{l}.q_in`` / ``k_in`` / ``v_in`` site
of its head with ``resid_l(x) + Σ_s Δ_s`` (one input shared by the heads of a copy, selected per copy by a
``where`` mask: the projection runs once per module on it and only the receivers' columns are spliced),
``final_norm`` with
the final norm of ``resid_final(x) + Σ_s Δ_s``, and (downstream patches) ``L{l}.head_out``. The attention
function is the engine's, untouched: the model keeps its fused kernel. Several patches share one forward: the
clean batch is repeated along the batch axis, one copy per patch (copy-major), each copy with its own senders
and receivers. Nothing ``[N, N]`` is held: the recordings are ``[batch seq width]`` per recorded layer.

Grouped-query models: a K or V receiver patches the key/value head it reads, which its group shares. Post-norm
models (BERT) are refused: their projections read a normalised sum, and no norm of the receiver's own sits
between the residual and the projection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from probe.anatomy import AttentionParts, attention_parts, final_norm
from probe.engine.edits import Edit
from probe.engine.interventions import intervene
from probe.engine.sites import site_map
from probe.errors import ProbeError
from probe.naming import head_name

Head = tuple[int, int]  # (layer, head)
RECEIVER_MODES = ("Q", "K", "V")


@dataclass(frozen=True)
class PathPatch:
    """One patched forward copy: the senders whose corrupted output is let through, and where it goes."""

    senders: tuple[Head, ...]
    receivers: tuple[tuple[int, int, str], ...] = ()  # (layer, head, "Q" | "K" | "V")
    logits: bool = False  # also the senders' direct path to the final norm (the logits)
    # every path: the senders' outputs replaced in the running forward (activation patching; with zero
    # patching, the engine's ablation); receivers and logits are then not used
    downstream: bool = False


@dataclass
class Recording:
    """What one forward left at the recorded places (detached, on the model's device)."""

    outputs: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [batch seq heads·d_v]
    residual: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [batch seq d_model]
    final: torch.Tensor | None = None  # [batch seq d_model]: the final norm's input


class PathPlan:
    """Where a model's attention parts sit for patching (checked once).

    Parameters
    ----------
    model : torch.nn.Module
        A pre-norm transformers model (GPT-2, Llama-family, …).
    layers : sequence of int
        The layer numbers of its attention modules, in module order (``LoadedModel.attention_layers``).
    n_heads : int
        Query heads per layer.
    """

    def __init__(self, model: nn.Module, layers: Sequence[int], n_heads: int) -> None:
        found = attention_parts(model)
        if len(found) != len(layers):
            raise ProbeError(f"found {len(found)} attention modules with a value projection for "
                             f"{len(layers)} "
                             "attention layers: path patching needs one per layer")
        self.parts: dict[int, AttentionParts] = dict(zip(layers, found, strict=True))
        self.n_heads = n_heads
        self.sites = site_map(model)
        self.model = model
        for layer, parts in self.parts.items():
            missing = [name for name in ("query", "key", "value", "output") if getattr(parts, name) is None]
            if missing:
                raise ProbeError(f"layer {layer}: no {' / '.join(missing)} projection found: path patching "
                                 "needs them")
            if parts.norm is None:
                raise ProbeError(f"{type(model).__name__} has no norm before attention (a post-norm model, "
                                 "e.g. BERT): a receiver's input is not a norm of the residual stream, so "
                                 "the exact edge is not defined; path patching refused")
        self.final = final_norm(model)
        parts = next(iter(self.parts.values()))
        self.d_head = parts.query.width_out // n_heads
        self.d_v = parts.output.width_in // n_heads
        self.n_kv = parts.key.width_out // self.d_head

    def columns(self, layer: int, head: int, mode: str) -> tuple[nn.Module, slice]:
        """The projection module a receiver reads through and its output columns there."""
        parts = self.parts[layer]
        kv = head // (self.n_heads // self.n_kv)
        projection, start, width = {"Q": (parts.query, head * self.d_head, self.d_head),
                                    "K": (parts.key, kv * self.d_head, self.d_head),
                                    "V": (parts.value, kv * self.d_v, self.d_v)}[mode]
        offset = projection.part.start if projection.part is not None else 0
        return projection.module, slice(offset + start, offset + start + width)

    def check(self, patches: Sequence[PathPatch]) -> None:
        """One-line ProbeError for a sender or receiver that is not here, a receiver not later than a sender,
        or logits without a final norm."""
        for patch in patches:
            for layer, head in patch.senders:
                if layer not in self.parts or not 0 <= head < self.n_heads:
                    raise ProbeError(f"sender {head_name(layer, head)} is not an attention head here")
            for layer, head, mode in patch.receivers:
                if layer not in self.parts or not 0 <= head < self.n_heads or mode not in RECEIVER_MODES:
                    raise ProbeError(f"receiver {head_name(layer, head)} {mode} is not an attention head and "
                                     f"mode ({', '.join(RECEIVER_MODES)}) here")
                if not any(sender < layer for sender, _ in patch.senders):
                    raise ProbeError(f"receiver {head_name(layer, head)} has no sender in an earlier layer")
            if patch.downstream and (patch.receivers or patch.logits):
                raise ProbeError("a downstream patch (every path from the senders) takes no receivers")
            if patch.logits and self.final is None:
                raise ProbeError("no final norm found: the direct path to the logits is not patched")


@contextlib.contextmanager
def record(plan: PathPlan, outputs: Sequence[int] = (), residual: Sequence[int] = (),
           final: bool = False) -> Iterator[Recording]:
    """Inside the block, each forward records the output-projection input of the `outputs` layers
    (``head_out``), the pre-attention norm's input of the `residual` layers (``attn_in``) and (`final`) the
    final norm's input (``resid_final``), detached."""
    recording = Recording()

    def keeper(store: dict, key, flat: bool = False):
        def keep(_site: str, tensor: torch.Tensor) -> None:  # head_out: [batch seq head d_v] -> [… head·d_v]
            store[key] = tensor.detach().flatten(-2) if flat else tensor.detach()
        return keep

    def keep_final(_site: str, tensor: torch.Tensor) -> None:
        recording.final = tensor.detach()

    watch = {f"L{layer}.head_out": keeper(recording.outputs, layer, flat=True) for layer in outputs}
    for layer in residual:
        watch[f"L{layer}.attn_in"] = keeper(recording.residual, layer)
    if final:
        watch["resid_final"] = keep_final
    with intervene(plan.model, watch=watch, sites=plan.sites, any_thread=True):
        yield recording


class _Splicer:
    """The patched forward's state: Δ per receiver layer (lazy) and the patched projection outputs."""

    def __init__(self, plan: PathPlan, patches: Sequence[PathPatch], clean: Recording,
                 corrupted: Recording | None) -> None:
        self.plan, self.patches, self.clean, self.corrupted = plan, list(patches), clean, corrupted
        self.copies = len(self.patches)
        self.delta_of: dict[int | str, torch.Tensor] = {}
        self.changes: dict[int, torch.Tensor] = {}  # sender layer -> [copy batch seq d_model]
        sender_layers = sorted({layer for patch in self.patches if not patch.downstream
                                for layer, _ in patch.senders})
        for layer in sender_layers:
            z_clean = clean.outputs[layer]  # [batch seq heads·d_v]
            dz = (corrupted.outputs[layer] - z_clean) if corrupted is not None else -z_clean
            mask = torch.zeros(self.copies, plan.n_heads, dtype=dz.dtype, device=dz.device)  # [copy head]
            for copy, patch in enumerate(self.patches):
                for sender_layer, head in patch.senders:
                    if sender_layer == layer and not patch.downstream:
                        mask[copy, head] = 1
            mask = mask.repeat_interleave(plan.d_v, dim=1)  # [copy heads·d_v]
            weight = plan.parts[layer].output.weight().to(dz.dtype).to(dz.device)  # [heads·d_v d_model]
            self.changes[layer] = (dz[None] * mask[:, None, None, :]) @ weight  # [copy batch seq d_model]

    def delta(self, before: int | None) -> torch.Tensor:
        """Σ Δ of the senders of layers < `before` (None: every sender), `[copy·batch seq d_model]`."""
        key = "final" if before is None else before
        if key not in self.delta_of:
            total = None
            for layer, change in self.changes.items():
                if before is None or layer < before:
                    total = change if total is None else total + change
            if total is None:
                raise ProbeError(f"no sender before layer {before}")
            self.delta_of[key] = total.flatten(0, 1)  # [copy·batch seq d_model]
        return self.delta_of[key]

    def receiver_input(self, layer: int) -> torch.Tensor:
        """The receiver layer's patched residual resid_clean + Δ, `[copy·batch seq d_model]` (its norm is
        applied at the projection, by the intervention layer)."""
        residual = self.clean.residual[layer]  # [batch seq d_model]
        return residual.repeat(self.copies, 1, 1) + self.delta(layer).to(residual.dtype)

    def downstream_source(self, layer: int) -> torch.Tensor:
        """What the replaced senders' outputs become, `[copy·batch seq head d_v]`: the corrupted run's (or
        0)."""
        source = self.corrupted.outputs[layer] if self.corrupted is not None else torch.zeros_like(
            self.clean.outputs[layer])  # [batch seq heads·d_v]
        return source.repeat(self.copies, 1, 1).unflatten(-1, (self.plan.n_heads, self.plan.d_v))

    def final_output(self) -> torch.Tensor:
        """The final norm of resid_final(x) + Σ Δ, `[copy·batch seq d_model]` (the norm's own forward)."""
        residual = self.clean.final  # [batch seq d_model]
        patched = residual.repeat(self.copies, 1, 1) + self.delta(None).to(residual.dtype)
        return self.plan.final.forward(patched)  # [copy·batch seq d_model]


def _rows(mask: torch.Tensor, rows: int) -> torch.Tensor:
    """A per-copy mask `[copy …]` repeated for the `rows` batch rows of each copy: `[copy·batch 1 …]`."""
    return mask.repeat_interleave(rows, dim=0)[:, None]


@contextlib.contextmanager
def patch(plan: PathPlan, patches: Sequence[PathPatch], clean: Recording,
          corrupted: Recording | None = None) -> Iterator[None]:
    """Inside the block, a forward of the clean batch repeated ``len(patches)`` times (copy-major) runs copy c
    with ``patches[c]`` spliced in (module doc). `clean` must hold the output-projection inputs of every
    sender layer, the residual of every receiver layer and (for ``logits``) the final one; `corrupted` the
    sender layers' outputs on the corrupted input (None: ``zero`` patching, the senders' output set to 0)."""
    patches = list(patches)
    plan.check(patches)
    senders = {layer for p in patches for layer, _ in p.senders}
    receivers = {layer for p in patches for layer, _, _ in p.receivers}
    lacking = sorted(senders - set(clean.outputs)) + sorted(receivers - set(clean.residual))
    if corrupted is not None:
        lacking += sorted(senders - set(corrupted.outputs))
    if lacking or (any(p.logits for p in patches) and clean.final is None):
        raise ProbeError("the recordings lack a sender's output or a receiver's residual: record them with "
                         "probe.engine.paths.record first")
    splicer = _Splicer(plan, patches, clean, corrupted)
    copies, rows = len(patches), next(iter(clean.outputs.values())).shape[0]  # every patch has a sender
    # receivers: (layer, mode) -> [copy head] bool, the heads of that projection whose input is patched
    chosen: dict[tuple[int, str], torch.Tensor] = {}
    for copy, p in enumerate(patches):
        for layer, head, mode in p.receivers:
            heads = plan.n_heads if mode == "Q" else plan.n_kv
            chosen.setdefault((layer, mode), torch.zeros(copies, heads, dtype=torch.bool))
            chosen[(layer, mode)][copy, head if mode == "Q" else head // (plan.n_heads // plan.n_kv)] = True
    edits: dict[str, list[Edit]] = {}
    inputs = {layer: splicer.receiver_input(layer)[:, :, None] for layer in receivers}  # [copy·batch seq 1 d]
    for (layer, mode), heads in chosen.items():  # one input per layer: its norm computed once for q, k, v
        edits[f"L{layer}.{mode.lower()}_in"] = [Edit.replace(inputs[layer], where=_rows(heads, rows))]
    replaced: dict[int, torch.Tensor] = {}  # sender layer -> [copy heads] bool (downstream patches)
    for copy, p in enumerate(patches):
        for layer, head in p.senders if p.downstream else ():
            replaced.setdefault(layer, torch.zeros(copies, plan.n_heads, dtype=torch.bool))
            replaced[layer][copy, head] = True
    for layer, heads in replaced.items():
        source = splicer.downstream_source(layer)  # [copy·batch seq head d_v]
        edits[f"L{layer}.head_out"] = [Edit.replace(source, where=_rows(heads, rows))]
    wanted = torch.tensor([p.logits for p in patches])  # [copy]
    if bool(wanted.any()):
        edits["final_norm"] = [Edit.replace(splicer.final_output(), where=_rows(wanted, rows))]
    with intervene(plan.model, edit=edits, sites=plan.sites, any_thread=True):
        yield


__all__ = ["PathPatch", "PathPlan", "RECEIVER_MODES", "Recording", "patch", "record"]
