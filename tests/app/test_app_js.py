"""The dashboard's JavaScript on its own (app/assets/explorer.js, keys.js), in headless Chromium: each
function of the explorer's reading in the browser against the same computation written out in numpy here —
decoding the uint16 payload, max-pooling, axis labels, the per-head colour maximum, the dominant offset, the
overlay's share (explorer.target_share), the heatmap figure (pooled z, labels, outlines, colour scale, title,
theme), tick spacing, the layer follower, the token view's colours, and the atlas click's checks.

The assets are loaded into a blank page (no Dash, no server), with the little of `window.dash_clientside` they
read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.panels.explorer import target_share
from app.payload import layer_payload
from tests.browser import chromium

pytestmark = pytest.mark.browser

ASSETS = Path(__file__).resolve().parents[2] / "app" / "assets"
VIEWS_JS = Path(__file__).resolve().parents[2] / "probe" / "views" / "assets" / "views.js"  # the shared core


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A browser on a blank page holding the view layer's core (views.js, which the app serves before its own
    assets), explorer.js and keys.js (with a stub dash_clientside)."""
    folder = tmp_path_factory.mktemp("js")
    stub = ("window.dash_clientside = {no_update: {__no_update: true}, callback_context: {triggered: []},"
            " set_props: function (id, props) { (window.setProps = window.setProps || []).push([id, props]); "
            "}};")
    scripts = "".join(f'<script charset="utf-8" src="{path}"></script>'
                      for path in (VIEWS_JS, ASSETS / "explorer.js", ASSETS / "keys.js"))
    (folder / "page.html").write_text('<html><head><meta charset="utf-8"></head><body><div '
                                      'id="explorer-heatmap"></div><div '
                                      f'id="explorer-tokens"></div><script>{stub}</script>{scripts}</body></html>')
    browser = chromium((1200, 900), flags=("--allow-file-access-from-files",))
    browser.get((folder / "page.html").as_uri())
    yield browser
    browser.quit()


def call(page, expression: str, *args):
    """Evaluate `expression` (using P = probe's functions, parts = its internals, args = the arguments)."""
    return page.execute_script("var P = window.dash_clientside.probe, parts = P._parts, args = arguments;"
                               f"return JSON.parse(JSON.stringify({expression}));", *args)


def payload_of(alpha: np.ndarray, tokens, layer: int = 0, causal: bool = True) -> dict:
    return layer_payload("m", list(range(len(tokens))), tokens, layer, alpha, causal,
                         key="k" + str(alpha.shape))


def causal_alpha(rng, heads: int, n: int) -> np.ndarray:
    raw = np.tril(rng.random((heads, n, n)) + 1e-3)
    return (raw / raw.sum(-1, keepdims=True)).astype(np.float32)  # [head query key]


def test_decode_and_head_matrix_return_the_servers_alpha(page):
    alpha = causal_alpha(np.random.default_rng(0), 3, 7)
    payload = payload_of(alpha, [f"t{i}" for i in range(7)])
    for head in range(3):
        got = np.array(call(page, "Array.from(parts.headMatrix(args[0], args[1]))", payload, head))
        np.testing.assert_allclose(got.reshape(7, 7), alpha[head], atol=8e-6)  # uint16 quantisation


