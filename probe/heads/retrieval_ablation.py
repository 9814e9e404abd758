"""Causal evidence for retrieval heads, as Wu et al. (2024) verify them: needle recall with the top-K
retrieval heads masked against K random heads.

Wu et al. mask the K highest-scoring retrieval heads and the needle-in-a-haystack score collapses, while
masking K random heads leaves it almost unchanged. Here, on the same needle probes the scores came from
(:func:`probe.heads.retrieval.needle_probes`, same seed and length):

* ``needle_recall``: the mean ROUGE-1 recall of the greedy answers with no head masked (every probe, not only
  the retrieved ones);
* for each K in :data:`FRACTIONS` of the model's heads (1 … 5 %, at least one head; distinct K only): the
  recall with the K heads of highest retrieval score masked (their attention output zeroed inside the capture
  engine, prefill and decoding alike), and with K random heads masked, :data:`DRAWS` seeded draws drawn from
  the same layers as the top K (:func:`probe.heads.ablation.layer_matched_groups`; other heads of those layers
  first);
* the rows carry the largest K's numbers: ``retrieval_k``, ``needle_recall``, ``needle_recall_top``,
  ``needle_recall_random`` (mean over the draws), ``needle_recall_random_min`` (the lowest draw: the top K's
  drop is beyond every draw when ``needle_recall_top`` is below it), and ``retrieval_ablation`` lists every K.

Unknown is NaN: a length where no head has a score (the model retrieves too few needles) gets NaN columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from probe.engine import capture
from probe.heads.ablation import layer_matched_groups
from probe.heads.retrieval import NeedleProbes, RetrievalConfig, needle_probes, needle_recall

FRACTIONS = (
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
)  # K as shares of the model's heads (Wu et al. mask the top few percent)
DRAWS = 5  # random head sets per K
COLUMNS = [
    "retrieval_k",
    "needle_recall",
    "needle_recall_top",
    "needle_recall_random",
    "needle_recall_random_min",
    "retrieval_ablation",
]


def head_counts(n_heads_total: int, fractions: tuple[float, ...] = FRACTIONS) -> list[int]:
    """The distinct K = max(1, round(f · heads)) of `fractions`, ascending."""
    return sorted({max(1, round(fraction * n_heads_total)) for fraction in fractions})


def top_heads(scores: torch.Tensor, k: int) -> tuple[tuple[int, int], ...]:
    """The `k` heads `(layer, head)` of highest score (`scores` [layer head]; NaN never chosen), sorted."""
    flat = torch.nan_to_num(scores.double().reshape(-1), nan=-math.inf)  # [layer·head]
    order = torch.argsort(flat, descending=True, stable=True)[:k]
    n_heads = scores.shape[1]
    return tuple(sorted((int(i) // n_heads, int(i) % n_heads) for i in order if flat[i] > -math.inf))


def masked_recall(
    loaded, probes: NeedleProbes, heads: tuple[tuple[int, int], ...], batch_size: int = 8
) -> float:
    """Mean needle recall `[example]` averaged, greedy decoding of |needle| tokens with `heads` zeroed."""
    mask = torch.zeros(loaded.n_layers, loaded.n_heads, dtype=torch.bool)  # [layer head]
    for layer, head in heads:
        mask[layer, head] = True
    model = loaded.model
    device = next(model.parameters()).device
    needle_len = int((probes.needle_end - probes.needle_start).max())
    pad = model.generation_config.pad_token_id
    pad = model.generation_config.eos_token_id if pad is None else pad
    pad = (pad[0] if pad else None) if isinstance(pad, (list, tuple)) else pad
    answers = []
    for start in range(0, len(probes.input_ids), batch_size):
        ids = probes.input_ids[start : start + batch_size].to(device)  # [batch seq]
        with capture(model, (), ablate=mask), torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=needle_len,
                do_sample=False,
                num_beams=1,
                pad_token_id=pad if pad is not None else 0,
            )
        answers.append(out[:, ids.shape[1] :].cpu())  # [batch step]
    return float(needle_recall(torch.cat(answers), probes.needles).mean())


@dataclass(frozen=True)
class RetrievalAblation:
    """Wu et al.'s masking check at one length."""

    clean: float  # needle recall, nothing masked
    by_k: dict[
        int, tuple[tuple[tuple[int, int], ...], float, list[float]]
    ]  # K -> (top heads, recall, random recalls)

    def columns(self) -> dict[str, object]:
        """The row columns (:data:`COLUMNS`) from the largest K."""
        if not self.by_k:
            return {name: math.nan for name in COLUMNS}
        k = max(self.by_k)
        _, top, random_recalls = self.by_k[k]
        listed = "; ".join(
            f"K={key}: top {value[1]:.2f}, random {_span(value[2])}"
            for key, value in sorted(self.by_k.items())
        )
        return {
            "retrieval_k": float(k),
            "needle_recall": self.clean,
            "needle_recall_top": top,
            "needle_recall_random": float(sum(random_recalls) / len(random_recalls))
            if random_recalls
            else math.nan,
            "needle_recall_random_min": min(random_recalls) if random_recalls else math.nan,
            "retrieval_ablation": f"clean {self.clean:.2f}; {listed}",
        }


