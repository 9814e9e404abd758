"""Issue 26's acceptance, end to end: `probe capture`, `probe profile`, `probe label` and the app's service on
a tiny gpt-oss (attention sinks, `s_aux`), a tiny Gemma 2 (soft-capping) and a tiny Qwen3-Next (a hybrid:
softmax attention in layers 1 and 3, linear attention in 0 and 2), each saved like a checkpoint with a
tokenizer. Every table holds only real attention heads under the model's own layer numbers, and the app's
layer equals eager `output_attentions`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

from app.config import AppConfig
from app.panels import explorer, grid
from app.payload import decode_alpha
from app.service import Service
from probe.cli import main
from probe.errors import ProbeError
from probe.zoo.tiny import DEMO_WORDS, word_tokenizer
from tests.tiny_archs import build

TEXT = "the cat saw the dog and the dog saw the cat"
# model -> (the layers with softmax attention, the layers without α)
LAYERS = {"gpt_oss": ((0, 1), ()), "gemma2": ((0, 1), ()), "qwen3_next": ((1, 3), (0, 2))}
N_HEADS = 4


def _build(name: str):
    """(model, tokenizer) of a tiny random `name`, attention peaked (initializer_range 0.2)."""
    if name == "qwen3_next":
        return build("qwen3_next")
    tokenizer = word_tokenizer(DEMO_WORDS, bos_token="<bos>")
    common = dict(num_hidden_layers=2, num_attention_heads=N_HEADS, num_key_value_heads=2, hidden_size=32,
                  head_dim=8, intermediate_size=32, vocab_size=len(tokenizer), sliding_window=4,
                  layer_types=["sliding_attention", "full_attention"], initializer_range=0.2,
                  max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=None)
    torch.manual_seed(0)
    if name == "gpt_oss":
        model = transformers.GptOssForCausalLM(transformers.GptOssConfig(
            num_local_experts=2, num_experts_per_tok=1, **common))
        with torch.no_grad():  # sinks strong enough to take a visible share of every row, different per head
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(torch.tensor([1.5, -0.5, 0.5, 2.5]))
    else:
        model = transformers.Gemma2ForCausalLM(
            transformers.Gemma2Config(attn_logit_softcapping=1.5, **common))
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> directory of the saved tiny model (save_pretrained of the model and its tokenizer)."""
    out = {}
    for name in LAYERS:
        directory = tmp_path_factory.mktemp(name)
        model, tokenizer = _build(name)
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        out[name] = str(directory)
    return out


