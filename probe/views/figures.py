"""Figures for papers from Python: SVG (token labels as text, the cells as an embedded PNG), PNG through
plotly + kaleido, and the report's static pictures (atlas per head type, contact maps). The same layout as
views.js draws."""

from __future__ import annotations

import base64
import html
import struct
import zlib

import numpy as np

from probe.errors import ProbeError
from probe.naming import head_name
from probe.runs.atomic import write_atomically
from probe.runs.export import kaleido_png
from probe.views.reading import format_q, is_grey, is_labelled, label_reason, number, twins_ran, twins_text

BLUES = np.array([[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
                  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]], dtype=np.float64)
VIRIDIS = np.array([[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
                    [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]], dtype=np.float64)
NOT_SIGNIFICANT = "#d9d9d9"
NO_DATA = "#f7f7f7"
MARGIN = {"l": 112, "b": 96, "t": 8, "r": 12}  # as views.js View.layout
MAP_WIDTH = 640


def colourize(matrix: np.ndarray, vmax: float = 1.0, scale: np.ndarray = BLUES) -> np.ndarray:
    """[row col] values -> [row col rgb] uint8 on `scale` over [0, vmax] (NaN: light grey)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    scaled = np.clip(np.nan_to_num(matrix, nan=0.0) / max(vmax, 1e-12), 0.0, 1.0) * (len(scale) - 1)
    low = np.floor(scaled).astype(int).clip(0, len(scale) - 2)
    frac = (scaled - low)[..., None]
    rgb = scale[low] * (1 - frac) + scale[low + 1] * frac  # [row col rgb]
    rgb[np.isnan(matrix)] = (230, 230, 230)
    return rgb.round().astype(np.uint8)


def png_bytes(rgb: np.ndarray) -> bytes:
    """[row col 3] uint8 -> PNG file bytes (8-bit RGB, no imaging library)."""
    height, width = rgb.shape[:2]
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))  # filter type 0 per scanline

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I",
                                                                        zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b""))


def png_uri(matrix: np.ndarray, vmax: float = 1.0, scale: np.ndarray = BLUES) -> str:
    """[row col] values -> a ``data:image/png`` URI of :func:`colourize`'s colours."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(colourize(matrix, vmax, scale))).decode()


def _image(uri: str, x: float, y: float, width: float, height: float) -> str:
    return (f'<image x="{x}" y="{y}" width="{width}" height="{height}" preserveAspectRatio="none" '
            f'style="image-rendering:pixelated" href="{uri}"/>')


def axis_labels(tokens, factor: int) -> list[str]:
    """"3·the" per token, "8–11·went" per pooled block (as views.js `labels`)."""
    out = []
    for first in range(0, len(tokens), factor):
        last = min(first + factor, len(tokens)) - 1
        token = str(tokens[first]).strip() or str(tokens[first])
        out.append(f"{first}·{token}" if factor == 1 else f"{first}–{last}·{token}")
    return out


def _short(text: str, size: int = 14) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def map_svg(view, head=None) -> str:
    """One head's α with its token labels as SVG: the cells an embedded PNG, the labels text."""
    layer, index = view.head(head)
    alpha, factor = view.head_map((layer, index))
    side = alpha.shape[0]
    plot = MAP_WIDTH - MARGIN["l"] - MARGIN["r"]
    width, height, cell = plot + MARGIN["l"] + MARGIN["r"], plot + MARGIN["t"] + MARGIN["b"], plot / side
    labels = axis_labels(view.tokens, factor)[:side]
    every = max(1, -(-side // 40))
    size = max(8.0, min(12.0, cell * every * 0.9))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="monospace">',
             f"<title>{html.escape(head_name(layer, index))} · {html.escape(view.model)}</title>",
             '<rect width="100%" height="100%" fill="white"/>',
             _image(png_uri(alpha), MARGIN["l"], MARGIN["t"], plot, plot)]
    for i in range(0, side, every):
        y, x, text = (MARGIN["t"] + (i + 0.5) * cell, MARGIN["l"] + (i + 0.5) * cell,
                      html.escape(_short(labels[i])))
        parts.append(f'<text x="{MARGIN["l"] - 4}" y="{y:.2f}" font-size="{size:.1f}" text-anchor="end" '
                     f'dominant-baseline="middle">{text}</text>')
        parts.append(f'<text transform="translate({x:.2f},{MARGIN["t"] + plot + 4}) rotate(-60)" '
                     f'font-size="{size:.1f}" text-anchor="end" dominant-baseline="middle">{text}</text>')
    parts.append(f'<text x="{MARGIN["l"] + plot / 2}" y="{height - 6}" text-anchor="middle" '
                 'font-size="12">key</text>')
    parts.append(f'<text transform="translate(12,{MARGIN["t"] + plot / 2}) rotate(-90)" text-anchor="middle" '
                 'font-size="12">query</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"


def grid_svg(view, cell: int = 40, gap: int = 4) -> str:
    """The grid of every head as SVG: one embedded PNG per head, L/H labels as text, a <title> per head."""
    layers, heads = view.shape
    left, top = 34, 20
    width, height = left + heads * (cell + gap), top + layers * (cell + gap)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             '<rect width="100%" height="100%" fill="white"/>']
    parts += [f'<text x="{left + h * (cell + gap) + cell / 2}" y="12" text-anchor="middle">H{h}</text>'
              for h in range(heads)]
    for layer in range(layers):
        parts.append(f'<text x="14" y="{top + layer * (cell + gap) + cell / 2 + 4}" '
                     f'text-anchor="middle">L{layer}'
                     "</text>")
        for head in range(heads):
            parts.append(f"<g><title>{head_name(layer, head)}</title>" +
                         _image(png_uri(view.thumbnails[layer, head]), left + head * (cell + gap),
                                top + layer * (cell + gap), cell, cell) + "</g>")
    return "\n".join(parts + ["</svg>"]) + "\n"


def map_figure(view, head=None):
    """One head's map as a plotly figure (for PNG through kaleido)."""
    import plotly.graph_objects as go  # plotly only for a PNG through kaleido (a second of import)

    layer, index = view.head(head)
    alpha, factor = view.head_map((layer, index))
    labels = axis_labels(view.tokens, factor)[: alpha.shape[0]]
    figure = go.Figure(go.Heatmap(z=alpha, x=labels, y=labels, colorscale="Blues", zmin=0.0, zmax=1.0,
                                  colorbar={"title": {"text": "α"}}))
    figure.update_layout(template="plotly_white", title={"text": f"{head_name(layer, index)} · {view.model}"},
                         width=720, height=700, xaxis={"title": {"text": "key"}, "type": "category",
                                                       "tickangle": -60, "nticks": 40},
                         yaxis={"title": {"text": "query"}, "type": "category", "autorange": "reversed",
                                "nticks": 40})
    return figure


def grid_figure(view):
    """The grid of every head as one plotly heatmap (thumbnails tiled, a blank line between heads)."""
    import plotly.graph_objects as go  # plotly only for a PNG through kaleido

    layers, heads, side, _ = view.thumbnails.shape
    tiled = np.full((layers * (side + 1), heads * (side + 1)), np.nan)  # [row col]
    for layer in range(layers):
        for head in range(heads):
            tiled[layer * (side + 1):layer * (side + 1) + side,
                  head * (side + 1):head * (side + 1) + side] = view.thumbnails[layer, head]
    figure = go.Figure(go.Heatmap(z=tiled, colorscale="Blues", zmin=0.0, zmax=1.0, hoverongaps=False,
                                  colorbar={"title": {"text": "α"}}))
    centres = [index * (side + 1) + side / 2 for index in range(max(layers, heads))]
    figure.update_layout(template="plotly_white", title={"text": f"every head · {view.model}"},
                         width=max(400, 40 * heads + 160), height=max(300, 40 * layers + 120),
                         xaxis={"tickvals": centres[:heads], "ticktext": [f"H{h}" for h in range(heads)],
                                "showgrid": False},
                         yaxis={"tickvals": centres[:layers],
                                "ticktext": [f"L{layer}" for layer in range(layers)], "autorange": "reversed",
                                "showgrid": False})
    return figure


def write_png(figure, path) -> None:
    """A plotly figure as PNG through kaleido; without kaleido one line naming the fix."""
    try:
        import kaleido  # noqa: F401 - optional: PNG from Python needs it (the view's PNG button does not)
    except ImportError:
        raise ProbeError(f"{path}: a PNG from Python needs kaleido: pip install kaleido (or save .svg, or "
                         "use the view's PNG button)") from None
    try:
        write_atomically(path, lambda tmp: kaleido_png(figure, tmp))
    except ProbeError:
        raise
    except Exception as error:  # noqa: BLE001 - kaleido reports a missing browser in several ways
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise ProbeError(f"{path}: kaleido could not render the PNG ({first}); save .svg instead, or install "
                         "Chrome/Chromium for kaleido") from None


def atlas_svg(table, layers: int, heads: int, head_type: str, cell: int = 22) -> str:
    """One head type's atlas: layer × head cells coloured by score on the fixed 0–1 Viridis scale, grey when
    not labelled, near-white without a score; a <title> per cell (score, interval, chance, the untrained
    twins' bar or "not run", q, label or why not)."""
    left, top = 30, 18
    width, height = left + heads * cell + 4, top + layers * cell + 4
    colours = [[NO_DATA] * heads for _ in range(layers)]
    titles = [[f"{head_name(layer, head)}: no score" for head in range(heads)] for layer in range(layers)]
    marks = []
    rows = table[table["head_type"].astype(str) == head_type]
    ran = twins_ran(table)
    for row in rows.itertuples(index=False):
        layer, head = int(row.layer), int(row.head)
        if not (0 <= layer < layers and 0 <= head < heads):
            continue
        score = number(row, "score")
        if score is not None:
            rgb = colourize(np.array([[score]]), 1.0, VIRIDIS)[0, 0]
            colours[layer][head] = ("#" + "".join(f"{int(v):02x}" for v in rgb)) if not is_grey(row) \
                else NOT_SIGNIFICANT
        low, high = number(row, "ci_low"), number(row, "ci_high")
        labelled = is_labelled(getattr(row, "label", None))
        chance = number(row, "chance")
        titles[layer][head] = (f"{head_name(layer, head)} {head_type} score "
                               + ("unknown" if score is None else f"{score:.3f}")
                               + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else "")
                               + (f" · chance {chance:.3f}" if chance is not None else "")
                               + f" · twins p99 {twins_text(row, ran)}"
                               + f" · q {format_q(number(row, 'q_value'))}"
                               + (" · ✓ labelled" if labelled else f" · not labelled: {label_reason(row)}"))
        if labelled:
            marks.append((layer, head, "#222" if score is not None and score > 0.6 else "white"))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="9">']
    parts += [f'<text x="{left + h * cell + cell / 2}" y="12" text-anchor="middle">{h}</text>'
              for h in range(heads)]
    for layer in range(layers):
        parts.append(f'<text x="{left - 4}" y="{top + layer * cell + cell / 2 + 3}" '
                     f'text-anchor="end">L{layer}'
                     "</text>")
        for head in range(heads):
            parts.append(f'<rect x="{left + head * cell}" y="{top + layer * cell}" width="{cell - 2}" '
                         f'height="{cell - 2}" fill="{colours[layer][head]}"><title>'
                         f"{html.escape(titles[layer][head])}</title></rect>")
    for layer, head, ink in marks:  # dark ink on Viridis' light end
        parts.append(f'<text x="{left + head * cell + cell / 2 - 1}" y="{top + layer * cell + cell / 2 + 3}" '
                     f'text-anchor="middle" fill="{ink}" font-size="11" pointer-events="none">✓</text>')
    return "\n".join(parts + ["</svg>"])


MAP_CELLS = 256  # residue maps in the report: max-pooled to at most this many cells a side (PNG ≤ 256²)


def residue_map_svg(upper: np.ndarray | None, true: np.ndarray | None, title: str, upper_name: str,
                    size: int = 360, vmax: float | None = None) -> str:
    """A residue map as SVG: `upper` in the upper triangle (Blues over [0, vmax]; default: its largest
    value), the true contacts (``true == 1``) in the lower triangle (dark grey), each max-pooled to at most
    :data:`MAP_CELLS` cells a side; its title says which triangle shows what ("↗", "↙").

    Parameters
    ----------
    upper : ndarray or None
        ``[residue residue]`` values (predicted contacts, a head's APC attention); None: the upper triangle is
        left empty and the title names only the true contacts.
    true : ndarray or None
        ``[residue residue]`` 1 contact, 0 not, -1 unknown (:func:`probe.proteins.structure.contact_map`).
    title, upper_name : str
        The figure's name and what the upper triangle shows ("predicted", "L3H7 APC attention").

    Examples
    --------
    >>> true = np.eye(8, k=3, dtype=np.int8) + np.eye(8, k=-3, dtype=np.int8)
    >>> svg = residue_map_svg(np.random.default_rng(0).random((8, 8)), true, "L0H1", "L0H1 APC attention")
    >>> svg.split("<title>")[1].split("</title>")[0]
    'L0H1 · L0H1 APC attention ↗ · true contacts ↙'
    """
    if upper is None and true is None:
        raise ProbeError("a residue map needs values for the upper triangle or true contacts")
    n = (upper if upper is not None else true).shape[0]
    factor = -(-n // MAP_CELLS)
    cells = -(-n // factor)
    pad = cells * factor - n

    def pooled(matrix: np.ndarray, fill: float) -> np.ndarray:  # [L L] -> [cells cells], max over blocks
        padded = np.pad(np.asarray(matrix, dtype=np.float64), ((0, pad), (0, pad)), constant_values=fill)
        return padded.reshape(cells, factor, cells, factor).max(axis=(1, 3))

    upper_cells = np.triu(np.ones((cells, cells), dtype=bool), k=1)
    values = np.zeros((cells, cells)) if upper is None else np.nan_to_num(pooled(upper, -np.inf), nan=0.0)
    top = float(np.nanmax(values[upper_cells])) if upper is not None and cells > 1 else 1.0
    rgb = colourize(np.where(upper_cells, values, 0.0), vmax if vmax is not None else max(top, 1e-12))
    if true is not None:
        rgb[upper_cells.T & (pooled(true, -1.0) == 1)] = (68, 68, 68)  # [cells cells rgb]
    shown = [f"{upper_name} ↗"] if upper is not None else []
    shown += ["true contacts ↙"] if true is not None else []
    name = f"{title} · {' · '.join(shown)}" + (f" (max-pooled {factor}×{factor})" if factor > 1 else "")
    uri = "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode()
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 40}" height="{size + 40}" '
            f'font-family="sans-serif" font-size="11" class="residue-map"><title>{html.escape(name)}</title>'
            + _image(uri, 30, 6, size, size)
            + f'<text x="{30 + size / 2}" y="{size + 30}" text-anchor="middle">residue · '
              f"{html.escape(' · '.join(shown))}</text></svg>")


def contact_svg(predicted: np.ndarray | None, true: np.ndarray | None, title: str, size: int = 360) -> str:
    """Predicted contacts (upper triangle, Blues over 0–1) beside the true ones (lower triangle, dark grey)
    as SVG (:func:`residue_map_svg`); without predicted contacts only the true ones, titled so."""
    return residue_map_svg(predicted, true, title, "predicted", size, vmax=1.0)


__all__ = ["atlas_svg", "axis_labels", "colourize", "contact_svg", "grid_figure", "grid_svg", "map_figure",
           "map_svg", "png_bytes", "png_uri", "residue_map_svg", "write_png"]