def _span(values: list[float]) -> str:
    return "n/a" if not values else f"{min(values):.2f}–{max(values):.2f}"


def retrieval_ablation(
    loaded,
    probes: NeedleProbes,
    scores: torch.Tensor,
    seed: int = 0,
    draws: int = DRAWS,
    batch_size: int = 8,
    fractions: tuple[float, ...] = FRACTIONS,
) -> RetrievalAblation:
    """Needle recall clean, with the top-K heads of `scores` masked, and with `draws` random same-layer sets
    of K heads masked, for every K of :func:`head_counts` (see the module doc).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A causal LM.
    probes : NeedleProbes
        The needle prompts (:func:`probe.heads.retrieval.needle_probes`).
    scores : torch.Tensor
        `[layer head]` mean retrieval scores.
    seed : int, default 0
        Seeds the random sets.
    draws : int, default DRAWS
        Random same-layer sets per K.
    batch_size : int, default 8
        Prompts per decoding batch.
    fractions : tuple of float, default FRACTIONS
        The shares of the heads that give the K values (:func:`head_counts`).

    Returns
    -------
    RetrievalAblation
        The clean recall and, per K, the top K heads, their masked recall and the random sets' recalls.

    Examples
    --------
    >>> from probe.heads.retrieval import retrieval_scores
    >>> retriever = probe.load("zoo:retrieval")  # 2 layers x 4 heads
    >>> table = retrieval_scores(retriever, RetrievalConfig(examples=4, seq_len=256))
    >>> scores = torch.tensor(table["score"].to_numpy()).reshape(2, 4)  # [layer head]
    >>> probes = needle_probes(retriever.tokenizer, 4, 256, seed=0)  # the same probes
    >>> result = retrieval_ablation(retriever, probes, scores, draws=3, fractions=(0.25,))  # K = 2
    >>> result.clean, result.by_k  # top 2 masked: the needle is lost; 3 random same-layer pairs: kept
    (1.0, {2: (((1, 0), (1, 2)), 0.09375, [1.0, 1.0, 1.0])})
    """
    n_layers, n_heads = scores.shape
    if torch.isnan(scores).all():
        return RetrievalAblation(math.nan, {})
    clean = masked_recall(loaded, probes, (), batch_size)
    by_k = {}
    for k in head_counts(n_layers * n_heads, fractions):
        top = top_heads(scores, k)
        if len(top) < k:
            continue
        controls, _ = layer_matched_groups(top, n_heads, draws, seed)
        by_k[k] = (
            top,
            masked_recall(loaded, probes, top, batch_size),
            [masked_recall(loaded, probes, control, batch_size) for control in controls],
        )
    return RetrievalAblation(clean, by_k)


def label_verification(loaded, seq_len: int, label_config, scores: torch.Tensor) -> dict[str, object]:
    """The labelling pipeline's hook (the retrieval spec's ``verifier``): the :data:`COLUMNS` of `seq_len` on
    the label config's needle probes (examples, seed, batch size as
    :func:`probe.heads.retrieval.label_scores`)."""
    config = RetrievalConfig(
        examples=label_config.examples,
        seq_len=seq_len,
        seed=label_config.seed,
        batch_size=label_config.batch_size,
    )
    probes = needle_probes(
        loaded.tokenizer, config.examples, seq_len, config.seed, config.needle_len, config.key_len
    )
    return retrieval_ablation(
        loaded, probes, scores, seed=label_config.seed, batch_size=label_config.batch_size
    ).columns()
