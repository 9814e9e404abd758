"""The circuit of a head type (probe.circuits.find_circuit), issue 41's acceptance on the organisms:
zoo:induction's L0H1 → L1H0–L1H3 by K-composition and by path patching into keys (most of the induction heads'
joint effect), the graph and fed_by say so; negative controls — the previous-token head's OV zeroed (no L0H1
edge), an untrained twin (no edge at all); zoo:implicit-causality's coreference runs and says what it found;
a type without a corruption is composition only; corruptions keep the length and change what they say."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from probe import models
from probe.circuits.circuit import (
    FED_BY_COLUMNS,
    CircuitConfig,
    fed_by,
    fed_by_columns,
    find_circuit,
    shipped_labels,
)
from probe.circuits.corruption import CORRUPTIONS, corrupted_pairs
from probe.errors import ProbeError
from probe.heads.label import LabelConfig
from probe.untrained import twin_seeds, untrained_twin, untrained_twins

CONFIG = CircuitConfig(examples=16)


@pytest.fixture(scope="module")
def induction():
    loaded = models.load("zoo:induction")
    return loaded, find_circuit(loaded, "induction", shipped_labels("zoo:induction"), CONFIG)


def test_induction_circuit_is_the_previous_token_head_into_keys(induction):
    _, circuit = induction
    assert circuit.receivers == ((1, 0), (1, 1), (1, 2), (1, 3))
    found = circuit.found
    from_prev = found[(found["sender"] == "L0H1") & (found["mode"] == "K")]
    assert sorted(from_prev["receiver"]) == ["L1H0", "L1H1", "L1H2", "L1H3"]
    assert from_prev["beats_random"].all() and from_prev["beats_controls"].all()
    assert (from_prev["score"] > 0.31).all() and (from_prev["z"] > 20).all()
    # path patching L0H1 into the four induction heads' keys recovers most of their joint effect
    effect = float(from_prev["effect"].iloc[0])
    assert circuit.type_effect > 5 and effect > 0.5 * circuit.type_effect
    assert circuit.total_effect == pytest.approx(circuit.type_effect, rel=0.1)  # they carry the corruption
    assert not found[(found["sender"] == "L0H1") & (found["mode"] != "K")].size  # not into queries, values
    assert set(fed_by(circuit)["fed_by"]) == {"L0H1"} and set(fed_by(circuit)["fed_by_mode"]) == {"K"}
    lines = circuit.lines()
    assert lines[0].startswith("zoo:induction · induction: L0H1 → L1H0 L1H1 L1H2 L1H3 by K-composition")
    assert "path patching into keys" in lines[0] and "above every random pair" in lines[0]
    # the graph: the receivers and L0H1 as nodes, its edges in the payload
    payload = circuit.payload()
    nodes = {node["head"]: node for node in payload["nodes"]}
    assert nodes["L0H1"]["labels"] == "previous_token" and nodes["L1H2"]["role"] == "receiver"
    assert sum(edge["in_circuit"] and edge["sender"] == "L0H1" for edge in payload["edges"]) == 4
    # per batch of 8: a clean and a corrupted forward, then the patches 8 per forward (64 rows): the joint
    # (sender, mode) patches, every candidate edge alone, 8 + 8 controls and the type's heads
    patches = len(circuit.edges.drop_duplicates(["sender", "mode"])) + len(circuit.edges) + 8 + 8 + 1
    assert circuit.forwards == 2 * (2 + math.ceil(patches / 8))


def test_negative_control_previous_token_head_ov_zeroed(induction):
    """The twin whose L0H1 writes nothing (its value map zeroed): given the same labels, no edge from L0H1 —
    its composition is unknown (0/0) and patching it changes nothing; the induction heads' joint effect
    collapses."""
    loaded = models.load("zoo:induction")
    with torch.no_grad():
        loaded.model.model.layers[0].self_attn.v_proj.weight[16:32] = 0
    circuit = find_circuit(loaded, "induction", shipped_labels("zoo:induction"), CONFIG)
    assert not (circuit.found["sender"] == "L0H1").any()
    scores = circuit.composition
    assert scores.loc[scores["sender"] == "L0H1", "score"].isna().all()
    assert circuit.type_effect < 0.2 * induction[1].type_effect


def test_untrained_twin_has_no_circuit():
    """The negative control of the circuit search: zoo:induction's untrained twin (probe.untrained: the
    class's own initialisation, seeded) given the same labels finds no edge: composition and path
    patching."""
    loaded = models.load("zoo:induction")
    twin = untrained_twin(loaded, twin_seeds(1)[0])
    circuit = find_circuit(twin, "induction", shipped_labels("zoo:induction"), CONFIG)
    assert circuit.found.empty and not circuit.edges["in_circuit"].any()
    from_prev = circuit.composition[(circuit.composition["sender"] == "L0H1")
                                    & (circuit.composition["mode"] == "K")]
    assert len(from_prev) == 4 and (from_prev["z"].abs() < 3).all()  # at the random baseline
    # composition: `beats_random` is each edge's own uncorrected flag (above every random pair): over the
    # 36 edges a random model may raise one by chance; none of them enters the circuit (asserted above)
    assert circuit.edges["beats_random"].sum() <= 1
    # every (layer-0 head, mode) is a candidate of some receiver here (top 3 of 4 per receiver and mode), so
    # no random pair of the same shape is left to patch against: said, never read as a tested "nothing"
    assert circuit.controls == 0
    assert circuit.lines()[0].startswith(f"{twin.name} · induction: nothing upstream of L1H0 L1H1 L1H2 L1H3 "
                                         "could be tested by path patching")
    # one candidate per receiver and mode leaves controls: then patching is tested, on 3 twins, and finds
    # nothing (the trained organism, the same way: L0H1 into keys, z > 10 against 8 controls)
    narrow = CircuitConfig(examples=8, top_k=1)
    for twin in untrained_twins(loaded, 3):
        circuit = find_circuit(twin, "induction", shipped_labels("zoo:induction"), narrow)
        assert circuit.controls >= 2 and circuit.found.empty, twin.name
        # beats_controls is each edge's own flag against a handful of controls (p ≥ 1/(controls + 1) by
        # chance, uncorrected over the edges): what must stay empty is the circuit, and the effect small
        assert not circuit.edges["in_circuit"].any() and abs(circuit.type_effect) < 0.1, twin.name
        assert "beats its controls (composition and path patching)" in circuit.lines()[0]
    trained = find_circuit(loaded, "induction", shipped_labels("zoo:induction"), narrow)
    assert trained.controls == 8 and set(trained.found["sender"]) == {"L0H1"}
    assert (trained.found["effect_z"] > 10).all() and set(trained.found["mode"]) == {"K"}


def test_implicit_causality_coreference_runs_and_says_what_it_found():
    loaded = models.load("zoo:implicit-causality")
    circuit = find_circuit(loaded, "coreference", shipped_labels("zoo:implicit-causality"), CONFIG)
    assert circuit.corruption == CORRUPTIONS["coreference"] and circuit.probe_set == "causality"
    assert circuit.examples == 16 and circuit.type_effect > 1  # the name swap reaches the loss
    lines = circuit.lines()
    assert lines and all(line.startswith("zoo:implicit-causality · coreference: ") for line in lines)
    assert circuit.found.empty == ("nothing upstream" in lines[0])


def test_a_type_without_a_corruption_is_composition_only():
    loaded = models.load("zoo:brackets")
    circuit = find_circuit(loaded, "bracket", shipped_labels("zoo:brackets"), CONFIG)
    assert circuit.corruption is None and not circuit.edges["patched"].any()
    assert any("no corruption is defined for bracket" in note for note in circuit.notes)
    found = circuit.found
    assert len(found) and found["beats_random"].all()
    assert not found.duplicated(["receiver", "mode"]).any()  # the strongest sender per receiver and mode
    assert all("(composition only: not patched)" in line for line in circuit.lines())
    assert fed_by(circuit)["fed_by_effect"].isna().all()


def test_no_labelled_head_no_circuit():
    loaded = models.load("zoo:induction")
    table = pd.read_csv(shipped_labels("zoo:induction"))
    table["label"] = False
    circuit = find_circuit(loaded, "induction", table, CONFIG)
    assert circuit.receivers == () and circuit.lines() == [
        "zoo:induction · induction: no head is labelled induction: no circuit"]
    with pytest.raises(ProbeError, match="unknown head type"):
        find_circuit(loaded, "nonsense", table)


def test_fed_by_columns_fill_the_labelled_rows_only(induction):
    loaded, _ = induction
    table = pd.read_csv(shipped_labels("zoo:induction"))
    table = table[table["head_type"].isin(["induction", "previous_token"])]
    filled = fed_by_columns(loaded, table, CONFIG)
    labelled = filled[filled["label"] & (filled["head_type"] == "induction")]
    assert set(labelled["fed_by"]) == {"L0H1"} and set(labelled["fed_by_mode"]) == {"K"}
    assert (labelled["fed_by_effect"] > 5).all()
    assert filled.loc[~filled["label"], "fed_by"].isna().all()
    assert filled.loc[filled["head_type"] == "previous_token", "fed_by"].isna().all()  # layer 0: no sender
    assert all(column in filled.columns for column in FED_BY_COLUMNS)


def test_corruptions_keep_the_length_and_change_what_they_say():
    loaded = models.load("zoo:induction")
    config = LabelConfig(seed=0)
    pairs = corrupted_pairs(loaded, "induction", config, examples=8)
    batch = pairs.batches[0]
    clean, corrupted = batch.clean["input_ids"], batch.corrupted["input_ids"]
    assert clean.shape == corrupted.shape and pairs.corruption == CORRUPTIONS["induction"]
    counted = batch.clean["labels"] != -100
    for row in range(len(clean)):
        changed = (clean[row] != corrupted[row]).nonzero().flatten()
        positions = counted[row].nonzero().flatten()
        # the first copy changed, every token of it; the measured second copy (after the changes) untouched
        assert len(changed) >= 2 and changed.max() < positions.min()
        assert (changed == torch.arange(int(changed.min()), int(changed.max()) + 1)).all()
    shifted = corrupted_pairs(loaded, "previous_token", config, examples=4).batches[0]
    ids, moved = shifted.clean["input_ids"], shifted.corrupted["input_ids"]
    assert torch.equal(moved[:, 2:], ids[:, 1:-1])  # <bos> kept, then x′_i = x_{i−1}
    none = corrupted_pairs(loaded, "first_token", config)
    assert not none.batches and "no corruption is defined for first_token" in none.note
    causality = models.load("zoo:implicit-causality")
    swapped = corrupted_pairs(causality, "coreference", config, examples=4).batches[0]
    a, b = swapped.clean["input_ids"], swapped.corrupted["input_ids"]
    for row in range(len(a)):
        diff = (a[row] != b[row]).nonzero().flatten().tolist()
        assert len(diff) == 2 and a[row, diff[0]] == b[row, diff[1]] and a[row, diff[1]] == b[row, diff[0]]


def test_too_few_controls_is_said_not_read_as_nothing_found():
    """K alone on a 2-layer, 4-head model: every layer-0 head but one is a tested candidate, so one random
    pair of the same shape is left to patch against — the circuit says it could not test, and why."""
    loaded = models.load("zoo:induction")
    circuit = find_circuit(loaded, "induction", shipped_labels("zoo:induction"),
                           CircuitConfig(modes=("K",), examples=8))
    assert circuit.controls == 1 and circuit.found.empty
    assert "could be tested by path patching: 1 random sender–receiver pair(s)" in circuit.lines()[0]
    assert any("1 of 8 random sender–receiver controls" in note for note in circuit.notes)
    assert circuit.composition.sort_values("score").iloc[-1]["sender"] == "L0H1"  # the weights still say it
