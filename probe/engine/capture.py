"""capture(): switch a model to the engine for a block of code, stream α into sinks, restore the model after.

The engine is registered with transformers' `AttentionInterface` (and `AttentionMaskInterface`, so the model
still builds its causal / padding / sliding-window masks) under the name ``"probe_capture"``. :func:`capture`
switches the model to it and restores the previous implementation afterwards; :func:`capture_attention` is the
one-call form that returns α of chosen heads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from probe.engine.attention import capture_attention_forward
from probe.engine.dense import DenseSink
from probe.engine.eager import eager_capture
from probe.engine.session import ACTIVE_SESSION, DEFAULT_BLOCK_BYTES, ENGINE_NAME, CaptureSession
from probe.engine.sinks import GatherSink, OutputNormSink, ReduceSink, Sink
from probe.errors import ProbeError
from probe.layers import EngineChoice, attention_plan, choose_engine, chosen_engine


def register_engine() -> None:
    """Register the engine's attention and mask functions with transformers (idempotent, cheap)."""
    AttentionInterface.register(ENGINE_NAME, capture_attention_forward)
    AttentionMaskInterface.register(ENGINE_NAME, sdpa_mask)


@contextlib.contextmanager
def capture(
    model: nn.Module,
    sinks: Sink | GatherSink | Sequence[Sink | GatherSink] = (),
    block_bytes: int = DEFAULT_BLOCK_BYTES,  # memory budget of one α block (all selected heads)
    # [layer head] or [batch layer head] bool: heads whose output is zeroed
    ablate: torch.Tensor | None = None,
    # "fused", "eager" (the fallback of probe.engine.eager) or "auto": what fits
    engine: EngineChoice = "auto",
) -> Iterator[None]:
    """Run `model` on the capture engine inside the block, streaming α into `sinks` (which may be empty).

    Every forward pass inside the ``with`` block (``model(...)``, ``model.generate(...)``, a submodule sharing
    the model's config) runs the fused attention kernel unchanged; for the heads some sink asks for, α is
    rebuilt from Q, K and the kernel's log-sum-exp one block of query rows at a time and handed to the sinks.
    The model's previous attention implementation is restored on exit, also when the forward raises. Captures
    may overlap on one model from several threads; each thread's sinks see only its own forward passes.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model, e.g. ``probe.models.load(...).model``. Its attention modules are found by what
        they do (:func:`probe.layers.attention_plan`): those that call ``AttentionInterface`` (GPT-2, BERT,
        ESM, Llama, hybrids' softmax layers, T5, BART, …) run on the fused engine; a model with none (Bloom,
        DeBERTa-v2) runs on the eager fallback (:mod:`probe.engine.eager`). Layers keep the model's numbers;
        an encoder–decoder's three stacks lie end to end on the layer axis (``AttentionPlan.stacks``).
    sinks : Sink or GatherSink, or a sequence of them
        Where α goes: a :class:`~probe.engine.sinks.Sink` receives dense blocks
        (:class:`~probe.engine.sinks.AttentionBlock`), a :class:`~probe.engine.sinks.GatherSink` α at a few
        keys per query row, a :class:`~probe.engine.sinks.ReduceSink` row reductions Σ_j α_ij w_j
        (:class:`~probe.engine.sinks.KeyReduction`). Empty: nothing is captured (useful with `ablate` alone).
    block_bytes : int, default 96 MiB
        Memory budget of one α block, all selected heads of a layer together, in bytes (float32); a block has
        at most :data:`~probe.engine.session.MAX_BLOCK_ROWS` query rows.
    ablate : torch.Tensor or None, shape=(layer, head) or (batch, layer, head), bool
        Heads whose attention output is zeroed (before the output projection): head ablation inside the
        attention function, no change to the model's code or weights. With a batch axis, each batch row
        ablates its own heads. None: no ablation.
    engine : {"auto", "fused", "eager"}, default "auto"
        "auto": what :func:`probe.models.load` recorded for the model (``--engine``), else fused where the
        model routes through the interface and eager where it does not; "fused" refuses a model outside the
        interface; "eager" streams the model's own eager α by forward hooks (O(N²) per layer; output norms are
        NaN there).

    Yields
    ------
    None
        The block runs with the engine switched on; read the results from the sinks afterwards.

    Raises
    ------
    ProbeError
        No module of the model computes attention weights (through the interface or ``output_attentions``), or
        "fused" was asked for a model outside the interface; `ablate` is not a 2-D or 3-D bool tensor; the
        model's transformer layers cannot be numbered.

    Examples
    --------
    >>> loaded = probe.models.load("zoo:induction")  # 2 layers x 4 heads
    >>> inputs = probe.models.tokenize_text(loaded, "rada ruga buse rada ruga buse")  # 7 tokens with <bos>
    >>> sink = DenseSink(layers=[0, 1])
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model.generate(**inputs, max_new_tokens=5, do_sample=False)
    >>> sink.attention(step=3).shape  # [batch layer head query key]: one query row against the KV cache
    torch.Size([1, 2, 4, 1, 10])
    """
    plan = attention_plan(model)
    if engine == "auto":
        engine = chosen_engine(model) or "auto"  # what probe.models.load(engine=...) recorded
    chosen = choose_engine(plan, engine, type(model).__name__)
    register_engine()
    sinks = tuple(sinks) if isinstance(sinks, (list, tuple)) else (sinks,)
    for sink in sinks:
        # the protocols: needs() and a receiver
        if not isinstance(sink, (Sink, GatherSink, ReduceSink, OutputNormSink)):
            raise ProbeError(f"{type(sink).__name__} is not a sink: it needs needs(layer, n_heads, n_query) "
                             "-> SinkNeeds and update(block), update_gathered(...), update_reduced(block) "
                             "or update_output_norms(...) (see docs/howto/sink.md)")
    session = CaptureSession(plan.layer_of_module, sinks, block_bytes, _ablation_mask(ablate))
    if chosen == "eager":
        ids = {key for key, _ in plan.modules}
        modules = [module for module in model.modules() if id(module) in ids]
        # an interface model forced onto the fallback: its modules run eager attention
        if plan.engine == "fused":
            _switch_to_engine(model, "eager")
        token = ACTIVE_SESSION.set(session)
        try:
            with eager_capture(model, modules, session):
                yield
        finally:
            ACTIVE_SESSION.reset(token)
            if plan.engine == "fused":
                _switch_back(model)
        return
    _switch_to_engine(model)
    token = ACTIVE_SESSION.set(session)
    try:
        yield
    finally:
        ACTIVE_SESSION.reset(token)
        _switch_back(model)


