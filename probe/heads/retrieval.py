"""Retrieval heads (Wu et al. 2024): which heads copy a needle out of a long haystack while the model
generates it.

Definition (Wu, Wang, Xiao, Peng, Fu 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality";
their code nightdessert/Retrieval_Head, ``retrieval_head_detection.py``, read for this module). A
needle-in-a-haystack prompt is prefilled, then the model decodes greedily with its KV cache. At decoding step
s the model is fed one token (the prompt's last token at s = 0, then its own previous output) and emits g_s =
argmax of its logits; a head's one query row at that step has an argmax key k_s. The head scores 1/|needle| at
step s when

    needle_start ≤ k_s < needle_end   and   token(k_s) = g_s

(its top-1 key lies inside the needle and holds the very token being generated), and its score on the probe is
the sum over the steps. The head's retrieval score is the mean over the probes the model actually retrieved —
Wu et al. keep a probe when the ROUGE-1 recall of the answer against the needle exceeds 50 %. A head that
copies every needle token scores 1. We add one rule: a length where the model retrieves fewer than half of the
probes (:data:`MIN_RETRIEVED`) gets no score (NaN), because conditioning on success then selects the probes a
positional shortcut happens to solve.

Probes (:func:`needle_probes`): seeded random tokens instead of Paul Graham essays, so every causal LM (and
the zoo's toy vocabularies) can be probed without a corpus — ``prefix · haystack · key · needle · haystack ·
key``: a key of ``key_len`` random tokens is written just before the needle and again at the end of the
prompt, where the model must continue with the needle. Key and needle tokens are distinct and never occur in
the haystack, so the needle is the only place to copy from; the needle's depth in the haystack is spread
evenly over the probes (Wu et al. sweep depths 0–100 %).

Where we differ from their code, and why:

* the needle span is the ``needle_len`` tokens the model must copy; theirs is the needle's answer clause
  (``real_needle``), the part of the needle sentence the model must produce — ours is all answer, the key that
  cues it is written apart;
* we decode exactly ``needle_len`` tokens (they decode up to 50 and stop at a newline; random-token needles
  have no newline);
* recall is ROUGE-1 recall on token ids (clipped unigram counts, no stemming: the tokens are not words);
* the prefill runs outside the capture (a plain forward, as their flash prefill), and the decoding steps
  inside it: the capture engine hands :class:`ArgmaxSink` one query row against the cached keys per step, and
  the sink keeps only the argmax key of every head — O(layers · heads) per step, never an `[N, N]` matrix — so
  16K–32K-token haystacks run on a CPU (they decode in eager mode and stop near 50K tokens on an 80 GB GPU).

Chance (:func:`uniform_chance`): a uniform head's argmax is a uniformly random key, so at step s it lands on a
needle position holding g_s with probability (copies of g_s in the needle) / (keys at step s); summed over the
steps and divided by |needle| like the score.

Longer than 450 lines because the definition, its probe set and its generation loop are one reading of
Wu et al.'s code, with the running examples tests/project/test_doctests.py runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from probe.engine import AttentionBlock, SinkNeeds, capture
from probe.errors import ProbeError
from probe.heads.generated import GeneratedScores
from probe.heads.probesets import content_token_ids, special_frame
from probe.models import ModelKind
from probe.naming import head_name

NEEDLE_LEN = 8  # tokens the model must copy
KEY_LEN = 2  # tokens written before the needle and again at the end of the prompt (the cue)
MIN_RECALL = 0.5  # Wu et al.: a probe counts when the answer's ROUGE-1 recall exceeds 50 %
# Ours: a length is scored only when the model retrieves at least this share of its probes. Conditioning on
# success alone credits heads that copy by position: zoo:positional (fixed offset −15) retrieves the 3 of 16
# needles that happen to lie ~16 tokens back, and on those its layer-1 heads score 0.6-0.9.
MIN_RETRIEVED = 0.5


@dataclass(frozen=True)
class RetrievalConfig:
    """Needle-in-a-haystack probes and decoding (``retrieval_scores``; `probe label --types retrieval` uses
    the label config's examples, lengths and seed with these defaults).

    Attributes
    ----------
    examples : int, default 16
        Needle probes per length (their depths spread evenly over the haystack).
    seq_len : int or tuple of int, default 4096
        Prompt tokens (specials included), one length or several.
    seed : int, default 0
        Seeds the haystacks, needles and keys.
    needle_len, key_len : int
        Tokens of the needle and of the key that precedes it (and asks for it again at the end).
    min_recall : float
        A probe counts when its answer's ROUGE-1 recall exceeds this (0: every probe counts).
    min_retrieved : float
        Fewer counted probes than this share: no score at this length (NaN).
    batch_size : int, default 8
        Prompts per ``generate()`` call.

    Examples
    --------
    >>> config = RetrievalConfig(examples=4, seq_len=(256, 512))
    >>> config.lengths
    (256, 512)
    """

    examples: int = 16  # needle probes per length (their depths spread evenly over the haystack)
    seq_len: int | tuple[int, ...] = 4096  # prompt tokens (specials included), one length or several
    seed: int = 0
    needle_len: int = NEEDLE_LEN
    key_len: int = KEY_LEN
    min_recall: float = MIN_RECALL  # keep a probe when its answer's recall > min_recall (0: keep every probe)
    min_retrieved: float = MIN_RETRIEVED  # fewer kept probes than this share: no score at this length (NaN)
    batch_size: int = 8  # probes per generate() call

    @property
    def lengths(self) -> tuple[int, ...]:
        return (self.seq_len,) if isinstance(self.seq_len, int) else tuple(self.seq_len)


# ------------------------------------------------------------------------------------------------------------
# Probes
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NeedleProbes:
    """Needle-in-a-haystack prompts of one length (no padding)."""

    input_ids: torch.Tensor  # [example seq] long: the prompts
    needle_start: torch.Tensor  # [example] long: first needle position
    needle_end: torch.Tensor  # [example] long: one past the last needle position
    depth: torch.Tensor  # [example] float: needle depth in the haystack, 0..1
    cluster: torch.Tensor  # [example] long: bootstrap clusters (one per probe)

    @property
    def needles(self) -> list[torch.Tensor]:
        return [row[start:end] for row, start, end in
                zip(self.input_ids, self.needle_start.tolist(), self.needle_end.tolist(), strict=True)]


def needle_sequence(
    generator: torch.Generator,
    weights: torch.Tensor,  # [vocab] float64 token probabilities (zero for specials)
    content_len: int,  # tokens after the prefix
    depth: float,  # 0..1: share of the haystack before the needle
    needle_len: int = NEEDLE_LEN,
    key_len: int = KEY_LEN,
) -> tuple[torch.Tensor, int, int]:
    """One prompt body ``haystack · key · needle · haystack · key``: (tokens `[content_len]` long, needle
    start, needle end) — positions within the body. Key and needle tokens are distinct and absent from the
    haystack."""
    haystack_len = content_len - 2 * key_len - needle_len
    if haystack_len < 0:
        raise ProbeError(f"a needle probe of {content_len} tokens cannot hold a {needle_len}-token needle "
                         f"and a {key_len}-token key twice: use a longer --seq-len")
    if int((weights > 0).sum()) < key_len + needle_len + 1:
        raise ProbeError(f"the vocabulary has fewer than {key_len + needle_len + 1} usable tokens: a needle "
                         "probe needs distinct key and needle tokens and a haystack of others")
    chosen = torch.multinomial(weights, key_len + needle_len, replacement=False, generator=generator)
    key, needle = chosen[:key_len], chosen[key_len:]
    hay_weights = weights.clone()
    hay_weights[chosen] = 0.0
    haystack = torch.multinomial(hay_weights, max(haystack_len, 1), replacement=True, generator=generator)
    haystack = haystack[:haystack_len]
    before = int(round(depth * haystack_len))
    body = torch.cat([haystack[:before], key, needle, haystack[before:], key])  # [content_len]
    start = before + key_len
    return body, start, start + needle_len


def needle_probes(
    tokenizer,
    n_examples: int,
    seq_len: int,
    seed: int,
    needle_len: int = NEEDLE_LEN,
    key_len: int = KEY_LEN,
    weights: torch.Tensor | None = None,
) -> NeedleProbes:
    """`n_examples` prompts of exactly `seq_len` tokens (the tokenizer's leading specials, e.g. <bos>,
    included); needle depths (i + ½) / n for probe i.

    Parameters
    ----------
    tokenizer
        The model's tokenizer.
    n_examples, seq_len : int
        Prompts, and tokens per prompt.
    seed : int
        Seeds the key, needle and haystack tokens.
    needle_len, key_len : int, default NEEDLE_LEN, KEY_LEN
        Tokens of the needle and of its key.
    weights : torch.Tensor, optional
        `[vocab]` token probabilities (probe.heads.corpus.token_weights); None: uniform.

    Returns
    -------
    NeedleProbes
    """
    prefix, _ = special_frame(tokenizer)  # no suffix: the model must continue the prompt
    if weights is None:
        vocab = content_token_ids(tokenizer)
        weights = torch.zeros(int(vocab.max()) + 1, dtype=torch.float64)
        weights[vocab] = 1.0
    generator = torch.Generator().manual_seed(seed)
    rows, starts, depths = [], [], []
    for index in range(n_examples):
        depth = (index + 0.5) / n_examples
        body, start, _ = needle_sequence(generator, weights, seq_len - len(prefix), depth,
                                         needle_len, key_len)
        rows.append(torch.cat([torch.tensor(prefix, dtype=torch.long), body]))
        starts.append(start + len(prefix))
        depths.append(depth)
    start = torch.tensor(starts, dtype=torch.long)
    return NeedleProbes(torch.stack(rows), start, start + needle_len, torch.tensor(depths),
                        torch.arange(n_examples))


# ------------------------------------------------------------------------------------------------------------
# The sink: one argmax key per head and decoding step
# ------------------------------------------------------------------------------------------------------------


class ArgmaxSink:
    """A capture sink for KV-cache decoding steps: keeps, for every step, example, layer and head, only the
    index of the key with the largest α (the head's top-1 key, ties to the first). Nothing else is kept:
    O(layers · heads) per step per example.

    Prefill the prompt outside the capture; a block with more than one query row is refused (it would make the
    engine stream α of every prompt row)."""

    def __init__(self, n_layers: int, n_heads: int, heads: Sequence[int] | None = None) -> None:
        self.n_layers, self.n_heads = n_layers, n_heads
        self.heads = None if heads is None else tuple(heads)
        self._steps: dict[int, torch.Tensor] = {}  # step -> [batch layer head] long, -1 = not captured

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        # a decoding row is not causally masked: its block always has every key, so the crop changes nothing
        return SinkNeeds(heads=tuple(range(n_heads)) if self.heads is None else self.heads, causal_crop=True)

    def update(self, block: AttentionBlock) -> None:
        if block.n_query != 1:
            raise ProbeError("ArgmaxSink scores decoding steps (one query row against the cached keys); "
                             "prefill the prompt outside the capture")
        alpha = block.alpha[:, :, 0]  # [batch head key]
        best = alpha.argmax(-1).cpu()  # [batch head] key index (absolute: keys are every cached position)
        keys = self._steps.get(block.step)
        if keys is None:
            keys = torch.full((alpha.shape[0], self.n_layers, self.n_heads), -1, dtype=torch.long)
            self._steps[block.step] = keys
        keys[:, block.layer, list(block.heads)] = best

    def argmax_keys(self) -> torch.Tensor:
        """`[step batch layer head]` long: the top-1 key of every head at every decoding step (−1: not
        captured)."""
        if not self._steps:
            raise ProbeError("no decoding step was captured")
        return torch.stack([self._steps[step] for step in sorted(self._steps)])


# ------------------------------------------------------------------------------------------------------------
# Pure scoring
# ------------------------------------------------------------------------------------------------------------


def retrieval_score(
    argmax_keys: torch.Tensor,  # [step batch layer head] long: each head's top-1 key at each step
    generated: torch.Tensor,  # [batch step] long: the token emitted at each step
    prompt: torch.Tensor,  # [batch seq] long: the prompts (every key < seq is a prompt position)
    needle_start: torch.Tensor,  # [batch] long
    needle_end: torch.Tensor,  # [batch] long
) -> torch.Tensor:
    """Wu et al.'s retrieval score of one probe `[batch layer head]` float: Σ over steps s of 1/|needle| where
    the head's top-1 key lies in [needle_start, needle_end) and holds the token generated at step s."""
    steps, batch = argmax_keys.shape[:2]
    if generated.shape != (batch, steps):
        raise ProbeError(f"generated is shaped {tuple(generated.shape)}; expected [batch={batch}, "
                         f"step={steps}]")
    # [batch seq+step]: keys past the prompt hold generated tokens
    sequence = torch.cat([prompt, generated], dim=1)
    keys = argmax_keys.clamp(min=0)  # [step batch layer head]
    flat = keys.permute(1, 0, 2, 3).reshape(batch, -1)  # [batch step·layer·head]
    # [step batch layer head]
    held = sequence.gather(1, flat).view(batch, steps, *keys.shape[2:]).permute(1, 0, 2, 3)
    inside = (keys >= needle_start[None, :, None, None]) & (keys < needle_end[None, :, None, None])
    hit = inside & (argmax_keys >= 0) & (held == generated.T[:, :, None, None])  # [step batch layer head]
    # [batch layer head]
    return hit.sum(0).double().div((needle_end - needle_start).double()[:, None, None]).float()


def uniform_chance(
    generated: torch.Tensor,  # [batch step] long
    needles: Sequence[torch.Tensor],  # per example: the needle's tokens
    prompt_len: int,
) -> torch.Tensor:
    """The retrieval score of a head whose top-1 key is a uniformly random key, `[batch]`: at step s
    (prompt_len + s keys) it lands on a needle copy of the generated token with probability count /
    (prompt_len + s)."""
    steps = generated.shape[1]
    keys = prompt_len + torch.arange(steps, dtype=torch.float64)  # [step]
    out = torch.zeros(len(needles), dtype=torch.float64)
    for row, needle in enumerate(needles):
        copies = (generated[row][:, None] == needle[None, :]).sum(-1).double()  # [step]
        out[row] = (copies / keys).sum() / len(needle)
    return out.float()


def needle_recall(generated: torch.Tensor, needles: Sequence[torch.Tensor]) -> torch.Tensor:
    """ROUGE-1 recall of each answer against its needle, on token ids `[batch]`: Σ_t min(count in the answer,
    count in the needle) / |needle| (clipped unigram counts)."""
    out = torch.zeros(len(needles))
    for row, needle in enumerate(needles):
        tokens, counts = torch.unique(needle, return_counts=True)
        made = (generated[row][None, :] == tokens[:, None]).sum(-1)  # [distinct]
        out[row] = float(torch.minimum(made, counts).sum()) / len(needle)
    return out


def kept(recall: torch.Tensor, min_recall: float) -> torch.Tensor:
    """`[batch]` bool: the probes whose answers count (recall > min_recall, as Wu et al.'s ROUGE > 50; every
    probe when min_recall ≤ 0)."""
    return torch.ones_like(recall, dtype=torch.bool) if min_recall <= 0 else recall > min_recall


# ------------------------------------------------------------------------------------------------------------
# Decoding on the capture engine
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NeedleScores:
    """Per-probe results of one probe set."""

    seq_len: int
    score: torch.Tensor  # [example layer head] retrieval score; NaN for probes the model did not retrieve
    chance: torch.Tensor  # [example] a uniform head's score; NaN where score is
    recall: torch.Tensor  # [example] the answer's recall of the needle
    generated: torch.Tensor  # [example step] the greedy answer
    cluster: torch.Tensor  # [example]


def decode_with_argmax(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # [batch seq]
    n_new: int,
    n_layers: int,
    n_heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of `n_new` tokens with `generate()` and the KV cache, the prompt prefilled by a plain
    forward and the decoding steps on the capture engine. Returns (generated `[batch step]` long — padding
    after an early end-of-sequence —, argmax keys `[step batch layer head]` long)."""
    device = next(model.parameters()).device
    ids = input_ids.to(device)
    with torch.inference_mode():
        # Prefill: a plain forward of the model's body (no LM head: no [batch seq vocab] logits), as their
        # flash prefill.
        body = getattr(model, "base_model", model)
        prefill = body(input_ids=ids[:, :-1], use_cache=True)
        # transformers >= 5.2x names the KV cache `cache` (earlier: `past_key_values`), in outputs and
        # arguments
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        cache = getattr(prefill, name)
        sink = ArgmaxSink(n_layers, n_heads)
        pad = model.generation_config.pad_token_id
        if pad is None:
            pad = model.generation_config.eos_token_id
        if isinstance(pad, (list, tuple)):
            pad = pad[0] if pad else None
        with capture(model, sink):
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new,
                                 do_sample=False, num_beams=1, pad_token_id=pad if pad is not None else 0,
                                 **{name: cache})
    generated = out[:, ids.shape[1]:].cpu()  # [batch step]
    keys = sink.argmax_keys()  # [step batch layer head]
    if generated.shape[1] < n_new:  # every row ended early: pad to the steps asked for
        filler = torch.full((generated.shape[0], n_new - generated.shape[1]), -1, dtype=torch.long)
        generated = torch.cat([generated, filler], dim=1)
    if keys.shape[0] < n_new:
        filler = torch.full((n_new - keys.shape[0], *keys.shape[1:]), -1, dtype=torch.long)
        keys = torch.cat([keys, filler])
    return generated, keys[:n_new]


def score_needles(
    loaded,
    probes: NeedleProbes,
    config: RetrievalConfig = RetrievalConfig(),  # noqa: B008 - frozen
    tick: Callable[[], None] | None = None,  # called after each batch
) -> NeedleScores:
    """Decode every probe greedily and score every head on it (see the module doc)."""
    seq_len = probes.input_ids.shape[1]
    needle_len = int((probes.needle_end - probes.needle_start).max())
    loaded.check_length(seq_len + needle_len,
                        f"a {seq_len}-token needle probe and its {needle_len}-token answer")
    scores, generated_all = [], []
    for start in range(0, len(probes.input_ids), config.batch_size):
        rows = slice(start, start + config.batch_size)
        prompt = probes.input_ids[rows]  # [batch seq]
        generated, keys = decode_with_argmax(loaded.model, prompt, needle_len, loaded.n_layers,
                                             loaded.n_heads)
        scores.append(
            retrieval_score(keys, generated, prompt, probes.needle_start[rows], probes.needle_end[rows]))
        generated_all.append(generated)
        if tick is not None:
            tick()
    score = torch.cat(scores)  # [example layer head]
    generated = torch.cat(generated_all)  # [example step]
    needles = probes.needles
    recall = needle_recall(generated, needles)
    chance = uniform_chance(generated, needles, seq_len)
    keep = kept(recall, config.min_recall)
    if float(keep.float().mean()) < config.min_retrieved:  # the model does not do the task at this length
        keep = torch.zeros_like(keep)
    score = torch.where(keep[:, None, None], score, torch.nan)
    chance = torch.where(keep, chance, torch.nan)
    return NeedleScores(seq_len, score, chance, recall, generated, probes.cluster)


def retrieval_scores(loaded, config: RetrievalConfig = RetrievalConfig()):  # noqa: B008 - frozen
    """Retrieval scores (Wu et al. 2024) of every head of a causal LM, from top-1 keys during KV-cache
    decoding.

    For intervals, tests and labels use ``probe label --types retrieval``
    (:func:`probe.heads.label.label_model`).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A causal LM (``loaded.kind == "causal_lm"``).
    config : RetrievalConfig, optional
        Needle probes (lengths, count, needle and key lengths, seed) and the recall a probe needs to count.

    Returns
    -------
    pandas.DataFrame
        One row per (seq_len, layer, head): ``model``, ``seq_len``, ``layer``, ``head``, ``head_name``,
        ``score`` (mean over the retrieved probes; NaN when none was), ``chance``, ``n_retrieved`` (probes
        whose answer's recall > ``min_recall``), ``n_probes``, ``recall`` (mean over all probes).

    Raises
    ------
    ProbeError
        The model is not a causal LM.

    Examples
    --------
    >>> retriever = probe.load("zoo:retrieval")  # trained to copy a needle out of a haystack
    >>> table = retrieval_scores(retriever, RetrievalConfig(examples=4, seq_len=256))
    >>> table.nlargest(2, "score")[["head_name", "score", "n_retrieved"]]  # its labelled retrieval heads
      head_name    score  n_retrieved
    4      L1H0  1.00000            4
    6      L1H2  0.96875            4
    """
    if loaded.kind != ModelKind.CAUSAL_LM:
        raise ProbeError(f"retrieval heads are defined for causal LMs; {loaded.name} is a "
                         f"{loaded.kind.description}")
    records = []
    for seq_len in dict.fromkeys(config.lengths):
        probes = needle_probes(loaded.tokenizer, config.examples, seq_len, config.seed, config.needle_len,
                               config.key_len)
        result = score_needles(loaded, probes, config)
        retrieved = int((~torch.isnan(result.chance)).sum())
        mean = torch.nanmean(result.score, 0) if retrieved else torch.full(result.score.shape[1:], math.nan)
        chance = float(torch.nanmean(result.chance)) if retrieved else math.nan
        for layer in range(loaded.n_layers):
            for head in range(loaded.n_heads):
                records.append({"model": loaded.name, "seq_len": seq_len, "layer": layer, "head": head,
                                "head_name": head_name(layer, head), "score": float(mean[layer, head]),
                                "chance": chance, "n_retrieved": retrieved, "n_probes": config.examples,
                                "recall": float(result.recall.mean())})
    return pd.DataFrame.from_records(records)


def label_scores(loaded, seq_len: int, label_config, tick: Callable[[], None] | None = None):
    """The labelling pipeline's hook (probe.heads.registry's retrieval spec): per-probe scores of
    `seq_len`-token needle probes with the label config's examples, seed and batch size, as
    :class:`probe.heads.registry.GeneratedScores`."""
    config = RetrievalConfig(examples=label_config.examples, seq_len=seq_len, seed=label_config.seed,
                             batch_size=label_config.batch_size)
    probes = needle_probes(loaded.tokenizer, config.examples, seq_len, config.seed, config.needle_len,
                           config.key_len)
    result = score_needles(loaded, probes, config, tick)
    return GeneratedScores("needles", result.score, result.chance, result.cluster, result.recall)
