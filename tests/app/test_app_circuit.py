"""The circuit panel (app/panels/circuit.py, app/circuits.py): found on demand on a model's label table,
cached while the table stays, one-line messages for a model without labels or a crafted model; through Dash's
HTTP endpoint a bad payload is an in-page message, never a 500."""

from __future__ import annotations

import pytest

from app import create_app, ids
from app.circuits import CircuitStore
from app.config import AppConfig
from app.panels import circuit
from app.service import Service
from probe.errors import ProbeError
from tests.app.test_app_callbacks import _messages, _post


@pytest.fixture(scope="module")
def service(tiny_dir):
    return Service(AppConfig(models=("zoo:induction", str(tiny_dir("gpt2"))), label_examples=4))


def test_the_panel_finds_the_induction_circuit_on_demand_and_keeps_it(service):
    data, note = circuit.circuit_payload(service, "zoo:induction", "induction", find=False)
    assert data is None and note == circuit.PROMPT  # nothing computed before the button
    data, note = circuit.circuit_payload(service, "zoo:induction", "induction", find=True)
    nodes = {node["head"]: node for node in data["nodes"]}
    assert {"L0H1", "L1H0", "L1H1", "L1H2", "L1H3"} <= set(nodes)
    assert any(edge["sender"] == "L0H1" and edge["mode"] == "K" and edge["in_circuit"]
               for edge in data["edges"])
    assert note.endswith("forwards") and "edges in the circuit" in note
    again, _ = circuit.circuit_payload(service, "zoo:induction", "induction", find=False)  # cached
    assert again == data
    first = service.circuits.cached("zoo:induction", "induction")
    assert service.circuits.circuit("zoo:induction", "induction") is first
    # kept by the label table's content: an equal copy finds it, a relabelled table does not (found again)
    table = service.labels.table("zoo:induction")
    same = CircuitStore(service.facts, service.gate, lambda spec: table.copy(), cache=service.circuits.cache)
    assert same.cached("zoo:induction", "induction") is first
    relabelled = table.copy()
    relabelled["label"] = ~relabelled["label"].fillna(False).astype(bool)
    other = CircuitStore(service.facts, service.gate, lambda spec: relabelled, cache=service.circuits.cache)
    assert other.cached("zoo:induction", "induction") is None


def test_a_model_without_labels_is_a_message(service, tiny_dir):
    with pytest.raises(ProbeError, match="no labels yet"):
        service.circuits.circuit(str(tiny_dir("gpt2")), "induction")


@pytest.fixture(scope="module")
def client(service):
    dash_app = create_app(service=service)
    http = dash_app.server.test_client()
    http.get("/")
    return http, http.get("/_dash-dependencies").get_json()


def test_crafted_payloads_are_messages_not_500(client, tiny_dir):
    status, payload = _post(client, ids.CIRCUIT_RUN, "n_clicks", 1, ids.CIRCUIT_DATA,
                            extra_inputs={ids.MODEL: "/nowhere", ids.HEAD_TYPE: "induction"})
    assert status == 200 and "unknown model" in _messages(payload)
    status, payload = _post(client, ids.CIRCUIT_RUN, "n_clicks", 1, ids.CIRCUIT_DATA,
                            extra_inputs={ids.MODEL: str(tiny_dir("gpt2")), ids.HEAD_TYPE: "induction"})
    assert status == 200 and "no labels yet" in _messages(payload)


def test_the_circuit_views_z_is_never_negative_zero():
    """Issue 55 item 12: a z that rounds to zero is written 0.0 in the circuit view's edge text (views.js
    ``fixed``, as probe.naming.fixed in Python), never "z -0.0"; other values keep their sign."""
    import json
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    views = Path(__file__).resolve().parents[2] / "probe" / "views" / "assets" / "views.js"
    script = ("global.window = {}; require(process.argv[1]); var fixed = window.probeViews.core.fixed;"
              "console.log(JSON.stringify([fixed(-0.04, 1), fixed(-0, 1), fixed(-0.06, 1), fixed(0.04, 1),"
              " fixed(-0.0004, 3), fixed(null, 1), fixed(2.345, 2), fixed(-0.04, 1, true)]));")
    out = subprocess.run(["node", "-e", script, str(views)], capture_output=True, text=True, check=True,
                         timeout=60)
    assert json.loads(out.stdout) == ["0.0", "0.0", "-0.1", "0.0", "0.000", "unknown", "2.35", "+0.0"]
