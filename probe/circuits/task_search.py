"""A researcher's own task, end to end: the task read with the model's tokenizer, every edge scored
(:mod:`probe.circuits.edges`), the faithfulness curve drawn (:mod:`probe.circuits.faithfulness`) and the
circuit marked — the smallest top-|score| edge set on the curve whose share of the clean − corrupted gap
reaches a stated share. What ``probe circuit --task FILE`` runs and :func:`probe.show_circuit` draws.

The controls: random circuits of every size on the curve, MIB's CPR / CMD areas of the curve
(:func:`~probe.circuits.faithfulness.mib_areas`), and the untrained twins' own search
(:func:`probe.untrained.each_twin`: each twin's edge scores on the same task, its own curve and its own
clean − corrupted gap). A share is relative to its own model's gap, so the gaps are printed beside each
other: a twin that keeps 98 % of a 0.06-logit gap has found nothing.

Example
-------
>>> import probe
>>> from probe.circuits.task import repeat_task
>>> loaded = probe.models.load("zoo:induction")
>>> found = task_circuit(loaded, repeat_task(loaded.tokenizer, pairs=4))  # EAP-IG, 5 steps
>>> found.size, len(found.table)  # the top 20 of 110 edges keep >= 80 % of the logit difference
(20, 110)
>>> found.found.iloc[0][["sender", "receiver", "input"]].tolist()
['embed', 'L0H1', 'v']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from probe.circuits.edges import Graph, edge_scores, model_graph
from probe.circuits.faithfulness import faithfulness_curve, smallest_circuit
from probe.circuits.task import Task, load_task
from probe.engine.sites import site_map
from probe.errors import ProbeError
from probe.models import LoadedModel
from probe.untrained import each_twin, twin_seed


@dataclass(frozen=True, eq=False)
class TwinSearch:
    """An untrained twin's own search on the same task (the negative control of :class:`TaskCircuit`).

    Attributes
    ----------
    name : str
        The twin's name (``"untrained twin of NAME (seed S)"``).
    seed : int
    table : pandas.DataFrame
        Its edge scores (same method and steps as the model's).
    curve : pandas.DataFrame
        Its own faithfulness curve (shares of **its** gap; ``attrs`` as the model's, with ``cpr``, ``cmd``).
    size : int or None
        Its circuit by the model's rule (the fewest top-n edges keeping the share); None where none does.
    """

    name: str
    seed: int
    table: pd.DataFrame
    curve: pd.DataFrame
    size: int | None

    @property
    def gap(self) -> float:
        """Its clean − corrupted metric (the model's is :attr:`TaskCircuit.gap`)."""
        return gap(self.curve)


@dataclass(frozen=True, eq=False)
class TaskCircuit:
    """A task's scored edges, faithfulness curve and circuit (what :func:`task_circuit` returns).

    Attributes
    ----------
    model : str
        The model's name.
    table : pandas.DataFrame
        One row per edge (:func:`~probe.circuits.edges.edge_scores`' columns plus ``in_circuit`` and
        ``model``); ``attrs``: ``clean_metric``, ``corrupted_metric``.
    curve : pandas.DataFrame
        :func:`~probe.circuits.faithfulness.faithfulness_curve` (``edges``, ``share``, ``random_share``, …).
    share : float
        The share of the gap the circuit must keep.
    size : int or None
        The circuit's number of edges (the fewest on the curve reaching `share`); None where none does.
    twins : tuple of TwinSearch
        The untrained twins' own searches (empty with ``control=0``, ``--control none``).
    graph : probe.circuits.edges.Graph or None
        The graph the edges were scored on (:func:`~probe.circuits.edges.model_graph`): where
        :meth:`payload` reads each node's kind, layer, head and column; None (a table alone): read from
        the node names instead.
    """

    model: str
    table: pd.DataFrame
    curve: pd.DataFrame
    share: float
    size: int | None
    twins: tuple[TwinSearch, ...] = ()
    graph: Graph | None = None

    @property
    def gap(self) -> float:
        """The model's clean − corrupted metric (what every share of the curve is a share of)."""
        return gap(self.curve)

    @property
    def cpr(self) -> float:
        """MIB's CPR of the curve (area under the share over the share of edges kept; NaN: not evaluated)."""
        return float(self.curve.attrs.get("cpr", float("nan")))

    @property
    def cmd(self) -> float:
        """MIB's CMD of the curve (area between the share and 1; lower is better; NaN: not evaluated)."""
        return float(self.curve.attrs.get("cmd", float("nan")))

    @property
    def found(self) -> pd.DataFrame:
        """The circuit's edges, strongest first."""
        return self.table[self.table["in_circuit"]].sort_values("abs_rank")

    def lines(self, top: int = 15) -> list[str]:
        """What ``probe circuit --task`` prints: the top edges, the curve, the circuit's size, the curve's
        MIB areas and each untrained twin's own search beside the model's gap."""
        lines = summary(self.table, self.curve, top).splitlines()
        return lines + [line for twin in self.twins for line in twin_lines(twin, self)]

    def payload(self, top: int = 300) -> dict:
        """The JSON the views draw (views.js ``mountCircuit``, ``kind: "task"``): the graph's nodes in
        columns and rows (``embed``; each layer's heads, then its kv heads, then its MLP in a column of its
        own; ``logits``), the circuit's edges and the `top` other edges by |score| (the rest counted in
        ``left_out``: a 32k-edge table ships a few hundred), the curve's points and the run's numbers (NaN
        as None).

        Examples
        --------
        >>> table = pd.DataFrame({"sender": ["embed", "L0H0"], "receiver": ["L0H0", "logits"],
        ...                       "input": ["k", "logits"], "score": [0.5, -2.0], "abs_rank": [2, 1],
        ...                       "sender_layer": [-1, 0], "receiver_layer": [0, 1], "method": "eap",
        ...                       "metric": "logit_diff", "corruption": "resampled",
        ...                       "in_circuit": [False, True]})
        >>> curve = pd.DataFrame({"edges": [0, 1, 2], "share": [0.0, 0.9, 1.0],
        ...                       "random_share": [0.0, 0.2, 1.0]})
        >>> data = TaskCircuit("m", table, curve, 0.8, 1).payload(top=0)
        >>> [(node["name"], node["column"], node["row"]) for node in data["nodes"]], data["left_out"]
        ([('embed', 0, 0.0), ('L0H0', 1, 0), ('logits', 3, 0.0)], 1)
        >>> data["edges"]  # doctest: +NORMALIZE_WHITESPACE
        [{'sender': 'L0H0', 'receiver': 'logits', 'input': 'logits', 'score': -2.0, 'abs_rank': 1,
          'in_circuit': True}]
        """
        import math

        def clean(value):  # numpy scalars as Python's; NaN and ±inf as None (JSON's null)
            value = value.item() if hasattr(value, "item") else value
            return None if isinstance(value, float) and not math.isfinite(value) else value

        table = self.table.sort_values("abs_rank")
        layers = int(table["receiver_layer"].max()) if len(table) else 0  # the logits' "layer"
        names = dict.fromkeys([*table["sender"], *table["receiver"]])
        known = graph_nodes(self.graph) if self.graph is not None else {}
        missing = [name for name in names if self.graph is not None and name not in known]
        if missing:
            raise ProbeError(f"node {missing[0]} of the table is not in the circuit's graph: was the table "
                             "scored on another model?")
        nodes = [dict(known[name]) if name in known else _named_node(name, layers) for name in names]
        nodes.sort(key=lambda node: (node["column"], node["kind"] == "kv", node["index"]))
        heads = {}  # layer -> its number of query heads (the kv heads' rows follow them)
        for node in nodes:
            if node["kind"] == "head":
                heads[node["layer"]] = max(heads.get(node["layer"], 0), node["index"] + 1)
        for node in nodes:
            node["row"] = node["index"] + (heads.get(node["layer"], 0) if node["kind"] == "kv" else 0)
        rows = max([node["row"] + 1 for node in nodes] or [1])
        for node in nodes:
            if node["kind"] not in ("head", "kv"):
                node["row"] = (rows - 1) / 2  # embed, an MLP and the logits: mid-height
        in_circuit = table["in_circuit"].astype(bool)
        shown = pd.concat([table[in_circuit], table[~in_circuit].head(max(top, 0))])
        columns = ["sender", "receiver", "input", "score", "abs_rank", "in_circuit"]
        edges = [{key: clean(row[key]) for key in columns} for row in shown[columns].to_dict("records")]
        points = [{key: clean(row.get(key)) for key in ("edges", "share", "random_share")}
                  for row in self.curve.to_dict("records")]
        first = table.iloc[0] if len(table) else {}
        return {"version": 1, "kind": "task", "model": self.model, "method": clean(first.get("method")),
                "metric": clean(first.get("metric")), "corruption": clean(first.get("corruption")),
                "clean_metric": clean(self.table.attrs.get("clean_metric", float("nan"))),
                "corrupted_metric": clean(self.table.attrs.get("corrupted_metric", float("nan"))),
                "pairs": clean(self.table.attrs.get("pairs")), "share": clean(self.share), "size": self.size,
                "layers": layers, "rows": rows,
                "nodes": nodes, "edges": edges, "total_edges": len(table), "top": top,
                "left_out": len(table) - len(edges), "curve": points, "lines": self.lines(top=10),
                "notes": [line for twin in self.twins for line in twin_lines(twin, self)]}


def graph_nodes(graph: Graph) -> dict[str, dict]:
    """Each node of `graph` as the views place it: name -> ``name``, ``kind`` (``embed``, ``head``, ``kv``
    (a key / value head of grouped-query attention: a receiver only), ``mlp``, ``logits``), ``layer``
    (embed −1, logits the layer count), ``index`` (its head; 0 elsewhere) and ``column`` (its order:
    embed 0, layer l's heads 2l + 1, its MLP 2l + 2, the logits last).

    Examples
    --------
    >>> from probe.circuits.edges import model_graph
    >>> from probe.engine.sites import site_map
    >>> from probe.zoo.tiny import build_tiny
    >>> nodes = graph_nodes(model_graph(site_map(build_tiny("llama")[0])))  # 4 query heads, 2 kv heads
    >>> [(nodes[name]["kind"], nodes[name]["layer"], nodes[name]["index"], nodes[name]["column"])
    ...  for name in ("embed", "L1H3", "L1KV1", "L1.mlp", "logits")]
    [('embed', -1, 0, 0), ('head', 1, 3, 3), ('kv', 1, 1, 3), ('mlp', 1, 0, 4), ('logits', 2, 0, 5)]
    """
    senders = {node.name for node in graph.senders}
    nodes: dict[str, dict] = {}
    for node in (*graph.receivers, *graph.senders):  # a receiver's input names an MLP's and the logits' kind
        if node.head is not None:
            kind = "head" if node.name in senders else "kv"
        else:
            kind = node.input if node.input in ("mlp", "logits") else "embed"
        nodes.setdefault(node.name, {"name": node.name, "kind": kind, "layer": node.layer,
                                     "index": node.head or 0, "column": node.order})
    return nodes


def _named_node(name: str, layers: int) -> dict:
    """A node placed from its name alone (a TaskCircuit without its graph: edge_scores' naming)."""
    head = re.fullmatch(r"L(\d+)(H|KV)(\d+)", name)
    mlp = re.fullmatch(r"L(\d+)\.mlp", name)
    if head:
        layer, kind, index = int(head[1]), "head" if head[2] == "H" else "kv", int(head[3])
        column = 2 * layer + 1
    elif mlp:
        layer, kind, index, column = int(mlp[1]), "mlp", 0, 2 * int(mlp[1]) + 2
    else:
        layer = -1 if name == "embed" else layers
        kind, index, column = name, 0, 0 if name == "embed" else 2 * layers + 1
    return {"name": name, "kind": kind, "layer": layer, "index": index, "column": column}


def gap(curve: pd.DataFrame) -> float:
    """clean − corrupted metric of a faithfulness curve's attrs (NaN where they are missing)."""
    return float(curve.attrs.get("clean_metric", float("nan"))) - float(
        curve.attrs.get("corrupted_metric", float("nan")))


def _search(loaded: LoadedModel, task: Task, method: str, steps: int, share: float, random: int):
    """(table with in_circuit, curve, size) of one model."""
    table = edge_scores(loaded, task, method=method, steps=steps)
    curve = faithfulness_curve(loaded, task, table, random=random)
    size = smallest_circuit(curve, share)
    curve.attrs.update(circuit_edges=size, circuit_share=share)
    kept = table["abs_rank"] <= (size if size is not None else -1)
    return table.assign(in_circuit=kept, model=loaded.name), curve, size


def task_circuit(loaded: LoadedModel, task: Task | str | Path, metric: str = "logit_diff",
                 method: str = "eap-ig", steps: int = 5, share: float = 0.8, random: int = 5,
                 control: int = 1) -> TaskCircuit:
    """``probe circuit --task FILE``: the task (a :class:`~probe.circuits.task.Task`, or a CSV/JSONL file read
    with the model's tokenizer and `metric`), every edge scored by `method`, the faithfulness curve drawn with
    `random` random circuits per size, the circuit marked, and the same search on `control` untrained twins.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
    task : Task, str or Path
    metric, method, steps : str, str, int
        As :func:`~probe.circuits.task.load_task` and :func:`~probe.circuits.edges.edge_scores`.
    share : float, default 0.8
        The share of the clean − corrupted gap the circuit must keep.
    random : int, default 5
        Random circuits per size on the curve.
    control : int, default 1
        Untrained twins (:func:`probe.untrained.each_twin`, seeds 10000, 10001, …) searched the same way, one
        at a time; 0: none (``--control none``).

    Returns
    -------
    TaskCircuit
    """
    if not isinstance(task, Task):
        task = load_task(task, loaded.tokenizer, metric)
    table, curve, size = _search(loaded, task, method, steps, share, random)
    twins = []
    for twin in each_twin(loaded, control):
        twin_table, twin_curve, twin_size = _search(twin, task, method, steps, share, random)
        twins.append(TwinSearch(twin.name, twin_seed(twin), twin_table, twin_curve, twin_size))
    graph = model_graph(site_map(loaded.model))  # the graph edge_scores scored (its nodes: for payload)
    return TaskCircuit(loaded.name, table, curve, share, size, tuple(twins), graph)


def twin_lines(twin: TwinSearch, model: TaskCircuit) -> list[str]:
    """A twin's search in a few lines, its gap beside the model's (shares are each model's own).

    Examples
    --------
    >>> table = pd.DataFrame({"sender": ["L0H1"], "receiver": ["L1H0"], "input": ["k"], "score": [-1.5],
    ...                       "abs_rank": [1]})
    >>> curve = pd.DataFrame({"edges": [0, 1], "share": [0.0, 1.0], "random_share": [0.0, 1.0]})
    >>> curve.attrs.update(clean_metric=12.0, corrupted_metric=0.0, cpr=0.99, cmd=0.01)
    >>> mine = TaskCircuit("m", table, curve, 0.8, 1)
    >>> other = curve.copy()
    >>> other.attrs.update(clean_metric=0.05, corrupted_metric=0.02, cpr=0.5, cmd=0.5)
    >>> twin = TwinSearch("untrained twin of m (seed 10000)", 10000, table.assign(score=[1e-4]), other, None)
    >>> print("\\n".join(twin_lines(twin, mine)))  # doctest: +NORMALIZE_WHITESPACE
    untrained twin of m (seed 10000): clean 0.05, corrupted 0.02: gap 0.03 against the model's 12 (0.25%)
      its own search: no top-n set on the curve keeps 80% of its gap; CPR 0.50, CMD 0.50
      (the model's 0.99, 0.01)
      its largest |score| 0.0001 (L0H1 → L1H0 k); the model's 1.5
      its curve (edges: share of its gap):    0:  0.000     1:  1.000
    """
    clean, corrupted = twin.curve.attrs.get("clean_metric"), twin.curve.attrs.get("corrupted_metric")
    ratio = twin.gap / model.gap if model.gap else float("nan")
    top = twin.table.sort_values("abs_rank").iloc[0]
    wanted = f"{model.share:.0%} of its gap"
    found = (f"its top {twin.size} edges keep ≥ {wanted}" if twin.size is not None
             else f"no top-n set on the curve keeps {wanted}")
    points = "  ".join(f"{int(row.edges):>4}: {row.share:6.3f}" for row in twin.curve.itertuples())
    return [f"{twin.name}: clean {clean:.3g}, corrupted {corrupted:.3g}: gap {twin.gap:.3g} against the "
            f"model's {model.gap:.3g} ({ratio:.2%})",
            f"  its own search: {found}; CPR {twin.curve.attrs.get('cpr', float('nan')):.2f}, CMD "
            f"{twin.curve.attrs.get('cmd', float('nan')):.2f} (the model's {model.cpr:.2f}, {model.cmd:.2f})",
            f"  its largest |score| {abs(top['score']):.3g} ({top['sender']} → {top['receiver']} "
            f"{top['input']}); the model's {model.table['score'].abs().max():.3g}",
            f"  its curve (edges: share of its gap): {points}"]


def summary(table: pd.DataFrame, curve: pd.DataFrame | None = None, top: int = 15) -> str:
    """The top edges by |score| to read, and the faithfulness curve's points (what ``probe circuit --task``
    prints).

    Examples
    --------
    >>> table = pd.DataFrame({"sender": ["L0H1"], "receiver": ["L1H0"], "input": ["k"], "score": [-1.5],
    ...                       "abs_rank": [1], "method": ["eap-ig"], "metric": ["logit_diff"],
    ...                       "corruption": ["resampled"]})
    >>> print(summary(table))  # doctest: +NORMALIZE_WHITESPACE
    1 edges by eap-ig on logit_diff; corruption: resampled
     rank sender receiver input  score
        1   L0H1     L1H0     k -1.500
    """
    first = table.iloc[0]
    shown = table.sort_values("abs_rank").head(top)[["abs_rank", "sender", "receiver", "input", "score"]]
    shown = shown.rename(columns={"abs_rank": "rank"})
    lines = [f"{len(table)} edges by {first['method']} on {first['metric']}; corruption: "
             f"{first['corruption']}",
             shown.to_string(index=False, float_format=lambda value: f"{value:.3f}")]
    if curve is not None:
        lines.append("faithfulness (share of the clean − corrupted gap kept by the top-n edges; random "
                     "circuits):")
        lines += [f"  {int(row.edges):>5} edges: {row.share:6.3f}   random {row.random_share:6.3f}"
                  for row in curve.itertuples()]
        if "circuit_edges" in curve.attrs:
            size = curve.attrs["circuit_edges"]
            wanted = f"{curve.attrs['circuit_share']:.0%} of the gap"
            lines.append(f"circuit: the top {size} edges, the fewest on the curve keeping ≥ {wanted}"
                         if size is not None else f"circuit: no top-n set on the curve keeps {wanted}")
        if "cpr" in curve.attrs:
            attrs = curve.attrs
            lines.append(f"MIB areas over the share of edges kept (0.1 % to 100 %): CPR {attrs['cpr']:.3f} "
                         f"(random circuits {attrs['random_cpr']:.3f}; higher is better), CMD "
                         f"{attrs['cmd']:.3f} (random {attrs['random_cmd']:.3f}; lower is better)")
    return "\n".join(lines)


__all__ = ["TaskCircuit", "TwinSearch", "gap", "graph_nodes", "summary", "task_circuit", "twin_lines"]
