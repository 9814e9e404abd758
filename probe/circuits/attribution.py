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


def _components(model: nn.Module, ids: torch.Tensor, at: int):
    """One forward through the intervention layer: (labels ``(component, kind, layer, head)`` per writer of
    the residual stream, their vectors `[component d_model]` float64 at position `at`, the saved sites at
    `at`, W_U `[d_model vocab]`, b_U); refused where the writers do not sum to the final norm's input."""
    found = site_map(model)
    names = set(found.names())
    if "final_norm.scale" not in names:
        found.site("final_norm.scale")  # refuses in one line: no final norm, or one we cannot linearise
    w_u, b_u = _unembedding(model)
    watch = ["embed", "resid_final", "final_norm.scale", "logits"]
    for layer in range(len(found.layers)):
        watch += [f"L{layer}.head_out", f"L{layer}.mlp_out"]
    missing = [name for name in watch if name not in names]
    if missing:
        found.site(missing[0])  # refuses naming the site and why
    with torch.no_grad(), intervene(model, watch=watch, sites=found) as run:
        model(input_ids=ids)
    saved = {name: tensor[0, at].double() for name, tensor in run.saved.items()}  # [...] at the position
    labels, pieces = [("embed", "embed", None, None)], [saved["embed"][None].to(w_u.device)]
    for layer, parts in enumerate(found.layers):
        output = parts.attention.output.module
        w_o = linear_weight(output).to(w_u.device)  # [head·d_v d_model]
        z = saved[f"L{layer}.head_out"].to(w_u.device)  # [head d_v]
        heads = z.shape[0]
        pieces.append((z[:, :, None] * w_o.reshape(heads, z.shape[1], -1)).sum(1))  # [head d_model]
        labels += [(f"L{layer}H{h}", "head", layer, h) for h in range(heads)]
        bias = getattr(output, "bias", None)
        if bias is not None:
            pieces.append(bias.detach().double()[None].to(w_u.device))
            labels.append((f"L{layer}.attn_bias", "attn_bias", layer, None))
        pieces.append(saved[f"L{layer}.mlp_out"][None].to(w_u.device))
        labels.append((f"L{layer}.mlp", "mlp", layer, None))
    vectors = torch.cat(pieces)  # [component d_model]
    resid = saved["resid_final"].to(w_u.device)
    remainder = (resid - vectors.sum(0)).abs().max().item()
    if remainder > 1e-4 * max(resid.abs().max().item(), 1.0):
        raise ProbeError(f"direct logit attribution needs a residual stream that is the sum of the "
                         f"embeddings, the heads, their biases and the MLPs; {type(model).__name__}'s final "
                         f"norm input differs from that sum by {remainder:.3g} (parallel or "
                         "post-normed blocks)")
    return labels, vectors, saved, w_u, b_u


def _through_norm(model: nn.Module, vectors: torch.Tensor, scale: float) -> torch.Tensor:
    """`[n d_model]` components through the final norm with its divisor fixed: centred (a LayerNorm), / s,
    ⊙ g — so that · W_U[:, t] is each one's direct effect on token t's logit."""
    norm = final_norm(model)
    gain = norm_gain(norm)
    if isinstance(norm, nn.LayerNorm):
        vectors = vectors - vectors.mean(-1, keepdim=True)
    vectors = vectors / scale
    return vectors if gain is None else vectors * gain.to(vectors.device, torch.float64)


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
    labels, vectors, saved, w_u, b_u = _components(model, ids, at)
    direction = w_u[:, answer_id] - (0 if other_id is None else w_u[:, other_id])  # [d_model]
    scale = float(saved["final_norm.scale"].reshape(()))
    values = _through_norm(model, vectors, scale) @ direction  # [component]
    rows = [(*label, value) for label, value in zip(labels, values.tolist(), strict=True)]
    beta = getattr(final_norm(model), "bias", None)
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


def next_token_heads(model, prompt, *, tokenizer=None, position: int = -1, top: int = 5) -> pd.DataFrame:
    """Each head's direct contribution to the model's own top next-token prediction at one position, and the
    tokens whose logits it pushes up most (one forward; what the app's explorer shows for a clicked head).

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
        As :func:`direct_logit_attribution`.
    prompt : str or sequence of int
    tokenizer : transformers tokenizer, optional
    position : int
        The position whose next token is explained (default the last).
    top : int
        Tokens listed per head.

    Returns
    -------
    pandas.DataFrame
        One row per head: ``component`` ("L{l}H{h}"), ``layer``, ``head``, ``dla`` (its direct logit
        attribution to the predicted token: :func:`direct_logit_attribution`'s value with that answer and no
        other), ``pushes`` / ``pushes_logits`` (the `top` tokens by its direct effect on their logits, and
        that effect) and, with a tokenizer, ``pushes_text``. ``attrs``: ``predicted`` (the argmax of the
        model's logits there), ``predicted_logit``, ``position``.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("llama")
    >>> heads = next_token_heads(model, [5, 9, 12, 7], top=3)
    >>> len(heads), len(heads.pushes[0])
    (8, 3)
    >>> dla = direct_logit_attribution(model, [5, 9, 12, 7], answer=heads.attrs["predicted"])
    >>> bool(abs(dla[dla.kind == "head"].dla.to_numpy() - heads.dla.to_numpy()).max() < 1e-9)
    True
    """
    model, tokenizer, ids = _model_and_ids(model, prompt, tokenizer)
    at = _position(position, ids.shape[1])
    labels, vectors, saved, w_u, _ = _components(model, ids, at)
    rows = [index for index, label in enumerate(labels) if label[1] == "head"]
    scale = float(saved["final_norm.scale"].reshape(()))
    heads = _through_norm(model, vectors[rows], scale)  # [head d_model]
    logits = saved["logits"]  # [vocab]
    predicted = int(logits.argmax())
    values, top_ids = (heads @ w_u).topk(min(top, w_u.shape[1]), dim=-1)  # [head top]
    table = pd.DataFrame({"component": [labels[index][0] for index in rows],
                          "layer": [labels[index][2] for index in rows],
                          "head": [labels[index][3] for index in rows],
                          "dla": (heads @ w_u[:, predicted]).tolist(),
                          "pushes": top_ids.tolist(), "pushes_logits": values.tolist()})
    if tokenizer is not None:
        table["pushes_text"] = [[tokenizer.decode([token]) for token in row] for row in top_ids.tolist()]
    table.attrs.update(predicted=predicted, predicted_logit=float(logits[predicted]), position=at)
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


