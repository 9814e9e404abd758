"""docs/howto/head-type.md followed as a user would: its Python blocks run in order from outside the package
(the targets function, the spec registered with ``probe.heads.register``, the label run on zoo:induction), and
the type then shows where the page says it does — the label table and the dashboard's type list — and is gone
again after ``unregister``. Its "Files to touch" names at most 6 files."""

from __future__ import annotations

import pytest
import torch

import probe.heads
from probe.heads.registry import REGISTRY, target_pattern
from probe.heads.tables import labelled_mask
from tests.howto import DOCS, files_to_touch, python_blocks

PAGE = (DOCS / "howto" / "head-type.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def followed():
    """The page's three blocks run in one namespace; the type unregistered afterwards."""
    namespace: dict = {}
    blocks = python_blocks(PAGE)
    assert len(blocks) >= 3, "the how-to lost a step"
    try:
        for block in blocks[:3]:
            exec(compile(block, "docs/howto/head-type.md", "exec"), namespace)  # noqa: S102 - the page's code
        yield namespace
    finally:
        if "first_copy" in REGISTRY:
            probe.heads.unregister("first_copy")


def test_the_pages_targets_are_the_first_earlier_copy(followed):
    # hand-computed: tokens a b a b a — row 2 (a) → key 0; row 3 (b) → key 1; row 4 (a) → key 0 only (not 2)
    ids = torch.tensor([5, 6, 5, 6, 5])
    expected = torch.zeros(5, 5, dtype=torch.bool)
    expected[2, 0] = expected[3, 1] = expected[4, 0] = True
    assert torch.equal(target_pattern("first_copy", ids), expected)
    # negative control: the built-in duplicate-token type marks every earlier copy (row 4 → keys 0 and 2)
    assert target_pattern("duplicate_token", ids)[4].nonzero().flatten().tolist() == [0, 2]


def test_the_pages_label_run_labels_no_head_on_zoo_induction(followed):
    table = followed["table"]  # the last block: label_model(loaded, LabelConfig(types=("first_copy",)))
    rows = table[table["head_type"] == "first_copy"]
    loaded = followed["loaded"]
    assert len(rows) == loaded.n_layers * loaded.n_heads  # every head once
    assert not labelled_mask(rows["label"]).any()  # "which is the right answer"
    assert rows["score"].notna().all() and rows["chance"].notna().all()


def test_the_type_is_in_the_dashboards_type_list_while_registered(followed, tiny_dir):
    from app.config import AppConfig
    from app.panels.page import head_types_for
    from app.service import Service

    spec = str(tiny_dir("gpt2"))
    assert "first_copy" in head_types_for(Service(AppConfig(models=(spec,))), spec)


def test_unregistered_the_type_is_gone(followed):
    probe.heads.unregister("first_copy")
    try:
        assert "first_copy" not in REGISTRY
    finally:
        probe.heads.register(followed["spec"])  # the module's other tests may still read it


def test_the_page_names_at_most_six_files():
    named = files_to_touch(PAGE)
    assert 1 <= len(named) <= 6, sorted(named)
