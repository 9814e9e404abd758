"""``tl_score`` is TransformerLens' ``detect_head`` score: against a written-out copy of its rule
(transformer_lens/head_detector.py: ``get_previous_token_head_detection_pattern``,
``get_duplicate_token_head_detection_pattern``, ``get_induction_head_detection_pattern`` and the "mul"
branch of ``compute_head_attention_similarity_score``) on hand-built α, streamed and through ``label_model``
on an organism whose scored targets are restricted to the planted repeat (where TL's marking differs from
ours)."""

from __future__ import annotations

import pytest
import torch

from probe.engine import capture_attention
from probe.heads.label.scoring import tl_detection
from probe.heads.registry import REGISTRY, TargetContext
from probe.heads.scores import ScoreSink, tl_mul_score

# ---- TransformerLens' rule, written out (one sequence, plain loops) ----------------------------------------


def tl_rule_pattern(name: str, tokens: list[int]) -> torch.Tensor:
    """TL's detection pattern `[query key]` float for its three named heads, loop by loop:
    previous: a one below the diagonal; duplicate: the token-equality matrix with its diagonal cleared, lower
    triangle; induction: the duplicate matrix rolled one column to the right, column 0 replaced by zeros,
    lower triangle."""
    n = len(tokens)
    duplicate = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            if tokens[i] == tokens[j] and i != j:
                duplicate[i, j] = 1.0
    duplicate = duplicate.tril()
    if name == "duplicate_token":
        return duplicate
    if name == "previous_token":
        pattern = torch.zeros(n, n)
        for i in range(1, n):
            pattern[i, i - 1] = 1.0
        return pattern.tril()
    rolled = torch.zeros(n, n)
    for j in range(1, n):  # roll by one column; column 0 (which received the last column) is zeros
        rolled[:, j] = duplicate[:, j - 1]
    return rolled.tril()


def tl_rule_score(alpha: torch.Tensor, detection: torch.Tensor) -> float:
    """The "mul" measure: (α * D).sum() / α.sum(), no key excluded."""
    return float((alpha * detection).sum() / alpha.sum())


def random_causal_alpha(n: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, n, generator=generator) * 2
    logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)
    return logits.softmax(-1)  # [query key]


# a planted repeat (6 2 5 at 6 and 9) and coincidental copies outside it (3 at 2 and 5, 7 at 1 and 12): TL
# marks all of them, the restricted targets only the planted one
TOKENS = [4, 7, 3, 9, 8, 3, 6, 2, 5, 6, 2, 5, 7, 1]
REPEAT_START, REPEAT_LEN = 6, 3


@pytest.mark.parametrize("name", ["previous_token", "duplicate_token", "induction"])
def test_tl_detection_is_tl_rule_whatever_our_targets(name):
    ids = torch.tensor([TOKENS])
    for restrict in (False, True):  # our targets restricted to the planted repeat: TL's pattern is not
        ctx = TargetContext(ids, causal=True, repeat_start=torch.tensor([REPEAT_START]),
                            repeat_len=torch.tensor([REPEAT_LEN]), restrict_to_repeat=restrict)
        ours = REGISTRY[name].targets(ctx)[None]
        detection, defined = tl_detection(REGISTRY[name], ctx, ours)
        assert bool(defined.all())
        assert torch.equal(detection[0].float(), tl_rule_pattern(name, TOKENS))
    # bidirectional duplicate targets (j ≠ i) are not TL's: its pattern keeps j < i
    ctx = TargetContext(ids, causal=False)
    duplicate = REGISTRY["duplicate_token"]
    detection, _ = tl_detection(duplicate, ctx, duplicate.targets(ctx)[None])
    assert torch.equal(detection[0].float(), tl_rule_pattern("duplicate_token", TOKENS))


def test_tl_detection_reads_the_triangle_from_key_slots():
    """A custom detection pattern is defined where it is lower triangular; read from the pattern's key slots
    (the label run's way) the answer is the pattern's own, probe by probe."""
    from probe.heads.registry import target_slots

    ids = torch.tensor([TOKENS, TOKENS])
    ctx = TargetContext(ids, causal=False)
    spec = REGISTRY["self"]
    pattern = spec.targets(ctx)[None].clone()  # [batch query key] lower triangular (j = i)
    pattern[1, 2, 5] = True  # the second probe gets a key after its row: TL would refuse it
    _, dense = tl_detection(spec, ctx, pattern)
    _, sparse = tl_detection(spec, ctx, pattern, target_slots(pattern))
    assert dense.tolist() == sparse.tolist() == [True, False]


def test_restricted_targets_differ_from_tl_marking():
    """Negative control: the planted-repeat targets (what `score` uses on small vocabularies) are not TL's, so
    a test that compared them with TL's rule would fail."""
    ctx = TargetContext(torch.tensor([TOKENS]), causal=True, repeat_start=torch.tensor([REPEAT_START]),
                        repeat_len=torch.tensor([REPEAT_LEN]), restrict_to_repeat=True)
    ours = REGISTRY["induction"].targets(ctx)[None][0].float()
    assert not torch.equal(ours, tl_rule_pattern("induction", TOKENS))
    alpha = random_causal_alpha(len(TOKENS), 0)
    tl = tl_rule_score(alpha, tl_rule_pattern("induction", TOKENS))
    assert abs(float(tl_mul_score(alpha, ours.bool())) - tl) > 1e-3


