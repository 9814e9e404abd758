"""The dashboard's history panel (`probe app --history FILE`, issue 42): a planted history of a run folder
with two checkpoints on disk and one missing — the checkpoints served as models (the last first), the timeline
marking the checkpoint the page shows, the slider moving the page to a checkpoint and the model list moving
the slider (headless Chromium, console clean, no request to another host), a missing checkpoint refused in one
line, a bad --history answered before any heavy import."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from selenium.webdriver.common.keys import Keys

from app import create_app, ids
from app.config import AppConfig
from app.history_store import HistoryStore
from app.service import Service
from probe.errors import ProbeError
from probe.runs.history import HISTORY_COLUMNS
from probe.zoo.tiny import save_tiny
from tests.browser import APP_WINDOW, LOCAL, chromium, requests_elsewhere, serving, wait_for

STEPS = (0, 10, 100)  # step-100 is measured in the table but not on disk


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(the history file, the run folder): tiny GPT-2 checkpoints step-0 and step-10, a history of three."""
    folder = tmp_path_factory.mktemp("run")
    for seed, step in enumerate(STEPS[:2]):
        save_tiny("gpt2", folder / f"step-{step}", seed=seed)
    rows = []
    for step, icl in zip(STEPS, (0.0, -0.2, -0.5), strict=True):
        rows.append({"model": str(folder), "checkpoint": f"step-{step}", "step": step, "row": "checkpoint",
                     "icl_score": icl, "icl_se": 0.05, "held_out_loss": 5.0 - step / 100,
                     "train_loss": 4.9 - step / 100})
        rows.append({"model": str(folder), "checkpoint": f"step-{step}", "step": step, "row": "head",
                     "layer": 1, "head": 0, "head_name": "L1H0", "previous_token": 0.1,
                     "previous_token_label": False, "induction": 0.02 + step / 200,
                     "induction_label": step >= 100})
    path = folder / "history.csv"
    pd.DataFrame(rows).reindex(columns=HISTORY_COLUMNS).to_csv(path, index=False)
    return path, folder


def marked_steps(svg: str) -> set[int]:
    return {int(line.get("data-step")) for line in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}line")
            if line.get("class") == "marked-step"}


def test_the_history_serves_its_checkpoints_and_marks_the_one_shown(run):
    path, folder = run
    store = HistoryStore(str(path))
    assert store.specs == (str(folder / "step-0"), str(folder / "step-10"), None)
    assert store.served == (str(folder / "step-0"), str(folder / "step-10"))
    assert store.index_of(str(folder / "step-10")) == 1 and store.index_of("zoo:induction") is None
    assert marked_steps(store.timeline(1)) == {10}  # one dashed line per panel, all at step 10
    assert store.timeline(1).count('class="marked-step"') == 4
    assert marked_steps(store.timeline(None)) == set()
    with pytest.raises(ProbeError, match="step-100 of .* is not on this machine"):
        store.spec_at(2)
    service = Service(AppConfig(history=str(path)))  # no --model: the checkpoints only, the last first
    assert service.facts.specs[:2] == (str(folder / "step-10"), str(folder / "step-0"))
    assert HistoryStore(None).view is None and HistoryStore(None).served == ()


def test_a_control_history_is_drawn_beside_it_by_its_folder_name(run, tmp_path):
    path, folder = run
    twin = pd.read_csv(path).query("row == 'checkpoint'").assign(model=str(tmp_path / "run-1layer"),
                                                                 icl_score=-0.01)
    twin.to_csv(tmp_path / "control.csv", index=False)
    store = HistoryStore(str(path), str(tmp_path / "control.csv"))
    assert store.view.control.model == "run-1layer" and store.served == (str(folder / "step-0"),
                                                                         str(folder / "step-10"))
    svg = store.timeline(1)
    assert 'data-name="control icl_score"' in svg and str(tmp_path) not in svg  # named, never by its path
    assert "control" not in HistoryStore(str(path)).timeline(1)
    with pytest.raises(ProbeError, match="the model itself"):
        HistoryStore(str(path), str(path))
    with pytest.raises(ProbeError, match="give --history too"):
        HistoryStore(None, str(path))


def test_a_zoo_organisms_history_serves_its_shipped_checkpoints(run, tmp_path, monkeypatch):
    """A history measured as `probe history --model zoo:NAME` (its model column zoo:NAME): the organism's
    step-N/ folders are its checkpoints, in the app and for the report's model check."""
    import shutil

    import probe.zoo
    from probe.views.timeline import history_model

    path, folder = run
    organism = tmp_path / "zoo" / "org"
    shutil.copytree(folder / "step-0", organism / "step-0")
    shutil.copy(folder / "step-0" / "config.json", organism / "config.json")
    monkeypatch.setattr(probe.zoo, "ZOO_DIR", tmp_path / "zoo")
    table = pd.read_csv(path).assign(model="zoo:org")
    table.to_csv(tmp_path / "history.csv", index=False)
    store = HistoryStore(str(tmp_path / "history.csv"))
    assert store.view.model == "zoo:org" and store.specs == (str(organism / "step-0"), None, None)
    assert history_model(table, "zoo:org") == "zoo:org"
    assert history_model(table, str(organism / "step-0")) == "zoo:org"  # a checkpoint of the organism
    with pytest.raises(ProbeError, match="not of zoo:induction"):
        history_model(table, "zoo:induction")


