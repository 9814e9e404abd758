"""`probe.show_structure`: a head's attention on the 3D structure, drawn under a notebook cell (and in the
report) by 3Dmol.js, inlined with the package's structure.js — offline, from file://, no network.

The Python call computes (the contact analysis's one forward pass for the heads' ranking and the predicted
contacts, then one pass keeping the chosen heads' α on the residues); :mod:`probe.views.structure3d` turns it
into the payload; the browser draws. Which heads: the ones asked for, else every head when their residue maps
fit `budget` (L² + 4 bytes each, uint8), else the best by long-range P@L against the structure's contacts that
fit (at least one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from probe.engine import capture
from probe.errors import ProbeError
from probe.models import AMINO_ACIDS, clean_protein, encode_proteins, load, protein_alphabet, require_protein
from probe.naming import display_name, head_name, parse_head_name
from probe.proteins.contacts import ContactResult, predict_contacts
from probe.proteins.structure import Structure, contact_map, read_structure
from probe.views import encode
from probe.views.bundle import inline_structure_script, mounting_html
from probe.views.html_view import HtmlView
from probe.views.pooling import PoolSink
from probe.views.structure3d import EDGE_RULES, MIN_WEIGHT, THEMES, TOP_PAIRS, structure_payload

MAP_BUDGET = 2 * 2**20  # bytes of residue maps (uint8, L² + 4 per head) in one 3D view; base64 adds a third


@dataclass(frozen=True, eq=False)
class StructureView(HtmlView):
    """What :func:`show_structure` returns: the 3D view, drawn under a notebook cell (``_repr_html_``).

    Attributes
    ----------
    model : str
        The model's name.
    structure : probe.proteins.structure.Structure
        The chain drawn.
    sequence : str
        The model's residues (L), aligned to the chain.
    alpha : dict of (int, int) to numpy.ndarray, shape=(L, L), float32
        α on the residues of each head shown (query, key).
    token_offset : int
        The token index of residue 0 (1 after ESM's <cls>).
    true_map : numpy.ndarray or None, shape=(L, L), int8
        True contacts (1, 0, −1 unknown).
    contacts : numpy.ndarray or None, shape=(L, L), float32
        Predicted contact probabilities; None without a contact regression.
    selected : tuple of (int, int)
        The head drawn first.
    head_notes : dict of (int, int) to str
        A note per head for the head picker (its long-range P@L).

    Examples
    --------
    >>> view = probe.show_structure(probe.load("zoo:esm-random"), "tests/data/pdb1ejg.pdb", heads=[(1, 2)])
    >>> view.selected, view.alpha[(1, 2)].shape  # the head drawn first and its α on the 46 residues
    ((1, 2), (46, 46))
    """

    model: str
    structure: Structure
    sequence: str
    alpha: dict[tuple[int, int], np.ndarray]  # (layer, head) -> [L L]
    token_offset: int
    true_map: np.ndarray | None = None  # [L L] int8
    contacts: np.ndarray | None = None  # [L L] float32
    selected: tuple[int, int] = (0, 0)
    title: str = ""
    theme: str = "light"
    top: int = TOP_PAIRS
    min_weight: float = MIN_WEIGHT
    rule: str = "max"
    head_notes: dict = field(default_factory=dict)

    def payload(self) -> dict:
        """The JSON structure.js reads (:func:`probe.views.structure3d.structure_payload`)."""
        return structure_payload(self.structure, self.sequence, self.alpha, self.token_offset, self.true_map,
                                 self.contacts, self.selected, self.model, self.title, self.theme, self.top,
                                 self.min_weight, self.rule, self.head_notes)

    def html(self, element_id: str | None = None) -> str:
        """A self-contained HTML fragment: the style, the data, 3Dmol.js, structure.js and the mount call."""
        return structure_fragment(self.payload(), element_id)

    kind = "3D view"

    def page_title(self) -> str:
        return f"probe structure · {self.model}"

    def __repr__(self) -> str:
        heads = f"{len(self.alpha)} head{'s' if len(self.alpha) != 1 else ''}"
        return (f"<probe structure view: {self.model} on {self.structure.name} chain {self.structure.chain}, "
                f"{len(self.sequence)} residues, {heads}>")



def structure_fragment(data: dict, element_id: str | None = None) -> str:
    """HTML that mounts the 3D view of `data` where it is placed (a notebook output, a report section)."""
    return mounting_html("structure", data, inline_structure_script(), "window.probeStructure.mountAll();",
                         element_id)


def residue_attention(loaded, sequence: str, heads) -> dict[tuple[int, int], np.ndarray]:
    """α of `heads` on the residues of one protein, from one forward pass: {(layer, head): [L L] float32}
    (query, key; the model's special tokens' rows and columns dropped, no renormalisation)."""
    cleaned, inputs = encode_proteins(loaded, [sequence])
    n_tokens = int(inputs["attention_mask"].sum())
    sink = PoolSink(n_tokens, 1, heads)
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    start, length = loaded.residue_offset, len(cleaned[0])
    maps = sink.maps()  # (layer, head) -> [token token]
    missing = sorted(set(heads) - set(maps))
    if missing:
        names = ", ".join(head_name(*key) for key in missing)
        raise ProbeError(f"{loaded.name}: no attention was captured for {names}")
    return {key: np.ascontiguousarray(maps[key][start:start + length, start:start + length]) for key in heads}


def ranked_heads(result: ContactResult, all_heads) -> tuple[list[tuple[int, int]], dict]:
    """(every head, best first, notes): by long-range P@L against the true contacts, then by logit share
    (NaN last), then layer and head; notes "P@L long 0.41" where known."""
    table = result.heads
    if table is None or table.empty:
        return sorted(all_heads), {}
    scores = {}
    for row in table.itertuples(index=False):
        key = (int(row.layer), int(row.head))
        values = [float(getattr(row, column, np.nan)) for column in ("p_at_L_long", "logit_share")]
        scores[key] = [(-v if np.isfinite(v) else np.inf) for v in values]
    order = sorted(all_heads, key=lambda key: (*scores.get(key, [np.inf, np.inf]), key))
    notes = {key: f"P@L long {-scores[key][0]:.2f}" for key in order
             if key in scores and np.isfinite(scores[key][0])}
    return order, notes


def check_view_options(top: int, min_weight: float, budget: int, rule: str, theme: str) -> None:
    """The 3D view's options, checked before anything is loaded or computed: one line naming the fix for a
    count below 1, a weight outside [0, 1] (NaN included), a budget below one byte, an unknown rule or
    theme."""
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise ProbeError(f"top={top!r}: give the most edges drawn per head, a whole number of at least 1 "
                         f"(default {TOP_PAIRS})")
    if isinstance(min_weight, bool) or not isinstance(min_weight, (int, float, np.floating, np.integer)) \
            or not 0 <= float(min_weight) <= 1:  # NaN fails both comparisons
        raise ProbeError(f"min_weight={min_weight!r}: give an edge weight between 0 and 1 (default "
                         f"{MIN_WEIGHT})")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ProbeError(f"budget={budget!r}: give the bytes of residue maps the view may hold, a whole "
                         f"number of at least 1 (default {MAP_BUDGET}; at least one head is always shown)")
    if rule not in EDGE_RULES:
        raise ProbeError(f"rule={rule!r}: use one of {', '.join(EDGE_RULES)}")
    if theme not in THEMES:
        raise ProbeError(f"theme={theme!r}: use one of {', '.join(THEMES)}")


def aligned_structure(structure: Structure, sequence: str | None = None,
                      alphabet: str = AMINO_ACIDS) -> tuple[str, np.ndarray]:
    """The residues a model reads on a structure and the true contacts aligned to them: `sequence` (default:
    the chain's own) cleaned to `alphabet` and aligned to the chain. A sequence of another protein (too few
    identical residues aligned) is refused in one line; a part of the chain is drawn where it aligns. The one
    check of :func:`show_structure` and ``probe report --structure S --text T``.

    Returns
    -------
    sequence : str
        The residues (L).
    true_map : numpy.ndarray, shape=(L, L), int8
        1 contact, 0 none, −1 unknown (a residue the chain lacks).
    """
    sequence = clean_protein(structure.sequence if sequence is None else sequence, alphabet)
    return sequence, contact_map(structure, sequence=sequence)  # [L L] int8


def _heads_arg(heads, loaded) -> list[tuple[int, int]]:
    out = []
    for item in heads:
        layer, head = parse_head_name(item) if isinstance(item, str) else (int(item[0]), int(item[1]))
        if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
            raise ProbeError(f"heads: {head_name(layer, head)} does not exist (layers "
                             f"0..{loaded.n_layers - 1}, heads 0..{loaded.n_heads - 1})")
        out.append((layer, head))
    if not out:
        raise ProbeError("heads is empty: name at least one head (\"L0H1\"), or leave it out")
    return sorted(set(out))


def structure_view(loaded, structure: Structure, sequence: str, true_map: np.ndarray | None,
                   result: ContactResult, heads=None, selected=None, budget: int = MAP_BUDGET,
                   title: str = "", theme: str = "light", top: int = TOP_PAIRS,
                   min_weight: float = MIN_WEIGHT, rule: str = "max") -> StructureView:
    """The 3D view from a contact analysis already made (the report's; :func:`show_structure` makes one)."""
    check_view_options(top, min_weight, budget, rule, theme)
    order, notes = ranked_heads(result, loaded.heads)
    if heads is not None:
        chosen = _heads_arg(heads, loaded)
    else:
        each = encode.bytes_per_head(len(sequence))
        fits = max(1, budget // each)
        chosen = sorted(order if len(order) <= fits else order[:fits])
    first = None
    if selected is not None:
        first = (parse_head_name(selected) if isinstance(selected, str)
                 else (int(selected[0]), int(selected[1])))
    if first is not None and first not in chosen:
        raise ProbeError(f"selected={head_name(*first)} is not among the heads shown; add it to heads=")
    if first is None:
        first = next(key for key in order if key in chosen) if any(k in chosen for k in order) else chosen[0]
    alpha = residue_attention(loaded, sequence, chosen)
    shown = display_name(loaded.name)  # a local folder by its name: no path of this machine in the view
    return StructureView(model=shown, structure=structure, sequence=sequence, alpha=alpha,
                         token_offset=loaded.residue_offset, true_map=true_map, contacts=result.contacts,
                         selected=first, title=title or f"{shown} · attention on {structure.name}",
                         theme=theme, top=top, min_weight=min_weight, rule=rule, head_notes=notes)


def show_structure(loaded, structure, chain: str | None = None, sequence: str | None = None, heads=None,
                   selected=None, theme: str = "light", top: int = TOP_PAIRS, min_weight: float = MIN_WEIGHT,
                   rule: str = "max", budget: int = MAP_BUDGET, title: str = "") -> StructureView:
    """A protein model's attention on the 3D structure, for a notebook cell (offline; 3Dmol.js inlined).

    Parameters
    ----------
    loaded : probe.models.LoadedModel or str
        A protein language model (or what :func:`probe.load` takes).
    structure : str, Path, bytes or probe.proteins.structure.Structure
        A PDB / mmCIF file (path or bytes), or a chain already read.
    chain : str, optional
        The chain (default: the first protein chain; the view names the others).
    sequence : str, optional
        The model's input (default: the chain's own sequence); aligned to the chain, positions the chain
        lacks are not drawn.
    heads : sequence of str or (int, int), optional
        The heads shown (default: every head when their residue maps fit `budget`, else the best by
        long-range P@L that fit).
    selected : str or (int, int), optional
        The head drawn first (default: the best by long-range P@L).
    theme : {"light", "dark"}, default "light"
        The first theme (the view has a switch).
    top : int, default 50
        Most attention edges drawn per head.
    min_weight : float, default 0.1
        Edges whose weight (see `rule`) is below this are not drawn (provis' ``min_attn``).
    rule : {"max", "mean"}, default "max"
        An edge's weight from the two directions: the larger (provis) or the mean (hexviz).
    budget : int, default 2 MiB
        Bytes of the heads' residue maps together (L² + 4 each).
    title : str, optional
        The view's title.

    Returns
    -------
    StructureView
        Draws itself under the cell; ``.save("x.html")``; ``.payload()`` is the data.

    Examples
    --------
    >>> loaded = probe.load("zoo:esm-random")  # random weights: the picture means nothing
    >>> probe.show_structure(loaded, "tests/data/pdb1ubi.pdb")  # the 3D view, under the cell
    <probe structure view: zoo:esm-random on pdb1ubi chain A, 76 residues, 8 heads>
    """
    check_view_options(top, min_weight, budget, rule, theme)  # before the model loads
    if isinstance(loaded, (str, Path)):
        loaded = load(str(loaded))
    require_protein(loaded, "the 3D structure view")
    if isinstance(structure, Structure):
        if chain is not None and chain != structure.chain:
            raise ProbeError(f"chain={chain!r} but the structure given is chain {structure.chain}; read the "
                             "file again with that chain")
        parsed = structure
    else:
        parsed = read_structure(structure, chain=chain)
    if parsed.atoms is None:
        raise ProbeError("the structure has no atoms to draw: pass the file, or read it with read_structure")
    sequence, true_map = aligned_structure(parsed, sequence, protein_alphabet(loaded))  # [L L] int8
    result = predict_contacts(loaded, sequence, true_map, per_head=True)
    return structure_view(loaded, parsed, result.sequence, true_map, result, heads, selected, budget,
                          title, theme, top, min_weight, rule)


__all__ = ["MAP_BUDGET", "StructureView", "aligned_structure", "check_view_options", "ranked_heads",
           "residue_attention", "show_structure", "structure_fragment", "structure_view"]
