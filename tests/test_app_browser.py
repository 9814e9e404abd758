"""End-to-end in headless Chromium: the real page, real clicks, keys, uploads and downloads (selenium + chromedriver).

One app server for the module (tiny GPT-2, tiny ESM, tiny Llama with grouped-query attention) runs in this process
on a loopback port; the browser drives it like a user. Two tests save the README's screenshots:
docs/app_screenshot.png (the app as `probe app` opens, on the bundled model organisms, with the grid of every head)
and docs/app_proteins.png (an uploaded structure next to its predicted contacts).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app import create_app, ids
from app.config import AppConfig
from app.service import Service

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parent.parent / "docs"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--window-size=1500,2300")
UPLOAD_BYTES = 2**20  # the served app's upload limit (1 MiB), so an oversized file is quick to make


def _planted_labels(spec: str) -> pd.DataFrame:
    """Induction scores for the tiny GPT-2: L1H2 clearly above chance, every other head at chance (0.004)."""
    rows = []
    for layer in range(2):
        for head in range(4):
            strong = (layer, head) == (1, 2)
            score = 0.9 if strong else 0.004 + 1e-5 * head
            rows.append({"model": spec, "layer": layer, "head": head, "head_type": "induction", "score": score,
                         "ci_low": score - 0.05 if strong else 0.0039, "ci_high": score + 0.01, "chance": 0.004,
                         "label": strong, "n_examples": 8})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def served(tiny_dir):
    """(url, service, specs): the app on 127.0.0.1:<free port>, stopped after the module."""
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    specs = (str(tiny_dir("gpt2")), str(tiny_dir("esm")), str(tiny_dir("llama")))
    service = Service(AppConfig(models=specs, label_examples=4, upload_bytes=UPLOAD_BYTES),
                      labels=_planted_labels(specs[0]))
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
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def text_of(driver, component_id: str) -> str:
    return driver.find_element("id", component_id).text


def graph_data(driver, component_id: str) -> list[dict]:
    """The traces plotly drew in a dcc.Graph (typed arrays decoded): name, type, x, y, z, zmin, zmax and the colour
    bar's title (scale)."""
    return driver.execute_script("""
        const gd = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');
        const plain = v => (v && typeof v === 'object' && v.length !== undefined)
            ? Array.from(v, plain) : (v === undefined ? null : v);
        return gd._fullData.map(t => ({name: t.name, type: t.type, x: plain(t.x), y: plain(t.y), z: plain(t.z),
                                       zmin: t.zmin === undefined ? null : t.zmin,
                                       zmax: t.zmax === undefined ? null : t.zmax,
                                       scale: t.colorbar && t.colorbar.title ? t.colorbar.title.text : null}));
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


def press(driver, *keys: str) -> None:
    """Key presses sent to whatever has the focus (as a user's keyboard does)."""
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(driver)
    for key in keys:
        chain.send_keys(key)
    chain.perform()


def open_app(driver, url: str) -> None:
    driver.get(url)
    wait_for(lambda: "tokens" in text_of(driver, ids.HEAD_LABEL), 60, "the first heatmap")


def heat_matches(driver, service, spec: str, token_ids, layer: int, head: int):
    z = graph_data(driver, ids.HEATMAP)[0]["z"]
    expected = service.head_attention(spec, token_ids, layer, head)
    return np.allclose(np.array(z, dtype=float), expected, atol=1e-6)


ARROW_LEFT, ARROW_UP, ARROW_RIGHT, ARROW_DOWN = "\ue012", "\ue013", "\ue014", "\ue015"


def test_grid_click_keys_after_radio_and_checkbox_and_fixed_colours(driver, served):
    url, service, specs = served
    open_app(driver, url)
    type_into(driver, ids.TEXT, "mary gave the book to john")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    ActionChains(driver).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()  # runs
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL) == "L0H0 · 7 tokens", what="the typed prompt")
    token_ids = service.model(specs[0]).tokenizer("mary gave the book to john")["input_ids"]

    # the grid: one thumbnail per head; clicking L1H2 shows that head in the explorer
    thumbs = wait_for(lambda: len(driver.find_elements("css selector", f"#{ids.GRID} .thumb")) == 8 and
                      driver.find_elements("css selector", f"#{ids.GRID} .thumb"), what="8 thumbnails")
    thumbs[6].click()
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H2"), what="the clicked thumbnail's head")
    wait_for(lambda: heat_matches(driver, service, specs[0], token_ids, 1, 2), what="L1H2's matrix")
    wait_for(lambda: "selected" in driver.find_elements("css selector", f"#{ids.GRID} .thumb")[6]
             .get_attribute("class"), what="the thumbnail marked")

    # fixed colour scales, read from the drawn figures: the atlas and the explorer run over 0–1
    driver.find_element("css selector", f"#{ids.HEAD_TYPE} input[value='induction']").click()
    atlas = wait_for(lambda: next((t for t in graph_data(driver, ids.ATLAS) if t["name"] == "score"), None),
                     what="the atlas scores")
    assert (atlas["zmin"], atlas["zmax"]) == (0, 1)
    wait_for(lambda: "0.90 ✓" in driver.find_elements("css selector", f"#{ids.GRID} .thumb")[6].text,
             what="the atlas score and label as the thumbnail's badge")
    z = np.array(atlas["z"], dtype=float)
    assert z[1, 2] == pytest.approx(0.9) and np.isnan(np.delete(z.ravel(), 6)).all()  # chance-level heads grey
    heat = graph_data(driver, ids.HEATMAP)[0]
    assert (heat["zmin"], heat["zmax"], heat["scale"]) == (0, 1, "α (fixed 0–1)")
    driver.find_element("css selector", f"#{ids.ALPHA_SCALE} input").click()
    wait_for(lambda: "this head's max" in graph_data(driver, ids.HEATMAP)[0]["scale"], what="the per-head maximum")

    # arrows after clicking a radio button step the head (not the radio group); presses queue
    driver.find_element("css selector", f"#{ids.HEAD_TYPE} input[value='self']").click()
    press(driver, ARROW_RIGHT, ARROW_RIGHT, ARROW_RIGHT)
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H1"), what="three head steps")  # 2+3 mod 4
    assert driver.find_element("css selector", f"#{ids.HEAD_TYPE} input[value='self']").is_selected()
    assert driver.find_element("css selector", f"#{ids.MODEL} input[value='{specs[0]}']").is_selected()
    # and after clicking a checkbox
    driver.find_element("css selector", f"#{ids.OVERLAY} input").click()
    press(driver, ARROW_DOWN)
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L0H1"), what="a layer step after a checkbox")
    wait_for(lambda: heat_matches(driver, service, specs[0], token_ids, 0, 1), what="L0H1's matrix")
    assert "self targets" in text_of(driver, ids.OVERLAY_NOTE)

    # token view: click a token (pins it), the text is coloured by that head's attention from it
    driver.find_elements("css selector", f"#{ids.TOKENS} .token")[6].click()
    alpha = service.head_attention(specs[0], token_ids, 0, 1)
    wait_for(lambda: "focus" in driver.find_elements("css selector", f"#{ids.TOKENS} .token")[6]
             .get_attribute("class"), what="the focused token")
    titles = [span.get_attribute("title") for span in driver.find_elements("css selector", f"#{ids.TOKENS} .token")]
    assert [t.split("α ")[1] for t in titles] == [f"{a:.3f}" for a in alpha[6]]
    # a second click unpins; hovering another token then reads from that one
    driver.find_elements("css selector", f"#{ids.TOKENS} .token")[6].click()

    def hover_focuses(index: int) -> bool:  # the tokens re-render after the click: find them afresh each try
        ActionChains(driver).move_to_element(driver.find_elements("css selector", f"#{ids.TOKENS} .token")[index]).perform()
        return "focus" in driver.find_elements("css selector", f"#{ids.TOKENS} .token")[index].get_attribute("class")

    wait_for(lambda: hover_focuses(2), what="the hovered token")


