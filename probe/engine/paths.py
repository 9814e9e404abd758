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
— the exact edge, not TransformerLens' linearised ``get_act_patch_direct_path`` (which divides Δ by the clean
run's norm scale).

How: forward pre-hooks record z (on the output projections of the sender layers) and the residual (the
pre-attention norms of the receiver layers, the final norm); in the patched forward, forward hooks on the
receivers' projection modules (a fused q | k | v projection too) splice the patched columns. The attention
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

from probe.anatomy import AttentionParts, Projection, attention_parts, final_norm
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
    """Inside the block, each forward records the output-projection input of the `outputs` layers, the
    pre-attention norm's input of the `residual` layers and (`final`) the final norm's input."""
    recording = Recording()
    handles = []

    def keeper(store: dict, key):
        def hook(_module, args):
            store[key] = args[0].detach()
        return hook

    try:
        for layer in outputs:
            handles.append(plan.parts[layer].output.module.register_forward_pre_hook(
                keeper(recording.outputs, layer)))
        for layer in residual:
            norm = plan.parts[layer].norm
            handles.append(norm.register_forward_pre_hook(keeper(recording.residual, layer)))
        if final:
            def keep_final(_module, args):
                recording.final = args[0].detach()
            handles.append(plan.final.register_forward_pre_hook(keep_final))
        yield recording
    finally:
        for handle in handles:
            handle.remove()


class _Splicer:
    """The patched forward's state: Δ per receiver layer (lazy) and the patched projection outputs."""

    def __init__(self, plan: PathPlan, patches: Sequence[PathPatch], clean: Recording,
                 corrupted: Recording | None) -> None:
        self.plan, self.patches, self.clean, self.corrupted = plan, list(patches), clean, corrupted
        self.copies = len(self.patches)
        self.delta_of: dict[int | str, torch.Tensor] = {}
        self.inputs: dict[int, torch.Tensor] = {}
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
        """The receiver layer's norm of resid_clean + Δ, `[copy·batch seq d_model]` (once per layer)."""
        if layer not in self.inputs:
            residual = self.clean.residual[layer]  # [batch seq d_model]
            patched = residual.repeat(self.copies, 1, 1) + self.delta(layer).to(residual.dtype)
            self.inputs[layer] = self.plan.parts[layer].norm.forward(patched)  # the norm's own forward
        return self.inputs[layer]

    def projection_hook(self, layer: int, columns: torch.Tensor):  # columns [copy out] bool
        def hook(module, _args, output):
            patched = module.forward(self.receiver_input(layer))  # [copy·batch seq out]
            rows = output.shape[0] // self.copies
            # [copy·batch 1 out]
            chosen = columns.to(output.device).repeat_interleave(rows, dim=0)[:, None, :]
            return torch.where(chosen, patched.to(output.dtype), output)
        return hook

    def output_hook(self, layer: int, heads: torch.Tensor):  # heads [copy heads] bool: replaced there
        def hook(_module, args):
            z = args[0]  # [copy·batch seq heads·d_v]
            rows = z.shape[0] // self.copies
            source = self.corrupted.outputs[layer] if self.corrupted is not None else torch.zeros_like(
                self.clean.outputs[layer])  # [batch seq heads·d_v]
            chosen = heads.to(z.device).repeat_interleave(self.plan.d_v, dim=1)  # [copy heads·d_v]
            chosen = chosen.repeat_interleave(rows, dim=0)[:, None, :]  # [copy·batch 1 heads·d_v]
            patched = torch.where(chosen, source.repeat(self.copies, 1, 1).to(z.dtype), z)
            return (patched, *args[1:])
        return hook

    def final_hook(self, wanted: torch.Tensor):  # wanted [copy] bool
        def hook(module, _args, output):
            residual = self.clean.final  # [batch seq d_model]
            patched = module.forward(residual.repeat(self.copies, 1, 1)
                                     + self.delta(None).to(residual.dtype))  # [copy·batch seq d_model]
            rows = output.shape[0] // self.copies
            chosen = wanted.to(output.device).repeat_interleave(rows)[:, None, None]  # [copy·batch 1 1]
            return torch.where(chosen, patched.to(output.dtype), output)
        return hook


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
    masks: dict[int, tuple[int, nn.Module, torch.Tensor]] = {}  # id(module) -> (layer, module, [copy out])
    for copy, p in enumerate(patches):
        for layer, head, mode in p.receivers:
            module, columns = plan.columns(layer, head, mode)
            if id(module) not in masks:
                width = Projection(module).width_out
                masks[id(module)] = (layer, module, torch.zeros(len(patches), width, dtype=torch.bool))
            masks[id(module)][2][copy, columns] = True
    handles = []
    try:
        for layer, module, columns in masks.values():
            handles.append(module.register_forward_hook(splicer.projection_hook(layer, columns)))
        replaced: dict[int, torch.Tensor] = {}  # sender layer -> [copy heads] bool (downstream patches)
        for copy, p in enumerate(patches):
            for layer, head in p.senders if p.downstream else ():
                replaced.setdefault(layer, torch.zeros(len(patches), plan.n_heads, dtype=torch.bool))
                replaced[layer][copy, head] = True
        for layer, heads in replaced.items():
            handles.append(plan.parts[layer].output.module.register_forward_pre_hook(
                splicer.output_hook(layer, heads)))
        wanted = torch.tensor([p.logits for p in patches])
        if bool(wanted.any()):
            handles.append(plan.final.register_forward_hook(splicer.final_hook(wanted)))
        yield
    finally:
        for handle in handles:
            handle.remove()


__all__ = ["PathPatch", "PathPlan", "RECEIVER_MODES", "Recording", "patch", "record"]
