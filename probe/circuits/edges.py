"""Edge attribution over the whole graph of a decoder for a :class:`~probe.circuits.task.Task`: EAP, EAP-IG
and exact edge patching, every read and edit through :func:`probe.engine.interventions.intervene`.

The graph (as Hanna et al.'s EAP-IG and ACDC's): senders are the embeddings (``embed``: the residual stream
after them), every head (``L{l}H{h}``: its output through its rows of the output projection, z_h W_O^h) and
every MLP (``L{l}.mlp``: its output); receivers are every head's query, key and value inputs separately
(``L{l}H{h}`` with input ``q`` / ``k`` / ``v``: the sites ``L{l}.q_in`` … as that head reads them; with
grouped-query attention the key / value receivers are the kv heads, ``L{l}KV{g}``), every MLP's input
(``mlp``) and the logits (``logits``: the final norm's input). An edge u → v exists where u writes the
residual stream before v reads it: the embeddings feed everything, a head feeds its own layer's MLP and every
later layer, every sender feeds the logits. In a pre-norm sequential block every receiver's input is the sum
of its senders' contributions (plus constant biases), so patching one edge is adding one difference there.

Scores (``score`` ≈ metric(edge patched) − metric(clean), the mean over pairs; a negative score with
``logit_diff`` means the edge carries the clean behaviour):

* ``exact``: the clean run with the receiver's input changed by Δ_u = a_u(corrupted) − a_u(clean) (the
  sender's corrupted contribution instead of its clean one, everything else clean); one forward per edge,
  batched as copies of the pairs;
* ``eap`` (Syed et al. 2023): Σ_positions Δ_u · ∂metric/∂(input of v) on the clean run, mean over pairs;
* ``eap-ig`` (Hanna et al. 2024): the same with the gradient averaged over the `steps` runs whose embeddings
  are corrupted + k/steps · (clean − corrupted), k = 0 … steps − 1 (``hannamw/EAP-IG``'s
  ``get_scores_eap_ig``, its ``EAP-IG-inputs``: the input node interpolated, the activation differences from
  the plain clean and corrupted runs);
* ``eap-ig-activations`` (their ``get_scores_ig_activations``): the gradient averaged over one run per node
  and step — the embeddings, each layer's heads together, each MLP in turn replaced by corrupted + k/steps ·
  (clean − corrupted), k = 1 … steps, the rest of the run computed from it (no gradient flows through the
  replaced node); (2 · layers + 1) · steps forward-backwards;
* ``clean-corrupted`` (their ``get_scores_clean_corrupted``): the gradient averaged over the plain clean
  and the plain corrupted run.

``exact`` is their ``get_scores_exact`` with the ``patching`` intervention (``evaluate_graph`` with every
edge but one: the receiver reads its clean input plus a_u(corrupted) − a_u(this run), and a_u(this run) is
the clean one since u precedes the only patched edge). The gradient methods take only the receivers'
gradients (``backward(inputs=…)``): the model's parameters, their ``requires_grad`` and ``.grad`` are left
alone. How each agrees with ``exact`` on zoo:induction: docs/circuits.md.

Cost: eap = 1 forward + 1 forward-backward (the corrupted run records the senders; the clean
forward-backward records them too and gives the clean logits); eap-ig = 2 forwards + `steps`
forward-backwards; exact = 2 forwards + one forward of the pairs per edge. The activation differences are
built once, `[sender batch*seq*d_model]`, and contracted per receiver order with the senders before it;
a layer's q / k / v gradients come head-major from one norm VJP (:mod:`probe.engine.head_inputs`)
(docs/benchmarks.md, ``benchmarks/edges.py``).

Longer than 450 lines because the graph, the gradient and the exact scores and the table share
one batch loop and the graph's indexing; split up, the helpers would have to be exported.

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> from probe.circuits.task import repeat_task
>>> model, tokenizer = build_tiny("llama")
>>> table = edge_scores(model, repeat_task(tokenizer, pairs=2, block=4), method="eap")
>>> list(table.columns[:5]), len(table)
(['sender', 'receiver', 'input', 'score', 'abs_rank'], 82)
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate

import pandas as pd
import torch
from torch import nn

from probe.anatomy import linear_weight
from probe.circuits.task import Task, metric_values
from probe.engine.edits import Edit
from probe.engine.interventions import intervene
from probe.engine.sites import SiteMap, site_map
from probe.errors import ProbeError
from probe.models import LoadedModel

METHODS = ("eap", "eap-ig", "exact", "eap-ig-activations", "clean-corrupted")
INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class Node:
    """A sender or a receiver: its name, the site it is read at, its head (per-head sites), its input
    kind (receivers: q / k / v / mlp / logits; senders: out) and its order (u → v exists when u.order <
    v.order)."""

    name: str
    site: str
    head: int | None
    input: str
    order: int
    layer: int


@dataclass(frozen=True)
class Graph:
    """The senders and receivers of one model (:func:`model_graph`)."""

    senders: tuple[Node, ...]
    receivers: tuple[Node, ...]

    def valid(self) -> torch.Tensor:
        """`[sender receiver]` bool: where an edge exists."""
        sender = torch.tensor([node.order for node in self.senders])
        receiver = torch.tensor([node.order for node in self.receivers])
        return sender[:, None] < receiver[None, :]

    def edges(self) -> list[tuple[int, int]]:
        """(sender index, receiver index) of every edge, senders first."""
        return [tuple(pair) for pair in self.valid().nonzero().tolist()]


def model_graph(found: SiteMap) -> Graph:
    """The edge-attribution graph of a model from its sites (module doc).

    Parameters
    ----------
    found : SiteMap
        :func:`probe.engine.sites.site_map` of the model.

    Returns
    -------
    Graph

    Raises
    ------
    ProbeError
        A post-norm (BERT-style) block, or a layer without per-head inputs, head outputs or the final norm's
        input: the residual stream is not a sum of the senders' contributions there.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> graph = model_graph(site_map(build_tiny("llama")[0]))  # 2 layers, 4 heads, 2 kv heads, MLPs
    >>> len(graph.senders), len(graph.receivers), len(graph.edges())
    (11, 19, 82)
    """
    names = set(found.names())
    senders = [Node("embed", "embed", None, "out", 0, -1)]
    receivers = []
    for layer, parts in enumerate(found.layers):
        if parts.post_norm:
            raise ProbeError("edge attribution needs pre-norm blocks: in a post-norm (BERT-style) block the "
                             "residual stream is not the sum of its senders' outputs")
        need = [f"L{layer}.{kind}" for kind in ("q_in", "k_in", "v_in", "head_out")]
        missing = [name for name in need if name not in names]
        if missing:
            raise ProbeError(f"site {missing[0]} is not available: {found.why.get(missing[0], 'not found')}")
        heads, kv = found.site(f"L{layer}.q_in").heads, found.site(f"L{layer}.k_in").heads
        for kind in INPUTS:
            count = heads if kind == "q" else kv
            label = "H" if count == heads else "KV"
            receivers += [Node(f"L{layer}{label}{head}", f"L{layer}.{kind}_in", head, kind, 2 * layer + 1,
                               layer) for head in range(count)]
        senders += [Node(f"L{layer}H{head}", f"L{layer}.head_out", head, "out", 2 * layer + 1, layer)
                    for head in range(found.site(f"L{layer}.head_out").heads)]
        if f"L{layer}.mlp_in" in names and f"L{layer}.mlp_out" in names:
            receivers.append(Node(f"L{layer}.mlp", f"L{layer}.mlp_in", None, "mlp", 2 * layer + 2, layer))
            senders.append(Node(f"L{layer}.mlp", f"L{layer}.mlp_out", None, "out", 2 * layer + 2, layer))
    if "resid_final" not in names:
        raise ProbeError(f"site resid_final is not available: {found.why.get('resid_final', 'not found')}")
    layers = len(found.layers)
    receivers.append(Node("logits", "resid_final", None, "logits", 2 * layers + 1, layers))
    return Graph(tuple(senders), tuple(receivers))


def last_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The logits at the last position `[batch vocab]`, only those computed where the model's forward takes
    ``logits_to_keep`` (transformers' causal LMs: the unembedding of one position, not of every one).

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("gpt2")
    >>> ids = torch.tensor([[1, 5, 9, 5]])
    >>> with torch.no_grad():
    ...     bool(torch.allclose(last_logits(model, ids), model(input_ids=ids).logits[:, -1]))
    True
    """
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    return model(input_ids=ids, use_cache=False, **keep).logits[:, -1]


