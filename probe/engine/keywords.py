"""What the engine's attention function understands: the allow-list of keywords a model may pass it.

transformers calls an attention function as ``fn(module, query, key, value, attention_mask, **kwargs)``, and
each model adds its own keywords: ``s_aux`` (gpt-oss's attention sinks), ``softcap`` (Gemma 2),
``position_bias`` (T5), ``sliding_window`` … A function that ignores one it does not implement computes
something else than the model — silently (ignoring ``s_aux`` changes gpt-oss's α by up to 1.0). So the engine
reads every keyword against one table, :data:`KEYWORDS`, and refuses any other in one line that names it and
the fallback (``--engine eager``).

Three kinds of entries:

* ``implemented`` — the engine computes what the keyword asks (the value may be anything the model passes);
* ``harmless`` — information the function does not need, whatever its value (``position_ids``: rotary
  positions are already in q and k, and the mask was built from them);
* ``none_only`` — a feature the engine does not implement, accepted only when the model passes it as None
  (e.g. ``cu_seq_lens_q`` of packed flash-attention batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from probe.errors import ProbeError

# The fallback named in every refusal: eager attention with output_attentions, one layer at a time.
FALLBACK = "--engine eager (or probe.engine's eager fallback)"

# keyword -> (kind, what the engine does with it). The keyword table of docs/engine.md is written from this
# one (keyword_table(), inserted by the docs build's hook docs/hooks/engine_keywords.py): one home per text.
KEYWORDS: dict[str, tuple[str, str]] = {
    "dropout": ("implemented",
                "applied by the fused kernel to the output; α handed to sinks is before dropout; "
                "refused with soft-capping or sinks while training"),
    "scaling": ("implemented", "the score scale (default head_dim^-1/2)"),
    "is_causal": ("implemented", "causal when no mask was built and more than one query, as sdpa decides"),
    "position_bias": ("implemented", "additive score bias (T5), added to the mask"),
    "s_aux": ("implemented", "attention sinks (gpt-oss): one logit per head in every row's softmax"),
    "softcap": ("implemented", "c·tanh(s / c) before mask and softmax (Gemma 2); blockwise, no fused kernel"),
    "sliding_window": ("implemented",
                       "carried by the mask the model builds per layer (refused if no mask came "
                       "while the keys outnumber the window)"),
    "position_ids": ("harmless", "rotary positions are applied to q and k before the call"),
    "cache_position": ("harmless", "positions of a KV-cache step: already in the mask and the key length"),
    "use_cache": ("harmless", "the cache is updated before the call"),
    "past_key_values": ("harmless", "the cache is updated before the call"),
    "output_attentions": ("harmless", "no weights are returned (as sdpa); capture α with a sink"),
    "output_hidden_states": ("harmless", "not an attention input"),
    "output_router_logits": ("harmless", "not an attention input"),
    "return_dict": ("harmless", "not an attention input"),
    "num_items_in_batch": ("harmless", "a loss normaliser"),
    "encoder_hidden_states": ("harmless", "cross-attention keys and values already come from it"),
    "deterministic": ("harmless", "a flash-attention determinism flag"),
    "cu_seq_lens_q": ("none_only", "packed (varlen) batches"),
    "cu_seq_lens_k": ("none_only", "packed (varlen) batches"),
    "max_length_q": ("none_only", "packed (varlen) batches"),
    "max_length_k": ("none_only", "packed (varlen) batches"),
    "seq_idx": ("none_only", "packed (varlen) batches"),
    "indices": ("none_only", "sparse attention over selected keys (DeepSeek-V3.2 DSA)"),
    "block_indices": ("none_only", "block-sparse attention"),
    "sinks": ("none_only", "sink tokens passed under another name"),
    "head_mask": ("none_only", "per-head masks of older models (use capture(..., ablate=...))"),
}


@dataclass(frozen=True)
class AttentionFeatures:
    """The implemented keywords of one attention call, read once: everything beyond q, k, v and the mask.

    Attributes
    ----------
    position_bias : torch.Tensor or None, shape=(batch or 1, head, query, key), float
        An additive score bias (T5's relative positions), added to the mask.
    sinks : torch.Tensor or None, shape=(head,), float32
        Attention-sink logits (gpt-oss's ``s_aux``): one extra logit per head in every row's softmax.
    softcap : float or None
        c of Gemma 2's soft-capping c·tanh(s / c), applied to the scores before mask and softmax.
    sliding_window : int or None
        Keys a query may see; carried by the mask the model builds.

    Examples
    --------
    >>> features = read_keywords({"softcap": 50.0, "sliding_window": 4096, "dropout": 0.0})
    >>> features.softcap, features.sliding_window, features.plain  # not plain: the blockwise path
    (50.0, 4096, False)
    >>> read_keywords({"scaling": 0.125, "position_ids": None}).plain  # what sdpa itself computes
    True
    """

    position_bias: torch.Tensor | None = None  # [batch|1 head query key] additive
    sinks: torch.Tensor | None = None  # [head] sink logits (s_aux)
    softcap: float | None = None  # c of c·tanh(s / c)
    sliding_window: int | None = None  # keys a query may see, carried by the mask

    @property
    def plain(self) -> bool:
        """Nothing beyond what sdpa computes: no sinks, no soft-capping."""
        return self.sinks is None and self.softcap is None


def read_keywords(kwargs: dict) -> AttentionFeatures:
    """The features an attention call asks for, or a one-line :class:`~probe.errors.ProbeError` for a keyword
    the engine does not implement (not in :data:`KEYWORDS`, or a ``none_only`` one given a value).

    Parameters
    ----------
    kwargs : dict of str to object
        The keyword arguments transformers passes the attention function (beyond q, k, v and the mask).

    Returns
    -------
    AttentionFeatures
        The implemented features the call asks for.

    Raises
    ------
    ProbeError
        A keyword the engine does not implement: the model then runs with the eager fallback.

    Examples
    --------
    >>> read_keywords({"softcap": 50.0, "sliding_window": 4096, "dropout": 0.0})
    AttentionFeatures(position_bias=None, sinks=None, softcap=50.0, sliding_window=4096)
    >>> read_keywords({"alibi_slopes": torch.ones(4)})  # Bloom's ALiBi: not implemented, never ignored
    Traceback (most recent call last):
    probe.errors.ProbeError: the model passes attention keyword 'alibi_slopes', which the capture engine does
    not implement; run it with --engine eager (or probe.engine's eager fallback)
    """
    for name, value in kwargs.items():
        kind = KEYWORDS.get(name, (None, ""))[0]
        if kind is None:
            raise ProbeError(f"the model passes attention keyword {name!r}, which the capture engine does "
                             f"not implement; run it with {FALLBACK}")
        if kind == "none_only" and value is not None:
            raise ProbeError(f"the model passes attention keyword {name!r} ({KEYWORDS[name][1]}), which the "
                             f"capture engine does not implement; run it with {FALLBACK}")
    softcap = kwargs.get("softcap")
    sinks = kwargs.get("s_aux")
    window = kwargs.get("sliding_window")
    return AttentionFeatures(
        position_bias=kwargs.get("position_bias"),
        sinks=None if sinks is None else sinks.detach().float().reshape(-1),
        softcap=None if softcap is None else float(softcap),
        sliding_window=None if window is None else int(window),
    )


ESCAPED_BAR = "\\|"  # a | inside a Markdown table cell


def keyword_table() -> str:
    """The keyword table of the engine page (docs/engine.md), as Markdown: one row per :data:`KEYWORDS` entry,
    in its order, with its kind and what the engine does with it. The docs build inserts it (the hook
    ``docs/hooks/engine_keywords.py``), so a keyword's text is written once, here.

    Returns
    -------
    str
        The header, the rule and one ``| `name` | kind | text |`` row per keyword, joined by newlines.

    Examples
    --------
    >>> lines = keyword_table().splitlines()
    >>> lines[:2]
    ['| keyword | kind | what the engine does with it |', '|---|---|---|']
    >>> lines[3]
    '| `scaling` | implemented | the score scale (default head_dim^-1/2) |'
    >>> len(lines) == 2 + len(KEYWORDS)
    True
    """
    rows = [f"| `{name}` | {kind} | {text.replace('|', ESCAPED_BAR)} |"
            for name, (kind, text) in KEYWORDS.items()]
    return "\n".join(["| keyword | kind | what the engine does with it |", "|---|---|---|", *rows])