def test_reload_restores_the_url_state(driver, served):
    url, service, specs = served
    open_app(driver, url)
    type_into(driver, ids.TEXT, "the cat saw the dog")
    driver.find_element("id", ids.RUN).click()
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).endswith("6 tokens"), what="the prompt")
    driver.find_element("css selector", f"#{ids.HEAD_TYPE} input[value='induction']").click()
    wait_for(lambda: any(t["name"] == "score" for t in graph_data(driver, ids.ATLAS)), what="the scored atlas")
    click_cell(driver, ids.ATLAS, row=1, col=3, n_rows=2, n_cols=4)  # a cell under the score and grey layers
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H3"), what="the clicked head")
    wait_for(lambda: "layer=1&head=3" in driver.current_url and "type=induction" in driver.current_url,
             what="the URL to follow")
    driver.refresh()
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL) == "L1H3 · 6 tokens", 60, "the restored head and input")
    assert driver.find_element("id", ids.TEXT).get_attribute("value") == "the cat saw the dog"
    assert driver.find_element("css selector", f"#{ids.HEAD_TYPE} input[value='induction']").is_selected()


def test_svg_download_after_switching_and_no_cloud_buttons(driver, served, downloads):
    from selenium.webdriver.common.action_chains import ActionChains

    url, _, _ = served
    open_app(driver, url)
    assert not driver.find_elements("css selector", ".modebar-btn[data-title*='Chart Studio'], "
                                                    ".modebar-btn[data-title*='cloud'], "
                                                    ".modebar-btn[data-title*='Share']")
    driver.find_element("css selector", f"#{ids.IMAGE_FORMAT} input[value='svg']").click()
    graph = driver.find_element("id", ids.HEATMAP)
    ActionChains(driver).move_to_element(graph).perform()
    camera = wait_for(lambda: graph.find_element("css selector", ".modebar-btn[data-title^='Download plot']"),
                      what="the camera button")
    time.sleep(0.5)  # the config update reaches plotly
    camera.click()
    path = wait_for(lambda: next(iter(downloads.glob("probe_explorer-heatmap*.svg")), None), 30, "the SVG download")
    assert path.read_text(errors="replace").lstrip().startswith("<svg")


