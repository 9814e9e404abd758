"""docs/howto/panel.md, followed from its own text: the panel module of step 1 is the page's code block,
loaded as ``app.panels.head_labels``; step 2's list is the page's code block too; then the panel must be on
the page where its ``where`` says and its callback must answer through Dash's HTTP endpoint. And the page
names at most 6 files to touch, tests included."""

from __future__ import annotations

import json
import re
import sys
import types

import pandas as pd
import pytest

import app.panels
from app import create_app, ids
from app.config import AppConfig
from app.panel import Panel
from app.service import Service
from probe.errors import ProbeError
from tests.howto import DOCS, files_to_touch, python_blocks

HOWTO = DOCS / "howto" / "panel.md"


def test_the_how_to_names_at_most_six_files_tests_included():
    files = files_to_touch(HOWTO.read_text(encoding="utf-8"))
    assert files == {"app/panels/NAME.py", "app/panels/__init__.py", "tests/app/test_NAME.py", "docs/app.md",
                     "app/assets/style.css"}
    assert len(files) <= 6
    # negative control: the count sees a seventh file
    assert len(files_to_touch("## Files to touch\n| what | file |\n|---|---|\n| a | `a/b.py`, `c.py` |\n"
                              "| b | `d/e.md` (`f.css`) |\n")) == 4


@pytest.fixture
def head_labels(monkeypatch):
    """Step 1: the page's module, as app/panels/head_labels.py (relative imports resolve in app.panels)."""
    text = HOWTO.read_text(encoding="utf-8")
    assert "`app/panels/head_labels.py`:" in text
    source = next(block for block in python_blocks(text) if "PANEL = Panel(" in block)
    module = types.ModuleType("app.panels.head_labels")
    module.__package__, module.__file__ = "app.panels", str(HOWTO)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, f"{HOWTO}:head_labels", "exec"), module.__dict__)  # noqa: S102 - the page's own code
    return module


def registered(head_labels) -> tuple[Panel, ...]:
    """Step 2: the page's PANELS line, evaluated with the panel modules and the new one; its ``...`` stands
    for the panels between its first and its last ones of today's list."""
    block = next(block for block in python_blocks(HOWTO.read_text(encoding="utf-8"))
                 if block.startswith("PANELS = "))
    namespace = {name.rpartition(".")[2]: module for name, module in sys.modules.items()
                 if name.startswith("app.panels.")}
    exec(compile(block, f"{HOWTO}:PANELS", "exec"), namespace)  # noqa: S102 - the page's own code
    written, today = namespace["PANELS"], app.panels.PANELS
    cut = written.index(Ellipsis)
    before, after = written[:cut], written[cut + 1:]
    assert today[:len(before)] == before and today[len(today) - len(after) + 1:] == after[:-1]
    assert after[-1] is head_labels.PANEL
    return (*today, head_labels.PANEL)


@pytest.fixture(scope="module")
def spec(tiny_dir):
    return str(tiny_dir("gpt2"))


def label_table(spec: str) -> pd.DataFrame:
    """Two head types of a 2 × 4 model: L1H3 labelled previous-token, nothing labelled induction."""
    rows = [{"model": spec, "revision": "r", "layer": layer, "head": head, "head_name": f"L{layer}H{head}",
             "head_type": head_type, "score": 0.1 * head + 0.5 * layer + bonus, "ci_low": 0.0, "ci_high": 1.0,
             "chance": 0.05, "label": head_type == "previous_token" and (layer, head) == (1, 3)}
            for head_type, bonus in (("previous_token", 0.0), ("induction", 0.01))
            for layer in range(2) for head in range(4)]
    return pd.DataFrame(rows)


def find(node, predicate):
    """Every component of a /_dash-layout tree that satisfies `predicate` (on its props)."""
    if isinstance(node, list):
        return [found for child in node for found in find(child, predicate)]
    if not isinstance(node, dict) or "props" not in node:
        return []
    here = [node] if predicate(node["props"]) else []
    return here + find(node["props"].get("children"), predicate)


def post(client, dependencies, output: str, values: dict):
    """POST the callback whose outputs include `output` with the given input values (as the renderer does)."""
    callback = next(c for c in dependencies if f"{output}." in c["output"])
    outputs = [{"id": part.split(".")[0], "property": part.split(".")[1]}
               for part in callback["output"].strip(".").split("...")]
    body = {"output": callback["output"], "outputs": outputs,
            "inputs": [{**i, "value": values.get(i["id"])} for i in callback["inputs"]], "state": [],
            "changedPropIds": [f"{ids.SELECTED}.data"]}
    response = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    return response.status_code, response.get_json()


