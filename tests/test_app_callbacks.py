"""app.callbacks and app.service as plain functions, on tiny seeded models (no browser, no server)."""

from __future__ import annotations

import base64
import io
import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from app import callbacks, figures, ids
from app.service import AppConfig, LRUCache, ModelRegistry, Service, parse_fasta, parse_token_ids, read_labels
from probe import models
from probe.errors import ProbeError

UBIQUITIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"


@pytest.fixture(scope="module")
def specs(tiny_dir):
    return str(tiny_dir("gpt2")), str(tiny_dir("esm"))


@pytest.fixture(scope="module")
def service(specs):
    return Service(AppConfig(models=specs, label_examples=4))


def _eager_alpha(spec: str, ids_: list[int]) -> torch.Tensor:
    """Reference: the eager implementation's output_attentions, [layer head query key]."""
    import transformers

    loaded = models.load(spec)
    model = transformers.AutoModelForCausalLM.from_pretrained(spec, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids_]), output_attentions=True)
    del loaded
    return torch.stack(out.attentions, dim=1)[0]


def _upload(data: bytes, mime: str = "application/octet-stream") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


# --- selection ---------------------------------------------------------------------------------------------


def test_next_selection_from_clicks_buttons_rows_and_model_change():
    start = {"layer": 1, "head": 3}
    click = {"points": [{"x": 2, "y": 0, "z": 0.4}]}
    assert callbacks.next_selection(ids.ATLAS, start, 2, 4, click=click) == {"layer": 0, "head": 2}
    assert callbacks.next_selection(ids.HEAD_NEXT, start, 2, 4) == {"layer": 1, "head": 0}  # wraps round
    assert callbacks.next_selection(ids.HEAD_PREV, start, 2, 4) == {"layer": 1, "head": 2}
    assert callbacks.next_selection(ids.LAYER_NEXT, start, 2, 4) == {"layer": 0, "head": 3}
    assert callbacks.next_selection(ids.LAYER_PREV, start, 2, 4) == {"layer": 0, "head": 3}
    row = {"layer": 1, "head_index": 1, "head": "L1H1"}
    assert callbacks.next_selection(ids.LEADERBOARD, start, 2, 4, row=row) == {"layer": 1, "head": 1}
    assert callbacks.next_selection(ids.MODEL, None, 2, 4) == {"layer": 0, "head": 0}


# --- explorer ----------------------------------------------------------------------------------------------


def test_explorer_input_tokenizes_text_and_token_ids(service, specs):
    gpt2 = specs[0]
    store, message, _ = callbacks.explorer_input(service, gpt2, "the cat saw the cat", False)
    loaded = service.model(gpt2)
    assert message == "" and store == {"model": gpt2, "ids": loaded.tokenizer("the cat saw the cat")["input_ids"]}
    store, message, _ = callbacks.explorer_input(service, gpt2, "5, 17 17 5", True)
    assert store["ids"] == [5, 17, 17, 5] and message == ""


@pytest.mark.parametrize("text,as_ids,expected", [
    ("", False, "the input is empty"),
    ("5 x 7", True, "'x' is not a token id"),
    ("5 99999", True, "token id 99999 is out of range"),
    (" ".join(["the"] * 200), False, "the input is 201 tokens; the app shows at most 128"),
])
def test_explorer_input_errors_are_one_line_messages(service, specs, text, as_ids, expected):
    store, message, _ = callbacks.explorer_input(service, specs[0], text, as_ids)
    assert store is None and expected in message and "\n" not in message and "Traceback" not in message


def test_model_change_puts_an_example_that_fits_in_the_box(service, specs):
    store, message, text = callbacks.explorer_input(service, specs[1], "the cat saw the dog", False,
                                                    model_changed=True)
    assert text == callbacks.DEMO_PROTEIN and message == "" and len(store["ids"]) == len(text) + 2
    store, message, text = callbacks.explorer_input(service, specs[0], UBIQUITIN, False, model_changed=True)
    assert text == callbacks.DEMO_TEXT and message == ""


def test_explorer_view_shows_the_selected_heads_alpha_equal_to_eager(service, specs):
    gpt2 = specs[0]
    store, _, _ = callbacks.explorer_input(service, gpt2, "the cat saw the dog . the cat saw the dog", False)
    reference = _eager_alpha(gpt2, store["ids"])  # [layer head query key]
    for layer, head in ((0, 0), (1, 3)):
        heatmap, lines, caption, message = callbacks.explorer_view(
            service, store, {"layer": layer, "head": head}, False, "induction")
        assert message == "" and caption.startswith(f"L{layer}H{head}")
        np.testing.assert_allclose(np.asarray(heatmap.data[0].z), reference[layer, head].numpy(), atol=1e-5)
        assert len(heatmap.data) == 1  # no overlay asked for
        assert any(trace.mode == "lines" for trace in lines.data)


