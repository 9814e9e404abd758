"""probe.views: α as uint8 maps, the pooled capture against eager α, the inline view's data, the labels table,
the figures (SVG, PNG), the one-file report, `probe report`, and the app serving the same views.js."""

from __future__ import annotations

import base64
import json
import math
import re
import xml.etree.ElementTree as ElementTree

import numpy as np
import pandas as pd
import pytest
import torch

from probe import models
from probe.errors import ProbeError
from probe.views import bundle, encode
from probe.views.pooling import pooled_attention
from probe.views.tables import label_table, table_html
from probe.views.view import show
from probe.zoo.planted import PLANTED_HEADS


def _ids(loaded, n: int) -> torch.Tensor:
    return torch.arange(5, 5 + n)[None] % len(loaded.tokenizer)  # [1 token]


def _max_pool(alpha: np.ndarray, factor: int) -> np.ndarray:
    n = alpha.shape[-1]
    side = math.ceil(n / factor)
    padded = np.zeros((side * factor, side * factor), dtype=np.float32)
    padded[:n, :n] = alpha
    return padded.reshape(side, factor, side, factor).max(axis=(1, 3))  # [side side]


# --- encode -------------------------------------------------------------------------------------------------


def test_quantise_round_trip_is_within_half_a_step_of_each_heads_max():
    rng = np.random.default_rng(0)
    maps = rng.dirichlet(np.ones(16), size=(3, 16)).astype(np.float32)  # [map row col], rows sum to 1
    maps[1] *= 0.01  # a faint head keeps its 8 bits: its own scale
    quantised, tops = encode.quantise(maps)
    assert quantised.dtype == np.uint8 and tops.dtype == np.float32
    back = encode.dequantise(quantised, tops)
    assert np.all(np.abs(back - maps) <= tops[:, None, None] / 510 + 1e-7)
    assert np.allclose(tops, maps.reshape(3, -1).max(-1))
    assert quantised.reshape(3, -1).max(-1).tolist() == [255, 255, 255]  # the max of each head is exact