def output_weights(found: SiteMap, dtype: torch.dtype) -> list[torch.Tensor]:
    """Per layer, each head's rows of the output projection: `[head d_v d_model]` in `dtype`."""
    weights = []
    for layer, parts in enumerate(found.layers):
        site = found.site(f"L{layer}.head_out")
        weight = linear_weight(parts.attention.output.module, dtype)  # [head*d_v d_model]
        weights.append(weight.unflatten(0, (site.heads, site.width)))  # [head d_v d_model]
    return weights


def contributions(model: nn.Module, found: SiteMap, graph: Graph, ids: torch.Tensor,
                  weights: list[torch.Tensor],
                  sites: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sender's contribution to the residual stream, and the last position's logits, on `ids`.

    Parameters
    ----------
    sites : dict, optional
        Filled with the senders' sites as the model has them: {site: tensor} (``embed``, ``L{l}.mlp_out``
        `[batch seq d_model]`, ``L{l}.head_out`` `[batch seq head d_v]`; the model's dtype).

    Returns
    -------
    tuple of torch.Tensor
        `[batch seq sender d_model]` at least float32 (the senders of `graph`, in order) and `[batch vocab]`.
    """
    saved: dict[str, torch.Tensor] = {}
    logits = _recorded_logits(model, found, graph, ids, saved)
    work = torch.promote_types(logits.dtype, torch.float32)
    parts = [_site_parts(saved, node, weights, work) for node in _site_senders(graph)]
    if sites is not None:
        sites.update(saved)
    return torch.cat(parts, 2), logits.to(work)  # [batch seq sender d_model], [batch vocab]


def _site_senders(graph: Graph) -> list[Node]:
    """The first sender of each sender site, in order: embed, then per layer its heads (one site), its MLP."""
    return list({node.site: node for node in reversed(graph.senders)}.values())[::-1]


def _site_parts(saved: dict, node: Node, weights: list[torch.Tensor], work: torch.dtype) -> torch.Tensor:
    """The contributions of the senders at `node`'s site: `[batch seq n d_model]` in `work`."""
    tensor = saved[node.site].to(work)
    if node.head is None:
        return tensor[:, :, None]
    return torch.einsum("bqhv,hvd->bqhd", tensor, weights[node.layer].to(tensor))  # every head: z_h W_O^h


def _recorded_logits(model: nn.Module, found: SiteMap, graph: Graph, ids: torch.Tensor,
                     sites: dict) -> torch.Tensor:
    """One forward without gradients: the last position's logits `[batch vocab]` (the model's dtype);
    `sites` filled with the senders' sites ({site: tensor}, as :func:`contributions` documents)."""
    watch = sorted({node.site for node in graph.senders})
    with torch.no_grad(), intervene(model, watch=watch, sites=found) as run:
        logits = last_logits(model, ids)
    sites.update(run.saved)
    return logits


def _differences(graph: Graph, clean: dict, corrupted: dict, weights: list[torch.Tensor],
                 work: torch.dtype) -> torch.Tensor:
    """Δ_u = a_u(corrupted) − a_u(clean) of every sender from the two runs' sender sites, written straight
    into the layout the contractions read, `[sender batch*seq*d_model]` in `work`: the only full copy."""
    batch, seq, width = corrupted["embed"].shape
    flat = torch.empty(len(graph.senders), batch * seq * width, dtype=work, device=corrupted["embed"].device)
    start = 0
    for node in _site_senders(graph):
        part = _site_parts(corrupted, node, weights, work) - _site_parts(clean, node, weights, work)
        flat[start:start + part.shape[2]].view(-1, batch, seq, width).copy_(part.permute(2, 0, 1, 3))
        start += part.shape[2]  # [n batch seq d_model] written
    return flat


def _backward(model, found, graph, task, ids, edit, correct, incorrect, clean_logits, watch=()):
    """One forward-backward keeping the receivers' gradients (``backward(inputs=…)``: the parameters and
    their ``.grad`` are left alone) and saving the `watch` sites: (the run, the clean logits: `clean_logits`,
    or this run's own, detached, when None)."""
    sites = sorted({node.site for node in graph.receivers})
    with torch.enable_grad(), intervene(model, watch=watch, edit=edit, grad=sites, sites=found) as run:
        logits = last_logits(model, ids)
        if clean_logits is None:  # the clean run itself: the reference of ``kl``, no gradient through it
            clean_logits = logits.detach().to(torch.promote_types(logits.dtype, torch.float32))
        metric = metric_values(task.metric, logits, correct, incorrect, clean_logits).sum()
        metric.backward(inputs=list({id(kept): kept for kept in run.kept.values()}.values()))
    return run, clean_logits


def _contract(graph: Graph, run, flat: torch.Tensor) -> torch.Tensor:
    """Σ over pairs and positions of Δ_u · ∂metric/∂(input of v) after one backward: `[sender receiver]`
    float64. One product per receiver order (a layer's q / k / v sites and every head of them at once, their
    gradients head-major from one norm VJP: ``Run.input_gradients``), only with the senders before it; a
    receiver no gradient reaches (its layer's output replaced by an edit) adds 0. Clears the run's kept
    tensors (the caller may hold the run a while)."""
    total = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    order = {node.site: node.order for node in graph.receivers}
    heads = {node.site: node.input in INPUTS for node in graph.receivers}
    reached = [site for site in sorted(order) if run.kept[site].grad is not None]
    for rank in sorted({order[site] for site in reached}):  # a layer's q / k / v sites: one read of Δ
        sites = [site for site in reached if order[site] == rank]
        if all(heads[site] for site in sites):
            grad = run.input_gradients(sites)  # [Σ head batch seq d_model]
        else:  # the MLP's input or the logits' (one site)
            grad = torch.stack([run.grads[site] for site in sites])  # [site batch seq d_model]
        count = sum(node.order < rank for node in graph.senders)  # senders are in order: those before
        products = (flat[:count] @ grad.to(flat.dtype).flatten(1).T).double().cpu()  # [sender Σ heads]
        widths = [sum(node.site == site for node in graph.receivers) for site in sites]  # heads, or 1
        start = dict(zip(sites, [0, *accumulate(widths)][:-1], strict=True))
        for index, node in enumerate(graph.receivers):
            if node.site in start:
                total[:count, index] += products[:, start[node.site] + (node.head or 0)]
    run.kept.clear()
    run.inputs.clear()
    return total


def _gradient_runs(method: str, graph: Graph, ids: torch.Tensor, bad_ids: torch.Tensor, clean: dict,
                   corrupted: dict, steps: int) -> list[tuple[torch.Tensor, dict]]:
    """The forward-backwards whose gradients a gradient method averages: (input ids, edits) each (module
    doc); `clean` / `corrupted`: the senders' sites of the plain runs (:func:`contributions`)."""
    if method == "clean-corrupted":
        return [(ids, {}), (bad_ids, {})]

    def between(site: str, alpha: float) -> dict:
        return {site: Edit.replace(corrupted[site] + alpha * (clean[site] - corrupted[site]))}
    if method == "eap-ig":
        return [(ids, between("embed", step / steps)) for step in range(steps)]
    nodes = list(dict.fromkeys(node.site for node in graph.senders))  # embed, then per layer heads and MLP
    return [(ids, between(site, step / steps)) for site in nodes for step in range(1, steps + 1)]


def _exact_scores(model, found, graph, task, ids, correct, incorrect, clean_logits, delta, clean_metric,
                  max_rows: int, scale: float, edges: list[tuple[int, int]]) -> torch.Tensor:
    """metric(clean with one edge's Δ added at its receiver) − metric(clean), summed over pairs, per edge of
    `edges`: `[sender receiver]` float64 (NaN elsewhere)."""
    total = torch.full((len(graph.senders), len(graph.receivers)), float("nan"), dtype=torch.float64)
    batch, dtype = len(ids), next(model.parameters()).dtype
    per = max(1, max_rows // batch)
    for start in range(0, len(edges), per):
        chunk = edges[start:start + per]
        copies = len(chunk)
        values: dict[str, torch.Tensor] = {}
        masks: dict[str, torch.Tensor] = {}
        for copy, (sender, receiver) in enumerate(chunk):
            node = graph.receivers[receiver]
            site = found.site(node.site)
            if node.site not in values:
                values[node.site] = delta.new_zeros(copies * batch, *delta.shape[1:2], delta.shape[-1])
                if site.heads:
                    masks[node.site] = torch.zeros(copies * batch, 1, site.heads, dtype=torch.bool,
                                                   device=delta.device)
            rows = slice(copy * batch, (copy + 1) * batch)
            values[node.site][rows] = scale * delta[:, :, sender]
            if site.heads:
                masks[node.site][rows, :, node.head] = True
        edit = {}
        for name, value in values.items():
            value = value.to(dtype)
            if name in masks:
                edit[name] = Edit.add(value[:, :, None], where=masks[name])  # [rows seq 1 d_model]
            else:
                edit[name] = Edit.add(value)  # [rows seq d_model]
        with torch.no_grad(), intervene(model, edit=edit, sites=found):
            logits = last_logits(model, ids.repeat(copies, 1)).to(delta.dtype)
        patched = metric_values(task.metric, logits, correct.repeat(copies), incorrect.repeat(copies),
                                clean_logits.repeat(copies, 1))  # [copies*batch]
        change = (patched.view(copies, batch) - clean_metric[None]).sum(1).double().cpu()  # [copies]
        for copy, (sender, receiver) in enumerate(chunk):
            total[sender, receiver] = change[copy]
    return total


def edge_scores(model, task: Task, method: str = "eap-ig", steps: int = 5, max_rows: int = 256,
                scale: float = 1.0, edges: Iterable[tuple[str, str, str]] | None = None) -> pd.DataFrame:
    """Every edge of the model's graph scored for `task` (module doc).

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
        A pre-norm decoder (causal LM).
    task : Task
        Pairs, answers and the metric.
    method : {"eap-ig", "eap", "exact", "eap-ig-activations", "clean-corrupted"}, default "eap-ig"
    steps : int, default 5
        EAP-IG's interpolation steps (Hanna et al.'s default in their experiments).
    max_rows : int, default 256
        Exact patching: rows per patched forward (copies of the pairs, one edge per copy).
    scale : float, default 1.0
        Exact patching adds scale · Δ_u at the receiver (1: patching; a small scale divided out checks EAP to
        first order).
    edges : iterable of (str, str, str), optional
        Only these edges, as (``sender``, ``receiver``, ``input``) of the table: exact patching runs only
        them (e.g. to check a circuit on a model too big to patch every edge), the table has only their rows.
        Default: every edge.

    Returns
    -------
    pandas.DataFrame
        One row per edge: ``sender``, ``receiver``, ``input`` (q / k / v / mlp / logits), ``score`` (mean over
        pairs; exact: divided by `scale`), ``abs_rank`` (1 = largest |score|), ``sender_layer``,
        ``receiver_layer`` (−1: embeddings; the layer count: logits), ``method``, ``metric``,
        ``corruption``. ``attrs``: ``clean_metric``, ``corrupted_metric`` (the task's metric on the clean and
        the corrupted prompts), ``pairs``.

    Raises
    ------
    ProbeError
        Unknown method, steps < 1, an edge not in the model's graph, or a model whose graph cannot be built
        (:func:`model_graph`).

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> from probe.circuits.task import make_task
    >>> model, _ = build_tiny("llama")
    >>> task = make_task(None, [[3, 5, 6, 7]], [[3, 8, 6, 7]], [5], [8])
    >>> table = edge_scores(model, task, method="exact")
    >>> int(table["abs_rank"].min()), table["input"].unique().tolist()
    (1, ['q', 'k', 'v', 'mlp', 'logits'])
    """
    if method not in METHODS:
        raise ProbeError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    if steps < 1:
        raise ProbeError("steps must be ≥ 1")
    model = model.model if isinstance(model, LoadedModel) else model
    vocab = model.get_input_embeddings().num_embeddings
    every = [token for ids in (*task.clean, *task.corrupted, task.correct, task.incorrect) for token in ids]
    largest = max(every)
    if largest >= vocab or min(every) < 0:
        raise ProbeError(f"the task has token id {largest} (or a negative one): the model's vocabulary has "
                         f"ids 0..{vocab - 1}; was the task tokenized for another model?")
    found = site_map(model)
    graph = model_graph(found)
    chosen = _chosen(graph, edges)
    device = next(model.parameters()).device
    weights = output_weights(found, torch.promote_types(next(model.parameters()).dtype, torch.float32))
    total = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    clean_sum = corrupted_sum = 0.0
    work = torch.promote_types(next(model.parameters()).dtype, torch.float32)
    for ids, bad_ids, correct, incorrect in task.batches(device):
        clean_sites: dict[str, torch.Tensor] = {}
        bad_sites: dict[str, torch.Tensor] = {}
        bad_logits = _recorded_logits(model, found, graph, bad_ids, bad_sites).to(work)
        if method == "eap":  # 1 forward + 1 forward-backward: the clean one records the senders too
            run, clean_logits = _backward(model, found, graph, task, ids, {}, correct, incorrect, None,
                                          sorted(bad_sites))
            total += _contract(graph, run, _differences(graph, run.saved, bad_sites, weights, work))
        else:
            clean_logits = _recorded_logits(model, found, graph, ids, clean_sites).to(work)
            flat = _differences(graph, clean_sites, bad_sites, weights, work)  # [sender batch*seq*d_model]
        clean_metric = metric_values(task.metric, clean_logits, correct, incorrect, clean_logits)
        clean_sum += float(clean_metric.sum())
        corrupted_sum += float(metric_values(task.metric, bad_logits, correct, incorrect, clean_logits).sum())
        if method == "exact":
            delta = flat.view(len(graph.senders), *ids.shape, -1).permute(1, 2, 0, 3)  # [b seq sender d]
            total += _exact_scores(model, found, graph, task, ids, correct, incorrect, clean_logits, delta,
                                   clean_metric, max_rows, scale, chosen) / scale
        elif method != "eap":
            runs = _gradient_runs(method, graph, ids, bad_ids, clean_sites, bad_sites, steps)
            total += sum(_contract(graph, _backward(model, found, graph, task, run_ids, edit, correct,
                                                    incorrect, clean_logits)[0], flat)
                         for run_ids, edit in runs) / len(runs)  # Σ Δ · each run's gradient, averaged
    scores = total / len(task)
    return _table(graph, chosen, scores, method, task, clean_sum / len(task), corrupted_sum / len(task))


def _chosen(graph: Graph, edges: Iterable[tuple[str, str, str]] | None) -> list[tuple[int, int]]:
    """(sender index, receiver index) of `edges` ((sender, receiver, input) names), or every edge."""
    every = graph.edges()
    if edges is None:
        return every
    index = {(graph.senders[s].name, graph.receivers[r].name, graph.receivers[r].input): (s, r)
             for s, r in every}
    chosen = []
    for edge in edges:
        if tuple(edge) not in index:
            raise ProbeError(f"edge {tuple(edge)} is not in the model's graph: give (sender, receiver,"
                             " input) as in a row of edge_scores' table, e.g. ('L0H1', 'L1H0', 'k')")
        chosen.append(index[tuple(edge)])
    if not chosen:
        raise ProbeError("edges= is empty: give at least one (sender, receiver, input), or None for all")
    return chosen


def _table(graph: Graph, edges: list[tuple[int, int]], scores: torch.Tensor, method: str, task: Task,
           clean: float, corrupted: float) -> pd.DataFrame:
    rows = []
    for sender, receiver in edges:
        s, r = graph.senders[sender], graph.receivers[receiver]
        rows.append({"sender": s.name, "receiver": r.name, "input": r.input,
                     "score": float(scores[sender, receiver]), "sender_layer": s.layer,
                     "receiver_layer": r.layer})
    table = pd.DataFrame(rows)
    table.insert(4, "abs_rank", table["score"].abs().rank(ascending=False, method="first").astype(int))
    table["method"], table["metric"], table["corruption"] = method, task.metric, task.corruption
    table.attrs.update(clean_metric=clean, corrupted_metric=corrupted, pairs=len(task))
    return table


def edges_into(table: pd.DataFrame, receiver: str, input: str) -> pd.DataFrame:
    """The rows of `table` into one receiver input, by |score| (largest first).

    Examples
    --------
    >>> table = pd.DataFrame({"sender": ["a", "b"], "receiver": ["r", "r"], "input": ["k", "k"],
    ...                       "score": [0.1, -0.5]})
    >>> edges_into(table, "r", "k")["sender"].tolist()
    ['b', 'a']
    """
    rows = table[(table["receiver"] == receiver) & (table["input"] == input)]
    return rows.iloc[rows["score"].abs().argsort()[::-1]]


__all__ = ["Graph", "METHODS", "Node", "contributions", "edge_scores", "edges_into", "last_logits",
           "model_graph", "output_weights"]