def _eager(directory: str, ids: list[int]) -> list[torch.Tensor]:
    """The model's own eager output_attentions, one [head query key] per layer that has α (in layer order)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return [a[0] for a in out.attentions if a is not None]


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def _real_heads(name: str) -> set[tuple[int, int]]:
    return {(layer, head) for layer in LAYERS[name][0] for head in range(N_HEADS)}


@pytest.mark.parametrize("name", list(LAYERS))
def test_capture_writes_only_the_layers_with_alpha_equal_to_eager(saved, name, tmp_path, capsys, caplog):
    directory, out = saved[name], tmp_path / "a.npz"
    with caplog.at_level("WARNING", logger="probe"):
        code, err = _run(["capture", "--model", directory, "--text", TEXT, "--out", str(out)], capsys)
    assert code == 0, err
    data = np.load(out)
    attention_layers, no_alpha = LAYERS[name]
    assert data["layers"].tolist() == list(attention_layers)  # the model's own numbers
    assert data["heads"].tolist() == list(range(N_HEADS))
    notes = [record.getMessage() for record in caplog.records if "softmax attention" in record.getMessage()]
    assert notes == ([f"{directory}: 2 of 4 layers have softmax attention (1, 3); no attention weights in "
                      "linear_attention layers 0, 2"] if no_alpha else [])
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    reference = torch.stack(_eager(directory, tokenizer(TEXT)["input_ids"])).numpy()  # [layer head query key]
    assert data["attention"].shape == reference.shape
    assert np.abs(data["attention"] - reference).max() <= 1e-5
    assert reference[:, :, 3].max() > 0.3  # peaked, not uniform


@pytest.mark.parametrize("name", list(LAYERS))
def test_profile_has_a_row_per_real_head(saved, name, tmp_path, capsys):
    out = tmp_path / "profile.csv"
    code, err = _run(["profile", "--model", saved[name], "--random", "3", "--seq-len", "24", "--query-rows",
                      "12", "--window", "4", "--max-offset", "4", "--bootstrap", "20", "--out",
                      str(out)], capsys)
    assert code == 0, err
    table = pd.read_csv(out)
    assert set(zip(table["layer"], table["head"], strict=True)) == _real_heads(name) and len(table) == 8
    assert set(table["head_name"]) == {f"L{layer}H{head}" for layer, head in _real_heads(name)}
    sink_mass = table["learned_sink_mass"]
    if name == "gpt_oss":  # its s_aux sinks take weight off every row; the others have none
        assert (sink_mass > 0.01).all()
    else:
        assert (sink_mass.abs() < 1e-6).all()


@pytest.mark.parametrize("name", list(LAYERS))
def test_label_has_rows_for_real_heads_only(saved, name, tmp_path, capsys):
    out = tmp_path / "labels.csv"
    code, err = _run(["label", "--model", saved[name], "--types", "previous_token,first_token,induction",
                      "--examples", "6", "--seq-len", "24", "--bootstrap", "50", "--ablate", "all",
                      "--out", str(out), "--report", str(tmp_path / "report.html")], capsys)
    assert code == 0, err
    assert f"wrote {tmp_path / 'report.html'}" in err and (tmp_path / "report.html").stat().st_size > 0
    table = pd.read_csv(out)
    assert set(zip(table["layer"], table["head"], strict=True)) == _real_heads(name)
    assert len(table) == 3 * 8  # three types × eight real heads
    assert table["score"].notna().all()
    assert table["ablation_effect"].notna().all()  # every real head could be ablated


# --- the app ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(saved):
    return Service(AppConfig(models=tuple(saved.values()), label_examples=4))


@pytest.mark.parametrize("name", list(LAYERS))
def test_the_app_shows_each_layer_with_alpha_equal_to_eager(saved, service, name):
    directory = saved[name]
    store, message, _ = explorer.explorer_input(service, directory, TEXT, False)
    assert message == ""
    reference = _eager(directory, store["ids"])  # one [head query key] per layer with α
    for layer, expected in zip(LAYERS[name][0], reference, strict=True):
        alpha = service.captures.layer_attention(directory, store["ids"], layer)  # [head query key]
        np.testing.assert_allclose(alpha, expected.numpy(), atol=1e-5)
        payload, message = explorer.layer_view(service, store, {"layer": layer})
        assert message == "" and payload["layer"] == layer
        shown = decode_alpha(payload["alpha"], payload["heads"], payload["n"])  # uint16 in the browser
        np.testing.assert_allclose(shown, expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("name", list(LAYERS))
def test_the_app_grid_shows_only_real_heads(saved, service, name):
    directory = saved[name]
    store, _, _ = explorer.explorer_input(service, directory, TEXT, False)
    pooled = service.captures.thumbnails(directory, store["ids"])  # [attention_layer head query_bin key_bin]
    assert pooled.shape[:2] == (len(LAYERS[name][0]), N_HEADS)
    cells = grid.grid_children(service, store, "previous_token", False, None)[0].children
    layers = [cell.children for cell in cells if getattr(cell, "className", "") == "grid-layer"]
    assert layers == [f"L{layer}" for layer in LAYERS[name][0]]


def test_the_app_refuses_a_linear_attention_layer_in_one_line(saved, service):
    directory = saved["qwen3_next"]
    store, _, _ = explorer.explorer_input(service, directory, TEXT, False)
    with pytest.raises(ProbeError, match=r"layer 0 of .* has no attention weights \(linear_attention\); "
                                         r"layers with attention: 1, 3") as error:
        service.captures.layer_attention(directory, store["ids"], 0)
    assert "\n" not in str(error.value)
    payload, message = explorer.layer_view(service, store, {"layer": 2})
    assert "layer 2 of" in message and "has no attention weights" in message
    # positive control
    assert service.captures.layer_attention(directory, store["ids"], 1).shape[0] == N_HEADS


# --- the report ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYERS))
def test_report_is_written_with_a_map_of_every_real_head(saved, name, tmp_path, capsys):
    from probe import models
    from probe.views.pooling import pooled_attention

    out = tmp_path / "report.html"
    code, err = _run(["report", "--model", saved[name], "--seq-len", "24", "--out", str(out)], capsys)
    assert code == 0, err
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>") and "probe report" in out.read_text()
    loaded = models.load(saved[name])
    ids = torch.tensor([loaded.tokenizer(TEXT)["input_ids"]])
    maps, thumbs = pooled_attention(loaded, ids, 1, None, 24)  # [layer head t t] under the model's numbers
    assert set(maps) == _real_heads(name)
    assert thumbs.shape[:2] == (4 if name == "qwen3_next" else 2, N_HEADS)
    for layer in range(thumbs.shape[0]):
        assert (thumbs[layer].max() > 0) == (layer in LAYERS[name][0])  # blank tiles: no α in that layer


def test_the_app_opens_a_hybrid_on_its_first_softmax_layer(saved, service):
    from app.panels.page import _default_head

    assert _default_head(service, saved["qwen3_next"], "previous_token") == (1, 0)  # layer 0 has no α
    assert _default_head(service, saved["gemma2"], "previous_token") == (0, 0)


@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
def test_profile_on_the_eager_fallback_equals_the_fused_engine(saved, name, tmp_path, capsys):
    """--engine eager on gpt-oss: the sinks' weight (inside the module's softmax, unseen by the hooks) is each
    row's 1 − Σα, equal to what the fused engine computes from s_aux (it was 0); Gemma 2 has no sinks (0 both
    ways)."""
    tables = {}
    for engine in ("eager", "fused"):
        out = tmp_path / f"{engine}.csv"
        code, err = _run(["profile", "--model", saved[name], "--engine", engine, "--random", "3", "--seq-len",
                          "24", "--query-rows", "12", "--window", "4", "--max-offset", "4", "--bootstrap",
                          "20", "--out", str(out)], capsys)
        assert code == 0, err
        tables[engine] = pd.read_csv(out)
    columns = [c for c in tables["fused"].columns
               if c.startswith(("learned_sink_mass", "entropy", "sink_mass"))]
    np.testing.assert_allclose(tables["eager"][columns].to_numpy(),
                               tables["fused"][columns].to_numpy(), atol=1e-5)
    if name == "gpt_oss":
        assert (tables["eager"]["learned_sink_mass"] > 0.05).all()


def test_the_atlas_says_which_layers_have_no_attention_weights(saved, service):
    from app.panels import atlas

    figure = atlas.atlas_view(service, saved["qwen3_next"], "previous_token", "score", None)
    text = figure.data[0].text  # [layer][head] hover lines
    assert [row[0].split("<br>")[1] for row in text] == [
        "no attention weights (linear_attention layer)", "no labels yet",
        "no attention weights (linear_attention layer)", "no labels yet"]
    plain = atlas.atlas_view(service, saved["gemma2"], "previous_token", "score", None).data[0].text
    assert all(row[0].endswith("no labels yet") for row in plain)  # negative control: every layer has α


def test_the_app_page_opens_on_each_model(saved, service):
    from urllib.parse import quote

    from app import create_app

    client = create_app(service=service).server.test_client()
    for name, directory in saved.items():
        response = client.get(f"/_dash-layout?model={quote(directory)}")  # the layout the page's URL asks for
        assert response.status_code == 200, name
        layout = response.get_data(as_text=True)
        assert "is not served here" not in layout
        selected = layout.index('"id":"selected-head"')
        opened = json.loads(layout[selected + len('"id":"selected-head","data":'):].split("}", 1)[0] + "}")
        assert opened == {"layer": LAYERS[name][0][0], "head": 0}  # a hybrid opens on its first softmax layer
