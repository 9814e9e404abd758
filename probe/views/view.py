"""`probe.show`: the grid of every head, one head's α with the token view, keys to step heads and layers,
drawn under a notebook cell by the package's own views.js (inlined: works offline), and saved as SVG, PNG or
HTML.

The Python call computes (one forward pass, every head max-pooled as it streams by), the browser renders: α
travels as uint8 maps in base64 (:mod:`probe.views.encode`), within a byte budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from probe.errors import ProbeError
from probe.models import ModelKind, load, tokenize_protein, tokenize_text
from probe.naming import display_name, head_name, parse_head_name
from probe.runs.atomic import write_atomically
from probe.views import encode, figures
from probe.views.bundle import inline_script, mounting_html
from probe.views.html_view import HtmlView
from probe.views.pooling import pooled_attention
from probe.views.reading import is_labelled
from probe.views.tables import as_table, badges, one_model

DEMO_PROTEIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"  # ubiquitin


@dataclass(frozen=True, eq=False)
class View(HtmlView):
    """What :func:`show` returns: a view that draws itself in a notebook (``_repr_html_``) and saves figures.

    Attributes
    ----------
    model : str
        The model's name.
    tokens : tuple of str
        The input's tokens as a reader sees them (N).
    causal : bool
        A causal model (query 0 sees only itself).
    thumbnails : numpy.ndarray, shape=(layer, head, t, t), float32
        Every head max-pooled to t ≤ 24 a side.
    maps : dict of (int, int) to numpy.ndarray, shape=(side, side), float32
        The heads with a full map, max-pooled by `factor` (side = ceil(N / factor)).
    factor : int
        Tokens per map cell (1: every token).
    badges : dict
        head type -> {"layer:head": [text, css]} from a labels table (empty without one).
    selected : tuple of (int, int)
        The head shown first.
    layer_names : tuple of str, optional
        An encoder–decoder's layer names by flat layer number ("enc.L0", …, "cross.L2"); None: plain "L3".

    Examples
    --------
    >>> from probe.heads.tables import load_table
    >>> labels = load_table(probe.zoo.labels_path("induction"))
    >>> view = show(loaded, "rada ruga buse rada ruga buse", labels=labels)  # zoo:induction
    >>> view.selected, view.factor, view.tokens  # the best labelled head first; one token per cell
    ((0, 1), 1, ('<bos>', 'rada', 'ruga', 'buse', 'rada', 'ruga', 'buse'))
    >>> alpha, per_cell = view.head_map("L1H0")
    >>> alpha[4].round(2)  # the second "rada" attends to the token after the first: an induction head
    array([0., 0., 1., 0., 0., 0., 0.], dtype=float32)
    """

    model: str
    tokens: tuple[str, ...]
    causal: bool
    thumbnails: np.ndarray  # [layer head t t]
    maps: dict[tuple[int, int], np.ndarray]  # (layer, head) -> [side side]
    factor: int
    badges: dict = field(default_factory=dict)
    selected: tuple[int, int] = (0, 0)
    title: str = ""
    layer_names: tuple[str, ...] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        return self.thumbnails.shape[0], self.thumbnails.shape[1]

    @property
    def side(self) -> int:
        """Cells a side of a full map."""
        return -(-len(self.tokens) // self.factor)

    def payload(self) -> dict:
        """The JSON the browser reads (views.js `mount`): typed arrays as base64."""
        layers, heads = self.shape
        index = sorted(self.maps)
        thumbs, thumb_tops = encode.quantise(
            self.thumbnails.reshape(layers * heads, *self.thumbnails.shape[2:]))
        data = {"version": 1, "model": self.model, "title": self.title or self.model,
                "tokens": list(self.tokens), "n": len(self.tokens), "causal": self.causal, "layers": layers,
                "heads": heads, "selected": list(self.selected),
                "thumbs": {"bins": int(self.thumbnails.shape[-1]), "data": encode.b64(thumbs),
                           "scale": encode.b64(thumb_tops)},
                "types": sorted(self.badges, key=lambda name: (-_labelled_count(self.badges[name]), name)),
                "badges": self.badges}
        if self.layer_names:  # views.js names an encoder–decoder's layers by them (core.layerName)
            data["layer_names"] = list(self.layer_names)
        if index:
            stacked = np.stack([self.maps[key] for key in index])  # [map side side]
            quantised, tops = encode.quantise(stacked)
            data["maps"] = {"bins": int(stacked.shape[-1]), "factor": self.factor,
                            "index": [list(key) for key in index], "data": encode.b64(quantised),
                            "scale": encode.b64(tops)}
        return data

    def html(self, element_id: str | None = None) -> str:
        """A self-contained HTML fragment: the style, the data, views.js and the call that mounts the view."""
        return fragment(self.payload(), element_id)

    def page_title(self) -> str:
        return f"probe view · {self.model}"

    def __repr__(self) -> str:
        layers, heads = self.shape
        return (f"<probe view: {self.model}, {len(self.tokens)} tokens, {layers}×{heads} heads, "
                f"{len(self.maps)} full maps of {self.side}² cells>")

    def head(self, name: str | tuple[int, int] | None = None) -> tuple[int, int]:
        """A head of the view, checked: "L1H2", (1, 2) or None (the selected head)."""
        if name is None:
            return self.selected
        layer, head = parse_head_name(name) if isinstance(name, str) else (int(name[0]), int(name[1]))
        layers, heads = self.shape
        if not (0 <= layer < layers and 0 <= head < heads):
            raise ProbeError(f"{head_name(layer, head)} is not a head of {self.model} (layers "
                             f"0..{layers - 1}, heads 0..{heads - 1})")
        return layer, head

    def head_map(self, name=None) -> tuple[np.ndarray, int]:
        """(α [side side], tokens per cell) of one head: its full map, else its thumbnail."""
        key = self.head(name)
        if key in self.maps:
            return self.maps[key], self.factor
        tile = self.thumbnails[key]
        return tile, -(-len(self.tokens) // tile.shape[0])

    def save(self, path: str | Path, which: str = "map", head=None) -> Path:
        """Write a figure for a paper, by the extension: .svg (vector labels), .png (kaleido), .html (the
        view).

        Parameters
        ----------
        path : str or Path
            FILE.svg, FILE.png or FILE.html.
        which : {"map", "grid"}, default "map"
            One head's map with its token labels, or the grid of every head (.svg and .png).
        head : str or (int, int), optional
            The head of the map ("L1H2"); default: the selected head.

        Returns
        -------
        Path
            The file written (atomically).
        """
        path = Path(path).expanduser()
        suffix = path.suffix.lower()
        if which not in ("map", "grid"):
            raise ProbeError(f"which={which!r}: save the 'map' of one head or the 'grid' of every head")
        if not path.parent.is_dir():
            raise ProbeError(f"{path}: the folder {path.parent} does not exist; create it first")
        if suffix == ".svg":
            text = figures.grid_svg(self) if which == "grid" else figures.map_svg(self, head)
            write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        elif suffix == ".html":
            self.save_page(path)
        elif suffix == ".png":
            figure = figures.grid_figure(self) if which == "grid" else figures.map_figure(self, head)
            figures.write_png(figure, path)
        else:
            raise ProbeError(f"{path}: save as .svg, .png or .html")
        return path


def _labelled_count(marks: dict) -> int:
    return sum(mark[1] == "labelled" for mark in marks.values())


def fragment(data: dict, element_id: str | None = None) -> str:
    """HTML that mounts the view of `data` where it is placed (a notebook output, a report section)."""
    return mounting_html("view", data, inline_script(), "window.probeViews.mountAll();", element_id)


def display_tokens(tokenizer, tokens: Sequence[str]) -> list[str]:
    """Tokens as a reader sees them: byte-level BPE's "Ġthe" as " the", "Ċ" as ⏎; tokens that decode to
    nothing keep their raw form (special tokens, unknown bytes). As the app's explorer."""
    shown = []
    for token in tokens:
        try:
            text = tokenizer.convert_tokens_to_string([token])
        except Exception:  # noqa: BLE001 - a tokenizer without a decoder: show the raw token
            text = token
        text = text.replace("\n", "⏎")
        shown.append(text if text.strip() else token)
    return shown