def test_explorer_overlay_is_the_head_types_target_pattern(service, specs):
    store = {"model": specs[0], "ids": [5, 9, 10, 5, 9, 10]}
    heatmap, _, caption, _ = callbacks.explorer_view(service, store, {"layer": 0, "head": 0}, True, "induction")
    targets = ~np.isnan(np.asarray(heatmap.data[1].z, dtype=float))
    expected = np.zeros((6, 6), dtype=bool)
    expected[[3, 4, 5], [1, 2, 3]] = True  # the token after the earlier copy of 5, 9, 10
    np.testing.assert_array_equal(targets, expected)
    assert "induction targets" in caption
    _, _, caption, message = callbacks.explorer_view(service, store, {"layer": 0, "head": 0}, True, "coreference")
    assert message == "" and "no overlay" in caption  # coreference needs spans: said, not crashed


def test_explorer_sends_one_heads_matrix_only(service, specs):
    store = {"model": specs[0], "ids": [5 + i % 60 for i in range(100)]}
    heatmap, _, _, _ = callbacks.explorer_view(service, store, {"layer": 1, "head": 2}, False, "induction")
    assert np.asarray(heatmap.data[0].z).shape == (100, 100)
    assert len(heatmap.to_json()) < 100 * 100 * 4 * 2  # one float32 matrix (base64), not layers × heads of them


def test_captures_are_cached_lru_and_bounded(specs):
    service = Service(AppConfig(models=specs, cache_entries=2))
    ids_ = [5, 6, 7, 8]
    first = service.head_attention(specs[0], ids_, 0, 1)
    again = service.head_attention(specs[0], ids_, 0, 2)  # same layer: one capture serves every head
    assert service.captures.hits == 1 and service.captures.misses == 1
    np.testing.assert_array_equal(first, service.layer_attention(specs[0], ids_, 0)[1])
    assert again.shape == (4, 4)
    service.head_attention(specs[0], ids_, 1, 0)
    service.head_attention(specs[0], [5, 6], 0, 0)
    assert len(service.captures) == 2  # the oldest entry went


def test_lru_cache_evicts_by_bytes():
    cache = LRUCache(max_entries=10, max_bytes=100)
    cache.put("a", np.zeros(10, dtype=np.float32))  # 40 bytes
    cache.put("b", np.zeros(10, dtype=np.float32))
    cache.get("a")  # a is now the most recent
    cache.put("c", np.zeros(10, dtype=np.float32))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None


def test_concurrent_requests_get_the_same_answers_as_sequential_ones(specs):
    service = Service(AppConfig(models=specs))
    inputs = [[5, 6, 7, 8, 5, 6, 7, 8][:n] for n in range(3, 9)]
    expected = {(tuple(i), layer): _eager_alpha_cached(specs[0], i)[layer] for i in inputs for layer in (0, 1)}
    failures = []

    def user(index: int) -> None:
        try:
            for step in range(6):
                token_ids = inputs[(index + step) % len(inputs)]
                layer = (index + step) % 2
                got = service.layer_attention(specs[0], token_ids, layer)
                np.testing.assert_allclose(got, expected[(tuple(token_ids), layer)].numpy(), atol=1e-5)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            failures.append(error)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


_EAGER: dict = {}


def _eager_alpha_cached(spec, ids_):
    key = (spec, tuple(ids_))
    if key not in _EAGER:
        _EAGER[key] = _eager_alpha(spec, list(ids_))
    return _EAGER[key]


# --- downloads ---------------------------------------------------------------------------------------------


def test_matrix_download_npy_and_csv_hold_the_full_resolution_matrix(service, specs):
    store = {"model": specs[0], "ids": [5, 6, 7, 6]}
    selected = {"layer": 1, "head": 2}
    expected = service.head_attention(specs[0], store["ids"], 1, 2)
    npy = callbacks.matrix_download(service, store, selected, "npy")
    assert npy["filename"] == "attention_L1H2.npy" and npy["base64"]
    np.testing.assert_array_equal(np.load(io.BytesIO(base64.b64decode(npy["content"]))), expected)
    csv = callbacks.matrix_download(service, store, selected, "csv")
    table = pd.read_csv(io.StringIO(csv["content"]), index_col=0)
    assert list(table.index) == figures.token_labels(service.tokens(specs[0], store["ids"]))
    np.testing.assert_allclose(table.to_numpy(), expected, rtol=1e-5)
    with pytest.raises(ProbeError, match="run an input first"):
        callbacks.matrix_download(service, None, selected, "csv")


