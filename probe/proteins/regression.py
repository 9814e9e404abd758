"""A contact readout for any protein language model: ESM's recipe fitted on a few structures.

ESM's contact head (Rao et al. 2020, "Transformer protein language models are unsupervised structure
learners") is an L1-regularised logistic regression over the layer × head channels of APC-corrected
symmetrised attention::

    P(contact i, j) = sigmoid(b + Σ_c w_c · APC(sym(α_c))(i, j))

fitted on 20 proteins. Checkpoints other than ESM (ProtBert-style BERTs, antibody BERTs, ProtT5 encoders) ship
no such regression; this module fits one on the structures a user has (scikit-learn's ``LogisticRegression``,
``penalty="l1"``, solver liblinear), over the known residue pairs i < j with j − i ≥ 6. The channels are
standardised for the fit and the standardisation is folded back into (w, b), so the fitted regression is
applied exactly like a checkpoint's own: streamed head by head by :class:`probe.proteins.sink.ContactSink`
(O(L²) memory), an [L, L] map of probabilities in [0, 1] for any sequence.

Where we differ from Rao et al.: they fit on 20 proteins with a regularisation they chose on their data; the
strength here is the parameter ``C`` (sklearn's inverse strength, default :data:`DEFAULT_C`), our choice, not
read from their (unpublished) fitting code.

A baseline next to it: the **top-k-head average** (the few-heads readout of later work): on the training
structures, rank the heads by their long-range P@L (mean over the structures), keep the best k
(:data:`TOP_K`), and score a pair by the mean of their APC(sym α) maps.

Leave-one-structure-out (:func:`leave_one_out`): for each structure, fit both on the others and report its
held-out P@L/5 and P@L per range (columns ``p_at_{L|L5}_{short|medium|long}``, as
:mod:`probe.proteins.contacts`).

Fitting needs every head's map of every training structure at once: [layer head L L] float32 per structure (a
12 × 12 model at L = 300: 52 MB), which is why fitting is for a handful of structures of moderate length;
applying a fitted regression streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from probe.engine import DenseSink, capture
from probe.errors import ProbeError
from probe.models import clean_protein, encode_proteins, protein_alphabet, require_protein
from probe.proteins.precision import RANGES, apc, precision_by_range, symmetrize
from probe.proteins.regression_file import DEFAULT_C, ContactRegression
from probe.proteins.structure import CONTACT_THRESHOLD, DEFAULT_CB, contact_map, read_structure

TOP_K = 5  # heads averaged by the top-k-head baseline
MIN_SEPARATION = 6  # pairs closer in sequence are not fitted (nor scored by precision)


@dataclass(frozen=True, eq=False)
class TrainingStructure:
    """One labelled structure: its id, sequence and true map [L L] int8 (1, 0, -1 unknown)."""

    id: str
    sequence: str
    true_map: np.ndarray


# ------------------------------------------------------------------------------------------------------------
# Pure functions
# ------------------------------------------------------------------------------------------------------------


def pair_index(true_map: np.ndarray, min_separation: int = MIN_SEPARATION) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) [pair] int: the known pairs i < j with j − i ≥ `min_separation` of a [L L] true map."""
    i, j = np.triu_indices(true_map.shape[0], k=min_separation)
    known = true_map[i, j] >= 0
    return i[known], j[known]


def pair_features(maps: np.ndarray, true_map: np.ndarray,
                  min_separation: int = MIN_SEPARATION) -> tuple[np.ndarray, np.ndarray]:
    """(X [pair channel] float64, y [pair] int) of one structure.

    Parameters
    ----------
    maps : numpy.ndarray
        [layer head L L] APC(sym α) of every head (:func:`head_maps`).
    true_map : numpy.ndarray
        [L L] int8, 1 contact, 0 not, -1 unknown.

    Returns
    -------
    tuple
        X: the channels' values at the known pairs i < j, j − i ≥ `min_separation`; y: 1 where a contact.
    """
    i, j = pair_index(true_map, min_separation)
    channels = maps.reshape(-1, *maps.shape[-2:])  # [channel L L]
    return channels[:, i, j].T.astype(np.float64), (true_map[i, j] == 1).astype(np.int64)


