"""The dashboard on an encoder–decoder (a tiny T5: encoder layers 0–1, decoder 2–4, cross-attention 5–7 on
the engine's flat layer axis): teacher-forced inputs in every pass, stack names everywhere, labelling refused
in one line; a single-stack model keeps its plain names (the control)."""

from __future__ import annotations

from urllib.parse import parse_qsl

import numpy as np
import pytest
import torch

from tests.tiny_archs import save

TEXT = "the cat saw the dog and the dog saw the cat"
ENC, DEC, CROSS = 1, 3, 6  # enc.L1, dec.L1, cross.L1


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_dir):
    """(service, T5 spec, GPT-2 spec, T5 token ids)."""
    from app.config import AppConfig
    from app.service import Service

    t5 = save("t5", tmp_path_factory.mktemp("t5"))
    gpt2 = str(tiny_dir("gpt2"))
    service = Service(AppConfig(models=(t5, gpt2)))
    return service, t5, gpt2, list(service.captures.encode(t5, TEXT).ids)


def test_layer_attention_of_each_stack_equals_the_engine_on_teacher_forced_inputs(served):
    from probe.engine import capture_attention
    from probe.models import model_inputs

    service, t5, _, ids = served
    loaded = service.facts.model(t5)
    input_ids = torch.tensor([ids])
    inputs = model_inputs(loaded, input_ids, torch.ones_like(input_ids))
    assert "decoder_input_ids" in inputs
    maps = {}
    for layer in (ENC, DEC, CROSS):
        reference = capture_attention(loaded.model, inputs, layers=[layer])[0, 0]  # [head query key]
        reference = reference.float().numpy()
        maps[layer] = service.captures.layer_attention(t5, ids, layer)
        assert maps[layer].shape == (loaded.n_heads, len(ids), len(ids))
        np.testing.assert_array_equal(maps[layer], reference)
    upper = np.triu(np.ones((len(ids), len(ids)), dtype=bool), k=1)
    assert maps[DEC][:, upper].max() == 0.0  # decoder self-attention is causal
    assert maps[CROSS][:, upper].max() > 0.01 and maps[ENC][:, upper].max() > 0.01  # these are not
    assert np.abs(maps[CROSS] - maps[ENC]).max() > 0.01


def test_every_name_the_app_shows_is_the_stacks_and_a_single_stack_model_keeps_plain_names(served):
    from app.panels import atlas, explorer, grid, page

    service, t5, gpt2, ids = served
    names = ["enc.L0", "enc.L1", "dec.L0", "dec.L1", "dec.L2", "cross.L0", "cross.L1", "cross.L2"]
    assert service.facts.layer_names(t5) == names
    assert " · 2 enc + 3 dec + 3 cross layers × 4 heads · " in service.facts.describe(t5)
    assert " · 2 layers × 4 heads · " in service.facts.describe(gpt2)
    assert page._shape(service, t5) == {"layers": 8, "heads": 4, "layer_names": names}
    store = {"model": t5, "ids": ids}
    payloads = {layer: explorer.layer_view(service, store, {"layer": layer})[0]
                for layer in (ENC, DEC, CROSS)}
    assert [payloads[layer]["name"] for layer in (ENC, DEC, CROSS)] == ["enc.L1", "dec.L1", "cross.L1"]
    tokens = service.captures.tokens(t5, ids)
    decoder = service.captures.tokens(t5, service.captures.decoder_ids(t5, ids))
    assert decoder[1:] == tokens[:-1]  # the decoder reads the input shifted right after its start token
    cross = payloads[CROSS]
    assert cross["axes"] == {"query": "decoder query", "key": "encoder key"}
    assert [t.strip() for t in cross["query_tokens"]] == [t.strip() for t in decoder]
    assert [t.strip() for t in cross["tokens"]] == [t.strip() for t in tokens]
    assert payloads[DEC]["causal"] and not cross["causal"] and not payloads[ENC]["causal"]
    assert "query_tokens" not in payloads[DEC] and "query_tokens" not in payloads[ENC]
    assert payloads[DEC]["tokens"] == cross["query_tokens"]
    figure = explorer.line_figure(service, store, {"layer": CROSS, "head": 2})
    assert figure.layout.title.text.startswith("cross.L1H2 · ")
    download = explorer.matrix_download(service, store, {"layer": CROSS, "head": 2}, "csv")
    assert download["filename"] == "attention_cross.L1H2.csv"
    cells = grid.grid_children(service, store, "induction", False, None)[0].children
    assert [cell.children for cell in cells if cell.className == "grid-layer"] == names
    alts = {cell.children[0].alt for cell in cells if cell.className.startswith("thumb")}
    assert alts >= {"enc.L0H0", "cross.L2H3"}
    figure = atlas.atlas_view(service, t5, "induction", "score", {"layer": CROSS, "head": 2})
    assert list(figure.layout.yaxis.ticktext) == names
    assert figure.data[0].text[CROSS][2].startswith("cross.L1H2")

    control = {"model": gpt2, "ids": list(service.captures.encode(gpt2, "the cat saw the dog").ids)}
    assert service.facts.layer_names(gpt2) is None and "layer_names" not in page._shape(service, gpt2)
    payload = explorer.layer_view(service, control, {"layer": 1})[0]
    assert payload["name"] == "L1" and "axes" not in payload and "query_tokens" not in payload
    assert explorer.matrix_download(service, control, {"layer": 1, "head": 2}, "csv")["filename"] == \
        "attention_L1H2.csv"
    cells = grid.grid_children(service, control, "induction", False, None)[0].children
    assert [cell.children for cell in cells if cell.className == "grid-layer"] == ["L0", "L1"]
    assert atlas.atlas_view(service, gpt2, "induction", "score", None).layout.yaxis.ticktext is None


