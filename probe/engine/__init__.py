"""The capture engine: the model keeps its fused attention kernel, α is rebuilt from Q, K and the kernel's
LSE.

What belongs here: the attention and mask functions registered with transformers
(:mod:`~probe.engine.attention`), the keyword allow-list (:mod:`~probe.engine.keywords`), the kernels and the
score rule (:mod:`~probe.engine.kernels`), the per-capture session state (:mod:`~probe.engine.session`), the
:func:`capture` context manager (:mod:`~probe.engine.capture`), the eager fallback for models outside the
interface (:mod:`~probe.engine.eager`), the sink protocols and the needs a sink declares
(:mod:`~probe.engine.sinks`) and the generic sinks, one per module (:mod:`~probe.engine.dense`,
:mod:`~probe.engine.mass`), the intervention layer — named sites from the model's anatomy
(:mod:`~probe.engine.sites`), edits (:mod:`~probe.engine.edits`) and
:func:`~probe.engine.interventions.intervene` to watch or edit them, the one place a module hook is registered
(:mod:`~probe.engine.interventions`) — and path patching on it, which records a forward and splices a sender's
change into chosen receivers' projections (:mod:`~probe.engine.paths`). Nothing here knows about head types,
proteins or files: the engine may import only :mod:`probe.errors`, :mod:`probe.naming`, :mod:`probe.layers`
(which modules compute α) and :mod:`probe.anatomy` (where a model's projections and norms sit); every other
part of probe is built on it.

Examples
--------
>>> from probe.engine import DenseSink, capture
>>> sink = DenseSink(layers=[0], heads=[1])  # zoo:induction's previous-token head, L0H1
>>> with capture(loaded.model, sink), torch.inference_mode():  # the model keeps its sdpa kernel
...     _ = loaded.model(**inputs)
>>> sink.attention(0)[0, 0, 0].diagonal(-1).round(decimals=2)  # α(i, i − 1) of the 7-token prompt
tensor([0.9300, 0.9900, 1.0000, 0.9900, 0.9900, 0.9900])
"""

from probe.anatomy import find_layer_list
from probe.engine.capture import capture, capture_attention, register_engine
from probe.engine.dense import DenseSink
from probe.engine.mass import KeyMassSink
from probe.engine.session import DEFAULT_BLOCK_BYTES, ENGINE_NAME, MAX_BLOCK_ROWS
from probe.engine.sinks import (
    NOTHING,
    AttentionBlock,
    GatherSink,
    KeyReduction,
    ReducedBlock,
    ReduceSink,
    Sink,
    SinkNeeds,
)

__all__ = [
    "AttentionBlock",
    "DEFAULT_BLOCK_BYTES",
    "DenseSink",
    "ENGINE_NAME",
    "GatherSink",
    "KeyMassSink",
    "KeyReduction",
    "MAX_BLOCK_ROWS",
    "NOTHING",
    "ReduceSink",
    "ReducedBlock",
    "Sink",
    "SinkNeeds",
    "capture",
    "capture_attention",
    "find_layer_list",
    "register_engine",
]
