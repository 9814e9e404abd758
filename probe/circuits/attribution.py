"""Why this prediction, for any prompt: direct logit attribution per head and the logit lens per layer.

**Direct logit attribution** (DLA). In a pre-norm transformer whose blocks add their attention and MLP outputs
to the residual stream, the final norm's input at a position is the sum of its writers: the embeddings, each
head's output z_h W_O^h (the intervention site ``L{l}.head_out`` through its slice of the output projection),
each output projection's bias b_O and each MLP's output. The final norm is linear once its divisor s (the site
``final_norm.scale``, read from the clean forward) is fixed: LayerNorm (x − mean(x)) / s · g + β, RMSNorm
x / s · g. With u = W_U[:, answer] − W_U[:, other] (or W_U[:, answer] alone), a component c gets

    dla(c) = (c − mean(c)) / s · (g ⊙ u)          (no centring for an RMSNorm)

and a last row ``final_bias`` = β · u + b_U[answer] − b_U[other] (the final norm's and the unembedding's
biases, 0 where there are none), so the rows sum to the model's own logit (difference) at that position, to
float rounding. This is TransformerLens 4.3's rule (``ActivationCache.stack_head_results`` /
``decompose_resid`` → ``logit_attrs``: ``apply_ln_to_stack`` centres each component for a LayerNorm and
divides by the cached ``hook_scale``, then dots with ``tokens_to_residual_directions``, i.e. W_U with the
final norm's gain folded in by ``fold_ln``), whose biases go to ``b_U`` and are not attributed; we list
them as one row.
With one answer and no ``other``, TransformerLens' compatibility mode also centres W_U over the vocabulary
(``center_unembed``); we do not, so a row is that component's share of the answer's raw logit.

**Logit lens** (nostalgebraist 2020). The residual stream before each block and after the last, each put
through the model's final norm with its *own* statistics and the unembedding: what the model would predict if
it stopped there. This is TransformerLens 4.3's ``accumulated_resid(apply_ln=True)`` (``recompute_ln`` at the
unembed) → ``W_U`` + ``b_U`` (``tools.analysis.logit_lens``); its last row is the model's own logits.

Both read the model through :func:`probe.engine.interventions.intervene` (one forward, no edits) and refuse
models where the decomposition does not hold: no final norm, a final norm that is neither a LayerNorm nor a
plain RMSNorm, or blocks whose outputs do not add up to the final norm's input (parallel or post-normed
blocks).

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> model, tokenizer = build_tiny("gpt2")
>>> table = direct_logit_attribution(model, [5, 9, 12, 7], answer=3, other=4)
>>> list(table.columns), len(table)  # embed, 2 layers × (4 heads + attn bias + mlp), final_bias
(['component', 'kind', 'layer', 'head', 'dla'], 14)
>>> bool(abs(table.dla.sum() - table.attrs["logit_diff"]) < 1e-4)
True
>>> lens = logit_lens(model, [5, 9, 12, 7], answer=3)
>>> list(lens.label)
['0_pre', '1_pre', 'final_post']
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
from torch import nn

from probe.anatomy import final_norm, linear_weight, norm_gain
from probe.circuits.task import answer_token
from probe.engine.interventions import intervene
from probe.engine.sites import site_map
from probe.errors import ProbeError

COLUMNS = ("component", "kind", "layer", "head", "dla")


def _model_and_ids(model, prompt, tokenizer) -> tuple[nn.Module, object, torch.Tensor]:
    """(the torch model, its tokenizer or None, input ids `[1 seq]`) from a model or a LoadedModel."""
    if not isinstance(model, nn.Module) and isinstance(getattr(model, "model", None), nn.Module):
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        model = model.model
    if isinstance(prompt, torch.Tensor):
        prompt = prompt.reshape(-1).tolist()
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ProbeError(f"prompt {prompt!r} is text: give a tokenizer, or token ids")
        prompt = tokenizer(prompt)["input_ids"]
    if not isinstance(prompt, Sequence) or len(prompt) == 0:
        raise ProbeError("the prompt is empty: give a text or a non-empty list of token ids")
    device = next(model.parameters()).device
    return model, tokenizer, torch.tensor([[int(item) for item in prompt]], device=device)  # [1 seq]


def _unembedding(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(W_U `[d_model vocab]` float64, b_U `[vocab]` float64 or None) of the model's output embedding."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or getattr(head, "weight", None) is None:
        raise ProbeError(f"{type(model).__name__} has no output embedding: direct logit attribution and the "
                         "logit lens need a causal LM with an unembedding")
    bias = getattr(head, "bias", None)
    return head.weight.detach().double().T, None if bias is None else bias.detach().double()


def _position(position: int, length: int) -> int:
    if not -length <= position < length:
        raise ProbeError(f"position {position} is outside the prompt's {length} tokens: give -{length} … "
                         f"{length - 1}")
    return position % length


def direct_logit_attribution(model, prompt, answer, other=None, *, tokenizer=None,
                             position: int = -1) -> pd.DataFrame:
    """Each component's direct contribution to the answer's logit (or to logit(answer) − logit(other)).

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
        A causal LM with pre-norm blocks and a LayerNorm or plain RMSNorm final norm.
    prompt : str or sequence of int
        One prompt (text needs a tokenizer; a LoadedModel brings its own).
    answer, other : str or int
        Single tokens (text or id); ``other`` None attributes the answer's logit alone.
    tokenizer : transformers tokenizer, optional
    position : int
        The position whose next-token logits are explained (default the last).

    Returns
    -------
    pandas.DataFrame
        One row per component in residual-stream order: ``embed``; per layer each head (``kind`` "head",
        ``component`` "L{l}H{h}"), the output projection's bias ("attn_bias", where it has one) and the MLP
        ("mlp"); ``final_bias``. Columns ``component, kind, layer, head, dla`` (layer / head NA where they do
        not apply). ``attrs``: ``logit_diff`` (the model's own value), ``answer``, ``other``, ``position``,
        ``scale`` (the final norm's divisor there).

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("llama")
    >>> table = direct_logit_attribution(model, [5, 9, 12, 7], answer=3)
    >>> table.kind.value_counts().to_dict()  # no biases in Llama: final_bias is 0
    {'head': 8, 'mlp': 2, 'embed': 1, 'bias': 1}
    >>> bool(abs(table.dla.sum() - table.attrs["logit_diff"]) < 1e-4)
    True
    """
    model, tokenizer, ids = _model_and_ids(model, prompt, tokenizer)
    answer_id = answer_token(tokenizer, answer, "answer")
    other_id = None if other is None else answer_token(tokenizer, other, "other")
    if other_id == answer_id:
        raise ProbeError(f"answer and other are the same token ({answer_id}): give two different tokens, or "
                         "no other to attribute the answer's logit alone")
    at = _position(position, ids.shape[1])
    found = site_map(model)
    names = set(found.names())
    if "final_norm.scale" not in names:
        found.site("final_norm.scale")  # refuses in one line: no final norm, or one we cannot linearise
    w_u, b_u = _unembedding(model)
    n_layers = len(found.layers)
    watch = ["embed", "resid_final", "final_norm.scale", "logits"]
    for layer in range(n_layers):
        watch += [f"L{layer}.head_out", f"L{layer}.mlp_out"]
    missing = [name for name in watch if name not in names]
    if missing:
        found.site(missing[0])  # refuses naming the site and why
    with torch.no_grad(), intervene(model, watch=watch, sites=found) as run:
        model(input_ids=ids)
    saved = {name: tensor[0, at].double() for name, tensor in run.saved.items()}  # [...] at the position

    norm = final_norm(model)
    gain = norm_gain(norm)
    gain = torch.ones(w_u.shape[0], dtype=torch.float64) if gain is None else gain.cpu()
    beta = getattr(norm, "bias", None)
    direction = w_u[:, answer_id] - (0 if other_id is None else w_u[:, other_id])  # [d_model]
    weighted = (gain * direction.cpu()).to(w_u.device)  # [d_model] g ⊙ u
    scale = float(saved["final_norm.scale"].reshape(()))
    centre = isinstance(norm, nn.LayerNorm)

    def attribute(component: torch.Tensor) -> torch.Tensor:  # [n d_model] -> [n]
        component = component.to(w_u.device)
        if centre:
            component = component - component.mean(-1, keepdim=True)
        return component @ weighted / scale

    rows, pieces = [], []

    def add(vectors: torch.Tensor, kind: str, layer, heads, labels) -> None:  # vectors [n d_model]
        pieces.append(vectors.to(w_u.device))
        for label, head, value in zip(labels, heads, attribute(vectors).tolist(), strict=True):
            rows.append((label, kind, layer, head, value))

    add(saved["embed"][None], "embed", None, [None], ["embed"])
    for layer, parts in enumerate(found.layers):
        output = parts.attention.output.module
        w_o = linear_weight(output).to(w_u.device)  # [head·d_v d_model]
        z = saved[f"L{layer}.head_out"]  # [head d_v]
        heads = z.shape[0]
        results = (z[:, :, None] * w_o.reshape(heads, z.shape[1], -1)).sum(1)  # [head d_model]
        add(results, "head", layer, list(range(heads)), [f"L{layer}H{h}" for h in range(heads)])
        bias = getattr(output, "bias", None)
        if bias is not None:
            add(bias.detach().double()[None], "attn_bias", layer, [None], [f"L{layer}.attn_bias"])
        add(saved[f"L{layer}.mlp_out"][None], "mlp", layer, [None], [f"L{layer}.mlp"])
    resid = saved["resid_final"].to(w_u.device)
    remainder = (resid - torch.cat(pieces).sum(0)).abs().max().item()
    if remainder > 1e-4 * max(resid.abs().max().item(), 1.0):
        raise ProbeError(f"direct logit attribution needs a residual stream that is the sum of the "
                         f"embeddings, the heads, their biases and the MLPs; {type(model).__name__}'s final "
                         f"norm input differs from that sum by {remainder:.3g} (parallel or "
                         "post-normed blocks)")
    bias_term = 0.0
    if beta is not None:
        bias_term += float(beta.detach().double().to(w_u.device) @ direction)
    if b_u is not None:
        bias_term += float(b_u[answer_id] - (0 if other_id is None else b_u[other_id]))
    rows.append(("final_bias", "bias", None, None, bias_term))

    logits = saved["logits"]  # [vocab]
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["layer"] = table["layer"].astype("Int64")
    table["head"] = table["head"].astype("Int64")
    table.attrs.update(logit_diff=float(logits[answer_id] - (0 if other_id is None else logits[other_id])),
                       answer=answer_id, other=other_id, position=at, scale=scale)
    return table


def logit_lens(model, prompt, answer=None, *, tokenizer=None, position: int = -1,
               top: int = 1) -> pd.DataFrame:
    """The residual stream before each block and after the last, read through the final norm (its own
    statistics per row) and the unembedding, at one position.

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
        A causal LM with a final norm.
    prompt : str or sequence of int
    answer : str or int, optional
        A single token whose logit and rank are reported per layer.
    tokenizer : transformers tokenizer, optional
    position : int
        Default the last.
    top : int
        How many top tokens to list per layer.

    Returns
    -------
    pandas.DataFrame
        One row per stack entry, TransformerLens' labels: ``label`` ("{l}_pre", "final_post"), ``layer``
        (0 … n_layers; n_layers = after the last block), ``top_ids`` / ``top_logits`` (lists of ``top``),
        ``top_text`` (decoded, where a tokenizer is known) and, with an answer, ``answer_logit`` and
        ``answer_rank`` (0 = the argmax; counting strictly larger logits). The last row equals the model's own
        logits (checked: refused otherwise). ``attrs``: ``answer``, ``position``.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("llama")
    >>> lens = logit_lens(model, [5, 9, 12, 7], answer=3, top=2)
    >>> list(lens.columns)
    ['label', 'layer', 'top_ids', 'top_logits', 'answer_logit', 'answer_rank']
    """
    model, tokenizer, ids = _model_and_ids(model, prompt, tokenizer)
    answer_id = None if answer is None else answer_token(tokenizer, answer, "answer")
    at = _position(position, ids.shape[1])
    found = site_map(model)
    found.site("resid_final")  # refuses in one line where there is no final norm
    norm = final_norm(model)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ProbeError(f"{type(model).__name__} has no output embedding: the logit lens needs a causal LM")
    n_layers = len(found.layers)
    watch = [f"L{layer}.resid_pre" for layer in range(n_layers)] + ["resid_final", "logits"]
    with torch.no_grad(), intervene(model, watch=watch, sites=found) as run:
        model(input_ids=ids)
    with torch.no_grad():  # outside the block: the unembedding's own hook would overwrite run.saved["logits"]
        stack = torch.stack([run.saved[name][:, at] for name in watch[:-1]])  # [entry 1 d_model]
        lens = head(norm(stack))[:, 0].double()  # [entry vocab]
    own = run.saved["logits"][0, at].double()
    gap = (lens[-1] - own).abs().max().item()
    if gap > 1e-4 * max(own.abs().max().item(), 1.0):
        raise ProbeError(f"{type(model).__name__}'s logits are not its unembedding of its final norm's "
                         f"output (off by {gap:.3g}: a softcap or scaling after the unembedding): no logit "
                         "lens")
    values, top_ids = lens.topk(min(top, lens.shape[-1]), dim=-1)  # [entry top]
    table = pd.DataFrame({"label": [f"{layer}_pre" for layer in range(n_layers)] + ["final_post"],
                          "layer": list(range(n_layers + 1)),
                          "top_ids": top_ids.tolist(), "top_logits": values.tolist()})
    if tokenizer is not None:
        table["top_text"] = [[tokenizer.decode([token]) for token in row] for row in top_ids.tolist()]
    if answer_id is not None:
        chosen = lens[:, answer_id]  # [entry]
        table["answer_logit"] = chosen.tolist()
        table["answer_rank"] = (lens > chosen[:, None]).sum(-1).tolist()
    table.attrs.update(answer=answer_id, position=at)
    return table
