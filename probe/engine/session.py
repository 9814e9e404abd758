"""The state of one open capture: which layer a module is, which sinks listen, which forward pass this is.

:mod:`probe.engine.capture` opens a session; :mod:`probe.engine.attention` reads the one active in the current
context (a ``ContextVar``, so concurrent captures in several threads see only their own sinks).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

import torch
from torch import nn

from probe.engine.sinks import GatherSink, Sink
from probe.errors import ProbeError

ENGINE_NAME = "probe_capture"

# Extra memory allowed for one α block, all selected heads together (bytes). Sets the query block size. 96 MiB
# keeps 128-row blocks (where the CPU GEMMs of QKᵀ and α·V reach full speed; at 42 rows they run ~30 % slower)
# for all 12 heads of a GPT-2-small layer up to 16K tokens; the block lives only during attention, below the
# MLP's peak.
DEFAULT_BLOCK_BYTES = 96 * 2**20
# At most this many query rows per block: small blocks let causal attention skip the keys above the diagonal.
MAX_BLOCK_ROWS = 128


@dataclass
class CaptureSession:
    """State of one `capture(...)` block: which layer a module is, which sinks listen, how far we are."""

    # id(attention module) -> its layer number, or the numbers of each application of a module applied several
    # times per forward (ALBERT's shared layers), in order (probe.layers.AttentionPlan.layer_of_module)
    layer_of_module: dict[int, int | tuple[int, ...]]
    sinks: tuple[Sink | GatherSink, ...]
    block_bytes: int
    ablate: torch.Tensor | None = None  # [batch|1 layer head] bool: True = that head's output is zeroed
    step: int = 0
    seen_layers: set[int] = field(default_factory=set)

    def next_layer(self, module: nn.Module) -> int:
        layer = self.layer_of_module.get(id(module))
        if layer is None:
            layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise ProbeError(f"cannot tell which layer {type(module).__name__} belongs to; capture supports "
                             "models whose layers sit in one ModuleList of config.num_hidden_layers entries")
        # a shared module: its first application not yet seen in this forward pass
        if isinstance(layer, tuple):
            layer = next((number for number in layer if number not in self.seen_layers), layer[0])
        if layer in self.seen_layers:  # the layer came round again: a new forward pass (generate, loops)
            self.step += 1
            self.seen_layers = set()
        self.seen_layers.add(layer)
        return layer


# the session open in this context (thread, task): what the attention function reports to
ACTIVE_SESSION: contextvars.ContextVar[CaptureSession | None] = contextvars.ContextVar(
    "probe_capture_session", default=None)