def test_a_link_to_a_cross_attention_head_round_trips(served):
    from app.panels import page

    service, t5, _, ids = served
    state = page.initial_state(service, {"model": t5})
    search = page.url_search(service, t5, state["head_type"], {"layer": CROSS, "head": 3},
                             {"model": t5, "ids": ids, "text": TEXT})
    restored = page.initial_state(service, dict(parse_qsl(search.lstrip("?"))))
    assert (restored["model"], restored["layer"], restored["head"], restored["text"]) == (t5, CROSS, 3, TEXT)
    assert restored["note"] == ""
    assert service.facts.head_label(t5, restored["layer"], restored["head"]) == "cross.L1H3"


def test_labelling_an_encoder_decoder_is_refused_in_one_line_and_the_views_still_work(served):
    from app.config import AppConfig
    from app.panels import atlas
    from app.service import Service

    shared, t5, gpt2, ids = served
    service = Service(AppConfig(models=(t5,)))  # alone: label_missing would queue the causal LM's labelling
    said = []
    assert t5 not in service.labels.label_missing(report=said.append)
    assert service.labels.jobs.job(t5) is None
    refusal = service.facts.label_refusal(t5)
    assert "\n" not in refusal and "probe label" in refusal and any(refusal in line for line in said)
    progress, *_ = atlas.label_status(service, t5, start=True)  # the 'Label heads' button
    assert progress == refusal and service.labels.jobs.job(t5) is None
    assert shared.facts.label_refusal(gpt2) is None  # the control: a causal LM is labelled
    assert service.captures.layer_attention(t5, ids, CROSS).shape[0] == 4


def test_bart_cross_attention_in_the_service_equals_the_engine(tmp_path):
    from app.config import AppConfig
    from app.service import Service
    from probe.engine import capture_attention
    from probe.models import model_inputs

    bart = save("bart", tmp_path / "bart")
    service = Service(AppConfig(models=(bart,)))
    loaded = service.facts.model(bart)
    ids = list(service.captures.encode(bart, TEXT).ids)
    input_ids = torch.tensor([ids])
    reference = capture_attention(loaded.model, model_inputs(loaded, input_ids, torch.ones_like(input_ids)),
                                  layers=[CROSS])[0, 0]  # [head query key]
    np.testing.assert_array_equal(service.captures.layer_attention(bart, ids, CROSS),
                                  reference.float().numpy())
    assert service.facts.head_label(bart, CROSS, 0) == "cross.L1H0"