def test_the_how_tos_panel_is_on_the_page_and_answers_through_dash(head_labels, spec, monkeypatch):
    monkeypatch.setattr(app.panels, "PANELS", registered(head_labels))
    service = Service(AppConfig(models=(spec,)), labels=label_table(spec))
    dash_app = create_app(service=service)
    client = dash_app.server.test_client()
    page = client.get("/_dash-layout").get_json()
    # where="left": the last card of the left column, under the atlas, the circuit and the grid
    left = find(page, lambda props: props.get("className") == "column left-column")
    assert len(left) == 1
    cards = left[0]["props"]["children"]
    assert [bool(find(card, lambda props: props.get("id") == head_labels.HEAD_LABELS)) for card in cards] == \
        [False, False, False, True]
    dependencies = client.get("/_dash-dependencies").get_json()

    status, answer = post(client, dependencies, head_labels.HEAD_LABELS,
                          {ids.MODEL: spec, ids.SELECTED: {"layer": 1, "head": 3}, ids.LABEL_VERSION: 0})
    assert status == 200
    table = json.dumps(answer["response"][head_labels.HEAD_LABELS]["children"])
    cells = re.findall(r'"children": "([^"]*)"', table)
    assert cells == ["type", "score", "label", "previous_token", "0.80", "labelled",
                     "induction", "0.81", cells[-1]]
    assert cells[-1] != "labelled" and cells[-1]  # the reason it is not, from probe.views.reading
    assert answer["response"][head_labels.HEAD_LABELS_MESSAGE]["children"] == ""

    # a crafted selection: a one-line message in the panel's slot, status 200, the table left as it was
    status, answer = post(client, dependencies, head_labels.HEAD_LABELS,
                          {ids.MODEL: spec, ids.SELECTED: {"layer": "a", "head": 0}, ids.LABEL_VERSION: 0})
    assert status == 200
    assert "is not a layer and a head" in answer["response"][head_labels.HEAD_LABELS_MESSAGE]["children"]
    assert head_labels.HEAD_LABELS not in answer["response"]


def test_the_how_tos_data_is_computed_once_per_key(head_labels, spec, monkeypatch):
    service = Service(AppConfig(models=(spec,)), labels=label_table(spec))
    service.registry.load_all()
    reads = []
    table = service.labels.table
    monkeypatch.setattr(service.labels, "table", lambda name: reads.append(name) or table(name))
    first = head_labels.head_label_rows(service, spec, {"layer": 0, "head": 1}, 0)
    assert head_labels.head_label_rows(service, spec, {"layer": 0, "head": 1}, 0) is first
    assert [row["score"] for row in first] == ["0.10", "0.11"] and len(reads) == 1
    head_labels.head_label_rows(service, spec, {"layer": 0, "head": 1}, 1)  # a new label version: read again
    assert len(reads) == 2
    with pytest.raises(ProbeError, match="is not a head of"):
        head_labels.head_label_rows(service, spec, {"layer": 2, "head": 0}, 0)


def test_without_the_list_line_the_panel_is_nowhere(head_labels, spec):
    """Negative control: the module alone (not in PANELS) puts nothing on the page and no callback."""
    assert head_labels.PANEL not in app.panels.PANELS
    client = create_app(service=Service(AppConfig(models=(spec,)))).server.test_client()
    assert head_labels.HEAD_LABELS not in client.get("/_dash-layout").get_data(as_text=True)
    assert head_labels.HEAD_LABELS not in client.get("/_dash-dependencies").get_data(as_text=True)


def test_a_panel_claiming_an_id_of_another_is_refused_when_the_app_is_built(head_labels, spec, monkeypatch):
    with_head_labels = registered(head_labels)
    thief = Panel("thief", register=lambda app, service: None, ids=(ids.SELECTED,))
    monkeypatch.setattr(app.panels, "PANELS", (*app.panels.PANELS, thief))
    with pytest.raises(ValueError, match="'selected-head' is an id of app/ids.py already"):
        create_app(service=Service(AppConfig(models=(spec,))))
    twice = Panel("twice", register=lambda app, service: None, ids=(head_labels.HEAD_LABELS,))
    monkeypatch.setattr(app.panels, "PANELS", (*with_head_labels, twice))
    with pytest.raises(ValueError, match="belongs to panel 'head_labels' already"):
        create_app(service=Service(AppConfig(models=(spec,))))
