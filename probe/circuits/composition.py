"""Composition scores (Elhage et al. 2021; TransformerLens 4.3's ``all_composition_scores``): how much a later
head reads what an earlier head writes, from the weights alone.

For a head A in an earlier layer than a head B (row-vector convention, :mod:`probe.circuits.factors`),

    score(A, B) = ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F),     W_A = W_V^A W_O^A   (A's OV circuit, d_model × d_model)

with W_B, by mode, as TransformerLens 4.3's ``TransformerBridge.all_composition_scores(mode)`` has it (TL 3's
``HookedTransformer.all_composition_scores`` is gone from 4.x), on the weights of its compatibility mode
(``enable_compatibility_mode()``: norm gains folded, and behind a LayerNorm both sides centred;
:mod:`probe.circuits.factors`) — equal to TL 4.3.0 there within 1.3e-7 (docs/circuits.md):

* ``Q``: W_Q^B W_K^Bᵀ (B's QK circuit: what A writes, read by B's queries);
* ``K``: W_K^B W_Q^Bᵀ (the QK circuit transposed: read by B's keys);
* ``V``: W_V^B W_O^B (B's OV circuit).

Pairs in the same or a later layer are not scored (TL masks them to 0; here they are absent).

**From d_head-sized factors.** W_A = V O and W_B = X Yᵀ are products of d_model × d_head factors. With the QR
decompositions V = Q_V R_V and Y = Q_Y R_Y (R: d_head × d_head, Q orthonormal columns), ‖V O X Yᵀ‖_F = ‖R_V O
X R_Yᵀ‖_F, so each head is reduced once to ``Õ = R_V O`` (d_head × d_model, sender side) or ``X̃ = X R_Yᵀ``
(d_model × d_head, receiver side), and every pair costs one d_head × d_model × d_head product: all pairs of a
sender set and a receiver layer are one matrix product, ``[senders·d_head, d_model] @ [d_model,
receivers·d_head]``, cut into blocks of at most :data:`BLOCK_BYTES`. No d_model × d_model matrix is formed.
Cost: d_head² · d_model multiply–adds per pair and mode (:func:`composition_cost`).

**Baseline.** Elhage et al. compare with the score of random matrices of the same shapes: here, Gaussian
factors of the same shapes and ranks (V, O, X, Y with i.i.d. N(0, 1) entries; the score is scale-free),
``n_random`` pairs per receiver rank, seeded. Each pair gets ``z`` (against the random scores' mean and
standard deviation), ``percentile`` (the share of random scores below it) and ``beats_random`` (above every
random score). For Gaussian factors the score concentrates near 1/√d_model whatever the rank (zoo:induction,
d_model 64: 0.126).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from probe.anatomy import text_config
from probe.circuits.factors import Head, LayerFactors, Refusal, model_factors
from probe.errors import ProbeError
from probe.naming import head_name

MODES = ("Q", "K", "V")
BLOCK_BYTES = 64 * 2**20  # largest block of pair products held at once
N_RANDOM = 200  # random factor pairs of the baseline
COLUMNS = ["sender", "receiver", "sender_layer", "sender_head", "receiver_layer", "receiver_head", "mode",
           "score", "z", "percentile", "beats_random"]


def composition_score(w_a: torch.Tensor, w_b: torch.Tensor) -> float:
    """‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F) of two full d_model × d_model matrices (the definition, written out;
    the factor form is :func:`pair_scores`)."""
    w_a, w_b = w_a.double(), w_b.double()
    return float(torch.linalg.matrix_norm(w_a @ w_b) / (torch.linalg.matrix_norm(w_a)
                                                         * torch.linalg.matrix_norm(w_b)))


def reduce_sender(value: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """``R_V O`` `[... d_v d_model]` of an OV circuit ``V O`` (value `[... d_model d_v]`, output `[... d_v
    d_model]`): ‖V O M‖_F = ‖R_V O M‖_F for every M."""
    r = torch.linalg.qr(value, mode="r").R  # [... d_v d_v]
    return r @ output  # [... d_v d_model]


def reduce_receiver(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``X R_Yᵀ`` `[... d_model d]` of a circuit ``X Yᵀ`` (left, right `[... d_model d]`): ‖M X Yᵀ‖_F =
    ‖M X R_Yᵀ‖_F for every M."""
    r = torch.linalg.qr(right, mode="r").R  # [... d d]
    return left @ r.transpose(-1, -2)  # [... d_model d]


