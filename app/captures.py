"""The explorer's and the grid's data: an input tokenized within the model's limits, α of one layer, every
head's pooled thumbnail, a head type's target pattern — each computed once per (model, input) through the
inference gate and kept in an LRU cache (:meth:`probe_app.cache.LRUCache.get_or_compute`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from probe import models
from probe.engine import capture, capture_attention
from probe.errors import ProbeError
from probe.heads.probesets import delimiter_ids, token_classes
from probe.heads.registry import target_pattern
from probe.naming import display_name

from .cache import LRUCache
from .facts import ModelFacts
from .gate import InferenceGate
from .inputs import parse_fasta, parse_token_ids
from .sinks import PoolSink

CHARS_PER_TOKEN = 16  # explorer text is capped at max_tokens × this many characters before it is tokenized
THUMBNAIL_BINS = 40  # each head's thumbnail in the grid is max-pooled to at most this many rows and columns


@dataclass(frozen=True)
class TokenInput:
    """One input as the explorer shows it."""

    model: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]


def model_inputs(loaded: models.LoadedModel, ids: Sequence[int]) -> dict:
    """One forward pass's inputs over `ids`: an encoder–decoder also gets its teacher-forced decoder ids."""
    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=loaded.device)  # [batch query]
    return models.model_inputs(loaded, input_ids, torch.ones_like(input_ids))


# bytes of α one layer request may capture ahead (the other layers of the same input): a layer step then
# costs no forward pass (issue 45: layer steps within 300 ms); 8 layers of 12 heads at 232 tokens take 10 MiB
PREFETCH_BYTES = 48 * 2**20


