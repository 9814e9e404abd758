"""Head profiles at any length: per (layer, head) attention distance, entropy, sink and local-window mass, the
dominant offset, with a bootstrap interval over inputs, and a streaming/retrieval split (DuoAttention,
MInference).

:func:`head_profiles` runs one input per forward on the capture engine with a
:class:`~probe.heads.profile_sink. ProfileSink`; nothing [query, key] is kept beyond one streamed block, so
32K-token inputs profile on a CPU. Inputs longer than `query_rows` have their query rows sampled (one
uniformly drawn row in each of `query_rows` equal strata of positions, seeded): the engine then keeps its
fused kernel and rebuilds α of those rows only. Every statistic is then the exact mean over the sampled rows;
with `query_rows ≥ seq_len` it is the mean over all rows.

With ``twins`` = K > 0 (``probe profile --control untrained:K``) the same inputs, and the same sampled rows,
run through K untrained twins (:func:`probe.untrained.each_twin`, one at a time: K more forwards per input
through the same capture path, no new code in the engine), profiled by the same sink. Per measure the twins'
distribution over all their heads is reported beside each head (:func:`untrained_columns`: its 1st and 99th
percentiles, ``untrained_p01_<measure>`` and ``untrained_p99_<measure>``), and the table's one claim, `span`,
is checked against it: a "local" head beats the twins when its streaming mass is above their 99th percentile,
a "retrieval" head when it is below their 1st (``span_beats_untrained``; ``span_untrained_share`` is the share
of twin heads that earn the same span). A span the twins also earn comes from the architecture (a sliding
window, the length against the window), not from learning. """

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from probe import models
from probe.engine import capture
from probe.errors import ProbeError
from probe.heads import stats
from probe.heads.probesets import content_token_ids, special_frame
from probe.heads.profile_sink import ROW_STATS, ProfileSink, RowWindows
from probe.untrained import MAX_TWINS, UNTRAINED_QUANTILE, each_twin, untrained_bar

Progress = Callable[[int, int], None]
# The measures whose twin distribution is reported: every per-row statistic and the dominant offset's share
MEASURES = (*ROW_STATS, "dominant_offset_share")
STEP_TOKENS = 8192  # tokens of the inputs of one resumable step of head_profiles (inputs_per_step)


