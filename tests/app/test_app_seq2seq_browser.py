"""End-to-end in headless Chromium on an encoder–decoder (a tiny T5): the explorer steps from the decoder into
a cross-attention layer, whose heatmap is named by its stack and laid out [decoder query × encoder key]; a
reload of the page's link comes back to the same head; the console stays clean."""

from __future__ import annotations

import pytest

from app import create_app, ids
from app.config import AppConfig
from app.service import Service
from tests.app.test_app_browser import ARROW_DOWN, open_app, press, text_of
from tests.browser import serving, wait_for
from tests.tiny_archs import save

pytestmark = pytest.mark.browser

TEXT = "the cat saw the dog and the dog saw the cat"


@pytest.fixture(scope="module")
def t5_served(tmp_path_factory):
    """(url, service, spec): the app on a tiny T5 alone (enc 0–1, dec 2–4, cross 5–7), on a loopback port."""
    spec = save("t5", tmp_path_factory.mktemp("t5"))
    service = Service(AppConfig(models=(spec,)))
    with serving(create_app(service=service).server) as url:
        yield url, service, spec


def heat_layout(driver) -> dict:
    return driver.execute_script("""
        const gd = document.querySelector('#explorer-heatmap .js-plotly-plot');
        return {title: gd.layout.title.text, query: gd.layout.yaxis.title.text,
                key: gd.layout.xaxis.title.text,
                y: Array.from(gd._fullData[0].y), x: Array.from(gd._fullData[0].x)};
    """)


def test_a_key_step_into_cross_attention_names_the_head_and_its_axes(driver, t5_served):
    from urllib.parse import quote

    url, service, spec = t5_served
    open_app(driver, f"{url}?model={quote(spec)}&layer=4&head=1&text={quote(TEXT)}")
    wait_for(lambda: text_of(driver, ids.HEAD_LABEL).startswith("dec.L2H1"), 60, "dec.L2H1")
    assert heat_layout(driver)["query"] == "decoder query"
    press(driver, ARROW_DOWN)  # flat layer 5: the first cross-attention layer
    wait_for(lambda: heat_layout(driver)["title"].startswith("cross.L0H1"), 60, "the cross.L0H1 heatmap")
    shown = heat_layout(driver)
    assert (shown["query"], shown["key"]) == ("decoder query", "encoder key")
    ids_ = list(service.captures.encode(spec, TEXT).ids)
    decoder = service.captures.tokens(spec, service.captures.decoder_ids(spec, ids_))
    assert [label.split("·", 1)[1].strip() for label in shown["y"]] == [t.strip() for t in decoder]
    assert shown["y"][1:] != shown["x"][1:] and shown["x"][0].endswith(service.captures.tokens(spec, ids_)[0])
    assert text_of(driver, ids.HEAD_LABEL).startswith("cross.L0H1")
    wait_for(lambda: "layer=5" in driver.current_url and "head=1" in driver.current_url, 30, "the link")
    assert "probe label" in driver.find_element("tag name", "body").text  # labelling refused in one line
    link = driver.current_url
    open_app(driver, link)  # the shared link comes back to the same head
    wait_for(lambda: heat_layout(driver)["title"].startswith("cross.L0H1"), 60, "cross.L0H1 after the reload")
