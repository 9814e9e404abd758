"""The 3D structure view's data: pure functions from a structure, α on the residues and contact maps to the
JSON that ``assets/structure.js`` draws with 3Dmol.js (one payload for a notebook, the report and the app).

Axes: ``L`` sequence positions (the model's residues, in order; token = position + the model's residue
offset), ``R`` structure residues (one chain as :func:`probe.proteins.structure.read_structure` reads it).
The two are tied by :func:`probe.proteins.structure.align_to_sequence` (identity when the sequence is the
structure's own), ``residue_of_position`` [L] (−1: a position the structure lacks).

Attention edges follow provis (Vig et al., ``notebooks/provis.ipynb``: ``get_attn_data``): α of one head on
the residues — the model's special tokens' rows and columns dropped, no renormalisation — made undirected as
max(α[i, j], α[j, i]) over pairs i ≠ j (a position's attention to itself is not drawn), kept when at least
``min_weight`` (provis' ``min_attn``, 0.1 in hexviz' default too), drawn as a cylinder between the two Cα with
radius 0.9 · weight Å (provis' ``attn_scale``). hexviz averages the two directions instead (``rule="mean"``,
its ``unidirectional_avg_filtered``). We add a cap, the ``top`` strongest pairs (ties: lower positions first),
so a diffuse head does not fill the fold with cylinders, and report each pair as (query, key) in its stronger
direction (the cell a host's attention map marks). Residue colouring (``structure.js``): with a residue
focused, α from it (its row) or to it (its column); with none, the attention each residue receives, Σ over
queries of α[:, j] / L (hexviz' "attention into a residue" that labels its top residues). The colour scale is
the same for every head: the value as a multiple of uniform attention (1/L) on a log scale, grey at or below
uniform ("nothing here"), the ramp's end where one residue takes all of it (L×); the caption says so and gives
the largest multiple. (It once scaled each head to its own maximum: a flat head painted the whole fold.)

Contacts: the true ones are pairs i < j at least ``min_separation`` (6) apart whose Cβ–Cβ distance is below
the threshold (:func:`probe.proteins.structure.contact_map`: 1); the predicted ones are the L most probable
pairs at least that far apart (the P@L convention of :mod:`probe.proteins.precision`).
"""

from __future__ import annotations

import io

import numpy as np

from probe.errors import ProbeError
from probe.naming import head_name
from probe.proteins.precision import MIN_SEPARATION
from probe.proteins.structure import Structure, align_to_sequence, renumbered
from probe.views import encode

EDGE_RULES = ("max", "mean")  # provis: the larger direction; hexviz: the mean of the two
MIN_WEIGHT = 0.1  # provis' min_attn in its examples (0.1, 0.2); hexviz' default minimum attention
TOP_PAIRS = 50  # the most edges drawn per head
EDGE_SCALE = 0.9  # Å of cylinder radius per unit of α (provis' attn_scale)
THEMES = ("light", "dark")


def residue_positions(structure: Structure, sequence: str) -> np.ndarray:
    """[L] int: the structure residue of each sequence position, −1 where the structure has none.

    Raises ProbeError when the structure's chain does not match the sequence (see
    :func:`probe.proteins.structure.align_to_sequence`).
    """
    return align_to_sequence(structure, sequence)


def position_labels(structure: Structure, sequence: str, residue_of_position: np.ndarray) -> list[str]:
    """[L] "P22" (the letter and the file's residue number and insertion code), or "G5?" for a position the
    structure lacks (its 1-based sequence number and a question mark)."""
    codes = structure.insertion_codes if structure.insertion_codes is not None else [""] * len(structure)
    labels = []
    for position, residue in enumerate(residue_of_position):
        if residue < 0:
            labels.append(f"{sequence[position]}{position + 1}?")
        else:
            labels.append(f"{sequence[position]}{int(structure.residue_ids[residue])}{codes[residue]}")
    return labels