@dataclass(frozen=True)
class ProfileConfig:
    """How heads are profiled (frozen). The `probe profile` flags mirror these fields.

    Attributes
    ----------
    seq_len : int
        Tokens per input (special tokens included); capped by the model's positions.
    query_rows : int
        Query rows sampled per input (one per equal stratum of positions); inputs no longer use every row.
    sink_tokens, window, max_offset : int
        Keys 0 … k − 1 are the sink; ``|query − key| < window`` is the local window; the dominant offset is
        searched in ±max_offset.
    threshold : float
        ``streaming_mass ≥ threshold``: the head's span is "local", else "retrieval".
    n_bootstrap, confidence, seed : int, float, int
        Bootstrap resamples over inputs, the intervals' width, and the seed of inputs, rows and bootstrap.
    block_bytes : int
        Memory budget of one streamed α block.
    twins : int
        Untrained twins (:mod:`probe.untrained`) profiled on the same inputs and rows
        (``--control untrained:K``); 0 (the default): none. See :func:`untrained_columns`.

    Examples
    --------
    >>> ProfileConfig(seq_len=64, twins=3).twins, ProfileConfig().twins
    (3, 0)
    """

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
    twins: int = 0  # untrained twins profiled on the same inputs (--control untrained:K); 0: none

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
        if not 0 <= self.twins <= MAX_TWINS:
            raise ProbeError(f"twins must be 0 to {MAX_TWINS} untrained twins (--control untrained:K or "
                             "none)")


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
    memo: Callable[[str, Callable[[], dict]], dict] | None = None,  # the resumable steps go through it
) -> pd.DataFrame:
    """Profile every head of a loaded model on `inputs`, one forward per input (and per untrained twin).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model (what :func:`probe.load` returned).
    inputs : collection of torch.Tensor
        Token ids, each ``[1, n]`` or ``[n]``: a list, or :class:`RandomInputs` (made one at a time).
    config : ProfileConfig
        The statistics' settings; ``twins`` = K adds K untrained twins run on the same inputs and rows.
    progress : callable, optional
        Called with (forwards done, forwards in all): inputs × (1 + K).
    memo : callable, optional
        ``memo(key, compute)`` (:data:`probe.heads.label.config.Memo`): each run of consecutive inputs
        (:func:`inputs_per_step` of them; ``model/inputs{first}-{last}``, ``twin{k}/…``) is a resumable
        step holding those inputs' sums; ``probe profile`` journals them (:mod:`probe.runs.profiles`), so a
        killed run's rerun reads them back, runs only the other inputs, and gives the same table.

    Returns
    -------
    pandas.DataFrame
        One row per (layer, head): for each statistic of :data:`~probe.heads.profile_sink.ROW_STATS` its
        mean over inputs of the per-input mean over rows, with `<stat>_ci_low`/`_ci_high` (percentile
        bootstrap over inputs); `dominant_offset` (query − key with the most mass, over all inputs) and
        `dominant_offset_share` (mean α there, with its interval); `span` ("local" when streaming_mass ≥
        threshold, else "retrieval"); the settings; and with twins the columns of :func:`untrained_columns`
        (without: ``untrained_twins`` = 0 and no twin column).

    Examples
    --------
    >>> from probe.heads.profile import ProfileConfig, head_profiles, random_inputs
    >>> loaded = probe.load("zoo:induction")
    >>> config = ProfileConfig(seq_len=48, window=2, sink_tokens=0, threshold=0.5, n_bootstrap=50, twins=2)
    >>> table = head_profiles(loaded, random_inputs(loaded, 4, 48), config)
    >>> row = table.set_index("head_name").loc["L0H1"]  # the previous-token head: local, and not by design
    >>> row["span"], bool(row["span_beats_untrained"]), int(row["untrained_twins"])
    ('local', True, 2)
    >>> bool(row["streaming_mass"] > row["untrained_p99_streaming_mass"])
    True
    """
    config.check()
    n_inputs = len(inputs)
    if not n_inputs:
        raise ProbeError("no inputs to profile")
    twins = each_twin(loaded, config.twins) if config.twins else ()  # built one at a time, each let go
    total = n_inputs * (1 + config.twins)
    tables = []
    for index, model in enumerate(itertools.chain((loaded,), twins)):
        def counted(done: int, _: int, start: int = index * n_inputs) -> None:
            if progress is not None:
                progress(start + done, total)

        step = "model/" if index == 0 else f"twin{index - 1}/"
        sink, longest = _profiled(model, inputs, config, counted, memo, step)
        tables.append(profile_table(model, sink, config, n_inputs, longest))
    table = tables[0]
    if config.twins:
        return untrained_columns(table, tables[1:], config.threshold)
    table["untrained_twins"] = 0
    return table


