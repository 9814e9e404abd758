"""Model anatomy: where a transformers model keeps the parts that the measurements read.

The one place that knows, for any model whose attention the engine captures, where its parts sit:

* the **layer list** (:func:`find_layer_list`): the ``ModuleList`` of ``config.num_hidden_layers`` blocks;
* each attention module's **projections** (:func:`attention_parts`): query, key and value — separate
  (``q_proj`` / ``query`` / ``q`` / ``q_lin`` …) or fused (GPT-2's ``c_attn``, whose output is q | k | v) —
  and the **output projection** (``o_proj``, ``c_proj``, ``out_proj``, ``dense``, ``o``, ``wo``, ``out_lin``
  on the module, else ``output.dense`` on its parent: BERT, RoBERTa, ESM hand the attention function the
  ``SelfAttention`` child and keep the projection beside it);
* the **norms** whose gains fold into those maps in a pre-norm model (``ln_1`` / ``input_layernorm`` before
  attention, ``ln_f`` / ``norm`` / ``final_layernorm`` before the unembedding), and the model's **body**
  (the base model under ``base_model_prefix``);
* how to **read a weight** of any of them, also when accelerate has offloaded it to the CPU or disk
  (:func:`materialised`, :func:`weight_of`, :func:`linear_weight`): such a module keeps its parameters on the
  meta device between forwards, and is read through accelerate's own ``align_module_device``.

TransformerLens keeps one explicit weight map per architecture; this module keeps name heuristics instead,
so a model family it was never told about still works when it uses the common names. The names are tested on
every architecture of the coverage list (``tests/models/test_anatomy.py``); a part that is not found is
``None``, and the measurement that needs it says so (its values are NaN), never guesses.

Example
-------
>>> from probe.zoo.tiny import build_tiny
>>> from probe.anatomy import attention_parts, find_layer_list
>>> model, _ = build_tiny("gpt2")
>>> len(find_layer_list(model))
2
>>> parts = attention_parts(model)[0]
>>> tuple(parts.value.weight().shape)  # [d_model kv_width]: the value third of c_attn
(32, 32)
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from probe.errors import ProbeError

# accelerate is optional: only a model dispatched with a device_map carries its hooks (and then it is there)
try:
    from accelerate.utils import align_module_device, has_offloaded_params
except ImportError:  # pragma: no cover - accelerate is installed wherever a device_map was used
    align_module_device = has_offloaded_params = None

# An attention module's own projections, tried in order (Llama-family, BERT/ESM, T5, DistilBERT).
QUERY_NAMES = ("q_proj", "query", "q", "q_lin")
KEY_NAMES = ("k_proj", "key", "k", "k_lin")
VALUE_NAMES = ("v_proj", "value", "v", "v_lin")
# A fused projection whose output is q | k | v side by side (GPT-2's Conv1D, Phi-3, ModernBERT), split by the
# config's head counts (grouped-query: q is wider than k and v). NeoX's, Falcon's and Bloom's
# ``query_key_value`` interleave heads and are not read.
FUSED_QKV = ("c_attn", "qkv_proj", "Wqkv")
# The output projection on the attention module itself (Llama-family, GPT-2's Conv1D, OPT/BART, NeoX/Phi, T5,
# ModernBERT, DistilBERT), tried in order; else ``output.dense`` on its parent (BERT, RoBERTa, ESM).
PROJECTION_NAMES = ("o_proj", "c_proj", "out_proj", "dense", "o", "wo", "Wo", "out_lin")
# A pre-norm block's norm before attention, on the block (or its parent).
LAYER_NORMS = ("ln_1", "input_layernorm")
# The norm before the unembedding, on the model's body.
FINAL_NORMS = ("ln_f", "norm", "final_layernorm")


def text_config(config):
    """The text part of a config (``get_text_config()`` of a multimodal config; the config itself
    otherwise)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def body_prefix(model: nn.Module) -> str:
    """The attribute name of the model's body (``base_model_prefix``: GPT-2's ``transformer``, BERT's
    ``bert``), "" when it has none: every parameter outside it belongs to a task head."""
    return getattr(model, "base_model_prefix", "") or ""


def body(model: nn.Module) -> nn.Module:
    """The base model under :func:`body_prefix`, or `model` itself."""
    return getattr(model, body_prefix(model), model) if body_prefix(model) else model


def parents(model: nn.Module) -> dict[int, nn.Module]:
    """``id(child) -> parent`` for every module of `model`."""
    return {id(child): parent for parent in model.modules() for child in parent.children()}


