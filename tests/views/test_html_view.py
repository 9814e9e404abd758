"""One HTML-view protocol (issue 56 item 2): every notebook view is a probe.views.html_view.HtmlView — it
gives its fragment and its page's title, and Jupyter's display methods and saving as an offline page come
from the base class, written once."""

from __future__ import annotations

import pandas as pd
import pytest

from probe.errors import ProbeError
from probe.views.circuit import CircuitView
from probe.views.html_view import HtmlView
from probe.views.pages import is_probe_page
from probe.views.structure_view import StructureView
from probe.views.tables import LabelTable
from probe.views.timeline import TimelineView
from probe.views.view import View

VIEWS = [View, CircuitView, StructureView, TimelineView, LabelTable]


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.__name__)
def test_every_view_takes_the_display_protocol_from_the_base(view):
    assert issubclass(view, HtmlView)
    for name in ("_repr_html_", "_repr_mimebundle_", "save_page"):
        assert name not in vars(view), f"{view.__name__} writes {name} again"
    assert "html" in vars(view) and "page_title" in vars(view)


def test_a_label_table_saves_as_a_page_of_its_own(tmp_path):
    table = pd.DataFrame({"model": ["m"], "layer": [0], "head": [1], "head_name": ["L0H1"],
                          "head_type": ["previous_token"],
                          "score": [0.9], "label": [True]})
    view = LabelTable(table)
    bundle = view._repr_mimebundle_()
    assert bundle["text/html"] == view.html() and bundle["text/plain"] == repr(view)
    path = view.save(tmp_path / "labels.html")
    text = path.read_text(encoding="utf-8")
    assert is_probe_page(path) and "L0H1" in text and "<title>probe labels · m</title>" in text
    with pytest.raises(ProbeError, match=r"labels.txt: save the labels table as \.html$"):
        view.save(tmp_path / "labels.txt")
    with pytest.raises(ProbeError, match="does not exist"):
        view.save(tmp_path / "missing" / "labels.html")