@pytest.mark.parametrize("name", ["previous_token", "duplicate_token", "induction"])
def test_streamed_tl_score_equals_tl_rule_on_hand_built_alpha(name):
    n = len(TOKENS)
    ids = torch.tensor([TOKENS])
    ctx = TargetContext(ids, causal=True, repeat_start=torch.tensor([REPEAT_START]),
                        repeat_len=torch.tensor([REPEAT_LEN]), restrict_to_repeat=True)
    targets = REGISTRY[name].targets(ctx)[None]
    detection, _ = tl_detection(REGISTRY[name], ctx, targets)
    # [batch layer head query key]
    alpha = torch.stack([random_causal_alpha(n, seed) for seed in range(3)])[None, None]
    sink = ScoreSink({name: targets}, torch.tensor([n]), 1, 3,
                     tl_patterns={} if torch.equal(detection, targets) else {name: detection})
    for start in range(0, n, 4):  # blocks of query rows, as the engine hands them
        sink.update(_block(alpha[:, 0, :, start:start + 4], start, n))
    tl = sink.result()[name].tl_score[0, 0]  # [head]
    for head in range(3):
        expected = tl_rule_score(alpha[0, 0, head], tl_rule_pattern(name, TOKENS))
        assert float(tl[head]) == pytest.approx(expected, abs=1e-6)


def test_tl_score_is_nan_where_detect_head_refuses_the_pattern():
    """A custom detection pattern must be lower triangular in TL: next-token targets (j = i + 1) are not."""
    ids = torch.tensor([TOKENS])
    ctx = TargetContext(ids, causal=False)
    _, defined = tl_detection(REGISTRY["next_token"], ctx, REGISTRY["next_token"].targets(ctx)[None])
    assert not bool(defined.any())
    _, defined = tl_detection(REGISTRY["first_token"], ctx, REGISTRY["first_token"].targets(ctx)[None])
    assert bool(defined.all())


def _block(alpha: torch.Tensor, start: int, n: int):
    from probe.engine import AttentionBlock
    return AttentionBlock(step=0, layer=0, heads=tuple(range(alpha.shape[1])), query_start=start, n_query=n,
                          query_offset=0, alpha=alpha, n_key=n)


# ---- through label_model, on an organism with a small vocabulary -------------------------------------------


def test_label_tl_score_equals_tl_rule_on_eager_alpha_of_the_same_probes():
    """zoo:induction's vocabulary is small, so `score` counts the planted repeat only, while TL's detect_head
    marks every coincidental earlier copy: `tl_score` follows TL (mean over probes of TL's score of each
    probe, as detect_head averages a list of prompts), recomputed here from eager α of the very probes."""
    from probe import models
    from probe.heads.label import LabelConfig, label_model
    from probe.heads.label.probes import ProbeSource
    from probe.heads.stats import confirmation_split

    loaded = models.load("zoo:induction")
    config = LabelConfig(types=("previous_token", "duplicate_token", "induction"), examples=6, ablate="none",
                         output_share=False, n_bootstrap=50)
    table = label_model(loaded, config)
    seq_len = int(table["seq_len"].iloc[0])
    probes = ProbeSource(loaded, config).token_probes("repeated", seq_len)
    alpha = capture_attention(loaded.model, {"input_ids": probes.input_ids})  # [batch layer head query key]
    # every column but the confirm_* ones is the selection half's (docs/labels.md, held-out confirmation)
    selected = torch.nonzero(confirmation_split(probes.cluster, config.seed)[0]).flatten().tolist()
    for name in ("previous_token", "duplicate_token", "induction"):
        rows = table[table["head_type"] == name]
        for row in rows.itertuples():
            expected = sum(tl_rule_score(alpha[b, row.layer, row.head],
                                         tl_rule_pattern(name, probes.input_ids[b].tolist()))
                           for b in selected) / len(selected)
            assert row.tl_score == pytest.approx(expected, abs=1e-5), (name, row.head_name)
    # negative control: the old column (the mul measure on the planted-repeat targets) is another number
    ctx = TargetContext(probes.input_ids, causal=True, repeat_start=probes.repeat_start,
                        repeat_len=probes.repeat_len, restrict_to_repeat=True)
    planted = REGISTRY["induction"].targets(ctx)[None]  # [batch query key]
    induction = table[(table["head_type"] == "induction") & table["label"]]
    assert len(induction) >= 1
    for row in induction.itertuples():
        old = float(torch.stack([tl_mul_score(alpha[b, row.layer, row.head], planted[b])
                                 for b in selected]).mean())
        assert abs(row.tl_score - old) > 0.05, row.head_name
