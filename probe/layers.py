"""Which modules of a model compute attention weights, and the layer number each application gets.

:func:`attention_plan` reads the model's structure once (no forward pass) and returns an
:class:`AttentionPlan`:

* **fused** models: their attention modules call ``ALL_ATTENTION_FUNCTIONS`` (transformers'
  ``AttentionInterface``) in their ``forward`` — decided by what the module's code does, the same test
  transformers applies in ``_can_set_attn_implementation``, never by the class flag
  ``_supports_attention_backend`` (hybrids, StableLM, T5, BART and Whisper route through the interface without
  setting it);
* **eager** models: no module calls the interface (Bloom, DeBERTa-v2); the innermost modules whose ``forward``
  takes ``output_attentions`` return α themselves, and the eager fallback (:mod:`probe.engine.eager`) reads it
  there.

Layer numbers are the model's own: in a hybrid (Qwen3-Next, Jamba, Nemotron-H, LFM2, ...) only some layers
hold softmax attention; they keep their index in the model's layer list and the others (linear attention,
state-space, convolution) are listed as :attr:`AttentionPlan.no_alpha_layers`. A module applied several times
per forward (ALBERT shares one layer across depth) gets one layer number per application. Encoder–decoder
models (T5, BART, Whisper) get three stacks — encoder self-attention ``enc``, decoder self-attention ``dec``,
cross-attention ``cross`` — laid end to end on one layer axis (``enc`` layers first, then ``dec``, then
``cross``), so every sink indexes layers as for a single-stack model and :meth:`AttentionPlan.head_name`
writes ``enc.L3H2``.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import Literal

from torch import nn

from probe.anatomy import layer_lists, text_config
from probe.errors import ProbeError
from probe.naming import head_name

Engine = Literal["fused", "eager"]
EngineChoice = Literal["auto", "fused", "eager"]
ENGINE_CHOICES = ("auto", "fused", "eager")
INTERFACE = "ALL_ATTENTION_FUNCTIONS"
STACK_NAMES = ("enc", "dec", "cross")
EAGER_NOTE = ("{model}: its attention does not go through transformers' AttentionInterface; using the eager "
              "fallback, which holds each layer's full [batch head query key] attention (O(N²) memory, one "
              "layer at a time; --engine fused refuses such models)")


@dataclass(frozen=True)
class Stack:
    """One stack of attention layers on the engine's layer axis: layers ``first .. first + count - 1``."""

    name: str  # "enc", "dec", "cross"; "" for a single-stack model
    first: int  # engine layer number of the stack's layer 0
    count: int  # layers in the stack