def receiver_factors(factors: LayerFactors, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, Y) `[head d_model d]` with W_B = X Yᵀ for every head of a layer, in TransformerLens' convention
    (module doc)."""
    if mode == "Q":
        return factors.query, factors.key
    if mode == "K":
        return factors.key, factors.query
    if mode == "V":
        return factors.value, factors.output.transpose(-1, -2)
    raise ProbeError(f"mode {mode!r}: choose from {', '.join(MODES)}")


def pair_scores(senders: torch.Tensor, receivers: torch.Tensor,
                block_bytes: int = BLOCK_BYTES) -> torch.Tensor:
    """Composition scores `[sender receiver]` of reduced senders `[sender d_v d_model]`
    (:func:`reduce_sender`) and reduced receivers `[receiver d_model d]` (:func:`reduce_receiver`), blocks of
    at most `block_bytes`."""
    n_send, d_v, d_model = senders.shape
    n_recv, _, d = receivers.shape
    if n_send == 0 or n_recv == 0:
        return torch.zeros(n_send, n_recv, dtype=senders.dtype)
    right = receivers.permute(1, 0, 2).reshape(d_model, n_recv * d)  # [d_model receiver·d]
    rows = max(1, block_bytes // max(1, d_v * n_recv * d * senders.element_size()))
    numerator = torch.empty(n_send, n_recv, dtype=senders.dtype)
    for start in range(0, n_send, rows):
        block = senders[start:start + rows]  # [block d_v d_model]
        product = block.reshape(-1, d_model) @ right  # [block·d_v receiver·d]
        product = product.reshape(len(block), d_v, n_recv, d)  # [block d_v receiver d]
        numerator[start:start + rows] = product.square().sum((1, 3)).sqrt()
    norms_send = torch.linalg.matrix_norm(senders)  # [sender]
    norms_recv = torch.linalg.matrix_norm(receivers)  # [receiver]
    return numerator / (norms_send[:, None] * norms_recv[None, :])  # [sender receiver]


def random_scores(d_model: int, d_v: int, d: int, n: int = N_RANDOM, seed: int = 0,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`[n]` scores of pairs of Gaussian factors: W_A = V O (V `[d_model d_v]`, O `[d_v d_model]`), W_B = X Yᵀ
    (X, Y `[d_model d]`), i.i.d. N(0, 1), seeded: Elhage et al.'s random baseline for these shapes."""
    generator = torch.Generator().manual_seed(seed)
    out = torch.empty(n, dtype=dtype)
    chunk = max(1, (32 * 2**20) // max(1, 8 * 2 * d_model * (d_v + d)))
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        value = torch.randn(size, d_model, d_v, generator=generator, dtype=dtype)
        output = torch.randn(size, d_v, d_model, generator=generator, dtype=dtype)
        left = torch.randn(size, d_model, d, generator=generator, dtype=dtype)
        right = torch.randn(size, d_model, d, generator=generator, dtype=dtype)
        senders, receivers = reduce_sender(value, output), reduce_receiver(left, right)
        numerator = torch.linalg.matrix_norm(senders @ receivers)  # [size]: d_v × d per pair
        out[start:start + size] = numerator / (torch.linalg.matrix_norm(senders)
                                               * torch.linalg.matrix_norm(receivers))
    return out


def composition_cost(n_senders: int, n_receivers: int, d_model: int, d_head: int, modes: int = 3) -> float:
    """Multiply–adds of scoring every (sender, receiver) pair in `modes` modes from reduced factors: d_head² ·
    d_model per pair and mode (the reductions, d_model · d_head² per head, are smaller)."""
    return float(n_senders) * n_receivers * d_head * d_head * d_model * modes


def uses_rope(loaded) -> bool:
    """Whether the model rotates q and k by position (RoPE), from its config."""
    config = text_config(loaded.model.config)
    return bool(getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None)
                or getattr(config, "rotary_dim", None) or getattr(config, "rotary_pct", None)
                or getattr(config, "position_embedding_type", None) == "rotary")


