"""Server-side thumbnails of attention matrices: a [row col] array in [0, 1] -> a small PNG data URI.

Pure numpy + zlib (no imaging library): the grid panel sends one ~1 KB image per head instead of a plotly
figure.
"""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np

from probe.views.figures import colourize  # the view layer's Blues colouring, one for the grid and the views
from probe.views.figures import png_bytes as views_png  # one PNG encoder: the view layer's


def png_bytes(rgb: np.ndarray, scale: int = 1) -> bytes:
    """[row col 3] uint8 -> PNG file bytes (8-bit RGB), each pixel repeated `scale` times in both
    directions."""
    if scale > 1:
        rgb = rgb.repeat(scale, axis=0).repeat(scale, axis=1)
    return views_png(rgb)


def thumbnail_uri(matrix: np.ndarray, vmax: float = 1.0, scale: int = 1) -> str:
    """A data: URI of the matrix as a PNG (Blues over [0, vmax])."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(colourize(matrix, vmax), scale)).decode()


def decode_png(data: bytes) -> np.ndarray:
    """The inverse of png_bytes for its own output (filter 0, RGB): [row col 3] uint8 (used by tests)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, width, height = 8, b"", 0, 0
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind, body = data[position + 4:position + 8], data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + 3 * width)
    return raw[:, 1:].reshape(height, width, 3)
