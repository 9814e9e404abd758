"""The 3D view's prepared Dash pieces without a browser (app/panels/structure3d.py): the payload of an
uploaded structure, its refusals, the layout's stores, and the ids the clientside bridge
(app/assets/structure3d.js) relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import ids
from app.panels import structure3d
from probe import models
from probe.errors import ProbeError

BRIDGE = Path(__file__).resolve().parents[2] / "app" / "assets" / "structure3d.js"


def test_payload_of_an_uploaded_structure(tiny_dir, ubiquitin_structure):
    loaded = models.load(str(tiny_dir("esm")))
    data = structure3d.payload(loaded, Path(ubiquitin_structure).read_bytes(), "1ubi.pdb", theme="dark")
    assert data["n"] == 76 and data["chain"] == "A" and data["theme"] == "dark"
    assert len(data["heads"]) == loaded.n_layers * loaded.n_heads
    with pytest.raises(ProbeError, match="no structure"):
        structure3d.payload(loaded, b"", "x.pdb")
    with pytest.raises(ProbeError, match="no protein chain 'Q'"):
        structure3d.payload(loaded, Path(ubiquitin_structure).read_bytes(), "1ubi.pdb", chain="Q")
    with pytest.raises(ProbeError, match="protein language model"):
        text_model = models.load(str(tiny_dir("gpt2")))
        structure3d.payload(text_model, Path(ubiquitin_structure).read_bytes(), "a.pdb")


def test_layout_names_the_stores_the_bridge_writes():
    tree = structure3d.layout().to_plotly_json()
    children = {child.id: child for child in tree["props"]["children"]}
    assert set(children) == {structure3d.PAYLOAD, structure3d.DRAWN, structure3d.CONTAINER}
    container = children[structure3d.CONTAINER].to_plotly_json()["props"]
    assert container["data-pair-store"] == ids.PAIR and container["data-selected-store"] == ids.SELECTED
    # the bridge finds its container from the callback's output id: CONTAINER + "-drawn"
    assert structure3d.DRAWN == structure3d.CONTAINER + "-drawn" and '/-drawn$/' in BRIDGE.read_text()
