"""A contact readout for any protein language model: ESM's recipe fitted on a few structures.

ESM's contact head (Rao et al. 2020, "Transformer protein language models are unsupervised structure learners") is an
L1-regularised logistic regression over the layer × head channels of APC-corrected symmetrised attention::

    P(contact i, j) = sigmoid(b + Σ_c w_c · APC(sym(α_c))(i, j))

fitted on 20 proteins. Checkpoints other than ESM (ProtBert-style BERTs, antibody BERTs, ProtT5 encoders) ship no
such regression; this module fits one on the structures a user has (scikit-learn's ``LogisticRegression``,
``penalty="l1"``, solver liblinear), over the known residue pairs i < j with j − i ≥ 6. The channels are standardised
for the fit and the standardisation is folded back into (w, b), so the fitted regression is applied exactly like a
checkpoint's own: streamed head by head by :class:`probe.proteins.contacts.ContactSink` (O(L²) memory), an [L, L]
map of probabilities in [0, 1] for any sequence.

Where we differ from Rao et al.: they fit on 20 proteins with a regularisation they chose on their data; the
strength here is the parameter ``C`` (sklearn's inverse strength, default :data:`DEFAULT_C`), our choice, not read
from their (unpublished) fitting code.

A baseline next to it: the **top-k-head average** (the few-heads readout of later work): on the training
structures, rank the heads by their long-range P@L (mean over the structures), keep the best k (:data:`TOP_K`), and
score a pair by the mean of their APC(sym α) maps.

Leave-one-structure-out (:func:`leave_one_out`): for each structure, fit both on the others and report its held-out
P@L/5 and P@L per range (columns ``p_at_{L|L5}_{short|medium|long}``, as :mod:`probe.proteins.contacts`).

Fitting needs every head's map of every training structure at once: [layer head L L] float32 per structure (a
12 × 12 model at L = 300: 52 MB), which is why fitting is for a handful of structures of moderate length;
applying a fitted regression streams.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from probe.errors import ProbeError, first_line

DEFAULT_C = 0.15  # sklearn's C (inverse L1 strength) on standardised channels; our choice (see the docstring)
TOP_K = 5  # heads averaged by the top-k-head baseline
MIN_SEPARATION = 6  # pairs closer in sequence are not fitted (nor scored by precision)
FORMAT = "probe-contact-regression"
FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class TrainingStructure:
    """One labelled structure: its id, sequence and true map [L L] int8 (1, 0, -1 unknown)."""

    id: str
    sequence: str
    true_map: np.ndarray


@dataclass(frozen=True, eq=False)
class ContactRegression:
    """A fitted contact regression (raw APC(sym α) units) and what it was fitted on."""

    model: str  # the model's name or path
    weight: np.ndarray  # [layer head] float64
    bias: float
    c: float = DEFAULT_C
    structures: tuple[str, ...] = ()  # ids of the training structures
    top_heads: tuple[tuple[int, int], ...] = ()  # (layer, head) of the top-k baseline, selected on the same set
    evaluation: list[dict] = field(default_factory=list)  # leave-one-out rows (see leave_one_out)
    revision: str = ""  # the model's revision (probe.models: commit or weights hash); "" when not recorded

    def as_tuple(self) -> tuple[torch.Tensor, float]:
        """(weight [layer head] float32 tensor, bias): the form :func:`probe.proteins.contacts.predict_contacts`
        takes as ``regression``."""
        return torch.as_tensor(self.weight, dtype=torch.float32), float(self.bias)

    def check_model(self, loaded) -> ContactRegression:
        """Self, when it was fitted for `loaded` (its revision, where both are known) and its shape fits (layers ×
        heads); a one-line ProbeError otherwise."""
        if self.revision and loaded.revision not in ("", "unknown") and self.revision != loaded.revision:
            raise ProbeError(f"the contact regression was fitted for {self.model} (revision {self.revision[:12]}), "
                             f"not for {loaded.name} (revision {loaded.revision[:12]}): fit one for this model with "
                             "--fit")
        if tuple(self.weight.shape) != (loaded.n_layers, loaded.n_heads):
            raise ProbeError(f"the contact regression was fitted for {self.weight.shape[0]} layers × "
                             f"{self.weight.shape[1]} heads ({self.model}) but {loaded.name} has {loaded.n_layers} × "
                             f"{loaded.n_heads}: fit one for this model with --fit")
        return self

    def save(self, path: str | Path) -> None:
        """Write as JSON (atomically: a temporary file renamed)."""
        path = Path(path)
        data = {"format": FORMAT, "version": FORMAT_VERSION, "model": self.model, "revision": self.revision,
                "bias": float(self.bias),
                "weight": np.asarray(self.weight, dtype=np.float64).tolist(), "c": self.c,
                "structures": list(self.structures), "top_heads": [list(pair) for pair in self.top_heads],
                "evaluation": self.evaluation}
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=_json_default), encoding="utf-8")
        tmp.replace(path)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def read_regression(path: str | Path) -> ContactRegression:
    """A regression written by :meth:`ContactRegression.save` (``probe contacts --fit``); one-line ProbeError for a
    missing, foreign or damaged file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ProbeError(f"--regression {path} does not exist: fit one with probe contacts --fit STRUCTURES")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProbeError(f"--regression {path} is not a contact regression file ({first_line(error)})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProbeError(f"--regression {path} is not a contact regression file written by probe contacts --fit")
    try:
        weight = np.asarray(data["weight"], dtype=np.float64)
        bias = float(data["bias"])
    except (KeyError, TypeError, ValueError) as error:
        raise ProbeError(f"--regression {path} is damaged ({first_line(error)}); fit it again with --fit") from None
    if weight.ndim != 2 or not np.isfinite(weight).all() or not np.isfinite(bias):
        raise ProbeError(f"--regression {path} is damaged (weights must be a finite [layer, head] table)")
    return ContactRegression(model=str(data.get("model", "")), weight=weight, bias=bias,
                             c=float(data.get("c", DEFAULT_C)), structures=tuple(data.get("structures", ())),
                             top_heads=tuple(tuple(pair) for pair in data.get("top_heads", ())),
                             evaluation=list(data.get("evaluation", [])), revision=str(data.get("revision", "")))


# ---------------------------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------------------------


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
    """L1 logistic regression on standardised channels, folded back to raw units: (weight [channel], bias) with
    P = sigmoid(bias + features @ weight).

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
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(labels)) < 2:
        raise ProbeError("the training structures hold no contact (or nothing but contacts) at separation ≥ 6; "
                         "fit on real structures")
    mean = features.mean(0)  # [channel]
    scale = features.std(0)
    scale = np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(C=c, solver="liblinear", intercept_scaling=100.0, max_iter=1000, random_state=0,
                               **_l1())  # liblinear shuffles: seeded, so the same structures give the same file
    model.fit((features - mean) / scale, labels)
    weight = model.coef_[0] / scale  # [channel]
    bias = float(model.intercept_[0] - (model.coef_[0] * mean / scale).sum())
    return weight, bias


def _l1() -> dict:
    """The L1 penalty in the spelling of the installed scikit-learn (``l1_ratio=1`` from 1.8, ``penalty="l1"``
    before)."""
    import sklearn

    major, minor = (int(part) for part in sklearn.__version__.split(".")[:2])
    return {"l1_ratio": 1.0} if (major, minor) >= (1, 8) else {"penalty": "l1"}


def predict_map(maps: np.ndarray, weight: np.ndarray, bias: float) -> np.ndarray:
    """[L L] sigmoid(bias + Σ_c weight_c · maps_c) of [layer head L L] maps and [layer head] (or [channel]) weights."""
    channels = maps.reshape(-1, *maps.shape[-2:])  # [channel L L]
    logits = bias + np.tensordot(np.asarray(weight).reshape(-1), channels, axes=1)  # [L L]
    return 1.0 / (1.0 + np.exp(-logits))


def head_precisions(maps: np.ndarray, true_map: np.ndarray, column: str = "p_at_L_long") -> np.ndarray:
    """[layer head] the precision `column` of every head's map against a true map."""
    from probe.proteins.contacts import precision_by_range

    layers, heads = maps.shape[:2]
    return np.array([[precision_by_range(maps[layer, head], true_map)[column] for head in range(heads)]
                     for layer in range(layers)])


def select_top_heads(precisions: Sequence[np.ndarray], k: int = TOP_K) -> tuple[tuple[int, int], ...]:
    """The k (layer, head) with the highest mean precision over the structures ([layer head] each; NaN ignored)."""
    stacked = np.stack([np.nan_to_num(p, nan=-np.inf) for p in precisions])  # [structure layer head]
    mean = stacked.mean(0)  # [layer head]
    order = np.argsort(-mean, axis=None, kind="stable")[:k]
    return tuple((int(index // mean.shape[1]), int(index % mean.shape[1])) for index in order)


def top_heads_map(maps: np.ndarray, heads: Sequence[tuple[int, int]]) -> np.ndarray:
    """[L L] the mean of the selected heads' APC(sym α) maps (a score, not a probability)."""
    return np.mean([maps[layer, head] for layer, head in heads], axis=0)


def _scores(scores: np.ndarray, true_map: np.ndarray) -> dict[str, float]:
    from probe.proteins.contacts import RANGES, precision_by_range

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
        k: int = TOP_K, evaluate: bool = True, revision: str = "") -> tuple[ContactRegression, pd.DataFrame | None]:
    """Fit on every structure (and, with `evaluate`, the leave-one-out table first); see :func:`leave_one_out`.
    `model` and `revision` name the model the regression is for (checked when it is applied)."""
    evaluation = leave_one_out(maps, structures, c, k) if evaluate and len(structures) >= 2 else None
    features = [pair_features(m, s.true_map) for m, s in zip(maps, structures, strict=True)]
    weight, bias = fit_logistic(np.concatenate([f[0] for f in features]), np.concatenate([f[1] for f in features]),
                                c)
    heads = select_top_heads([head_precisions(m, s.true_map) for m, s in zip(maps, structures, strict=True)], k)
    shape = maps[0].shape[:2]
    rows = [] if evaluation is None else evaluation.to_dict("records")
    regression = ContactRegression(model=model, weight=weight.reshape(shape), bias=bias, c=c,
                                   structures=tuple(s.id for s in structures), top_heads=heads, evaluation=rows,
                                   revision=revision)
    return regression, evaluation


# ---------------------------------------------------------------------------------------------------------------
# From a model
# ---------------------------------------------------------------------------------------------------------------


def head_maps(loaded, sequence: str) -> np.ndarray:
    """[layer head L L] float32 APC(sym α) of every head on the residues (special tokens dropped), one forward pass.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A protein language model.
    sequence : str
        Amino acids.
    """
    from probe.engine import DenseSink, capture
    from probe.models import encode_proteins, require_protein
    from probe.proteins.contacts import apc, symmetrize

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
    """The first protein chain of every file as a :class:`TrainingStructure` (sequence: the chain's residues)."""
    from probe.models import clean_protein, protein_alphabet
    from probe.proteins.structure import CONTACT_THRESHOLD, DEFAULT_CB, contact_map, read_structure

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


__all__ = ["DEFAULT_C", "TOP_K", "ContactRegression", "TrainingStructure", "fit", "fit_logistic", "head_maps",
           "leave_one_out", "pair_features", "predict_map", "read_regression", "select_top_heads",
           "top_heads_map", "training_structures"]