def test_a_table_that_is_not_a_history_is_refused(tmp_path):
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProbeError, match="not a history table .*probe history --out") as refused:
        HistoryStore(str(tmp_path / "notes.csv"))
    assert "--force" not in str(refused.value)  # an input: the fix is another table


def test_a_bad_history_flag_answers_before_heavy_imports(tmp_path):
    code = ("import sys\nfrom probe.cli import main\ncode = main(['app', '--history', sys.argv[1]])\n"
            "heavy = [m for m in ('torch', 'dash', 'pandas') if m in sys.modules]\n"
            "print(code, heavy)")
    for bad in (tmp_path / "none.csv", tmp_path):
        done = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True,
                              timeout=120)
        assert done.stdout.strip() == "2 []", done.stdout + done.stderr
        assert "--history" in done.stderr and "probe history --out" in done.stderr


@pytest.fixture(scope="module")
def driver():
    browser = chromium(APP_WINDOW, network_log=True)
    yield browser
    browser.quit()


@pytest.mark.browser
def test_the_slider_moves_the_page_and_the_model_list_moves_the_slider(run, driver):
    path, folder = run
    service = Service(AppConfig(history=str(path)))
    with serving(create_app(service=service).server) as url:
        driver.get(url)
        frame = wait_for(lambda: driver.find_element("id", ids.HISTORY_TIMELINE), 60, "the history panel")
        assert marked_steps(ET.tostring(ET.fromstring(svg_of(frame))).decode()) == {10}  # the page opens on
        assert "step-10 (step 10, dashed line)" in driver.find_element("id", ids.HISTORY_NOTE).text
        assert "1 checkpoint(s) not on this machine" in driver.find_element("id", ids.HISTORY_NOTE).text
        # the slider to its first checkpoint (keyboard, as a user may): the page moves to step-0 (the model
        # list follows, the timeline's mark too)
        thumb = f"#{ids.HISTORY_SLIDER} [role=slider]"
        driver.find_element("css selector", thumb).send_keys(Keys.HOME)
        checked = f"#{ids.MODEL} input:checked"
        wait_for(lambda: driver.find_element("css selector", checked).get_attribute("value")
                 == "step-0", 30, "the page on step-0")  # served by its folder's name, no path
        wait_for(lambda: marked_steps(svg_of(driver.find_element("id", ids.HISTORY_TIMELINE))) == {0}, 30,
                 "step 0 marked")
        wait_for(lambda: "step-0 (step 0" in driver.find_element("id", ids.MODEL_INFO).text
                 or "step-0" in driver.find_element("id", ids.HISTORY_NOTE).text, 30, "the note")
        # the model list moves the slider back to step-10
        radio = driver.find_element("css selector", f'#{ids.MODEL} input[value="step-10"]')
        driver.execute_script("arguments[0].click()", radio)
        wait_for(lambda: driver.find_element("css selector", thumb).get_attribute("aria-valuenow") == "1", 30,
                 "the slider on step-10")
        # the arrow keys on the slider's handle move the slider (and the page), not the selected head
        selected = "return JSON.stringify((window.probeState || {}).selected || null)"
        head = driver.execute_script(selected)
        driver.find_element("css selector", thumb).send_keys(Keys.ARROW_LEFT)
        wait_for(lambda: driver.find_element("css selector", thumb).get_attribute("aria-valuenow") == "0", 30,
                 "the arrow key moving the slider to step-0")
        wait_for(lambda: driver.find_element("css selector", checked).get_attribute("value") == "step-0", 30,
                 "the page on step-0 again")
        driver.find_element("css selector", thumb).send_keys(Keys.ARROW_RIGHT)
        wait_for(lambda: driver.find_element("css selector", checked).get_attribute("value") == "step-10", 30,
                 "the page back on step-10")
        assert driver.execute_script(selected) == head
        # the missing checkpoint: its scores drawn, the page refuses to open it in one line
        driver.find_element("css selector", thumb).send_keys(Keys.END)
        wait_for(lambda: "not on this machine" in driver.find_element("id", ids.HISTORY_NOTE).text
                 and "the page cannot open it" in driver.find_element("id", ids.HISTORY_NOTE).text, 30,
                 "the refusal")
        assert driver.find_element("css selector", checked).get_attribute("value") == "step-10"
        assert requests_elsewhere(driver, (url.rstrip("/"), *LOCAL)) == []
        # the page names the run by its folder, never by a path of this machine (issue 44)
        assert str(folder.parent) not in driver.find_element("id", ids.HISTORY_BOX).get_attribute("innerHTML")


def svg_of(frame) -> str:
    """The timeline SVG inside the panel's iframe (its srcdoc page)."""
    page = frame.get_attribute("srcdoc")
    return page[page.index("<svg"):page.index("</svg>") + len("</svg>")]