class Captures:
    """Tokenized inputs and cached captures of the served models.

    Parameters
    ----------
    facts : ModelFacts
        The models and their limits.
    gate : InferenceGate
        One forward pass at a time in the process, views before labelling.
    cache : LRUCache
        Where α of a layer and the thumbnails are kept.
    labels_of : callable
        spec -> the model's label table or None (a fixed_offset head's offset for its target pattern).
    """

    def __init__(self, facts: ModelFacts, gate: InferenceGate, cache: LRUCache,
                 labels_of: Callable[[str], pd.DataFrame | None]) -> None:
        self.facts, self.gate, self.cache, self.labels_of = facts, gate, cache, labels_of
        self._classes: dict[str, object] = {}  # TokenClasses per model spec (sentence ends, brackets)
        self._classes_lock = threading.Lock()

    def text_entry_bytes(self) -> int:
        """The longest input a link can keep, in bytes: the longest text the explorer reads (max_tokens × 16
        characters) at 4 bytes a character."""
        return self.facts.config.max_tokens * CHARS_PER_TOKEN * 4

    def encode(self, spec: str, text: str, as_ids: bool = False) -> TokenInput:
        """Tokenize the explorer's input (text, protein sequence or token ids), within the token cap."""
        loaded = self.facts.model(spec)
        text = text or ""
        cap = self.facts.token_cap(spec)
        if len(text) > cap * CHARS_PER_TOKEN:  # before tokenizing: a 10 MB paste costs nothing
            raise ProbeError(f"the input is {len(text):,} characters; the app takes at most "
                             f"{cap * CHARS_PER_TOKEN:,} ({cap} tokens): shorten it (probe capture writes "
                             "longer inputs to a file)")
        if as_ids:
            ids = parse_token_ids(text, len(loaded.tokenizer))
        elif loaded.kind == models.ModelKind.PROTEIN_MLM:
            ids = models.tokenize_protein(loaded, parse_fasta(text))["input_ids"][0].tolist()
        else:
            if not text.strip():
                raise ProbeError("the input is empty: type a prompt, then press Run")
            ids = loaded.tokenizer(text)["input_ids"]
        if len(ids) > cap:
            raise ProbeError(f"the input is {len(ids)} tokens; the app shows at most {cap} per request: "
                             "shorten it (probe capture writes longer inputs to a file)")
        tokens = loaded.tokenizer.convert_ids_to_tokens(ids)
        return TokenInput(spec, tuple(int(i) for i in ids), tuple(str(t) for t in tokens))

    def check_ids(self, spec: str, ids: Sequence[int]) -> tuple[int, ...]:
        """Token ids that came back from the browser: within the vocabulary and the token cap, or
        ProbeError."""
        loaded = self.facts.model(spec)
        cap, vocab = self.facts.token_cap(spec), len(loaded.tokenizer)
        if not isinstance(ids, (list, tuple)) or not ids or len(ids) > cap:
            raise ProbeError(f"the input must have 1 to {cap} tokens; press Run again")
        if not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
            raise ProbeError(f"token ids must lie in 0..{vocab - 1}; press Run again")
        return tuple(ids)

    def tokens(self, spec: str, ids: Sequence[int]) -> tuple[str, ...]:
        return tuple(str(t) for t in self.facts.model(spec).tokenizer.convert_ids_to_tokens(list(ids)))

    def decoder_ids(self, spec: str, ids: Sequence[int]) -> tuple[int, ...]:
        """The decoder's own input ids under teacher forcing: the start token, then `ids` shifted right (what
        the decoder and cross-attention queries read); `ids` itself for a single-stack model."""
        inputs = model_inputs(self.facts.model(spec), self.check_ids(spec, ids))
        if "decoder_input_ids" not in inputs:
            return tuple(ids)
        return tuple(int(i) for i in inputs["decoder_input_ids"][0].tolist())

    def layer_attention(self, spec: str, ids: Sequence[int], layer: int) -> np.ndarray:
        """α of every head of one layer for one input: [head query key] float32 (cached, inference
        serialised)."""
        loaded = self.facts.model(spec)
        if not 0 <= layer < loaded.n_layers:
            raise ProbeError(f"layer {layer} is out of range: {display_name(spec)} has layers "
                             f"0..{loaded.n_layers - 1}")
        if layer not in loaded.attention_layers:  # a hybrid's linear-attention / state-space layer
            kind = dict(loaded.plan.layer_kinds).get(layer, "no softmax attention") if loaded.plan else "no α"
            raise ProbeError(f"layer {layer} of {display_name(spec)} has no attention weights ({kind}); "
                             f"layers with attention: {', '.join(map(str, loaded.attention_layers))}")
        ids = self.check_ids(spec, ids)
        fetched = self.prefetched_layers(spec, len(ids), layer)

        def compute() -> np.ndarray:
            alpha = capture_attention(loaded.model, model_inputs(loaded, ids), layers=list(fetched))[0]
            alpha = alpha.float().cpu().numpy()  # [layer head query key]
            for index, other in enumerate(fetched):  # the layers a step will ask for next, from the same pass
                if other != layer:
                    self.cache.put(("layer", spec, ids, other), alpha[index])
            return alpha[fetched.index(layer)]  # [head query key]

        return self.cache.get_or_compute(("layer", spec, ids, layer), compute, self.gate.foreground)

    def prefetched_layers(self, spec: str, n_tokens: int, layer: int) -> tuple[int, ...]:
        """The layers one forward pass captures when `layer` is asked for (ascending, `layer` among them):
        every layer with α when their maps fit :data:`PREFETCH_BYTES` and a quarter of the cache's entries,
        so a layer step costs no forward pass; else the layer and its neighbours that fit; an
        encoder–decoder's layer alone (its stacks' maps differ in shape)."""
        loaded = self.facts.model(spec)
        if any(self.facts.stack_of(spec, other) for other in loaded.attention_layers):
            return (layer,)
        per_layer = loaded.n_heads * n_tokens * n_tokens * 4  # bytes of [head query key] float32
        room = max(1, min(PREFETCH_BYTES // max(per_layer, 1), self.cache.max_entries // 4))
        layers = sorted(loaded.attention_layers)
        if len(layers) <= room:
            return tuple(layers)
        at = layers.index(layer)
        low = max(0, min(at - (room - 1) // 2, len(layers) - room))
        return tuple(layers[low:low + room])

    def thumbnails(self, spec: str, ids: Sequence[int], bins: int = THUMBNAIL_BINS) -> np.ndarray:
        """Every head's α max-pooled to at most `bins` × `bins`: [layer head query_bin key_bin] float32 over
        the layers with α (`attention_layers`: a hybrid's softmax layers), from one forward pass that streams
        each block into the pooled grid (no [layer, head, N, N] tensor is kept)."""
        loaded = self.facts.model(spec)
        ids = self.check_ids(spec, ids)

        def compute() -> np.ndarray:
            sink = PoolSink(loaded.attention_layers, len(ids), bins)
            with capture(loaded.model, sink), torch.inference_mode():
                loaded.model(**model_inputs(loaded, ids))
            return sink.pooled.numpy()  # [layer head query_bin key_bin]

        return self.cache.get_or_compute(("thumbnails", spec, ids, bins), compute, self.gate.foreground)

    def head_attention(self, spec: str, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
        """One head's α: [query key] float32."""
        layer, head = self.facts.head_of(spec, {"layer": layer, "head": head})
        alpha = self.layer_attention(spec, ids, layer)  # [head query key]
        if not 0 <= head < alpha.shape[0]:
            raise ProbeError(f"head {head} is out of range: {display_name(spec)} has heads "
                             f"0..{alpha.shape[0] - 1}")
        return alpha[head]

    def target_pattern(self, spec: str, head_type: str, ids: Sequence[int], layer: int,
                       head: int) -> np.ndarray:
        """The head type's target keys for each query of `spec`'s input: [query key] bool (ProbeError for span
        types: coreference). fixed_offset uses the head's offset from the labels table (all offsets when there
        is none)."""
        loaded = self.facts.model(spec)
        offset = None
        table = self.labels_of(spec)
        if table is not None and "offset" in table.columns:
            rows = table[(table["head_type"] == head_type) & (table["layer"] == layer)
                         & (table["head"] == head)]
            offset = next((int(value) for value in rows["offset"] if pd.notna(value)), None)
        pattern = target_pattern(head_type, torch.tensor(list(ids), dtype=torch.long),
                                 causal=loaded.kind == models.ModelKind.CAUSAL_LM,
                                 delimiter_ids=delimiter_ids(loaded.tokenizer), candidate=offset,
                                 classes=self._token_classes(spec, loaded))  # [query key]
        return pattern.cpu().numpy().astype(bool)

    def _token_classes(self, spec: str, loaded):
        """Sentence ends and brackets of the model's tokenizer (one vocabulary scan per model)."""
        with self._classes_lock:
            classes = self._classes.get(spec)
        if classes is None:
            classes = token_classes(loaded.tokenizer)
            with self._classes_lock:
                self._classes[spec] = classes
        return classes