def _ablation_mask(ablate: torch.Tensor | None) -> torch.Tensor | None:
    """`ablate` as a bool `[batch|1 layer head]` tensor (checked), or None."""
    if ablate is None:
        return None
    ablate = torch.as_tensor(ablate)
    if ablate.dtype != torch.bool or ablate.dim() not in (2, 3):
        raise ProbeError("ablate must be a bool tensor shaped [layer, head] or [batch, layer, head]")
    return ablate if ablate.dim() == 3 else ablate[None]  # [batch|1 layer head]


# object, so the config is the capture identity: they share one reference count.
_SWITCH_LOCK = threading.Lock()
# id(config) -> (captures open on it, implementation before the first, the module the first one switched)
_USERS: dict[int, tuple[int, str, nn.Module]] = {}


def _capture_identity(model: nn.Module) -> int:
    return id(model.config)


def _switch_to_engine(model: nn.Module, name: str = ENGINE_NAME) -> None:
    with _SWITCH_LOCK:
        key = _capture_identity(model)
        count, previous, switched = _USERS.get(key, (0, model.config._attn_implementation, model))
        if count == 0:
            model.set_attn_implementation(name)
        _USERS[key] = (count + 1, previous, switched)


def _switch_back(model: nn.Module) -> None:
    with _SWITCH_LOCK:
        key = _capture_identity(model)
        count, previous, switched = _USERS[key]
        if count == 1:
            del _USERS[key]
            switched.set_attn_implementation(previous)  # undo exactly what the first capture did
        else:
            _USERS[key] = (count - 1, previous, switched)


def capture_attention(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    engine: EngineChoice = "auto",
) -> torch.Tensor:
    """One forward pass; returns α of the chosen layers × heads.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model whose attention goes through ``AttentionInterface`` (see :func:`capture`).
    inputs : dict of str to torch.Tensor
        The model's keyword inputs, e.g. ``input_ids`` and ``attention_mask``, shape (batch, query), long;
        what :func:`probe.models.tokenize_text` or a tokenizer returns.
    layers : sequence of int, optional
        Layers to capture (0-based); None: every layer.
    heads : sequence of int, optional
        Query heads to capture in each chosen layer (0-based); None: every head.
    engine : {"auto", "fused", "eager"}, default "auto"
        As in :func:`capture`.

    Returns
    -------
    alpha : torch.Tensor, shape=(batch, layer, head, query, key), float32
        On the CPU; the captured layers in ascending order (a hybrid's no-α layers are absent: see
        ``AttentionPlan.attention_layers``), heads in the order given. Each real query row sums to 1 over the
        keys; masked keys (padding, above the diagonal of a causal model) are exactly 0.

    Raises
    ------
    ProbeError
        The model does not route attention through ``AttentionInterface``, or a chosen layer does not exist
        (nothing was captured).

    Examples
    --------
    >>> loaded = probe.models.load("zoo:induction")  # 2 layers x 4 heads
    >>> inputs = probe.models.tokenize_text(loaded, "rada ruga buse rada ruga buse")  # a block, repeated
    >>> alpha = capture_attention(loaded.model, inputs, layers=[1])
    >>> alpha.shape  # [batch layer head query key]
    torch.Size([1, 1, 4, 7, 7])
    >>> alpha[0, 0, :, 4, 2].round(decimals=2)  # the second "rada" (row 4) on the token after the first
    tensor([1., 1., 1., 1.])
    >>> bool(alpha.sum(-1).allclose(torch.ones(1, 1, 4, 7)))  # every row sums to 1
    True
    """
    sink = DenseSink(layers, heads)
    with capture(model, sink, engine=engine), torch.inference_mode():
        model(**inputs)
    try:
        return sink.attention(0)
    except RuntimeError:  # torch.stack of layers with different shapes: an encoder-decoder's stacks
        if not attention_plan(model).is_multi_stack:
            raise
        raise ProbeError("the captured layers have different query/key lengths (the stacks of an "
                         "encoder-decoder): capture one stack at a time, layers=range(stack.first, "
                         "stack.first + stack.count) of probe.layers.attention_plan(model).stacks") from None


# ------------------------------------------------------------------------------------------------------------
# The attention function
# ------------------------------------------------------------------------------------------------------------