def input_ids_of(loaded, text_or_inputs):
    """[1 token] long input ids from a text, a list of ids, a tensor or a tokenizer's output (batch 1)."""
    value = text_or_inputs
    if isinstance(value, str):
        inputs = (tokenize_protein(loaded, value) if loaded.kind == ModelKind.PROTEIN_MLM
                  else tokenize_text(loaded, value))
        value = inputs["input_ids"]
    elif isinstance(value, dict) or hasattr(value, "keys"):
        if "input_ids" not in value:
            raise ProbeError("the inputs have no input_ids: pass a text, token ids or a tokenizer's output")
        value = value["input_ids"]
    ids = torch.as_tensor(value, dtype=torch.long).cpu()
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
        raise ProbeError(f"the view shows one input: pass one text or a [1, tokens] batch, not shape "
                         f"{tuple(ids.shape)}")
    loaded.check_length(int(ids.shape[1]))
    vocab = loaded.model.get_input_embeddings().num_embeddings
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ProbeError(f"token id {int(ids.max()) if int(ids.max()) >= vocab else int(ids.min())} is "
                         f"outside {loaded.name}'s vocabulary (0..{vocab - 1}); pass ids its tokenizer makes")
    return ids


def _heads_arg(heads, layers: int, n_heads: int) -> list[tuple[int, int]] | None:
    if heads is None or heads == "all":
        return None
    out = []
    for item in heads:
        layer, head = parse_head_name(item) if isinstance(item, str) else (int(item[0]), int(item[1]))
        if not (0 <= layer < layers and 0 <= head < n_heads):
            raise ProbeError(f"heads: {head_name(layer, head)} does not exist (layers 0..{layers - 1}, heads "
                             f"0..{n_heads - 1})")
        out.append((layer, head))
    if not out:
        raise ProbeError("heads is empty: name at least one head (\"L0H1\"), or leave it out for every head")
    return sorted(set(out))


