"""End-to-end in headless Chromium: the real page, real clicks, real uploads and downloads (selenium + chromedriver).

The app runs in this process on a loopback port (threaded werkzeug server); the browser drives it like a user.
Two tests save the README's screenshots: docs/app_screenshot.png (the app as `probe app` opens, on the bundled
model organisms) and docs/app_proteins.png (an uploaded structure next to its predicted contacts).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app import create_app, ids
from app.service import AppConfig, Service

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parent.parent / "docs"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--window-size=1500,2300")


@pytest.fixture(scope="module")
def served(tiny_dir):
    """(url, service, specs): the app on 127.0.0.1:<free port>, stopped after the module."""
    from werkzeug.serving import make_server

    specs = (str(tiny_dir("gpt2")), str(tiny_dir("esm")))
    service = Service(AppConfig(models=specs, label_examples=4))
    server = make_server("127.0.0.1", 0, create_app(service=service).server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", service, specs
    server.shutdown()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def driver(downloads):
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"headless browser tests need {CHROMIUM} and {CHROMEDRIVER} "
                    "(apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    browser = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield browser
    browser.quit()


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = condition()
            if last:
                return last
        except Exception as error:  # noqa: BLE001 - the page is still rendering
            last = error
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r}; head label: {_LAST_LABEL[0]!r})")


_LAST_LABEL = [""]


def text_of(driver, component_id: str) -> str:
    text = driver.find_element("id", component_id).text
    if component_id == ids.HEAD_LABEL:
        _LAST_LABEL[0] = text
    return text


def graph_data(driver, component_id: str) -> list[dict]:
    """The traces plotly drew in a dcc.Graph (typed arrays decoded), names, x, y and z as plain lists."""
    return driver.execute_script("""
        const gd = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');
        const plain = v => (v && typeof v === 'object' && v.length !== undefined)
            ? Array.from(v, plain) : (v === undefined ? null : v);
        return gd._fullData.map(t => ({name: t.name, type: t.type, x: plain(t.x), y: plain(t.y), z: plain(t.z)}));
    """, component_id)


def click_cell(driver, component_id: str, row: float, col: float, n_rows: int, n_cols: int) -> None:
    """Click the centre of cell (row, col) of a heatmap whose y axis runs top-down."""
    from selenium.webdriver.common.action_chains import ActionChains

    area = driver.find_element("css selector", f"#{component_id} .nsewdrag")
    width, height = area.size["width"], area.size["height"]
    x = (col + 0.5) / n_cols * width - width / 2
    y = (row + 0.5) / n_rows * height - height / 2
    ActionChains(driver).move_to_element_with_offset(area, int(x), int(y)).click().perform()


def type_into(driver, component_id: str, text: str) -> None:
    """Replace a text box's content the way a user does (React ignores selenium's clear())."""
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("id", component_id)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)


def open_app(driver, url: str) -> None:
    driver.get(url)
    wait_for(lambda: "tokens" in text_of(driver, ids.HEAD_LABEL), 60, "the first heatmap")


def test_prompt_then_atlas_click_changes_the_heatmap(driver, served):
    url, service, specs = served
    open_app(driver, url)
    type_into(driver, ids.TEXT, "mary gave the book to john")
    driver.find_element("id", ids.RUN).click()
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL) == "L0H0 · 7 tokens", what="the typed prompt")
    token_ids = service.model(specs[0]).tokenizer("mary gave the book to john")["input_ids"]
    heat = graph_data(driver, ids.HEATMAP)[0]
    assert heat["x"][1] == "1·mary" and heat["y"][-1] == "6·john"
    np.testing.assert_allclose(heat["z"], service.head_attention(specs[0], token_ids, 0, 0), atol=1e-6)

    click_cell(driver, ids.ATLAS, row=1, col=2, n_rows=2, n_cols=4)  # layer 1, head 2
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H2"), what="the clicked head")
    changed = wait_for(lambda: graph_data(driver, ids.HEATMAP)[0]["z"] != heat["z"] and
                       graph_data(driver, ids.HEATMAP)[0]["z"], what="the heatmap to change")
    np.testing.assert_allclose(changed, service.head_attention(specs[0], token_ids, 1, 2), atol=1e-6)
    atlas = graph_data(driver, ids.ATLAS)
    assert (atlas[1]["x"], atlas[1]["y"]) == ([2], [1])  # the atlas marks the selected head

    driver.find_element("tag name", "body").send_keys("\ue014")  # → : next head, from the keyboard
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H3"), what="keyboard stepping")
    driver.find_element("id", ids.LAYER_NEXT).click()  # layer ▶ wraps round to layer 0
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L0H3"), what="button stepping")


def test_matrix_downloads_hold_the_matrix_shown(driver, served, downloads):
    url, service, specs = served
    label = text_of(driver, ids.HEAD_LABEL)
    if "tokens" not in label:
        open_app(driver, url)
        label = text_of(driver, ids.HEAD_LABEL)
    from probe.heads import parse_head_name

    layer, head = parse_head_name(label.split(" ")[0])
    heat = graph_data(driver, ids.HEATMAP)[0]
    driver.find_element("id", ids.MATRIX_NPY_BUTTON).click()
    path = wait_for(lambda: next(iter(downloads.glob("attention_*.npy")), None), what="the NPY download")
    assert path.name == f"attention_L{layer}H{head}.npy"
    (matrix,) = wait_for(lambda: (np.load(path),), what="a complete file")
    np.testing.assert_allclose(matrix, heat["z"], atol=1e-6)
    driver.find_element("id", ids.MATRIX_CSV_BUTTON).click()
    csv = wait_for(lambda: next(iter(downloads.glob("attention_*.csv")), None), what="the CSV download")
    lines = wait_for(lambda: csv.read_text().splitlines(), what="a complete CSV")
    assert lines[0].split(",")[1:] == heat["x"] and len(lines) == len(heat["y"]) + 1


def test_errors_are_shown_in_the_page(driver, served):
    url, _, _ = served
    open_app(driver, url)
    driver.find_element("css selector", f"#{ids.AS_IDS} input").click()
    type_into(driver, ids.TEXT, "5 99999")
    driver.find_element("id", ids.RUN).click()
    message = wait_for(lambda: text_of(driver, ids.EXPLORER_MESSAGE), what="the error message")
    assert "token id 99999 is out of range" in message and "Traceback" not in driver.page_source


def test_structure_upload_shows_both_triangles_and_linked_selection(driver, served, ubiquitin_structure):
    url, service, specs = served
    open_app(driver, url)
    driver.find_element("css selector", f"#{ids.MODEL} input[value='{specs[1]}']").click()
    wait_for(lambda: "protein_mlm" in text_of(driver, ids.MODEL_INFO), what="the ESM model")
    upload = driver.find_element("css selector", f"#{ids.UPLOAD} input[type=file]")
    upload.send_keys(ubiquitin_structure)
    wait_for(lambda: "76 residues" in text_of(driver, ids.PROTEIN_MESSAGE), 90, "the structure's contacts")

    def contact_map_with_structure():  # the model switch first drew the typed sequence's map, without true contacts
        traces = graph_data(driver, ids.CONTACTS)
        return traces if len(traces) == 3 and np.isfinite(np.array(traces[1]["z"], dtype=float)).any() else None

    traces = wait_for(contact_map_with_structure, what="the contact map of the uploaded structure")
    assert [trace["name"] for trace in traces] == ["predicted", "true", "selected pair"]
    predicted = np.array(traces[0]["z"], dtype=float)
    true = np.array(traces[1]["z"], dtype=float)
    upper, lower = np.triu_indices(76, 1), np.tril_indices(76, -1)
    assert np.isfinite(predicted[upper]).all() and np.isnan(predicted[lower]).all()
    assert np.isfinite(true[lower]).sum() > 0 and np.isnan(true[upper]).all()
    assert np.nansum(true[lower]) > 76  # ubiquitin's true contacts are drawn in the lower triangle
    assert len(driver.find_elements("css selector", f"#{ids.LEADERBOARD} tbody tr")) > 8
    assert "P@L" in text_of(driver, ids.PRECISION)

    click_cell(driver, ids.CONTACTS, row=10, col=50, n_rows=76, n_cols=76)

    def same_pair_in_both():
        head_marks, contact_marks = graph_data(driver, ids.HEAD_MAP)[1], graph_data(driver, ids.CONTACTS)[2]
        both = (head_marks["x"], head_marks["y"]) == (contact_marks["x"], contact_marks["y"])
        return head_marks if both and head_marks["x"] else None

    marks = wait_for(same_pair_in_both, what="the same pair marked in both maps")
    assert sorted(marks["x"]) == sorted(marks["y"]) and len(marks["x"]) == 2  # (i, j) and its mirror (j, i)
    assert abs(marks["y"][0] - 11) <= 1 and abs(marks["x"][0] - 51) <= 1  # the clicked cell, row 11, column 51

    driver.execute_script("window.scrollTo(0, 0)")
    save_screenshot(driver, "app_proteins.png")


def save_screenshot(driver, name: str) -> None:
    DOCS.mkdir(exist_ok=True)
    shot = DOCS / name
    driver.save_screenshot(str(shot) + ".tmp.png")
    shutil.move(str(shot) + ".tmp.png", shot)
    assert shot.stat().st_size > 20_000


def test_bundled_organisms_open_labelled_with_an_induction_head(driver):
    """The page `probe app` opens with no arguments: zoo:induction first, its heads labelled, and the atlas
    coloured by induction score shows the organism's layer-1 induction heads."""
    from werkzeug.serving import make_server

    service = Service(AppConfig())
    assert service.specs[0] == "zoo:induction"
    job = service.start_labelling("zoo:induction")
    wait_for(lambda: job.state == "done", 120, "labelling zoo:induction")
    server = make_server("127.0.0.1", 0, create_app(service=service).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        driver.set_window_size(1500, 1150)
        open_app(driver, f"http://127.0.0.1:{server.server_port}/")
        driver.find_element("css selector", f"#{ids.HEAD_TYPE} input[value='induction']").click()
        table = service.labels("zoo:induction")
        expected = table[table.head_type == "induction"].sort_values(["layer", "head"])["score"].to_numpy()

        def atlas_scores():
            z = np.array(graph_data(driver, ids.ATLAS)[0]["z"], dtype=float)
            return z.tolist() if z.shape == (2, 4) and np.allclose(z.ravel(), expected, atol=1e-6) else None

        scores = np.array(wait_for(atlas_scores, 60, "the atlas coloured by induction score"))
        assert scores[1].min() > 0.8 > scores[0].max()  # layer 1 holds the induction heads, layer 0 none
        click_cell(driver, ids.ATLAS, row=1, col=0, n_rows=2, n_cols=4)
        wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H0"), what="L1H0 selected")
        driver.find_element("css selector", f"#{ids.OVERLAY} input").click()
        time.sleep(1.5)
        save_screenshot(driver, "app_screenshot.png")
    finally:
        server.shutdown()
        driver.set_window_size(1500, 2300)
