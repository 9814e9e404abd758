"""The contact test's power, small version of benchmarks/contact_power.py (docs/proteins.md has the curve):
a head of a random-weight model of ESM-2 8M's shape planted with the true contact map at share s (α' =
(1 − s)·α + s·C / rowsum(C)) is found in every range at s = 1, in the medium and long ranges at s = 0.05, and
nowhere at s = 0 (the model's own head), at the defaults (3 untrained twins) and with no control; planting
changes that head alone."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe.proteins.contacts import predict_contacts
from probe.proteins.significance import with_tests
from probe.proteins.structure import contact_map, read_structure
from tests.proteins.test_untrained_controls import esm2_8m_random

ROOT = Path(__file__).resolve().parents[2]
RANGES = ("short", "medium", "long")
LAYER, HEAD = 3, 7


def _benchmark():
    """benchmarks/contact_power.py as a module (its planting sink and helpers: one definition)."""
    if "contact_power" not in sys.modules:
        path = ROOT / "benchmarks" / "contact_power.py"
        spec = importlib.util.spec_from_file_location("contact_power", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["contact_power"] = module  # before running it: its dataclass looks its module up
        spec.loader.exec_module(module)
    return sys.modules["contact_power"]


@pytest.fixture(scope="module")
def crambin_run():
    """(benchmark module, model, sequence, true map, the twins' table, the unplanted per-head table)."""
    structure = read_structure(ROOT / "tests" / "data" / "pdb1ejg.pdb")
    true_map = contact_map(structure)
    loaded = esm2_8m_random(0)
    plain = predict_contacts(loaded, structure.sequence, true_map, per_head=True, control=3)
    return _benchmark(), loaded, structure.sequence, true_map, plain.control, plain.heads


def test_contact_targets_are_the_rows_of_the_true_map():
    power = _benchmark()
    true_map = np.array([[1, 1, 0, -1], [1, 1, 1, 1], [0, 1, 1, 0], [-1, 1, 0, 1]], dtype=np.int8)
    # the diagonal is not a contact, -1 (unknown) is not one either; each row's contacts share its weight
    np.testing.assert_allclose(power.contact_targets(true_map), [[0, 1, 0, 0], [1 / 3, 0, 1 / 3, 1 / 3],
                                                                 [0, 1, 0, 0], [0, 1, 0, 0]])
    empty = power.contact_targets(np.eye(3, dtype=np.int8))  # only self-contacts: no row has a target
    assert not empty.any()


@pytest.mark.parametrize("share, found", [(0.0, []), (0.05, ["medium", "long"]), (1.0, list(RANGES))])
def test_the_planted_head_is_found_at_full_strength_and_not_at_zero(crambin_run, share, found):
    power, loaded, sequence, true_map, twins, plain = crambin_run
    heads = power.planted_heads(loaded, sequence, true_map, LAYER, HEAD, share)
    planted = (heads["layer"] == LAYER) & (heads["head"] == HEAD)
    # only the planted head changes (s = 0: nothing does)
    table_wide = ("p_fwer", "significant", "untrained", "null_excess", "logit_share")  # every head, or arrays
    columns = [c for c in plain.columns if not c.startswith(table_wide)]
    pd.testing.assert_frame_equal(heads.loc[~planted, columns], plain.loc[~planted, columns])
    if share == 0.0:
        pd.testing.assert_frame_equal(heads[columns], plain[columns])
    for control in (twins, None):  # the defaults (3 twins) and --control none
        table = with_tests(heads, control)
        row = table[planted].iloc[0]
        flagged = [r for r in RANGES if bool(row[f"significant_L_{r}"])]
        assert flagged == found, (share, control is None, flagged)  # crambin's short range: 1 / 20 too weak
    if share == 1.0:  # the planted head is the contact map itself: P@L far above the twins' bar
        table = with_tests(heads, twins)
        assert table.loc[planted, "p_at_L_long"].iloc[0] > 2 * table["untrained_p99_L_long"].iloc[0]
