"""Causal evidence for retrieval heads, as Wu et al. (2024) verify them — and as we do it: needle recall with
the top-K retrieval heads masked, against K random heads of the whole model and against the most damaging
single head that is not a top head.

Wu et al. mask the K highest-scoring retrieval heads and the needle-in-a-haystack score collapses, while
masking K random heads leaves it almost unchanged. Their code (nightdessert/Retrieval_Head @ 3ac171a,
``retrieval_head_detection.py`` / the masked model) masks a head by zeroing its **query** — its attention
becomes uniform over the keys it sees, its output the mean of their values — during **decoding only** (the
prefill call takes no mask), and draws the random heads from **the whole model** (its intended exclusion of
the top heads never fires: a tuple compared with lists). Two ways to mask (``mask``):

* ``"output"`` (ours, the default): the head's attention output zeroed inside the capture engine
  (:func:`probe.engine.capture` with ``ablate``), in the prefill and every decoding step — the same zeroing as
  every other ablation column of the label table;
* ``"query"`` (Wu et al.'s): the head's slice of the query projection's output zeroed (an edit of the
  intervention site ``L{l}.q``, :mod:`probe.engine.interventions`), only on decoding steps (calls with one
  query position): its scores are all 0, so its attention is uniform.

Here, on the same needle probes the scores came from (:func:`probe.heads.retrieval.needle_probes`, same seed
and length):

* ``needle_recall``: the mean ROUGE-1 recall of the greedy answers with no head masked (every probe, not only
  the retrieved ones);
* for each K in :data:`FRACTIONS` of the model's heads (1 … 5 %, at least one head; distinct K only): the
  recall with the K heads of highest retrieval score masked, and with K random heads masked —
  :data:`DRAWS` seeded draws from every head of every layer except the top K (as Wu et al. meant);
* **the most damaging other head**: each head outside the largest K's top heads masked alone, once; the
  lowest recall and its head (``needle_recall_other_min``, ``needle_recall_other_head``) — a head whose
  masking breaks retrieval without attending to the needle (a previous-token head that the copying depends
  on) is a control the random draws may miss. It costs one decoding run per head;
* ``retrieval_beats_controls``: the top K's recall is below every random draw **and** below the most damaging
  other head's (largest K);
* the rows carry the largest K's numbers (``retrieval_k``, ``needle_recall_top``, ``needle_recall_random``
  the mean over draws, ``needle_recall_random_min`` the lowest draw), ``retrieval_mask`` names the masking,
  and ``retrieval_ablation`` lists every K.

Unknown is NaN: a length where no head has a score (the model retrieves too few needles) gets NaN columns.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from probe.engine import capture
from probe.engine.edits import Edit
from probe.engine.interventions import intervene
from probe.engine.sites import site_map
from probe.errors import ProbeError
from probe.heads.retrieval import NeedleProbes, RetrievalConfig, needle_probes, needle_recall
from probe.naming import head_name

FRACTIONS = (0.01, 0.02, 0.03, 0.04, 0.05)  # K as shares of the model's heads (Wu et al. mask the top few %)
DRAWS = 5  # random head sets per K
# ours (output zeroed, prefill and decoding) | Wu et al.'s (query zeroed, decoding only)
MASKS = ("output", "query")
COLUMNS = [
    "retrieval_k",
    "needle_recall",
    "needle_recall_top",
    "needle_recall_random",
    "needle_recall_random_min",
    "retrieval_ablation",
    "retrieval_mask",
    "needle_recall_other_min",
    "needle_recall_other_head",
    "retrieval_beats_controls",
]
Head = tuple[int, int]


def head_counts(n_heads_total: int, fractions: tuple[float, ...] = FRACTIONS) -> list[int]:
    """The distinct K = max(1, round(f · heads)) of `fractions`, ascending."""
    return sorted({max(1, round(fraction * n_heads_total)) for fraction in fractions})


def top_heads(scores: torch.Tensor, k: int) -> tuple[Head, ...]:
    """The `k` heads `(layer, head)` of highest score (`scores` [layer head]; NaN never chosen), sorted."""
    flat = torch.nan_to_num(scores.double().reshape(-1), nan=-math.inf)  # [layer·head]
    order = torch.argsort(flat, descending=True, stable=True)[:k]
    n_heads = scores.shape[1]
    return tuple(sorted((int(i) // n_heads, int(i) % n_heads) for i in order if flat[i] > -math.inf))


def whole_model_draws(n_layers: int, n_heads: int, k: int, excluded: tuple[Head, ...], draws: int,
                      seed: int) -> list[tuple[Head, ...]]:
    """Up to `draws` seeded random sets of `k` heads from every head of every layer except `excluded`,
    distinct sets while there are enough of them (fewer when fewer exist)."""
    skip = set(excluded)
    pool = [(layer, head) for layer in range(n_layers) for head in range(n_heads)
            if (layer, head) not in skip]
    if len(pool) < k:
        return []
    generator = random.Random(seed)
    found: list[tuple[Head, ...]] = []
    for _ in range(50 * draws):
        chosen = tuple(sorted(generator.sample(pool, k)))
        if chosen not in found:
            found.append(chosen)
        if len(found) == draws:
            break
    return found


@contextlib.contextmanager
def query_masked(loaded, heads: tuple[Head, ...]) -> Iterator[None]:
    """Wu et al.'s masking while the block runs: `heads`' slices of their layer's query projection output
    zeroed on decoding steps (one query position), by an edit of the intervention site ``L{l}.q``
    (:func:`probe.engine.interventions.intervene`; removed after)."""
    found = site_map(loaded.model)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    edits = {}
    for layer, chosen in by_layer.items():
        if f"L{layer}.q" not in found.sites:
            raise ProbeError(f"{loaded.name}: no query projection found on layer {layer}: use the output "
                             "masking (retrieval_mask 'output')")
        edits[f"L{layer}.q"] = Edit.apply(_zero_on_decoding, heads=chosen)
    with intervene(loaded.model, edit=edits, sites=found, any_thread=True):
        yield


def _zero_on_decoding(query: torch.Tensor) -> torch.Tensor | None:
    """Zeros for a decoding step's queries `[batch 1 head d_head]`; the prefill (more than one position) is
    left alone: Wu et al. mask decoding steps only."""
    return torch.zeros_like(query) if query.shape[1] == 1 else None


def masked_recall(loaded, probes: NeedleProbes, heads: tuple[Head, ...], batch_size: int = 8,
                  mask: str = "output") -> float:
    """Mean needle recall `[example]` averaged, greedy decoding of |needle| tokens with `heads` masked
    (`mask`: "output" or "query", see the module doc)."""
    if mask not in MASKS:
        raise ProbeError(f"unknown retrieval mask {mask!r}: choose from {', '.join(MASKS)}")
    ablate = torch.zeros(loaded.n_layers, loaded.n_heads, dtype=torch.bool)  # [layer head]
    for layer, head in heads:
        ablate[layer, head] = True
    model = loaded.model
    device = next(model.parameters()).device
    needle_len = int((probes.needle_end - probes.needle_start).max())
    pad = model.generation_config.pad_token_id
    pad = model.generation_config.eos_token_id if pad is None else pad
    pad = (pad[0] if pad else None) if isinstance(pad, (list, tuple)) else pad
    answers = []
    for start in range(0, len(probes.input_ids), batch_size):
        ids = probes.input_ids[start:start + batch_size].to(device)  # [batch seq]
        masking = (capture(model, (), ablate=ablate) if mask == "output"
                   else query_masked(loaded, heads))
        with masking, torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=needle_len, do_sample=False, num_beams=1,
                                 pad_token_id=pad if pad is not None else 0)
        answers.append(out[:, ids.shape[1]:].cpu())  # [batch step]
    return float(needle_recall(torch.cat(answers), probes.needles).mean())


@dataclass(frozen=True)
class RetrievalAblation:
    """The masking check at one length."""

    clean: float  # needle recall, nothing masked
    by_k: dict[int, tuple[tuple[Head, ...], float, list[float]]]  # K -> (top heads, recall, random recalls)
    mask: str = "output"  # MASKS
    others: dict[Head, float] | None = None  # each head outside the largest K's top heads masked alone

    def worst_other(self) -> tuple[Head | None, float]:
        """The other head whose masking lowers recall most, and that recall ((None, NaN) when not run)."""
        if not self.others:
            return None, math.nan
        head = min(self.others, key=lambda key: (self.others[key], key))
        return head, self.others[head]

    def columns(self) -> dict[str, object]:
        """The row columns (:data:`COLUMNS`) from the largest K."""
        if not self.by_k:
            return {name: math.nan for name in COLUMNS}
        k = max(self.by_k)
        _, top, random_recalls = self.by_k[k]
        worst, worst_recall = self.worst_other()
        random_min = min(random_recalls) if random_recalls else math.nan
        controls = [value for value in (random_min, worst_recall) if value == value]
        listed = "; ".join(f"K={key}: top {value[1]:.2f}, random {_span(value[2])}"
                           for key, value in sorted(self.by_k.items()))
        other = f"; worst other head {head_name(*worst)} {worst_recall:.2f}" if worst is not None else ""
        return {
            "retrieval_k": float(k),
            "needle_recall": self.clean,
            "needle_recall_top": top,
            "needle_recall_random": float(sum(random_recalls) / len(random_recalls)) if random_recalls
            else math.nan,
            "needle_recall_random_min": random_min,
            "retrieval_ablation": f"clean {self.clean:.2f}; {listed}{other} ({self.mask} masked)",
            "retrieval_mask": self.mask,
            "needle_recall_other_min": worst_recall,
            "needle_recall_other_head": head_name(*worst) if worst is not None else math.nan,
            "retrieval_beats_controls": bool(controls) and all(top < value for value in controls),
        }


def _span(values: list[float]) -> str:
    return "n/a" if not values else f"{min(values):.2f}–{max(values):.2f}"


def retrieval_ablation(loaded, probes: NeedleProbes, scores: torch.Tensor, seed: int = 0, draws: int = DRAWS,
                       batch_size: int = 8, fractions: tuple[float, ...] = FRACTIONS, mask: str = "output",
                       others: bool = True) -> RetrievalAblation:
    """Needle recall clean, with the top-K heads of `scores` masked, with `draws` random whole-model sets of
    K heads masked, for every K of :func:`head_counts`, and with each other head masked alone (see the
    module doc).

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
        Random sets per K, from every layer (the top K excluded).
    batch_size : int, default 8
        Prompts per decoding batch.
    fractions : tuple of float, default FRACTIONS
        The shares of the heads that give the K values (:func:`head_counts`).
    mask : {"output", "query"}, default "output"
        Output zeroed in the prefill and decoding (ours), or the query zeroed on decoding steps (Wu et al.).
    others : bool, default True
        Also mask every head outside the largest K's top heads alone (one decoding run per head).

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
    >>> result.clean, result.by_k  # top 2 masked: lost; 3 random pairs from any layer: 2 lose it too
    (1.0, {2: (((1, 0), (1, 2)), 0.09375, [1.0, 0.0, 0.03125])})
    """
    if mask not in MASKS:
        raise ProbeError(f"unknown retrieval mask {mask!r}: choose from {', '.join(MASKS)}")
    n_layers, n_heads = scores.shape
    if torch.isnan(scores).all():
        return RetrievalAblation(math.nan, {}, mask)
    clean = masked_recall(loaded, probes, (), batch_size, mask)
    by_k = {}
    for k in head_counts(n_layers * n_heads, fractions):
        top = top_heads(scores, k)
        if len(top) < k:
            continue
        controls = whole_model_draws(n_layers, n_heads, k, top, draws, seed + k)
        by_k[k] = (top, masked_recall(loaded, probes, top, batch_size, mask),
                   [masked_recall(loaded, probes, control, batch_size, mask) for control in controls])
    single = None
    if others and by_k:
        excluded = set(by_k[max(by_k)][0])
        single = {(layer, head): masked_recall(loaded, probes, ((layer, head),), batch_size, mask)
                  for layer in range(n_layers) for head in range(n_heads) if (layer, head) not in excluded}
    return RetrievalAblation(clean, by_k, mask, single)


def label_verification(loaded, seq_len: int, label_config, scores: torch.Tensor) -> dict[str, object]:
    """The labelling pipeline's hook (the retrieval spec's ``verifier``): the :data:`COLUMNS` of `seq_len` on
    the label config's needle probes (examples, seed, batch size as
    :func:`probe.heads.retrieval.label_scores`; the masking of ``label_config.retrieval_mask``)."""
    config = RetrievalConfig(examples=label_config.examples, seq_len=seq_len, seed=label_config.seed,
                             batch_size=label_config.batch_size)
    probes = needle_probes(loaded.tokenizer, config.examples, seq_len, config.seed, config.needle_len,
                           config.key_len)
    return retrieval_ablation(loaded, probes, scores, seed=label_config.seed,
                              batch_size=label_config.batch_size,
                              mask=getattr(label_config, "retrieval_mask", "output")).columns()
