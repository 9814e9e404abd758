"""The circuit panel's "Upload a task" (app/panels/circuit.py, app/circuits.py): an uploaded .csv/.jsonl task
scored over every edge of a served model (zoo:induction's planted L0H1 → L1H0–L1H3 key edges in its circuit),
kept per (model, file content); a file of another type, an empty or oversized upload, a bad row are one-line
messages naming the file as uploaded; in headless Chromium the upload draws the graph with views.js (hover
gives an edge's score, the toggle adds the other edges), the console clean and no request to any host but the
app's own."""

from __future__ import annotations

import base64
import json

import pytest

from app import create_app, ids
from app.config import AppConfig
from app.panels import circuit
from app.service import Service
from probe.errors import ProbeError
from tests.browser import APP_WINDOW, LOCAL, chromium, console_errors, requests_elsewhere, serving, wait_for


def task_lines() -> str:
    """zoo:induction's repeated-block task as the JSONL a researcher uploads."""
    import probe
    from probe.circuits.task import repeat_task

    task = repeat_task(probe.load("zoo:induction").tokenizer, pairs=4, seed=3)
    return "".join(json.dumps({"clean": list(clean), "corrupted": list(bad), "correct": good,
                               "incorrect": wrong, "corruption": task.corruption}) + "\n"
                   for clean, bad, good, wrong in zip(task.clean, task.corrupted, task.correct,
                                                      task.incorrect, strict=True))


def _upload(text: str) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def service():
    return Service(AppConfig(models=("zoo:induction",)))


def test_an_uploaded_task_is_scored_over_every_edge_and_kept(service):
    text = task_lines()
    data, note = circuit.task_payload(service, "zoo:induction", _upload(text), "task.jsonl")
    assert data["kind"] == "task" and data["total_edges"] == 110
    drawn = {(edge["sender"], edge["receiver"], edge["input"]) for edge in data["edges"]
             if edge["in_circuit"]}
    assert {("L0H1", f"L1H{head}", "k") for head in range(4)} <= drawn
    assert note.startswith("your task · 110 edges scored by eap-ig · ")
    again, _ = circuit.task_payload(service, "zoo:induction", _upload(text), "renamed.jsonl")
    assert again is data  # the same content on the same model: kept, not scored again
    other, _ = circuit.task_payload(service, "zoo:induction", _upload(text.split("\n", 1)[1]), "task.jsonl")
    assert other is not data  # the control: another file is scored


@pytest.mark.parametrize("contents, filename, message", [
    (_upload("a,b\n1,2\n"), "task.txt", "task.txt: upload a task as .csv or .jsonl"),
    (None, "task.csv", "the upload is empty"),
    ("data:text/csv;base64,", "empty.csv", "empty.csv has no rows"),
    (_upload("x" * (5 * 2**20 + 10)), "task.csv", "larger than the 5120 KiB limit"),
    (_upload("clean,corrupted,correct\nA B,C D,E\n"), "task.csv", "incorrect"),
])
def test_bad_uploads_are_one_line_messages(service, contents, filename, message):
    with pytest.raises(ProbeError, match=message) as caught:
        circuit.task_payload(service, "zoo:induction", contents, filename)
    assert "\n" not in str(caught.value)


@pytest.mark.browser
def test_the_panel_draws_an_uploaded_task_circuit(tmp_path):
    served = Service(AppConfig(models=("zoo:induction",)))
    with serving(create_app(service=served).server) as url:
        driver = chromium(APP_WINDOW, network_log=True)
        try:
            path = tmp_path / "task.jsonl"
            path.write_text(task_lines(), encoding="utf-8")
            driver.get_log("performance")
            driver.get(f"{url}?model=zoo:induction&type=induction&layer=0&head=0")
            wait_for(lambda: "tokens" in driver.find_element("id", ids.HEAD_LABEL).text, 60,
                     "the first heatmap")
            upload = driver.find_element("css selector", f"#{circuit.TASK_UPLOAD} input[type=file]")
            upload.send_keys(str(path))
            graph = f"#{ids.CIRCUIT_GRAPH}"
            wait_for(lambda: driver.find_elements("css selector", f"{graph} .pt-edge"), 240,
                     "the task's graph")
            assert "your task · 110 edges scored" in driver.find_element("id", ids.CIRCUIT_NOTE).text
            edge = driver.find_element("css selector", f'{graph} .pt-edge[data-sender="L0H1"]'
                                                       '[data-receiver="L1H0"][data-input="k"]')
            driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseenter'))", edge)
            info = driver.find_element("css selector", f"{graph} .pc-info").text
            assert info.startswith("L0H1 → L1H0 (k) · score -")
            assert "of 110 by |score| · in the circuit" in info
            shown = len(driver.find_elements("css selector", f"{graph} .pt-edge"))
            driver.find_element("css selector", f"{graph} .pc-toggle input").click()
            assert len(driver.find_elements("css selector", f"{graph} .pt-edge")) == 110 > shown
            assert requests_elsewhere(driver, (url.rstrip("/"), *LOCAL)) == []
            errors = [entry for entry in console_errors(driver) if "favicon" not in entry["message"]]
            assert errors == []
        finally:
            driver.quit()
