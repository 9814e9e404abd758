"""The behavioural half of copying: a head's direct logit attribution to the token an induction head attends
to.

On repeated-block probes (:func:`probe.heads.probesets.repeated_blocks`) every query i in the block's second
copy has one induction target j (the token after the earlier occurrence of t_i; REFERENCE.md), and t_j is the
token to predict next. A copying induction head attends to j and raises t_j's logit; a copy-suppressing one
lowers it.

For head h, with z_h(i) its attention output at row i (the input of the output projection: the intervention
site ``L{l}.head_out``, watched through :func:`probe.engine.interventions.intervene`) and W_O^h its slice of
the output projection, the head's direct contribution to the residual stream is c = z_h(i) W_O^h. Through
the final norm, linearised at the clean forward's own scale (LayerNorm: c − mean(c), divided by the
residual's standard deviation; RMSNorm: divided by its root mean square; then the gain), and the unembedding
W_U:

    dla(h, i) = c' · W_U[:, t_j] − mean over the vocabulary of c' · W_U[:, v]

(centred: a shift of every logit changes no prediction). ``copying_dla`` is its mean over the counted rows of
every probe, in logits. Causal LMs only (a masked LM's decoder transform is nonlinear): NaN elsewhere, and
where the final norm or an output projection is not found."""

from __future__ import annotations

import contextlib
import math
import threading
import weakref

import torch
from torch import nn

from probe.anatomy import (
    attention_parts,
    body,
    final_norm,
    linear_weight,
    materialised,
    weight_identity,
    weight_of,
)
from probe.engine import capture
from probe.engine.interventions import intervene
from probe.engine.sites import site_map
from probe.errors import ProbeError
from probe.models import ModelKind


