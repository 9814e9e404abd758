"""Named intervention sites of a model, read from its anatomy (:mod:`probe.anatomy`): where each one sits.

A site is a tensor of the running forward that :func:`probe.engine.interventions.intervene` can watch (save,
hand to a callback, keep its gradient) or edit. Per layer ``L`` (the index in the model's layer list):

========================  ==============================  ====================================================
site                      shape                           definition
========================  ==============================  ====================================================
``L{L}.resid_pre``        [batch query d_model]           the block's input (the residual stream before it)
``L{L}.attn_in``          [batch query d_model]           what feeds attention only: the input of the
                                                          pre-attention norm (pre-norm), the self-attention's
                                                          input (post-norm, BERT)
``L{L}.q_in``             [batch query head d_model]      ``attn_in`` as each query head reads it: head h's
                                                          query: ``proj(norm(q_in[:, :, h]))``, its columns
``L{L}.k_in`` / ``v_in``  [batch query kv_head d_model]   the same for each key / value head (GQA: kv heads)
``L{L}.q``                [batch query head d_head]       the query projection's output, per head (before
                                                          rotary embeddings and any q/k norm)
``L{L}.k`` / ``L{L}.v``   [batch query kv_head d_head]    the key / value projection's output, per kv head
``L{L}.head_out``         [batch query head d_v]          each head's attention output: the output
                                                          projection's input, per head
``L{L}.attn_out``         [batch query d_model]           the output projection's output (bias included)
``L{L}.mlp_in``           [batch query d_model]           what feeds the MLP only: the pre-MLP norm's input
                                                          (pre-norm), the MLP's input (post-norm, BERT)
``L{L}.mlp_out``          [batch query d_model]           the MLP's output (BERT: ``output.dense``'s, before
                                                          its dropout and LayerNorm)
``L{L}.resid_post``       [batch query d_model]           the block's output
``embed``                 [batch query d_model]           the residual stream after the embeddings: the first
                                                          block's input (the same tensor as ``L0.resid_pre``)
``resid_final``           [batch query d_model]           the final norm's input
``final_norm``            [batch query d_model]           the final norm's output
``final_norm.scale``      [batch query 1] float64         its divisor at each row: LayerNorm's
                                                          √(var + eps), RMSNorm's √(mean x² + eps); watch only
``logits``                [batch query vocab]             the output embedding's (unembedding's) output
========================  ==============================  ====================================================

Capabilities are declared, not probed: :func:`site_map` lists a site only where the anatomy finds its part
(q / k / v per head need the config's head counts to divide the projection widths; ``*_in`` need a pre-norm
block with its norm found, or a post-norm one; ``final_norm.scale`` a LayerNorm or a plain RMSNorm), and
:meth:`SiteMap.site` refuses any other name in one line that says why.

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> llama, _ = build_tiny("llama")  # 2 layers, 4 query heads, 2 key/value heads
>>> found = site_map(llama)
>>> found.site("L1.k").heads, found.site("L1.k").width, found.site("L1.head_out").heads
(2, 8, 4)
>>> [name for name in found.names() if name.startswith("L0.")][:5]
['L0.resid_pre', 'L0.attn_in', 'L0.q_in', 'L0.k_in', 'L0.v_in']
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from probe.anatomy import BlockParts, Projection, block_parts, final_norm, text_config
from probe.errors import ProbeError

LAYER_SITES = ("resid_pre", "attn_in", "q_in", "k_in", "v_in", "q", "k", "v", "head_out", "attn_out",
               "mlp_in", "mlp_out", "resid_post")
MODEL_SITES = ("embed", "resid_final", "final_norm", "final_norm.scale", "logits")
PER_HEAD = ("q_in", "k_in", "v_in", "q", "k", "v", "head_out")


@dataclass(frozen=True)
class Site:
    """Where one site sits.

    Attributes
    ----------
    name : str
        ``"L3.head_out"``, ``"logits"`` …
    kind : str
        The name without its layer (``"head_out"``).
    layer : int or None
        Its layer (None for a model-wide site).
    module : torch.nn.Module
        The module whose hook reads it.
    before : bool
        True: it is that module's (first) input, read by a forward pre-hook; False: its output.
    heads, width : int or None
        Per-head sites: the head axis' length and each head's width (``d_head``, ``d_v`` or ``d_model``).
    columns : slice or None
        q / k / v (and their ``_in``): the projection output columns of the heads (a fused q | k | v module:
        its part).
    norm : torch.nn.Module or None
        ``*_in`` of a pre-norm block: the norm between the site and the projection; ``final_norm.scale``: the
        final norm.
    source : torch.nn.Module or None
        ``q_in`` / ``k_in`` / ``v_in`` of a pre-norm block: the norm whose input they are (``attn_in``'s
        module); None: the projection's own input (post-norm).
    """

    name: str
    kind: str
    layer: int | None
    module: nn.Module
    before: bool
    heads: int | None = None
    width: int | None = None
    columns: slice | None = None
    norm: nn.Module | None = None
    source: nn.Module | None = None


class SiteMap:
    """Every site of one model (:func:`site_map`), and why a missing one is missing."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.sites: dict[str, Site] = {}
        self.why: dict[str, str] = {}
        config = text_config(model.config)
        self.n_heads = getattr(config, "num_attention_heads", None)
        self.layers = block_parts(model)
        for layer, parts in enumerate(self.layers):
            self._layer(layer, parts)
        self._model_wide()

    def _add(self, site: Site) -> None:
        self.sites[site.name] = site

    def _lack(self, layer: int | None, kinds, reason: str) -> None:
        for kind in kinds:
            self.why.setdefault(f"L{layer}.{kind}" if layer is not None else kind, reason)

    def _layer(self, layer: int, parts: BlockParts) -> None:
        name = f"L{layer}."
        self._add(Site(name + "resid_pre", "resid_pre", layer, parts.block, True))
        self._add(Site(name + "resid_post", "resid_post", layer, parts.block, False))
        attention = parts.attention
        if attention is None:
            self._lack(layer, LAYER_SITES[1:10], "no attention module with a value projection in this layer")
        else:
            self._attention(layer, parts)
        if parts.mlp_in is not None and (parts.mlp_norm is not None or parts.post_norm):
            before = parts.mlp_norm if parts.mlp_norm is not None else parts.mlp_in
            self._add(Site(name + "mlp_in", "mlp_in", layer, before, True))
        else:
            self._lack(layer, ("mlp_in",), "no MLP with a norm before it (pre-norm) or a post-norm MLP found")
        if parts.mlp_out is not None:
            self._add(Site(name + "mlp_out", "mlp_out", layer, parts.mlp_out, False))
        else:
            self._lack(layer, ("mlp_out",), "no MLP module found")

    def _attention(self, layer: int, parts: BlockParts) -> None:
        name, attention = f"L{layer}.", parts.attention
        pre_norm = attention.norm is not None
        if pre_norm or parts.post_norm:
            source = attention.norm if pre_norm else attention.module
            self._add(Site(name + "attn_in", "attn_in", layer, source, True))
        else:
            self._lack(layer, ("attn_in", "q_in", "k_in", "v_in"),
                       "no norm before attention found and not a post-norm block: what feeds attention "
                       "is not known")
        output = attention.output
        if output is None:
            self._lack(layer, ("head_out", "attn_out"), "no output projection found")
        else:
            self._add(Site(name + "attn_out", "attn_out", layer, output.module, False))
        heads = self.n_heads
        query = attention.query
        if not heads or query is None or query.width_out % heads:
            self._lack(layer, PER_HEAD, "num_attention_heads of the config does not divide the query "
                       "projection")
            return
        d_head = query.width_out // heads
        if output is not None and output.width_in % heads == 0:
            self._add(Site(name + "head_out", "head_out", layer, output.module, True, heads,
                           output.width_in // heads))
        else:
            self._lack(layer, ("head_out",), "the output projection's input is not heads × d_v")
        kv_heads = attention.key.width_out // d_head if attention.key is not None else None
        for kind, projection in (("q", query), ("k", attention.key), ("v", attention.value)):
            if projection is None:
                self._lack(layer, (kind, kind + "_in"), f"no {kind} projection found")
                continue
            count = heads if kind == "q" else kv_heads  # GQA: k and v have the key projection's heads
            if not count or projection.width_out % count:
                self._lack(layer, (kind, kind + "_in"), f"the {kind} projection's width is not heads × dim")
                continue
            width = projection.width_out // count
            columns = _columns(projection)
            self._add(Site(name + kind, kind, layer, projection.module, False, count, width, columns))
            if pre_norm or parts.post_norm:
                d_model = projection.width_in
                self._add(Site(name + kind + "_in", kind + "_in", layer, projection.module, False, count,
                               d_model, columns, attention.norm, attention.norm))

    def _model_wide(self) -> None:
        model = self.model
        if self.layers:
            self._add(Site("embed", "embed", None, self.layers[0].block, True))
        norm = final_norm(model)
        if norm is None:
            self._lack(None, ("resid_final", "final_norm", "final_norm.scale"), "no final norm found")
        else:
            self._add(Site("resid_final", "resid_final", None, norm, True))
            self._add(Site("final_norm", "final_norm", None, norm, False))
            kind = type(norm).__name__
            if isinstance(norm, nn.LayerNorm) or (kind.endswith("RMSNorm") and not kind.startswith("Gemma")):
                self._add(Site("final_norm.scale", "final_norm.scale", None, norm, True, norm=norm))
            else:
                self._lack(None, ("final_norm.scale",), f"{kind} is not a LayerNorm or a plain RMSNorm")
        unembedding = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if unembedding is None:
            self._lack(None, ("logits",), "the model has no output embedding (no logits)")
        else:
            self._add(Site("logits", "logits", None, unembedding, False))

    def names(self) -> list[str]:
        """Every site's name: per layer in :data:`LAYER_SITES` order, then the model-wide ones."""
        order = {kind: index for index, kind in enumerate(LAYER_SITES + MODEL_SITES)}
        def key(name: str) -> tuple:
            site = self.sites[name]
            return site.layer is None, site.layer or 0, order[site.kind]
        return sorted(self.sites, key=key)

    def site(self, name: str) -> Site:
        """The site `name`; a one-line ProbeError naming it and why it is not here otherwise."""
        found = self.sites.get(name)
        if found is not None:
            return found
        what = type(self.model).__name__
        if name in self.why:
            raise ProbeError(f"site {name} is not available on {what}: {self.why[name]}")
        raise ProbeError(f"unknown site {name!r} on {what}: sites are L<layer>.<{'|'.join(LAYER_SITES)}> "
                         f"(layers 0..{len(self.layers) - 1}) and {', '.join(MODEL_SITES)}")


def _columns(projection: Projection) -> slice:
    """The output columns a projection owns in its module (all of them, or its part of a fused one)."""
    start = projection.part.start if projection.part is not None else 0
    return slice(start, start + projection.width_out)


def site_map(model: nn.Module) -> SiteMap:
    """The :class:`SiteMap` of `model` (its anatomy read once; see the module doc for every site).

    Examples
    --------
    >>> found = site_map(loaded.model)  # zoo:induction: 2 layers x 4 heads
    >>> site = found.site("L1.k_in")
    >>> site.heads, site.width, type(site.module).__name__, type(site.norm).__name__
    (4, 64, 'Linear', 'LlamaRMSNorm')
    >>> found.site("L5.q")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    probe.errors.ProbeError: unknown site 'L5.q' on LlamaForCausalLM: sites are L<layer>.<resid_pre|...>...
    """
    return SiteMap(model)


def sites(model: nn.Module) -> list[str]:
    """The names of every site `model` has, declared from its anatomy (module doc).

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> bert, _ = build_tiny("bert")  # post-norm: attn_in is the self-attention's input, no final norm
    >>> names = sites(bert)
    >>> "L0.q_in" in names, "L1.mlp_in" in names, "final_norm" in names, names[-1]
    (True, True, False, 'logits')
    """
    return site_map(model).names()


__all__ = ["LAYER_SITES", "MODEL_SITES", "PER_HEAD", "Site", "SiteMap", "site_map", "sites"]