def show(loaded, text_or_inputs, labels=None, heads=None, budget: int = encode.DEFAULT_BUDGET,
         max_side: int | None = None, selected=None, title: str = "") -> View:
    """The interactive view of every head on one input, for a notebook cell (BertViz-like, offline).

    Parameters
    ----------
    loaded : probe.models.LoadedModel or str
        A loaded model, or what :func:`probe.load` takes (hub id, directory, ``zoo:NAME``).
    text_or_inputs : str or sequence of int or dict
        A text (a protein sequence for protein models), token ids, or a tokenizer's output (batch 1).
    labels : pandas.DataFrame or str, optional
        A labels table (or its file): the grid's badges (score, ✓ labelled, grey not labelled); another
        model's table is refused (matched by model name or revision).
    heads : sequence of str or (int, int), optional
        The heads with a full map (default: every head, within `budget`).
    budget : int, default 4 MiB
        Bytes of the full maps together; each head's map costs side² + 4 bytes (uint8), side = ceil(N /
        factor) with the smallest factor that fits (1 at 128 tokens × 144 heads; 7 at 1,024 tokens × 144
        heads).
    max_side : int, optional
        Most cells a side of a map (default 1,024); at least 1.
    selected : str or (int, int), optional
        The head shown first (default: the best labelled head, else the first of `heads`); a head the model
        lacks is refused.
    title : str, optional
        The view's title (default: the model's name).

    Returns
    -------
    View
        Draws itself under the cell (``_repr_html_``); ``.save("x.svg" | "x.png" | "x.html")``.

    Examples
    --------
    >>> loaded = probe.load("zoo:induction")
    >>> probe.show(loaded, "rada ruga buse make rada ruga buse make")  # in a notebook: drawn under the cell
    <probe view: zoo:induction, 9 tokens, 2×4 heads, 8 full maps of 9² cells>
    """
    if isinstance(loaded, (str, Path)):
        loaded = load(str(loaded))
    if budget < 1:
        raise ProbeError(f"budget={budget}: give the bytes the maps may take, e.g. 4 * 2**20")
    if max_side is not None and max_side < 1:
        raise ProbeError(f"max_side={max_side}: give the longest side of a map in cells, e.g. 512 (or None)")
    ids = input_ids_of(loaded, text_or_inputs)  # [1 token]
    chosen = _heads_arg(heads, loaded.n_layers, loaded.n_heads)
    n_maps = len(chosen) if chosen is not None else loaded.n_layers * loaded.n_heads
    factor = encode.pooling_factor(ids.shape[1], n_maps, budget, max_side)
    maps, thumbs = pooled_attention(loaded, ids, factor, chosen, encode.THUMB_BINS)
    table = one_model(as_table(labels), loaded) if labels is not None else None
    tokens = display_tokens(loaded.tokenizer, loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist()))
    first = _first_head(table, maps, selected, loaded)
    return View(model=display_name(loaded.name), tokens=tuple(tokens),
                causal=loaded.kind == ModelKind.CAUSAL_LM, thumbnails=thumbs, maps=maps, factor=factor,
                badges=badges(table), selected=first, title=title, layer_names=_layer_names(loaded))


def _layer_names(loaded) -> tuple[str, ...] | None:
    """"enc.L0", …, "cross.L2" by flat layer number for an encoder–decoder; None for a single-stack model."""
    plan = loaded.plan
    if plan is None or not plan.is_multi_stack:
        return None
    return tuple(f"{stack}.L{local}" for stack, local in map(plan.locate, range(loaded.n_layers)))


def _first_head(table, maps, selected, loaded) -> tuple[int, int]:
    if selected is not None:
        layer, head = parse_head_name(selected) if isinstance(selected, str) else (int(selected[0]),
                                                                                   int(selected[1]))
        if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
            raise ProbeError(f"selected={selected!r}: {loaded.name} has layers 0..{loaded.n_layers - 1} and "
                             f"heads 0..{loaded.n_heads - 1}")
        return layer, head
    if table is not None and not table.empty and "label" in table.columns:
        best = table[[is_labelled(v) for v in table["label"]]].sort_values("score", ascending=False)
        for row in best.itertuples(index=False):
            if (int(row.layer), int(row.head)) in maps:
                return int(row.layer), int(row.head)
    return min(maps) if maps else (0, 0)


__all__ = ["View", "display_tokens", "fragment", "input_ids_of", "show"]