def induction_rows(
    repeat_start: torch.Tensor,
    repeat_len: torch.Tensor,
    seq_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(query mask `[example seq]` bool, target position `[example seq]` long): the rows of each second copy
    and their induction targets j = i − block + 1 (−1 elsewhere)."""
    n = len(repeat_start)
    position = torch.arange(seq_len)[None].expand(n, -1)  # [example seq]
    start, size = repeat_start[:, None], repeat_len[:, None]  # [example 1]
    rows = (position >= start + size) & (position < start + 2 * size)  # [example seq]
    target = torch.where(rows, position - size + 1, torch.full_like(position, -1))  # [example seq]
    return rows, target


def _row_terms(
    z: torch.Tensor,  # [row head·d_head] float32: the heads' attention outputs at the counted rows
    w_out: torch.Tensor,  # [head·d_head d_model] float32
    weighted: torch.Tensor,  # [row d_model] float32: g ⊙ u, u = W_U[:, t_j] − the vocabulary's mean column
    weighted_sum: torch.Tensor | None,  # [row 1] float64: Σ_m g_m u_m (LayerNorm's centring); None: RMSNorm
    n_heads: int,
    # [head·d_head] float32: W_O 1 / d_model (:func:`_column_mean`), read with weighted_sum; None for RMSNorm
    column_mean: torch.Tensor | None,
) -> torch.Tensor:
    """`[row head]` float64: the attribution c'·u times the final norm's scale at the row (the scale is known
    only after the last layer; :meth:`InductionDLA.reduce` divides by it). c = z_h W_O^h through the
    linearised norm, reduced before it is expanded — Σ_m c_m g_m u_m = z_h · (W_O^h (g ⊙ u)), and LayerNorm's
    centring subtracts mean(c)·Σ_m g_m u_m with mean(c) = z_h · (W_O^h 1) / d_model — so no
    `[row head d_model]` tensor is built.

    The one `d_model × head·d_head` product per row runs in float32, the precision of the forward that made
    z, with the sums over d_head (its rounding, about 1e-6 of the attribution, is the forward's own); the
    centring and the division by the norm's scale are float64."""
    n_rows = weighted.shape[0]
    projected = weighted @ w_out.T  # [row head·d_head] W_O (g ⊙ u) per row
    # [row head] Σ_m c_m g_m u_m
    along = (z * projected).view(n_rows, n_heads, -1).sum(-1).double()
    if weighted_sum is None:
        return along
    mean_c = (z * column_mean).view(n_rows, n_heads, -1).sum(-1).double()  # [row head] mean(c)
    return along - mean_c * weighted_sum


def _column_mean(w_out: torch.Tensor) -> torch.Tensor:
    """W_O 1 / d_model `[head·d_head]` float32 from W_O `[head·d_head d_model]`, summed in float64."""
    return (w_out.sum(-1, dtype=torch.float64) / w_out.shape[-1]).float()


def _norm_scale(residual: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """The final norm's divisor at each row `[row]` from its input `[row d_model]` float64: LayerNorm's
    standard deviation, RMSNorm's root mean square (each with its epsilon)."""
    if isinstance(norm, nn.LayerNorm):
        return residual.var(-1, unbiased=False).add(norm.eps).sqrt()
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    return residual.pow(2).mean(-1).add(eps).sqrt()


def mean_row(weight: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """The mean of the rows of `weight` `[vocab d_model]`, `[d_model]` float64, summed in float64 a chunk of
    rows at a time (about 5x faster than ``mean(0, dtype=float64)`` over a GPT-2 vocabulary, equal within
    float64 rounding)."""
    total = torch.zeros(weight.shape[-1], dtype=torch.float64, device=weight.device)  # [d_model]
    for part in weight.detach().split(chunk):
        total += part.double().sum(0)
    return total / weight.shape[0]


_MEANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # unembedding -> (weight identity, mean row)


def kept_mean_row(unembedding: nn.Module) -> torch.Tensor:
    """:func:`mean_row` of `unembedding`'s weight `[vocab d_model]`, `[d_model]` float64, kept per module
    while its weight is unchanged (the same storage and version: 0.04 s per run for GPT-2's vocabulary saved
    on every labelling run of a loaded model after its first). Read through :func:`probe.anatomy.materialised`
    (offloaded weights)."""
    with materialised(unembedding):
        weight = unembedding.weight  # [vocab d_model]
        identity = weight_identity(weight)
        if identity is None:  # an inference tensor: nothing is kept
            return mean_row(weight)
        kept = _MEANS.get(unembedding)
        if kept is not None and kept[0] == identity:
            return kept[1]
        mean = mean_row(weight)  # [d_model]
    _MEANS[unembedding] = (identity, mean)
    return mean


class InductionDLA:
    """Accumulates the mean direct logit attribution `[layer head]` of every head to its induction targets'
    tokens over the forwards it watches: :meth:`watching` watches the intervention sites ``L{l}.head_out``
    (the output projections' inputs) and ``resid_final`` (the final norm's input); :meth:`expect` names a
    batch of repeated-block probes before its forward, each layer's share is reduced in its site's callback
    while z is fresh (no layer's z is kept), and after the
    forward :meth:`add` (or :meth:`reduce`) divides by the final norm's scale and sums. The label pipeline
    watches its own scoring forwards (no forward of its own); :func:`induction_dla` runs the forwards itself.
    ``applicable`` is False (and :meth:`result` NaN) where the attribution is not defined (see the module
    doc)."""

    def __init__(self, loaded) -> None:
        self.loaded = loaded
        model = loaded.model
        self.norm = final_norm(model)
        found = attention_parts(model)
        unembedding = model.get_output_embeddings()
        kind = type(self.norm).__name__ if self.norm is not None else ""
        linearisable = isinstance(self.norm, nn.LayerNorm) or (
            kind.endswith("RMSNorm") and not kind.startswith("Gemma"))
        self.projections = [parts.output.module if parts.output is not None else None for parts in found]
        self.sites = site_map(model)
        self.applicable = (loaded.kind == ModelKind.CAUSAL_LM and linearisable and unembedding is not None
                           and len(found) == loaded.n_layers
                           and all(projection is not None for projection in self.projections)
                           and all(f"L{layer}.head_out" in self.sites.sites for layer in range(len(found)))
                           and "resid_final" in self.sites.sites)
        self.unembedding = unembedding
        self.centred = isinstance(self.norm, nn.LayerNorm)
        self.total = torch.zeros(loaded.n_layers, loaded.n_heads, dtype=torch.float64)  # [layer head]
        self.counted = 0
        self.mean_unembed: torch.Tensor | None = None  # [d_model] float64, read on the first batch
        # the batch expect() named: (rows [batch seq] bool, g ⊙ u [row d_model] float32, Σ_m g_m u_m [row 1]
        # float64 where the norm centres, else None)
        self._batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
        self._terms: dict[int, torch.Tensor] = {}  # layer -> [row head] float64, before the norm's scale
        self._scale: torch.Tensor | None = None  # [row] float64: the final norm's scale
        # layer -> (the parameter's identity, W_O [head·d_head d_model], W_O 1 / d_model [head·d_head] or
        # None), float32, where W_O is the resident float32 parameter itself (nothing copied, nothing held
        # that the model does not); read again when the parameter changes
        self._outputs: dict[int, tuple[tuple, torch.Tensor, torch.Tensor | None]] = {}

    @contextlib.contextmanager
    def watching(self):
        """Hooks on the model while the block runs (nothing when not applicable). Only this thread's forwards
        are recorded, and only those :meth:`expect` announced: the app and threaded callers run other
        forwards of the same model meanwhile."""
        if not self.applicable:
            yield self
            return
        owner = threading.get_ident()

        def layer_hook(layer: int, tensor: torch.Tensor) -> None:
            if threading.get_ident() == owner and self._batch is not None:
                rows, weighted, weighted_sum = self._batch
                z = tensor.detach().flatten(-2)  # [batch seq head d_head] -> [batch seq head·d_head]
                z = z[rows.to(z.device)].float()  # [row head·d_head]
                w_out, column_mean = self._output_map(layer, z.device)  # [head·d_head d_model], [head·d_head]
                total = None if weighted_sum is None else weighted_sum.to(z.device)  # [row 1]
                self._terms[layer] = _row_terms(z, w_out, weighted.to(z.device), total, self.loaded.n_heads,
                                                column_mean)

        def norm_hook(tensor: torch.Tensor) -> None:
            if threading.get_ident() == owner and self._batch is not None:
                residual = tensor.detach()  # [batch seq d_model]
                residual = residual[self._batch[0].to(residual.device)].double()  # [row d_model]
                self._scale = _norm_scale(residual, self.norm)  # [row], shared by every layer

        watch = {f"L{layer}.head_out": lambda _site, tensor, layer=layer: layer_hook(layer, tensor)
                 for layer in range(len(self.projections))}
        watch["resid_final"] = lambda _site, tensor: norm_hook(tensor)
        try:
            with intervene(self.loaded.model, watch=watch, sites=self.sites):
                yield self
        finally:
            self._batch, self._scale = None, None
            self._terms.clear()

    def _output_map(self, layer: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_O `[head·d_head d_model]` float32 of `layer` on `device` and W_O 1 / d_model `[head·d_head]`
        (None where the final norm does not centre):
        kept across the watched forwards while W_O is the model's resident float32 parameter (a view) and
        unchanged; an offloaded or low-precision weight is read again for each forward (a kept copy of every
        layer's would cost a 7B model gigabytes)."""
        module = self.projections[layer]
        identity = weight_identity(module.weight)
        kept = self._outputs.get(layer)
        if kept is not None and identity is not None and kept[0] == identity and kept[1].device == device:
            return kept[1], kept[2]
        w_out = linear_weight(module, torch.float32, copy=False).to(device)  # [head·d_head d_model]
        column_mean = _column_mean(w_out) if self.centred else None  # [head·d_head]: LayerNorm's centring
        if (identity is not None and w_out.data_ptr() == module.weight.data_ptr()
                and module.weight.device.type != "meta"):
            self._outputs[layer] = (identity, w_out, column_mean)
        return w_out, column_mean

    def expect(self, input_ids: torch.Tensor, repeat_start: torch.Tensor, repeat_len: torch.Tensor) -> None:
        """Name the next watched forward's batch: probes `input_ids` `[batch seq]` with blocks at
        `repeat_start` `[batch]` of `repeat_len` `[batch]` (their counted rows and g ⊙ u are read here)."""
        self._terms.clear()
        self._scale = None
        if not self.applicable:
            return
        rows, target = induction_rows(repeat_start, repeat_len, input_ids.shape[1])  # [batch seq] each
        tokens = input_ids.gather(1, target.clamp(min=0))[rows]  # [row] t_j of the counted rows
        with materialised(self.unembedding):  # only the counted rows' columns of W_U are copied
            weight = self.unembedding.weight  # [vocab d_model]
            if self.mean_unembed is None:  # the vocabulary's mean column, once per run (kept per model)
                self.mean_unembed = kept_mean_row(self.unembedding)  # [d_model]
            picked = weight.detach()[tokens.to(weight.device)].double()  # [row d_model] W_U[:, t_j]
        weighted = (picked - self.mean_unembed.to(picked.device)) * weight_of(self.norm).to(picked.device)
        # [batch seq], [row d_model] g ⊙ u, [row 1] its sum: read by every layer's hook
        self._batch = (rows, weighted.float(), weighted.sum(-1, keepdim=True) if self.centred else None)

    def add(self) -> None:
        """Reduce the forward just watched (the batch :meth:`expect` named) into the running mean."""
        self.accumulate(*self.reduce())

    def accumulate(self, total: torch.Tensor, counted: int) -> None:
        """Add one batch's reduction (:meth:`reduce`: `[layer head]` float64 sum, rows counted); a resumed
        labelling run adds a journalled batch's reduction here without its forward."""
        self.total += total
        self.counted += int(counted)

    def reduce(self) -> tuple[torch.Tensor, int]:
        """The forward just watched over the batch :meth:`expect` named, reduced: the sum of every counted
        row's attribution `[layer head]` float64 and the rows counted (zeros and 0 when not applicable)."""
        total = torch.zeros(self.loaded.n_layers, self.loaded.n_heads, dtype=torch.float64)  # [layer head]
        if not self.applicable:
            return total, 0
        if self._batch is None or self._scale is None or len(self._terms) != self.loaded.n_layers:
            raise ProbeError("the direct logit attribution saw no complete forward of the batch it expected "
                             "(expect() before the forward, inside watching())")
        for layer, terms in self._terms.items():
            total[layer] = (terms / self._scale.to(terms.device)[:, None]).sum(0).cpu()
        counted = int(self._batch[0].sum())
        self._batch, self._scale = None, None
        self._terms.clear()
        return total, counted

    def result(self) -> torch.Tensor:
        """The mean over every counted row `[layer head]` float64; NaN when nothing was counted."""
        if not self.counted:
            return torch.full(self.total.shape, math.nan, dtype=torch.float64)
        return self.total / self.counted


def induction_dla(loaded, probes, batch_size: int = 8) -> torch.Tensor:
    """Mean direct logit attribution `[layer head]` (float64, logits) of every head to its induction targets'
    tokens on `probes` (a :class:`probe.heads.label.probes.TokenProbeSet` with repeat_start / repeat_len),
    from forwards of the model's body run here; NaN where it is not defined (see the module doc).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A causal LM.
    probes : probe.heads.label.probes.TokenProbeSet
        Repeated-block probes (``repeat_start`` and ``repeat_len`` set).
    batch_size : int, default 8
        Probes per forward.

    Returns
    -------
    torch.Tensor, shape=(layer, head), float64
        The mean attribution in logits; NaN where it is not defined.

    Examples
    --------
    >>> from probe.heads.label import LabelConfig
    >>> from probe.heads.label.probes import ProbeSource
    >>> probes = ProbeSource(loaded, LabelConfig(examples=8)).token_probes("repeated", 32)  # zoo:induction
    >>> dla = induction_dla(loaded, probes)  # [layer head]
    >>> dla[1].round(decimals=1)  # the induction heads raise the logit of the token they attend to
    tensor([2.6000, 3.0000, 3.8000, 3.7000], dtype=torch.float64)
    >>> bool(dla[0].abs().max() < 0.05)  # layer 0 (previous-token, first-token heads) writes almost none
    True
    """
    dla = InductionDLA(loaded)
    if probes is None or probes.repeat_start is None or not dla.applicable:
        return dla.result()
    model = loaded.model
    base = body(model)  # the logits are never needed
    device = next(model.parameters()).device
    with dla.watching():
        for start in range(0, len(probes.input_ids), batch_size):
            ids = probes.input_ids[start : start + batch_size]  # [batch seq]
            dla.expect(ids, probes.repeat_start[start : start + batch_size],
                       probes.repeat_len[start : start + batch_size])
            with capture(model, ()), torch.inference_mode():
                base(input_ids=ids.to(device))
            dla.add()
    return dla.result()
