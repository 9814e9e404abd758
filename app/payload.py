"""What the browser receives to read attention without asking the server again: one layer's α of every head,
quantised to uint16 (α · 65535, rounded: absolute error ≤ 7.7e-6) and base64-encoded, with the tokens to show.

`assets/explorer.js` decodes it once per layer; the heatmap, the token view, the overlay's share and head
steps within the layer are then drawn in the browser. Downloads stay full precision (float32, from the
server).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

from probe.naming import display_name
from probe.views.view import display_tokens  # noqa: F401 - re-exported: the explorer's payload uses it

SCALE = 65535  # uint16 quantisation of α ∈ [0, 1]


def encode_alpha(alpha: np.ndarray) -> str:
    """[head query key] float α in [0, 1] -> base64 of little-endian uint16 round(α · 65535), row-major."""
    quantised = np.rint(np.clip(np.nan_to_num(alpha, nan=0.0), 0.0, 1.0) * SCALE).astype("<u2")
    return base64.b64encode(quantised.tobytes()).decode("ascii")


def decode_alpha(data: str, heads: int, n: int) -> np.ndarray:
    """The inverse of encode_alpha: [head query key] float32 (as the browser decodes it)."""
    raw = np.frombuffer(base64.b64decode(data), dtype="<u2")
    return (raw.astype(np.float32) / SCALE).reshape(heads, n, n)




def layer_payload(model: str, token_ids: Sequence[int], tokens: Sequence[str], layer: int, alpha: np.ndarray,
                  causal: bool, key: str, name: str | None = None, query_tokens: Sequence[str] | None = None,
                  axes: tuple[str, str] | None = None) -> dict:
    """The store the explorer reads in the browser for one (input, layer): alpha [head query key].

    `name` is the layer's name in titles ("L3", "enc.L1", "cross.L0"); `tokens` are the keys' tokens, and
    `query_tokens` the queries' where they differ (cross-attention: decoder queries, encoder keys); `axes` the
    (query, key) axis titles ("decoder query", "encoder key")."""
    heads, n, _ = alpha.shape
    payload = {"model": model, "key": key, "layer": int(layer), "heads": int(heads), "n": int(n),
               "tokens": list(tokens), "causal": bool(causal), "alpha": encode_alpha(alpha), "scale": SCALE,
               "ids_count": len(token_ids), "name": name or f"L{int(layer)}",
               "model_name": display_name(model)}  # in the heatmap's title, so an exported figure names it
    if query_tokens is not None:
        payload["query_tokens"] = list(query_tokens)
    if axes is not None:
        payload["axes"] = {"query": axes[0], "key": axes[1]}
    return payload
