"""Statistics per type for :func:`probe.heads.label.label_model` (step 3), pure: a :class:`Scored` in,
per-head summaries ``[layer head]`` out — the candidate choice, score and interval, chance, effect, the
one-sided test, output share and accuracy against the best baseline."""

from __future__ import annotations

from dataclasses import replace

import torch

from probe.heads import stats
from probe.heads.label.config import LabelConfig
from probe.heads.label.scoring import Scored
from probe.heads.scores import TypeScores


def summarise(scored: Scored, config: LabelConfig,
              choice: torch.Tensor | None = None) -> dict[str, torch.Tensor | float | str | list]:
    """Score, interval, chance, effect and p-value per head `[layer head]` for one type on one probe set.
    A type with candidates (fixed_offset) chooses each head's candidate on half of the examples and is
    tested on the other half; with `choice` (`[layer head]` candidate index, the ``"_choice"`` entry of an
    earlier summary: the confirmation half keeps the selection half's candidate) every example tests it."""
    n_examples = len(scored.cluster)
    select, test = (stats.selection_split(n_examples) if len(scored.candidates) > 1 and choice is None
                    else (torch.ones(n_examples, dtype=torch.bool),) * 2)
    # [candidate example layer head]
    score_all = torch.stack([scored.scores[c].score for c in scored.candidates])
    chance_all = torch.stack([scored.chance[c] for c in scored.candidates])  # [candidate example]
    effects = score_all - chance_all[:, :, None, None]  # [candidate example layer head]
    if choice is None:
        choice = stats.choose_candidate(effects[:, select])  # [layer head]
    pick = choice[None, None].expand(1, n_examples, *choice.shape)  # [1 example layer head]
    score = score_all.gather(0, pick)[0][test]  # [example layer head]
    # [example layer head]
    chance = chance_all[:, :, None, None].expand_as(score_all).gather(0, pick)[0][test]
    tl = torch.stack([scored.scores[c].tl_score for c in scored.candidates]).gather(0, pick)[0][test]
    cluster = scored.cluster[test]
    weights = stats.resample_weights(cluster, config.n_bootstrap, config.seed)  # [resample example]
    low, high = stats.percentile_interval(stats.bootstrap_means(score, weights), config.confidence)
    effect = score - chance  # [example layer head]
    effect_means = stats.bootstrap_means(effect, weights)  # [resample layer head]
    out = dict(score=torch.nanmean(score, 0), ci_low=low, ci_high=high, chance=torch.nanmean(chance, 0),
               effect=torch.nanmean(effect, 0), tl_score=torch.nanmean(tl, 0),
               n_examples=int((~torch.isnan(score[:, 0, 0])).sum()),
               n_clusters=int(len(torch.unique(cluster))), _choice=choice)
    out["p_value"] = stats.p_greater(out["effect"], _std(effect_means), config.min_effect)
    if scored.scores[scored.candidates[0]].output_share is not None:
        out.update(_share_summary(scored, pick, test, weights, config))
    if scored.spec.candidate is not None:
        candidates = torch.tensor(scored.candidates, dtype=torch.float64)
        out[scored.spec.candidate] = candidates[choice]
    correct = scored.scores[scored.candidates[0]].correct
    if scored.spec.statistic == "accuracy" and correct is not None:
        # the head must also attend to its targets above chance (H0: score − chance ≤ 0), and both tests must
        # reject: the intersection–union test's p is the larger of the two (Berger 1982)
        above = stats.p_greater(out["effect"], _std(effect_means), 0.0)
        out.update(_accuracy_summary(correct, scored, weights, config))
        out["p_above_chance"] = above
        out["p_value"] = torch.maximum(out["p_value"], above)  # NaN stays NaN
        clark = scored.scores[None].clark_correct
        if clark is not None:
            out["clark_accuracy"] = clark.mean(0)
    # Untestable where the examples with a value come from a single cluster: the bootstrap has no spread, and
    # p_greater would let the estimate decide alone (p = 0). NaN p -> NaN q -> no label.
    testable = stats.clusters_present(effect, cluster) >= stats.MIN_CLUSTERS  # [layer head]
    out["p_value"] = torch.where(testable, out["p_value"], torch.nan)
    return out


