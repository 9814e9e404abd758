"""Head profiles at any length: per (layer, head) attention distance, entropy, sink and local-window mass, the
dominant offset, with a bootstrap interval over inputs, and a streaming/retrieval split (DuoAttention,
MInference).

:func:`head_profiles` runs one input per forward on the capture engine with a
:class:`~probe.heads.profile_sink. ProfileSink`; nothing [query, key] is kept beyond one streamed block, so
32K-token inputs profile on a CPU. Inputs longer than `query_rows` have their query rows sampled (one
uniformly drawn row in each of `query_rows` equal strata of positions, seeded): the engine then keeps its
fused kernel and rebuilds α of those rows only. Every statistic is then the exact mean over the sampled rows;
with `query_rows ≥ seq_len` it is the mean over all rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

import pandas as pd
import torch

from probe import models
from probe.engine import capture
from probe.errors import ProbeError
from probe.heads import stats
from probe.heads.probesets import content_token_ids, special_frame
from probe.heads.profile_sink import ROW_STATS, ProfileSink, RowWindows

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ProfileConfig:
    """How heads are profiled. The `probe profile` flags mirror these fields."""

    seq_len: int = 4096  # tokens per input (special tokens included); capped by the model's positions
    query_rows: int = 1024  # query rows sampled per input (stratified); inputs no longer use every row
    sink_tokens: int = 4  # keys 0 .. k−1 count as the attention sink (StreamingLLM keeps 4)
    window: int = 256  # |query − key| < window is the local window (DuoAttention keeps 256 recent tokens)
    max_offset: int = 64  # the dominant offset is searched among query − key in [−max_offset, max_offset]
    threshold: float = 0.9  # streaming_mass ≥ threshold: the head is "local" (streaming), else "retrieval"
    n_bootstrap: int = 1000  # bootstrap resamples of the inputs
    confidence: float = 0.95  # width of the intervals
    seed: int = 0  # seeds random inputs, the row sample and the bootstrap
    block_bytes: int = 8 * 2**20  # memory budget of one streamed α block (all heads of a layer)

    def check(self) -> None:
        for name in ("seq_len", "query_rows", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ProbeError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("sink_tokens", "window", "max_offset"):
            if getattr(self, name) < 0:
                raise ProbeError(f"--{name.replace('_', '-')} must be 0 or more")
        if not 0.0 <= self.threshold <= 1.0:
            raise ProbeError(f"--threshold {self.threshold} must lie in [0, 1]")
        if not 0.0 < self.confidence < 1.0:
            raise ProbeError(f"confidence {self.confidence} must lie in (0, 1)")


@dataclass(frozen=True, eq=False)
class RandomInputs:
    """`count` random inputs, each made only when iteration reaches it (nothing is held before it is
    profiled); re-iterable, giving the same inputs each time (from `seed`); ``len()`` is `count`. See
    :func:`random_inputs`."""

    prefix: tuple[int, ...]  # the tokenizer's special tokens before the body (e.g. <bos>)
    suffix: tuple[int, ...]  # and after it
    vocab: torch.Tensor  # [token] the non-special ids the body is drawn from
    body: int  # drawn tokens per input
    count: int
    seed: int

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(self.count):
            ids = self.vocab[torch.randint(0, len(self.vocab), (self.body,), generator=generator)]
            # [1 seq_len]
            yield torch.tensor([*self.prefix, *ids.tolist(), *self.suffix], dtype=torch.long)[None]


def random_inputs(loaded, n_inputs: int, seq_len: int, seed: int = 0) -> RandomInputs:
    """`n_inputs` inputs of `seq_len` tokens each: the tokenizer's special frame (e.g. <bos>) around uniformly
    drawn non-special tokens (seeded). Each is `[1, seq_len]` long; they are streamed
    (:class:`RandomInputs`)."""
    if n_inputs < 1:
        raise ProbeError("--random must be at least 1 input")
    prefix, suffix = special_frame(loaded.tokenizer)
    body = seq_len - len(prefix) - len(suffix)
    if body < 1:
        raise ProbeError(f"--seq-len {seq_len} leaves no room for tokens between the model's special tokens")
    return RandomInputs(tuple(prefix), tuple(suffix), content_token_ids(loaded.tokenizer), body,
                        n_inputs, seed)


def text_inputs(loaded, text: str, seq_len: int) -> list[torch.Tensor]:
    """A text cut into consecutive windows of `seq_len` tokens (each framed by the tokenizer's special
    tokens); a shorter tail is dropped unless it is the only window. Each is `[1, n]` long."""
    prefix, suffix = special_frame(loaded.tokenizer)
    body = seq_len - len(prefix) - len(suffix)
    if body < 1:
        raise ProbeError(f"--seq-len {seq_len} leaves no room for tokens between the model's special tokens")
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ProbeError("the text file has no tokens: give a file with text in it")
    windows = [ids[start:start + body] for start in range(0, len(ids), body)]
    if len(windows) > 1 and len(windows[-1]) < body:
        windows = windows[:-1]
    return [torch.tensor([*prefix, *window, *suffix], dtype=torch.long)[None] for window in windows]


def sample_rows(n_query: int, query_rows: int, generator: torch.Generator) -> torch.Tensor | None:
    """One uniformly drawn row in each of `query_rows` equal strata of [0, n_query) (`[row]` long, ascending),
    or None when every row is wanted (n_query ≤ query_rows)."""
    if n_query <= query_rows:
        return None
    edges = torch.linspace(0, n_query, query_rows + 1, dtype=torch.float64).floor().long()  # [stratum + 1]
    widths = (edges[1:] - edges[:-1]).clamp(min=1)
    draws = (torch.rand(query_rows, generator=generator, dtype=torch.float64) * widths).floor().long()
    return torch.unique(edges[:-1] + draws.clamp(max=widths - 1))


def head_profiles(
    loaded,
    inputs: Collection[torch.Tensor],  # each [1, n] or [n] token ids; a list, or RandomInputs (streamed)
    config: ProfileConfig = ProfileConfig(),  # noqa: B008 - frozen, so a shared default is safe
    progress: Progress | None = None,  # called with (inputs done, inputs in all)
) -> pd.DataFrame:
    """Profile every head of a loaded model (probe.models.LoadedModel) on `inputs`, one forward per input.

    Returns one row per (layer, head): for each statistic of :data:`~probe.heads.profile_sink.ROW_STATS` its
    mean over inputs of the per-input mean over rows, with `<stat>_ci_low`/`_ci_high` (percentile bootstrap
    over inputs); `dominant_offset` (query − key with the most mass, over all inputs) and
    `dominant_offset_share` (mean α there, with its interval); `span` ("local" when streaming_mass ≥
    threshold, else "retrieval"); and the settings.
    """
    config.check()
    n_inputs = len(inputs)
    if not n_inputs:
        raise ProbeError("no inputs to profile")
    windows = RowWindows(config.sink_tokens, config.window, config.max_offset)
    sink = ProfileSink(n_inputs, loaded.n_layers, loaded.n_heads, windows)
    generator = torch.Generator().manual_seed(config.seed)
    device = getattr(loaded, "device", "cpu")
    longest = 0
    with capture(loaded.model, sink, block_bytes=config.block_bytes), torch.inference_mode():
        for index, ids in enumerate(inputs):  # one at a time: streamed inputs are made here
            ids = ids if ids.dim() == 2 else ids[None]  # [1 n]
            if ids.shape[0] != 1:
                raise ProbeError("head_profiles takes one input per tensor ([1, n] or [n] token ids)")
            loaded.check_length(ids.shape[1], "an input")
            longest = max(longest, ids.shape[1])
            sink.begin_input(index, sample_rows(ids.shape[1], config.query_rows, generator))
            loaded.model(**models.model_inputs(loaded, ids.to(device)))  # encoder-decoders: decoder ids too
            if progress is not None:
                progress(index + 1, n_inputs)
    return profile_table(loaded, sink, config, n_inputs, longest)


def profile_table(loaded, sink: ProfileSink, config: ProfileConfig, n_inputs: int,
                  seq_len: int) -> pd.DataFrame:
    """The (layer, head) table from a sink filled with `n_inputs` inputs, the longest `seq_len` tokens (means
    over rows, then over inputs, bootstrap over inputs)."""
    real = list(loaded.attention_layers)  # every layer, or a hybrid's layers with α
    rows = sink.rows[:, real]  # [input layer head]
    if (rows == 0).any():
        raise ProbeError("some heads received no attention rows: the model's layers were not all captured")
    per_input = {name: sink.sums[name][:, real] / rows for name in ROW_STATS}  # [input layer head]
    offsets = sink.offsets[:, real] / rows[..., None]  # [input layer head offset]
    dominant = offsets.mean(0).argmax(-1)  # [layer head] index into the offset axis
    share = offsets.gather(-1, dominant[None, ..., None].expand(offsets.shape[0], -1, -1, 1))[..., 0]
    per_input["dominant_offset_share"] = share  # [input layer head]
    weights = stats.resample_weights(torch.arange(n_inputs), config.n_bootstrap, config.seed)
    n_heads = rows.shape[2]
    layer, head = torch.meshgrid(torch.tensor(real), torch.arange(n_heads), indexing="ij")
    table = {
        "model": loaded.name, "revision": loaded.revision,
        "layer": layer.flatten().numpy(), "head": head.flatten().numpy(),
        "head_name": [loaded.head_name(int(l_), int(h_))
                      for l_, h_ in zip(layer.flatten(), head.flatten(), strict=True)],
        "n_inputs": n_inputs, "seq_len": seq_len,
        "rows_per_input": (rows.mean(0)).flatten().numpy(),
    }
    for name, values in per_input.items():
        low, high = stats.percentile_interval(stats.bootstrap_means(values, weights), config.confidence)
        if name == "dominant_offset_share":
            table["dominant_offset"] = (dominant - config.max_offset).flatten().numpy()
        table[name] = values.mean(0).flatten().numpy()
        table[f"{name}_ci_low"] = low.double().flatten().numpy()
        table[f"{name}_ci_high"] = high.double().flatten().numpy()
    streaming = per_input["streaming_mass"].mean(0).flatten()
    table["span"] = ["local" if value >= config.threshold else "retrieval" for value in streaming.tolist()]
    table.update(sink_tokens=config.sink_tokens, window=config.window, threshold=config.threshold,
                 query_rows=config.query_rows, seed=config.seed)
    frame = pd.DataFrame(table)
    # enc / dec / cross, layers numbered within each
    if loaded.plan is not None and loaded.plan.is_multi_stack:
        located = [loaded.plan.locate(int(number)) for number in frame["layer"]]
        frame["layer"] = [local for _, local in located]
        frame.insert(2, "stack", [stack for stack, _ in located])
    return frame
