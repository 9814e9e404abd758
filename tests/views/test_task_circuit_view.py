"""A task's circuit as the views draw it: :meth:`TaskCircuit.payload` on zoo:induction (the planted L0H1 →
L1H0–L1H3 key edges shipped and in the circuit, every node in its column and row, the curve as computed), kept
to the circuit plus the top-N others on a GPT-2-small-sized table (32k edges), and drawn by
:func:`probe.show_circuit`, ``probe circuit --task --html`` and ``probe report --circuit-task``."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import probe
from probe.circuits.task import repeat_task
from probe.circuits.task_search import TaskCircuit, task_circuit, twin_lines
from probe.errors import ProbeError
from probe.views.circuit import TaskCircuitView, show_circuit


@pytest.fixture(scope="module")
def induction():
    loaded = probe.load("zoo:induction")
    return loaded, task_circuit(loaded, repeat_task(loaded.tokenizer, pairs=4))


def graph_table(layers: int, heads: int, seed: int = 0) -> pd.DataFrame:
    """The edge table of a decoder with `layers` × `heads` heads and MLPs (probe.circuits.edges.model_graph's
    edges, random scores): GPT-2 small's shape gives its 32k edges without running it."""
    senders = [("embed", 0, -1)]
    receivers = []
    for layer in range(layers):
        receivers += [(f"L{layer}H{h}", kind, 2 * layer + 1, layer) for kind in "qkv" for h in range(heads)]
        senders += [(f"L{layer}H{h}", 2 * layer + 1, layer) for h in range(heads)]
        receivers.append((f"L{layer}.mlp", "mlp", 2 * layer + 2, layer))
        senders.append((f"L{layer}.mlp", 2 * layer + 2, layer))
    receivers.append(("logits", "logits", 2 * layers + 1, layers))
    rows = [{"sender": s, "receiver": r, "input": kind, "sender_layer": sl, "receiver_layer": rl}
            for s, so, sl in senders for r, kind, ro, rl in receivers if so < ro]
    table = pd.DataFrame(rows)
    table.insert(3, "score", np.random.default_rng(seed).normal(size=len(table)))
    table.insert(4, "abs_rank", table["score"].abs().rank(ascending=False, method="first").astype(int))
    table["method"], table["metric"], table["corruption"] = "eap", "logit_diff", "resampled"
    return table


def test_payload_on_the_induction_organism(induction):
    _, found = induction
    data = found.payload()
    json.dumps(data, allow_nan=False)  # strict JSON: NaN would have been None
    assert data["kind"] == "task" and data["model"] == "zoo:induction" and data["method"] == "eap-ig"
    assert data["total_edges"] == 110 and len(data["edges"]) == 110 and data["left_out"] == 0
    planted = {(edge["sender"], edge["receiver"], edge["input"]): edge for edge in data["edges"]}
    for head in range(4):  # the previous-token head feeds every induction head's keys
        edge = planted[("L0H1", f"L1H{head}", "k")]
        assert edge["in_circuit"] is True and edge["score"] < 0 and edge["abs_rank"] <= found.size
    assert sum(edge["in_circuit"] for edge in data["edges"]) == found.size == data["size"]
    circuit = [edge for edge in data["edges"] if edge["in_circuit"]]
    assert [edge["abs_rank"] for edge in circuit] == list(range(1, found.size + 1))  # strongest first
    nodes = {node["name"]: node for node in data["nodes"]}
    assert len(nodes) == 12 and data["rows"] == 4 and data["layers"] == 2
    assert (nodes["embed"]["column"], nodes["L0H1"]["column"], nodes["L0.mlp"]["column"],
            nodes["L1H3"]["column"], nodes["logits"]["column"]) == (0, 1, 2, 3, 5)
    assert (nodes["L0H1"]["row"], nodes["L1H3"]["row"], nodes["logits"]["row"]) == (1, 3, 1.5)
    assert [point["edges"] for point in data["curve"]] == found.curve["edges"].tolist()
    assert [point["share"] for point in data["curve"]] == pytest.approx(found.curve["share"].tolist())
    assert data["clean_metric"] == pytest.approx(found.table.attrs["clean_metric"])
    assert found.twins and data["notes"] == [line for twin in found.twins for line in twin_lines(twin, found)]