@dataclass(frozen=True)
class AttentionPlan:
    """How the engine numbers a model's attention layers (see the module docstring).

    Attributes
    ----------
    engine : {"fused", "eager"}
        "fused": the attention modules go through ``AttentionInterface``; "eager": none does, α comes from the
        modules' own ``output_attentions``.
    n_layers : int
        Engine layer numbers run ``0 .. n_layers - 1`` (all stacks together).
    attention_layers : tuple of int
        The layer numbers that have α (ascending): every layer of a plain transformer, the softmax-attention
        layers of a hybrid.
    no_alpha_layers : tuple of int
        Model layers without α (linear attention, state-space, convolution layers of a hybrid); empty
        otherwise.
    layer_kinds : tuple of (int, str)
        The block type of each no-α layer as the config names it (``linear_attention``, ``mamba``, ``conv``).
    stacks : tuple of Stack
        One unnamed stack for a single-stack model; ``enc``, ``dec``, ``cross`` for an encoder–decoder.
    modules : tuple of (int, tuple of int)
        ``id(attention module)`` and the engine layer numbers it computes, in the order it is applied.

    Examples
    --------
    >>> from transformers import T5Config, T5ForConditionalGeneration
    >>> t5 = T5ForConditionalGeneration(T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=16, num_layers=2,
    ...                                          num_heads=2))  # a tiny random T5: three stacks
    >>> plan = attention_plan(t5)
    >>> [(stack.name, stack.first, stack.count) for stack in plan.stacks], plan.n_layers
    ([('enc', 0, 2), ('dec', 2, 2), ('cross', 4, 2)], 6)
    >>> plan.head_name(5, 1), plan.locate(5)  # engine layer 5 is the cross-attention of decoder layer 1
    ('cross.L1H1', ('cross', 1))
    """

    engine: Engine
    n_layers: int
    attention_layers: tuple[int, ...]
    no_alpha_layers: tuple[int, ...]
    layer_kinds: tuple[tuple[int, str], ...]
    stacks: tuple[Stack, ...]
    modules: tuple[tuple[int, tuple[int, ...]], ...]

    @property
    def layer_of_module(self) -> dict[int, int | tuple[int, ...]]:
        """``id(module)`` -> its layer number, or the tuple of them for a module applied several times."""
        return {key: layers[0] if len(layers) == 1 else layers for key, layers in self.modules}

    @property
    def is_multi_stack(self) -> bool:
        return len(self.stacks) > 1

    def locate(self, layer: int) -> tuple[str, int]:
        """Engine layer number -> (stack name, layer within the stack); ("", layer) for a single-stack
        model."""
        for stack in self.stacks:
            if stack.first <= layer < stack.first + stack.count:
                return stack.name, layer - stack.first
        raise ProbeError(f"layer {layer} is not in this model (layers 0..{self.n_layers - 1})")

    def head_name(self, layer: int, head: int) -> str:
        """"L3H2" for a single-stack model, "enc.L3H2" / "dec.L1H0" / "cross.L1H0" for an encoder–decoder."""
        stack, local = self.locate(layer)
        return head_name(local, head, stack or None)

    def no_alpha_note(self) -> str | None:
        """One line naming the layers without α, or None when every layer has it."""
        if not self.no_alpha_layers:
            return None
        kinds = dict(self.layer_kinds)
        groups: dict[str, list[int]] = {}
        for layer in self.no_alpha_layers:
            groups.setdefault(kinds.get(layer, "non-attention"), []).append(layer)
        said = "; ".join(f"{kind} layers {_ranges(layers)}" for kind, layers in groups.items())
        return (f"{len(self.attention_layers)} of {self.n_layers} layers have softmax attention "
                f"({_ranges(self.attention_layers)}); no attention weights in {said}")


def _ranges(numbers) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    out, numbers = [], sorted(numbers)
    start = previous = None
    for number in [*numbers, None]:
        if start is not None and (number is None or number != previous + 1):
            out.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = None
        if number is not None and start is None:
            start = number
        previous = number
    return ", ".join(out)


_ROUTES: dict[type, bool] = {}


def routes_through_interface(module: nn.Module) -> bool:
    """Whether the module's ``forward`` calls ``ALL_ATTENTION_FUNCTIONS`` (its source says so; cached per
    class)."""
    cls = type(module)
    if cls not in _ROUTES:
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError):  # a class defined in a REPL: no source, so not known to route
            source = ""
        _ROUTES[cls] = INTERFACE in source
    return _ROUTES[cls]


def _takes_output_attentions(module: nn.Module) -> bool:
    try:
        return "output_attentions" in inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return False


def eager_attention_modules(model: nn.Module) -> list[nn.Module]:
    """The innermost modules whose ``forward`` takes ``output_attentions`` (those that compute α
    themselves)."""
    takers = [module for module in model.modules() if _takes_output_attentions(module)]
    inner = []
    for module in takers:
        if not any(other is not module and _takes_output_attentions(other) for other in module.modules()):
            inner.append(module)
    return inner


def _block_kinds(config, n_layers: int) -> list[str] | None:
    """The config's per-layer block types (layer_types, layers_block_type, hybrid_override_pattern), if
    any."""
    for name in ("layer_types", "layers_block_type"):
        kinds = getattr(config, name, None)
        if isinstance(kinds, (list, tuple)) and len(kinds) == n_layers:
            return [str(kind) for kind in kinds]
    pattern = getattr(config, "hybrid_override_pattern", None)
    if isinstance(pattern, str) and len(pattern) == n_layers:
        names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        return [names.get(letter, letter) for letter in pattern]
    return None