def _label_table(spec: str, n_layers: int = 2, n_heads: int = 4) -> pd.DataFrame:
    rows = [{"model": spec, "revision": "r", "layer": layer, "head": head, "head_name": f"L{layer}H{head}",
             "head_type": "previous_token", "score": 0.1 * head + layer, "ci_low": 0.0, "ci_high": 1.0,
             "chance": 0.05, "label": head == 3} for layer in range(n_layers) for head in range(n_heads)]
    return pd.DataFrame(rows)


def test_labels_table_feeds_the_atlas_and_downloads_as_csv(specs, tmp_path):
    path = tmp_path / "labels.csv"
    _label_table(specs[0]).to_csv(path, index=False)
    service = Service(AppConfig(models=specs, labels=str(path)))
    figure, message = callbacks.atlas_view(service, specs[0], "previous_token", "score", {"layer": 1, "head": 0})
    assert message == ""
    np.testing.assert_allclose(np.asarray(figure.data[0].z), [[0, 0.1, 0.2, 0.3], [1, 1.1, 1.2, 1.3]])
    assert service.labels(specs[1]) is None  # the table has no rows of the ESM model
    download = callbacks.labels_download(service, specs[0])
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(download["content"])), pd.read_csv(path))
    with pytest.raises(ProbeError, match="Label heads"):
        callbacks.labels_download(service, specs[1])


def test_bad_labels_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "labels.csv"
    pd.DataFrame({"layer": [0]}).to_csv(path, index=False)
    with pytest.raises(ProbeError, match="missing columns head, head_type, score"):
        read_labels(path)
    with pytest.raises(ProbeError, match="no such file"):
        read_labels(tmp_path / "absent.csv")