def test_quantise_unknown_is_zero_and_zero_maps_stay_zero():
    quantised, tops = encode.quantise(np.array([[[np.nan, 0.5], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]))
    assert quantised[0].tolist() == [[0, 255], [0, 0]]
    assert quantised[1].tolist() == [[0, 0], [0, 0]] and tops[1] > 0  # no division by zero


def test_the_budget_picks_the_pooling_factor():
    assert encode.pooling_factor(128, 144, encode.DEFAULT_BUDGET) == 1  # 144 × 128² = 2.4 MB ≤ 4 MiB
    assert encode.pooling_factor(1024, 144, encode.DEFAULT_BUDGET) == 7  # side 147: 3.1 MB
    side = math.ceil(1024 / 7)
    assert 144 * encode.bytes_per_head(side) <= encode.DEFAULT_BUDGET
    assert 144 * encode.bytes_per_head(math.ceil(1024 / 6)) > encode.DEFAULT_BUDGET  # 6 would not fit
    assert encode.pooling_factor(1024, 4, encode.DEFAULT_BUDGET) == 1
    assert encode.pooling_factor(1024, 1, 10**9, max_side=256) == 4


# --- the pooled capture -------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_pooled_maps_equal_max_pooled_eager_attention(tiny_dir, arch):
    from probe.engine import capture_attention

    loaded = models.load(str(tiny_dir(arch)))
    ids = _ids(loaded, 11)
    reference = capture_attention(loaded.model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    reference = reference[0].numpy()  # [layer head query key]
    maps, thumbs = pooled_attention(loaded, ids, 3, [(1, 2), (0, 1)], thumb_bins=4)
    assert sorted(maps) == [(0, 1), (1, 2)]
    for (layer, head), pooled in maps.items():
        assert pooled.shape == (4, 4)
        np.testing.assert_allclose(pooled, _max_pool(reference[layer, head], 3), atol=1e-6)
    assert thumbs.shape == (loaded.n_layers, loaded.n_heads, 4, 4)
    np.testing.assert_allclose(thumbs[1, 3], _max_pool(reference[1, 3], 3), atol=1e-6)
    full, _ = pooled_attention(loaded, ids, 1, None, thumb_bins=4)
    assert len(full) == loaded.n_layers * loaded.n_heads
    np.testing.assert_allclose(full[(0, 0)], reference[0, 0], atol=1e-6)


# --- the inline view ----------------------------------------------------------------------------------------


def _labels(loaded) -> pd.DataFrame:
    """previous_token scores: L0H0 labelled (0.9), L0H1 at chance (not significant), the rest unknown."""
    return pd.DataFrame([
        {"model": loaded.name, "layer": 0, "head": 0, "head_type": "previous_token", "score": 0.9,
         "ci_low": 0.85, "ci_high": 0.95, "chance": 0.1, "q_value": 0.0001, "label": True,
         "output_share": 0.8, "role": "function"},
        {"model": loaded.name, "layer": 0, "head": 1, "head_type": "previous_token", "score": 0.12,
         "ci_low": 0.05, "ci_high": 0.2, "chance": 0.1, "q_value": 0.6, "label": False,
         "output_share": float("nan"), "role": ""},
        {"model": loaded.name, "layer": 1, "head": 2, "head_type": "previous_token", "score": 0.5,
         "ci_low": 0.4, "ci_high": 0.6, "chance": 0.1, "q_value": 0.01, "label": False, "output_share": 0.3,
         "role": ""},
    ])


def test_show_sends_typed_arrays_that_decode_to_the_planted_heads(planted):
    ids = _ids(planted, 12)
    view = show(planted, ids[0].tolist(), labels=_labels(planted))
    data = view.payload()
    assert data["maps"]["factor"] == 1 and data["maps"]["bins"] == 12
    # base64, no lists
    assert isinstance(data["maps"]["data"], str) and isinstance(data["thumbs"]["data"], str)
    raw = np.frombuffer(base64.b64decode(data["maps"]["data"]), dtype=np.uint8)
    assert raw.size == 12 * 12 * len(data["maps"]["index"])  # one byte per cell: the stated budget
    tops = np.frombuffer(base64.b64decode(data["maps"]["scale"]), dtype="<f4")
    alpha = raw.reshape(-1, 12, 12).astype(np.float32) * (tops[:, None, None] / 255)
    index = [tuple(pair) for pair in data["maps"]["index"]]
    previous = alpha[index.index((0, 0))]  # planted previous-token head: row i attends to i − 1
    assert (previous[1:].argmax(-1) == np.arange(11)).all()
    self_head = alpha[index.index((0, 1))]
    assert (self_head.argmax(-1) == np.arange(12)).all()  # the negative control: it attends to itself
    assert PLANTED_HEADS[(0, 0)] == "previous_token"
    assert view.selected == (0, 0)  # the best labelled head first
    marks = data["badges"]["previous_token"]
    assert marks["0:0"] == ["0.90 ✓", "labelled", ""] and marks["0:1"][:2] == ["0.12", "faint"]
    assert marks["1:2"][1] == "faint"  # above chance but not labelled: grey too, with its reason
    assert marks["1:2"][2] == "not labelled"  # q 0.01 but no label, and nothing in the row says why
    html = view._repr_html_()
    assert "window.probeViews" in html and 'data-probe-view="' in html and "http" not in html.replace(
        "http://www.w3.org/2000/svg", "")
    bundle_ = view._repr_mimebundle_()
    assert set(bundle_) == {"text/html", "text/plain"}


def test_show_keeps_the_budget_by_pooling_and_refuses_bad_heads(planted):
    view = show(planted, _ids(planted, 40)[0].tolist(), budget=8 * 20 * 20)
    assert view.factor == 2 and view.side == 20 and len(view.maps) == 8
    only = show(planted, _ids(planted, 40)[0].tolist(), heads=["L1H2"], budget=8 * 20 * 20)
    assert list(only.maps) == [(1, 2)] and only.factor == 1  # one head fits at every token
    with pytest.raises(ProbeError, match="L5H0 does not exist"):
        show(planted, "a b", heads=["L5H0"])
    with pytest.raises(ProbeError, match="one input"):
        show(planted, [[1, 2], [3, 4]])
    with pytest.raises(ProbeError, match="outside .* vocabulary"):
        show(planted, [1, 10**6])


def test_json_in_the_page_cannot_close_its_script(planted):
    view = show(planted, _ids(planted, 4)[0].tolist())
    hostile = type(view)(**{**view.__dict__, "tokens": ("</script><b>", "a", "b", "c")})
    html = hostile.html("x")
    payload = html.split('<script type="application/json" id="x-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(payload)["tokens"][0] == "</script><b>"


# --- figures ------------------------------------------------------------------------------------------------


def test_svg_figures_have_the_token_labels_and_every_head(planted, tmp_path):
    view = show(planted, _ids(planted, 6)[0].tolist())
    path = view.save(tmp_path / "map.svg", head="L0H0")
    root = ElementTree.parse(path).getroot()
    texts = [node.text for node in root.iter("{http://www.w3.org/2000/svg}text")]
    labels = [t for t in texts if t and "·" in t]
    assert len(labels) == 12 and labels[0].startswith("0·")  # 6 query + 6 key labels
    assert "L0H0" in root.find("{http://www.w3.org/2000/svg}title").text
    grid = ElementTree.parse(view.save(tmp_path / "grid.svg", which="grid")).getroot()
    assert len(list(grid.iter("{http://www.w3.org/2000/svg}image"))) == planted.n_layers * planted.n_heads
    page = view.save(tmp_path / "view.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "probeViews.mountAll" in page
    with pytest.raises(ProbeError, match=r"\.svg, \.png or \.html"):
        view.save(tmp_path / "x.pdf")
    with pytest.raises(ProbeError, match="L9H0 is not a head"):
        view.save(tmp_path / "x.svg", head="L9H0")


def test_png_from_python_with_kaleido(planted, tmp_path):
    pytest.importorskip("kaleido")
    import shutil

    if not (shutil.which("chromium") or shutil.which("google-chrome")):
        pytest.skip("kaleido needs a Chrome/Chromium")
    view = show(planted, _ids(planted, 6)[0].tolist())
    for which in ("map", "grid"):
        path = view.save(tmp_path / f"{which}.png", which=which)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width >= 400 and height >= 300  # scale 2 of a plotly figure, not a thumbnail


def test_png_from_python_without_kaleido_names_the_fix(planted, tmp_path, monkeypatch):
    import sys

    view = show(planted, _ids(planted, 6)[0].tolist())
    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido -> ImportError
    with pytest.raises(ProbeError, match="pip install kaleido"):
        view.save(tmp_path / "map.png")
    assert not (tmp_path / "map.png").exists()


# --- the labels table ---------------------------------------------------------------------------------------


def test_label_table_is_sorted_coloured_and_says_unknown(planted):
    table = _labels(planted)
    html = table_html(table)
    heads = re.findall(r'<tr data-head="(L\d+H\d+)"', html)
    assert heads == ["L0H0", "L1H2", "L0H1"]  # labelled first, then best score first
    assert re.search(r'<tr data-head="L0H1" class="faint" title="not labelled: ', html)  # grey, with why
    assert re.search(r'<tr data-head="L1H2" class="faint" title="not labelled: ', html)  # not labelled: grey
    assert not re.search(r'<tr data-head="L0H0" class="faint"', html)
    assert "✓ labelled" in html and ">unknown<" in html and "nan" not in html.lower().replace("nan</", "")
    assert "[0.850, 0.950]" in html and "&lt; 0.001" in html
    only = table_html(table, only_labelled=True)
    assert re.findall(r'<tr data-head="(L\d+H\d+)"', only) == ["L0H0"]
    rendered = label_table(table)._repr_html_()
    assert 'class="probe-table"' in rendered and "probeViews.mountAll" in rendered
    with pytest.raises(ProbeError, match="lacks the columns"):
        label_table(pd.DataFrame({"layer": [0]}))


def test_another_models_label_table_is_refused_in_one_line(planted, tmp_path, capsys):
    """A table of another model (issue 44, escape 1) is refused by probe.show, the report and `probe report`,
    never drawn as this model's labels; the same weights named by another path (its revision) are accepted."""
    from probe.cli import main
    from probe.views.report import report_html

    other = _labels(planted).assign(model="zoo:positional", revision="sha256:other")
    ids = _ids(planted, 8)[0].tolist()
    with pytest.raises(ProbeError, match=r"holds no row of .*its rows are of zoo:positional") as error:
        show(planted, ids, labels=other)
    assert "\n" not in str(error.value)
    with pytest.raises(ProbeError, match="holds no row of"):
        report_html(planted, labels=other, seq_len=8)
    path = tmp_path / "positional.csv"
    other.to_csv(path, index=False)
    assert main(["report", "--model", planted.name, "--labels", str(path), "--seq-len", "8",
                 "--out", str(tmp_path / "r.html")]) == 2
    assert "holds no row of" in capsys.readouterr().err and not (tmp_path / "r.html").exists()
    # a head the model lacks (a table built by hand, no model column)
    with pytest.raises(ProbeError, match="L7H0|layer 7 head 0"):
        show(planted, ids, labels=_labels(planted).drop(columns="model").assign(layer=7))
    # the same weights by another name: matched by the revision
    renamed = _labels(planted).assign(model=planted.name + "/", revision=planted.revision)
    assert show(planted, ids, labels=renamed).badges["previous_token"]["0:0"][0] == "0.90 ✓"
    # rows of this model among another's: only this model's are drawn
    mixed = pd.concat([_labels(planted), other.assign(layer=0, head=3)], ignore_index=True)
    assert "0:3" not in show(planted, ids, labels=mixed).badges["previous_token"]


def test_show_refuses_a_head_the_model_lacks_and_an_empty_map_side(planted):
    """Issue 44, escape 9: selected="L9H9" on a 2-layer model and max_side=0 drew a view."""
    ids = _ids(planted, 8)[0].tolist()
    for selected in ("L9H9", (0, 9)):
        with pytest.raises(ProbeError, match="has layers 0..1 and heads 0..3"):
            show(planted, ids, selected=selected)
    with pytest.raises(ProbeError, match="max_side=0"):
        show(planted, ids, max_side=0)
    assert show(planted, ids, selected="L1H3").selected == (1, 3)


# --- the report ---------------------------------------------------------------------------------------------


def _no_requests(page: str) -> None:
    """Nothing in the page would reach the network: no src/href to http(s), no @import, no fetch of a URL."""
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "@import" not in page and "cdn" not in page.lower()


def test_report_is_one_self_contained_file(planted, tmp_path):
    from probe.views.report import write_report

    path = write_report(planted, tmp_path / "report.html", labels=_labels(planted), seq_len=32)
    page = path.read_text()
    _no_requests(page)
    for section in ("Architecture", "Head atlas", "Labelled heads", "Every head on one input"):
        assert f"<h2>{section}</h2>" in page
    assert page.count("window.probeViews = {") == 1  # views.js inlined once
    data = json.loads(re.search(r'id="probe-report-view-data">(.*?)</script>', page, re.S).group(1))
    assert data["n"] == 32 and len(data["maps"]["index"]) == planted.n_layers * planted.n_heads  # all fit
    assert data["selected"] == [0, 0]
    assert "previous_token" in page and "0 labelled" not in page.split("previous_token")[1][:40]


def test_report_keeps_a_few_full_maps_when_all_do_not_fit(planted, tmp_path):
    from probe.views.report import report_html

    page = report_html(planted, labels=_labels(planted), seq_len=64, full_maps=2, budget=2 * 64 * 64 + 16)
    data = json.loads(re.search(r'id="probe-report-view-data">(.*?)</script>', page, re.S).group(1))
    assert [tuple(p) for p in data["maps"]["index"]][:1] and (0,
                                                              0) in [tuple(p) for p in data["maps"]["index"]]
    assert len(data["maps"]["index"]) == 2 and data["maps"]["factor"] == 1


def test_protein_report_has_contacts_and_the_base_rate(tiny_dir, ubiquitin_structure, tmp_path):
    from probe.views.report import write_report

    loaded = models.load(str(tiny_dir("esm")))
    page = write_report(loaded, tmp_path / "protein.html", structure=ubiquitin_structure).read_text()
    _no_requests(page)
    assert "<h2>Contacts</h2>" in page and "base rate" in page and "true contacts" in page
    assert "enrichment" in page


def test_probe_report_command(planted, tmp_path, capsys):
    from probe.cli import main

    labels = tmp_path / "labels.csv"
    _labels(planted).to_csv(labels, index=False)
    out = tmp_path / "r.html"
    assert main(["report", "--model", planted.name, "--labels", str(labels), "--seq-len", "16",
                 "--out", str(out)]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().err
    assert main(["report", "--model", planted.name, "--out", str(tmp_path / "r.pdf")]) == 2
    assert "extension" in capsys.readouterr().err
    assert main(["report", "--model", planted.name, "--structure", str(tmp_path / "none.pdb"),
                 "--out", str(out)]) == 2


def test_probe_report_never_overwrites_a_users_own_html_without_force(planted, tmp_path, capsys):
    """Issue 44, escape 6: `probe report` (and `probe label --report`) refuse an --out that is not a page
    probe wrote, as label, contacts and profile refuse a foreign file; --force overwrites; our own report is
    replaced without it."""
    from probe.cli import main
    from probe.views.pages import is_probe_page

    out = tmp_path / "mine.html"
    out.write_text("<html><body>my notes</body></html>")
    argv = ["report", "--model", planted.name, "--seq-len", "8", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is not a page probe wrote" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == "<html><body>my notes</body></html>"
    labels = tmp_path / "t.csv"
    assert main(["label", "--model", planted.name, "--out", str(labels), "--report", str(out)]) == 2
    assert "is not a page probe wrote" in capsys.readouterr().err and not labels.exists()
    assert main([*argv, "--force"]) == 0 and is_probe_page(out)
    assert main(argv) == 0  # our own report: replaced without --force
    capsys.readouterr()
    assert main(["report", "--model", planted.name, "--labels", str(tmp_path), "--out", str(out)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_probe_label_writes_the_report_at_the_end(planted, tmp_path, capsys, monkeypatch):
    from probe import models
    from probe.cli import main

    loads = []  # every models.load of the command: the run's one, and no second for the report
    load = models.load
    monkeypatch.setattr(models, "load",
                        lambda *args, **kwargs: loads.append(args[0]) or load(*args, **kwargs))
    out, report = tmp_path / "labels.csv", tmp_path / "report.html"
    # 4 probes: 2 documents a half, the fewest a held-out confirmation can test (issue 57)
    assert main(["label", "--model", planted.name, "--types", "previous_token", "--examples", "4",
                 "--bootstrap", "20", "--ablate", "none", "--seq-len", "16", "--out", str(out),
                 "--report", str(report)]) == 0
    assert len(loads) == 1  # the report drew the model the run loaded (issue 40)
    page = report.read_text()
    assert "previous_token" in page and "<h2>Labelled heads</h2>" in page and 'data-head="L0H0"' in page
    assert main(["label", "--model", planted.name, "--model", planted.name + "/", "--out", str(out),
                 "--report", str(report)]) == 2
    assert "one model" in capsys.readouterr().err
    assert main(
        ["label", "--model", planted.name, "--out", str(out), "--report", str(tmp_path / "r.txt")]) == 2


# --- one view layer: the app serves the package's views.js --------------------------------------------------


def test_the_app_loads_the_packages_views_js_before_its_explorer(tiny_dir):
    from app import create_app
    from app.config import AppConfig

    dash_app = create_app(AppConfig(models=(str(tiny_dir("gpt2")),)))
    client = dash_app.server.test_client()
    page = client.get("/").get_data(as_text=True)
    scripts = re.findall(r'<script src="([^"]+)"', page)
    views = scripts.index(bundle.SCRIPT_URL)
    assert views < next(i for i, src in enumerate(scripts) if "explorer.js" in src)
    served = client.get(bundle.ROUTE + "views.js")
    assert served.status_code == 200 and served.get_data(as_text=True) == bundle.asset_text("views.js")
    assert client.get(bundle.ROUTE + "secret.py").status_code == 404


def test_app_run_refuses_an_unknown_mode():
    import probe

    with pytest.raises(ProbeError, match="jupyter_mode"):
        probe.app.run(jupyter_mode="sideways")


def test_a_local_copy_of_shipped_weights_gets_the_shipped_labels(tmp_path):
    """Issue 55 item 12: shipped label tables are found by the weights' content hash too, so a copy of an
    organism's or of MiniLM's folder gets them (the table's revision column then matches its rows); a copy
    whose weights differ by one byte (same size: the size filter passes) gets none."""
    import shutil
    from pathlib import Path

    from probe import zoo
    from probe.hashing import weights_hash
    from probe.heads.tables import rows_of_model
    from probe.specs import LABELS_DIR, packaged_dir, shipped_labels_path

    copy = Path(shutil.copytree(zoo.path("induction"), tmp_path / "induction-copy"))
    assert shipped_labels_path(str(copy)) == zoo.path("induction") / "labels.csv"
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert shipped_labels_path(str(copy)) is None  # other weights: no shipped table
    minilm = packaged_dir("sentence-transformers/all-MiniLM-L6-v2")
    if minilm is None:
        pytest.skip("the MiniLM package is not installed")
    local = tmp_path / "my-minilm"
    local.mkdir()
    for item in minilm.iterdir():  # a local copy: the weights linked (90 MB), the rest copied
        if item.name == "model.safetensors":
            (local / item.name).symlink_to(item)
        elif item.is_file():
            shutil.copy(item, local / item.name)
    found = shipped_labels_path(str(local))
    assert found == LABELS_DIR / "all-MiniLM-L6-v2.csv"
    rows = rows_of_model(pd.read_csv(found), str(local), weights_hash(local))
    assert len(rows) and (rows["revision"] == weights_hash(local)).all()


def test_z_values_never_print_a_negative_zero():
    """Issue 55 item 12: "z -0.0" — a z that rounds to zero is written 0.0 in the labelled-heads table (report
    and app), the label summary and the findings."""
    from probe.heads.label.table import z_text
    from probe.views.tables import table_html

    row = {"model": "m", "layer": 0, "head": 0, "head_name": "L0H0", "head_type": "induction", "score": 0.5,
           "label": True, "ablation_effect": 0.01, "ablation_z": -0.04, "group_effect": -0.2,
           "group_z": -3.46}
    page = table_html(pd.DataFrame([row]))
    assert "(z 0.0)" in page and "z -0.0" not in page and "(z -3.5)" in page
    assert z_text(-0.04).startswith("z 0.0:") and z_text(-3.0) == "z -3.0"