def test_oversized_and_wrong_type_uploads_say_why(driver, served, tmp_path, ubiquitin_structure):
    url, service, specs = served
    open_app(driver, url)
    driver.find_element("css selector", f"#{ids.MODEL} input[value='{specs[1]}']").click()
    wait_for(lambda: "protein_mlm" in text_of(driver, ids.MODEL_INFO), what="the ESM model")
    wait_for(lambda: "residues" in driver.find_element("id", ids.CONTACTS).text, what="the typed protein's map")
    before = graph_data(driver, ids.CONTACTS)[0]["z"]
    big = tmp_path / "big.pdb"
    big.write_bytes(b"REMARK " * (UPLOAD_BYTES // 6))
    upload = driver.find_element("css selector", f"#{ids.UPLOAD} input[type=file]")
    upload.send_keys(str(big))
    message = wait_for(lambda: "MiB" in text_of(driver, ids.PROTEIN_MESSAGE) and text_of(driver, ids.PROTEIN_MESSAGE),
                       what="the size message")
    assert "big.pdb is 1.2 MiB; the limit is 1.0 MiB" in message
    wrong = tmp_path / "notes.docx"
    wrong.write_bytes(b"PK\x03\x04")
    upload.send_keys(str(wrong))
    wait_for(lambda: "notes.docx: not a structure or FASTA file" in text_of(driver, ids.PROTEIN_MESSAGE),
             what="the type message")
    assert graph_data(driver, ids.CONTACTS)[0]["z"] == before  # the previous figure stays

    # a structure, then a typed sequence, then the same structure again: it runs again
    upload.send_keys(ubiquitin_structure)
    wait_for(lambda: "76 residues" in text_of(driver, ids.PROTEIN_MESSAGE), 90, "the structure's contacts")
    type_into(driver, ids.SEQUENCE, "MQIFVKTLTGKTITLEVEPS")
    driver.find_element("id", ids.PROTEIN_RUN).click()
    wait_for(lambda: text_of(driver, ids.PROTEIN_MESSAGE) == "", what="the typed sequence")
    wait_for(lambda: len(graph_data(driver, ids.CONTACTS)[0]["z"]) == 20, what="the typed sequence's map")
    upload.send_keys(ubiquitin_structure)
    wait_for(lambda: "76 residues" in text_of(driver, ids.PROTEIN_MESSAGE), 90, "the same file uploaded again")

    def contact_map_with_structure():
        traces = graph_data(driver, ids.CONTACTS)
        return traces if len(traces[1]["z"]) == 76 and np.isfinite(np.array(traces[1]["z"], dtype=float)).any() \
            else None

    traces = wait_for(contact_map_with_structure, what="the contact map of the uploaded structure")
    assert [trace["name"] for trace in traces] == ["predicted", "true", "selected pair"]
    true = np.array(traces[1]["z"], dtype=float)
    assert np.nansum(true[np.tril_indices(76, -1)]) > 76 and np.isnan(true[np.triu_indices(76, 1)]).all()
    header = [cell.text for cell in driver.find_elements("css selector", f"#{ids.LEADERBOARD} th")]
    assert "P@L long" in " ".join(header)
    table = driver.find_element("id", ids.LEADERBOARD)
    assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 2", table)

    click_cell(driver, ids.CONTACTS, row=10, col=50, n_rows=76, n_cols=76)

    def same_pair_in_both():
        head_marks, contact_marks = graph_data(driver, ids.HEAD_MAP)[1], graph_data(driver, ids.CONTACTS)[2]
        both = (head_marks["x"], head_marks["y"]) == (contact_marks["x"], contact_marks["y"])
        return head_marks if both and head_marks["x"] else None

    marks = wait_for(same_pair_in_both, what="the same pair marked in both maps")
    assert abs(marks["y"][0] - 11) <= 1 and abs(marks["x"][0] - 51) <= 1  # the clicked cell, row 11, column 51
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(driver.find_element("id", ids.HEAD_MAP)).perform()  # hover elsewhere
    time.sleep(0.5)
    assert graph_data(driver, ids.CONTACTS)[2]["x"] == marks["x"]  # the clicked pair stays
    driver.execute_script("window.scrollTo(0, 0)")
    save_screenshot(driver, "app_proteins.png")


def test_architecture_card_of_a_gqa_model(driver, served):
    url, _, specs = served
    driver.get(f"{url}?model={specs[2]}")
    card = wait_for(lambda: "GQA" in text_of(driver, ids.CARD) and text_of(driver, ids.CARD), 60, "the card")
    assert "GQA (grouped-query)" in card and "4 query · 2 key/value (2 query heads per kv head)" in card
    assert "rotary (RoPE, θ = 10000)" in card and "KV cache fp16 per token: 128 B" in card
    # at 1000 px the explorer sits beside the atlas: the selected head's figure is in the first screen
    driver.set_window_size(1000, 900)
    try:
        time.sleep(0.5)
        atlas_box, heat_box = (driver.execute_script("return document.getElementById(arguments[0])"
                                                     ".getBoundingClientRect().toJSON()", name)
                               for name in (ids.ATLAS, ids.HEATMAP))
        assert heat_box["left"] >= atlas_box["right"] - 1 and heat_box["top"] < 700
    finally:
        driver.set_window_size(1500, 2300)


def save_screenshot(driver, name: str) -> None:
    DOCS.mkdir(exist_ok=True)
    shot = DOCS / name
    driver.save_screenshot(str(shot) + ".tmp.png")
    shutil.move(str(shot) + ".tmp.png", shot)
    assert shot.stat().st_size > 20_000


def test_bundled_organisms_open_labelled_with_an_induction_head(driver):
    """The page `probe app` opens with no arguments: zoo:induction first, its heads labelled; the atlas coloured by
    induction score and the grid of every head show the organism's layer-1 induction heads."""
    from werkzeug.serving import make_server

    service = Service(AppConfig())
    assert service.specs[0] == "zoo:induction"
    job = service.start_labelling("zoo:induction")
    wait_for(lambda: job.state == "done", 120, "labelling zoo:induction")
    server = make_server("127.0.0.1", 0, create_app(service=service).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        driver.set_window_size(1500, 1250)
        open_app(driver, f"http://127.0.0.1:{server.server_port}/?type=induction&layer=1&head=0")
        table = service.labels("zoo:induction")
        expected = table[table.head_type == "induction"].sort_values(["layer", "head"])["score"].to_numpy()

        def atlas_scores():
            z = np.array(graph_data(driver, ids.ATLAS)[0]["z"], dtype=float)
            return z.tolist() if z.shape == (2, 4) and np.allclose(z.ravel(), expected, atol=1e-6) else None

        scores = np.array(wait_for(atlas_scores, 60, "the atlas coloured by induction score"))
        assert scores[1].min() > 0.8 > scores[0].max()  # layer 1 holds the induction heads, layer 0 none
        wait_for(lambda: len(driver.find_elements("css selector", f"#{ids.GRID} .thumb")) == 8, what="the grid")
        driver.find_element("css selector", f"#{ids.OVERLAY} input").click()
        wait_for(lambda: "induction targets" in text_of(driver, ids.OVERLAY_NOTE), what="the outlined targets")
        time.sleep(1.0)
        save_screenshot(driver, "app_screenshot.png")
    finally:
        server.shutdown()
        driver.set_window_size(1500, 2300)
