"""What the dashboard says about a served model: its kind, limits, layer and head names, why it is card-only
or not labelled. Read from the model registry; no forward pass, no state of its own."""

from __future__ import annotations

from probe import models
from probe.errors import ProbeError
from probe.naming import display_name

from .config import AppConfig
from .registry import ModelRegistry


class ModelFacts:
    """Facts about the registry's models, as every panel shows them."""

    def __init__(self, registry: ModelRegistry, config: AppConfig) -> None:
        self.registry, self.config = registry, config

    @property
    def specs(self) -> tuple[str, ...]:
        return self.registry.specs

    def model(self, spec: str) -> models.LoadedModel:
        """The loaded model (a ProbeError naming the reason for a card-only model)."""
        return self.registry.get(spec)

    def unusable(self, spec: str) -> str | None:
        """Why `spec` shows only its card (no tokenizer, not capturable), or None."""
        return self.registry.unusable(spec)

    def kind(self, spec: str) -> str:
        """"causal_lm", "masked_lm", "protein_mlm", … or "card only"."""
        if self.unusable(spec):
            return "card only"
        kind = self.model(spec).kind
        return str(getattr(kind, "value", kind))

    def is_protein(self, spec: str) -> bool:
        return not self.unusable(spec) and self.model(spec).kind == models.ModelKind.PROTEIN_MLM

    def is_seq2seq(self, spec: str) -> bool:
        """An encoder–decoder (T5, BART): three stacks of attention layers (enc, dec, cross)."""
        return not self.unusable(spec) and self.model(spec).kind == models.ModelKind.SEQ2SEQ_LM

    def token_cap(self, spec: str) -> int:
        """Longest explorer input for this model, in tokens: --max-tokens or the model's positions."""
        return min(self.config.max_tokens, self.model(spec).max_tokens)

    def residue_cap(self, spec: str) -> int:
        """Longest protein the app runs for this model, in residues: the model's own (its positions less the
        two special tokens, as `probe contacts`) or --max-residues, whichever is smaller. The explorer and the
        protein panel both say this number."""
        return min(self.config.max_residues, self.model(spec).max_tokens - 2)

    def residue_limit(self, spec: str) -> str:
        """"at most 510 residues (the model's positions)" for a protein model, "" otherwise."""
        if not self.is_protein(spec):
            return ""
        cap = self.residue_cap(spec)
        why = "the model's positions" if cap == self.model(spec).max_tokens - 2 else "--max-residues"
        return f"at most {cap} residues ({why})"

    def limits(self, spec: str) -> str:
        """The input limits of one model, as shown beside Run."""
        loaded = self.model(spec)
        cap = self.token_cap(spec)
        why = "the model's positions" if cap == loaded.max_tokens else "--max-tokens"
        text = f"at most {cap} tokens ({why})"
        if loaded.kind == models.ModelKind.PROTEIN_MLM:
            text += f" · proteins: {self.residue_limit(spec)}"
        return text

    def head_of(self, spec: str, selected) -> tuple[int, int]:
        """A selected-head payload from the browser -> (layer, head) of `spec`, checked; ProbeError
        otherwise."""
        loaded = self.model(spec)
        try:
            layer, head = int(selected["layer"]), int(selected["head"])
        except (TypeError, KeyError, ValueError):
            raise ProbeError(
                f"the selected head {selected!r} is not a layer and a head; click a head again") from None
        if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
            raise ProbeError(f"L{layer}H{head} is not a head of {display_name(spec)} "
                             f"({loaded.n_layers} layers × "
                             f"{loaded.n_heads} heads); click a head again")
        return layer, head

    def head_label(self, spec: str, layer: int, head: int) -> str:
        """The name of a head as shown everywhere: "L3H2", or "enc.L1H2" / "dec.L0H1" / "cross.L0H3" for an
        encoder–decoder (`layer` is the engine's flat layer number)."""
        return self.model(spec).head_name(layer, head)

    def layer_label(self, spec: str, layer: int) -> str:
        """"L3", or "enc.L1" / "dec.L0" / "cross.L0" for an encoder–decoder."""
        loaded = self.model(spec)
        stack, local = loaded.plan.locate(layer) if loaded.plan is not None else ("", layer)
        return f"{stack}.L{local}" if stack else f"L{layer}"

    def layer_names(self, spec: str) -> list[str] | None:
        """Every layer's name by flat layer number for an encoder–decoder (["enc.L0", …, "cross.L2"]); None
        for a single-stack model (its layers are plain "L3")."""
        loaded = self.model(spec)
        if loaded.plan is None or not loaded.plan.is_multi_stack:
            return None
        return [self.layer_label(spec, layer) for layer in range(loaded.n_layers)]

    def stack_of(self, spec: str, layer: int) -> str:
        """"enc", "dec" or "cross" for an encoder–decoder's layer; "" for a single-stack model."""
        loaded = self.model(spec)
        return loaded.plan.locate(layer)[0] if loaded.plan is not None else ""

    def label_refusal(self, spec: str) -> str | None:
        """Why the app labels no head of `spec` (one line), or None: probe label refuses encoder–decoders."""
        if not self.is_seq2seq(spec):
            return None
        return (f"{display_name(spec)} is an encoder–decoder: probe label does not label its heads (no head "
                "type is defined for a sequence-to-sequence model yet), so there is no label table; the "
                "views work")

    def describe(self, spec: str) -> str:
        if self.unusable(spec):
            return f"{display_name(spec)} · card only"
        loaded = self.model(spec)
        kind = getattr(loaded.kind, "value", loaded.kind)  # ModelKind may be a (str, Enum)
        layers = f"{loaded.n_layers} layers"
        if self.layer_names(spec):  # an encoder–decoder: "2 enc + 3 dec + 3 cross layers"
            layers = " + ".join(f"{stack.count} {stack.name}" for stack in loaded.plan.stacks) + " layers"
        return (f"{display_name(spec)} · {kind} · {layers} × {loaded.n_heads} heads · "
                f"revision {loaded.revision}")