def inputs_per_step(seq_len: int) -> int:
    """Inputs per resumable step of :func:`head_profiles` (about :data:`STEP_TOKENS` tokens, at least one).

    Examples
    --------
    >>> inputs_per_step(4096), inputs_per_step(64), inputs_per_step(100_000)
    (2, 128, 1)
    """
    return max(1, STEP_TOKENS // max(1, seq_len))


def _profiled(loaded, inputs, config: ProfileConfig, progress: Progress, memo=None,
              step: str = "model/") -> tuple[ProfileSink, int]:
    """The sink filled by one forward per input (the row sample drawn from `config.seed` afresh, so a twin
    sees the model's rows) and the longest input's length; through `memo`, runs of consecutive inputs are
    steps (a step read back fills its inputs' slices of the sink, bit for bit, without a forward)."""
    windows = RowWindows(config.sink_tokens, config.window, config.max_offset)
    n_inputs = len(inputs)
    sink = ProfileSink(n_inputs, loaded.n_layers, loaded.n_heads, windows)
    generator = torch.Generator().manual_seed(config.seed)
    device = getattr(loaded, "device", "cpu")
    per_step = inputs_per_step(config.seq_len)
    longest = 0

    def forwards(pending: list) -> dict[str, torch.Tensor]:
        for index, ids, rows in pending:
            sink.begin_input(index, rows)
            loaded.model(**models.model_inputs(loaded, ids.to(device)))  # encoder-decoders: decoder ids too
            progress(index + 1, n_inputs)
        part = slice(pending[0][0], pending[-1][0] + 1)
        return {**{name: sink.sums[name][part] for name in ROW_STATS}, "offsets": sink.offsets[part],
                "rows": sink.rows[part]}

    def run(pending: list) -> None:
        if memo is None:
            forwards(pending)
            return
        first, last = pending[0][0], pending[-1][0]
        kept = memo(f"{step}inputs{first}-{last}", lambda: forwards(pending))
        part = slice(first, last + 1)
        for name in ROW_STATS:
            sink.sums[name][part] = kept[name]
        sink.offsets[part], sink.rows[part] = kept["offsets"], kept["rows"]
        progress(last + 1, n_inputs)

    pending: list = []
    with capture(loaded.model, sink, block_bytes=config.block_bytes), torch.inference_mode():
        for index, ids in enumerate(inputs):  # one at a time: streamed inputs are made here
            ids = ids if ids.dim() == 2 else ids[None]  # [1 n]
            if ids.shape[0] != 1:
                raise ProbeError("head_profiles takes one input per tensor ([1, n] or [n] token ids)")
            loaded.check_length(ids.shape[1], "an input")
            longest = max(longest, ids.shape[1])
            # drawn for every input, also for those read back: the later inputs' rows stay the same
            pending.append((index, ids, sample_rows(ids.shape[1], config.query_rows, generator)))
            if len(pending) == per_step or index == n_inputs - 1:
                run(pending)
                pending = []
    return sink, longest


def untrained_columns(table: pd.DataFrame, twin_tables: list[pd.DataFrame], threshold: float) -> pd.DataFrame:
    """`table` with its untrained twins' distribution beside each measure, and its `span` checked against it.

    Pure. Per measure m of :data:`MEASURES`, the twins' bars over every head of every twin
    (:func:`probe.untrained.untrained_bar`):
    ``untrained_p01_m`` (the 1 − :data:`~probe.untrained.UNTRAINED_QUANTILE` quantile) and ``untrained_p99_m``
    (the :data:`~probe.untrained.UNTRAINED_QUANTILE` quantile). ``span_untrained_share``: the share of twin
    heads whose span (streaming_mass ≥ `threshold`: local) is this head's. ``span_beats_untrained``: a local
    head's streaming mass is above ``untrained_p99_streaming_mass``, a retrieval head's below
    ``untrained_p01_streaming_mass`` — False where a twin head could make the same claim as easily.
    ``untrained_twins``: K.

    Parameters
    ----------
    table : pandas.DataFrame
        The model's profile (:func:`profile_table`).
    twin_tables : list of pandas.DataFrame
        The twins' profiles on the same inputs, one per twin.
    threshold : float
        The span threshold of the run.

    Returns
    -------
    pandas.DataFrame
        A copy of `table` with the columns above.

    Examples
    --------
    >>> import pandas as pd
    >>> from probe.heads.profile import untrained_columns
    >>> mine = pd.DataFrame({"streaming_mass": [0.95, 0.1], "span": ["local", "retrieval"]})
    >>> twin = pd.DataFrame({"streaming_mass": [0.2, 0.3, 0.4]})
    >>> out = untrained_columns(mine, [twin], threshold=0.9)
    >>> out["span_beats_untrained"].tolist(), out["span_untrained_share"].tolist()
    ([True, True], [0.0, 1.0])
    >>> [round(float(out[f"untrained_{q}_streaming_mass"][0]), 3) for q in ("p01", "p99")]
    [0.202, 0.398]
    """
    if not twin_tables:
        raise ProbeError("untrained_columns needs at least one twin's profile")
    twins = pd.concat(twin_tables, ignore_index=True)
    out = table.copy()
    for name in MEASURES:
        if name not in twins.columns:
            continue
        values = pd.to_numeric(twins[name], errors="coerce").to_numpy(dtype=float)
        out[f"untrained_p01_{name}"] = untrained_bar(values, 1 - UNTRAINED_QUANTILE)
        out[f"untrained_p99_{name}"] = untrained_bar(values)
    twin_local = float((pd.to_numeric(twins["streaming_mass"]) >= threshold).mean())
    local = out["span"] == "local"
    out["span_untrained_share"] = np.where(local, twin_local, 1.0 - twin_local)
    mass = pd.to_numeric(out["streaming_mass"])
    out["span_beats_untrained"] = np.where(local, mass > out["untrained_p99_streaming_mass"],
                                           mass < out["untrained_p01_streaming_mass"])
    out["untrained_twins"] = len(twin_tables)
    return out


def span_summary(table: pd.DataFrame) -> str:
    """The profile's one-line count of spans: "8 heads (3 local, 5 retrieval)", and with twins how many of
    each beat them ("3 local (1 beats the untrained twins)") or, without, that they were not run."""
    local = table["span"] == "local"
    k = int(table["untrained_twins"].iloc[0]) if "untrained_twins" in table.columns else 0
    if not k:
        return (f"{len(table)} heads ({int(local.sum())} local, {int((~local).sum())} retrieval; untrained "
                "twins not run: --control untrained:K)")
    beats = table["span_beats_untrained"].astype(bool)
    return (f"{len(table)} heads ({int(local.sum())} local, {int((local & beats).sum())} beyond {k} "
            f"untrained twins; {int((~local).sum())} retrieval, {int((~local & beats).sum())} beyond them)")


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
