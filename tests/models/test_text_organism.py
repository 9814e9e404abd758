"""The natural-text organisms' acceptance (issue 42), slow: the shipped recipes trained from scratch (seed 0),
labelled on the held-out text, and their histories.

* the 2-layer organism meets its card's requirements — a labelled previous-token head in layer 0 and an
  induction head in layer 1, on text it did not train on (probe label's GAP development probes);
* the 1-layer twin has no induction head;
* across the 2-layer organism's checkpoints the ICL score drops by at least ICL_MARGIN nats between the
  last checkpoint before its induction score rises and the first where it has risen, and the 1-layer
  twin's ICL score changes by less than half of that over the same steps.

NOT YET PASSING (docs/zoo.md, "The natural-text organisms"): at this scale no induction head had formed in the
runs that fit the shared machine; this test is the bar the recipes must reach before their weights ship.
"""

from __future__ import annotations

import pytest

from probe.heads.label import LabelConfig
from probe.zoo import check_requirements

pytestmark = pytest.mark.slow

ICL_MARGIN = 0.1  # nats: the drop inside the window where the induction score rises
RISEN, FLAT = 0.3, 0.1  # best layer-1 induction score after / before the rise


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from probe.training.train import train

    out = {}
    for name in ("natural-text", "natural-text-1layer"):
        directory = tmp_path_factory.mktemp(name)
        card = train(name, 0, directory, label=True)
        out[name] = (directory, card)
    return out


@pytest.fixture(scope="module")
def histories(runs):
    from probe.runs.history import history

    return {name: history(str(directory), progress=False).table for name, (directory, _) in runs.items()}


def test_two_layer_organism_has_previous_token_and_induction_heads_on_held_out_text(runs):
    _, card = runs["natural-text"]
    assert card["requirements_failed"] == []
    assert card["train_seconds"] <= 15 * 60


def test_one_layer_twin_has_no_induction_head(runs):
    import pandas as pd

    directory, card = runs["natural-text-1layer"]
    table = pd.read_csv(directory / "labels.csv")
    assert check_requirements(table, {"absent": [{"head_type": "induction"}]}) == []
    assert card["requirements_failed"] == []


def test_icl_drops_where_induction_rises_and_not_in_the_one_layer_twin(histories):
    two = histories["natural-text"]
    heads = two[(two["row"] == "head") & (two["layer"] == 1)]
    best = heads.groupby("step")["induction"].max().sort_index()
    icl = two[two["row"] == "checkpoint"].set_index("step")["icl_score"].sort_index()
    after = best[best >= RISEN].index.min()
    before = best[(best < FLAT) & (best.index < after)].index.max()
    assert icl[before] - icl[after] >= ICL_MARGIN
    one = histories["natural-text-1layer"]
    control = one[one["row"] == "checkpoint"].set_index("step")["icl_score"]
    assert abs(control[before] - control[after]) < ICL_MARGIN / 2


def test_default_label_config_is_what_the_cards_use():
    from probe.training.organisms import ORGANISMS

    for name in ("natural-text", "natural-text-1layer"):
        assert LabelConfig(**ORGANISMS[name].label_config) == LabelConfig()
