"""The explorer's contribution to the next token (app/panels/contribution.py): the selected head's value is
probe.circuits.attribution.direct_logit_attribution's for the model's own predicted token, at the pinned token
or the last position; models without a next-token LM head get one line saying why."""

from __future__ import annotations

import pytest

from app.config import AppConfig
from app.panels import contribution, explorer
from app.service import Service
from probe import models
from probe.circuits.attribution import direct_logit_attribution


@pytest.fixture(scope="module")
def specs(tiny_dir):
    return str(tiny_dir("gpt2")), str(tiny_dir("esm", seed=1))


@pytest.fixture(scope="module")
def service(specs):
    return Service(AppConfig(models=specs, label_examples=4))


def _store(service, spec, text="the cat saw the dog . the cat saw"):
    store, _, _ = explorer.explorer_input(service, spec, text, False)
    return store


def _strongs(children) -> list[str]:
    return [part.children for block in children for part in block.children
            if getattr(part, "children", None) is not None and type(part).__name__ == "Strong"]


@pytest.mark.parametrize("focus", [None, {"index": 2}])
def test_the_selected_heads_value_is_its_direct_logit_attribution(service, specs, focus):
    spec = specs[0]
    store = _store(service, spec)
    children = contribution.contribution_view(service, store, {"layer": 1, "head": 2}, focus)
    position = 2 if focus else len(store["ids"]) - 1
    loaded = models.load(spec)
    import torch

    with torch.no_grad():
        logits = loaded.model(input_ids=torch.tensor([store["ids"]])).logits[0, position]
    predicted = int(logits.argmax())
    reference = direct_logit_attribution(loaded, store["ids"], answer=predicted, position=position)
    value = float(reference.set_index("component").loc["L1H2", "dla"])
    assert _strongs(children) == ["L1H2", f"{value:+.3f}"]
    text = str(children)
    assert f"logit {float(logits[predicted]):.3f}" in text and "It pushes up most:" in text
    assert ("the last position" in text) == (focus is None)
    # a different head reads its own row of the same cached forward (negative control: another value)
    other = contribution.contribution_view(service, store, {"layer": 0, "head": 0}, focus)
    value0 = float(reference.set_index("component").loc["L0H0", "dla"])
    assert _strongs(other) == ["L0H0", f"{value0:+.3f}"] and value0 != value


def test_models_without_a_next_token_head_get_one_line(service, specs, monkeypatch):
    esm = _store(service, specs[1], "MKTAYIAKQRQISFVKSHFSRQ")
    line = contribution.contribution_view(service, esm, {"layer": 0, "head": 0}, None)
    assert isinstance(line, str) and "is not a causal LM" in line
    monkeypatch.setattr(contribution, "lm_head_trained", lambda loaded: False)
    line = contribution.contribution_view(service, _store(service, specs[0]), {"layer": 0, "head": 0}, None)
    assert isinstance(line, str) and "has no trained LM head in its checkpoint" in line
    assert contribution.contribution_view(service, None, None, None).startswith("run an input")


def test_the_callback_answers_through_dash_and_a_crafted_head_is_a_message(service, specs):
    from app import create_app, ids
    from tests.app.test_app_callbacks import _messages, _post

    http = create_app(service=service).server.test_client()
    http.get("/")
    client = (http, http.get("/_dash-dependencies").get_json())
    store = _store(service, specs[0])
    target = contribution.CONTRIBUTION
    status, payload = _post(client, ids.SELECTED, "data", {"layer": "a", "head": 0}, target, None,
                            {ids.INPUT: store})
    assert status == 200 and "is not a layer and a head" in _messages(payload)
    status, payload = _post(client, ids.SELECTED, "data", {"layer": 1, "head": 2}, target, None,
                            {ids.INPUT: store, ids.TOKEN_FOCUS: {"index": 999}})  # out of range: last
    assert status == 200 and "L1H2" in _messages(payload) and "the last position" in _messages(payload)