def test_pooled_is_a_block_max_and_labels_name_the_blocks(page):
    rng = np.random.default_rng(1)
    n = 600
    alpha = rng.random((n, n)).astype(np.float32)
    out = call(page, "parts.pooled(Float32Array.from(args[0]), args[1], 10, 590, 0, 600)",
               alpha.ravel().tolist(), n)
    factor = out["factor"]
    assert factor == 3  # 580 rows, 600 columns -> ceil(600 / 256)
    window = alpha[10:590, 0:600]
    rows, cols = -(-580 // 3), 200
    expected = np.zeros((rows, cols))
    for r in range(rows):
        for c in range(cols):
            expected[r, c] = window[r * 3:(r + 1) * 3, c * 3:(c + 1) * 3].max()
    np.testing.assert_allclose(np.array(out["z"]), expected, rtol=1e-6)
    tokens = [f"w{i}" for i in range(n)]
    assert call(page, "parts.labels(args[0], 3, 10, 10, 7)", tokens) == ["10–12·w10",
                                                                         "13–15·w13", "16–16·w16"]
    assert call(page, "parts.labels(args[0], 1, 4, 4, 2)", tokens) == ["4·w4", "5·w5"]
    # a negative control: the plain top-left sample of each block is not what is drawn
    assert not np.allclose(np.array(out["z"]), window[::3, ::3][:rows, :cols])


def test_head_max_leaves_out_the_first_query_of_a_causal_model(page):
    alpha = causal_alpha(np.random.default_rng(2), 1, 6)[0]
    flat = alpha.ravel().tolist()
    assert call(page, "parts.headMax(Float32Array.from(args[0]), 6, true)", flat) == pytest.approx(
        float(alpha[1:].max()), rel=1e-6)
    assert call(page, "parts.headMax(Float32Array.from(args[0]), 6, false)", flat) == pytest.approx(1.0)


def test_dominant_offset_and_its_text(page):
    n = 9
    alpha = np.zeros((n, n), dtype=np.float32)
    alpha[0, 0] = 1
    alpha[np.arange(1, n), np.arange(n - 1)] = 1  # previous-token head: argmax i − 1 in 8 of 9 rows
    result = call(page, "parts.dominantOffset(Float32Array.from(args[0]), args[1])",
                  alpha.ravel().tolist(), n)
    assert result == {"offset": -1, "share": pytest.approx(8 / 9)}
    assert [call(page, "parts.offsetText(args[0])", d) for d in (-2, 0, 3)] == ["i − 2", "i", "i + 3"]


def test_share_equals_the_servers_target_share(page):
    rng = np.random.default_rng(3)
    alpha = causal_alpha(rng, 1, 8)[0]
    pattern = np.zeros((8, 8), dtype=bool)
    pattern[np.arange(1, 8), np.arange(7)] = True
    pattern[5, 2] = True
    queries, keys = np.nonzero(pattern)
    for causal in (True, False):
        got = call(page, "parts.share(Float32Array.from(args[0]), 8, args[1], args[2])",
                   alpha.ravel().tolist(), [queries.tolist(), keys.tolist()], causal)
        share, chance, rows = target_share(alpha, pattern, causal)
        assert (got["share"], got["chance"], got["rows"]) == (pytest.approx(share, rel=1e-5),
                                                                pytest.approx(chance), rows)
    assert call(page, "parts.share(new Float32Array(4), 2, [[], []], true)") is None


def test_heatmap_figure_pools_labels_outlines_and_names_the_head(page):
    n = 1024
    alpha = np.zeros((2, n, n), dtype=np.float32)
    alpha[:, 0, 0] = 1
    alpha[1, np.arange(1, n), np.arange(n - 1)] = 1  # head 1: previous token
    alpha[0, np.arange(n), np.arange(n)] = 1  # head 0: self
    tokens = [f"t{i}" for i in range(n)]
    payload = payload_of(alpha, tokens, layer=3)
    pattern = {"heads": [[[1, 2, 600], [0, 1, 599]]], "note": ""}
    templates = {"light": {"layout": {"font": {"color": "#111111"}}},
                 "dark": {"layout": {"font": {"color": "#eeeeee"}}}}
    out = call(page,
               "P.heatmap(args[0], {layer: 3, head: 1}, [], null, args[1], 'previous_token', true, args[2])",
               payload, pattern, templates)
    figure, caption, overlay, offset = out
    z = np.array(figure["data"][0]["z"])
    assert z.shape == (256, 256) and np.all(np.diag(z)[1:] == 1.0) and z[100, 10] == 0.0  # the diagonal kept
    assert figure["data"][0]["x"][1] == "4–7·t4" and (figure["data"][0]["zmin"],
                                                      figure["data"][0]["zmax"]) == (0, 1)
    assert figure["data"][0]["colorbar"]["title"]["text"] == "α (fixed 0–1)"
    # the title names the head and the model (an exported figure says what it shows, issue 44)
    assert figure["layout"]["title"]["text"].startswith("L3H1 · m · 1024 tokens in 256 bins")
    assert figure["layout"]["template"] == templates["dark"]  # the page's theme
    outline = figure["data"][1]
    assert outline["name"] == "previous_token targets" and set(
        zip(outline["y"], outline["x"], strict=True)) == {
        ("0–3·t0", "0–3·t0"), ("600–603·t600", "596–599·t596")}
    assert caption == "L3H1 · 1024 tokens" and offset.startswith("dominant offset: argmax = i − 1")
    assert "previous_token targets" in overlay and "3 rows" in overlay
    # per-head colour maximum, and the other head of the same payload (negative control: a different picture)
    own = call(page, "P.heatmap(args[0], {layer: 3, head: 0}, ['head'], {q0: 0, q1: 8, k0: 0, k1: 8}, null, "
                     "'self', false, args[1])[0]", payload, templates)
    assert "this head's max" in own["data"][0]["colorbar"]["title"]["text"]
    np.testing.assert_allclose(np.array(own["data"][0]["z"]), alpha[0, :8, :8], atol=1e-5)
    assert own["layout"]["title"]["text"] == "L3H0 · m · zoom: queries 0–7, keys 0–7"
    assert own["layout"]["template"] == templates["light"]
    assert own["layout"]["datarevision"] != figure["layout"]["datarevision"]
    # a layer the payload does not hold draws nothing new
    assert call(page, "P.heatmap(args[0], {layer: 2, head: 0}, [], null, null, 'self', false, null)",
                payload) == \
        [{"__no_update": True}] * 4


def test_tick_count_keeps_labels_apart(page):
    assert [call(page, "parts.tickCount(args[0])", px) for px in (20, 160, 380, 2000)] == [2, 10, 23, 40]


def test_layer_of_follows_only_a_change_of_layer(page):
    assert call(page, "P.layerOf({layer: 2, head: 1}, {layer: 1})") == {"layer": 2}
    assert call(page, "P.layerOf({layer: 2, head: 3}, {layer: 2})") == {"__no_update": True}
    assert call(page, "P.layerOf(null, null)") == {"__no_update": True}


def test_view_of_keeps_a_zooms_axis_keys_and_skips_an_autosize(page):
    """The heatmap's zoom reaches the server through viewOf: a relayout's axis keys pass on (ranges, a
    double-click's autorange), other keys are dropped; an {autosize: true} event (plotly's, right after a
    zoom), a dragmode change and no event are no update, so they cannot replace the zoom."""
    no = {"__no_update": True}
    ranges = {"xaxis.range[0]": 1.5, "xaxis.range[1]": 5.5, "yaxis.range[0]": 6.5, "yaxis.range[1]": 2.5}
    assert call(page, "P.viewOf(args[0])", {**ranges, "dragmode": "zoom"}) == ranges
    assert call(page, "P.viewOf(args[0])", {"xaxis.range": [0, 3]}) == {"xaxis.range": [0, 3]}
    reset = {"xaxis.autorange": True, "yaxis.autorange": True}
    assert call(page, "P.viewOf(args[0])", reset) == reset
    for event in ({"autosize": True}, {"dragmode": "pan"}, {"xaxis.rangeslider": True}, None):
        assert call(page, "P.viewOf(args[0])", event) == no


def test_view_of_passes_exactly_the_keys_the_server_checks(page):
    """viewOf's axis-key pattern (explorer.js) and the server's RELAYOUT_KEYS (app/panels/explorer.py) are two
    lists across the JS/Python boundary: every key the server reads passes the browser, and near misses do
    not."""
    from app.panels.explorer import RELAYOUT_KEYS

    event = {key: 1.0 for key in RELAYOUT_KEYS}
    near = {"xaxis.range[2]": 1.0, "zaxis.range": [0, 1], "xaxis2.range[0]": 1.0, "xaxis.rangeslider": True,
            "yaxis.autorange.x": True, "xaxis.range[0] ": 1.0}
    assert call(page, "P.viewOf(args[0])", {**event, **near}) == event


def test_token_view_colours_from_and_to_the_pinned_token(page):
    alpha = causal_alpha(np.random.default_rng(4), 2, 5)
    payload = payload_of(alpha, ["a", "b", "c", "d", "e"], layer=0)
    call(page,
         "P.heatmap(args[0], {layer: 0, head: 1}, [], null, null, 'self', false, null) && null", payload)
    spans = "Array.from(document.querySelectorAll('#explorer-tokens .token'), s => s.title)"
    assert call(page, spans + ".length") == 5
    call(page, "P.tokenState('from', {index: 3})")
    titles = call(page, spans)
    assert [float(t.split("α ")[1]) for t in titles] == pytest.approx(alpha[1, 3].tolist(), abs=1e-3)
    call(page, "P.tokenState('to', {index: 1})")
    titles = call(page, spans)
    assert [float(t.split("α ")[1]) for t in titles] == pytest.approx(alpha[1, :, 1].tolist(), abs=1e-3)
    assert "focus" in call(page, "document.querySelectorAll('#explorer-tokens .token')[1].className")


def test_atlas_click_checks_the_head_and_a_double_click_cancels_it(page):
    shape = {"layers": 2, "heads": 4}
    run = ("var done = arguments[arguments.length - 1]; var r = "
           "window.dash_clientside.probe.atlasClick(arguments[0], arguments[1]); Promise.resolve(r).then(v "
           "=> done(JSON.parse(JSON.stringify(v))));")
    assert page.execute_async_script(run, {"points": [{"x": 3, "y": 1}]}, shape) == {"layer": 1, "head": 3}
    for bad in ({"points": [{"x": 4, "y": 0}]}, {"points": [{"x": "a", "y": 0}]}, {"points": []}, None):
        assert page.execute_async_script(run, bad, shape) == {"__no_update": True}


def test_keys_step_from_the_last_asked_selection(page):
    page.execute_script("window.setProps = []; window.probeState = {selected: {layer: 0, head: 3},"
                        " shape: {layers: 2, heads: 4}};")
    for key in ("ArrowRight", "ArrowRight", "ArrowDown", "ArrowLeft"):
        page.execute_script("document.dispatchEvent(new KeyboardEvent('keydown', {key: arguments[0], "
                            "bubbles: true}))",
                            key)
    sent = json.loads(page.execute_script("return JSON.stringify(window.setProps)"))
    assert [props["data"] for _, props in sent] == [{"layer": 0, "head": 0}, {"layer": 0, "head": 1},
                                                    {"layer": 1, "head": 1}, {"layer": 1, "head": 0}]


def test_layer_steps_and_atlas_clicks_skip_a_hybrids_layers_without_alpha(page):
    """A hybrid (attention in layers 1 and 3 of 5): ↑/↓ visit only those, wrapping; from a layer without α the
    step goes to the nearest layer with α in its direction; the atlas refuses a click on a layer without α.
    Without `attention_layers` every layer is stepped (the control)."""
    hybrid = {"layers": 5, "heads": 2, "attention_layers": [1, 3]}
    step = "window.probeViews.core.step(args[0], args[1], args[2], args[3])"
    assert call(page, step, {"layer": 1, "head": 0}, "layer", 1, hybrid) == {"layer": 3, "head": 0}
    assert call(page, step, {"layer": 3, "head": 1}, "layer", 1, hybrid) == {"layer": 1, "head": 1}
    assert call(page, step, {"layer": 1, "head": 0}, "layer", -1, hybrid) == {"layer": 3, "head": 0}
    assert call(page, step, {"layer": 2, "head": 0}, "layer", 1, hybrid) == {"layer": 3, "head": 0}
    assert call(page, step, {"layer": 2, "head": 0}, "layer", -1, hybrid) == {"layer": 1, "head": 0}
    assert call(page, step, {"layer": 0, "head": 0}, "layer", -1, hybrid) == {"layer": 3, "head": 0}
    assert call(page, step, {"layer": 4, "head": 0}, "layer", 1, hybrid) == {"layer": 1, "head": 0}
    assert call(page, step, {"layer": 1, "head": 1}, "head", 1, hybrid) == {"layer": 1, "head": 0}
    plain = {"layers": 5, "heads": 2}
    assert call(page, step, {"layer": 1, "head": 0}, "layer", 1, plain) == {"layer": 2, "head": 0}
    run = ("var done = arguments[arguments.length - 1];"
           " var r = window.dash_clientside.probe.atlasClick(arguments[0], arguments[1]);"
           " Promise.resolve(r).then(v => done(JSON.parse(JSON.stringify(v))));")
    assert page.execute_async_script(run, {"points": [{"x": 1, "y": 2}]}, hybrid) == {"__no_update": True}
    assert page.execute_async_script(run, {"points": [{"x": 1, "y": 3}]}, hybrid) == {"layer": 3, "head": 1}


def test_head_names_carry_an_encoder_decoders_stack_and_cross_attention_names_its_axes(page):
    """views.js core.headName / layerName with an encoder–decoder's layer names (flat layer -> "cross.L0"),
    and the explorer's title, caption and axes from a layer payload that carries its name; a single-stack
    payload keeps "L3H1" and the plain query/key axes (the control)."""
    names = ["enc.L0", "enc.L1", "dec.L0", "cross.L0"]
    core = "window.probeViews.core"
    assert call(page, f"[{core}.headName(3, 2, args[0]), {core}.headName(0, 1, args[0]), {core}.headName(3, "
                      "2),"
                      f" {core}.layerName(2, args[0]), {core}.layerName(2), {core}.headName(3, 2, null)]",
                names) == ["cross.L0H2", "enc.L0H1", "L3H2", "dec.L0", "L2", "L3H2"]
    alpha = np.full((2, 3, 3), 1 / 3, dtype=np.float32)
    decoder, encoder = ["<s>", "a", "b"], ["a", "b", "c"]
    cross = layer_payload("m", [0, 1, 2], encoder, 3, alpha, False, key="cross", name="cross.L0",
                          query_tokens=decoder, axes=("decoder query", "encoder key"))
    figure, caption = call(page, "P.heatmap(args[0], {layer: 3, head: 1}, [], null, null, 'self', false, "
                                 "null)",
                           cross)[:2]
    assert figure["layout"]["title"]["text"] == "cross.L0H1 · m" and caption == "cross.L0H1 · 3 tokens"
    assert figure["layout"]["yaxis"]["title"]["text"] == "decoder query"
    assert figure["layout"]["xaxis"]["title"]["text"] == "encoder key"
    assert [label.split("·")[-1] for label in figure["data"][0]["y"]] == decoder  # the decoder's own tokens
    assert [label.split("·")[-1] for label in figure["data"][0]["x"]] == encoder
    assert figure["data"][0]["hovertemplate"].startswith("decoder query %{y}<br>encoder key %{x}")
    plain = payload_of(alpha, encoder, layer=3, causal=False)
    figure, caption = call(page, "P.heatmap(args[0], {layer: 3, head: 1}, [], null, null, 'self', false, "
                                 "null)",
                           plain)[:2]
    assert figure["layout"]["title"]["text"] == "L3H1 · m" and caption == "L3H1 · 3 tokens"
    assert (figure["layout"]["yaxis"]["title"]["text"], figure["layout"]["xaxis"]["title"]["text"]) == \
        ("query", "key")
    assert [label.split("·")[-1] for label in figure["data"][0]["y"]] == encoder
    assert call(page, "parts.headLabel({layer: 5}, 0)") == "L5H0"  # an older payload without a name