def edge_weights(alpha: np.ndarray, rule: str = "max") -> np.ndarray:
    """[L L] undirected weight of each pair from one head's α [L L] (query, key): max or mean of the two
    directions; the diagonal is zero (self-attention is not drawn)."""
    if rule not in EDGE_RULES:
        raise ProbeError(f"edge rule {rule!r}: use one of {', '.join(EDGE_RULES)}")
    alpha = np.nan_to_num(np.asarray(alpha, dtype=np.float64), nan=0.0)
    both = np.maximum(alpha, alpha.T) if rule == "max" else (alpha + alpha.T) / 2  # [L L]
    np.fill_diagonal(both, 0.0)
    return both


def top_pairs(alpha: np.ndarray, count: int = TOP_PAIRS, min_weight: float = MIN_WEIGHT, rule: str = "max",
              drawable: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The strongest undirected pairs of one head: ([pair 2] int (query, key), [pair] float weight).

    Parameters
    ----------
    alpha : numpy.ndarray, shape=(L, L)
        One head's α on the residues (query, key).
    count : int, default 50
        At most this many pairs, strongest first (ties: the lower positions first).
    min_weight : float, default 0.1
        Pairs whose weight is below this are left out.
    rule : {"max", "mean"}, default "max"
        The weight of a pair: the larger direction (provis) or the mean of both (hexviz).
    drawable : numpy.ndarray, shape=(L,), bool, optional
        Positions with a Cα to draw from; pairs touching another position are left out.

    Returns
    -------
    tuple of numpy.ndarray
        ``pairs`` [pair 2] int64, each (query, key) in its stronger direction (i before j on a tie), and
        ``weights`` [pair] float64, descending.

    Examples
    --------
    >>> from probe.views.structure3d import top_pairs
    >>> alpha = np.array([[0.0, 0.7, 0.3], [0.2, 0.0, 0.8], [0.5, 0.05, 0.45]])
    >>> pairs, weights = top_pairs(alpha, count=2)
    >>> pairs.tolist(), weights.tolist()  # (1, 2) at 0.8 first; 0 -> 1 is the stronger direction of (0, 1)
    ([[1, 2], [0, 1]], [0.8, 0.7])
    """
    weights = edge_weights(alpha, rule)  # [L L]
    length = weights.shape[0]
    i, j = np.triu_indices(length, k=1)  # [pair] each, i < j
    value = weights[i, j]
    keep = value >= min_weight
    if drawable is not None:
        keep &= np.asarray(drawable, dtype=bool)[i] & np.asarray(drawable, dtype=bool)[j]
    i, j, value = i[keep], j[keep], value[keep]
    order = np.lexsort((j, i, -value))[:max(0, int(count))]  # strongest first; ties: lower (i, j)
    i, j, value = i[order], j[order], value[order]
    alpha = np.nan_to_num(np.asarray(alpha, dtype=np.float64), nan=0.0)
    flip = alpha[j, i] > alpha[i, j]  # the stronger direction is j → i
    pairs = np.stack([np.where(flip, j, i), np.where(flip, i, j)], axis=-1).reshape(-1, 2)  # [pair 2]
    return pairs.astype(np.int64), value


def true_pairs(true_map: np.ndarray, min_separation: int = MIN_SEPARATION) -> np.ndarray:
    """[pair 2] int: pairs i < j at least `min_separation` apart that are contacts (true map == 1)."""
    true_map = np.asarray(true_map)
    i, j = np.triu_indices(true_map.shape[0], k=max(1, int(min_separation)))
    hit = true_map[i, j] == 1
    return np.stack([i[hit], j[hit]], axis=-1).astype(np.int64).reshape(-1, 2)


def predicted_pairs(contacts: np.ndarray, count: int | None = None,
                    min_separation: int = MIN_SEPARATION) -> tuple[np.ndarray, np.ndarray]:
    """The `count` (default L) most probable pairs i < j at least `min_separation` apart: ([pair 2] int,
    [pair] probability, descending; ties: lower positions first). Unknown (NaN) pairs are left out."""
    contacts = np.asarray(contacts, dtype=np.float64)
    length = contacts.shape[0]
    i, j = np.triu_indices(length, k=max(1, int(min_separation)))
    value = contacts[i, j]
    known = np.isfinite(value)
    i, j, value = i[known], j[known], value[known]
    order = np.lexsort((j, i, -value))[:length if count is None else max(0, int(count))]
    return np.stack([i[order], j[order]], axis=-1).astype(np.int64).reshape(-1, 2), value[order]


def chain_pdb(structure: Structure) -> str:
    """The chain as PDB text for the viewer: residue i (0-based) numbered i + 1, chain "A", one altloc, no
    hydrogens (:func:`probe.proteins.structure.renumbered`)."""
    if structure.atoms is None:
        raise ProbeError("this structure has no atoms to draw: read it with probe.proteins.structure."
                         "read_structure")
    from biotite.structure.io import pdb

    handle = pdb.PDBFile()
    handle.set_structure(renumbered(structure.atoms))
    text = io.StringIO()
    handle.write(text)
    lines = text.getvalue().splitlines()
    return "".join(line + "\n" for line in lines if line.startswith(("ATOM", "HETATM")))


def _rounded(values: np.ndarray, digits: int) -> list:
    return [round(float(v), digits) for v in values]


def structure_payload(structure: Structure, sequence: str, alpha: dict[tuple[int, int], np.ndarray],
                      token_offset: int, true_map: np.ndarray | None = None,
                      contacts: np.ndarray | None = None, selected: tuple[int, int] | None = None,
                      model: str = "", title: str = "",
                      theme: str = "light", top: int = TOP_PAIRS, min_weight: float = MIN_WEIGHT,
                      rule: str = "max", head_notes: dict[tuple[int, int], str] | None = None,
                      layer_names: tuple[str, ...] | None = None) -> dict:
    """The JSON ``structure.js`` draws: the chain, the residue map, each head's α and top pairs, the contacts.

    Parameters
    ----------
    structure : probe.proteins.structure.Structure
        One chain, read by :func:`probe.proteins.structure.read_structure` (its atoms are drawn).
    sequence : str
        The model's residues (L); the structure's chain is aligned to it.
    alpha : dict of (int, int) to numpy.ndarray, shape=(L, L)
        α of each head shown, on the residues (query, key), special tokens dropped.
    token_offset : int
        The model's token index of position 0 (``loaded.residue_offset``: 1 after ESM's <cls>).
    true_map : numpy.ndarray, shape=(L, L), int8, optional
        True contacts aligned to `sequence`: 1, 0, −1 unknown.
    contacts : numpy.ndarray, shape=(L, L), float, optional
        Predicted contact probabilities (None: the model has no contact regression).
    selected : (int, int), optional
        The head shown first (default: the first of `alpha`).
    model, title : str
        The model's name and the view's title.
    theme : {"light", "dark"}
        The first theme (the view has a switch).
    top, min_weight, rule
        The edges drawn per head (:func:`top_pairs`).
    head_notes : dict of (int, int) to str, optional
        A short note per head for the head picker (e.g. its long-range P@L).
    layer_names : tuple of str, optional
        Names of the layers by flat number (an encoder–decoder's); None: "L3".

    Returns
    -------
    dict
        JSON-ready: ``pdb`` (text), ``residue_of_position`` [L], ``token_of_position`` [L], ``labels`` [L],
        ``ca`` [L] (x, y, z Å or None), ``heads`` [[layer, head]], ``maps`` (uint8 α [head L L] in base64 with
        float32 scales), ``pairs`` [head] of [query, key, weight], ``contacts`` {"true": [[i, j]] or None,
        "predicted": [[i, j, p]] or None}, ``params``.

    Examples
    --------
    >>> from probe.proteins.structure import read_structure
    >>> from probe.views.structure3d import structure_payload
    >>> crambin = read_structure("tests/data/pdb1ejg.pdb", chain="A")
    >>> n = len(crambin.sequence)
    >>> uniform = {(0, 1): np.full((n, n), 1 / n, dtype=np.float32)}  # one head, uniform attention
    >>> payload = structure_payload(crambin, crambin.sequence, uniform, token_offset=1, model="demo")
    >>> payload["heads"], len(payload["labels"]), payload["labels"][:3]
    ([[0, 1]], 46, ['T1', 'T2', 'C3'])
    """
    if theme not in THEMES:
        raise ProbeError(f"theme {theme!r}: use one of {', '.join(THEMES)}")
    if not alpha:
        raise ProbeError("no head to show: pass at least one head's α")
    length = len(sequence)
    heads = sorted(alpha)
    for key in heads:
        if np.shape(alpha[key]) != (length, length):
            raise ProbeError(f"α of {head_name(*key)} has shape {np.shape(alpha[key])}; the sequence has "
                             f"{length} residues")
    residue_of_position = residue_positions(structure, sequence)  # [L]
    present = residue_of_position >= 0
    ca = np.full((length, 3), np.nan)  # [L 3]
    backbone = structure.backbone  # [R 3 3] N, Cα, C
    if backbone is None:
        backbone = np.full((len(structure), 3, 3), np.nan)
    ca[present] = backbone[residue_of_position[present], 1]
    drawable = present & np.isfinite(ca).all(-1)  # [L]
    stacked = np.stack([np.asarray(alpha[key], dtype=np.float32) for key in heads])  # [head L L]
    quantised, tops = encode.quantise(stacked)
    pairs = []
    for key in heads:
        index, weight = top_pairs(alpha[key], top, min_weight, rule, drawable)
        pairs.append([[int(a), int(b), round(float(w), 4)] for (a, b), w in zip(index, weight, strict=True)])
    truth = predicted = None
    if true_map is not None:
        if np.shape(true_map) != (length, length):
            raise ProbeError(f"the true contact map has shape {np.shape(true_map)}; the sequence has "
                             f"{length}")
        found = true_pairs(true_map)
        truth = [[int(a), int(b)] for a, b in found if drawable[a] and drawable[b]]
    if contacts is not None:
        if np.shape(contacts) != (length, length):
            raise ProbeError(f"the predicted contact map has shape {np.shape(contacts)}; the sequence has "
                             f"{length}")
        index, probability = predicted_pairs(contacts)
        predicted = [[int(a), int(b), round(float(p), 4)]
                     for (a, b), p in zip(index, probability, strict=True) if drawable[a] and drawable[b]]
    first = selected if selected is not None and tuple(selected) in alpha else heads[0]
    notes = head_notes or {}
    return {
        "version": 1, "kind": "structure3d", "model": model, "title": title or model, "theme": theme,
        "structure": structure.name, "chain": structure.chain, "chains": list(structure.chains),
        "pdb": chain_pdb(structure), "sequence": sequence, "n": length,
        "residue_of_position": [int(r) for r in residue_of_position],
        "token_of_position": [position + int(token_offset) for position in range(length)],
        "labels": position_labels(structure, sequence, residue_of_position),
        "ca": [_rounded(point, 3) if drawable[p] else None for p, point in enumerate(ca)],
        "heads": [list(key) for key in heads],
        "head_names": [_name(key, layer_names) for key in heads],
        "head_notes": [notes.get(key, "") for key in heads],
        "selected": list(first),
        "maps": {"side": length, "data": encode.b64(quantised), "scale": encode.b64(tops)},
        "pairs": pairs,
        "contacts": {"true": truth, "predicted": predicted},
        "params": {"rule": rule, "min_weight": float(min_weight), "top": int(top), "edge_scale": EDGE_SCALE,
                   "min_separation": MIN_SEPARATION},
    }


def _name(key: tuple[int, int], layer_names: tuple[str, ...] | None) -> str:
    layer, head = key
    return f"{layer_names[layer]}H{head}" if layer_names else head_name(layer, head)


__all__ = ["EDGE_RULES", "EDGE_SCALE", "MIN_WEIGHT", "THEMES", "TOP_PAIRS", "chain_pdb", "edge_weights",
           "position_labels", "predicted_pairs", "residue_positions", "structure_payload", "top_pairs",
           "true_pairs"]