@dataclass(frozen=True)
class Baseline:
    """The random baseline of one receiver rank."""

    mean: float
    sd: float
    top: float  # the largest random score
    n: int
    scores: torch.Tensor  # [n] the random scores, ascending

    @classmethod
    def of(cls, scores: torch.Tensor) -> Baseline:
        """The baseline of random scores `[n]`."""
        ordered = torch.sort(scores.double()).values
        return cls(float(ordered.mean()), float(ordered.std()), float(ordered[-1]), len(ordered), ordered)

    def percentile(self, score: float) -> float:
        """The share of random scores below `score`."""
        return float(torch.searchsorted(self.scores, torch.tensor([score], dtype=torch.float64))) / self.n

    def z(self, score: float) -> float:
        """(score − mean) / sd of the random scores (NaN when they do not vary)."""
        return (score - self.mean) / self.sd if self.sd > 0 else math.nan


def composition_scores(
    loaded,
    receivers: Sequence[Head] | None = None,
    senders: Sequence[Head] | None = None,
    modes: Sequence[str] = MODES,
    n_random: int = N_RANDOM,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Q-, K- and V-composition of every (sender, receiver) pair in causal order, against random matrices.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model (weights read one layer at a time through :mod:`probe.anatomy`, offload included).
    receivers : sequence of (layer, head), optional
        The later heads B; None: every head (every pair of the model: cost in :func:`composition_cost`,
        ~3.5 · 10¹³ multiply–adds per mode for a 7B shape; ``probe circuit`` restricts them to the type's
        labelled heads unless ``--all-pairs``).
    senders : sequence of (layer, head), optional
        The earlier heads A; None: every head of an earlier layer than the receiver.
    modes : sequence of {"Q", "K", "V"}, default all three
    n_random : int, default 200
        Random factor pairs of the baseline (per receiver rank).
    seed : int, default 0
        Seeds the baseline.
    dtype : torch.dtype, default float64
        Arithmetic of the products (float32 halves the time of large shapes).
    progress : callable, optional
        Called as ``progress(layers done, layers)``.

    Returns
    -------
    pandas.DataFrame
        One row per (sender, receiver, mode), columns :data:`COLUMNS`: ``score`` in [0, 1], ``z`` and
        ``percentile`` against the random baseline, ``beats_random`` (above every random score). ``attrs``:
        ``baseline`` (mode -> the random scores' ``mean``, ``sd``, ``top``, ``n``), ``notes`` (RoPE,
        grouped-query sharing), ``refused`` (why nothing was scored, or None).

    Examples
    --------
    >>> scores = composition_scores(loaded, receivers=[(1, 2)], modes=["K"])  # into one induction head's keys
    >>> top = scores.sort_values("score", ascending=False)[["sender", "receiver", "score", "z"]].head(2)
    >>> print(top.round(2).to_string(index=False))
    sender receiver  score     z
      L0H1     L1H2   0.34 31.01
      L0H0     L1H2   0.23 14.96
    """
    modes = tuple(dict.fromkeys(str(mode).upper() for mode in modes))
    for mode in modes:
        if mode not in MODES:
            raise ProbeError(f"composition mode {mode!r}: choose from {', '.join(MODES)}")
    if n_random < 2:
        raise ProbeError("n_random must be at least 2 (the baseline's spread)")
    factors = model_factors(loaded)
    table = pd.DataFrame(columns=COLUMNS)
    if isinstance(factors, Refusal):
        table.attrs.update(baseline={}, notes=[factors.reason], refused=factors.reason)
        return table
    wanted_recv = None if receivers is None else {(int(a), int(b)) for a, b in receivers}
    wanted_send = None if senders is None else {(int(a), int(b)) for a, b in senders}
    for chosen in (wanted_recv or set()) | (wanted_send or set()):
        if chosen[0] not in factors.layers or not 0 <= chosen[1] < factors.n_heads:
            raise ProbeError(f"{head_name(*chosen)} is not an attention head of {loaded.name}")
    ranks = {mode: (factors.d_v if mode == "V" else factors.d_head) for mode in modes}
    baseline = {}
    for mode in modes:
        baseline[mode] = Baseline.of(random_scores(factors.d_model, factors.d_v, ranks[mode], n_random, seed,
                                                   dtype))
    last = max(layer for layer, _ in wanted_recv) if wanted_recv else max(factors.layers)
    sent: list[Head] = []
    reduced: list[torch.Tensor] = []  # per sender layer: [head d_v d_model]
    records = []
    for done, layer in enumerate(factors.layers):
        if layer > last:
            break
        heads = range(factors.n_heads)
        mine = [head for head in heads if wanted_recv is None or (layer, head) in wanted_recv]
        needs_send = any(wanted_send is None or (layer, h) in wanted_send for h in heads) and layer < last
        if not mine and not needs_send:
            continue
        maps = factors.layer(layer, dtype)
        if mine and sent:
            pool = torch.cat(reduced)  # [sender d_v d_model]
            for mode in modes:
                left, right = receiver_factors(maps, mode)
                index = torch.tensor(mine)
                scores = pair_scores(pool, reduce_receiver(left[index], right[index]))  # [sender receiver]
                records.extend(_rows(sent, [(layer, h) for h in mine], mode, scores, baseline[mode]))
        if needs_send:
            chosen = [h for h in heads if wanted_send is None or (layer, h) in wanted_send]
            index = torch.tensor(chosen)
            reduced.append(reduce_sender(maps.value[index], maps.output[index]))
            sent.extend((layer, h) for h in chosen)
        if progress:
            progress(done + 1, len(factors.layers))
    table = pd.DataFrame.from_records(records, columns=COLUMNS)
    notes = []
    if uses_rope(loaded) and ({"Q", "K"} & set(modes)):
        notes.append(f"{loaded.name} rotates q and k by position (RoPE) after W_Q and W_K: its Q- and "
                     "K-composition scores read the weights only and ignore position")
    if factors.n_kv < factors.n_heads:
        group = factors.n_heads // factors.n_kv
        notes.append(f"{loaded.name} shares each key/value head among {group} query heads (grouped-query): "
                     "K- and V-composition of a head are those of its shared key/value head")
    table.attrs.update(baseline={mode: {"mean": b.mean, "sd": b.sd, "top": b.top, "n": b.n}
                                 for mode, b in baseline.items()}, notes=notes, refused=None)
    return table


def _rows(senders: list[Head], receivers: list[Head], mode: str, scores: torch.Tensor,
          baseline: Baseline) -> list[dict]:
    rows = []
    for i, sender in enumerate(senders):
        for j, receiver in enumerate(receivers):
            if sender[0] >= receiver[0]:
                continue
            score = float(scores[i, j])
            rows.append({"sender": head_name(*sender), "receiver": head_name(*receiver),
                         "sender_layer": sender[0], "sender_head": sender[1], "receiver_layer": receiver[0],
                         "receiver_head": receiver[1], "mode": mode, "score": score,
                         "z": baseline.z(score), "percentile": baseline.percentile(score),
                         "beats_random": score > baseline.top})
    return rows


__all__ = ["BLOCK_BYTES", "Baseline", "COLUMNS", "MODES", "N_RANDOM", "composition_cost", "composition_score",
           "composition_scores", "pair_scores", "random_scores", "receiver_factors", "reduce_receiver",
           "reduce_sender", "uses_rope"]
