"""A dashboard a lab can share (issue 55 items 6, 7, 9 and 12): a token on every request beyond loopback
(the real process is tests/commands/test_app_serve.py), a bounded job queue and upload memory, served names
only (no path of the server in the layout or in any answer), crafted values for the history slider and the
circuit panel's type answered with one line, never "internal error", and a page that moves from L0H0 to the
best labelled head when its labels arrive."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pandas as pd
import pytest

from app import create_app, ids
from app.config import AppConfig
from app.panels import circuit, history, page
from app.protein_store import ProteinStore
from app.registry import ModelRegistry, served_names
from app.service import Service
from probe.app import is_loopback, serving_token
from probe.errors import ProbeError
from tests.app.test_app_callbacks import _messages, _post
from tests.app.test_app_history import run  # noqa: F401 - the history fixture

TOKEN = "a-token-for-the-tests-0123456789"


@pytest.fixture(scope="module")
def spec(tiny_dir):
    return str(tiny_dir("gpt2"))


@pytest.fixture(scope="module")
def service(spec):
    return Service(AppConfig(models=(spec,), label_examples=4))


# --- item 6: the token --------------------------------------------------------------------------------------


def test_with_a_token_every_route_is_a_bare_403_until_the_token_or_its_cookie(service):
    dash_app = create_app(service=Service(AppConfig(models=service.config.models, token=TOKEN),
                                          registry=service.registry))
    client = dash_app.server.test_client()
    for path in ("/", "/_dash-layout", "/_dash-dependencies", "/assets/style.css", "/probe-views/views.js",
                 "/_dash-component-suites/../../etc/passwd", "/nowhere", f"/?token={TOKEN}x", "/?token="):
        answer = client.get(path)
        assert (answer.status_code, answer.data) == (403, b""), path
    posted = client.post("/_dash-update-component", data="{}", content_type="application/json")
    assert (posted.status_code, posted.data) == (403, b"")
    answer = client.get(f"/?token={TOKEN}&model=m")  # the printed URL: a cookie, and the token leaves the URL
    assert answer.status_code == 302 and answer.headers["Location"] == "/?model=m"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert client.get("/").status_code == 200  # the test client keeps the cookie, as a browser does
    assert client.get("/_dash-layout").status_code == 200
    stranger = dash_app.server.test_client()
    assert stranger.get("/_dash-layout").status_code == 403


def test_loopback_needs_no_token_unless_one_is_given(service, monkeypatch):
    monkeypatch.delenv("PROBE_APP_TOKEN", raising=False)
    assert create_app(service=service).server.test_client().get("/_dash-layout").status_code == 200
    assert serving_token("127.0.0.1") is None and serving_token("::1") is None
    assert serving_token("127.0.0.1", TOKEN) == TOKEN  # given on loopback: required there too
    new, other = serving_token("0.0.0.0"), serving_token("10.0.0.5")
    assert len(new) >= 32 and new != other  # a new secret per start
    monkeypatch.setenv("PROBE_APP_TOKEN", TOKEN)
    assert serving_token("0.0.0.0") == TOKEN == serving_token("127.0.0.1")
    assert [is_loopback(h) for h in ("localhost", "127.3.2.1", "[::1]", "0.0.0.0", "::", "example.org")] == \
        [True, True, True, False, False, False]


@pytest.mark.parametrize("argv,expected", [
    (["--token", "short"], "the token (--token) is 5 characters: use at least 16"),
    (["--token", "has spaces in it, which a URL changes"], "characters a URL would change"),
    (["--max-jobs", "0"], "--max-jobs 0 must be a positive number"),
    (["--upload-memory-mb", "1"], "--upload-memory-mb 1 must hold one upload"),
])
def test_bad_sharing_flags_are_one_line_before_any_model_loads(argv, expected, capsys, monkeypatch):
    from probe.cli import main

    monkeypatch.delenv("PROBE_APP_TOKEN", raising=False)
    assert main(["app", "--host", "0.0.0.0", "--model", "zoo:induction", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


# --- item 6: bounded jobs and uploads -----------------------------------------------------------------------


def test_jobs_past_the_limit_are_refused_in_one_line_and_free_again_after(spec):
    table = pd.DataFrame([{"model": spec, "layer": 1, "head": 0, "head_type": "induction", "score": 0.9,
                           "label": True}])
    service = Service(AppConfig(models=(spec,), max_jobs=1, label_examples=4), labels=table)
    release = threading.Event()

    def slow(_loaded, _progress):
        release.wait(30)
        raise ProbeError("stopped by the test")

    job = service.labels.start(spec, run=slow)
    assert service.slots.held == 1
    with pytest.raises(ProbeError, match=r"the server is busy: 1 job .* --max-jobs 1\); try the circuit"):
        service.circuits.circuit(spec, "induction")
    # the page's circuit button says the same, as its message; labelling another time too
    status, payload = _post((client := create_app(service=service).server.test_client(),
                             client.get("/_dash-dependencies").get_json()),
                            ids.CIRCUIT_RUN, "n_clicks", 1, ids.CIRCUIT_MESSAGE,
                            extra_inputs={ids.MODEL: spec, ids.HEAD_TYPE: "induction"})
    assert status == 200 and "the server is busy" in _messages(payload), payload
    release.set()
    for _ in range(300):
        if job.state == "failed":
            break
        threading.Event().wait(0.05)
    assert job.state == "failed" and service.slots.held == 0  # the slot is free again


def test_uploads_in_memory_stay_within_their_budget_oldest_dropped_first(service):
    config = AppConfig(models=service.config.models, upload_memory_bytes=3 * 2**20)
    store = ProteinStore(service.facts, service.gate, config)
    keys = [store.keep_upload(bytes([index]) * 2**20) for index in range(5)]  # 5 files of 1 MiB
    assert store.uploads.nbytes <= 3 * 2**20
    assert store.upload(keys[-1]) == bytes([4]) * 2**20  # the newest kept
    with pytest.raises(ProbeError, match=r"keeps 3 MiB of uploads in all, the oldest dropped first"):
        store.upload(keys[0])
    client = create_app(service=Service(config, registry=service.registry)).server.test_client()
    layout = client.get("/_dash-layout").get_data(as_text=True)
    assert "keeps 3 MiB of uploaded files in all, the oldest dropped first" in layout  # said in the page


# --- item 7: served names only ------------------------------------------------------------------------------


def test_no_path_of_the_server_in_the_layout_or_an_unknown_model_answer(service, spec):
    folder = str(Path(spec).parent)
    client = create_app(service=service).server.test_client()
    layout = client.get("/_dash-layout").get_data(as_text=True)
    name = service.registry.name_of(spec)
    assert name == Path(spec).name and f'"value": "{name}"' in layout.replace('":"', '": "')
    assert folder not in layout
    for path in (f"/_dash-layout?model={name}", f"/_dash-layout?model={spec}"):  # a link by name or by path
        assert folder not in client.get(path).get_data(as_text=True)
    dependencies = client.get("/_dash-dependencies").get_json()
    status, payload = _post((client, dependencies), ids.MODEL, "value", "/etc/passwd", ids.MODEL_INFO)
    answer = _messages(payload)
    assert status == 200 and f"choose one of {name}" in answer and folder not in answer, answer
    # a model value arrives as the spec and leaves as the served name (the explorer's input store)
    status, payload = _post((client, dependencies), ids.RUN, "n_clicks", 1, ids.INPUT,
                            state={ids.TEXT: "mary had a little lamb", ids.MODEL: name})
    assert status == 200 and folder not in json.dumps(payload), payload
    # every callback the model selector drives answers without the folder (the card, the atlas, the grid ...)
    driven = [c for c in dependencies if any(i["id"] == ids.MODEL for i in c["inputs"])]
    assert len(driven) >= 8
    others = {ids.HEAD_TYPE: "induction", ids.SELECTED: {"layer": 0, "head": 0}}
    for callback in driven:
        target = callback["output"].strip(".").split("...")[0].partition(".")[0]
        status, payload = _post((client, dependencies), ids.MODEL, "value", name, target, extra_inputs=others)
        assert status == 200 and folder not in json.dumps(payload), (callback["output"], payload)
    with pytest.raises(ProbeError) as refused:
        service.registry.get("/somewhere/else")
    assert folder not in str(refused.value) and name in str(refused.value)
    assert folder not in page.url_search(service, spec, "induction", {"layer": 0, "head": 0}, None)


def test_served_names_are_unique_and_keep_hub_ids():
    names = served_names(["zoo:induction", "/a/run/model", "/b/run/model", "gpt2"])
    assert names == {"zoo:induction": "zoo:induction", "/a/run/model": "model", "/b/run/model": "model-2",
                     "gpt2": "gpt2"}
    registry = ModelRegistry(list(names))
    assert registry.spec_of("model-2") == registry.spec_of("/b/run/model") == "/b/run/model"
    assert registry.spec_of(["x"]) == ["x"]  # anything else passes, to be refused where it is looked up


# --- item 9: crafted values for the history slider and the circuit's type -----------------------------------


@pytest.mark.parametrize("value", ["1; drop", 0.5, float("nan"), float("inf"), -1, 99, True, None, [1], {}])
def test_a_crafted_slider_value_is_one_line(run, value, caplog):  # noqa: F811 - the fixture
    path, _ = run
    service = Service(AppConfig(history=str(path)))
    with pytest.raises(ProbeError, match=r"is not a checkpoint \(0\.\.2\): move the slider"):
        history.slider_position(service, value)
    assert history.slider_position(service, 1) == 1 and history.slider_position(service, 2.0) == 2
    client = create_app(service=service).server.test_client()
    status, payload = _post((client, client.get("/_dash-dependencies").get_json()), ids.HISTORY_SLIDER,
                            "value", value, ids.HISTORY_NOTE,
                            extra_inputs={ids.MODEL: service.facts.specs[0]})
    answer = _messages(payload)
    assert status == 200 and "move the slider" in answer and "internal error" not in answer, payload
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no traceback logged


@pytest.mark.parametrize("value", ["nonsense", ["induction"], {"a": 1}, 3, None, "__class__"])
def test_a_crafted_circuit_type_is_one_line(service, spec, value, caplog):
    with pytest.raises(ProbeError, match="does not apply to"):
        circuit.circuit_payload(service, spec, value, find=True)
    client = create_app(service=service).server.test_client()
    status, payload = _post((client, client.get("/_dash-dependencies").get_json()), ids.CIRCUIT_RUN,
                            "n_clicks", 1, ids.CIRCUIT_MESSAGE, extra_inputs={ids.MODEL: spec,
                                                                              ids.HEAD_TYPE: value})
    answer = _messages(payload)
    assert status == 200 and "does not apply to" in answer and "internal error" not in answer, payload
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# --- item 12: the views open on a labelled head -------------------------------------------------------------


def test_when_labels_arrive_the_page_moves_from_l0h0_to_the_best_labelled_head(spec):
    service = Service(AppConfig(models=(spec,)))
    state = page.initial_state(service, {})
    assert (state["layer"], state["head"]) == (0, 0)  # no labels yet: the model's first head
    rows = [{"model": spec, "layer": layer, "head": head, "head_type": kind, "score": score, "label": label}
            for kind, layer, head, score, label in (("induction", 1, 2, 0.9, True),
                                                    ("induction", 0, 1, 0.95, False),
                                                    ("previous_token", 0, 3, 0.2, False))]
    job = service.labels.start(spec, run=lambda _loaded, _progress: pd.DataFrame(rows))
    for _ in range(300):
        if job.state == "done":
            break
        threading.Event().wait(0.05)
    assert job.state == "done"
    opening = page.labelled_opening
    assert opening(service, spec, "induction", {"layer": 0, "head": 0}) == {"layer": 1, "head": 2}
    assert opening(service, spec, "induction", {"layer": 1, "head": 0}) is None  # the user moved
    assert page.labelled_opening(service, spec, "previous_token", {"layer": 0, "head": 0}) is None  # none
    assert page.labelled_opening(service, spec, ["x"], "crafted") is None
    state = page.initial_state(service, {"type": "induction"})
    assert (state["layer"], state["head"]) == (1, 2)  # a new page opens there too


def test_the_help_and_the_cli_page_say_what_the_app_opens_on(capsys):
    """Issue 55 item 12: `probe app --help` and docs/cli.md say what the code does (default_models: MiniLM
    where installed, then the organisms, shipped tables read, nothing computed), as docs/app.md does."""
    from probe.cli import main

    try:
        code = main(["app", "--help"])
    except SystemExit as stopped:  # argparse's own exit, where main lets it through
        code = stopped.code
    said = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "all-MiniLM-L6-v2" in said and "nothing is computed at start-up" in said and "--token" in said
    cli = " ".join((Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text().split())
    section = cli[cli.index("### `probe app`"):cli.index("### `probe label`")]
    assert "opens on the pretrained all-MiniLM-L6-v2" in section
    assert "nothing is computed at start-up" in section
    assert "labels their heads in the background at start-up" not in section


def test_the_3d_view_and_the_protein_messages_name_a_folder_not_its_path(tiny_dir, ubiquitin_structure):
    """Issue 55 item 12: the 3D view's title and model, and the protein panel's notes, name a local model by
    its folder (they showed its absolute path)."""
    esm = str(tiny_dir("esm"))
    service = Service(AppConfig(models=(esm,)))
    key, result = service.proteins.analyse(esm, structure=Path(ubiquitin_structure).read_bytes(),
                                           filename="pdb1ubi.pdb")
    payload = service.proteins.structure_payload(key)
    folder = str(Path(esm).parent)
    assert payload["title"].startswith(Path(esm).name + " · attention on")
    assert payload["model"] == Path(esm).name
    assert folder not in json.dumps({k: v for k, v in payload.items() if k != "maps"})
    assert folder not in result.note
    with pytest.raises(ProbeError) as refused:
        service.captures.head_attention(esm, [0, 5, 6, 2], 99, 0)
    assert folder not in str(refused.value)