def fit_logistic(features: np.ndarray, labels: np.ndarray, c: float = DEFAULT_C) -> tuple[np.ndarray, float]:
    """L1 logistic regression on standardised channels, folded back to raw units: (weight [channel], bias)
    with P = sigmoid(bias + features @ weight).

    Parameters
    ----------
    features : numpy.ndarray
        [pair channel] float64.
    labels : numpy.ndarray
        [pair] 0/1; both classes must occur.
    c : float
        sklearn's C (inverse regularisation strength).

    Returns
    -------
    tuple
        weight [channel] float64, bias float.
    """
    from sklearn.linear_model import LogisticRegression  # heavy, and only `probe contacts --fit` needs it

    if len(np.unique(labels)) < 2:
        raise ProbeError("the training structures hold no contact (or nothing but contacts) at separation ≥ "
                         "6; fit on real structures")
    mean = features.mean(0)  # [channel]
    scale = features.std(0)
    scale = np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(C=c, solver="liblinear", intercept_scaling=100.0, max_iter=1000,
                               # liblinear shuffles: seeded, so the same structures give the same file
                               random_state=0, **_l1())
    model.fit((features - mean) / scale, labels)
    weight = model.coef_[0] / scale  # [channel]
    bias = float(model.intercept_[0] - (model.coef_[0] * mean / scale).sum())
    return weight, bias


def _l1() -> dict:
    """The L1 penalty in the spelling of the installed scikit-learn (``l1_ratio=1`` from 1.8, ``penalty="l1"``
    before)."""
    import sklearn  # heavy, and only `probe contacts --fit` needs it

    major, minor = (int(part) for part in sklearn.__version__.split(".")[:2])
    return {"l1_ratio": 1.0} if (major, minor) >= (1, 8) else {"penalty": "l1"}


def predict_map(maps: np.ndarray, weight: np.ndarray, bias: float) -> np.ndarray:
    """[L L] sigmoid(bias + Σ_c weight_c · maps_c) of [layer head L L] maps and [layer head] (or [channel])
    weights."""
    channels = maps.reshape(-1, *maps.shape[-2:])  # [channel L L]
    logits = bias + np.tensordot(np.asarray(weight).reshape(-1), channels, axes=1)  # [L L]
    return 1.0 / (1.0 + np.exp(-logits))


def head_precisions(maps: np.ndarray, true_map: np.ndarray, column: str = "p_at_L_long") -> np.ndarray:
    """[layer head] the precision `column` of every head's map against a true map."""
    layers, heads = maps.shape[:2]
    return np.array([[precision_by_range(maps[layer, head], true_map)[column] for head in range(heads)]
                     for layer in range(layers)])