def _single_stack(model: nn.Module, attention: list[nn.Module], engine: Engine) -> AttentionPlan:
    config = text_config(model.config)
    n_layers = getattr(config, "num_hidden_layers", None)
    lists = layer_lists(model, attention, n_layers) if n_layers else []
    if lists:
        layers = lists[-1]  # the innermost list of the right length: the transformer layers
        ids = {id(module) for module in attention}
        served: dict[int, list[int]] = {}
        for index, entry in enumerate(layers):
            for sub in entry.modules():
                if id(sub) in ids:
                    served.setdefault(id(sub), []).append(index)
        modules = tuple((id(module), tuple(served[id(module)])) for module in attention
                        if id(module) in served)
        with_alpha = sorted({layer for _, numbers in modules for layer in numbers})
        missing = [layer for layer in range(n_layers) if layer not in with_alpha]
        kinds = _block_kinds(config, n_layers) or []
        layer_kinds = tuple((layer, kinds[layer] if kinds else "non-attention") for layer in missing)
        return AttentionPlan(engine, n_layers, tuple(with_alpha), tuple(missing), layer_kinds,
                             (Stack("", 0, n_layers),), modules)
    shared = _shared_layers(config, attention)
    if shared is not None:
        count, modules = shared
        return AttentionPlan(engine, count, tuple(range(count)), (), (), (Stack("", 0, count),), modules)
    raise ProbeError(f"cannot find the {n_layers} transformer layers of {type(model).__name__}: capture "
                     "supports models whose layers sit in one ModuleList, or ALBERT-style shared layer "
                     "groups")


def _shared_layers(config, attention: list[nn.Module]):
    """ALBERT: `num_hidden_groups` groups of `inner_group_num` layers, group g applied to layers i with
    int(i / (L / G)) == g. One engine layer per application: (applications, modules)."""
    groups, inner = getattr(config, "num_hidden_groups", None), getattr(config, "inner_group_num", None)
    n_layers = getattr(config, "num_hidden_layers", None)
    if not (groups and inner and n_layers) or len(attention) != groups * inner:
        return None
    served: dict[int, list[int]] = {id(module): [] for module in attention}
    for step in range(n_layers):
        group = int(step / (n_layers / groups))
        for position in range(inner):
            served[id(attention[group * inner + position])].append(step * inner + position)
    return n_layers * inner, tuple((id(module), tuple(served[id(module)])) for module in attention)


def _stack_modules(root: nn.Module, attention: list[nn.Module], per_layer: int, what: str):
    """The layer list of one stack and, per layer, its attention modules in order (`per_layer` of them)."""
    inside = {id(sub) for sub in root.modules()}
    mine = [module for module in attention if id(module) in inside]
    lists = layer_lists(root, mine)
    if not mine or not lists:
        raise ProbeError(f"cannot find the {what} layers of this encoder-decoder model")
    layers = lists[-1]
    ids = {id(module) for module in mine}
    per = [[sub for sub in entry.modules() if id(sub) in ids] for entry in layers]
    if any(len(found) != per_layer for found in per):
        raise ProbeError(f"the {what} layers do not each hold {per_layer} attention module(s); "
                         "this encoder-decoder layout is not supported")
    return per


def _encoder_decoder(model: nn.Module, attention: list[nn.Module], engine: Engine) -> AttentionPlan:
    encoder = _stack_modules(model.get_encoder(), attention, 1, "encoder")
    decoder = _stack_modules(model.get_decoder(), attention, 2, "decoder")  # self-attention first, then cross
    n_enc, n_dec = len(encoder), len(decoder)
    stacks = (Stack("enc", 0, n_enc), Stack("dec", n_enc, n_dec), Stack("cross", n_enc + n_dec, n_dec))
    modules = [(id(found[0]), (index,)) for index, found in enumerate(encoder)]
    modules += [(id(found[0]), (n_enc + index,)) for index, found in enumerate(decoder)]
    modules += [(id(found[1]), (n_enc + n_dec + index,)) for index, found in enumerate(decoder)]
    total = n_enc + 2 * n_dec
    return AttentionPlan(engine, total, tuple(range(total)), (), (), stacks, tuple(modules))