def _share_summary(scored: Scored, pick: torch.Tensor, test: torch.Tensor, weights: torch.Tensor,
                   config: LabelConfig) -> dict[str, torch.Tensor]:
    """output_share of the chosen candidate, averaged like the score (same test examples), with its clustered
    bootstrap interval (the same resamples)."""
    # [candidate example layer head]
    shares = torch.stack([scored.scores[c].output_share for c in scored.candidates])
    share = shares.gather(0, pick)[0][test]  # [example layer head]
    low, high = stats.percentile_interval(stats.bootstrap_means(share, weights), config.confidence)
    return dict(output_share=torch.nanmean(share, 0), output_share_low=low, output_share_high=high)


def _std(means: torch.Tensor) -> torch.Tensor:
    """Standard deviation over resamples (NaN resamples left out)."""
    centred = means - torch.nanmean(means, 0, keepdim=True)
    return torch.sqrt(torch.nanmean(centred**2, 0))


def _accuracy_summary(correct: torch.Tensor, scored: Scored, weights: torch.Tensor,
                      config: LabelConfig) -> dict:
    """Accuracy with its interval, the best baseline, the paired test of the gain over it, per-source
    accuracy."""
    low, high = stats.percentile_interval(stats.bootstrap_means(correct, weights), config.confidence)
    out = dict(accuracy=correct.mean(0), accuracy_ci_low=low, accuracy_ci_high=high)
    out["_groups"] = list(dict.fromkeys(scored.groups or []))
    complete = {name: values for name,
                values in (scored.baselines or {}).items() if not torch.isnan(values).any()}
    if complete:
        best = max(complete, key=lambda name: float(complete[name].mean()))
        baseline = complete[best]  # [example]
        gain = correct - baseline[:, None, None]  # [example layer head] paired on the same examples
        out.update(baseline=best, baseline_accuracy=float(baseline.mean()), effect=gain.mean(0))
        out["p_value"] = stats.p_greater(gain.mean(0), _std(stats.bootstrap_means(gain, weights)),
                                         config.min_accuracy_gain)
    return out


def per_group(correct: torch.Tensor, groups: list[str], order: list[str]) -> list[str]:
    """Per head, "group: accuracy; …" over the example groups in `order` (correct [example layer head]): one
    string per (layer, head), row-major."""
    labels = torch.tensor([order.index(group) for group in groups])  # [example]
    # [group][row]
    means = [correct[labels == index].mean(0).reshape(-1).tolist() for index in range(len(order))]
    return ["; ".join(f"{group}: {float(values[row]):.2f}" for group,
                      values in zip(order, means, strict=True))
            for row in range(correct[0].numel())]



def subset(scored: Scored, rows: torch.Tensor) -> Scored:
    """`scored` restricted to the examples `rows` (`[example]` bool): one half of
    :func:`probe.heads.stats.confirmation_split`."""
    index = torch.nonzero(rows).flatten()  # [kept]

    def pick(scores: TypeScores) -> TypeScores:
        return TypeScores(scores.head_type, *(None if getattr(scores, name) is None
                                              else getattr(scores, name)[index] for name in _SCORE_FIELDS))

    return replace(scored, scores={key: pick(value) for key, value in scored.scores.items()},
                   chance={key: value[index] for key, value in scored.chance.items()},
                   cluster=scored.cluster[index],
                   baselines=None if scored.baselines is None else {
                       name: values[index] for name, values in scored.baselines.items()},
                   groups=None if scored.groups is None else [scored.groups[i] for i in index.tolist()])


_SCORE_FIELDS = ("score", "tl_score", "correct", "output_share", "clark_correct")  # TypeScores' tensors