def select_top_heads(precisions: Sequence[np.ndarray], k: int = TOP_K) -> tuple[tuple[int, int], ...]:
    """The k (layer, head) with the highest mean precision over the structures ([layer head] each; NaN
    ignored)."""
    stacked = np.stack([np.nan_to_num(p, nan=-np.inf) for p in precisions])  # [structure layer head]
    mean = stacked.mean(0)  # [layer head]
    order = np.argsort(-mean, axis=None, kind="stable")[:k]
    return tuple((int(index // mean.shape[1]), int(index % mean.shape[1])) for index in order)


def top_heads_map(maps: np.ndarray, heads: Sequence[tuple[int, int]]) -> np.ndarray:
    """[L L] the mean of the selected heads' APC(sym α) maps (a score, not a probability)."""
    return np.mean([maps[layer, head] for layer, head in heads], axis=0)


def _scores(scores: np.ndarray, true_map: np.ndarray) -> dict[str, float]:
    precision = precision_by_range(scores, true_map)
    return {f"p_at_{fraction}_{name}": precision[f"p_at_{fraction}_{name}"] for name in RANGES
            for fraction in ("L", "L5")}


def leave_one_out(maps: Sequence[np.ndarray], structures: Sequence[TrainingStructure], c: float = DEFAULT_C,
                  k: int = TOP_K) -> pd.DataFrame:
    """Held-out precision of the regression and of the top-k-head average, each structure left out in turn.

    Parameters
    ----------
    maps : Sequence[numpy.ndarray]
        [layer head L L] per structure (:func:`head_maps`).
    structures : Sequence[TrainingStructure]
        The same structures, in the same order (at least two).

    Returns
    -------
    pandas.DataFrame
        One row per held-out structure × method (``regression``, ``top_heads``): ``id, method, length`` and
        ``p_at_{L|L5}_{short|medium|long}``.
    """
    if len(structures) < 2:
        raise ProbeError("leave-one-structure-out needs at least two structures")
    features = [pair_features(m, s.true_map) for m, s in zip(maps, structures, strict=True)]
    precisions = [head_precisions(m, s.true_map) for m, s in zip(maps, structures, strict=True)]
    rows = []
    for held, structure in enumerate(structures):
        train = [index for index in range(len(structures)) if index != held]
        weight, bias = fit_logistic(np.concatenate([features[i][0] for i in train]),
                                    np.concatenate([features[i][1] for i in train]), c)
        heads = select_top_heads([precisions[i] for i in train], k)
        for method, scores in (("regression", predict_map(maps[held], weight, bias)),
                               ("top_heads", top_heads_map(maps[held], heads))):
            rows.append({"id": structure.id, "method": method, "length": len(structure.sequence),
                         **_scores(scores, structure.true_map)})
    return pd.DataFrame(rows)


def fit(maps: Sequence[np.ndarray], structures: Sequence[TrainingStructure], model: str, c: float = DEFAULT_C,
        k: int = TOP_K, evaluate: bool = True,
        revision: str = "") -> tuple[ContactRegression, pd.DataFrame | None]:
    """Fit on every structure (and, with `evaluate`, the leave-one-out table first); see
    :func:`leave_one_out`.

    Parameters
    ----------
    maps : sequence of ndarray
        Per structure, its `[layer head L L]` APC(sym α) maps (:func:`head_maps`).
    structures : sequence of TrainingStructure
        The structures, in the order of `maps`.
    model, revision : str
        Name the model the regression is for (checked when it is applied).
    c : float, default DEFAULT_C
        The L1 regularisation's C.
    k : int, default TOP_K
        Heads averaged by the top-k-head baseline of the leave-one-out table.
    evaluate : bool, default True
        Also the leave-one-out table.

    Returns
    -------
    tuple
        (ContactRegression, the leave-one-out table or None).
    """
    evaluation = leave_one_out(maps, structures, c, k) if evaluate and len(structures) >= 2 else None
    features = [pair_features(m, s.true_map) for m, s in zip(maps, structures, strict=True)]
    weight, bias = fit_logistic(np.concatenate([f[0] for f in features]),
                                np.concatenate([f[1] for f in features]), c)
    heads = select_top_heads(
        [head_precisions(m, s.true_map) for m, s in zip(maps, structures, strict=True)], k)
    shape = maps[0].shape[:2]
    rows = [] if evaluation is None else evaluation.to_dict("records")
    regression = ContactRegression(model=model, weight=weight.reshape(shape), bias=bias, c=c,
                                   structures=tuple(s.id for s in structures), top_heads=heads,
                                   evaluation=rows, revision=revision)
    return regression, evaluation


# ------------------------------------------------------------------------------------------------------------
# From a model
# ------------------------------------------------------------------------------------------------------------


def head_maps(loaded, sequence: str) -> np.ndarray:
    """[layer head L L] float32 APC(sym α) of every head on the residues (special tokens dropped), one forward
    pass.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A protein language model.
    sequence : str
        Amino acids.
    """
    require_protein(loaded, "contact regression")
    cleaned, inputs = encode_proteins(loaded, [sequence])
    sink = DenseSink()
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    start, length = loaded.residue_offset, len(cleaned[0])
    alpha = sink.attention(0)[0, :, :, start:start + length, start:start + length]  # [layer head L L]
    return apc(symmetrize(alpha)).numpy()


def training_structures(files: Sequence[str | Path], loaded, threshold: float | None = None,
                        cb: str | None = None) -> list[TrainingStructure]:
    """The first protein chain of every file as a :class:`TrainingStructure` (sequence: the chain's
    residues)."""
    result = []
    for path in files:
        structure = read_structure(path)
        sequence = clean_protein(structure.sequence, protein_alphabet(loaded))
        limit = loaded.max_tokens - 2
        if len(sequence) > limit:
            raise ProbeError(f"{structure.name} has {len(sequence)} residues but {loaded.name} takes at most "
                             f"{limit}: leave it out of --fit")
        true_map = contact_map(structure, threshold or CONTACT_THRESHOLD, sequence, cb=cb or DEFAULT_CB)
        result.append(TrainingStructure(f"{structure.name}_{structure.chain}", sequence, true_map))
    return result


def held_out_lines(evaluation: pd.DataFrame, count: int) -> list[str]:
    """The report of a fit's leave-one-out rows (:func:`fit_files`' evaluation): per method (the regression,
    the top-k-head average) the mean held-out P@L and P@L/5 of each range, one line each."""
    lines = []
    for method, label in (("regression", "regression"), ("top_heads", f"top-{TOP_K}-head average")):
        rows = evaluation[evaluation["method"] == method]
        parts = [f"{r}: P@L {rows[f'p_at_L_{r}'].mean():.3f} P@L/5 {rows[f'p_at_L5_{r}'].mean():.3f}"
                 for r in RANGES]
        lines.append(f"held out ({count} structures, leave-one-out) {label}:  " + "  |  ".join(parts))
    return lines


def fit_files(loaded, files: Sequence[str | Path], threshold: float | None = None, cb: str | None = None,
              model: str | None = None) -> tuple[ContactRegression, pd.DataFrame]:
    """``probe contacts --fit``: the regression fitted on the first protein chain of every file, with the
    leave-one-structure-out table of it and of the top-k-head average (:func:`fit`, :func:`leave_one_out`).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A protein language model.
    files : Sequence[str or pathlib.Path]
        At least two structure files.
    threshold : float, optional
        Cβ–Cβ contact distance in Å (default 8).
    cb : {"virtual", "real"}, optional
        Where Cβ sits (default "virtual", ESM's evaluation).
    model : str, optional
        The name the file records (default ``loaded.name``); the revision is ``loaded.revision``.

    Returns
    -------
    regression : ContactRegression
        Fitted on every structure (``.save(path)`` writes what ``--regression FILE`` reads).
    evaluation : pandas.DataFrame
        Leave-one-structure-out precisions: one row per structure × method (``regression``, ``top_heads``).

    Examples
    --------
    >>> esm = probe.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> regression, table = fit_files(esm, ["tests/data/pdb1ejg.pdb", "tests/data/pdb1ubi.pdb"])
    >>> regression.structures, regression.weight.shape  # weight: [layer head]
    (('pdb1ejg_A', 'pdb1ubi_A'), (2, 4))
    >>> table[["id", "method", "p_at_L_long"]]  # each structure predicted by a fit on the others
              id      method  p_at_L_long
    0  pdb1ejg_A  regression     0.130435
    1  pdb1ejg_A   top_heads     0.195652
    2  pdb1ubi_A  regression     0.105263
    3  pdb1ubi_A   top_heads     0.052632
    """
    if len(files) < 2:
        raise ProbeError(f"--fit holds {len(files)} structure: leave-one-structure-out needs at least two")
    structures = training_structures(files, loaded, threshold, cb)
    maps = [head_maps(loaded, structure.sequence) for structure in structures]  # [layer head L L] each
    return fit(maps, structures, model or loaded.name, revision=loaded.revision)


__all__ = ["DEFAULT_C", "TOP_K", "TrainingStructure", "fit", "fit_files", "fit_logistic", "head_maps",
           "held_out_lines", "leave_one_out", "pair_features", "predict_map", "select_top_heads",
           "top_heads_map", "training_structures"]
