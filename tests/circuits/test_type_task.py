"""A head type's own paired probes as a Task (probe.circuits.type_tasks.type_task): the rows are the
type's measured positions (with metric loss, the task's clean value is the type's own loss), the positions
cap, refusals, and EAP-IG on zoo:induction's own induction task ranking L0H1 first into each induction head's
key. The per-task direct logit attribution (probe.circuits.attribution.task_attribution) against
direct_logit_attribution."""

from __future__ import annotations

import pytest
import torch

from probe.circuits.corruption import CORRUPTIONS, corrupted_pairs
from probe.circuits.task import metric_values
from probe.circuits.type_tasks import type_task
from probe.errors import ProbeError


@pytest.fixture(scope="module")
def induction():
    import probe

    return probe.models.load("zoo:induction")


def test_rows_are_the_types_measured_positions(induction):
    pairs = corrupted_pairs(induction, "induction", examples=2)
    task = type_task(induction, "induction", examples=2, positions=None)
    labels = [row for batch in pairs.batches for row in batch.clean["labels"].tolist()]
    clean = [row for batch in pairs.batches for row in batch.clean["input_ids"].tolist()]
    bad = [row for batch in pairs.batches for row in batch.corrupted["input_ids"].tolist()]
    expected = [(tuple(ids[:t]), tuple(wrong[:t]), ids[t])
                for ids, wrong, label in zip(clean, bad, labels, strict=True)
                for t in range(1, len(ids)) if label[t] != -100]
    assert len(task) == len(expected) == sum(label != -100 for row in labels for label in row) == 49
    assert list(zip(task.clean, task.corrupted, task.correct, strict=True)) == expected
    # induction keeps the second copy: the incorrect answer is the corrupted first copy's token where the
    # clean answer was, never the answer itself
    assert all(wrong != right for wrong, right in zip(task.incorrect, task.correct, strict=True))
    first = task.clean[0]
    size = len(first) - first.index(task.correct[0])  # the answer's earlier occurrence, `size` back
    assert task.incorrect[0] == task.corrupted[0][len(first) - size]
    assert task.corruption == f"induction: {CORRUPTIONS['induction']}" and task.metric == "loss"


def test_loss_metric_is_the_types_own_loss(induction):
    """The mean over rows of −log p(correct) equals the model's cross-entropy on the clean probes with the
    type's labels (the token mean: what probe circuit --type patches)."""
    pairs = corrupted_pairs(induction, "induction", examples=3)
    task = type_task(induction, "induction", examples=3, positions=None)
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in pairs.batches:
            labels = batch.clean["labels"]
            loss = induction.model(input_ids=batch.clean["input_ids"], labels=labels).loss
            n = int((labels[:, 1:] != -100).sum())
            total, count = total + float(loss) * n, count + n
        values = []
        for ids, right, wrong in zip(task.clean, task.correct, task.incorrect, strict=True):
            logits = induction.model(input_ids=torch.tensor([ids])).logits[:, -1]
            values.append(float(metric_values("loss", logits, torch.tensor([right]), torch.tensor([wrong]))))
    assert count == len(task)
    assert sum(values) / len(values) == pytest.approx(total / count, rel=1e-5)
    # negative control: the other metric on the same rows is another number
    assert sum(values) / len(values) != pytest.approx(-total / count, rel=1e-2)


def test_positions_keep_the_most_shared_lengths(induction):
    every = type_task(induction, "induction", examples=16, positions=None)
    task = type_task(induction, "induction", examples=16)  # positions=4
    lengths = {len(ids) for ids in task.clean}
    assert len(lengths) == 4 and len({len(ids) for ids in every.clean}) > 4
    counts = {length: sum(len(ids) == length for ids in every.clean)
              for length in {len(ids) for ids in every.clean}}
    assert min(counts[length] for length in lengths) >= max(
        count for length, count in counts.items() if length not in lengths)
    kept = set(zip(task.clean, task.correct, strict=True))
    assert kept <= set(zip(every.clean, every.correct, strict=True))


def test_types_without_a_corruption_and_bad_arguments_are_refused(induction):
    with pytest.raises(ProbeError, match="first_token has no corruption.*induction, duplicate_token"):
        type_task(induction, "first_token")
    with pytest.raises(ProbeError, match="unknown metric"):
        type_task(induction, "induction", metric="acc")
    with pytest.raises(ProbeError, match="positions must be at least 1"):
        type_task(induction, "induction", positions=0)


def test_a_masked_lm_is_refused():
    import probe

    loaded = probe.models.load("zoo:esm-random")  # a protein masked LM
    with pytest.raises(ProbeError, match="zoo:esm-random is not a causal LM"):
        type_task(loaded, "induction")


@pytest.mark.slow
def test_eap_ig_on_the_induction_type_ranks_l0h1_into_each_induction_key(induction):
    from probe.circuits.edges import edge_scores

    task = type_task(induction, "induction", examples=16)
    table = edge_scores(induction, task, method="eap-ig", steps=5)
    keys = table[(table["input"] == "k") & (table["receiver_layer"] == 1)]
    top = keys.loc[keys.groupby("receiver")["score"].apply(lambda s: s.abs().idxmax())]
    assert list(top["sender"]) == ["L0H1"] * 4
    assert top["abs_rank"].max() <= 16  # of 110 edges, after embed → L0H1 v and the heads → logits
    # the corruption costs the model its loss on the second copy (nats)
    assert table.attrs["clean_metric"] < 0.1 and table.attrs["corrupted_metric"] > 10


def test_task_attribution_is_the_mean_of_direct_logit_attribution(induction):
    from probe.circuits.attribution import attribution_lines, direct_logit_attribution, task_attribution
    from probe.circuits.task import repeat_task

    task = repeat_task(induction.tokenizer, pairs=4, block=8, seed=1)
    table = task_attribution(induction, task)
    singles = [direct_logit_attribution(induction, list(ids), right, wrong)["dla"].to_numpy()
               for ids, right, wrong in zip(task.clean, task.correct, task.incorrect, strict=True)]
    assert table["dla"].to_numpy() == pytest.approx(sum(singles) / 4, abs=1e-12)
    heads = table[table["kind"] == "head"].set_index("component")["dla"]
    # the induction heads push the answer; the previous-token head barely does
    assert heads[["L1H0", "L1H1", "L1H2", "L1H3"]].to_numpy() == pytest.approx(
        [3.0863, 3.2415, 2.9039, 3.6258], abs=1e-3)
    assert heads["L0H1"] == pytest.approx(0.2663, abs=1e-3)
    assert table["dla"].sum() == pytest.approx(table.attrs["logit_diff"], abs=1e-6)
    assert table.attrs["lens_top1"] == [0.0, 0.0, 1.0] and table.attrs["leads"] == "final_post"
    lines = attribution_lines(table, top=4)
    assert [line.split()[0] for line in lines[1:5]] == ["L1H3", "L1H1", "L1H0", "L1H2"]


def test_task_attribution_skips_pairs_without_a_difference(induction):
    from probe.circuits.attribution import task_attribution
    from probe.circuits.task import make_task

    same = make_task(None, [[2, 5, 6]], [[2, 7, 6]], [5], [5])
    with pytest.raises(ProbeError, match="no logit difference"):
        task_attribution(induction, same)