def attention_plan(model: nn.Module) -> AttentionPlan:
    """The :class:`AttentionPlan` of `model`: its attention modules and their layer numbers.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model (a ``PreTrainedModel``: ``...ForCausalLM``, ``...ForMaskedLM``, an encoder, a
        seq2seq model).

    Returns
    -------
    AttentionPlan
        engine "fused" when some module calls ``ALL_ATTENTION_FUNCTIONS``, else "eager" when some module
        returns α through ``output_attentions``.

    Raises
    ------
    ProbeError
        No module computes attention weights either way, or the layers cannot be numbered.

    Examples
    --------
    >>> plan = attention_plan(probe.load("zoo:induction").model)
    >>> plan.engine, plan.n_layers, plan.attention_layers, plan.no_alpha_layers
    ('fused', 2, (0, 1), ())
    """
    cached = _PLANS.get(model)
    if cached is not None and cached[0] == _structure(model):
        return cached[1]
    plan = _build_plan(model)
    _PLANS[model] = (_structure(model), plan)
    return plan


# model -> (its structure when planned, the plan): capture() plans on every call, the walk is done once
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _structure(model: nn.Module) -> tuple[int, ...]:
    """Identity of the model's module tree (a replaced or added module makes a new plan)."""
    return tuple(id(module) for module in model.modules())


def _build_plan(model: nn.Module) -> AttentionPlan:
    fused = [module for module in model.modules() if routes_through_interface(module)]
    engine: Engine = "fused" if fused else "eager"
    attention = fused or eager_attention_modules(model)
    if not attention:
        raise ProbeError(f"{type(model).__name__} has no attention module that goes through transformers' "
                         "AttentionInterface or returns output_attentions, so its attention cannot be "
                         "captured")
    if getattr(model.config, "is_encoder_decoder", False) and hasattr(model, "get_decoder"):
        return _encoder_decoder(model, attention, engine)
    return _single_stack(model, attention, engine)


def choose_engine(plan: AttentionPlan, engine: EngineChoice, name: str = "this model") -> Engine:
    """"fused" or "eager" for `plan` and the user's choice ("auto": what the model does); "fused" on a model
    outside the interface refuses in one line."""
    if engine not in ENGINE_CHOICES:
        raise ProbeError(f"unknown engine {engine!r}: use auto, fused or eager")
    if engine == "fused" and plan.engine == "eager":
        raise ProbeError(f"{name}: its attention does not go through transformers' AttentionInterface, so "
                         "the fused engine cannot capture it; use --engine eager (or auto)")
    return plan.engine if engine == "auto" else engine


# The engine a user chose for a loaded model (probe.models.load(engine=...)): what capture(engine="auto") then
# uses.
_CHOSEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def set_engine(model: nn.Module, engine: Engine) -> None:
    """Record the engine every later ``capture(model, ...)`` with ``engine="auto"`` uses (set by ``load``)."""
    _CHOSEN[model] = engine


def chosen_engine(model: nn.Module) -> Engine | None:
    """The engine recorded by :func:`set_engine` for `model`, or None."""
    return _CHOSEN.get(model)


def config_attention_layers(config) -> tuple[tuple[int, ...], tuple[tuple[int, str], ...]] | None:
    """From a config alone (no weights): (layers with softmax attention, (layer, block type) of the others) of
    a hybrid, read from ``layer_types`` / ``layers_block_type`` / ``hybrid_override_pattern``; None when every
    layer is attention or the config does not say. For plans before loading (``probe card``); loading decides
    by code."""
    n_layers = getattr(config, "num_hidden_layers", None)
    kinds = _block_kinds(config, n_layers) if isinstance(n_layers, int) else None
    if kinds is None:
        return None
    def softmax(kind: str) -> bool:
        return kind == "hybrid" or ("attention" in kind and "linear" not in kind)
    with_alpha = tuple(layer for layer, kind in enumerate(kinds) if softmax(kind))
    if len(with_alpha) == n_layers:
        return None
    return with_alpha, tuple((layer, kind) for layer, kind in enumerate(kinds) if not softmax(kind))
