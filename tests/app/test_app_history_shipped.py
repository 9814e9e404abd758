"""The dashboard on the shipped natural-text organism's history (issue 54): ``probe app --history`` on
zoo:stdlib-code's ``history.csv`` with its 1-layer control's beside it — the history panel renders with both
ICL lines, its checkpoints are served (the page opens on the last), the slider moves the page across
checkpoints (Home, a click on a mark, End) and the timeline's mark follows; headless Chromium, console clean,
no request to another host."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from app import create_app, ids
from app.config import AppConfig
from app.service import Service
from probe.runs.history import read_history
from tests.app.test_app_history import marked_steps, svg_of
from tests.browser import APP_WINDOW, LOCAL, chromium, requests_elsewhere, serving, wait_for
from tests.views.test_phase_change_browser import shipped_histories

pytestmark = pytest.mark.browser
SVG = "{http://www.w3.org/2000/svg}"


def click_mark(driver, index: int) -> None:
    """A pointer click on the slider's track at checkpoint `index`'s mark (the arrow keys belong to the page's
    head stepping, app/assets/keys.js)."""
    mark = driver.find_elements("css selector", f"#{ids.HISTORY_SLIDER} .dash-slider-mark")[index]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", mark)
    track = driver.find_element("css selector", f"#{ids.HISTORY_SLIDER} .dash-slider-root")
    offset = mark.rect["x"] + mark.rect["width"] / 2 - (track.rect["x"] + track.rect["width"] / 2)
    ActionChains(driver).move_to_element_with_offset(track, int(offset), 0).click().perform()


@pytest.fixture(scope="module")
def driver():
    browser = chromium(APP_WINDOW, network_log=True)
    yield browser
    browser.quit()


def test_the_history_panel_moves_across_the_shipped_checkpoints(driver):
    _, history, control = shipped_histories()
    points = read_history(history).query("row == 'checkpoint'").sort_values("step")
    steps, names = points["step"].astype(int).tolist(), points["checkpoint"].astype(str).tolist()
    theirs = read_history(control).query("row == 'checkpoint'")["icl_score"].notna().sum()
    service = Service(AppConfig(history=str(history), history_control=str(control)))
    assert len(service.history.served) == len(steps)  # every checkpoint the table measured ships
    with serving(create_app(service=service).server) as url:
        driver.get(url)
        frame = wait_for(lambda: driver.find_element("id", ids.HISTORY_TIMELINE), 60, "the history panel")
        svg = ET.fromstring(svg_of(frame))
        named = [p.get("data-name") for p in svg.iter(f"{SVG}polyline")]
        assert "icl_score" in named and "control icl_score" in named  # the model's and the control's
        assert sum(c.get("class") == "control" for c in svg.iter(f"{SVG}circle")) == theirs
        assert marked_steps(svg_of(frame)) == {steps[-1]}  # the page opens on the last checkpoint
        thumb = f"#{ids.HISTORY_SLIDER} [role=slider]"
        checked = f"#{ids.MODEL} input:checked"
        driver.find_element("css selector", thumb).send_keys(Keys.HOME)  # to the first checkpoint
        for index in (0, 1, len(steps) // 2):  # then a click on a checkpoint's mark: page and mark follow
            if index:
                click_mark(driver, index)
            wait_for(lambda: driver.find_element("css selector", checked).get_attribute("value")
                     == names[index], 60, f"the page on {names[index]}")  # noqa: B023 - waited for at once
            wait_for(lambda: marked_steps(svg_of(driver.find_element("id", ids.HISTORY_TIMELINE)))
                     == {steps[index]}, 30, f"step {steps[index]} marked")  # noqa: B023
            assert f"{names[index]} (step {steps[index]:,}, dashed line)" in driver.find_element(
                "id", ids.HISTORY_NOTE).text
            assert driver.find_element("css selector", thumb).get_attribute("aria-valuenow") == str(index)
        driver.find_element("css selector", thumb).send_keys(Keys.END)  # back to the last
        wait_for(lambda: driver.find_element("css selector", checked).get_attribute("value") == names[-1], 60,
                 "the page on the last checkpoint")
        assert requests_elsewhere(driver, (url.rstrip("/"), *LOCAL)) == []