def _wait_for_job(service, spec, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        progress, disabled, finished = callbacks.label_status(service, spec)
        if finished:
            return progress
        time.sleep(0.2)
    raise AssertionError("labelling did not finish")


def test_label_on_demand_shows_progress_then_fills_the_atlas(specs):
    service = Service(AppConfig(models=specs, label_examples=4))
    progress, disabled, finished = callbacks.label_status(service, specs[0], start=True)
    assert disabled is False and not finished  # polling starts
    assert "labelled every head" in _wait_for_job(service, specs[0])
    table = service.labels(specs[0])
    assert len(table) == 2 * 4 * table["head_type"].nunique()
    figure, _ = callbacks.atlas_view(service, specs[0], "previous_token", "score", None)
    rows = table[table["head_type"] == "previous_token"].sort_values(["layer", "head"])
    np.testing.assert_allclose(np.asarray(figure.data[0].z).ravel(), rows["score"].to_numpy())
    assert "95% CI" in figure.data[0].text[0][0]


def test_label_job_reports_progress_and_failure_in_the_page(specs):
    service = Service(AppConfig(models=specs))
    gate = threading.Event()

    def slow(loaded, progress):
        progress(1, 4)
        gate.wait(10)
        raise ProbeError("no probes fit this model")

    service.start_labelling(specs[0], run=slow)
    time.sleep(0.3)
    progress, disabled, finished = callbacks.label_status(service, specs[0])
    assert not finished and not disabled and "1/4" in progress[1]
    gate.set()
    assert _wait_for_job(service, specs[0]) == "labelling failed: no probes fit this model"


# --- safety ------------------------------------------------------------------------------------------------


def test_only_models_given_at_start_are_served_and_each_loads_once(specs):
    calls = []

    def loader(spec, device):
        calls.append(spec)
        return models.load(spec, device=device)

    registry = ModelRegistry(specs, loader=loader)
    registry.get(specs[0])
    registry.get(specs[0])
    assert calls == [specs[0]]
    with pytest.raises(ProbeError, match="unknown model '/etc'"):
        registry.get("/etc")  # a path typed into the browser is never loaded


def test_token_ids_from_the_browser_are_checked(service, specs):
    for bad in ([5, 10**6], [], [5] * 500, ["5"]):
        _, _, _, message = callbacks.explorer_view(service, {"model": specs[0], "ids": bad}, None, False, "self")
        assert "press Run again" in message


def test_internal_errors_are_one_line_not_a_traceback(service, specs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(service, "head_attention", broken)
    _, _, _, message = callbacks.explorer_view(service, {"model": specs[0], "ids": [5, 6]}, None, False, "self")
    assert message == "internal error: RuntimeError: kaboom (details in the server log)"


def test_parsers():
    assert parse_token_ids(" 1, 2\n3 ", 10) == [1, 2, 3]
    assert parse_fasta(">sp|P0CG48|UBQ\nMQIFV\nKTLTG\n>second\nAAAA") == "MQIFVKTLTG"
    with pytest.raises(ProbeError, match="'J' at 3"):
        parse_fasta("MQJ")


# --- proteins ----------------------------------------------------------------------------------------------


def test_protein_from_a_typed_sequence(service, specs):
    store, message = callbacks.protein_run(service, specs[1], UBIQUITIN[:40], None, None, "")
    assert message == "" and store["length"] == 40 and not store["has_structure"]
    contacts, head_map, rows, precision, message = callbacks.protein_view(service, store, {"layer": 1, "head": 2},
                                                                        None)
    from probe.contacts import head_attention_map, predict_contacts

    loaded = service.model(specs[1])
    expected = predict_contacts(loaded, UBIQUITIN[:40]).contacts
    i, j = np.triu_indices(40, 1)
    np.testing.assert_allclose(np.asarray(contacts.data[0].z)[i, j], expected[i, j], atol=1e-5)
    np.testing.assert_allclose(np.asarray(head_map.data[0].z), head_attention_map(loaded, UBIQUITIN[:40], 1, 2),
                               atol=1e-5)
    assert message == "" and precision == [] and len(rows) == 2 * 4  # leaderboard by logit share


def test_protein_from_an_uploaded_structure_shows_both_triangles(service, specs, ubiquitin_structure):
    from probe.structure import contact_map, read_structure

    data = open(ubiquitin_structure, "rb").read()
    store, message = callbacks.protein_run(service, specs[1], "", _upload(data), "pdb1ubi.pdb", "")
    assert store["has_structure"] and store["length"] == 76 and "76 residues" in message
    contacts, _, rows, precision, message = callbacks.protein_view(service, store, {"layer": 0, "head": 0},
                                                                  {"i": 3, "j": 40})
    true = contact_map(read_structure(ubiquitin_structure)).astype(float)
    lower = np.asarray(contacts.data[1].z, dtype=float)
    i, j = np.tril_indices(76, -1)
    np.testing.assert_array_equal(lower[i, j], true[i, j])
    assert (list(contacts.data[2].x), list(contacts.data[2].y)) == ([41, 4], [4, 41])
    assert [row["range"] for row in precision] == ["short (6–11)", "medium (12–23)", "long (≥ 24)"]
    assert rows[0]["p_at_L_long"] == max(row["p_at_L_long"] for row in rows)  # best head first


@pytest.mark.parametrize("name,data,expected", [
    ("notes.docx", b"PK\x03\x04", "upload a structure (.pdb, .cif) or a FASTA file"),
    ("big.pdb", b"A" * (6 * 2**20), "larger than the 5120 KiB limit"),
    ("broken.pdb", b"this is not a pdb file", "cannot read structure as PDB"),
])
def test_bad_uploads_are_messages(service, specs, name, data, expected):
    store, message = callbacks.protein_run(service, specs[1], "", _upload(data), name, "")
    assert store is None and expected in message and "Traceback" not in message


def test_fasta_upload_and_text_model_message(service, specs):
    store, message = callbacks.protein_run(service, specs[1], "", _upload(b">x\nMQIFVKTLTGKT\n"), "x.fasta", "")
    assert store["length"] == 12 and message == ""
    store, message = callbacks.protein_run(service, specs[0], UBIQUITIN, None, None, "")
    assert store is None and "choose a protein model" in message


def test_residue_cap(specs):
    service = Service(AppConfig(models=specs, max_residues=30))
    store, message = callbacks.protein_run(service, specs[1], UBIQUITIN, None, None, "")
    assert store is None and "76 residues; the app runs at most 30" in message


def test_mark_pair_patches_the_marker_of_both_maps():
    store = {"key": "k", "model": "m", "length": 50, "has_structure": True}
    pair, contacts, head_map = callbacks.mark_pair(store, [None, {"points": [{"x": 10, "y": 3}]}])
    assert pair == {"i": 2, "j": 9}
    operations = contacts.to_plotly_json()["operations"]
    assert {"operation": "Assign", "location": ["data", 2, "x"], "params": {"value": [10, 3]}} in operations
    assert any(op["location"] == ["data", 1, "y"] for op in head_map.to_plotly_json()["operations"])


def test_defaults_open_on_the_induction_organism_with_an_input_it_can_read():
    from app.service import default_models
    from probe import models

    specs = default_models()
    assert specs[0] == "zoo:induction" and specs[-1] == "zoo:esm-random"
    for spec in ("zoo:induction", "zoo:coreference"):
        loaded = models.load(spec)
        text = callbacks.example_text(loaded)
        assert callbacks.unknown_share(loaded, callbacks.DEMO_TEXT) > 0.2  # English is not their language
        assert callbacks.unknown_share(loaded, text) == 0.0
    induction = callbacks.example_text(models.load("zoo:induction")).split()
    assert induction[3:13] == induction[-10:]  # a repeated block: something for induction heads to do