def task_attribution(model, task, *, tokenizer=None) -> pd.DataFrame:
    """Direct logit attribution of logit(correct) − logit(incorrect) on a task's clean prompts, averaged over
    its pairs, and the logit lens' read of where the answer first leads.

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
        As :func:`direct_logit_attribution`.
    task : probe.circuits.task.Task
        Its clean prompts, answers at the last position (pairs whose correct and incorrect answers are one
        token are skipped: they have no logit difference).
    tokenizer : transformers tokenizer, optional

    Returns
    -------
    pandas.DataFrame
        :func:`direct_logit_attribution`'s rows (``component, kind, layer, head``) with ``dla`` the mean over
        pairs and ``dla_std`` its standard deviation (NaN for one pair); the rows sum to the mean logit
        difference. ``attrs``: ``pairs`` (used), ``skipped``, ``logit_diff`` (the model's own mean),
        ``lens_top1`` (per stack entry of :func:`logit_lens`, the share of pairs whose correct answer is the
        lens' top token), ``lens_labels`` (the entries' labels) and ``leads`` (the first entry's label where
        that share exceeds one half and stays so to the last; None where it never does).

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> from probe.circuits.task import make_task
    >>> model, _ = build_tiny("gpt2")
    >>> task = make_task(None, [[5, 9, 12, 7], [6, 9, 13, 7]], [[5, 9, 11, 7], [6, 9, 11, 7]], [3, 3], [4, 8])
    >>> table = task_attribution(model, task)
    >>> table.attrs["pairs"], bool(abs(table.dla.sum() - table.attrs["logit_diff"]) < 1e-4)
    (2, True)
    """
    tables, tops, skipped = [], [], 0
    for clean, correct, incorrect in zip(task.clean, task.correct, task.incorrect, strict=True):
        if correct == incorrect:
            skipped += 1
            continue
        tables.append(direct_logit_attribution(model, list(clean), correct, incorrect, tokenizer=tokenizer))
        lens = logit_lens(model, list(clean), correct, tokenizer=tokenizer)
        tops.append([float(rank == 0) for rank in lens["answer_rank"]])
        labels = list(lens["label"])
    if not tables:
        raise ProbeError("every pair's correct and incorrect answers are the same token: no logit difference "
                         "to attribute")
    values = torch.tensor([table["dla"].tolist() for table in tables], dtype=torch.float64)  # [pair row]
    table = tables[0][list(COLUMNS[:-1])].copy()
    table.attrs = {}  # not the first pair's answer and position
    table["dla"] = values.mean(0).tolist()
    table["dla_std"] = values.std(0).tolist() if len(tables) > 1 else float("nan")
    share = torch.tensor(tops, dtype=torch.float64).mean(0).tolist()  # [entry]
    leads = next((labels[entry] for entry in range(len(share)) if all(s > 0.5 for s in share[entry:])), None)
    table.attrs.update(pairs=len(tables), skipped=skipped, lens_labels=labels, lens_top1=share, leads=leads,
                       logit_diff=sum(t.attrs["logit_diff"] for t in tables) / len(tables))
    return table


def attribution_lines(table: pd.DataFrame, top: int = 8) -> list[str]:
    """What ``probe circuit --task`` prints after its edges: the `top` heads by |mean DLA| (+ pushes the
    correct answer over the incorrect one) and where the logit lens first has the answer on top.

    Examples
    --------
    >>> table = pd.DataFrame({"component": ["L1H0", "L0H1"], "kind": ["head", "head"], "layer": [1, 0],
    ...                       "head": [0, 1], "dla": [2.5, -0.25], "dla_std": [0.5, 0.1]})
    >>> table.attrs.update(pairs=4, logit_diff=3.0, leads="final_post")
    >>> print("\\n".join(attribution_lines(table)))  # doctest: +NORMALIZE_WHITESPACE
    direct logit attribution on the clean prompts (4 pairs; logit(correct) − logit(incorrect) = 3.000 on
    average; + pushes the correct answer):
      L1H0   +2.500 ± 0.500
      L0H1   -0.250 ± 0.100
    logit lens: the correct answer is the top token for most pairs from final_post on
    """
    heads = table[table["kind"] == "head"]
    heads = heads.reindex(heads["dla"].abs().sort_values(ascending=False).index).head(top)
    lines = [f"direct logit attribution on the clean prompts ({table.attrs['pairs']} pairs; logit(correct) − "
             f"logit(incorrect) = {table.attrs['logit_diff']:.3f} on average; + pushes the correct answer):"]
    lines += [f"  {row.component:<6} {row.dla:+.3f} ± {row.dla_std:.3f}" for row in heads.itertuples()]
    leads = table.attrs.get("leads")
    lines.append(f"logit lens: the correct answer is the top token for most pairs from {leads} on" if leads
                 else "logit lens: the correct answer is not the top token for most pairs at the last entry")
    return lines