def test_payload_is_bounded_on_a_gpt2_small_sized_table():
    table = graph_table(12, 12)
    assert len(table) == 32_491
    found = TaskCircuit("gpt2-shaped", table.assign(in_circuit=table["abs_rank"] <= 40),
                        pd.DataFrame({"edges": [0, 40, len(table)], "share": [0.0, 0.85, 1.0],
                                      "random_share": [0.0, 0.01, 1.0]}), 0.8, 40)
    data = found.payload()
    assert len(data["edges"]) == 340 and data["left_out"] == 32_491 - 340 and data["top"] == 300
    assert sorted(edge["abs_rank"] for edge in data["edges"]) == list(range(1, 341))  # the strongest 340
    assert sum(edge["in_circuit"] for edge in data["edges"]) == 40
    assert len(data["nodes"]) == 1 + 12 * 13 + 1 and data["rows"] == 12
    assert len(json.dumps(data)) < 120_000  # tens of kB, not the table's megabytes
    only = found.payload(top=0)  # the control: the circuit alone
    assert len(only["edges"]) == 40 and all(edge["in_circuit"] for edge in only["edges"])


def test_a_circuit_far_down_the_ranks_is_shipped_whole_and_nan_is_null():
    table = graph_table(2, 2)
    table.loc[0, "score"] = float("nan")  # unknown is NaN: null in the JSON, never 0
    weakest = table["abs_rank"].max()
    found = TaskCircuit("m", table.assign(in_circuit=table["abs_rank"] == weakest),
                        pd.DataFrame({"edges": [0, 1], "share": [0.0, math.nan], "random_share": [0.0, 0.0]}),
                        0.8, None)
    data = found.payload(top=3)
    assert [edge["abs_rank"] for edge in data["edges"]] == [weakest, 1, 2, 3]
    assert data["curve"][1]["share"] is None and data["size"] is None
    nan_rows = [edge for edge in data["edges"] if edge["score"] is None]
    assert all(edge["abs_rank"] == table.loc[0, "abs_rank"] for edge in nan_rows)
    json.dumps(data, allow_nan=False)


def test_show_circuit_draws_a_task_circuit(induction, tmp_path):
    loaded, found = induction
    view = show_circuit(found)
    assert isinstance(view, TaskCircuitView) and view.found is found
    assert repr(view) == (f"<probe task circuit: zoo:induction, 110 edges scored, {found.size} edges in the "
                          "circuit>")
    fragment = view._repr_html_()
    assert '"kind":"task"' in fragment and "data-probe-circuit" in fragment and "mountCircuit" in fragment
    page = view.save(tmp_path / "task.html")
    assert 'src="http' not in page.read_text(encoding="utf-8")
    assert isinstance(show_circuit(loaded, circuit=found, top=5), TaskCircuitView)
    assert len(show_circuit(found, top=0).found.payload(0)["edges"]) == found.size
    with pytest.raises(ProbeError, match="a head_type or a task, not both"):
        show_circuit(loaded, "induction", task=repeat_task(loaded.tokenizer, pairs=2))
    with pytest.raises(ProbeError, match="save the circuit view as .html"):
        view.save(tmp_path / "task.png")


def test_the_report_has_a_task_circuit_section(induction, tmp_path):
    from probe.views.report import write_report

    loaded, found = induction
    report = write_report(loaded, tmp_path / "report.html", seq_len=16, circuits=[found])
    html = report.read_text(encoding="utf-8")
    assert "<h2>Circuit · your task, every edge</h2>" in html and html.count('data-probe-circuit="') == 1
    assert '"kind":"task"' in html and '"sender":"L0H1","receiver":"L1H0","input":"k"' in html


def test_report_circuit_task_refuses_a_missing_file_without_torch():
    from tests.commands.test_cli_fast import heavy_after

    argv = ["report", "--model", "zoo:induction", "--circuit-task", "/no/such.csv", "--out", "r.html"]
    found = heavy_after(f"from probe.cli import main\ncode = main({argv!r})")
    assert found["heavy"] == [] and "--circuit-task /no/such.csv: no such file" in found["err"]


@pytest.mark.slow
def test_probe_circuit_task_html(tmp_path, capsys):
    from probe.cli import main

    page = tmp_path / "circuit.html"
    assert main(["circuit", "--model", "zoo:induction", "--task", "induction", "--examples", "4",
                 "--method", "eap", "--html", str(page)]) == 0
    assert f"wrote {page}" in capsys.readouterr().err
    html = page.read_text(encoding="utf-8")
    assert '"kind":"task"' in html and "data-probe-circuit" in html and 'src="http' not in html
