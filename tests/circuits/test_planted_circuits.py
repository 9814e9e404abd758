"""Circuit search on planted circuits (issue 53, items 4-5): the planted name mover (zoo:name-mover, hand-set
weights, probe.zoo.planted.build_name_mover) — its edges rank first under exact patching and EAP-IG (positive
control), its untrained twin and random circuits of the same size recover far less (negative controls); MIB's
CPR / CMD areas on hand-computed curves; `probe circuit --task FILE --model zoo:name-mover` end to end."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
import torch

from probe import zoo
from probe.circuits.faithfulness import MIB_PERCENTAGES, curve_areas, mib_areas, mib_sizes

# the planted heads (card.json "planted_heads") and the edges exact patching must rank first (card "circuit")
PLANTED_HEADS = {"L0H0", "L1H0"}
CIRCUIT = {(edge["sender"], edge["receiver"], edge["input"]) for edge in zoo.card("name-mover")["circuit"]}


# ------------------------------------------------------------------------------------------------------------
# MIB's CPR and CMD (MIB_circuit_track/evaluation.py evaluate_area_under_curve, written out by hand here)
# ------------------------------------------------------------------------------------------------------------


def test_mib_areas_on_a_hand_computed_curve():
    # f at MIB's x = 0.001 … 1: 0 up to x = 0.05, then 0.2 (0.1), 0.4 (0.2), 1 (0.5), 1 (1).
    shares = [0, 0, 0, 0, 0, 0, 0.2, 0.4, 1.0, 1.0]
    # trapezoids of f: 0.05·0.1 + 0.1·0.3 + 0.3·0.7 + 0.5·1 = 0.005 + 0.03 + 0.21 + 0.5
    # of |1 − f|: (0.05 − 0.001)·1 + 0.05·0.9 + 0.1·0.7 + 0.3·0.3 + 0 = 0.049 + 0.045 + 0.07 + 0.09
    cpr, cmd = mib_areas(shares)
    assert cpr == pytest.approx(0.745, abs=1e-12) and cmd == pytest.approx(0.254, abs=1e-12)
    # the axis is the share of edges itself (linear, from 0.001): a perfect curve has CPR 0.999, CMD 0
    assert mib_areas([1.0] * 10) == pytest.approx((0.999, 0.0), abs=1e-12)
    # CMD counts overshoot: f = 1.2 everywhere is 0.2 from 1 (CPR 1.2 · 0.999)
    assert mib_areas([1.2] * 10) == pytest.approx((1.1988, 0.1998), abs=1e-12)
    # negative control: the same shares on a log axis (MIB's log_scale=True, not its default) differ
    logs = [math.log(p) for p in MIB_PERCENTAGES]
    assert mib_areas(shares, logs)[0] != pytest.approx(cpr, abs=1e-3)


def test_mib_areas_refuse_mismatched_points_and_keep_unknown_as_nan():
    from probe.errors import ProbeError

    with pytest.raises(ProbeError, match="one per point"):
        mib_areas([0.5, 1.0])
    cpr, cmd = mib_areas([0.0] * 9 + [float("nan")])
    assert math.isnan(cpr) and math.isnan(cmd)


def test_curve_areas_read_the_curve_at_mibs_sizes():
    assert mib_sizes(110) == [0, 0, 0, 1, 2, 5, 11, 22, 55, 110]  # int(p · E), truncated as MIB's
    curve = pd.DataFrame({"edges": [0, 1, 2, 5, 11, 22, 55, 110, 7],
                          "share": [0.0, 0.1, 0.2, 0.5, 0.9, 1.0, 1.0, 1.0, 99.0],  # 7 is not MIB's: unused
                          "random_share": [0.0] * 8 + [99.0]})
    cpr, cmd = curve_areas(curve, 110)
    assert (cpr, cmd) == pytest.approx(mib_areas([0, 0, 0, 0.1, 0.2, 0.5, 0.9, 1.0, 1.0, 1.0]), abs=1e-12)
    assert curve_areas(curve, 110, "random_share") == pytest.approx((0.0, 0.999), abs=1e-12)
    # a curve without MIB's points has no areas (NaN, never 0)
    assert all(math.isnan(value) for value in curve_areas(curve[curve["edges"] != 11], 110))


def test_faithfulness_curve_evaluates_mibs_points_and_stores_the_areas():
    from probe.circuits.edges import edge_scores
    from probe.circuits.faithfulness import faithfulness_curve
    from probe.circuits.task import repeat_task
    from probe.zoo.tiny import build_tiny

    model, tokenizer = build_tiny("llama")
    task = repeat_task(tokenizer, pairs=2, block=4)
    table = edge_scores(model, task, method="eap")
    curve = faithfulness_curve(model, task, table, random=1)
    assert set(mib_sizes(len(table))) <= set(curve["edges"])
    areas = curve_areas(curve, len(table))
    assert (curve.attrs["cpr"], curve.attrs["cmd"]) == pytest.approx(areas, abs=1e-12)
    assert curve.attrs["total_edges"] == len(table)
    # explicit sizes without MIB's points: the areas are unknown
    assert math.isnan(faithfulness_curve(model, task, table, sizes=[0, len(table)], random=0).attrs["cpr"])


# ------------------------------------------------------------------------------------------------------------
# The planted name mover
# ------------------------------------------------------------------------------------------------------------


def test_name_mover_is_planted_and_its_files_are_what_the_builder_writes():
    from safetensors.torch import load_file

    from probe.circuits.task import load_task
    from probe.zoo.planted import build_name_mover, name_mover_rows

    assert zoo.planted_names() == ["name-mover"] and "name-mover" not in zoo.names()
    assert zoo.card("name-mover")["planted"] is True
    model, tokenizer = build_name_mover()
    shipped = load_file(zoo.path("name-mover") / "model.safetensors")
    built = model.state_dict()
    assert set(shipped) <= set(built)
    for key, value in shipped.items():
        assert torch.equal(value, built[key]), key
    rows = pd.read_csv(zoo.path("name-mover") / "task.csv").to_dict("records")
    assert rows == name_mover_rows(32)
    task = load_task(zoo.path("name-mover") / "task.csv", tokenizer)
    assert len(task) == 32 and task.corruption.startswith("the repeated name replaced")


def _logit_diffs(model, task, prompts) -> torch.Tensor:
    values = []
    with torch.no_grad():
        for ids, good, bad in zip(prompts, task.correct, task.incorrect, strict=True):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            values.append(float(logits[good] - logits[bad]))
    return torch.tensor(values)


def test_name_mover_does_the_task_and_the_corruption_removes_it():
    import probe
    from probe.circuits.task import load_task

    loaded = probe.load("zoo:name-mover")
    task = load_task(zoo.path("name-mover") / "task.csv", loaded.tokenizer)
    clean = _logit_diffs(loaded.model, task, task.clean)
    corrupted = _logit_diffs(loaded.model, task, task.corrupted)
    # MODEL_CARD.md: 9.67 clean (6.4 to 14.8 per pair), 0.04 corrupted (−2.2 to 3.1)
    assert clean.mean() > 8 and (clean > 3).all()
    assert abs(corrupted.mean()) < 0.5
    # negative control: the model's own untrained twin does nothing of the kind
    from probe.untrained import untrained_twin

    twin = untrained_twin(loaded, 10000).model
    assert abs(_logit_diffs(twin, task, task.clean).mean()) < 0.5


@pytest.fixture(scope="module")
def name_mover():
    """zoo:name-mover on the first 16 pairs of its task file, scored by exact patching and EAP-IG."""
    import probe
    from probe.circuits.edges import edge_scores
    from probe.circuits.task import make_task

    loaded = probe.load("zoo:name-mover")
    rows = pd.read_csv(zoo.path("name-mover") / "task.csv").head(16)
    task = make_task(loaded.tokenizer, *(rows[column].tolist() for column in
                                         ("clean", "corrupted", "correct", "incorrect")))
    return {"loaded": loaded, "task": task, **{method: edge_scores(loaded, task, method=method)
                                               for method in ("exact", "eap-ig")}}


def _edge(row) -> tuple[str, str, str]:
    return row["sender"], row["receiver"], row["input"]


def _planted(edge: tuple[str, str, str]) -> bool:
    """An edge into a planted head, or from the name mover to the logits."""
    return edge[1] in PLANTED_HEADS or edge[:2] == ("L1H0", "logits")


@pytest.mark.slow
def test_exact_patching_ranks_the_planted_circuit_first(name_mover):
    table = name_mover["exact"].sort_values("abs_rank")
    top = [_edge(row) for _, row in table.head(len(CIRCUIT)).iterrows()]
    assert set(top) == CIRCUIT  # positive control: the four edges of the card, in the first four places
    scores = table["score"].abs().to_numpy()
    assert scores[len(CIRCUIT)] < 0.05 * scores[len(CIRCUIT) - 1]  # and they stand out (measured: 0.03)
    gap = table.attrs["clean_metric"] - table.attrs["corrupted_metric"]
    assert gap > 8 and abs(table.attrs["corrupted_metric"]) < 0.5


@pytest.mark.slow
def test_eap_ig_ranks_edges_into_the_planted_heads_first(name_mover):
    table = name_mover["eap-ig"].sort_values("abs_rank")
    top = [_edge(row) for _, row in table.head(5).iterrows()]
    assert all(_planted(edge) for edge in top), top
    assert ("L0H0", "L1H0", "q") in top and ("L1H0", "logits", "logits") in top
    outside = table[[not _planted(_edge(row)) for _, row in table.iterrows()]]
    assert outside["score"].abs().max() < 0.05 * table["score"].abs().iloc[2]
    # where they disagree (docs/circuits.md): EAP-IG misses the name mover's own key (embed → L1H0 k, 3rd by
    # exact patching): its softmax is saturated along the whole interpolation path
    rank = table.set_index(["sender", "receiver", "input"]).loc[("embed", "L1H0", "k"), "abs_rank"]
    assert rank > 5


@pytest.mark.slow
def test_twin_and_random_circuits_recover_far_less(name_mover):
    from probe.circuits.edges import edge_scores
    from probe.circuits.faithfulness import faithfulness_curve
    from probe.untrained import untrained_twin

    loaded, task, exact = name_mover["loaded"], name_mover["task"], name_mover["exact"]
    curve = faithfulness_curve(loaded, task, exact, sizes=[len(CIRCUIT)], random=20).iloc[0]
    assert curve["share"] > 0.9  # the four planted edges keep the behaviour …
    assert curve["random_share"] < 0.1 and curve["random_max"] < 0.6  # … four random edges do not
    gap = exact.attrs["clean_metric"] - exact.attrs["corrupted_metric"]
    twin_table = edge_scores(untrained_twin(loaded, 10000), task, method="exact")
    twin_gap = twin_table.attrs["clean_metric"] - twin_table.attrs["corrupted_metric"]
    assert abs(twin_gap) < 0.05 * gap  # the twin has no behaviour to recover
    assert twin_table["score"].abs().max() < 0.05 * exact["score"].abs().max()


@pytest.mark.slow
def test_circuit_task_command_finds_the_planted_name_mover(capsys, tmp_path):
    from probe.cli import main

    task = tmp_path / "task.csv"  # the first 12 pairs of the shipped task file, as a user would cut it
    pd.read_csv(zoo.path("name-mover") / "task.csv").head(12).to_csv(task, index=False)
    assert main(["circuit", "--model", "zoo:name-mover", "--task", str(task), "--method", "exact"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first = lines.index(next(line for line in lines if line.strip().startswith("rank")))
    top = {tuple(lines[first + k].split()[1:4]) for k in range(1, len(CIRCUIT) + 1)}
    assert top == CIRCUIT
    assert "faithfulness (share of the clean − corrupted gap" in out
    assert "circuit: the top 5 edges" in out  # the fewest on the curve (0, 1, 2, 5, …) keeping ≥ 80 %
    assert "MIB areas over the share of edges kept" in out and "CPR" in out and "CMD" in out
    twin = next(line for line in lines if line.startswith("untrained twin of zoo:name-mover (seed 10000)"))
    model_gap, ratio = re.search(r"against the model's ([0-9.]+) \((-?[0-9.]+)%\)", twin).groups()
    assert float(model_gap) > 8 and abs(float(ratio)) < 5  # the twin's gap: under 5 % of the model's


def test_control_flag_is_read_before_torch():
    from tests.commands.test_cli_fast import heavy_after

    argv = ["circuit", "--model", "zoo:name-mover", "--task", str(zoo.path("name-mover") / "task.csv"),
            "--control", "twins"]
    found = heavy_after(f"from probe.cli import main\ncode = main({argv!r})")
    assert found["heavy"] == [] and "--control 'twins'" in found["err"]
