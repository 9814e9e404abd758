"""How much of a task's behaviour a set of edges carries: every edge outside the circuit patched to the
corrupted run (Hanna et al. 2024's ``evaluate_graph``, patching intervention), against random circuits of the
same size, and the curve's areas as MIB's circuit-localisation track scores them (:func:`mib_areas`).

A receiver's input in the patched run is its senders' outputs in this run for the circuit's edges and their
outputs in the corrupted run for every other edge: input_v = Σ_{u ∈ C} a_u(run) + Σ_{u ∉ C} a_u(corrupted)
(+ the constant biases). With no edge kept the run is the corrupted run; with every edge kept, the clean run.
The share recovered is (m(C) − m(corrupted)) / (m(clean) − m(corrupted)).

**CPR and CMD** (Mueller et al. 2025, MIB; ``evaluate_area_under_curve`` in hannamw/MIB-circuit-track's
``MIB_circuit_track/evaluation.py``, read at commit b759df3): the curve is evaluated at the top-n edges for
n = int(p · E), p in :data:`MIB_PERCENTAGES` (E = every edge), and with x = p itself (linear, not n / E, and
from p = 0.001, not 0) the trapezoid rule gives CPR = ∫ f dp (higher is better) and CMD = ∫ |1 − f| dp
(lower is better), f the share recovered. :func:`faithfulness_curve` evaluates those points with its own.

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> from probe.circuits.task import repeat_task
>>> from probe.circuits.edges import edge_scores
>>> model, tokenizer = build_tiny("llama")
>>> task = repeat_task(tokenizer, pairs=2, block=4)
>>> curve = faithfulness_curve(model, task, edge_scores(model, task, method="eap"), sizes=[0, 82], random=0)
>>> [round(share, 6) for share in curve["share"]]
[0.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch

from probe.circuits.edges import contributions, model_graph, output_weights
from probe.circuits.task import Task, metric_values
from probe.engine.edits import Edit
from probe.engine.interventions import intervene
from probe.engine.sites import site_map
from probe.errors import ProbeError
from probe.models import LoadedModel

# MIB's x-axis: the share of edges kept (MIB_circuit_track/evaluation.py, `percentages`)
MIB_PERCENTAGES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def mib_sizes(total: int) -> list[int]:
    """The circuit sizes MIB evaluates for a graph of `total` edges: int(p · total) for each p of
    :data:`MIB_PERCENTAGES` (truncated, as MIB's ``int(pct * n_scored_items)``; repeats kept, one per p).

    Examples
    --------
    >>> mib_sizes(110)
    [0, 0, 0, 1, 2, 5, 11, 22, 55, 110]
    """
    return [int(p * total) for p in MIB_PERCENTAGES]


def mib_areas(shares: Sequence[float], percentages: Sequence[float] = MIB_PERCENTAGES) -> tuple[float, float]:
    """MIB's CPR and CMD of a faithfulness curve: the trapezoid areas under f and under |1 − f| over x = the
    share of edges kept (`percentages`, MIB's by default), f = `shares` at those points.

    Parameters
    ----------
    shares : sequence of float
        The share of the clean − corrupted gap kept at each percentage (one per point, in order).
    percentages : sequence of float
        The x-axis (increasing).

    Returns
    -------
    (float, float)
        (CPR, CMD); NaN where a share is NaN (unknown).

    Examples
    --------
    >>> cpr, cmd = mib_areas([0.0, 0.5, 1.0], [0.0, 0.5, 1.0])  # f = x: area 1/2, |1 − f| area 1/2
    >>> round(cpr, 12), round(cmd, 12)
    (0.5, 0.5)
    >>> round(mib_areas([1.0] * 10)[0], 12)  # a perfect curve over MIB's x from 0.001 to 1
    0.999
    """
    if len(shares) != len(percentages) or len(shares) < 2:
        raise ProbeError(f"{len(shares)} shares for {len(percentages)} percentages: give one per point (≥ 2)")
    if any(math.isnan(float(value)) for value in shares):
        return float("nan"), float("nan")
    cpr = cmd = 0.0
    for index in range(len(shares) - 1):
        width, f1, f2 = percentages[index + 1] - percentages[index], shares[index], shares[index + 1]
        cpr += width * (f1 + f2) / 2
        cmd += width * (abs(1.0 - f1) + abs(1.0 - f2)) / 2
    return cpr, cmd


def curve_areas(curve: pd.DataFrame, total: int, column: str = "share") -> tuple[float, float]:
    """(CPR, CMD) of `curve`'s `column` (``share``, or ``random_share`` for the random circuits) read at MIB's
    sizes for `total` edges (:func:`mib_sizes`); NaN where the curve lacks one of those sizes.

    Examples
    --------
    >>> curve = pd.DataFrame({"edges": [0, 1, 2, 5, 10], "share": [0.0, 0.2, 0.4, 1.0, 1.0]})
    >>> [round(value, 6) for value in curve_areas(curve, 10)]  # sizes 0,0,0,0,0,0,1,2,5,10
    [0.745, 0.254]
    """
    values = dict(zip(curve["edges"].astype(int), curve[column].astype(float), strict=True))
    shares = [values.get(n, float("nan")) for n in mib_sizes(total)]
    return mib_areas(shares)


def _kept_matrix(graph, table: pd.DataFrame, chosen) -> torch.Tensor:
    """`[sender receiver]` bool: the edges of `table` rows `chosen` (row indices)."""
    senders = {node.name: index for index, node in enumerate(graph.senders)}
    receivers = {(node.name, node.input): index for index, node in enumerate(graph.receivers)}
    kept = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.bool)
    for row in table.loc[list(chosen)].itertuples():
        kept[senders[row.sender], receivers[(row.receiver, row.input)]] = True
    return kept


def _patched_run(model, found, graph, weights, missing: torch.Tensor, ids: torch.Tensor,
                 corrupted: torch.Tensor) -> torch.Tensor:
    """The last position's logits `[batch vocab]` of the clean `ids` with every receiver's input changed by
    Σ over its `missing` senders of a_u(corrupted) − a_u(this run) (`corrupted`: `[batch seq sender
    d_model]`)."""
    index = {node.name: number for number, node in enumerate(graph.senders)}
    current = torch.zeros_like(corrupted)  # [batch seq sender d_model], filled as the run goes

    def record(name: str, tensor: torch.Tensor) -> None:
        if name == "embed" or name.endswith("mlp_out"):
            node = "embed" if name == "embed" else f"{name.split('.')[0]}.mlp"
            current[:, :, index[node]] = tensor.to(current.dtype)
            return
        layer = int(name[1:].split(".")[0])
        for head in range(tensor.shape[2]):  # tensor: [batch seq head d_v]
            out = weights[layer][head].to(current)  # [d_v d_model]
            current[:, :, index[f"L{layer}H{head}"]] = tensor[:, :, head].to(current.dtype) @ out

    def patcher(columns: list[int], per_head: bool):
        def fn(tensor: torch.Tensor) -> torch.Tensor:
            change = torch.einsum("bqsd,sr->bqrd", corrupted - current,
                                  missing[:, columns].to(current))  # [batch seq receivers d_model]
            return tensor + (change if per_head else change[:, :, 0]).to(tensor.dtype)
        return fn
    edit = {}
    for site in sorted({node.site for node in graph.receivers}):
        columns = [number for number, node in enumerate(graph.receivers) if node.site == site]
        edit[site] = Edit.apply(patcher(columns, graph.receivers[columns[0]].head is not None))
    watch = {node.site: record for node in graph.senders}
    with torch.no_grad(), intervene(model, watch=watch, edit=edit, sites=found):
        return model(input_ids=ids, use_cache=False).logits[:, -1].to(current.dtype)


class _Prepared:
    """What every circuit of one model and task shares: sites, graph, W_O, and per batch the clean ids,
    answers, the corrupted run's contributions and the clean logits."""

    def __init__(self, model, task: Task) -> None:
        self.model = model.model if isinstance(model, LoadedModel) else model
        self.task = task
        self.found = site_map(self.model)
        self.graph = model_graph(self.found)
        parameter = next(self.model.parameters())
        self.weights = output_weights(self.found, torch.promote_types(parameter.dtype, torch.float32))
        self.batches = []
        for ids, bad_ids, correct, incorrect in task.batches(parameter.device):
            corrupted, _ = contributions(self.model, self.found, self.graph, bad_ids, self.weights)
            _, clean_logits = contributions(self.model, self.found, self.graph, ids, self.weights)
            self.batches.append((ids, correct, incorrect, corrupted, clean_logits))

    def metric(self, table: pd.DataFrame, chosen) -> float:
        missing = self.graph.valid() & ~_kept_matrix(self.graph, table, chosen)  # [sender receiver]
        total = 0.0
        for ids, correct, incorrect, corrupted, clean_logits in self.batches:
            logits = _patched_run(self.model, self.found, self.graph, self.weights, missing, ids, corrupted)
            total += float(metric_values(self.task.metric, logits, correct, incorrect, clean_logits).sum())
        return total / len(self.task)


def circuit_metric(model, task: Task, table: pd.DataFrame, chosen) -> float:
    """The task's metric (mean over pairs) with only the edges of `table` rows `chosen` kept clean.

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
    task : Task
    table : pandas.DataFrame
        :func:`~probe.circuits.edges.edge_scores`' table of this model.
    chosen : iterable of index labels
        The rows (edges) in the circuit.

    Returns
    -------
    float

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> from probe.circuits.task import make_task
    >>> from probe.circuits.edges import edge_scores
    >>> model, _ = build_tiny("llama")
    >>> task = make_task(None, [[3, 5, 6, 7]], [[3, 8, 6, 7]], [5], [8])
    >>> table = edge_scores(model, task, method="eap")
    >>> abs(circuit_metric(model, task, table, table.index) - table.attrs["clean_metric"]) < 1e-6  # all kept
    True
    """
    return _Prepared(model, task).metric(table, chosen)


def faithfulness_curve(model, task: Task, table: pd.DataFrame, sizes: Sequence[int] | None = None,
                       random: int = 5, seed: int = 0) -> pd.DataFrame:
    """The share of the clean − corrupted metric gap recovered by the top-n edges by |score|, per n, beside
    random circuits of n edges.

    Parameters
    ----------
    model : torch.nn.Module or probe.models.LoadedModel
    task : Task
    table : pandas.DataFrame
        :func:`~probe.circuits.edges.edge_scores` of this model and task (its ``abs_rank`` orders the edges).
    sizes : sequence of int, optional
        Circuit sizes (default: 0, 1, 2, 5, 10, 20, 50, 100, 200, … up to every edge, and MIB's sizes,
        :func:`mib_sizes`).
    random : int, default 5
        Random circuits per size (uniform over the table's edges).
    seed : int, default 0

    Returns
    -------
    pandas.DataFrame
        ``edges``, ``metric``, ``share``, ``random_share`` (mean over the random circuits; NaN without),
        ``random_max``. ``attrs``: ``clean_metric``, ``corrupted_metric``, ``total_edges``, ``cpr``,
        ``cmd``, ``random_cpr``, ``random_cmd`` (:func:`curve_areas`; NaN where `sizes` lacks MIB's).
    """
    total = len(table)
    if sizes is None:
        steps = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
        sizes = sorted({0, total, *(n for n in steps if n < total), *mib_sizes(total)})
    if any(not 0 <= n <= total for n in sizes):
        raise ProbeError(f"circuit sizes must be between 0 and the {total} edges")
    order = table.sort_values("abs_rank").index
    prepared = _Prepared(model, task)
    clean, corrupted = prepared.metric(table, table.index), prepared.metric(table, [])
    gap = clean - corrupted
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for n in sizes:
        value = prepared.metric(table, order[:n])
        drawn = [prepared.metric(table, table.index[torch.randperm(total, generator=generator)[:n].numpy()])
                 for _ in range(random)]
        shares = [(other - corrupted) / gap for other in drawn]
        rows.append({"edges": n, "metric": value, "share": (value - corrupted) / gap,
                     "random_share": sum(shares) / len(shares) if shares else float("nan"),
                     "random_max": max(shares) if shares else float("nan")})
    curve = pd.DataFrame(rows)
    curve.attrs.update(clean_metric=clean, corrupted_metric=corrupted, total_edges=total)
    cpr, cmd = curve_areas(curve, total)
    random_cpr, random_cmd = curve_areas(curve, total, "random_share")
    curve.attrs.update(cpr=cpr, cmd=cmd, random_cpr=random_cpr, random_cmd=random_cmd)
    return curve


def smallest_circuit(curve: pd.DataFrame, share: float = 0.8) -> int | None:
    """The fewest edges on `curve` whose share reaches `share` (None: none does).

    Examples
    --------
    >>> smallest_circuit(pd.DataFrame({"edges": [0, 5, 10], "share": [0.0, 0.85, 0.99]}))
    5
    """
    reached = curve[curve["share"] >= share]
    return None if reached.empty else int(reached["edges"].min())


__all__ = ["MIB_PERCENTAGES", "circuit_metric", "curve_areas", "faithfulness_curve", "mib_areas", "mib_sizes",
           "smallest_circuit"]