def layer_lists(root: nn.Module, attention: Sequence[nn.Module],
                length: int | None = None) -> list[nn.ModuleList]:
    """ModuleLists under `root` (of `length` entries, if given) whose entries, together, hold every one of
    `attention` (outermost first)."""
    wanted = {id(module) for module in attention}
    found = []
    for module in root.modules():
        if isinstance(module, nn.ModuleList) and len(module) and length in (None, len(module)):
            inside = {id(sub) for entry in module for sub in entry.modules()}
            if wanted <= inside:
                found.append(module)
    return found


def find_layer_list(model: nn.Module) -> nn.ModuleList:
    """The ModuleList holding the model's transformer layers (``config.num_hidden_layers`` entries).

    Raises
    ------
    ProbeError
        No ModuleList of that length (ALBERT's shared groups, an encoder–decoder's two stacks).

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("gpt2")
    >>> find_layer_list(model) is model.transformer.h
    True
    """
    n_layers = getattr(text_config(model.config), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n_layers and n_layers:
            return module
    raise ProbeError(f"cannot find the {n_layers} transformer layers of {type(model).__name__}; "
                     "capture supports models whose layers sit in one ModuleList")


def is_projection(module: object) -> bool:
    """An ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2: weight stored ``[in out]``)."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


@contextlib.contextmanager
def materialised(module: nn.Module):
    """A context in which the parameters of `module` and of every module below it are real tensors.

    accelerate's offload hooks sit on the modules that own parameters (a disk- or CPU-offloaded layer keeps
    them on the meta device between forwards); each such module below `module` is entered with accelerate's
    own ``align_module_device``, and left as it was afterwards. Without accelerate, or without offloaded
    weights, nothing is done. Materialise one layer at a time: the weights of everything below `module` are in
    memory together inside the context.

    Examples
    --------
    >>> from accelerate import cpu_offload
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("gpt2")
    >>> _ = cpu_offload(model, execution_device="cpu")  # accelerate keeps the weights off the modules
    >>> attn = model.transformer.h[0].attn
    >>> attn.c_attn.weight.device
    device(type='meta')
    >>> with materialised(attn):
    ...     print(attn.c_attn.weight.device)
    cpu
    >>> attn.c_attn.weight.device  # as it was
    device(type='meta')
    """
    with contextlib.ExitStack() as stack:
        if align_module_device is not None:
            for sub in module.modules():
                if has_offloaded_params(sub):
                    stack.enter_context(align_module_device(sub))
        yield


def weight_identity(weight: torch.Tensor) -> tuple | None:
    """What tells a weight's values apart while it lives: its storage, in-place version, shape and device (a
    cache of something computed from the weight is valid while this is unchanged); None for an inference
    tensor, which has no version counter (nothing computed from it can be kept)."""
    try:
        return weight.data_ptr(), weight._version, tuple(weight.shape), weight.device
    except RuntimeError:
        return None


def weight_of(module: nn.Module, dtype: torch.dtype = torch.float64, copy: bool = True) -> torch.Tensor:
    """A copy of ``module.weight`` in `dtype` (float64 by default), read through accelerate's offload hooks
    (:func:`materialised`): a disk- or CPU-offloaded module holds its weight on the meta device between
    forwards. ``copy=False``: the parameter itself (detached) where it is already in `dtype`, for a reader
    that never writes to it."""
    with materialised(module):
        return module.weight.detach().to(dtype, copy=copy)  # one copy (.double().clone() made two)


def linear_weight(module: nn.Module, dtype: torch.dtype = torch.float64, copy: bool = True) -> torch.Tensor:
    """``[in out]`` copy in `dtype` (float64 by default) of an ``nn.Linear`` (stored ``[out in]``) or a
    ``Conv1D`` (stored ``[in out]``), so that a row vector times it is the layer's map (``copy=False``: a view
    of the parameter where it is already in `dtype`, as :func:`weight_of`)."""
    weight = weight_of(module, dtype, copy)
    return weight.T if isinstance(module, nn.Linear) else weight


@dataclass(frozen=True)
class Projection:
    """One linear map of an attention module: a projection, or a slice of a fused one's outputs.

    Attributes
    ----------
    module : torch.nn.Module
        The ``nn.Linear`` or GPT-2's ``Conv1D``.
    part : slice or None
        The output columns it owns in a fused projection (GPT-2's ``c_attn``: thirds); None: all of them.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> value = attention_parts(build_tiny("gpt2")[0])[0].value  # the value third of GPT-2's fused c_attn
    >>> value.part, value.width_in, value.width_out
    (slice(64, 96, None), 32, 32)
    >>> tuple(value.weight().shape), value.weight().dtype  # [in out], read as float64
    ((32, 32), torch.float64)
    """

    module: nn.Module  # nn.Linear or Conv1D
    part: slice | None = None  # the output columns it owns in a fused projection (GPT-2's c_attn: thirds)

    @property
    def width_in(self) -> int:
        """Input width, from the shape (no weight is read)."""
        weight = self.module.weight
        return weight.shape[1] if isinstance(self.module, nn.Linear) else weight.shape[0]

    @property
    def width_out(self) -> int:
        """Output width, from the shape (no weight is read)."""
        weight = self.module.weight
        full = weight.shape[0] if isinstance(self.module, nn.Linear) else weight.shape[1]
        return len(range(full)[self.part]) if self.part is not None else full

    def weight(self) -> torch.Tensor:
        """``[in out]`` float64, read through offload hooks (:func:`linear_weight`)."""
        weight = linear_weight(self.module)  # [in out_full]
        return weight[:, self.part] if self.part is not None else weight

    def bias(self) -> torch.Tensor | None:
        """``[out]`` float64, or None without a bias."""
        with materialised(self.module):
            bias = getattr(self.module, "bias", None)
            if bias is None:
                return None
            bias = bias.detach().to(torch.float64, copy=True)  # [out_full]
        return bias[self.part] if self.part is not None else bias


@dataclass(frozen=True)
class AttentionParts:
    """The projections and pre-attention norm of one attention module (None where not found).

    Attributes
    ----------
    module : torch.nn.Module
        The attention module (the one that calls the attention function).
    query, key, value : Projection or None
        Its input projections.
    output : Projection or None
        Its output projection (whose input is heads × value dim).
    norm : torch.nn.Module or None
        A pre-norm block's norm before attention; None for a post-norm block, or not found.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> bert, _ = build_tiny("bert")  # post-norm; the output projection sits beside the self-attention
    >>> parts = attention_parts(bert)[0]
    >>> beside = bert.bert.encoder.layer[0].attention.output.dense
    >>> type(parts.module).__name__, parts.norm, parts.output.module is beside
    ('BertSelfAttention', None, True)
    """

    module: nn.Module  # the attention module (the one that calls the attention function)
    query: Projection | None
    key: Projection | None
    value: Projection | None
    output: Projection | None  # its input is heads × value dim
    norm: nn.Module | None  # a pre-norm block's norm before attention (None: post-norm, or not found)


def _named(module: nn.Module, names: Sequence[str]) -> Projection | None:
    for name in names:
        candidate = getattr(module, name, None)
        if is_projection(candidate):
            return Projection(candidate)
    return None


def _qkv_widths(module: nn.Module, width: int) -> tuple[int, int, int] | None:
    """(q, k, v) output widths of a fused projection of `width` outputs: from the module's config where its
    head counts add up (grouped-query models), else equal thirds."""
    config = getattr(module, "config", None)
    if config is not None:
        config = text_config(config)
        heads = getattr(config, "num_attention_heads", None)
        kv = getattr(config, "num_key_value_heads", None) or heads
        width_model = getattr(config, "hidden_size", 0)
        dim = getattr(config, "head_dim", None) or (width_model // heads if heads else 0)
        if heads and dim and (heads + 2 * kv) * dim == width:
            return heads * dim, kv * dim, kv * dim
    return (width // 3,) * 3 if width % 3 == 0 else None


def _fused(module: nn.Module, which: int) -> Projection | None:
    """The `which`-th part (0 q, 1 k, 2 v) of a fused q | k | v projection."""
    for name in FUSED_QKV:
        fused = getattr(module, name, None)
        if is_projection(fused):
            widths = _qkv_widths(module, Projection(fused).width_out)
            if widths is None:
                return None
            start = sum(widths[:which])
            return Projection(fused, slice(start, start + widths[which]))
    return None


def output_projection(module: nn.Module, parent_of: dict[int, nn.Module] | None = None) -> nn.Module | None:
    """The output projection applied to `module`'s attention output (``nn.Linear`` or ``Conv1D``), or None.

    `parent_of` (:func:`parents`) is needed to find BERT-style projections, which sit beside the module."""
    found = _named(module, PROJECTION_NAMES)
    if found is not None:
        return found.module
    parent = (parent_of or {}).get(id(module))
    candidate = getattr(getattr(parent, "output", None), "dense", None) if parent is not None else None
    return candidate if is_projection(candidate) else None


def has_value_projection(module: nn.Module) -> bool:
    """Whether `module` holds a value projection of its own (a named one or a fused q | k | v)."""
    return _named(module, VALUE_NAMES) is not None or _fused(module, 2) is not None


def value_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that hold a value projection, in module order (one per layer for the models labelled)."""
    return [module for module in model.modules() if has_value_projection(module)]


def norm_gain(norm: nn.Module | None) -> torch.Tensor | None:
    """The gain ``[d_model]`` float64 of a LayerNorm or an RMSNorm whose weight is its gain (Gemma's ``1 + w``
    norms are not), read through offload; None otherwise."""
    if norm is None:
        return None
    kind = type(norm).__name__
    if isinstance(norm, nn.LayerNorm) or (kind.endswith("RMSNorm") and not kind.startswith("Gemma")):
        return None if getattr(norm, "weight", None) is None else weight_of(norm)
    return None


def _pre_norm(module: nn.Module, parent_of: dict[int, nn.Module]) -> nn.Module | None:
    """The norm before attention on the module's block (its parent, or the parent's parent)."""
    parent = parent_of.get(id(module))
    for holder in (parent, parent_of.get(id(parent)) if parent is not None else None):
        for name in LAYER_NORMS:
            norm = getattr(holder, name, None) if holder is not None else None
            if isinstance(norm, nn.Module):
                return norm
    return None


def attention_parts(model: nn.Module) -> list[AttentionParts]:
    """The parts of every module that holds a value projection, in module order (see the module doc).

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model.

    Returns
    -------
    list of AttentionParts
        One per such module (for a single-stack model: one per layer); any part not found is None.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> llama, _ = build_tiny("llama")  # grouped-query attention: 4 query heads, 2 key/value heads
    >>> parts = attention_parts(llama)
    >>> len(parts), parts[0].query.width_out, parts[0].key.width_out, type(parts[0].norm).__name__
    (2, 32, 16, 'LlamaRMSNorm')
    """
    parent_of = parents(model)
    found = []
    for module in value_modules(model):
        output = output_projection(module, parent_of)
        found.append(AttentionParts(
            module=module,
            query=_named(module, QUERY_NAMES) or _fused(module, 0),
            key=_named(module, KEY_NAMES) or _fused(module, 1),
            value=_named(module, VALUE_NAMES) or _fused(module, 2),
            output=Projection(output) if output is not None else None,
            norm=_pre_norm(module, parent_of)))
    return found


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm before the unembedding on the model's body (``ln_f``, ``norm``, ``final_layernorm``), or
    None."""
    base = body(model)
    for name in FINAL_NORMS:
        norm = getattr(base, name, None)
        if isinstance(norm, nn.Module):
            return norm
    return None


# A block's MLP (GPT-2, Llama-family, Mixtral/Jamba, OPT-style) or BERT's split ``intermediate`` / ``output``;
# its pre-MLP norm (Gemma's ``pre_feedforward_layernorm``; ``post_attention_layernorm`` only beside an
# ``input_layernorm``, where it is the Llama-family pre-MLP norm: OLMo-2 normalises attention's output with
# it).
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe")
MLP_NORMS = ("pre_feedforward_layernorm", "ln_2")


@dataclass(frozen=True)
class BlockParts:
    """One transformer layer's parts for the intervention sites (:mod:`probe.engine.interventions`).

    ``attention``: its :class:`AttentionParts` (None: no attention module in it); ``mlp_in`` / ``mlp_out``:
    the modules whose input / output is the MLP's (one ``mlp`` module, or BERT's ``intermediate`` and
    ``output.dense``); ``mlp_norm``: a pre-norm block's norm before the MLP; ``post_norm``: a BERT-style block
    (no norm before attention, the output projection beside the self-attention)."""

    block: nn.Module
    attention: AttentionParts | None
    mlp_in: nn.Module | None
    mlp_out: nn.Module | None
    mlp_norm: nn.Module | None
    post_norm: bool


def block_parts(model: nn.Module) -> list[BlockParts]:
    """:class:`BlockParts` of every layer of :func:`find_layer_list`, in order (a part not found is None)."""
    found = attention_parts(model)
    blocks = []
    for block in find_layer_list(model):
        inside = {id(module) for module in block.modules()}
        attention = next((parts for parts in found if id(parts.module) in inside), None)
        mlp = next((getattr(block, name) for name in MLP_NAMES if isinstance(getattr(block, name, None),
                                                                               nn.Module)), None)
        split_out = getattr(getattr(block, "output", None), "dense", None)
        bert = mlp is None and isinstance(getattr(block, "intermediate", None), nn.Module) and \
            is_projection(split_out)
        norms = MLP_NORMS + (("post_attention_layernorm",) if hasattr(block, "input_layernorm") else ())
        norm = next((getattr(block, name) for name in norms if isinstance(getattr(block, name, None),
                                                                          nn.Module)), None)
        post = (attention is not None and attention.norm is None and attention.output is not None
                and attention.output.module not in list(attention.module.modules()))
        blocks.append(BlockParts(block, attention, block.intermediate if bert else mlp,
                                 split_out if bert else mlp, norm, post))
    return blocks
